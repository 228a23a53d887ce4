"""Does a debiased size for the boundary test's linear term cover where the estimated direction does not?

``benchmarks/direction_oracle.py`` shows, in the Gaussian mean model the boundary test is built on (the estimated
mean difference ``dh ~ N(delta, S)``, the statistic ``T = |dh|^2 - tr S`` of ``theta = |delta|^2``), that the
shipped rule, which builds the linear term at a candidate ``theta`` along the estimated difference, covers 98.6%
where the difference lies along the features' lowest-variance axis and 93.8% along the highest (32 episodes, d = 4,
independent sides), against 95.2% and 96.4% with the true direction known: ``dh`` is mostly noise there, and the
noise leans toward the high-variance axes. Yet the linear term's law needs only its variance, ``4 theta q`` with
``q = e' S e`` along the true direction ``e``, and ``q`` has a nearly unbiased ratio estimate from the data:
``E[dh' S dh] = delta' S delta + tr S^2`` and ``E[|dh|^2] = delta' delta + tr S``, so

    q_debiased = (dh' S dh - tr S^2) / (|dh|^2 - tr S)

against the shipped rule's ``q_estimated = dh' S dh / |dh|^2``. In the replicates' terms ``4 dh' S dh`` is the
bootstrap's linear-part variance, ``2 tr S^2`` the degenerate part's, and ``|dh|^2 - tr S`` the unbiased estimate,
so the rule needs nothing the shipped interval does not already have. This script compares, on the oracle's design
and its own data sets (each rule on the same ones):

- ``known``: the true direction (calibration: about 95%);
- ``estimated``: the shipped rule without its upper-end raise (``direction_oracle.py``'s ``estimated``, on these
  data sets);
- ``debiased``: the linear term along ``dh`` with its variance ``4 theta q_debiased``, where the numerator and the
  denominator are both positive and ``q_debiased`` lies in ``[q_floor, sqrt(2 tr S^2)]`` (the shipped bound on the
  linear term's growth, ``var(L) / scale <= 4 sd(D)``), clipped into that range otherwise; ``q_estimated`` where
  either is not positive (``T <= 0``: the data hold no resolvable difference). ``q_floor`` is
  ``--floor`` times ``q_estimated``.

Power is the share whose lower end lies above 0. The lower end follows ``direction_oracle.py``'s test.

    python benchmarks/debiased_direction.py [--datasets 500] [--draws 8000] [--floor 0.25]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import direction_oracle as oracle  # noqa: E402  (a sibling script: its model, design and test)

RULES = ("known", "estimated", "debiased")


def debiased_quotient(dh: np.ndarray, lam: np.ndarray, floor: float) -> tuple[float, float]:
    """``(q_debiased, q_estimated)`` for one estimated difference (``S = diag(lam)``): see the module docstring."""
    q_est = float(dh @ (lam * dh) / (dh @ dh))
    num, den = float(dh @ (lam * dh) - lam @ lam), float(dh @ dh - lam.sum())
    if num <= 0 or den <= 0:
        return q_est, q_est
    return float(np.clip(num / den, floor * q_est, np.sqrt(2.0 * lam @ lam))), q_est


def _cell(job: tuple) -> dict:
    d, episodes, frames, rho, design, truth, axis, size, datasets, draws, seed, floor = job
    lam = oracle.noise_variances(d, episodes, frames, rho, design)
    rng = np.random.default_rng([seed, d, episodes, int(design == "paired"), axis, int(round(size * 100))])
    test = oracle.Test(lam, draws, rng)
    delta = np.zeros(d)
    delta[axis] = size
    theta0 = float(delta @ delta)
    e_true = delta / np.sqrt(theta0) if theta0 > 0 else np.eye(d)[axis]
    hits, above = dict.fromkeys(RULES, 0), dict.fromkeys(RULES, 0)
    ratio = []
    for _ in range(datasets):
        dh = delta + rng.normal(size=d) * np.sqrt(lam)
        t = float(dh @ dh - lam.sum())
        q_deb, q_est = debiased_quotient(dh, lam, floor)
        e_est = dh / np.linalg.norm(dh)
        ratio.append(q_deb / float(e_true @ (lam * e_true)))
        dirs = {"known": e_true, "estimated": e_est, "debiased": e_est * np.sqrt(q_deb / q_est)}
        for rule in RULES:
            e = dirs[rule]
            low, high = test.interval(t, lambda th, e=e: np.repeat(e[None], len(th), axis=0))
            hits[rule] += bool(np.isfinite(low) and low <= theta0 <= high)
            above[rule] += bool(np.isfinite(low) and low > 0)
    out = {"dim": d, "episodes": episodes, "design": design, "truth": truth,
           "axis": "lowest" if axis == 0 else "highest", "true_value": theta0, "datasets": datasets,
           "debiased_over_true_quotient_median": float(np.median(ratio))}
    for rule in RULES:
        out[rule] = {"coverage": hits[rule] / datasets,
                     ("false_positive_rate" if theta0 == 0 else "power"): above[rule] / datasets}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=500)
    ap.add_argument("--draws", type=int, default=8000)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--floor", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--truths", nargs="+", default=["shift", "large shift"], choices=["shift", "large shift"])
    ap.add_argument("--designs", nargs="+", default=["paired", "unpaired"], choices=["paired", "unpaired"])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "debiased_direction.json"))
    args = ap.parse_args()
    jobs = [j + (args.floor,) for j in oracle.jobs(args) if j[5] in args.truths and j[4] in args.designs]
    from wmeval.core.digest import code_files, file_sha256

    code = code_files(Path(__file__), skip=("wmeval.core.digest", "wmeval.lineage"))
    sibling = Path(oracle.__file__).resolve()
    code[sibling.relative_to(sibling.parents[1]).as_posix()] = file_sha256(sibling)
    res = {"datasets": args.datasets, "draws": args.draws, "floor": args.floor, "seed": args.seed,
           "run": {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "command": " ".join(["python", "benchmarks/debiased_direction.py", *sys.argv[1:]]),
                   "code": dict(sorted(code.items())), "numpy": np.__version__, "python": platform.python_version()},
           "cells": []}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for cell in pool.map(_cell, jobs):
            res["cells"].append(cell)
            print(json.dumps(cell), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
