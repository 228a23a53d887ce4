"""The scorecard's figures: matplotlib, returned as inline SVG (``htmlpage.figure_svg``).

Each function takes the bootstrap stage's tidy interval rows (``point``, ``low``, ``high`` per
source) and returns an HTML ``<figure>``, or ``""`` when there is nothing to draw. Every mark
carries its interval: bands for curves, error bars for points.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from wmeval.metrics import REGISTRY
from wmeval.rendering.htmlpage import esc, figure_svg, new_figure

REGIME_TITLE = {"teacher_forced": "teacher-forced (one-step)", "open_loop": "open loop"}


def _colors(models: list[str]) -> dict[str, str]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return {m: matplotlib.colors.to_hex(cmap(i % 10)) for i, m in enumerate(models)}


def _ylabel(metric: str) -> str:
    info = REGISTRY[metric]
    return f"{metric} {info.arrow}" + (f" ({info.unit})" if info.unit else "")


def curves(cv: pd.DataFrame, metric: str, condition: str, models: list[str], title: str, caption: str,
           x: str = "t", xlabel: str = "step t") -> str:
    """Lines per model with interval bands; one panel per regime (teacher-forced and open loop never pooled)."""
    sel = cv[(cv.metric == metric) & (cv.condition == condition) & cv.source.isin(models)]
    if sel.empty:
        return ""
    regimes = [r for r in ("teacher_forced", "open_loop", "closed_loop") if (sel.regime == r).any()]
    fig, axes = new_figure(4.4 * len(regimes), 3.0, ncols=len(regimes))
    colors = _colors(models)
    for ax, regime in zip(np.atleast_1d(axes), regimes):
        for m in models:
            s = sel[(sel.regime == regime) & (sel.source == m)].sort_values(x)
            if s.empty:
                continue
            ax.plot(s[x], s.point, marker="o", ms=3, lw=1.4, color=colors[m], label=m)
            ax.fill_between(s[x], s.low, s.high, color=colors[m], alpha=0.18, lw=0)
        ax.set_title(REGIME_TITLE.get(regime, regime), fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(_ylabel(metric))
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[-1].legend(fontsize=7, frameon=False, loc="best")
    fig.suptitle(title, fontsize=10)
    return figure_svg(fig, caption)


def points(iv: pd.DataFrame, metric: str, conditions: list[tuple[str, str, str]], models: list[str], title: str,
           caption: str, reference: float | None = None, log: bool = False) -> str:
    """Point estimates with interval bars: one row per model, one marker per (label, regime, condition)."""
    rows = []
    for label, regime, cond in conditions:
        for m in models:
            r = iv[(iv.metric == metric) & (iv.regime == regime) & (iv.condition == cond) & (iv.source == m)]
            if len(r) and np.isfinite(r.point.iloc[0]):
                rows.append((label, m, r.point.iloc[0], r.low.iloc[0], r.high.iloc[0]))
    if not rows:
        return ""
    labels = list(dict.fromkeys(r[0] for r in rows))
    present = [m for m in models if any(r[1] == m for r in rows)]
    fig, ax = new_figure(5.6, 0.42 * len(present) * max(1, len(labels) // 2 + 1) + 1.0)
    colors = _colors(labels)
    step = 0.8 / max(1, len(labels))
    for j, lab in enumerate(labels):
        for i, m in enumerate(present):
            r = next((r for r in rows if r[0] == lab and r[1] == m), None)
            if r is None:
                continue
            y = i + (j - (len(labels) - 1) / 2) * step
            lo, hi = r[3], r[4]
            err = [[max(r[2] - lo, 0)], [max(hi - r[2], 0)]] if np.isfinite(lo) and np.isfinite(hi) else None
            ax.errorbar(r[2], y, xerr=err, fmt="o", ms=4, capsize=3, color=colors[lab],
                        label=lab if i == 0 else None)
    ax.set_yticks(range(len(present)), present)
    ax.invert_yaxis()
    if reference is not None:
        ax.axvline(reference, color="#444", lw=1, ls="--")
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(_ylabel(metric))
    ax.grid(axis="x", alpha=0.3)
    if len(labels) > 1:
        ax.legend(fontsize=7, frameon=False, loc="best")
    ax.set_title(title, fontsize=10)
    return figure_svg(fig, caption)


def strata_bars(iv: pd.DataFrame, view: str, strata: list[str], weights: str, models: list[str]) -> str:
    """FD pooled, per stratum and stratified (plug-in and bias-corrected), grouped by model, with interval bars
    (log scale; a bias-corrected value at or below 0 has no bar)."""
    groups = [("pooled", "fd", f"{view}:pooled")] + [(s, "fd", f"{view}:{s}") for s in strata] \
        + [(f"stratified ({weights})", "fd_stratified", f"{view}:{weights}"),
           (f"stratified, bias-corrected ({weights})", "fd_stratified_bias_corrected", f"{view}:{weights}")]
    return _grouped(iv, groups, models, view)


def _grouped(iv: pd.DataFrame, groups: list[tuple[str, str, str]], models: list[str], view: str) -> str:
    vals = {}
    for label, metric, cond in groups:
        for m in models:
            r = iv[(iv.metric == metric) & (iv.condition == cond) & (iv.source == m)]
            if len(r) and np.isfinite(r.point.iloc[0]) and r.point.iloc[0] > 0:
                vals[label, m] = (r.point.iloc[0], r.low.iloc[0], r.high.iloc[0])
    if not vals:
        return ""
    fig, ax = new_figure(6.4, 3.2)
    colors = _colors(models)
    width = 0.8 / len(models)
    for j, m in enumerate(models):
        for i, (label, _, _) in enumerate(groups):
            if (label, m) not in vals:
                continue
            p, lo, hi = vals[label, m]
            lo = lo if np.isfinite(lo) and lo > 0 else p
            ax.bar(i + (j - (len(models) - 1) / 2) * width, p, width, color=colors[m], label=m if i == 0 else None,
                   yerr=[[p - min(lo, p)], [max(hi - p, 0)]], capsize=2, error_kw={"lw": 0.8})
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=7, rotation=12)
    ax.set_ylabel("FD ↓ (log scale)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"FD in the {view} view: pooled, per stratum, stratified", fontsize=10)
    return figure_svg(fig, f"Pooled FD can hide what the strata show (seed 000): bars are plug-in FDs with "
                           f"their 95% episode-bootstrap intervals; view <code>{esc(view)}</code>.")


def kcurve(kv: pd.DataFrame, models: list[str]) -> str:
    """Best-of-K error against K with bands."""
    if kv is None or kv.empty:
        return ""
    return curves(kv.assign(regime="open_loop"), "best_of_k_mse", kv.condition.iloc[0],
                  [m for m in models if (kv.source == m).any()], "Best-of-K MSE against K (nested pools)",
                  "Oracle selection over nested sample pools: cannot increase with K. Bands are 95% intervals.",
                  x="k", xlabel="K")


def reliability(iv: pd.DataFrame, models: list[str], event: str) -> str:
    """Mean forecast against observed frequency per forecast bin, with both intervals, and the diagonal."""
    rel = iv[iv.metric == "event_frequency"]
    if rel.empty:
        return ""
    fig, ax = new_figure(4.2, 3.6)
    colors = _colors(models)
    for m in models:
        for cond in sorted(set(rel[rel.source == m].condition)):
            f = iv[(iv.metric == "event_forecast") & (iv.source == m) & (iv.condition == cond)]
            o = rel[(rel.source == m) & (rel.condition == cond)]
            if f.empty or o.empty or not np.isfinite(o.point.iloc[0]):
                continue
            fp, op = f.point.iloc[0], o.point.iloc[0]
            ax.errorbar(fp, op, xerr=[[max(fp - f.low.iloc[0], 0)], [max(f.high.iloc[0] - fp, 0)]],
                        yerr=[[max(op - o.low.iloc[0], 0)], [max(o.high.iloc[0] - op, 0)]], fmt="o", ms=4,
                        capsize=2, color=colors[m], label=m)
    ax.plot([0, 1], [0, 1], color="#444", lw=1, ls="--")
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("mean forecast probability")
    ax.set_ylabel("observed frequency")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7, frameon=False, loc="upper left")
    ax.set_title(f"Reliability: {event}", fontsize=10)
    ax.grid(alpha=0.3)
    return figure_svg(fig, "Points on the dashed diagonal are calibrated. Bars: 95% intervals of the mean forecast "
                           "and of the observed frequency in each forecast bin.")


def prdc_figure(iv: pd.DataFrame, view: str, models: list[str]) -> str:
    """Precision against recall and density against coverage, with interval bars."""
    cond = f"{view}:pooled"

    def get(metric, m):
        r = iv[(iv.metric == metric) & (iv.condition == cond) & (iv.source == m)]
        return (r.point.iloc[0], r.low.iloc[0], r.high.iloc[0]) if len(r) and np.isfinite(r.point.iloc[0]) else None

    pairs = [("recall", "precision"), ("coverage", "density")]
    if not any(get(y, m) for _, y in pairs for m in models):
        return ""
    fig, axes = new_figure(8.4, 3.4, ncols=2)
    colors = _colors(models)
    for ax, (xm, ym) in zip(axes, pairs):
        for m in models:
            a, b = get(xm, m), get(ym, m)
            if a is None or b is None:
                continue
            ax.errorbar(a[0], b[0], xerr=[[max(a[0] - a[1], 0)], [max(a[2] - a[0], 0)]],
                        yerr=[[max(b[0] - b[1], 0)], [max(b[2] - b[0], 0)]], fmt="o", ms=4, capsize=2,
                        color=colors[m], label=m)
        ax.set_xlabel(f"{xm} ↑")
        ax.set_ylabel(f"{ym} ↑")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, frameon=False, loc="best")
    fig.suptitle(f"Precision/recall and density/coverage, {view} view", fontsize=10)
    return figure_svg(fig, "k-nearest-neighbour manifolds of the real and predicted embeddings (Naeem et al. 2020); "
                           "bars are 95% episode-bootstrap intervals.")


def fd_vs_inverse_n(points_df: pd.DataFrame, iv: pd.DataFrame, view: str, models: list[str]) -> str:
    """FD on subsets of N rows against 1/N, the linear fit, and FD-infinity (its interval) at 1/N = 0."""
    sel = points_df[(points_df.metric == "fd_infinity") & (points_df.condition == f"{view}:pooled")
                    & points_df.source.isin(models)]
    if sel.empty:
        return ""
    fig, ax = new_figure(5.0, 3.2)
    colors = _colors(models)
    for r in sel.itertuples():
        grid, fd = np.asarray(r.fd_inf_grid, dtype=float), np.asarray(r.fd_inf_fd, dtype=float)
        inv = 1.0 / grid
        ax.plot(inv, fd, "o", ms=3, color=colors[r.source], label=r.source)
        xs = np.array([0.0, inv.max()])
        ax.plot(xs, r.value + r.fd_inf_slope * xs, lw=1, color=colors[r.source])
        b = iv[(iv.metric == "fd_infinity") & (iv.condition == f"{view}:pooled") & (iv.source == r.source)]
        if len(b) and np.isfinite(b.low.iloc[0]):
            ax.errorbar(0.0, r.value, yerr=[[max(r.value - b.low.iloc[0], 0)], [max(b.high.iloc[0] - r.value, 0)]],
                        fmt="s", ms=4, capsize=3, color=colors[r.source])
    ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    ax.set_xlabel("1 / N (rows)")
    ax.set_ylabel("FD ↓")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False, loc="best")
    ax.set_title(f"FD against 1/N, {view} view", fontsize=10)
    return figure_svg(fig, "Plug-in FD on random subsets of N predicted rows, the least-squares line in 1/N and its "
                           "intercept FD-infinity (squares, with the 95% interval) at 1/N = 0.")
