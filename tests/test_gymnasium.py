"""Gymnasium environments as ground-truth worlds: capabilities, seeding, branching, frames, generic models."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from wmeval.core.config import ProtocolConfig, WorldConfig  # noqa: E402
from wmeval.core.errors import ConfigError, WmevalError  # noqa: E402
from wmeval.rollouts import run_world  # noqa: E402
from wmeval.rollouts.episodes import make_episodes  # noqa: E402
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
@pytest.mark.parametrize(("env_id", "conditions"), [
    ("Acrobot-v1", ["a0", "a1", "a2", "random"]),                        # Discrete(3)
    ("MountainCarContinuous-v0", ["high", "low", "random"]),             # Box([-1], [1])
], ids=["discrete", "box"])
def test_any_env_id_runs_by_override_alone(tmp_path, env_id, conditions):
    """`wmeval compose 'worlds=[gymnasium]' 'models=[gymnasium]' worlds.gymnasium.params.env_id=...` and
    `dvc repro`: a scorecard with the observation layers, and the missing layers named as not applicable."""
    import os
    import sys
    from pathlib import Path

    import pandas as pd
    from conftest import make_project, run_checked

    bin_ = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1"}
    proj = make_project(tmp_path / "proj", ["protocol=tiny", "dynamics=tiny"])
    run_checked(["wmeval", "compose", "protocol=tiny", "dynamics=tiny", "worlds=[gymnasium]", "models=[gymnasium]",
                 f"worlds.gymnasium.params.env_id={env_id}"], proj, env)
    run_checked(["dvc", "repro"], proj, env)
    card = (proj / "reports" / "scorecard.md").read_text()
    assert f"{env_id} reset(seed=s)" in card
    assert "dynamics, control and probe layers: not applicable: gymnasium" in card
    assert "event reliability: not applicable: gymnasium declares no binary outcome event" in card
    stats = pd.read_parquet(proj / "data" / "stats" / "episodes.parquet")
    assert set(stats.source) == {"ground_truth", "persistence", "oracle-noise", "shuffled"}
    assert set(stats[stats.metric == "pixel_mse"].condition) >= set(conditions)
    # oracle-noise's one-step pixel MSE is its declared noise variance 0.01^2 before clipping; these frames are
    # mostly white, so clipping at 1 halves it (the exact calibration is test_generic_models_floor_and_calibration)
    tf = stats[(stats.metric == "pixel_mse") & (stats.regime == "teacher_forced") & (stats.source == "oracle-noise")]
    assert 0.4e-4 < tf.value.mean() <= 0.65e-4, tf.value.mean()


def test_action_sensitivity_in_pixel_space_needs_no_state():
    """Pong-like worlds have no state: action sensitivity is read from the protocol's counterfactual plans in pixel
    space. The true future scores 1 exactly, an action-blind model 0, and noise adds spread (> 1)."""
    from wmeval.statistics.observation import action_sensitivity_rows

    w = cartpole()
    models = {"persistence": {"_target_": "wmeval.models.PersistenceModel"},
              "exact": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.0},
              "noisy": {"_target_": "wmeval.models.OracleNoiseModel", "noise_std": 0.05}}
    tables = run_world(WorldConfig("cartpole", "gymnasium"), models, PROTO, progress=False, world=w)

    def ratio(name):
        df = action_sensitivity_rows("cartpole", name, tables[name], tables["ground_truth"], 3, 4, [("a0", "a1")],
                                     "t")
        assert set(df.condition) == {"a0 vs a1"} and (df.denominator > 0).all()
        return df.value.sum() / df.denominator.sum()

    assert ratio("exact") == pytest.approx(1.0, abs=1e-2)               # uint8 storage rounds the frames
    assert ratio("persistence") == 0.0
    assert ratio("noisy") > 1.5                 # one sample per plan cannot tell its noise from an action effect


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
