"""wmeval audit: metric lookup, DVC-identical hashing, and refusal when the workspace does not match dvc.lock."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wmeval.cli import main
from wmeval.core.errors import WmevalError
from wmeval.lineage.audit import (
    StaleWorkspaceError,
    dir_file_md5s,
    dir_md5,
    find_metric,
    lineage,
    md5_file,
    stage_chain,
)

BIN = Path(sys.executable).parent
METRICS = {"blobs": {"reversed": {
    "fd": {"open_loop/frame:pooled": {"point": 1.0, "low": 0.5, "high": 2.0},
           "open_loop/transition:pooled": {"point": 3.0, "low": 2.5, "high": 4.0}},
    "fd_stratified": {"open_loop/frame:uniform": {"point": 5.0, "low": 4.0, "high": 6.0}}}}}

# Two stages: "make" writes a data directory, "score" reads it and writes reports/metrics.json.
DVC_YAML = {"stages": {
    "make": {"cmd": "python make.py", "deps": ["make.py"], "params": ["n"], "outs": ["data/rollouts"]},
    "score": {"cmd": "python score.py", "deps": ["score.py", "data/rollouts"],
              "outs": [{"reports/metrics.json": {"cache": False}}]},
}}
MAKE = """import os, yaml
n = yaml.safe_load(open("params.yaml"))["n"]
os.makedirs("data/rollouts/blobs/sub", exist_ok=True)
for i in range(n):
    open(f"data/rollouts/blobs/f{i}.txt", "w").write(str(i) * (i + 1))
