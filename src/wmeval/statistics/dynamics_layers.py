"""Per-episode contributions for seed 002's dynamics layers and seed 003's task signals.

Every function returns a long DataFrame with columns
``world, source, metric, regime, condition, unit, episode, t, value, denominator``:
the bootstrap recombines ``sum(value) / sum(denominator)`` over resampled episodes
of one ``unit`` (``observation``, ``dynamics`` or ``control`` episodes), then
applies the metric's aggregate (see :data:`wmeval.metrics.REGISTRY`). ``t`` is the
horizon step for curves and ``0`` for per-episode summaries.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from wmeval.core.errors import WmevalError
from wmeval.metrics import expected_pairwise_mse
from wmeval.statistics.observation import counterfactual_cosine
from wmeval.statistics.paired import episode_chunks
from wmeval.tables import LONG_COLUMNS, decode_frames, dense, long_rows, select
from wmeval.worlds import World
from wmeval.worlds.base import Task


def _states(table: pa.Table, regime: str, plan: str, n: int, t: np.ndarray, where: str) -> np.ndarray:
    return dense(select(table, regime, plan), "state", n, t, where)  # (N, S, T, D)


def pair_mse(world: World, pred: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Mean over (sample, future) pairs and state dims of the squared error: ``(N, S, T, D), (N, M, T, D) -> (N, T)``."""
    d = world.state_delta(pred[:, :, None], real[:, None])  # (N, S, M, T, D)
    return np.mean(d**2, axis=(1, 2, 4))


def dynamics_contributions(world: World, source: str, model: pa.Table, truth: pa.Table, meta: dict,
                           where: str) -> pd.DataFrame:
    """Rollout curves, action sensitivity, counterfactuals, probes and control cost of one source."""
    dyn = meta["dynamics"]
    n, H = dyn["n_episodes"], dyn["horizon"]
    t = np.arange(1, H + 1)
    out = []
    is_truth = source == "ground_truth"
    regime = "realized" if is_truth else "open_loop"
    random_plans = [p for p, c in meta["plans"].items() if c == "random"]
    if not is_truth and random_plans:   # none on an environment: its rollout curves are frame_rollout_contributions
        # Layer 2: rollout error curves under random plans and under this model's planner plans.
        curves = [pair_mse(world, _states(model, regime, p, n, t, where), _states(truth, "realized", p, n, t, where))
                  for p in random_plans]
        out.append(long_rows(world.name, source, "rollout_state_rmse", "open_loop", "random", "dynamics",
                         np.mean(curves, axis=0), t=t))
        if meta["tasks"]:
            pm = pair_mse(world, _states(model, regime, "planner", n, t, where),
                          _states(truth, "realized", f"planner:{source}", n, t, where))
            out.append(long_rows(world.name, source, "rollout_state_rmse", "open_loop", "planner", "dynamics", pm, t=t))
    # Layers 4 and 5 from each declared counterfactual pair (the truth scores 1 and 0: a sanity row).
    for a, b in meta["counterfactual_pairs"]:
        pa_, pb_ = _states(model, regime, a, n, t, where), _states(model, regime, b, n, t, where)
        ta, tb = _states(truth, "realized", a, n, t, where), _states(truth, "realized", b, n, t, where)
        pred_d = world.state_delta(pa_, pb_)           # (N, S, T, D), sample k paired with sample k
        true_d = world.state_delta(ta, tb)             # (N, M, T, D)
        cond = f"{a} vs {b}"
        num = np.linalg.norm(pred_d[:, :, 0], axis=-1).mean(axis=1)
        den = np.linalg.norm(true_d[:, :, 0], axis=-1).mean(axis=1)
        out.append(long_rows(world.name, source, "action_sensitivity", "open_loop", cond, "dynamics", num, den))
        pm, tm = pred_d.mean(axis=1), true_d.mean(axis=1)   # (N, T, D)
        cos = counterfactual_cosine(pm, tm)   # 0 for a model that ignores the action, NaN where the truth does
        gap = np.linalg.norm(pm - tm, axis=-1)
        out.append(long_rows(world.name, source, "counterfactual_cosine", "open_loop", cond, "dynamics", cos, t=t))
        out.append(long_rows(world.name, source, "counterfactual_gap", "open_loop", cond, "dynamics", gap, t=t))
    # Layer 7: probes, for every declared window (the truth's rows are the calibration).
    probes = meta["probes"]
    for name in probes:
        q = world_probe(world, name)
        states = _states(model, "probe", name, n, np.arange(dyn["probe_horizon"] + 1), where)
        e = q(states)                                   # (N, S, T + 1)
        for w in dyn["probe_windows"]:
            flags = e[:, :, w:] > e[:, :, :-w] + dyn["probe_tolerance"]
            out.append(long_rows(world.name, source, "probe_flag_rate", "probe", f"{name} w={w}", "dynamics",
                             flags.mean(axis=(1, 2))))
    # Layer 6: control cost in the real world, per task.
    for task_name in meta["tasks"]:
        task = world_task(world, task_name)
        T = dyn["control_steps"]
        steps = dense(select(model, "closed_loop", task_name), "state" if task.cost_from == "state" else "reward",
                      dyn["control_episodes"], np.arange(T + 1), where)[:, 0, 1:]   # the real steps 1..T
        out.append(long_rows(world.name, source, "control_cost", "closed_loop", task_name, "control",
                             task.cost(steps).mean(axis=1)))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=LONG_COLUMNS)


