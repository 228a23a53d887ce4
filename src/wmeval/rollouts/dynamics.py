"""Rollouts for seed 002's dynamics layers (state level).

On its own set of ``dynamics.n_episodes`` episodes (starts from the world's
declared distribution), for the true world and every model that predicts states:

* ``open_loop``: rollouts of ``dynamics.horizon`` steps under random plans, the
  world's declared plans (the counterfactual pairs), and ``planner``: the actions
  the random-shooting planner picks *with that model* on the world's first task
  while acting in the real world (model-specific; the true world's futures under
  each model's planner plan are the ground-truth plan ``planner:<model>``);
* ``probe``: zero-action rollouts of ``probe_horizon`` steps for each declared probe;
* ``closed_loop``: MPC with the model on every declared task, acting in the real
  world, ``control_episodes`` episodes of ``control_steps`` steps (for the true
  world: MPC with the true simulator, the oracle reference).

All candidate plans come from one seeded stream per (world, purpose), the same
for every model (common random numbers), so cost differences are paired; the two
arms of a counterfactual pair share one noise stream per source, so a stochastic
model's (or world's) spread between them is the action's effect.
Models that return only frames, and imported predictions (which cannot answer new
queries), are recorded as not applicable, with the reason.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm

from wmeval.core.config import DynamicsConfig, ProtocolConfig, WorldConfig
from wmeval.core.digest import code_version
from wmeval.core.errors import ModelOutputError
from wmeval.core.rng import make_rng
from wmeval.models.base import History, check_prediction
from wmeval.rollouts.episodes import GROUND_TRUTH
from wmeval.rollouts.planning import random_shooting_mpc
from wmeval.tables import rollout_table, with_metadata
from wmeval.worlds import Plan, World, rollout_states
from wmeval.worlds.base import missing

log = logging.getLogger(__name__)
FORMAT = "wmeval-dynamics/1"


class StatePredictor:
    """Wrap a model (or the true world) as ``(B, D), (B, H, A) -> (B, S, H, D)`` state predictions."""

    def __init__(self, name: str, model: Any, world: World, seed: int) -> None:
        self.name, self.model, self.world, self.seed = name, model, world, seed

    def __call__(self, states: np.ndarray, actions: np.ndarray, samples: int, *key: str | int) -> np.ndarray | None:
        # The stream is named by the query alone (never by call order), so adding a model or a
        # plan changes no other draw.
        rng = make_rng(self.seed, self.world.name, "dynamics", self.name, *key)
        if self.model is None:  # the true world: sample futures from the simulator
            s = np.repeat(states, samples, axis=0)
            out = rollout_states(self.world, s, np.repeat(actions, samples, axis=0), rng)[:, 1:]
            return out.reshape(len(states), samples, *out.shape[1:])
        b, h = actions.shape[:2]
        hist = History(states=states[:, None], actions=np.zeros((b, 0, self.world.action_dim)),
                       render=self.world.render)
        try:
            raw = self.model.predict(hist, actions, samples, rng)
        except Exception as e:
            raise ModelOutputError(f"model {self.name!r} on world {self.world.name!r}: predict() raised "
                                   f"{type(e).__name__}: {e} (dynamics queries)") from e
        pred = check_prediction(raw, n=b, samples=samples, horizon=h, frame_shape=self.world.frame_shape,
                                state_dim=self.world.state_dim,
                                where=f"model {self.name!r} on world {self.world.name!r} (dynamics)")
        return pred.states


def _mpc(pred: StatePredictor, world: World, task_cost, start: np.ndarray, steps: int,
         dyn: DynamicsConfig, purpose: str) -> tuple[np.ndarray, np.ndarray]:
    plan_rng = make_rng(dyn.seed, world.name, "mpc_plans", purpose)
    world_rng = make_rng(dyn.seed, world.name, "mpc_world", purpose)
    step = itertools.count()
    return random_shooting_mpc(
        predict=lambda s, a: pred(s, a, 1, "mpc", purpose, next(step))[:, 0],
        real_step=lambda s, a: world.step(s, a, world_rng),
        cost=task_cost, sample_actions=lambda shape: world.sample_actions(plan_rng, shape),
        start=start, steps=steps, n_plans=dyn.n_plans, plan_horizon=dyn.plan_horizon)


def _block(world: World, source: str, regime: str, plan: str, condition: str, states: np.ndarray,
           actions: np.ndarray, t0: int) -> pa.Table:
    """Rows from states ``(N, S, T, D)`` and actions ``(N, T, A)``, steps ``t0..t0 + T - 1``."""
    n, s, T = states.shape[:3]
    return rollout_table(world=world.name, source=source, regime=regime, plan=plan, condition=condition,
                         episodes=np.arange(n), t=np.arange(t0, t0 + T), frames=None, states=states,
                         actions=actions, frame_dtype="float32", reward=world.reward(states, None))


def _predictors(world: World, models: dict[str, Any], dyn: DynamicsConfig, s0: np.ndarray,
                probe_actions: np.ndarray) -> tuple[dict[str, StatePredictor], dict[str, str]]:
    """The true world and every model that can answer state queries; ``{model: reason}`` for the rest."""
    predictors = {GROUND_TRUTH: StatePredictor(GROUND_TRUTH, None, world, dyn.seed)}
    skipped: dict[str, str] = {}
    for name, model in models.items():
        if getattr(model, "precomputed", False):
            skipped[name] = "imported predictions cannot answer the planner's and probes' new queries"
            continue
        if getattr(model, "observation_only", None):
            skipped[name] = model.observation_only
            continue
        p = StatePredictor(name, model, world, dyn.seed)
        if p(s0[:1], probe_actions, 1, "probe_call") is None:
            skipped[name] = "the model predicts frames only; the dynamics layers need states"
            continue
        predictors[name] = p
    return predictors, skipped


@dataclass
class _Queries:
    """One world's dynamics queries: the same start states and plans for every source."""

    world: World
    dyn: DynamicsConfig
    s0: np.ndarray
    plans: list[Plan]
    num_futures: int
    truth: StatePredictor
    blocks: dict[str, list[pa.Table]]
    bar: Any

    def plan_rows(self, name: str, pred: StatePredictor, samples: int) -> None:
        regime = "realized" if name == GROUND_TRUTH else "open_loop"
        arm_key = {arm: f"pair:{a}|{b}" for a, b in self.world.counterfactual_pairs() for arm in (a, b)}
        for p in self.plans:
            # Both arms of a counterfactual pair share one noise stream (common random numbers):
            # their difference is the action's effect, not two independent draws of noise.
            states = pred(self.s0, p.actions, samples, "plan", arm_key.get(p.name, p.name))
            self.blocks[name].append(_block(self.world, name, regime, p.name, p.condition, states, p.actions, 1))
            self.bar.update()

    def planner_rows(self, name: str, pred: StatePredictor, samples: int) -> None:
        """Planner-chosen actions: MPC with this model on the first task, in the real world."""
        world, tasks = self.world, self.world.tasks()
        if name != GROUND_TRUTH and tasks:
            _, acts = _mpc(pred, world, tasks[0].cost, self.s0, self.dyn.horizon, self.dyn,
                           f"planner:{tasks[0].name}")
            states = pred(self.s0, acts, samples, "planner")
            self.blocks[name].append(_block(world, name, "open_loop", "planner", "planner", states, acts, 1))
            real = self.truth(self.s0, acts, self.num_futures, "planner", name)
            self.blocks[GROUND_TRUTH].append(_block(world, GROUND_TRUTH, "realized", f"planner:{name}",
                                                    "planner", real, acts, 1))
        self.bar.update()

    def probe_rows(self, name: str, pred: StatePredictor, samples: int) -> None:
        world, n, s0 = self.world, len(self.s0), self.s0
        for probe in world.probes():
            acts = np.broadcast_to(np.asarray(probe.action, float), (n, self.dyn.probe_horizon,
                                                                      world.action_dim)).copy()
            states = pred(s0, acts, samples, "probe", probe.name)
            states = np.concatenate([np.repeat(s0[:, None, None], samples, axis=1), states], axis=2)
            full = np.concatenate([np.zeros((n, 1, world.action_dim)), acts], axis=1)
            self.blocks[name].append(_block(world, name, "probe", probe.name, probe.name, states, full, 0))
            self.bar.update()

    def control_rows(self, name: str, pred: StatePredictor) -> None:
        world, dyn = self.world, self.dyn
        for task in world.tasks():
            start = np.tile(np.asarray(task.start, float), (dyn.control_episodes, 1))
            real, acts = _mpc(pred, world, task.cost, start, dyn.control_steps, dyn, f"control:{task.name}")
            full = np.concatenate([np.zeros((dyn.control_episodes, 1, world.action_dim)), acts], axis=1)
            self.blocks[name].append(_block(world, name, "closed_loop", task.name, task.name, real[:, None], full, 0))
            self.bar.update()


