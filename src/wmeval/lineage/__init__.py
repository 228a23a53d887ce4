"""Lineage: where a number came from.

- :mod:`.provenance`: the run record (git, ``dvc.lock`` md5s, params, packages, weights, seeds,
  hardware, determinism) in the report's appendix;
- :mod:`.audit`: ``wmeval audit``, a metric traced to the bytes in ``dvc.lock``.
"""
