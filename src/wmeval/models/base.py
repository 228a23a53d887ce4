"""The world-model adapter protocol and the checks applied to every prediction.

Any object with a ``predict`` method of this signature is a world model::

    predict(history: History, actions: np.ndarray, num_samples: int,
            rng: np.random.Generator) -> Prediction

* ``history.frames`` ``(N, T0, H_img, W, C)`` float32 in [0, 1] (the observed
  frames, oldest first), ``history.states`` ``(N, T0, D)`` float64 where the world
  has a state, ``history.actions`` ``(N, T0 - 1, A)`` (the actions between them).
* ``actions`` ``(N, H, A)``: the actions to condition on, one per predicted step.
* return a :class:`Prediction` with ``frames`` ``(N, S, H, H_img, W, C)`` (float in
  [0, 1] or uint8) and/or ``states`` ``(N, S, H, D)``, ``S = num_samples``.
  A model that returns only states in a rendered world has its frames drawn by
  the world's renderer, so pixel metrics still apply.

Optional:

* ``stochastic: bool`` (default False): whether the model samples; deterministic
  models are asked for one sample.
* ``log_prob(history, actions, future) -> (N, H)``: the log density (or mass) of
  the realized future, ``future.states``/``future.frames`` shaped like a history
  of length H, one chain-rule term ``log p(o_t | o_<t, a)`` per step; ``-inf`` is
  allowed (zero density), NaN and ``+inf`` are not.
* ``Prediction.rewards`` ``(N, S, H)``: the predicted reward of each step (a reward head). With it the
  planner plans with the model on an environment's control tasks (``cost: env_reward``); a model may
  instead implement ``predict_rewards(history, actions, rng) -> (N, H)``, which the planner calls in
  place of ``predict`` (no frames drawn).

The adapter is instantiated by Hydra from ``_target_``; if its constructor takes a
``world`` argument it receives the ground-truth world object (the reference
models use it to fit themselves; a user model normally does not need it).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from wmeval.core.errors import ConfigError, ModelOutputError, WmevalError


class History:
    """Observed context, batched over N episodes (see module docstring for shapes).

    ``frames`` are rendered from ``states`` on first access when the caller passes a
    ``render`` function instead of frames (planning queries use this, so a
    state-based model never pays for rendering).

    ``world_states`` are the world's own states of the context (``states`` unless the world keeps
    handles, as a Gymnasium world does): only controls that roll the true world use them.
    """

    __slots__ = ("_frames", "states", "actions", "_render", "world_states")

    def __init__(self, frames: np.ndarray | None = None, states: np.ndarray | None = None,
                 actions: np.ndarray | None = None, render=None, world_states: np.ndarray | None = None) -> None:
        self._frames, self.states, self.actions, self._render = frames, states, actions, render
        self.world_states = states if world_states is None else world_states

    @property
    def frames(self) -> np.ndarray | None:
        if self._frames is None and self._render is not None and self.world_states is not None:
            self._frames = self._render(self.world_states)
        return self._frames


@dataclass(frozen=True)
class Prediction:
    """A model's output: ``frames`` ``(N, S, H, H_img, W, C)`` and/or ``states`` ``(N, S, H, D)``; optionally
    ``rewards`` ``(N, S, H)``, the predicted reward of each step (a model with a reward head), which lets the
    planner plan with it on a task whose cost is the environment's reward."""

    frames: np.ndarray | None = None
    states: np.ndarray | None = None
    rewards: np.ndarray | None = None


@runtime_checkable
class WorldModel(Protocol):
    def predict(self, history: History, actions: np.ndarray, num_samples: int,
                rng: np.random.Generator) -> Prediction: ...


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor
        t = x.detach().cpu()
        if str(t.dtype) == "torch.bfloat16" or str(t.dtype).startswith("torch.float8"):
            t = t.float()                           # no numpy dtype: float32 holds every such value exactly
        x = t.numpy()
    return np.asarray(x)


def _first_bad(arr: np.ndarray, mask: np.ndarray) -> str:
    idx = tuple(int(i) for i in np.argwhere(mask)[0])
    return f"value {arr[idx].item()!r} at index {idx}"


def check_frames(frames: Any, expected: tuple[int, ...], where: str) -> np.ndarray:
    """Validate predicted/imported frames; return them as float32 in [0, 1].

    Args:
        frames: array-like, uint8 (0..255) or floating in [0, 1].
        expected: the exact shape required.
        where: who produced them, for the message ("model 'x' frames", "file.npz: frames").

    Raises:
        ModelOutputError: wrong shape, dtype, non-finite values or out-of-range values.
    """
    arr = _to_numpy(frames)
    if tuple(arr.shape) != tuple(expected):
        raise ModelOutputError(f"{where}: shape {tuple(arr.shape)}, expected {tuple(expected)}")
    if arr.dtype == np.uint8:
        return arr.astype(np.float32) / 255.0
    if not np.issubdtype(arr.dtype, np.floating):
        raise ModelOutputError(
            f"{where}: dtype {arr.dtype}, expected uint8 (0..255) or float in [0, 1]")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ModelOutputError(f"{where}: non-finite {_first_bad(arr, bad)}")
    tol = 1e-6
    bad = (arr < -tol) | (arr > 1 + tol)
    if bad.any():
        raise ModelOutputError(f"{where}: out of range [0, 1]: {_first_bad(arr, bad)}")
    return np.clip(arr, 0.0, 1.0).astype(np.float32)


