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
from wmeval.core.parallel import can_fork, fork_map
from wmeval.core.rng import make_rng
from wmeval.models.base import History, Prediction, check_prediction, check_states
from wmeval.rollouts.episodes import GROUND_TRUTH
from wmeval.rollouts.planning import random_shooting_mpc
from wmeval.tables import rollout_table, with_metadata
from wmeval.worlds import Plan, World, rollout_states
from wmeval.worlds.base import missing, observe

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


#: Why the state-level queries do not run on a world whose states are environment snapshots.
SNAPSHOT_STATES = ("its states are environment snapshots: the state-level queries (state rollout curves, "
                   "counterfactual pairs on states, probes) need a simulator that steps arbitrary states; rollout "
                   "curves run on frames instead (from the control starts), and action sensitivity and "
                   "counterfactual consistency on frames too (observation layers)")


def not_applicable(world: World) -> str | None:
    """Why none of the dynamics layers can run on ``world`` (``None``: some can).

    The state-level layers step the world from arbitrary states under many plans (branching) and compare
    states. A world whose states are snapshot handles (a Gymnasium world) runs only its declared control
    tasks (MPC acted out in the environment, by branching): see :func:`control_tables`.
    """
    if hasattr(world, "observe"):
        why = missing(world, "branch")
        if why is None and not world.tasks():
            why = f"{world.name} declares no control task (params.control_tasks) and {SNAPSHOT_STATES}"
        return why
    return missing(world, "branch", "state")


