"""Record random-action Pong episodes and train the model and its action-blind twin.

    python examples/atari_world_model/train.py [--episodes 48] [--steps 40] [--iters 600]
        [--out examples/atari_world_model/checkpoints]

The recordings come from the same world the pipeline evaluates (``conf/worlds/pong.yaml``: ALE
Pong v5 without sticky actions, 60 random start steps, full 210 x 160 RGB frames), from seeds
drawn apart from the evaluation's (``--seed``), so no evaluation episode is trained on. Both
networks see the same batches in the same order; only the action planes differ.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pong_model import PongNet, save_checkpoint  # noqa: E402

from wmeval.worlds import build_world  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def record(episodes: int, steps: int, seed: int, params: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``frames (E, steps + 1, H, W, C)`` uint8 and ``actions (E, steps)`` of random-action episodes."""
    cfg = yaml.safe_load((ROOT / "conf" / "worlds" / "pong.yaml").read_text())
    world = build_world("pong", {"kind": "gymnasium", "params": {**cfg["params"], **(params or {})}})
    rng = np.random.default_rng(seed)
    s = world.initial_states(episodes, rng)
    frames, actions = [world.render(s)], []
    for _ in range(steps):
        a = world.sample_actions(rng, (episodes,))
        s = world.step(s, a, rng)
        frames.append(world.render(s))
        actions.append(a[:, 0])
    return (np.rint(np.stack(frames, 1) * 255).astype(np.uint8), np.stack(actions, 1).astype(np.int64))


def train(frames: np.ndarray, actions: np.ndarray, iters: int, seed: int, action_blind: bool,
          width: int = 32, batch: int = 16) -> tuple[PongNet, list[float]]:
    """Fit ``o_{t+1}`` from ``(o_{t-1}, o_t, a_t)`` by MSE with Adam; returns the net and the loss curve."""
    torch.manual_seed(seed)
    net = PongNet(6, frames.shape[-1], width, action_blind)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    rng = np.random.default_rng(seed)
    e_n, t_n = actions.shape
    losses = []
    for _ in range(iters):
        e, t = rng.integers(0, e_n, batch), rng.integers(0, t_n, batch)
        x = torch.from_numpy(frames[np.stack([e, e, e]), np.stack([np.maximum(t - 1, 0), t, t + 1])]).float() / 255
        prev, cur, nxt = (x[i].permute(0, 3, 1, 2) for i in range(3))
        loss = torch.nn.functional.mse_loss(net(prev, cur, torch.from_numpy(actions[e, t])), nxt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return net, losses


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=48)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--iters", type=int, default=600)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "checkpoints"))
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    t0 = time.perf_counter()
    frames, actions = record(args.episodes, args.steps, args.seed)
    t1 = time.perf_counter()
    out, info = Path(args.out), {}
    for name, blind in (("pong", False), ("pong-action-blind", True)):
        net, losses = train(frames, actions, args.iters, args.seed, blind, args.width)
        sha = save_checkpoint(net, out / f"{name}.pt", episodes=args.episodes, steps=args.steps, iters=args.iters,
                              seed=args.seed)
        info[name] = {"sha256": sha, "first_loss": losses[0], "last_loss": float(np.mean(losses[-50:]))}
    t2 = time.perf_counter()
    info["seconds"] = {"record": round(t1 - t0, 1), "train_both": round(t2 - t1, 1)}
    (out / "train.json").write_text(json.dumps(info, indent=2))
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
