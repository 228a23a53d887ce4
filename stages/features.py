"""Stage features: embed every rollout frame or clip -> data/features/<encoder>/<world>/<source>.parquet."""

import wmeval.core.stage_process  # noqa: F401, I001  first: memory settings before numpy and pyarrow load

import contextlib
import dataclasses
import logging
from pathlib import Path

from wmeval.core.config import load_params
from wmeval.core.execution import executor_for
from wmeval.core.runner import main
from wmeval.core.stale import check_made_with, encoder_config
from wmeval.encoders import build_encoder
from wmeval.features import Caches, embed_file
from wmeval.features.pool import EncoderPool
from wmeval.tables import atomic_dir, read_metadata, write_table

IN, OUT = Path("data/rollouts"), Path("data/features")
log = logging.getLogger("stages.features")


def run() -> None:
    params = load_params()
    encoder = build_encoder(params.encoder)       # verifies weights before anything is written
    total = {"rows": 0, "hits": 0, "embedded": 0, "corrupt_shards": 0}
    caches = Caches(encoder, params.encoder.cache_dir)
    made_with = {"encoder_config": encoder_config(params.encoder.name, params.encoder.kind,
                                                   params.encoder.params, params.encoder.precision)}
    for name in params.worlds:                    # every input was made with this run's world params
        for f in sorted((IN / name).glob("*.parquet")):
            check_made_with(f, read_metadata(f).get("world_config"), dataclasses.asdict(params.worlds[name]),
                            f"worlds.{name}")
    ex = executor_for(params.execution)           # None: here; Ray: the encoder on actors, loaded once each
    with contextlib.ExitStack() as stack, atomic_dir(OUT) as tmp:
        pool = None if ex is None else stack.enter_context(EncoderPool.open(ex, params.encoder, encoder.device))
        many = None if pool is None else pool.embed_many
        for name in params.worlds:
            (tmp / encoder.name / name).mkdir(parents=True)
            for f in sorted((IN / name).glob("*.parquet")):
                table, stats = embed_file(f, encoder, caches=caches, made_with=made_with, compute_many=many)
                write_table(table, tmp / encoder.name / name / f.name)
                log.info("%s/%s: %d rows, %d from the cache, %d embedded", name, f.name, stats["rows"],
                         stats["hits"], stats["embedded"])
                total = {k: total[k] + stats[k] for k in total}
    log.info("feature cache (%s): %d rows, %d hits, %d embedded, %d corrupt shards recomputed",
             encoder.name, total["rows"], total["hits"], total["embedded"], total["corrupt_shards"])


if __name__ == "__main__":
    main(run)