open("data/rollouts/blobs/sub/z.txt", "w").write("z")
"""
SCORE = f"""import json, os
os.makedirs("reports", exist_ok=True)
json.dump({json.dumps(METRICS)}, open("reports/metrics.json", "w"), indent=1)
"""


def _run(cmd, cwd):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1"}
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    assert r.returncode == 0, f"{cmd}: {r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    """A real two-stage DVC project, reproduced (a few seconds)."""
    root = tmp_path_factory.mktemp("audit") / "proj"
    root.mkdir()
    (root / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML))
    (root / "params.yaml").write_text("n: 3\n")
    (root / "make.py").write_text(MAKE)
    (root / "score.py").write_text(SCORE)
    (root / "conf").mkdir()          # what find_root looks for, with .dvc/
    _run(["git", "init", "-q"], root)
    _run([str(BIN / "dvc"), "init", "-q"], root)
    _run([str(BIN / "dvc"), "repro", "-q"], root)
    return root


def test_find_metric_conditions_and_close_matches():
    w, s, m, c = find_metric(METRICS, "blobs/reversed/fd")
    assert (w, s, m) == ("blobs", "reversed", "fd") and sorted(c) == ["open_loop/frame:pooled",
                                                                      "open_loop/transition:pooled"]
    assert list(find_metric(METRICS, "blobs/reversed/fd/open_loop/frame:pooled")[3]) == ["open_loop/frame:pooled"]
    assert list(find_metric(METRICS, "blobs/reversed/fd", "transition:pooled")[3]) == ["open_loop/transition:pooled"]
    assert len(find_metric(METRICS, "blobs/reversed/fd", "open_loop")[3]) == 2
    with pytest.raises(WmevalError, match=r"metric 'fd_stratifed' not found under blobs/reversed; "
                                          r"close matches: \['fd_stratified'"):
        find_metric(METRICS, "blobs/reversed/fd_stratifed")
    with pytest.raises(WmevalError, match=r"source 'reverse' not found under blobs; close matches: \['reversed'\]"):
        find_metric(METRICS, "blobs/reverse/fd")
    with pytest.raises(WmevalError, match="has no condition 'frame:uniform'"):
        find_metric(METRICS, "blobs/reversed/fd", "frame:uniform")
    with pytest.raises(WmevalError, match="WORLD/SOURCE/METRIC"):
        find_metric(METRICS, "blobs/fd")


def test_hashes_equal_dvc_lock(mini):
    lock = yaml.safe_load((mini / "dvc.lock").read_text())
    outs = {o["path"]: o["md5"] for st in lock["stages"].values() for o in st["outs"]}
    assert dir_md5(dir_file_md5s(mini / "data/rollouts")) == outs["data/rollouts"]
    assert md5_file(mini / "reports/metrics.json") == outs["reports/metrics.json"]
    assert stage_chain(lock) == ["score", "make"]


def test_lineage_of_a_clean_workspace(mini):
    lin = lineage(mini, "blobs/reversed/fd_stratified")
    assert lin["verified"] and [c["key"] for c in lin["conditions"]] == ["open_loop/frame:uniform"]
    assert lin["conditions"][0]["values"] == {"point": 5.0, "low": 4.0, "high": 6.0}
    assert [s["stage"] for s in lin["stages"]] == ["score", "make"]
    make = lin["stages"][1]
    assert make["params"] == {"params.yaml": {"n": 3}} and make["deps"][0]["path"] == "make.py"
    lock = yaml.safe_load((mini / "dvc.lock").read_text())
    assert make["outs"][0]["md5"] == lock["stages"]["make"]["outs"][0]["md5"]
    # Honest about what it cannot know: no bootstrap protocol, no rollout tables of wmeval's layout.
    assert any("protocol.json is missing" in n for n in lin["notes"])
    assert lin["rollout_tables"][0]["missing"] and lin["interval_protocol"] is None


def test_cli_audit_json_and_exit_codes(mini, capsys):
    assert main(["audit", "blobs/reversed/fd", "--root", str(mini), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["conditions"]) == 2
    assert main(["audit", "blobs/reversed/fdd", "--root", str(mini)]) == 2
    assert "close matches: ['fd'" in capsys.readouterr().err


def test_refuses_a_hand_edited_or_missing_output(mini, capsys):
    m = mini / "reports/metrics.json"
    lock_md5 = md5_file(m)
    original = m.read_text()
    f = mini / "data/rollouts/blobs/f1.txt"
    try:
        m.write_text(original.replace("5.0", "0.5"))
        with pytest.raises(StaleWorkspaceError) as e:
            lineage(mini, "blobs/reversed/fd")
        assert f"reports/metrics.json (out of stage 'score'): md5 {md5_file(m)}, dvc.lock expects {lock_md5}" \
            in str(e.value)
        assert main(["audit", "blobs/reversed/fd", "--root", str(mini)]) == 2
        assert "refusing to audit" in capsys.readouterr().err
        m.write_text(original)
        f.write_text("edited")
        with pytest.raises(StaleWorkspaceError) as e:
            lineage(mini, "blobs/reversed/fd")
        # The changed file is named with its md5 and the listing's, from the DVC cache.
        assert f"data/rollouts/blobs/f1.txt: md5 {md5_file(f)}, dvc.lock's listing expects" in str(e.value)
        f.unlink()
        with pytest.raises(StaleWorkspaceError, match="data/rollouts/blobs/f1.txt: missing"):
            lineage(mini, "blobs/reversed/fd")
    finally:
        m.write_text(original)
        _run([str(BIN / "dvc"), "checkout", "-q", "make"], mini)
    assert lineage(mini, "blobs/reversed/fd")["verified"]


def test_refuses_a_stale_output(mini):
    (mini / "params.yaml").write_text("n: 4\n")   # outputs match dvc.lock, but a param changed
    try:
        with pytest.raises(StaleWorkspaceError, match="dvc status: stage 'make'"):
            lineage(mini, "blobs/reversed/fd")
    finally:
        (mini / "params.yaml").write_text("n: 3\n")


def test_audit_compares_each_table_with_its_own_stage_code(tmp_path):
    """A table's recorded code digest is checked against the current digest of its stage's deps only."""
    from wmeval.core.digest import code_version
    from wmeval.lineage.audit import _code_check

    (tmp_path / "src/a").mkdir(parents=True)
    (tmp_path / "src/b").mkdir(parents=True)
    (tmp_path / "src/a/m.py").write_text("A = 1\n")
    (tmp_path / "src/b/m.py").write_text("B = 1\n")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"one": {"cmd": "x", "deps": ["src/a"]},
                                                                  "two": {"cmd": "y", "deps": ["src/b"]}}}))
    tables = [{"metadata": {"code": code_version(s, tmp_path)}} for s in ("one", "two")]
    notes: list[str] = []
    out = _code_check(tmp_path, tables, notes)
    assert notes == [] and set(out["current"]) == {"one", "two"}
    (tmp_path / "src/b/m.py").write_text("B = 2\n")         # stage two's code changes after it ran
    notes = []
    _code_check(tmp_path, tables, notes)
    assert len(notes) == 1 and "the two stage's code differs" in notes[0]
    notes = []
    _code_check(tmp_path, [{"metadata": {"code": {"wmeval": "0.1.0", "source_sha256": "x"}}}], notes)
    assert notes and "records no stage" in notes[0]


def test_missing_numbers_read_n_a():
    """A failed bias check withholds the row's rank and interval (NaN in intervals.csv): the audit says n/a, as
    it does for a value that is absent, never "nan"."""
    from wmeval.lineage.audit import _fmt

    assert [_fmt(float("nan")), _fmt(None), _fmt(0.000123456789), _fmt(3)] == ["n/a", "n/a", "0.000123457", "3"]


def test_the_audit_writes_an_interval_opened_at_0_and_what_the_permutation_test_did(mini):
    """A bias-corrected FD's interval opened at 0 by its permutation test reads (0, high], not [4.9e-324, high], and
    the test's line says what it did to the interval: from the interval itself, so that a rejection the interval
    could not follow (it lies at or below 0) is not called a 0 taken out."""
    import copy

    from wmeval.lineage.audit import format_lineage

    lin = lineage(mini, "blobs/reversed/fd_stratified")
    iv = {"method": "boundary", "n_resamples": 500, "confidence_level": 0.9, "resampling_unit": "episode",
          "n_clusters": 32, "baseline": None, "rank": 1, "rank_low": 1, "rank_high": 2, "bias_check": "passed",
          "leftover_bias": 0.0, "leftover_bias_se": 0.1}

    def text(low, high, p):
        one = copy.deepcopy(lin)
        one["conditions"][0]["values"] = {"point": 2e-4, "low": low, "high": high}
        one["conditions"][0]["interval"] = {**iv, "p_value": p}
        return format_lineage(one)
    opened = text(5e-324, 3e-3, 0.1)                                  # p = alpha at 90% rejects
    assert "(0, 0.003]" in opened and "e-324" not in opened
    assert "permutation test of 0: p = 0.1 (0 taken out of the interval)" in opened
    assert "(0 in the interval)" in text(-1e-3, 3e-3, 0.3)
    assert "(rejects 0, but the interval lies at or below 0 and is kept)" in text(-3e-3, -1e-3, 0.01)
    assert "(no interval to put 0 in or take it out of)" in text(None, None, 0.01)
    assert "(0 not in the interval; the test rejects 0)" in text(1e-4, 3e-3, 0.01)
    assert "permutation test" not in text(-1e-3, 3e-3, None)
