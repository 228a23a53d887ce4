"""Metric math: pure functions over arrays, one module per family, and the registry.

- :mod:`.paired`: a prediction against its realized future (``expected_pairwise_mse``, ``mse``,
  ``psnr``, ``ssim``, ``lpips_distance``);
- :mod:`.frechet`: the Frechet distance (``gaussian_stats``, ``frechet_distance``,
  ``FrechetReference``, the factored and row-Gram forms for replicates) and ``fd_infinity``;
- :mod:`.kernel`: ``mmd2_unbiased`` and ``kid``;
- :mod:`.prdc`: precision, recall, density and coverage (``prdc``, ``prdc_rows``);
- :mod:`.best_of_k`: the oracle best-of-K curve;
- :mod:`.registry`: :data:`REGISTRY`, every metric's direction, unit, layer, definition,
  aggregate and protocol-card fields; the report reads it.

This layer imports nothing from wmeval: no IO, no config, no device default.
"""

from .best_of_k import best_of_k
from .frechet import (
                      SAMPLE_SPACE_MAX,
                      CovarianceFactor,
                      FrechetReference,
                      GaussianStats,
                      RowGrams,
                      fd_infinity,
                      frechet_distance,
                      frechet_distance_factored,
                      gaussian_stats,
)
from .kernel import kid, mmd2_unbiased
from .paired import (
                      PSNR_CAP_DB,
                      SSIM_K1,
                      SSIM_K2,
                      SSIM_SIGMA,
                      SSIM_WINDOW,
                      expected_pairwise_mse,
                      lpips_distance,
                      mse,
                      psnr,
                      psnr_from_mse,
                      ssim,
)
from .prdc import prdc, prdc_rows, real_radii
from .registry import REGISTRY, MetricInfo, Shown

__all__ = ["REGISTRY", "MetricInfo", "Shown", "expected_pairwise_mse", "mse", "psnr", "psnr_from_mse", "PSNR_CAP_DB",
           "ssim",
           "SSIM_WINDOW", "SSIM_SIGMA", "SSIM_K1", "SSIM_K2", "lpips_distance", "GaussianStats", "gaussian_stats",
           "FrechetReference", "CovarianceFactor", "RowGrams", "SAMPLE_SPACE_MAX", "frechet_distance",
           "frechet_distance_factored", "fd_infinity", "mmd2_unbiased", "kid", "prdc", "prdc_rows", "real_radii", "best_of_k"]
