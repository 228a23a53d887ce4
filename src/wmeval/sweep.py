"""Sweeps: DVC experiments collected into one tidy table and a self-contained sweep report.

A sweep is a set of DVC experiments (``dvc exp run --queue -S ...`` then ``dvc queue start``).
:func:`collect` reads ``dvc exp show --json`` (each experiment's params and its
``reports/metrics.json`` values) into a tidy table, one row per (experiment, world, source,
metric, condition) with the swept params as columns; :func:`sweep_report` writes it as Parquet
and CSV and renders the sweep report (HTML through :mod:`wmeval.rendering.htmlpage`, and Markdown):

* FD against 1/N over the ``protocol.n_episodes`` values, with a least-squares line whose
  intercept estimates FD at infinitely many episodes;
* best-of-K error against K (``protocol.num_samples``);
* encoder sensitivity: Kendall's tau between model rankings under two encoders, and the model
  pairs whose order flips;
* stability of every metric across sample counts (``n_episodes`` and ``num_samples``).

A section without the data it needs (e.g. one encoder only) says so.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wmeval.core.errors import WmevalError
from wmeval.metrics import REGISTRY
from wmeval.metrics.registry import near_equal
from wmeval.rendering.document import Doc, Table, flatten, inline, to_html, to_markdown
from wmeval.rendering.htmlpage import figure_svg, new_figure
from wmeval.tables import atomic_write_text

log = logging.getLogger(__name__)

METRICS_FILE = "reports/metrics.json"
N_KEY, K_KEY, ENC_KEY = "protocol.n_episodes", "protocol.num_samples", "encoder.name"
#: Params that are always columns of the tidy table (when present), varying or not.
SWEEP_KEYS = (ENC_KEY, K_KEY, N_KEY)
VALUE_COLUMNS = ("point", "low", "high", "diff_to_baseline", "diff_low", "diff_high", "p_better", "p_tie")
#: Metrics computed on encoder features: the ones whose model ranking can depend on the encoder.
FEATURE_METRICS = tuple(m for m, info in REGISTRY.items() if info.uses_encoder)


# ----------------------------------------------------------------------------- collect

def exp_show(root: Path, all_commits: bool = False) -> list[dict[str, Any]]:
    """``dvc exp show --json`` of the project at ``root``, parsed.

    Raises:
        WmevalError: ``dvc`` fails or prints something other than the DVC 3 JSON list.
    """
    cmd = [sys.executable, "-m", "dvc", "exp", "show", "--json", *(["-A"] if all_commits else [])]
    r = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    if r.returncode != 0:
        raise WmevalError(f"`dvc exp show --json` failed in {root} ({r.returncode}): "
                          f"{(r.stderr or r.stdout).strip()[-800:]}")
    try:
        data = json.loads(r.stdout)
    except json.JSONDecodeError:
        raise WmevalError(f"`dvc exp show --json` in {root} printed no JSON: {r.stdout[-300:]!r}") from None
    if not isinstance(data, list):
        raise WmevalError(f"`dvc exp show --json`: expected a list of revisions (DVC 3), got {type(data).__name__}")
    return data


def _revisions(show: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(runs, skipped)``: one dict per baseline commit and experiment with data, and the rest with why."""
    runs, skipped = [], []
    for entry in show:
        if entry.get("rev") == "workspace":
            continue
        base_name = entry.get("name") or str(entry.get("rev"))[:7]
        items = [("baseline", base_name, entry)]
        for exp in entry.get("experiments") or []:
            for rev in exp.get("revs") or []:
                items.append(("experiment", rev.get("name") or exp.get("name") or str(rev.get("rev"))[:7], rev))
            if not exp.get("revs"):
                state = (exp.get("executor") or {}).get("state")
                skipped.append({"experiment": exp.get("name"), "why": f"no revision (executor state {state})"})
        for kind, name, rev in items:
            data, err = rev.get("data"), rev.get("error")
            if err or not data:
                skipped.append({"experiment": name, "why": f"dvc reports an error: {err}" if err else "no data"})
                continue
            metrics = ((data.get("metrics") or {}).get(METRICS_FILE) or {})
            params = ((data.get("params") or {}).get("params.yaml") or {}).get("data")
            if metrics.get("error") or not metrics.get("data"):
                if kind == "experiment":
                    skipped.append({"experiment": name, "why": f"no {METRICS_FILE} (not run, failed or still queued)"})
                continue
            runs.append({"experiment": name, "rev": rev.get("rev"), "kind": kind, "baseline": base_name,
                         "timestamp": data.get("timestamp"), "params": flatten(params or {}),
                         "metrics": metrics["data"]})
    return runs, skipped


