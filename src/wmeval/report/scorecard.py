"""Render the scorecard from the bootstrap stage's outputs: one document, two renderings.

The sections are built once as a small document model (headings, paragraphs, tables of
``point [low, high]`` cells, figures) and rendered to Markdown (``reports/scorecard.md``, fit
for a README or a paper appendix) and to one self-contained HTML page
(``reports/scorecard.html``: inline CSS and SVG, nothing fetched). Figures are HTML-only; their
data goes to ``reports/plots/`` for ``dvc plots``.

Per world: an at-a-glance table (the best model per layer and whether its interval separates
it), the cross-layer ranking, the layer tables, curves and diagnostics, protocol cards for
every metric, and a provenance appendix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

import wmeval.report.figures as figures
from wmeval.estimators.resample import BIAS_CHECK_LIMIT, STUDENTIZE_LINEAR_SHARE
from wmeval.metrics import REGISTRY, Shown
from wmeval.metrics.registry import near_equal
from wmeval.rendering.document import (
    OPEN_AT_ZERO,
    Doc,
    Table,
    flatten,
    inline,
    slug,
    to_html,
    to_markdown,
)
from wmeval.rendering.htmlpage import deferred_figure, deferred_figures, esc
from wmeval.report.cards import REGIME_LABEL, protocol_cards
from wmeval.report.human import human_section

Column = tuple[str, str, str, str]  # label, metric, regime, condition


# ----------------------------------------------------------------------------- cells and lookups


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
    if getattr(row, "bias_check", None) == "failed":
        return f"{fmt(row.point)} (no interval: the bias correction fails its check ‡)"
    # A lower end of the smallest positive double: the permutation test took 0 out (the interval is open at 0).
    opened = 0 < row.low < OPEN_AT_ZERO
    text = f"{fmt(row.point)} {'(0' if opened else f'[{fmt(row.low)}'}, {fmt(row.high)}]"
    # The test rejected 0 for an interval lying at or below 0: kept as the bootstrap gave it (with_zero_test).
    p, level = getattr(row, "p_value", np.nan), getattr(row, "confidence_level", np.nan)
    rejected_below = (np.isfinite(p) and np.isfinite(level) and p <= round(1.0 - level, 12)
                      and np.isfinite(row.high) and row.high <= 0)
    if row.point <= 0 and (opened or rejected_below):
        text += " §"
    elif np.isfinite(row.low) and np.isfinite(row.high) and not row.low <= row.point <= row.high:
        text += " †"
    undefined = getattr(row, "undefined_replicates", 0.0)
    if undefined and undefined > 0:
        text += f" ({'<1%' if undefined < 0.01 else f'{undefined:.0%}'} of replicates undefined)"
    return text


OUTSIDE_NOTE = ("† The point lies outside its percentile interval: the replicates of a biased plug-in estimator "
                "(FD: resampled episodes repeat rows, which inflates it) sit beside the point. The interval is "
                "the plug-in's; the bias-corrected FD carries the boundary interval, around the corrected value, "
                "with 0 put in or taken out as a permutation test of FD = 0 decides (a sign flip: each (plan, "
                "episode) trades its realized futures and the model's samples between the sides or not, reweighted "
                "so that each side keeps the group's weight; `p_value` in intervals.csv): an interval written (0, x] "
                "had its lower end at or below 0 raised by that test. § The bias-corrected estimate "
                "is at or below 0 while that test excludes 0: the jackknife's correction took out more than the "
                "difference the test sees (an interval lying at or below 0 is then kept as the bootstrap gave it, "
                "since no interval agrees with both). "
                "‡ Where the jackknife's correction fails its two-scale check (repeated on halves of the episodes, "
                f"it leaves a bias above {BIAS_CHECK_LIMIT} standard deviations of the replicates and twice its own "
                "standard error: too few independent rows for the "
                "dimension), the bias-corrected FD keeps its value but has no interval, paired difference, "
                "P(better) or rank interval, and the other models are ranked among themselves.")


#: Recent intervals tables' row indexes, ``id -> (table, {(source, metric, regime, condition): first row})``:
#: the scorecard looks up thousands of cells (a boolean filter over the whole table each took 4.9 of the
#: report stage's 25 s).
_INDEXES: dict[int, tuple[pd.DataFrame, dict[tuple, int]]] = {}


def lookup(iv: pd.DataFrame, source: str, metric: str, regime: str, condition: str) -> pd.Series | None:
    """The first row of ``iv`` with these keys, or None."""
    hit = _INDEXES.get(id(iv))
    if hit is None or hit[0] is not iv or len(hit[1]) > len(iv):
        index: dict[tuple, int] = {}
        for i, key in enumerate(zip(iv.source, iv.metric, iv.regime, iv.condition)):
            index.setdefault(key, i)
        if len(_INDEXES) >= 8:
            _INDEXES.pop(next(iter(_INDEXES)))
        hit = _INDEXES[id(iv)] = (iv, index)
    i = hit[1].get((source, metric, regime, condition))
    return None if i is None else iv.iloc[i]


def _unchecked_models(iv: pd.DataFrame, models: list[str], metric: str, regime: str, condition: str) -> list[str]:
    """The models whose bias-corrected value failed its two-scale check in this column: ranked among the others
    they are not, so no model is called separated beside them."""
    rows = [(m, lookup(iv, m, metric, regime, condition)) for m in models]
    return [m for m, r in rows if r is not None and r.get("bias_check") == "failed"]


def separated_best(iv: pd.DataFrame, models: list[str], metric: str, regime: str, condition: str) -> str | None:
    """The model ranked first with a rank interval of exactly [1, 1] (paired replicates), else None."""
    if not REGISTRY[metric].ranked or _unchecked_models(iv, models, metric, regime, condition):
        return None
    for m in models:
        r = lookup(iv, m, metric, regime, condition)
        if r is not None and r.get("rank") == 1 and r.get("rank_low") == 1 and r.get("rank_high") == 1:
            return m
    return None


def card_id(world: str, metric: str, regime: str) -> str:
    return slug(f"card {world} {metric} {regime}")


def metric_table(iv: pd.DataFrame, rows: list[str], columns: list[Column]) -> Table:
    """Models by metrics; the best of a column is marked only when its rank interval is [1, 1]."""
    head = ["model"] + [f"{label} {REGISTRY[m].arrow}" for label, m, _, _ in columns]
    best = [separated_best(iv, rows, m, r, c) for _, m, r, c in columns]
    out, cls = [], []
    for src in rows:
        out.append([f"`{src}`"] + [cell(lookup(iv, src, m, r, c)) for _, m, r, c in columns])
        cls.append([""] + ["num best" if b == src else "num" for b in best])
    return Table(head, out, cls)


def present(iv: pd.DataFrame, columns: list[Column]) -> list[Column]:
    return [c for c in columns if ((iv.metric == c[1]) & (iv.regime == c[2]) & (iv.condition == c[3])).any()]


#: The layer tables of a world's sections, and how each orders its columns beyond registry order.
SECTIONS = {"observation": "regime", "dynamics": None, "task": None, "image": "regime", "stochastic": None,
            "distributional": "view"}
REGIME_ORDER = {"teacher_forced": 0, "open_loop": 1, "closed_loop": 2, "probe": 3}


def _expand(shown: Shown, values: dict[str, Any], lists: dict[str, list[str]]) -> list[tuple[dict[str, Any], str]]:
    """The template's bindings: one per pair/task/view it names (none named: one)."""
    named = [k for k in lists if "{" + k + "}" in shown.label + shown.condition]
    out = [dict(values)]
    for k in named:
        out = [{**b, k: x} for b in out for x in lists[k]]
    return [(b, b.get("view", "")) for b in out]


def world_columns(iv: pd.DataFrame, wp: dict[str, Any]) -> dict[str, list[Column]]:
    """Each layer table's columns, from the :class:`~wmeval.metrics.Shown` entries of the registry,
    kept where the intervals have rows; under ``"headline"``, the layers' headline columns among them."""
    dyn = wp["dynamics"]
    values = {"H": wp["horizon"], "Hd": dyn["horizon"], "Hr": dyn.get("rollout_horizon"),
              "cf": dyn["counterfactual_horizon"]}
    views = list(wp.get("distributional", {}).get("views", {}))
    lists = {"pair": [f"{a} vs {b}" for a, b in dyn["counterfactual_pairs"]], "task": list(dyn["tasks"]),
             "view": views, "opair": [f"{a} vs {b}" for a, b in wp.get("counterfactual_pairs", [])]}
    out: dict[str, list[tuple]] = {s: [] for s in SECTIONS}
    heads: set[Column] = set()
    for info in REGISTRY.values():
        for shown in info.shown:
            for b, view in _expand(shown, values, lists):
                cond = shown.condition.format(**b)
                head = shown.headline if isinstance(shown.headline, bool) else cond.startswith(shown.headline)
                order = {"regime": REGIME_ORDER.get(shown.regime, 9), "view": views.index(view) if view else 0,
                         None: 0}[SECTIONS[shown.section]]
                col = (shown.label.format(**b), info.name, shown.regime, cond)
                out[shown.section].append((order, col))
                if head:
                    heads.add(col)
    cols = {s: present(iv, [c for _, c in sorted(cs, key=lambda oc: oc[0])]) for s, cs in out.items()}
    return {**cols, "headline": [c for s in SECTIONS for c in cols[s] if c in heads]}


def strata_tables(iv: pd.DataFrame, models: list[str], wp: dict[str, Any]) -> list[tuple[str, Table]]:
    """FD per stratum beside the pooled and stratified values, per view."""
    out = []
    for view, vd in wp.get("distributional", {}).get("views", {}).items():
        cols = [("pooled", "fd", "open_loop", f"{view}:pooled")]
        cols += [(f"`{s}`", "fd", "open_loop", f"{view}:{s}") for s in vd["strata"]]
        cols += [(label, metric, "open_loop", f"{view}:{w}") for w in ("uniform", "empirical")
                 for label, metric in (("stratified (plug-in)", "fd_stratified"),
                                       ("stratified, bias-corrected", "fd_stratified_bias_corrected"))]
        cols = present(iv, cols)
        if cols:
            out.append((f"FD in the `{view}` view, pooled and per stratum (d = {vd['dim']}, {vd['n_real']} real "
                        "rows):", metric_table(iv, models, cols)))
    return out


