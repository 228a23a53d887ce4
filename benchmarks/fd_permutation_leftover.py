"""The bias-corrected FD's leftover bias estimated on permuted data sets, and the widths that would go with it.

``benchmarks/coverage.py`` finds the bias-corrected FD's interval too wide with paired sides at d = 16 and 64
(98-100%). ``benchmarks/fd_half_sampling.py`` found half-sampling replicates narrow enough at d = 16, but at d = 64
with 32 episodes the corrected estimate keeps a bias (about 0.43 with paired sides, 4.3 with independent ones) that
the narrower interval exposes (it covered 22-55%), and the two-scale check, the shipped guard, does not see it. This
script asks whether the data can estimate that leftover, and which width then goes with it; it is a measurement,
not shipped code (the shipped interval is ``wmeval.stats.distribution_bootstrap``'s).

**The leftover, from permuted data sets.** The generated side's mean difference is taken out (``y - (mean y -
mean x)``), and the rows permuted as the shipped test permutes them (paired sides: each episode's real and
generated rows swapped or not; independent sides: the episodes dealt anew, as many to each side as it had). Each of
``--leftover-permutations`` such data sets has a true FD of 0 and the data's covariances; its own jackknife
correction (delete one episode, as the estimate's) gives a corrected FD whose mean over them, ``L``, estimates what
the correction leaves. (Without the centring, a shift enters the permuted sets' covariances and ``L`` grows with it:
0.72 against a bias of 0.42 at the large paired shift, d = 64, in a 200-data-set trial.)

**Intervals**, each on the script's own data sets (``coverage.py``'s design, as ``fd_half_sampling.py`` draws it):

- ``half``: half-sampling's boundary interval, as ``fd_half_sampling.py`` builds it;
- ``half-L``: the same with the replicates recentred on the corrected estimate minus ``L``;
- ``normal-L``: ``(corrected - L) +- z sd``, with ``sd`` the half-sample replicates' spread after their degenerate
  part (their rest beyond the linear part in the multiplicities, ``wmeval.estimators.resample.linear_part``) is
  scaled by ``1 / sqrt(n (n - 1) / (m (m - 1)) - 1)``: for a degenerate U-statistic of ``n`` clusters the spread of
  its estimates on ``m = n / 2`` of them around the full one is that many times the estimate's own (the linear
  part's is exactly the estimate's at ``m = n / 2``); ``n`` the clusters of one side.

Each also with 0 put in or taken out as the shipped permutation test decides (``+permutation``: the test's
``--permutations`` permutations of the plug-in). Per cell: the estimate's bias and spread across data sets, ``L``'s
mean and spread, and per interval the coverage, the shares below and above the truth, and the mean width over a
normal interval of the estimate's spread.

    python benchmarks/fd_permutation_leftover.py [--datasets 160] [--dims 64 16] [--designs paired unpaired]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fd_half_sampling as fh  # noqa: E402  (a sibling script: its design, data sets and permutations)

INTERVALS = ("half", "half-L", "normal-L")
Z = 1.959963984540054


def jackknife_rows(counts: np.ndarray, paired: bool, n_units: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, group)``: the delete-one-episode jackknife of one permuted data set, whose ``counts`` ``(2 U,)`` weight
    :func:`fd_half_sampling.permutation_sets`' units (``U = n_units`` per side). Paired sides: episode ``j`` is
    units ``j`` and ``j + U/2`` on both sides; independent sides: a unit is an episode, on the side that holds it
    (``group`` 1 on the real side, 0 on the generated one)."""
    rows, group = [], []
    if paired:
        m = n_units // 2
        for j in range(m):
            r = counts.copy()
            r[[j, j + m, j + n_units, j + m + n_units]] = 0
            rows.append(r)
            group.append(0)
    else:
        for u in range(n_units):
            r = counts.copy()
            r[[u, u + n_units]] = 0
            rows.append(r)
            group.append(int(counts[u] == 1))
    return np.array(rows), np.array(group)


