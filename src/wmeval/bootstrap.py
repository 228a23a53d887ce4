"""The bootstrap stage: paired, episode-clustered intervals for every metric and horizon step.

Each world has one resampling of each unit's episodes (observation, dynamics and
control episodes), shared by every model and metric of that unit: the intervals
are paired. A replicate of a metric is ``sum(c * value) / sum(c * denominator)``
over episodes with multiplicities ``c``, then the metric's aggregate (identity, or
the square root for RMSE). Episodes without a value get weight 0 and are counted
out in ``n_clusters``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from .config import Params
from .errors import WmevalError
from .metrics import REGISTRY
from .rng import make_rng
from .stats import percentile_interval, ratio_replicates, resample_counts
from .tables import atomic_dir, atomic_write_text, write_table


def _finish(x: np.ndarray, aggregate: str) -> np.ndarray:
    if aggregate == "sqrt_mean":
        return np.sqrt(np.maximum(x, 0.0))
    return x


def intervals(df: pd.DataFrame, by: list[str], counts_for, boot, baselines: dict[str, str | None] | None = None
              ) -> pd.DataFrame:
    """Interval rows for every group in ``by`` (which must include world, metric, unit), one per source.

    With a baseline model for the world, each row also carries the paired difference to it
    (``diff_*``: same resampled episodes for both) and ``p_better``, the share of replicates in
    which the model is better than the baseline (by the metric's direction).
    """
    rows = []
    for key, g in df.groupby(by, observed=True, sort=True):
        key = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        info = REGISTRY[key["metric"]]
        num = g.pivot(index="source", columns="episode", values="value")
        den = g.pivot(index="source", columns="episode", values="denominator").reindex_like(num)
        present = ~np.isnan(num.to_numpy())
        v = np.where(present, num.to_numpy(), 0.0)
        d = np.where(present, den.to_numpy(), 0.0)
        c = counts_for(key["world"], key["unit"])[:, num.columns.to_numpy()]   # (B, n)
        reps = _finish(ratio_replicates(v, d, c), info.aggregate)             # (B, S)
        with np.errstate(invalid="ignore", divide="ignore"):
            point = _finish(v.sum(axis=1) / d.sum(axis=1), info.aggregate)
        # A replicate can be undefined (a ratio over resampled episodes with zero denominator,
        # e.g. precision when no event is predicted): the interval uses the defined replicates
        # and the share of undefined ones is reported beside it.
        undefined = (~np.isfinite(reps)).mean(axis=0)
        lo, hi = np.full(len(num), np.nan), np.full(len(num), np.nan)
        for j in np.flatnonzero((undefined < 1.0) & np.isfinite(point)):
            lo[j], hi[j] = percentile_interval(reps[np.isfinite(reps[:, j]), j], boot.confidence_level)
        sources = list(num.index)
        base = (baselines or {}).get(key["world"])
        diff = np.full((3, len(sources)), np.nan)
        p_better = np.full(len(sources), np.nan)
        if base in sources:
            b = sources.index(base)
            d_reps = reps - reps[:, [b]]
            with np.errstate(invalid="ignore"):
                better = info.badness(reps) < info.badness(reps[:, [b]])
            for j in range(len(sources)):
                ok = np.isfinite(d_reps[:, j])
                if ok.any() and np.isfinite(point[j]) and np.isfinite(point[b]):
                    diff[0, j] = point[j] - point[b]
                    diff[1, j], diff[2, j] = percentile_interval(d_reps[ok, j], boot.confidence_level)
                    p_better[j] = float(better[ok, j].mean())
        for i, src in enumerate(sources):
            rows.append({**key, "source": src, "point": float(point[i]), "low": float(lo[i]),
                         "high": float(hi[i]), "baseline": base, "diff_point": float(diff[0, i]),
                         "diff_low": float(diff[1, i]), "diff_high": float(diff[2, i]),
                         "p_better": float(p_better[i]), "n_clusters": int(present[i].sum()),
                         "n_resamples": boot.n_resamples, "confidence_level": boot.confidence_level,
                         "method": boot.method, "resampling_unit": f"{key['unit']} episode",
                         "undefined_replicates": float(undefined[i]),
                         "aggregate": info.aggregate})
    return pd.DataFrame(rows)


def bootstrap_stage(params: Params, stats: Path, out: Path, metrics_file: Path) -> None:
    boot = params.bootstrap
    episodes = pd.read_parquet(stats / "episodes.parquet")
    curves = pd.read_parquet(stats / "curves.parquet")
    if episodes.empty:
        raise WmevalError(f"{stats / 'episodes.parquet'}: no rows")
    protocol = json.loads((stats / "protocol.json").read_text())
    cache: dict[tuple[str, str], np.ndarray] = {}

    def counts_for(world: str, unit: str) -> np.ndarray:
        # One resampling per (world, unit), shared by every model and metric: paired intervals.
        if (world, unit) not in cache:
            n = protocol["worlds"][world]["units"][unit]
            cache[world, unit] = resample_counts(n, boot.n_resamples, make_rng(boot.seed, "bootstrap", world, unit))
        return cache[world, unit]

    group = ["world", "metric", "regime", "condition", "unit"]
    baselines = {w: wp.get("baseline") for w, wp in protocol["worlds"].items()}
    iv = intervals(episodes, group, counts_for, boot, baselines)
    cv = intervals(curves, [*group, "t"], counts_for, boot)
    metrics: dict = {}
    for r in iv.itertuples():
        d = metrics.setdefault(r.world, {}).setdefault(r.source, {}).setdefault(r.metric, {})
        d[f"{r.regime}/{r.condition}"] = {"point": r.point, "low": r.low, "high": r.high}
        if r.baseline is not None and r.source != r.baseline and np.isfinite(r.diff_point):
            d[f"{r.regime}/{r.condition}"].update(diff_to_baseline=r.diff_point, diff_low=r.diff_low,
                                                  diff_high=r.diff_high, p_better=r.p_better)
    protocol["bootstrap"] = {"n_resamples": boot.n_resamples, "confidence_level": boot.confidence_level,
                             "method": boot.method, "seed": boot.seed, "resampling_unit": "episode",
                             "paired": True}
    with atomic_dir(out) as tmp:
        write_table(pa.Table.from_pandas(iv, preserve_index=False), tmp / "intervals.parquet")
        write_table(pa.Table.from_pandas(cv, preserve_index=False), tmp / "curves.parquet")
        (tmp / "protocol.json").write_text(json.dumps(protocol, indent=2, sort_keys=True))
    # NaN (an undefined ratio, e.g. precision without predicted events) is written as null.
    text = json.dumps(_nan_to_none(metrics), indent=2, sort_keys=True)
    atomic_write_text(metrics_file, text + "\n")


def _nan_to_none(x):
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x