def kcurve_table(kv: pd.DataFrame | None, models: list[str]) -> Table | None:
    if kv is None or kv.empty:
        return None
    ks = sorted(set(kv.k))
    rows = []
    for m in models:
        sel = kv[kv.source == m]
        if not sel.empty:
            rows.append([f"`{m}`"] + [cell(sel[sel.k == k].iloc[0]) if (sel.k == k).any() else "–" for k in ks])
    return Table(["model"] + [f"K={k}" for k in ks], rows)


def reliability_table(iv: pd.DataFrame, models: list[str]) -> Table | None:
    rel = iv[(iv.metric == "event_frequency")]
    if rel.empty:
        return None
    rows = []
    for m in models:
        for cond in sorted(set(rel[rel.source == m].condition)):
            rows.append([f"`{m}`", cond, cell(lookup(iv, m, "event_forecast", "open_loop", cond)),
                         cell(lookup(iv, m, "event_frequency", "open_loop", cond))])
    return Table(["model", "forecast bin", "mean forecast", "observed frequency"], rows)


def probe_rows(iv: pd.DataFrame, wp: dict[str, Any]) -> tuple[Table | None, list[Column]]:
    """Calibration table of every probe window on the true world; the calibrated windows as columns."""
    dyn = wp["dynamics"]
    rows, calibrated = [], []
    for probe in dyn["probes"]:
        for w in dyn["probe_windows"]:
            cond = f"{probe} w={w}"
            truth = lookup(iv, "ground_truth", "probe_flag_rate", "probe", cond)
            if truth is None:
                continue
            ok = truth.high <= dyn["probe_max_true_rate"]
            if ok:
                calibrated.append((f"probe {probe}, w={w}", "probe_flag_rate", "probe", cond))
            rows.append([f"`{probe}`", str(w), cell(truth),
                         "calibrated: used to judge models" if ok else
                         f"**miscalibrated** (flags the true world above {dyn['probe_max_true_rate']}): not used"])
    if not rows:
        return None, []
    return Table(["probe", "window w", "true-world flag rate", "verdict"], rows), calibrated


def curve_specs(wp: dict[str, Any]) -> list[tuple[str, str, str]]:
    specs = [("rollout_state_rmse", "random", "Open-loop state RMSE by horizon, random actions"),
             ("rollout_state_rmse", "planner", "Open-loop state RMSE by horizon, the planner's actions"),
             ("rollout_pixel_rmse", "random", "Open-loop pixel RMSE by horizon from the control starts, random "
              "actions"),
             ("rollout_pixel_rmse", "planner", "Open-loop pixel RMSE by horizon from the control starts, the "
              "actions of the model's own MPC")]
    for a, b in wp["dynamics"]["counterfactual_pairs"]:
        specs += [("counterfactual_cosine", f"{a} vs {b}", f"Counterfactual cosine by horizon ({a} vs {b})"),
                  ("counterfactual_gap", f"{a} vs {b}", f"Counterfactual gap by horizon ({a} vs {b})")]
    return specs


def _dynamics_curves(cv: pd.DataFrame, metric: str, cond: str, wp: dict[str, Any]) -> pd.DataFrame:
    sel = cv[(cv.metric == metric) & (cv.condition == cond)]
    if metric.startswith("counterfactual"):
        # Beyond the declared counterfactual horizon a wrapping world (the blob torus) aliases.
        sel = sel[sel.t <= wp["dynamics"]["counterfactual_horizon"]]
    return sel


def frame_curve_specs(wp: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The observation protocol's counterfactual curves on frames, in pixel and feature space."""
    specs = []
    for a, b in wp.get("counterfactual_pairs", []):
        for space in ("pixel", "feature"):
            specs += [(f"{space}_counterfactual_cosine", f"{a} vs {b}",
                       f"Counterfactual cosine on frames, {space} space, by horizon ({a} vs {b})"),
                      (f"{space}_counterfactual_gap", f"{a} vs {b}",
                       f"Counterfactual gap on frames, {space} space, by horizon ({a} vs {b})")]
    return specs


def curve_tables(cv: pd.DataFrame, models: list[str], wp: dict[str, Any], frames: bool = False) -> list[tuple[str, Table]]:
    """Curves at a few horizons: rollout error (random and planner's actions) and counterfactuals of the
    dynamics episodes, or (``frames``) the observation protocol's counterfactual curves on frames."""
    H = wp["horizon"] if frames else (wp["dynamics"].get("rollout_horizon") or wp["dynamics"]["horizon"])
    ts = sorted({t for t in (1, 5, 10, 20, H) if t <= H})
    out = []
    for metric, cond, title in (frame_curve_specs(wp) if frames else curve_specs(wp)):
        sel = cv[(cv.metric == metric) & (cv.condition == cond)] if frames else _dynamics_curves(cv, metric, cond, wp)
        if sel.empty:
            continue
        t_shown = [t for t in ts if t in set(sel.t)]
        rows = []
        for m in models:
            cells = []
            for t in t_shown:
                r = sel[(sel.source == m) & (sel.t == t)]
                cells.append(cell(r.iloc[0]) if len(r) else "n/a")
            rows.append([f"`{m}`"] + cells)
        out.append((f"{title} {REGISTRY[metric].arrow}:", Table(["model"] + [f"t={t}" for t in t_shown], rows)))
    return out


def ranks_of(iv: pd.DataFrame, models: list[str], columns: list[Column],
             checked_only: bool = False) -> tuple[list[Column], dict]:
    """Per usable column, each model's (rank by point, rank_low, rank_high) or None.

    ``checked_only``: rank only the models whose bias correction passed its check (the others' rank intervals
    are taken among themselves, :func:`wmeval.bootstrap.intervals.replicate_rows`, so a rank by point that
    counted a failed model could fall outside them)."""
    used, ranks = [], {}
    for col in columns:
        _, metric, regime, cond = col
        info = REGISTRY[metric]
        skip = set(_unchecked_models(iv, models, metric, regime, cond)) if checked_only else set()
        vals = {m: None if m in skip else lookup(iv, m, metric, regime, cond) for m in models}
        # A model with fewer than 2 episodes has no interval and no rank (the bootstrap stage leaves it out too);
        # values float64 does not resolve tie (wmeval.metrics.registry.near_equal), as in the stage's rank intervals.
        bad = {m: info.badness(r.point) for m, r in vals.items() if r is not None and np.isfinite(r.point)
               and not getattr(r, "n_clusters", 2) < 2}
        if len(bad) < 2:
            continue
        used.append(col)
        for m in models:
            if m in bad:
                r = vals[m]
                behind = sum(b < bad[m] and not near_equal(b, bad[m], info.tie_atol) for b in bad.values())
                ranks[col, m] = (1 + behind, getattr(r, "rank_low", np.nan), getattr(r, "rank_high", np.nan))
            else:
                ranks[col, m] = None
    return used, ranks


def ranking(iv: pd.DataFrame, models: list[str], columns: list[Column]) -> Table | None:
    """Rank of each model (1 = best, by point estimate) in each layer's headline metric, with rank intervals.

    HTML classes: ``rk1`` for rank 1, ``rklast`` for the last rank, ``changed`` where a model's rank
    differs from its rank in the previous column (seed 002: rankings change between layers). A model whose
    bias-corrected value failed its two-scale check is not ranked in that column; the others are ranked among
    themselves, as their rank intervals are.
    """
    used, ranks = ranks_of(iv, models, columns, checked_only=True)
    if not used:
        return None
    last = {col: max(r[0] for m in models if (r := ranks[col, m]) is not None) for col in used}
    failed = {col: set(_unchecked_models(iv, models, *col[1:])) for col in used}
    rows, classes = [], []
    for m in models:
        cells, cls, prev = [], [""], None
        for col in used:
            r = ranks[col, m]
            if m in failed[col]:
                cells.append("not ranked: its bias correction fails its check ‡")
                cls.append("")
                continue
            if r is None:
                cells.append("–")
                cls.append("")
                continue
            rk, lo, hi = r
            cells.append(f"{rk} [{lo:.0f}–{hi:.0f}]" if np.isfinite(lo) and np.isfinite(hi) else str(rk))
            c = "num " + ("rk1" if rk == 1 else "rklast" if rk == last[col] else "")
            if prev is not None and rk != prev:
                c += " changed"
            cls.append(c.strip())
            prev = rk
        numeric = {r[0] for col in used if (r := ranks[col, m]) is not None}
        rows.append([f"`{m}`" + (" (rank changes)" if len(numeric) > 1 else "")] + cells)
        classes.append(cls)
    return Table(["model"] + [c[0] for c in used], rows, classes)


def glance(iv: pd.DataFrame, models: list[str], columns: list[Column], world: str) -> Table | None:
    """Which model is best at what, and how sure: one row per layer headline metric."""
    used, ranks = ranks_of(iv, models, columns)
    rows = []
    for col in used:
        label, metric, regime, cond = col
        info = REGISTRY[metric]
        firsts = [m for m in models if ranks[col, m] is not None and ranks[col, m][0] == 1]
        if not firsts:
            continue
        best = firsts[0]
        contenders = [m for m in models if m != best and ranks[col, m] is not None and ranks[col, m][1] == 1]
        r = lookup(iv, best, metric, regime, cond)
        lo, hi = ranks[col, best][1:]
        if len(firsts) > 1:
            sure = "tied on the point estimate with " + ", ".join(f"`{m}`" for m in firsts[1:])
        elif unchecked := _unchecked_models(iv, models, metric, regime, cond):
            sure = ("no rank interval: the bias correction of " + ", ".join(f"`{m}`" for m in unchecked)
                    + " fails its check ‡")
        elif not contenders and hi == 1:
            sure = "**separated**: rank interval [1–1] over the paired replicates"
        else:
            sure = (f"not separated: rank interval [{lo:.0f}–{hi:.0f}]"
                    + ("; " + ", ".join(f"`{m}`" for m in contenders) + " also reach rank 1" if contenders else ""))
        rows.append([info.layer, f"{label} {info.arrow}", f"`{best}`", cell(r), sure])
    if not rows:
        return None
    return Table(["layer", "headline metric", "best model", "its value [95% interval]", "how sure"], rows)


def baseline_table(iv: pd.DataFrame, models: list[str], columns: list[Column], baseline: str) -> Table:
    """Paired differences to the baseline with their intervals, and P(better than the baseline)."""
    rows = []
    for m in (m for m in models if m != baseline):
        cells = [f"`{m}`"]
        for _, metric, regime, cond in columns:
            r = lookup(iv, m, metric, regime, cond)
            if r is None or not np.isfinite(r.diff_point):
                cells.append("n/a")
            else:
                tie = getattr(r, "p_tie", np.nan)
                cells.append(f"{fmt(r.diff_point)} [{fmt(r.diff_low)}, {fmt(r.diff_high)}], P(better) {r.p_better:.2f}"
                             + (f", P(tie) {tie:.2f}" if np.isfinite(tie) and tie > 0 else ""))
        rows.append(cells)
    return Table(["model"] + [label for label, *_ in columns], rows)


# ----------------------------------------------------------------------------- protocol cards


def _card_html(world: str, metric: str, regime: str, card: dict[str, str]) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in card.items())
    warn = " <span class=\"tag\">not comparable to published FID/FVD</span>" if "NOT comparable" in \
        card.get("comparability", "") else ""
    return (f'<details id="{card_id(world, metric, regime)}"><summary><code>{esc(metric)}</code> '
            f'{esc(REGIME_LABEL.get(regime, regime))} {esc(card["direction"].split()[0])}{warn}</summary>'
            f'<dl class="card">{items}</dl></details>')


