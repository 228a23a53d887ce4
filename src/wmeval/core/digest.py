"""Content digests: of a file's bytes, and of the code a stage depends on.

:func:`code_version` is the digest every stage writes into its outputs' metadata. It covers
exactly the code deps that ``dvc.yaml`` declares for that stage (the stage script and the
folders of ``src/wmeval`` it imports), so it changes only when DVC would re-run the stage
anyway, and a fresh clone reproduces the committed ``dvc.lock`` byte for byte.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pathspec
import yaml

from wmeval import __version__
from wmeval.core.errors import WmevalError

#: Top-level folders of a stage's deps that hold code (the rest is data).
CODE_ROOTS = ("src/", "stages/")
#: Always skipped, whatever ``.dvcignore`` says (DVC's own and git's folders).
IGNORED_PARTS = ("__pycache__", ".git", ".dvc")


def file_digest(path: str | Path, algorithm: str = "sha256", chunk: int = 1 << 20) -> str:
    """The hex digest of a file's bytes (``sha256`` for weights and inputs, ``md5`` as DVC 3 hashes outs)."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def file_sha256(path: str | Path) -> str:
    return file_digest(path, "sha256")


def md5_file(path: str | Path) -> str:
    """The md5 of a file's bytes (DVC 3's ``md5`` of a file output)."""
    return file_digest(path, "md5")


def stage_code_deps(stage: str, root: Path) -> list[str]:
    """The deps of ``stage`` in ``root/dvc.yaml`` that hold code (under ``src/`` or ``stages/``), as written.

    Raises:
        WmevalError: no ``dvc.yaml`` at ``root``, or no such stage in it.
    """
    path = root / "dvc.yaml"
    if not path.is_file():
        raise WmevalError(f"{path}: not found; a stage's code digest is taken over its dvc.yaml deps")
    stages = (yaml.safe_load(path.read_text()) or {}).get("stages", {})
    if stage not in stages:
        raise WmevalError(f"{path}: no stage {stage!r} (stages: {', '.join(stages)})")
    deps = [d if isinstance(d, str) else next(iter(d)) for d in stages[stage].get("deps", [])]
    return [d for d in deps if d.startswith(CODE_ROOTS)]


def _ignore(root: Path) -> pathspec.GitIgnoreSpec:
    """The project's ``.dvcignore`` (gitignore syntax): files DVC leaves out of a dep's hash."""
    path = root / ".dvcignore"
    lines = path.read_text().splitlines() if path.is_file() else []
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _files(root: Path, dep: str, ignore: pathspec.GitIgnoreSpec) -> list[str]:
    """The dep's files as POSIX paths relative to ``root``, without what DVC ignores."""
    p = root / dep
    if p.is_file():
        return [p.relative_to(root).as_posix()]
    if not p.is_dir():
        raise WmevalError(f"dvc.yaml: code dep {dep!r} does not exist under {root}")
    out = []
    for f in p.rglob("*"):
        rel = f.relative_to(root)
        if f.is_file() and not set(rel.parts) & set(IGNORED_PARTS) and not ignore.match_file(rel.as_posix()):
            out.append(rel.as_posix())
    return out


def project_root() -> Path:
    """The project whose code is running: the checkout ``wmeval`` is imported from (an editable
    install), else the working directory (where DVC runs a stage)."""
    import wmeval

    checkout = Path(wmeval.__file__).resolve().parents[2]
    return checkout if (checkout / "dvc.yaml").is_file() else Path.cwd()


def code_version(stage: str, root: str | Path | None = None) -> dict[str, str]:
    """The package version and a sha256 over the files of ``stage``'s code deps in ``root/dvc.yaml``.

    The digest identifies the code that produced a file, with or without git, and does not change
    with the commit alone or with code the stage does not depend on (so DVC outputs stay
    byte-stable across clones). Like DVC's hash, it does not depend on the order of the deps, on
    where the project lies, or on files ``.dvcignore`` leaves out. ``deps`` lists the paths it
    covers, sorted. ``root`` defaults to :func:`project_root`, so the digest describes the code
    that is imported. Computed afresh on every call: no cache that could outlive an edit.
    """
    root = project_root() if root is None else Path(root).resolve()
    deps = sorted(set(stage_code_deps(stage, root)))
    ignore = _ignore(root)
    h = hashlib.sha256()
    for rel in sorted({f for dep in deps for f in _files(root, dep, ignore)}):
        h.update(rel.encode())
        h.update(b"\0")
        h.update((root / rel).read_bytes())
        h.update(b"\0")
    return {"wmeval": __version__, "stage": stage, "deps": ",".join(deps), "source_sha256": h.hexdigest()}


