"""How well do direction-free rules for the boundary test cover when the data cannot tell the difference's direction?

``benchmarks/coverage.py`` finds the set-level intervals too wide (99-99.5%) for a small shift along the features'
lowest-variance axis with independent sides, and at the edge (93-97%) along the highest. This script measures what
the boundary test's rule (``wmeval.estimators.resample.boundary_interval``) and four others give in the model that
test is built on, with everything an interval would have to estimate given exactly.

The model: the estimated mean difference ``dh ~ N(delta, S)`` with the noise covariance ``S`` known, and the
statistic the unbiased ``T = |dh|^2 - tr S`` of ``theta = |delta|^2`` (the bias-corrected FD's mean term; with
equal covariances, as here, the whole FD). ``S`` is the covariance of the difference of episode means in
``coverage.py``'s design (episodes of ``t`` rows with within-episode correlation ``rho``, features with variances
0.5 to 2.0): ``2 (rho + (1 - rho) / t) / n Sigma`` with independent sides, ``2 (1 - rho) / t / n Sigma`` paired,
where the shared episode term cancels. Given ``delta``'s direction ``e``, ``T - theta = 2 sqrt(theta) e'z +
|z|^2 - tr S`` with ``z ~ N(0, S)`` exactly (drawn, ``--draws`` of them), so a test of each ``theta`` by that
distribution's 2.5% and 97.5% quantiles, inverted, covers 95% up to the hull of the accepted set. Not knowing
``e``, a rule must pick one per candidate ``theta``:

- ``known``: the true direction (the calibration check: about 95% in every cell);
- ``estimated``: the estimate's, ``dh / |dh|``: the shipped test's rule for KID, whose scale is its plug-in, about
  ``|dh|^2`` in its feature space (it shrinks the replicates' linear term, built on ``dh``, by
  ``sqrt(theta / |dh|^2)``); the bias-corrected FD's scale near 0 is the plug-in FD, which also carries the covariance
  terms' bias (about 1.25 |dh|^2 at d = 4 with 32 episodes and independent sides), so its test shrinks the linear term
  further than this rule does;
- ``estimated_raised``: the same with the shipped upper-end rule: the upper end raised to the percentile
  interval's, ``T`` plus the 97.5% quantile of ``2 dh'z + |z|^2 - tr S`` (the replicates' own linear term, unshrunk);
- ``restricted``: the maximum-likelihood ``delta`` on the sphere ``|delta|^2 = theta`` (the parametric bootstrap
  at the restricted estimate), which leans toward the directions the data resolve best;
- ``worst``: the highest-variance axis, the least favourable one.

Per cell (truth 0, and a shift of 0.5 and 1.5 along the lowest- and the highest-variance axis), over ``--datasets``
draws of ``dh``: the coverage of each rule's interval, its power (lower end above 0), and, for ``known``, the
acceptance rate of the true ``theta`` (the test's own level, which the interval's hull can only raise).
The interval's lower end follows the shipped test: where ``T`` is not too high for a distance of 0 (below the 97.5%
quantile of ``|z|^2 - tr S``), it reaches 0. This is the Gaussian mean model alone: the real replicates also carry
the covariance terms of the FD, KID's kernel features, and the noise of estimating ``S`` from 32 episodes, so the
script says what these five rules do in that model; it does not reproduce ``coverage.py``'s cells.

    python benchmarks/direction_oracle.py [--datasets 500] [--draws 8000] [--out benchmarks/results/direction_oracle.json]

The results carry their run (``run``): the code (this script's sha256, :func:`wmeval.core.digest.code_files`), the
command, numpy's release, Python and the date. The scorecard reads the figures only while that code is unchanged
(``wmeval.report.scorecard.oracle_stale``); a run whose script changed while it went on stops without writing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

RULES = ("known", "estimated", "estimated_raised", "restricted", "worst")
LEVEL = 0.95


def noise_variances(d: int, episodes: int, frames: int, rho: float, design: str) -> np.ndarray:
    """The diagonal of ``S``, the covariance of the difference of the two sides' episode-mean averages, in
    ``coverage.py``'s design (feature variances ``linspace(0.5, 2.0, d)``)."""
    per_episode = (1.0 - rho) / frames if design == "paired" else rho + (1.0 - rho) / frames
    return np.linspace(0.5, 2.0, d) * 2.0 * per_episode / episodes