def check_states(states: Any, expected: tuple[int, ...], where: str) -> np.ndarray:
    """Validate predicted/imported states; return float64."""
    arr = _to_numpy(states)
    if tuple(arr.shape) != tuple(expected):
        raise ModelOutputError(f"{where}: shape {tuple(arr.shape)}, expected {tuple(expected)}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ModelOutputError(f"{where}: dtype {arr.dtype}, expected a real number type")
    arr = arr.astype(np.float64)
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ModelOutputError(f"{where}: non-finite {_first_bad(arr, bad)}")
    return arr


def check_log_prob(logp: Any, expected: tuple[int, ...], where: str) -> np.ndarray:
    raw = _to_numpy(logp)
    if raw.dtype.kind not in "fiu":
        raise ModelOutputError(f"{where}: log_prob returned dtype {raw.dtype}, expected real numbers")
    arr = raw.astype(np.float64)
    if tuple(arr.shape) != tuple(expected):
        raise ModelOutputError(f"{where}: shape {tuple(arr.shape)}, expected {tuple(expected)}")
    bad = np.isnan(arr) | (arr == np.inf)
    if bad.any():
        raise ModelOutputError(f"{where}: {_first_bad(arr, bad)} (NaN and +inf are not log densities)")
    return arr


def check_prediction(pred: Any, *, n: int, samples: int, horizon: int,
                     frame_shape: tuple[int, int, int] | None, state_dim: int | None,
                     where: str) -> Prediction:
    """Validate a :class:`Prediction` against the protocol; return a normalised copy."""
    if not isinstance(pred, Prediction):
        raise ModelOutputError(
            f"{where}: predict() returned {type(pred).__name__}, expected wmeval.models.Prediction")
    if pred.frames is None and pred.states is None:
        raise ModelOutputError(f"{where}: prediction has neither frames nor states")
    frames = states = None
    if pred.frames is not None:
        if frame_shape is None:
            raise ModelOutputError(f"{where}: returned frames, but the world has no frames")
        frames = check_frames(pred.frames, (n, samples, horizon, *frame_shape), f"{where} frames")
    if pred.states is not None:
        if state_dim is None:
            raise ModelOutputError(f"{where}: returned states, but the world has no state")
        states = check_states(pred.states, (n, samples, horizon, state_dim), f"{where} states")
    rewards = None
    if pred.rewards is not None:
        rewards = check_states(pred.rewards, (n, samples, horizon), f"{where} rewards")
    return Prediction(frames=frames, states=states, rewards=rewards)



def build_model(world_name: str, model_name: str, cfg: dict[str, Any], world: Any) -> Any:
    """Instantiate one model config ``models.<world>.entries.<model>`` through Hydra."""
    from hydra.errors import InstantiationException
    from hydra.utils import get_object, instantiate

    key = f"models.{world_name}.entries.{model_name}"
    target = cfg.get("_target_")
    if not target:
        raise ConfigError(f"params.yaml: {key} has no _target_ (the adapter class to instantiate)")
    try:
        factory = get_object(target)
    except Exception as e:  # ImportError, AttributeError, hydra's own wrappers
        raise ConfigError(f"params.yaml: {key}._target_ = {target!r} cannot be imported: {e}") from None
    kwargs: dict[str, Any] = {}
    try:
        params = inspect.signature(factory).parameters
        if "world" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
            kwargs["world"] = world
    except (TypeError, ValueError):
        pass
    try:
        # Instantiate as a partial and add the world ourselves: Hydra would turn a
        # dataclass argument into a DictConfig.
        model = instantiate(cfg, _partial_=True)(**kwargs)
    except (InstantiationException, TypeError, ValueError) as e:
        raise ConfigError(f"params.yaml: {key}: could not instantiate {target}: {e}") from None
    except WmevalError:     # already names the file or key (e.g. an imported model's manifest)
        raise
    except Exception as e:  # the user's constructor raised: name it, without Hydra's traceback
        raise ConfigError(f"params.yaml: {key}: {target}(...) raised {type(e).__name__}: {e}") from None
    if not callable(getattr(model, "predict", None)) and not callable(getattr(model, "load", None)):
        raise ConfigError(f"params.yaml: {key}: {target} has no predict() method")
    return model
