"""Seed 002's and seed 000's findings, read from the default pipeline's outputs.

One `dvc repro` of the shipped default config (seed 002's budgets: 200 dynamics
episodes, 50-step rollouts, 256 x 15 random-shooting MPC over 20 x 60 steps) in a
temporary git repository; every assertion is about reports/metrics.json.
"""

import json

import pytest

from conftest import make_project
from test_pipeline import BIN, run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def metrics(tmp_path_factory):
    dest = make_project(tmp_path_factory.mktemp("seeds") / "proj", [])
    run([str(BIN / "dvc"), "repro"], dest)
    return json.loads((dest / "reports" / "metrics.json").read_text())


def get(m, world, source, metric, key):
    return m[world][source][metric][key]


def test_action_blind_beats_linear_at_50_steps_under_random_actions(metrics):
    r = {k: get(metrics, "pendulum", k, "rollout_state_rmse", "open_loop/random @t=50")
         for k in ("sin-features", "action-blind", "linear")}
    assert r["sin-features"]["high"] < r["action-blind"]["low"]
    assert r["action-blind"]["high"] < r["linear"]["low"]          # second best, clearly better than linear
    assert r["linear"]["point"] > 1.4 * r["action-blind"]["point"]
    # ... and the planner's actions reverse that: action-blind is then worse than linear.
    p = {k: get(metrics, "pendulum", k, "rollout_state_rmse", "open_loop/planner @t=50")["point"]
         for k in ("action-blind", "linear")}
    assert p["action-blind"] > p["linear"]


def test_action_sensitivity(metrics):
    key = "open_loop/const_+1 vs const_-1"
    assert get(metrics, "pendulum", "action-blind", "action_sensitivity", key)["point"] == 0.0
    assert abs(get(metrics, "pendulum", "sin-features", "action_sensitivity", key)["point"] - 1) < 0.02


def test_linear_counterfactual_direction_right_size_wrong(metrics):
    key = "open_loop/const_+1 vs const_-1 @t=20"
    assert get(metrics, "pendulum", "linear", "counterfactual_cosine", key)["low"] > 0.95
    gap_lin = get(metrics, "pendulum", "linear", "counterfactual_gap", key)
    gap_sin = get(metrics, "pendulum", "sin-features", "counterfactual_gap", key)
    assert gap_lin["low"] > 0.2 and gap_lin["point"] > 50 * gap_sin["point"]


def test_mpc_hold_linear_close_to_sin_features_action_blind_far_worse(metrics):
    c = {k: get(metrics, "pendulum", k, "control_cost", "closed_loop/hold")["point"]
         for k in ("sin-features", "linear", "action-blind")}
    # Seed 002's own code gives linear 0.0052 and sin-features 0.0074: close, not equal.
    assert 0.6 < c["linear"] / c["sin-features"] < 1.4
    assert c["action-blind"] > 4 * c["sin-features"]


def test_energy_probe_calibration_on_the_true_world(metrics):
    w1 = get(metrics, "pendulum", "ground_truth", "probe_flag_rate", "probe/energy_non_increase w=1")
    w20 = get(metrics, "pendulum", "ground_truth", "probe_flag_rate", "probe/energy_non_increase w=20")
    assert 0.40 < w1["point"] < 0.52       # seed 002: 46% of steps
    assert w20["high"] < 0.01


def test_one_step_ranking_and_blob_findings(metrics):
    one = {k: get(metrics, "pendulum", k, "state_rmse", "teacher_forced/all")["point"]
           for k in ("sin-features", "linear", "action-blind")}
    assert one["sin-features"] < one["linear"] < one["action-blind"]
    # Blobs: the reversed model points the counterfactual the wrong way; the mean beats a sharp mode on MSE.
    assert get(metrics, "blobs", "reversed", "counterfactual_cosine", "open_loop/right vs left @t=1")["high"] < -0.9
    assert get(metrics, "blobs", "stochastic", "counterfactual_cosine", "open_loop/right vs left @t=1")["low"] > 0.9
    px = {k: get(metrics, "blobs", k, "pixel_mse", "teacher_forced/all")["point"] for k in ("mean", "sharp-A")}
    assert px["mean"] < px["sharp-A"]