# ----------------------------------------------------------------------------- the document


def _headline_columns(cols: dict[str, list[Column]], calibrated: list[Column]) -> list[Column]:
    """Each layer's headline columns (the registry's ``Shown.headline``), the calibrated probes before task signals."""
    heads = set(cols["headline"])
    return [c for s in ("observation", "image", "stochastic", "distributional", "dynamics") for c in cols[s]
            if c in heads] + calibrated + [c for c in cols["task"] if c in heads]


#: coverage.json's set-level parts and where each puts its cells (the truth-0 cells of the high-axis parts repeat
#: their lowest-axis part's data sets and are left out of :func:`beyond_chance`).
SET_PARTS = {"sets": "", "sets_more_episodes": "", "sets_mid": "", "sets_wide": "",
             "sets_high_axis": "highest axis", "sets_more_episodes_high_axis": "highest axis",
             "sets_mid_high_axis": "highest axis"}


def _metric_name(metric: str) -> str:
    return "KID" if metric == "kid" else "bias-corrected FD"


def _cell_result(c: dict, datasets: int) -> str:
    """A set-level cell's coverage with its power (or, at a true 0, false-positive rate), or what was withheld."""
    held = c.get("withheld") or 0.0
    if held >= 1.0:
        return "no interval (the bias check withheld all)"
    text = (f"{c['coverage']:.1%}" + (f" (power {c['power']:.0%})" if "power" in c else
                                      f" (false positives {c['false_positive_rate']:.1%})"))
    if held > 0:
        return f"{held:.1%} withheld by the bias check, the {round((1 - held) * datasets)} given covered {text}"
    return text


def _chance_cells(cov: dict[str, Any]) -> list[tuple[str, float, int, dict]]:
    """The set-level cells :func:`beyond_chance` tests: ``(name, coverage, intervals given, where)``, ``where`` the
    cell's ``part`` (its key in coverage.json), ``metric``, ``design``, ``truth``, ``dim``, ``episodes``, ``axis``
    (``lowest`` or ``highest``), ``rho``, ``frames`` and the shift's ``size`` along the axis. Left
    out: the high-axis parts' truth-0 cells (their lowest-axis part's data sets again) and cells over half withheld."""
    out = []
    sets = cov.get("sets") or {}
    for key, axis in SET_PARTS.items():
        part = cov.get(key)
        if not part:
            continue
        dim = part.get("dim", sets.get("dim"))
        place = _part_place(cov, key)
        for c in part["cells"]:
            held, p = c.get("withheld") or 0.0, c.get("coverage")
            if (axis and c["truth"] == "zero") or held > 0.5 or p is None or not np.isfinite(p):
                continue
            name = f"{_metric_name(c['metric'])} {c['design']} {c['truth']} {p:.1%} ({place})"
            shift = part.get("shift", sets.get("shift"))
            where = {"part": key, "metric": c["metric"], "design": c["design"], "truth": c["truth"], "dim": dim,
                     "episodes": part["episodes"], "axis": "highest" if axis else "lowest",
                     "rho": part.get("rho", sets.get("rho")),
                     "frames": part.get("frames_per_episode", sets.get("frames_per_episode")),
                     "size": None if shift is None else {"zero": 0.0, "shift": shift, "large shift": 3 * shift}.get(
                         c["truth"])}
            out.append((name, p, round((1.0 - held) * part["datasets"]), where))
    return out


def _outside(p: float, n: int, low: float = 0.93, high: float = 0.97, z: float = 1.959964) -> int:
    """-1 where ``p`` (of ``n``) lies more than ``z`` binomial standard errors below ``low`` (the error at ``low``),
    1 where that far above ``high``, else 0."""
    if p < low and (p - low) / np.sqrt(low * (1 - low) / n) < -z:
        return -1
    if p > high and (p - high) / np.sqrt(high * (1 - high) / n) > z:
        return 1
    return 0


def _confirmation(cov: dict[str, Any], where: dict) -> dict | None:
    """coverage.json's confirmation of a cell (``python benchmarks/coverage.py --only confirm``: the cell rerun on
    data sets its screen did not use), when it confirms the cell's current figures: the screen's coverage, width ratio
    and data-set count it was made for equal the cell's now (a part rerun since leaves it stale, and unused), and
    it has at least the screen's data sets (a smaller rerun is a weaker test than the screen; unused); where both
    carry a run (coverage.json's ``runs``), the rerun's code is the screen's (else it tested other intervals;
    unused)."""
    part = cov.get(where["part"]) or {}
    now = next((c for c in part.get("cells", []) if (c["metric"], c["truth"], c["design"])
                == (where["metric"], where["truth"], where["design"])), None)
    if now is None:
        return None
    conf = cov.get("confirmation") or {}
    runs = cov.get("runs") or {}
    code_now, code_conf = ((runs.get(r) or {}).get("code") for r in (now.get("run"), conf.get("run")))
    if code_now is not None and code_conf is not None and code_now != code_conf:
        return None                     # rerun with other code than the screen's: it tests other intervals
    for c in conf.get("cells", []):
        screen = c.get("screen") or {}
        if ((c.get("part"), c.get("metric"), c.get("truth"), c.get("design"))
                == (where["part"], where["metric"], where["truth"], where["design"])
                and (screen.get("coverage"), screen.get("datasets")) == (now.get("coverage"), part.get("datasets"))
                and _same(screen.get("width_ratio"), now.get("width_ratio"))
                and c.get("coverage") is not None and (c.get("datasets") or 0) >= part.get("datasets", 0)):
            return c
    return None


def _same(a: Any, b: Any) -> bool:
    """Two stored figures equal to 1e-9 relative (a screen rerun with the same code repeats its width ratio to about
    1e-14, the FD's summed in another order)."""
    try:
        return bool(np.isclose(float(a), float(b), rtol=1e-9, atol=0.0))
    except (TypeError, ValueError):
        return a is None and b is None


def screen_flags(cov: dict[str, Any], low: float = 0.93, high: float = 0.97, z: float = 1.959964) -> list[dict]:
    """The set-level cells outside ``[low, high]`` by more than sampling noise on their screen (coverage.json's part):
    each ``where`` of :func:`_chance_cells` with ``name``, ``coverage``, ``given`` (intervals given), ``side`` (-1 too
    narrow, 1 too wide) and ``confirmation``: its rerun on fresh data sets (:func:`_confirmation`; None without one),
    with ``confirmed`` whether that rerun lies outside on the same side by more than chance too (None without one).
    ``benchmarks/coverage.py --only confirm`` reruns these cells."""
    out = []
    for name, p, n, w in _chance_cells(cov):
        side = _outside(p, n, low, high, z)
        if side == 0:
            continue
        conf = _confirmation(cov, w)
        confirmed = None
        if conf is not None:
            given = _given(conf)
            confirmed = given > 0 and _outside(conf["coverage"], given, low, high, z) == side
        out.append({**w, "name": name, "coverage": p, "given": n, "side": side, "confirmation": conf,
                    "confirmed": confirmed})
    return out


def beyond_chance(cov: dict[str, Any], low: float = 0.93, high: float = 0.97, z: float = 1.959964
                  ) -> tuple[list[str], list[str]]:
    """The set-level cells whose coverage lies outside ``[low, high]`` by more than sampling noise: more than ``z``
    binomial standard errors past the nearer end, the error taken at that end with the cell's intervals given (data
    sets less those the bias check withheld; cells with over half withheld are left out). Exact 95% intervals would
    land outside 93-97% in 5.0% of 400-data-set cells by chance alone (exact binomial; 25.8% at 150); this names
    the ones chance does not explain. A cell rerun on fresh data sets (:func:`screen_flags`' confirmation) counts only
    where the rerun lies outside on the same side by more than chance too (:func:`unconfirmed` lists the others), and
    its name then carries the rerun's figure. Returns ``(too narrow, too wide)``, each cell as "KID paired shift 89.2%
    (32 episodes, d = 4)" or "... (32 episodes, d = 4; 99.4% on 1000 fresh data sets)"."""
    narrow, wide = [], []
    for f in screen_flags(cov, low, high, z):
        if f["confirmed"] is False:
            continue
        (narrow if f["side"] < 0 else wide).append(_named(f))
    return narrow, wide


