"""Render the scorecard (Markdown) from bootstrap intervals and the protocol record.

Per world: the layer tables (observation, dynamics and control, task signals), the
probe calibration on the true world, rollout error at a few horizons, and the
cross-layer ranking. Every number is ``point [low, high]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .metrics import REGISTRY

REGIME_LABEL = {"teacher_forced": "one-step", "open_loop": "open-loop", "closed_loop": "closed-loop",
                "probe": "probe"}
Column = tuple[str, str, str, str]  # label, metric, regime, condition


def fmt(x: float) -> str:
    if x is not None and np.isposinf(x):
        return "∞"
    if x is None or not np.isfinite(x):
        return "undefined"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000 or a < 1e-3:
        return f"{x:.2e}"
    return f"{x:.3g}"


def cell(row: pd.Series | None) -> str:
    if row is None:
        return "n/a"
    if np.isposinf(row.point):
        return "∞ (zero mass on a realized outcome)"
    if not np.isfinite(row.point):
        return "undefined"
    text = f"{fmt(row.point)} [{fmt(row.low)}, {fmt(row.high)}]"
    undefined = getattr(row, "undefined_replicates", 0.0)
    if undefined and undefined > 0:
        text += f" ({undefined:.0%} of replicates undefined)"
    return text


def lookup(iv: pd.DataFrame, source: str, metric: str, regime: str, condition: str) -> pd.Series | None:
    sel = iv[(iv.source == source) & (iv.metric == metric) & (iv.regime == regime) & (iv.condition == condition)]
    return sel.iloc[0] if len(sel) else None


def table(iv: pd.DataFrame, rows: list[str], columns: list[Column]) -> str:
    head = ["model"] + [f"{label} {REGISTRY[m].arrow}" for label, m, _, _ in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for src in rows:
        lines.append("| " + " | ".join([f"`{src}`"] + [cell(lookup(iv, src, m, r, c)) for _, m, r, c in columns]) + " |")
    return "\n".join(lines)


def present(iv: pd.DataFrame, columns: list[Column]) -> list[Column]:
    return [c for c in columns if ((iv.metric == c[1]) & (iv.regime == c[2]) & (iv.condition == c[3])).any()]


def world_columns(iv: pd.DataFrame, wp: dict[str, Any]) -> dict[str, list[Column]]:
    dyn = wp["dynamics"]
    H, cf = dyn["horizon"], dyn["counterfactual_horizon"]
    pairs = [f"{a} vs {b}" for a, b in dyn["counterfactual_pairs"]]
    observation = [
        ("one-step state RMSE", "state_rmse", "teacher_forced", "all"),
        ("one-step pixel MSE", "pixel_mse", "teacher_forced", "all"),
        (f"open-loop state RMSE (H={wp['horizon']})", "state_rmse", "open_loop", "all"),
        (f"open-loop pixel MSE (H={wp['horizon']})", "pixel_mse", "open_loop", "all"),
        ("open-loop feature MSE", "feature_mse", "open_loop", "all"),
    ]
    dynamics = [
        (f"rollout RMSE @{H}, random actions", "rollout_state_rmse", "open_loop", f"random @t={H}"),
        (f"rollout RMSE @{H}, planner's actions", "rollout_state_rmse", "open_loop", f"planner @t={H}"),
        *[(f"action sensitivity ({p})", "action_sensitivity", "open_loop", p) for p in pairs],
        *[(f"counterfactual cosine @{cf}", "counterfactual_cosine", "open_loop", f"{p} @t={cf}") for p in pairs],
        *[(f"counterfactual gap @{cf}", "counterfactual_gap", "open_loop", f"{p} @t={cf}") for p in pairs],
        *[(f"MPC cost: {t}", "control_cost", "closed_loop", t) for t in dyn["tasks"]],
    ]
    task = [("reward MSE", "reward_mse", "open_loop", "all"), ("event precision", "event_precision", "open_loop", "all"),
            ("event recall", "event_recall", "open_loop", "all"), ("peak time offset", "peak_time_offset", "open_loop", "all")]
    image = [("one-step PSNR (frame mean), dB", "psnr", "teacher_forced", "all"),
             ("one-step PSNR (pooled MSE), dB", "psnr_pooled", "teacher_forced", "all"),
             ("one-step PSNR gap", "psnr_gap", "teacher_forced", "all"),
             ("one-step SSIM", "ssim", "teacher_forced", "all"),
             ("one-step LPIPS", "lpips", "teacher_forced", "all"),
             ("open-loop PSNR (frame mean)", "psnr", "open_loop", "all"),
             ("open-loop PSNR (pooled)", "psnr_pooled", "open_loop", "all"),
             ("open-loop SSIM", "ssim", "open_loop", "all"),
             ("open-loop LPIPS", "lpips", "open_loop", "all")]
    stochastic = [("single-sample MSE", "single_sample_mse", "open_loop", "all"),
                  ("mean-over-samples MSE", "pixel_mse", "open_loop", "all"),
                  ("best-of-K MSE (oracle)", "best_of_k_mse", "open_loop", "all"),
                  ("sample diversity", "sample_diversity", "open_loop", "all"),
                  ("NLL, nats/step", "nll", "teacher_forced", "all"),
                  ("event Brier", "event_brier", "open_loop", "all")]
    distributional = []
    for view in wp.get("distributional", {}).get("views", {}):
        distributional += [(f"{view}: FD pooled", "fd", "open_loop", f"{view}:pooled"),
                           (f"{view}: FD stratified", "fd_stratified", "open_loop", f"{view}:uniform"),
                           (f"{view}: FD stratified", "fd_stratified", "open_loop", f"{view}:empirical"),
                           (f"{view}: FD bias-corrected", "fd_bias_corrected", "open_loop", f"{view}:pooled"),
                           (f"{view}: FD-infinity", "fd_infinity", "open_loop", f"{view}:pooled"),
                           (f"{view}: KID", "kid", "open_loop", f"{view}:pooled"),
                           (f"{view}: precision", "precision", "open_loop", f"{view}:pooled"),
                           (f"{view}: recall", "recall", "open_loop", f"{view}:pooled"),
                           (f"{view}: density", "density", "open_loop", f"{view}:pooled"),
                           (f"{view}: coverage", "coverage", "open_loop", f"{view}:pooled")]
    return {"observation": present(iv, observation), "dynamics": present(iv, dynamics), "task": present(iv, task),
            "image": present(iv, image), "stochastic": present(iv, stochastic),
            "distributional": present(iv, distributional)}


def strata_table(iv: pd.DataFrame, models: list[str], wp: dict[str, Any]) -> str:
    """FD per stratum beside the pooled and stratified values, per view."""
    out = []
    for view, vd in wp.get("distributional", {}).get("views", {}).items():
        cols = [("pooled", "fd", "open_loop", f"{view}:pooled")]
        cols += [(f"`{s}`", "fd", "open_loop", f"{view}:{s}") for s in vd["strata"]]
        cols += [("stratified", "fd_stratified", "open_loop", f"{view}:uniform"),
                 ("stratified", "fd_stratified", "open_loop", f"{view}:empirical")]
        cols = present(iv, cols)
        if cols:
            out += [f"FD in the `{view}` view, pooled and per stratum (d = {vd['dim']}, {vd['n_real']} real rows):", "",
                    table(iv, models, cols), ""]
    return "\n".join(out)


def kcurve_table(kv: pd.DataFrame, models: list[str]) -> str:
    if kv is None or kv.empty:
        return ""
    ks = sorted(set(kv.k))
    lines = ["Best-of-K sequence MSE over nested pools (oracle selection; cannot increase with K) ↓:", "",
             "| model | " + " | ".join(f"K={k}" for k in ks) + " |", "|" + "---|" * (len(ks) + 1)]
    for m in models:
        sel = kv[kv.source == m]
        if sel.empty:
            continue
        lines.append(f"| `{m}` | " + " | ".join(cell(sel[sel.k == k].iloc[0]) if (sel.k == k).any() else "–"
                                              for k in ks) + " |")
    return "\n".join(lines) + "\n"


def reliability_table(iv: pd.DataFrame, models: list[str], wp: dict[str, Any]) -> str:
    rel = iv[(iv.metric == "event_frequency")]
    if rel.empty:
        return ""
    lines = [f"Reliability of the event \"{wp.get('outcome_event')}\" (forecast = share of K samples; "
             "observed = frequency among the realized futures of the forecasts in the bin):", "",
             "| model | forecast bin | mean forecast | observed frequency |", "|---|---|---|---|"]
    for m in models:
        for cond in sorted(set(rel[rel.source == m].condition)):
            f = lookup(iv, m, "event_forecast", "open_loop", cond)
            o = lookup(iv, m, "event_frequency", "open_loop", cond)
            lines.append(f"| `{m}` | {cond} | {cell(f)} | {cell(o)} |")
    return "\n".join(lines) + "\n"


def probe_rows(iv: pd.DataFrame, wp: dict[str, Any]) -> tuple[str, list[Column]]:
    """Calibration table of every probe window on the true world; the calibrated windows as columns."""
    dyn = wp["dynamics"]
    lines, calibrated = [], []
    for probe in dyn["probes"]:
        for w in dyn["probe_windows"]:
            cond = f"{probe} w={w}"
            truth = lookup(iv, "ground_truth", "probe_flag_rate", "probe", cond)
            if truth is None:
                continue
            ok = truth.high <= dyn["probe_max_true_rate"]
            if ok:
                calibrated.append((f"probe {probe}, w={w}", "probe_flag_rate", "probe", cond))
            lines.append(f"| `{probe}` | {w} | {cell(truth)} | "
                         + ("calibrated: used to judge models" if ok else
                            f"**miscalibrated** (flags the true world above {dyn['probe_max_true_rate']}): not used") + " |")
    if not lines:
        return "", []
    head = "| probe | window w | true-world flag rate | verdict |\n|---|---|---|---|\n"
    return head + "\n".join(lines), calibrated


def curve_table(cv: pd.DataFrame, models: list[str], wp: dict[str, Any]) -> str:
    """Curves at a few horizons: rollout error (random and planner's actions) and counterfactuals."""
    H = wp["dynamics"]["horizon"]
    ts = sorted({t for t in (1, 5, 10, 20, H) if t <= H})
    specs = [("rollout_state_rmse", "random", "Open-loop state RMSE by horizon, random actions"),
             ("rollout_state_rmse", "planner", "Open-loop state RMSE by horizon, the planner's actions")]
    for a, b in wp["dynamics"]["counterfactual_pairs"]:
        specs += [("counterfactual_cosine", f"{a} vs {b}", f"Counterfactual cosine by horizon ({a} vs {b})"),
                  ("counterfactual_gap", f"{a} vs {b}", f"Counterfactual gap by horizon ({a} vs {b})")]
    lines = []
    cf = wp["dynamics"]["counterfactual_horizon"]
    for metric, cond, title in specs:
        sel = cv[(cv.metric == metric) & (cv.condition == cond)]
        if metric.startswith("counterfactual"):
            # Beyond the declared counterfactual horizon a wrapping world (the blob torus) aliases.
            sel = sel[sel.t <= cf]
        if sel.empty:
            continue
        t_shown = [t for t in ts if t in set(sel.t)]
        lines += [f"{title} {REGISTRY[metric].arrow}:", "",
                  "| model | " + " | ".join(f"t={t}" for t in t_shown) + " |", "|" + "---|" * (len(t_shown) + 1)]
        for m in models:
            cells = []
            for t in t_shown:
                r = sel[(sel.source == m) & (sel.t == t)]
                cells.append(cell(r.iloc[0]) if len(r) else "n/a")
            lines.append(f"| `{m}` | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def ranking(iv: pd.DataFrame, models: list[str], columns: list[Column]) -> str:
    """Rank of each model (1 = best, by point estimate) in each layer's headline metric."""
    ranks: dict[str, list[str]] = {m: [] for m in models}
    used = []
    for label, metric, regime, cond in columns:
        info = REGISTRY[metric]
        vals = {m: lookup(iv, m, metric, regime, cond) for m in models}
        bad = {m: info.badness(r.point) for m, r in vals.items() if r is not None and np.isfinite(r.point)}
        if len(bad) < 2:
            continue
        used.append(label)
        for m in models:
            if m not in bad:
                ranks[m].append("–")
                continue
            r = 1 + sum(b < bad[m] for b in bad.values())
            row = vals[m]
            lo, hi = getattr(row, "rank_low", np.nan), getattr(row, "rank_high", np.nan)
            ranks[m].append(f"{r} [{lo:.0f}–{hi:.0f}]" if np.isfinite(lo) and np.isfinite(hi) else str(r))
    if not used:
        return ""
    lines = ["| model | " + " | ".join(used) + " |", "|" + "---|" * (len(used) + 1)]
    for m in models:
        r = ranks[m]
        numeric = {x.split(" ")[0] for x in r if x != "–"}
        flag = " (rank changes)" if len(numeric) > 1 else ""
        lines.append(f"| `{m}`{flag} | " + " | ".join(r) + " |")
    return "\n".join(lines)


def baseline_table(iv: pd.DataFrame, models: list[str], columns: list[Column], baseline: str) -> str:
    """Paired differences to the baseline with their intervals, and P(better than the baseline)."""
    others = [m for m in models if m != baseline]
    head = ["model"] + [label for label, *_ in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in others:
        cells = [f"`{m}`"]
        for _, metric, regime, cond in columns:
            r = lookup(iv, m, metric, regime, cond)
            if r is None or not np.isfinite(r.diff_point):
                cells.append("n/a")
            else:
                cells.append(f"{fmt(r.diff_point)} [{fmt(r.diff_low)}, {fmt(r.diff_high)}], P(better) {r.p_better:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(intervals: pd.DataFrame, protocol: dict[str, Any], curves: pd.DataFrame | None = None,
                    kcurves: pd.DataFrame | None = None) -> str:
    boot = protocol["bootstrap"]
    out = ["# wmeval scorecard", "",
           f"Every number is a point estimate with its {boot['confidence_level']:.0%} "
           f"{boot['method']} bootstrap interval (B = {boot['n_resamples']}, seed {boot['seed']}). "
           "Intervals resample episodes, the independent unit (observation, dynamics or control episodes, "
           "as the protocol says), with the same resampled episodes for every model of a world (paired). "
           "↓ lower is better, ↑ higher is better, →1 closest to 1 is best. `ground_truth` rows are "
           "the true world scored by the same code: a reference, not a competitor.", ""]
    for world, wp in protocol["worlds"].items():
        iv = intervals[intervals.world == world]
        models = list(wp["models"])
        cols = world_columns(iv, wp)
        probe_md, calibrated = probe_rows(iv, wp)
        dyn = wp["dynamics"]
        out += [f"## {world}", ""]
        rank_cols = [c for c in cols["observation"] if c[1] in ("state_rmse", "pixel_mse")] \
            + [c for c in cols["distributional"] if c[1] == "fd_stratified" and c[3].startswith("transition")] \
            + [c for c in cols["dynamics"] if c[1] != "counterfactual_cosine"] + calibrated \
            + [c for c in cols["task"] if c[1] == "reward_mse"]
        rk = ranking(iv, models, rank_cols)
        if rk:
            out += ["### Cross-layer ranking", "",
                    "Rank by point estimate in each layer's headline metric (1 = best; ties share a rank), "
                    "with the 95% interval of the model's rank over the paired bootstrap replicates "
                    "in brackets. A model that wins every column is rare; the column it loses tells you "
                    "what to fix.", "", rk, ""]
        base = wp.get("baseline")
        if base and rk:
            out += [f"Paired differences to the baseline `{base}` (model minus baseline, same resampled "
                    "episodes) and the share of bootstrap replicates in which the model is better:", "",
                    baseline_table(iv, models, rank_cols, base), ""]
        out += ["### Observation layers", "", table(iv, models, cols["observation"]), ""]
        cond_cols = [(f"`{c}`", "pixel_mse", "open_loop", c) for c in sorted(set(wp["plans"].values()))]
        out += ["Open-loop pixel MSE per condition (stratum):", "", table(iv, models, present(iv, cond_cols)), ""]
        if cols["image"]:
            out += ["### Paired image metrics", "",
                    "PSNR in both conventions (mean of per-frame PSNR; PSNR of the pooled MSE) and their gap "
                    "10 log10(AM/GM) of the frame MSEs; an exact match counts as "
                    f"{protocol.get('scoring', {}).get('psnr_cap_db', 100):g} dB. SSIM: Gaussian window 11, "
                    "sigma 1.5, L = 1.", "", table(iv, models, cols["image"]), ""]
        if cols["stochastic"]:
            nll = wp.get("nll", {})
            out += ["### Stochastic futures", "",
                    "Best-of-K picks, per realized future, the closest of the model's K samples: an oracle "
                    "diagnostic, not a deployable rule. Diversity is a spread, not coverage (compare with "
                    f"`ground_truth`). NLL base measure: {nll.get('base_measure', 'n/a')}.", "",
                    table(iv, ["ground_truth", *models], cols["stochastic"]), "",
                    kcurve_table(kcurves[kcurves.world == world] if kcurves is not None else None, models),
                    reliability_table(iv, models, wp)]
        if cols["distributional"]:
            dp = wp.get("distributional", {})
            out += ["### Distributional metrics", "",
                    "`frame`: predicted frames against realized frames (the published FID construction, blind "
                    "to which history produced which frame). `transition`: each frame joined with the previous "
                    "one, the motion an action caused. Stratified FD: within each stratum, then weighted. The "
                    "FD interval is for the plug-in estimator, which is biased at finite N; the bias-corrected "
                    "row carries the basic interval and FD-infinity the replicates' spread centred on it. Flagged strata (too few rows, or n <= d) are "
                    "kept and marked." + (f" Not built: {dp['skipped_views']}." if dp.get("skipped_views") else ""),
                    "", table(iv, models, cols["distributional"]), "", strata_table(iv, models, wp)]
        if cols["dynamics"]:
            dyn_models = ["ground_truth"] + [m for m in models if m not in dyn["skipped"]]
            out += ["### Dynamics and control layers", "", table(iv, dyn_models, cols["dynamics"] + calibrated), ""]
            if curves is not None:
                out += [curve_table(curves[curves.world == world], dyn_models[1:], wp)]
        if probe_md:
            out += ["### Physics probes, calibrated on the true world first", "", probe_md, ""]
        if cols["task"]:
            out += ["### Task signals", "", f"Reward: {wp['reward']}; event: {wp['event']}. "
                    "Read from each model's open-loop prediction.", "", table(iv, models, cols["task"]), ""]
        out += ["### Protocol", "",
                f"- observation episodes N = {wp['n_episodes']} (initial states: {wp['initial_states']}), "
                f"horizon H = {wp['horizon']}",
                "- plans: " + ", ".join(f"`{p}` (condition `{c}`)" for p, c in wp["plans"].items())
                + "; open-loop values weight plans equally, steps averaged within a plan",
                f"- teacher-forced (one-step): along realization 0 of `{wp['teacher_forced_plan']}`, steps 1..H",
                f"- realized futures M = {wp['num_futures']} per plan (errors average every (sample, future) "
                f"pair); samples K: " + ", ".join(f"`{m}` {k}" for m, k in wp["models"].items()),
                f"- frames {wp['frame_shape']} stored as {wp['frame_dtype']}, data range L = 1; state metrics "
                "only for models that output states (" + ", ".join(f"`{m}`" for m in wp["models_with_state"]) + ")",
                f"- dynamics: {dyn['n_episodes']} episodes, rollouts of {dyn['horizon']} steps "
                f"({dyn['n_random_plans']} random plan(s), the counterfactual pairs "
                + ", ".join(f"`{a}` / `{b}`" for a, b in dyn["counterfactual_pairs"])
                + f", and the actions the planner picks with each model on `{next(iter(dyn['tasks']), 'n/a')}`)",
                f"- planner: random shooting, {dyn['n_plans']} plans of {dyn['plan_horizon']} steps, replanned every "
                f"step, acting in the real world; control: {dyn['control_episodes']} episodes of "
                f"{dyn['control_steps']} steps per task; tasks: "
                + "; ".join(f"`{t}`: {d['description']}" for t, d in dyn["tasks"].items()),
                f"- probes: {dyn['probe_horizon']} zero-action steps, windows {dyn['probe_windows']}, "
                f"tolerance {dyn['probe_tolerance']}",
                ]
        for m, why in dyn["skipped"].items():
            out.append(f"- `{m}` has no dynamics layers: {why}")
        out.append("")
    enc = protocol["encoder"]
    out += ["## Metrics", ""]
    for m in REGISTRY.values():
        direction = {True: "higher is better", False: "lower is better", None: f"closest to {m.target} is best"}
        out.append(f"- `{m.name}` ({m.layer}, {direction[m.higher_is_better]}, {m.unit}, "
                   f"aggregate {m.aggregate}): {m.definition}")
    label = "" if enc["comparable_to_published"] else " Not comparable to published FID/FVD."
    if enc.get("clip"):
        out += ["", f"Encoder `{enc['encoder']}` ({enc['kind']}, {enc.get('returns')}) embeds clips {enc['clip']} "
                f"(preprocessing {enc['preprocessing']}); the clip embeddings are in data/features/, and "
                f"`feature_mse` (a per-frame metric) is not computed for a video encoder.{label}", ""]
    else:
        out += ["", f"`feature_mse` uses encoder `{enc['encoder']}` ({enc['kind']}; preprocessing "
                f"{enc['preprocessing']}).{label}", ""]
    return "\n".join(out)