def corrected(value: float, deleted: np.ndarray, group: np.ndarray) -> float:
    """The jackknife-corrected statistic: ``value`` minus ``sum_g (m_g - 1) / m_g sum_j (deleted_j - value)``."""
    bias = 0.0
    for g in np.unique(group):
        v = deleted[group == g]
        bias += (len(v) - 1) / len(v) * float(np.sum(v - value))
    return value - bias


def degenerate_scale(n: int) -> float:
    """The factor that takes half-sample replicates' degenerate spread to the full estimate's (``m = n // 2``)."""
    m = n // 2
    return 1.0 / np.sqrt(n * (n - 1) / (m * (m - 1)) - 1.0)


def _dataset(job: tuple) -> dict:
    from threadpoolctl import threadpool_limits

    from wmeval.core.rng import make_rng
    from wmeval.estimators import distributional as dist
    from wmeval.estimators.resample import JackknifePlan, boundary_interval, jackknife_centred, linear_part

    d, design, _, _, _, i, n, t, rho, n_resamples, n_perm, seed, k_left = job
    paired = design == "paired"
    x, y, ep, y_ids, delta = fh.data_set(job[:12])
    inv_r, inv_f, group = dist._cluster_index(ep, y_ids)
    n_cl = len(group)
    label = np.full(len(x), "all")
    one = dist._ViewFD.of(dist.ViewSets("frame", dist.Side(x, inv_r, label), {"fake": dist.Side(y, inv_f, label)},
                                        []), n_cl)
    out = {"truth": float(delta @ delta)}
    with threadpool_limits(limits=1):
        plugin = float(one.many(np.ones((1, n_cl), np.int64))[0, 0, 0])
        plan = JackknifePlan.of(group)
        bias = float(plan.estimate(one.many(plan.counts)[:, 0, 0], np.ones(n_cl, bool))[0])
        out["point"] = plugin - bias
        half = fh.half_counts(group, n_resamples, make_rng(seed, "fd_permutation_leftover", "half", i))
        reps = np.concatenate([one.many(b) for b in dist.replicate_blocks(half)])[:, 0, 0]
        # The shipped test's permutations of the plug-in, for the p-value.
        sets, pcounts = fh.permutation_sets(x, y, ep, ep, paired, n_perm,
                                            make_rng(seed, "fd_permutation_leftover", "test", i))
        perm = dist._ViewFD.of(sets, pcounts.shape[1])
        fds = np.concatenate([perm.many(b) for b in dist.replicate_blocks(pcounts)])[:, 0, 0]
        # The leftover: jackknife-corrected FDs of permuted data sets with the mean difference taken out.
        yc = y - (y.mean(axis=0) - x.mean(axis=0))
        csets, ccounts = fh.permutation_sets(x, yc, ep, ep, paired, k_left + 1,
                                             make_rng(seed, "fd_permutation_leftover", "leftover", i))
        cperm = dist._ViewFD.of(csets, ccounts.shape[1])
        cfds = cperm.many(ccounts)[:, 0, 0]
        n_units = ccounts.shape[1] // 2
        left = []
        for p in range(1, k_left + 1):                      # row 0 is the data itself, not a permutation
            rows, grp = jackknife_rows(ccounts[p], paired, n_units)
            deleted = np.concatenate([cperm.many(b) for b in dist.replicate_blocks(rows)])[:, 0, 0]
            left.append(corrected(float(cfds[p]), deleted, grp))
    out["p_value"] = float(np.mean(fds >= fds[0] * (1 - 1e-12)))
    leftover = float(np.mean(left))
    out["leftover"] = leftover
    ok = np.isfinite(reps)
    lo, hi = boundary_interval(plugin, jackknife_centred(reps[ok], plugin, bias), half[ok], plugin, 0.95,
                               corrected=plugin - bias)
    out["half"] = (lo, hi)
    lo, hi = boundary_interval(plugin, jackknife_centred(reps[ok], plugin, bias + leftover), half[ok], plugin, 0.95,
                               corrected=plugin - bias - leftover)
    out["half-L"] = (lo, hi)
    lin, rest = linear_part(reps[ok], half[ok])
    sd = float(np.std(lin + (rest - rest.mean()) * degenerate_scale(n)))
    out["normal-L"] = (out["point"] - leftover - Z * sd, out["point"] - leftover + Z * sd)
    return out


