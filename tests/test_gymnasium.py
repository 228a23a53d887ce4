"""Gymnasium environments as ground-truth worlds: capabilities, seeding, branching, frames, generic models."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

pytest.importorskip("gymnasium")

from wmeval.core.config import ProtocolConfig, WorldConfig  # noqa: E402
from wmeval.core.errors import ConfigError, WmevalError  # noqa: E402
from wmeval.rollouts import run_world  # noqa: E402
from wmeval.rollouts.episodes import make_episodes  # noqa: E402
from wmeval.tables import select  # noqa: E402
from wmeval.worlds import GymnasiumWorld, build_world  # noqa: E402
from wmeval.worlds.base import capabilities, missing  # noqa: E402

PROTO = ProtocolConfig(name="t", n_episodes=3, horizon=4, num_samples=2, num_futures=2, n_random_plans=1,
                       teacher_forced_plan="random_0", frame_dtype="uint8", seed=0)


def cartpole(**kw) -> GymnasiumWorld:
    return GymnasiumWorld(name="cartpole", env_id="CartPole-v1", frame_height=40, frame_width=60, **kw)


def test_cartpole_capabilities_actions_and_plans():
    w = cartpole()
    assert capabilities(w) == {"episodes", "branch", "state"}
    assert (w.state_dim, w.action_dim, w.frame_shape) == (4, 1, (40, 60, 3))
    plans = w.plans(3, 5, 2, np.random.default_rng(0))
    assert [p.name for p in plans] == ["random_0", "random_1", "a0", "a1"]
    assert set(np.unique(plans[0].actions)) <= {0.0, 1.0} and plans[3].actions.shape == (3, 5, 1)
    assert w.counterfactual_pairs() == [("a0", "a1")]
    assert missing(w, "branch", "state") is None and missing(w, "stochastic") == \
        "cartpole cannot draw random transitions"


def test_a_software_rendered_world_is_described_without_importing_torch(tmp_path):
    """A stage that only builds a classic-control world (statistics) does not import torchvision and torch (about
    2.5 s); its description names the same torchvision version as the module's own, local label included.
    MuJoCo's worlds still import torchvision before their environment makes a GL context."""
    import subprocess
    import sys

    code = """
import json, sys
from wmeval.worlds import build_world
w = build_world("g", {"kind": "gymnasium", "env_id": "CartPole-v1", "frame_height": 32, "frame_width": 48})
d = w.describe()
print(json.dumps(["torch" in sys.modules, d["versions"]["torchvision"]]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    import torchvision

    loaded, version = json.loads(r.stdout.strip().splitlines()[-1])
    assert loaded is False and version == torchvision.__version__, r.stdout
    from wmeval.worlds.gymnasium import _import_gymnasium, _software_rendered

    gym = _import_gymnasium()
    assert _software_rendered(gym, "Acrobot-v1") and _software_rendered(gym, "ALE/Pong-v5")
    assert not _software_rendered(gym, "HalfCheetah-v5") and not _software_rendered(gym, "not-an-id-v0")


def test_episodes_are_seeded_and_a_state_branches():
    w = cartpole()
    s = w.initial_states(3, np.random.default_rng(7))
    again = w.initial_states(3, np.random.default_rng(7))
    np.testing.assert_array_equal(w.observe(s), w.observe(again))        # reset(seed=...) reproduces the start
    assert not np.allclose(w.observe(s)[0], w.observe(s)[1])             # episodes differ
    left, right = np.zeros((3, 1)), np.ones((3, 1))
    a = w.step(s, left, np.random.default_rng(0))
    b = w.step(s, left, np.random.default_rng(1))                        # the same state stepped again
    c = w.step(s, right, np.random.default_rng(0))
    np.testing.assert_array_equal(w.observe(a), w.observe(b))
    np.testing.assert_array_equal(w.render(a), w.render(b))
    assert not np.allclose(w.observe(a), w.observe(c))                   # the action matters
    # Velocity moves in the pushed direction: x_dot(left) < x_dot(right).
    assert (w.observe(a)[:, 1] < w.observe(c)[:, 1]).all()
    assert w.render(a).dtype == np.float32 and w.render(a).shape == (3, 40, 60, 3)
    assert 0.0 <= w.render(a).min() and w.render(a).max() <= 1.0


def test_area_resize_is_the_block_mean():
    """The declared filter: 'area' at an exact factor 2 is the mean of each 2 x 2 block, rounded."""
    w = GymnasiumWorld(name="c", env_id="CartPole-v1", frame_height=200, frame_width=300)
    rgb = np.random.default_rng(0).integers(0, 256, (400, 600, 3), dtype=np.uint8)
    want = rgb.reshape(200, 2, 300, 2, 3).astype(float).mean(axis=(1, 3))
    np.testing.assert_array_equal(w._resize(rgb), np.round(want).astype(np.uint8))


def test_area_resize_gives_torchs_bytes_without_importing_torch():
    """The area filter is written in numpy (importing torch cost every frame-world stage 2 s) and must give the
    bytes of its peer, torch's interpolate(mode='area') rounded: down, up and mixed, odd sizes, 1 and 3
    channels, constant and saturated images. A resize that needs neither torch nor torchvision imports neither."""
    import subprocess
    import sys

    import torch

    from wmeval.worlds.gymnasium import area_resize

    rng = np.random.default_rng(7)
    for trial in range(150):
        hh, ww = (int(v) for v in rng.integers(1, 300, 2))
        sizes = (rng.integers(1, 2 * hh + 2), rng.integers(1, 2 * ww + 2)) if trial % 4 == 0 else rng.integers(1, 90, 2)
        h, w = (int(v) for v in sizes)
        x = rng.integers(0, 256, (hh, ww, 1 + 2 * (trial % 2)), dtype=np.uint8)
        if trial % 5 == 0:
            x[:] = rng.integers(0, 256)
        if trial % 7 == 0:
            x = (rng.random(x.shape) < 0.5).astype(np.uint8) * 255
        t = torch.nn.functional.interpolate(torch.from_numpy(x).permute(2, 0, 1)[None].float(), size=(h, w),
                                            mode="area")[0]
        want = t.round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()
        np.testing.assert_array_equal(area_resize(x, h, w), want, err_msg=f"{x.shape} -> {(h, w)}")
    code = ("import sys, numpy as np; from wmeval.worlds.gymnasium import resize_frame; "
            "resize_frame(np.zeros((400, 600, 3), np.uint8), 64, 48); "
            "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_box_actions_pendulum():
    w = GymnasiumWorld(name="gp", env_id="Pendulum-v1", frame_height=32, frame_width=32, grayscale=True)
    assert capabilities(w) == {"episodes", "branch", "state"} and w.frame_shape == (32, 32, 1)
    plans = w.plans(2, 3, 1, np.random.default_rng(0))
    assert [p.name for p in plans] == ["random_0", "low", "high"]
    assert np.all(np.abs(plans[0].actions) <= 2.0) and (plans[1].actions == -2.0).all()
    s = w.initial_states(2, np.random.default_rng(0))
    lo, hi = w.step(s, plans[1].actions[:, 0], None), w.step(s, plans[2].actions[:, 0], None)
    assert (w.observe(lo)[:, 2] < w.observe(hi)[:, 2]).all()             # angular velocity follows the torque


def test_ale_pong_branches_and_refuses_sticky_actions():
    pytest.importorskip("ale_py")
    w = GymnasiumWorld(name="pong", env_id="ALE/Pong-v5", env_kwargs={"repeat_action_probability": 0.0},
                       start_steps=60, counterfactual_pair=["right", "left"])
    assert capabilities(w) == {"episodes", "branch"} and w.frame_shape == (210, 160, 3) and w.state_dim == 0
    assert [n for n, _ in w._declared()] == ["noop", "fire", "right", "left", "rightfire", "leftfire"]
    s = w.initial_states(2, np.random.default_rng(0))
    acts = np.full((2, 1), 2.0)
    f1 = w.render(w.step(w.step(s, acts, None), acts, None))
    f2 = w.render(w.step(w.step(s, acts, None), acts, None))
    np.testing.assert_array_equal(f1, f2)
    assert w.observe(s) is None and w.true_reward(s).shape == (2,)
    with pytest.raises(ValueError, match=r"sticky actions \(repeat_action_probability = 0\.25.*set "
                                         r"env_kwargs\.repeat_action_probability: 0"):
        GymnasiumWorld(name="p", env_id="ALE/Pong-v5")


def test_a_world_without_snapshots_runs_each_plan_from_a_fresh_reset():
    w = cartpole(branch="none")
    assert "branch" not in capabilities(w)
    eps = make_episodes(w, PROTO)
    starts = [w.observe(eps.realized[p.name][:, 0, 0]) for p in eps.plans]
    for s in starts[1:]:
        np.testing.assert_array_equal(s, starts[0])                      # every plan from the same start
    assert eps.realized["a0"].shape[1] == 1                              # no K realized futures without branching
    with pytest.raises(WmevalError, match="cannot branch: a state was stepped twice"):
        w.step(eps.realized["a0"][:, 0, 1], np.zeros((3, 1)), None)
        w.step(eps.realized["a0"][:, 0, 1], np.zeros((3, 1)), None)
    with pytest.raises(ConfigError, match="oracle-noise needs the true future .* but cartpole cannot branch"):
        run_world(WorldConfig("cartpole", "gymnasium"), {"o": {"_target_": "wmeval.models.OracleNoiseModel"}},
                  PROTO, progress=False, world=w)


def test_a_world_without_snapshots_restarts_only_its_blocks_episodes():
    """In blocks, each plan after the first starts from new envs of the block's own starts (same seeds, the same
    frames): N x P environments in all, not N per block per plan; the tables are those of one block."""
    import dataclasses

    made = []

    def counting(world):
        fresh = world._fresh_env
        world._fresh_env = lambda: made.append(1) or fresh()
        return world

    proto = dataclasses.replace(PROTO, n_episodes=7, episode_block=3, horizon=2)
    models = {"p": {"_target_": "wmeval.models.PersistenceModel"}}
    w = counting(cartpole(branch="none"))
    blocked = run_world(WorldConfig("cartpole", "gymnasium"), models, proto, progress=False, world=w)
    n_plans = len(w.plans(1, 2, PROTO.n_random_plans, np.random.default_rng(0)))
    assert len(made) == 7 * n_plans
    whole = run_world(WorldConfig("cartpole", "gymnasium"), models, dataclasses.replace(proto, episode_block=7),
                      progress=False, world=cartpole(branch="none"))
    for name in whole:
        a, b = (t.to_pandas().sort_values(["plan", "episode", "t"]) for t in (whole[name], blocked[name]))
        np.testing.assert_array_equal(np.stack(a["frame"].to_numpy()), np.stack(b["frame"].to_numpy()))


def test_bad_params_are_named():
    for kw, words in [({"env_id": "NoSuchEnv-v0"}, r"gymnasium.make\('NoSuchEnv-v0'"),
                      ({"frame_height": 4}, "frame_height must be an integer >= 8"),
                      ({"resize_filter": "lanczos"}, "resize_filter must be one of"),
                      ({"counterfactual_pair": ["a0", "a7"]}, r"counterfactual_pair must name two declared plans")]:
        with pytest.raises(ConfigError, match=words):
            build_world("g", {"kind": "gymnasium", "params": {"env_id": "CartPole-v1", **kw}})


def test_generic_models_floor_and_calibration():
    """oracle-noise's pixel MSE is its declared noise variance (after clipping); persistence repeats the context;
    shuffled is the real future of the wrong episode."""
    w = cartpole()
    models = {"persistence": {"_target_": "wmeval.models.PersistenceModel"},
              "oracle-noise": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.05},
              "oracle-exact": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.0},
              "shuffled": {"_target_": "wmeval.models.ShuffledFuturesModel"}}
    proto = ProtocolConfig(**{**PROTO.__dict__, "n_episodes": 4, "frame_dtype": "float32"})
    tables = run_world(WorldConfig("cartpole", "gymnasium"), models, proto, progress=False, world=w)
    gt = tables["ground_truth"].to_pandas()
    gt_frames = {}
    for _, r in gt[(gt.t > 0)].iterrows():
        gt_frames[(r.plan, r.episode, r.t)] = np.asarray(r.frame).reshape(w.frame_shape)

    def mse(name):
        t = tables[name].to_pandas()
        t = t[t.regime == "open_loop"]
        pred = np.stack([np.asarray(f).reshape(w.frame_shape) for f in t.frame])
        real = np.stack([gt_frames[(p, e, s)] for p, e, s in zip(t.plan, t.episode, t.t)])
        return float(((pred - real) ** 2).mean()), pred, real

    exact, pred, real = mse("oracle-exact")
    assert exact == 0.0
    noisy, pred, real = mse("oracle-noise")
    clipped = np.clip(real + np.random.default_rng(0).normal(0, 0.05, real.shape), 0, 1)
    expected = float(((clipped - real) ** 2).mean())                     # the declared noise after clipping
    assert abs(noisy - expected) < 0.1 * expected
    # persistence repeats the last context frame and observed state
    t = tables["persistence"].to_pandas()
    t = t[(t.regime == "open_loop") & (t.plan == "a1")].sort_values(["episode", "t"])
    ctx = gt[(gt.t == 0) & (gt.plan == "a1")].sort_values("episode")
    for e, g in t.groupby("episode"):
        c = ctx[ctx.episode == e].iloc[0]
        assert all(np.array_equal(np.asarray(f), np.asarray(c.frame)) for f in g.frame)
        assert all(np.array_equal(np.asarray(s), np.asarray(c.state)) for s in g.state)
    assert mse("persistence")[0] > 0
    # shuffled: under a constant plan (the same actions for every episode) episode e's prediction is episode
    # e - 1's real future, frame for frame
    t = tables["shuffled"].to_pandas()
    t = t[(t.regime == "open_loop") & (t.plan == "a0")]
    for _, r in t.iterrows():
        np.testing.assert_array_equal(np.asarray(r.frame).reshape(w.frame_shape),
                                      gt_frames[("a0", (r.episode - 1) % 4, r.t)])


# ----------------------------------------------------------------------------- through the pipeline

@pytest.mark.slow
@pytest.mark.parametrize(("env_id", "conditions", "task"), [
    ("Acrobot-v1", ["a0", "a1", "a2", "random"], None),                  # Discrete(3)
    ("MountainCarContinuous-v0", ["high", "low", "random"], "drive"),    # Box([-1], [1]), with a control task
], ids=["discrete", "box"])
def test_any_env_id_runs_by_override_alone(tmp_path, env_id, conditions, task):
    """`wmeval compose 'worlds=[gymnasium]' 'models=[gymnasium]' worlds.gymnasium.params.env_id=...` and
    `dvc repro`: a scorecard with the observation layers, frame-space counterfactuals, the control layer where a
    task is declared by override, and the missing layers named as not applicable."""
    import os
    import sys
    from pathlib import Path

    import pandas as pd
    from conftest import make_project, run_checked

    bin_ = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1"}
    proj = make_project(tmp_path / "proj", ["protocol=tiny", "dynamics=tiny", "bootstrap=tiny"])
    run_checked(["wmeval", "compose", "protocol=tiny", "dynamics=tiny", "bootstrap=tiny", "worlds=[gymnasium]",
                 "models=[gymnasium]",
                 f"worlds.gymnasium.params.env_id={env_id}"]
                + ([f"worlds.gymnasium.params.control_tasks=[{{name:{task},cost:env_reward}}]"] if task else []),
                proj, env)
    run_checked(["dvc", "repro"], proj, env)
    card = (proj / "reports" / "scorecard.md").read_text()
    assert f"{env_id} reset(seed=s)" in card
    stats = pd.read_parquet(proj / "data" / "stats" / "episodes.parquet")
    cos = stats[(stats.metric == "pixel_counterfactual_cosine") & stats.condition.str.endswith(" @t=3")]
    assert set(cos.source) >= {"oracle-noise", "shuffled"}               # persistence: counted out (no difference)
    assert "counterfactual cosine, pixels @3" in card
    if task is None:
        assert "dynamics, control and probe layers: not applicable: gymnasium declares no control task" in card
    else:
        assert f"MPC cost: {task}" in card and "`persistence` has no control layer: the model predicts no reward" in card
        assert "`shuffled` has no control layer: an observation-layer control" in card
        cost = stats[stats.metric == "control_cost"]
        assert set(cost.source) == {"ground_truth", "oracle-noise"} and len(cost) == 2 * 3   # tiny: 3 episodes
        # Pixel rollout curves from the control starts (tiny: horizon min(6, 5 control steps) = 5), random and
        # planner's actions, headlined at step 5; the noise model's error is about its noise level.
        roll = stats[stats.metric == "rollout_pixel_rmse"]
        assert set(roll.source) == {"oracle-noise", "persistence"}         # shuffled: an observation-layer control
        noise = roll[roll.source == "oracle-noise"]
        assert set(noise.condition) == {"random @t=5", "planner @t=5"} and 0.2e-4 < noise.value.mean() <= 1e-4
        floor = roll[roll.source == "persistence"]
        assert set(floor.condition) == {"random @t=5"} and floor.value.mean() > noise.value.mean()
        assert "`persistence` has no control layer: the model predicts no reward" in card
        assert "it has pixel rollout curves under random actions" in card
        assert "pixel rollout RMSE @5, random actions" in card and "pixel rollout RMSE @5, planner's actions" in card
    assert "event reliability: not applicable: gymnasium declares no binary outcome event" in card
    assert set(stats.source) == {"ground_truth", "persistence", "oracle-noise", "shuffled"}
    assert set(stats[stats.metric == "pixel_mse"].condition) >= set(conditions)
    # oracle-noise's one-step pixel MSE is its declared noise variance 0.01^2 before clipping; these frames are
    # mostly white, so clipping at 1 halves it (the exact calibration is test_generic_models_floor_and_calibration)
    tf = stats[(stats.metric == "pixel_mse") & (stats.regime == "teacher_forced") & (stats.source == "oracle-noise")]
    assert 0.4e-4 < tf.value.mean() <= 0.65e-4, tf.value.mean()


def test_action_sensitivity_and_counterfactuals_on_frames_need_no_state():
    """Pong-like worlds have no state: action sensitivity and counterfactual consistency are read from the
    protocol's counterfactual plans in pixel space. The true future scores sensitivity 1 and cosine 1 with gap 0;
    an action-blind model sensitivity 0, cosine 0 and the real effect's RMS as its gap; a
    model whose actions act the wrong way round cosine -1 and twice that gap; noise adds spread (> 1)."""
    from wmeval.statistics.observation import counterfactual_pair_rows

    w = cartpole()
    models = {"persistence": {"_target_": "wmeval.models.PersistenceModel"},
              "exact": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.0},
              "noisy": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.05}}
    tables = run_world(WorldConfig("cartpole", "gymnasium"), models, PROTO, progress=False, world=w)
    plans = tables["exact"].column("plan").to_pylist()
    swap = {"a0": "a1", "a1": "a0"}
    tables["reversed"] = tables["exact"].set_column(tables["exact"].schema.get_field_index("plan"), "plan",
                                                    pa.array([swap.get(p, p) for p in plans]))

    def rows(name):
        df = counterfactual_pair_rows("cartpole", name, tables[name], tables["ground_truth"], 3, 4, [("a0", "a1")],
                                      "t")
        assert set(df.condition) == {"a0 vs a1"}
        return {m: g for m, g in df.groupby("metric")}

    def ratio(name):
        g = rows(name)["pixel_action_sensitivity"]
        assert (g.denominator > 0).all() and (g.t == 0).all()
        return g.value.sum() / g.denominator.sum()

    assert ratio("exact") == pytest.approx(1.0, abs=1e-2)               # uint8 storage rounds the frames
    assert ratio("persistence") == 0.0
    assert ratio("noisy") > 1.5                 # one sample per plan cannot tell its noise from an action effect
    assert ratio("reversed") == pytest.approx(1.0, abs=1e-2)            # blind to direction, by design

    exact, blind, rev = rows("exact"), rows("persistence"), rows("reversed")
    assert sorted(exact["pixel_counterfactual_cosine"].t.unique()) == [1, 2, 3, 4]
    cos = exact["pixel_counterfactual_cosine"].value
    assert cos.notna().sum() >= 6 and np.allclose(cos.dropna(), 1.0, atol=1e-6)
    assert np.allclose(rev["pixel_counterfactual_cosine"].value.dropna(), -1.0, atol=1e-6)
    bc = blind["pixel_counterfactual_cosine"].value.to_numpy()          # no predicted difference: 0, and NaN
    np.testing.assert_array_equal(np.isnan(bc), np.isnan(cos.to_numpy()))  # only where the truth has none either
    assert (bc[~np.isnan(bc)] == 0).all()
    real = blind["pixel_counterfactual_gap"].value.to_numpy()           # = RMS of the real effect
    assert real.max() > 0 and np.allclose(exact["pixel_counterfactual_gap"].value, 0.0, atol=1e-9)
    np.testing.assert_allclose(rev["pixel_counterfactual_gap"].value.to_numpy(), 2 * real, rtol=1e-9)


def test_energy_spread_removes_sampling_noise():
    """A stochastic model that ignores the action scores about 0, not its noise level; deterministic samples give
    the plain spread."""
    from wmeval.statistics.observation import _energy_spread

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(400, 4, 3, 5)), rng.normal(size=(400, 4, 3, 5))     # same law under both actions
    naive = np.linalg.norm(a - b, axis=-1).mean()                                 # what sample-k pairing gives
    assert naive > 2.5 and abs(_energy_spread(a, b).mean()) < 0.05
    x = rng.normal(size=(6, 1, 3, 5))
    np.testing.assert_allclose(_energy_spread(x, x + 1.0), np.sqrt(5.0))
    assert _energy_spread(a, b + 3.0).mean() > 2.0                               # a real effect survives


def test_a_state_attribute_outside_classic_control_is_not_trusted_to_branch():
    """An env whose `state` is a copy of something else (CarRacing keeps pixels there): no branch capability."""
    import gymnasium as gym

    class Hidden(gym.Env):
        metadata = {"render_modes": ["rgb_array"]}
        observation_space = gym.spaces.Box(-1e9, 1e9, (1,))
        action_space = gym.spaces.Discrete(2)

        def __init__(self, render_mode=None):
            self.render_mode, self._x = render_mode, 0.0

        def reset(self, seed=None, options=None):
            self._x = 0.0
            self.state = np.array([self._x])
            return self.state.copy(), {}

        def step(self, action):
            self._x += 1.0
            self.state = np.array([self._x])
            return self.state.copy(), 0.0, False, False, {}

        def render(self):
            return np.zeros((16, 16, 3), np.uint8)

    gym.register("WmevalHidden-v0", entry_point=Hidden)
    w = GymnasiumWorld(name="h", env_id="WmevalHidden-v0")
    assert "branch" not in capabilities(w)


# ----------------------------------------------------------------------------- control tasks (MPC by branching)

def _control_world():
    return GymnasiumWorld(name="gp", env_id="Pendulum-v1", frame_height=16, frame_width=16, grayscale=True,
                          control_tasks=[{"name": "swing_up", "cost": "env_reward"}])


class _ActionPenalty:
    """Predicts no frame change and a reward of -(sum of squared torques): the planner must pick the candidate
    whose actions are smallest."""

    stochastic = False

    def predict(self, history, actions, num_samples, rng):
        from wmeval.models import Prediction

        last = history.frames[:, -1]
        frames = np.broadcast_to(last[:, None, None], (len(actions), num_samples, actions.shape[1], *last.shape[1:]))
        rewards = np.broadcast_to(-(actions[..., 0] ** 2)[:, None], (len(actions), num_samples, actions.shape[1]))
        return Prediction(frames=frames, rewards=rewards)


class _RewardsOnly(_ActionPenalty):
    def predict(self, history, actions, num_samples, rng):
        from wmeval.models import Prediction

        return Prediction(rewards=super().predict(history, actions, num_samples, rng).rewards)


class _RewardHead(_ActionPenalty):
    def predict(self, history, actions, num_samples, rng):
        from wmeval.models import Prediction

        p = super().predict(history, actions, num_samples, rng)
        return Prediction(frames=p.frames, rewards=np.ones_like(p.rewards))


class _NotImplementedRewards(_ActionPenalty):
    def predict_rewards(self, history, actions, rng):
        raise NotImplementedError


class _BadRewards(_ActionPenalty):
    def predict(self, history, actions, num_samples, rng):
        from wmeval.models import Prediction

        p = super().predict(history, actions, num_samples, rng)
        return Prediction(frames=p.frames, rewards=p.rewards[..., :1])


@pytest.mark.slow
def test_control_tasks_act_out_mpc_in_the_environment():
    """An env_reward task: the oracle picks the candidate with the highest true return (checked by branching the
    same candidates), oracle-noise without reward noise acts exactly like it, a model's Prediction.rewards is what
    its planner ranks, and a model without rewards is left out with the reason."""
    import dataclasses

    from wmeval.core.config import DynamicsConfig
    from wmeval.core.rng import make_rng
    from wmeval.models.base import build_model
    from wmeval.rollouts.dynamics import dynamics_tables
    from wmeval.statistics.dynamics_layers import dynamics_contributions

    w = _control_world()
    assert [t.name for t in w.tasks()] == ["swing_up"] and w.tasks()[0].cost_from == "reward"
    dyn = DynamicsConfig(name="t", n_episodes=2, horizon=4, n_random_plans=1, counterfactual_horizon=2, n_plans=8,
                         plan_horizon=3, control_episodes=3, control_steps=4, probe_horizon=4, probe_windows=[1],
                         probe_tolerance=0.0, probe_max_true_rate=0.01, seed=0)
    specs = {"persistence": {"_target_": "wmeval.models.PersistenceModel"},
             "oracle": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.0},
             "oracle-noisy": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.0, "reward_noise_std": 50.0}}
    models = {n: build_model("gp", n, c, w) for n, c in specs.items()}
    models["small-torque"] = _ActionPenalty()
    models["small-torque-rewards-only"] = _RewardsOnly()
    models["not-implemented"] = _NotImplementedRewards()
    tables, skipped = dynamics_tables(WorldConfig("gp", "gymnasium"), w, models, dyn, PROTO, progress=False)
    assert set(tables) == {"ground_truth", "oracle", "oracle-noisy", "small-torque", "small-torque-rewards-only",
                           "persistence", "not-implemented"}    # the last two: random-action pixel curves only
    for name in ("persistence", "not-implemented"):
        assert set(tables[name].column("plan").to_pylist()) == {"random"}
    assert "predicts no reward" in skipped["persistence"] and "predicts no reward" in skipped["not-implemented"]

    def col(name, c):
        rows = select(tables[name], "closed_loop", "swing_up")
        return np.asarray(rows.column(c).to_pylist(), dtype=float).reshape(3, 5, -1)

    np.testing.assert_array_equal(col("oracle", "action"), col("ground_truth", "action"))
    np.testing.assert_array_equal(col("oracle", "reward"), col("ground_truth", "reward"))
    assert not np.array_equal(col("oracle-noisy", "action"), col("ground_truth", "action"))
    # Step 0: the candidates every planner drew (one stream per purpose) and the start snapshots.
    cands = w.sample_actions(make_rng(0, "gp", "mpc_plans", "control:swing_up"), (3, 8, 3))
    starts = w.initial_states(3, make_rng(0, "gp", "control_starts", "swing_up"))
    returns = w.rollout_rewards(np.repeat(starts, 8, axis=0), cands.reshape(24, 3, 1), None).reshape(3, 8, 3)
    best = cands[np.arange(3), returns.sum(-1).argmax(1), 0, 0]
    np.testing.assert_allclose(col("ground_truth", "action")[:, 1, 0], best)
    small = cands[np.arange(3), (cands[..., 0] ** 2).sum(-1).argmin(1), 0, 0]
    np.testing.assert_allclose(col("small-torque", "action")[:, 1, 0], small)
    # A reward head without frames plans the same way (the planner reads only the rewards).
    np.testing.assert_array_equal(col("small-torque-rewards-only", "action"), col("small-torque", "action"))
    # The statistics read the cost from the stored rewards: the negative mean reward of the real steps 1..T.
    meta = {"dynamics": dataclasses.asdict(dyn), "plans": {}, "counterfactual_pairs": [], "probes": {},
            "tasks": {"swing_up": {}}}
    df = dynamics_contributions(w, "oracle", tables["oracle"], tables["ground_truth"], meta, "t")
    assert set(df.metric) == {"control_cost"}     # the pixel rollout curves are frame_rollout_contributions
    np.testing.assert_allclose(df.value.to_numpy(), -col("oracle", "reward")[:, 1:, 0].mean(axis=1))
    models = {"bad": _BadRewards()}
    with pytest.raises(WmevalError, match=r"model 'bad' on world 'gp' \(control\): rewards: shape \(24, 1, 1\), "
                                          r"expected \(24, 1, 3\)"):
        dynamics_tables(WorldConfig("gp", "gymnasium"), w, models, dataclasses.replace(dyn, control_steps=1),
                        PROTO, progress=False)


@pytest.mark.slow
def test_pixel_rollout_curves_under_random_and_planner_actions():
    """Layer 2 on frames: from the control starts, each planning model's open-loop frames under random actions
    and under the actions its own MPC took, against the environment's frames of the same actions. An exact
    oracle scores 0 at every step (an off-by-one step would not), and a model that repeats the start frame
    scores the hand-computed error against frames rendered by branching."""
    import dataclasses

    from wmeval.core.config import DynamicsConfig
    from wmeval.core.rng import make_rng
    from wmeval.models.base import build_model
    from wmeval.rollouts.dynamics import dynamics_tables
    from wmeval.statistics.dynamics_layers import frame_rollout_contributions
    from wmeval.worlds.base import rollout_states

    w = _control_world()
    dyn = DynamicsConfig(name="t", n_episodes=2, horizon=3, n_random_plans=1, counterfactual_horizon=2, n_plans=6,
                         plan_horizon=3, control_episodes=3, control_steps=5, probe_horizon=4, probe_windows=[1],
                         probe_tolerance=0.0, probe_max_true_rate=0.01, seed=0)
    models = {"oracle": build_model("gp", "oracle", {"_target_": "wmeval.models.OracleNoiseModel",
                                                       "noise_std": 0.0}, w),
              "still": _ActionPenalty(), "rewards-only": _RewardsOnly()}
    tables, _ = dynamics_tables(WorldConfig("gp", "gymnasium"), w, models, dyn, PROTO, progress=False)
    meta = {"dynamics": dataclasses.asdict(dyn), "frame_rollouts": {"horizon": 3, "planner_task": "swing_up"}}
    curves = {n: frame_rollout_contributions(w, n, tables[n], tables["ground_truth"], meta, n) for n in models}
    assert curves["rewards-only"].empty                              # no frames predicted: no pixel curves
    assert set(tables["rewards-only"].column("regime").to_pylist()) == {"closed_loop"}   # nor open-loop rows
    assert set(curves["oracle"].condition) == {"random", "planner"} and set(curves["oracle"].t) == {1, 2, 3}
    assert set(curves["oracle"].unit) == {"control"}
    np.testing.assert_array_equal(curves["oracle"].value, 0.0)
    # By hand: the start frames, the random actions' real frames (branching) and the planner's real frames.
    starts = w.initial_states(3, make_rng(0, "gp", "control_starts", "swing_up"))
    acts = w.sample_actions(make_rng(0, "gp", "frame_rollouts", "random"), (3, 3))
    real = w.render(rollout_states(w, starts, acts, make_rng(0, "gp", "frame_rollouts", "random_world"))[:, 1:])
    q = lambda x: np.rint(x * 255) / 255                                # frames are stored as uint8
    first = q(w.render(starts))
    want = np.mean((first[:, None] - q(real)) ** 2, axis=(2, 3, 4))    # (E, t)
    got = curves["still"][curves["still"].condition == "random"].sort_values(["episode", "t"]).value.to_numpy()
    np.testing.assert_allclose(got, want.ravel(), rtol=1e-5)
    assert want.min() > 0                                               # the pendulum moves: the check can fail
    closed = select(tables["still"], "closed_loop", "swing_up")
    planned = select(tables["still"], "open_loop", "planner")
    pa_ = lambda t, c: np.asarray(t.sort_by([("episode", "ascending"), ("t", "ascending")]).column(c).to_pylist())
    np.testing.assert_array_equal(pa_(planned, "action").reshape(3, 3, -1),
                                  pa_(closed, "action").reshape(3, 6, -1)[:, 1:4])
    frames = pa_(closed, "frame").reshape(3, 6, 16, 16, 1)[:, 1:4] / 255.0
    want = np.mean((first[:, None] - frames) ** 2, axis=(2, 3, 4))
    got = curves["still"][curves["still"].condition == "planner"].sort_values(["episode", "t"]).value.to_numpy()
    np.testing.assert_allclose(got, want.ravel(), rtol=1e-5)


def test_control_tasks_are_checked():
    base = {"env_id": "Pendulum-v1", "frame_height": 16, "frame_width": 16}
    for tasks, extra, words in [
            ([{"name": "x", "cost": "pixels"}], {}, r"control_tasks\[0\] = .*cost one of \['env_reward'\]"),
            ([{"name": "x", "cost": "env_reward", "goal": 1}], {}, r"unknown keys \['goal'\]"),
            ([{"name": "x", "cost": "env_reward"}] * 2, {}, "declared twice"),
            (["swing_up"], {}, r"control_tasks\[0\] = 'swing_up': expected a mapping"),
            ({"name": "x", "cost": "env_reward"}, {}, "control_tasks must be a list"),
            ([{"name": "x", "cost": "env_reward"}], {"branch": "none"}, "MPC acts out plans by branching")]:
        with pytest.raises(ConfigError, match=words):
            build_world("g", {"kind": "gymnasium", "params": {**base, **extra, "control_tasks": tasks}})
    from wmeval.rollouts.dynamics import not_applicable

    assert "declares no control task (params.control_tasks)" in not_applicable(build_world(
        "g", {"kind": "gymnasium", "params": base}))
    assert not_applicable(_control_world()) is None


@pytest.mark.parametrize(("env_id", "frame_skip", "action"), [("CartPole-v1", 2, 0.0), ("Pendulum-v1", 3, 1.5)])
def test_oracle_rewards_match_the_real_steps_and_leave_them_unchanged(env_id, frame_skip, action):
    """The planner's oracle (rollout_rewards, by branching, nothing stored) earns exactly the rewards the real
    steps record (frame_skip summed; after CartPole terminates, 0), and branching in between real steps does
    not change them."""
    def world():
        return GymnasiumWorld(name="g", env_id=env_id, frame_height=16, frame_width=16, frame_skip=frame_skip)

    w, T = world(), 12
    s0 = w.initial_states(2, np.random.default_rng(0))
    plan = np.full((2, T, 1), action)
    oracle = w.rollout_rewards(s0, plan, None)
    states = [s0]
    for t in range(T):
        w.rollout_rewards(states[-1], -plan[:, t:], None)          # branch away and back before every step
        states.append(w.step(states[-1], plan[:, t], None))
    real = w.true_reward(np.stack(states[1:], axis=1))
    np.testing.assert_array_equal(oracle, real)
    if env_id == "CartPole-v1":
        assert (real[:, -1] == 0).all() and (real[:, 0] == frame_skip).all()   # terminated within 12 x 2 steps
    w2 = world()                                                                # no branching at all
    s = w2.initial_states(2, np.random.default_rng(0))
    ref = []
    for t in range(T):
        s = w2.step(s, plan[:, t], None)
        ref.append(w2.render(s))
    np.testing.assert_array_equal(np.stack(ref, 1), w.render(np.stack(states[1:], axis=1)))


def test_frame_counterfactuals_against_a_hand_computation():
    """Several samples and realized futures: the cosine is that of the sample means' differences (not a mean of
    per-sample cosines), the gap their root mean square over pixels; a blind model scores cosine 0, and an
    episode whose real futures do not differ is counted out (NaN)."""
    from wmeval.statistics.observation import counterfactual_pair_rows
    from wmeval.tables import rollout_table

    rng = np.random.default_rng(3)
    N, S, M, T, img = 3, 4, 2, 2, (2, 3, 1)
    real = {p: rng.uniform(0, 1, (N, M, T + 1, *img)) for p in ("a", "b")}
    real["b"][2] = real["a"][2]                                        # episode 2: the action changes nothing
    pred = {p: rng.uniform(0, 1, (N, S, T, *img)) for p in ("a", "b")}

    def table(src, regime, arrays, t0):
        return pa.concat_tables([rollout_table(world="w", source=src, regime=regime, plan=p, condition=p,
                                               episodes=np.arange(N), t=np.arange(t0, t0 + x.shape[2]), frames=x,
                                               states=None, actions=np.zeros((N, x.shape[2], 1)),
                                               frame_dtype="float32") for p, x in arrays.items()])

    truth = table("ground_truth", "realized", real, 0)
    model = table("m", "open_loop", pred, 1)
    blind = table("blind", "open_loop", {"a": pred["a"], "b": pred["a"]}, 1)
    rows = counterfactual_pair_rows("w", "m", model, truth, N, T, [("a", "b")], "t")
    f = {k: {p: x.astype(np.float32).astype(np.float64) for p, x in d.items()} for k, d in (("r", real), ("p", pred))}
    dp = (f["p"]["a"].mean(1) - f["p"]["b"].mean(1)).reshape(N, T, -1)                 # stored as float32
    dt = (f["r"]["a"][:, :, 1:].mean(1) - f["r"]["b"][:, :, 1:].mean(1)).reshape(N, T, -1)
    with np.errstate(invalid="ignore"):
        cos = np.sum(dp * dt, -1) / (np.linalg.norm(dp, axis=-1) * np.linalg.norm(dt, axis=-1))
    gap = np.sqrt(np.mean((dp - dt) ** 2, -1))
    got = {m: g.sort_values(["episode", "t"]).value.to_numpy().reshape(N, T) for m, g in rows.groupby("metric")
           if m.endswith(("cosine", "gap"))}
    np.testing.assert_allclose(got["pixel_counterfactual_cosine"][:2], cos[:2], rtol=1e-9)
    assert np.isnan(got["pixel_counterfactual_cosine"][2]).all()
    np.testing.assert_allclose(got["pixel_counterfactual_gap"], gap, rtol=1e-9)
    b = counterfactual_pair_rows("w", "blind", blind, truth, N, T, [("a", "b")], "t")
    bc = b[b.metric == "pixel_counterfactual_cosine"].sort_values(["episode", "t"]).value.to_numpy().reshape(N, T)
    assert (bc[:2] == 0).all() and np.isnan(bc[2]).all()


def test_a_models_predicted_rewards_are_its_reward_column():
    """A model with a reward head: its rewards, not the world's (none for an environment), are what the task
    signals compare with the environment's reward."""
    w = cartpole()
    models = {"head": {"_target_": "test_gymnasium._RewardHead"}}
    tables = run_world(WorldConfig("cartpole", "gymnasium"), models, PROTO, progress=False, world=w)
    r = np.asarray(tables["head"].column("reward").to_pylist(), dtype=float)
    assert len(r) == tables["head"].num_rows and (r == 1.0).all()
    gt = np.asarray(tables["ground_truth"].column("reward").to_pylist(), dtype=float)
    assert set(np.unique(gt)) <= {0.0, 1.0} and (gt == 1.0).any()      # CartPole's own +1 per step