def frame_rollout_contributions(world: World, source: str, model: pa.Table, truth: pa.Table, meta: dict,
                                where: str) -> pd.DataFrame:
    """Seed 002 layer 2 on frames, for an environment (no state to roll): open-loop pixel error by step from the
    control starts, under random actions (against the environment's frames of the same actions) and under
    the actions this model's own MPC took on the first task (against the frames they led to, the
    closed-loop rows). Per control episode: the mean over samples and pixels of the squared error."""
    fr = meta.get("frame_rollouts")
    if not fr or source == "ground_truth" or select(model, "open_loop", "random").num_rows == 0:
        return pd.DataFrame(columns=LONG_COLUMNS)     # no frames predicted (a reward head only)
    dyn = meta["dynamics"]
    E, h = dyn["control_episodes"], fr["horizon"]
    t = np.arange(1, h + 1)
    targets = {"random": dense(select(truth, "realized", "random"), "frame", E, t, where)}
    if select(model, "open_loop", "planner").num_rows:    # a model that planned (it predicts rewards)
        targets["planner"] = dense(select(model, "closed_loop", fr["planner_task"]), "frame", E,
                                   np.arange(dyn["control_steps"] + 1), where)[:, :, 1:h + 1]
    out = []
    for plan, targ_all in targets.items():
        pred_all = dense(select(model, "open_loop", plan), "frame", E, t, where)     # (E, S, h, *frame)
        parts = []
        for c in episode_chunks(E, pred_all, targ_all):
            pred, targ = decode_frames(pred_all[c]), decode_frames(targ_all[c])
            parts.append(expected_pairwise_mse(np.moveaxis(pred, 1, 2), np.moveaxis(targ, 1, 2), 3))
        out.append(long_rows(world.name, source, "rollout_pixel_rmse", "open_loop", plan, "control",
                             np.concatenate(parts), t=t))
    return pd.concat(out, ignore_index=True)


def world_probe(world: World, name: str) -> Callable[[np.ndarray], np.ndarray]:
    for p in world.probes():
        if p.name == name:
            return p.quantity
    raise WmevalError(f"world {world.name!r} declares no probe {name!r} (the dynamics file is stale?)")


def world_task(world: World, name: str) -> Task:
    for t in world.tasks():
        if t.name == name:
            return t
    raise WmevalError(f"world {world.name!r} declares no task {name!r} (the dynamics file is stale?)")


def task_signal_contributions(world: World, source: str, model: pa.Table, truth: pa.Table,
                              n: int, horizon: int, where: str) -> pd.DataFrame:
    """Seed 003's reward error, event precision/recall and peak-time offset, open loop, per episode."""
    if "reward" not in model.column_names or "reward" not in truth.column_names:
        return pd.DataFrame(columns=LONG_COLUMNS)
    thr = world.reward_event_threshold
    t = np.arange(1, horizon + 1)
    regimes = model.column("regime").cast(pa.string())
    open_loop = model.filter(pa.compute.equal(regimes, "open_loop"))
    plans = sorted(pa.compute.unique(open_loop.column("plan").cast(pa.string())).to_pylist())
    mse, tp, fp, fn, offset = (np.zeros(n) for _ in range(5))
    for p in plans:
        rm = _reward(model, "open_loop", p, n, t, where)               # (N, S, T)
        rt = _reward(truth, "realized", p, n, np.arange(0, horizon + 1), where)[:, :, 1:]  # (N, M, T)
        diff = rm[:, :, None] - rt[:, None]                            # (N, S, M, T)
        mse += np.mean(diff**2, axis=(1, 2, 3))
        em, et = rm[:, :, None] > thr, rt[:, None] > thr
        tp += np.mean(em & et, axis=(1, 2)).sum(-1)
        fp += np.mean(em & ~et, axis=(1, 2)).sum(-1)
        fn += np.mean(~em & et, axis=(1, 2)).sum(-1)
        offset += np.mean(np.abs(np.argmax(rm, -1)[:, :, None] - np.argmax(rt, -1)[:, None]), axis=(1, 2))
    k = len(plans)
    return pd.concat([
        long_rows(world.name, source, "reward_mse", "open_loop", "all", "observation", mse / k),
        long_rows(world.name, source, "event_precision", "open_loop", "all", "observation", tp, tp + fp),
        long_rows(world.name, source, "event_recall", "open_loop", "all", "observation", tp, tp + fn),
        long_rows(world.name, source, "peak_time_offset", "open_loop", "all", "observation", offset / k),
    ], ignore_index=True)


def _reward(table: pa.Table, regime: str, plan: str, n: int, t: np.ndarray, where: str) -> np.ndarray:
    return dense(select(table, regime, plan), "reward", n, t, where)
