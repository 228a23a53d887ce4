"""The statistics stage: per-episode contributions of every metric, pooled and per stratum."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa

from wmeval.core.errors import WmevalError
from wmeval.encoders.lpips_backbone import load_lpips
from wmeval.estimators.distributional import Settings, point_estimates, view_sets
from wmeval.metrics import PSNR_CAP_DB, REGISTRY
from wmeval.statistics.dynamics_layers import (
    dynamics_contributions,
    task_signal_contributions,
)
from wmeval.statistics.observation import (
    frame_scores,
    nll_rows,
    sequence_episode_values,
    truth_diversity,
)
from wmeval.statistics.paired import contributions, curve_values, episode_values
from wmeval.tables import KEY_COLUMNS as KEYS
from wmeval.tables import LONG_COLUMNS as COLUMNS
from wmeval.tables import read_metadata, read_table, write_table
from wmeval.worlds import build_world


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


def compute_statistics(params, rollouts: Path, features: Path, out: Path) -> None:
    """Write ``contributions``, ``episodes``, ``curves``, ``kcurves`` and ``distributional`` tables and
    ``protocol.json`` to ``out``.

    ``episodes`` holds one row per (world, source, metric, regime, condition, unit, episode)
    with ``value`` and ``denominator``; ``curves`` the same per horizon step ``t``; ``kcurves``
    the best-of-K curve with ``t`` holding K; ``distributional`` the point estimates of FD, KID
    and FD-infinity with their sample counts and flags (the bootstrap recomputes their replicates
    from the feature tables).
    """
    H, N = params.protocol.horizon, params.protocol.n_episodes
    sc = params.scoring
    settings = Settings(strata_weights=sc.strata_weights, min_stratum_count=sc.min_stratum_count,
                        kid_subsets=sc.kid_subsets, kid_subset_size=sc.kid_subset_size,
                        fd_inf_points=sc.fd_inf_points, fd_inf_min_fraction=sc.fd_inf_min_fraction,
                        fd_inf_draws=sc.fd_inf_draws, prdc_k=sc.prdc_k, seed=sc.seed)
    lpips_model, lpips_record = None, None
    if sc.lpips is not None:
        lpips_model, lpips_record = load_lpips(sc.lpips, directory=params.encoder.weights_dir)
    metric_columns = {"state_mse": ("state", 1), "pixel_mse": ("frame", 3), "feature_mse": ("embedding", 1)}
    parts, extra_ep, extra_curve, seq_parts, dist_points, worlds, encoder = [], [], [], [], [], {}, None
    for world in params.worlds:
        w = build_world(world, dataclasses.asdict(params.worlds[world]))
        gt_path = rollouts / world / "ground_truth.parquet"
        truth, gt_meta = read_table(gt_path), read_metadata(gt_path)
        fe_dir = features / params.encoder.name / world
        fe_path = fe_dir / "ground_truth.parquet"
        encoder = read_metadata(fe_path)
        truth_emb_all = read_table(fe_path, columns=[*KEYS, "embedding"])
        # feature_mse is per frame: only for image encoders (a video encoder embeds clips).
        truth_emb = truth_emb_all if encoder["clip"] is None else None
        dyn_gt_path = rollouts / world / "dynamics" / "ground_truth.parquet"
        dyn_truth, dyn_meta = read_table(dyn_gt_path), read_metadata(dyn_gt_path)
        models, with_state, with_logp, model_embs = {}, [], [], {}
        entries = params.models[world].entries if world in params.models else {}
        dyn_rows = [dynamics_contributions(w, "ground_truth", dyn_truth, dyn_truth, dyn_meta, str(dyn_gt_path))]
        parts.append(truth_diversity(world, truth, N, H, str(gt_path)).to_pandas())
        for name in entries:
            path = rollouts / world / f"{name}.parquet"
            table, meta = read_table(path), read_metadata(path)
            model_embs[name] = read_table(fe_dir / f"{name}.parquet", columns=[*KEYS, "embedding"])
            emb = model_embs[name] if truth_emb is not None else None
            parts.append(contributions(world, name, table, truth, N, H, metric_columns, str(path), emb,
                                       truth_emb, w.state_delta).to_pandas())
            steps, seqs = frame_scores(w, name, table, truth, N, H, str(path), lpips_model=lpips_model)
            parts.append(steps.to_pandas())
            seq_parts.append(seqs.to_pandas())
            extra_ep.append(nll_rows(world, name, table, N, H, str(path)))
            extra_ep.append(task_signal_contributions(w, name, table, truth, N, H, str(path)))
            models[name] = meta["num_samples"]
            if meta["has_state"]:
                with_state.append(name)
            if meta.get("has_logp"):
                with_logp.append(name)
            if name not in dyn_meta["skipped"]:
                dpath = rollouts / world / "dynamics" / f"{name}.parquet"
                dyn_rows.append(dynamics_contributions(w, name, read_table(dpath), dyn_truth, dyn_meta, str(dpath)))
        sets, skipped_views = view_sets(truth, truth_emb_all, model_embs, sc.views, encoder["clip"] is not None,
                                        N, H, sc.strata, list(map(float, sc.action_bins)), str(fe_dir))
        if model_embs:
            pts, prdc_eps = point_estimates(world, sets, settings)
            dist_points.append(pts)
            extra_ep.append(prdc_eps)
        dyn_df = pd.concat(dyn_rows, ignore_index=True)
        extra_curve.append(dyn_df[dyn_df.t > 0])
        extra_ep.append(dyn_df[dyn_df.t == 0])
        extra_ep.append(_summaries(dyn_df[dyn_df.t > 0], dyn_meta["dynamics"]))
        dyn = dyn_meta["dynamics"]
        worlds[world] = {
            "n_episodes": N, "horizon": H, "plans": gt_meta["plans"],
            "teacher_forced_plan": params.protocol.teacher_forced_plan,
            "num_futures": gt_meta["num_futures"], "models": models, "models_with_state": with_state,
            "frame_shape": truth.column("frame").type.shape, "frame_dtype": gt_meta["frame_dtype"],
            "initial_states": w.initial_states_text, "world": gt_meta["world"],
            "baseline": params.models[world].baseline if world in params.models else None,
            "units": {"observation": N, "dynamics": dyn["n_episodes"], "control": dyn["control_episodes"]},
            "dynamics": {**dyn, "plans": dyn_meta["plans"], "counterfactual_pairs": dyn_meta["counterfactual_pairs"],
                         "tasks": dyn_meta["tasks"], "probes": dyn_meta["probes"], "skipped": dyn_meta["skipped"]},
            "reward": gt_meta["world"].get("reward"), "event": gt_meta["world"].get("event"),
            "outcome_event": getattr(w, "outcome_event_name", None),
            "nll": {"models": with_logp, "base_measure": w.nll_base_measure},
            "distributional": {
                "views": {v: {"dim": s.dim, "strata": s.strata, "n_real": int(len(s.reference.x))}
                          for v, s in sets.items()},
                "skipped_views": skipped_views,
            },
        }
    df = pd.concat([p for p in parts if len(p)], ignore_index=True) if parts else pd.DataFrame()
    if df.empty or not (df.source != "ground_truth").any():
        raise WmevalError("statistics: no model rows to score; add models to the config")
    df = df.astype({"episode": "int64", "t": "int64", "value": "float64"})
    write_table(pa.Table.from_pandas(df, preserve_index=False), out / "contributions.parquet")
    ep = episode_values(df).assign(unit="observation", denominator=1.0)
    rmse = ep[ep.metric == "state_mse"].assign(metric="state_rmse")
    psnr_pooled = ep[ep.metric == "pixel_mse"].assign(metric="psnr_pooled")
    seq = sequence_episode_values(pd.concat(seq_parts, ignore_index=True) if seq_parts else pd.DataFrame())
    kcurves = seq[seq.metric == "best_of_k_curve"]
    episodes = pd.concat([ep, rmse, psnr_pooled, seq[seq.metric != "best_of_k_curve"].drop(columns="t"),
                          *[e for e in extra_ep if len(e)]], ignore_index=True)
    cv = curve_values(df).assign(condition="all", unit="observation", denominator=1.0)
    curves = pd.concat([cv, *[c for c in extra_curve if len(c)]], ignore_index=True)
    episodes = episodes[[c for c in COLUMNS if c != "t"]]
    curves = curves[COLUMNS]
    for name, d in (("episodes", episodes), ("curves", curves), ("kcurves", kcurves[COLUMNS])):
        unknown = set(d.metric) - set(REGISTRY)
        if unknown:
            raise WmevalError(f"statistics: metrics {sorted(unknown)} are not in the metric registry")
        write_table(pa.Table.from_pandas(d.astype({"episode": "int64", "value": "float64",
                                                   "denominator": "float64"}), preserve_index=False),
                    out / f"{name}.parquet")
    dist = pd.concat(dist_points, ignore_index=True) if dist_points else pd.DataFrame()
    write_table(pa.Table.from_pandas(dist, preserve_index=False), out / "distributional.parquet")
    record = {
        "worlds": worlds,
        "encoder": {k: encoder[k] for k in ("encoder", "kind", "preprocessing", "weights_sha256",
                                            "comparable_to_published", "dim", "clip", "returns",
                                            "resolution", "frame_rate")},
        "metrics": {m.name: {"higher_is_better": m.higher_is_better, "target": m.target, "unit": m.unit,
                             "layer": m.layer, "definition": m.definition, "aggregate": m.aggregate}
                    for m in REGISTRY.values()},
        "aggregation": "value per (episode, plan, t) = mean over (sample, realized future) pairs; "
                       "per episode: mean over valid steps within a plan, then plans weighted equally",
        "scoring": {
            **dataclasses.asdict(sc),
            "data_range": 1.0, "layout": "(H_img, W, C), channels last, frames decoded to [0, 1]",
            "psnr_cap_db": PSNR_CAP_DB,
            "ssim": {"window": "Gaussian, 11 taps", "sigma": 1.5, "K1": 0.01, "K2": 0.03,
                     "covariance": "population", "border": "5-px border excluded (window inside the image)",
                     "channels": "per channel, averaged", "reference": "skimage.metrics.structural_similarity"},
            "lpips_protocol": lpips_record,
            "padding": "frames with valid = false are excluded; an episode with no valid frame has no value",
            "best_of_k": "per realized future, min over the model's first K samples of the open-loop sequence "
                         "MSE (nested pools), then mean over futures and plans; deterministic models have K = 1",
            "event_forecast": "share of the model's K samples whose final state has the event; reliability "
                              "bins are the distinct forecast values",
            "distributional": "open-loop predicted rows against all realized rows (t >= 1) of the same plans; "
                              "strata are plan conditions, crossed with episodes",
        },
    }
    (out / "protocol.json").write_text(json.dumps(record, indent=2, sort_keys=True, default=str))