def _given(conf: dict) -> int:
    """A rerun's intervals given: its data sets less those the bias check withheld."""
    return round((1.0 - (conf.get("withheld") or 0.0)) * conf["datasets"])


def _named(flag: dict) -> str:
    """A flagged cell's name (:func:`screen_flags`), with its rerun's figure where it has one."""
    conf = flag["confirmation"]
    if conf is None:
        return flag["name"]
    given = _given(conf)
    return (f"{flag['name'][:-1]}; {conf['coverage']:.1%} on {conf['datasets']} fresh data sets"
            + (f", {given} intervals given" if given != conf["datasets"] else "") + ")")


def unconfirmed(cov: dict[str, Any], low: float = 0.93, high: float = 0.97, z: float = 1.959964) -> list[str]:
    """The cells outside ``[low, high]`` beyond chance on their screen that their rerun on fresh data sets puts within
    chance of it (:func:`screen_flags`), as "KID paired shift 89.2% (32 episodes, d = 4, highest axis; 92.6% on 1000
    fresh data sets)"."""
    return [_named(f) for f in screen_flags(cov, low, high, z) if f["confirmed"] is False]


def oracle_stale(oracle: dict[str, Any] | None, root: Any = None) -> str:
    """Why ``benchmarks/results/direction_oracle.json``'s figures cannot be read as this code's, in a sentence: no
    record of the code that computed them (its ``run``), or the files of that code that have changed since under
    ``root`` (default the working directory, where the report stage runs); empty where they are this code's."""
    from pathlib import Path

    from wmeval.core.digest import changed_files

    if not oracle:
        return ""
    run = oracle.get("run")
    code = run.get("code") if isinstance(run, dict) else None
    if not isinstance(code, dict) or "benchmarks/direction_oracle.py" not in code:
        return ("benchmarks/results/direction_oracle.json carries no record of the code that computed it, so its "
                "figures are not used; rerun `python benchmarks/direction_oracle.py`.")
    if (changed := changed_files(code, Path.cwd() if root is None else root)):
        return (f"benchmarks/results/direction_oracle.json was computed with code that has changed since "
                f"({', '.join(changed)}), so its figures are not used; rerun `python benchmarks/direction_oracle.py`.")
    return ""


def oracle_wide(cov: dict[str, Any], oracle: dict[str, Any] | None, root: Any = None) -> list[str]:
    """The too-wide cells of :func:`beyond_chance` where ``benchmarks/results/direction_oracle.json``'s cell of the
    same design (dimension, episodes, sides, truth, axis, shift size, rho and rows per episode) has the boundary
    test's rule, its linear term along the estimated difference with the upper-end rule (``estimated_raised``),
    above 97% by more than chance too, in the Gaussian mean model with the noise covariance known. Such a cell's
    over-coverage is consistent with the rule's alone (see :func:`oracle_note`). Cells the oracle lacks, or that
    lack a figure, are left out, and so is every cell where the oracle's code has changed since or is not recorded
    (:func:`oracle_stale`, ``root`` as there)."""
    if not oracle or oracle_stale(oracle, root):
        return []
    rho, frames = oracle.get("rho"), oracle.get("frames_per_episode")
    cells = {}
    for c in oracle.get("cells", []):
        try:
            key = (c["dim"], c["episodes"], c["design"], c["truth"], c["axis"], round(float(c["true_value"]) ** 0.5, 9))
        except (KeyError, TypeError, ValueError):
            continue
        cells[key] = c
    out = []
    for w in screen_flags(cov):
        if w["side"] <= 0 or w["confirmed"] is False or w["size"] is None or (rho, frames) != (w["rho"], w["frames"]):
            continue
        name = _named(w)
        o = cells.get((w["dim"], w["episodes"], w["design"], w["truth"], w["axis"], round(float(w["size"]), 9)))
        raised = ((o or {}).get("estimated_raised") or {}).get("coverage")
        datasets = (o or {}).get("datasets")
        if raised is not None and datasets and _outside(raised, datasets) > 0:
            out.append(name)
    return out


#: direction_oracle.json's rules, as :func:`oracle_note` names them.
ORACLE_RULES = (("known", "the true direction"), ("estimated", "the estimated difference's"),
                ("estimated_raised", "that with the upper-end rule (the boundary test's)"),
                ("restricted", "the restricted estimate's"), ("worst", "the worst case"))


def oracle_note(oracle: dict[str, Any] | None, root: Any = None) -> str:
    """``benchmarks/results/direction_oracle.json`` in a paragraph: per (d, episodes), the small shift with
    independent sides along the lowest- and the highest-variance axis, each rule's coverage in the Gaussian mean
    model with the noise known, and which direction-free rules (if any) are within 93-97% on both axes in every
    design; the run that computed them. Where that run's code has changed since, or is not recorded, only that
    (:func:`oracle_stale`)."""
    if not oracle:
        return ""
    if (stale := oracle_stale(oracle, root)):
        return stale
    cells = {(c.get("dim"), c.get("episodes"), c.get("design"), c.get("truth"), c.get("axis")): c
             for c in oracle.get("cells", [])}

    def cov_of(c: dict, rule: str) -> float | None:
        return (c.get(rule) or {}).get("coverage")

    rows, pairs = [], []
    for dim, episodes in sorted({k[:2] for k in cells if None not in k[:2]}):
        lo, hi = (cells.get((dim, episodes, "unpaired", "shift", a)) for a in ("lowest", "highest"))
        if not (lo and hi) or any(cov_of(c, r) is None for c in (lo, hi) for r, _ in ORACLE_RULES):
            continue
        pairs.append((lo, hi))
        rows.append(f"at {episodes} episodes, d = {dim}: " + ", ".join(
            f"{label} {cov_of(lo, rule):.1%} and {cov_of(hi, rule):.1%}" for rule, label in ORACLE_RULES))
    if not rows:
        return ""
    within = [label for rule, label in ORACLE_RULES[1:]
              if all(0.93 <= cov_of(c, rule) <= 0.97 for pair in pairs for c in pair)]
    return ("The boundary test's rule in the model it is built on (`python benchmarks/direction_oracle.py`: the "
            "Gaussian mean model with the noise covariance known and the statistic's distribution along a given "
            f"direction drawn exactly; {oracle.get('datasets', '?')} data sets a cell, the same for every rule). The "
            "test's linear term at a candidate distance must lie along some direction. With independent sides and "
            "a small shift along the lowest- and the highest-variance axis, the interval covered, " + "; ".join(rows)
            + ". Along the true direction the test is exact up to each cell's draw (about 1 point), so read each "
            "rule against that figure. Within 93-97% on both axes in every design: "
            + (", ".join(within) if within else "none of the rules that do not know the direction") + "."
            + _oracle_run(oracle.get("run") or {}))


def _oracle_run(run: dict[str, Any]) -> str:
    """The oracle's run in a sentence: its date, command and numpy release, and that its code is this one."""
    numpy = (run.get("packages") or {}).get("numpy")
    said = [f"`{run['command']}`" if run.get("command") else "", f"numpy {numpy}" if numpy else ""]
    return (" Computed" + (f" on {str(run['date'])[:10]}" if run.get("date") else "")
            + (f" ({', '.join(x for x in said if x)})" if any(said) else "") + ", with the code it is read with.")


def _part_place(cov: dict[str, Any], key: str) -> str:
    """A set-level part as the scorecard names it: "32 episodes, d = 4" (", highest axis" for the high-axis ones)."""
    part, sets = cov[key], cov.get("sets") or {}
    return ", ".join(x for x in (f"{part['episodes']} episodes", f"d = {part.get('dim', sets.get('dim'))}",
                                 SET_PARTS[key]) if x)


def figure_runs(cov: dict[str, Any]) -> dict[str, set[str | None]]:
    """Per group of coverage.json's figures, as the scorecard names it, the runs its figures carry (keys of the
    file's ``runs``; None for a figure without one): the intervals of a mean, the plug-in FD's, each set-level part
    (its cells may come from different runs), the bias corrections' leftovers and the reruns on fresh data sets."""
    out: dict[str, set[str | None]] = {}
    if "cluster" in cov:
        out["the intervals of a mean"] = {cov.get("run")}
    if cov.get("frechet"):
        out["the plug-in FD's intervals"] = {cov["frechet"].get("run")}
    for key in SET_PARTS:
        if cov.get(key):
            out[f"the set-level cells at {_part_place(cov, key)}"] = {c.get("run") for c in cov[key]["cells"]}
    if cov.get("fd_bias"):
        out["the FD bias corrections' leftovers"] = {cov["fd_bias"].get("run")}
    if cov.get("confirmation"):
        out["the reruns on fresh data sets"] = {cov["confirmation"].get("run")}
    return out


def stale_figures(cov: dict[str, Any], root: Any = None) -> tuple[dict[str, list[str]], list[str]]:
    """``(stale, unstamped)``: the figure groups of :func:`figure_runs` computed with code that differs now (each
    with the files changed or gone since, under ``root``: default the working directory, where the report stage
    runs, so that it reads the files its dvc.yaml deps name) and those with a figure that carries no run, or a run
    the file does not hold (no record of its code)."""
    from pathlib import Path

    from wmeval.core.digest import changed_files

    root = Path.cwd() if root is None else root
    runs = cov.get("runs") or {}
    changed = {key: changed_files(run["code"], root) for key, run in runs.items() if isinstance(run, dict)
               and isinstance(run.get("code"), dict)}
    stale, unstamped = {}, []
    for group, keys in figure_runs(cov).items():
        if any(k not in changed for k in keys):
            unstamped.append(group)
        if (files := sorted({f for k in keys for f in changed.get(k, [])})):
            stale[group] = files
    return stale, unstamped


def stale_note(cov: dict[str, Any], root: Any = None) -> str:
    """The sentence naming coverage.json's figures computed with code that has changed since (:func:`stale_figures`);
    empty where there are none."""
    return _stale_sentence(stale_figures(cov, root)[0])


