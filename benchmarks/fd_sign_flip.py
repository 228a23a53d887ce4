"""The bias-corrected FD's permutation test of 0 in the pipeline's settings: its level and power, against the
test that trades trajectories one by one.

The bootstrap stage tests FD = 0 with a sign flip (``wmeval.estimators.distributional.Exchange``, paired): each
(plan, episode) trades its M realized futures and the model's K samples between the sides or not, each reweighted so
that a side keeps the group's weight. The alternative it replaced deals each group's M + K trajectories anew, M of
them to the reference (``Exchange`` with ``paired=False`` on the same groups): an exact test that each history's
futures are exchangeable, a stronger claim than FD = 0.

Data: ``--groups`` (plan, episode) groups of ``--steps`` rows per trajectory, d = 2, a history effect shared by the
group's trajectories (variance ``rho``) and independent noise; an action a = +-1 per group, drawn symmetric, whose
effect grows over the steps. Cells (each ``--datasets`` data sets, ``--permutations`` permuted data sets each):

- ``exchangeable``: the model's samples have the realized futures' distribution given the history (a true 0);
- ``marginal``: the model reverses the action's effect. With symmetric actions its futures have the realized ones'
  distribution over the histories (FD = 0 in the population by symmetry; ``population_fd``, the plug-in on 20000
  groups, is near 0), but not history by history;
- ``invalid``: exchangeable, with a drift over the steps and the model's last 2 steps invalid in half the groups,
  with the realized rows of those steps left out of the test (``steps``, as the stage does) or kept (``no steps``);
- ``shift``: the model's futures shifted by 0.15 along the first axis (power);
- ``exhaustive``: exchangeable, M = K = 4, 8 groups, all 256 flips enumerated (the flip is then a permutation of the
  trajectories, so the test's level is exact up to the data sets' draw).

Each cell reports the share of data sets whose test rejects 0 at 5%, for the pooled and the stratified FD (two strata,
early and late steps), with ``se``, the binomial standard error of a share of 5% over its data sets (a test's level's;
a power cell's own is larger).

    python benchmarks/fd_sign_flip.py [--datasets 400] [--permutations 100] [--jobs 2]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ALPHA = 0.05


def data_set(rng: np.random.Generator, groups: int, realized: int, samples: int, steps: int, rho: float,
             kind: str, with_steps: bool = True):
    """``(reference, model)`` sides of one data set (``kind``: exchangeable, marginal, invalid or shift)."""
    from wmeval.estimators.distributional import Side

    d = 2
    hist = rng.normal(size=(groups, d)) * np.sqrt(rho)
    action = rng.choice([-1.0, 1.0], size=groups)
    axis = np.eye(d)[0]

    def side(ids, model: bool) -> Side:
        xs, traj, stratum = [], [], []
        for g in range(groups):
            for k in ids:
                noise = rng.normal(size=(steps, d)) * np.sqrt(1 - rho)
                for t in range(steps):
                    if model and kind == "invalid" and g < groups // 2 and t >= steps - 2:
                        continue                                      # the model's invalid rows
                    sign = -1.0 if (model and kind == "marginal") else 1.0
                    x = hist[g] + noise[t] + sign * action[g] * axis * (t + 1) / steps
                    x = x + (0.5 * t if kind == "invalid" else 0.0) + (0.15 * axis if model and kind == "shift" else 0)
                    xs.append(x)
                    traj.append((g, k, t))
                    stratum.append("early" if t < steps // 2 else "late")
        traj = np.array(traj, dtype=np.int64)
        return Side(np.array(xs), traj[:, 0], np.array(stratum), traj if with_steps else traj[:, :2])
    return side(range(-realized, 0), False), side(range(samples), True)


def _rejects(job: tuple) -> tuple[bool, bool]:
    """Whether one data set's test rejects 0, pooled and stratified."""
    from wmeval.estimators.distributional import Exchange

    kind, scheme, realized, samples, i, args = job
    rng = np.random.default_rng([args["seed"], i, realized, samples, len(kind), len(scheme)])
    ref, model = data_set(rng, args["groups"], realized, samples, args["steps"], args["rho"], kind,
                          with_steps=scheme != "flip, no steps")
    ex = Exchange.of("frame", ref, model, ["early", "late"], paired=scheme != "deal")
    p = ex.p_values(ex.counts(args["permutations"], rng), np.array([0.5, 0.5]), n_jobs=1)
    return p[0] <= ALPHA, p[1] <= ALPHA


