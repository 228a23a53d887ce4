"""Why the bias-corrected FD's interval is conservative at a true 0 in moderate dimension, and what correcting each replicate costs.

The bias-corrected FD is the plug-in FD minus the episode jackknife's bias estimate. For a statistic of the form
of a V-statistic (which the FD is, to second order, in the episodes' moments) that correction removes the
*self-pair* terms, each episode paired with itself, and leaves a U-statistic. Its bootstrap replicates
(``wmeval.stats.distribution_bootstrap``, the bootstrap stage's code) are plug-in FDs of the resampled episodes,
recentred on the corrected point: they keep the self-pair terms, and in a resample an episode drawn c times adds
c^2 of them, whose spread the estimate never has. The boundary interval's degenerate part (the replicates less
their linear part in the episode multiplicities, ``wmeval.estimators.resample.linear_part``) is then wider than
the estimate's own spread, the more so the higher the dimension.

This script measures that on the coverage benchmark's data (``benchmarks/coverage.py``: episodes of 10 rows,
rho = 0.5, d = 4, 16, 64, paired and independent sides, truth 0). Per data set, five replicate sets on the same
resampled episodes:

- ``plugin``: the shipped replicates (plug-in FDs recentred on FD + the jackknife's bias);
- ``jackknifed``: each replicate corrected as the estimate is, its own delete-a-group jackknife over the distinct
  episodes it holds (all copies of one episode deleted together, weighted (m - c_i) / m), used as they come. For
  a V-statistic this is the U-statistic only when no episode is drawn twice; with copies it is not the copy-free
  U-statistic KID's replicates compute (the FD has no exact copy-free form);
- ``jackknifed_centred``: the same, recentred on the corrected point;
- ``copy_free``: each plug-in replicate less its self-pair terms, sum_i c_i^2 q_i, from the FD's second-order form
  at equal covariances (:func:`self_terms`, below), recentred like ``plugin``: the copy-free U-statistic that KID's
  replicates compute, to second order. Per data set, sum_i q_i is set beside the jackknife's bias estimate (they
  agree if the form is right);
- ``copy_free_exact``: the same with q_i from the exact FD, half its second difference along episode i's
  multiplicity, (FD(1 + e_i) + FD(1 - e_i) - 2 FD(1)) / 2 (2 more FDs per episode, once per data set).

Reported: the corrected estimate's standard deviation across data sets, each set's mean degenerate-part
spread, the boundary interval's coverage of the truth and its width over a normal interval of the estimate's
spread (above 1: conservative), and the FD evaluations per replicate (the cost).

    python benchmarks/fd_replicate_spread.py [--datasets 160] [--dims 4 16 64] [--resamples 300]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

VARIANTS = ("plugin", "jackknifed", "jackknifed_centred", "copy_free", "copy_free_exact")


def _jackknifed(one, counts: np.ndarray, group: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, int]:
    """Each replicate's bias-corrected FD: the delete-a-group jackknife over its distinct episodes (a group: all
    copies of one episode; weight (m - c_i) / m, m the resampling group's total); and the FDs it took."""
    out, evaluations = np.empty(len(counts)), 0
    for b, c in enumerate(counts):
        held = np.flatnonzero(c)
        rows = np.repeat(c[None, :], len(held), axis=0)
        rows[np.arange(len(held)), held] = 0
        m = np.array([c[group == group[i]].sum() for i in held], dtype=np.float64)
        w = (m - c[held]) / m
        v = one.many(rows)[:, 0, 0]
        evaluations += len(held)
        out[b] = base[b] - float(np.dot(w, v - base[b]))
    return out, evaluations


