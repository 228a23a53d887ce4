"""The bootstrap stage: paired, episode-clustered intervals for every metric and horizon step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from .config import Params
from .errors import WmevalError
from .rng import make_rng
from .stats import paired_mean_replicates, percentile_interval, resample_counts
from .tables import atomic_dir, atomic_write_text, write_table

GROUP = ["world", "metric", "regime"]


def _intervals(df: pd.DataFrame, by: list[str], counts_for, boot) -> pd.DataFrame:
    """Interval rows for every group in ``by``, one series per source, paired over episodes."""
    rows = []
    for key, g in df.groupby(by, observed=True, sort=True):
        key = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        wide = g.pivot(index="source", columns="episode", values="value")
        counts = counts_for(key["world"])                      # (B, N_world)
        cols = wide.columns.to_numpy()
        values = wide.to_numpy()                               # (S, n) NaN where an episode has no value
        present = ~np.isnan(values)
        c = counts[:, cols]
        # Episodes without a value (all steps invalid) get weight 0; counted in n_clusters.
        reps = (c @ np.where(present, values, 0.0).T) / (c @ present.T.astype(float))
        lo, hi = percentile_interval(reps, boot.confidence_level)
        point = np.nanmean(values, axis=1)
        for i, src in enumerate(wide.index):
            rows.append({**key, "source": src, "point": point[i], "low": lo[i], "high": hi[i],
                         "n_clusters": int(present[i].sum()), "n_resamples": boot.n_resamples,
                         "confidence_level": boot.confidence_level, "method": boot.method,
                         "resampling_unit": "episode"})
    return pd.DataFrame(rows)


def bootstrap_stage(params: Params, stats: Path, out: Path, metrics_file: Path) -> None:
    boot = params.bootstrap
    episodes = pd.read_parquet(stats / "episodes.parquet")
    curves = pd.read_parquet(stats / "curves.parquet")
    if episodes.empty:
        raise WmevalError(f"{stats / 'episodes.parquet'}: no rows")
    cache: dict[str, np.ndarray] = {}

    def counts_for(world: str) -> np.ndarray:
        # One resampling of the world's episodes, shared by every model and metric (paired).
        if world not in cache:
            cache[world] = resample_counts(params.protocol.n_episodes, boot.n_resamples,
                                           make_rng(boot.seed, "bootstrap", world))
        return cache[world]

    iv = _intervals(episodes, [*GROUP, "condition"], counts_for, boot)
    cv = _intervals(curves, [*GROUP, "t"], counts_for, boot)
    metrics: dict = {}
    for r in iv[iv.condition == "all"].itertuples():
        d = metrics.setdefault(r.world, {}).setdefault(r.source, {}).setdefault(r.regime, {})
        d[r.metric] = {"point": float(r.point), "low": float(r.low), "high": float(r.high)}
    protocol = json.loads((stats / "protocol.json").read_text())
    protocol["bootstrap"] = {"n_resamples": boot.n_resamples, "confidence_level": boot.confidence_level,
                             "method": boot.method, "seed": boot.seed, "resampling_unit": "episode",
                             "paired": True}
    with atomic_dir(out) as tmp:
        write_table(pa.Table.from_pandas(iv, preserve_index=False), tmp / "intervals.parquet")
        write_table(pa.Table.from_pandas(cv, preserve_index=False), tmp / "curves.parquet")
        (tmp / "protocol.json").write_text(json.dumps(protocol, indent=2, sort_keys=True))
    atomic_write_text(metrics_file, json.dumps(metrics, indent=2, sort_keys=True) + "\n")
