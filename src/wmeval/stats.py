"""Trajectory-clustered bootstrap.

Frames within an episode are correlated, so the resampling unit is the episode
(cluster). :func:`cluster_bootstrap` resamples clusters with replacement and
recomputes a unit-weighted mean from per-cluster sums and counts (no copies of
rows); :func:`resample_counts` gives the multiplicity matrix that makes a paired
bootstrap: the same resampled episodes for every model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from .rng import make_rng


@dataclass(frozen=True)
class BootstrapResult:
    """A point estimate with its bootstrap interval."""

    point: float
    low: float
    high: float
    method: str
    n_resamples: int
    n_clusters: int
    confidence_level: float


def resample_counts(n_clusters: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_resamples, n_clusters)`` multiplicities: each row resamples n clusters with replacement."""
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_resamples)


def percentile_interval(replicates: np.ndarray, confidence_level: float, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    alpha = (1.0 - confidence_level) / 2.0
    lo, hi = np.quantile(replicates, [alpha, 1.0 - alpha], axis=axis)
    return lo, hi


def _check_inputs(values: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(values, dtype=np.float64)
    clusters = np.asarray(clusters)
    if values.ndim != 1:
        raise ValueError(f"values must be 1-D (one value per unit), got shape {values.shape}")
    if clusters.shape != values.shape:
        raise ValueError(f"clusters shape {clusters.shape} must equal values shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"values contain non-finite entries at {np.flatnonzero(~np.isfinite(values))[:5].tolist()}")
    if values.size == 0:
        raise ValueError("values is empty")
    return values, clusters


def cluster_bootstrap(values: np.ndarray, clusters: np.ndarray, *, n_resamples: int = 2000,
                      confidence_level: float = 0.95, method: Literal["percentile"] = "percentile",
                      seed: int = 0) -> BootstrapResult:
    """Cluster bootstrap interval for the unit-weighted mean of ``values``.

    Args:
        values: ``(n_units,)`` one value per unit (e.g. per frame).
        clusters: ``(n_units,)`` cluster id of each unit (e.g. episode).
        n_resamples: bootstrap replicates B.
        confidence_level: e.g. 0.95.
        method: ``percentile``.
        seed: seed of the resampling.

    Returns:
        :class:`BootstrapResult` with the plain mean as ``point``.

    >>> r = cluster_bootstrap(np.array([1.0, 1.0, 3.0, 3.0]), np.array([0, 0, 1, 1]), n_resamples=200)
    >>> r.low <= r.point <= r.high, r.n_clusters
    (True, 2)
    """
    if method != "percentile":
        raise ValueError(f"method must be 'percentile', got {method!r}")
    values, clusters = _check_inputs(values, clusters)
    _, inverse = np.unique(clusters, return_inverse=True)
    sums = np.bincount(inverse, weights=values)
    counts = np.bincount(inverse).astype(np.float64)
    w = resample_counts(len(sums), n_resamples, make_rng(seed, "cluster_bootstrap"))
    reps = ratio_replicates(sums[None], counts[None], w)[:, 0]
    lo, hi = percentile_interval(reps, confidence_level)
    return BootstrapResult(float(values.mean()), float(lo), float(hi), method, n_resamples, len(sums),
                           confidence_level)


def ratio_replicates(values: np.ndarray, denominators: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Paired replicates of ``sum(value) / sum(denominator)`` over resampled clusters, for many series.

    Args:
        values, denominators: ``(n_series, n_clusters)`` per-cluster sums; a cluster a series
            has no value for has 0 in both (weight 0). Denominator 1 everywhere gives the mean.
        counts: ``(n_resamples, n_clusters)`` from :func:`resample_counts`, shared by every series.

    Returns:
        ``(n_resamples, n_series)``; NaN where a replicate's denominator is 0.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        return (counts @ values.T) / (counts @ denominators.T)
