"""Seed 000's two-mode blob world.

A 48 x 48 grayscale canvas holds one Gaussian blob (sigma 2.5 px). The action is a
discrete direction, ``left`` (-1) or ``right`` (+1). Under an action the blob
moves horizontally by a *short* or a *long* step with equal probability, so the
future is stochastic with two equally likely modes per step. The canvas wraps
around horizontally (a torus in x), so any horizon stays on the canvas; y does
not change.

State ``(x, y)`` in pixels; action ``(dir,)`` with ``dir`` in {-1, +1}.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .base import Plan, Probe, Task

ACTIONS = {"left": -1.0, "right": 1.0}


def render_blobs(x: np.ndarray, y: np.ndarray, size: int, sigma: float) -> np.ndarray:
    """Gaussian blobs at ``(x, y)`` (any equal shapes) on a canvas periodic in x.

    Returns:
        ``(*x.shape, size, size, 1)`` float32 with peak 1.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    grid = np.arange(size, dtype=np.float64)
    # Periodic distance in x, ordinary distance in y.
    dx = np.abs(grid - x[..., None]) % size
    dx = np.minimum(dx, size - dx)
    gx = np.exp(-0.5 * (dx / sigma) ** 2)
    gy = np.exp(-0.5 * ((grid - y[..., None]) / sigma) ** 2)
    img = gy[..., :, None] * gx[..., None, :]
    return img.astype(np.float32)[..., None]


@dataclass(frozen=True)
class BlobWorld:
    """The blob world as a :class:`~wmeval.worlds.base.World`.

    Args:
        frame_size: canvas side in pixels (seed 000: 48).
        sigma: blob radius in pixels (2.5).
        short_step, long_step: the two equally likely displacements, pixels.
        y_low, y_high: initial y is uniform in this range (constant afterwards).
    """

    name: str = "blobs"
    frame_size: int = 48
    sigma: float = 2.5
    short_step: float = 3.0
    long_step: float = 11.0
    p_long: float = 0.5
    y_low: float = 14.0
    y_high: float = 34.0
    target_x: float = 24.0

    stochastic = True
    state_dim = 2
    action_dim = 1
    # Event: the blob covers the target column (peak intensity there above 0.5).
    reward_event_threshold = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.frame_size, bool) or not isinstance(self.frame_size, int) or self.frame_size < 8:
            raise ValueError(f"blobs frame_size must be an integer >= 8, got {self.frame_size!r}")
        if not self.sigma > 0:
            raise ValueError(f"blobs sigma must be > 0, got {self.sigma}")
        if not self.y_low < self.y_high:
            raise ValueError(f"blobs needs y_low < y_high, got {self.y_low}, {self.y_high}")
        if not 0.0 < self.short_step < self.long_step:
            raise ValueError(
                f"blobs needs 0 < short_step < long_step, got {self.short_step}, {self.long_step}")
        if not 0.0 <= self.p_long <= 1.0:
            raise ValueError(f"blobs p_long must be in [0, 1], got {self.p_long}")

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        return (self.frame_size, self.frame_size, 1)

    def initial_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        x = rng.uniform(0, self.frame_size, size=n)
        y = rng.uniform(self.y_low, self.y_high, size=n)
        return np.stack([x, y], axis=-1)

    def plans(self, n: int, horizon: int, n_random: int, rng: np.random.Generator) -> list[Plan]:
        plans = [
            Plan(f"random_{i}", "random", self.sample_actions(rng, (n, horizon)))
            for i in range(n_random)
        ]
        for name, direction in ACTIONS.items():
            plans.append(Plan(name, name, np.full((n, horizon, 1), direction)))
        return plans

    def sample_actions(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.choice([-1.0, 1.0], size=(*shape, 1))

    def tasks(self) -> list[Task]:
        size, target = self.frame_size, self.target_x

        def cost(s: np.ndarray) -> np.ndarray:
            d = np.abs(s[..., 0] - target) % size
            return (np.minimum(d, size - d) / size) ** 2

        return [Task("reach", (target - size / 2 + 4.0, (self.y_low + self.y_high) / 2), cost,
                     f"move the blob to x = {target} (torus distance / size)^2")]

    def probes(self) -> list[Probe]:
        return []

    def counterfactual_pairs(self) -> list[tuple[str, str]]:
        return [("right", "left")]

    def reward(self, states: np.ndarray | None, frames: np.ndarray | None) -> np.ndarray | None:
        """Brightest pixel of the target column: read from frames, so every model has one."""
        col = int(round(self.target_x)) % self.frame_size
        if frames is not None:
            return np.asarray(frames, dtype=np.float64)[..., :, col, :].max(axis=(-2, -1))
        if states is None:
            return None
        # The same value from the state without rendering: the rendered column's peak.
        grid = np.arange(self.frame_size, dtype=np.float64)
        dx = np.abs(col - states[..., 0]) % self.frame_size
        dx = np.minimum(dx, self.frame_size - dx)
        gy = np.exp(-0.5 * ((grid - states[..., 1:2]) / self.sigma) ** 2).max(axis=-1)
        return np.exp(-0.5 * (dx / self.sigma) ** 2) * gy

    outcome_event_name = "ends right of x0"

    def outcome_event(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Seed 000's declared event: the blob ends right of where it started (the short way round)."""
        dx = (np.asarray(end)[..., 0] - np.asarray(start)[..., 0]) % self.frame_size
        return (dx > 1e-9) & (dx < self.frame_size / 2)

    def displacement(self, actions: np.ndarray, long: np.ndarray) -> np.ndarray:
        """Signed x displacement for ``(N, A)`` actions and boolean ``long`` ``(N,)``."""
        step = np.where(long, self.long_step, self.short_step)
        return np.asarray(actions)[..., 0] * step

    def shift(self, states: np.ndarray, dx: np.ndarray) -> np.ndarray:
        out = np.array(states, dtype=np.float64, copy=True)
        out[..., 0] = (out[..., 0] + dx) % self.frame_size
        return out

    def step(self, states: np.ndarray, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        long = rng.random(np.shape(states)[:-1]) < self.p_long
        return self.shift(states, self.displacement(actions, long))

    def state_delta(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a - b`` with x taken the short way round the torus (state metrics use it)."""
        d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
        d[..., 0] = (d[..., 0] + self.frame_size / 2) % self.frame_size - self.frame_size / 2
        return d

    def render(self, states: np.ndarray) -> np.ndarray:
        states = np.asarray(states, dtype=np.float64)
        return render_blobs(states[..., 0], states[..., 1], self.frame_size, self.sigma)

    nll_base_measure = "counting measure on each step's outcomes (short or long step): a mass, nats per step"

    @property
    def initial_states_text(self) -> str:
        return f"x uniform on the {self.frame_size}-px torus, y uniform in [{self.y_low}, {self.y_high}]"

    def describe(self) -> dict:
        d = asdict(self)
        d.update(kind="blobs", actions=ACTIONS, wrap="periodic in x", stochastic=True,
                 reward=f"max intensity of column x = {self.target_x}",
                 event=f"reward > {self.reward_event_threshold}")
        return d
