"""Shared entry point for the stage scripts in ``stages/``."""

from __future__ import annotations

import errno
import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from wmeval.core.errors import WmevalError


def main(body: Callable[[], None]) -> None:
    """Run a stage body; a :class:`WmevalError` becomes a one-line message and exit 2."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        from wmeval.core.allocator import allocator_mode, prepare_memory
        from wmeval.core.kernels import kernels_mode
        from wmeval.core.parallel import usable_cores

        allocator_mode()               # a bad $WMEVAL_MALLOC stops the stage here
        kernels_mode()                 # ... and a bad $WMEVAL_KERNELS (the kernels are pinned by core/stage_process.py)
        prepare_memory()               # made on import by stages/*.py already (core/stage_process.py); idempotent
        usable_cores()                 # a bad $WMEVAL_JOBS stops the stage before any work, not at its first map
        warn_drift()
        body()
    except WmevalError as e:
        print(f"wmeval: error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        message = disk_error(e)
        if message is None:
            raise
        print(f"wmeval: error: {message}", file=sys.stderr)
        sys.exit(2)


def warn_drift() -> None:
    """Log, once per stage, each installed package whose release differs from ``constraints.txt``
    (:mod:`wmeval.core.pins`): this run's outputs may then differ in bytes from the committed ones."""
    from wmeval.core.pins import CONSTRAINTS, drift

    log = logging.getLogger("wmeval")
    try:
        differ = drift()
    except WmevalError as e:          # a constraints file of another form (options, hashes): say so, run on
        log.warning("cannot compare the installed packages with %s: %s", CONSTRAINTS, e)
        return
    if differ:
        shown = "; ".join(differ[:6]) + (f"; and {len(differ) - 6} more" if len(differ) > 6 else "")
        log.warning(
            "installed packages differ from %s (%s): this run's outputs may differ in bytes from the committed "
            "dvc.lock and reports/, which were made with the pinned releases (pip install -c %s -e \".[test]\")",
            CONSTRAINTS, shown, CONSTRAINTS)


def disk_error(e: OSError) -> str | None:
    """One line for a full, read-only or forbidden place to write (naming the path), else ``None``."""
    where = e.filename or "an output"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        place = Path(where).absolute().parent
        while not place.exists() and place != place.parent:  # a temporary folder is gone by now
            place = place.parent
        free = f"{shutil.disk_usage(place).free:,} bytes free on it"
        return (f"no space left on the device writing {where} ({free}); free some space and re-run. "
                "Outputs DVC removed before the stage ran come back with `dvc checkout`")
    if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"cannot access {where}: {e.strerror}; check its permissions (and that its disk is writable) and re-run"
    return None
