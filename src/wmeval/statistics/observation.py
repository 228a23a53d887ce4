"""Observation-layer scores beyond MSE (seed 000): PSNR, SSIM, LPIPS, best-of-K, diversity, NLL, events.

Paired scores are computed for every (prediction sample k, realized future m) pair of a
frame and averaged over the pairs, as :func:`wmeval.statistics.paired.contributions` does for MSE;
teacher-forced predictions are compared with realization 0 of the teacher-forced plan.
Open-loop and teacher-forced rows are never pooled. Rows come out in the contributions
schema (``metric, regime, plan, condition, episode, t, value``), so per-episode values
(valid steps averaged within a plan, plans weighted equally) and horizon curves are formed
by the same code as MSE's.

Sequence-level diagnostics (best-of-K, single-sample error, event Brier score) are one value
per (episode, plan), carried with ``t = 0``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from wmeval.metrics import PSNR_CAP_DB, best_of_k, lpips_distance, psnr_from_mse
from wmeval.metrics.paired import ssim_pairs
from wmeval.statistics.paired import episode_chunks, episode_values
from wmeval.tables import LONG_COLUMNS as COLUMNS
from wmeval.tables import blocks, decode_frames, dense, select

CONTRIB = ["metric", "regime", "plan", "condition", "episode", "t", "value"]


def _rows(out: dict, metric: str, regime: str, plan: str, condition: str, values: np.ndarray,
          valid: np.ndarray, t: np.ndarray) -> None:
    """Append ``(N, T)`` values at the valid (episode, t) cells; ``t`` ``(T,)``."""
    e, ti = np.nonzero(valid)
    out["metric"] += [metric] * len(e)
    out["regime"] += [regime] * len(e)
    out["plan"] += [plan] * len(e)
    out["condition"] += [condition] * len(e)
    out["episode"].append(e.astype(np.int64))
    out["t"].append(np.asarray(t)[ti].astype(np.int64))
    out["value"].append(np.asarray(values, dtype=np.float64)[e, ti])


def _table(world: str, source: str, out: dict) -> pa.Table:
    n = len(out["metric"])
    cat = (lambda k: np.concatenate(out[k]) if out[k] else np.empty(0, np.int64))
    return pa.table({"world": pa.array([world] * n), "source": pa.array([source] * n),
                     "metric": out["metric"], "regime": out["regime"], "plan": out["plan"],
                     "condition": out["condition"], "episode": cat("episode"), "t": cat("t"),
                     "value": np.concatenate(out["value"]) if out["value"] else np.empty(0)})


def _pairs(pred: np.ndarray, targ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Broadcast ``(N, S, T, *img)`` and ``(N, M, T, *img)`` to all pairs ``(N, T, S, M, *img)``."""
    p = np.moveaxis(pred, 1, 2)[:, :, :, None]
    g = np.moveaxis(targ, 1, 2)[:, :, None]
    return np.broadcast_arrays(p, g)


