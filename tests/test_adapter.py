"""User adapters (Hydra _target_) and imported predictions, with their bad inputs."""

import json
import subprocess
import sys

import numpy as np
import pytest

from wmeval.core.config import ProtocolConfig, WorldConfig
from wmeval.core.errors import ConfigError, ModelOutputError
from wmeval.models import Prediction
from wmeval.models.imported import write_predictions
from wmeval.rollouts import export_episodes, make_episodes, run_world
from wmeval.tables import tensor_numpy
from wmeval.worlds import build_world

BLOBS = WorldConfig(name="blobs", kind="blobs", params={})
PROTO = ProtocolConfig(name="t", n_episodes=3, horizon=2, num_samples=2, num_futures=2, n_random_plans=1,
                       teacher_forced_plan="random_0", frame_dtype="float32", seed=0)


class Returns:
    """An adapter that returns whatever it was given (for the bad-output tests)."""

    def __init__(self, kind: str, stochastic: bool = False) -> None:
        self.kind, self.stochastic = kind, stochastic

    def predict(self, history, actions, num_samples, rng):
        n, h = actions.shape[:2]
        f = np.zeros((n, num_samples, h, 48, 48, 1), np.float32)
        if self.kind == "ok":
            return Prediction(frames=f)
        if self.kind == "shape":
            return Prediction(frames=f[:, :, :1])
        if self.kind == "dtype":
            return Prediction(frames=f.astype(np.int64))
        if self.kind == "range":
            f[1, 0, 0, 5, 6, 0] = 1.5
            return Prediction(frames=f)
        if self.kind == "nan":
            f[2, 0, 1, 0, 0, 0] = np.nan
            return Prediction(frames=f)
        if self.kind == "inf_state":
            s = np.zeros((n, num_samples, h, 2))
            s[0, 0, 0, 1] = np.inf
            return Prediction(states=s)
        if self.kind == "tuple":
            return f
        if self.kind == "raise":
            raise RuntimeError("model exploded")
        raise AssertionError(self.kind)


def _run(kind):
    return run_world(BLOBS, {"m": {"_target_": "test_adapter.Returns", "kind": kind}}, PROTO, progress=False)


def test_good_adapter_via_target():
    tables = _run("ok")
    assert tables["m"].num_rows == 3 * 1 * 2 * 4  # N * S * H * (3 plans open loop + teacher forced)


@pytest.mark.parametrize("kind, message", [
    ("shape", r"model 'm' on world 'blobs' \(open_loop, plan random_0\) frames: shape \(3, 1, 1, 48, 48, 1\), expected \(3, 1, 2, 48, 48, 1\)"),
    ("dtype", r"frames: dtype int64, expected uint8"),
    ("range", r"frames: out of range \[0, 1\]: value 1.5 at index \(1, 0, 0, 5, 6, 0\)"),
    ("nan", r"frames: non-finite value nan at index \(2, 0, 1, 0, 0, 0\)"),
    ("inf_state", r"states: non-finite value inf at index \(0, 0, 0, 1\)"),
    ("tuple", r"predict\(\) returned ndarray, expected wmeval.models.Prediction"),
    ("raise", r"model 'm' on world 'blobs': predict\(\) raised RuntimeError: model exploded"),
])
def test_bad_adapter_outputs_are_named(kind, message):
    with pytest.raises(ModelOutputError, match=message):
        _run(kind)


def test_bad_targets_are_config_errors():
    with pytest.raises(ConfigError, match=r"models.blobs.entries.m._target_ = 'no.such.Model' cannot be imported"):
        run_world(BLOBS, {"m": {"_target_": "no.such.Model"}}, PROTO, progress=False)
    with pytest.raises(ConfigError, match=r"models.blobs.entries.m has no _target_"):
        run_world(BLOBS, {"m": {"mode": "mean"}}, PROTO, progress=False)
    with pytest.raises(ConfigError, match="could not instantiate"):
        run_world(BLOBS, {"m": {"_target_": "wmeval.models.BlobReferenceModel", "mode": "sideways"}},
                  PROTO, progress=False)


