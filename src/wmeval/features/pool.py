"""The features stage's encoder on Ray actors (``execution.kind: ray``): each actor builds the encoder once."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from wmeval.core.errors import ConfigError
from wmeval.core.execution import RayExecutor

log = logging.getLogger(__name__)


class EncoderActor:
    """Builds the encoder once on its worker (weights verified there), then embeds raw stored frames or clips.
    ``cwd``: the project folder, entered when this node sees it (a relative ``weights_dir``)."""

    def __init__(self, encoder_config: Any, cwd: str) -> None:
        from wmeval.encoders import build_encoder

        if os.path.isdir(cwd):
            os.chdir(cwd)
        self.encoder = build_encoder(encoder_config)

    def embed(self, raw: np.ndarray) -> np.ndarray:
        from wmeval.tables import decode_frames

        return np.asarray(self.encoder(decode_frames(raw)), dtype=np.float32)


class EncoderPool:
    """Encoder actors; :meth:`embed_many` embeds several chunks at once (:meth:`FeatureCache.embed`'s
    ``compute_many``), each exactly as ``encoder(decode_frames(chunk))`` would here."""

    def __init__(self, ex: RayExecutor, actors: list, batch_size: int) -> None:
        from ray.util import ActorPool

        self.ray, self.pool, self.n = ex.ray, ActorPool(actors), len(actors)
        batch = max(1, int(batch_size))
        self.rows = batch * max(1, math.ceil(ex.cfg.rows_per_shard / batch))

    @classmethod
    @contextlib.contextmanager
    def open(cls, ex: RayExecutor, encoder_config: Any, device: str) -> Iterator[EncoderPool]:
        """The pool for ``encoder_config`` on the device the encoder resolved to here (``device``): the same
        device, so the same numbers. Its actors are released on the way out."""
        cfg = ex.cfg
        if device.startswith("cuda") and not cfg.resources("encoder").get("GPU"):
            raise ConfigError(f"execution: the encoder runs on {device} here (encoder.device = "
                              f"{encoder_config.device!r}); give its Ray actors GPUs (execution.encoder_num_gpus or "
                              "num_gpus) or set "
                              "encoder.device=cpu, so that the cluster computes what this machine would")
        config = dataclasses.replace(encoder_config, device=device)
        room = ex.capacity("encoder")
        n = min(cfg.actors or room, room)
        if cfg.actors > n:
            log.warning("execution: %d encoder actors asked for, the cluster holds %d at once", cfg.actors, n)
        with ex.actor_group(EncoderActor, [(config, os.getcwd())] * n, "encoder") as actors:
            pool = cls(ex, actors, encoder_config.batch_size)
            log.info("execution: %d encoder actors, %d rows per shard", n, pool.rows)
            yield pool

    def embed_many(self, chunks: list[np.ndarray]) -> list[np.ndarray]:
        """Each chunk's embeddings. A chunk is cut into shards of whole encoder batches from its start (so every
        batch is one the local path makes for that chunk); shards go to whichever actor is free, all chunks'
        at once, and come back in order."""
        shards, owner = [], []
        for c, chunk in enumerate(chunks):
            for i in range(0, len(chunk), self.rows):
                shards.append(chunk[i:i + self.rows])
                owner.append(c)
        out: list[list[np.ndarray]] = [[] for _ in chunks]
        for c, emb in zip(owner, self.pool.map(lambda a, v: a.embed.remote(v), shards)):
            out[c].append(emb)
        return [np.concatenate(parts) if parts else np.empty((0, 0), np.float32) for parts in out]