def restricted_direction(dh: np.ndarray, lam: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """``(G, d)`` unit vectors: for each ``theta``, the direction of ``argmin (dh - x)' S^-1 (dh - x)`` over
    ``|x|^2 = theta`` (``S = diag(lam)``). The minimizer is ``x = (S^-1 + mu I)^-1 S^-1 dh`` with ``mu`` the root
    of ``|x(mu)|^2 = theta`` above ``-1 / max(lam)`` (``|x(mu)|`` falls with ``mu`` there), found by bisection."""
    theta = np.atleast_1d(np.asarray(theta, dtype=np.float64))
    a = dh / lam
    lo = np.full(theta.shape, -1.0 / lam.max() * (1.0 - 1e-12))
    hi = np.full(theta.shape, 1.0)
    while True:                                                   # widen until |x(hi)|^2 <= theta everywhere
        big = np.sum((a[None] / (1.0 / lam[None] + hi[:, None])) ** 2, axis=1) > theta
        if not big.any():
            break
        hi = np.where(big, hi * 4.0, hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        big = np.sum((a[None] / (1.0 / lam[None] + mid[:, None])) ** 2, axis=1) > theta
        lo, hi = np.where(big, mid, lo), np.where(big, hi, mid)
    x = a[None] / (1.0 / lam[None] + 0.5 * (lo + hi)[:, None])
    return x / np.linalg.norm(x, axis=1, keepdims=True)


class Test:
    """The exact test of ``theta`` along a direction: ``T - theta`` against the quantiles of
    ``2 sqrt(theta) e'z + |z|^2 - tr S`` over the fixed draws ``z``."""

    def __init__(self, lam: np.ndarray, draws: int, rng: np.random.Generator):
        self.lam = lam
        self.z = rng.normal(size=(draws, len(lam))) * np.sqrt(lam)
        self.deg = np.sum(self.z ** 2, axis=1) - lam.sum()
        self.q = ((1.0 - LEVEL) / 2.0, 1.0 - (1.0 - LEVEL) / 2.0)
        self.deg_q_hi = float(np.quantile(self.deg, self.q[1]))     # the test's upper quantile at a distance of 0

    def accepts(self, t: float, theta: np.ndarray, directions: np.ndarray) -> np.ndarray:
        """``(G,)``: whether each ``theta`` is accepted, its linear term along ``directions`` ``(G, d)``."""
        s = 2.0 * np.sqrt(np.maximum(theta, 0.0))[:, None] * (directions @ self.z.T) + self.deg[None]
        q_lo, q_hi = np.quantile(s, self.q, axis=1)
        return (q_lo <= t - theta) & (t - theta <= q_hi)

    def interval(self, t: float, direction_of, grid: int = 96, refine: int = 12) -> tuple[float, float]:
        """The hull of the accepted ``theta >= 0``: a scan over ``sqrt(theta)``, then bisection at both ends.
        ``direction_of(theta)`` gives the ``(G, d)`` directions. ``(nan, nan)`` when nothing is accepted."""
        spread = np.sqrt(2.0 * np.sum(self.lam ** 2)) + 2.0 * np.sqrt(self.lam.max() * max(t, 0.0) + 1e-300)
        top = np.sqrt(max(t, 0.0) + 8.0 * spread) + 8.0 * np.sqrt(self.lam.max())
        u = np.linspace(0.0, top, grid + 1)
        acc = self.accepts(t, u * u, direction_of(u * u))
        if acc[-1]:
            raise RuntimeError(f"the scan's top end {top * top:.4g} is accepted; widen it")
        idx = np.flatnonzero(acc)
        if not idx.size:
            return float("nan"), float("nan")

        def edge(inside: float, outside: float) -> float:
            for _ in range(refine):
                mid = 0.5 * (inside + outside)
                if self.accepts(t, np.array([mid * mid]), direction_of(np.array([mid * mid])))[0]:
                    inside = mid
                else:
                    outside = mid
            return inside

        # As the shipped test (``_inverted_test``): where the estimate is not too high for a distance of 0 (its
        # basic lower end ``T - q_hi`` at 0 is at or below 0; always so where 0 is accepted), the interval reaches
        # down to (and below) 0.
        low = 0.0 if t <= self.deg_q_hi else edge(u[idx[0]], u[idx[0] - 1])
        return low * low, edge(u[idx[-1]], u[idx[-1] + 1]) ** 2

    def raised(self, t: float, dh: np.ndarray, high: float) -> float:
        """The shipped upper-end rule (``boundary_interval``): where the test accepts a positive distance, the upper
        end at least the percentile interval's, the replicates' ``1 - alpha/2`` quantile recentred on the estimate:
        here ``T`` plus that quantile of ``2 dh'z + |z|^2 - tr S``, the replicates' linear term at its full size."""
        if not (np.isfinite(high) and high > 0):
            return high
        return max(high, t + float(np.quantile(2.0 * (self.z @ dh) + self.deg, self.q[1])))


def intervals(test: Test, dh: np.ndarray, e_true: np.ndarray) -> dict[str, tuple[float, float]]:
    """Every rule's interval ``(low, high)`` for one estimated difference ``dh`` (``e_true``: the true direction)."""
    lam = test.lam
    t = float(dh @ dh - lam.sum())
    fixed = {"known": e_true, "estimated": dh / np.linalg.norm(dh), "worst": np.eye(len(lam))[int(np.argmax(lam))]}
    out = {}
    for rule in RULES:
        if rule == "restricted":
            low, high = test.interval(t, lambda th: restricted_direction(dh, lam, np.maximum(th, 1e-300)))
        else:
            e = fixed["estimated" if rule == "estimated_raised" else rule]
            low, high = test.interval(t, lambda th, e=e: np.repeat(e[None], len(th), axis=0))
        if rule == "estimated_raised":
            high = test.raised(t, dh, high)
        out[rule] = (low, high)
    return out


def _cell(job: tuple) -> dict:
    """One cell: every rule's coverage and power over the data sets, and ``known``'s acceptance of the truth."""
    d, episodes, frames, rho, design, truth, axis, size, datasets, draws, seed = job
    lam = noise_variances(d, episodes, frames, rho, design)
    rng = np.random.default_rng([seed, d, episodes, int(design == "paired"), axis, int(round(size * 100))])
    test = Test(lam, draws, rng)
    delta = np.zeros(d)
    delta[axis] = size
    theta0 = float(delta @ delta)
    e_true = delta / np.sqrt(theta0) if theta0 > 0 else np.eye(d)[axis]
    hits = {r: 0 for r in RULES}
    above = {r: 0 for r in RULES}
    accepted = 0
    for _ in range(datasets):
        dh = delta + rng.normal(size=d) * np.sqrt(lam)
        accepted += bool(test.accepts(float(dh @ dh - lam.sum()), np.array([theta0]), e_true[None])[0])
        for rule, (low, high) in intervals(test, dh, e_true).items():
            hits[rule] += bool(np.isfinite(low) and low <= theta0 <= high)
            above[rule] += bool(np.isfinite(low) and low > 0)
    out = {"dim": d, "episodes": episodes, "design": design, "truth": truth,
           "axis": "lowest" if axis == 0 else "highest", "true_value": theta0, "datasets": datasets,
           "known_accepts_truth": accepted / datasets}
    for rule in RULES:
        out[rule] = {"coverage": hits[rule] / datasets,
                     ("false_positive_rate" if theta0 == 0 else "power"): above[rule] / datasets}
    return out


def jobs(args: argparse.Namespace) -> list[tuple]:
    """The cells: per (d, episodes) design and sides, a truth of 0 and shifts of 0.5 and 1.5 along the lowest-
    and the highest-variance axis."""
    out = []
    for d, episodes in ((4, 32), (4, 64), (16, 32)):
        for design in ("paired", "unpaired"):
            out.append((d, episodes, args.frames, args.rho, design, "zero", 0, 0.0, args.datasets, args.draws,
                        args.seed))
            for truth, size in (("shift", 0.5), ("large shift", 1.5)):
                for axis in (0, d - 1):
                    out.append((d, episodes, args.frames, args.rho, design, truth, axis, size, args.datasets,
                                args.draws, args.seed))
    return out


def run_stamp(argv: list[str]) -> dict:
    """This run's record: the code its figures come from (this script, whose sha256 the scorecard checks), the
    command, numpy's release, Python and the date (UTC)."""
    from wmeval.core.digest import code_files
    from wmeval.lineage.provenance import package_versions

    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join(["python", "benchmarks/direction_oracle.py", *argv]),
            "code": code_files(Path(__file__), skip=("wmeval.core.digest", "wmeval.lineage")),
            "packages": {k: v for k, v in package_versions().items() if k == "numpy"},
            "python": platform.python_version()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=500)
    ap.add_argument("--draws", type=int, default=8000)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default="benchmarks/results/direction_oracle.json")
    args = ap.parse_args()
    stamp = run_stamp(sys.argv[1:])
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        cells = []
        for cell in pool.map(_cell, jobs(args)):
            print(json.dumps(cell), flush=True)
            cells.append(cell)
    from wmeval.core.digest import changed_files

    if (changed := changed_files(stamp["code"])):
        sys.exit(f"benchmarks/direction_oracle.py: {', '.join(changed)} changed while the run went on; nothing was "
                 "written: rerun it")
    result = {"datasets": args.datasets, "draws": args.draws, "frames_per_episode": args.frames, "rho": args.rho,
              "confidence_level": LEVEL, "seed": args.seed, "rules": list(RULES), "cells": cells, "run": stamp}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
