"""Work spread over this machine's cores in forked worker processes, merged in item order.

Threads do not help work made of many small numpy or matplotlib calls: they spend their time waiting for the GIL
(measured on the bootstrap's FD replicates, about 54 CPU-seconds: 1.07x on 2 cores with threads, about 1.9x with
processes). Forked workers inherit the function and everything it reads (nothing is pickled but the items and the
results), and run it with single-threaded BLAS, as the threads did, so the results are the same bits as a serial
run with one BLAS thread.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from threadpoolctl import threadpool_limits

#: The function a forked worker calls (set before the fork, inherited), and the lock that keeps it one caller's.
_FN: Callable | None = None
_LOCK = threading.Lock()


def _die_with_parent(parent: int) -> None:
    """A worker's initializer: ask Linux to SIGKILL this worker when its parent dies (a stage killed mid-run
    left its workers behind, each blocked on a queue nobody writes to), and exit now if it already has."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)       # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _chunk(items: Sequence) -> list:
    with threadpool_limits(limits=1):
        return [_FN(x) for x in items]


def can_fork() -> bool:
    """Whether :func:`fork_map` forks here (Linux: ``fork`` is the safe, cheap start method there)."""
    return sys.platform.startswith("linux")


def fork_map(fn: Callable[[Any], Any], items: Sequence, n_jobs: int | None = None,
             progress: Callable[[int], Any] | None = None) -> list:
    """``[fn(x) for x in items]`` in ``n_jobs`` forked processes (all cores by default), each item's result
    depending on it alone, in item order; ``progress(k)`` after each finished chunk of ``k`` items. Serial here
    (one BLAS thread) with one job, one item, or where :func:`can_fork` is false."""
    global _FN
    n_jobs = n_jobs or usable_cores()
    if n_jobs < 2 or len(items) < 2 or not can_fork():
        out = []
        with threadpool_limits(limits=1):
            for x in items:
                out.append(fn(x))
                if progress is not None:
                    progress(1)
        return out
    size = max(1, -(-len(items) // (8 * n_jobs)))                  # 8 chunks a worker: even load, few messages
    chunks = [items[i:i + size] for i in range(0, len(items), size)]
    out: list = []
    with _LOCK:                       # the global is this call's until its workers are gone
        _FN = fn
        try:
            with ProcessPoolExecutor(max_workers=min(n_jobs, len(chunks)),
                                     mp_context=multiprocessing.get_context("fork"),
                                     initializer=_die_with_parent, initargs=(os.getpid(),)) as pool:
                for part in pool.map(_chunk, chunks):
                    out.extend(part)
                    if progress is not None:
                        progress(len(part))
        finally:
            _FN = None
    return out


#: The environment variable that caps the worker processes a stage forks (README, "Parallelism").
JOBS_ENV = "WMEVAL_JOBS"


def usable_cores() -> int:
    """The worker processes a stage's forked work uses: the cores this process may run on (its CPU affinity, else
    ``os.cpu_count()``), at most ``$WMEVAL_JOBS`` where that is set. The numbers do not depend on it: every
    parallel map here gives the serial run's bits.

    ``WMEVAL_JOBS=1`` where something else already keeps the cores busy: the test suite's two pytest-xdist workers
    on two cores, or one pipeline per core. Forked workers there only add their start-up and copy-on-write
    costs (measured on the tiny pipeline: 22.0 CPU-seconds forked on 2 cores against 18.1 serial, a fifth more for
    the same work; README, "Parallelism").
    """
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    raw = os.environ.get(JOBS_ENV, "").strip()
    if not raw:
        return cores
    try:
        jobs = int(raw)
    except ValueError:
        jobs = 0
    if jobs < 1:
        from wmeval.core.errors import WmevalError

        raise WmevalError(f"environment variable {JOBS_ENV} = {raw!r}: expected a whole number of worker processes "
                          f">= 1 (unset it to use every core this process may run on)")
    return min(jobs, cores)
