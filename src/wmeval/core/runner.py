"""Shared entry point for the stage scripts in ``stages/``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from wmeval.core.errors import WmevalError


def main(body: Callable[[], None]) -> None:
    """Run a stage body; a :class:`WmevalError` becomes a one-line message and exit 2."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        body()
    except WmevalError as e:
        print(f"wmeval: error: {e}", file=sys.stderr)
        sys.exit(2)
