"""Seed 002's reference pendulum models, fitted by least squares.

Each model is ``s' = phi(s, a) @ W`` with ``W`` from ``np.linalg.lstsq`` on seed
002's logged transitions (5000 random transitions, sensor noise 0.01; drawn with
``np.random.default_rng(fit_seed)`` in the seed's order, so fit_seed = 0 gives the
seed's exact weights). The feature maps are the seed's:

* ``linear``: ``[theta, omega, a, 1]`` (cannot represent sin(theta));
* ``action-blind``: ``[theta, omega, sin(theta), 1]`` (never sees the action);
* ``sin-features``: ``[theta, omega, sin(theta), a, 1]`` (the right function class).

``stochastic: true`` adds Gaussian noise with per-dimension standard deviation
``sigma`` (default: the fit's residual standard deviation) and exposes the
Gaussian transition density through :meth:`log_prob`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from wmeval.worlds.pendulum import DT, logged_transitions

from .base import History, Prediction

FeatureName = Literal["linear", "action-blind", "sin-features"]

# np.column_stack builds the same C-ordered array as np.c_ (so the same product with W, bit for bit) at a
# fraction of np.c_'s indexing overhead: the models call these once per step of every rollout.
FEATURES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "linear": lambda s, a: np.column_stack([s, a, np.ones(len(s))]),
    "action-blind": lambda s, a: np.column_stack([s, np.sin(s[:, :1]), np.ones(len(s))]),
    "sin-features": lambda s, a: np.column_stack([s, np.sin(s[:, :1]), a, np.ones(len(s))]),
}


class LeastSquaresPendulumModel:
    """A least-squares pendulum model (seed 002 ``fit``), optionally with Gaussian noise.

    Args:
        features: one of ``linear``, ``action-blind``, ``sin-features``.
        fit_seed: seed of the logged-transition draw.
        n_transitions, noise: the logged data recipe (seed 002: 5000, 0.01).
        stochastic: sample ``s' ~ N(phi(s, a) W, diag(sigma^2))``.
        sigma: noise scale per state dimension; ``None`` uses the residual std.
        world: the pendulum world (for its time step); optional.
    """

    def __init__(self, features: FeatureName, fit_seed: int = 0, n_transitions: int = 5000,
                 noise: float = 0.01, stochastic: bool = False,
                 sigma: float | list[float] | None = None, world=None) -> None:
        if features not in FEATURES:
            raise ValueError(f"features must be one of {sorted(FEATURES)}, got {features!r}")
        self.features = features
        self.stochastic = bool(stochastic)
        dt = getattr(world, "dt", DT)
        S, A, S2 = logged_transitions(np.random.default_rng(fit_seed), n_transitions, noise, dt)
        X = FEATURES[features](S, A)
        self.W, *_ = np.linalg.lstsq(X, S2, rcond=None)
        resid = S2 - X @ self.W
        if sigma is None:
            self.sigma = resid.std(axis=0)
        else:
            self.sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), (2,)).copy()
        if self.stochastic and np.any(self.sigma <= 0):
            raise ValueError(f"stochastic pendulum model needs sigma > 0, got {self.sigma}")

    def mean_step(self, s: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Deterministic one-step map, ``s`` ``(..., 2)``, ``a`` ``(...)``."""
        lead = s.shape[:-1]
        out = FEATURES[self.features](s.reshape(-1, 2), np.asarray(a).reshape(-1)) @ self.W
        return out.reshape(*lead, 2)

    def predict(self, history: History, actions: np.ndarray, num_samples: int,
                rng: np.random.Generator) -> Prediction:
        n, horizon = actions.shape[:2]
        s = np.repeat(history.states[:, -1][:, None], num_samples, axis=1)  # (N, S, 2)
        out = np.empty((n, num_samples, horizon, 2))
        for t in range(horizon):
            s = self.mean_step(s, np.broadcast_to(actions[:, t, 0][:, None], (n, num_samples)))
            if self.stochastic:
                s = s + rng.normal(size=s.shape) * self.sigma
            out[:, :, t] = s
        return Prediction(states=out)

    def log_prob(self, history: History, actions: np.ndarray, future: History) -> np.ndarray:
        """Gaussian log density of each realized step given the realized previous state."""
        if not self.stochastic:
            raise NotImplementedError("a deterministic model has no density")
        prev = np.concatenate([history.states[:, -1:], future.states[:, :-1]], axis=1)
        mean = self.mean_step(prev, actions[..., 0])
        z = (future.states - mean) / self.sigma
        return np.sum(-0.5 * z**2 - np.log(self.sigma) - 0.5 * np.log(2 * np.pi), axis=-1)
