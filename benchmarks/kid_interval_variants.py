"""Why KID's intervals are too narrow when the shift lies along the features' highest-variance axis, and what else covers.

``benchmarks/coverage.py``'s parts ``sets_high_axis`` and ``sets_more_episodes_high_axis`` show KID's boundary
interval (``wmeval.estimators.resample.boundary_interval``, the one the scorecard carries) covering 86.5-90.8% of data
sets at 32 episodes when the shift lies along the highest-variance axis. This script asks whether another interval on
the same replicates would cover there without losing the cells where the shipped one does: on the coverage
benchmark's design (d = 4, episodes of 10 rows, rho = 0.5, paired and unpaired sides; its own data seeds), a true 0
and each shift along the highest-variance axis (variance 2.0) and the lowest (0.5). Per data set:

- ``boundary``: the shipped interval;
- ``percentile``: the 2.5% and 97.5% quantiles of the replicates;
- ``bca``: Efron's bias-corrected and accelerated interval (``wmeval.estimators.resample._bca_interval``), the
  acceleration from the delete-one-episode jackknife;
- ``bootstrap_t``: studentized, each replicate's t = (U* - U) / se*, with se* the infinitesimal jackknife's standard
  error of the replicate's own U-statistic (its gradient in the episode multiplicities,
  ``wmeval.estimators.distributional.KernelBlocks.standard_error``);
- ``hybrid``: ``bootstrap_t`` where the replicates' linear part in the multiplicities
  (``wmeval.estimators.resample.linear_share``) carries more than ``STUDENTIZE_LINEAR_SHARE`` (0.9) of their
  variance (the linear regime, far from 0), else ``boundary``: ``wmeval.estimators.resample.distance_interval``,
  the interval wmeval ships for KID;
- ``calibrated_switch``: ``hybrid`` with the bootstrap-t replaced, where the switch takes it, by the percentile
  interval at levels calibrated by a double bootstrap (:func:`calibrated_percentile`; Hall and Martin 1988; Davison
  and Hinkley 1997, sec. 5.6): each replicate's episodes are resampled again (``--inner-resamples`` times, within
  the same groups), ``p_b`` is the share of those inner replicates at or below the estimate, and the interval is
  the replicates' quantiles at the 2.5% and 97.5% quantiles of ``p_b``: another second-order interval, which needs
  no standard error (computed only there: 0.25-0.7 s a data set);
- ``oracle``: the estimate less the 97.5% and 2.5% quantiles of (estimate - truth) over ``--oracle-datasets`` other
  data sets of the cell (their own seeds; the quantiles are stored as ``oracle_pivot``): the pivot, estimated from
  those data sets (about 0.5 points of noise in its coverage), known only in a simulation. It shows what the
  cell's data sets allow: where it covers less than 95%, the data sets drawn are harder than the average, and
  part of the other intervals' shortfall is the draw's, not theirs.

Each interval's ``against_switch`` compares it with ``hybrid`` on the same data sets: the data sets only it covers,
those only the switch covers, and the exact McNemar test's p-value. ``--coverage-data-sets`` takes
``benchmarks/coverage.py``'s data sets and resampling seeds instead (its set-level cells at d = 4, 32 episodes:
the shipped switch's coverage there is coverage.py's own, beside the other intervals and the oracle on the same
data sets; ``benchmarks/results/kid_interval_variants_coverage_data.json``, 400 a cell).

Reported per cell: each interval's coverage of the true KID, its power (intervals entirely above 0; at a true 0 the
false-positive rate), the infinitesimal jackknife's standard error on the data over the estimator's actual spread
across data sets (root mean square; below 1: the data understate the spread), the skewness and kurtosis of the
estimate across data sets, and the median linear share.

    python benchmarks/kid_interval_variants.py [--datasets 1000] [--episodes 32] [--resamples 500]

``--dump FILE`` also writes every data set's point, standard error, linear share and intervals, and
``--compare-rules FILE...`` compares switch rules (:data:`RULES`) on such dumps without a run. The held-out check of
the shipped rule (fresh seed, 300 data sets a cell, at 32 and 64 episodes and at d = 16) and that comparison are in
``benchmarks/results/kid_interval_variants_heldout.json``.

``kid_interval_variants.json`` (seed 0, 1000 data sets a cell, 29 minutes on 2 cores) was rerun with the boundary
interval's upper-end rule (its upper end at least the percentile interval's where it admits a positive distance,
commit 25eaddd) and with ``calibrated_switch`` and ``oracle``; the switch was chosen on the same data sets before
that rule (commit 5eca392). The held-out check predates the rule: its ``boundary`` and ``hybrid`` columns are the
inverted test alone.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from wmeval.estimators.resample import STUDENTIZE_LINEAR_SHARE

INTERVALS = ("boundary", "percentile", "bca", "bootstrap_t", "hybrid", "calibrated_switch", "oracle")
#: ``--coverage-data-sets``: benchmarks/coverage.py's name for each shift (its ``--set-shift`` 0.5, and 3 x that).
COVERAGE_TRUTHS = {0.0: "zero", 0.5: "shift", 1.5: "large shift"}


@functools.lru_cache(maxsize=1)
def _true_kid():
    """``benchmarks/coverage.py``'s closed-form KID between two Gaussians (loaded by path: a module named
    ``coverage`` on sys.path would shadow coverage.py the package)."""
    spec = importlib.util.spec_from_file_location("coverage_benchmark", Path(__file__).parent / "coverage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.true_kid


def _kernel_blocks(d: int, n: int, t: int, rho: float, design: str, shift: float, axis: int, data_seed: tuple):
    """One data set of a cell: its :class:`~wmeval.estimators.distributional.KernelBlocks`, resampling groups and
    the true KID."""
    from wmeval.core.rng import make_rng
    from wmeval.estimators import distributional as dist

    sigma = np.diag(np.linspace(0.5, 2.0, d))
    chol = np.linalg.cholesky(sigma)
    delta = np.zeros(d)
    delta[axis] = shift
    truth = _true_kid()(np.zeros(d), sigma, delta, sigma)
    ep = np.repeat(np.arange(n), t)
    rng = make_rng(*data_seed)
    a = rng.normal(size=(n, d))
    b = a if design == "paired" else rng.normal(size=(n, d))
    x = (np.sqrt(rho) * a[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
    y = delta + (np.sqrt(rho) * b[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
    inv_r, inv_f, group = dist._cluster_index(ep, ep if design == "paired" else ep + n)
    kb = dist.KernelBlocks.of(dist.Side(x, inv_r, np.full(len(x), "all")),
                              dist.Side(y, inv_f, np.full(len(y), "all")), len(group))
    return kb, group, truth


def _oracle_error(job: tuple) -> float:
    """estimate - truth on one of the oracle's data sets (seeds apart from the cell's own)."""
    d, n, t, rho, design, shift, axis, i, seed = job
    kb, group, truth = _kernel_blocks(d, n, t, rho, design, shift, axis,
                                      (seed, "kid_interval_variants", "oracle", design, shift, axis % d, n, i))
    return float(kb.at(np.ones(len(group))) - truth)


def inner_counts(counts: np.ndarray, group: np.ndarray, n_inner: int, rng: np.random.Generator) -> np.ndarray:
    """The double bootstrap's inner resamples: ``(n_inner, B, n)`` multiplicities, row ``[j, b]`` drawing each group's
    ``n_g`` episodes with replacement from the multiset that replicate b's ``counts[b]`` holds (an episode drawn
    c times is c units of it), so that no episode absent from replicate b appears in its inner resamples."""
    n_b, n_cl = counts.shape
    rows = np.arange(n_inner * n_b)[:, None] * n_cl
    out = np.zeros(n_inner * n_b * n_cl, dtype=np.int64)
    for g in np.unique(group):
        m = np.flatnonzero(group == g)
        drawn = np.stack([np.repeat(m, counts[b, m]) for b in range(n_b)])        # (B, n_g): each multiset
        pos = rng.integers(0, len(m), size=(n_inner, n_b, len(m)))              # n_g draws from it
        ids = drawn[np.arange(n_b)[None, :, None], pos].reshape(n_inner * n_b, len(m))
        out += np.bincount((rows + ids).ravel(), minlength=out.size)
    return out.reshape(n_inner, n_b, n_cl)


def calibrated_percentile(at, point: float, reps: np.ndarray, counts: np.ndarray, group: np.ndarray,
                          n_inner: int, rng: np.random.Generator, confidence_level: float = 0.95
                          ) -> tuple[float, float]:
    """The double bootstrap's calibrated percentile interval: for each replicate b, ``n_inner`` inner resamples of
    its episodes (:func:`inner_counts`) and the statistic ``at`` on each; ``p_b`` = the share of them at or below
    ``point``; the interval is the ``reps`` quantiles at the ``alpha/2`` and ``1 - alpha/2`` quantiles of ``p_b``
    (the levels at which the percentile interval covers ``point`` in the bootstrap world as often as asked)."""
    ok = np.isfinite(reps)
    inner = inner_counts(np.asarray(counts)[ok], group, n_inner, rng)
    vals = at(inner.reshape(-1, inner.shape[2]).astype(np.float64)).reshape(inner.shape[:2])
    with np.errstate(invalid="ignore"):
        p = (vals <= point).sum(axis=0) / np.isfinite(vals).sum(axis=0)
    a = (1.0 - confidence_level) / 2.0
    levels = np.quantile(p[np.isfinite(p)], [a, 1.0 - a])
    return tuple(float(v) for v in np.quantile(reps[ok], levels))


def _dataset(job: tuple) -> dict:
    from wmeval.core.rng import make_rng
    from wmeval.estimators.resample import (
        _bca_interval,
        boundary_interval,
        cluster_counts,
        distance_interval,
        linear_share,
        studentized_interval,
    )

    d, n, t, rho, design, shift, axis, i, n_resamples, seed, n_inner, pivot, coverage_data = job
    if coverage_data:           # benchmarks/coverage.py's data set i of this cell, resampled as it resamples it
        data_seed = (seed, "coverage", "sets", COVERAGE_TRUTHS[shift], design, i)
        resample_seed = (i, "distribution_bootstrap")
    else:
        data_seed = (seed, "kid_interval_variants", design, shift, axis % d, n, i)
        resample_seed = (seed, "kid_interval_variants", i)
    kb, group, truth = _kernel_blocks(d, n, t, rho, design, shift, axis, data_seed)
    n_cl = len(group)
    counts = cluster_counts(np.arange(n_cl), group, n_cl, n_resamples, make_rng(*resample_seed))
    c = counts.astype(np.float64)
    point, reps = kb.at(np.ones(n_cl)), kb.at(c)
    se, se_reps = kb.standard_error(np.ones(n_cl), group), kb.standard_error(c, group)
    share = linear_share(reps, counts)
    bounds = {"boundary": boundary_interval(point, reps, counts, kb.plugin(), 0.95),
              "percentile": tuple(np.quantile(reps, [0.025, 0.975])),
              "bca": _bca_interval(reps, point, kb.at(1.0 - np.eye(n_cl)), 0.95),
              "bootstrap_t": studentized_interval(point, se, reps, se_reps, 0.95),
              "oracle": (point - pivot[1], point - pivot[0])}
    low, high, method = distance_interval(point, reps, counts, kb.plugin(), 0.95, se, se_reps)
    bounds["hybrid"] = (low, high)
    bounds["calibrated_switch"] = (calibrated_percentile(kb.at, point, reps, counts, group, n_inner,
                                                         make_rng(seed, "kid_interval_variants", "inner", i))
                                   if method == "bootstrap-t" else bounds["hybrid"])
    return {"truth": float(truth), "point": float(point), "se": float(se), "linear_share": share,
            "bounds": {k: (float(lo), float(hi)) for k, (lo, hi) in bounds.items()},
            **{k: (bool(lo <= truth <= hi), bool(lo > 0)) for k, (lo, hi) in bounds.items()}}


def paired_test(hits: np.ndarray, other: np.ndarray) -> dict:
    """Two intervals' coverage on the same data sets, compared: the data sets only ``hits`` covers, those only
    ``other`` covers, and the exact McNemar test's two-sided p-value (a binomial test on the discordant ones)."""
    from scipy.stats import binomtest

    only, only_other = int((hits & ~other).sum()), int((~hits & other).sum())
    n = only + only_other
    return {"only_this": only, "only_switch": only_other,
            "mcnemar_p": float(binomtest(min(only, only_other), n, 0.5).pvalue) if n else 1.0}


