"""Per-episode metric contributions from rollout (and feature) tables.

For each world, model, metric and regime, the contribution of one episode at one
step ``t`` under one plan is the expected pairwise MSE between the model's K
samples and the reference: the M realized futures of that plan (open loop), or
realization 0 of the teacher-forced plan (teacher forced). Episodes are the
independent unit; the bootstrap resamples them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from wmeval.core.errors import WmevalError
from wmeval.metrics import expected_pairwise_mse
from wmeval.tables import blocks, decode_frames, dense, select

#: The most bytes of float64 frame data the statistics stage decodes at once: per-episode scores are computed
#: over chunks of episodes, so that the working set does not grow with the number of episodes (Pong's
#: 210 x 160 x 3 frames: 8 episodes of 10 steps per chunk). Every score is per episode, so the
#: chunking changes no value.
CHUNK_BYTES = 2**27


def episode_chunks(n_episodes: int, *arrays: np.ndarray) -> list[slice]:
    """Slices of episodes whose float64 copies of ``arrays`` (episode axis first) fit :data:`CHUNK_BYTES`."""
    per_episode = sum(8 * int(np.prod(a.shape[1:])) for a in arrays)
    rows = max(1, CHUNK_BYTES // max(1, per_episode))
    return [slice(lo, min(n_episodes, lo + rows)) for lo in range(0, n_episodes, rows)]


def contributions(world: str, source: str, model: pa.Table, truth: pa.Table, n_episodes: int,
                  horizon: int, columns: dict[str, tuple[str, int]], where: str,
                  model_emb: pa.Table | None = None, truth_emb: pa.Table | None = None,
                  state_delta=None) -> pa.Table:
    """Long table of per-(episode, plan, t) values for one model.

    Args:
        columns: metric name -> (tensor column, event_ndim), e.g. ``{"pixel_mse": ("frame", 3)}``;
            ``feature_mse`` reads ``embedding`` from the ``*_emb`` tables.
    """
    t_model = np.arange(1, horizon + 1)
    t_truth = np.arange(0, horizon + 1)
    rows: dict[str, list] = {k: [] for k in ("metric", "regime", "plan", "condition", "episode", "t", "value")}
    for b in blocks(model):
        m_block = select(model, b.regime, b.plan)
        g_block = select(truth, "realized", b.plan)
        if g_block.num_rows == 0:
            raise WmevalError(f"{where}: plan {b.plan!r} has no ground-truth rows")
        valid = dense(m_block, "valid", n_episodes, t_model, where)[:, 0]  # (N, T)
        for metric, (column, ev) in columns.items():
            if column == "embedding":
                if model_emb is None:
                    continue
                mb, gb = select(model_emb, b.regime, b.plan), select(truth_emb, "realized", b.plan)
            else:
                if column not in model.column_names or column not in truth.column_names:
                    continue
                mb, gb = m_block, g_block
            pred_all = dense(mb, column, n_episodes, t_model, where)
            targ_all = dense(gb, column, n_episodes, t_truth, where)[:, :, 1:]
            if b.regime == "teacher_forced":
                targ_all = targ_all[:, :1]  # the teacher-forced trajectory is realization 0
            parts = []
            for c in episode_chunks(n_episodes, pred_all, targ_all):
                pred, targ = pred_all[c], targ_all[c]
                if column == "frame":
                    pred, targ = decode_frames(pred), decode_frames(targ)
                if column == "state" and state_delta is not None:
                    # All (sample, future) pairs explicitly: states are small, and the world's
                    # geometry (a torus) is not an inner-product space.
                    d = state_delta(np.moveaxis(pred, 1, 2)[:, :, :, None], np.moveaxis(targ, 1, 2)[:, :, None])
                    parts.append(np.mean(d**2, axis=(2, 3, 4)))
                else:
                    # (N, S, T, *ev) -> (N, T, S, *ev): the sample axis sits before the event axes.
                    parts.append(expected_pairwise_mse(np.moveaxis(pred, 1, 2), np.moveaxis(targ, 1, 2), ev))
            val = np.concatenate(parts)                                                       # (N, T)
            e_idx, t_idx = np.nonzero(valid)
            rows["metric"] += [metric] * len(e_idx)
            rows["regime"] += [b.regime] * len(e_idx)
            rows["plan"] += [b.plan] * len(e_idx)
            rows["condition"] += [b.condition] * len(e_idx)
            rows["episode"].append(e_idx.astype(np.int32))
            rows["t"].append(t_model[t_idx].astype(np.int32))
            rows["value"].append(val[e_idx, t_idx])
    n = len(rows["metric"])
    return pa.table({
        "world": pa.array([world] * n), "source": pa.array([source] * n),
        "metric": rows["metric"], "regime": rows["regime"], "plan": rows["plan"], "condition": rows["condition"],
        "episode": np.concatenate(rows["episode"]) if n else np.empty(0, np.int32),
        "t": np.concatenate(rows["t"]) if n else np.empty(0, np.int32),
        "value": np.concatenate(rows["value"]) if n else np.empty(0),
    })


def episode_values(contrib: pd.DataFrame) -> pd.DataFrame:
    """Per-episode values from :func:`contributions` rows.

    Within a plan, an episode's value is the mean over its valid steps; plans are
    then weighted equally, per condition and pooled over all conditions
    (``condition = "all"``). An episode with no valid step has no value and is
    counted out by the caller (``n_clusters``), never imputed.
    """
    keys = ["world", "source", "metric", "regime"]
    per_plan = contrib.groupby([*keys, "condition", "plan", "episode"], observed=True, sort=True)["value"].mean()
    per_cond = per_plan.groupby(level=[*keys, "condition", "episode"], observed=True).mean().reset_index()
    pooled = per_plan.groupby(level=[*keys, "episode"], observed=True).mean().reset_index()
    pooled["condition"] = "all"
    return pd.concat([pooled, per_cond], ignore_index=True)[[*keys, "condition", "episode", "value"]]


def curve_values(contrib: pd.DataFrame) -> pd.DataFrame:
    """Per-(episode, t) values for horizon curves, plans weighted equally (pooled conditions)."""
    keys = ["world", "source", "metric", "regime", "t", "episode"]
    return contrib.groupby(keys, observed=True, sort=True)["value"].mean().reset_index()
