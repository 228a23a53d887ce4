"""Best-of-K: the oracle minimum error over a model's first K samples (nested pools)."""

from __future__ import annotations

import numpy as np


def best_of_k(errors: np.ndarray, k: int | None = None) -> np.ndarray:
    """Oracle best-of-K error: the minimum over the first K samples of a nested pool.

    Args:
        errors: ``(..., K_max)`` error of each sample against the realized future (the same
            future for every sample).
        k: pool size; ``None`` returns the whole curve ``(..., K_max)`` for K = 1..K_max.

    A nested pool's minimum cannot increase with K. It is a diagnostic that uses the realized
    future to select, which no deployment can: report it beside single-sample and
    mean-over-samples error, with K fixed across compared models.

    >>> best_of_k(np.array([3.0, 1.0, 2.0])).tolist()
    [3.0, 1.0, 1.0]
    """
    e = np.asarray(errors, dtype=np.float64)
    curve = np.minimum.accumulate(e, axis=-1)
    if k is None:
        return curve
    if not 1 <= k <= e.shape[-1]:
        raise ValueError(f"best_of_k: k = {k} outside 1..{e.shape[-1]}")
    return curve[..., k - 1]
