"""Each dynamics layer on hand-made models whose answer is known exactly."""

import dataclasses

import numpy as np
import pytest

from wmeval.core.config import DynamicsConfig, ProtocolConfig, WorldConfig
from wmeval.models import Prediction
from wmeval.rollouts import run_world
from wmeval.rollouts.dynamics import dynamics_tables
from wmeval.rollouts.planning import random_shooting_mpc
from wmeval.statistics.dynamics_layers import (
    dynamics_contributions,
    task_signal_contributions,
)
from wmeval.worlds import PendulumWorld
from wmeval.worlds.pendulum import env_step

DYN = DynamicsConfig(name="t", n_episodes=40, horizon=30, n_random_plans=1, counterfactual_horizon=10,
                     n_plans=64, plan_horizon=8, control_episodes=4, control_steps=20, probe_horizon=60,
                     probe_windows=[1, 20], probe_tolerance=1e-6, probe_max_true_rate=0.01, seed=0)
PROTO = ProtocolConfig(name="t", n_episodes=8, horizon=5, num_samples=2, num_futures=1, n_random_plans=1,
                       teacher_forced_plan="random_0", frame_dtype="float32", seed=0)
PEND = WorldConfig(name="pendulum", kind="pendulum", params={"frame_size": 16})


class Tweaked:
    """The true pendulum with the action scaled, or with energy injected."""

    def __init__(self, action_scale: float = 1.0, pump: float = 1.0) -> None:
        self.action_scale, self.pump = action_scale, pump

    def predict(self, history, actions, num_samples, rng):
        s = np.repeat(history.states[:, -1][:, None], num_samples, axis=1)
        out = []
        for t in range(actions.shape[1]):
            s = env_step(s, self.action_scale * actions[:, t, 0][:, None])
            s = s * np.array([1.0, self.pump])
            out.append(s)
        return Prediction(states=np.stack(out, axis=2))


def _layers(model):
    world = PendulumWorld(frame_size=16)
    tables, skipped = dynamics_tables(PEND, world, {"m": model}, DYN, PROTO, progress=False)
    meta = read_metadata_from(tables["ground_truth"])
    df = dynamics_contributions(world, "m", tables["m"], tables["ground_truth"], meta, "m")
    truth = dynamics_contributions(world, "ground_truth", tables["ground_truth"], tables["ground_truth"], meta, "gt")
    return df, truth


def read_metadata_from(table):
    import json
    return json.loads(table.schema.metadata[b"wmeval"])


def ratio(df, metric, cond=None):
    d = df[df.metric == metric]
    if cond:
        d = d[d.condition == cond]
    return d.value.sum() / d.denominator.sum()


def test_action_sensitivity_is_the_action_gain():
    df, truth = _layers(Tweaked(action_scale=0.5))
    assert ratio(df, "action_sensitivity") == pytest.approx(0.5, rel=1e-9)
    assert ratio(truth, "action_sensitivity") == pytest.approx(1.0)
    blind, _ = _layers(Tweaked(action_scale=0.0))
    assert ratio(blind, "action_sensitivity") == 0.0


def test_reversed_action_gives_cosine_minus_one_and_double_gap():
    df, _ = _layers(Tweaked(action_scale=-1.0))
    cos = df[df.metric == "counterfactual_cosine"]
    np.testing.assert_allclose(cos.value, -1.0, atol=1e-9)
    perfect, _ = _layers(Tweaked())
    blind, _ = _layers(Tweaked(action_scale=0.0))
    gap = lambda d: d[d.metric == "counterfactual_gap"].value.to_numpy()
    # A blind model's gap is |true delta|; the reversed model predicts -true delta: twice that.
    np.testing.assert_allclose(gap(df), 2 * gap(blind), rtol=1e-9)
    assert gap(blind).min() > 0 and np.all(gap(perfect) < 1e-12)


def test_energy_probe_calibration_and_a_pumping_model():
    df, truth = _layers(Tweaked(pump=1.02))
    rate = lambda d, w: d[(d.metric == "probe_flag_rate") & (d.condition == f"energy_non_increase w={w}")].value.mean()
    assert rate(truth, 1) > 0.3            # the w = 1 probe flags the true world: miscalibrated
    assert rate(truth, 20) == 0.0          # w = 20 is calibrated
    assert rate(df, 20) > 0.5              # a model that injects energy is flagged


def test_perfect_model_rollout_error_is_zero_and_control_matches_the_oracle():
    df, truth = _layers(Tweaked())
    assert df[df.metric == "rollout_state_rmse"].value.max() < 1e-20
    c = df[(df.metric == "control_cost") & (df.condition == "hold")].value.to_numpy()
    ct = truth[(truth.metric == "control_cost") & (truth.condition == "hold")].value.to_numpy()
    np.testing.assert_allclose(c, ct)  # common random plans: the same model gives the same costs


