from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from wmeval.core.config import compose_text, validate_params

ROOT = Path(__file__).resolve().parents[1]

# Hermetic runs: the tests' embedding cache and weights live in a fresh temporary
# directory (subprocesses such as `dvc repro` inherit these), never in ~/.cache.
_TMP = Path(tempfile.mkdtemp(prefix="wmeval-tests-"))
os.environ["WMEVAL_CACHE_DIR"] = str(_TMP / "cache")
os.environ["WMEVAL_WEIGHTS_DIR"] = str(_TMP / "weights")
# Every process that loads this file (pytest-xdist's controller and each worker) removes its own at exit.
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)
# Under pytest-xdist (one worker per core) the workers already keep every core busy, so the stages they run fork
# no workers of their own (README, "Parallelism"): measured on the tiny pipeline, forked workers cost a fifth more
# CPU time for the same bits. test_pipeline.py's test_parallel_stages_give_the_serial_bytes runs them forked.
# Nor do their numerical libraries start a thread per core: two workers' OpenBLAS, OpenMP and torch pools on two
# cores are four spinning threads on two cores (measured: `-m "not slow"` 67 s with them, 54 s without). Set before
# numpy or torch is loaded here, so the workers and every process they start inherit it; a value the user set wins.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["WMEVAL_JOBS"] = "1"
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tiny_params():
    """The shipped config with the tiny protocol and dynamics budgets, validated."""
    raw = yaml.safe_load(compose_text(["protocol=tiny", "dynamics=tiny", "bootstrap.n_resamples=200"], ROOT))
    return validate_params(raw, "tiny")


PROJECT_FILES = ["conf", "stages", "src", "studies", "dvc.yaml", ".dvcignore", ".gitignore", "pyproject.toml", "README.md",
                 "benchmarks/results/coverage.json", "benchmarks/results/direction_oracle.json",
                 "benchmarks/coverage.py", "benchmarks/direction_oracle.py"]


def make_project(dest: Path, overrides: list[str]) -> Path:
    """A copy of the project in a fresh git repo (DVC needs git and a commit), params composed."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    (dest / ".dvc").mkdir()
    shutil.copy2(ROOT / ".dvc" / "config", dest / ".dvc" / "config")
    shutil.copy2(ROOT / ".dvc" / ".gitignore", dest / ".dvc" / ".gitignore")
    shutil.copytree(ROOT / ".dvc" / "plots", dest / ".dvc" / "plots")
    (dest / "params.yaml").write_text(compose_text(overrides, dest))
    git = ["git", "-c", "user.name=wmeval-test", "-c", "user.email=test@wmeval.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=dest, check=True)
    return dest


#: The report's run record: its time, git state and the dvc.lock it saw differ between runs of the same outputs by
#: design (the scorecard renders it as its last section).
RUN_RECORD = ("reports/provenance.json", "reports/scorecard.md", "reports/scorecard.html")


def output_digests(project: Path, dirs=("data", "reports")) -> dict:
    """sha256 of every output file under ``dirs`` of ``project`` (relative paths), the run record and dot files aside."""
    import hashlib

    out = {}
    for d in dirs:
        for p in sorted((project / d).rglob("*")):
            rel = p.relative_to(project).as_posix()
            if p.is_file() and rel not in RUN_RECORD and not p.name.startswith("."):
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_checked(cmd, cwd, env, check=True):
    """Run a command; with ``check``, fail with the tail of its output when it exits non-zero."""
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"{cmd} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def pytest_terminal_summary(terminalreporter):
    """The reliability matrix's case count and pass count (tests/test_reliability.py), stated in the README."""
    reports = [r for outcome in ("passed", "failed", "error") for r in terminalreporter.stats.get(outcome, [])
               if "test_reliability.py" in getattr(r, "nodeid", "") and getattr(r, "when", "call") == "call"]
    if reports:
        passed = sum(r.passed for r in reports)
        terminalreporter.write_line(f"reliability matrix: {passed} of {len(reports)} cases pass")


#: Test files in the order they start (longest first: pytest-xdist's --dist loadfile, with --no-loadscope-reorder,
#: hands the files out in collection order, each worker's next one when it has two or fewer tests left, so the long
#: end-to-end files must not come last, as they do alphabetically).
#: Measured: seconds per file in a full run on the 2-core development machine (junit times, session 5).
#: Files not listed follow in their usual order; a wrong estimate costs wall time, never a test.
LONGEST_FIRST = ("test_pipeline.py", "test_ray.py", "test_gymnasium.py", "test_sweep.py", "test_reliability.py",
                 "test_dataset.py", "test_stats.py", "test_encoders.py", "test_study.py", "test_pairwise.py",
                 "test_adapter.py", "test_intervals.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: a file's tests keep their order
