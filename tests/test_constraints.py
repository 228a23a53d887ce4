"""constraints.txt pins the environment that made the committed outputs (README, "The two commands").

A fresh clone installs with ``-c constraints.txt``; where a package's installed version differs from its pin, a
``dvc repro`` may write other bytes than the committed ``dvc.lock`` records (pandas 3.1.2 writes its version into
every Parquet file it writes). The suite says which package, before the byte comparison in ``.ci/run`` does, and
every stage warns of it at its start.
"""

import logging
from pathlib import Path

import pytest

from wmeval.core.errors import WmevalError
from wmeval.core.pins import CONSTRAINTS, canonical, drift, read_pins
from wmeval.core.runner import warn_drift
from wmeval.lineage.provenance import PACKAGES

ROOT = Path(__file__).resolve().parents[1]


def test_pins_are_read_and_a_range_is_refused(tmp_path):
    f = tmp_path / CONSTRAINTS
    f.write_text("# c\nPandas==3.1.1  # note\n\nhydra_core==1.3.8\n")
    assert read_pins(f) == {"pandas": "3.1.1", "hydra-core": "1.3.8"}
    for bad in ("pandas>=3", "pandas==3.1.1,<4", "pandas", "pandas==3.1.1; python_version<'3'", "not a pin!"):
        f.write_text(f"numpy==2.4.6\n{bad}\n")
        with pytest.raises(WmevalError, match=rf"{CONSTRAINTS} line 2: "):
            read_pins(f)


def test_drift_names_each_installed_package_whose_release_differs(tmp_path, monkeypatch, caplog):
    from importlib.metadata import version

    (tmp_path / CONSTRAINTS).write_text(f"numpy=={version('numpy')}\npandas==0.0.1\nno-such-package-here==1.0\n")
    assert drift(tmp_path) == [f"pandas {version('pandas')} installed, 0.0.1 pinned"]
    assert drift(tmp_path / "nowhere") == []
    monkeypatch.setattr("wmeval.core.digest.project_root", lambda: tmp_path)
    with caplog.at_level(logging.WARNING):
        warn_drift()
    assert "pandas" in caplog.text and "numpy" not in caplog.text and "pip install -c constraints.txt" in caplog.text


def test_a_local_build_label_meets_its_pin_and_another_form_of_file_only_warns(tmp_path, monkeypatch, caplog):
    """pip takes torch 2.14.1+cpu for ==2.14.1 (PEP 440), so that is no drift; a user's own constraints.txt with
    pip options (the working directory's, where wmeval is installed from elsewhere) is named in one warning line,
    and the stage goes on."""
    from wmeval.core import pins

    assert pins._satisfies("2.14.1+cpu", "2.14.1") and not pins._satisfies("2.14.2", "2.14.1")
    assert not pins._satisfies("2.14.1", "2.14.1+cpu")
    (tmp_path / CONSTRAINTS).write_text("--extra-index-url https://example.org/simple\nnumpy==1.0\n")
    monkeypatch.setattr("wmeval.core.digest.project_root", lambda: tmp_path)
    with caplog.at_level(logging.WARNING):
        warn_drift()                                            # no exception
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "cannot compare" in record.getMessage() and "line 1" in record.getMessage()
    assert "\n" not in record.getMessage()


def test_the_packages_a_run_records_are_pinned_at_their_installed_versions():
    pinned = read_pins(ROOT / CONSTRAINTS)
    recorded = [p for p in PACKAGES if p != "wmeval"]      # this checkout itself, installed editable
    missing = [p for p in recorded if canonical(p) not in pinned]
    assert not missing, f"{CONSTRAINTS} pins no version of {missing}, which the run record lists"
    differ = drift(ROOT)
    assert not differ, (f"installed versions differ from {CONSTRAINTS}, so `dvc repro` need not reproduce the "
                        "committed outputs: " + "; ".join(differ) + ' (pip install -c constraints.txt -e ".[test]")')
