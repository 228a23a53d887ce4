"""The features stage: embed every frame of every rollout file."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm

from .encoders import Encoder
from .provenance import code_version, file_sha256
from .tables import KEY_COLUMNS, decode_frames, read_metadata, read_table, tensor_array, tensor_numpy, with_metadata

log = logging.getLogger(__name__)
FORMAT = "wmeval-features/1"


def embed_file(path: Path, encoder: Encoder, batch_size: int = 512, progress: bool = True) -> pa.Table:
    """The key columns of ``path`` plus an ``embedding`` tensor column ``(dim,)`` float32."""
    table = read_table(path, columns=[*KEY_COLUMNS, "frame"])
    frames = tensor_numpy(table, "frame")
    out = []
    for i in tqdm(range(0, len(frames), batch_size), desc=f"embed {path.parent.name}/{path.stem}",
                  unit="batch", disable=not progress, leave=False):
        emb = encoder(decode_frames(frames[i:i + batch_size]))
        if not np.all(np.isfinite(emb)):
            raise ValueError(f"encoder {encoder.name!r} produced non-finite embeddings for {path}")
        out.append(emb.astype(np.float32))
    emb = np.concatenate(out) if out else np.empty((0, encoder.dim_per_channel), np.float32)
    src_meta = read_metadata(path)
    result = table.drop_columns(["frame"]).append_column("embedding", tensor_array(emb))
    meta = {
        "format": FORMAT, **encoder.protocol(), "dim": int(emb.shape[1]),
        "resolution": list(frames.shape[1:]), "clip": None,
        "input": {"file": f"{path.parent.name}/{path.name}", "sha256": file_sha256(path),
                  "format": src_meta.get("format")},
        "code": code_version(),
    }
    return with_metadata(result, meta)