def frame_scores(world, source: str, model: pa.Table, truth: pa.Table, n_episodes: int, horizon: int,
                 where: str, *, lpips_model=None) -> tuple[pa.Table, pa.Table]:
    """Per-(episode, plan, t) paired frame scores and per-(episode, plan) sequence diagnostics.

    Returns:
        ``(steps, sequences)`` in the contributions schema. ``steps``: ``psnr`` (per-frame,
        capped at :data:`~wmeval.metrics.PSNR_CAP_DB`), ``ssim``, ``lpips`` (when a model is
        given) and ``sample_diversity``. ``sequences`` (open loop, ``t = 0``): ``single_sample_mse``
        (sample 0 only), ``best_of_k_mse`` (the model's whole pool of K samples) and
        ``best_of_k_mse@K`` curve rows (``t`` holds K), and ``event_brier``.
    """
    t_model, t_truth = np.arange(1, horizon + 1), np.arange(0, horizon + 1)
    steps = {k: [] for k in CONTRIB}
    seqs = {k: [] for k in CONTRIB}
    has_state = "state" in model.column_names and "state" in truth.column_names
    for b in blocks(model):
        mb, gb = select(model, b.regime, b.plan), select(truth, "realized", b.plan)
        valid = dense(mb, "valid", n_episodes, t_model, where)[:, 0]                   # (N, T)
        pred_all = dense(mb, "frame", n_episodes, t_model, where)                      # stored dtype
        real_all = dense(gb, "frame", n_episodes, t_truth, where)[:, :, 1:]
        if b.regime == "teacher_forced":
            real_all = real_all[:, :1]
        # Per episode, over chunks of episodes (the working set does not grow with N; values unchanged).
        chunks = {k: [] for k in ("pair_mse", "ssim", "lpips", "diversity")}
        for c in episode_chunks(n_episodes, *_pairs(pred_all, real_all)):
            pred = decode_frames(pred_all[c]).astype(np.float64)
            real = decode_frames(real_all[c]).astype(np.float64)
            p, g = _pairs(pred, real)                                                   # (n, T, S, M, *img)
            chunks["pair_mse"].append(np.mean((p - g) ** 2, axis=(-3, -2, -1)))        # (n, T, S, M)
            chunks["ssim"].append(ssim_pairs(np.moveaxis(pred, 1, 2), np.moveaxis(real, 1, 2)).mean(axis=(2, 3)))
            if lpips_model is not None:
                chunks["lpips"].append(lpips_distance(p, g, lpips_model).mean(axis=(2, 3)))
            if b.regime == "open_loop":
                chunks["diversity"].append(diversity(pred))
        pair_mse = np.concatenate(chunks["pair_mse"])
        _rows(steps, "psnr", b.regime, b.plan, b.condition, psnr_from_mse(pair_mse).mean(axis=(2, 3)), valid, t_model)
        _rows(steps, "ssim", b.regime, b.plan, b.condition, np.concatenate(chunks["ssim"]), valid, t_model)
        if lpips_model is not None:
            _rows(steps, "lpips", b.regime, b.plan, b.condition, np.concatenate(chunks["lpips"]), valid, t_model)
        if b.regime != "open_loop":
            continue
        _rows(steps, "sample_diversity", b.regime, b.plan, b.condition, np.concatenate(chunks["diversity"]), valid,
              t_model)
        # Sequence error of each (sample, future): mean frame MSE over the valid steps.
        w = valid.astype(np.float64)
        seq = np.einsum("ntsm,nt->nsm", pair_mse, w) / np.maximum(w.sum(axis=1), 1.0)[:, None, None]  # (N, S, M)
        ok = valid.any(axis=1)[:, None]
        curve = best_of_k(np.moveaxis(seq, 1, 2)).mean(axis=1)                          # (N, S): K = 1..S
        k_all = curve.shape[1]
        _rows(seqs, "single_sample_mse", b.regime, b.plan, b.condition, seq[:, 0].mean(axis=1)[:, None], ok, [0])
        _rows(seqs, "best_of_k_mse", b.regime, b.plan, b.condition, curve[:, -1:], ok, [0])
        _rows(seqs, "best_of_k_curve", b.regime, b.plan, b.condition, curve,
              np.broadcast_to(ok, curve.shape), np.arange(1, k_all + 1))
        if has_state and getattr(world, "outcome_event_name", None):   # a world that declares an event
            start = dense(gb, "state", n_episodes, t_truth, where)[:, 0, 0]              # (N, D)
            fs = dense(mb, "state", n_episodes, t_model, where)[:, :, -1]                # (N, S, D)
            rs = dense(gb, "state", n_episodes, t_truth, where)[:, :, -1]                # (N, M, D)
            forecast = world.outcome_event(start[:, None], fs).mean(axis=1)             # (N,)
            observed = world.outcome_event(start[:, None], rs).astype(np.float64)       # (N, M)
            brier = np.mean((forecast[:, None] - observed) ** 2, axis=1)
            _rows(seqs, "event_brier", b.regime, b.plan, b.condition, brier[:, None], ok, [0])
            _rows(seqs, "event_forecast", b.regime, b.plan, b.condition, forecast[:, None], ok, [0])
            _rows(seqs, "event_observed", b.regime, b.plan, b.condition, observed.mean(axis=1)[:, None], ok, [0])
    return _table(world.name, source, steps), _table(world.name, source, seqs)


