"""Recorded episodes as a ground-truth world: the format, the world, and the Minari and video converters."""

from __future__ import annotations

import numpy as np
import pytest

from wmeval.core.config import ProtocolConfig, WorldConfig
from wmeval.core.errors import ConfigError, WmevalError
from wmeval.rollouts import run_world
from wmeval.tables import tensor_numpy
from wmeval.worlds import DatasetWorld
from wmeval.worlds.base import capabilities

PROTO = ProtocolConfig(name="t", n_episodes=3, horizon=4, num_samples=2, num_futures=2, n_random_plans=2,
                       teacher_forced_plan="random_0", frame_dtype="uint8", seed=0)


def recordings(n=5, length=9, states=True, seed=0):
    """Recordings whose frame t of episode e is uniform with value 10 e + t (so every row is identifiable)."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(n):
        frames = np.stack([np.full((6, 8, 1), 10 * e + t, np.uint8) for t in range(length)])
        ep = {"frames": frames, "actions": rng.integers(0, 3, (length - 1, 1)),
              "rewards": np.arange(length - 1, dtype=float) + e}
        if states:
            ep["states"] = np.stack([[e, t] for t in range(length)]).astype(float)
        out.append(ep)
    return out


def test_round_trip_and_world(tmp_path):
    from wmeval.worlds.dataset import write_dataset

    recs = recordings()
    write_dataset(tmp_path / "d.parquet", recs, "synthetic")
    w = DatasetWorld(name="rec", path=str(tmp_path / "d.parquet"), start_step=2)
    assert capabilities(w) == {"episodes", "state"} and w.frame_shape == (6, 8, 1) and w.action_dim == 1
    s0 = w.initial_states(3, np.random.default_rng(0))
    eps = sorted({int(v) for v in w.observe(s0)[:, 0]})
    assert len(eps) == 3                                                 # one recording per episode
    assert (w.observe(s0)[:, 1] == 2).all()                              # windows start at start_step
    (plan,) = w.plans(3, 4, 2, np.random.default_rng(0))                 # random plans cannot be acted out
    assert plan.name == "recorded"
    for i, e in enumerate(w.observe(s0)[:, 0].astype(int)):
        np.testing.assert_array_equal(plan.actions[i, :, 0], recs[e]["actions"][2:6, 0])
    s1 = w.step(s0, plan.actions[:, 0], None)
    np.testing.assert_array_equal(w.render(s1)[:, 0, 0, 0] * 255, 10 * w.observe(s0)[:, 0] + 3)
    np.testing.assert_array_equal(w.true_reward(s1), w.observe(s0)[:, 0] + 2)
    with pytest.raises(WmevalError, match="cannot branch: only the recorded actions"):
        w.step(s0, plan.actions[:, 0] + 1, None)
    assert w.action_bins == [-0.5, 0.5, 1.5, 2.5]


def test_refusals_name_the_file(tmp_path):
    from wmeval.worlds import build_world
    from wmeval.worlds.dataset import write_dataset

    f = tmp_path / "d.parquet"
    write_dataset(f, recordings(n=2, length=4), "synthetic")
    w = DatasetWorld(path=str(f))
    with pytest.raises(WmevalError, match=r"n_episodes = 3, but the dataset holds 2 recordings"):
        w.initial_states(3, np.random.default_rng(0))
    w.initial_states(2, np.random.default_rng(0))
    with pytest.raises(WmevalError, match=r"episode \d is too short for start_step 0 and protocol.horizon 4 "
                                          r"\(needs 5 frames\)"):
        w.plans(2, 4, 0, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="no such dataset file"):
        build_world("d", {"kind": "dataset", "params": {"path": str(tmp_path / "nope.parquet")}})
    (tmp_path / "x.parquet").write_bytes(b"junk")
    with pytest.raises(ConfigError, match=r"x\.parquet: cannot be read as Parquet"):
        build_world("d", {"kind": "dataset", "params": {"path": str(tmp_path / "x.parquet")}})


def test_persistence_on_recorded_data(tmp_path):
    """The observation protocol on recordings: the recorded future is the one realized future, the teacher-forced
    rows follow it, and the controls that need branching are refused by name."""
    from wmeval.worlds.dataset import write_dataset

    write_dataset(tmp_path / "d.parquet", recordings(), "synthetic")
    w = DatasetWorld(name="rec", path=str(tmp_path / "d.parquet"))
    cfg = WorldConfig("rec", "dataset", {"path": str(tmp_path / "d.parquet")})
    tables = run_world(cfg, {"p": {"_target_": "wmeval.models.PersistenceModel"}}, PROTO, progress=False, world=w)
    gt = tables["ground_truth"].to_pandas()
    assert set(gt.plan) == {"recorded"} and set(gt["sample"]) == {0}
    p = tables["p"].to_pandas()
    assert set(p.regime) == {"open_loop", "teacher_forced"}
    tf = p[p.regime == "teacher_forced"].sort_values(["episode", "t"])
    real = gt.set_index(["episode", "t"]).frame
    for _, r in tf.iterrows():                                           # one step behind the recording
        np.testing.assert_array_equal(np.asarray(r.frame), np.asarray(real[(r.episode, r.t - 1)]))
    assert tensor_numpy(tables["p"], "state").shape[1] == 2
    for target in ("OracleNoiseModel", "ShuffledFuturesModel"):
        with pytest.raises(ConfigError, match="rec cannot branch"):
            run_world(cfg, {"m": {"_target_": f"wmeval.models.{target}"}}, PROTO, progress=False, world=w)


@pytest.mark.slow
def test_from_minari_dataset_made_with_data_collector(tmp_path, monkeypatch):
    """A Minari dataset recorded here with DataCollector (CartPole with its rendered frames beside the state)."""
    minari = pytest.importorskip("minari")
    pytest.importorskip("jax")  # minari's DataCollector needs minari[create]
    import gymnasium as gym

    from wmeval.worlds.convert import from_minari
    from wmeval.worlds.gymnasium import resize_frame

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", render_mode="rgb_array"), render_only=False)
    env = minari.DataCollector(env, data_format="arrow")
    for seed in range(4):
        env.reset(seed=seed)
        for _ in range(12):
            *_, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                break
    env.create_dataset(dataset_id="cartpole/wmeval-test-v0", algorithm_name="random", author="wmeval",
                       author_email="wmeval@example.invalid", code_permalink="tests/test_dataset.py",
                       description="test recordings")
    out = tmp_path / "cartpole.parquet"
    assert from_minari("cartpole/wmeval-test-v0", out, frame_height=40, frame_width=60) == 4
    w = DatasetWorld(name="cp", path=str(out))
    assert capabilities(w) == {"episodes", "state"} and w.frame_shape == (40, 60, 3) and w.state_dim == 4
    first = next(minari.load_dataset("cartpole/wmeval-test-v0").iterate_episodes())
    s0 = np.array([[0.0]])                                               # row 0: episode 0, t = 0
    np.testing.assert_array_equal(w.render(s0)[0] * 255,
                                  resize_frame(first.observations["pixels"][0], 40, 60).astype(np.float32))
    np.testing.assert_allclose(w.observe(s0)[0], first.observations["state"][0], rtol=1e-6)
    with pytest.raises(WmevalError, match=r"observations have no 'frames' entry"):
        from_minari("cartpole/wmeval-test-v0", tmp_path / "x.parquet", frame_key="frames")
    with pytest.raises(WmevalError, match=r"Minari dataset 'nope/none-v0' cannot be loaded"):
        from_minari("nope/none-v0", tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()


def _write_video(path, frames, rate=10):
    import av

    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264rgb", rate=rate)
        s.width, s.height, s.pix_fmt = frames.shape[2], frames.shape[1], "rgb24"
        s.options = {"crf": "0", "preset": "ultrafast"}                   # lossless
        for f in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def test_from_videos(tmp_path):
    pytest.importorskip("av")
    from wmeval.worlds.convert import from_videos

    rng = np.random.default_rng(0)
    vids = tmp_path / "vids"
    vids.mkdir()
    want = {}
    for name in ("a", "b", "c"):
        frames = rng.integers(0, 256, (7, 16, 24, 3), dtype=np.uint8)
        _write_video(vids / f"{name}.mp4", frames)
        np.save(vids / f"{name}.npy", rng.uniform(-1, 1, (6, 2)))
        want[name] = frames
    out = tmp_path / "v.parquet"
    assert from_videos(vids, out) == 3
    w = DatasetWorld(path=str(out))
    assert w.frame_shape == (16, 24, 3) and w.action_dim == 2 and capabilities(w) == {"episodes"}
    np.testing.assert_array_equal(np.rint(w.render(np.array([[7.0 + 3]]))[0] * 255), want["b"][3])   # lossless
    np.save(vids / "c.npy", np.zeros((5, 2)))
    with pytest.raises(WmevalError, match=r"c\.npy: 5 actions for 7 frames of c\.mp4"):
        from_videos(vids, tmp_path / "y.parquet")
    (vids / "c.npy").unlink()
    with pytest.raises(WmevalError, match=r"c\.mp4: its actions c\.npy are missing"):
        from_videos(vids, tmp_path / "y.parquet")
    assert not (tmp_path / "y.parquet").exists()


@pytest.mark.slow
def test_a_minari_dataset_goes_through_the_pipeline(tmp_path):
    """Record with DataCollector, `wmeval dataset minari`, compose a dataset world, `dvc repro`: the rollouts stage
    first refuses an undeclared dataset file, then the scorecard has the world with the layers that apply."""
    minari = pytest.importorskip("minari")
    pytest.importorskip("jax")
    import os
    import sys
    from pathlib import Path

    import gymnasium as gym
    import pandas as pd
    from conftest import make_project, run_checked

    bin_ = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1",
           "MINARI_DATASETS_PATH": str(tmp_path / "minari")}
    os.environ["MINARI_DATASETS_PATH"] = env["MINARI_DATASETS_PATH"]
    try:
        rec = minari.DataCollector(gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", render_mode="rgb_array"),
                                                                     render_only=False), data_format="arrow")
        rec.action_space.seed(0)                  # the actions too: unseeded, they drew a new data set every run
        for seed in range(6):
            rec.reset(seed=seed)
            for _ in range(8):
                rec.step(rec.action_space.sample())
        rec.create_dataset(dataset_id="cartpole/pipeline-v0", algorithm_name="random", author="wmeval",
                           author_email="wmeval@example.invalid", code_permalink="tests/test_dataset.py",
                           description="test recordings")
    finally:
        del os.environ["MINARI_DATASETS_PATH"]
    proj = make_project(tmp_path / "proj", ["protocol=tiny", "dynamics=tiny", "bootstrap=tiny"])
    run_checked(["wmeval", "dataset", "minari", "cartpole/pipeline-v0", "--out", "datasets/cartpole.parquet",
                 "--frame-height", "40", "--frame-width", "60"], proj, env)
    run_checked(["wmeval", "compose", "protocol=tiny", "dynamics=tiny", "bootstrap=tiny", "worlds=[dataset]",
                 "models=[dataset]",
                 "worlds.dataset.params.path=datasets/cartpole.parquet"], proj, env)
    r = run_checked(["dvc", "repro"], proj, env, check=False)
    assert r.returncode != 0 and "worlds.dataset.params.path: the rollouts stage reads datasets/cartpole.parquet" \
        in r.stderr + r.stdout
    dvc = proj / "dvc.yaml"
    dvc.write_text(dvc.read_text().replace("      - stages/rollouts.py\n",
                                           "      - stages/rollouts.py\n      - datasets\n", 1))
    run_checked(["dvc", "repro"], proj, env)
    card = (proj / "reports" / "scorecard.md").read_text()
    assert "windows of datasets/cartpole.parquet (6 recordings; Minari dataset cartpole/pipeline-v0" in card
    assert "dynamics, control and probe layers: not applicable: dataset cannot branch" in card
    stats = pd.read_parquet(proj / "data" / "stats" / "episodes.parquet")
    assert set(stats.source) == {"ground_truth", "persistence"}
    assert {"pixel_mse", "state_mse"} <= set(stats.metric)


def test_imported_predictions_as_video(tmp_path):
    """ImportedModel reads mp4 frames (one video per episode and sample), checked against the manifest."""
    pytest.importorskip("av")
    import json

    from test_adapter import _export_sharp_a, _imported

    tables, d = _export_sharp_a(tmp_path)
    for npz in sorted(d.glob("*/*.npz")):                                # frames -> videos, episode ids stay
        with np.load(npz) as z:
            frames, ep = z["frames"], z["episode"]
        (npz.parent / npz.stem).mkdir()
        for i, e in enumerate(ep):
            rgb = np.repeat(np.rint(frames[i, 0] * 255 if frames.dtype != np.uint8 else frames[i, 0]).astype(
                np.uint8), 3, axis=-1)
            _write_video(npz.parent / npz.stem / f"{e}_0.mp4", rgb, rate=15)
        np.savez_compressed(npz, episode=ep)
    manifest = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**manifest, "frame_rate": 15}))
    got = _imported(d)
    np.testing.assert_allclose(tensor_numpy(got["imp"], "frame"), tensor_numpy(tables["sharp-A"], "frame"), atol=1)
    (d / "manifest.json").write_text(json.dumps({**manifest, "frame_rate": 30}))
    from wmeval.core.errors import ModelOutputError

    with pytest.raises(ModelOutputError, match=r"open_loop/\w+/0_0\.mp4: frame rate 15, but \S+manifest\.json "
                                               r"declares 30"):
        _imported(d)
    (d / "manifest.json").write_text(json.dumps({**manifest, "frame_rate": 15}))
    short = np.zeros((1, 48, 48, 3), np.uint8)
    _write_video(d / "open_loop" / "left" / "1_0.mp4", short, rate=15)
    with pytest.raises(ModelOutputError, match=r"open_loop/left/1_0\.mp4: 1 frames, but protocol\.horizon = 2"):
        _imported(d)
    _write_video(d / "open_loop" / "left" / "1_0.mp4", np.zeros((2, 32, 32, 3), np.uint8), rate=15)
    with pytest.raises(ModelOutputError, match=r"1_0\.mp4: frames are 32x32, but the world's are 48x48"):
        _imported(d)
