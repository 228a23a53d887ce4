"""Each stage's code digest covers exactly its dvc.yaml code deps: it moves when they do, and only then."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wmeval.core.digest import code_version, file_digest, md5_file, stage_code_deps
from wmeval.core.errors import WmevalError


def _project(root: Path) -> Path:
    (root / "stages").mkdir(parents=True)
    (root / "stages/a.py").write_text("print('a')\n")
    (root / "src/pkg/one").mkdir(parents=True)
    (root / "src/pkg/two").mkdir(parents=True)
    (root / "src/pkg/one/m.py").write_text("X = 1\n")
    (root / "src/pkg/two/n.py").write_text("Y = 2\n")
    dvc = {"stages": {"a": {"cmd": "python stages/a.py",
                            "deps": ["stages/a.py", "src/pkg/one", "data/in"], "outs": ["data/out"]},
                      "b": {"cmd": "python stages/b.py", "deps": ["src/pkg/two"]}}}
    (root / "dvc.yaml").write_text(yaml.safe_dump(dvc))
    return root


def _digest(root: Path, stage: str = "a") -> str:
    return code_version(stage, root)["source_sha256"]


def test_code_deps_are_the_dvc_yaml_code_entries(tmp_path):
    root = _project(tmp_path)
    assert stage_code_deps("a", root) == ["stages/a.py", "src/pkg/one"]
    rec = code_version("a", root)
    assert rec["stage"] == "a" and rec["deps"] == "src/pkg/one,stages/a.py"   # sorted, as DVC ignores the order


def test_digest_moves_with_its_deps_and_only_with_them(tmp_path):
    root = _project(tmp_path)
    before = _digest(root)
    (root / "src/pkg/two/n.py").write_text("Y = 3\n")           # another stage's code
    (root / "src/pkg/one/__pycache__").mkdir()
    (root / "src/pkg/one/__pycache__/m.cpython-311.pyc").write_bytes(b"\0junk")   # .dvcignore'd
    assert _digest(root) == before
    (root / "src/pkg/one/m.py").write_text("X = 2\n")           # its own code
    changed = _digest(root)
    assert changed != before
    (root / "src/pkg/one/new.py").write_text("")                 # a new file in a dep folder
    assert _digest(root) != changed
    (root / "src/pkg/one/new.py").unlink()
    assert _digest(root) == changed
    (root / "stages/a.py").write_text("print('A')\n")           # the stage script
    assert _digest(root) != changed


def test_a_renamed_file_changes_the_digest(tmp_path):
    root = _project(tmp_path)
    before = _digest(root)
    (root / "src/pkg/one/m.py").rename(root / "src/pkg/one/k.py")
    assert _digest(root) != before


def test_missing_dvc_yaml_stage_or_dep_is_a_clear_error(tmp_path):
    with pytest.raises(WmevalError, match="dvc.yaml: not found"):
        code_version("a", tmp_path)
    root = _project(tmp_path)
    with pytest.raises(WmevalError, match="no stage 'zz'"):
        code_version("zz", root)
    (root / "src/pkg/one/m.py").unlink()
    (root / "src/pkg/one").rmdir()
    with pytest.raises(WmevalError, match="code dep 'src/pkg/one' does not exist"):
        code_version("a", root)


def test_file_digests_match_hashlib(tmp_path):
    import hashlib
    f = tmp_path / "f.bin"
    f.write_bytes(b"abc" * 1000)
    assert md5_file(f) == hashlib.md5(b"abc" * 1000).hexdigest()
    assert file_digest(f) == hashlib.sha256(b"abc" * 1000).hexdigest()


def test_digest_is_that_of_the_file_set_as_dvc_hashes_it(tmp_path):
    """Order of the deps, where the project lies, and .dvcignore'd files do not move it; any file does."""
    a, b = _project(tmp_path / "a"), _project(tmp_path / "b")
    assert _digest(a) == _digest(b)                                    # two clones, two places
    dvc = yaml.safe_load((b / "dvc.yaml").read_text())
    dvc["stages"]["a"]["deps"] = list(reversed(dvc["stages"]["a"]["deps"]))
    (b / "dvc.yaml").write_text(yaml.safe_dump(dvc))
    assert _digest(b) == _digest(a)                                    # DVC ignores dep order too
    (a / ".dvcignore").write_text("*.pyc\n.venv/\n")
    before = _digest(a)
    (a / "src/pkg/one/stray.pyc").write_bytes(b"\0")
    assert _digest(a) == before
    (a / "src/pkg/one/table.csv").write_text("x\n1\n")                 # not only .py files count
    assert _digest(a) != before


