"""Coverage of nominal-95% bootstrap intervals for a mean-type metric with intra-episode correlation.

Synthetic data with known truth: ``--datasets`` data sets, each ``--episodes`` episodes of
``--frames`` frames, ``value = mu + sqrt(rho) a_episode + sqrt(1 - rho) e_frame`` (standard
normal a, e; mu = 0, so every frame has variance 1 and frames of one episode correlation
rho). For each data set, the trajectory-clustered interval (``wmeval.estimators.resample.cluster_bootstrap``
with episodes as clusters) and the frame-level iid bootstrap (every frame its own cluster);
coverage is the share of intervals that contain mu, with its binomial standard error.

Then the same for the Frechet distance: model features ``N(mu_g, Sigma_g)`` in ``--dim``
dimensions with the same episode correlation, against the exact reference ``N(0, I)``, so
that the true FD has a closed form. The interval is for the plug-in estimator, which is
biased upward at finite N; the basic (bias-reflecting) bootstrap interval
``[2 fd - q_hi, 2 fd - q_lo]`` is reported beside the percentile one.

    python benchmarks/coverage.py [--datasets 500] [--rho 0.8] [--frames 16] [--episodes 64]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from wmeval.core.rng import make_rng
from wmeval.estimators.resample import cluster_bootstrap


def frechet_coverage(args) -> dict:
    from wmeval.metrics import FrechetReference, frechet_distance

    d, n, t, rho = args.dim, args.episodes, args.frames, args.rho
    mu_g = np.full(d, 0.3)
    sigma_g = np.diag(np.linspace(0.5, 2.0, d))
    chol = np.linalg.cholesky(sigma_g)
    truth = frechet_distance(np.zeros(d), np.eye(d), mu_g, sigma_g)
    ref = FrechetReference(np.zeros(d), np.eye(d))
    clusters = np.repeat(np.arange(n), t)

    def fd(x: np.ndarray, w: np.ndarray) -> float:
        # Weighted moments: each unit's multiplicity is its weight; no resampled copies.
        mu = w @ x / w.sum()
        xc = x - mu
        return ref.distance(mu, (xc * w[:, None]).T @ xc / (w.sum() - 1))

    hits = {"percentile": 0, "basic": 0}
    points = []
    for i in range(args.fd_datasets):
        rng = make_rng(args.seed, "coverage", "fd", i)
        z = np.sqrt(rho) * np.repeat(rng.normal(size=(n, d)), t, axis=0) + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))
        x = mu_g + z @ chol.T
        r = cluster_bootstrap(x, clusters, fd, n_resamples=args.fd_resamples, seed=args.seed * 7919 + i)
        points.append(r.point)
        hits["percentile"] += r.low <= truth <= r.high
        hits["basic"] += 2 * r.point - r.high <= truth <= 2 * r.point - r.low
    out = {"dim": d, "true_fd": truth, "mean_plugin_fd": float(np.mean(points)),
           "plugin_bias": float(np.mean(points) - truth), "datasets": args.fd_datasets,
           "n_resamples": args.fd_resamples}
    for k, h in hits.items():
        p = h / args.fd_datasets
        out[f"{k}_coverage"] = p
        out[f"{k}_coverage_se"] = float(np.sqrt(p * (1 - p) / args.fd_datasets))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", type=int, default=500)
    ap.add_argument("--rho", type=float, default=0.8)
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--fd-datasets", type=int, default=500)
    ap.add_argument("--fd-resamples", type=int, default=500)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "coverage.json"))
    args = ap.parse_args()
    n, t, rho = args.episodes, args.frames, args.rho
    clusters = np.repeat(np.arange(n), t)
    frames = np.arange(n * t)
    hit = {"cluster": 0, "iid_frames": 0}
    width = {"cluster": [], "iid_frames": []}
    for i in range(args.datasets):
        rng = make_rng(args.seed, "coverage", "data", i)
        values = (np.sqrt(rho) * rng.normal(size=(n, 1)) + np.sqrt(1 - rho) * rng.normal(size=(n, t))).ravel()
        for name, ids in (("cluster", clusters), ("iid_frames", frames)):
            r = cluster_bootstrap(values, ids, n_resamples=args.resamples, seed=args.seed * 100003 + i)
            hit[name] += r.low <= 0.0 <= r.high
            width[name].append(r.high - r.low)
    res = {"datasets": args.datasets, "episodes": n, "frames_per_episode": t, "rho": rho,
           "n_resamples": args.resamples, "confidence_level": 0.95, "method": "percentile"}
    for name in hit:
        p = hit[name] / args.datasets
        res[name] = {"coverage": p, "coverage_se": float(np.sqrt(p * (1 - p) / args.datasets)),
                     "median_width": float(np.median(width[name]))}
    res["frechet"] = frechet_coverage(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
