"""``constraints.txt``: the package releases that made the committed ``dvc.lock`` and ``reports/``.

The README's commands install with ``pip install -c constraints.txt``, so that a fresh clone's ``dvc repro``
reproduces the committed outputs byte for byte. DVC hashes code, params and data, not the installed packages: in
an environment whose releases differ from the pins, the outputs may differ in bytes (pandas writes its version into
every Parquet file's metadata; a numerical library may round differently) while ``dvc status`` says nothing
changed. Every stage says so at its start (:func:`wmeval.core.runner.main` logs :func:`drift`), and the run record
lists the releases (``packages`` in ``reports/provenance.json``).
"""

from __future__ import annotations

import re
from pathlib import Path

from wmeval.core.errors import WmevalError

#: The file, at the project's root.
CONSTRAINTS = "constraints.txt"


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: str | Path) -> dict[str, str]:
    """``{canonical name: version}`` of a constraints file's ``name==version`` lines (comments and blank lines
    skipped); a :class:`WmevalError` naming the file, line and text of anything else (a range pins nothing)."""
    from packaging.requirements import InvalidRequirement, Requirement

    path = Path(path)
    out: dict[str, str] = {}
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as e:
            raise WmevalError(f"{path} line {n}: {line!r} is not a requirement "
                              f"({str(e).splitlines()[0] if str(e) else 'unparsable'})") from None
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or req.url or req.marker:
            raise WmevalError(f"{path} line {n}: {line!r} is not name==version (a range or a URL pins nothing)")
        out[canonical(req.name)] = specs[0].version
    return out


def installed_versions(names) -> dict[str, str | None]:
    """``{name: installed version, or None where it is not installed}`` for each of ``names``."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def drift(root: str | Path | None = None) -> list[str]:
    """``["pandas 3.1.2 installed, 3.1.1 pinned", ...]``: each package pinned in ``root/constraints.txt`` (default:
    :func:`wmeval.core.digest.project_root`) whose installed release differs; a pinned package that is not
    installed is not drift (it belongs to an extra). Empty where there is no such file."""
    from importlib.metadata import distributions

    from wmeval.core.digest import project_root

    path = Path(project_root() if root is None else root) / CONSTRAINTS
    if not path.is_file():
        return []
    pinned = read_pins(path)
    installed: dict[str, str] = {}
    for d in distributions():               # in sys.path order: the first is the one imported
        if d.metadata["Name"]:
            installed.setdefault(canonical(d.metadata["Name"]), d.version)
    return [f"{name} {installed[name]} installed, {version} pinned" for name, version in sorted(pinned.items())
            if name in installed and not _satisfies(installed[name], version)]


def _satisfies(installed: str, pinned: str) -> bool:
    """Whether ``installed`` meets ``==pinned`` as pip judges it (PEP 440: ``2.14.1+cpu`` meets ``==2.14.1``)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion

    try:
        return SpecifierSet(f"=={pinned}").contains(installed, prereleases=True)
    except InvalidVersion:
        return installed == pinned
