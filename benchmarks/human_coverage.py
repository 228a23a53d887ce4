"""Coverage and power of crossed (trajectory x rater) bootstrap intervals for win rates in paired-comparison studies.

Synthetic studies with known truth, answered by :mod:`wmeval.human.simulate`'s raters: a Bradley-Terry model
whose candidates' log-strengths each rater shifts by a taste of their own (sd ``--rater-sd``) and each
trajectory by a difficulty shared by all raters (sd ``--trajectory-sd``), a coin flip with probability
``--lapse``; each rater judges ``trials`` trials drawn without replacement from trajectory x candidate pair
(:func:`wmeval.human.simulate.design_trials`), so a candidate's opponents are uniform over the others.

The estimand is a candidate's win rate in the population (infinitely many raters and trajectories) under that
design: ``mean over opponents j of (1 - lapse) E[logistic(s_i - s_j + D)] + lapse / 2``, where the random
effects' difference ``D`` is normal with variance ``2 rater_sd^2 + 2 trajectory_sd^2``; the expectation is
Gauss-Hermite quadrature (:func:`population_win_rates`). The formula is checked against one very large
simulated study first (``truth_check``: the differences in units of that study's crossed-bootstrap SE).

**Coverage**: per design (raters x trajectories x trials per rater), ``--datasets`` studies; for each, the
percentile intervals of every candidate's win rate from ``wmeval.human.crossed_bootstrap`` resampling
``("trajectory", "rater")`` crossed (Owen's pigeonhole bootstrap), and for contrast trajectories alone and raters
alone. Coverage is the share of intervals that contain the truth, with its binomial standard error;
``width_ratio`` is the mean width over 2 x 1.96 x the point estimates' sd across studies (1: the right width).

**Power** (sample-size planning): candidates ``A`` (log-strength +delta/2), ``B`` (-delta/2) and ``C`` (0);
per delta and design, the share of studies whose two-way interval of the win-rate difference A - B excludes 0
(at delta 0 the false-positive rate), with its binomial standard error.

The bootstrap is the library's own ``crossed_bootstrap``; only the statistic is this file's (two bincounts on
the judgments' precomputed candidate codes, the weights being the resample's integer multiplicities),
checked against ``wmeval.human.win_rates`` before the run.

    python benchmarks/human_coverage.py [--datasets 300] [--resamples 400] [--power-datasets 100]
    python benchmarks/human_coverage.py --quick        # a smoke run in seconds; writes nothing unless --out
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from wmeval.human import crossed_bootstrap, win_rates
from wmeval.human.simulate import RaterPopulation, design_trials, simulate_judgments

QUESTION = "realism"
FACTORS = {"trajectory x rater": ("trajectory", "rater"), "trajectory only": ("trajectory",),
           "rater only": ("rater",)}
#: log-strengths of the coverage study's candidates
COVERAGE_STRENGTHS = {"A": 0.75, "B": 0.25, "C": 0.0, "D": -0.75}


def population_win_rates(strengths: dict[str, float], *, rater_sd: float, trajectory_sd: float, lapse: float,
                         nodes: int = 80) -> pd.Series:
    """Each candidate's win rate over infinitely many raters and trajectories, opponents uniform over the others.

    ``P(i beats j) = (1 - lapse) E[1 / (1 + exp(-(s_i - s_j + D)))] + lapse / 2`` with
    ``D ~ N(0, 2 rater_sd^2 + 2 trajectory_sd^2)`` (each of the four deviations independent), the expectation by
    ``nodes``-point Gauss-Hermite quadrature: ``E f(sd Z) = sum_k w_k f(sqrt(2) sd x_k) / sqrt(pi)``.
    """
    x, w = np.polynomial.hermite.hermgauss(nodes)
    sd = np.sqrt(2 * rater_sd ** 2 + 2 * trajectory_sd ** 2)
    names = list(strengths)
    s = np.array([strengths[n] for n in names], dtype=np.float64)
    gap = s[:, None, None] - s[None, :, None] + np.sqrt(2) * sd * x[None, None, :]
    p = (1 / (1 + np.exp(-gap))) @ w / np.sqrt(np.pi)
    p = (1 - lapse) * p + lapse / 2
    np.fill_diagonal(p, np.nan)
    return pd.Series(np.nanmean(p, axis=1), index=names, name="population_win_rate")


def fast_win_rates(judgments: pd.DataFrame, names: list[str]):
    """A ``statistic(d, w)`` for ``crossed_bootstrap`` equal to ``win_rates(d, names, w)`` on ``judgments``'
    rows (in their order): the candidate codes are computed once, each call is two bincounts."""
    codes = {c: pd.Categorical(judgments[c], categories=names).codes for c in ("left", "right", "choice")}
    k, index = len(names), pd.Index(names)

    def statistic(d: pd.DataFrame, w: np.ndarray) -> pd.Series:
        assert len(d) == len(codes["choice"])
        games = np.bincount(codes["left"], w, k) + np.bincount(codes["right"], w, k)
        with np.errstate(invalid="ignore", divide="ignore"):
            return pd.Series(np.bincount(codes["choice"], w, k) / games, index=index)

    return statistic


def difference(statistic, a: str, b: str):
    """The statistic ``win rate a - win rate b``."""
    def diff(d: pd.DataFrame, w: np.ndarray) -> pd.Series:
        r = statistic(d, w)
        return pd.Series({f"{a} - {b}": r[a] - r[b]})
    return diff


def key_seed(*keys) -> int:
    """A stable seed for one simulated study, from its description (CRC-32)."""
    return zlib.crc32("/".join(map(str, keys)).encode())


def study(strengths: dict[str, float], args, *, raters: int, trajectories: int, trials: int,
          seed: int) -> pd.DataFrame:
    """One simulated study: fresh raters and trajectories (the population's seed) and a fresh design."""
    pop = RaterPopulation({QUESTION: strengths}, rater_sd=args.rater_sd, trajectory_sd=args.trajectory_sd,
                          lapse=args.lapse, seed=seed)
    design = design_trials(list(strengths), n_raters=raters, n_trajectories=trajectories,
                           trials_per_rater=trials, questions=(QUESTION,), seed=seed)
    return simulate_judgments(pop, design)


def self_check(args) -> None:
    """The fast statistic equals the library's win rates under random integer weights."""
    df = study(COVERAGE_STRENGTHS, args, raters=5, trajectories=6, trials=12, seed=key_seed("self check"))
    names = list(COVERAGE_STRENGTHS)
    w = np.random.default_rng(0).integers(0, 4, len(df))
    np.testing.assert_allclose(fast_win_rates(df, names)(df, w).to_numpy(),
                               win_rates(df, names, weights=w).to_numpy(), rtol=1e-12)


def truth_check(args) -> dict:
    """The quadrature truth against one very large study (its crossed-bootstrap SE the yardstick)."""
    truth = population_win_rates(COVERAGE_STRENGTHS, rater_sd=args.rater_sd, trajectory_sd=args.trajectory_sd,
                                 lapse=args.lapse)
    raters, trajectories, trials = args.check_raters, args.check_trajectories, args.check_trials
    df = study(COVERAGE_STRENGTHS, args, raters=raters, trajectories=trajectories, trials=trials,
               seed=key_seed("truth check"))
    ci = crossed_bootstrap(df, fast_win_rates(df, list(COVERAGE_STRENGTHS)), n_resamples=200, seed=0)
    # the bootstrap replicates' sd, from the percentile interval's half-width / 1.96 (near-normal here)
    se = (ci["high"] - ci["low"]) / (2 * 1.959964)
    out = {"raters": raters, "trajectories": trajectories, "trials_per_rater": trials, "judgments": len(df),
           "candidates": {c: {"truth": float(truth[c]), "simulated": float(ci.at[c, "point"]),
                              "difference": float(ci.at[c, "point"] - truth[c]), "se": float(se[c]),
                              "z": float((ci.at[c, "point"] - truth[c]) / se[c])} for c in truth.index}}
    naive = population_win_rates(COVERAGE_STRENGTHS, rater_sd=0.0, trajectory_sd=0.0, lapse=args.lapse)
    out["max_abs_z"] = max(abs(v["z"]) for v in out["candidates"].values())
    out["max_abs_difference"] = max(abs(v["difference"]) for v in out["candidates"].values())
    out["naive_max_abs_difference"] = float((naive - truth).abs().max())   # ignoring the random effects
    return out


def coverage(args) -> list[dict]:
    names = list(COVERAGE_STRENGTHS)
    truth = population_win_rates(COVERAGE_STRENGTHS, rater_sd=args.rater_sd, trajectory_sd=args.trajectory_sd,
                                 lapse=args.lapse)
    cells = []
    for raters, trajectories, trials in args.designs:
        hits = {f: [] for f in FACTORS}
        widths = {f: [] for f in FACTORS}
        points = []
        for i in range(args.datasets):
            df = study(COVERAGE_STRENGTHS, args, raters=raters, trajectories=trajectories, trials=trials,
                       seed=key_seed("coverage", raters, trajectories, trials, i))
            stat = fast_win_rates(df, names)
            for f, factors in FACTORS.items():
                ci = crossed_bootstrap(df, stat, n_resamples=args.resamples, seed=i, factors=factors)
                hits[f].append(((ci["low"] <= truth) & (truth <= ci["high"])).to_numpy())
                widths[f].append((ci["high"] - ci["low"]).to_numpy())
            points.append(ci["point"].to_numpy())
        points = np.array(points)
        spread = 2 * 1.959964 * points.std(axis=0, ddof=1)
        for f in FACTORS:
            h, wd = np.array(hits[f]), np.array(widths[f])
            cell = {"raters": raters, "trajectories": trajectories, "trials_per_rater": trials,
                    "judgments": raters * trials, "factors": f, "datasets": args.datasets,
                    "coverage": float(h.mean()),
                    # the candidates' hits in one study are correlated; the SE is that of one candidate's
                    "coverage_se": float(np.sqrt(h.mean() * (1 - h.mean()) / args.datasets)),
                    "mean_width": float(wd.mean()),
                    "width_ratio": float(wd.mean() / spread.mean()),
                    "by_candidate": {c: {"truth": float(truth[c]), "coverage": float(h[:, k].mean()),
                                         "mean_width": float(wd[:, k].mean()),
                                         "mean_point": float(points[:, k].mean()),
                                         "width_ratio": float(wd[:, k].mean() / spread[k])}
                                     for k, c in enumerate(names)}}
            cells.append(cell)
            print(f"{raters:>6} {trajectories:>6} {trials:>6}  {f:<20} {cell['coverage']:.3f} "
                  f"(se {cell['coverage_se']:.3f})  width {cell['mean_width']:.3f}  "
                  f"ratio {cell['width_ratio']:.2f}  "
                  + " ".join(f"{c}:{v['coverage']:.2f}" for c, v in cell["by_candidate"].items()), flush=True)
    return cells


def power(args) -> list[dict]:
    cells = []
    for delta in args.deltas:
        strengths = {"A": delta / 2, "B": -delta / 2, "C": 0.0}
        truth = population_win_rates(strengths, rater_sd=args.rater_sd, trajectory_sd=args.trajectory_sd,
                                     lapse=args.lapse)
        true_diff = float(truth["A"] - truth["B"])
        for raters in args.power_raters:
            for trials in args.power_trials:
                excl, hit, width = [], [], []
                for i in range(args.power_datasets):
                    df = study(strengths, args, raters=raters, trajectories=args.power_trajectories, trials=trials,
                               seed=key_seed("power", delta, raters, trials, i))
                    stat = difference(fast_win_rates(df, list(strengths)), "A", "B")
                    ci = crossed_bootstrap(df, stat, n_resamples=args.resamples, seed=i).iloc[0]
                    excl.append(ci.low > 0 or ci.high < 0)
                    hit.append(ci.low <= true_diff <= ci.high)
                    width.append(ci.high - ci.low)
                p = float(np.mean(excl))
                cell = {"delta": delta, "true_win_rate_difference": true_diff, "raters": raters,
                        "trajectories": args.power_trajectories, "trials_per_rater": trials,
                        "judgments": raters * trials, "datasets": args.power_datasets,
                        ("false_positive_rate" if delta == 0 else "power"): p,
                        "se": float(np.sqrt(p * (1 - p) / args.power_datasets)),
                        "coverage": float(np.mean(hit)), "mean_width": float(np.mean(width))}
                cells.append(cell)
                print(f"{delta:>5} {raters:>6} {trials:>6}  true diff {true_diff:.3f}  "
                      f"{'fpr' if delta == 0 else 'power'} {p:.2f} (se {cell['se']:.2f})  "
                      f"coverage {cell['coverage']:.2f}  width {cell['mean_width']:.3f}", flush=True)
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=300, help="studies per coverage design")
    ap.add_argument("--resamples", type=int, default=400, help="bootstrap resamples per interval")
    ap.add_argument("--rater-sd", type=float, default=0.5)
    ap.add_argument("--trajectory-sd", type=float, default=0.5)
    ap.add_argument("--lapse", type=float, default=0.05)
    ap.add_argument("--designs", type=str, default="6x24x40,12x24x40,24x48x40",
                    help="coverage designs, raters x trajectories x trials per rater, comma-separated")
    ap.add_argument("--power-datasets", type=int, default=100)
    ap.add_argument("--deltas", type=str, default="0,0.25,0.5,1.0")
    ap.add_argument("--power-raters", type=str, default="5,10,20")
    ap.add_argument("--power-trials", type=str, default="20,50")
    ap.add_argument("--power-trajectories", type=int, default=30)
    ap.add_argument("--check-raters", type=int, default=2000)
    ap.add_argument("--check-trajectories", type=int, default=2000)
    ap.add_argument("--check-trials", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="a tiny smoke run (seconds); writes only with --out")
    ap.add_argument("--out", default=None, help="results file (default benchmarks/results/human_coverage.json)")
    args = ap.parse_args()
    if args.quick:
        args.datasets, args.resamples, args.power_datasets = 4, 50, 3
        args.designs, args.deltas, args.power_raters, args.power_trials = "6x12x20", "0.5", "5", "20"
        args.check_raters = args.check_trajectories = 100
        args.check_trials = 20
    args.designs = [tuple(int(v) for v in d.split("x")) for d in args.designs.split(",")]
    args.deltas = [float(v) for v in args.deltas.split(",")]
    args.power_raters = [int(v) for v in args.power_raters.split(",")]
    args.power_trials = [int(v) for v in args.power_trials.split(",")]
    out = args.out or (None if args.quick else str(Path(__file__).parent / "results" / "human_coverage.json"))

    start = time.perf_counter()
    self_check(args)
    check = truth_check(args)
    print(f"truth check ({check['judgments']} judgments): max |simulated - quadrature| "
          f"{check['max_abs_difference']:.4f}, max |z| {check['max_abs_z']:.2f}; ignoring the random effects "
          f"would be off by {check['naive_max_abs_difference']:.3f}", flush=True)
    print(f"{'raters':>6} {'traj':>6} {'trials':>6}  {'factors':<20} coverage of 95%", flush=True)
    cov = coverage(args)
    print(f"{'delta':>5} {'raters':>6} {'trials':>6}  two-way interval of win rate A - win rate B", flush=True)
    pw = power(args)
    res = {"command": " ".join(["python", shlex.quote("benchmarks/human_coverage.py")]
                               + [shlex.quote(a) for a in sys.argv[1:]]),
           "settings": {"question": QUESTION, "rater_sd": args.rater_sd, "trajectory_sd": args.trajectory_sd,
                        "lapse": args.lapse, "coverage_strengths": COVERAGE_STRENGTHS,
                        "coverage_datasets": args.datasets, "power_datasets": args.power_datasets,
                        "n_resamples": args.resamples, "confidence_level": 0.95,
                        "method": "percentile; wmeval.human.crossed_bootstrap",
                        "power_strengths": "A +delta/2, B -delta/2, C 0",
                        "power_trajectories": args.power_trajectories},
           "truth_check": check, "coverage": cov, "power": pw,
           "wall_s": round(time.perf_counter() - start, 1)}
    print(f"wall {res['wall_s']} s", flush=True)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
