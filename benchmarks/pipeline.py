"""Where the pipeline's time and memory go: each stage's wall time and peak RSS on a config, beside its floors.

For a fresh copy of the project (a temporary git repository, params composed from ``conf/`` with the
given overrides), every stage runs in order as its own process (``python stages/<stage>.py``, what
``dvc repro`` runs), twice:

* **cold**: an empty feature cache, no outputs and no compiled bytecode in the copy, as a fresh clone's
  first ``dvc repro`` (the start-up floors run with compiled bytecode, so a cold stage's work includes
  compiling what it imports; a config that sets ``encoder.cache_dir`` overrides the empty cache);
* **warm**: the same stages again with the feature cache filled (the features stage then embeds
  nothing; every other stage does its full work again: DVC would skip them, this measures them).

Per stage: the median wall time over ``--repeats`` cold runs (each from scratch), the warm time, and the
peak RSS (``ru_maxrss`` of that stage's process, from ``os.wait4`` in a small launcher). Beside them, the
stage's **start-up floor**: a process that only imports what the stage imports (interpreter, numpy,
torch, ...) and does nothing; the gap between the two is the stage's own work. The machine's measured
float64 matmul rate is recorded too, so that a stage's arithmetic can be put against it. The bootstrap's
arithmetic floor is measured: its symmetric eigen-solves (what every FD replicate needs), counted and timed
in a serial run of the stage and spread over the cores (``bootstrap_eigen_solve_floor``).

``--scale`` also runs the stages at 1x, 2x (and ``--scale 4``: 4x) ``protocol.n_episodes`` and fits each
stage's time ~ n^b (least squares on logs): ``b`` near 1 is linear; above 1 a stage grows faster than
its work.

    python benchmarks/pipeline.py                      # default config, 1 cold + 1 warm run
    python benchmarks/pipeline.py --repeats 3 --scale 2 --out benchmarks/results/pipeline.json
    python benchmarks/pipeline.py --samples 1 16        # also at K = 1 and 16 samples per condition

Everything in one JSON (``--out``) comes from one run on one machine, with the stages side by side, so
ratios hold when absolute times drift. Times on a shared machine are noisy: compare medians and ratios.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from wmeval.core.parallel import usable_cores

ROOT = Path(__file__).resolve().parents[1]
#: The stages in dvc.yaml's order (what `dvc repro` runs), read from it so that a new stage is never left out.
STAGES = tuple(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"])


def _inputs(stages: dict | None = None) -> list[str]:
    """dvc.yaml's deps (``stages``: its stages, read by default) that no stage writes as an out, metrics or plots
    file (the project's inputs: code, studies, the benchmark results the report cites and the code behind them), so
    that a dep added there is never missing from the copy, and no output is copied in."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"] if stages is None else stages
    outs = [o if isinstance(o, str) else next(iter(o)) for st in stages.values()
            for key in ("outs", "metrics", "plots") for o in st.get(key, [])]
    deps = {d if isinstance(d, str) else next(iter(d)) for st in stages.values() for d in st.get("deps", [])}
    return sorted(d for d in deps if not any(d == o or d.startswith(o.rstrip("/") + "/") for o in outs))


_PATHS = {"conf", "stages", "src", "dvc.yaml", ".dvcignore", ".gitignore", "pyproject.toml", "README.md", *_inputs()}
#: What the copy holds: those paths, less the ones inside another (copied with it).
PROJECT = sorted(p for p in _PATHS if not any(p.startswith(q + "/") for q in _PATHS))


def make_project(dest: Path, overrides: list[str]) -> Path:
    """A copy of the project in a fresh git repository (the report records the commit), params composed."""
    from wmeval.core.config import compose_text

    dest.mkdir(parents=True)
    for name in PROJECT:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif src.exists():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    (dest / ".dvc").mkdir()
    for name in ("config", ".gitignore"):
        shutil.copy2(ROOT / ".dvc" / name, dest / ".dvc" / name)
    (dest / "params.yaml").write_text(compose_text(overrides, dest))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@wmeval.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "bench"], cwd=dest, check=True)
    return dest


#: Runs a command and writes its wall time and ``ru_maxrss`` (from ``os.wait4``) to a file. A forked child's
#: peak RSS starts from its parent's (Linux counts the pre-exec image), so the parent is this small
#: launcher, not the benchmark (or pytest) process.
LAUNCHER = ("import os, subprocess, sys, time\n"
            "t0 = time.perf_counter()\n"
            "p = subprocess.Popen(sys.argv[2:])\n"
            "_, status, usage = os.wait4(p.pid, 0)\n"
            "open(sys.argv[1], 'w').write(f'{time.perf_counter() - t0} {usage.ru_maxrss}')\n"
            "sys.exit(os.waitstatus_to_exitcode(status))\n")