def test_worked_example_persistence_model(root, monkeypatch):
    monkeypatch.syspath_prepend(str(root / "examples" / "user_model"))
    tables = run_world(BLOBS, {"persistence": {"_target_": "persistence.PersistenceModel"}}, PROTO, progress=False)
    t = tables["persistence"]
    assert "state" not in t.column_names
    frames = tensor_numpy(t, "frame").reshape(3, 4, 2, 48, 48, 1)  # rows: plan blocks of (N, S=1, H)
    eps = make_episodes(build_world("blobs", {"kind": "blobs", "params": {}}), PROTO)
    first = build_world("blobs", {"kind": "blobs"}).render(eps.s0)
    # Blocks are ordered plan by plan; within one, frame (episode e, step t) equals the initial frame.
    block = frames.reshape(4, 3, 2, 48, 48, 1)[0]
    np.testing.assert_allclose(block[:, 1], first, atol=1e-7)


# ----------------------------------------------------------------------------- imported

def _export_sharp_a(tmp_path, **overrides):
    """Predictions of the built-in sharp-A model, written in the import layout."""
    models = {"sharp-A": {"_target_": "wmeval.models.BlobReferenceModel", "mode": "sharp-A"}}
    tables = run_world(BLOBS, models, PROTO, progress=False)
    t = tables["sharp-A"].to_pandas()
    arrays = {}
    for (regime, plan), g in t.groupby(["regime", "plan"], observed=True):
        g = g.sort_values(["episode", "sample", "t"])
        frames = np.stack(g["frame"].to_numpy()).reshape(3, 1, 2, 48, 48, 1)
        arrays[(regime, plan)] = {"episode": np.arange(3), "frames": frames}
    for fn in overrides.values():
        fn(arrays)
    d = tmp_path / "preds"
    write_predictions(d, "blobs", PROTO.horizon, False, arrays)
    return tables, d


def test_imported_predictions_round_trip(tmp_path):
    tables, d = _export_sharp_a(tmp_path)
    got = run_world(BLOBS, {"imp": {"_target_": "wmeval.models.ImportedModel", "path": str(d)}}, PROTO,
                    progress=False)
    np.testing.assert_allclose(tensor_numpy(got["imp"], "frame"), tensor_numpy(tables["sharp-A"], "frame"))


def _imported(d):
    return run_world(BLOBS, {"imp": {"_target_": "wmeval.models.ImportedModel", "path": str(d)}}, PROTO,
                     progress=False)


def _shuffle(arrays):
    a = arrays[("open_loop", "left")]
    a["episode"] = a["episode"][::-1].copy()
    a["frames"] = a["frames"][::-1].copy()


def test_imported_episode_order_does_not_matter(tmp_path):
    tables, d = _export_sharp_a(tmp_path, shuffle=_shuffle)
    np.testing.assert_allclose(tensor_numpy(_imported(d)["imp"], "frame"), tensor_numpy(tables["sharp-A"], "frame"))


@pytest.mark.parametrize("name, mutate, message", [
    ("missing_episode", lambda a: a[("open_loop", "left")].update(
        episode=np.arange(2), frames=a[("open_loop", "left")]["frames"][:2]),
     r"open_loop/left.npz: array 'episode': 1 evaluation episodes are missing, e.g. \[2\]"),
    ("dup_episode", lambda a: a[("open_loop", "left")].update(episode=np.array([0, 0, 1])),
     r"open_loop/left.npz: array 'episode': id 0 appears more than once"),
    ("horizon", lambda a: a[("open_loop", "right")].update(frames=a[("open_loop", "right")]["frames"][:, :, :1]),
     r"open_loop/right.npz: array 'frames' has horizon 1 \(axis 2\), protocol.horizon = 2"),
    ("nan", lambda a: a[("teacher_forced", "random_0")]["frames"].__setitem__((1, 0, 0, 0, 0, 0), np.nan),
     r"teacher_forced/random_0.npz: array 'frames': non-finite value nan at index \(1, 0, 0, 0, 0, 0\)"),
    ("range", lambda a: a[("open_loop", "random_0")]["frames"].__setitem__((0, 0, 1, 2, 3, 0), -0.5),
     r"open_loop/random_0.npz: array 'frames': out of range \[0, 1\]: value -0.5"),
    ("missing_plan", lambda a: a.pop(("open_loop", "right")),
     r"open_loop/right.npz: missing \(plan 'right', regime open_loop\)"),
])
def test_imported_bad_inputs_name_file_array_value(tmp_path, name, mutate, message):
    _, d = _export_sharp_a(tmp_path, bad=mutate)
    with pytest.raises(ModelOutputError, match=message):
        _imported(d)


