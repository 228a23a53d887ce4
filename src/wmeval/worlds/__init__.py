"""Ground-truth worlds and their registry."""

from __future__ import annotations

from typing import Any

from wmeval.core.errors import ConfigError

from .base import Plan, World, rollout_states
from .blobs import BlobWorld
from .dataset import DatasetWorld
from .gymnasium import GymnasiumWorld
from .pendulum import PendulumWorld

WORLD_KINDS: dict[str, type] = {"pendulum": PendulumWorld, "blobs": BlobWorld, "gymnasium": GymnasiumWorld,
                               "dataset": DatasetWorld}
#: The worlds wmeval simulates itself, in numpy with their own seeded streams: safe to run on threads side by side
#: (an environment's renderer, a dataset's reader and a user's code are not known to be).
BUILTIN_WORLDS = ("pendulum", "blobs")


def build_world(name: str, cfg: dict[str, Any]) -> World:
    """Build a world from its config section ``worlds.<name>`` (keys: kind, name, params)."""
    kind = cfg.get("kind")
    if kind not in WORLD_KINDS:
        raise ConfigError(
            f"params.yaml: worlds.{name}.kind = {kind!r} is not a known world; "
            f"choose one of {sorted(WORLD_KINDS)}")
    params = dict(cfg.get("params") or {})
    for key in ("init_low", "init_high"):
        if key in params:
            params[key] = tuple(params[key])
    try:
        return WORLD_KINDS[kind](name=name, **params)
    except TypeError as e:
        raise ConfigError(f"params.yaml: worlds.{name}.params: {e}") from None
    except ValueError as e:
        raise ConfigError(f"params.yaml: worlds.{name}.params: {e}") from None


__all__ = ["BUILTIN_WORLDS", "BlobWorld", "DatasetWorld", "GymnasiumWorld", "PendulumWorld", "Plan", "World",
           "WORLD_KINDS", "build_world", "rollout_states"]