def cell_summary(rows: list[dict]) -> dict:
    """One cell's figures from its data sets' results (:func:`_dataset`)."""
    truth = rows[0]["truth"]
    points = np.array([r["point"] for r in rows])
    left = np.array([r["leftover"] for r in rows])
    sd = float(np.std(points))
    accept = np.array([r["p_value"] > 0.05 for r in rows])
    out = {"true_value": truth, "estimate_bias": float(points.mean() - truth), "estimate_sd": sd,
           "leftover_mean": float(left.mean()), "leftover_sd": float(left.std()),
           "estimate_minus_leftover_bias": float(np.mean(points - left) - truth),
           "permutation_rejects": float(np.mean(~accept))}
    for name in INTERVALS:
        a = np.array([r[name] for r in rows], dtype=np.float64)
        lo, hi = a[:, 0], a[:, 1]
        both = np.array([fh.hybrid(lo[k], hi[k], accept[k]) for k in range(len(rows))])
        out[name] = {"coverage": float(np.mean((lo <= truth) & (truth <= hi))),
                     "below": float(np.mean(hi < truth)), "above": float(np.mean(lo > truth)),
                     "width_ratio": float(np.mean(hi - lo) / (2 * Z * sd)),
                     "coverage_with_permutation": float(np.mean((both[:, 0] <= truth) & (truth <= both[:, 1])))}
    return out


def run_stamp(argv: list[str]) -> dict:
    """The run: the code (this script, ``fd_half_sampling.py`` and the ``wmeval`` modules they import, each file's
    sha256), the command, the packages, the kernels, Python and the date."""
    from wmeval.core.digest import code_files, file_sha256
    from wmeval.lineage.provenance import kernels_in_effect, package_versions

    code = code_files(Path(__file__), skip=("wmeval.core.digest", "wmeval.lineage"))
    sibling = Path(fh.__file__).resolve()                  # imported by path, which the import closure does not follow
    code[sibling.relative_to(sibling.parents[1]).as_posix()] = file_sha256(sibling)
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join(["python", "benchmarks/fd_permutation_leftover.py", *argv]),
            "code": dict(sorted(code.items())),
            "packages": {k: v for k, v in package_versions().items() if k in ("numpy", "scipy")},
            "kernels": kernels_in_effect(), "python": platform.python_version()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=160)
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 16])
    ap.add_argument("--designs", nargs="+", default=["paired", "unpaired"], choices=["paired", "unpaired"])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--resamples", type=int, default=500)
    ap.add_argument("--permutations", type=int, default=500)
    ap.add_argument("--leftover-permutations", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fd_permutation_leftover.json"))
    args = ap.parse_args()
    if args.resamples <= 2 * args.episodes + 2:
        ap.error(f"--resamples {args.resamples}: the linear part needs more than 2 x --episodes + 2")
    res = {"episodes": args.episodes, "frames_per_episode": args.frames, "rho": args.rho, "datasets": args.datasets,
           "n_resamples": args.resamples, "n_permutations": args.permutations,
           "leftover_permutations": args.leftover_permutations, "confidence_level": 0.95,
           "run": run_stamp(sys.argv[1:]), "cells": []}
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for d in args.dims:
            for design in args.designs:
                for truth_name, shift, axis in fh.TRUTHS:
                    jobs = [(d, design, truth_name, shift, axis, i, args.episodes, args.frames, args.rho,
                             args.resamples, args.permutations, args.seed, args.leftover_permutations)
                            for i in range(args.datasets)]
                    rows = list(pool.map(_dataset, jobs, chunksize=2))
                    cell = {"dim": d, "design": design, "truth": truth_name, **cell_summary(rows)}
                    res["cells"].append(cell)
                    print(json.dumps(cell), flush=True)
    from wmeval.core.digest import changed_files

    if (changed := changed_files(res["run"]["code"])):
        sys.exit(f"benchmarks/fd_permutation_leftover.py: {', '.join(changed)} changed while it ran; nothing written")
    res["minutes"] = round((time.time() - t0) / 60, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
