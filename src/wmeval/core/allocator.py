"""The C allocator's thresholds for a stage process: keep freed memory for the next array instead of the kernel.

glibc's ``malloc`` maps every block above its mmap threshold afresh and unmaps it when it is freed (the threshold
adapts to the blocks freed, but never above 32 MiB), and trims free memory at the top of its heap back to the
kernel. A stage allocates and frees many arrays above 32 MiB (kernel blocks, windows of frames, per-episode
scores), and each time the kernel maps, faults in and zeroes their pages again: measured on the default config,
6.5-8.3 s of the statistics stage's 18-20 s wall time was system time. With both thresholds at 1 GiB a freed
block stays in the heap for the next one (2.1-3.1 s of system time): in alternated runs statistics 18.1-20.5 s
-> 15.7-19.0 s, rollouts 15.1-16.3 s -> 12.7-13.7 s, bootstrap 23.7-26.4 s -> 22.2-23.9 s. The cost is memory:
blocks of up to 1 GiB that were unmapped when freed stay in the process, where fragmentation can keep more than is
in use (the default config's peak RSS, one run per setting: 5-20% higher). Arrays above 1 GiB are still mapped
afresh. The outputs of the default config are byte-identical either way (observed, not guaranteed for every
config: heap blocks are aligned differently from fresh mappings).

The same setting stops numpy from asking the kernel for transparent huge pages for its arrays of 4 MiB and more
(``madvise(MADV_HUGEPAGE)``, numpy's default on Linux): freed blocks now stay in the heap and are advised again for
every array placed in them, and on this machine the stages' system time stayed high with the thresholds alone.
Measured on the default config's statistics stage, alternated, 2 runs each: thresholds and advice 17.2-17.8 s wall
(7.4-7.7 s system), thresholds without advice 14.3-15.4 s (1.8-1.9 s system), glibc's own thresholds 19.9-21.9 s
(13-15 s system); rollouts 14.7-15.1 s against 12.3-13.2 s. A ``NUMPY_MADVISE_HUGEPAGE`` you set is left to numpy.

And it gives pyarrow's buffers to the same allocator (pyarrow's default pool is its bundled mimalloc, which hands
freed memory back to the kernel): the features stage, which decodes every rollout table's frames, 5.3-7.1 s ->
4.1-4.5 s (system time 1.4-3.3 -> 0.7-0.8 s), statistics 16.1-16.3 -> 14.3-14.5 s, rollouts 13.6-14.4 -> 12.9-13.6 s
(alternated, 2 runs each); peak RSS 11-20% lower in rollouts and statistics, about the same in features. Arrow's
C++ default pool (the one Parquet's readers and writers use) is chosen once, when pyarrow is loaded, from
``ARROW_DEFAULT_MEMORY_POOL``: so :func:`prepare_memory` sets that variable, and every script in ``stages/`` calls it
through its first import (:mod:`wmeval.core.stage_process`), before anything loads numpy or pyarrow. Where
pyarrow is already loaded, only pyarrow's own default pool can still be switched. A ``NUMPY_MADVISE_HUGEPAGE`` or
``ARROW_DEFAULT_MEMORY_POOL`` you set is left to numpy and pyarrow.

``WMEVAL_MALLOC=system`` leaves all three as they are. Elsewhere than Linux with glibc, or with a glibc that refuses a
threshold that high (older versions cap it at 32 MiB, which would only stop glibc's own adaptation), nothing is
changed: the other two settings serve the raised thresholds.
"""

from __future__ import annotations

import os
import platform
import sys

#: Environment variable: ``tuned`` (the default when unset) or ``system`` (glibc's own thresholds).
ALLOCATOR_ENV = "WMEVAL_MALLOC"
#: numpy's own switch for its huge-page advice (read when numpy is loaded); set by you, it is left to numpy.
NUMPY_HUGEPAGE_ENV = "NUMPY_MADVISE_HUGEPAGE"
#: Arrow's choice of its default memory pool (read when pyarrow is loaded); set by you, it is left to pyarrow.
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
#: The variables this process set itself (a later call tells them from the user's).
_SET_HERE: set[str] = set()
#: ``mallopt`` parameters (glibc's ``malloc.h``) and the value both are set to.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
THRESHOLD_BYTES = 1 << 30


