"""Render the scorecard (Markdown) from bootstrap intervals and the protocol record."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .metrics import REGISTRY

REGIME_LABEL = {"teacher_forced": "one-step (teacher-forced)", "open_loop": "open-loop"}


def fmt(x: float) -> str:
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000 or a < 1e-3:
        return f"{x:.3e}"
    return f"{x:.4g}"


def cell(row: pd.Series) -> str:
    return f"{fmt(row.point)} [{fmt(row.low)}, {fmt(row.high)}]"


def world_table(iv: pd.DataFrame, models: list[str]) -> str:
    """Markdown table: rows models, columns (regime, metric); pooled conditions."""
    iv = iv[iv.condition == "all"]
    cols = [(r, m) for r in ("teacher_forced", "open_loop") for m in REGISTRY if ((iv.regime == r) & (iv.metric == m)).any()]
    head = ["model"] + [f"{REGIME_LABEL[r]} {m} {'↑' if REGISTRY[m].higher_is_better else '↓'}" for r, m in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for src in models:
        cells = [f"`{src}`"]
        for r, m in cols:
            sel = iv[(iv.source == src) & (iv.regime == r) & (iv.metric == m)]
            cells.append(cell(sel.iloc[0]) if len(sel) else "n/a (no such output)")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def condition_table(iv: pd.DataFrame, models: list[str], metric: str, regime: str) -> str:
    iv = iv[(iv.metric == metric) & (iv.regime == regime) & (iv.condition != "all")]
    conds = sorted(iv.condition.unique())
    if not conds:
        return ""
    head = ["model"] + [f"condition `{c}`" for c in conds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for src in models:
        cells = [f"`{src}`"]
        for c in conds:
            sel = iv[(iv.source == src) & (iv.condition == c)]
            cells.append(cell(sel.iloc[0]) if len(sel) else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(intervals: pd.DataFrame, protocol: dict[str, Any]) -> str:
    boot = protocol["bootstrap"]
    out = ["# wmeval scorecard", "",
           f"Every number is a point estimate with its {boot['confidence_level']:.0%} "
           f"{boot['method']} bootstrap interval over evaluation episodes "
           f"(trajectory-clustered: the resampling unit is the episode; B = {boot['n_resamples']}, "
           f"seed {boot['seed']}; the same resampled episodes for every model of a world). "
           "↓: lower is better.", ""]
    for world, wp in protocol["worlds"].items():
        iv = intervals[intervals.world == world]
        models = list(wp["models"])
        out += [f"## {world}", "", world_table(iv, models), ""]
        ct = condition_table(iv, models, "pixel_mse", "open_loop")
        if ct:
            out += ["Open-loop pixel_mse per condition (stratum):", "", ct, ""]
        out += ["**Protocol**", "",
                f"- episodes N = {wp['n_episodes']} (initial states: {wp['initial_states']}), horizon H = {wp['horizon']}",
                f"- plans: " + ", ".join(f"`{p}` (condition `{c}`)" for p, c in wp["plans"].items())
                + "; open-loop values weight plans equally, steps averaged within a plan",
                f"- teacher-forced: along realization 0 of `{wp['teacher_forced_plan']}`, steps 1..H",
                f"- realized futures M = {wp['num_futures']} per plan (open-loop error is averaged over "
                f"every (sample, future) pair); samples K: "
                + ", ".join(f"`{m}` {k}" for m, k in wp["models"].items()),
                f"- frames {wp['frame_shape']} stored as {wp['frame_dtype']}, data range L = 1",
                f"- state metrics only for models that output states ("
                + ", ".join(f"`{m}`" for m in wp["models_with_state"]) + ")",
                ""]
    enc = protocol["encoder"]
    out += ["## Metrics", ""]
    for m in REGISTRY.values():
        out.append(f"- `{m.name}` ({m.layer}, {'higher' if m.higher_is_better else 'lower'} is better, "
                   f"{m.unit}): {m.definition}")
    out += ["", f"`feature_mse` uses encoder `{enc['encoder']}` ({enc['kind']}; preprocessing "
            f"{enc['preprocessing']}); "
            + ("not comparable to published FID/FVD." if not enc["comparable_to_published"] else ""), ""]
    return "\n".join(out)