def diversity(samples: np.ndarray) -> np.ndarray:
    """Mean squared pixel distance over pairs of distinct samples: ``(N, S, T, *img) -> (N, T)``.

    ``2 * (per-pixel variance with ddof = 1)`` averaged over pixels; 0 for a single sample.
    A spread, not coverage: noise is diverse too.
    """
    s = samples.shape[1]
    if s < 2:
        return np.zeros((samples.shape[0], samples.shape[2]))
    return 2.0 * samples.var(axis=1, ddof=1).mean(axis=(-3, -2, -1))


def truth_diversity(world: str, truth: pa.Table, n_episodes: int, horizon: int, where: str) -> pa.Table:
    """The real spread of the M realized futures per plan (the reference for ``sample_diversity``)."""
    t_truth = np.arange(0, horizon + 1)
    out = {k: [] for k in CONTRIB}
    for b in blocks(truth):
        real_all = dense(select(truth, "realized", b.plan), "frame", n_episodes, t_truth, where)[:, :, 1:]
        div = np.concatenate([diversity(decode_frames(real_all[c]).astype(np.float64))
                              for c in episode_chunks(n_episodes, real_all)])
        _rows(out, "sample_diversity", "open_loop", b.plan, b.condition, div,
              np.ones((n_episodes, horizon), bool), t_truth[1:])
    return _table(world, "ground_truth", out)


def sequence_episode_values(seqs: pd.DataFrame) -> pd.DataFrame:
    """Per-episode rows (COLUMNS) of the sequence diagnostics: plans weighted equally, pooled and per condition.

    ``best_of_k_curve`` rows keep ``t`` = K (a curve over K). ``event_forecast``/``event_observed``
    become ``event_frequency`` reliability rows: per forecast bin (``condition = "p=<value>"``), the
    ratio of summed observed frequency to the number of (episode, plan) forecasts in the bin.
    """
    if seqs.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys = ["world", "source", "metric", "regime"]
    plain = seqs[~seqs.metric.isin(["best_of_k_curve", "event_forecast", "event_observed"])]
    ep = episode_values(plain).assign(unit="observation", denominator=1.0, t=0)
    curve = seqs[seqs.metric == "best_of_k_curve"]
    kc = (curve.groupby([*keys, "t", "episode"], observed=True)["value"].mean().reset_index()
          .assign(condition="all", unit="observation", denominator=1.0))
    parts = [ep, kc]
    fc = seqs[seqs.metric == "event_forecast"].set_index(["world", "source", "regime", "plan", "episode"])
    if len(fc):
        ob = seqs[seqs.metric == "event_observed"].set_index(["world", "source", "regime", "plan", "episode"])
        joined = fc[["value"]].rename(columns={"value": "p"}).join(ob[["value"]].rename(columns={"value": "o"}))
        joined = joined.reset_index()
        joined["bin"] = joined.p.map(lambda v: f"p={v:.3g}")
        g = joined.groupby(["world", "source", "regime", "bin", "episode"], observed=True)
        rel = g.agg(value=("o", "sum"), denominator=("o", "size"), forecast=("p", "sum")).reset_index()
        for metric, col in (("event_frequency", "value"), ("event_forecast", "forecast")):
            parts.append(pd.DataFrame({"world": rel.world, "source": rel.source, "metric": metric,
                                       "regime": rel.regime, "condition": rel["bin"], "unit": "observation",
                                       "episode": rel.episode, "t": 0, "value": rel[col].astype(float),
                                       "denominator": rel.denominator.astype(float)}))
    return pd.concat([p[COLUMNS] for p in parts if len(p)], ignore_index=True)