def test_mujoco_half_cheetah_branches_exactly_and_plans():
    """MuJoCo through its full integration state: a restored state steps to the same frames and observations, the
    oracle's rewards are the real steps' rewards, and the preset builds (off-screen EGL rendering)."""
    pytest.importorskip("mujoco")
    from pathlib import Path

    import yaml

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf" / "worlds" / "half_cheetah.yaml").read_text())
    w = build_world("half_cheetah", cfg)
    assert w._backend == "mujoco" and capabilities(w) == {"episodes", "branch", "state"}
    assert w.frame_shape == (64, 64, 3) and w.state_dim == 17 and w.action_dim == 6
    assert [t.name for t in w.tasks()] == ["run"] and w.describe()["versions"]["MUJOCO_GL"]
    s0 = w.initial_states(2, np.random.default_rng(0))
    acts = np.random.default_rng(1).uniform(-1, 1, (2, 4, 6))

    def roll():
        s, out = s0, []
        for t in range(4):
            w.rollout_rewards(s, -acts[:, t:], None)                   # branch away in between
            s = w.step(s, acts[:, t], None)
            out.append(s)
        return np.stack(out, 1)

    a, b = roll(), roll()
    np.testing.assert_array_equal(w.render(a), w.render(b))
    np.testing.assert_array_equal(w.observe(a), w.observe(b))
    assert w.render(a).std() > 0.01                                    # a real image, not a blank buffer
    np.testing.assert_array_equal(w.rollout_rewards(s0, acts, None), w.true_reward(a))