def collect(show: list[dict[str, Any]]) -> tuple[pd.DataFrame, list[str], list[dict[str, Any]]]:
    """The tidy table of a ``dvc exp show --json`` listing.

    Args:
        show: the parsed listing (:func:`exp_show`).

    Returns:
        ``(table, param_columns, skipped)``. ``table`` has one row per (run, world, source, metric,
        condition) with columns ``experiment, rev, kind`` (``experiment`` or ``baseline``: the
        commit the experiments branch from), ``baseline``, the param columns (dotted keys: those
        that differ between runs plus ``encoder.name``, ``protocol.num_samples`` and
        ``protocol.n_episodes``), ``world, source, metric, condition`` (``regime/condition``),
        ``point, low, high`` and the paired difference to the world's baseline model where it exists.
        ``skipped`` lists experiments without results and why.

    Raises:
        WmevalError: the listing holds no experiment with results.
    """
    runs, skipped = _revisions(show)
    exps = [r for r in runs if r["kind"] == "experiment"]
    if not exps:
        why = "; ".join(f"{s['experiment']}: {s['why']}" for s in skipped) or "none listed"
        raise WmevalError("no DVC experiments with results in `dvc exp show` (run a sweep first: "
                          "`dvc exp run --queue -S ...` then `dvc queue start`); skipped: " + why)
    keys = sorted({k for r in runs for k in r["params"]})
    varying = [k for k in keys if len({json.dumps(r["params"].get(k), sort_keys=True) for r in runs}) > 1]
    pcols = sorted(set(varying) | {k for k in SWEEP_KEYS if k in keys})
    rows = []
    for r in runs:
        base = {"experiment": r["experiment"], "rev": r["rev"], "kind": r["kind"], "baseline": r["baseline"],
                **{k: r["params"].get(k) for k in pcols}}
        for world, by_source in r["metrics"].items():
            for source, by_metric in (by_source or {}).items():
                for metric, by_cond in (by_metric or {}).items():
                    for cond, v in (by_cond or {}).items():
                        if not isinstance(v, dict):
                            continue
                        rows.append({**base, "world": world, "source": source, "metric": metric,
                                     "condition": cond, **{c: v.get(c) for c in VALUE_COLUMNS}})
    df = pd.DataFrame(rows)
    for c in pcols:
        # A param that is a number in one run and a string in another: strings (Parquet needs one type).
        kinds = {type(v) for v in df[c] if v is not None and not (isinstance(v, float) and math.isnan(v))}
        if len(kinds) > 1 and not kinds <= {int, float, bool}:
            df[c] = df[c].map(lambda v: None if v is None else str(v))
    for c in VALUE_COLUMNS:
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    return df, pcols, skipped


# ----------------------------------------------------------------------------- analyses

def _z(level: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + level / 2))


def _se(low: np.ndarray, high: np.ndarray, level: float) -> np.ndarray:
    """A standard error read off a bootstrap interval: width / (2 z)."""
    return (np.asarray(high, float) - np.asarray(low, float)) / (2 * _z(level))


def intercept_fit(x: np.ndarray, y: np.ndarray, se: np.ndarray, level: float = 0.95) -> dict[str, float]:
    """Least-squares line ``y = a + b x`` and a normal interval for ``a``, propagating each point's SE.

    The intercept is linear in the points, ``a = c @ y``; its variance is ``sum c_i^2 se_i^2``
    with the points treated as independent.

    >>> f = intercept_fit(np.array([0.5, 0.25]), np.array([3.0, 2.0]), np.array([0.0, 0.0]))
    >>> round(f["intercept"], 6), round(f["slope"], 6), f["low"] == f["high"] == f["intercept"]
    (1.0, 4.0, True)
    """
    x, y, se = (np.asarray(v, dtype=np.float64) for v in (x, y, se))
    X = np.column_stack([np.ones_like(x), x])
    coef_map = np.linalg.pinv(X)                          # (2, n): coefficients = coef_map @ y
    a, b = coef_map @ y
    half = _z(level) * math.sqrt(float(np.sum(coef_map[0] ** 2 * se ** 2)))
    return {"intercept": float(a), "slope": float(b), "low": float(a - half), "high": float(a + half)}


