"""The stage entry point's process set-up (wmeval.core.runner, wmeval.core.allocator)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# Allocate and free a 64 MiB array 20 times, then print the minor page faults that took: each fresh mapping is
# faulted in (and zeroed) again unless the freed block stays in the heap.
_FAULTS = """
import ctypes, os, resource, numpy as np
from wmeval.core.allocator import tune_allocator
tuned = tune_allocator()
# Whether this glibc takes the threshold at all (probed after tune_allocator, which sets it anyway when tuned; in a
# 'system' run the probe would change what is measured, so it is not made there).
accepts = ctypes.CDLL(None).mallopt(-3, 1 << 30) if os.environ["WMEVAL_MALLOC"] == "tuned" else -1
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    a = np.ones(8 << 20)
    del a
print(accepts != 0, tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, str, int]:
    r = subprocess.run([sys.executable, "-c", _FAULTS], env={**os.environ, "WMEVAL_MALLOC": mode},
                       capture_output=True, text=True, check=True)
    accepts, tuned, faults = r.stdout.split()
    return accepts, tuned, int(faults)


@pytest.mark.skipif(not GLIBC or os.environ.get("LD_PRELOAD"), reason="the thresholds are glibc's own allocator's")
def test_a_tuned_stage_reuses_freed_arrays_instead_of_faulting_them_in_again():
    """Arrays above 32 MiB (glibc's own adaptive threshold stops there) are mapped and faulted in afresh each time
    unless the thresholds are raised."""
    accepts, tuned, with_tuning = _faults("tuned")
    if accepts == "False":
        pytest.skip("this glibc refuses an mmap threshold of 1 GiB (older versions cap it at 32 MiB)")
    _, system, without = _faults("system")
    assert (tuned, system) == ("True", "False")
    assert with_tuning * 4 < without, (with_tuning, without)      # measured: 543 against 10,880


def test_a_bad_allocator_setting_is_named_and_stops_a_stage_before_any_work(tmp_path, monkeypatch):
    from wmeval.core.allocator import allocator_mode

    ran = tmp_path / "ran"
    script = f"from wmeval.core.runner import main\nmain(lambda: open({str(ran)!r}, 'w').close())"
    r = subprocess.run([sys.executable, "-c", script], env={**os.environ, "WMEVAL_MALLOC": "huge"},
                       capture_output=True, text=True)
    assert r.returncode == 2 and "WMEVAL_MALLOC = 'huge'" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not ran.exists()
    r = subprocess.run([sys.executable, "-c", script], env={**os.environ, "WMEVAL_MALLOC": " System "},
                       capture_output=True, text=True)
    assert r.returncode == 0 and ran.exists(), r.stderr
    monkeypatch.delenv("WMEVAL_MALLOC", raising=False)
    assert allocator_mode() == "tuned"
