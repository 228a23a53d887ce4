"""The reliability matrix: bad input, fault and misuse give a one-line error naming what and where, exit 2, and
nothing half-written. One case per class; the end of the run prints how many cases pass (see conftest).

More classes are covered elsewhere and not repeated here: stale inputs restored by a cache (tests/test_pipeline.py,
``test_a_stage_refuses_inputs_made_with_other_params``), untracked user code (tests/test_user_inputs.py), bad
model outputs and imported files (tests/test_adapter.py), corrupted cache shards (tests/test_cache.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import make_project

from wmeval.core.config import compose_text, validate_params
from wmeval.core.errors import ConfigError

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]

#: (case, overrides, the message's words): refused by config validation, before any stage runs.
CONFIG_CASES = [
    ("param named size", ["+worlds.blobs.params.size=32"], r"worlds\.blobs\.params\.size: .*run-cache hash"),
    ("param named nfiles", ["+models.blobs.entries.mean.nfiles=2"], r"entries\.mean\.nfiles: .*rename"),
    ("negative bootstrap seed", ["bootstrap.seed=-1"], r"bootstrap\.seed = -1; a seed must be an integer >= 0"),
    ("negative model seed", ["models.pendulum.entries.linear.fit_seed=-3"],
     r"entries\.linear\.fit_seed = -3; a seed"),
    ("empty world selection", ["worlds=[]"], r"section 'worlds' is missing or empty .*worlds=\[\]"),
    ("one evaluation episode", ["protocol.n_episodes=1"], r"protocol\.n_episodes = 1; .*at least 2"),
    ("one control episode", ["dynamics.control_episodes=1"], r"control_episodes = 1; .*at least 2"),
]


@pytest.mark.parametrize(("case", "overrides", "message"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_config_refuses(case, overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate_params(yaml.safe_load(compose_text(overrides, ROOT)))


#: (case, overrides, the message's words): accepted by validation, refused by the rollouts stage before it writes.
STAGE_CASES = [
    ("blob frame size 0", ["worlds.blobs.params.frame_size=0"], r"worlds\.blobs\.params: .*frame_size must be"),
    ("negative blob radius", ["worlds.blobs.params.sigma=-1"], r"worlds\.blobs\.params: .*sigma must be > 0"),
]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("rel") / "proj", ["protocol=tiny", "dynamics=tiny"])


@pytest.mark.parametrize(("case", "overrides", "message"), STAGE_CASES, ids=[c[0] for c in STAGE_CASES])
def test_rollouts_stage_refuses(project, case, overrides, message):
    import re

    params = project / "params.yaml"
    before = params.read_text()
    try:
        params.write_text(compose_text(["protocol=tiny", "dynamics=tiny", *overrides], project))
        r = subprocess.run([sys.executable, "stages/rollouts.py"], cwd=project, capture_output=True, text=True)
    finally:
        params.write_text(before)
    assert r.returncode == 2 and re.search(message, r.stderr), r.stderr[-2000:]
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert not (project / "data" / "rollouts").exists()
    assert not list((project / "data").glob(".rollouts.tmp-*")) if (project / "data").exists() else True


def test_closed_pipe_ends_the_cli_quietly():
    """`wmeval weights list | head -1`: the reader closes the pipe; no BrokenPipeError traceback, status 0."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = subprocess.run(["bash", "-o", "pipefail", "-c", "wmeval weights list | head -c 1 > /dev/null"],
                       capture_output=True, text=True, env=env)
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr[-2000:]
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_killed_stages_temporary_folder_is_ignored_by_git(root):
    r = subprocess.run(["git", "check-ignore", "-q", "data/.features.tmp-abc123/x.parquet"], cwd=root)
    assert r.returncode == 0


BAD_MODELS = '''
import sys
import numpy as np
import torch
from wmeval.models import Prediction


class RaisesInInit:
    def __init__(self):
        raise RuntimeError("checkpoint not found")


class Exits:
    def predict(self, history, actions, num_samples, rng):
        sys.exit(3)


class BFloat16:
    def predict(self, history, actions, num_samples, rng):
        f = np.repeat(history.frames[:, None, -1:], actions.shape[1], axis=2)
        return Prediction(frames=torch.from_numpy(f.astype(np.float32)).to(torch.bfloat16))
'''

