"""Seed 002's driven, damped pendulum, with a renderer.

The dynamics are exactly seed 002's ``env_step`` (semi-implicit Euler, DT = 0.1):

    omega' = omega + DT * (-9.8 sin(theta) + 2.0 a - 0.1 omega)
    theta' = theta + DT * omega'

with state ``(theta, omega)`` (theta = 0 hangs straight down) and torque
``a`` in [-1, 1]. The world is deterministic; the sensor noise of the seed applies
only to the logged transitions used to fit models (:func:`logged_transitions`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .base import Plan, Probe, Task

DT = 0.1
GRAVITY = 9.8
GAIN = 2.0
DAMPING = 0.1


def env_step(s: np.ndarray, a: np.ndarray, dt: float = DT) -> np.ndarray:
    """Seed 002's ground truth: ``s = (theta, omega)`` ``(..., 2)``, ``a`` torque ``(...)``."""
    th, om = s[..., 0], s[..., 1]
    om2 = om + dt * (-GRAVITY * np.sin(th) + GAIN * a - DAMPING * om)
    return np.stack([th + dt * om2, om2], axis=-1)


def logged_transitions(
    rng: np.random.Generator, n: int = 5000, noise: float = 0.01, dt: float = DT
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seed 002's fitting data: random states and torques, noisy next states.

    The draws happen in the seed's order (states, actions, noise), so
    ``rng = np.random.default_rng(0)`` reproduces the seed's data exactly.

    Returns:
        ``S`` ``(n, 2)``, ``A`` ``(n,)``, ``S2`` ``(n, 2)``.
    """
    S = rng.uniform([-1.5, -3], [1.5, 3], size=(n, 2))
    A = rng.uniform(-1, 1, size=n)
    S2 = env_step(S, A, dt) + rng.normal(0, noise, size=(n, 2))
    return S, A, S2


@dataclass(frozen=True)
class PendulumWorld:
    """The pendulum as a :class:`~wmeval.worlds.base.World`.

    Args:
        frame_size: rendered frames are ``frame_size x frame_size`` grayscale.
        init_low, init_high: initial states are uniform in this box
            (seed 002 draws rollout starts from [-1, 1]^2).
        rod_width: Gaussian half-width of the rendered rod, pixels.
        bob_sigma: Gaussian radius of the rendered bob, pixels.
    """

    name: str = "pendulum"
    frame_size: int = 64
    init_low: tuple[float, float] = (-1.0, -1.0)
    init_high: tuple[float, float] = (1.0, 1.0)
    rod_width: float = 1.0
    bob_sigma: float = 2.5
    dt: float = DT

    hold_target: float = 0.15

    stochastic = False
    state_dim = 2
    action_dim = 1
    # Event: the bob rises above half the rod's height (|theta| > 60 degrees).
    reward_event_threshold = 0.5

    def __post_init__(self) -> None:
        if self.frame_size < 8:
            raise ValueError(f"pendulum frame_size must be >= 8, got {self.frame_size}")

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        return (self.frame_size, self.frame_size, 1)

    def initial_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(self.init_low, self.init_high, size=(n, 2))

    def plans(self, n: int, horizon: int, n_random: int, rng: np.random.Generator) -> list[Plan]:
        plans = [
            Plan(f"random_{i}", "random", self.sample_actions(rng, (n, horizon)))
            for i in range(n_random)
        ]
        # Seed 002's counterfactual pair: full torque one way vs the other.
        plans.append(Plan("const_+1", "+1", np.ones((n, horizon, 1))))
        plans.append(Plan("const_-1", "-1", -np.ones((n, horizon, 1))))
        return plans

    def sample_actions(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.uniform(-1, 1, size=(*shape, 1))

    def energy(self, states: np.ndarray) -> np.ndarray:
        """Seed 002's mechanical energy ``0.5 omega^2 + g (1 - cos theta)``."""
        return 0.5 * states[..., 1] ** 2 + GRAVITY * (1 - np.cos(states[..., 0]))

    def tasks(self) -> list[Task]:
        target = self.hold_target
        return [
            Task("hold", (0.0, 0.0), lambda s: (s[..., 0] - target) ** 2,
                 f"hold theta at {target} from rest (seed 002); cost (theta - {target})^2"),
            Task("swing_up", (0.0, 0.0), lambda s: ((1 + np.cos(s[..., 0])) / 2) ** 2,
                 "swing up from rest towards theta = pi; cost ((1 + cos theta) / 2)^2"),
        ]

    def probes(self) -> list[Probe]:
        return [Probe("energy_non_increase", self.energy, (0.0,),
                      "zero torque: mechanical energy 0.5 omega^2 + g (1 - cos theta) must not grow")]

    def counterfactual_pairs(self) -> list[tuple[str, str]]:
        return [("const_+1", "const_-1")]

    def reward(self, states: np.ndarray | None, frames: np.ndarray | None) -> np.ndarray | None:
        """Bob height above its lowest point, in rod lengths: ``1 - cos theta``."""
        return None if states is None else 1.0 - np.cos(states[..., 0])

    outcome_event_name = "theta ends above theta0"

    def outcome_event(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Declared event for reliability: the pendulum ends at a larger angle than it started."""
        return np.asarray(end)[..., 0] > np.asarray(start)[..., 0]

    def step(self, states: np.ndarray, actions: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        return env_step(states, np.asarray(actions)[..., 0], self.dt)

    def state_delta(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Plain difference (seed 002's rollout RMSE does not wrap theta)."""
        return np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)

    def render(self, states: np.ndarray) -> np.ndarray:
        """Draw the rod and bob; ``(..., 2)`` states to ``(..., S, S, 1)`` float32."""
        states = np.asarray(states, dtype=np.float64)
        lead = states.shape[:-1]
        th = states.reshape(-1, 2)[:, 0]
        size = self.frame_size
        c = (size - 1) / 2.0
        length = 0.38 * size
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
        # Image coordinates: x to the right, y down; theta = 0 points down.
        tip_x = c + length * np.sin(th)
        tip_y = c + length * np.cos(th)
        dx, dy = tip_x - c, tip_y - c
        px, py = xx[None] - c, yy[None] - c
        proj = (px * dx[:, None, None] + py * dy[:, None, None]) / (length**2)
        proj = np.clip(proj, 0.0, 1.0)
        dist_rod = np.hypot(px - proj * dx[:, None, None], py - proj * dy[:, None, None])
        rod = 0.6 * np.exp(-0.5 * (dist_rod / self.rod_width) ** 2)
        dist_bob2 = (xx[None] - tip_x[:, None, None]) ** 2 + (yy[None] - tip_y[:, None, None]) ** 2
        bob = np.exp(-0.5 * dist_bob2 / self.bob_sigma**2)
        img = np.clip(np.maximum(rod, bob), 0.0, 1.0).astype(np.float32)
        return img.reshape(*lead, size, size, 1)

    nll_base_measure = "Lebesgue measure on the state (theta in rad, omega in rad/s): a density, nats per step"

    @property
    def initial_states_text(self) -> str:
        return f"uniform in [{list(self.init_low)}, {list(self.init_high)}] (theta, omega)"

    def describe(self) -> dict:
        d = asdict(self)
        d.update(kind="pendulum", dynamics="seed 002 env_step (semi-implicit Euler)",
                 reward="1 - cos(theta)", event=f"reward > {self.reward_event_threshold}",
                 gravity=GRAVITY, gain=GAIN, damping=DAMPING, stochastic=False)
        return d
