"""The statistics stage: per-episode contributions of every metric, pooled and per stratum."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from threadpoolctl import threadpool_limits

from wmeval.core.config import Params, ScoringConfig
from wmeval.core.errors import WmevalError
from wmeval.core.parallel import fork_map, usable_cores
from wmeval.core.stale import check_made_with, encoder_config
from wmeval.encoders.lpips_backbone import load_lpips
from wmeval.estimators.distributional import (
    KID_BLOCKS_FILE,
    Settings,
    gather_points,
    kid_blocks_table,
    point_tasks,
    view_sets,
)
from wmeval.metrics import PSNR_CAP_DB, REGISTRY
from wmeval.statistics.dynamics_layers import (
    dynamics_contributions,
    frame_rollout_contributions,
    task_signal_contributions,
)
from wmeval.statistics.observation import (
    counterfactual_pair_rows,
    frame_scores,
    nll_rows,
    sequence_episode_values,
    truth_diversity,
)
from wmeval.statistics.paired import contributions, curve_values, episode_values
from wmeval.tables import KEY_COLUMNS as KEYS
from wmeval.tables import LONG_COLUMNS as COLUMNS
from wmeval.tables import (
    episode_windows,
    read_episodes,
    read_metadata,
    read_table,
    shift_episodes,
    write_table,
)
from wmeval.worlds import BUILTIN_WORLDS, World, build_world
from wmeval.worlds.base import teacher_forced_plan


def _summaries(curves: pd.DataFrame, dyn: dict) -> pd.DataFrame:
    """Per-episode headline rows of curve metrics, at the step their registry entry names."""
    parts = []
    for metric, g in curves.groupby("metric", sort=True):
        key = REGISTRY[metric].summary_t
        if key is None:
            continue
        at = dyn[key]
        sel = g[g.t == at]
        parts.append(sel.assign(condition=sel.condition + f" @t={at}"))
    return pd.concat(parts, ignore_index=True) if parts else curves.iloc[:0]


@dataclass
class WorldRows:
    """What one world contributes: long rows of every kind, and its protocol record."""

    contributions: list[pd.DataFrame] = field(default_factory=list)   # per (episode, plan, t)
    sequences: list[pd.DataFrame] = field(default_factory=list)       # per (episode, plan) diagnostics
    episodes: list[pd.DataFrame] = field(default_factory=list)        # per episode, LONG_COLUMNS
    curves: list[pd.DataFrame] = field(default_factory=list)          # per (episode, t), LONG_COLUMNS
    distributional: list[pd.DataFrame] = field(default_factory=list)  # point estimates
    kid_blocks: list[dict] = field(default_factory=list)               # KID's block sums, for the bootstrap
    record: dict[str, Any] = field(default_factory=dict)
    encoder: dict[str, Any] | None = None


#: Paired MSE metrics: name -> (tensor column, event_ndim); ``embedding`` is read from the feature tables.
MSE_COLUMNS = {"state_mse": ("state", 1), "pixel_mse": ("frame", 3), "feature_mse": ("embedding", 1)}


def _model_rows(out: WorldRows, w: World, name: str, table: pa.Table, truth: pa.Table, truth_emb: pa.Table | None,
                model_emb: pa.Table, H: int, pairs: list[tuple[str, str]], lo: int, n: int, where: str,
                lpips_model: Any) -> None:
    """One model's observation-protocol rows into ``out``, from the tables of episodes ``lo..lo + n - 1``
    (renumbered ``0..n - 1`` in them; every score is per episode, so a window changes no value)."""
    emb = model_emb if truth_emb is not None else None
    out.contributions.append(_at(contributions(w.name, name, table, truth, n, H, MSE_COLUMNS, where, emb,
                                               truth_emb, w.state_delta), lo))
    steps, seqs = frame_scores(w, name, table, truth, n, H, where, lpips_model=lpips_model)
    out.contributions.append(_at(steps, lo))
    out.sequences.append(_at(seqs, lo))
    out.episodes.append(_at(nll_rows(w.name, name, table, n, H, where), lo))
    out.episodes.append(_at(task_signal_contributions(w, name, table, truth, n, H, where), lo))
    pair_rows = _at(counterfactual_pair_rows(w.name, name, table, truth, n, H, pairs, where, emb, truth_emb), lo)
    out.episodes.append(pair_rows[pair_rows.t == 0])
    out.curves.append(pair_rows[pair_rows.t > 0])
    out.episodes.append(_summaries(pair_rows[pair_rows.t > 0], {"protocol_horizon": H}))


def _at(rows: pa.Table | pd.DataFrame, lo: int) -> pd.DataFrame:
    """Rows of an episode window as pandas, with their episodes numbered in the whole protocol again."""
    df = rows.to_pandas() if isinstance(rows, pa.Table) else rows
    if lo and len(df):
        df = df.assign(episode=df.episode + lo)
    return df


def block_layout(table: pa.Table) -> dict[tuple[str, str], int]:
    """``{(regime, plan): samples}`` of a table (its blocks and each block's sample count)."""
    keys = pa.table({"regime": table.column("regime").cast(pa.string()),
                     "plan": table.column("plan").cast(pa.string()), "sample": table.column("sample")})
    agg = keys.group_by(["regime", "plan"]).aggregate([("sample", "max")]).to_pylist()
    return {(r["regime"], r["plan"]): int(r["sample_max"]) + 1 for r in agg}


def check_window(path: Path, table: pa.Table, whole: dict[tuple[str, str], int], lo: int, hi: int) -> None:
    """A window's rows hold every block of the file with its sample count: a block or sample missing for a
    whole window would otherwise pass the per-window checks (which see only the window)."""
    got = block_layout(table)
    if got != whole:
        missing = sorted(set(whole) - set(got))
        fewer = sorted(b for b in set(got) & set(whole) if got[b] != whole[b])
        raise WmevalError(f"{path}: episodes {lo}..{hi - 1} " + (f"have no rows of the blocks {missing}" if missing
                          else f"have {[got[b] for b in fewer]} samples in {fewer}, the file "
                               f"{[whole[b] for b in fewer]}"))


def _window(table: pa.Table, lo: int, hi: int) -> pa.Table:
    """The rows of an in-memory table (embeddings) for episodes ``lo..hi - 1``, renumbered from 0."""
    ep = table.column("episode")
    mask = pc.and_(pc.greater_equal(ep, pa.scalar(lo, ep.type)), pc.less(ep, pa.scalar(hi, ep.type)))
    return shift_episodes(table.filter(mask), -lo)


def _dynamics_rows(out: WorldRows, w: World, rollouts: Path, models: list[str]) -> dict[str, Any]:
    """Seed 002's dynamics layers of the ground truth and every model with state predictions."""
    gt = rollouts / w.name / "dynamics" / "ground_truth.parquet"
    meta = read_metadata(gt)
    if meta.get("not_applicable"):
        return meta
    truth = read_table(gt)
    rows = [dynamics_contributions(w, "ground_truth", truth, truth, meta, str(gt))]
    fr = meta.get("frame_rollouts") or {}
    for name in models:
        path = rollouts / w.name / "dynamics" / f"{name}.parquet"
        if name not in meta["skipped"]:
            table = read_table(path)
            rows.append(dynamics_contributions(w, name, table, truth, meta, str(path)))
            rows.append(frame_rollout_contributions(w, name, table, truth, meta, str(path)))
        elif name in fr.get("models", []):    # no control layer, but pixel rollout curves under random actions
            rows.append(frame_rollout_contributions(w, name, read_table(path), truth, meta, str(path)))
    df = pd.concat(_nonempty(rows) or rows[:1], ignore_index=True)
    out.curves.append(df[df.t > 0])
    out.episodes.append(df[df.t == 0])
    out.episodes.append(_summaries(df[df.t > 0], {**meta["dynamics"], "rollout_horizon": fr.get("horizon")}))
    return meta


def _world_record(params: Params, w: World, frame_shape: list[int], gt_meta: dict, dyn_meta: dict, models: dict[str, int],
                  with_state: list[str], with_logp: list[str], sets: dict, skipped_views: dict) -> dict[str, Any]:
    """The world's protocol: what was compared, with how many samples (the report's protocol cards)."""
    H, N, dyn = params.protocol.horizon, params.protocol.n_episodes, dyn_meta["dynamics"]
    return {
        "n_episodes": N, "episode_block": params.protocol.episode_block, "horizon": H, "plans": gt_meta["plans"],
        "teacher_forced_plan": teacher_forced_plan(w, params.protocol.teacher_forced_plan),
        "num_futures": gt_meta["num_futures"], "models": models, "models_with_state": with_state,
        "frame_shape": frame_shape, "frame_dtype": gt_meta["frame_dtype"],
        "initial_states": w.initial_states_text, "world": gt_meta["world"],
        "baseline": params.models[w.name].baseline if w.name in params.models else None,
        "units": {"observation": N, "dynamics": dyn["n_episodes"], "control": dyn["control_episodes"]},
        "dynamics": {**dyn, "plans": dyn_meta["plans"], "counterfactual_pairs": dyn_meta["counterfactual_pairs"],
                     "tasks": dyn_meta["tasks"], "probes": dyn_meta["probes"], "skipped": dyn_meta["skipped"],
                     "not_applicable": dyn_meta.get("not_applicable"), "state_level": dyn_meta.get("state_level"),
                     "rollout_horizon": (dyn_meta.get("frame_rollouts") or {}).get("horizon"),
                     "rollout_models": (dyn_meta.get("frame_rollouts") or {}).get("models", [])},
        "capabilities": gt_meta.get("capabilities"),
        "reward": gt_meta["world"].get("reward"), "event": gt_meta["world"].get("event"),
        "outcome_event": getattr(w, "outcome_event_name", None),
        "nll": {"models": with_logp, "base_measure": w.nll_base_measure},
        "distributional": {
            "views": {v: {"dim": s.dim, "strata": s.strata, "n_real": int(len(s.reference.x))}
                      for v, s in sets.items()},
            "skipped_views": skipped_views,
        },
    }


def observed_pairs(world: World, truth: pa.Table) -> list[tuple[str, str]]:
    """The world's counterfactual pairs whose two plans the observation protocol rolled out."""
    plans = set(truth.column("plan").unique().to_pylist())
    return [(a, b) for a, b in world.counterfactual_pairs() if a in plans and b in plans]


def action_bins(world: World, sc: ScoringConfig) -> list[float]:
    """The action strata's bin edges: the world's own where it declares them (a Gymnasium world's action
    space), else ``scoring.action_bins`` (built for the built-in worlds' actions in [-1, 1])."""
    return list(map(float, getattr(world, "action_bins", None) or sc.action_bins))


def check_inputs(params: Params, world: str, rollouts: Path, features: Path) -> None:
    """Stop unless every rollout and feature table of ``world`` was made with this run's params
    (world, protocol, model entry, encoder): a cache that returned another configuration's outputs."""
    entries = params.models[world].entries if world in params.models else {}
    expected_world, protocol = dataclasses.asdict(params.worlds[world]), dataclasses.asdict(params.protocol)
    for name in ["ground_truth", *entries]:
        path = rollouts / world / f"{name}.parquet"
        meta = read_metadata(path)
        check_made_with(path, meta.get("world_config"), expected_world, f"worlds.{world}")
        check_made_with(path, meta.get("protocol"), protocol, "protocol")
        if name in entries:
            check_made_with(path, meta.get("model_config"), dict(entries[name]), f"models.{world}.entries.{name}")
        fe = features / params.encoder.name / world / f"{name}.parquet"
        check_made_with(fe, read_metadata(fe).get("encoder_config"),
                        encoder_config(params.encoder.name, params.encoder.kind, params.encoder.params,
                                       params.encoder.precision), "encoder")


@dataclass
class _WorldInputs:
    """What one world's statistics read before scoring anything: its keys, embeddings, view sets and metadata."""

    world: str
    w: World
    gt_path: Path
    gt_meta: dict
    truth_keys: pa.Table
    encoder: dict
    truth_emb_all: pa.Table
    per_frame: bool
    entries: dict
    paths: dict[str, Path]
    metas: dict[str, dict]
    model_embs: dict[str, pa.Table]
    pairs: list
    layouts: dict
    bins: list[float]
    sets: dict
    skipped_views: Any


def _world_inputs(params: Params, world: str, rollouts: Path, features: Path) -> _WorldInputs:
    check_inputs(params, world, rollouts, features)
    H, N, sc = params.protocol.horizon, params.protocol.n_episodes, params.scoring
    w = build_world(world, dataclasses.asdict(params.worlds[world]))
    gt_path = rollouts / world / "ground_truth.parquet"
    gt_meta = read_metadata(gt_path)
    truth_keys = read_table(gt_path, columns=[c for c in pq.read_schema(gt_path).names if c != "frame"])
    versions = w.describe().get("versions")
    if versions is not None:  # an environment's frames depend on packages DVC does not track
        check_made_with(gt_path, gt_meta["world"].get("versions"), versions, f"the {world} world's packages")
    fe_dir = features / params.encoder.name / world
    encoder = read_metadata(fe_dir / "ground_truth.parquet")
    truth_emb_all = read_table(fe_dir / "ground_truth.parquet", columns=[*KEYS, "embedding"])
    # feature_mse is per frame: only for image encoders (a video encoder embeds clips).
    per_frame = encoder["clip"] is None
    entries = params.models[world].entries if world in params.models else {}
    paths = {name: rollouts / world / f"{name}.parquet" for name in entries}
    metas = {name: read_metadata(p) for name, p in paths.items()}
    model_embs = {name: read_table(fe_dir / f"{name}.parquet", columns=[*KEYS, "embedding"]) for name in entries}
    pairs = observed_pairs(w, truth_keys)
    layouts = {gt_path: block_layout(truth_keys),
               **{p: block_layout(read_table(p, columns=["regime", "plan", "sample"])) for p in paths.values()}}
    bins = action_bins(w, sc)
    linked = {name: m.get("borrowed_episodes") for name, m in metas.items()}
    sets, skipped_views = view_sets(truth_keys, truth_emb_all, model_embs, sc.views, not per_frame,
                                    N, H, sc.strata, bins, str(fe_dir), linked)
    return _WorldInputs(world, w, gt_path, gt_meta, truth_keys, encoder, truth_emb_all, per_frame, entries, paths,
                        metas, model_embs, pairs, layouts, bins, sets, skipped_views)


def _frame_rows(params: Params, inp: _WorldInputs, lpips_model: Any = None) -> WorldRows:
    """The frame-level rows (every paired, sample and counterfactual metric), one window of episodes at a time."""
    H, N = params.protocol.horizon, params.protocol.n_episodes
    out = WorldRows(encoder=inp.encoder)
    gt_path = inp.gt_path
    for lo, hi in episode_windows([gt_path, *inp.paths.values()], N):
        truth = read_episodes(gt_path, lo, hi)
        check_window(gt_path, truth, inp.layouts[gt_path], lo, hi)
        truth_emb = _window(inp.truth_emb_all, lo, hi) if inp.per_frame else None
        out.contributions.append(_at(truth_diversity(inp.world, truth, hi - lo, H, str(gt_path)), lo))
        for name, path in inp.paths.items():
            table = read_episodes(path, lo, hi)
            check_window(path, table, inp.layouts[path], lo, hi)
            _model_rows(out, inp.w, name, table, truth, truth_emb, _window(inp.model_embs[name], lo, hi),
                        H, inp.pairs, lo, hi - lo, str(path), lpips_model)
            del table
        del truth
    return out


def _finish(params: Params, inp: _WorldInputs, rollouts: Path, out: WorldRows, points: list[tuple]) -> WorldRows:
    """``out`` (the frame rows) completed: the distributional points (:func:`point_tasks`' results, in order),
    the dynamics layers and the world's protocol record."""
    metas = inp.metas
    models = {name: m["num_samples"] for name, m in metas.items()}
    with_state = [name for name, m in metas.items() if m["has_state"]]
    with_logp = [name for name, m in metas.items() if m.get("has_logp")]
    if inp.model_embs:
        pts, prdc_eps, out.kid_blocks = gather_points(points)
        out.distributional.append(pts)
        out.episodes.append(prdc_eps)
    dyn_meta = _dynamics_rows(out, inp.w, rollouts, list(inp.entries))
    out.record = _world_record(params, inp.w, pq.read_schema(inp.gt_path).field("frame").type.shape, inp.gt_meta,
                               dyn_meta, models, with_state, with_logp, inp.sets, inp.skipped_views)
    out.record["distributional"]["action_bins"] = inp.bins
    out.record["counterfactual_pairs"] = [list(p) for p in inp.pairs]
    return out


def world_rows(params: Params, world: str, rollouts: Path, features: Path, lpips_model: Any = None) -> WorldRows:
    """Every metric's long rows for one world, from its rollout and feature tables.

    The frames are read one window of episodes at a time (:func:`~wmeval.tables.episode_windows`: the truth's
    and every model's rows of a window together take at most ``WINDOW_BYTES``), so the working set does not
    grow with the number of episodes; the embeddings and the other columns are small and read whole."""
    inp = _world_inputs(params, world, rollouts, features)
    out = _frame_rows(params, inp, lpips_model)
    tasks = point_tasks(world, inp.sets, Settings.from_scoring(params.scoring)) if inp.model_embs else []
    return _finish(params, inp, rollouts, out, [t() for t in tasks])


def _nonempty(parts: list[pd.DataFrame]) -> list[pd.DataFrame]:
    return [p for p in parts if len(p)]


def _long_tables(rows: list[WorldRows]) -> dict[str, pd.DataFrame]:
    """``contributions``, ``episodes``, ``curves`` and ``kcurves`` from every world's rows."""
    parts = [p for r in rows for p in r.contributions]
    df = pd.concat(_nonempty(parts), ignore_index=True) if parts else pd.DataFrame()
    if df.empty or not (df.source != "ground_truth").any():
        raise WmevalError("statistics: no model rows to score; add models to the config")
    df = df.astype({"episode": "int64", "t": "int64", "value": "float64"})
    ep = episode_values(df).assign(unit="observation", denominator=1.0)
    rmse = ep[ep.metric == "state_mse"].assign(metric="state_rmse")
    psnr_pooled = ep[ep.metric == "pixel_mse"].assign(metric="psnr_pooled")
    seq_parts = [p for r in rows for p in r.sequences]
    seq = sequence_episode_values(pd.concat(seq_parts, ignore_index=True) if seq_parts else pd.DataFrame())
    extra_ep = [p for r in rows for p in r.episodes]
    episodes = pd.concat([ep, rmse, psnr_pooled, seq[seq.metric != "best_of_k_curve"].drop(columns="t"),
                          *_nonempty(extra_ep)], ignore_index=True)
    cv = curve_values(df).assign(condition="all", unit="observation", denominator=1.0)
    curves = pd.concat([cv, *_nonempty([p for r in rows for p in r.curves])], ignore_index=True)
    return {"contributions": df, "episodes": episodes[[c for c in COLUMNS if c != "t"]], "curves": curves[COLUMNS],
            "kcurves": seq[seq.metric == "best_of_k_curve"][COLUMNS]}


#: The observation protocol's fixed choices, recorded beside the scoring section.
SCORING_PROTOCOL = {
    "data_range": 1.0, "layout": "(H_img, W, C), channels last, frames decoded to [0, 1]",
    "psnr_cap_db": PSNR_CAP_DB,
    "ssim": {"window": "Gaussian, 11 taps", "sigma": 1.5, "K1": 0.01, "K2": 0.03,
             "covariance": "population", "border": "5-px border excluded (window inside the image)",
             "channels": "per channel, averaged", "reference": "skimage.metrics.structural_similarity"},
    "padding": "frames with valid = false are excluded; an episode with no valid frame has no value",
    "best_of_k": "per realized future, min over the model's first K samples of the open-loop sequence "
                 "MSE (nested pools), then mean over futures and plans; deterministic models have K = 1",
    "event_forecast": "share of the model's K samples whose final state has the event; reliability "
                      "bins are the distinct forecast values",
    "distributional": "open-loop predicted rows against all realized rows (t >= 1) of the same plans; "
                      "strata are plan conditions, crossed with episodes",
}
ENCODER_KEYS = ("encoder", "kind", "preprocessing", "weights_sha256", "comparable_to_published", "dim", "clip",
                "returns", "resolution", "frame_rate", "precision")


def _protocol_record(rows: dict[str, WorldRows], sc: ScoringConfig, lpips_record: dict | None) -> dict[str, Any]:
    encoder = list(rows.values())[-1].encoder if rows else None
    return {
        "worlds": {world: r.record for world, r in rows.items()},
        "encoder": {k: encoder.get(k, "fp32") if k == "precision" else encoder[k] for k in ENCODER_KEYS},
        "metrics": {m.name: {"higher_is_better": m.higher_is_better, "target": m.target, "unit": m.unit,
                             "layer": m.layer, "definition": m.definition, "aggregate": m.aggregate}
                    for m in REGISTRY.values()},
        "aggregation": "value per (episode, plan, t) = mean over (sample, realized future) pairs; "
                       "per episode: mean over valid steps within a plan, then plans weighted equally",
        "scoring": {**dataclasses.asdict(sc), **SCORING_PROTOCOL, "lpips_protocol": lpips_record},
    }


def compute_statistics(params: Params, rollouts: Path, features: Path, out: Path) -> None:
    """Write ``contributions``, ``episodes``, ``curves``, ``kcurves`` and ``distributional`` tables and
    ``protocol.json`` to ``out``.

    ``episodes`` holds one row per (world, source, metric, regime, condition, unit, episode)
    with ``value`` and ``denominator``; ``curves`` the same per horizon step ``t``; ``kcurves``
    the best-of-K curve with ``t`` holding K; ``distributional`` the point estimates of FD, KID
    and FD-infinity with their sample counts and flags (the bootstrap recomputes their replicates
    from the feature tables).
    """
    sc = params.scoring
    lpips_model, lpips_record = (None, None) if sc.lpips is None else load_lpips(
        sc.lpips, directory=params.encoder.weights_dir)
    # The built-in simulated worlds are independent, pure numpy, and their work splits in two that read nothing of
    # each other's: the frame scoring, and the distributional point estimates (FD, KID, PRDC on the embeddings, per
    # view and model). Those parts run in forked processes, the largest first (blobs: 8.5 s frames, 8.5 s points;
    # the pendulum 5.9 s and 2.4 s), and are assembled in the serial order: the same bytes as one world after
    # another (threads of one process waited for the GIL). Environments (their renderers start when built),
    # datasets, user worlds and a shared LPIPS module: one world after another, here, afterwards. Everything with
    # single-threaded BLAS: a threaded X^T X splits its sum over rows by the thread count, and FD's square roots
    # of near-zero eigenvalues turn those last bits into 1e-9 (measured on the tiny config's blob transitions),
    # so the bits would depend on the machine's cores.
    forked = [w for w in params.worlds if params.worlds[w].kind in BUILTIN_WORLDS and lpips_model is None]
    inputs = {world: _world_inputs(params, world, rollouts, features) for world in forked}
    cfg = Settings.from_scoring(params.scoring)
    tasks = {world: point_tasks(world, inp.sets, cfg) if inp.model_embs else [] for world, inp in inputs.items()}
    # Dispatched largest world first (the frames, then the points), so that the long parts start early.
    size = {world: len(inp.truth_emb_all) * (1 + len(inp.model_embs)) for world, inp in inputs.items()}
    order = sorted(forked, key=lambda world: -size[world])
    parts = [(world, -1) for world in order] + [(world, i) for world in order for i in range(len(tasks[world]))]

    def part(item: tuple[str, int]) -> Any:
        world, i = item                              # -1: the frames; else the i-th point task
        return _frame_rows(params, inputs[world]) if i < 0 else tasks[world][i]()

    done = dict(zip(parts, fork_map(part, parts, n_jobs=min(len(parts), usable_cores()))))
    rows = {}
    for world in params.worlds:
        if world in inputs:
            points = [done[world, i] for i in range(len(tasks[world]))]
            rows[world] = _finish(params, inputs[world], rollouts, done[world, -1], points)
        else:
            with threadpool_limits(limits=1, user_api="blas"):      # the forked parts' BLAS: the same bits anywhere
                rows[world] = world_rows(params, world, rollouts, features, lpips_model)
    tables = _long_tables(list(rows.values()))
    write_table(pa.Table.from_pandas(tables.pop("contributions"), preserve_index=False), out / "contributions.parquet")
    for name, d in tables.items():
        unknown = set(d.metric) - set(REGISTRY)
        if unknown:
            raise WmevalError(f"statistics: metrics {sorted(unknown)} are not in the metric registry")
        write_table(pa.Table.from_pandas(d.astype({"episode": "int64", "value": "float64",
                                                   "denominator": "float64"}), preserve_index=False),
                    out / f"{name}.parquet")
    points = [p for r in rows.values() for p in r.distributional]
    dist = pd.concat(points, ignore_index=True) if points else pd.DataFrame()
    write_table(pa.Table.from_pandas(dist, preserve_index=False), out / "distributional.parquet")
    write_table(kid_blocks_table([b for r in rows.values() for b in r.kid_blocks]), out / KID_BLOCKS_FILE)
    record = _protocol_record(rows, sc, lpips_record)
    (out / "protocol.json").write_text(json.dumps(record, indent=2, sort_keys=True, default=str))