def _stale_sentence(stale: dict[str, list[str]]) -> str:
    """:func:`stale_note`'s sentence from :func:`stale_figures`' ``stale``."""
    if not stale:
        return ""
    files = sorted({f for fs in stale.values() for f in fs})
    return (f"Computed with code that has changed since, so they may not describe the intervals this code gives: "
            f"{'; '.join(stale)} (changed: {', '.join(files)}); rerun `python benchmarks/coverage.py`.")


def runs_note(cov: dict[str, Any], root: Any = None) -> str:
    """Where coverage.json's figures come from: the runs that computed them (dates, commands, packages and kernels),
    whether their code is the code now, and the figures without a record of their code."""
    stale, unstamped = stale_figures(cov, root)
    used = {k for keys in figure_runs(cov).values() for k in keys}
    runs = [(k, r) for k, r in (cov.get("runs") or {}).items() if k in used and isinstance(r, dict)]
    parts = []
    if runs:
        def one(r: dict) -> str:
            pk = r.get("packages") or {}
            blas = ", ".join((r.get("kernels") or {}).get("blas") or []) or "BLAS not recorded"
            return (f"`{r.get('command', '?')}` on {str(r.get('date', '?'))[:10]} (numpy {pk.get('numpy')}, scipy "
                    f"{pk.get('scipy')}, {blas}; {len(r.get('code') or {})} code files)")
        parts.append("Each figure above carries the run that computed it (coverage.json's `runs`: every file of the "
                     "code, this benchmark and the `wmeval` modules it imports, with its sha256): "
                     + "; ".join(one(r) for _, r in sorted(runs, key=lambda kr: str(kr[1].get("date")))) + "."
                     + ("" if stale else " None of that code has changed since."))
    if stale:
        parts.append(_stale_sentence(stale))
    if unstamped:
        parts.append(f"Without a record of the code that computed them: {'; '.join(unstamped)}.")
    return " ".join(parts)


def coverage_table(cov: dict[str, Any] | None) -> Table | None:
    """The set-level cells at the default design (coverage.json's ``sets``: d = 4, 32 episodes, the shift along the
    lowest-variance axis): per truth and sides, each metric's coverage with its power or false-positive rate."""
    sets = (cov or {}).get("sets")
    if not sets:
        return None
    shift = sets.get("shift")
    truth_label = {"zero": "0 (the same distribution)",
                   "shift": f"shift {shift:g} (lowest-variance axis)" if shift is not None else "shift",
                   "large shift": f"shift {3 * shift:g}" if shift is not None else "large shift"}
    metrics = [m for m in ("kid", "fd_bias_corrected") if any(c["metric"] == m for c in sets["cells"])]
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for c in sets["cells"]:
        rows.setdefault((c["truth"], c["design"]), {})[c["metric"]] = _cell_result(c, sets.get("datasets", 0))
    if not rows:
        return None
    return Table(["truth", "sides"] + [_metric_name(m) for m in metrics],
                 [[truth_label.get(t, t), d] + [r.get(m, "–") for m in metrics] for (t, d), r in rows.items()])


def coverage_glance(cov: dict[str, Any] | None, root: Any = None) -> tuple[str, Table | None, str]:
    """The first screen's account of the interval-coverage benchmark (``benchmarks/results/coverage.json``): a lead
    sentence, the default design's cells (:func:`coverage_table`), and a sentence on every cell of every part,
    those outside 93-97% by more than chance (:func:`beyond_chance`): the too-narrow named, the too-wide counted.
    The rest is :func:`coverage_note`, in the scorecard's "Interval validation" section."""
    if not cov:
        return "", None, ""
    c, i = cov["cluster"], cov["iid_frames"]
    sets = cov.get("sets")
    lead = (f"Interval validation (`python benchmarks/coverage.py`, synthetic data with a closed-form truth; every "
            "cell under Interval validation below): nominal-"
            f"{cov['confidence_level']:.0%} episode-clustered intervals of a mean covered {c['coverage']:.1%} "
            f"(SE {c['coverage_se']:.1%}; frame-level iid intervals {i['coverage']:.1%}).")
    if not sets:
        return lead, None, stale_note(cov, root)
    lead += (f" The set-level intervals behind the distributional headlines ({sets['datasets']} data sets of "
             f"{sets['episodes']} episodes x {sets['frames_per_episode']} rows, d = {sets['dim']}, rho = "
             f"{sets['rho']}) covered the true KID and FD (in brackets: the share of intervals entirely above 0, "
             "power against a shift, false positives at a true 0):")
    tested = _chance_cells(cov)
    narrow_, wide_ = beyond_chance(cov)
    flags = screen_flags(cov)
    rerun = [f for f in flags if f["confirmation"] is not None]
    present = [cov[k] for k in SET_PARTS if cov.get(k)]
    episodes = sorted({p["episodes"] for p in present})
    dims = sorted({p.get("dim", sets.get("dim")) for p in present})
    axes = "the lowest- and the highest-variance axis" if any(a and cov.get(k) for k, a in SET_PARTS.items()) \
        else "the lowest-variance axis"
    total = sum(len(p["cells"]) for p in present)
    tail = (f"Of {len(tested)} cells tested ({total} in {len(present)} part{'s' * (len(present) != 1)}: "
            f"{' and '.join(map(str, episodes))} episodes, d = {', '.join(map(str, dims))}, the shift along {axes}; "
            "the repeated truth-0 cells and mostly withheld ones left out), outside 93-97% by more than chance "
            "(over 1.96 binomial standard errors past the nearer end"
            + (", on its screen and, where rerun, again on data sets the screen did not use" if rerun else "") + "): "
            + ("; ".join(part for part in (
                f"too narrow: {', '.join(narrow_)}" if narrow_ else "none too narrow",
                f"too wide (conservative): {len(wide_)} cell{'s' * (len(wide_) != 1)}" if wide_ else "none too wide")))
            + ".")
    if rerun:
        held = [f for f in rerun if f["confirmed"]]
        within = [_named(f) for f in rerun if f["confirmed"] is False]
        tail += (f" Of the {len(flags)} cells outside on their screen, {len(rerun)} were rerun (`python "
                 f"benchmarks/coverage.py --only confirm`): {len(held)} outside on the same side again"
                 + (f"; within chance on the rerun: {', '.join(within)}" if within else "")
                 + ".")
    if (stale := stale_note(cov, root)):
        tail += " " + stale
    rule = oracle_wide(cov, cov.get("direction_oracle"), root)
    if rule:
        tail += (f" In {len(rule)} of the too-wide, the boundary test's rule covers above 97% too in the Gaussian mean "
                 "model it is built on, with the noise known (benchmarks/direction_oracle.py; Interval validation).")
    return lead, coverage_table(cov), tail


def coverage_note(cov: dict[str, Any] | None, root: Any = None) -> str:
    """The interval-coverage benchmark (``benchmarks/results/coverage.json``) beyond what the first screen shows
    (:func:`coverage_glance`): the Frechet distance's plug-in intervals, the set-level intervals' methods, each
    other part's coverage in brief, every cell below 93% and every cell outside 93-97% beyond chance."""
    if not cov:
        return ""
    f = cov.get("frechet")
    text = (f"Means: {cov['datasets']} synthetic data sets of {cov['episodes']} episodes x "
            f"{cov['frames_per_episode']} frames, intra-episode correlation rho = {cov['rho']}; the episode-clustered "
            f"interval covered {cov['cluster']['coverage']:.1%}, the frame-level iid one "
            f"{cov['iid_frames']['coverage']:.1%}.")
    if f:
        text += (f" For the Frechet distance on Gaussian features (d = {f['dim']}, closed-form truth), the "
                 f"plug-in percentile interval covered {f['percentile_coverage']:.1%} (the plug-in bias is "
                 f"+{f['plugin_bias']:.2f} on a true {f['true_fd']:.2f}) and the basic interval of the "
                 f"bias-corrected FD {f['basic_coverage']:.1%}.")
    sets = cov.get("sets")
    if sets:
        def cells(metric: str, tab: dict) -> str:
            return "; ".join(f"{c['design']} {c['truth']}: {_cell_result(c, tab.get('datasets', 0))}"
                             for c in tab["cells"] if c["metric"] == metric)
        text += (f" The set-level intervals at {sets['episodes']} episodes, d = {sets['dim']} (the first screen's "
                 f"table): the jackknife bias-corrected FD covered {cells('fd_bias_corrected', sets)}; KID covered "
                 f"{cells('kid', sets)}. The bias-corrected FD carries the boundary interval: a test inverted "
                 "for each candidate value, whose linear term shrinks to 0 at a true 0 (where it admits a positive "
                 "distance, its upper end at least the percentile interval's; where its replicates are in their linear "
                 "regime, the linear term at the estimate at their full size); KID carries it near 0, and "
                 "far from 0 (where its replicates' linear part carries over "
                 f"{STUDENTIZE_LINEAR_SHARE:.0%} of their variance) the bootstrap-t, each replicate studentized "
                 "by its own standard error.")
        def spans(metric: str, tab: dict) -> str:
            """A part's cells in brief: the range of coverage over the intervals given, and what was withheld."""
            cs = [c for c in tab["cells"] if c["metric"] == metric]
            held = [c for c in cs if (c.get("withheld") or 0.0) > 0]
            given = [c["coverage"] for c in cs if (c.get("withheld") or 0.0) <= 0.5 and c["coverage"] is not None]
            def span(v: list[float]) -> str:
                return f"{min(v):.1%}" if min(v) == max(v) else f"{min(v):.1%}-{max(v):.1%}"

            parts = [span(given)] if given else []
            if held:
                parts.append(f"withheld by its bias check in {span([c['withheld'] for c in held])} of data sets ("
                             + ", ".join(f"{c['design']} {c['truth']}" for c in held) + ")")
            return "; ".join(parts)

        parts = [(f"{p['episodes']} episodes" if key == "sets_more_episodes" else f"d = {p['dim']}", p)
                 for key in ("sets_more_episodes", "sets_mid", "sets_wide") if (p := cov.get(key))]
        if parts:
            text += " Elsewhere (`benchmarks/results/coverage.json`, README): " + ". ".join(
                f"At {name}, KID {spans('kid', p)}, bias-corrected FD {spans('fd_bias_corrected', p)}"
                for name, p in parts) + "."
        high_keys = [key for key, axis in SET_PARTS.items() if axis and cov.get(key)]
        high = [cov[key] for key in high_keys]
        if high:
            # The shift along the features' highest-variance axis: every cell below 93% is named.
            def where(p: dict) -> str:
                dim = p.get("dim", sets.get("dim"))
                return f"{p['episodes']} episodes" + (f", d = {dim}" if dim != sets.get("dim") else "")

            def rerun(key: str, c: dict) -> str:
                """A cell's rerun on fresh data sets (:func:`_confirmation`), where it has one."""
                conf = _confirmation(cov, {"part": key, "metric": c["metric"], "truth": c["truth"],
                                           "design": c["design"]})
                return f" ({conf['coverage']:.1%} on {conf['datasets']} fresh data sets)" if conf else ""

            def narrow(key: str, p: dict) -> str:
                cs = [f"{'KID' if c['metric'] == 'kid' else 'bias-corrected FD'} {c['design']} {c['truth']} "
                      f"{c['coverage']:.1%}{rerun(key, c)}" for c in p["cells"]
                      if c["coverage"] is not None and c["coverage"] < 0.93]
                return f"{', '.join(cs)} ({where(p)})" if cs else ""

            below = [t for key, p in zip(high_keys, high) if (t := narrow(key, p))]
            text += (" With the shift along the features' highest-variance axis instead (the cells above put it "
                     "along the lowest): " + "; ".join(
                         f"at {where(p)}, KID {spans('kid', p)}, bias-corrected FD "
                         f"{spans('fd_bias_corrected', p)}" for p in high) + "."
                     + (" Below 93%: " + "; ".join(below) + "." if below else ""))
        narrow_, wide_ = beyond_chance(cov)
        if narrow_ or wide_:       # every cell named here; the first screen counts the too-wide ones
            text += (" Outside 93-97% by more than chance (over 1.96 standard errors past the nearer end): "
                     + "; ".join(part for part in (
                         f"too narrow: {', '.join(narrow_)}" if narrow_ else "",
                         f"too wide (conservative): {', '.join(wide_)}" if wide_ else "")
                         if part) + ".")
        if (within := unconfirmed(cov)):
            text += (" Outside on their screen, within chance on data sets the screen did not use: "
                     + ", ".join(within) + ".")
        rule = oracle_wide(cov, cov.get("direction_oracle"), root)
        if rule:
            text += (f" Of those too wide, {', '.join(rule)}: there the boundary test's rule covers above 97% too in "
                     "the Gaussian mean model with the noise covariance known (below).")
        if cov.get("sets_wide"):
            text += (" With fewer independent rows than dimensions the FD's bias is not a 1/N term the jackknife "
                     "removes; its two-scale check (the correction repeated on halves of the episodes) then "
                     "withholds the interval: compare models on KID.")
    if (runs := runs_note(cov, root)):
        text += " " + runs
    return text


