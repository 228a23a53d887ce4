"""Cost of one Frechet-distance bootstrap replicate at d = 2048 against one FD evaluation, side by side.

A replicate recomputes the resampled episodes' Frechet distance with each episode's multiplicity
as its rows' weight. At this size (3072 rows a side, d = 2048) ``wmeval.estimators.distributional.replicates``
builds the row Grams once and works in the sample space (``metrics.RowGrams``); the floor is
one ``frechet_distance`` call on given moments. The marginal cost per replicate is
(time for 1 + R replicates - time for 1) / R, so the one-off Grams and KID kernel sums are
excluded and reported apart (``first_call_s``). Medians of ``--repeats``; replicates run over
all cores.

    python benchmarks/fd_replicates.py [--dim 2048] [--episodes 64] [--rows 48] [--replicates 6]
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
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--rows", type=int, default=48, help="rows per episode and side")
    ap.add_argument("--replicates", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fd_replicates.json"))
    args = ap.parse_args()

    from wmeval.estimators.distributional import (
        Settings,
        Side,
        ViewSets,
        _sample_grams,
        replicates,
    )
    from wmeval.metrics import frechet_distance, gaussian_stats

    rng = np.random.default_rng(0)
    d, n_eps, rows = args.dim, args.episodes, args.rows
    mix = rng.normal(size=(d, d)) / np.sqrt(d)
    ep = np.repeat(np.arange(n_eps), rows)
    st = np.full(len(ep), "all")
    ref = Side(rng.normal(size=(len(ep), d)) @ mix, ep, st)
    fake = Side(rng.normal(size=(len(ep), d)) @ mix + 0.05, ep, st)
    vs = ViewSets("frame", ref, {"model": fake}, [])
    a, b = gaussian_stats(ref.x), gaussian_stats(fake.x)
    single, per_rep, first = [], [], []
    counts = rng.multinomial(n_eps, np.full(n_eps, 1 / n_eps), size=args.replicates)
    for _ in range(args.repeats):
        t = time.perf_counter()
        frechet_distance(a.mu, a.sigma, b.mu, b.sigma)
        single.append(time.perf_counter() - t)
        # Marginal cost: B = 1 + R replicates minus B = 1 (the one-off moments and kernel sums).
        t = time.perf_counter()
        replicates({"frame": vs}, counts[:1], Settings.defaults())
        one = time.perf_counter() - t
        first.append(one)
        t = time.perf_counter()
        replicates({"frame": vs}, counts, Settings.defaults())
        per_rep.append((time.perf_counter() - t - one) / (args.replicates - 1))
    res = {"dim": d, "episodes": n_eps, "rows_per_episode_and_side": rows, "cores": os.cpu_count(),
           "single_fd_s": statistics.median(single), "per_replicate_s": statistics.median(per_rep),
           "first_call_s": statistics.median(first), "replicates": args.replicates, "repeats": args.repeats,
           "route": "row Grams (sample space)" if _sample_grams(ref, {"model": fake}, d) is not None
           else "per-episode moments"}
    res["ratio"] = res["per_replicate_s"] / res["single_fd_s"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
