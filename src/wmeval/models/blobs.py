"""Seed 000's reference blob models.

* ``sharp-A``: always the short step (one sharp mode);
* ``sharp-B``: always the long step (the other sharp mode);
* ``mean``: the pixel-wise average over the true conditional distribution of
  futures (the MSE-optimal point prediction; a faded multi-blob image);
* ``stochastic``: short or long with the world's probability (the true conditional);
* ``reversed``: seed 000's G2, the true conditional of the *other* action.

These models know the world's geometry (they receive the world object): they
are reference points with known flaws, not learned models.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from wmeval.worlds.blobs import BlobWorld, render_blobs

from .base import History, Prediction

Mode = Literal["sharp-A", "sharp-B", "mean", "stochastic", "reversed"]
MODES = ("sharp-A", "sharp-B", "mean", "stochastic", "reversed")


class BlobReferenceModel:
    """One of seed 000's reference predictors for :class:`~wmeval.worlds.blobs.BlobWorld`."""

    def __init__(self, mode: Mode, world: BlobWorld | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"blob model mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.world = world if world is not None else BlobWorld()
        self.stochastic = mode in ("stochastic", "reversed")

    def predict(self, history: History, actions: np.ndarray, num_samples: int,
                rng: np.random.Generator) -> Prediction:
        w = self.world
        n, horizon = actions.shape[:2]
        s0 = history.states[:, -1]
        if self.mode == "mean":
            return Prediction(frames=self._mean_frames(s0, actions)[:, None])
        direction = -actions if self.mode == "reversed" else actions
        s = np.repeat(s0[:, None], num_samples, axis=1)
        out = np.empty((n, num_samples, horizon, 2))
        for t in range(horizon):
            a = np.broadcast_to(direction[:, t][:, None], (n, num_samples, 1))
            if self.mode == "sharp-A":
                long = np.zeros((n, num_samples), dtype=bool)
            elif self.mode == "sharp-B":
                long = np.ones((n, num_samples), dtype=bool)
            else:
                long = rng.random((n, num_samples)) < w.p_long
            s = w.shift(s, w.displacement(a, long))
            out[:, :, t] = s
        return Prediction(states=out)

    def _mean_frames(self, s0: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Exact conditional-mean frames ``(N, H, size, size, 1)``.

        After t steps the displacement is ``sum_i d_i * short + j * (long - short)``
        where ``j = sum over long steps of d_i``; track the distribution of the
        integer ``j`` in [-t, t] and average the rendered frames under it.
        """
        w = self.world
        n, horizon = actions.shape[:2]
        d = actions[..., 0]
        offsets = np.arange(-horizon, horizon + 1)
        p = np.zeros((n, offsets.size))
        p[:, horizon] = 1.0
        base = np.zeros(n)
        frames = np.empty((n, horizon, w.frame_size, w.frame_size, 1), dtype=np.float64)
        for t in range(horizon):
            base = base + d[:, t] * w.short_step
            up = d[:, t] > 0
            shifted = np.where(up[:, None], np.roll(p, 1, axis=1), np.roll(p, -1, axis=1))
            p = (1 - w.p_long) * p + w.p_long * shifted
            x = s0[:, 0:1] + base[:, None] + offsets[None] * (w.long_step - w.short_step)
            imgs = render_blobs(x, np.broadcast_to(s0[:, 1:2], x.shape), w.frame_size, w.sigma)
            frames[:, t] = np.einsum("nj,njhwc->nhwc", p, imgs.astype(np.float64))
        return np.clip(frames, 0.0, 1.0).astype(np.float32)

    def log_prob(self, history: History, actions: np.ndarray, future: History) -> np.ndarray:
        """Probability mass of each realized step's state under the model's step distribution."""
        if not self.stochastic:
            raise NotImplementedError("a deterministic model has no density")
        w = self.world
        direction = -actions if self.mode == "reversed" else actions
        prev = np.concatenate([history.states[:, -1:], future.states[:, :-1]], axis=1)
        logp = np.full(future.states.shape[:2], -np.inf)
        for long, p in ((False, 1 - w.p_long), (True, w.p_long)):
            pred = w.shift(prev, w.displacement(direction, np.full(prev.shape[:2], long)))
            dx = np.abs(pred[..., 0] - future.states[..., 0]) % w.frame_size
            hit = (np.minimum(dx, w.frame_size - dx) < 1e-6) & (np.abs(pred[..., 1] - future.states[..., 1]) < 1e-6)
            with np.errstate(divide="ignore"):
                logp = np.where(hit, np.logaddexp(logp, np.log(p)), logp)
        return logp
