"""How the plug-in FD and its bias-corrected form depend on the number of generated rows, on the pipeline's data.

A K = 4 model has four times the rows of a K = 1 model, and the plug-in FD falls with N. This
script takes one model's rows of one view from the committed pipeline outputs (``dvc repro``
first) and compares ``wmeval.stats.distribution_bootstrap`` on all of them with random
subsets of a quarter of them (the same rows' clusters, paired with the reference):

    python benchmarks/fd_sample_size.py [--world blobs] [--view transition] [--model stochastic]

Writes ``benchmarks/results/fd_sample_size.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from wmeval.core.config import load_params
from wmeval.estimators.distributional import view_sets
from wmeval.stats import distribution_bootstrap
from wmeval.tables import KEY_COLUMNS, read_metadata, read_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", default="blobs")
    ap.add_argument("--view", default="transition")
    ap.add_argument("--model", default="stochastic")
    ap.add_argument("--fraction", type=float, default=0.25)
    ap.add_argument("--subsets", type=int, default=5)
    ap.add_argument("--resamples", type=int, default=300)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fd_sample_size.json"))
    args = ap.parse_args()
    params, sc = load_params("params.yaml"), load_params("params.yaml").scoring
    wp = json.loads(Path("data/stats/protocol.json").read_text())["worlds"][args.world]
    fe = Path("data/features") / params.encoder.name / args.world
    truth = read_table(Path("data/rollouts") / args.world / "ground_truth.parquet")
    emb = {m: read_table(fe / f"{m}.parquet", columns=[*KEY_COLUMNS, "embedding"]) for m in [args.model]}
    clip = read_metadata(fe / "ground_truth.parquet")["clip"] is not None
    sets, _ = view_sets(truth, read_table(fe / "ground_truth.parquet", columns=[*KEY_COLUMNS, "embedding"]), emb,
                        [args.view], clip, wp["n_episodes"], wp["horizon"], sc.strata,
                        list(map(float, sc.action_bins)), str(fe))
    vs = sets[args.view]
    ref, side = vs.reference, vs.sources[args.model]
    rng = np.random.default_rng(0)
    out = {"world": args.world, "view": args.view, "model": args.model, "n_real": len(ref.x), "runs": []}
    subsets = [np.arange(len(side.x))] + [np.sort(rng.choice(len(side.x), int(args.fraction * len(side.x)),
                                                             replace=False)) for _ in range(args.subsets)]
    for i, idx in enumerate(subsets):
        run = {"n_fake": len(idx), "subset": i}
        for m in ("fd", "fd_bias_corrected", "kid"):
            r = distribution_bootstrap(ref.x, side.x[idx], real_clusters=ref.episode, fake_clusters=side.episode[idx],
                                       metric=m, n_resamples=args.resamples, seed=i)
            run[m] = {"point": r.point, "low": r.low, "high": r.high}
        out["runs"].append(run)
        print(json.dumps(run), flush=True)
    full, quarters = out["runs"][0], out["runs"][1:]
    out["summary"] = {m: {"all_rows": full[m]["point"], "subset_median": float(np.median([q[m]["point"]
                                                                                          for q in quarters]))}
                      for m in ("fd", "fd_bias_corrected", "kid")}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["summary"], indent=2))


if __name__ == "__main__":
    main()