def _exhaustive(job: tuple) -> tuple[bool, bool]:
    """One data set's test over all 2^G flips (M = K = 4)."""
    from wmeval.estimators.distributional import Exchange
    from wmeval.estimators.resample import permutation_p_value

    i, args, groups = job
    rng = np.random.default_rng([args["seed"], i, 99])
    ref, model = data_set(rng, groups, 4, 4, args["steps"], args["rho"], "exchangeable")
    ex = Exchange.of("frame", ref, model, ["early", "late"])
    _, g = np.unique(ex.group, return_inverse=True)
    flips = np.array(list(itertools.product([False, True], repeat=groups)))[:, g]
    c = np.concatenate([np.where(ex.on_ref, ~flips, flips), np.where(ex.on_ref, flips, ~flips)], axis=1)
    pooled, strat = ex.statistics(c.astype(np.float64), np.array([0.5, 0.5]), n_jobs=1)
    return permutation_p_value(pooled, ex.scale) <= ALPHA, permutation_p_value(strat, ex.scale) <= ALPHA


def population_fd(groups: int = 20000, rho: float = 0.7, steps: int = 5, seed: int = 0) -> float:
    """The ``marginal`` model's pooled FD from ``groups`` groups, one realized future and one sample each."""
    from wmeval.metrics import frechet_distance, gaussian_stats

    ref, model = data_set(np.random.default_rng(seed), groups, 1, 1, steps, rho, "marginal")
    a, b = gaussian_stats(ref.x), gaussian_stats(model.x)
    return float(frechet_distance(a.mu, a.sigma, b.mu, b.sigma))


CELLS = ([("exchangeable", s, m, k) for s in ("flip", "deal") for m, k in ((1, 1), (1, 4), (4, 1), (4, 4))]
         + [("marginal", s, m, k) for s in ("flip", "deal") for m, k in ((1, 1), (1, 4), (4, 1), (4, 4))]
         + [("invalid", s, m, k) for s in ("flip", "flip, no steps") for m, k in ((1, 4), (4, 4))]
         + [("shift", s, m, k) for s in ("flip", "deal") for m, k in ((1, 4), (4, 1))])


def _summary(hits: list[tuple[bool, bool]]) -> dict:
    h = np.array(hits, dtype=float)
    n = len(h)
    return {"rejects_pooled": float(h[:, 0].mean()), "rejects_stratified": float(h[:, 1].mean()),
            "se": float(np.sqrt(ALPHA * (1 - ALPHA) / n)), "datasets": n}


def _provenance(argv: list[str]) -> dict:
    from wmeval.lineage.provenance import package_versions

    root = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(root)]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "src", "benchmarks"], capture_output=True,
                           text=True).stdout.strip()
    return {"command": " ".join(["python", "benchmarks/fd_sign_flip.py", *argv]), "commit": commit,
            "uncommitted_changes": bool(dirty),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "packages": {k: v for k, v in package_versions().items() if k in ("numpy", "scipy")},
            "python": platform.python_version()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=400)
    ap.add_argument("--permutations", type=int, default=100)
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rho", type=float, default=0.7)
    ap.add_argument("--exhaustive-datasets", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fd_sign_flip.json"))
    args = ap.parse_args()
    a = {k: getattr(args, k) for k in ("permutations", "groups", "steps", "rho", "seed")}
    res = {**a, "datasets": args.datasets, "alpha": ALPHA, "run": _provenance(sys.argv[1:]),
           "population_fd_marginal": population_fd(rho=args.rho, steps=args.steps, seed=args.seed), "cells": []}
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for kind, scheme, m, k in CELLS:
            hits = list(pool.map(_rejects, [(kind, scheme, m, k, i, a) for i in range(args.datasets)], chunksize=8))
            cell = {"kind": kind, "scheme": scheme, "realized": m, "samples": k, **_summary(hits)}
            res["cells"].append(cell)
            print(json.dumps(cell), flush=True)
        hits = list(pool.map(_exhaustive, [(i, a, 8) for i in range(args.exhaustive_datasets)], chunksize=8))
        res["exhaustive"] = {"realized": 4, "samples": 4, "groups": 8, "flips": 256, **_summary(hits)}
        print(json.dumps(res["exhaustive"]), flush=True)
    res["minutes"] = round((time.time() - t0) / 60, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
