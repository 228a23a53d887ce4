"""A content-addressed, crash-safe store of embeddings shared by every DVC workspace.

Layout: ``<root>/<encoder key>/<sha256 of the shard file>.parquet``. The encoder key
is the sha256 of everything that changes embeddings (encoder id, kind, weights
sha256, preprocessing, clip spec, precision, the embedding code's sha256 and the numpy/torch
releases: :meth:`wmeval.encoders.zoo.Encoder.cache_identity`); a row key is the BLAKE2b digest of the bytes of
the input (a frame or a clip) with its dtype and shape. Each shard holds
``key`` (binary) and ``embedding`` rows.

* The index of keys is read once per cache object (one per stage run and input
  signature); embeddings are read only from the shards that hold requested rows.
* Lookups embed only rows whose key is in no shard (a new model, a higher K, more
  episodes); a warm re-run embeds nothing.
* Shards are written to a temporary file, fsynced and renamed, in chunks, so an
  interrupted run keeps every finished chunk and concurrent writers (DVC queue
  workers, Ray nodes on a shared filesystem) never see a half-written file. No
  lock is taken (they are unreliable on network filesystems): a shard's name is
  its content's sha256, so two writers of the same rows write the same file.
* A shard is named by its own sha256: a truncated or corrupted file fails that
  check on read, is logged, moved to ``corrupt/`` and its rows are recomputed.
* Counters (rows looked up, hits, embedded rows, corrupt shards) are logged, written per
  file as one record ``<root>/<key>/counters.d/<unique>.json`` (with the workspace and DVC
  experiment name; also a line of ``<root>/stats.jsonl``) and summed per encoder key by
  :func:`read_counters`: exact under concurrent writers, without a lock, so that a sweep's
  sharing of the cache can be checked after the fact.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from wmeval.core.errors import WmevalError

log = logging.getLogger(__name__)


def cache_root(configured: str | None = None) -> Path:
    """The cache directory: the config value, ``$WMEVAL_CACHE_DIR``, or the user cache (absolute)."""
    if configured:
        return Path(configured).expanduser().resolve()
    env = os.environ.get("WMEVAL_CACHE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("wmeval")).resolve() / "features"


def encoder_key(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def row_keys(items: np.ndarray) -> list[bytes]:
    """One 16-byte digest per row of ``items`` ``(N, ...)`` over dtype, shape and bytes."""
    items = np.ascontiguousarray(items)
    head = f"{items.dtype.str}{items.shape[1:]}".encode()
    return [hashlib.blake2b(head + row.tobytes(), digest_size=16).digest() for row in items]


#: The most bytes of rows (as float32) handed to the encoder at once.
COMPUTE_BYTES = 2**27


@dataclass
class CacheStats:
    rows: int = 0
    hits: int = 0
    embedded: int = 0
    corrupt_shards: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(rows=self.rows, hits=self.hits, embedded=self.embedded, corrupt_shards=self.corrupt_shards)


class FeatureCache:
    """The shards of one encoder key."""

    def __init__(self, root: Path, key: str, identity: dict[str, Any] | None = None) -> None:
        self.root, self.key = Path(root), key
        self.dir = self.root / key
        self.stats = CacheStats()
        self._index: dict[bytes, tuple[int, int]] | None = None
        self._files: list[Path] = []
        self.writable = _open_folder(self.root, self.dir)
        if not self.writable:
            log.info("feature cache: %s is read-only; serving cached rows only", self.dir)
            return
        ident = self.dir / "encoder.json"
        if identity is not None and not ident.exists():
            self._atomic_write(ident, json.dumps(identity, indent=2, sort_keys=True).encode())
        self._sweep_temporaries()

    def _sweep_temporaries(self, older_than_s: float = 3600.0) -> None:
        """Remove temporary files a killed writer left behind (never a live writer's: they are recent)."""
        now = time.time()
        for f in [*self.dir.glob(".tmp-*"), *self.dir.glob(f"{RECORDS_DIR}/.tmp-*")]:
            try:
                if now - f.stat().st_mtime > older_than_s:
                    f.unlink()
            except OSError:
                pass

    def _atomic_write(self, path: Path, data: bytes, replace: bool = True) -> None:
        """Write ``path`` through a fsynced temporary file. ``replace=False``: link it into place, which fails
        (and is then a no-op) when another writer got there first, so an existing file is never swapped under
        a reader (on a network filesystem that gives the reader ESTALE)."""
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            if replace:
                os.replace(tmp, path)
            else:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    pass
                except OSError as e:
                    if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                        raise
                    os.replace(tmp, path)      # a filesystem without hard links: rename (still atomic)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                free = shutil.disk_usage(self.dir).free
                raise WmevalError(f"feature cache: no space left on the device of {self.dir} writing {path.name} "
                                  f"({len(data):,} bytes needed, {free:,} free); free some space or set cache_dir "
                                  "(or WMEVAL_CACHE_DIR) to a folder on another disk") from None
            raise
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)

    def _load_index(self) -> None:
        """Read every shard's keys once (verifying its sha256); embeddings are read on demand."""
        if self._index is not None:
            return
        self._index, self._files = {}, []
        for f in sorted(self.dir.glob("*.parquet")):
            data = f.read_bytes()
            if hashlib.sha256(data).hexdigest() != f.stem:
                self._quarantine(f, "its sha256 does not match its name (truncated or corrupted)")
                continue
            try:
                keys = pq.read_table(pa.BufferReader(data), columns=["key"]).column("key").to_pylist()
            except Exception as e:  # a file with a valid name but unreadable content
                self._quarantine(f, f"unreadable: {e}")
                continue
            s = len(self._files)
            self._files.append(f)
            for i, k in enumerate(keys):
                self._index[k] = (s, i)

    def _quarantine(self, f: Path, why: str) -> None:
        self.stats.corrupt_shards += 1
        if not self.writable:
            log.warning("feature cache: shard %s: %s; the cache is read-only, so it is skipped", f, why)
            return
        log.warning("feature cache: shard %s: %s; moving it to corrupt/ and recomputing its rows", f, why)
        (self.dir / "corrupt").mkdir(exist_ok=True)
        try:
            os.replace(f, self.dir / "corrupt" / f.name)
        except OSError:
            f.unlink(missing_ok=True)

    def _write_shard(self, keys: list[bytes], emb: np.ndarray) -> Path:
        table = pa.table({"key": pa.array(keys, pa.binary(16)),
                          "embedding": pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(emb, np.float32))})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        data = sink.getvalue().to_pybytes()
        path = self.dir / f"{hashlib.sha256(data).hexdigest()}.parquet"
        # No lock: the name is the content's sha256 and the rename is atomic, so two writers of the same rows
        # (two DVC workspaces, two Ray nodes on a shared filesystem) write the same bytes under the same name,
        # and a reader sees the whole file or none (locks are unreliable on network filesystems).
        if not path.exists():   # the same name is the same bytes: never replace a file a reader may hold open
            self._atomic_write(path, data, replace=False)
        return path

    def _read_rows(self, shard: int, rows: np.ndarray) -> np.ndarray:
        f = self._files[shard]
        data = f.read_bytes()
        if hashlib.sha256(data).hexdigest() != f.stem:  # changed since the index was read
            raise WmevalError(f"feature cache: shard {f} changed while in use; re-run the stage")
        emb = pq.read_table(pa.BufferReader(data), columns=["embedding"]).column("embedding")
        return emb.combine_chunks().to_numpy_ndarray()[rows]

    def embed(self, items: np.ndarray, compute: Callable[[np.ndarray], np.ndarray], chunk: int = 2048,
              progress: Callable[[int], None] | None = None,
              compute_many: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None) -> np.ndarray:
        """Embeddings of every row of ``items``, computing only the rows no shard has.

        Rows are computed (and written as one shard) ``chunk`` at a time, fewer for large rows: at most
        :data:`COMPUTE_BYTES` of them as float32, so that the encoder's input does not grow with the frame
        size (2048 rows of 64 x 64 x 3 frames; 332 of Pong's 210 x 160 x 3)."""
        chunk = max(1, min(chunk, COMPUTE_BYTES // max(1, 4 * int(np.prod(items.shape[1:])))))
        keys = row_keys(items)
        self._load_index()
        index = self._index
        self.stats.rows += len(keys)
        missing: dict[bytes, int] = {}
        for i, k in enumerate(keys):
            if k not in index and k not in missing:
                missing[k] = i
        # Served without computing: rows already cached and repeats of a row computed once here.
        self.stats.hits += len(keys) - len(missing)
        fresh: dict[bytes, np.ndarray] = {}
        todo = list(missing.items())
        if todo and not self.writable:
            raise WmevalError(f"feature cache: {self.dir} is read-only and {len(todo)} of {len(keys)} rows are not "
                              "in it; make it writable, or set cache_dir (or WMEVAL_CACHE_DIR) to a writable folder")
        starts = list(range(0, len(todo), chunk))
        # ``compute_many`` (the Ray encoder pool) embeds every chunk at once, each as ``compute`` would; the
        # shards are still written chunk by chunk, in order.
        many = None if compute_many is None or not todo else iter(compute_many(
            [items[np.array([i for _, i in todo[s:s + chunk]])] for s in starts]))
        for start in starts:
            part = todo[start:start + chunk]
            idx = np.array([i for _, i in part])
            emb = np.asarray(next(many) if many is not None else compute(items[idx]), dtype=np.float32)
            if emb.ndim != 2 or emb.shape[0] != len(part) or not np.all(np.isfinite(emb)):
                raise WmevalError(f"feature cache: the encoder returned {emb.shape} embeddings for {len(part)} "
                                  "inputs (wrong count or non-finite values)")
            path = self._write_shard([k for k, _ in part], emb)
            s = len(self._files)
            self._files.append(path)
            for j, (k, _) in enumerate(part):
                index[k] = (s, j)
                fresh[k] = emb[j]
            self.stats.embedded += len(part)
            if progress is not None:
                progress(len(part))
        if not keys:
            return np.empty((0, 0), np.float32)
        where = np.array([index[k] for k in keys])                     # (N, 2): shard, row
        out: np.ndarray | None = None
        for shard in np.unique(where[:, 0]):
            sel = np.flatnonzero(where[:, 0] == shard)
            rows = self._read_rows(int(shard), where[sel, 1])
            if out is None:
                out = np.empty((len(keys), rows.shape[1]), np.float32)
            if rows.shape[1] != out.shape[1]:
                raise WmevalError(f"feature cache: shard {self._files[shard]} holds {rows.shape[1]}-d embeddings, "
                                  f"others {out.shape[1]}-d: the cache key misses something that changes them")
            out[sel] = rows
        return out

    def record(self, **context: Any) -> None:
        """Record this cache object's counters: one file per record, ``<root>/<key>/counters.d/<unique>.json``
        (written to a temporary name and renamed: no lock, exact under any number of concurrent writers, on
        a network filesystem too), summed by :func:`read_counters`; and a line in ``<root>/stats.jsonl``, a
        log for people (one ``write`` on an append-mode file: whole lines on a local disk; on a network
        filesystem lines from concurrent writers may interleave, so the counts come from the records).

        Each record names the workspace (the stage's working directory) and the DVC experiment
        (``$DVC_EXP_NAME``, set by ``dvc exp run``; ``None`` for ``dvc repro``), so that the
        counters of a sweep can be told apart per experiment.

        Args:
            **context: JSON-able fields for the record; ``file_rows``, ``file_hits``, ``file_embedded``
                and ``file_corrupt_shards`` (one file's counts) are what :func:`read_counters` adds up.
        """
        if not self.writable:
            log.info("feature cache: %s is read-only; this run's counters are not recorded", self.dir)
            return
        entry = {"time": time.time(), "encoder_key": self.key, **self.stats.as_dict(),
                 "workspace": os.getcwd(), "experiment": os.environ.get("DVC_EXP_NAME"), **context}
        line = json.dumps(entry)
        records = self.dir / RECORDS_DIR
        records.mkdir(exist_ok=True)
        name = f"{time.time_ns()}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}.json"
        self._atomic_write(records / name, line.encode("utf-8"))
        fd = os.open(self.root / "stats.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, (line + "\n").encode("utf-8"))
        finally:
            os.close(fd)


def _open_folder(root: Path, folder: Path) -> bool:
    """Create ``folder`` if needed; whether files can be written in it (``False``: a read-only cache).

    Raises:
        WmevalError: ``root`` or ``folder`` is a file, or ``folder`` is missing and cannot be created.
    """
    for p in (root, folder):
        if p.exists() and not p.is_dir():
            raise WmevalError(f"feature cache: {p} is a file, not a folder; set cache_dir (or WMEVAL_CACHE_DIR) "
                              "to a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except NotADirectoryError:
        raise WmevalError(f"feature cache: a parent of {folder} is a file, not a folder; set cache_dir "
                          "(or WMEVAL_CACHE_DIR) to a folder") from None
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise WmevalError(f"feature cache: cannot create {folder} ({e.strerror}); set cache_dir "
                              "(or WMEVAL_CACHE_DIR) to a writable folder") from None
        raise
    try:
        fd, probe = tempfile.mkstemp(prefix=".tmp-probe-", dir=folder)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return False
        raise
    os.close(fd)
    os.unlink(probe)
    return True


#: Counters summed per encoder key over its records (``<root>/<key>/counters.d/*.json``, one per file
#: embedded by a stage run) and, for a cache made before records, its ``counters.json`` totals.
COUNTERS = ("rows", "hits", "embedded", "corrupt_shards")
COUNTERS_FILE = "counters.json"
RECORDS_DIR = "counters.d"


def read_counters(root: Path, key: str | None = None) -> dict[str, Any]:
    """The persistent counters of one encoder key, or of every key in the cache.

    Args:
        root: the cache root (:func:`cache_root`).
        key: an encoder key; ``None`` for all keys.

    Returns:
        With ``key``: ``{"rows", "hits", "embedded", "corrupt_shards", "records"}`` (zeros for a key
        never recorded). Without: ``{key: {..., "identity": encoder.json contents}}`` for every key
        with counters.

    Raises:
        WmevalError: a counters file is not valid JSON.
    """
    root = Path(root)

    def load(f: Path) -> dict:
        try:
            return json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise WmevalError(f"feature cache: {f} is not valid JSON ({e}); delete it to restart the counts") from None

    def one(k: str) -> dict[str, int]:
        f = root / k / COUNTERS_FILE
        totals = load(f) if f.is_file() else {**{c: 0 for c in COUNTERS}, "records": 0}
        totals = {c: int(totals.get(c, 0)) for c in (*COUNTERS, "records")}
        for r in sorted((root / k / RECORDS_DIR).glob("*.json")):
            rec = load(r)
            for c in COUNTERS:
                totals[c] += int(rec.get(f"file_{c}", 0))
            totals["records"] += 1
        return totals

    if key is not None:
        return one(key)
    out: dict[str, Any] = {}
    keys = {f.parent.name: f for f in root.glob(f"*/{COUNTERS_FILE}")}
    keys.update({f.parent.parent.name: f for f in root.glob(f"*/{RECORDS_DIR}/*.json")})
    for name in sorted(keys):
        f = root / name / COUNTERS_FILE
        ident = f.parent / "encoder.json"
        out[f.parent.name] = {**one(f.parent.name),
                              "identity": json.loads(ident.read_text(encoding="utf-8")) if ident.is_file() else None}
    return out


def _is_key(name: str) -> bool:
    return len(name) == 64 and all(ch in "0123456789abcdef" for ch in name)


def cache_entries(root: Path) -> list[dict[str, Any]]:
    """Every encoder key's folder under the cache ``root``, oldest write first: ``key``, ``identity``
    (``encoder.json``; ``None`` for a folder without one), ``shards``, ``bytes`` (all its files), ``last_write``
    (the newest file's mtime, seconds since the epoch) and ``current``: whether its identity names the embedding code
    and library releases of this installation (:func:`wmeval.encoders.zoo.embedding_code`), so that a run of this
    code can hit it. A key made by other code, or before the code was part of the key, can never be hit again."""
    from wmeval.encoders.zoo import embedding_code

    root, now = Path(root), embedding_code()
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and _is_key(p.name)) if root.is_dir() else []:
        files = [f for f in d.rglob("*") if f.is_file()]
        ident_file = d / "encoder.json"
        try:
            identity = json.loads(ident_file.read_text(encoding="utf-8")) if ident_file.is_file() else None
        except json.JSONDecodeError as e:
            raise WmevalError(f"feature cache: {ident_file} is not valid JSON ({e})") from None
        out.append({"key": d.name, "identity": identity, "shards": len(list(d.glob("*.parquet"))),
                    "bytes": sum(f.stat().st_size for f in files),
                    "last_write": max((f.stat().st_mtime for f in files), default=d.stat().st_mtime),
                    "current": isinstance(identity, dict) and identity.get("code") == now})
    return sorted(out, key=lambda e: e["last_write"])


def prune(root: Path, dry_run: bool = False) -> list[dict[str, Any]]:
    """Remove every key of :func:`cache_entries` that is not ``current`` (its embeddings were made by other
    encoder code or library releases than this installation's, so no run of it reads them); the entries removed
    (with ``dry_run``: that would be). Run it when no features stage is writing to the cache: a stage of another
    checkout, with other code, still writing to a key removed here fails."""
    gone = [e for e in cache_entries(root) if not e["current"]]
    if not dry_run:
        for e in gone:
            shutil.rmtree(Path(root) / e["key"])
    return gone
