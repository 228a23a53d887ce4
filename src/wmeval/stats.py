"""The public statistics API: episode-clustered bootstrap intervals (the code the pipeline's stages run).

- :func:`cluster_bootstrap`: interval of a statistic of per-unit values (a plain statistic such as
  ``np.mean``, or a weighted one ``statistic(values, weights)``), resampling whole clusters
  (trajectories);
- :func:`distribution_bootstrap`: interval of a set-level distance between real and generated
  embeddings (``fd``, ``fd_bias_corrected``, ``kid``), paired where the sides share cluster ids;
- :class:`BootstrapResult`: ``point``, ``low``, ``high``, ``method``, ``n_resamples``, ``n_clusters``,
  ``confidence_level`` and ``p_value`` (the bias-corrected FD's permutation test of 0, which decides whether
  its interval holds 0; NaN elsewhere).

>>> import numpy as np
>>> r = cluster_bootstrap(np.arange(8.0), np.repeat(np.arange(4), 2), np.mean, n_resamples=200)
>>> r.point, r.n_clusters
(3.5, 4)
"""

from wmeval.estimators.distributional import distribution_bootstrap
from wmeval.estimators.resample import BootstrapResult, cluster_bootstrap

__all__ = ["BootstrapResult", "cluster_bootstrap", "distribution_bootstrap"]
