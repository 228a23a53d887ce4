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


_SCRUBBED = {k: v for k, v in os.environ.items()
             if k not in ("NUMPY_MADVISE_HUGEPAGE", "WMEVAL_MALLOC", "ARROW_DEFAULT_MEMORY_POOL")}

#: numpy's current huge-page advice (numpy 2, else 1.x).
_NUMPY_ADVICE = """
try:
    from numpy._core.multiarray import _get_madvise_hugepage
except ImportError:
    from numpy.core.multiarray import _get_madvise_hugepage
"""

_ADVICE = """
import numpy as np
from wmeval.core.allocator import stop_hugepage_advice
stopped = stop_hugepage_advice()
""" + _NUMPY_ADVICE + """
print(stopped, _get_madvise_hugepage())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="numpy advises huge pages on Linux only")
@pytest.mark.parametrize(("env", "want"), [
    ({}, "True False"),
    ({"NUMPY_MADVISE_HUGEPAGE": "1"}, "False True"),      # the user's setting wins
    ({"NUMPY_MADVISE_HUGEPAGE": "0"}, "False False"),
])
def test_numpys_huge_page_advice_is_stopped_in_a_loaded_numpy_unless_the_user_set_it(env, want):
    r = subprocess.run([sys.executable, "-c", _ADVICE], env={**_SCRUBBED, **env}, capture_output=True, text=True,
                       check=True)
    assert r.stdout.strip() == want, (env, r.stdout, r.stderr)


#: Loads a stage script as a module (its imports run, its body does not), then reads the settings in effect after
#: a Parquet round trip: numpy's advice, pyarrow's default pool, and what mimalloc's pool ever held.
_STAGE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("stage_under_test", sys.argv[1])
spec.loader.exec_module(importlib.util.module_from_spec(spec))
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
""" + _NUMPY_ADVICE + """
# A file, as the stages read and write (pyarrow 26 can abort at exit after a threaded read of a Python file object)
pq.write_table(pa.table({"x": np.arange(1 << 20, dtype=np.float64)}), sys.argv[2], compression="zstd")
pq.read_table(sys.argv[2])
try:
    mimalloc = pa.mimalloc_memory_pool().max_memory()
except (NotImplementedError, AttributeError):
    mimalloc = 0
print(_get_madvise_hugepage(), pa.default_memory_pool().backend_name, mimalloc)
"""


@pytest.mark.skipif(not GLIBC or os.environ.get("LD_PRELOAD"), reason="the settings serve glibc's raised thresholds")
@pytest.mark.parametrize("stage", ["rollouts", "features", "statistics", "bootstrap", "human", "report"])
def test_every_stage_script_makes_its_memory_settings_before_numpy_and_pyarrow_load(root, stage, tmp_path):
    """Arrow's C++ default pool, which Parquet's readers and writers use, is chosen when pyarrow is loaded: a stage
    script that imported pyarrow before its settings would decode its tables through mimalloc again."""
    args = [sys.executable, "-c", _STAGE, str(root / "stages" / f"{stage}.py"), str(tmp_path / "t.parquet")]
    r = subprocess.run(args, env=_SCRUBBED, capture_output=True, text=True, check=True, cwd=root)
    assert r.stdout.split() == ["False", "system", "0"], r.stdout + r.stderr[-2000:]
    r = subprocess.run(args, env={**_SCRUBBED, "WMEVAL_MALLOC": "system"}, capture_output=True, text=True, check=True,
                       cwd=root)
    fresh = subprocess.run([sys.executable, "-c", "import pyarrow as pa; print(pa.default_memory_pool().backend_name)"],
                           env=_SCRUBBED, capture_output=True, text=True, check=True).stdout.strip()
    assert r.stdout.split()[:2] == ["True", fresh], r.stdout       # WMEVAL_MALLOC=system: numpy's and Arrow's own


@pytest.mark.skipif(not GLIBC or os.environ.get("LD_PRELOAD"), reason="the settings serve glibc's raised thresholds")
def test_the_stage_runner_makes_them_too_and_a_bad_setting_changes_nothing_before_it_stops():
    script = ("from wmeval.core.runner import main\n"
              "def body():\n"
              "    import pyarrow as pa\n"
              + "".join("    " + line + "\n" for line in _NUMPY_ADVICE.strip().splitlines()) +
              "    print(_get_madvise_hugepage(), pa.default_memory_pool().backend_name)\n"
              "main(body)")
    r = subprocess.run([sys.executable, "-c", script], env=_SCRUBBED, capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["False", "system"], r.stderr
    code = ("import os\nfrom wmeval.core.allocator import prepare_memory\n"
            "print(prepare_memory(), os.environ.get('NUMPY_MADVISE_HUGEPAGE'), os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))")
    none = "{'thresholds': False, 'hugepage_advice_off': False, 'arrow_system_pool': False} None None"
    for bad in ("system", "huge"):
        r = subprocess.run([sys.executable, "-c", code], env={**_SCRUBBED, "WMEVAL_MALLOC": bad}, capture_output=True,
                           text=True, check=True)
        assert r.stdout.strip() == none, (bad, r.stdout, r.stderr)
    r = subprocess.run([sys.executable, "-c", code], env={**_SCRUBBED, "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"},
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == ("{'thresholds': True, 'hugepage_advice_off': True, 'arrow_system_pool': False} "
                                "0 mimalloc"), r.stdout                        # the user's pool is left to pyarrow
