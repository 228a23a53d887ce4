"""Blocks of a rollout or feature table: the rows of one (regime, plan), scattered into dense arrays.

A table holds many (regime, plan, condition) blocks; :func:`blocks` lists them, :func:`select`
filters one, and :func:`dense` scatters one column of it into ``(episode, sample, t, ...)``,
checking that every cell is present exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wmeval.core.errors import WmevalError
from wmeval.tables.io import tensor_numpy


def column_numpy(table: pa.Table, name: str) -> np.ndarray:
    """One column as numpy; dictionary-encoded columns (strings) are decoded first."""
    col = table.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.cast(pa.string())
    return col.to_numpy()


def dense(table: pa.Table, column: str, n_episodes: int, t_values: np.ndarray, where: str) -> np.ndarray:
    """Scatter one (regime, plan) block into ``(N, S, T, *shape)``; every cell exactly once.

    Raises:
        WmevalError: a missing or duplicated (episode, sample, t) row, naming ``where``.
    """
    if table.num_rows == 0:
        raise WmevalError(f"{where}: no rows for this block (a plan or regime the protocol expects is missing)")
    ep = column_numpy(table, "episode").astype(np.int64)
    sample = column_numpy(table, "sample").astype(np.int64)
    t = column_numpy(table, "t").astype(np.int64)
    n_s = int(sample.max()) + 1 if len(sample) else 0
    T = len(t_values)
    t_index = np.searchsorted(t_values, t)
    if (ep < 0).any() or (ep >= n_episodes).any() or (t_index >= T).any() or (t_values[np.minimum(t_index, T - 1)] != t).any():
        raise WmevalError(f"{where}: rows with episode or t outside the protocol")
    flat = (ep * n_s + sample) * T + t_index
    counts = np.bincount(flat, minlength=n_episodes * n_s * T)
    if (counts != 1).any():
        bad = int(np.argmax(counts != 1))
        e, rest = divmod(bad, n_s * T)
        s, ti = divmod(rest, T)
        raise WmevalError(f"{where}: (episode {e}, sample {s}, t {int(t_values[ti])}) appears "
                          f"{int(counts[bad])} times; expected exactly once")
    is_tensor = isinstance(table.column(column).type, pa.FixedShapeTensorType)
    values = tensor_numpy(table, column) if is_tensor else column_numpy(table, column)
    out = np.empty((n_episodes * n_s * T, *values.shape[1:]), dtype=values.dtype)
    out[flat] = values
    return out.reshape(n_episodes, n_s, T, *values.shape[1:])


@dataclass(frozen=True)
class Block:
    regime: str
    plan: str
    condition: str


def blocks(table: pa.Table) -> list[Block]:
    keys = pa.table({c: table.column(c).cast(pa.string()) for c in ("regime", "plan", "condition")})
    uniq = keys.group_by(["regime", "plan", "condition"]).aggregate([]).to_pylist()
    return [Block(**u) for u in sorted(uniq, key=lambda u: (u["regime"], u["plan"]))]


def select(table: pa.Table, regime: str, plan: str) -> pa.Table:
    mask = pc.and_(pc.equal(table.column("regime").cast(pa.string()), regime),
                   pc.equal(table.column("plan").cast(pa.string()), plan))
    return table.filter(mask)
