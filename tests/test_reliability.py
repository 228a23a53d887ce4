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
