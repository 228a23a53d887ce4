"""The layout: complete stage deps in dvc.yaml, no import circles, imports that flow one way.

A stage whose dvc.yaml deps miss a file it imports returns stale numbers when that file changes
(DVC says "nothing to reproduce"). These tests read every import in the code (inside functions
too) and fail when a stage script can reach a project file that is not under one of its deps.
"""

from __future__ import annotations

import ast
import copy
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = SRC / "wmeval"
#: One subpackage per stage; the rest of src/wmeval are shared layers (and the CLI apps on top).
STAGES = ("rollouts", "features", "statistics", "bootstrap", "human", "report")
SHARED = ("core", "tables", "metrics", "worlds", "models", "encoders", "estimators", "lineage", "rendering")
APPS = ("cli", "sweep", "stats")


def module_file(name: str) -> Path | None:
    """The file of module ``wmeval.x.y`` (``None`` for a module outside the package)."""
    if name != "wmeval" and not name.startswith("wmeval."):
        return None
    base = SRC / Path(*name.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def imported_files(path: Path, parents: bool = True) -> frozenset[Path]:
    """Project files that ``path`` imports anywhere (module level or inside a function); with
    ``parents``, the ``__init__.py`` of every package on the way too (Python runs them)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path) if path.is_relative_to(SRC) else ""
    is_pkg = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".") if is_pkg else here.split(".")[:-1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)   # `from pkg import module`
    out: set[Path] = set()
    for name in names:
        parts = name.split(".")
        for i in range(1 if parents else len(parts), len(parts) + 1):   # parents' __init__ run first
            f = module_file(".".join(parts[:i]))
            if f is not None:
                out.add(f)
    return frozenset(out)


def reachable(script: Path) -> set[Path]:
    """Every project file a stage script can import, transitively."""
    seen, todo = {script}, [script]
    while todo:
        for f in imported_files(todo.pop()):
            if f not in seen:
                seen.add(f)
                todo.append(f)
    return seen


def dep_paths(stage: dict) -> list[str]:
    return [d if isinstance(d, str) else next(iter(d)) for d in stage.get("deps", [])]


def out_paths(stage: dict) -> list[str]:
    return [o if isinstance(o, str) else next(iter(o)) for key in ("outs", "metrics", "plots")
            for o in stage.get(key, [])]


def under(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def missing_code_deps(dvc: dict) -> dict[str, list[str]]:
    """``{stage: [project files it can import that its deps do not cover]}``."""
    out = {}
    for name, stage in dvc["stages"].items():
        script = ROOT / "stages" / f"{name}.py"
        deps = dep_paths(stage)
        files = sorted(f.relative_to(ROOT).as_posix() for f in reachable(script))
        out[name] = [f for f in files if not under(f, deps)]
    return out


def data_literals(script: Path) -> set[str]:
    """String constants in a stage script that name a project data path (``data/``, ``benchmarks/``, ``reports/``)."""
    tree = ast.parse(script.read_text())
    return {n.value.rstrip("/") for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.startswith(("data/", "benchmarks/", "reports/"))}


def missing_data_deps(dvc: dict) -> dict[str, list[str]]:
    """``{stage: [paths its script names that are neither a dep nor an out]}``."""
    out = {}
    for name, stage in dvc["stages"].items():
        deps, outs = dep_paths(stage), out_paths(stage)
        out[name] = sorted(p for p in data_literals(ROOT / "stages" / f"{name}.py")
                           if not under(p, deps) and not under(p, outs) and not any(under(o, [p]) for o in outs))
    return out


@pytest.fixture(scope="module")
def dvc() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())


def test_every_stage_has_a_script_and_a_subpackage(dvc):
    assert tuple(dvc["stages"]) == STAGES
    for name in STAGES:
        assert (ROOT / "stages" / f"{name}.py").is_file()
        assert (PKG / name / "__init__.py").is_file()
        assert f"src/wmeval/{name}" in dep_paths(dvc["stages"][name])


def test_stage_deps_cover_every_imported_file(dvc):
    assert missing_code_deps(dvc) == {name: [] for name in STAGES}


def test_stage_deps_cover_every_data_path_the_script_names(dvc):
    assert missing_data_deps(dvc) == {name: [] for name in STAGES}


#: ``params.<section>`` or ``params.<section>.<key>`` in a stage's code (``params.yaml`` and dict methods aside).
PARAM_USE = re.compile(r"\bparams\.([a-z_]+)(?:\.([a-z_]+))?")
SECTIONS = {"worlds", "models", "protocol", "encoder", "bootstrap", "dynamics", "scoring", "human"}


def missing_params(dvc: dict) -> dict[str, list[str]]:
    """``{stage: [params it reads that its dvc.yaml params do not list]}``, read from the stage's own code."""
    out = {}
    for name, stage in dvc["stages"].items():
        declared = {p if isinstance(p, str) else next(iter(p)) for p in stage.get("params", [])}
        files = [ROOT / "stages" / f"{name}.py", *sorted((PKG / name).rglob("*.py"))]
        used = {m.group(1) + (f".{m.group(2)}" if m.group(2) else "")
                for f in files for m in PARAM_USE.finditer(f.read_text()) if m.group(1) in SECTIONS}
        out[name] = sorted(u for u in used
                           if u not in declared and u.split(".")[0] not in declared)
    return out


def test_stage_params_cover_every_section_the_stage_reads(dvc):
    assert missing_params(dvc) == {name: [] for name in STAGES}
    broken = copy.deepcopy(dvc)
    broken["stages"]["statistics"]["params"].remove("encoder.name")
    assert missing_params(broken)["statistics"] == ["encoder.name"]


@lru_cache(maxsize=None)
def coverage_code() -> frozenset[str]:
    """The code behind benchmarks/results/coverage.json's figures (benchmarks/coverage.py and the wmeval modules it
    imports, less its bookkeeping), which the report stage depends on without importing it: the scorecard checks the
    figures' recorded code against these files (report.scorecard.stale_figures)."""
    import importlib.util

    from wmeval.core.digest import import_closure

    spec = importlib.util.spec_from_file_location("bench_coverage_layout", ROOT / "benchmarks" / "coverage.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return frozenset(import_closure(ROOT / "benchmarks" / "coverage.py", ROOT, skip=script.BOOKKEEPING))


def _cited_only(name: str, dep: str) -> bool:
    """A report dep that only the coverage figures' code needs (nothing the report imports lies under it)."""
    files = {f.relative_to(ROOT).as_posix() for f in reachable(ROOT / "stages" / f"{name}.py")}
    return (name == "report" and not any(under(f, [dep]) for f in files)
            and any(under(f, [dep]) for f in coverage_code()))


def test_deleting_a_dep_line_is_caught(dvc):
    """The check is not vacuous: drop any one code dep of a stage and it reports the files that fell out (the
    report's deps for the coverage figures' code alone are checked by
    test_the_report_depends_on_the_code_behind_the_coverage_figures)."""
    for name, stage in dvc["stages"].items():
        code = [d for d in dep_paths(stage) if d.startswith(("src/", "stages/")) and not _cited_only(name, d)]
        assert code, name
        for dep in code:
            broken = copy.deepcopy(dvc)
            broken["stages"][name]["deps"] = [d for d in broken["stages"][name]["deps"] if d != dep]
            missing = missing_code_deps(broken)[name]
            assert missing and all(under(f, [dep]) for f in missing), (name, dep, missing)
    # and a data dep: bootstrap reads the rollouts for the distributional replicates
    broken = copy.deepcopy(dvc)
    broken["stages"]["bootstrap"]["deps"].remove("data/rollouts")
    assert missing_data_deps(broken)["bootstrap"] == ["data/rollouts"]


def test_no_dep_is_listed_that_the_stage_does_not_use(dvc):
    """A code dep nothing reaches only causes needless re-runs (and hides a wrong layout)."""
    for name, stage in dvc["stages"].items():
        files = {f.relative_to(ROOT).as_posix() for f in reachable(ROOT / "stages" / f"{name}.py")}
        for dep in dep_paths(stage):
            if dep.startswith(("src/", "stages/")):
                assert any(under(f, [dep]) for f in files) or _cited_only(name, dep), (name, dep)


def _package_graph() -> dict[str, set[str]]:
    """Top-level unit (``core``, ``rollouts``, ``cli``, ...) -> the units it imports."""
    graph: dict[str, set[str]] = {}
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG)
        unit = rel.parts[0].removesuffix(".py")
        if unit == "__init__":
            continue
        deps = set()
        for g in imported_files(f):
            r = g.relative_to(PKG)
            if r.parts[0] != "__init__.py":
                deps.add(r.parts[0].removesuffix(".py"))
        graph.setdefault(unit, set()).update(deps - {unit})
    return graph


def _module_graph() -> dict[str, set[str]]:
    out = {}
    for f in PKG.rglob("*.py"):
        out[module_name(f)] = {module_name(g) for g in imported_files(f, parents=False)} - {module_name(f)}
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_no_import_circles():
    """Between modules, and between the top-level units (a module never imports its own package's face)."""
    graph = _module_graph()
    assert graph["wmeval"] == set()        # the root holds the version only, so anything may import it
    for pkg in {m for m in graph if module_file(m).name == "__init__.py"} - {"wmeval"}:
        for mod in graph:
            if mod.startswith(pkg + ".") and pkg in graph[mod]:
                pytest.fail(f"{mod} imports its own package's face {pkg}: import the module itself")
    assert _cycle(graph) is None
    assert _cycle(_package_graph()) is None


def test_imports_flow_from_stages_to_shared_layers_only():
    graph = _package_graph()
    assert set(graph) == set(STAGES) | set(SHARED) | set(APPS)
    for unit, deps in graph.items():
        if unit in SHARED:
            assert not deps & (set(STAGES) | set(APPS)), f"shared layer {unit} imports {deps & set(STAGES)}"
        if unit in STAGES:
            assert not deps & (set(STAGES) | set(APPS)), f"stage {unit} imports {deps & set(STAGES)}"


def test_the_check_sees_a_circle_and_an_upward_import(tmp_path):
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    # imported_files reads imports inside functions too, with the packages' faces on the way (the probe lives
    # outside the checkout: tests in other xdist workers copy src/ while this one runs)
    probe = tmp_path / "_layout_probe_not_a_module.py"
    probe.write_text("def f():\n    from wmeval.report import scorecard\n")
    got = {g.relative_to(PKG).as_posix() for g in imported_files(probe)}
    assert {"__init__.py", "report/__init__.py", "report/scorecard.py"} <= got


def _dvc_status(project: Path) -> dict:
    import json
    import subprocess
    import sys

    dvc = Path(sys.executable).parent / "dvc"
    out = subprocess.run([str(dvc), "status", "--json"], cwd=project, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _changed_code_deps(status: dict) -> dict[str, set[str]]:
    """Per stage, the code deps ``dvc status`` reports as changed (the data are absent in a fresh copy)."""
    return {stage: {dep for entry in entries if isinstance(entry, dict)
                    for dep in (entry.get("changed deps") or {}) if dep.startswith(("src/", "stages/"))}
            for stage, entries in status.items()}


@pytest.mark.slow
def test_dvc_sees_an_edit_of_any_shared_layer_in_every_stage_that_imports_it(tmp_path):
    """End to end, with DVC itself: against the committed lock, editing a file of a shared layer
    marks exactly the stages whose code can reach it as changed (the stale-result defect)."""
    from conftest import make_project

    project = make_project(tmp_path / "p", [])
    (project / "dvc.lock").write_text((ROOT / "dvc.lock").read_text())
    stale = {stage: deps for stage, deps in _changed_code_deps(_dvc_status(project)).items() if deps}
    assert not stale, f"the committed dvc.lock is stale against the code (run `dvc repro` and commit): {stale}"
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    for layer, probe in (("worlds", "base.py"), ("core", "errors.py"), ("metrics", "registry.py")):
        target = project / "src/wmeval" / layer / probe
        original = target.read_text()
        target.write_text(original + "\n# edited\n")
        changed = {stage for stage, deps in _changed_code_deps(_dvc_status(project)).items()
                   if f"src/wmeval/{layer}" in deps}
        target.write_text(original)
        reaches = {name for name in STAGES
                   if any(f.is_relative_to(PKG / layer) for f in reachable(ROOT / "stages" / f"{name}.py"))}
        assert reaches and changed == reaches, (layer, changed, reaches)
        assert all(f"src/wmeval/{layer}" in dep_paths(dvc["stages"][s]) for s in reaches)


def test_every_declaration_is_known_to_its_reader(tmp_path):
    """Registry card fields and columns, and world attributes, are read by name: a typo must fail here,
    not in stage 3 or 5 after the earlier stages ran."""
    from wmeval.metrics import REGISTRY
    from wmeval.report.cards import AFTER_INTERVAL, CARD_FIELDS
    from wmeval.report.scorecard import SECTIONS as TABLES
    from wmeval.worlds import WORLD_KINDS, World

    for m in REGISTRY.values():
        assert set(m.card) <= set(CARD_FIELDS) | set(AFTER_INTERVAL), m.name
        for s in m.shown:
            assert s.section in TABLES, (m.name, s.section)
            assert set(re.findall(r"{(\w+)}", s.label + s.condition)) <= {"H", "Hd", "Hr", "cf", "pair", "task", "view", "opair"}
    from wmeval.worlds.dataset import write_dataset

    write_dataset(tmp_path / "d.parquet", [{"frames": np.zeros((3, 8, 8, 1), np.uint8), "actions": np.zeros((2, 1))}],
                  "a one-recording example")
    needs = {"dataset": {"path": str(tmp_path / "d.parquet")}}      # a world kind that reads a file
    for kind, cls in WORLD_KINDS.items():
        world = cls(**needs.get(kind, {}))
        assert isinstance(world, World), kind
        assert world.initial_states_text and world.nll_base_measure, kind


def test_the_report_depends_on_the_code_behind_the_coverage_figures(dvc):
    """The scorecard checks benchmarks/results/coverage.json's figures against the code their runs recorded
    (report.scorecard.stale_figures): the report stage must depend on every file of that code, or an edit to it
    would leave the committed scorecard calling stale figures current. Both what the script imports now and what
    the committed runs recorded."""
    import json

    deps = dep_paths(dvc["stages"]["report"])
    code = sorted(coverage_code())
    assert "benchmarks/coverage.py" in code and [f for f in code if not under(f, deps)] == []
    cov = json.loads((ROOT / "benchmarks" / "results" / "coverage.json").read_text())
    recorded = {rel for run in (cov.get("runs") or {}).values() for rel in run["code"]}
    assert sorted(f for f in recorded if not under(f, deps)) == []
    # The same for benchmarks/results/direction_oracle.json (report.scorecard.oracle_stale): its run's code.
    oracle = json.loads((ROOT / "benchmarks" / "results" / "direction_oracle.json").read_text())
    assert "benchmarks/direction_oracle.py" in oracle["run"]["code"]
    assert sorted(f for f in oracle["run"]["code"] if not under(f, deps)) == []
