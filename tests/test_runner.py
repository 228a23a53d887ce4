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
import resource, numpy as np
from wmeval.core.allocator import tune_allocator
tuned = tune_allocator()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    a = np.ones(8 << 20)
    del a
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    r = subprocess.run([sys.executable, "-c", _FAULTS], env={**os.environ, "WMEVAL_MALLOC": mode},
                       capture_output=True, text=True, check=True)
    tuned, faults = r.stdout.split()
    return tuned, int(faults)


@pytest.mark.skipif(not GLIBC, reason="the thresholds are glibc's")
def test_a_tuned_stage_reuses_freed_arrays_instead_of_faulting_them_in_again():
    tuned, with_tuning = _faults("tuned")
    system, without = _faults("system")
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