def _module_file(root: Path, name: str) -> Path | None:
    """The source of module ``name`` (``wmeval...``) under ``root/src``: ``a/b.py`` or ``a/b/__init__.py``."""
    base = root / "src" / Path(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _imported(path: Path, root: Path, package: str) -> list[str]:
    """The ``wmeval`` modules ``path`` imports, wherever the import statement stands (functions included): each
    module named, each name of a ``from`` import that is a submodule, resolved against ``package`` (``path``'s own
    package) for a relative import."""
    import ast

    out = []
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.append(base)
            out += [f"{base}.{a.name}" for a in node.names if _module_file(root, f"{base}.{a.name}") is not None]
    return [m for m in out if m == "wmeval" or m.startswith("wmeval.")]


def import_closure(entry: str | Path, root: str | Path | None = None, skip: tuple[str, ...] = ()) -> list[str]:
    """The files a script runs from this project: ``entry`` and every ``wmeval`` module it imports, directly or
    through others, wherever the import stands (a function's lazy import included), with each module's parent
    packages' ``__init__.py``; as POSIX paths relative to ``root`` (default :func:`project_root`), sorted.

    ``skip`` names modules ``entry``'s own imports leave out (with what only they import): its bookkeeping, such as
    the module that computes this digest, where the closure is to cover the code that computes its figures. A
    module one of the others imports is kept. Static: a module imported by a computed name is missed.
    """
    root = project_root() if root is None else Path(root).resolve()
    entry = Path(entry).resolve()
    seen: dict[Path, str] = {}

    def visit(name: str) -> None:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            mod = ".".join(parts[:i])
            f = _module_file(root, mod)
            if f is None or f in seen:
                continue
            seen[f] = mod
            pkg = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
            for m in _imported(f, root, pkg):
                visit(m)

    for name in _imported(entry, root, ""):
        if not any(name == s or name.startswith(s + ".") for s in skip):
            visit(name)
    files = {entry, *seen}
    return sorted(p.relative_to(root).as_posix() for p in files)


def _checkout_of(entry: Path) -> Path:
    """The project ``entry`` lies in: its nearest folder above with a ``dvc.yaml`` (else :func:`project_root`)."""
    return next((d for d in entry.resolve().parents if (d / "dvc.yaml").is_file()), None) or project_root()


def code_files(entry: str | Path, root: str | Path | None = None, skip: tuple[str, ...] = (),
               running: bool = True) -> dict[str, str]:
    """``{path: sha256}`` over :func:`import_closure`'s files: the code a script's figures come from, to be set
    beside them and checked against the files later (:func:`changed_files`). ``root`` defaults to the project the
    script lies in. With ``running`` (the default) the files are the code this process runs, so the ``wmeval`` it
    has imported must be ``root``'s.

    Raises:
        WmevalError: with ``running``, ``wmeval`` is imported from elsewhere than ``root/src`` (another checkout,
            or an installed copy): the files hashed would not be the code that runs.
    """
    import sys

    root = _checkout_of(Path(entry)) if root is None else Path(root).resolve()
    loaded = sys.modules.get("wmeval") if running else None
    if loaded is not None and getattr(loaded, "__file__", None):
        here = Path(loaded.__file__).resolve()
        if not here.is_relative_to(root / "src"):
            raise WmevalError(f"{entry}: its code is recorded from {root}, but wmeval is imported from "
                              f"{here.parents[1]}; run it with that checkout's own install (pip install -e .) or "
                              f"PYTHONPATH={root / 'src'}")
    return {rel: file_sha256(root / rel) for rel in import_closure(entry, root, skip)}


def changed_files(code: dict[str, str], root: str | Path | None = None) -> list[str]:
    """The files of a :func:`code_files` record whose bytes differ now under ``root``, or that are gone, sorted."""
    root = project_root() if root is None else Path(root).resolve()
    return sorted(rel for rel, sha in code.items()
                  if not (root / rel).is_file() or file_sha256(root / rel) != sha)
