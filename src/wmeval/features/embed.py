"""The features stage: embed every frame (image encoders) or clip (video encoders) of a rollout file.

Embeddings come from the shared content-addressed cache (:mod:`wmeval.features.cache`): only
rows the cache has never seen for this encoder are computed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from wmeval.core.digest import code_version, file_sha256
from wmeval.core.errors import WmevalError
from wmeval.encoders import Encoder
from wmeval.features.cache import FeatureCache, cache_root, encoder_key
from wmeval.tables import (
    KEY_COLUMNS,
    blocks,
    decode_frames,
    dense,
    io,
    read_metadata,
    read_table,
    select,
    tensor_array,
    with_metadata,
)

log = logging.getLogger(__name__)
FORMAT = "wmeval-features/1"


def _clips(table: pa.Table, length: int, stride: int, where: str) -> tuple[pa.Table, np.ndarray]:
    """One clip per (regime, plan, episode, sample) sequence: steps 1, 1 + stride, ... (``length`` frames)."""
    n = int(pa.compute.max(table.column("episode")).as_py()) + 1
    t = np.asarray(table.column("t").to_numpy())
    steps = np.arange(t.min(), t.max() + 1)
    take = 1 + stride * np.arange(length)
    if take[-1] > steps[-1]:
        raise WmevalError(f"{where}: a clip of {length} frames with stride {stride} needs steps up to {take[-1]}, "
                         f"but the rollouts end at t = {steps[-1]}; lower encoder.params.clip_length or raise "
                         "protocol.horizon")
    keys, items = [], []
    for b in blocks(table):
        blk = select(table, b.regime, b.plan)
        frames = dense(blk, "frame", n, steps, where)                    # (N, S, T, H, W, C)
        s = frames.shape[1]
        items.append(frames[:, :, np.searchsorted(steps, take)].reshape(n * s, length, *frames.shape[3:]))
        first = blk.slice(0, 1)
        keys.append(pa.table({
            "world": pa.array([first.column("world")[0].as_py()] * (n * s)),
            "source": pa.array([first.column("source")[0].as_py()] * (n * s)),
            "episode": np.repeat(np.arange(n, dtype=np.int32), s),
            "condition": pa.array([b.condition] * (n * s)), "plan": pa.array([b.plan] * (n * s)),
            "sample": np.tile(np.arange(s, dtype=np.int32), n), "regime": pa.array([b.regime] * (n * s)),
            "t": np.ones(n * s, np.int32), "valid": np.ones(n * s, bool)}))
    return pa.concat_tables(keys), np.concatenate(items)


#: The most bytes of stored frames the features stage holds at once (image encoders).
FRAME_BATCH_BYTES = 2**27


def _frame_batches(path: Path):
    """The ``frame`` column of ``path`` as numpy batches of at most :data:`FRAME_BATCH_BYTES`, assembled from
    small Arrow batches (Parquet decodes a tensor column through nested lists, whose transient buffers grow
    with the batch: a 256 MB batch of Pong frames peaked at 2.5 GB, 64-row batches at 0.18 GB)."""
    pf = pq.ParquetFile(path)
    field = pf.schema_arrow.field("frame")
    per_row = max(1, int(np.prod(field.type.shape)) * field.type.value_type.bit_width // 8)
    rows = max(1, FRAME_BATCH_BYTES // per_row)
    pending, held = [], 0
    for batch in pf.iter_batches(batch_size=max(1, min(rows, io.ROW_GROUP_BYTES // per_row)), columns=["frame"]):
        pending.append(batch.column(0).to_numpy_ndarray())
        held += len(pending[-1])
        while held >= rows:
            out = np.concatenate(pending)
            yield out[:rows]
            pending, held = [out[rows:]], len(out) - rows
    if held:
        yield np.concatenate(pending)


class Caches:
    """One :class:`FeatureCache` per input signature (dtype and shape of a frame or clip) of one encoder.

    The signature is part of the key: the same encoder on grayscale and RGB frames (or at two
    resolutions) writes different shards, and each index is read once per stage run.
    """

    def __init__(self, encoder: Encoder, cache_dir: str | None) -> None:
        self.encoder, self.root, self.caches = encoder, cache_root(cache_dir), {}

    def get(self, items: np.ndarray) -> FeatureCache:
        identity = {**self.encoder.cache_identity(), "input": [items.dtype.str, list(items.shape[1:])]}
        key = encoder_key(identity)
        if key not in self.caches:
            self.caches[key] = FeatureCache(self.root, key, identity)
        return self.caches[key]


def embed_file(path: Path, encoder: Encoder, cache_dir: str | None = None, progress: bool = True,
               caches: Caches | None = None, made_with: dict | None = None,
               compute: Callable[[np.ndarray], np.ndarray] | None = None,
               compute_many: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None) -> tuple[pa.Table, dict]:
    """The key columns of ``path`` plus ``embedding`` ``(dim,)`` float32, and this file's cache counters.

    ``made_with``: params recorded in the table's metadata (the stage records ``encoder_config``), which
    the stages that read it check against theirs (:func:`wmeval.core.stale.check_made_with`). ``compute``:
    what embeds the rows the cache lacks, from their stored bytes (default: ``encoder`` here);
    ``compute_many``: the same for several chunks at once (the Ray execution passes
    :meth:`wmeval.features.pool.EncoderPool.embed_many`)."""
    if compute is None:
        def compute(raw: np.ndarray) -> np.ndarray:
            return encoder(decode_frames(raw))
    where = f"{path.parent.name}/{path.name}"
    caches = caches or Caches(encoder, cache_dir)
    if encoder.clip:
        table = read_table(path, columns=[*KEY_COLUMNS, "frame"])
        keys, items = _clips(table, encoder.clip["length"], encoder.clip["frame_stride"], where)
        del table
        parts = [items]
    else:
        # Image encoders: the frames are read batch by batch (at most FRAME_BATCH_BYTES of them at once).
        keys = read_table(path, columns=list(KEY_COLUMNS))
        parts = _frame_batches(path)
    cache, before, embs = None, None, []
    with tqdm(desc=f"embed {where}", unit="item", disable=not progress, leave=False) as bar:
        for items in parts:
            if cache is None:
                cache = caches.get(items)
                before = cache.stats.as_dict()
            embs.append(cache.embed(items, compute, progress=bar.update, compute_many=compute_many))
    frame_type = pq.read_schema(path).field("frame").type
    if cache is None:   # a file without rows
        cache = caches.get(np.empty((0, *frame_type.shape), frame_type.value_type.to_pandas_dtype()))
        before = cache.stats.as_dict()
    emb = np.concatenate([e for e in embs if e.size]) if any(e.size for e in embs) else np.empty((0, 0), np.float32)
    stats = {k: v - before[k] for k, v in cache.stats.as_dict().items()}
    cache.record(file=where, encoder=encoder.name, **{f"file_{k}": v for k, v in stats.items()})
    src = read_metadata(path)
    meta = {
        "format": FORMAT, **encoder.protocol(), "resolution": list(frame_type.shape),
        # Frames per second of the embedded sequence: the world's 1/dt, divided by a clip's frame stride.
        "frame_rate": (1.0 / src["world"]["dt"] / (encoder.clip["frame_stride"] if encoder.clip else 1))
        if "dt" in src.get("world", {}) else None,
        "input": {"file": where, "sha256": file_sha256(path), "format": src.get("format")},
        "code": code_version("features"),
        **(made_with or {}),
    }
    if emb.shape[0] == 0:
        emb = np.empty((0, encoder.dim or 0), np.float32)
    return with_metadata(keys.append_column("embedding", tensor_array(emb)), meta), stats

