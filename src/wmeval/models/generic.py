"""Generic models for any world: a floor and a sanity check on every scorecard.

* :class:`PersistenceModel` repeats the last observed frame (and state, where the world has
  one): the floor every world model must beat, and blind to actions by construction.
* :class:`OracleNoiseModel` is the true future plus declared Gaussian noise: a calibration
  point whose pixel error is known in advance (``noise_std**2`` per pixel, before clipping
  to [0, 1]), so a metric that does not rank it just behind the truth is broken. It rolls the
  true world from the episode's own state, so the world must be able to branch.

The ``shuffled`` control (:class:`~wmeval.models.controls.ShuffledFuturesModel`) completes the set.
"""

from __future__ import annotations

import numpy as np

from wmeval.core.errors import ConfigError
from wmeval.worlds.base import capabilities, missing, observe, rollout_states

from .base import History, Prediction


class PersistenceModel:
    """Repeat the last observed frame (and observed state) for every step."""

    stochastic = False

    def predict(self, history: History, actions: np.ndarray, num_samples: int,
                rng: np.random.Generator) -> Prediction:
        n, horizon = actions.shape[:2]
        last = history.frames[:, -1]
        frames = np.broadcast_to(last[:, None, None], (n, num_samples, horizon, *last.shape[1:]))
        states = None
        if history.states is not None:
            s = history.states[:, -1]
            states = np.broadcast_to(s[:, None, None], (n, num_samples, horizon, s.shape[-1]))
        return Prediction(frames=frames, states=states)


class OracleNoiseModel:
    """The true world's future under the given actions, plus ``N(0, noise_std^2)`` on every pixel (clipped to
    [0, 1]) and ``N(0, state_noise_std^2)`` on every observed state coordinate.

    Args:
        world: the ground-truth world (passed by wmeval).
        noise_std: pixel noise, in units of the [0, 1] data range.
        state_noise_std: state noise, in the state's units.
        reward_noise_std: noise on the predicted rewards the planner reads on a task whose cost is an
            environment's reward (``N(0, reward_noise_std^2)`` per step; a world with ``rollout_rewards``).
    """

    def __init__(self, world, noise_std: float = 0.05, state_noise_std: float = 0.0,
                 reward_noise_std: float = 0.0) -> None:
        why = missing(world, "branch")
        if why is not None:
            raise ConfigError(f"oracle-noise needs the true future from each episode's state, but {why}")
        if not noise_std >= 0 or not state_noise_std >= 0 or not reward_noise_std >= 0:
            raise ConfigError(f"oracle-noise: noise_std, state_noise_std and reward_noise_std must be >= 0, got "
                              f"{noise_std}, {state_noise_std}, {reward_noise_std}")
        self.world, self.noise_std, self.state_noise_std = world, float(noise_std), float(state_noise_std)
        self.reward_noise_std = float(reward_noise_std)
        self.stochastic = "stochastic" in capabilities(world)

    def predict_rewards(self, history: History, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        """The true rewards ``(N, H)`` of ``actions`` from the last context state plus the declared reward noise,
        without frames (the planner's fast path); ``None`` where the world cannot give rewards by branching."""
        fn = getattr(self.world, "rollout_rewards", None)
        if fn is None:
            return None
        r = fn(history.world_states[:, -1], actions, rng)
        return r + rng.normal(0.0, self.reward_noise_std, r.shape) if self.reward_noise_std > 0 else r

    def predict(self, history: History, actions: np.ndarray, num_samples: int,
                rng: np.random.Generator) -> Prediction:
        n, horizon = actions.shape[:2]
        s0 = history.world_states[:, -1]
        s = np.repeat(s0, num_samples, axis=0)
        a = np.repeat(actions, num_samples, axis=0)
        future = rollout_states(self.world, s, a, rng)[:, 1:]                   # (N * S, H, D)
        frames = self.world.render(future)
        frames = np.clip(frames + rng.normal(0.0, self.noise_std, frames.shape), 0.0, 1.0).astype(np.float32)
        states = observe(self.world, future)
        if states is not None and self.state_noise_std > 0:
            states = states + rng.normal(0.0, self.state_noise_std, states.shape)
        shape = (n, num_samples, horizon)
        return Prediction(frames=frames.reshape(*shape, *frames.shape[2:]),
                          states=None if states is None else states.reshape(*shape, states.shape[-1]))