def env_choice(var: str, choices: dict[str, str]) -> str:
    """The value of ``$var``, one of ``choices`` (case and spaces ignored; unset or empty: the first); a
    :class:`~wmeval.core.errors.WmevalError` naming any other value and what each choice does (``choices``' values)."""
    raw = os.environ.get(var, "").strip()
    mode = raw.lower() or next(iter(choices))
    if mode not in choices:
        from wmeval.core.errors import WmevalError

        raise WmevalError(f"environment variable {var} = {raw!r}: expected "
                          + " or ".join(f"{k!r} ({what})" for k, what in choices.items()))
    return mode


def allocator_mode() -> str:
    """``tuned`` or ``system``, from ``$WMEVAL_MALLOC``; a :class:`~wmeval.core.errors.WmevalError` naming any other
    value."""
    return env_choice(ALLOCATOR_ENV, {"tuned": "keep freed memory for the next array; the default",
                                      "system": "the C allocator's own thresholds"})


def tune_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds to 1 GiB for this process (and the workers it forks later).

    Returns whether they were set: not with ``WMEVAL_MALLOC=system``, nor off Linux with glibc.
    """
    if allocator_mode() == "system" or not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    import logging

    # Both or neither: with only the mmap threshold raised the heap's top is still trimmed back to the kernel after
    # every large free, and setting either one stops glibc's own adaptation of the other. The mmap threshold first:
    # a glibc that refuses it (0) is left as it was.
    if not mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES):
        logging.getLogger(__name__).debug("glibc refuses an mmap threshold of %d bytes; the allocator is left as it is",
                                          THRESHOLD_BYTES)
        return False
    return bool(mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES))


def yours(var: str) -> bool:
    """Whether ``$var`` was set by the user (not by :func:`set_here` in this process)."""
    return var in os.environ and var not in _SET_HERE


def set_here(var: str, value: str) -> None:
    """Set ``$var`` for the libraries this process loads later and the processes it starts, as this process's own."""
    os.environ[var] = value
    _SET_HERE.add(var)


def stop_hugepage_advice() -> bool:
    """Stop numpy from advising the kernel to back its large arrays with transparent huge pages, in this process,
    the workers it forks and the processes it starts (module docstring: the cost measured).

    Returns whether it is stopped: not where you set ``$NUMPY_MADVISE_HUGEPAGE`` (numpy follows it), nor off Linux
    (numpy advises only there). Sets that variable for numpy to read when it is loaded, and switches a loaded numpy
    (the switch exists since numpy 1.20).
    """
    if yours(NUMPY_HUGEPAGE_ENV) or not sys.platform.startswith("linux"):
        return False
    set_here(NUMPY_HUGEPAGE_ENV, "0")
    if "numpy" in sys.modules:
        try:
            from numpy._core.multiarray import _set_madvise_hugepage              # numpy 2
        except ImportError:
            from numpy.core.multiarray import _set_madvise_hugepage               # numpy 1.x
        _set_madvise_hugepage(False)
    return True


def use_system_arrow_pool() -> bool:
    """Make the C allocator (glibc's ``malloc``, thresholds raised) Arrow's default memory pool in this process,
    the workers it forks and the processes it starts (module docstring: the cost measured).

    Returns whether it is set: not where you set ``$ARROW_DEFAULT_MEMORY_POOL`` (pyarrow follows it). Sets that
    variable for pyarrow to read when it is loaded; a pyarrow loaded before this keeps Arrow's C++ default (Parquet's
    readers and writers use it) and gets only its own default switched.
    """
    if yours(ARROW_POOL_ENV):
        return False
    set_here(ARROW_POOL_ENV, "system")
    if "pyarrow" in sys.modules:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())
    return True


def prepare_memory() -> dict[str, bool]:
    """This process's memory settings (module docstring), as early as it can be called: before numpy and pyarrow are
    loaded (``stages/*.py`` import :mod:`wmeval.core.stage_process` first). Idempotent; never raises: a bad
    ``$WMEVAL_MALLOC`` changes nothing here and stops the stage in :func:`wmeval.core.runner.main`.

    Returns which settings are in effect: ``thresholds``, ``hugepage_advice_off``, ``arrow_system_pool``.
    """
    from wmeval.core.errors import WmevalError

    try:
        thresholds = tune_allocator()
    except WmevalError:
        thresholds = False
    if not thresholds:
        return {"thresholds": False, "hugepage_advice_off": False, "arrow_system_pool": False}
    return {"thresholds": True, "hugepage_advice_off": stop_hugepage_advice(),
            "arrow_system_pool": use_system_arrow_pool()}