#: Switch rules compared on dumped data sets (``--compare-rules``): each picks an interval from a data set's record.
RULES = {
    "boundary": lambda r: r["bounds"]["boundary"],
    "bootstrap_t": lambda r: r["bounds"]["bootstrap_t"],
    "shipped (share > 0.9)": lambda r: r["bounds"]["hybrid"],
    "z > 2": lambda r: r["bounds"]["bootstrap_t"] if r["point"] > 2 * r["se"] else r["bounds"]["boundary"],
    "union if z > 2": lambda r: ((min(r["bounds"]["bootstrap_t"][0], r["bounds"]["boundary"][0]),
                                  max(r["bounds"]["bootstrap_t"][1], r["bounds"]["boundary"][1]))
                                 if r["point"] > 2 * r["se"] else r["bounds"]["boundary"]),
}


def compare_rules(paths: list[str]) -> dict:
    """Coverage of each rule in :data:`RULES` per cell of the dumped data sets (``--dump``), the worst cell, and the
    summed distance of the cells' coverage from 93-97% (percentage points)."""
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines()]
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["dim"], r["episodes"], r["shift"], r["axis"], r["design"]), []).append(r)
    out = {"cells": [], "worst": {}, "outside_93_97": {}}
    for key, rs in sorted(cells.items()):
        cov = {}
        for name, pick in RULES.items():
            b = [pick(r) for r in rs]
            cov[name] = float(np.mean([lo <= r["truth"] <= hi for r, (lo, hi) in zip(rs, b)]))
        out["cells"].append({"dim": key[0], "episodes": key[1], "shift": key[2], "axis": key[3], "design": key[4],
                             "datasets": len(rs), "median_z": float(np.median([r["point"] / r["se"] for r in rs])),
                             "coverage": cov})
    for name in RULES:
        c = np.array([cell["coverage"][name] for cell in out["cells"]])
        out["worst"][name] = float(c.min())
        out["outside_93_97"][name] = float(100 * (np.clip(0.93 - c, 0, None) + np.clip(c - 0.97, 0, None)).sum())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=1000)
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--dim", type=int, default=4)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--shifts", type=float, nargs="+", default=[0.5, 1.5])
    ap.add_argument("--no-zero", action="store_true", help="leave out the truth-0 cells")
    ap.add_argument("--resamples", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--inner-resamples", type=int, default=100,
                    help="inner resamples per replicate for the calibrated interval (the double bootstrap)")
    ap.add_argument("--oracle-datasets", type=int, default=2000,
                    help="data sets of each cell, apart from its own, that give the oracle's pivot")
    ap.add_argument("--coverage-data-sets", action="store_true",
                    help="take benchmarks/coverage.py's data sets (its seeds, --seed 0) and its resampling seeds "
                         "instead of this benchmark's own: its cells' intervals, beside the others")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "kid_interval_variants.json"))
    ap.add_argument("--dump", default=None, help="also write each data set's point, standard error, linear share "
                                                 "and intervals here (JSON lines), to study other switch rules")
    ap.add_argument("--compare-rules", nargs="+", default=None, metavar="DUMP",
                    help="compare the switch rules on these dumps (written by --dump) and print the result; no run")
    args = ap.parse_args()
    if args.compare_rules:
        print(json.dumps(compare_rules(args.compare_rules), indent=2))
        return
    if args.dump:
        Path(args.dump).write_text("")             # each run's dump on its own: cells appended below
    if args.coverage_data_sets and (args.seed != 0 or set(args.shifts) - set(COVERAGE_TRUTHS)):
        ap.error("--coverage-data-sets: coverage.py's data sets are seed 0's, at shifts 0.5 and 1.5")
    res = {"dim": args.dim, "episodes": args.episodes, "frames_per_episode": args.frames, "rho": args.rho,
           "data_sets": "benchmarks/coverage.py's (its seeds and resampling seeds)" if args.coverage_data_sets
           else "this benchmark's own (--seed)",
           "datasets": args.datasets, "n_resamples": args.resamples, "confidence_level": 0.95,
           "hybrid_linear_share": STUDENTIZE_LINEAR_SHARE, "inner_resamples": args.inner_resamples,
           "oracle_datasets": args.oracle_datasets, "cells": []}
    # (shift, axis): a true 0, then each shift along the highest-variance axis (-1) and the lowest (0)
    cells = ([] if args.no_zero else [(0.0, 0)]) + [(shift, axis) for axis in (-1, 0) for shift in args.shifts]
    variances = np.linspace(0.5, 2.0, args.dim)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for shift, axis in cells:
            for design in ("paired", "unpaired"):
                errors = np.array(list(pool.map(_oracle_error, [
                    (args.dim, args.episodes, args.frames, args.rho, design, shift, axis, i, args.seed)
                    for i in range(args.oracle_datasets)], chunksize=16)))
                pivot = tuple(float(q) for q in np.quantile(errors, [0.025, 0.975]))
                rows = list(pool.map(_dataset, [(args.dim, args.episodes, args.frames, args.rho, design, shift, axis,
                                                 i, args.resamples, args.seed, args.inner_resamples, pivot,
                                                 args.coverage_data_sets) for i in range(args.datasets)],
                                     chunksize=4))
                points = np.array([r["point"] for r in rows])
                z = (points - points.mean()) / points.std()
                cell = {"shift": shift, "shift_axis_variance": float(variances[axis]) if shift else None,
                        "design": design,
                        "ij_se_over_estimate_sd": float(np.sqrt(np.mean([r["se"] ** 2 for r in rows])) / points.std()),
                        "estimate_skewness": float(np.mean(z ** 3)), "estimate_kurtosis": float(np.mean(z ** 4)),
                        "linear_share_median": float(np.median([r["linear_share"] for r in rows])),
                        "oracle_pivot": list(pivot)}
                shipped = np.array([r["hybrid"][0] for r in rows])
                for name in INTERVALS:
                    hit = np.array([r[name] for r in rows])
                    p = float(hit[:, 0].mean())
                    cell[name] = {"coverage": p, "coverage_se": float(np.sqrt(p * (1 - p) / len(rows))),
                                  ("power" if shift else "false_positive_rate"): float(hit[:, 1].mean()),
                                  **({} if name == "hybrid" else {"against_switch": paired_test(hit[:, 0], shipped)})}
                res["cells"].append(cell)
                print(json.dumps(cell), flush=True)
                if args.dump:
                    with open(args.dump, "a") as fh:
                        for i, r in enumerate(rows):
                            fh.write(json.dumps({"dim": args.dim, "episodes": args.episodes, "shift": shift,
                                                 "axis": axis, "design": design, "i": i, "truth": r["truth"],
                                                 **{k: r[k] for k in ("point", "se", "linear_share", "bounds")}})
                                     + "\n")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
