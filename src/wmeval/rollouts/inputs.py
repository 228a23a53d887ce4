"""What the rollouts stage reads beyond wmeval itself, and the check that DVC tracks it.

A model's code (the module file its ``_target_`` names), an imported model's prediction
files, any file a model entry's argument names (a checkpoint) and a ``dataset`` world's
recordings are inputs of the rollouts stage. Unless ``dvc.yaml`` lists them under the stage's
``deps``, DVC cannot see an edit to them and ``dvc repro`` would keep the old rollouts. The
stage therefore refuses to run when an input inside the project is not covered by a dep (a
dep naming the file or a folder above it), with the line to add.
Modules outside the project, and in its virtual environments (installed packages, whose
versions the provenance record carries), are not required as deps.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import yaml

import wmeval
from wmeval.core.errors import WmevalError

#: The ``_target_`` of imported predictions, whose ``path`` is an input folder.
IMPORTED = "wmeval.models.ImportedModel"


def _module_file(target: str) -> Path | None:
    """The file of the module a ``_target_`` (``package.module.Class``) lives in, if it can be found."""
    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:i]))
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin and spec.origin not in ("built-in", "frozen"):
            return Path(spec.origin).resolve()
    return None


def model_inputs(models: dict[str, Any], root: Path) -> dict[str, Path]:
    """``{params key: path}`` of every input the model entries read outside the wmeval package.

    ``models``: ``{world: {model: entry}}``. Keys are ``models.<world>.entries.<model>._target_``
    (the module file), ``...path`` (an imported model's folder) and ``...<arg>`` for any other string
    argument that names an existing file or folder (a checkpoint).
    """
    package = Path(wmeval.__file__).resolve().parent
    out: dict[str, Path] = {}
    for world, entries in models.items():
        for name, entry in entries.items():
            key = f"models.{world}.entries.{name}"
            target = str(entry.get("_target_", ""))
            if target == IMPORTED and entry.get("path") is not None:
                p = Path(str(entry["path"]))
                out[f"{key}.path"] = (p if p.is_absolute() else root / p).resolve()
            for arg, value in entry.items():   # any other argument naming a file or folder: a checkpoint, a config
                if arg.startswith("_") or not isinstance(value, str) or f"{key}.{arg}" in out:
                    continue
                p = Path(value)
                p = (p if p.is_absolute() else root / p)
                if value and p.exists():
                    out[f"{key}.{arg}"] = p.resolve()
            f = _module_file(target) if target else None
            if f is not None and package not in f.parents:
                out[f"{key}._target_"] = f
    return out


def world_inputs(worlds: dict[str, dict[str, Any]], root: Path) -> dict[str, Path]:
    """``{params key: path}`` of the files a world reads: a ``dataset`` world's recordings."""
    out: dict[str, Path] = {}
    for name, cfg in worlds.items():
        path = (cfg.get("params") or {}).get("path") if cfg.get("kind") == "dataset" else None
        if path:
            p = Path(str(path))
            out[f"worlds.{name}.params.path"] = (p if p.is_absolute() else root / p).resolve()
    return out


def stage_deps(root: Path, stage: str = "rollouts") -> list[Path]:
    """The resolved paths of ``stage``'s deps in ``root / dvc.yaml`` (empty when there is no dvc.yaml)."""
    dvc = root / "dvc.yaml"
    if not dvc.is_file():
        return []
    spec = yaml.safe_load(dvc.read_text()) or {}
    deps = (spec.get("stages", {}).get(stage) or {}).get("deps") or []
    return [(root / str(d if isinstance(d, str) else next(iter(d)))).resolve() for d in deps]


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_declared(inputs: dict[str, Path], deps: list[Path], root: Path) -> None:
    """Stop unless every input inside the project (outside its virtual environments) is covered by a dep."""
    root = root.resolve()
    for key, path in sorted(inputs.items()):
        if not _inside(path, root) or any(part.startswith(".venv") or part == "site-packages"
                                          for part in path.relative_to(root).parts):
            continue
        if not path.exists():
            raise WmevalError(f"params.yaml: {key}: {path.relative_to(root)} does not exist")
        if not any(_inside(path, d) for d in deps):
            rel = path.relative_to(root)
            line = rel.parent if path.is_file() and rel.parent != Path(".") else rel
            raise WmevalError(
                f"params.yaml: {key}: the rollouts stage reads {rel}, which is not one of its deps in dvc.yaml, "
                f"so DVC would not re-run it when {rel} changes; add `- {line}` "
                "under stages.rollouts.deps in dvc.yaml")