def test_imported_manifest_checks(tmp_path):
    _, d = _export_sharp_a(tmp_path)
    m = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**m, "horizon": 5}))
    with pytest.raises(ModelOutputError, match=r"manifest.json: horizon = 5, but protocol.horizon = 2"):
        _imported(d)
    (d / "manifest.json").write_text(json.dumps({**m, "world": "pendulum"}))
    with pytest.raises(ModelOutputError, match=r"world = 'pendulum', but it is configured under world 'blobs'"):
        _imported(d)
    (d / "manifest.json").unlink()
    with pytest.raises(ModelOutputError, match=r"manifest.json: missing"):
        _imported(d)


def test_export_episodes_matches_the_protocol(tmp_path):
    export_episodes(BLOBS, PROTO, tmp_path / "ep")
    eps = make_episodes(build_world("blobs", {"kind": "blobs"}), PROTO)
    with np.load(tmp_path / "ep" / "episodes.npz") as z:
        np.testing.assert_array_equal(z["state"], eps.s0)
    np.testing.assert_array_equal(np.load(tmp_path / "ep" / "plans" / "left.npy"), eps.plan("left").actions)
    proto = json.loads((tmp_path / "ep" / "protocol.json").read_text())
    assert proto["teacher_forced_plan"] == "random_0" and proto["horizon"] == 2


def test_episodes_cli(tmp_path, root, monkeypatch):
    from wmeval.cli import main

    monkeypatch.chdir(root)
    assert main(["episodes", "blobs", "--out", str(tmp_path / "e")]) == 0
    proto = json.loads((tmp_path / "e" / "protocol.json").read_text())
    assert proto["world"] == "blobs" and set(proto["plans"]) == {"random_0", "random_1", "left", "right"}
    assert main(["episodes", "mars", "--out", str(tmp_path / "m")]) == 2


@pytest.mark.slow
def test_failed_rollouts_stage_exits_nonzero_and_writes_nothing(tmp_path, root):
    """A bad model output stops the stage script: exit 2, message, no data/rollouts."""
    from conftest import make_project

    proj = make_project(tmp_path / "p", ["protocol=tiny", "dynamics=tiny",
                                         "+models.blobs.entries.bad._target_=badmodel.Bad"])
    (proj / "badmodel.py").write_text(
        "import numpy as np\nfrom wmeval.models import Prediction\n"
        "class Bad:\n    def predict(self, h, a, k, rng):\n"
        "        return Prediction(frames=np.full((a.shape[0], k, a.shape[1], 48, 48, 1), 2.0))\n")
    dvc = proj / "dvc.yaml"                       # the model's module is a declared dep of the rollouts stage
    dvc.write_text(dvc.read_text().replace("      - stages/rollouts.py\n", "      - stages/rollouts.py\n      - badmodel.py\n", 1))
    r = subprocess.run([sys.executable, "stages/rollouts.py"], cwd=proj, capture_output=True, text=True,
                       env={**__import__("os").environ, "PYTHONPATH": str(proj)})
    assert r.returncode == 2, r.stderr
    assert "model 'bad' on world 'blobs'" in r.stderr and "out of range [0, 1]: value 2.0" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (proj / "data" / "rollouts").exists()
    assert not any(p.name.startswith(".rollouts.tmp") for p in (proj / "data").iterdir()) if (proj / "data").exists() else True