class RewardPredictor:
    """Wrap a model (or the true environment) as ``handles (B, 1), plans (B, H, A) -> rewards (B, H, 1)``:
    the predicted per-step reward the planner sums on a task whose cost is the environment's reward.

    The model sees the current real frame (and observed state) as its one-step context. It answers through
    ``predict_rewards(history, actions, rng) -> (B, H)`` where it has one (no frames drawn), else through
    ``predict(...).rewards``, asked for at most :data:`CHUNK_BYTES` of frames at a time (a frame model draws
    frames for every candidate; only the rewards are read). ``None``: the model predicts no reward. The true
    environment scores candidates by branching (``rollout_rewards``): the oracle planner.
    """

    def __init__(self, name: str, model: Any, world: World, seed: int) -> None:
        self.name, self.model, self.world, self.seed = name, model, world, seed
        self.where = f"model {name!r} on world {world.name!r} (control)"

    def __call__(self, handles: np.ndarray, plans: np.ndarray, *key: str | int) -> np.ndarray | None:
        world, (b, h) = self.world, plans.shape[:2]
        if self.model is None:
            return world.rollout_rewards(handles, plans, self._rng(*key))[..., None]
        fn = getattr(self.model, "predict_rewards", None)
        if fn is not None:
            try:
                r = fn(self._history(handles), plans, self._rng(*key))
            except NotImplementedError:
                r = None
            except Exception as e:
                raise ModelOutputError(f"{self.where}: predict_rewards() raised {type(e).__name__}: {e}") from e
            return None if r is None else check_states(r, (b, h), f"{self.where}: predict_rewards()")[..., None]
        rows = max(1, CHUNK_BYTES // max(1, h * int(np.prod(world.frame_shape)) * 4))
        parts = []
        for c, lo in enumerate(range(0, b, rows)):
            hi = min(b, lo + rows)
            try:
                raw = self.model.predict(self._history(handles[lo:hi]), plans[lo:hi], 1, self._rng(*key, c))
            except Exception as e:
                raise ModelOutputError(f"{self.where}: predict() raised {type(e).__name__}: {e}") from e
            if not isinstance(raw, Prediction):
                raise ModelOutputError(f"{self.where}: predict() returned {type(raw).__name__}, expected "
                                       "wmeval.models.Prediction")
            if raw.rewards is None:
                return None
            parts.append(check_states(raw.rewards, (hi - lo, 1, h), f"{self.where}: rewards")[:, 0])
        return np.concatenate(parts)[..., None]

    def _rng(self, *key: str | int) -> np.random.Generator:
        return make_rng(self.seed, self.world.name, "control", self.name, *key)

    def _history(self, handles: np.ndarray) -> History:
        return History(states=observe(self.world, handles[:, None]),
                       actions=np.zeros((len(handles), 0, self.world.action_dim)), render=self.world.render,
                       world_states=handles[:, None])

    def plan(self, handles: np.ndarray, plans: np.ndarray, *key: str | int) -> np.ndarray:
        """As a call, for a model already known to predict rewards: ``None`` now is an error."""
        r = self(handles, plans, *key)
        if r is None:
            raise ModelOutputError(f"{self.where}: predicted rewards on the first query but none on a planner "
                                   "query; return rewards always or never")
        return r


#: The most bytes of frames a frame model is asked to draw at once while planning (float32 frames).
CHUNK_BYTES = 2**28


def _act_out(pred: RewardPredictor, world: World, task, start: np.ndarray,
             dyn: DynamicsConfig) -> tuple[np.ndarray, np.ndarray]:
    """MPC on ``task`` planning with ``pred``, acting in the real environment from ``start`` handles."""
    purpose = f"control:{task.name}"
    plan_rng = make_rng(dyn.seed, world.name, "mpc_plans", purpose)
    world_rng = make_rng(dyn.seed, world.name, "mpc_world", purpose)
    step = itertools.count()
    return random_shooting_mpc(
        predict=lambda s, a: pred.plan(s, a, "mpc", purpose, next(step)),
        real_step=lambda s, a: world.step(s, a, world_rng), cost=lambda r: task.cost(r[..., 0]),
        sample_actions=lambda shape: world.sample_actions(plan_rng, shape), start=start, steps=dyn.control_steps,
        n_plans=dyn.n_plans, plan_horizon=dyn.plan_horizon)


def control_tables(wcfg: WorldConfig, world: World, models: dict[str, Any], dyn: DynamicsConfig,
                   protocol: ProtocolConfig, progress: bool = True) -> tuple[dict[str, pa.Table], dict[str, str]]:
    """Seed 002's control layer on an environment: random-shooting MPC on each declared task, acting in the
    real environment from the world's own initial states, planning with the environment itself (the oracle:
    candidates scored by branching) and with every model that predicts rewards.

    Every source starts from the same snapshots and draws the same candidate plans (common random numbers).
    Rows: regime ``closed_loop``, plan and condition the task, ``t = 0..steps``, with the frames, observed
    states and the environment's reward of each real step.
    """
    tasks = world.tasks()
    E = dyn.control_episodes
    starts = {t.name: world.initial_states(E, make_rng(dyn.seed, world.name, "control_starts", t.name))
              for t in tasks}
    first = starts[tasks[0].name]
    predictors = {GROUND_TRUTH: RewardPredictor(GROUND_TRUTH, None, world, dyn.seed)}
    skipped: dict[str, str] = {}
    frame_only: dict[str, Any] = {}      # no reward to plan with, but frames under new actions: random curves
    for name, model in models.items():
        if getattr(model, "precomputed", False):
            skipped[name] = "imported predictions cannot answer the planner's new queries"
            continue
        if getattr(model, "observation_only", None):
            skipped[name] = model.observation_only
            continue
        p = RewardPredictor(name, model, world, dyn.seed)
        probe = world.sample_actions(make_rng(dyn.seed, "reward_probe"), (len(first), 1))
        if p(first, probe, "reward_probe") is None:
            frame_only[name] = model
            skipped[name] = ("the model predicts no reward (Prediction.rewards or predict_rewards), so it cannot "
                             "plan on the environment's reward")
            continue
        predictors[name] = p
    blocks: dict[str, list[pa.Table]] = {k: [] for k in [*predictors, *frame_only]}
    h = min(dyn.horizon, dyn.control_steps)
    random_acts = world.sample_actions(make_rng(dyn.seed, world.name, "frame_rollouts", "random"), (E, h))
    with tqdm(total=len(predictors) * (len(tasks) + 1) + len(frame_only), desc=f"control {world.name}",
              unit="task", disable=not progress) as bar:
        for name, pred in predictors.items():
            for i, task in enumerate(tasks):
                real, acts = _act_out(pred, world, task, starts[task.name], dyn)
                full = np.concatenate([np.zeros((E, 1, world.action_dim)), acts], axis=1)
                blocks[name].append(rollout_table(
                    world=world.name, source=name, regime="closed_loop", plan=task.name, condition=task.name,
                    episodes=np.arange(E), t=np.arange(dyn.control_steps + 1), frames=world.render(real)[:, None],
                    states=None if (o := observe(world, real)) is None else o[:, None], actions=full,
                    frame_dtype=protocol.frame_dtype, reward=world.true_reward(real)[:, None]))
                if i == 0 and name != GROUND_TRUTH:
                    # Layer 2 under the planner's actions: the first h actions this model's MPC took; the
                    # real frames they led to are the closed-loop rows above.
                    blocks[name] += _frame_rollouts(world, name, pred.model, first, acts[:, :h], "planner", dyn,
                                                    protocol)
                bar.update()
            if name == GROUND_TRUTH:   # the real futures of the random plans, one realization
                real = rollout_states(world, first, random_acts, make_rng(dyn.seed, world.name, "frame_rollouts",
                                                                           "random_world"))
                blocks[name].append(rollout_table(
                    world=world.name, source=name, regime="realized", plan="random", condition="random",
                    episodes=np.arange(E), t=np.arange(1, h + 1), frames=world.render(real[:, 1:])[:, None],
                    states=None, actions=random_acts, frame_dtype=protocol.frame_dtype))
            else:
                blocks[name] += _frame_rollouts(world, name, pred.model, first, random_acts, "random", dyn,
                                                protocol)
            bar.update()
        for name, model in frame_only.items():
            blocks[name] += _frame_rollouts(world, name, model, first, random_acts, "random", dyn, protocol)
            bar.update()
    meta = _meta(wcfg, world, dyn, 1, skipped, plans={}, counterfactual_pairs=[], probes={},
                 tasks={t.name: {"start": None, "description": t.description, "cost_from": t.cost_from}
                        for t in tasks},
                 frame_rollouts={"horizon": h, "planner_task": tasks[0].name,
                                 "models": [m for m in blocks if m != GROUND_TRUTH and blocks[m]]},
                 state_level=f"not applicable: {SNAPSHOT_STATES}")
    return _tables(meta, blocks), skipped


def _frame_rollouts(world: World, name: str, model: Any, handles: np.ndarray, actions: np.ndarray, plan: str,
                    dyn: DynamicsConfig, protocol: ProtocolConfig) -> list[pa.Table]:
    """A model's open-loop frames from the real snapshots ``handles`` ``(E, 1)`` under ``actions`` ``(E, h, A)``
    (seed 002 layer 2 on frames): rows regime ``open_loop``, plan and condition ``plan``, ``t = 1..h``; at most
    :data:`CHUNK_BYTES` of predicted frames at a time. The draws are named by the query and the chunk's first
    episode, not by call order; a stochastic model's draws therefore depend on the chunk size (fixed by
    :data:`CHUNK_BYTES`, the frame size and K), as the planner's do (:class:`RewardPredictor`)."""
    E, h = actions.shape[:2]
    samples = protocol.num_samples if getattr(model, "stochastic", False) else 1
    where = f"model {name!r} on world {world.name!r} (rollout curves, {plan} actions)"
    rows = max(1, CHUNK_BYTES // max(1, samples * h * int(np.prod(world.frame_shape)) * 4))
    out = []
    for lo in range(0, E, rows):
        hi = min(E, lo + rows)
        hist = History(states=observe(world, handles[lo:hi, None]),
                       actions=np.zeros((hi - lo, 0, world.action_dim)), render=world.render,
                       world_states=handles[lo:hi, None])
        rng = make_rng(dyn.seed, world.name, "frame_rollouts", name, plan, lo)
        try:
            raw = model.predict(hist, actions[lo:hi], samples, rng)
        except Exception as e:
            raise ModelOutputError(f"{where}: predict() raised {type(e).__name__}: {e}") from e
        if isinstance(raw, Prediction) and raw.frames is None:   # a reward or state head only: no pixel curves
            if out:
                raise ModelOutputError(f"{where}: predicted frames for episodes 0..{lo - 1} but none for {lo}..; "
                                       "return frames always or never")
            return []
        pred = check_prediction(raw, n=hi - lo, samples=samples, horizon=h, frame_shape=world.frame_shape,
                                state_dim=world.state_dim, where=where)
        out.append(rollout_table(world=world.name, source=name, regime="open_loop", plan=plan, condition=plan,
                                 episodes=np.arange(lo, hi), t=np.arange(1, h + 1), frames=pred.frames,
                                 states=None, actions=actions[lo:hi], frame_dtype=protocol.frame_dtype))
    return out


def _meta(wcfg: WorldConfig, world: World, dyn: DynamicsConfig, num_futures: int, skipped: dict[str, str],
          **layers: Any) -> dict[str, Any]:
    """The dynamics tables' metadata: what every source's table records, and the layers' declarations."""
    return {"format": FORMAT, "world": world.describe(), "world_config": dataclasses.asdict(wcfg),
            "dynamics": dataclasses.asdict(dyn), "num_futures": num_futures, "code": code_version("rollouts"),
            "skipped": skipped, **layers}


def _tables(meta: dict[str, Any], blocks: dict[str, list[pa.Table]]) -> dict[str, pa.Table]:
    # Control rows carry rewards (and observed states); frame rollout rows do not: those cells are null.
    return {name: with_metadata(pa.concat_tables(parts, promote_options="default"), {**meta, "source": name})
            for name, parts in blocks.items() if parts}


def _queries_setup(world: World, dyn: DynamicsConfig, protocol: ProtocolConfig) -> tuple[np.ndarray, list[Plan], int]:
    """The start states, the plans and the number of realized futures every source is queried with."""
    s0 = world.initial_states(dyn.n_episodes, make_rng(dyn.seed, world.name, "dynamics_initial_states"))
    plans = world.plans(dyn.n_episodes, dyn.horizon, dyn.n_random_plans, make_rng(dyn.seed, world.name, "dynamics_plans"))
    return s0, plans, protocol.num_futures if world.stochastic else 1


def _source_rows(q: _Queries, name: str, pred: StatePredictor, m: int, protocol: ProtocolConfig) -> None:
    stochastic = getattr(pred.model, "stochastic", False)
    samples = m if name == GROUND_TRUTH else (protocol.num_samples if stochastic else 1)
    q.plan_rows(name, pred, samples)
    q.planner_rows(name, pred, samples)
    q.probe_rows(name, pred, samples)
    q.control_rows(name, pred)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass


class DynamicsActor:
    """One model's dynamics queries on a Ray worker (``execution.kind: ray``): builds the world and the model
    once, answers the same queries from the same seeded streams as the stage does here, and returns the
    model's rows and its additions to the ground truth's (the real world under its planner's actions)."""

    def __init__(self, wcfg: WorldConfig, name: str, cfg: dict, cwd: str) -> None:
        import os

        from wmeval.rollouts.episodes import build_models
        from wmeval.worlds import build_world

        if os.path.isdir(cwd):
            os.chdir(cwd)
        self.world = build_world(wcfg.name, dataclasses.asdict(wcfg))
        self.name = name
        self.model = build_models(self.world, {name: dict(cfg)})[name]

    def rows(self, dyn: DynamicsConfig, protocol: ProtocolConfig) -> tuple[list[pa.Table], list[pa.Table]]:
        s0, plans, m = _queries_setup(self.world, dyn, protocol)
        predictors, _ = _predictors(self.world, {self.name: self.model}, dyn, s0, plans[0].actions[:1, :1])
        q = _Queries(self.world, dyn, s0, plans, m, predictors[GROUND_TRUTH], {GROUND_TRUTH: [], self.name: []},
                     _NoBar())
        _source_rows(q, self.name, predictors[self.name], m, protocol)
        return q.blocks[GROUND_TRUTH], q.blocks[self.name]


def _rows_on_actors(wcfg: WorldConfig, models_cfg: dict[str, dict], names: list[str], dyn: DynamicsConfig,
                    protocol: ProtocolConfig, executor: Any, bar: Any, per_source: int) -> dict[str, tuple]:
    """``{model: (its ground-truth additions, its rows)}``, each model on its own actor, in waves of as many
    actors as the cluster holds at once (an actor keeps its CPUs for its life)."""
    import os

    out: dict[str, tuple] = {}
    wave = executor.capacity("rollout")
    for w in range(0, len(names), wave):
        group = names[w:w + wave]
        with executor.actor_group(DynamicsActor, [(wcfg, n, dict(models_cfg[n]), os.getcwd()) for n in group],
                                  "rollout") as handles:
            futures = {n: a.rows.remote(dyn, protocol) for n, a in zip(group, handles)}
            for n in group:
                out[n] = executor.ray.get(futures[n])
                bar.update(per_source)
    return out


def dynamics_tables(wcfg: WorldConfig, world: World, models: dict[str, Any], dyn: DynamicsConfig,
                    protocol: ProtocolConfig, progress: bool = True, executor: Any = None,
                    models_cfg: dict[str, dict] | None = None,
                    n_jobs: int = 1) -> tuple[dict[str, pa.Table], dict[str, str]]:
    """The dynamics tables ``{source: table}`` and ``{model: reason}`` for models left out.

    A world that cannot run them (see :func:`not_applicable`) gets one empty ground-truth table whose
    metadata says why, so that every later stage and the scorecard say "not applicable" instead of nothing.
    With ``executor`` (Ray) and ``models_cfg``, each model's queries run on its own actor
    (:class:`DynamicsActor`) and the rows are assembled in the order the stage makes them here: the same
    tables. With ``n_jobs`` > 1 (for worlds and models whose state a fork copies whole: the built-in ones),
    each source's queries run in a forked process (:func:`~wmeval.core.parallel.fork_map`), assembled the
    same way: the same tables. The control-based queries of an environment world (snapshots in this
    process) run here.
    """
    why = not_applicable(world)
    if why is None and hasattr(world, "observe"):
        return control_tables(wcfg, world, models, dyn, protocol, progress)
    if why is not None:
        skipped = {name: f"not applicable: {why}" for name in models}
        meta = _meta(wcfg, world, dyn, 0, skipped, plans={}, counterfactual_pairs=[], tasks={}, probes={},
                     not_applicable=why)
        return _tables(meta, {GROUND_TRUTH: [pa.table({"world": pa.array([], pa.string())})]}), skipped
    s0, plans, m = _queries_setup(world, dyn, protocol)
    tasks, probes = world.tasks(), world.probes()
    predictors, skipped = _predictors(world, models, dyn, s0, plans[0].actions[:1, :1])
    per_source = len(plans) + 1 + len(probes) + len(tasks)
    remote = executor is not None and models_cfg is not None and len(predictors) > 1
    with tqdm(total=len(predictors) * per_source, desc=f"dynamics {world.name}" + (" (ray)" if remote else ""),
              unit="rollout", disable=not progress) as bar:
        q = _Queries(world, dyn, s0, plans, m, predictors[GROUND_TRUTH], {k: [] for k in predictors}, bar)
        if remote:
            _source_rows(q, GROUND_TRUTH, predictors[GROUND_TRUTH], m, protocol)
            names = [n for n in predictors if n != GROUND_TRUTH]
            done = _rows_on_actors(wcfg, models_cfg, names, dyn, protocol, executor, bar, per_source)
            for name in names:                      # the order the loop below appends them in
                truth_rows, rows = done[name]
                q.blocks[GROUND_TRUTH].extend(truth_rows)
                q.blocks[name].extend(rows)
        elif n_jobs > 1 and can_fork() and len(predictors) > 1:
            def source(name: str) -> dict[str, list[pa.Table]]:
                # Each source's rows and its additions to the ground truth's, from the same seeded streams.
                one = _Queries(world, dyn, s0, plans, m, predictors[GROUND_TRUTH], {GROUND_TRUTH: [], name: []},
                               _NoBar())
                _source_rows(one, name, predictors[name], m, protocol)
                return one.blocks

            names = list(predictors)
            for blocks in fork_map(source, names, n_jobs, progress=lambda k: bar.update(k * per_source)):
                for key, parts in blocks.items():       # the order the loop below appends them in
                    q.blocks[key].extend(parts)
        else:
            for name, pred in predictors.items():
                _source_rows(q, name, pred, m, protocol)
    meta = _meta(wcfg, world, dyn, m, skipped, plans={p.name: p.condition for p in plans},
                 counterfactual_pairs=world.counterfactual_pairs(),
                 tasks={t.name: {"start": list(t.start), "description": t.description} for t in tasks},
                 probes={p.name: p.description for p in probes})
    return _tables(meta, q.blocks), skipped