def _front_matter(doc: Doc, protocol: dict[str, Any], provenance: dict[str, Any] | None,
                  coverage: dict[str, Any] | None) -> None:
    boot, enc = protocol["bootstrap"], protocol["encoder"]
    doc.h(1, "wmeval scorecard")
    commit = (provenance or {}).get("git", {}) or {}
    doc.p(f"Worlds: {', '.join(f'`{w}`' for w in protocol['worlds'])}. Encoder `{enc['encoder']}`"
          + ("" if enc["comparable_to_published"] else " (weight-free: **not comparable to published FID/FVD**)")
          + f". Every number is a point estimate with its {boot['confidence_level']:.0%} "
          f"{boot['method']} bootstrap interval (B = {boot['n_resamples']}, seed {boot['seed']}; the bias-corrected "
          "FDs: the boundary interval of their replicates; KID: the boundary interval near 0, the bootstrap-t far "
          "from it), resampling "
          "episodes, the independent unit, with the same resampled episodes for every model of a world (paired). "
          "↓ lower is better, ↑ higher is better, →1 closest to 1 is best. `ground_truth` rows are the true world "
          "scored by the same code: a reference, not a competitor."
          + (f" Code: commit `{str(commit.get('commit'))[:12]}`{' (dirty)' if commit.get('dirty') else ''}."
             if commit.get("commit") else ""))
    lead, table, tail = coverage_glance(coverage)
    doc.p(lead)
    doc.table(table)
    doc.p(tail)
    doc.html("<nav>" + "".join(f'<a href="#{slug(w)}">{esc(w)}</a>' for w in protocol["worlds"])
             + ('<a href="#interval-validation">interval validation</a>' if coverage else "")
             + '<a href="#metrics">metrics</a><a href="#protocol-cards">protocol cards</a>'
               '<a href="#provenance">provenance</a></nav>')


def _validation_section(doc: Doc, coverage: dict[str, Any] | None) -> None:
    """Every figure of the interval-coverage benchmark that the first screen leaves out (:func:`coverage_note`)."""
    if coverage:
        doc.h(2, "Interval validation")
        doc.p(coverage_note(coverage))
        if (text := oracle_note(coverage.get("direction_oracle"))):
            doc.p(text)


def _glance_section(doc: Doc, intervals: pd.DataFrame, protocol: dict[str, Any]) -> dict[str, tuple]:
    """The first screen: per world, the best model per layer; returns each world's columns for its sections."""
    doc.h(2, "At a glance")
    doc.p("Per world, the best model in each layer's headline metric and how sure the paired bootstrap is: "
          "**separated** when the model's 95% rank interval is [1–1]. No single layer certifies the others.")
    per_world = {}
    for world, wp in protocol["worlds"].items():
        iv = intervals[intervals.world == world]
        cols = world_columns(iv, wp)
        probe_t, calibrated = probe_rows(iv, wp)
        per_world[world] = (iv, cols, probe_t, calibrated)
        doc.h(3, f"{world}: which model is best at what")
        doc.table(glance(iv, list(wp["models"]), _headline_columns(cols, calibrated), world))
    doc.p(OUTSIDE_NOTE)
    return per_world


def _metrics_section(doc: Doc, enc: dict[str, Any]) -> None:
    doc.h(2, "Metrics")
    for m in REGISTRY.values():
        direction = {True: "higher is better", False: "lower is better", None: f"closest to {m.target} is best"}
        doc.p(f"`{m.name}` ({m.layer}, {direction[m.higher_is_better]}, {m.unit}, aggregate {m.aggregate}): "
              f"{m.definition}")
    label = "" if enc["comparable_to_published"] else " Not comparable to published FID/FVD."
    if enc.get("clip"):
        doc.p(f"Encoder `{enc['encoder']}` ({enc['kind']}, {enc.get('returns')}) embeds clips {enc['clip']} "
              f"(preprocessing {enc['preprocessing']}); `feature_mse` (a per-frame metric) is not computed for a "
              f"video encoder.{label}")
    else:
        doc.p(f"`feature_mse` and the distributional metrics use encoder `{enc['encoder']}` ({enc['kind']}; "
              f"preprocessing {enc['preprocessing']}).{label}")


def _cards_section(doc: Doc, cards: dict) -> None:
    doc.h(2, "Protocol cards")
    doc.p("One card per metric and regime: what was compared, how, with how many samples, and how its interval "
          "was made. The same cards are in `reports/protocols.json`; every interval row with its method, B, "
          "level, resampling unit and strata is in `reports/intervals.csv`.")
    for world, by_metric in cards.items():
        doc.h(3, f"{world}: protocol cards")
        doc.html("".join(_card_html(world, m, r, c) for m, by_regime in by_metric.items()
                         for r, c in by_regime.items()))
        doc.md("\n".join(f"- `{m}` ({REGIME_LABEL.get(r, r)}): " + "; ".join(
            f"{k}: {v}" for k, v in c.items() if k not in ("metric", "definition", "world", "layer"))
            for m, by_regime in by_metric.items() for r, c in by_regime.items()))


def build(intervals: pd.DataFrame, protocol: dict[str, Any], curves: pd.DataFrame | None = None,
          kcurves: pd.DataFrame | None = None, points: pd.DataFrame | None = None,
          provenance: dict[str, Any] | None = None, with_figures: bool = False,
          coverage: dict[str, Any] | None = None, cards: dict | None = None,
          human: dict[str, Any] | None = None) -> Doc:
    """The scorecard as a :class:`Doc`; ``with_figures`` adds the SVG figures (HTML only); ``cards``:
    :func:`protocol_cards`, when the caller has them already; ``human``: the human stage's summary."""
    cards = protocol_cards(intervals, protocol) if cards is None else cards
    doc = Doc()
    _front_matter(doc, protocol, provenance, coverage)
    per_world = _glance_section(doc, intervals, protocol)
    for world, wp in protocol["worlds"].items():
        iv, cols, probe_t, calibrated = per_world[world]
        _world_sections(doc, world, wp, protocol, iv, cols, probe_t, calibrated, curves, kcurves, points,
                        with_figures)
    human_section(doc, human)
    _validation_section(doc, coverage)
    _metrics_section(doc, protocol["encoder"])
    _cards_section(doc, cards)
    _provenance_section(doc, provenance)
    return doc


@dataclass(frozen=True)
class WorldView:
    """What a world's sections read: its protocol record, its intervals and curves, the columns to show."""

    doc: Doc
    world: str
    wp: dict[str, Any]
    protocol: dict[str, Any]
    iv: pd.DataFrame
    cols: dict[str, list[Column]]
    probe_t: Table | None
    calibrated: list[Column]
    wcv: pd.DataFrame | None          # the world's horizon curves
    wkv: pd.DataFrame | None          # the world's best-of-K curves
    points: pd.DataFrame | None       # distributional point estimates (all worlds)
    with_figures: bool

    @property
    def models(self) -> list[str]:
        return list(self.wp["models"])

    def fig(self, build: Callable[..., str], *args: Any, **kwargs: Any) -> None:
        """A figure from ``build(*args, **kwargs)`` (a :mod:`wmeval.report.figures` function), built and drawn with
        the others at the end (:func:`~wmeval.rendering.htmlpage.deferred_figure`), and only with figures on."""
        if self.with_figures:
            self.doc.figure(deferred_figure(build, *args, **kwargs))