def run_process(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """Wall time (s) and peak RSS (MB) of one process; a failure stops the benchmark with its stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "usage"
        r = subprocess.run([sys.executable, "-c", LAUNCHER, str(stats), *cmd], cwd=cwd, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}) in {cwd}:\n"
                             f"{r.stderr.decode(errors='replace')[-3000:]}")
        wall, maxrss = stats.read_text().split()
    return {"wall_s": float(wall), "peak_rss_mb": int(maxrss) / 1024}


def stage_imports(stage: str) -> str:
    """The stage script's import statements: a process running only these is the stage's start-up floor."""
    tree = ast.parse((ROOT / "stages" / f"{stage}.py").read_text())
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


def matmul_gflops(n: int = 1024, repeats: int = 5) -> float:
    """The machine's float64 matmul rate (GFLOP/s, median of ``repeats``)."""
    a = np.random.default_rng(0).random((n, n))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ a
        ts.append(time.perf_counter() - t0)
    return 2 * n**3 / float(np.median(ts)) / 1e9


#: Runs the bootstrap stage serially (one process, one BLAS thread) with numpy's symmetric eigen-solvers wrapped,
#: and prints their count per matrix size and the seconds spent inside them as JSON on its last line.
SOLVE_COUNTER = """
import json, os, runpy, sys, time
from collections import Counter
import numpy as np
import wmeval.core.parallel as par
par.usable_cores = lambda: 1          # every map in this process, serial
os.cpu_count = lambda: 1
calls, spent = Counter(), [0.0]
def counted(fn):
    def wrapper(a, *args, **kw):
        t0 = time.perf_counter()
        try:
            return fn(a, *args, **kw)
        finally:
            spent[0] += time.perf_counter() - t0
            calls[f"{fn.__name__} {np.shape(a)[-1]}"] += int(np.prod(np.shape(a)[:-2], dtype=np.int64))
    return wrapper
np.linalg.eigvalsh, np.linalg.eigh = counted(np.linalg.eigvalsh), counted(np.linalg.eigh)
sys.argv = ["stages/bootstrap.py"]
t0 = time.perf_counter()
try:
    runpy.run_path("stages/bootstrap.py", run_name="__main__")
except SystemExit as e:
    if e.code not in (0, None):
        raise
print(json.dumps({"solves": dict(calls), "solve_s": spent[0], "serial_wall_s": time.perf_counter() - t0}))
"""


def bootstrap_floor(proj: Path, env: dict[str, str], cores: int) -> dict:
    """The bootstrap stage's eigen-solve floor (a partial arithmetic floor: the Cholesky factors and matrix
    products around each solve are not in it): its symmetric eigen-solves (every FD needs the eigenvalues of a
    d x d product; a reference whose Cholesky fails, its square root by an eigendecomposition), counted and
    timed in a serial run of the stage, spread over ``cores``. Each call's own overhead counts as its time.
    Only a local run with ``bootstrap.n_jobs`` 0 or 1 is counted whole (forked workers or Ray tasks would keep
    their counts): anything else is refused."""
    params = yaml.safe_load((proj / "params.yaml").read_text())
    if params["bootstrap"].get("n_jobs", 0) not in (0, 1) or params.get("execution", {}).get("kind", "local") != "local":
        raise SystemExit("bootstrap_floor: needs execution=local and bootstrap.n_jobs 0 or 1 (the solves of forked "
                         "workers or Ray tasks would not be counted)")
    r = subprocess.run([sys.executable, "-c", SOLVE_COUNTER], cwd=proj, env={**env, "OMP_NUM_THREADS": "1",
                       "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"the counting bootstrap run failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return {**out, "cores": cores, "floor_s": out["solve_s"] / cores}


def run_stages(proj: Path, env: dict[str, str]) -> dict[str, dict]:
    return {s: run_process([sys.executable, f"stages/{s}.py"], proj, env) for s in STAGES}


def measure(overrides: list[str], repeats: int, work: Path, tag: str, warm: bool = True, floor: bool = False) -> dict:
    """Cold runs (each in a fresh copy with an empty cache), then (``warm``) one warm run in the last copy, and
    (``floor``) the bootstrap's eigen-solve floor there."""
    cold = []
    for r in range(repeats):
        proj = make_project(work / f"{tag}-{r}", overrides)
        env = {**os.environ, "WMEVAL_CACHE_DIR": str(work / f"{tag}-{r}-cache"), "PYTHONPATH": str(proj / "src")}
        cold.append(run_stages(proj, env))
    again = run_stages(proj, env) if warm else None
    out: dict = {"bootstrap_floor": bootstrap_floor(proj, env, usable_cores())} if floor else {}
    for s in STAGES:
        walls = [c[s]["wall_s"] for c in cold]
        out[s] = {"cold_wall_s": float(np.median(walls)), "cold_walls_s": walls,
                  "warm_wall_s": again[s]["wall_s"] if again else None,
                  "peak_rss_mb": max(c[s]["peak_rss_mb"] for c in cold)}
    return out


def fitted(runs: dict, sizes: list, floors: dict) -> dict:
    """Per stage: cold wall time and peak RSS at each size, and the exponent b of its own work (the start-up
    floor removed) ~ size^b, least squares on logs."""
    x = np.log(np.array(sizes, float))
    return {s: {"wall_s": [runs[n][s]["cold_wall_s"] for n in sizes],
                "peak_rss_mb": [runs[n][s]["peak_rss_mb"] for n in sizes],
                "exponent": float(np.polyfit(x, np.log([max(1e-3, runs[n][s]["cold_wall_s"] - floors[s]["wall_s"])
                                                        for n in sizes]), 1)[0])}
            for s in STAGES}


def git_state() -> dict:
    """The commit the measured code is at, and whether the checkout differs from it (the numbers' source)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain", "--", "src",
                                                                             "stages", "conf", "dvc.yaml"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of conf/ (default: the shipped config)")
    ap.add_argument("--repeats", type=int, default=1, help="cold runs per configuration (median reported)")
    ap.add_argument("--scale", type=int, default=0, choices=[0, 2, 4],
                    help="also run at 2x (and 4x) protocol.n_episodes and fit each stage's exponent")
    ap.add_argument("--samples", type=int, nargs="*", default=[],
                    help="also run at these protocol.num_samples (K; e.g. 1 16) and fit each stage's exponent in K")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    import yaml

    from wmeval.core.config import compose_text

    n_base = yaml.safe_load(compose_text(args.overrides, ROOT))["protocol"]["n_episodes"]
    with tempfile.TemporaryDirectory(prefix="wmeval-bench-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        floors = {}
        for s in STAGES:
            runs = [run_process([sys.executable, "-c", stage_imports(s)], ROOT, env) for _ in range(3)]
            floors[s] = {"wall_s": float(np.median([r["wall_s"] for r in runs])),
                         "peak_rss_mb": max(r["peak_rss_mb"] for r in runs)}
        base = measure(args.overrides, args.repeats, work, "base", floor=True)
        boot_floor = base.pop("bootstrap_floor")
        result = {
            "config": args.overrides or ["(shipped defaults)"], "n_episodes": n_base, "repeats": args.repeats,
            "code": git_state(),
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                        "matmul_gflops_fp64": matmul_gflops()},
            "stages": {s: {**base[s], "startup_floor_s": floors[s]["wall_s"],
                           "startup_floor_rss_mb": floors[s]["peak_rss_mb"],
                           "work_s": base[s]["cold_wall_s"] - floors[s]["wall_s"]} for s in STAGES},
            "total_cold_s": sum(base[s]["cold_wall_s"] for s in STAGES),
            "total_warm_s": sum(base[s]["warm_wall_s"] for s in STAGES),
            "total_startup_floor_s": sum(floors[s]["wall_s"] for s in STAGES),
            "bootstrap_eigen_solve_floor": {**boot_floor, "ratio": base["bootstrap"]["cold_wall_s"]
                                            / (boot_floor["floor_s"] + floors["bootstrap"]["wall_s"])},
        }
        if args.scale:
            factors = [1, 2] + ([4] if args.scale == 4 else [])
            runs = {1: base, **{f: measure([*args.overrides, f"protocol.n_episodes={n_base * f}"], 1, work, f"x{f}",
                                           warm=False) for f in factors[1:]}}
            result["scaling"] = {"factors": factors, "stages": fitted(runs, factors, floors)}
        if args.samples:
            k_base = yaml.safe_load(compose_text(args.overrides, ROOT))["protocol"]["num_samples"]
            ks = sorted({k_base, *args.samples})
            runs = {k: base if k == k_base else measure([*args.overrides, f"protocol.num_samples={k}"], 1, work,
                                                        f"k{k}", warm=False) for k in ks}
            result["scaling_k"] = {"num_samples": ks, "stages": fitted(runs, ks, floors)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
