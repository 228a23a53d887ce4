"""The bias-corrected FD's boundary interval with its degenerate part from permuted data sets (a measurement).

``benchmarks/coverage.py`` finds the bias-corrected FD's interval too wide with paired sides at d = 16 and 64
(98-100%): its boundary test (``wmeval.estimators.resample.boundary_interval``) takes the degenerate part ``D*`` of
the statistic from bootstrap replicates, which pair a resampled episode with its own copies (self-pair terms the
jackknife took out of the estimate), so ``D*`` is 1.6 (d = 16) to 4.2 (d = 64) times too wide
(``benchmarks/fd_replicate_spread.py``). ``benchmarks/fd_permutation_leftover.py`` found that permuted data sets,
the generated side's mean difference taken out first, carry the estimate's leftover bias. This script takes the
next step that measurement suggested: the degenerate part's whole distribution from those permuted data sets.

**The degenerate part.** ``y - (mean y - mean x)`` is permuted as the shipped test permutes the data (paired sides:
each episode's real and generated rows swapped or not; independent sides: the episodes dealt anew). Each permuted
set has a true FD of 0 and the data's covariances, so its jackknife-corrected FD (its own delete-one-episode
jackknife, as the estimate's) is a draw ``P`` of the estimate's null distribution, leftover bias included. The
jackknife's bias estimate varies from set to set (the plug-in less the mean bias has 0.72 of the corrected FDs'
spread at d = 64, 0.86 at d = 16), so each of the ``--jackknifed`` sets gets its own.

**The interval** (``perm``): the boundary test inverted as the shipped one is, with ``D*`` replaced: a candidate
``theta = scale u^2`` is accepted when the corrected estimate less ``theta`` lies between the ``alpha/2`` and
``1 - alpha/2`` quantiles of ``P_i - u L*_i``, ``L*`` the bootstrap replicates' linear part in their multiplicities
(``wmeval.estimators.resample.linear_part``; a linear statistic's bootstrap spread is right, only the degenerate
part is not), every ``P_i`` with every ``L*_j`` (the two parts are uncorrelated). ``scale`` is the plug-in FD, or
the corrected estimate where ``L*`` carries over 90% of ``var(L*) + var(P)`` (the shipped regime switch). Its upper
end is then raised, as the shipped interval's is, to a percentile interval's (``perm+upper``), here the corrected
estimate less the leftover (``mean P``) plus the ``1 - alpha/2`` quantile of ``L* + P - mean P``, and 0 put in or
taken out as the shipped permutation test of the plug-in decides (``perm+upper+test``). ``deb``: the same with the
linear term's size at ``theta`` debiased (:func:`debiased_scale`): the shipped rule builds it along the estimated
difference, whose noise leans toward the features' high-variance directions. ``shipped`` is the shipped interval
(the bootstrap's boundary interval and the test) on the same data sets and resamples. ``fd_evaluations``: the FDs
each data set computes for the shipped interval (jackknife, replicates, permutations) and those the null draws add.

Per cell: the estimate's bias and spread, the coverage, the shares below and above the truth, and the mean width
over a normal interval of the estimate's spread.

    python benchmarks/fd_permutation_degenerate.py [--datasets 200] [--dims 4 16 64] [--designs paired unpaired]
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
import fd_permutation_leftover as fl  # noqa: E402

INTERVALS = ("shipped", "perm", "perm+upper", "perm+upper+test", "deb", "deb+upper", "deb+upper+test")
Z = 1.959963984540054


def inverted(center: float, dev0: np.ndarray, lin: np.ndarray, scale: float, level: float,
             grid: int = 256) -> tuple[float, float]:
    """The accepted ``theta`` of the test ``q_lo(dev0 - u lin) <= center - theta <= q_hi(dev0 - u lin)``,
    ``theta = scale u^2`` (``theta <= 0``: ``u = 0``), spanned: ``(low, high)``, the quantiles taken over every pair
    of ``dev0`` (draws of ``estimate - theta`` without the linear term: here the null distribution, bias included)
    and ``lin``."""
    a_lo, a_hi = (1.0 - level) / 2.0, 1.0 - (1.0 - level) / 2.0
    q0_lo, q0_hi = np.quantile(dev0, [a_lo, a_hi])
    lo0, hi0 = center - q0_hi, center - q0_lo
    if scale <= 0 or not np.any(lin):
        return float(lo0), float(hi0)

    def accepted(u: np.ndarray) -> np.ndarray:
        u = np.atleast_1d(u)
        out = np.empty(len(u), bool)
        for s in range(0, len(u), 8):                 # every (P_i, L*_j) pair, 8 values of u at a time
            uu = u[s:s + 8]
            dev = (dev0[None, :, None] - uu[:, None, None] * lin[None, None, :]).reshape(len(uu), -1)
            q_lo, q_hi = np.quantile(dev, [a_lo, a_hi], axis=1)
            gap = center - scale * uu * uu
            out[s:s + 8] = (q_lo <= gap) & (gap <= q_hi)
        return out

    big, span = float(np.max(np.abs(lin))), max(float(center - dev0.min()), 0.0)
    u_max = 1.01 * (big + np.sqrt(big * big + 4.0 * scale * span)) / (2.0 * scale) + 1e-300
    us = np.linspace(0.0, u_max, grid + 1)
    acc = accepted(us)
    acc[0] = lo0 <= 0.0 <= hi0

    def refine(inside: float, outside: float) -> float:
        for _ in range(60):
            mid = 0.5 * (inside + outside)
            inside, outside = (mid, outside) if accepted(mid)[0] else (inside, mid)
        return inside

    pos = np.flatnonzero(acc[1:]) + 1
    if lo0 <= 0.0:
        low = lo0
    elif pos.size:
        low = scale * refine(us[pos[0]], us[pos[0] - 1]) ** 2
    else:
        u = np.sqrt(max(center, 0.0) / scale)
        q_lo, q_hi = np.quantile((dev0[:, None] - u * lin[None, :]).ravel(), [a_lo, a_hi])
        return float(center - q_hi), float(center - q_lo)
    if pos.size:
        k = pos[-1]
        high = scale * refine(us[k], us[min(k + 1, grid)]) ** 2 if k < grid else scale * us[k] ** 2
    else:
        high = min(hi0, 0.0)
    return float(low), float(max(high, low))


def test_scale(point: float, plugin: float, lin: np.ndarray, null: np.ndarray) -> float:
    """The shipped test's ``scale`` (``_inverted_test``) with the degenerate part's spread taken from ``null``: the
    corrected estimate where the linear part carries over 90% of the variance, else the plug-in; at least
    ``var(L*) / (4 sd(null))``."""
    from wmeval.estimators.resample import STUDENTIZE_LINEAR_SHARE

    total = float(lin.var() + null.var())
    scale = point if (point > 0 and total > 0 and lin.var() / total > STUDENTIZE_LINEAR_SHARE) else plugin
    spread = float(np.std(null))
    return max(scale, float(np.var(lin)) / (4.0 * spread)) if spread > 0 else max(scale, 0.0)


def debiased_scale(point: float, plugin: float, lin: np.ndarray, null: np.ndarray) -> float:
    """The ``scale`` whose linear term at ``theta`` has the variance ``theta (var(L*) - 2 var(null)) / point``:
    near equal distributions the estimate is ``|g|^2`` less its bias for an estimated difference ``g ~ N(g0, S)``,
    the replicates' linear part has the variance ``4 g' S g`` and the degenerate part ``2 tr S^2``, so that
    ``var(L*) - 2 var(null)`` estimates ``4 g0' S g0`` without the noise's ``4 tr S^2`` and ``point`` estimates
    ``|g0|^2`` (``benchmarks/debiased_direction.py`` measures the rule in that model). Where either is not positive,
    :func:`test_scale`; the result kept within ``[var(L*) / (4 sd(null)), 4 plugin]`` (the linear term's growth at most
    the shipped bound, and at least a quarter of what the estimated difference gives)."""
    base = test_scale(point, plugin, lin, null)
    signal = float(lin.var() - 2.0 * null.var())
    if not (point > 0 and signal > 0):
        return base
    spread = float(np.std(null))
    low = float(np.var(lin)) / (4.0 * spread) if spread > 0 else 0.0
    return float(np.clip(point * float(lin.var()) / signal, low, max(4.0 * plugin, low)))


def _dataset(job: tuple) -> dict:
    from threadpoolctl import threadpool_limits

    from wmeval.core.rng import make_rng
    from wmeval.estimators import distributional as dist
    from wmeval.estimators.resample import (
        JackknifePlan,
        boundary_interval,
        cluster_counts,
        jackknife_centred,
        linear_part,
        with_zero_test,
    )

    d, design, _, _, _, i, n, t, rho, n_resamples, n_perm, seed, n_jack = job
    paired = design == "paired"
    x, y, ep, y_ids, delta = fh.data_set(job[:12])
    inv_r, inv_f, group = dist._cluster_index(ep, y_ids)
    n_cl = len(group)
    label = np.full(len(x), "all")
    one = dist._ViewFD.of(dist.ViewSets("frame", dist.Side(x, inv_r, label), {"fake": dist.Side(y, inv_f, label)},
                                        []), n_cl)
    out = {"truth": float(delta @ delta)}

    def fds(view, counts: np.ndarray) -> np.ndarray:
        return np.concatenate([view.many(b) for b in dist.replicate_blocks(counts)])[:, 0, 0]

    with threadpool_limits(limits=1):
        plugin = float(one.many(np.ones((1, n_cl), np.int64))[0, 0, 0])
        plan = JackknifePlan.of(group)
        bias = float(plan.estimate(one.many(plan.counts)[:, 0, 0], np.ones(n_cl, bool))[0])
        point = plugin - bias
        out["point"] = point
        counts = cluster_counts(np.arange(n_cl), group, n_cl, n_resamples,
                                make_rng(seed, "fd_permutation_degenerate", "bootstrap", i))
        reps = fds(one, counts)
        # The shipped test's permutations of the plug-in, for its p-value.
        sets, pcounts = fh.permutation_sets(x, y, ep, ep, paired, n_perm,
                                            make_rng(seed, "fd_permutation_degenerate", "test", i))
        tfds = fds(dist._ViewFD.of(sets, pcounts.shape[1]), pcounts)
        # The degenerate part: permuted data sets with the mean difference taken out.
        yc = y - (y.mean(axis=0) - x.mean(axis=0))
        csets, ccounts = fh.permutation_sets(x, yc, ep, ep, paired, n_jack + 1,
                                             make_rng(seed, "fd_permutation_degenerate", "null", i))
        cperm = dist._ViewFD.of(csets, ccounts.shape[1])
        cfds = fds(cperm, ccounts)                         # row 0 is the centred data itself, not a permutation
        n_units = ccounts.shape[1] // 2
        null = []
        for p in range(1, n_jack + 1):
            rows, grp = fl.jackknife_rows(ccounts[p], paired, n_units)
            null.append(fl.corrected(float(cfds[p]), fds(cperm, rows), grp))
    null = np.array(null)
    out["leftover"] = float(null.mean())
    shortcut = cfds[1:] - float(np.mean(cfds[1:] - null))
    out["shortcut_sd_ratio"] = float(np.std(shortcut) / np.std(null)) if np.std(null) > 0 else float("nan")
    p_value = float(np.mean(tfds >= tfds[0] * (1 - 1e-12)))
    out["p_value"] = p_value
    ok = np.isfinite(reps)
    lo, hi = boundary_interval(plugin, jackknife_centred(reps[ok], plugin, bias), counts[ok], plugin, 0.95,
                               corrected=point)
    out["shipped"] = with_zero_test(lo, hi, p_value, 0.95)
    lin, _ = linear_part(reps[ok], counts[ok])
    scales = {"perm": test_scale(point, plugin, lin, null), "deb": debiased_scale(point, plugin, lin, null)}
    for name, scale in scales.items():
        lo, hi = inverted(point, null, lin, scale, 0.95)
        up = hi
        if np.isfinite(hi) and hi > 0:
            up = max(hi, point - null.mean() + float(np.quantile((lin[None, :] + null[:, None]).ravel() - null.mean(),
                                                                  0.975)))
        out[name], out[f"{name}+upper"] = (lo, hi), (lo, up)
        out[f"{name}+upper+test"] = with_zero_test(lo, up, p_value, 0.95)
    out["fd_evaluations"] = {"shipped": int(n_cl + 1 + len(reps) + len(tfds)),
                             "added": int(n_jack * (len(rows) + 1))}
    return out


def cell_summary(rows: list[dict]) -> dict:
    """One cell's figures from its data sets' results (:func:`_dataset`)."""
    truth = rows[0]["truth"]
    points = np.array([r["point"] for r in rows])
    sd = float(np.std(points))
    out = {"true_value": truth, "estimate_bias": float(points.mean() - truth), "estimate_sd": sd,
           "leftover_mean": float(np.mean([r["leftover"] for r in rows])),
           "shortcut_sd_ratio": float(np.median([r["shortcut_sd_ratio"] for r in rows])),
           "permutation_rejects": float(np.mean([r["p_value"] <= 0.05 for r in rows]))}
    out["fd_evaluations"] = {k: float(np.mean([r["fd_evaluations"][k] for r in rows])) for k in ("shipped", "added")}
    for name in INTERVALS:
        a = np.array([r[name] for r in rows], dtype=np.float64)
        lo, hi = a[:, 0], a[:, 1]
        out[name] = {"coverage": float(np.mean((lo <= truth) & (truth <= hi))),
                     "below": float(np.mean(hi < truth)), "above": float(np.mean(lo > truth)),
                     "above_0": float(np.mean(lo > 0)),
                     "width_ratio": float(np.mean(hi - lo) / (2 * Z * sd))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=200)
    ap.add_argument("--dims", type=int, nargs="+", default=[16, 64, 4])
    ap.add_argument("--designs", nargs="+", default=["paired", "unpaired"], choices=["paired", "unpaired"])
    ap.add_argument("--truths", nargs="+", default=[name for name, _, _ in fh.TRUTHS])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--resamples", type=int, default=500)
    ap.add_argument("--permutations", type=int, default=500)
    ap.add_argument("--jackknifed", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fd_permutation_degenerate.json"))
    args = ap.parse_args()
    if args.resamples <= 2 * args.episodes + 2:
        ap.error(f"--resamples {args.resamples}: the linear part needs more than 2 x --episodes + 2")
    res = {"episodes": args.episodes, "frames_per_episode": args.frames, "rho": args.rho, "datasets": args.datasets,
           "n_resamples": args.resamples, "n_permutations": args.permutations, "jackknifed": args.jackknifed,
           "confidence_level": 0.95, "run": fl.run_stamp(sys.argv[1:]), "cells": []}
    res["run"]["command"] = " ".join(["python", "benchmarks/fd_permutation_degenerate.py", *sys.argv[1:]])
    from wmeval.core.digest import file_sha256

    for script in (Path(__file__).resolve(), Path(fl.__file__).resolve()):   # imported by path: not in the closure
        res["run"]["code"][script.relative_to(script.parents[1]).as_posix()] = file_sha256(script)
    res["run"]["code"] = dict(sorted(res["run"]["code"].items()))
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for d in args.dims:
            for design in args.designs:
                for truth_name, shift, axis in fh.TRUTHS:
                    if truth_name not in args.truths:
                        continue
                    jobs = [(d, design, truth_name, shift, axis, i, args.episodes, args.frames, args.rho,
                             args.resamples, args.permutations, args.seed, args.jackknifed)
                            for i in range(args.datasets)]
                    rows = list(pool.map(_dataset, jobs, chunksize=2))
                    cell = {"dim": d, "design": design, "truth": truth_name, **cell_summary(rows)}
                    res["cells"].append(cell)
                    print(json.dumps(cell), flush=True)
    from wmeval.core.digest import changed_files

    if (changed := changed_files(res["run"]["code"])):
        sys.exit(f"benchmarks/fd_permutation_degenerate.py: {', '.join(changed)} changed while it ran; nothing written")
    res["minutes"] = round((time.time() - t0) / 60, 1)
    res["run"]["date_finished"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    res["run"]["python"] = platform.python_version()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