#: (case, the model class, exit status, the message's words (None: the stage succeeds)).
MODEL_CASES = [
    ("model constructor raises", "RaisesInInit", 2,
     r"models\.blobs\.entries\.m: badmodels\.RaisesInInit\(\.\.\.\) raised RuntimeError: checkpoint not found"),
    ("sys.exit inside predict", "Exits", 2, r"model 'm' on world 'blobs': predict\(\) raised SystemExit: 3"),
    ("bfloat16 tensor output", "BFloat16", 0, None),
]


@pytest.fixture(scope="module")
def model_project(tmp_path_factory) -> Path:
    proj = make_project(tmp_path_factory.mktemp("relm") / "proj",
                        ["protocol=tiny", "dynamics=tiny", "worlds=[blobs]", "models=[blobs]"])
    (proj / "badmodels.py").write_text(BAD_MODELS)
    dvc = proj / "dvc.yaml"
    dvc.write_text(dvc.read_text().replace("      - stages/rollouts.py\n", "      - stages/rollouts.py\n      - badmodels.py\n", 1))
    return proj


@pytest.mark.parametrize(("case", "cls", "status", "message"), MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_a_misbehaving_model(model_project, case, cls, status, message):
    import re
    import shutil

    proj = model_project
    (proj / "params.yaml").write_text(compose_text(["protocol=tiny", "dynamics=tiny", "worlds=[blobs]", "models=[blobs]",
                                                    f"+models.blobs.entries.m._target_=badmodels.{cls}"], proj))
    r = subprocess.run([sys.executable, "stages/rollouts.py"], cwd=proj, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(proj)})
    try:
        assert r.returncode == status, r.stderr[-2000:]
        assert "Traceback" not in r.stderr, r.stderr[-2000:]
        if message is None:
            assert (proj / "data" / "rollouts" / "blobs" / "m.parquet").is_file()
        else:
            assert re.search(message, r.stderr.strip().splitlines()[-1]), r.stderr[-2000:]
            assert not (proj / "data" / "rollouts").exists()
    finally:
        shutil.rmtree(proj / "data", ignore_errors=True)


def test_weights_dir_that_is_a_file(tmp_path):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "WMEVAL_WEIGHTS_DIR": str(tmp_path / "w")}
    (tmp_path / "w").write_text("not a folder")
    for action in ("list", "fetch"):
        r = subprocess.run(["wmeval", "weights", action], capture_output=True, text=True, env=env)
        assert r.returncode == 2 and "$WMEVAL_WEIGHTS_DIR names a file, not a folder" in r.stderr, r.stderr[-2000:]
        assert "Traceback" not in r.stderr


def test_episodes_out_that_is_a_file(tmp_path):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    f = tmp_path / "existing.txt"
    f.write_text("keep me")
    r = subprocess.run(["wmeval", "episodes", "blobs", "--out", str(f)], capture_output=True, text=True, env=env,
                       cwd=ROOT)
    assert r.returncode == 2 and "exists and is not a folder" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert f.read_text() == "keep me"


@pytest.mark.parametrize(("manifest", "message"), [
    ({"format": "wmeval-imported-v1", "world": "blobs", "horizon": "three"}, "horizon = 'three'; expected a positive"),
    ({"format": "wmeval-imported-v1", "world": "blobs", "horizon": 10, "stochastic": "yes"}, "stochastic = 'yes'"),
], ids=["manifest horizon not an integer", "manifest stochastic not a boolean"])
def test_imported_manifest_types(tmp_path, manifest, message):
    import json

    from wmeval.core.errors import ModelOutputError
    from wmeval.models import ImportedModel
    from wmeval.models.imported import FORMAT

    (tmp_path / "manifest.json").write_text(json.dumps({**manifest, "format": FORMAT}))
    with pytest.raises(ModelOutputError, match=message):
        ImportedModel(str(tmp_path))