@pytest.mark.slow
def test_statistics_in_episode_chunks_change_no_value(monkeypatch):
    """The statistics stage scores frames over chunks of episodes (bounded memory): one episode per chunk gives
    exactly the values of one chunk for all, for every per-step, per-sequence and counterfactual row, with
    several samples and realized futures (a stochastic world)."""
    from wmeval.statistics import paired
    from wmeval.statistics.observation import (
        counterfactual_pair_rows,
        frame_scores,
        truth_diversity,
    )

    w = cartpole(stochastic=True)
    models = {"noisy": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.05}}
    proto = ProtocolConfig(name="t", n_episodes=5, horizon=3, num_samples=3, num_futures=2, n_random_plans=1,
                           teacher_forced_plan="random_0", frame_dtype="uint8", seed=0)
    tables = run_world(WorldConfig("cartpole", "gymnasium"), models, proto, progress=False, world=w)
    m, g = tables["noisy"], tables["ground_truth"]

    def everything():
        steps, seqs = frame_scores(w, "noisy", m, g, 5, 3, "t")
        return [steps.to_pandas(), seqs.to_pandas(), truth_diversity("c", g, 5, 3, "t").to_pandas(),
                counterfactual_pair_rows("c", "noisy", m, g, 5, 3, [("a0", "a1")], "t"),
                paired.contributions("c", "noisy", m, g, 5, 3, {"pixel_mse": ("frame", 3)}, "t").to_pandas()]

    whole = everything()
    monkeypatch.setattr(paired, "CHUNK_BYTES", 1)
    assert len(paired.episode_chunks(5, np.zeros((5, 3, 40, 60, 3)))) == 5
    for a, b in zip(whole, everything()):
        assert len(a) > 0
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_memory_needed_counts_the_snapshot_store():
    """A Gymnasium world keeps a frame per realized step in its snapshot store: the memory check counts it, and
    stays a lower bound on what the store really holds after the ground truth's episodes."""
    from wmeval.rollouts.episodes import memory_needed

    w = cartpole()
    need = memory_needed(w, PROTO, 0)
    n_plans = len(w.plans(1, PROTO.horizon, PROTO.n_random_plans, np.random.default_rng(0)))
    frames = n_plans * PROTO.n_episodes * PROTO.num_samples * (PROTO.horizon + 1)   # K = 2 > M = 1
    pixels = 40 * 60 * 3
    store = PROTO.n_episodes * (n_plans * PROTO.horizon + 1) * pixels     # a shared start, then each plan's steps
    drawn = PROTO.n_episodes * (4 + n_plans * PROTO.horizon * 1) * 8           # initial states and plans
    assert need == frames * pixels + PROTO.n_episodes * PROTO.num_samples * (PROTO.horizon + 1) * pixels * 8 + store \
        + drawn
    make_episodes(w, PROTO)
    assert sum(s.frame.nbytes for s in w._store.values()) == store                 # what the store really holds


