"""User-facing errors.

Every problem that a user can fix (a bad config value, a malformed input file, a
model that returns the wrong shape) raises :class:`WmevalError` with a message that
names the file, column or key and the offending value. The CLI and the stage
scripts turn it into a one-line message on stderr and exit status 2, without a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class WmevalError(Exception):
    """An error in the user's input, config or model, with a message that says where."""


class ConfigError(WmevalError):
    """A params.yaml / conf/ value that fails validation."""


class ModelOutputError(WmevalError):
    """A world model (built-in, adapter or imported) produced an invalid prediction."""


class StaleInputError(WmevalError):
    """An input table was made with other params than this run's: a cache (DVC's or ours) returned old outputs."""
