"""The ground-truth world interface.

A world is a simulator we trust: it draws initial states for evaluation episodes,
declares the action plans to evaluate under, steps states forward (stochastically
if the world is stochastic) and renders states to frames, so that state metrics
and pixel metrics apply to the same rollouts.

Conventions (all arrays are batched over episodes, first axis N):

* states ``(N, D)`` float64;
* actions ``(N, A)`` float64 for one step, plans ``(N, H, A)``;
* frames ``(N, H_img, W, C)`` float32 in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Plan:
    """One action plan evaluated from every episode's initial state.

    Attributes:
        name: plan id, unique within the world (``random_0``, ``const_+1``, ``left``).
        condition: the stratum label written on every row of this plan
            (the discrete action, the counterfactual arm, or ``random``).
        actions: ``(N, H, A)`` float64, one action sequence per episode.
    """

    name: str
    condition: str
    actions: np.ndarray


@dataclass(frozen=True)
class Task:
    """A control task: start state, per-step cost, declared target.

    ``cost_from = "state"``: ``cost`` maps states ``(..., D) -> (...)`` and every control episode starts from
    ``start``. ``cost_from = "reward"`` (an environment's own reward): ``cost`` maps per-step rewards
    ``(...) -> (...)`` (the negative reward), the planner needs predicted rewards, and control episodes start
    from the world's own initial states (``start`` is ``None``).
    """

    name: str
    start: tuple[float, ...] | None
    cost: object  # Callable[[np.ndarray], np.ndarray]
    description: str
    cost_from: str = "state"


@dataclass(frozen=True)
class Probe:
    """A physical invariant: ``quantity(states)`` must not increase under ``action`` (a constant)."""

    name: str
    quantity: object  # Callable[[np.ndarray], np.ndarray]
    action: tuple[float, ...]
    description: str


@runtime_checkable
class World(Protocol):
    """What the rollout protocol needs from a ground-truth world."""

    name: str
    stochastic: bool
    state_dim: int
    action_dim: int
    frame_shape: tuple[int, int, int]

    def initial_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``(n, D)`` initial states from the world's declared distribution."""

    def plans(self, n: int, horizon: int, n_random: int, rng: np.random.Generator) -> list[Plan]:
        """The plans to evaluate: ``n_random`` random plans first, then the declared ones."""

    def step(self, states: np.ndarray, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Advance ``(N, D)`` states by one ``(N, A)`` action."""

    def state_delta(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The state error ``a - b`` in the world's geometry (e.g. wrapped on a torus)."""

    def render(self, states: np.ndarray) -> np.ndarray:
        """Render ``(..., D)`` states to ``(..., H_img, W, C)`` float32 frames in [0, 1]."""

    def sample_actions(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Random actions ``(*shape, A)`` from the world's action space (random plans, MPC candidates)."""

    def tasks(self) -> list[Task]:
        """Declared control tasks; the first one is what the planner optimises for planner-chosen plans."""

    def probes(self) -> list[Probe]:
        """Declared physical-consistency probes (may be empty)."""

    def counterfactual_pairs(self) -> list[tuple[str, str]]:
        """Pairs of plan names evaluated as counterfactuals from the same start."""

    outcome_event_name: str

    #: The initial-state distribution of the evaluation episodes, in words (protocol cards).
    initial_states_text: str
    #: The measure ``nll`` is taken against (a density or a mass), in words (protocol cards).
    nll_base_measure: str

    def outcome_event(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """The declared binary event of a rollout (start and end states ``(..., D)``) for reliability."""

    def reward(self, states: np.ndarray | None, frames: np.ndarray | None) -> np.ndarray | None:
        """Per-step reward from predicted states or frames (None if it cannot be read from them)."""

    reward_event_threshold: float

    def describe(self) -> dict:
        """A JSON-serialisable description of every parameter (for file metadata)."""


#: What a world can do. Every world produces ground-truth ``episodes``; ``branch``: a state can be stepped under
#: several plans (counterfactual pairs, K realized futures, MPC in the real system, probes, oracle controls);
#: ``state``: it exposes a low-dimensional state; ``stochastic``: its transitions are random.
CAPABILITIES = ("episodes", "branch", "state", "stochastic")


def capabilities(world: World) -> frozenset[str]:
    """The world's declared capabilities (a world that declares none is a full simulator: its state array is
    a low-dimensional state, any state can be stepped again)."""
    caps = getattr(world, "capabilities", None)
    if caps is not None:
        return frozenset(caps)
    return frozenset({"episodes", "branch", "state", *(("stochastic",) if world.stochastic else ())})


def missing(world: World, *needed: str) -> str | None:
    """``"<world> cannot <capability>"`` for the first capability in ``needed`` the world lacks, else ``None``."""
    words = {"branch": "branch (restore a saved state and roll another plan from it)",
             "state": "expose a low-dimensional state", "stochastic": "draw random transitions"}
    caps = capabilities(world)
    for c in needed:
        if c not in caps:
            return f"{world.name} cannot {words.get(c, c)}"
    return None


def observe(world: World, states: np.ndarray) -> np.ndarray | None:
    """The observed state of world states (the states themselves unless the world keeps handles)."""
    fn = getattr(world, "observe", None)
    return states if fn is None else fn(states)


def true_reward(world: World, states: np.ndarray, frames: np.ndarray) -> np.ndarray | None:
    """The ground truth's per-step reward: the world's own record where it keeps one, else read from states/frames."""
    fn = getattr(world, "true_reward", None)
    return world.reward(states, frames) if fn is None else fn(states)


class ExternalWorld:
    """Shared defaults of worlds wmeval did not write (an environment, recordings): no declared control task,
    probe or binary event, and states compared by plain differences."""

    outcome_event_name = None            # no declared binary event: the reliability layer is not applicable
    reward_event_threshold = 0.0
    nll_base_measure = "Lebesgue measure on frames in [0, 1] (a density, nats per step)"

    def tasks(self) -> list[Task]:
        return []

    def probes(self) -> list[Probe]:
        return []

    def outcome_event(self, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
        """No declared event (``outcome_event_name`` is ``None``)."""
        return None

    def state_delta(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)

    def reward(self, states: np.ndarray | None, frames: np.ndarray | None) -> np.ndarray | None:
        """A prediction's reward cannot be read from its frames or observed states: none."""
        return None


def teacher_forced_plan(world: World, configured: str) -> str:
    """The plan the teacher-forced rows follow: the world's own where it has one plan only (recorded data),
    else ``protocol.teacher_forced_plan``."""
    return getattr(world, "teacher_forced_plan", None) or configured


def rollout_states(world: World, s0: np.ndarray, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Roll the true world forward under ``actions`` ``(N, H, A)`` from ``s0`` ``(N, D)``.

    Returns:
        ``(N, H + 1, D)`` states, index 0 being ``s0``.
    """
    out = [np.asarray(s0, dtype=np.float64)]
    for t in range(actions.shape[1]):
        out.append(world.step(out[-1], actions[:, t], rng))
    return np.stack(out, axis=1)
