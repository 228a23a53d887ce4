import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wmeval.cli import main
from wmeval.core.config import compose_text, load_params, validate_params
from wmeval.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def options(group):
    return sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))


def test_committed_params_yaml_is_in_sync(root, monkeypatch, capsys):
    monkeypatch.chdir(root)
    assert main(["compose", "--check"]) == 0
    assert (root / "params.yaml").read_text() == compose_text([], root)


def test_compose_check_reports_stale_file_with_diff(root, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(root)
    stale = tmp_path / "params.yaml"
    stale.write_text((root / "params.yaml").read_text().replace("horizon: 10", "horizon: 11"))
    assert main(["compose", "--check", "--output", str(stale)]) == 1
    out = capsys.readouterr()
    assert "-  horizon: 11" in out.out and "+  horizon: 10" in out.out and "is stale" in out.err
    assert main(["compose", "protocol.horizon=11", "--check", "--output", str(stale)]) == 0


def test_compose_writes_what_dvc_writes(root, tmp_path, monkeypatch):
    """`wmeval compose` goes through DVC's own compose_and_dump: identical bytes."""
    from dvc.utils.hydra import compose_and_dump

    monkeypatch.chdir(root)
    overrides = ["protocol.horizon=7", "worlds=[blobs]", "models=[blobs]"]
    out = tmp_path / "mine.yaml"
    assert main(["compose", *overrides, "--output", str(out)]) == 0
    ref = tmp_path / "params.yaml"
    compose_and_dump(ref, str(root / "conf"), None, "config", str(root), overrides)
    assert out.read_bytes() == ref.read_bytes()
    assert yaml.safe_load(out.read_text())["protocol"]["horizon"] == 7


@pytest.mark.parametrize("world", options("worlds"))
def test_every_world_and_models_option_composes_and_validates(root, world):
    p = validate_params(yaml.safe_load(compose_text([f"worlds=[{world}]", f"models=[{world}]"], root)))
    assert list(p.worlds) == [world] and p.worlds[world].name == world


@pytest.mark.parametrize("group", ["protocol", "encoder", "bootstrap"])
def test_every_single_choice_option_composes_and_validates(root, group):
    needs = {"i3d": ["protocol.horizon=16"]}  # 16-frame clips need a 16-step horizon
    for opt in options(group):
        raw = yaml.safe_load(compose_text([f"{group}={opt}", *needs.get(opt, [])], root))
        assert raw[group]["name"] == opt  # explicit name field, no ${hydra:...}
        validate_params(raw)


def test_every_option_file_has_a_name_field():
    for f in (ROOT / "conf").glob("*/*.yaml"):
        assert "name" in yaml.safe_load(f.read_text()), f


@pytest.mark.parametrize("override, message", [
    ("+protocol.n_episode=3", r"protocol: unknown key\(s\) \['n_episode'\]"),
    ("protocol.horizon=ten", r"protocol.horizon = 'ten' \(str\); expected int"),
    ("protocol.horizon=0", r"protocol.horizon = 0; must be >= 1"),
    ("protocol.frame_dtype=float16", r"protocol.frame_dtype = 'float16'; expected one of \['uint8', 'float32'\]"),
    ("worlds=[blobs]", r"models.pendulum.world = 'pendulum' is not a selected world"),
    ("models.blobs.baseline=nobody", r"models.blobs.baseline = 'nobody' is not one of"),
    ("bootstrap.confidence_level=1.5", r"bootstrap.confidence_level = 1.5"),
    ("+models.blobs.entries.ground_truth._target_=x.Y", r"'ground_truth' is reserved"),
    ("+worlds.blobs.dynamics.horizn=3", r"worlds.blobs.dynamics: unknown key\(s\) \['horizn'\]"),
    ("worlds.blobs.dynamics.counterfactual_horizon=9", r"counterfactual_horizon = 9 exceeds"),
    ("dynamics.probe_windows=[0]", r"probe_windows = \[0\]"),
    ("dynamics.probe_windows=[1,1]", r"expected distinct integers"),
    ("dynamics.n_random_plans=0", r"n_random_plans = 0"),
    ("encoder=i3d", r"embeds clips of 16 frames with stride 1 \(steps 1..16\), longer than protocol.horizon = 10"),
    ("+models.blobs.entries={a/b: {_target_: x.Y}}", r"name 'a/b' must match"),
])
def test_bad_config_is_rejected_with_key_and_value(root, override, message):
    with pytest.raises(ConfigError, match=message):
        validate_params(yaml.safe_load(compose_text([override], root)))


def test_cli_errors_exit_2_without_traceback(root):
    r = subprocess.run([sys.executable, "-m", "wmeval.cli", "compose", "protocol.horizon=0", "--check"],
                       cwd=root, capture_output=True, text=True)
    assert r.returncode == 2 and "protocol.horizon = 0" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "wmeval.cli", "compose", "nosuchgroup=x"],
                       cwd=root, capture_output=True, text=True)
    assert r.returncode == 2 and "cannot compose" in r.stderr


def test_load_params_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="missing; run `wmeval compose`"):
        load_params(tmp_path / "params.yaml")


def test_no_params_key_is_left_out_of_dvcs_run_cache_hash(root):
    """DVC's run cache drops keys named size/nfiles from a stage's params hash: none may exist, anywhere."""
    import yaml

    from wmeval.core.config import DVC_UNHASHED_KEYS, unhashed_keys

    assert unhashed_keys(yaml.safe_load((root / "params.yaml").read_text())) == []
    for f in sorted((root / "conf").rglob("*.yaml")):
        assert unhashed_keys(yaml.safe_load(f.read_text())) == [], f
    assert set(DVC_UNHASHED_KEYS) == {"size", "nfiles"}


@pytest.mark.parametrize("path", [("worlds", "blobs", "params", "size"), ("models", "blobs", "entries", "mean", "nfiles")])
def test_a_key_named_size_or_nfiles_is_refused(root, path):
    import yaml

    from wmeval.core.config import compose_text

    raw = yaml.safe_load(compose_text([], root))
    node = raw
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = 3
    with pytest.raises(ConfigError, match=r"\.".join(path) + ".*run-cache hash.*rename"):
        validate_params(raw)