def not_applicable(world: World) -> str | None:
    """Why the state-level dynamics layers cannot run on ``world`` (``None``: they can).

    They step the world from arbitrary states under many plans (branching) and compare states; a world whose
    states are snapshot handles (a Gymnasium world) gives models its observations instead, which the state
    queries do not yet translate.
    """
    why = missing(world, "branch", "state")
    if why is None and hasattr(world, "observe"):
        why = (f"{world.name}'s states are environment snapshots: the state-level queries (counterfactual pairs, "
               "planner, probes, control) run on built-in simulators only in this version")
    return why


def dynamics_tables(wcfg: WorldConfig, world: World, models: dict[str, Any], dyn: DynamicsConfig,
                    protocol: ProtocolConfig, progress: bool = True) -> tuple[dict[str, pa.Table], dict[str, str]]:
    """The dynamics tables ``{source: table}`` and ``{model: reason}`` for models left out.

    A world that cannot run them (see :func:`not_applicable`) gets one empty ground-truth table whose
    metadata says why, so that every later stage and the scorecard say "not applicable" instead of nothing.
    """
    why = not_applicable(world)
    if why is not None:
        skipped = {name: f"not applicable: {why}" for name in models}
        meta = {"format": FORMAT, "world": world.describe(), "world_config": dataclasses.asdict(wcfg),
                "dynamics": dataclasses.asdict(dyn), "num_futures": 0, "code": code_version("rollouts"),
                "plans": {}, "counterfactual_pairs": [], "tasks": {}, "probes": {}, "skipped": skipped,
                "not_applicable": why}
        empty = pa.table({"world": pa.array([], pa.string())})
        return {GROUND_TRUTH: with_metadata(empty, {**meta, "source": GROUND_TRUTH})}, skipped
    n, H = dyn.n_episodes, dyn.horizon
    s0 = world.initial_states(n, make_rng(dyn.seed, world.name, "dynamics_initial_states"))
    plans = world.plans(n, H, dyn.n_random_plans, make_rng(dyn.seed, world.name, "dynamics_plans"))
    m = protocol.num_futures if world.stochastic else 1
    tasks, probes = world.tasks(), world.probes()
    predictors, skipped = _predictors(world, models, dyn, s0, plans[0].actions[:1, :1])
    steps = len(predictors) * (len(plans) + 1 + len(probes) + len(tasks))
    with tqdm(total=steps, desc=f"dynamics {world.name}", unit="rollout", disable=not progress) as bar:
        q = _Queries(world, dyn, s0, plans, m, predictors[GROUND_TRUTH], {k: [] for k in predictors}, bar)
        for name, pred in predictors.items():
            stochastic = getattr(pred.model, "stochastic", False)
            samples = m if name == GROUND_TRUTH else (protocol.num_samples if stochastic else 1)
            q.plan_rows(name, pred, samples)
            q.planner_rows(name, pred, samples)
            q.probe_rows(name, pred, samples)
            q.control_rows(name, pred)
    meta = {
        "format": FORMAT, "world": world.describe(), "world_config": dataclasses.asdict(wcfg),
        "dynamics": dataclasses.asdict(dyn), "num_futures": m, "code": code_version("rollouts"),
        "plans": {p.name: p.condition for p in plans}, "counterfactual_pairs": world.counterfactual_pairs(),
        "tasks": {t.name: {"start": list(t.start), "description": t.description} for t in tasks},
        "probes": {p.name: p.description for p in probes}, "skipped": skipped,
    }
    return {name: with_metadata(pa.concat_tables(parts), {**meta, "source": name})
            for name, parts in q.blocks.items()}, skipped
