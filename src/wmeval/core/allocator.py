"""The C allocator's thresholds for a stage process: keep freed memory for the next array instead of the kernel.

glibc's ``malloc`` serves a block above its mmap threshold (128 KiB at first, rising with use up to 32 MiB) with
a fresh ``mmap`` and hands it back with ``munmap`` when freed; it also gives the top of its heap back to the kernel
once more than its trim threshold (128 KiB) is free there. A stage allocates and frees arrays of a few to tens
of MiB thousands of times (frames, kernels, per-episode scores), and each time the kernel maps, faults in and
zeroes the pages again: measured on the default config, 7.5-8.3 s of the statistics stage's 18-20 s wall time was
system time. With both thresholds at 1 GiB a freed block stays in the heap for the next one (2.2-3.1 s of
system time): statistics 18-20 s -> 15-19 s, rollouts 15.1-16.3 s -> 12.7-13.7 s, bootstrap 23.7-26.4 s ->
22.2-23.9 s (alternated runs), for 5-20% more peak memory (the heap keeps up to 1 GiB it could have returned).
Arrays above 1 GiB are still mapped afresh. No number depends on it (README, "Where the time goes").

``WMEVAL_MALLOC=system`` leaves the allocator as it is. Elsewhere than Linux with glibc nothing is changed.
"""

from __future__ import annotations

import os
import platform
import sys

#: Environment variable: ``tuned`` (the default when unset) or ``system`` (glibc's own thresholds).
ALLOCATOR_ENV = "WMEVAL_MALLOC"
#: ``mallopt`` parameters (glibc's ``malloc.h``) and the value both are set to.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
THRESHOLD_BYTES = 1 << 30


def allocator_mode() -> str:
    """``tuned`` or ``system``, from ``$WMEVAL_MALLOC``; a :class:`~wmeval.core.errors.WmevalError` naming any other
    value."""
    raw = os.environ.get(ALLOCATOR_ENV, "").strip()
    mode = raw.lower() or "tuned"
    if mode not in ("tuned", "system"):
        from wmeval.core.errors import WmevalError

        raise WmevalError(f"environment variable {ALLOCATOR_ENV} = {raw!r}: expected 'tuned' (keep freed memory for "
                          "the next array; the default) or 'system' (the C allocator's own thresholds)")
    return mode


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
    # Both, or the heap's top is trimmed back to the kernel after every large free (setting either also stops
    # glibc's own adjustment of the mmap threshold).
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES))
