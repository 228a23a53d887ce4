"""Stage 2, features: embed every rollout frame or clip, through the content-addressed cache.

- :mod:`.embed`: :func:`embed_file`, one rollout table to one feature table;
- :mod:`.cache`: the on-disk cache keyed by encoder identity and row content.
"""

from wmeval.features.embed import Caches, embed_file

__all__ = ["Caches", "embed_file"]
