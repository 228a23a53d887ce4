"""The long statistics schema shared by the statistics and bootstrap stages.

Every per-episode contribution is one row of :data:`LONG_COLUMNS`
(``world, source, metric, regime, condition, unit, episode, t, value, denominator``): the
bootstrap recombines ``sum(value) / sum(denominator)`` over resampled episodes of one ``unit``
(``observation``, ``dynamics`` or ``control`` episodes), then applies the metric's aggregate.
``t`` is the horizon step for curves and ``0`` for per-episode summaries.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

LONG_COLUMNS = ["world", "source", "metric", "regime", "condition", "unit", "episode", "t", "value", "denominator"]


def long_rows(world: str, source: str, metric: str, regime: str, condition: str, unit: str,
              values: np.ndarray, denominator: np.ndarray | None = None, t: np.ndarray | None = None) -> pd.DataFrame:
    """Rows from per-episode ``values`` ``(N,)`` or per-(episode, t) ``values`` ``(N, T)`` with ``t`` ``(T,)``."""
    values = np.asarray(values, dtype=np.float64)
    den = np.ones_like(values) if denominator is None else np.asarray(denominator, dtype=np.float64)
    n = values.shape[0]
    if values.ndim == 1:
        ep, tt = np.arange(n), np.zeros(n, dtype=np.int64)
    else:
        ep = np.repeat(np.arange(n), values.shape[1])
        tt = np.tile(np.asarray(t), n)
    return pd.DataFrame({"world": world, "source": source, "metric": metric, "regime": regime,
                         "condition": condition, "unit": unit, "episode": ep.astype(np.int64),
                         "t": tt.astype(np.int64), "value": values.ravel(), "denominator": den.ravel()})
