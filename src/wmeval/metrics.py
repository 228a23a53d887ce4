"""Metric functions (pure, over arrays) and the metric registry.

Every metric has an entry in :data:`REGISTRY` with its direction
(``higher_is_better``), unit, layer and a one-line definition; the report reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MetricInfo:
    name: str
    higher_is_better: bool
    unit: str
    layer: str
    definition: str


REGISTRY: dict[str, MetricInfo] = {
    m.name: m for m in (
        MetricInfo("state_mse", False, "state units^2", "paired",
                   "mean over state dimensions of the squared error of the predicted state"),
        MetricInfo("pixel_mse", False, "(intensity in [0, 1])^2", "paired",
                   "mean over pixels and channels of the squared frame error, frames in [0, 1] (L = 1)"),
        MetricInfo("feature_mse", False, "encoder units^2", "paired",
                   "mean over embedding dimensions of the squared error of the frame embedding"),
    )
}


def expected_pairwise_mse(pred: np.ndarray, target: np.ndarray, event_ndim: int) -> np.ndarray:
    """Mean squared error averaged over every (prediction sample, realized future) pair.

    Args:
        pred: ``(..., K, *event)``: K predicted samples.
        target: ``(..., M, *event)``: M realized futures (M = 1 for a single reference).
        event_ndim: number of trailing event axes averaged over (3 for frames
            ``(H_img, W, C)``, 1 for states ``(D,)``).

    Returns:
        ``(...)`` float64, ``mean_{k, m} mean_event (pred_k - target_m)^2``, computed as
        ``E|p|^2 + E|g|^2 - 2 <E p, E g>`` per element without forming the K x M pairs.
        For K = M = 1 it is the plain MSE.

    >>> float(expected_pairwise_mse(np.array([[0.0], [1.0]]), np.array([[0.0]]), 1))
    0.5
    """
    p = np.asarray(pred, dtype=np.float64)
    g = np.asarray(target, dtype=np.float64)
    if p.ndim != g.ndim or p.shape[: -event_ndim - 1] != g.shape[: -event_ndim - 1] \
            or p.shape[p.ndim - event_ndim:] != g.shape[g.ndim - event_ndim:]:
        raise ValueError(f"pred {p.shape} and target {g.shape} may differ only in the sample axis "
                         f"(axis {-event_ndim - 1})")
    k = p.ndim - event_ndim - 1
    ev = tuple(range(k, p.ndim))
    pp = np.mean(p**2, axis=ev)
    gg = np.mean(g**2, axis=ev)
    cross = np.mean(p.mean(axis=k) * g.mean(axis=k), axis=tuple(range(k, p.ndim - 1)))
    return np.maximum(pp + gg - 2.0 * cross, 0.0)
