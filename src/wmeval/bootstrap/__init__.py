"""Stage 4, bootstrap: episode-clustered, paired intervals for every metric, differences and ranks.

- :mod:`.intervals`: :func:`bootstrap_stage` (reads ``data/stats``, the rollouts and features for
  the distributional replicates; writes ``data/bootstrap`` and ``reports/metrics.json``).
"""

from wmeval.bootstrap.intervals import bootstrap_stage

__all__ = ["bootstrap_stage"]
