"""Frechet distance at d = 2048: wmeval against pytorch-fid's calculate_frechet_distance, side by side.

Same moments for both (from random features with a non-trivial covariance); medians of
``--repeats`` runs, interleaved. Reports the relative difference of the two values too.

    python benchmarks/frechet.py [--dim 2048] [--n 4096] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "frechet.json"))
    args = ap.parse_args()

    from pytorch_fid.fid_score import calculate_frechet_distance

    from wmeval.metrics import FrechetReference, frechet_distance, gaussian_stats

    rng = np.random.default_rng(0)
    d = args.dim
    mix = rng.normal(size=(d, d)) / np.sqrt(d)
    a = gaussian_stats(rng.normal(size=(args.n, d)) @ mix)
    b = gaussian_stats(rng.normal(size=(args.n, d)) @ (mix + 0.05 * rng.normal(size=(d, d)) / np.sqrt(d)) + 0.1)
    ours, reuse, theirs = [], [], []
    ref = FrechetReference(a.mu, a.sigma)
    for _ in range(args.repeats):
        t = time.perf_counter()
        v_ours = frechet_distance(a.mu, a.sigma, b.mu, b.sigma)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        ref.distance(b.mu, b.sigma)
        reuse.append(time.perf_counter() - t)
        t = time.perf_counter()
        v_theirs = calculate_frechet_distance(a.mu, a.sigma, b.mu, b.sigma)
        theirs.append(time.perf_counter() - t)
    res = {
        "dim": d, "n": args.n, "repeats": args.repeats, "cpus": os.cpu_count(),
        "wmeval_s_median": statistics.median(ours), "wmeval_reused_reference_s_median": statistics.median(reuse),
        "pytorch_fid_s_median": statistics.median(theirs),
        "speedup": statistics.median(theirs) / statistics.median(ours),
        "speedup_reused_reference": statistics.median(theirs) / statistics.median(reuse),
        "wmeval_value": v_ours, "pytorch_fid_value": float(v_theirs),
        "relative_difference": abs(v_ours - float(v_theirs)) / abs(float(v_theirs)),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
