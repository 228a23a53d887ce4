"""Any registered Gymnasium environment as a ground-truth world.

The environment is stepped through its ``unwrapped`` core (wmeval's protocol sets the
horizon, so no time-limit wrapper intervenes), rendered with ``render_mode="rgb_array"``
and resized to the declared frame size with a declared filter. Episodes start from
``reset(seed=s)`` with one seed per episode drawn from the protocol's stream, then
``start_steps`` random-action steps (so that a game such as Pong is past its blank
first frames).

**States are handles.** The world's state array ``(N, 1)`` holds ids into a store of
snapshots kept by the world object: each id remembers the environment's snapshot, the
rendered frame, the observation and the reward of the step that led to it. Stepping an
id restores its snapshot and steps the environment, so one state can be stepped under
many plans (**branching**) where the backend can snapshot:

* ALE (Atari): ``ale.cloneState()`` / ``ale.restoreState()``. Sticky actions
  (``repeat_action_probability > 0``) make a restored state step differently on each
  try, so they are refused: set ``env_kwargs.repeat_action_probability: 0``.
* classic control (CartPole, Pendulum, MountainCar, Acrobot): the core's ``state``
  attribute (and the few attributes its ``step`` reads besides).
* MuJoCo (HalfCheetah, Hopper, ...): ``mj_getState`` / ``mj_setState`` of the full
  integration state (``qpos`` and ``qvel`` alone leave the solver's warm start behind).
  Rendering is off-screen through EGL (``MUJOCO_GL=egl`` unless set; ``osmesa`` for
  software rendering).

Classic control and MuJoCo are trusted only after a self-check: a restored state stepped
twice gives the same observations.

An environment with neither has no ``branch`` capability: each plan is then rolled
from a fresh ``reset(seed=s)`` of the episode (which reproduces its start), and a
state can be stepped only once. A low-dimensional ``Box`` observation (at most
``max_state_dim`` numbers) is the world's ``state``; an image observation is not.

After the environment terminates, an episode stays in its final state (an absorbing
state: the same frame and observation, reward 0), so every plan has H steps.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wmeval.core.errors import WmevalError

from .base import ExternalWorld, Plan, Task

log = logging.getLogger(__name__)

#: Attributes of a classic-control core that its ``step`` reads besides ``state``.
CLASSIC_EXTRA = ("steps_beyond_terminated", "last_u")


def _classic_snapshot(core) -> dict:
    return {k: copy.deepcopy(getattr(core, k)) for k in ("state", *CLASSIC_EXTRA) if hasattr(core, k)}


def _classic_restore(core, snap: dict) -> None:
    for k, v in snap.items():
        setattr(core, k, copy.deepcopy(v))


def _mujoco_spec():
    import mujoco

    # The full integration state (time, qpos, qvel, act, warm-start accelerations, controls, mocap, plugins):
    # qpos and qvel alone leave the solver's warm start behind, and a restored state then steps differently.
    return mujoco, mujoco.mjtState.mjSTATE_INTEGRATION


def _mujoco_snapshot(core) -> np.ndarray:
    mujoco, spec = _mujoco_spec()
    buf = np.empty(mujoco.mj_stateSize(core.model, spec))
    mujoco.mj_getState(core.model, core.data, buf, spec)
    return buf


def _mujoco_restore(core, snap: np.ndarray) -> None:
    mujoco, spec = _mujoco_spec()
    mujoco.mj_setState(core.model, core.data, snap, spec)
    mujoco.mj_forward(core.model, core.data)     # positions, contacts, sensors of the restored state


def _ale_snapshot(core):
    return core.ale.cloneState()


def _ale_restore(core, snap) -> None:
    core.ale.restoreState(snap)


#: Snapshot backends: ``name -> (snapshot(core), restore(core, snapshot))``.
BACKENDS = {"ale": (_ale_snapshot, _ale_restore), "classic": (_classic_snapshot, _classic_restore),
            "mujoco": (_mujoco_snapshot, _mujoco_restore)}


FILTERS = ("area", "bilinear", "bicubic", "nearest")
#: The declared task costs: ``env_reward``, the environment's own reward as negative cost.
TASK_COSTS = ("env_reward",)


def _negate(rewards: np.ndarray) -> np.ndarray:
    """The per-step cost of an ``env_reward`` task: the negative reward."""
    return -np.asarray(rewards, dtype=np.float64)


@dataclass
class _Snap:
    frame: np.ndarray            # (H_img, W, C) uint8, resized
    obs: np.ndarray | None       # the observed state, float64, or None
    reward: float
    done: bool
    snapshot: Any                # backend snapshot, or a live env that sits at this state (no branch)
    seed: int


#: Entry points whose environments render in software (pygame, ALE): no GL context, so torchvision (the resize)
#: may be imported whenever it is first needed, or never (a stage that only reads the world's declarations).
SOFTWARE_RENDERED = ("gymnasium.envs.classic_control", "gymnasium.envs.toy_text", "ale_py")


def _import_gymnasium(env_id: str | None = None):
    # Headless rendering: pygame (classic control) needs no display or sound device for rgb_array; MuJoCo
    # renders off-screen through EGL (set MUJOCO_GL=osmesa for software rendering).
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        import gymnasium as gym
    except ImportError:
        raise ValueError("the gymnasium world kind needs the gymnasium package: "
                         "pip install 'gymnasium[classic-control]' ale-py") from None
    try:  # Atari ids (ALE/...) are registered by ale-py
        import ale_py

        gym.register_envs(ale_py)
    except ImportError:
        pass
    # torchvision (the resize) before any environment that may render through GL is made: importing it after
    # MuJoCo has made its EGL context segfaults (triton, which torchvision pulls in, initialises against the same
    # GL libraries; measured with mujoco 4.0.1). Importing gymnasium makes no context. Software-rendered
    # environments skip it (torch's import is about 2 s of a stage that may never resize a frame).
    if not _software_rendered(gym, env_id):
        import torchvision.transforms.v2.functional  # noqa: F401
    return gym


def _torchvision_version() -> str:
    """``torchvision.__version__`` (with its local label, e.g. ``+cu130``, which the distribution's metadata
    lacks) without importing torchvision (and torch) in a process that has not: read from its version.py."""
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"].__version__
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("torchvision")
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except (AttributeError, TypeError, OSError):
        text = ""
    found = re.search(r"^__version__ = ['\"]([^'\"]+)['\"]", text, re.M)
    return found.group(1) if found else importlib.metadata.version("torchvision")


def _software_rendered(gym, env_id: str | None) -> bool:
    if env_id is None:
        return False
    try:
        entry = gym.spec(env_id).entry_point
    except Exception:  # an unknown id: gym.make names it
        return False
    name = entry if isinstance(entry, str) else f"{getattr(entry, '__module__', '')}:"
    return name.split(":")[0].startswith(SOFTWARE_RENDERED)


@functools.lru_cache(maxsize=32)
def _area_matrix(size: int, out: int) -> np.ndarray:
    """``(out, size)``: row ``i`` is 1 on adaptive average pooling's window of output ``i`` along one axis, input
    ``[floor(i size / out), ceil((i + 1) size / out))`` (torch's integer formulas), 0 elsewhere (read-only:
    cached, every frame of a world has the same sizes)."""
    i = np.arange(out, dtype=np.int64)[:, None]
    j = np.arange(size, dtype=np.int64)[None, :]
    m = ((j >= (i * size) // out) & (j < -((-(i + 1) * size) // out))).astype(np.float64)
    m.flags.writeable = False
    return m


def area_resize(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """``(H, W, C)`` uint8 to ``(height, width, C)`` uint8 by the area filter: each output pixel the mean of its
    adaptive-pooling window, rounded half to even, as ``torch.nn.functional.interpolate(mode="area")`` then
    ``round()`` gives (tests/test_gymnasium.py checks it against torch on many sizes).

    Those bytes, without importing torch (2 s of a stage's start-up; torchvision 5 s), wherever a window covers at
    most 65,793 pixels (255 times its area below 2^24, so that torch's float32 window sum is exact too: every
    frame world's sizes; a 1080p frame to 4 x 4 is beyond it): the window sums are integers, exact in the float64
    products here; a division is correctly rounded, and a rational ``sum / count`` is either a half-integer,
    exact in both, or at least ``1 / (2 count)`` from one, far more than either's rounding, so the rounding to
    integers agrees whatever precision and order torch divides in. Beyond that bound torch's sums round and its
    result may be 1 off this exact one."""
    x = np.asarray(img)
    hh, ww, ch = x.shape
    rows = _area_matrix(hh, height) @ x.reshape(hh, ww * ch).astype(np.float64)           # (height, W * C)
    cols = _area_matrix(ww, width) @ rows.reshape(height, ww, ch).transpose(1, 0, 2).reshape(ww, height * ch)
    sums = cols.reshape(width, height, ch).transpose(1, 0, 2)
    count = _area_matrix(hh, height).sum(axis=1)[:, None] * _area_matrix(ww, width).sum(axis=1)[None, :]
    return np.clip(np.rint(sums / count[..., None]), 0, 255).astype(np.uint8)


def resize_frame(rgb: np.ndarray, height: int | None, width: int | None, resize_filter: str = "area",
                 antialias: bool = True, grayscale: bool = False) -> np.ndarray:
    """One ``(H, W, C)`` uint8 image to ``(height, width, 1 or 3)`` uint8 (``None`` keeps that side).

    ``area`` is the block mean (:func:`area_resize`, the bytes of ``torch.nn.functional.interpolate(mode="area")``);
    ``bilinear``, ``bicubic`` and ``nearest`` go through torchvision's resize (``antialias`` low-passes first).
    ``grayscale`` is ITU-R 601-2 luma (torchvision). torch and torchvision are imported only where they are used
    (grayscale or a torchvision filter): importing torchvision costs 5 s, its ops import ``torch._dynamo``.
    """
    if resize_filter not in FILTERS:
        raise ValueError(f"resize_filter must be one of {FILTERS}, got {resize_filter!r}")
    rgb = np.asarray(rgb)
    rgb = np.ascontiguousarray((rgb[..., None] if rgb.ndim == 2 else rgb)[..., :3])
    h, w = height or rgb.shape[0], width or rgb.shape[1]
    if not (grayscale and rgb.shape[2] == 3) and ((h, w) == rgb.shape[:2] or resize_filter == "area"):
        return rgb.copy() if (h, w) == rgb.shape[:2] else area_resize(rgb, h, w)
    import torch
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    img = torch.from_numpy(rgb).permute(2, 0, 1)
    if grayscale and img.shape[0] == 3:
        img = F.rgb_to_grayscale(img)
    if (h, w) != tuple(img.shape[1:]):
        if resize_filter == "area":
            return area_resize(img.permute(1, 2, 0).numpy(), h, w)
        mode = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC,
                "nearest": InterpolationMode.NEAREST}[resize_filter]
        img = F.resize(img, [h, w], interpolation=mode, antialias=antialias)
    return img.permute(1, 2, 0).numpy().copy()


class _Store:
    """Snapshots by handle. Handles count up and are never reused, so that a handle whose snapshot was
    dropped (:meth:`rewind`) raises instead of silently naming a newer state."""

    def __init__(self) -> None:
        self._snaps: dict[int, _Snap] = {}
        self.next = 0

    def append(self, snap: _Snap) -> int:
        h = self.next
        self._snaps[h] = snap
        self.next += 1
        return h

    def __getitem__(self, handle: int) -> _Snap:
        try:
            return self._snaps[int(handle)]
        except KeyError:
            raise WmevalError(f"snapshot handle {int(handle)} was dropped (or never taken): a handle must not be "
                              "kept past the rollouts that made it") from None

    def __len__(self) -> int:
        return len(self._snaps)

    def values(self):
        return self._snaps.values()

    def rewind(self, mark: int) -> None:
        if not 0 <= mark <= self.next:
            raise ValueError(f"rewind({mark}): only {self.next} snapshots were ever taken")
        for h in [h for h in self._snaps if h >= mark]:
            del self._snaps[h]


@dataclass
class GymnasiumWorld(ExternalWorld):
    """A Gymnasium environment as a :class:`~wmeval.worlds.base.World`.

    Args:
        env_id: a registered id (``CartPole-v1``, ``Pendulum-v1``, ``ALE/Pong-v5``).
        env_kwargs: keyword arguments of ``gymnasium.make``.
        frame_height, frame_width: the stored frame size; ``None`` keeps the rendered size.
        resize_filter: ``area``, ``bilinear``, ``bicubic`` or ``nearest`` (torchvision resize).
        antialias: low-pass before down-sampling (bilinear and bicubic).
        grayscale: store one luminance channel (ITU-R 601-2) instead of RGB.
        frame_skip: each action is repeated this many times (rewards summed); the frame is the last one.
        start_steps: random-action steps after ``reset`` before the context frame.
        const_plans: the declared plans: ``all`` (one constant plan per discrete action, or the
            low and high corners of a Box), or a list of action indices (Discrete) / vectors (Box).
        counterfactual_pair: two entries of the declared plans' names; default the first two.
        stochastic: declare the environment stochastic (its transition draws from
            ``unwrapped.np_random``, reseeded from the protocol's stream before every step).
        max_state_dim: the largest Box observation that counts as a low-dimensional state.
        branch: ``auto`` (snapshot when the backend can) or ``none``.
        control_tasks: control tasks, each ``{name, cost, description}``; ``cost: env_reward`` is the environment's
            own reward (summed over ``frame_skip``) as negative cost. MPC plans with each model that predicts
            rewards and acts in the real environment; the true world's planner scores its candidates by
            branching (an oracle). Needs the branch capability.
            Their budget is the ``dynamics`` section's (control_episodes, control_steps, n_plans,
            plan_horizon), overridden per world under ``worlds.<name>.dynamics``.
    """

    name: str = "gymnasium"
    env_id: str = "CartPole-v1"
    env_kwargs: dict = field(default_factory=dict)
    frame_height: int | None = None
    frame_width: int | None = None
    resize_filter: str = "area"
    antialias: bool = True
    grayscale: bool = False
    frame_skip: int = 1
    start_steps: int = 0
    const_plans: Any = "all"
    counterfactual_pair: list | None = None
    stochastic: bool = False
    max_state_dim: int = 64
    branch: str = "auto"
    control_tasks: list = field(default_factory=list)

    def __post_init__(self) -> None:
        for key in ("frame_height", "frame_width"):
            v = getattr(self, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 8):
                raise ValueError(f"{key} must be an integer >= 8 or null, got {v!r}")
        if self.resize_filter not in FILTERS:
            raise ValueError(f"resize_filter must be one of {FILTERS}, got {self.resize_filter!r}")
        for key in ("frame_skip", "start_steps"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == "frame_skip" else 0):
                raise ValueError(f"{key} must be an integer >= {1 if key == 'frame_skip' else 0}, got {v!r}")
        if self.branch not in ("auto", "none"):
            raise ValueError(f"branch must be 'auto' or 'none', got {self.branch!r}")
        gym = _import_gymnasium(self.env_id)
        try:
            self._env = gym.make(self.env_id, render_mode="rgb_array", **dict(self.env_kwargs or {}))
        except Exception as e:  # an unknown id, a missing extra, a bad kwarg
            raise ValueError(f"gymnasium.make({self.env_id!r}, render_mode='rgb_array', "
                             f"**{dict(self.env_kwargs or {})}) failed: {type(e).__name__}: {e}") from None
        self._core = self._env.unwrapped
        # The rendered size, from one reset (seed 0); a classic-control core has its state only after a reset.
        try:
            self._native = self._core_render_after_reset()
        except Exception as e:  # no off-screen GL (MuJoCo), no pygame (classic control)
            raise ValueError(f"{self.env_id}: rendering with render_mode='rgb_array' failed: {type(e).__name__}: "
                             f"{e} (MuJoCo renders off-screen with MUJOCO_GL={os.environ.get('MUJOCO_GL')}: it "
                             "needs EGL (libegl1), or MUJOCO_GL=osmesa with libosmesa6)") from None
        self._backend = self._find_backend()
        space = self._env.action_space
        self._discrete = isinstance(space, gym.spaces.Discrete)
        if self._discrete:
            self.action_dim, self._n_actions = 1, int(space.n)
        elif isinstance(space, gym.spaces.Box):
            low, high = np.asarray(space.low, float).ravel(), np.asarray(space.high, float).ravel()
            if not (np.isfinite(low).all() and np.isfinite(high).all()):
                raise ValueError(f"{self.env_id}: a Box action space needs finite bounds to draw random plans, "
                                 f"got low {low}, high {high}")
            self.action_dim, self._low, self._high = int(low.size), low, high
        else:
            raise ValueError(f"{self.env_id}: action space {space} is neither Discrete nor Box")
        obs_space = self._env.observation_space
        self._has_state = (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1
                           and 0 < obs_space.shape[0] <= self.max_state_dim)
        self.state_dim = int(obs_space.shape[0]) if self._has_state else 0
        self._store = _Store()
        self._plan_names = self._declared_plan_names()
        pair = list(self.counterfactual_pair) if self.counterfactual_pair else self._plan_names[:2]
        unknown = [p for p in pair if p not in self._plan_names]
        if len(pair) != 2 or unknown:
            raise ValueError(f"counterfactual_pair must name two declared plans {self._plan_names}, got {pair}")
        self._pair = (pair[0], pair[1])
        self._shape = (self.frame_height or self._native[0], self.frame_width or self._native[1],
                       1 if self.grayscale else 3)
        self._tasks = self._declared_tasks()

    def _declared_tasks(self) -> list[Task]:
        out, names = [], set()
        tasks = self.control_tasks or []
        if not isinstance(tasks, (list, tuple)):
            raise ValueError(f"control_tasks must be a list of {{name, cost, description}}, got {tasks!r}")
        for i, t in enumerate(tasks):
            if not isinstance(t, Mapping):
                raise ValueError(f"control_tasks[{i}] = {t!r}: expected a mapping {{name, cost, description}}, "
                                 "e.g. {name: balance, cost: env_reward}")
            t = dict(t)
            unknown = set(t) - {"name", "cost", "description"}
            if unknown or not t.get("name") or t.get("cost") not in TASK_COSTS:
                raise ValueError(f"control_tasks[{i}] = {t}: expected {{name, cost, description}} with cost one of "
                                 f"{list(TASK_COSTS)}" + (f"; unknown keys {sorted(unknown)}" if unknown else ""))
            if t["name"] in names:
                raise ValueError(f"control_tasks[{i}]: the task name {t['name']!r} is declared twice")
            if self._backend is None:
                raise ValueError(f"control_tasks[{i}] ({t['name']!r}): MPC acts out plans by branching, but "
                                 f"{self.env_id} has no snapshot backend")
            names.add(t["name"])
            text = t.get("description") or f"{self.env_id}'s own reward as negative cost, summed over frame_skip"
            out.append(Task(str(t["name"]), None, _negate, text, cost_from="reward"))
        return out

    # ------------------------------------------------------------------ capabilities

    def _find_backend(self) -> str | None:
        if self.branch == "none":
            return None
        ale = getattr(self._core, "ale", None)
        if ale is not None and hasattr(ale, "cloneState"):
            if float(ale.getFloat("repeat_action_probability")) > 0:
                raise ValueError(f"{self.env_id}: sticky actions (repeat_action_probability = "
                                 f"{ale.getFloat('repeat_action_probability')}) make a restored state step "
                                 "differently on each try; set env_kwargs.repeat_action_probability: 0")
            return "ale"
        # Classic control keeps its whole dynamic state in `state` (plus CLASSIC_EXTRA); another env with a
        # `state` attribute (CarRacing keeps its pixels there, the physics in Box2D) is not trusted.
        classic = type(self._core).__module__.startswith("gymnasium.envs.classic_control")
        if classic and isinstance(getattr(self._core, "state", None), (np.ndarray, tuple, list)):
            return "classic" if self._restores_exactly("classic") else None
        data = getattr(self._core, "data", None)
        if type(data).__module__.startswith("mujoco") and hasattr(self._core, "model"):
            return "mujoco" if self._restores_exactly("mujoco") else None
        return None

    def _restores_exactly(self, backend: str) -> bool:
        """Self-check: a restored state stepped twice (three steps each) under one action gives the same
        observation both times."""
        take, put = BACKENDS[backend]
        snap = take(self._core)
        space = self._env.action_space
        action = 0 if hasattr(space, "n") else np.asarray(space.high, dtype=space.dtype)
        outs = []
        for _ in range(2):
            put(self._core, snap)
            outs.append(np.concatenate([np.asarray(self._core.step(action)[0], dtype=np.float64).ravel()
                                        for _ in range(3)]))
        put(self._core, snap)
        return bool(np.array_equal(outs[0], outs[1]))

    @property
    def capabilities(self) -> frozenset[str]:
        caps = {"episodes"}
        if self._backend is not None:
            caps.add("branch")
        if self._has_state:
            caps.add("state")
        if self.stochastic:
            caps.add("stochastic")
        return frozenset(caps)

    @property
    def action_bins(self) -> list[float]:
        """Distributional strata over the action behind each frame: one bin per discrete action, or three
        equal bins over a Box's first component."""
        if self._discrete:
            return [i - 0.5 for i in range(self._n_actions + 1)]
        return np.linspace(self._low[0], self._high[0], 4).tolist()

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        return self._shape

    # ------------------------------------------------------------------ the store

    def _snapshot(self, env) -> Any:
        if self._backend is not None:
            return BACKENDS[self._backend][0](env.unwrapped)
        return env  # no backend: the live env, usable once

    def _restore(self, snap: _Snap):
        if self._backend is not None:
            BACKENDS[self._backend][1](self._core, snap.snapshot)
            return self._env
        if snap.snapshot is None:
            raise WmevalError(f"world {self.name!r} ({self.env_id}) cannot branch: a state was stepped twice "
                             "(this environment has no snapshot backend)")
        env, snap.snapshot = snap.snapshot, None
        return env

    def _frame(self, env) -> np.ndarray:
        rgb = np.asarray(env.unwrapped.render())
        return self._resize(rgb)

    def _resize(self, rgb: np.ndarray) -> np.ndarray:
        return resize_frame(rgb, self.frame_height, self.frame_width, self.resize_filter, self.antialias,
                            self.grayscale)

    def _core_render_after_reset(self) -> tuple[int, int]:
        self._env.reset(seed=0)
        return tuple(np.asarray(self._core.render()).shape[:2])

    def _obs(self, obs: Any) -> np.ndarray | None:
        return np.asarray(obs, dtype=np.float64).reshape(-1) if self._has_state else None

    def _add(self, env, obs: Any, reward: float, done: bool, seed: int) -> float:
        return float(self._store.append(_Snap(self._frame(env), self._obs(obs), float(reward), bool(done),
                                              self._snapshot(env), seed)))

    def checkpoint(self) -> int:
        """A mark of the snapshot store: :meth:`rewind` drops every snapshot taken after it."""
        return self._store.next

    def rewind(self, mark: int) -> None:
        """Drop the snapshots taken after ``mark`` (a model's own rollouts, once its table is written). The store
        otherwise grows by a frame per step of every model. Handles are never reused: a dropped one raises."""
        self._store.rewind(mark)

    def _fresh_env(self):
        if self._backend is not None:
            return self._env
        return _import_gymnasium(self.env_id).make(self.env_id, render_mode="rgb_array", **dict(self.env_kwargs or {}))

    def _env_action(self, a: np.ndarray) -> Any:
        if self._discrete:
            return int(round(float(a[0])))
        space = self._env.action_space
        return np.clip(np.asarray(a, float), self._low, self._high).reshape(space.shape).astype(space.dtype)

    # ------------------------------------------------------------------ the World protocol

    def _start(self, seed: int) -> float:
        """A new snapshot handle of the start of episode seed ``seed``: reset, then ``start_steps`` seeded steps."""
        env = self._fresh_env()
        obs, _ = env.reset(seed=seed)
        act_rng = np.random.default_rng(seed)
        done = False
        for _ in range(self.start_steps):
            if done:
                break
            obs, _, term, trunc, _ = env.unwrapped.step(self._env_action(self.sample_actions(act_rng, ())))
            done = bool(term)
        return self._add(env, obs, 0.0, done, seed)

    def restart(self, states: np.ndarray) -> np.ndarray:
        """Fresh handles of the same initial states (a world that cannot branch steps each live env once:
        another plan from the same starts needs new ones)."""
        handles = np.asarray(states)[..., 0].astype(np.int64)
        return np.array([[self._start(self._store[int(h)].seed)] for h in handles.ravel()]).reshape(
            *handles.shape, 1)

    def initial_states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        seeds = rng.integers(0, 2**31 - 1, size=n)
        out = np.array([[self._start(int(seed))] for seed in seeds]).reshape(n, 1)
        first = [self._store[int(h)].frame for h in out[:, 0]]
        if n > 1 and all(np.array_equal(first[0], f) for f in first[1:]):
            log.warning("world %r (%s): all %d episodes start from the same frame (reset(seed) does not vary this "
                        "env); they are not independent units: set start_steps > 0 for varied starts",
                        self.name, self.env_id, n)
        return out

    def step(self, states: np.ndarray, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        handles = np.asarray(states)[..., 0].astype(np.int64)
        out = np.empty((len(handles), 1))
        seeds = self._step_seeds(rng, (len(handles),))
        for i, h in enumerate(handles):
            snap = self._store[h]
            if snap.done:
                out[i, 0] = self._store.append(_Snap(snap.frame, snap.obs, 0.0, True, snap.snapshot, snap.seed))
                continue
            env = self._restore(snap)
            if seeds is not None:
                env.unwrapped.np_random = np.random.Generator(np.random.PCG64(int(seeds[i])))
            total, done, obs = 0.0, False, None
            for _ in range(self.frame_skip):
                obs, r, term, _, _ = env.unwrapped.step(self._env_action(actions[i]))
                total += float(r)
                if term:
                    done = True
                    break
            out[i, 0] = self._add(env, obs, total, done, snap.seed)
        return out

    def tasks(self) -> list[Task]:
        return list(self._tasks)

    def rollout_rewards(self, states: np.ndarray, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The true rewards ``(B, H)`` of plans ``(B, H, A)`` from handles ``(B, 1)``, by branching; nothing is
        rendered or stored (the planner's oracle). A step after the episode ended earns 0."""
        handles = np.asarray(states)[..., 0].astype(np.int64)
        out = np.zeros(actions.shape[:2])
        seeds = self._step_seeds(rng, actions.shape[:2])
        for i, h in enumerate(handles):
            snap = self._store[h]
            if snap.done:
                continue
            env = self._restore(snap)
            for t in range(actions.shape[1]):
                if seeds is not None:
                    env.unwrapped.np_random = np.random.Generator(np.random.PCG64(int(seeds[i, t])))
                done = False
                for _ in range(self.frame_skip):
                    _, r, term, _, _ = env.unwrapped.step(self._env_action(actions[i, t]))
                    out[i, t] += float(r)
                    if term:
                        done = True
                        break
                if done:
                    break
        return out

    def _step_seeds(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray | None:
        """A stochastic world's transition seeds, one per (episode, step) whether or not an episode has ended,
        so that the draws do not depend on which episodes are done."""
        return rng.integers(0, 2**63, size=shape, dtype=np.uint64) if self.stochastic else None

    def render(self, states: np.ndarray) -> np.ndarray:
        handles = np.asarray(states)[..., 0].astype(np.int64)
        frames = np.stack([self._store[h].frame for h in handles.ravel()]) if handles.size else \
            np.empty((0, *self._shape), np.uint8)
        return (frames.reshape(*handles.shape, *self._shape).astype(np.float32) / 255.0)

    def observe(self, states: np.ndarray) -> np.ndarray | None:
        """The observed low-dimensional state ``(..., D)`` of handles ``(..., 1)``; ``None`` without one."""
        if not self._has_state:
            return None
        handles = np.asarray(states)[..., 0].astype(np.int64)
        return np.stack([self._store[h].obs for h in handles.ravel()]).reshape(*handles.shape, self.state_dim)

    def true_reward(self, states: np.ndarray) -> np.ndarray:
        """The environment's reward of the step into each state ``(..., 1)`` (0 at the start)."""
        handles = np.asarray(states)[..., 0].astype(np.int64)
        return np.array([self._store[h].reward for h in handles.ravel()]).reshape(handles.shape)

    def _declared_plan_names(self) -> list[str]:
        return [name for name, _ in self._declared()]

    def _declared(self) -> list[tuple[str, np.ndarray]]:
        if self._discrete:
            meanings = None
            if hasattr(self._core, "get_action_meanings"):
                meanings = list(self._core.get_action_meanings())
            idx = range(self._n_actions) if self.const_plans == "all" else [int(i) for i in self.const_plans]
            for i in idx:
                if not 0 <= i < self._n_actions:
                    raise ValueError(f"const_plans: action {i} is not in Discrete({self._n_actions})")
            return [(meanings[i].lower() if meanings else f"a{i}", np.array([float(i)])) for i in idx]
        if self.const_plans == "all":
            return [("low", self._low.copy()), ("high", self._high.copy())]
        out = []
        for i, v in enumerate(self.const_plans):
            v = np.asarray(v, float).ravel()
            if v.size != self.action_dim:
                raise ValueError(f"const_plans[{i}] has {v.size} numbers; the action space has {self.action_dim}")
            out.append((f"const_{i}", v))
        return out

    def plans(self, n: int, horizon: int, n_random: int, rng: np.random.Generator) -> list[Plan]:
        plans = [Plan(f"random_{i}", "random", self.sample_actions(rng, (n, horizon))) for i in range(n_random)]
        for name, a in self._declared():
            plans.append(Plan(name, name, np.broadcast_to(a, (n, horizon, self.action_dim)).copy()))
        return plans

    def sample_actions(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        if self._discrete:
            return rng.integers(0, self._n_actions, size=(*shape, 1)).astype(np.float64)
        return rng.uniform(self._low, self._high, size=(*shape, self.action_dim))

    def counterfactual_pairs(self) -> list[tuple[str, str]]:
        return [self._pair]

    @property
    def initial_states_text(self) -> str:
        extra = f", then {self.start_steps} random-action steps" if self.start_steps else ""
        return f"{self.env_id} reset(seed=s), one seed per episode from the protocol seed{extra}"

    def describe(self) -> dict:
        import gymnasium

        versions = {"gymnasium": gymnasium.__version__, "torchvision": _torchvision_version()}
        if self._backend == "classic" or type(self._core).__module__.startswith("gymnasium.envs.classic_control"):
            import pygame

            versions["pygame"] = pygame.version.ver
        if self._backend == "ale":
            import ale_py

            versions["ale_py"] = ale_py.__version__
        if self._backend == "mujoco":
            import mujoco

            versions["mujoco"] = mujoco.__version__
            versions["MUJOCO_GL"] = os.environ.get("MUJOCO_GL", "")
        return {
            "kind": "gymnasium", "name": self.name, "env_id": self.env_id, "env_kwargs": dict(self.env_kwargs or {}),
            "frame_shape": list(self._shape), "rendered_shape": list(self._native),
            "resize": {"filter": self.resize_filter, "antialias": self.antialias, "grayscale": self.grayscale},
            "frame_skip": self.frame_skip, "start_steps": self.start_steps, "stochastic": self.stochastic,
            "snapshot_backend": self._backend, "capabilities": sorted(self.capabilities),
            "actions": ({"discrete": self._n_actions} if self._discrete
                        else {"low": self._low.tolist(), "high": self._high.tolist()}),
            "plans": self._declared_plan_names(), "counterfactual_pair": list(self._pair),
            "reward": f"{self.env_id}'s own reward, summed over frame_skip (ground truth only)",
            "tasks": [{"name": t.name, "cost": "env_reward", "description": t.description} for t in self._tasks],
            "event": None, "versions": versions,
        }
