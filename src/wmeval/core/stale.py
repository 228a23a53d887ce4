"""The second line of defence against a cache that lies: a stage checks that what it reads was made with its params.

Every table records the params it was made with (``world_config``, ``protocol``, ``model_config``,
``encoder_config`` in its metadata; ``scoring`` in the statistics protocol). A stage compares
them with the params it was given before it computes anything; a difference means the input is
stale (e.g. DVC's run cache restored outputs of another configuration) and stops the run with
the key, both values and the way out, instead of returning numbers for the wrong config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wmeval.core.errors import StaleInputError


def _plain(x: Any) -> Any:
    """JSON's view of a value (tuples as lists, keys as strings), the form metadata is stored in."""
    return json.loads(json.dumps(x, default=str, sort_keys=True))


def _difference(recorded: Any, expected: Any, key: str) -> tuple[str, Any, Any] | None:
    if isinstance(recorded, dict) and isinstance(expected, dict):
        for k in sorted(set(recorded) | set(expected), key=str):
            d = _difference(recorded.get(k, "<absent>"), expected.get(k, "<absent>"), f"{key}.{k}")
            if d is not None:
                return d
        return None
    if isinstance(recorded, (int, float)) and isinstance(expected, (int, float)) \
            and not isinstance(recorded, bool) and not isinstance(expected, bool):
        return None if float(recorded) == float(expected) else (key, recorded, expected)
    return None if recorded == expected else (key, recorded, expected)


def check_made_with(path: str | Path, recorded: Any, expected: Any, key: str, *, subset: bool = False) -> None:
    """Raise :class:`StaleInputError` when ``recorded`` (what ``path`` was made with) differs from ``expected``
    (this run's params under ``key``). ``subset``: compare only the keys of ``expected``."""
    if recorded is None:
        raise StaleInputError(f"{path}: records no {key} it was made with (made by an older wmeval?); "
                              "re-run the stage that writes it: dvc repro --force")
    rec, exp = _plain(recorded), _plain(expected)
    if subset and isinstance(rec, dict) and isinstance(exp, dict):
        rec = {k: rec.get(k, "<absent>") for k in exp}
    d = _difference(rec, exp, key)
    if d is not None:
        k, a, b = d
        raise StaleInputError(f"{path}: made with {k} = {a!r}, but this run's params have {k} = {b!r}: the input is "
                              "stale (a cache restored the outputs of another configuration?); re-run the stage "
                              "that writes it: dvc repro --force <stage>, or dvc repro --force for all")


def encoder_config(name: str, kind: str, params: dict, precision: str = "fp32") -> dict:
    """What a feature table records of the encoder params (``encoder.name``, ``.kind``, ``.params``,
    ``.precision``) as ``encoder_config``, and what the stages reading it check."""
    return {"name": name, "kind": kind, "params": params, "precision": precision}