def nll_rows(world: str, source: str, model: pa.Table, n_episodes: int, horizon: int, where: str) -> pd.DataFrame:
    """Realized-future NLL per episode (nats per step) from the teacher-forced ``logp`` column.

    The model's log density (or mass) of each realized step given the realized history; zero
    mass gives ``+inf`` (never clipped). Plans with ``logp`` are weighted equally.
    """
    if "logp" not in model.column_names:
        return pd.DataFrame(columns=COLUMNS)
    t = np.arange(1, horizon + 1)
    parts = []
    for b in blocks(model):
        if b.regime != "teacher_forced":
            continue
        blk = select(model, b.regime, b.plan)
        if blk.column("logp").null_count == blk.num_rows:
            continue
        logp = dense(blk, "logp", n_episodes, t, where)[:, 0].astype(np.float64)   # (N, T)
        valid = dense(blk, "valid", n_episodes, t, where)[:, 0]
        with np.errstate(invalid="ignore"):
            nll = -np.sum(np.where(valid, logp, 0.0), axis=1) / np.maximum(valid.sum(axis=1), 1)
        keep = valid.any(axis=1)
        parts.append(pd.DataFrame({"world": world, "source": source, "metric": "nll", "regime": b.regime,
                                   "condition": "all", "unit": "observation", "episode": np.flatnonzero(keep),
                                   "t": 0, "value": nll[keep], "denominator": 1.0, "plan": b.plan}))
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.concat(parts, ignore_index=True)
    out = df.groupby(["world", "source", "metric", "regime", "condition", "unit", "episode", "t"],
                     observed=True).agg(value=("value", "mean"), denominator=("denominator", "first")).reset_index()
    return out[COLUMNS]


__all__ = ["frame_scores", "counterfactual_pair_rows", "diversity", "truth_diversity", "sequence_episode_values", "nll_rows", "PSNR_CAP_DB"]


def _energy_spread(xa: np.ndarray, xb: np.ndarray) -> np.ndarray:
    """Per-episode energy distance between two sample sets ``(N, S, T, F)``, averaged over steps: ``(N,)``."""
    def mean_dist(u: np.ndarray, v: np.ndarray, distinct: bool) -> np.ndarray:
        # One sample pair at a time: (N, T, F) at most, never (N, S, S, T, F) (full-size frames).
        pairs = [(i, j) for i in range(u.shape[1]) for j in range(v.shape[1]) if not (distinct and i == j)]
        if not pairs:
            return np.zeros(len(u))
        # A sequential sum over pairs (the order np.mean(axis=0) takes for many episodes): its value for an
        # episode does not depend on how many episodes are scored together (chunks).
        return sum(np.linalg.norm(u[:, i] - v[:, j], axis=-1).mean(axis=1) for i, j in pairs) / len(pairs)

    return mean_dist(xa, xb, False) - 0.5 * (mean_dist(xa, xa, True) + mean_dist(xb, xb, True))