def _ranking_section(v: WorldView) -> None:
    """The cross-layer ranking and the paired differences to the baseline."""
    doc, wp, iv, cols, calibrated, models = v.doc, v.wp, v.iv, v.cols, v.calibrated, v.models
    rank_cols = _headline_columns(cols, calibrated)
    rk = ranking(iv, models, rank_cols)
    if rk:
        doc.h(3, "Cross-layer ranking")
        doc.p("Rank by point estimate in each layer's headline metric (1 = best; ties share a rank), with the 95% "
              "interval of the model's rank over the paired bootstrap replicates in brackets. In the HTML, rank 1 "
              "is green, the last rank red, and a gold frame marks a rank that differs from the model's rank in "
              "the column before it. A model that wins every column is rare; the column it loses tells you what "
              "to fix." + (" ‡ A model whose bias-corrected value fails its two-scale check is not ranked in "
                           "that column; the others are ranked among themselves." if any(
                               c.startswith("not ranked") for row in rk.rows for c in row) else ""))
        doc.table(rk)
        base = wp.get("baseline")
        if base:
            doc.p(f"Paired differences to the baseline `{base}` (model minus baseline, same resampled episodes) "
                  "and the share of bootstrap replicates in which the model is better:")
            doc.table(baseline_table(iv, models, rank_cols, base))


def _observation_section(v: WorldView) -> None:
    """Observation layers, pooled and per condition, with their horizon curves."""
    doc, world, wp, iv, cols, wcv, models = v.doc, v.world, v.wp, v.iv, v.cols, v.wcv, v.models
    doc.h(3, "Observation layers")
    doc.table(metric_table(iv, models, cols["observation"]))
    cond_cols = [(f"`{c}`", "pixel_mse", "open_loop", c) for c in sorted(set(wp["plans"].values()))]
    doc.p("Open-loop pixel MSE per condition (stratum):")
    doc.table(metric_table(iv, models, present(iv, cond_cols)))
    if wcv is not None:
        for metric in ("pixel_mse", "feature_mse", "state_rmse", "ssim"):
            v.fig(figures.curves, wcv, metric, "all", models, f"{metric} by horizon, {world}",
                                 "Teacher-forced (left) and open-loop (right) never pooled; bands are 95% "
                                 "episode-bootstrap intervals of each step.")
        tables = curve_tables(wcv, models, wp, frames=True)
        if tables:
            doc.p("Counterfactual consistency on frames (seed 002's layer 5 without a state): the predicted "
                  "against the realized difference between the futures of each counterfactual pair the "
                  "protocol rolls out, per step, in pixel space and in the encoder's feature space.")
        for text, t in tables:
            doc.p(text)
            doc.table(t)
        for metric, cond, title in frame_curve_specs(wp):
            if not metric.startswith("pixel"):
                continue                          # the feature-space curves are in the tables above
            v.fig(figures.curves, wcv[(wcv.metric == metric) & (wcv.condition == cond)], metric, cond, models,
                                 title, "Observation episodes; bands are 95% intervals at each step.")


def _image_section(v: WorldView) -> None:
    """Paired image metrics: PSNR in both conventions, SSIM, LPIPS."""
    doc, protocol, iv, cols, models = v.doc, v.protocol, v.iv, v.cols, v.models
    if not cols["image"]:
        return
    doc.h(3, "Paired image metrics")
    doc.p("PSNR in both conventions (mean of per-frame PSNR; PSNR of the pooled MSE) and their gap "
          "10 log10(AM/GM) of the frame MSEs; an exact match counts as "
          f"{protocol.get('scoring', {}).get('psnr_cap_db', 100):g} dB. SSIM: Gaussian window 11, sigma 1.5, "
          "L = 1.")
    doc.table(metric_table(iv, models, cols["image"]))


def _stochastic_section(v: WorldView) -> None:
    """Stochastic futures: best-of-K and its curve, diversity, NLL, event reliability."""
    doc, wp, iv, cols, wkv, models = v.doc, v.wp, v.iv, v.cols, v.wkv, v.models
    if not cols["stochastic"]:
        return
    nll = wp.get("nll", {})
    doc.h(3, "Stochastic futures")
    doc.p("Best-of-K picks, per realized future, the closest of the model's K samples: an oracle diagnostic, "
          "not a deployable rule. Diversity is a spread, not coverage (compare with `ground_truth`). NLL base "
          f"measure: {nll.get('base_measure', 'n/a')}.")
    doc.table(metric_table(iv, ["ground_truth", *models], cols["stochastic"]))
    kt = kcurve_table(wkv, models)
    if kt:
        doc.p(f"Best-of-K sequence MSE over nested pools (oracle selection; cannot increase with K) "
              f"{REGISTRY['best_of_k_curve'].arrow}:")
        doc.table(kt)
        v.fig(figures.kcurve, wkv, models)
    rt = reliability_table(iv, models)
    if rt:
        doc.p(f"Reliability of the event \"{wp.get('outcome_event')}\" (forecast = share of K samples; "
              "observed = frequency among the realized futures of the forecasts in the bin):")
        doc.table(rt)
        v.fig(figures.reliability, iv, models, str(wp.get("outcome_event")))


def _distributional_section(v: WorldView) -> None:
    """Distributional metrics per view, per stratum, with their figures."""
    doc, world, wp, protocol, iv, cols, points, models = (
        v.doc, v.world, v.wp, v.protocol, v.iv, v.cols, v.points, v.models)
    if not cols["distributional"]:
        return
    dp = wp.get("distributional", {})
    doc.h(3, "Distributional metrics")
    doc.p("`frame`: predicted frames against realized frames (the published FID construction, blind to which "
          "history produced which frame). `transition`: each frame joined with the previous one, the motion "
          "an action caused. Stratified FD: within each stratum, then weighted. The FD interval is for the "
          "plug-in estimator, which is biased at finite N; the bias-corrected row carries the boundary interval, "
          "KID the boundary interval near 0 (it covers a true 0 at about the nominal level; see the interval "
          "validation above) and the bootstrap-t far from it (each row's method is on its protocol card), and FD-infinity the replicates' spread centred on it. Flagged strata (too few rows, or n <= d) are "
          "kept and marked." + (f" Not built: {dp['skipped_views']}." if dp.get("skipped_views") else "")
          + " " + OUTSIDE_NOTE)
    doc.table(metric_table(iv, models, cols["distributional"]))
    for text, t in strata_tables(iv, models, wp):
        doc.p(text)
        doc.table(t)
    for view, vd in dp.get("views", {}).items():
        v.fig(figures.strata_bars, iv, view, vd["strata"], protocol.get("scoring", {}).get("strata_weights",
                                                                                           "uniform"), models)
        if points is not None:
            v.fig(figures.fd_vs_inverse_n, points[points.world == world], iv, view, models)
        v.fig(figures.prdc_figure, iv, view, models)


def _dynamics_section(v: WorldView) -> None:
    """Seed 002's dynamics and control layers, with their curves."""
    doc, wp, iv, cols, calibrated, wcv, models = v.doc, v.wp, v.iv, v.cols, v.calibrated, v.wcv, v.models
    dyn = v.wp["dynamics"]
    if dyn.get("not_applicable"):
        doc.h(3, "Dynamics and control layers")
        doc.p(f"Not applicable: {dyn['not_applicable']}."
              + (" Action sensitivity and counterfactual consistency still run on frames, from the observation "
                 "protocol's counterfactual pairs: see the observation layers." if wp.get("counterfactual_pairs")
                 else ""))
        return
    if not cols["dynamics"]:
        return
    dyn_models = ["ground_truth"] + [m for m in models if m not in dyn["skipped"]
                                     or m in dyn.get("rollout_models", [])]
    doc.h(3, "Dynamics and control layers")
    if dyn.get("state_level"):
        doc.p(f"Control (MPC acted out in the environment) and pixel rollout curves from the control starts; the "
              f"budget is in the protocol. The state-level layers are {dyn['state_level']}.")
    doc.table(metric_table(iv, dyn_models, cols["dynamics"] + calibrated))
    if wcv is not None:
        for text, t in curve_tables(wcv, dyn_models[1:], wp):
            doc.p(text)
            doc.table(t)
        for metric, cond, title in curve_specs(wp):
            v.fig(figures.curves, _dynamics_curves(wcv, metric, cond, wp), metric, cond, dyn_models, title,
                                 ("Control starts" if dyn.get("rollout_horizon") else "Dynamics episodes")
                                 + "; bands are 95% intervals at each step.")
    pairs = [(f"{a} vs {b}", "open_loop", f"{a} vs {b}") for a, b in dyn["counterfactual_pairs"]]
    v.fig(figures.points, iv, "action_sensitivity", pairs, dyn_models, "Action sensitivity (1 is ideal)",
                         "Predicted over real one-step spread between the actions of a counterfactual pair; the "
                         "dashed line is the ideal 1.", reference=1.0)
    tasks = [(t, "closed_loop", t) for t in dyn["tasks"]]
    v.fig(figures.points, iv, "control_cost", tasks, dyn_models, "MPC cost in the real world",
                         "Random-shooting MPC planning with each model, acting in the true world; ground_truth "
                         "plans with the simulator.")


def _probes_section(v: WorldView) -> None:
    """Physics probes, calibrated on the true world first."""
    doc, iv, probe_t, models = v.doc, v.iv, v.probe_t, v.models
    dyn = v.wp["dynamics"]
    if not probe_t:
        return
    doc.h(3, "Physics probes, calibrated on the true world first")
    doc.table(probe_t)
    wins = [(f"{p} w={w}", "probe", f"{p} w={w}") for p in dyn["probes"] for w in dyn["probe_windows"]]
    v.fig(figures.points, iv, "probe_flag_rate", wins, ["ground_truth"] + [m for m in models if m not in dyn["skipped"]],
                         "Probe flag rate per window", "A window that flags the true world above "
                         f"{dyn['probe_max_true_rate']} (dashed) is miscalibrated and not used to judge models.",
                         reference=dyn["probe_max_true_rate"])


