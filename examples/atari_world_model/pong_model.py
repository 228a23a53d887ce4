"""A small action-conditioned world model of Pong, trained on recorded episodes in a few CPU minutes.

The model predicts the next frame from the current and the previous frame and the action:
``o_{t+1} = o_t + f(o_{t-1}, o_t, a_t)``, a residual conv net that works at half the world's
frame size (210 x 160 x 3 for the ``pong`` preset) and returns a full-size delta; the action
enters as one-hot feature planes. The
previous frame carries the ball's velocity; at the first step it is ``o_0`` itself. Open-loop
rollouts feed the model's own frames back. ``action_blind=True`` builds the same network with
the action planes zeroed: the twin the scorecard's action sensitivity should tell apart.

    python examples/atari_world_model/train.py --out examples/atari_world_model/checkpoints

writes ``pong.pt`` and ``pong-action-blind.pt``; ``conf/models/pong_trained.yaml`` evaluates both
beside the generic models (see README.md here).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
from torch import nn

from wmeval.models import History, Prediction


class PongNet(nn.Module):
    """Residual next-frame predictor: (prev, cur, one-hot action) -> next frame.

    A strided conv brings the input to half resolution (where the ball and the paddles are still 1-2 px),
    two 3 x 3 convs mix it with the action planes, and a transposed conv returns a full-resolution delta.
    """

    def __init__(self, n_actions: int, channels: int = 3, width: int = 32, action_blind: bool = False) -> None:
        super().__init__()
        self.n_actions, self.action_blind = n_actions, action_blind
        self.down = nn.Conv2d(2 * channels, width, 4, stride=2, padding=1)
        self.mix = nn.Sequential(nn.ReLU(), nn.Conv2d(width + n_actions, width, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(width, width, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(width, channels, 4, stride=2, padding=1)

    def forward(self, prev: torch.Tensor, cur: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``prev``, ``cur``: ``(B, C, H, W)`` in [0, 1] (H, W even); ``action``: ``(B,)`` -> next frame."""
        h = self.down(torch.cat([prev, cur], dim=1))
        planes = nn.functional.one_hot(action.long(), self.n_actions).float()
        if self.action_blind:
            planes = torch.zeros_like(planes)
        planes = planes[:, :, None, None].expand(-1, -1, *h.shape[2:])
        return (cur + self.up(self.mix(torch.cat([h, planes], dim=1)))).clamp(0.0, 1.0)


def save_checkpoint(net: PongNet, path: Path, **info) -> str:
    """Save the weights and the architecture; returns the file's sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": net.state_dict(), "n_actions": net.n_actions, "action_blind": net.action_blind,
                "width": net.down.out_channels, "channels": net.up.out_channels, **info}, path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


class PongWorldModel:
    """The wmeval adapter: loads a checkpoint and rolls the net out open loop."""

    stochastic = False

    def __init__(self, checkpoint: str, sha256: str | None = None) -> None:
        path = Path(checkpoint)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no checkpoint; train one with examples/atari_world_model/train.py")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if sha256 is not None and digest != sha256:
            raise ValueError(f"{path}: sha256 {digest}, expected {sha256}")
        ck = torch.load(path, map_location="cpu", weights_only=True)
        self.net = PongNet(ck["n_actions"], ck["channels"], ck["width"], ck["action_blind"])
        self.net.load_state_dict(ck["state_dict"])
        self.net.eval()

    @torch.no_grad()
    def predict(self, history: History, actions: np.ndarray, num_samples: int,
                rng: np.random.Generator) -> Prediction:
        frames = torch.from_numpy(np.asarray(history.frames, np.float32)).permute(0, 1, 4, 2, 3)  # (N, T0, C, H, W)
        cur = frames[:, -1]
        prev = frames[:, -2] if frames.shape[1] > 1 else cur
        out = []
        for t in range(actions.shape[1]):
            nxt = self.net(prev, cur, torch.from_numpy(actions[:, t, 0]).round())
            out.append(nxt)
            prev, cur = cur, nxt
        pred = torch.stack(out, dim=1).permute(0, 1, 3, 4, 2).numpy()                           # (N, H, h, w, C)
        return Prediction(frames=np.repeat(pred[:, None], num_samples, axis=1))
