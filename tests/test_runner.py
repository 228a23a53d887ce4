"""The stage entry point's process set-up (wmeval.core.runner, wmeval.core.allocator)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# Allocate and free a 64 MiB array 20 times; after each free, how much of it the process still holds (its resident
# set above the start). A freed block that stays in the heap is reused by the next array; one given back to the
# kernel is mapped, faulted in and zeroed afresh. (The minor page faults this costs are printed too, not asserted:
# numpy asks for transparent huge pages for large arrays, and whether the kernel has them free changes the count,
# 10,880 or about 660 for the same run.)
_HELD = """
import ctypes, os, resource, numpy as np
from wmeval.core.allocator import tune_allocator
tuned = tune_allocator()
# Whether this glibc takes the threshold at all (probed after tune_allocator, which sets it anyway when tuned; in a
# 'system' run the probe would change what is measured, so it is not made there).
accepts = ctypes.CDLL(None).mallopt(-3, 1 << 30) if os.environ["WMEVAL_MALLOC"] == "tuned" else -1
page = os.sysconf("SC_PAGE_SIZE")
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
base, faults = resident(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
held = []
for _ in range(20):
    a = np.ones(8 << 20)
    del a
    held.append(resident() - base)
print(accepts != 0, tuned, min(held) >> 20, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
"""


def _held(mode: str) -> tuple[str, str, int, int]:
    r = subprocess.run([sys.executable, "-c", _HELD], env={**os.environ, "WMEVAL_MALLOC": mode},
                       capture_output=True, text=True, check=True)
    accepts, tuned, held_mib, faults = r.stdout.split()
    return accepts, tuned, int(held_mib), int(faults)


@pytest.mark.skipif(not GLIBC or os.environ.get("LD_PRELOAD") or not os.path.exists("/proc/self/statm"),
                    reason="the thresholds are glibc's own allocator's")
def test_a_tuned_stage_keeps_freed_arrays_for_the_next_one():
    """Arrays above 32 MiB (glibc's own adaptive threshold stops there) are given back to the kernel when freed, and
    mapped and faulted in afresh by the next one, unless both thresholds are raised. Measured: 63 MiB held after
    every free tuned, 0 with `system`, 506 against 10,880 page faults. Raising only the mmap threshold (the heap
    top is then trimmed) or only the trim threshold fails this."""
    accepts, tuned, held, faults = _held("tuned")
    if accepts == "False":
        pytest.skip("this glibc refuses an mmap threshold of 1 GiB (older versions cap it at 32 MiB)")
    _, system, held_system, faults_system = _held("system")
    assert (tuned, system) == ("True", "False")
    assert held >= 60 and held_system < 8, (held, held_system, faults, faults_system)


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


_ADVICE = """
import numpy as np
from wmeval.core.allocator import stop_hugepage_advice
stopped = stop_hugepage_advice()
from numpy._core.multiarray import _set_madvise_hugepage
print(stopped, _set_madvise_hugepage(True))     # returns the setting it replaces
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="numpy advises huge pages on Linux only")
@pytest.mark.parametrize(("env", "want"), [
    ({"WMEVAL_MALLOC": "tuned"}, "True False"),
    ({"WMEVAL_MALLOC": "system"}, "False True"),                                    # numpy's default left
    ({"WMEVAL_MALLOC": "tuned", "NUMPY_MADVISE_HUGEPAGE": "1"}, "False True"),      # the user's setting wins
    ({"WMEVAL_MALLOC": "tuned", "NUMPY_MADVISE_HUGEPAGE": "0"}, "False False"),
])
def test_a_tuned_stage_stops_numpys_huge_page_advice_unless_told_otherwise(env, want):
    base = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    r = subprocess.run([sys.executable, "-c", _ADVICE], env={**base, **env}, capture_output=True, text=True,
                       check=True)
    assert r.stdout.strip() == want, (env, r.stdout, r.stderr)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="numpy advises huge pages on Linux only")
def test_the_stage_runner_sets_the_advice_and_the_arrow_pool_before_the_body():
    script = ("from wmeval.core.runner import main\n"
              "def body():\n"
              "    import pyarrow as pa\n"
              "    from numpy._core.multiarray import _set_madvise_hugepage\n"
              "    print(_set_madvise_hugepage(True), pa.default_memory_pool().backend_name)\n"
              "main(body)")
    base = {k: v for k, v in os.environ.items()
            if k not in ("NUMPY_MADVISE_HUGEPAGE", "WMEVAL_MALLOC", "ARROW_DEFAULT_MEMORY_POOL")}
    r = subprocess.run([sys.executable, "-c", script], env=base, capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["False", "system"], r.stderr
    r = subprocess.run([sys.executable, "-c", script], env={**base, "WMEVAL_MALLOC": "system"}, capture_output=True,
                       text=True, check=True)
    assert r.stdout.split()[0] == "True" and r.stdout.split()[1] != "system", r.stdout


@pytest.mark.parametrize(("env", "want"), [
    ({"WMEVAL_MALLOC": "tuned"}, "True system"),
    ({"WMEVAL_MALLOC": "tuned", "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}, "False mimalloc"),  # the user's wins
])
def test_a_tuned_stage_gives_arrows_buffers_to_the_c_allocator_unless_told_otherwise(env, want):
    code = ("import pyarrow as pa\nfrom wmeval.core.allocator import use_system_arrow_pool\n"
            "print(use_system_arrow_pool(), pa.default_memory_pool().backend_name)")
    base = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    r = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == want, (env, r.stdout, r.stderr)