def group_keys(df: pd.DataFrame, pcols: list[str]) -> list[str]:
    """The param columns that define a setting, without those implied by a Hydra group's choice.

    A column ``G.x`` is implied when ``G.name`` is a param column and ``G.x`` is constant for
    each value of ``G.name`` (choosing ``encoder=random_conv`` also changes ``encoder.kind``,
    ``encoder.params.width``, ...; those are not separate settings).
    """
    keep = []
    for c in pcols:
        group = c.split(".", 1)[0]
        name = f"{group}.name"
        if c != name and "." in c and name in pcols:
            per = df.drop_duplicates("experiment").groupby(name, dropna=False)[c].nunique(dropna=False)
            if (per <= 1).all():
                continue
        keep.append(c)
    return keep


def _other(pcols: list[str], *exclude: str) -> list[str]:
    return [c for c in pcols if c not in exclude]


def _level(df: pd.DataFrame) -> float:
    col = "bootstrap.confidence_level"
    if col in df and df[col].notna().any():
        return float(df[col].dropna().iloc[0])
    return 0.95


def fd_vs_n(df: pd.DataFrame, pcols: list[str], metric: str = "fd") -> tuple[pd.DataFrame, str | None]:
    """Per (world, source, condition, other params): FD against 1/N and the fitted intercept.

    Returns:
        ``(fits, why_empty)``: columns ``world, source, condition, <other params>, n_values, points,
        intercept, low, high, slope, fd_infinity_largest_n``; ``why_empty`` says why there is none.
    """
    pcols = group_keys(df, pcols)
    exps = df[(df.kind == "experiment") & (df.metric == metric)]
    if N_KEY not in pcols:
        return pd.DataFrame(), f"the sweep has no {N_KEY} column"
    if exps[N_KEY].nunique() < 2:
        return pd.DataFrame(), f"the experiments have {exps[N_KEY].nunique()} value(s) of {N_KEY}; a fit needs 2"
    level = _level(df)
    others = _other(pcols, N_KEY)
    fi = df[(df.kind == "experiment") & (df.metric == "fd_infinity")]
    rows = []
    for key, g in exps.groupby(["world", "source", "condition", *others], dropna=False, sort=True):
        g = g.dropna(subset=["point", "low", "high"]).sort_values(N_KEY)
        g = g.drop_duplicates(subset=[N_KEY])
        if g[N_KEY].nunique() < 2:
            continue
        n = g[N_KEY].to_numpy(dtype=float)
        fit = intercept_fit(1.0 / n, g.point.to_numpy(), _se(g.low, g.high, level), level)
        rec = dict(zip(["world", "source", "condition", *others], key))
        largest = g.iloc[-1]
        sel = fi[(fi.experiment == largest.experiment) & (fi.world == rec["world"]) & (fi.source == rec["source"])
                 & (fi.condition == rec["condition"])]
        rec.update(n_values=[int(v) for v in n], points=[(float(p), float(lo), float(hi)) for p, lo, hi in
                                                         zip(g.point, g.low, g.high)], **fit,
                   fd_infinity_largest_n=(tuple(float(v) for v in sel[["point", "low", "high"]].iloc[0])
                                          if len(sel) else None))
        rows.append(rec)
    if not rows:
        return pd.DataFrame(), f"no {metric} value appears at two {N_KEY} values with the other params equal"
    return pd.DataFrame(rows), None


