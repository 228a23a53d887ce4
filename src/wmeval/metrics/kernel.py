"""Kernel metrics: the unbiased MMD^2 with the cubic polynomial kernel, and KID."""

from __future__ import annotations

import numpy as np


def _polynomial_kernel_sum(a: np.ndarray, b: np.ndarray, d: int, chunk: int = 4096) -> tuple[float, float]:
    """``(sum_ij k(a_i, b_j), sum_i k(a_i, b_i))`` for ``k(x, y) = (x.y / d + 1)^3``, chunked."""
    total = 0.0
    for i in range(0, len(a), chunk):
        total += float(np.sum((a[i:i + chunk] @ b.T / d + 1.0) ** 3))
    diag = float(np.sum((np.einsum("ij,ij->i", a, b) / d + 1.0) ** 3)) if a.shape == b.shape else float("nan")
    return total, diag


def mmd2_unbiased(x: np.ndarray, y: np.ndarray) -> float:
    """Unbiased MMD^2 with the polynomial kernel ``(x.y / d + 1)^3`` (KID's kernel) on all rows."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    m, n, d = len(x), len(y), x.shape[1]
    sxx, dxx = _polynomial_kernel_sum(x, x, d)
    syy, dyy = _polynomial_kernel_sum(y, y, d)
    sxy, _ = _polynomial_kernel_sum(x, y, d)
    return (sxx - dxx) / (m * (m - 1)) + (syy - dyy) / (n * (n - 1)) - 2.0 * sxy / (m * n)


def kid(real_features: np.ndarray, fake_features: np.ndarray, *, num_subsets: int = 100, subset_size: int = 1000,
        seed: int = 0) -> tuple[float, float]:
    """Kernel Inception Distance (Binkowski et al. 2018): mean and std of unbiased MMD^2 over subsets.

    Polynomial kernel of degree 3, gamma = 1/d, coef 1. Each of ``num_subsets`` draws picks
    ``min(subset_size, n_real, n_fake)`` rows of each side without replacement (seeded); lower is
    better and the estimate can be slightly negative. The torch-fidelity convention.

    Returns:
        ``(mean, std)`` over subsets (std with ``ddof = 0``, as torch-fidelity).
    """
    x, y = np.asarray(real_features, dtype=np.float64), np.asarray(fake_features, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or min(len(x), len(y)) < 2:
        raise ValueError(f"kid: features must be (n >= 2, d) with equal d, got {x.shape} and {y.shape}")
    m = min(subset_size, len(x), len(y))
    rng = np.random.default_rng(seed)
    vals = [mmd2_unbiased(x[rng.choice(len(x), m, replace=False)], y[rng.choice(len(y), m, replace=False)])
            for _ in range(num_subsets)]
    return float(np.mean(vals)), float(np.std(vals))
