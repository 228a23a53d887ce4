"""The Parquet data model for rollouts and features.

A rollout file holds the rows of one ``(world, source)``: ``source`` is
``ground_truth`` or a model name. One row is one observation:

========== ===================================================================
column     meaning
========== ===================================================================
world      world name
source     ``ground_truth`` or the model name
episode    evaluation episode id (the independent unit, the bootstrap cluster)
condition  the stratum: discrete action, counterfactual arm, or ``random``
plan       the action plan id (``random_0``, ``const_+1``, ``left``, ...)
sample     model sample 0..K-1; for ground truth the realized future 0..M-1
regime     ``teacher_forced`` or ``open_loop`` for models, ``realized`` for
           ground truth
t          step 1..H (ground truth also has t = 0, the shared context frame)
valid      mask; False marks padding (excluded from every metric)
frame      fixed-shape tensor ``(H_img, W, C)``, uint8 (value / 255 in [0, 1])
           or float32 in [0, 1], per the file's ``frame_dtype``
state      fixed-shape tensor ``(D,)`` float64, where the source has states
action     fixed-shape tensor ``(A,)`` float64, the action that led to ``o_t``
           (zeros at t = 0)
logp       float64, optional: log density of the realized ``o_t`` given the
           realized history, on teacher-forced rows of models with a density
reward     float64, optional: the world's declared reward read from the row's
           state (pendulum) or frame (blobs)
========== ===================================================================

The file's schema metadata key ``wmeval`` holds a JSON record of what produced
it (world and model config, seed, protocol, code version, frame dtype).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from wmeval.core.errors import WmevalError

METADATA_KEY = b"wmeval"
KEY_COLUMNS = ("world", "source", "episode", "condition", "plan", "sample", "regime", "t", "valid")
REGIMES = ("teacher_forced", "open_loop", "realized", "probe", "closed_loop")


def tensor_array(values: np.ndarray) -> pa.ExtensionArray:
    """``(rows, *shape)`` numpy array to an Arrow fixed-shape tensor array (zero-copy when contiguous)."""
    return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(values))


def tensor_numpy(table: pa.Table, column: str) -> np.ndarray:
    """A fixed-shape tensor column as one ``(rows, *shape)`` numpy array, without a per-row loop."""
    col = table.column(column)
    if not isinstance(col.type, pa.FixedShapeTensorType):
        raise WmevalError(f"column {column!r} is {col.type}, expected a fixed-shape tensor")
    if col.num_chunks == 0:
        return np.empty((0, *col.type.shape), dtype=col.type.value_type.to_pandas_dtype())
    return col.combine_chunks().to_numpy_ndarray()


def encode_frames(frames: np.ndarray, dtype: str) -> np.ndarray:
    """Frames float in [0, 1] to the stored dtype (``uint8`` rounds x * 255)."""
    if dtype == "uint8":
        return np.rint(np.clip(frames, 0.0, 1.0) * 255.0).astype(np.uint8)
    if dtype == "float32":
        return np.asarray(frames, dtype=np.float32)
    raise ValueError(f"frame_dtype must be 'uint8' or 'float32', got {dtype!r}")


def decode_frames(frames: np.ndarray) -> np.ndarray:
    """Stored frames to float32 in [0, 1]."""
    if frames.dtype == np.uint8:
        return frames.astype(np.float32) / np.float32(255.0)
    return frames.astype(np.float32, copy=False)


def rollout_table(*, world: str, source: str, regime: str, plan: str, condition: str,
                  episodes: np.ndarray, t: np.ndarray, frames: np.ndarray | None,
                  states: np.ndarray | None, actions: np.ndarray, frame_dtype: str,
                  logp: np.ndarray | None = None, valid: np.ndarray | None = None,
                  reward: np.ndarray | None = None) -> pa.Table:
    """Rows for one (source, regime, plan), arrays laid out ``(N, S, T, ...)``.

    Args:
        episodes: ``(N,)`` episode ids.
        t: ``(T,)`` step numbers.
        frames: ``(N, S, T, H_img, W, C)`` float in [0, 1], or None.
        states: ``(N, S, T, D)``, or None.
        actions: ``(N, T, A)``, the action leading to each step (shared by samples).
        logp: ``(N, T)`` or None (shared by samples).
        valid: ``(N, T)`` bool or None (all valid).
        reward: ``(N, S, T)`` or None: the world's reward read from each row's state or frame.

    Rows are ordered episode, sample, t.
    """
    arr = frames if frames is not None else states
    n, s, T = arr.shape[:3]
    rows = n * s * T
    ep = np.repeat(np.asarray(episodes, dtype=np.int32), s * T)
    sample = np.tile(np.repeat(np.arange(s, dtype=np.int32), T), n)
    tt = np.tile(np.asarray(t, dtype=np.int32), n * s)

    def per_step(x: np.ndarray) -> np.ndarray:  # (N, T, ...) -> rows, repeated over samples
        return np.repeat(x[:, None], s, axis=1).reshape(rows, *x.shape[2:])

    cols: dict[str, Any] = {
        "world": pa.array([world] * rows, pa.string()).dictionary_encode(),
        "source": pa.array([source] * rows, pa.string()).dictionary_encode(),
        "episode": ep,
        "condition": pa.array([condition] * rows, pa.string()).dictionary_encode(),
        "plan": pa.array([plan] * rows, pa.string()).dictionary_encode(),
        "sample": sample,
        "regime": pa.array([regime] * rows, pa.string()).dictionary_encode(),
        "t": tt,
        "valid": per_step(np.ones((n, T), bool) if valid is None else np.asarray(valid, bool)),
    }
    if frames is not None:
        cols["frame"] = tensor_array(encode_frames(frames.reshape(rows, *frames.shape[3:]), frame_dtype))
    if states is not None:
        cols["state"] = tensor_array(np.asarray(states, np.float64).reshape(rows, states.shape[-1]))
    cols["action"] = tensor_array(per_step(np.asarray(actions, np.float64)))
    if logp is not None:
        cols["logp"] = per_step(np.asarray(logp, np.float64))
    if reward is not None:
        cols["reward"] = np.asarray(reward, np.float64).reshape(rows)
    return pa.table(cols)


def with_metadata(table: pa.Table, meta: dict[str, Any]) -> pa.Table:
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(meta, sort_keys=True).encode()})


def read_metadata(path: str | Path) -> dict[str, Any]:
    if not Path(path).is_file():
        raise WmevalError(f"{path}: missing")
    try:
        md = pq.read_schema(path).metadata or {}
    except Exception as e:
        raise WmevalError(f"{path}: cannot be read as Parquet: {e}") from None
    if METADATA_KEY not in md:
        raise WmevalError(f"{path}: no wmeval metadata; not written by wmeval")
    return json.loads(md[METADATA_KEY])


#: Tensor bytes per Parquet row group. Reading a fixed-shape tensor column decodes it as a nested list, with
#: transient buffers many times the data (a 270 MB column of Pong frames in one row group peaked at 3.8 GB;
#: in row groups of 64 rows, 0.65 GB, and 3x faster): small row groups bound what a read holds at once.
ROW_GROUP_BYTES = 2**23


def row_group_rows(table: pa.Table) -> int | None:
    """Rows per row group: :data:`ROW_GROUP_BYTES` of the table's tensor columns (``None``: no tensor column,
    Arrow's default)."""
    per_row = sum(int(np.prod(f.type.shape)) * f.type.value_type.bit_width // 8 for f in table.schema
                  if isinstance(f.type, pa.FixedShapeTensorType))
    return max(1, ROW_GROUP_BYTES // per_row) if per_row else None


@contextmanager
def _naming(path: str | Path) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None:  # Arrow's errors name no file: name it
            raise OSError(e.errno, os.strerror(e.errno), str(path)) from e
        raise


def write_table(table: pa.Table, path: str | Path) -> None:
    with _naming(path):
        pq.write_table(table, path, compression="zstd", row_group_size=row_group_rows(table))


def write_blocks(blocks: Iterable[tuple[str, pa.Table]], folder: str | Path) -> dict[str, int]:
    """Write ``(name, table)`` blocks to ``folder/<name>.parquet``, each name's blocks appended in order to one
    file (the blocks of a name must share one schema: the first block's, metadata included). Returns the rows
    written per name."""
    writers: dict[str, pq.ParquetWriter] = {}
    rows: dict[str, int] = {}
    try:
        for name, table in blocks:
            path = Path(folder) / f"{name}.parquet"
            with _naming(path):
                if name not in writers:
                    writers[name] = pq.ParquetWriter(path, table.schema, compression="zstd")
                writers[name].write_table(table, row_group_size=row_group_rows(table))
            rows[name] = rows.get(name, 0) + table.num_rows
            del table                   # held no longer than its write: the next block is built meanwhile
    finally:
        for w in writers.values():
            w.close()
    return rows


def read_table(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """Read a wmeval Parquet file, checking the key columns are there."""
    path = Path(path)
    if not path.is_file():
        raise WmevalError(f"{path}: missing")
    try:
        table = pq.read_table(path, columns=columns)
    except Exception as e:
        raise WmevalError(f"{path}: cannot be read as Parquet: {e}") from None
    missing = [c for c in (columns or KEY_COLUMNS) if c not in table.column_names]
    if missing:
        raise WmevalError(f"{path}: columns {missing} are missing")
    return table


#: The most bytes of stored rows (as Parquet reports them, uncompressed) a stage reads at once from the files it
#: reads together by episode: see :func:`episode_windows`.
WINDOW_BYTES = 2**28


def episode_windows(paths: list[Path], n_episodes: int) -> list[tuple[int, int]]:
    """Windows ``[lo, hi)`` of episodes over which the rows of ``paths`` together take at most
    :data:`WINDOW_BYTES` (at least one episode per window). Every file's ``episode`` column is checked to lie
    in ``0..n_episodes - 1`` first, so that reading window by window drops no row.

    Raises:
        WmevalError: an episode outside the protocol, naming the file and the value.
    """
    total = 0
    for path in paths:
        ep = read_table(path, columns=["episode"]).column("episode")
        if len(ep):
            lo, hi = pc.min(ep).as_py(), pc.max(ep).as_py()
            if lo < 0 or hi >= n_episodes:
                bad = lo if lo < 0 else hi
                raise WmevalError(f"{path}: column 'episode' has value {bad}; the protocol has episodes "
                                  f"0..{n_episodes - 1}")
        md = pq.ParquetFile(path).metadata
        total += sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    per_episode = max(1, total // max(1, n_episodes))
    width = max(1, WINDOW_BYTES // per_episode)
    return [(lo, min(n_episodes, lo + width)) for lo in range(0, n_episodes, width)]


def read_episodes(path: str | Path, lo: int, hi: int, columns: list[str] | None = None) -> pa.Table:
    """The rows of episodes ``lo <= episode < hi``, renumbered ``0..hi - lo - 1``; only the row groups that
    hold them are read (rows are written episode-major within each block, so a window is a few groups)."""
    path = Path(path)
    if not path.is_file():
        raise WmevalError(f"{path}: missing")
    try:
        table = pq.read_table(path, columns=columns, filters=[("episode", ">=", lo), ("episode", "<", hi)])
    except Exception as e:
        raise WmevalError(f"{path}: cannot be read as Parquet: {e}") from None
    missing = [c for c in (columns or KEY_COLUMNS) if c not in table.column_names]
    if missing:
        raise WmevalError(f"{path}: columns {missing} are missing")
    return shift_episodes(table, -lo)


def shift_episodes(table: pa.Table, by: int) -> pa.Table:
    """``table`` with ``by`` added to its ``episode`` column (its type kept)."""
    if by == 0:
        return table
    i = table.schema.get_field_index("episode")
    col = table.column(i)
    return table.set_column(i, table.schema.field(i), pc.add(col, pa.scalar(by, col.type)))


@contextmanager
def atomic_dir(final: str | Path) -> Iterator[Path]:
    """Write a directory in a temporary sibling; replace ``final`` only on success.

    On any exception the temporary directory is removed and ``final`` is left
    absent (DVC removed the previous output before running the stage), so a
    failed stage never leaves half-written outputs. The temporary name carries the writer's
    process id; one whose process is gone (a killed run) is removed here.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    _sweep_orphans(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final) if final.is_dir() else final.unlink()
    os.replace(tmp, final)


def _sweep_orphans(final: Path) -> None:
    """Remove ``final``'s temporary siblings whose writing process no longer runs (SIGKILL, power loss)."""
    for tmp in final.parent.glob(f".{final.name}.tmp-*"):
        pid = tmp.name[len(f".{final.name}.tmp-"):].split("-", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``path`` through a temporary sibling: it is whole or absent, never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        # mkstemp creates 0600; give the file the mode any other new file gets (0666 less the umask).
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))
