"""The stages' pinned numerical kernels (wmeval.core.kernels): OpenBLAS's Haswell kernels and numpy's AVX2 builds on
every x86-64 machine with AVX2, so that a fresh clone's `dvc repro` gives the same bytes on another CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from wmeval.core.kernels import NUMPY_ENV, OPENBLAS_ENV, pinnable

_SCRUBBED = {k: v for k, v in os.environ.items() if k not in (OPENBLAS_ENV, NUMPY_ENV, "WMEVAL_KERNELS")}

# What a stage process runs: its first import (stages/*.py), then numpy and scipy's BLAS; the kernels in effect as
# the run record lists them, and the variables as the process sees them.
_STAGE = """
import json, os
import wmeval.core.stage_process
import numpy, scipy.linalg
from wmeval.lineage.provenance import kernels_in_effect
print(json.dumps({**kernels_in_effect(), "env": [os.environ.get(v) for v in ("OPENBLAS_CORETYPE",
                                                                               "NPY_DISABLE_CPU_FEATURES")]}))
"""


def _stage(**env: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _STAGE], env={**_SCRUBBED, **env}, capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout)


needs_avx2 = pytest.mark.skipif(not pinnable(), reason="the pinned kernels are x86-64 AVX2 code (Linux)")


@needs_avx2
def test_a_stage_runs_openblas_haswell_kernels_and_numpy_avx2_builds_whatever_the_cpu():
    """On this machine OpenBLAS's own choice has been SkylakeX on one AMD EPYC and Haswell on another (the committed
    outputs changed), and numpy dispatches its AVX-512 builds where the CPU has them: pinned, neither depends on it."""
    out = _stage()
    assert out["env"][0] == "Haswell" and "X86_V4" in out["env"][1]
    assert out["blas"] == ["openblas Haswell"], out
    assert not {"X86_V4", "AVX512_ICL", "AVX512_SPR", "AVX512_SKX", "AVX512F"} & set(out["numpy_simd"]), out


@needs_avx2
def test_a_kernel_you_choose_is_left_to_its_library_and_native_pins_nothing():
    out = _stage(OPENBLAS_CORETYPE="Sandybridge")          # AVX code, runs on any AVX2 machine
    assert out["env"][0] == "Sandybridge" and out["blas"] == ["openblas Sandybridge"], out
    assert "X86_V4" in out["env"][1]                      # numpy's pin is made all the same
    out = _stage(WMEVAL_KERNELS="native")
    assert out["env"] == [None, None], out


def test_a_bad_kernels_setting_is_named_and_stops_a_stage_before_any_work(tmp_path):
    ran = tmp_path / "ran"
    script = ("import wmeval.core.stage_process\nfrom wmeval.core.runner import main\n"
              f"main(lambda: open({str(ran)!r}, 'w').close())")
    r = subprocess.run([sys.executable, "-c", script], env={**_SCRUBBED, "WMEVAL_KERNELS": "fast"},
                       capture_output=True, text=True)
    assert r.returncode == 2 and "WMEVAL_KERNELS = 'fast'" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not ran.exists()
    r = subprocess.run([sys.executable, "-c", script], env={**_SCRUBBED, "WMEVAL_KERNELS": " Native "},
                       capture_output=True, text=True)
    assert r.returncode == 0 and ran.exists(), r.stderr


def test_every_stage_script_pins_before_numpy_loads():
    """The pin is read when the libraries load: each script's first import is wmeval.core.stage_process, which
    makes it (and imports neither numpy nor scipy itself)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for script in sorted((root / "stages").glob("*.py")):
        first = next(line for line in script.read_text().splitlines() if line.startswith(("import ", "from ")))
        assert first.startswith("import wmeval.core.stage_process"), (script.name, first)
    code = "import sys, wmeval.core.stage_process; print(sorted({'numpy', 'scipy'} & set(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], env=_SCRUBBED, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout


@needs_avx2
def test_numpys_own_feature_switch_and_warnings_as_errors_keep_a_stage_loading():
    """numpy refuses to load with both NPY_ENABLE_CPU_FEATURES and NPY_DISABLE_CPU_FEATURES set: where you set the
    first, numpy is not pinned. Target names a numpy does not dispatch (the pre-2.4 names on numpy 2.4) make it warn
    (ImportWarning), which the pin filters: under -W error the import would fail."""
    out = _stage(NPY_ENABLE_CPU_FEATURES="X86_V3")
    assert out["env"][0] == "Haswell" and out["env"][1] is None, out
    code = ("import wmeval.core.kernels as k\n"
            "k.NUMPY_AVX512 = {(1, 22): 'AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR'}\n"
            "print(k.pin_kernels())\nimport numpy\nprint('loaded')")
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], env=_SCRUBBED, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.split("\n")[1] == "loaded", r.stderr