def test_mpc_reaches_a_target_with_a_right_model_and_not_with_a_blind_one():
    rng = np.random.default_rng(0)
    step = lambda s, a: s + a                                 # 1-D integrator
    cost = lambda s: (s[..., 0] - 5.0) ** 2

    def run(gain):
        def predict(s, plans):
            return s[:, None, :] + gain * np.cumsum(plans, axis=1)
        return random_shooting_mpc(predict, step, cost, lambda shape: rng.uniform(-1, 1, (*shape, 1)),
                                   np.zeros((3, 1)), 20, 64, 5)

    states, actions = run(1.0)
    assert states.shape == (3, 21, 1) and actions.shape == (3, 20, 1)
    assert np.all(np.abs(states[:, -1, 0] - 5.0) < 0.5)
    blind_states, _ = run(0.0)
    assert np.all(np.abs(blind_states[:, -1, 0] - 5.0) > 1.0)


def test_task_signals_of_a_perfect_and_a_frozen_model():
    world = PendulumWorld(frame_size=16)
    proto = dataclasses.replace(PROTO, horizon=30, n_episodes=16)
    tables = run_world(PEND, {"perfect": {"_target_": "test_layers.Tweaked"}}, proto, progress=False)
    df = task_signal_contributions(world, "perfect", tables["perfect"], tables["ground_truth"], 16, 30, "x")
    assert df[df.metric == "reward_mse"].value.max() < 1e-20
    assert df[df.metric == "peak_time_offset"].value.max() == 0
    assert ratio(df, "event_precision") == 1.0 and ratio(df, "event_recall") == 1.0
    frozen = run_world(PEND, {"frozen": {"_target_": "test_layers.Frozen"}}, proto, progress=False)
    fz = task_signal_contributions(world, "frozen", frozen["frozen"], frozen["ground_truth"], 16, 30, "x")
    assert fz[fz.metric == "reward_mse"].value.mean() > 1e-3


class Frozen:
    stochastic = False

    def predict(self, history, actions, num_samples, rng):
        n, h = actions.shape[:2]
        return Prediction(states=np.broadcast_to(history.states[:, -1][:, None, None], (n, num_samples, h, 2)).copy())


def test_frames_only_and_imported_models_are_skipped_with_a_reason():
    class FramesOnly:
        def predict(self, history, actions, num_samples, rng):
            n, h = actions.shape[:2]
            return Prediction(frames=np.zeros((n, num_samples, h, 16, 16, 1), np.float32))

    class Precomputed:
        precomputed = True

    world = PendulumWorld(frame_size=16)
    tables, skipped = dynamics_tables(PEND, world, {"f": FramesOnly(), "p": Precomputed()}, DYN, PROTO, progress=False)
    assert set(tables) == {"ground_truth"}
    assert "frames only" in skipped["f"] and "imported" in skipped["p"]


def test_adding_a_model_changes_no_other_draw():
    from wmeval.models import BlobReferenceModel
    from wmeval.worlds import BlobWorld

    world = BlobWorld()
    blobs = WorldConfig(name="blobs", kind="blobs", params={})
    dyn = dataclasses.replace(DYN, n_episodes=6, horizon=3, counterfactual_horizon=1, control_steps=4)
    one, _ = dynamics_tables(blobs, world, {"st": BlobReferenceModel("stochastic", world)}, dyn, PROTO, progress=False)
    two, _ = dynamics_tables(blobs, world, {"a": BlobReferenceModel("sharp-A", world),
                                            "st": BlobReferenceModel("stochastic", world)}, dyn, PROTO, progress=False)
    assert one["st"].equals(two["st"])
    plan = lambda t: t.filter(pa_equal(t, "plan", "planner:st"))
    assert plan(one["ground_truth"]).equals(plan(two["ground_truth"]))


def pa_equal(table, column, value):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.equal(table.column(column).cast(pa.string()), value)


def test_counterfactual_arms_share_noise():
    """A noisy model's action sensitivity equals its mean model's: the arms share one noise stream."""
    from wmeval.models import LeastSquaresPendulumModel

    noisy, _ = _layers(LeastSquaresPendulumModel("sin-features", stochastic=True, sigma=0.1))
    mean, _ = _layers(LeastSquaresPendulumModel("sin-features"))
    assert ratio(noisy, "action_sensitivity") == pytest.approx(ratio(mean, "action_sensitivity"), rel=1e-9)


def test_dynamics_sources_in_forked_processes_are_the_serial_tables():
    """With n_jobs > 1 each source's queries run in a forked process and are assembled in the serial order: the
    same tables, the ground truth's planner rows included."""
    from wmeval.models import LeastSquaresPendulumModel

    world = PendulumWorld(frame_size=16)
    models = {"lin": LeastSquaresPendulumModel("linear", world=world),
              "gauss": LeastSquaresPendulumModel("sin-features", world=world, stochastic=True),
              "tweak": Tweaked(action_scale=0.5)}
    dyn = dataclasses.replace(DYN, n_episodes=10, horizon=6, control_steps=5, probe_horizon=10, n_plans=16)
    serial, skipped = dynamics_tables(PEND, world, models, dyn, PROTO, progress=False)
    forked, skipped2 = dynamics_tables(PEND, world, models, dyn, PROTO, progress=False, n_jobs=2)
    assert list(serial) == list(forked) == ["ground_truth", "lin", "gauss", "tweak"] and skipped == skipped2
    for name in serial:
        assert serial[name].equals(forked[name]), name
        assert serial[name].schema.metadata == forked[name].schema.metadata
    assert forked["ground_truth"].num_rows > serial["lin"].num_rows        # the planner additions came back
