"""The pipeline benchmark's measuring pieces (benchmarks/pipeline.py; the full run is a benchmark, not a test)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_pipeline", ROOT / "benchmarks" / "pipeline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_stage_process_is_timed_and_its_own_peak_memory_read(bench, tmp_path):
    """Peak RSS is the stage process's own (os.wait4), so a process that holds 400 MB reads above that and a
    bare interpreter far below; a failing process stops the benchmark with its stderr."""
    env = dict(os.environ)
    big = bench.run_process([sys.executable, "-c", "import numpy as np; a = np.ones(50_000_000); a.sum()"],
                            tmp_path, env)
    small = bench.run_process([sys.executable, "-c", "pass"], tmp_path, env)
    assert big["peak_rss_mb"] > 380 > small["peak_rss_mb"] and big["wall_s"] > 0
    with pytest.raises(SystemExit, match="boom"):
        bench.run_process([sys.executable, "-c", "raise SystemExit('boom')"], tmp_path, env)


def test_start_up_floor_runs_exactly_the_stage_imports(bench):
    for stage in bench.STAGES:
        code = bench.stage_imports(stage)
        compile(code, stage, "exec")
        assert "wmeval" in code and "def " not in code and "run(" not in code