def best_of_k_vs_k(df: pd.DataFrame, pcols: list[str], metric: str = "best_of_k_mse") -> tuple[pd.DataFrame, str | None]:
    """Best-of-K error against K: one row per (world, source, condition, other params, K)."""
    pcols = group_keys(df, pcols)
    exps = df[(df.kind == "experiment") & (df.metric == metric)]
    if K_KEY not in pcols or exps.empty:
        return pd.DataFrame(), f"no {metric} values or no {K_KEY} column"
    if exps[K_KEY].nunique() < 2:
        return pd.DataFrame(), f"the experiments have {exps[K_KEY].nunique()} value(s) of {K_KEY}"
    others = _other(pcols, K_KEY)
    cols = ["world", "source", "condition", *others, K_KEY, "experiment", "point", "low", "high"]
    out = exps[cols].sort_values(["world", "source", "condition", *others, K_KEY])
    return out.reset_index(drop=True), None


def _badness(metric: str, values: np.ndarray) -> np.ndarray:
    info = REGISTRY.get(metric)
    if info is None or not info.ranked:
        return np.full(len(values), np.nan)
    return np.asarray(info.badness(np.asarray(values, dtype=np.float64)), dtype=np.float64).reshape(-1)


def encoder_sensitivity(df: pd.DataFrame, pcols: list[str]) -> tuple[pd.DataFrame, str | None]:
    """Kendall's tau between the model rankings under two encoders, and the pairs that flip.

    Per (world, metric, condition, other params) and pair of encoders: models are ranked by the
    metric's direction (ground truth excluded); tau is ``scipy.stats.kendalltau`` of the two
    badness vectors; a pair flips when its order differs. A flip is marked ``within noise`` when
    the two models' intervals overlap under either encoder.
    """
    pcols = group_keys(df, pcols)
    exps = df[(df.kind == "experiment") & df.metric.isin(FEATURE_METRICS) & (df.source != "ground_truth")]
    if ENC_KEY not in pcols or exps[ENC_KEY].nunique() < 2:
        n = 0 if ENC_KEY not in pcols else exps[ENC_KEY].nunique()
        return pd.DataFrame(), f"the experiments use {n} encoder(s); a comparison needs 2"
    from scipy.stats import kendalltau

    others = _other(pcols, ENC_KEY)
    rows = []
    for key, g in exps.groupby(["world", "metric", "condition", *others], dropna=False, sort=True):
        rec0 = dict(zip(["world", "metric", "condition", *others], key))
        by_enc = {e: h.drop_duplicates("source").set_index("source") for e, h in g.groupby(ENC_KEY)}
        for ea, eb in combinations(sorted(by_enc), 2):
            A, B = by_enc[ea], by_enc[eb]
            models = sorted(set(A.index) & set(B.index))
            ba = _badness(rec0["metric"], A.loc[models, "point"].to_numpy())
            bb = _badness(rec0["metric"], B.loc[models, "point"].to_numpy())
            ok = np.isfinite(ba) & np.isfinite(bb)
            models = [m for m, k in zip(models, ok) if k]
            ba, bb = ba[ok], bb[ok]
            if len(models) < 2:
                continue
            tau = kendalltau(ba, bb).statistic if len(set(ba)) > 1 and len(set(bb)) > 1 else float("nan")
            flips, noise = [], []
            atol = REGISTRY[rec0["metric"]].tie_atol

            def order(x, y):               # values float64 does not resolve tie: no flip (registry.near_equal)
                return 0.0 if near_equal(x, y, atol) else float(np.sign(x - y))

            for i, j in combinations(range(len(models)), 2):
                if order(ba[i], ba[j]) * order(bb[i], bb[j]) < 0:
                    mi, mj = models[i], models[j]

                    def overlap(T):
                        b = [float(T.loc[m, k]) for m in (mi, mj) for k in ("low", "high")]
                        return None if not np.all(np.isfinite(b)) else max(b[0], b[2]) <= min(b[1], b[3])

                    flips.append(f"{mi} vs {mj}")
                    # None: an interval is missing (withheld by a bias check), so noise cannot be judged.
                    a, b = overlap(A), overlap(B)
                    noise.append(True if (a or b) else None if a is None or b is None else False)
            rows.append({**rec0, "encoder_a": ea, "encoder_b": eb, "n_models": len(models), "kendall_tau": tau,
                         "flipped_pairs": flips, "flips_within_noise": noise})
    if not rows:
        return pd.DataFrame(), "no feature metric is ranked under two encoders with the other params equal"
    return pd.DataFrame(rows), None