def counterfactual_cosine(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Cosine over the last axis between predicted and real differences of two futures.

    0 where the prediction has no difference (a model that ignores the action carries no information on the
    direction: seed 002's formula, whose ``+ 1e-9`` in the denominator gives the same 0); NaN, the episode
    counted out, where the real difference is 0 (no direction to compare with).
    """
    pn, tn = np.linalg.norm(pred, axis=-1), np.linalg.norm(true, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.sum(pred * true, axis=-1) / (pn * tn)
    return np.where(tn <= 1e-12, np.nan, np.where(pn <= 1e-12, 0.0, cos))


def counterfactual_pair_rows(world_name: str, source: str, model: pa.Table, truth: pa.Table, n_episodes: int,
                             horizon: int, pairs: list[tuple[str, str]], where: str, model_emb: pa.Table | None = None,
                             truth_emb: pa.Table | None = None) -> pd.DataFrame:
    """Seed 002's action sensitivity and counterfactual consistency (layers 4 and 5) on frames, from the
    observation protocol: no state and no branching beyond the protocol's own plans.

    For each declared counterfactual pair ``(a, b)`` whose plans the protocol rolled out from the same ``o_0``,
    in pixel space (frames in [0, 1], flattened) and in the encoder's feature space when embeddings are given:

    * ``{pixel,feature}_action_sensitivity`` (one row per episode, ``t = 0``): over the open-loop steps 1..H,
      the energy distance between the model's samples under ``a`` and under ``b``,
      ``E||x_a - x_b|| - (E||x_a - x_a'|| + E||x_b - x_b'||) / 2`` (the within terms over distinct samples,
      0 for one sample), with the same for the realized futures as its denominator. The within terms remove
      sampling noise: a stochastic model that ignores the action scores about 0, not its noise level; for
      deterministic models and worlds it is the plain spread ``||x_a - x_b||``. It does not see direction.
      Steps 1..H, not step 1 alone: one step of a small action is often below a pixel. The bootstrap
      combines it as a ratio: 1 is ideal, 0 means the model ignores the action.
    * ``{pixel,feature}_counterfactual_cosine`` and ``_gap`` (curves, ``t = 1..H``): with the predicted
      difference ``d_pred = mean_k x_a^k - mean_k x_b^k`` (the model's sample means) and the realized one
      ``d_true`` (means over realized futures), the cosine ``<d_pred, d_true> / (|d_pred| |d_true|)`` (1 ideal,
      -1 the effect reversed; 0 where the predicted difference is 0, as for a model that ignores the action;
      NaN, the episode counted out at that step, only where the real difference is 0) and the gap ``sqrt(mean((d_pred - d_true)^2))``, a root mean square
      over pixels (intensity units) or embedding dimensions, so that frame sizes compare (0 ideal; a model
      that ignores the action scores the RMS of the real effect). A stochastic model's sample means keep
      some of its noise (shrinking as 1/sqrt(S)): its cosine is then lower and its gap larger than with
      infinitely many samples.
    """
    from wmeval.tables import long_rows

    t_model, t_truth = np.arange(1, horizon + 1), np.arange(0, horizon + 1)
    spaces = [("pixel", model, truth, "frame")]
    if model_emb is not None and truth_emb is not None:
        spaces.append(("feature", model_emb, truth_emb, "embedding"))
    out = []
    for space, m, g, column in spaces:
        for a, b in pairs:
            cond = f"{a} vs {b}"
            arms = [dense(select(m, "open_loop", a), column, n_episodes, t_model, where),         # (N, S, H, ...)
                    dense(select(m, "open_loop", b), column, n_episodes, t_model, where),
                    dense(select(g, "realized", a), column, n_episodes, t_truth, where)[:, :, 1:],
                    dense(select(g, "realized", b), column, n_episodes, t_truth, where)[:, :, 1:]]
            parts = []
            for c in episode_chunks(n_episodes, *arms):      # per episode: chunks change no value
                x = [np.asarray(decode_frames(v[c]) if column == "frame" else v[c], np.float64) for v in arms]
                pa_, pb_, ra, rb = (v.reshape(*v.shape[:3], -1) for v in x)                        # (n, S, H, F)
                dp = pa_.mean(axis=1) - pb_.mean(axis=1)                                          # (n, H, F)
                dt = ra.mean(axis=1) - rb.mean(axis=1)
                parts.append((_energy_spread(pa_, pb_), _energy_spread(ra, rb), counterfactual_cosine(dp, dt),
                              np.sqrt(np.mean((dp - dt) ** 2, axis=-1))))
            num, den, cos, gap = (np.concatenate(v) for v in zip(*parts))
            out.append(long_rows(world_name, source, f"{space}_action_sensitivity", "open_loop", cond, "observation",
                                 num, den))
            for name, v in (("cosine", cos), ("gap", gap)):
                out.append(long_rows(world_name, source, f"{space}_counterfactual_{name}", "open_loop", cond,
                                     "observation", v, t=t_model))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=COLUMNS)