def _task_section(v: WorldView) -> None:
    """Seed 003's task signals."""
    doc, wp, iv, cols, models = v.doc, v.wp, v.iv, v.cols, v.models
    if not cols["task"]:
        return
    doc.h(3, "Task signals")
    doc.p(f"Reward: {wp['reward']}; event: {wp['event']}. Read from each model's open-loop prediction.")
    doc.table(metric_table(iv, models, cols["task"]))


def _dynamics_lines(dyn: dict[str, Any]) -> list[str]:
    """The dynamics protocol in words, or why the world has none."""
    if dyn.get("not_applicable"):
        return [f"- dynamics, control and probe layers: not applicable: {dyn['not_applicable']}"]
    if dyn.get("state_level"):
        tasks = "; ".join(f"`{t}`: {d['description']}" for t, d in dyn["tasks"].items())
        return [f"- dynamics: state-level layers {dyn['state_level']}",
                f"- control: random-shooting MPC, {dyn['n_plans']} plans of {dyn['plan_horizon']} steps, replanned "
                f"every step, acting in the environment, {dyn['control_episodes']} episodes of "
                f"{dyn['control_steps']} steps per task from the world's initial states; `ground_truth` plans by "
                f"branching the environment (oracle); tasks: {tasks}",
                *([f"- pixel rollout curves: from the control starts, {dyn['rollout_horizon']} steps open loop under "
                   "one random plan per start (the same for every model) and under the first actions of each model's "
                   "own MPC on the first task, against the environment's frames"] if dyn.get("rollout_horizon") else []),
                *[f"- `{m}` has no control layer: {why}"
                  + ("; it has pixel rollout curves under random actions" if m in dyn.get("rollout_models", []) else "")
                  for m, why in dyn["skipped"].items()]]
    pairs = ", ".join(f"`{a}` / `{b}`" for a, b in dyn["counterfactual_pairs"])
    tasks = "; ".join(f"`{t}`: {d['description']}" for t, d in dyn["tasks"].items())
    return [f"- dynamics: {dyn['n_episodes']} episodes, rollouts of {dyn['horizon']} steps ({dyn['n_random_plans']} "
            f"random plan(s), the counterfactual pairs {pairs}, and the actions the planner picks with each model "
            f"on `{next(iter(dyn['tasks']), 'n/a')}`)",
            f"- planner: random shooting, {dyn['n_plans']} plans of {dyn['plan_horizon']} steps, replanned every "
            f"step, acting in the real world; control: {dyn['control_episodes']} episodes of {dyn['control_steps']} "
            f"steps per task; tasks: {tasks}",
            f"- probes: {dyn['probe_horizon']} zero-action steps, windows {dyn['probe_windows']}, tolerance "
            f"{dyn['probe_tolerance']}",
            *[f"- `{m}` has no dynamics layers: {why}" for m, why in dyn["skipped"].items()]]


def _protocol_section(v: WorldView) -> None:
    """The world's protocol, in words."""
    doc, world, wp = v.doc, v.world, v.wp
    doc.h(3, f"Protocol: {world}")
    block = wp.get("episode_block")
    blocks = ("" if block is None else "; rolled out in one block" if wp["n_episodes"] <= block else
              f"; rolled out in blocks of at most {block} episodes, each with its own random streams")
    lines = [f"- observation episodes N = {wp['n_episodes']} (initial states: {wp['initial_states']}{blocks}), "
             f"horizon H = {wp['horizon']}",
             "- plans: " + ", ".join(f"`{p}` (condition `{c}`)" for p, c in wp["plans"].items())
             + "; open-loop values weight plans equally, steps averaged within a plan",
             f"- teacher-forced (one-step): along realization 0 of `{wp['teacher_forced_plan']}`, steps 1..H",
             f"- realized futures M = {wp['num_futures']} per plan (errors average every (sample, future) pair); "
             "samples K: " + ", ".join(f"`{m}` {k}" for m, k in wp["models"].items()),
             f"- frames {wp['frame_shape']} stored as {wp['frame_dtype']}, data range L = 1; state metrics only for "
             "models that output states (" + ", ".join(f"`{m}`" for m in wp["models_with_state"]) + ")"]
    if wp.get("capabilities"):
        lines.append("- the world can: " + ", ".join(wp["capabilities"]))
    lines += _dynamics_lines(v.wp["dynamics"])
    if not wp.get("outcome_event"):
        lines.append(f"- event reliability: not applicable: {world} declares no binary outcome event")
    if not v.cols.get("task"):
        lines.append(f"- task signals: not applicable: {world}'s reward cannot be read from a prediction's frames or "
                     "states")
    doc.md("\n".join(lines))
    doc.html("<ul>" + "".join(f"<li>{inline(x[2:])}</li>" for x in lines) + "</ul>")


#: A world's sections, in the order the scorecard shows them.
WORLD_SECTIONS = (_ranking_section, _observation_section, _image_section, _stochastic_section, _distributional_section, _dynamics_section, _probes_section, _task_section, _protocol_section)


def _world_sections(doc: Doc, world: str, wp: dict[str, Any], protocol: dict[str, Any], iv: pd.DataFrame,
                    cols: dict[str, list[Column]], probe_t: Table | None, calibrated: list[Column],
                    curves: pd.DataFrame | None, kcurves: pd.DataFrame | None, points: pd.DataFrame | None,
                    with_figures: bool) -> None:
    doc.h(2, world)
    view = WorldView(doc, world, wp, protocol, iv, cols, probe_t, calibrated,
                     curves[curves.world == world] if curves is not None else None,
                     kcurves[kcurves.world == world] if kcurves is not None else None, points, with_figures)
    for section in WORLD_SECTIONS:
        section(view)


def _provenance_section(doc: Doc, provenance: dict[str, Any] | None) -> None:
    doc.h(2, "Provenance")
    if not provenance:
        doc.p("No provenance record was given to the renderer.")
        return
    doc.p("Where these numbers came from: the git commit and dirty flag when the report was rendered, the "
          "dvc.lock md5 of every stage's inputs and outputs, params, package versions, encoder weights, seeds, "
          "hardware and determinism settings. The same record is `reports/provenance.json`; "
          "`wmeval audit WORLD/MODEL/METRIC` traces one number through it.")
    for key, value in provenance.items():
        rows = [(k, str(v)) for k, v in flatten(value).items()]
        if key == "params":
            rows = [r for r in rows if not r[0].startswith(("models.", "worlds."))] + \
                [r for r in rows if r[0].startswith(("models.", "worlds."))]
        doc.h(3, key)
        doc.table(Table(["key", "value"], [[f"`{k}`" if k else "", v] for k, v in rows]))


# ----------------------------------------------------------------------------- outputs


def render(intervals: pd.DataFrame, protocol: dict[str, Any], curves: pd.DataFrame | None = None,
           kcurves: pd.DataFrame | None = None, points: pd.DataFrame | None = None,
           provenance: dict[str, Any] | None = None, coverage: dict[str, Any] | None = None,
           cards: dict | None = None, human: dict[str, Any] | None = None) -> tuple[str, str]:
    """The scorecard as ``(markdown, html)``, from one document (the figures appear in the HTML only)."""
    with deferred_figures() as resolve:     # the figures are drawn side by side at the end, each the same bytes
        doc = build(intervals, protocol, curves, kcurves, points, provenance, with_figures=True, coverage=coverage,
                    cards=cards, human=human)
        return to_markdown(doc), resolve(to_html(doc, "wmeval scorecard"))


INTERVAL_COLUMNS = ["world", "source", "metric", "regime", "condition", "unit", "point", "low", "high", "baseline",
                    "diff_point", "diff_low", "diff_high", "p_better", "p_tie", "rank", "rank_low", "rank_high", "method",
                    "n_resamples", "confidence_level", "resampling_unit", "n_clusters", "undefined_replicates",
                    "leftover_bias", "leftover_bias_se", "bias_check", "p_value"]


def interval_table(intervals: pd.DataFrame, protocol: dict[str, Any]) -> pd.DataFrame:
    """Every interval row with its protocol columns (method, B, level, resampling unit, strata)."""
    out = intervals[[c for c in INTERVAL_COLUMNS if c in intervals]].copy()
    out["strata"] = protocol["bootstrap"].get("strata", "none")
    return out.sort_values(["world", "metric", "regime", "condition", "source"], kind="stable")


def plot_data(curves: pd.DataFrame | None, kcurves: pd.DataFrame | None,
              intervals: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Plot files for ``dvc plots`` (relative path -> table with ``model``, x, ``point``, ``low``, ``high``)."""
    out: dict[str, pd.DataFrame] = {}
    cols = ["point", "low", "high"]
    if curves is not None:
        for (w, m, r, c), g in curves.groupby(["world", "metric", "regime", "condition"], sort=True):
            out[f"curves/{slug(f'{w} {m} {r} {c}')}.csv"] = (
                g.rename(columns={"source": "model"})[["model", "t", *cols]].sort_values(["model", "t"]))
    if kcurves is not None:
        for (w, c), g in kcurves.groupby(["world", "condition"], sort=True):
            out[f"kcurves/{slug(f'{w} {c}')}.csv"] = (
                g.rename(columns={"source": "model"})[["model", "k", *cols]].sort_values(["model", "k"]))
    rel = intervals[intervals.metric == "event_frequency"]
    fc = intervals[intervals.metric == "event_forecast"].set_index(["world", "source", "condition"]).point
    for w, g in rel.groupby("world", sort=True):
        t = g.assign(forecast=[fc.get((w, s, c), np.nan) for s, c in zip(g.source, g.condition)])
        out[f"reliability/{slug(w)}.csv"] = (t.rename(columns={"source": "model"})[["model", "forecast", *cols]]
                                             .sort_values(["model", "forecast"]))
    return out
