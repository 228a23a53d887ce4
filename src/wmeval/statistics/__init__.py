"""Stage 3, statistics: per-episode contributions of every metric, pooled and per stratum.

- :mod:`.compute`: :func:`compute_statistics`, the stage (reads rollouts and features, writes
  ``data/stats``);
- :mod:`.paired`: MSE contributions of predictions against realized futures;
- :mod:`.observation`: PSNR, SSIM, LPIPS, best-of-K, diversity, NLL and event rows;
- :mod:`.dynamics_layers`: seed 002's dynamics layers and seed 003's task signals.
"""

from wmeval.statistics.compute import compute_statistics

__all__ = ["compute_statistics"]