def _runs(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, stops)`` of the runs of equal values in ``labels`` (sorted by group)."""
    cut = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    return np.concatenate([[0], cut]), np.concatenate([cut, [len(labels)]])


def stability(df: pd.DataFrame, pcols: list[str]) -> tuple[pd.DataFrame, str | None]:
    """Every metric across sample counts (``n_episodes``, ``num_samples``) with the other params equal.

    Columns: the group keys, ``settings`` (how many sample-count settings), ``min_point``,
    ``max_point``, ``rel_spread`` ((max - min) / |mean|), ``intervals_overlap`` (one value lies in
    every interval), ``width_smallest``, ``width_largest`` (interval widths at the fewest and the
    most samples, ordered by n_episodes x num_samples; settings with equal products keep the table's order).
    Settings without an interval are left out.
    """
    pcols = group_keys(df, pcols)
    counts = [c for c in (N_KEY, K_KEY) if c in pcols]
    exps = df[df.kind == "experiment"].dropna(subset=["point"])
    if not counts or exps.groupby(counts, dropna=False).ngroups < 2:
        return pd.DataFrame(), "the experiments do not vary the sample counts (protocol.n_episodes, num_samples)"
    keys = ["world", "source", "metric", "condition", *_other(pcols, *counts)]
    # One pass over the table, not pandas operations per group (1.35 s a call on a two-experiment sweep's 609 metrics):
    # a group's first row per setting, the settings with an interval (a bias-corrected FD whose check withheld it
    # cannot show a move), ordered by group and then by sample count (stably: ties keep the table's order).
    g = exps.drop_duplicates(subset=[*keys, *counts])
    g = g[np.isfinite(g.low.astype(float)) & np.isfinite(g.high.astype(float))]
    group = g.groupby(keys, dropna=False, sort=True).ngroup().to_numpy()
    size = np.prod([g[c].astype(float).to_numpy() for c in counts], axis=0)
    order = np.lexsort((size, group))
    group, g = group[order], g.iloc[order]
    points, lows, highs = (g[c].to_numpy(float) for c in ("point", "low", "high"))
    key_rows = g[keys].to_numpy(object)
    rows = []
    for start, stop in zip(*_runs(group)):
        if stop - start < 2:
            continue
        p, lo, hi = points[start:stop], lows[start:stop], highs[start:stop]
        mean = float(np.mean(p))
        rows.append({**dict(zip(keys, key_rows[start])), "settings": stop - start,
                     "min_point": float(p.min()), "max_point": float(p.max()),
                     "rel_spread": float((p.max() - p.min()) / abs(mean)) if mean != 0 else float("nan"),
                     "intervals_overlap": bool(np.all(np.isfinite(lo)) and np.nanmax(lo) <= np.nanmin(hi)),
                     "width_smallest": float(hi[0] - lo[0]), "width_largest": float(hi[-1] - lo[-1])})
    if not rows:
        return pd.DataFrame(), "no metric appears at two sample-count settings with the other params equal"
    return pd.DataFrame(rows), None


# ----------------------------------------------------------------------------- rendering

def _num(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _iv(p: Any, lo: Any, hi: Any) -> str:
    return f"{_num(p)} [{_num(lo)}, {_num(hi)}]"


def _table(d: Doc, header: list[str], rows: list[list[str]]) -> None:
    d.table(Table(header, rows, [["num" if i >= 1 else "" for i in range(len(r))] for r in rows]))


def _figure(d: Doc, fig, caption: str) -> None:
    d.figure(figure_svg(fig, inline(caption)))
    d.md(f"(figure in the HTML report: {caption})")


def _headline(condition: str) -> bool:
    """Conditions shown in the report's tables (every condition is in the CSVs): pooled, weighted, all."""
    return condition.split("/", 1)[-1] in ("all", "frame:pooled", "transition:pooled", "frame:uniform",
                                            "transition:uniform", "frame:empirical", "transition:empirical")


def _bars(ax, x, point, low, high, fmt: str = "o", **kw):
    """Points with their intervals as vertical bars (a percentile interval need not contain the point)."""
    (line,) = ax.plot(x, point, fmt, **kw)
    ax.vlines(x, low, high, color=line.get_color(), lw=1.2)
    return line


def _params_label(row: pd.Series | dict, cols: list[str]) -> str:
    return ", ".join(f"{c}={row[c]}" for c in cols) if cols else "-"


def _fd_vs_n_section(d: Doc, fits: pd.DataFrame, pcols: list[str], level: float) -> None:
    """FD against 1/N with the FD-infinity intercept: a table and one figure per pooled condition."""
    others = _other(pcols, N_KEY)
    d.p("Plug-in FD is biased upward by a term that shrinks like 1/N. For each model and condition, an "
        "ordinary least-squares line FD = a + b/N is fitted to the point estimates at the swept "
        f"{N_KEY} values; its intercept a estimates FD at infinitely many episodes. The interval of a is a "
        "normal approximation: a is a linear combination of the points, and each point's standard error "
        f"is read off its bootstrap interval (width / 2z); the experiments are treated as independent, "
        "although they share their first episodes (same seed), so the interval is approximate. With two "
        "N values the line passes through both points. For comparison, the pipeline's own fd_infinity "
        "(extrapolated within the largest run) is shown. Pooled conditions only; every condition is in "
        "fd_vs_n.csv.")
    rows = [[r.world, r.source, r.condition, _params_label(r, others),
             "; ".join(f"N={n}: {_iv(*pt)}" for n, pt in zip(r.n_values, r.points)),
             _iv(r.intercept, r.low, r.high), _num(r.slope),
             _iv(*r.fd_infinity_largest_n) if r.fd_infinity_largest_n else "n/a"]
            for _, r in fits.iterrows() if _headline(r.condition)]
    _table(d, ["world", "source", "condition", "other params", "FD at N", "FD-infinity (intercept)", "slope",
               "fd_infinity at the largest N"], rows)
    for (world, cond), g in fits.groupby(["world", "condition"]):
        if "pooled" not in cond:
            continue
        fig, ax = new_figure(5.6, 3.4)
        for _, r in g.iterrows():
            x = 1.0 / np.asarray(r.n_values, float)
            pts = np.asarray(r.points, float)
            lab = r.source + (f" ({_params_label(r, others)})" if others else "")
            line = _bars(ax, x, pts[:, 0], pts[:, 1], pts[:, 2], "o", label=lab)
            xs = np.linspace(0, x.max(), 20)
            ax.plot(xs, r.intercept + r.slope * xs, "--", color=line.get_color(), lw=1)
            _bars(ax, [0.0], [r.intercept], [r.low], [r.high], "s", color=line.get_color())
        ax.set_xlabel("1 / n_episodes")
        ax.set_ylabel("FD")
        ax.legend(fontsize=6)
        _figure(d, fig, f"{world}, {cond}: FD against 1/N with {level:.0%} intervals; squares at 1/N = 0 are the "
                        "fitted FD-infinity with its interval.")


def _best_of_k_section(d: Doc, bk: pd.DataFrame, pcols: list[str], level: float) -> None:
    """Best-of-K error against K (one experiment per K): a table and a figure."""
    others = _other(pcols, K_KEY)
    d.p("best_of_k_mse: per realized future, the smallest open-loop error among the model's first K samples. "
        "Each K is a separate experiment with its own samples, so unlike the nested-pool curve within one "
        "run it need not be monotone. Deterministic models have K = 1 whatever the setting. Condition "
        "'all' only; every condition is in best_of_k.csv.")
    rows = []
    for key, g in bk.groupby(["world", "source", "condition", *others], dropna=False, sort=True):
        rec = dict(zip(["world", "source", "condition", *others], key))
        if not _headline(rec["condition"]):
            continue
        rows.append([rec["world"], rec["source"], rec["condition"], _params_label(rec, others),
                     "; ".join(f"K={int(r[K_KEY])}: {_iv(r.point, r.low, r.high)}" for _, r in g.iterrows())])
    _table(d, ["world", "source", "condition", "other params", "best_of_k_mse at K"], rows)
    for (world, cond), g in bk.groupby(["world", "condition"]):
        if cond != "open_loop/all":
            continue
        fig, ax = new_figure(5.6, 3.4)
        for key, h in g.groupby(["source", *others], dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            _bars(ax, h[K_KEY].astype(float).to_numpy(), h.point.to_numpy(), h.low.to_numpy(),
                  h.high.to_numpy(), "o-", label=", ".join(str(k) for k in key))
        ax.set_xlabel("K (protocol.num_samples)")
        ax.set_ylabel("best_of_k_mse")
        ax.legend(fontsize=6)
        _figure(d, fig, f"{world}, {cond}: best-of-K error against K with {level:.0%} intervals.")


def _encoder_section(d: Doc, es: pd.DataFrame, pcols: list[str], level: float) -> None:
    """Kendall tau between the model rankings under two encoders, with the flipped pairs."""
    others = _other(pcols, ENC_KEY)
    d.p("For each feature metric and condition, the models (ground truth excluded) are ranked under each "
        "encoder by the metric's direction; Kendall's tau (scipy.stats.kendalltau, tau-b) compares the two "
        "rankings (1: same order). Tau has no interval here: it is computed from point estimates. A flipped "
        "pair is marked 'within noise' when the two models' intervals overlap under either encoder. Pooled "
        "and weighted conditions only; every condition is in encoder_sensitivity.csv.")
    rows = [[r.world, r.metric, r.condition, _params_label(r, others), f"{r.encoder_a} vs {r.encoder_b}",
             str(r.n_models), _num(r.kendall_tau),
             "; ".join(f"{p}{n if isinstance(n, str) else ' (within noise)' if n else ''}" for p, n in
                       zip(r.flipped_pairs, [" (no interval)" if n is None else n for n in r.flips_within_noise]))
             or "none"]
            for _, r in es.iterrows() if _headline(r.condition)]
    _table(d, ["world", "metric", "condition", "other params", "encoders", "models", "Kendall tau",
               "flipped pairs"], rows)


def _stability_section(d: Doc, st: pd.DataFrame, pcols: list[str], level: float) -> None:
    """Metrics whose intervals do not share a value across the swept sample counts."""
    others = _other(pcols, N_KEY, K_KEY)
    n_ok = int(st.intervals_overlap.sum())
    d.p(f"Each metric, model and condition across the swept sample counts ({N_KEY}, {K_KEY}) with the other "
        f"params equal: {n_ok} of {len(st)} have intervals sharing a common value (consistent with one "
        "quantity measured with more or fewer samples); the others move by more than their intervals "
        "(e.g. a biased estimator such as plug-in FD). Listed below: those that move, largest relative "
        "spread first (all rows are in stability.csv).")
    moved = st[~st.intervals_overlap].sort_values("rel_spread", ascending=False).head(40)
    rows = [[r.world, r.source, r.metric, r.condition, _params_label(r, others), str(r.settings),
             f"{_num(r.min_point)} to {_num(r.max_point)}", _num(r.rel_spread), _num(r.width_smallest),
             _num(r.width_largest)] for _, r in moved.iterrows()]
    if rows:
        _table(d, ["world", "source", "metric", "condition", "other params", "settings", "point range",
                   "relative spread", "interval width (fewest samples)", "interval width (most samples)"], rows)
    else:
        d.p("Every metric's intervals share a common value across the sample counts.")


#: The report's analyses in order: heading, the analysis (a table, or why there is none), its renderer.
SECTIONS = (
    ("FD against 1/N", fd_vs_n, _fd_vs_n_section),
    ("Best-of-K against K", best_of_k_vs_k, _best_of_k_section),
    ("Encoder sensitivity", encoder_sensitivity, _encoder_section),
    ("Stability across sample counts", stability, _stability_section),
)


def _experiments_section(d: Doc, df: pd.DataFrame, all_pcols: list[str], pcols: list[str],
                         skipped: list[dict[str, Any]]) -> None:
    runs = df.drop_duplicates("experiment")[["experiment", "rev", "kind", *pcols]]
    exps = runs[runs.kind == "experiment"]
    d.h(1, "wmeval sweep")
    d.p(f"{len(exps)} experiment(s) from `dvc exp show`; every number is a point estimate with its "
        f"{_level(df):.0%} episode-clustered bootstrap interval [low, high] where one exists.", "lede")
    d.h(2, "Experiments")
    _table(d, ["experiment", "rev", "kind", *pcols],
              [[r.experiment, str(r.rev)[:7], r.kind, *[_num(r[c]) for c in pcols]] for _, r in runs.iterrows()])
    implied = [c for c in all_pcols if c not in pcols]
    if implied:
        d.p("Also varying, as implied by a group choice above (columns of sweep.csv): " + ", ".join(implied) + ".")
    if skipped:
        d.p("Without results (not in the analyses): " + "; ".join(f"{s['experiment']}: {s['why']}" for s in skipped),
            "warn")


def analyses(df: pd.DataFrame, pcols: list[str]) -> dict[str, tuple[pd.DataFrame, str | None]]:
    """Every section's analysis of the tidy table, by function name: ``(table, why)`` (``why``: the reason there is
    no table, else None)."""
    return {analysis.__name__: analysis(df, pcols) for _, analysis, _ in SECTIONS}


def render_sweep(df: pd.DataFrame, pcols: list[str], skipped: list[dict[str, Any]],
                 results: dict[str, tuple[pd.DataFrame, str | None]] | None = None) -> tuple[str, str]:
    """The sweep report as ``(html, markdown)``.

    Args:
        df: the tidy table (:func:`collect`).
        pcols: its param columns.
        skipped: experiments without results.
        results: :func:`analyses` of ``df`` and ``pcols`` when already computed (they are then not run again).
    """
    d = Doc()
    level = _level(df)
    grouped = group_keys(df, pcols)
    results = analyses(df, grouped) if results is None else results
    _experiments_section(d, df, pcols, grouped, skipped)
    for heading, analysis, section in SECTIONS:
        d.h(2, heading)
        table, why = results[analysis.__name__]
        if why:
            d.p(f"No data for this section: {why}.", "warn")
        else:
            section(d, table, grouped, level)
    return to_html(d, "wmeval sweep"), to_markdown(d)


def sweep_report(root: Path, out: Path, all_commits: bool = False,
                 show: list[dict[str, Any]] | None = None) -> list[Path]:
    """Collect the experiments of ``root`` and write the table and the report into ``out``.

    Args:
        root: the project root.
        out: output directory (created).
        all_commits: experiments of every commit (``dvc exp show -A``), not only HEAD's.
        show: a parsed ``dvc exp show --json`` to use instead of running ``dvc``.

    Returns:
        The files written: ``sweep.parquet``, ``sweep.csv``, the analyses' CSVs, ``sweep.html``,
        ``sweep.md``.

    Raises:
        WmevalError: no experiment with results, or ``dvc exp show`` fails.
    """
    df, pcols, skipped = collect(exp_show(root, all_commits) if show is None else show)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    # Parquet and CSV through a temporary file and a rename: never half-written.
    pq_path = out / "sweep.parquet"
    tmp = out / ".sweep.parquet.tmp"
    df.to_parquet(tmp, index=False)
    os.replace(tmp, pq_path)
    written.append(pq_path)
    # Each analysis once, for its CSV and its section (each analysis groups the param columns itself).
    results = analyses(df, pcols)
    for name, frame in (("sweep.csv", df),
                        ("fd_vs_n.csv", results["fd_vs_n"][0]), ("best_of_k.csv", results["best_of_k_vs_k"][0]),
                        ("encoder_sensitivity.csv", results["encoder_sensitivity"][0]),
                        ("stability.csv", results["stability"][0])):
        if name != "sweep.csv" and frame.empty:
            continue
        atomic_write_text(out / name, frame.to_csv(index=False))
        written.append(out / name)
    html, md = render_sweep(df, pcols, skipped, results)
    atomic_write_text(out / "sweep.html", html)
    atomic_write_text(out / "sweep.md", md)
    written += [out / "sweep.html", out / "sweep.md"]
    log.info("sweep: %d experiments, %d rows -> %s", df[df.kind == "experiment"].experiment.nunique(), len(df), out)
    return written
