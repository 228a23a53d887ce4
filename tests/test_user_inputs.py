"""A model's code and imported predictions are inputs of the rollouts stage: DVC must track them."""

import os
import sys
from pathlib import Path

import pytest
import yaml
from conftest import make_project
from conftest import run_checked as _run

from wmeval.core.errors import WmevalError
from wmeval.rollouts.inputs import check_declared, model_inputs, stage_deps

BIN = Path(sys.executable).parent
USER_MODEL = '''
from wmeval.models import Prediction


class Still:
    def predict(self, history, actions, num_samples, rng):
        f = history.frames[:, -1:]
        return Prediction(frames=f[:, None].repeat(actions.shape[1], axis=2).repeat(1, axis=1))
'''


def _user_project(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "mymodels").mkdir()
    (tmp_path / "mymodels" / "still_model.py").write_text(USER_MODEL)
    (tmp_path / "preds").mkdir()
    (tmp_path / "preds" / "manifest.json").write_text("{}")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "net.pt").write_bytes(b"weights")
    monkeypatch.syspath_prepend(str(tmp_path / "mymodels"))
    return tmp_path


def test_user_modules_and_imported_paths_are_inputs(tmp_path, monkeypatch):
    root = _user_project(tmp_path, monkeypatch)
    entries = {"blobs": {"mine": {"_target_": "still_model.Still"},
                         "imp": {"_target_": "wmeval.models.ImportedModel", "path": "preds"},
                         "ref": {"_target_": "wmeval.models.BlobReferenceModel", "mode": "mean"},
                         "trained": {"_target_": "still_model.Still", "checkpoint": "ckpt/net.pt", "note": "ckpt/x"}}}
    got = model_inputs(entries, root)
    # "mode": "mean" and "note" name no existing file: not inputs; a checkpoint argument is.
    assert got == {"models.blobs.entries.mine._target_": (root / "mymodels" / "still_model.py").resolve(),
                   "models.blobs.entries.imp.path": (root / "preds").resolve(),
                   "models.blobs.entries.trained._target_": (root / "mymodels" / "still_model.py").resolve(),
                   "models.blobs.entries.trained.checkpoint": (root / "ckpt" / "net.pt").resolve()}


def test_an_input_that_is_not_a_dep_stops_the_stage_with_the_line_to_add(tmp_path, monkeypatch):
    root = _user_project(tmp_path, monkeypatch)
    inputs = model_inputs({"blobs": {"mine": {"_target_": "still_model.Still"},
                                     "imp": {"_target_": "wmeval.models.ImportedModel", "path": "preds"}}}, root)
    with pytest.raises(WmevalError, match=r"models\.blobs\.entries\.imp\.path: the rollouts stage reads preds.*"
                                          r"add `- preds` under stages\.rollouts\.deps"):
        check_declared(inputs, [], root)
    with pytest.raises(WmevalError, match=r"entries\.mine\._target_: .*mymodels/still_model\.py.*`- mymodels`"):
        check_declared(inputs, [(root / "preds").resolve()], root)
    check_declared(inputs, [(root / "preds").resolve(), (root / "mymodels").resolve()], root)   # covered: fine
    # A module outside the project (an installed package) is not required as a dep.
    check_declared({"models.x.entries.y._target_": Path(yaml.__file__).resolve()}, [], root)
    # A missing imported folder is named.
    with pytest.raises(WmevalError, match="nope does not exist"):
        check_declared({"models.x.entries.y.path": (root / "nope").resolve()}, [], root)


def test_stage_deps_reads_dvc_yaml(root):
    deps = stage_deps(root)
    assert (root / "stages" / "rollouts.py").resolve() in deps and (root / "src/wmeval/models").resolve() in deps




@pytest.mark.slow
def test_editing_a_user_model_reruns_the_rollouts(tmp_path):
    """Through DVC: the stage refuses an untracked user module; declared, an edit to it reruns the rollouts."""
    proj = make_project(tmp_path / "proj", ["protocol=tiny", "dynamics=tiny", "worlds=[blobs]", "models=[blobs]",
                                            "+models.blobs.entries.mine._target_=still_model.Still"])
    (proj / "mymodels").mkdir()
    (proj / "mymodels" / "still_model.py").write_text(USER_MODEL)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1",
           "PYTHONPATH": str(proj / "mymodels")}
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    r = _run([sys.executable, "stages/rollouts.py"], proj, env, check=False)
    assert r.returncode == 2 and "mymodels/still_model.py" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (proj / "data" / "rollouts").exists()
    spec = yaml.safe_load((proj / "dvc.yaml").read_text())
    spec["stages"]["rollouts"]["deps"].append("mymodels")
    (proj / "dvc.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    _run([*git, "add", "-A"], proj, env)
    _run([*git, "commit", "-qm", "user model"], proj, env)
    _run([str(BIN / "dvc"), "repro", "rollouts"], proj, env)
    assert (proj / "data" / "rollouts" / "blobs" / "mine.parquet").is_file()
    assert "up to date" in _run([str(BIN / "dvc"), "status", "rollouts"], proj, env).stdout
    (proj / "mymodels" / "still_model.py").write_text(USER_MODEL + "\n# edited\n")
    status = _run([str(BIN / "dvc"), "status", "rollouts"], proj, env).stdout
    assert "mymodels" in status and "modified" in status, status
    assert "Running stage 'rollouts'" in _run([str(BIN / "dvc"), "repro", "rollouts"], proj, env).stdout