@pytest.mark.slow
def test_each_models_snapshots_are_dropped_once_its_table_is_out():
    """The snapshot store keeps a frame per step: a model's rollouts (oracle-noise and shuffled roll the
    environment) are dropped after its table, the episodes' after the last table; the tables are the same
    as without dropping (a second world that never rewinds)."""
    from wmeval.rollouts.episodes import world_tables

    models = {"oracle-noise": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.01},
              "shuffled": {"_target_": "wmeval.models.ShuffledFuturesModel"}}
    w = cartpole()
    sizes, tables = [], {}
    for name, table in world_tables(WorldConfig("cartpole", "gymnasium"), models, PROTO, False, world=w):
        sizes.append(len(w._store))
        tables[name] = table
    assert sizes[1] > sizes[0] and sizes[2] > sizes[0]      # each model added its own rollouts ...
    assert len(w._store) == 0                                # ... and nothing is kept after the last table
    keep = cartpole()
    keep.rewind = lambda mark: None                          # the same run, never dropping a snapshot
    for name, table in world_tables(WorldConfig("cartpole", "gymnasium"), models, PROTO, False, world=keep):
        assert table.equals(tables[name]), name
    assert len(keep._store) > sizes[2]
    with pytest.raises(WmevalError, match="snapshot handle 0 was dropped"):    # handles are never reused
        w.render(np.array([[0.0]]))
    with pytest.raises(ValueError, match=r"only \d+ snapshots were ever taken"):
        w.rewind(w.checkpoint() + 1)


