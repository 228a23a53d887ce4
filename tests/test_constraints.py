"""constraints.txt pins the environment that made the committed outputs (README, "The two commands").

A fresh clone installs with ``-c constraints.txt``; where a package's installed version differs from its pin, a
``dvc repro`` may write other bytes than the committed ``dvc.lock`` records (pandas 3.1.2 writes its version into
every Parquet file it writes). These tests say which package, before the byte comparison in ``.ci/run`` does.
"""

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement

from wmeval.lineage.provenance import PACKAGES

ROOT = Path(__file__).resolve().parents[1]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """``{canonical name: version}`` of a constraints file's ``name==version`` lines; anything else but comments and
    blank lines is refused (a range pins nothing)."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"constraints.txt line {n}: {line!r} is not name==version"
        out[_canonical(req.name)] = specs[0].version
    return out


def test_pins_refuse_a_range():
    assert pins("# c\nPandas==3.1.1  # note\n\nhydra_core==1.3.8\n") == {"pandas": "3.1.1", "hydra-core": "1.3.8"}
    for bad in ("pandas>=3", "pandas==3.1.1,<4", "pandas"):
        try:
            pins(bad)
        except AssertionError as e:
            assert "not name==version" in str(e)
        else:
            raise AssertionError(f"{bad!r} passed as a pin")


def test_the_packages_a_run_records_are_pinned_at_their_installed_versions():
    pinned = pins((ROOT / "constraints.txt").read_text())
    recorded = [p for p in PACKAGES if p != "wmeval"]      # this checkout itself, installed editable
    missing = [p for p in recorded if _canonical(p) not in pinned]
    assert not missing, f"constraints.txt pins no version of {missing}, which the run record lists"
    differ = []
    for p in dict.fromkeys([*recorded, *pinned]):
        try:
            have = version(p)
        except PackageNotFoundError:
            continue                                        # pinned for an extra this environment lacks
        if have != pinned[_canonical(p)]:
            differ.append(f"{p} {have} installed, {pinned[_canonical(p)]} pinned")
    assert not differ, ("installed versions differ from constraints.txt, so `dvc repro` need not reproduce the "
                        "committed outputs: " + "; ".join(differ) +
                        ' (pip install -c constraints.txt -e ".[test]")')