def test_root_defaults_to_the_checkout_the_code_is_imported_from(tmp_path, monkeypatch):
    from wmeval.core.digest import project_root

    monkeypatch.chdir(tmp_path)                                        # a notebook elsewhere
    assert (project_root() / "dvc.yaml").is_file()
    assert code_version("rollouts")["deps"].startswith("src/wmeval")


def test_import_closure_is_what_each_stage_script_reaches():
    """import_closure against the layout tests' own import walker (tests/test_layout.py's reachable), on every stage
    script: the same files, the script itself included."""
    from test_layout import ROOT, reachable

    from wmeval.core.digest import import_closure

    for script in sorted((ROOT / "stages").glob("*.py")):
        want = sorted(f.relative_to(ROOT).as_posix() for f in reachable(script))
        assert import_closure(script, ROOT) == want, script.name


def _package(root: Path) -> Path:
    """A project whose script imports a module lazily and relatively, and one module only for its bookkeeping."""
    files = {
        "src/wmeval/__init__.py": "",
        "src/wmeval/a/__init__.py": "",
        "src/wmeval/a/b.py": "def f():\n    from . import c\n    from ..shared import g\n    return c, g\n",
        "src/wmeval/a/c.py": "import wmeval.tool\nX = 1\n",
        "src/wmeval/tool.py": "T = 1\n",
        "src/wmeval/shared.py": "def g():\n    return 1\n",
        "src/wmeval/book/__init__.py": "from wmeval.book.keep import K\n",
        "src/wmeval/book/keep.py": "import wmeval.shared\nK = 1\n",
        "src/wmeval/unused.py": "",
        "bench/run.py": ("import numpy\nfrom wmeval.a import b\nfrom wmeval import tool\n\n\ndef main():\n"
                         "    from wmeval.book import K\n"),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "bench/run.py"


def test_import_closure_follows_lazy_relative_and_submodule_imports_and_skips_only_the_scripts_own(tmp_path):
    """A module imported inside a function, relatively, or as a name of a ``from`` import is in the closure, with
    its parent packages; ``skip`` leaves out what only the script's own skipped imports bring (book/keep.py), never
    a module the others import (shared.py, which keep.py imports too; tool.py, skipped by the script but imported by
    a/c.py); a module nobody imports is not in it."""
    from wmeval.core.digest import changed_files, code_files, import_closure

    script = _package(tmp_path)
    figures = ["bench/run.py", "src/wmeval/__init__.py", "src/wmeval/a/__init__.py", "src/wmeval/a/b.py",
               "src/wmeval/a/c.py", "src/wmeval/shared.py", "src/wmeval/tool.py"]
    assert import_closure(script, tmp_path, skip=("wmeval.book", "wmeval.tool")) == figures
    assert import_closure(script, tmp_path) == sorted(figures + ["src/wmeval/book/__init__.py",
                                                                 "src/wmeval/book/keep.py"])
    with pytest.raises(WmevalError, match="wmeval is imported from"):       # this process runs another wmeval
        code_files(script, tmp_path, skip=("wmeval.book", "wmeval.tool"))
    code = code_files(script, tmp_path, skip=("wmeval.book", "wmeval.tool"), running=False)
    assert list(code) == figures and changed_files(code, tmp_path) == []
    (tmp_path / "src/wmeval/a/c.py").write_text("X = 2\n")
    (tmp_path / "src/wmeval/shared.py").unlink()
    (tmp_path / "src/wmeval/unused.py").write_text("Y = 1\n")          # not the script's code: not named
    assert changed_files(code, tmp_path) == ["src/wmeval/a/c.py", "src/wmeval/shared.py"]


def test_code_files_default_to_the_scripts_own_checkout():
    """Without a root, a script's code is read from the project it lies in (here this checkout, whose wmeval this
    process imports)."""
    from wmeval.core.digest import code_files, file_sha256

    root = Path(__file__).resolve().parents[1]
    code = code_files(root / "benchmarks" / "coverage.py", skip=("wmeval.report",))
    assert code["benchmarks/coverage.py"] == file_sha256(root / "benchmarks" / "coverage.py")
    assert code["src/wmeval/stats.py"] == file_sha256(root / "src" / "wmeval" / "stats.py")