@pytest.mark.slow
def test_the_snapshot_store_holds_one_block_of_episodes_at_a_time():
    """In blocks of 3, the store holds the N initial states and one block's rollouts: its peak does not grow
    with N (9 episodes peak as 6 do, plus their initial frames), while one block of 9 holds three blocks'
    rollouts; the tables of a deterministic env are the same rows in any blocks."""
    import dataclasses

    from wmeval.rollouts.episodes import world_tables

    models = {"oracle": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.0}}

    def peak(n, block):
        w, most, tables = cartpole(), 0, {}
        proto = dataclasses.replace(PROTO, n_episodes=n, episode_block=block, num_futures=1, horizon=2)
        for name, table in world_tables(WorldConfig("cartpole", "gymnasium"), models, proto, False, world=w):
            most = max(most, len(w._store))
            tables.setdefault(name, []).append(table)
        assert len(w._store) == 0
        return most, {k: pa.concat_tables(v).to_pandas().sort_values(["regime", "plan", "episode", "t"])
                      for k, v in tables.items()}

    (six, _), (nine, blocked), (one_block, whole) = peak(6, 3), peak(9, 3), peak(9, 9)
    assert nine - six == 3                                    # the 3 more initial states, nothing else
    per_block = nine - 9                                      # a block's rollouts (the rest: 9 initial states)
    assert per_block > 0 and one_block == 9 + 3 * per_block   # 9 episodes at once: three blocks' worth
    for name in whole:
        a, b = whole[name].reset_index(drop=True), blocked[name].reset_index(drop=True)
        np.testing.assert_array_equal(np.stack(a["frame"].to_numpy()), np.stack(b["frame"].to_numpy()))