def second_order_parts(x: np.ndarray, y: np.ndarray, x_cluster: np.ndarray, y_cluster: np.ndarray,
                       n_clusters: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each cluster's part of the FD's second-order form between ``x`` and ``y``: ``(means, covs, weights)``.

    At equal covariances the FD is, to second order, a squared norm: ||mu_x - mu_y||^2 plus the squared Bures
    distance sum_jk E_jk^2 / (2 (l_j + l_k)), E the covariances' difference in the eigenbasis of their mean
    (eigenvalues l; ``weights`` ``(d, d)`` holds 1 / (2 (l_j + l_k))). Both differences are sums over clusters of
    the cluster's rows centred on the pooled mean, weighted 1 / n_x on x's side and -1 / n_y on y's: ``means``
    ``(n_clusters, d)``, sum_r w_r z_r, and ``covs`` ``(n_clusters, d, d)``, sum_r w_r z_r z_r^T - (sum_r w_r)
    diag(l). So FD ~ ||sum_i s_i||^2 in that norm (``||m||^2 + sum(C * C * weights)``).
    """
    z = np.vstack([x, y])
    lam, vec = np.linalg.eigh(0.5 * (np.cov(x.T) + np.cov(y.T)))
    lam = np.maximum(lam, 1e-12 * lam.max())
    weights = 1.0 / (2.0 * (lam[:, None] + lam[None, :]))
    w = np.concatenate([np.full(len(x), 1.0 / len(x)), np.full(len(y), -1.0 / len(y))])
    cluster = np.concatenate([x_cluster, y_cluster])
    zt = (z - z.mean(axis=0)) @ vec
    d = z.shape[1]
    means, covs = np.zeros((n_clusters, d)), np.zeros((n_clusters, d, d))
    for i in np.unique(cluster):
        rows = cluster == i
        zi, wi = zt[rows], w[rows]
        means[i] = wi @ zi
        covs[i] = (zi * wi[:, None]).T @ zi - wi.sum() * np.diag(lam)
    return means, covs, weights


def self_terms(x: np.ndarray, y: np.ndarray, x_cluster: np.ndarray, y_cluster: np.ndarray,
               n_clusters: int) -> np.ndarray:
    """``(n_clusters,)``: each cluster's self-pair term q_i = ||s_i||^2 in the FD's second-order form
    (:func:`second_order_parts`): the terms the jackknife's correction takes out (sum_i q_i is about its bias
    estimate), and what a resample drawing cluster i c times adds c^2 times."""
    means, covs, weights = second_order_parts(x, y, x_cluster, y_cluster, n_clusters)
    return np.einsum("id,id->i", means, means) + np.einsum("ijk,ijk,jk->i", covs, covs, weights)


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
    )

    d, design, i, n, t, rho, n_resamples, seed = job
    chol = np.linalg.cholesky(np.diag(np.linspace(0.5, 2.0, d)))
    ep = np.repeat(np.arange(n), t)
    rng = make_rng(seed, "fd_replicate_spread", design, d, i)
    a = rng.normal(size=(n, d))
    b = a if design == "paired" else rng.normal(size=(n, d))
    x = (np.sqrt(rho) * a[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
    y = (np.sqrt(rho) * b[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
    inv_r, inv_f, group = dist._cluster_index(ep, ep if design == "paired" else ep + n)
    n_cl = len(group)
    counts = cluster_counts(np.arange(n_cl), group, n_cl, n_resamples, make_rng(seed, "fd_replicate_spread", i))
    ref = dist.Side(x, inv_r, np.full(len(x), "all"))
    side = dist.Side(y, inv_f, np.full(len(y), "all"))
    one = dist._ViewFD.of(dist.ViewSets("frame", ref, {"fake": side}, []), n_cl)
    with threadpool_limits(limits=1):
        plugin = float(one.many(np.ones((1, n_cl), np.int64))[0, 0, 0])
        plan = JackknifePlan.of(group)
        bias, _ = plan.estimate(one.many(plan.counts)[:, 0, 0], np.ones(n_cl, bool))
        t0 = time.perf_counter()
        base = np.concatenate([one.many(block) for block in dist.replicate_blocks(counts)])[:, 0, 0]
        t_base = time.perf_counter() - t0
        t0 = time.perf_counter()
        jack, evaluations = _jackknifed(one, counts, group, base)
        t_jack = time.perf_counter() - t0
        eye = np.eye(n_cl, dtype=np.int64)
        q_exact = 0.5 * (one.many(1 + eye)[:, 0, 0] + one.many(1 - eye)[:, 0, 0] - 2.0 * plugin)
    q = self_terms(x, y, inv_r, inv_f, n_cl)
    c2 = counts.astype(np.float64) ** 2
    corrected = plugin - float(bias)
    sets = {"plugin": (plugin, jackknife_centred(base, plugin, float(bias))),
            "jackknifed": (corrected, jack),
            "jackknifed_centred": (corrected, jackknife_centred(jack, corrected, 0.0)),
            "copy_free": (plugin, jackknife_centred(base - c2 @ q, plugin, float(bias))),
            "copy_free_exact": (plugin, jackknife_centred(base - c2 @ q_exact, plugin, float(bias)))}
    out = {"point": corrected, "evaluations": evaluations / n_resamples, "time_ratio": t_jack / t_base,
           "self_terms": float(q.sum()), "self_terms_exact": float(q_exact.sum()), "jackknife_bias": float(bias)}
    for name, (center, reps) in sets.items():
        lo, hi = boundary_interval(center, reps, counts, plugin, 0.95)
        out[name] = (float(np.std(linear_part(reps, counts)[1])), lo, hi)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=160)
    ap.add_argument("--dims", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--resamples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fd_replicate_spread.json"))
    args = ap.parse_args()
    if args.resamples <= 2 * args.episodes + 2:
        ap.error(f"--resamples {args.resamples}: the linear part of independent sides' replicates needs more than "
                 f"2 x --episodes + 2 = {2 * args.episodes + 2}")
    res = {"episodes": args.episodes, "frames_per_episode": args.frames, "rho": args.rho, "truth": 0.0,
           "datasets": args.datasets, "n_resamples": args.resamples, "confidence_level": 0.95, "cells": []}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for d in args.dims:
            for design in ("paired", "unpaired"):
                jobs = [(d, design, i, args.episodes, args.frames, args.rho, args.resamples, args.seed)
                        for i in range(args.datasets)]
                rows = list(pool.map(_dataset, jobs, chunksize=2))
                points = np.array([r["point"] for r in rows])
                sd = float(np.std(points))
                cell = {"dim": d, "design": design, "estimate_sd": sd, "estimate_mean": float(points.mean()),
                        "fd_evaluations_per_replicate": {"plugin": 1.0,
                                                         "jackknifed": float(np.mean([r["evaluations"] for r in rows]))},
                        "jackknifed_time_ratio": float(np.median([r["time_ratio"] for r in rows])),
                        # the self-pair terms' sum beside the jackknife's bias estimate, averaged over data sets
                        "self_terms_mean": float(np.mean([r["self_terms"] for r in rows])),
                        "self_terms_exact_mean": float(np.mean([r["self_terms_exact"] for r in rows])),
                        "jackknife_bias_mean": float(np.mean([r["jackknife_bias"] for r in rows]))}
                for name in VARIANTS:
                    a = np.array([r[name] for r in rows])
                    hit = (a[:, 1] <= 0.0) & (0.0 <= a[:, 2])
                    p = float(hit.mean())
                    cell[name] = {"rest_sd": float(a[:, 0].mean()), "rest_sd_over_estimate_sd": float(a[:, 0].mean() / sd),
                                  "coverage": p, "coverage_se": float(np.sqrt(p * (1 - p) / len(a))),
                                  "width_ratio": float(np.mean(a[:, 2] - a[:, 1]) / (2 * 1.959964 * sd))}
                res["cells"].append(cell)
                print(json.dumps(cell), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
