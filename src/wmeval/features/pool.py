"""The features stage's encoder on Ray actors (``execution.kind: ray``): each actor builds the encoder once."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from wmeval.core.execution import RayExecutor

log = logging.getLogger(__name__)


class EncoderActor:
    """Builds the encoder once on its worker (weights verified there), then embeds raw stored frames or clips."""

    def __init__(self, encoder_config: Any, cwd: str) -> None:
        import os

        from wmeval.encoders import build_encoder

        if os.path.isdir(cwd):                      # the project folder, when this node sees it (weights_dir)
            os.chdir(cwd)
        self.encoder = build_encoder(encoder_config)

    def embed(self, raw: np.ndarray) -> np.ndarray:
        from wmeval.tables import decode_frames

        return np.asarray(self.encoder(decode_frames(raw)), dtype=np.float32)


class EncoderPool:
    """Encoder actors; :meth:`embed` is a drop-in for ``encoder(decode_frames(raw))``."""

    def __init__(self, ex: RayExecutor, encoder_config: Any) -> None:
        import os

        self.ray, self.actors = ex.ray, ex.actors(EncoderActor, encoder_config, os.getcwd())
        batch = max(1, int(encoder_config.batch_size))
        self.rows = batch * max(1, math.ceil(ex.cfg.rows_per_shard / batch))
        log.info("execution: %d encoder actors, %d rows per shard", len(self.actors), self.rows)

    def embed(self, raw: np.ndarray) -> np.ndarray:
        """Embeddings of ``raw``, computed on the actors in shards of whole encoder batches (so every batch is
        one the local path makes too) and put back in row order, whichever shard finishes first."""
        if len(raw) == 0:
            return np.empty((0, 0), np.float32)
        parts = [raw[i:i + self.rows] for i in range(0, len(raw), self.rows)]
        futures = [self.actors[i % len(self.actors)].embed.remote(p) for i, p in enumerate(parts)]
        return np.concatenate(self.ray.get(futures))
