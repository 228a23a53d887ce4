"""Control predictors: references with a known failure, to check that metrics catch it.

``ShuffledFuturesModel`` is seed 002's layer-3 control: real futures assigned to the wrong
episodes. Each episode's prediction is the true world rolled out, under the episode's own
actions, from *another* episode's current state (episodes shifted by one, a derangement).
Its frames are distributed exactly like real frames, so a pooled frame FD is near zero,
while every paired error is bad.
"""

from __future__ import annotations

import numpy as np

from wmeval.core.errors import ConfigError, ModelOutputError
from wmeval.worlds.base import missing, observe, rollout_states

from .base import History, Prediction


class ShuffledFuturesModel:
    """Real futures of the wrong episode (needs at least two episodes per call)."""

    # A shuffle across the planner's candidate plans (all from one state) would be the true
    # simulator: the control only means something for the observation layers.
    observation_only = "an observation-layer control: shuffling across one state's queries is the true simulator"

    def __init__(self, world) -> None:
        why = missing(world, "branch")
        if why is not None:
            raise ConfigError(f"shuffled rolls the true world from another episode's state, but {why}")
        self.world = world
        self.stochastic = bool(world.describe().get("stochastic", False))

    def borrowed_episodes(self, n: int) -> np.ndarray:
        """For each of ``n`` episodes (one call), the other episode whose state its prediction starts from.

        Its rows depend on that episode as well as on its own (whose actions it uses): a distributional
        estimate that assumes episodes independent must not pair them (``KernelBlocks`` leaves the pair
        out of KID's cross term).
        """
        return np.roll(np.arange(n), 1)

    def predict(self, history: History, actions: np.ndarray, num_samples: int,
                rng: np.random.Generator) -> Prediction:
        if history.world_states is None:
            raise ModelOutputError("ShuffledFuturesModel needs the world's states in the history")
        n = actions.shape[0]
        if n < 2:
            raise ModelOutputError("ShuffledFuturesModel needs at least two episodes per call to shuffle")
        s0 = history.world_states[self.borrowed_episodes(n), -1]               # another episode's state
        s = np.repeat(s0[:, None], num_samples, axis=1).reshape(n * num_samples, -1)
        a = np.repeat(actions[:, None], num_samples, axis=1).reshape(n * num_samples, *actions.shape[1:])
        states = rollout_states(self.world, s, a, rng)[:, 1:]                 # (N * S, H, D)
        shape = (n, num_samples, *states.shape[1:2])
        if not hasattr(self.world, "observe"):  # the states are the observed states: rendered by the stage
            return Prediction(states=states.reshape(*shape, -1))
        frames, obs = self.world.render(states), observe(self.world, states)
        return Prediction(frames=frames.reshape(*shape, *frames.shape[2:]),
                          states=None if obs is None else obs.reshape(*shape, -1))
