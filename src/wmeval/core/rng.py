"""Seeded random generators.

All randomness flows through :func:`make_rng`, which turns an integer seed and a
path of string keys (world, component, plan, ...) into an independent
``numpy.random.Generator``. The keys make streams independent of the order in which
components run, so adding a model or a plan never changes another one's draws.
"""

from __future__ import annotations

import zlib

import numpy as np


def _key_to_int(key: str | int) -> int:
    if isinstance(key, (int, np.integer)):
        return int(key)
    return zlib.crc32(str(key).encode("utf-8"))


def make_rng(seed: int, *keys: str | int) -> np.random.Generator:
    """Return an independent generator for ``seed`` and a stream path ``keys``.

    Args:
        seed: non-negative integer seed of the whole evaluation.
        *keys: names of the stream, e.g. ``("blobs", "future", "left", 0)``.

    Returns:
        A PCG64 generator; the same ``(seed, keys)`` always gives the same stream.

    >>> float(make_rng(0, "a").random()) == float(make_rng(0, "a").random())
    True
    """
    if int(seed) < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    ss = np.random.SeedSequence(int(seed), spawn_key=tuple(_key_to_int(k) for k in keys))
    return np.random.Generator(np.random.PCG64(ss))
