"""Ray scale-out on this machine: throughput with 1 and 2 workers beside the local path, and the per-shard cost
from which the README projects the time on N GPUs (a projection, labelled as such).

Two workloads, the two that `execution=ray` shards:

- features: the `random_conv` encoder (weight-free, 64 x 64 input) on synthetic 64 x 64 x 3 frames, through
  :class:`wmeval.features.pool.EncoderPool` with 1 and 2 actors (1 CPU each), against the local call
  ``encoder(decode_frames(raw))`` (torch on every core), both through a fresh embedding cache, as the stage
  calls them (chunks of 2048 rows; on Ray all chunks' shards at once);
- bootstrap: FD replicates (d = 64, 64 episodes x 32 rows a side) through :meth:`RayExecutor.map` with 1 and 2
  CPUs, against the local threads (2);
- rollouts: one stochastic blob model (64 x 64 frames) over ``--episodes`` episodes in blocks of
  ``--episode-block``, through :func:`wmeval.rollouts.episodes.world_tables` with 1 and 2 model actors (the
  stage's sharding by world, model and block), against the local path.

Beside the throughputs, a per-shard cost table (seconds per shard on one worker, end to end) for each kind
of shard, from which the README projects times on N workers.

Every figure is the median of ``--repeats`` runs, all in one process, side by side. Usage:
``python benchmarks/ray_scaling.py [--rows 8192] [--replicates 200] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ray_scaling.json"


class FDReplicate:
    """One FD replicate from a row of episode multiplicities (both sides resampled by episode, paired)."""

    def __init__(self, real: np.ndarray, fake: np.ndarray, episodes: np.ndarray) -> None:
        self.real, self.fake, self.episodes = real, fake, episodes

    def __call__(self, counts: np.ndarray) -> float:
        from wmeval.metrics.frechet import frechet_distance

        w = counts[self.episodes].astype(np.float64)

        def moments(x):
            mu = (w[:, None] * x).sum(0) / w.sum()
            xc = x - mu
            return mu, (w[:, None] * xc).T @ xc / (w.sum() - 1)

        return frechet_distance(*moments(self.real), *moments(self.fake))


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--replicates", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows-per-shard", type=int, default=512)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--episode-block", type=int, default=16)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    import ray

    from wmeval.core.config import EncoderConfig, ExecutionConfig
    from wmeval.core.execution import RayExecutor
    from wmeval.encoders import build_encoder
    from wmeval.features.cache import FeatureCache
    from wmeval.features.pool import EncoderPool
    from wmeval.tables import decode_frames

    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=(args.rows, 64, 64, 3), dtype=np.uint8)
    enc_cfg = EncoderConfig(name="random_conv", kind="random_conv", comparable_to_published=False,
                            params={"resolution": 64, "width": 32, "seed": 0}, device="cpu", batch_size=256)
    encoder = build_encoder(enc_cfg)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    results: dict = {"command": "python benchmarks/ray_scaling.py " + " ".join(sys.argv[1:]),
                     "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__},
                     "settings": vars(args), "features": {}, "bootstrap": {}}
    # Through the embedding cache, as the features stage calls it (a fresh cache each time: every row embedded).
    def through_cache(compute_many=None):
        with tempfile.TemporaryDirectory() as d:
            cache = FeatureCache(Path(d), "bench")
            return cache.embed(raw, lambda x: encoder(decode_frames(x)), compute_many=compute_many)

    local_t, local_emb = timed(through_cache, args.repeats)
    results["features"]["local"] = {"seconds": local_t, "rows_per_s": args.rows / local_t}
    for actors in (1, 2):
        ex = RayExecutor(ExecutionConfig(kind="ray", address="local", actors=actors,
                                         rows_per_shard=args.rows_per_shard))
        with EncoderPool.open(ex, enc_cfg, encoder.device) as pool:
            pool.embed_many([raw[: pool.rows]])                             # actors up, encoders built
            t, emb = timed(lambda pool=pool: through_cache(pool.embed_many), args.repeats)
            shards = -(-args.rows // pool.rows)
            results["features"][f"ray_{actors}"] = {
                "seconds": t, "rows_per_s": args.rows / t, "shards": shards, "seconds_per_shard": t * actors / shards,
                "identical_to_local": bool(np.array_equal(emb, local_emb))}

    # Bootstrap replicates.
    n_eps, per, d = 64, 32, 64
    episodes = np.repeat(np.arange(n_eps), per)
    real = rng.standard_normal((n_eps * per, d))
    fake = rng.standard_normal((n_eps * per, d)) + 0.1
    counts = rng.multinomial(n_eps, np.full(n_eps, 1 / n_eps), size=args.replicates)
    rep = FDReplicate(real, fake, episodes)

    def local_threads():
        from concurrent.futures import ThreadPoolExecutor

        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1), ThreadPoolExecutor(max_workers=2) as pool:
            return list(pool.map(rep, counts))

    t, local_reps = timed(local_threads, args.repeats)
    results["bootstrap"]["local_2_threads"] = {"seconds": t, "replicates_per_s": args.replicates / t}
    for cpus in (1, 2):
        ray.shutdown()
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        ex = RayExecutor(ExecutionConfig(kind="ray", address="auto", replicates_per_shard=25))
        ex.map(rep, counts[:25])
        t, reps = timed(lambda: ex.map(rep, counts), args.repeats)
        results["bootstrap"][f"ray_{cpus}_cpu"] = {"seconds": t, "replicates_per_s": args.replicates / t,
                                                  "identical_to_local": reps == local_reps}
    ray.shutdown()

    # Rollouts: one model's blocks of episodes on 1 and 2 actors (2 CPUs: actors of 2 CPUs leave room for one).
    import dataclasses

    import pyarrow as pa

    from wmeval.core.config import ProtocolConfig, WorldConfig
    from wmeval.rollouts.episodes import episode_blocks, world_tables

    wcfg = WorldConfig(name="blobs", kind="blobs", params={"frame_size": 64})
    models = {"stochastic": {"_target_": "wmeval.models.BlobReferenceModel", "mode": "stochastic"}}
    proto = ProtocolConfig(name="bench", n_episodes=args.episodes, horizon=8, num_samples=4, num_futures=2,
                           n_random_plans=2, teacher_forced_plan="random_0", frame_dtype="uint8", seed=0,
                           episode_block=args.episode_block)
    n_blocks = len(episode_blocks(proto.n_episodes, proto.episode_block))

    def rollouts(executor=None):
        tables = [(src, t) for src, t in world_tables(wcfg, models, proto, False, executor=executor)]
        return {src: pa.concat_tables([t for s2, t in tables if s2 == src]) for src in dict(tables)}

    t, local_tabs = timed(rollouts, args.repeats)
    results["rollouts"] = {"local": {"seconds": t, "episodes_per_s": args.episodes / t}, "blocks": n_blocks}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    for actors in (1, 2):
        ex = RayExecutor(ExecutionConfig(kind="ray", address="auto", rollout_num_cpus=1.0,
                                         rollout_actors_per_model=actors))
        rollouts(ex)                                                         # worker processes warm
        t, tabs = timed(lambda ex=ex: rollouts(ex), args.repeats)
        results["rollouts"][f"ray_{actors}"] = {
            "seconds": t, "episodes_per_s": args.episodes / t, "seconds_per_shard": t * actors / n_blocks,
            "identical_to_local": all(tabs[k].equals(local_tabs[k]) for k in local_tabs)}
    ray.shutdown()
    f = results["features"]
    per_shard = f["ray_1"]["seconds_per_shard"]          # end to end with one actor: compute + transfer + scheduling
    rows = 1_000_000
    shards = -(-rows // args.rows_per_shard)
    results["projection"] = {
        "label": "a projection, not a measurement: time(N workers) = shards x (measured seconds per shard with one "
                 "actor, end to end) / N; it assumes shards spread evenly and the driver keeps up. On GPUs, put "
                 "your own per-shard time (run this script on one GPU worker) in the same formula",
        "rows": rows, "rows_per_shard": args.rows_per_shard, "shards": shards, "seconds_per_shard": per_shard,
        "check_2_workers": {"projected_s": args.rows / args.rows_per_shard * per_shard / 2,
                            "measured_s": f["ray_2"]["seconds"]},
        "minutes_for_N_workers": {str(n): shards * per_shard / n / 60 for n in (1, 2, 8, 32, 128)},
    }
    b = results["bootstrap"]
    results["per_shard_cost"] = {
        "label": "measured here, one worker, end to end (compute, transfer, scheduling): seconds per shard",
        "features": {"shard": f"{args.rows_per_shard} frames 64x64x3, random_conv", "seconds": per_shard},
        "bootstrap": {"shard": "25 FD replicates, d = 64, 64 episodes x 32 rows a side",
                      "seconds": b["ray_1_cpu"]["seconds"] * 25 / args.replicates},
        "rollouts": {"shard": f"one block of {args.episode_block} episodes of one blob model (64x64, horizon 8, "
                              "K = 4, 3 plans)", "seconds": results["rollouts"]["ray_1"]["seconds_per_shard"]},
    }
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
