"""Recorded episodes as a ground-truth world: the ``dataset`` world kind.

**The on-disk format** (``wmeval-dataset/1``): one Parquet file, one row per recorded
observation, in the same conventions as wmeval's rollout tables:

========== ===================================================================
column     meaning
========== ===================================================================
episode    int64, the recording id (each is an independent unit)
t          int64, 0..T within the recording, consecutive
frame      fixed-shape tensor ``(H_img, W, C)`` uint8 (x / 255 in [0, 1])
action     fixed-shape tensor ``(A,)`` float64: the action that led to ``frame``
           (row ``t = 0``: zeros)
state      optional, fixed-shape tensor ``(D,)`` float64
reward     optional, float64: the reward of the step into ``t`` (0 at ``t = 0``)
========== ===================================================================

The schema metadata key ``wmeval`` holds ``{"format": "wmeval-dataset/1", "source": ...}``.
Write one with :func:`write_dataset`, or convert a Minari dataset or a folder of videos with
:mod:`wmeval.worlds.convert` (``wmeval dataset ...``).

**As a world.** Evaluation episode ``i`` is a window of ``H + 1`` recorded frames from its own
recording (recordings drawn without replacement, so episodes stay independent), starting at
``start_step``. A recording cannot be restored and rolled under another plan, so the world
has one plan, ``recorded`` (the recorded actions), one realized future (the recorded one), no
random plans, and no ``branch`` capability: it gets the observation layers. Its ``state``
capability is there when the file has a ``state`` column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from wmeval.core.errors import WmevalError

from .base import ExternalWorld, Plan

FORMAT = "wmeval-dataset/1"
PLAN = "recorded"


def write_dataset(path: str | Path, episodes: list[dict[str, np.ndarray]], source: str) -> None:
    """Write recorded episodes in the ``wmeval-dataset/1`` format.

    Args:
        path: the Parquet file to write (atomically).
        episodes: one dict per recording: ``frames`` ``(T + 1, H, W, C)`` uint8, ``actions``
            ``(T, A)`` (the action taken after each frame but the last), optional ``states``
            ``(T + 1, D)`` and ``rewards`` ``(T,)``.
        source: where the recordings come from, in words (stored in the metadata).
    """
    from wmeval.tables import atomic_write_bytes, tensor_array

    parts = []
    for i, ep in enumerate(episodes):
        frames = np.asarray(ep["frames"])
        if frames.dtype != np.uint8 or frames.ndim != 4:
            raise WmevalError(f"episode {i}: frames must be (T + 1, H, W, C) uint8, got {frames.dtype} {frames.shape}")
        n = len(frames)
        acts = np.asarray(ep["actions"], dtype=np.float64).reshape(n - 1, -1)
        cols = {"episode": np.full(n, i, np.int64), "t": np.arange(n, dtype=np.int64),
                "frame": tensor_array(frames),
                "action": tensor_array(np.concatenate([np.zeros((1, acts.shape[1])), acts]))}
        if ep.get("states") is not None:
            cols["state"] = tensor_array(np.asarray(ep["states"], dtype=np.float64).reshape(n, -1))
        if ep.get("rewards") is not None:
            cols["reward"] = np.concatenate([[0.0], np.asarray(ep["rewards"], dtype=np.float64).reshape(n - 1)])
        parts.append(pa.table(cols))
    table = pa.concat_tables(parts)
    table = table.replace_schema_metadata({b"wmeval": json.dumps({"format": FORMAT, "source": source}).encode()})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


@dataclass
class DatasetWorld(ExternalWorld):
    """Recorded episodes (``wmeval-dataset/1``) as a :class:`~wmeval.worlds.base.World`.

    Args:
        path: the dataset file (relative paths resolve against the working directory).
        start_step: the recorded step each evaluation window starts at (its context frame).
    """

    name: str = "dataset"
    path: str = ""
    start_step: int = 0

    stochastic = False
    teacher_forced_plan = PLAN

    def __post_init__(self) -> None:
        if isinstance(self.start_step, bool) or not isinstance(self.start_step, int) or self.start_step < 0:
            raise ValueError(f"start_step must be an integer >= 0, got {self.start_step!r}")
        f = Path(self.path)
        if not f.is_file():
            raise ValueError(f"path = {self.path!r}: no such dataset file (write one with `wmeval dataset`)")
        try:
            table = pq.read_table(f)
        except Exception as e:
            raise ValueError(f"{f}: cannot be read as Parquet: {e}") from None
        meta = json.loads((table.schema.metadata or {}).get(b"wmeval", b"{}"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{f}: format = {meta.get('format')!r}, expected {FORMAT!r} (write it with "
                             "`wmeval dataset`)")
        for col in ("episode", "t", "frame", "action"):
            if col not in table.column_names:
                raise ValueError(f"{f}: column {col!r} is missing (columns: {table.column_names})")
        from wmeval.tables import tensor_numpy

        self._source = meta.get("source")
        self._episode = table.column("episode").to_numpy()
        t = table.column("t").to_numpy()
        order = np.lexsort((t, self._episode))
        if (order != np.arange(len(order))).any():
            raise ValueError(f"{f}: rows must be sorted by episode, then t")
        self._frames = tensor_numpy(table, "frame")
        if self._frames.dtype != np.uint8:
            raise ValueError(f"{f}: column 'frame' must hold uint8, got {self._frames.dtype}")
        self._actions = tensor_numpy(table, "action").astype(np.float64)
        self._states = tensor_numpy(table, "state").astype(np.float64) if "state" in table.column_names else None
        self._rewards = table.column("reward").to_numpy().astype(np.float64) if "reward" in table.column_names \
            else None
        self._recordings = np.unique(self._episode)
        self._first = np.searchsorted(self._episode, self._recordings)
        self._length = np.diff(np.append(self._first, len(self._episode)))
        for r, first, n in zip(self._recordings, self._first, self._length):
            if not np.array_equal(t[first:first + n], np.arange(n)):
                raise ValueError(f"{f}: episode {r}: column 't' must run 0, 1, ..., {n - 1}")
        self.state_dim = 0 if self._states is None else int(self._states.shape[1])
        self.action_dim = int(self._actions.shape[1])
        self._starts: np.ndarray | None = None

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset({"episodes", *(("state",) if self._states is not None else ())})

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        return tuple(int(x) for x in self._frames.shape[1:])

    @property
    def action_bins(self) -> list[float]:
        a = self._actions[np.concatenate([[False], self._episode[1:] == self._episode[:-1]]), 0]  # t >= 1 rows
        lo, hi = float(a.min()), float(a.max())
        values = np.unique(a)
        if np.allclose(values, np.round(values)) and len(values) <= 32 and hi - lo < 64:
            return [v - 0.5 for v in np.arange(round(lo), round(hi) + 2)]
        return np.linspace(lo, hi if hi > lo else lo + 1.0, 4).tolist()

    def initial_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Row handles of ``n`` window starts, one recording each (drawn without replacement)."""
        if n > len(self._recordings):
            raise WmevalError(f"{self.path}: protocol.n_episodes = {n}, but the dataset holds "
                              f"{len(self._recordings)} recordings (one evaluation episode per recording)")
        pick = np.sort(rng.choice(len(self._recordings), size=n, replace=False))
        self._starts = self._first[pick] + self.start_step
        self._ends = self._first[pick] + self._length[pick]
        self._picked = self._recordings[pick]
        return self._starts[:, None].astype(np.float64)

    def n_plans(self, n_random: int) -> int:
        return 1

    def plans(self, n: int, horizon: int, n_random: int, rng: np.random.Generator) -> list[Plan]:
        """One plan, ``recorded``: each window's recorded actions (random plans cannot be acted out)."""
        if self._starts is None or len(self._starts) != n:
            raise WmevalError(f"world {self.name!r}: plans() needs the {n} windows of initial_states() first")
        short = self._starts + horizon >= self._ends
        if short.any():
            r = int(self._picked[np.flatnonzero(short)[0]])
            raise WmevalError(f"{self.path}: episode {r} is too short for start_step {self.start_step} and "
                              f"protocol.horizon {horizon} (needs {self.start_step + horizon + 1} frames)")
        idx = self._starts[:, None] + np.arange(1, horizon + 1)
        return [Plan(PLAN, PLAN, self._actions[idx])]

    def step(self, states: np.ndarray, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = np.asarray(states)[..., 0].astype(np.int64) + 1
        if not np.allclose(self._actions[rows], actions):
            raise WmevalError(f"world {self.name!r} ({self.path}) cannot branch: only the recorded actions can be "
                              "rolled out")
        return rows[:, None].astype(np.float64)

    def render(self, states: np.ndarray) -> np.ndarray:
        rows = np.asarray(states)[..., 0].astype(np.int64)
        return self._frames[rows].astype(np.float32) / 255.0

    def observe(self, states: np.ndarray) -> np.ndarray | None:
        if self._states is None:
            return None
        return self._states[np.asarray(states)[..., 0].astype(np.int64)]

    def true_reward(self, states: np.ndarray) -> np.ndarray | None:
        if self._rewards is None:
            return None
        return self._rewards[np.asarray(states)[..., 0].astype(np.int64)]

    def sample_actions(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        raise WmevalError(f"world {self.name!r}: recorded data has no action space to draw from")

    def counterfactual_pairs(self) -> list[tuple[str, str]]:
        return []

    @property
    def initial_states_text(self) -> str:
        return (f"windows of {self.path} ({len(self._recordings)} recordings; {self._source}), one recording per "
                f"episode drawn without replacement, starting at recorded step {self.start_step}")

    def describe(self) -> dict:
        import hashlib

        if getattr(self, "_sha256", None) is None:
            self._sha256 = hashlib.sha256(Path(self.path).read_bytes()).hexdigest()
        return {"kind": "dataset", "name": self.name, "path": self.path, "start_step": self.start_step,
                "sha256": self._sha256, "source": self._source,
                "recordings": int(len(self._recordings)), "frame_shape": list(self.frame_shape),
                "capabilities": sorted(self.capabilities), "stochastic": False, "plans": [PLAN],
                "reward": "the recorded reward (ground truth only)" if self._rewards is not None else None,
                "event": None}
