"""Half-sampling replicates and a permutation test at 0 for the bias-corrected FD's interval, beside the bootstrap.

The bias-corrected FD's boundary interval (``wmeval.stats.distribution_bootstrap``, the bootstrap stage's code) is
built on bootstrap replicates: plug-in FDs of episodes resampled with replacement. An episode drawn c times adds
c^2 of its self-pair terms, which the jackknife took out of the estimate, and the replicates' degenerate part is
too wide the more so the higher the dimension (``benchmarks/fd_replicate_spread.py``): in ``benchmarks/coverage.py``
the interval covers 98-100% with paired sides at d = 16 and 64. (This script's results led to shipping the
permutation test: the shipped interval is now ``bootstrap+permutation``, the test in ``distribution_bootstrap`` and
the bootstrap stage, ``wmeval.estimators.resample.with_zero_test``; ``bootstrap`` here is the boundary interval
alone, as shipped before it, and its results file records the run that computed it.)

Two alternatives, measured here on ``coverage.py``'s design (episodes of 10 rows, rho = 0.5, the covariance
diag(linspace(0.5, 2, d)), a true 0 and shifts of 0.5 and 1.5 along the lowest- and the highest-variance axis, paired
and independent sides) with fresh data sets:

- ``half``: half-sampling, each replicate the plug-in FD of half of each resampling group's episodes drawn without
  replacement (0/1 multiplicities, so no episode is ever paired with a copy of itself). For a linear statistic the
  spread of half-sample estimates around the full-sample one is exactly the full-sample estimate's (the finite
  population correction 1 - m/n is 1/2 at m = n/2), and to second order the degenerate part of a U-statistic's half
  samples, less their linear part in the multiplicities, has the estimate's own distribution. Recentred and
  turned into the boundary interval exactly as the shipped replicates are.
- ``permutation``: a permutation test of a true 0 on the plug-in FD: with paired sides each episode's real and
  generated rows are swapped or not at random, with independent sides the episodes are dealt to the two sides at
  random. Exact where, at a true 0, the episodes' rows are exchangeable between sides (the same distribution, not
  only the same mean and covariance), and it carries the estimate's finite-sample bias with it.
- ``bootstrap+permutation``, ``half+permutation``: each interval with 0 put in or taken out as the permutation
  test decides (taken out: the lower end moved to just above 0). Their coverage and power are reported; their width
  is not (the lower end is not the smallest positive distance their test accepts).

Reported per cell: coverage of the truth over all data sets (``coverage``: an interval the shipped two-scale
check would withhold counted as given) and over those the check passes (``coverage_given``, as ``coverage.py``
counts), the share whose interval lies entirely above 0 (false-positive rate at a true 0, power elsewhere), the mean
width over a normal interval of the estimate's own spread across data sets (above 1: conservative), the share below
and above, and the check's failure rate on each replicate set (``check_fails``:
``wmeval.estimators.resample.bias_check_failed`` measures the leftover bias against the replicates' spread, so with
narrower replicates it withholds more). The hybrids are counted over all data sets.

    python benchmarks/fd_half_sampling.py [--datasets 400] [--dims 4 16 64] [--resamples 500] [--permutations 500]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

INTERVALS = ("bootstrap", "half")
TRUTHS = (("zero", 0.0, 0), ("shift", 0.5, 0), ("large shift", 1.5, 0), ("shift, high axis", 0.5, -1),
          ("large shift, high axis", 1.5, -1))


def half_counts(group: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(B, N)`` 0/1 multiplicities: each row holds ``n_g // 2`` of each resampling group's ``n_g`` clusters, drawn
    without replacement."""
    group = np.asarray(group)
    out = np.zeros((n_resamples, len(group)), np.int64)
    for g in np.unique(group):
        idx = np.flatnonzero(group == g)
        keys = rng.random((n_resamples, len(idx)))
        chosen = idx[np.argsort(keys, axis=1)[:, :len(idx) // 2]]
        np.put_along_axis(out, chosen, 1, axis=1)
    return out


def permutation_sets(x: np.ndarray, y: np.ndarray, x_cluster: np.ndarray, y_cluster: np.ndarray, paired: bool,
                     n_permutations: int, rng: np.random.Generator):
    """``(sets, counts)``: one view's sets whose FD under each row of ``counts`` is the plug-in FD of a permuted
    data set. Both sides hold every row of the data (``x`` then ``y``, clusters ``0..n-1`` on the real side and
    ``n..2n-1`` on the generated one, ``n`` the clusters of ``x`` and ``y`` together); a permutation weights each
    side's copy 0 or 1. Paired sides (``x_cluster`` and ``y_cluster`` the same ids ``0..m-1``): each episode's real and
    generated rows swapped or not; independent sides: the episodes dealt at random, as many to each side as it had.
    Row 0 of ``counts`` is the data itself."""
    from wmeval.estimators import distributional as dist

    rows = np.concatenate([x, y])
    if paired:
        m = int(max(x_cluster.max(), y_cluster.max())) + 1
        unit = np.concatenate([x_cluster, y_cluster + m])          # (episode, side): 2 m units
        swap = rng.integers(0, 2, size=(n_permutations, m))
        swap[0] = 0
        real = np.concatenate([1 - swap, swap], axis=1)            # unit weights on the real side
    else:
        n_x = int(x_cluster.max()) + 1
        unit = np.concatenate([x_cluster, y_cluster + n_x])
        n_units = int(unit.max()) + 1
        real = np.zeros((n_permutations, n_units), np.int64)
        for p in range(n_permutations):
            real[p, rng.permutation(n_units)[:n_x] if p else np.arange(n_x)] = 1
    n_units = real.shape[1]
    label = np.full(len(rows), "all")
    sets = dist.ViewSets("frame", dist.Side(rows, unit, label), {"fake": dist.Side(rows, unit + n_units, label)}, [])
    return sets, np.concatenate([real, 1 - real], axis=1)


def hybrid(low: float, high: float, accepts_zero: bool) -> tuple[float, float]:
    """An interval with 0 put in (``accepts_zero``) or taken out as the permutation test decides."""
    if accepts_zero:
        return min(low, 0.0), max(high, 0.0)
    return (max(low, float(np.nextafter(0.0, 1.0))), high) if high > 0 else (float("nan"), float("nan"))


def data_set(job: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, x_episode, y_cluster, shift)``: one data set of a cell (``job`` as :func:`_dataset` takes it), drawn
    as ``coverage.py`` draws its set-level data sets, from this script's own seeds."""
    from wmeval.core.rng import make_rng

    d, design, truth_name, shift, axis, i, n, t, rho, *_, seed = job
    chol = np.linalg.cholesky(np.diag(np.linspace(0.5, 2.0, d)))
    delta = np.zeros(d)
    delta[axis] = shift
    ep = np.repeat(np.arange(n), t)
    rng = make_rng(seed, "fd_half_sampling", design, d, truth_name, i)
    a = rng.normal(size=(n, d))
    b = a if design == "paired" else rng.normal(size=(n, d))
    x = (np.sqrt(rho) * a[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
    y = delta + (np.sqrt(rho) * b[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
    return x, y, ep, ep if design == "paired" else ep + n, delta


def _dataset(job: tuple) -> dict:
    from threadpoolctl import threadpool_limits

    from wmeval.core.rng import make_rng
    from wmeval.estimators import distributional as dist
    from wmeval.estimators.resample import (
        JackknifePlan,
        bias_check_failed,
        boundary_interval,
        cluster_counts,
        jackknife_centred,
    )

    _, design, _, _, _, i, _, _, _, n_resamples, n_perm, seed = job
    x, y, ep, y_ids, delta = data_set(job)
    inv_r, inv_f, group = dist._cluster_index(ep, y_ids)
    n_cl = len(group)
    label = np.full(len(x), "all")
    one = dist._ViewFD.of(dist.ViewSets("frame", dist.Side(x, inv_r, label), {"fake": dist.Side(y, inv_f, label)},
                                        []), n_cl)
    every = {"bootstrap": cluster_counts(np.arange(n_cl), group, n_cl, n_resamples,
                                         make_rng(seed, "fd_half_sampling", "bootstrap", i)),
             "half": half_counts(group, n_resamples, make_rng(seed, "fd_half_sampling", "half", i))}
    out = {"truth": float(delta @ delta)}
    with threadpool_limits(limits=1):
        plugin = float(one.many(np.ones((1, n_cl), np.int64))[0, 0, 0])
        plan = JackknifePlan.of(group)
        bias, leftovers = plan.estimate(one.many(plan.counts)[:, 0, 0], np.ones(n_cl, bool))
        bias = float(bias)
        out["point"] = plugin - bias
        for name, counts in every.items():
            t0 = time.perf_counter()
            reps = np.concatenate([one.many(block) for block in dist.replicate_blocks(counts)])[:, 0, 0]
            ok = np.isfinite(reps)
            lo, hi = boundary_interval(plugin, jackknife_centred(reps[ok], plugin, bias), counts[ok], plugin, 0.95,
                                       corrected=plugin - bias)
            out[name] = (lo, hi, bool(bias_check_failed(leftovers, reps[ok])), time.perf_counter() - t0)
        sets, pcounts = permutation_sets(x, y, ep, ep, design == "paired", n_perm,
                                         make_rng(seed, "fd_half_sampling", "permutation", i))
        perm = dist._ViewFD.of(sets, pcounts.shape[1])
        fds = np.concatenate([perm.many(block) for block in dist.replicate_blocks(pcounts)])[:, 0, 0]
    # fds[0] is the data itself (the plug-in again, up to rounding): the p-value counts it among the permutations
    out["p_value"] = float(np.mean(fds >= fds[0] * (1 - 1e-12)))
    return out


def cell_summary(rows: list[dict]) -> dict:
    """One cell's figures from its data sets' results (:func:`_dataset`)."""
    truth = rows[0]["truth"]
    points = np.array([r["point"] for r in rows])
    sd = float(np.std(points))
    accept = np.array([r["p_value"] > 0.05 for r in rows])
    out = {"true_value": truth, "estimate_mean": float(points.mean()), "estimate_sd": sd,
           "permutation_rejects": float(np.mean(~accept))}
    for name in INTERVALS:
        a = np.array([r[name] for r in rows], dtype=np.float64)
        lo, hi = a[:, 0], a[:, 1]
        hit = (lo <= truth) & (truth <= hi)
        given = a[:, 2] == 0
        out[name] = {"coverage": float(hit.mean()), "above_0": float(np.mean(lo > 0)),
                     "coverage_given": float(hit[given].mean()) if given.any() else None,
                     "below": float(np.mean(hi < truth)), "above": float(np.mean(lo > truth)),
                     "width_ratio": float(np.mean(hi - lo) / (2 * 1.959964 * sd)),
                     "check_fails": float(a[:, 2].mean()), "seconds_per_data_set": float(np.median(a[:, 3]))}
        both = np.array([hybrid(lo[k], hi[k], accept[k]) for k in range(len(rows))])
        out[f"{name}+permutation"] = {"coverage": float(np.mean((both[:, 0] <= truth) & (truth <= both[:, 1]))),
                                      "above_0": float(np.mean(both[:, 0] > 0))}
    return out


def _provenance(argv: list[str]) -> dict:
    from wmeval.lineage.provenance import kernels_in_effect, package_versions

    root = Path(__file__).resolve().parent.parent
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "src", "benchmarks"],
                           capture_output=True, text=True).stdout
    return {"command": " ".join(["python", "benchmarks/fd_half_sampling.py", *argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": commit.strip(), "uncommitted_changes": bool(dirty.strip()),
            "packages": {k: v for k, v in package_versions().items() if k in ("numpy", "scipy")},
            "kernels": kernels_in_effect(), "python": platform.python_version()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=400)
    ap.add_argument("--dims", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--resamples", type=int, default=500)
    ap.add_argument("--permutations", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fd_half_sampling.json"))
    args = ap.parse_args()
    if args.resamples <= 2 * args.episodes + 2:
        ap.error(f"--resamples {args.resamples}: the linear part of independent sides' replicates needs more than "
                 f"2 x --episodes + 2 = {2 * args.episodes + 2}")
    res = {"episodes": args.episodes, "frames_per_episode": args.frames, "rho": args.rho,
           "datasets": args.datasets, "n_resamples": args.resamples, "n_permutations": args.permutations,
           "confidence_level": 0.95, "run": _provenance(sys.argv[1:]), "cells": []}
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for d in args.dims:
            for design in ("paired", "unpaired"):
                for truth_name, shift, axis in TRUTHS:
                    jobs = [(d, design, truth_name, shift, axis, i, args.episodes, args.frames, args.rho,
                             args.resamples, args.permutations, args.seed) for i in range(args.datasets)]
                    rows = list(pool.map(_dataset, jobs, chunksize=2))
                    cell = {"dim": d, "design": design, "truth": truth_name, **cell_summary(rows)}
                    res["cells"].append(cell)
                    print(json.dumps(cell), flush=True)
    res["minutes"] = round((time.time() - t0) / 60, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
