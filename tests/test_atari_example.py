"""The trained-world-model example (examples/atari_world_model): a tiny version trains, saves a checkpoint, loads
through the adapter, and the scorecard's action sensitivity tells it from its action-blind twin."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ale_py")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "atari_world_model"))

from pong_model import PongWorldModel  # noqa: E402
from train import main as train_main  # noqa: E402

from wmeval.core.config import ProtocolConfig, WorldConfig  # noqa: E402
from wmeval.rollouts import run_world  # noqa: E402
from wmeval.statistics.observation import counterfactual_pair_rows  # noqa: E402


@pytest.mark.slow
def test_tiny_training_run_loads_through_the_adapter(tmp_path):
    import json

    import yaml

    from wmeval.worlds import build_world

    train_main(["--episodes", "3", "--steps", "4", "--iters", "6", "--width", "8", "--out", str(tmp_path)])
    info = json.loads((tmp_path / "train.json").read_text())
    assert {"pong", "pong-action-blind"} <= set(info)
    with pytest.raises(ValueError, match="sha256"):
        PongWorldModel(str(tmp_path / "pong.pt"), sha256="0" * 64)
    cfg = yaml.safe_load((ROOT / "conf" / "worlds" / "pong.yaml").read_text())
    world = build_world("pong", cfg)
    proto = ProtocolConfig(name="t", n_episodes=2, horizon=2, num_samples=1, num_futures=1, n_random_plans=1,
                           teacher_forced_plan="random_0", frame_dtype="uint8", seed=0)
    target = "pong_model.PongWorldModel"
    models = {"wm": {"_target_": target, "checkpoint": str(tmp_path / "pong.pt")},
              "blind": {"_target_": target, "checkpoint": str(tmp_path / "pong-action-blind.pt")}}
    tables = run_world(WorldConfig("pong", "gymnasium", cfg["params"]), models, proto, progress=False, world=world)

    def sensitivity(name):
        df = counterfactual_pair_rows("pong", name, tables[name], tables["ground_truth"], 2, 2, [("right", "left")],
                                     "t")
        df = df[df.metric == "pixel_action_sensitivity"]
        return df.value.sum() / df.denominator.sum()

    assert sensitivity("blind") == 0.0          # the twin cannot tell right from left, by construction
    assert sensitivity("wm") > 0.0              # the action planes reach the frames
    frames = np.asarray(tables["wm"].column("frame").combine_chunks().to_numpy_ndarray())
    assert frames.shape[1:] == (210, 160, 3)
