"""The rollout protocol: episodes, plans, realized futures and every model's predictions.

For one world, with protocol ``N, H, K, M``:

1. draw N initial states (episode ids 0..N-1) and the plans: ``n_random_plans``
   random plans, then the world's declared plans (pendulum: the +1 / -1
   counterfactual pair; blobs: each discrete action);
2. roll the true world out under each plan: M realized futures for a stochastic
   world, 1 for a deterministic one (ground-truth rows, regime ``realized``);
3. for each model, open loop: predict steps 1..H from ``o_0`` and the plan, K
   samples from a stochastic model, 1 otherwise (regime ``open_loop``);
4. teacher forced: along realization 0 of ``teacher_forced_plan``, predict each
   ``o_t`` from the realized ``o_0..o_{t-1}`` (regime ``teacher_forced``), with
   the model's ``log_prob`` of the realized step where it has one.

Steps 2-4 run one block of episodes at a time (``protocol.episode_block`` at most, :func:`episode_blocks`),
so that memory holds one block's frames whatever N is; each source's table is written block by block.

Every random draw comes from :func:`wmeval.core.rng.make_rng` keyed by world, component,
plan, step and block, so results do not depend on which models or plans run, nor on memory. Block 0 keeps the
keys of an unblocked run: a protocol of one block (N <= ``episode_block``) draws what it always did.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from tqdm.auto import tqdm

from wmeval.core.config import ProtocolConfig, WorldConfig
from wmeval.core.digest import code_version
from wmeval.core.errors import ConfigError, ModelOutputError, WmevalError
from wmeval.core.rng import make_rng
from wmeval.models.base import (
    History,
    Prediction,
    build_model,
    check_log_prob,
    check_prediction,
)
from wmeval.tables import METADATA_KEY, rollout_table, with_metadata
from wmeval.worlds import Plan, World, build_world, rollout_states
from wmeval.worlds.base import capabilities, observe, teacher_forced_plan, true_reward

log = logging.getLogger(__name__)

GROUND_TRUTH = "ground_truth"
FORMAT = "wmeval-rollouts/1"


@dataclass(frozen=True)
class Episodes:
    """The evaluation set of one world, or one block of it: ids, initial states, plans, realized futures."""

    ids: np.ndarray            # (N,) episode ids (a block's: lo..hi - 1)
    s0: np.ndarray             # (N, D)
    plans: list[Plan]
    realized: dict[str, np.ndarray]  # plan -> (N, M, H + 1, D) states ({} before :func:`realize`)
    key: tuple = ()            # the block's suffix of every random stream's key (block 0: none)

    def plan(self, name: str) -> Plan:
        for p in self.plans:
            if p.name == name:
                return p
        raise ConfigError(f"params.yaml: protocol.teacher_forced_plan = {name!r} is not a plan of this "
                          f"world (plans: {[p.name for p in self.plans]})")


def episode_blocks(n: int, block: int) -> list[tuple[int, int]]:
    """The ``[lo, hi)`` episode blocks of a protocol: ``ceil(n / block)`` blocks of near-equal size (sizes differ
    by at most one; with ``block >= 3`` no block has fewer than 2 episodes when ``n >= 2``: the shuffled control
    needs 2).

    >>> episode_blocks(70, 32)
    [(0, 23), (23, 46), (46, 70)]
    """
    k = -(-n // max(1, block))
    edges = [n * i // k for i in range(k + 1)]
    return list(zip(edges[:-1], edges[1:]))


def largest_block(n: int, block: int) -> int:
    """The size of the largest of :func:`episode_blocks` ``(n, block)``, without listing them."""
    return -(-n // -(-n // max(1, block))) if n > 0 else 0


def draw_episodes(world: World, protocol: ProtocolConfig) -> Episodes:
    """Steps 1 of the protocol for all N episodes: ids, initial states and plans (no realized futures yet)."""
    n, H, seed = protocol.n_episodes, protocol.horizon, protocol.seed
    s0 = world.initial_states(n, make_rng(seed, world.name, "initial_states"))
    plans = world.plans(n, H, protocol.n_random_plans, make_rng(seed, world.name, "plans"))
    return Episodes(ids=np.arange(n), s0=s0, plans=plans, realized={})


def realize(world: World, protocol: ProtocolConfig, eps: Episodes, index: int, lo: int, hi: int) -> Episodes:
    """Block ``index`` (episodes ``lo..hi - 1``) of ``eps`` with its realized futures (step 2)."""
    seed, n = protocol.seed, protocol.n_episodes
    key = () if index == 0 else ("block", index)
    plans = [dataclasses.replace(p, actions=p.actions[lo:hi]) for p in eps.plans]
    branch = "branch" in capabilities(world)
    m = protocol.num_futures if world.stochastic and branch else 1
    realized = {}
    for p in plans:
        # A world that cannot branch starts each plan afresh from the same initial states: new handles of the
        # block's starts where the world can make them, else all N drawn again (same seeds) and the block's kept.
        if branch or p is plans[0]:
            start = eps.s0[lo:hi]
        elif hasattr(world, "restart"):
            start = world.restart(eps.s0[lo:hi])
        else:
            start = world.initial_states(n, make_rng(seed, world.name, "initial_states"))[lo:hi]
        realized[p.name] = np.stack(
            [rollout_states(world, start, p.actions, make_rng(seed, world.name, "future", p.name, j, *key))
             for j in range(m)], axis=1)
    return Episodes(ids=eps.ids[lo:hi], s0=eps.s0[lo:hi], plans=plans, realized=realized, key=key)


def make_episodes(world: World, protocol: ProtocolConfig) -> Episodes:
    """Steps 1-2 for all N episodes at once (every block's realized futures, concatenated)."""
    eps = draw_episodes(world, protocol)
    blocks = [realize(world, protocol, eps, i, lo, hi)
              for i, (lo, hi) in enumerate(episode_blocks(protocol.n_episodes, protocol.episode_block))]
    realized = {p.name: np.concatenate([b.realized[p.name] for b in blocks]) for p in eps.plans}
    return dataclasses.replace(eps, realized=realized)


def _metadata(world: World, wcfg: WorldConfig, protocol: ProtocolConfig, source: str,
              model_cfg: dict | None, **extra: Any) -> dict:
    return {
        "format": FORMAT, "world": world.describe(), "world_config": dataclasses.asdict(wcfg),
        "source": source, "model_config": model_cfg, "protocol": dataclasses.asdict(protocol),
        "seed": protocol.seed, "code": code_version("rollouts"), "frame_dtype": protocol.frame_dtype,
        "reward": world.describe().get("reward"), **extra,
    }


def ground_truth_table(world: World, wcfg: WorldConfig, protocol: ProtocolConfig, eps: Episodes) -> pa.Table:
    tables = []
    for p in eps.plans:
        states = eps.realized[p.name]  # (N, M, H + 1, D)
        frames = world.render(states)
        actions = np.concatenate([np.zeros_like(p.actions[:, :1]), p.actions], axis=1)
        tables.append(rollout_table(
            world=world.name, source=GROUND_TRUTH, regime="realized", plan=p.name, condition=p.condition,
            episodes=eps.ids, t=np.arange(protocol.horizon + 1), frames=frames, states=observe(world, states),
            actions=actions, frame_dtype=protocol.frame_dtype, reward=true_reward(world, states, frames)))
    meta = _metadata(world, wcfg, protocol, GROUND_TRUTH, None,
                     num_futures=int(states.shape[1]), capabilities=sorted(capabilities(world)),
                     plans={p.name: p.condition for p in eps.plans})
    return with_metadata(pa.concat_tables(tables), meta)


def _predict(model: Any, name: str, world: World, regime: str, plan: Plan, history: History,
             actions: np.ndarray, samples: int, rng: np.random.Generator, eps: Episodes,
             protocol: ProtocolConfig) -> Prediction:
    horizon = actions.shape[1]
    if getattr(model, "precomputed", False):
        return model.load(regime, plan.name, eps.ids, protocol.horizon, samples,
                          world.frame_shape, _state_dim(world), n_episodes=protocol.n_episodes)
    try:
        pred = model.predict(history, actions, samples, rng)
    except ModelOutputError:
        raise
    except (Exception, SystemExit) as e:          # SystemExit: a model calling sys.exit() must not end the stage
        raise ModelOutputError(
            f"model {name!r} on world {world.name!r}: predict() raised {type(e).__name__}: {e} "
            f"(regime {regime}, plan {plan.name})") from None
    return check_prediction(pred, n=len(eps.ids), samples=samples, horizon=horizon,
                            frame_shape=world.frame_shape, state_dim=_state_dim(world),
                            where=f"model {name!r} on world {world.name!r} ({regime}, plan {plan.name})")


def _state_dim(world: World) -> int | None:
    return world.state_dim if "state" in capabilities(world) else None


def _frames(world: World, pred: Prediction, name: str) -> np.ndarray:
    if pred.frames is not None:
        return pred.frames
    if hasattr(world, "observe"):  # its states are handles: an observed state cannot be rendered
        raise ModelOutputError(f"model {name!r} on world {world.name!r}: returned states only; this world renders "
                               "only its own states, so a model must return frames")
    return world.render(pred.states)


def _teacher_forced(model: Any, name: str, world: World, protocol: ProtocolConfig, eps: Episodes, p: Plan,
                    h0: History, real: np.ndarray, real_frames: np.ndarray,
                    samples: int) -> tuple[Prediction, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """One-step predictions of each ``o_t`` from the realized ``o_0..o_{t-1}`` (realization 0 of ``p``):
    ``(first prediction, frames, states, rewards)``."""
    if getattr(model, "precomputed", False):
        pred = _predict(model, name, world, "teacher_forced", p, h0, p.actions, samples, None, eps, protocol)
        return pred, _frames(world, pred, name), pred.states, pred.rewards
    steps = []
    for t in range(1, protocol.horizon + 1):
        hist = History(frames=real_frames[:, :t], states=observe(world, real[:, :t]), actions=p.actions[:, :t - 1],
                       world_states=real[:, :t])
        steps.append(_predict(model, name, world, "teacher_forced", p, hist, p.actions[:, t - 1:t],
                              samples, make_rng(protocol.seed, world.name, "model", name, "teacher_forced", t,
                                                *eps.key),
                              eps, protocol))
    frames = np.concatenate([_frames(world, s, name) for s in steps], axis=2)
    states = None if steps[0].states is None else np.concatenate([s.states for s in steps], axis=2)
    rewards = None if any(s.rewards is None for s in steps) else np.concatenate([s.rewards for s in steps], axis=2)
    return steps[0], frames, states, rewards


def _reward(world: World, pred: Prediction, frames: np.ndarray) -> np.ndarray | None:
    """The reward column of a prediction: the model's own predicted rewards where it returns them (a reward
    head), else the world's reward read from its states or frames."""
    return pred.rewards if pred.rewards is not None else world.reward(pred.states, frames)


def _log_prob(model: Any, name: str, world: World, h0: History, p: Plan, real: np.ndarray,
              real_frames: np.ndarray) -> np.ndarray | None:
    """The model's log density of the realized future ``(N, H)``, for a stochastic model that has one."""
    if not (getattr(model, "stochastic", False) and callable(getattr(model, "log_prob", None))):
        return None
    future = History(frames=real_frames[:, 1:], states=observe(world, real[:, 1:]), actions=p.actions,
                     world_states=real[:, 1:])
    try:
        raw = model.log_prob(h0, p.actions, future)
    except NotImplementedError:
        return None
    if raw is None:
        return None
    return check_log_prob(raw, (len(real), real.shape[1] - 1), f"model {name!r} on world {world.name!r}: log_prob")


def model_table(model: Any, name: str, model_cfg: dict, world: World, wcfg: WorldConfig,
                protocol: ProtocolConfig, eps: Episodes, progress: tqdm | None = None,
                blocks: list[tuple[int, int]] | None = None) -> pa.Table:
    """All rows of one model on one world (or on the block ``eps``, one of ``blocks``): open loop under every
    plan, then teacher forced."""
    seed, H = protocol.seed, protocol.horizon
    samples = protocol.num_samples if getattr(model, "stochastic", False) else 1
    n = len(eps.ids)
    d = world.state_dim
    tables, has_state, has_reward, rendered = [], [], [], []
    h0 = History(states=observe(world, eps.s0[:, None]), actions=np.zeros((n, 0, world.action_dim)),
                 render=world.render, world_states=eps.s0[:, None])
    for p in eps.plans:
        pred = _predict(model, name, world, "open_loop", p, h0, p.actions, samples,
                        make_rng(seed, world.name, "model", name, "open_loop", p.name, *eps.key), eps, protocol)
        frames = _frames(world, pred, name)
        tables.append(rollout_table(
            world=world.name, source=name, regime="open_loop", plan=p.name, condition=p.condition,
            episodes=eps.ids, t=np.arange(1, H + 1), frames=frames, states=pred.states,
            actions=p.actions, frame_dtype=protocol.frame_dtype, reward=_reward(world, pred, frames)))
        has_state.append(pred.states is not None)
        has_reward.append(pred.rewards is not None)
        rendered.append(pred.frames is None)
        if progress is not None:
            progress.update()

    p = eps.plan(teacher_forced_plan(world, protocol.teacher_forced_plan))
    real = eps.realized[p.name][:, 0]  # (N, H + 1, D), realization 0
    real_frames = world.render(real)
    pred, tf_frames, tf_states, tf_rewards = _teacher_forced(model, name, world, protocol, eps, p, h0, real,
                                                             real_frames, samples)
    has_state.append(tf_states is not None)
    rendered.append(pred.frames is None)
    has_reward.append(tf_rewards is not None)
    logp = _log_prob(model, name, world, h0, p, real, real_frames)
    tables.append(rollout_table(
        world=world.name, source=name, regime="teacher_forced", plan=p.name, condition=p.condition,
        episodes=eps.ids, t=np.arange(1, H + 1), frames=tf_frames, states=tf_states,
        actions=p.actions, frame_dtype=protocol.frame_dtype, logp=logp,
        reward=tf_rewards if tf_rewards is not None else world.reward(tf_states, tf_frames)))
    for what, flags in (("states", has_state), ("rewards", has_reward)):
        if len(set(flags)) > 1:
            raise ModelOutputError(f"model {name!r} on world {world.name!r}: returned {what} for some calls and "
                                   f"not others; return {what} always or never")
    if progress is not None:
        progress.update()
    meta = _metadata(world, wcfg, protocol, name, model_cfg, num_samples=samples,
                     stochastic=samples > 1 or bool(getattr(model, "stochastic", False)),
                     has_state=bool(has_state[0]), frames_rendered_from_states=bool(rendered[0]),
                     has_logp=logp is not None, state_dim=d,
                     borrowed_episodes=([int(lo + e) for lo, hi in (blocks or [(0, n)])
                                         for e in model.borrowed_episodes(hi - lo)]
                                        if hasattr(model, "borrowed_episodes") else None))
    return with_metadata(pa.concat_tables(tables, promote_options="default"), meta)


def memory_needed(world: World, protocol: ProtocolConfig, n_models: int) -> int:
    """A lower bound on the bytes one world's rollouts hold at once, for the largest block of episodes
    (:func:`episode_blocks`) of ``n`` episodes: every source's stored frames of the block (ground truth and
    ``n_models`` models, each plan's n x max(K, M) x (H + 1) frames) plus one plan's float64 rendering, and for a
    world that keeps snapshots (a Gymnasium world) its store: one uint8 frame per realized step of the block, and
    the initial frame of all N episodes; and what is drawn for all N at once (initial states and plans, float64)."""
    n_plans = (world.n_plans(protocol.n_random_plans) if hasattr(world, "n_plans") else
               len(world.plans(1, protocol.horizon, protocol.n_random_plans, make_rng(protocol.seed, "size"))))
    n = largest_block(protocol.n_episodes, protocol.episode_block)
    draws = max(protocol.num_samples, protocol.num_futures if world.stochastic else 1)
    frames_per_plan = n * draws * (protocol.horizon + 1)
    pixels = int(np.prod(world.frame_shape))
    stored = (1 + n_models) * n_plans * frames_per_plan * pixels * (1 if protocol.frame_dtype == "uint8" else 4)
    # The store: the initial states, and each plan's realized steps of the block, M futures of a stochastic world.
    futures = protocol.num_futures if world.stochastic else 1
    snapshots = (n * futures * n_plans * protocol.horizon + protocol.n_episodes) * pixels \
        if hasattr(world, "checkpoint") else 0
    drawn = protocol.n_episodes * (max(1, world.state_dim or 1) + n_plans * protocol.horizon * world.action_dim) * 8
    return stored + frames_per_plan * pixels * 8 + snapshots + drawn


def available_memory() -> int:
    """Bytes of memory available now (``MemAvailable`` on Linux, else the physical memory)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(world: World, protocol: ProtocolConfig, n_models: int) -> None:
    """Refuse, before anything runs, a protocol whose rollouts of ``world`` cannot fit in memory."""
    need, have = memory_needed(world, protocol, n_models), available_memory()
    if need > have:
        raise ConfigError(
            f"params.yaml: protocol: the rollouts of world {world.name!r} need at least {need / 2**30:,.1f} GiB of "
            f"memory (n_episodes={protocol.n_episodes:,}, horizon={protocol.horizon}, K={protocol.num_samples}, "
            f"frames {'x'.join(map(str, world.frame_shape))} {protocol.frame_dtype}, {1 + n_models} sources, "
            f"episode_block={protocol.episode_block}), and {have / 2**30:,.1f} GiB are available; lower "
            "protocol.n_episodes, or protocol.episode_block (one block's frames are held at once)")


def build_models(world: World, models_cfg: dict[str, dict]) -> dict[str, Any]:
    """Instantiate (and fit) every model of a world before anything runs, so a bad config fails first."""
    return {name: build_model(world.name, name, dict(cfg), world) for name, cfg in models_cfg.items()}


def _warn_unread(model: Any, name: str, world: World) -> None:
    if hasattr(model, "unread_files") and (unread := model.unread_files()):
        shown = ", ".join(str(f.relative_to(model.path)) for f in unread[:5])
        log.warning("model %r on world %r: %d file(s) in %s were not read (not a plan of this protocol): %s%s",
                    name, world.name, len(unread), model.path, shown, ", ..." if len(unread) > 5 else "")


def _check_block(first: dict[str, pa.Schema], source: str, table: pa.Table, world: World, lo: int, hi: int) -> None:
    """A source's block must have the columns, types and metadata of its first block (one file is written)."""
    if source not in first:
        first[source] = table.schema
        return
    want = first[source]
    if table.schema.equals(want, check_metadata=True):
        return
    if not table.schema.equals(want):
        what = (f"columns {table.schema.names}, the first block's {want.names}" if table.schema.names != want.names
                else "column types " + ", ".join(f"{f.name}: {f.type} (first block: {want.field(f.name).type})"
                                                 for f in table.schema if f.type != want.field(f.name).type))
    else:
        a, b = (json.loads((schema.metadata or {}).get(METADATA_KEY, b"{}")) for schema in (table.schema, want))
        what = "metadata " + ", ".join(f"{k}: {a.get(k)!r} (first block: {b.get(k)!r})"
                                       for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
    raise ModelOutputError(f"{'the ground truth' if source == GROUND_TRUTH else f'model {source!r}'} on world "
                           f"{world.name!r}: episodes {lo}..{hi - 1} give a table unlike that of the first block "
                           f"of episodes: {what}; a model must return the same arrays for every batch of episodes")


def world_tables(wcfg: WorldConfig, models_cfg: dict[str, dict], protocol: ProtocolConfig,
                 progress: bool = True, *, world: World | None = None,
                 models: dict[str, Any] | None = None, executor: Any = None) -> Iterator[tuple[str, pa.Table]]:
    """Every observation table of one world, one block of episodes at a time (:func:`episode_blocks`): for each
    block ``("ground_truth", rows)``, then each model's ``(name, rows)``. A source's blocks have one schema and
    one metadata (checked), so that they append to one file in order.

    The stage writes each block as it comes, so that no more than one model's block is held at once. With
    ``executor`` (:class:`wmeval.core.execution.RayExecutor`) every model predicts on its own Ray actor
    (:class:`ModelActor`): a block's models run side by side, and their tables are
    yielded in the same order, so the files are the same bytes. A world that keeps snapshots (a Gymnasium
    world: its environments live in this process) predicts here."""
    world = world if world is not None else build_world(wcfg.name, dataclasses.asdict(wcfg))
    models = models if models is not None else build_models(world, models_cfg)
    if executor is not None and not hasattr(world, "checkpoint") and models:
        yield from _world_tables_on_actors(wcfg, models_cfg, protocol, progress, world, models, executor)
        return
    # A world that keeps snapshots (a Gymnasium world) adds one per step of every rollout, a model's too:
    # each model's are dropped once its block is out, each block's once every model's is, and the initial
    # states' at the end.
    start = world.checkpoint() if hasattr(world, "checkpoint") else None
    eps = draw_episodes(world, protocol)
    eps.plan(teacher_forced_plan(world, protocol.teacher_forced_plan))  # fail early on a bad plan name
    drawn = world.checkpoint() if start is not None else None
    blocks = episode_blocks(protocol.n_episodes, protocol.episode_block)
    first: dict[str, pa.Schema] = {}
    bar = tqdm(total=len(blocks) * len(models) * (len(eps.plans) + 1), desc=f"rollouts {world.name}",
               unit="rollout", disable=not progress)
    with bar:
        for i, (lo, hi) in enumerate(blocks):
            block = realize(world, protocol, eps, i, lo, hi)
            table = ground_truth_table(world, wcfg, protocol, block)
            _check_block(first, GROUND_TRUTH, table, world, lo, hi)
            yield GROUND_TRUTH, table
            del table
            mark = world.checkpoint() if start is not None else None
            for name, model in models.items():
                table = model_table(model, name, dict(models_cfg[name]), world, wcfg, protocol, block, bar, blocks)
                _check_block(first, name, table, world, lo, hi)
                yield name, table
                del table
                if mark is not None:
                    world.rewind(mark)
            del block
            if drawn is not None:
                world.rewind(drawn)
    for name, model in models.items():
        _warn_unread(model, name, world)
    if start is not None:
        del eps
        world.rewind(start)


class ModelActor:
    """One model of one world on a Ray worker (``execution.kind: ray``): builds the world and the model once
    (fitting it from its seeded config, as the stage does here), then predicts block after block of episodes
    drawn and realized by the driver. ``cwd``: the project folder, entered when this node sees it (a model's
    files and an imported model's predictions are named relative to it)."""

    def __init__(self, wcfg: WorldConfig, name: str, cfg: dict, cwd: str) -> None:
        if os.path.isdir(cwd):
            os.chdir(cwd)
        self.world = build_world(wcfg.name, dataclasses.asdict(wcfg))
        self.name, self.cfg = name, dict(cfg)
        self.model = build_models(self.world, {name: self.cfg})[name]

    def table(self, wcfg: WorldConfig, protocol: ProtocolConfig, block: Episodes,
              blocks: list[tuple[int, int]]) -> pa.Table:
        return model_table(self.model, self.name, self.cfg, self.world, wcfg, protocol, block, None, blocks)

    def unread_files(self) -> list:
        return self.model.unread_files() if hasattr(self.model, "unread_files") else []


def _world_tables_on_actors(wcfg: WorldConfig, models_cfg: dict[str, dict], protocol: ProtocolConfig,
                            progress: bool, world: World, models: dict[str, Any],
                            executor: Any) -> Iterator[tuple[str, pa.Table]]:
    """:func:`world_tables` with each model on Ray actors, sharded by (model, block of episodes). An actor holds
    its CPUs (and GPUs) for its life, so models run in waves of as many actors as the cluster has room for (more
    would wait forever for a model that is never released). With ``execution.rollout_actors_per_model`` above 1
    (0: all the room a wave leaves), a model gets several actors, each loading the model once: its blocks of
    episodes then run side by side, one per actor (a
    block's random streams are keyed by the block, so any actor gives the same rows). Each wave's blocks are
    realized again from their seeded streams (the same episodes), and every source's blocks still reach its file
    in block order."""
    eps = draw_episodes(world, protocol)
    eps.plan(teacher_forced_plan(world, protocol.teacher_forced_plan))
    blocks = episode_blocks(protocol.n_episodes, protocol.episode_block)
    names = list(models)
    room = executor.capacity("rollout")
    first: dict[str, pa.Schema] = {}
    with tqdm(total=len(blocks) * len(models) * (len(eps.plans) + 1), desc=f"rollouts {world.name} (ray)",
              unit="rollout", disable=not progress) as bar:
        for w in range(0, len(names), room):
            group = names[w:w + room]
            wanted = executor.cfg.rollout_actors_per_model or room
            per_model = max(1, min(wanted, room // len(group), len(blocks)))
            log.info("execution: world %s: models %s on %d actor(s) each, %d block(s) of episodes", world.name,
                     group, per_model, len(blocks))
            args = [(wcfg, name, dict(models_cfg[name]), os.getcwd()) for name in group for _ in range(per_model)]
            with executor.actor_group(ModelActor, args, "rollout") as handles:     # killed however the wave ends
                actors = {name: handles[k * per_model:(k + 1) * per_model] for k, name in enumerate(group)}
                for s in range(0, len(blocks), per_model):          # one block per actor of each model at a time
                    step = range(s, min(s + per_model, len(blocks)))
                    realized = {i: realize(world, protocol, eps, i, *blocks[i]) for i in step}
                    refs = {i: executor.ray.put(realized[i]) for i in step}
                    futures = {(name, i): actors[name][i - s].table.remote(wcfg, protocol, refs[i], blocks)
                               for name in group for i in step}           # the actors work while the truth is written
                    if w == 0:
                        for i in step:
                            table = ground_truth_table(world, wcfg, protocol, realized[i])
                            _check_block(first, GROUND_TRUTH, table, world, *blocks[i])
                            yield GROUND_TRUTH, table
                            del table
                    for name in group:
                        for i in step:
                            table = executor.ray.get(futures.pop((name, i)))
                            bar.update(len(eps.plans) + 1)
                            _check_block(first, name, table, world, *blocks[i])
                            yield name, table
                            del table
                    del realized, refs
                for name, replicas in actors.items():
                    model = models[name]
                    if hasattr(model, "unread_files"):
                        # A file any of its actors read was read: what none of them read is unread.
                        lists = executor.ray.get([a.unread_files.remote() for a in replicas])
                        unread = [f for f in lists[0] if all(f in other for other in lists[1:])]
                        model.unread_files = lambda unread=unread: unread    # what the actors read, not this copy
                    _warn_unread(model, name, world)


def side_by_side_safe(world: World, models_cfg: Any, executor: Any) -> bool:
    """Whether a world's rollouts may run on a thread beside other worlds' and still give the same bytes: a
    built-in simulated world (pure numpy, its own seeded streams) whose models are all wmeval's own, run here.
    Gymnasium environments (pygame and MuJoCo renderers), recorded datasets, user worlds and user models (their
    thread safety and global state are theirs) run one after another."""
    from wmeval.worlds import BUILTIN_WORLDS, WORLD_KINDS

    if executor is not None or type(world) not in {WORLD_KINDS[k] for k in BUILTIN_WORLDS}:
        return False
    entries = dict(models_cfg.entries) if models_cfg is not None else {}
    return all(str(cfg.get("_target_", "")).startswith("wmeval.models.") for cfg in entries.values())


def run_world(wcfg: WorldConfig, models_cfg: dict[str, dict], protocol: ProtocolConfig,
              progress: bool = True, *, world: World | None = None,
              models: dict[str, Any] | None = None) -> dict[str, pa.Table]:
    """Every observation table of one world, whole: ``{"ground_truth": ..., model name: ...}``."""
    parts: dict[str, list[pa.Table]] = {}
    for source, table in world_tables(wcfg, models_cfg, protocol, progress, world=world, models=models):
        parts.setdefault(source, []).append(table)
    return {source: pa.concat_tables(tables) for source, tables in parts.items()}


def export_episodes(wcfg: WorldConfig, protocol: ProtocolConfig, out: Path) -> None:
    """Write what an external model needs to produce imported predictions.

    ``out/episodes.npz``: ``episode`` (N,), ``state`` (N, D), ``frame`` (N, H_img, W, C) float32;
    ``out/plans/<plan>.npy``: actions (N, H, A);
    ``out/teacher_forced.npz``: the realized ``states`` (N, H + 1, D) and ``frames`` along
    the teacher-forced plan (realization 0); ``out/protocol.json``: the rest.
    """
    if out.exists() and not out.is_dir():
        raise WmevalError(f"{out}: exists and is not a folder; `wmeval episodes --out` writes a folder of files")
    world = build_world(wcfg.name, dataclasses.asdict(wcfg))
    eps = make_episodes(world, protocol)
    tf = eps.plan(teacher_forced_plan(world, protocol.teacher_forced_plan))
    out.mkdir(parents=True, exist_ok=True)
    (out / "plans").mkdir(exist_ok=True)
    s0 = observe(world, eps.s0)          # a world with snapshot handles exports its observed state, if any
    np.savez_compressed(out / "episodes.npz", episode=eps.ids, frame=world.render(eps.s0),
                        **({} if s0 is None else {"state": s0}))
    for p in eps.plans:
        np.save(out / "plans" / f"{p.name}.npy", p.actions)
    real = eps.realized[tf.name][:, 0]
    states = observe(world, real)
    np.savez_compressed(out / "teacher_forced.npz", frames=world.render(real),
                        **({} if states is None else {"states": states}))
    (out / "protocol.json").write_text(json.dumps({
        "world": world.name, "n_episodes": protocol.n_episodes, "seed": protocol.seed,
        "episode_block": protocol.episode_block, "horizon": protocol.horizon, "num_samples": protocol.num_samples,
        "teacher_forced_plan": tf.name, "plans": {p.name: p.condition for p in eps.plans},
        "frame_shape": list(world.frame_shape), "state_dim": world.state_dim,
        "action_dim": world.action_dim, "world_description": world.describe(),
    }, indent=2, sort_keys=True))
