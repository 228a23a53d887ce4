"""Code and environment identity, recorded in every file wmeval writes."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from . import __version__


@lru_cache(maxsize=1)
def code_version() -> dict[str, str]:
    """The package version and a sha256 over the package's Python sources.

    The digest identifies the exact code that produced a file, with or without git,
    and does not change with the commit alone (so DVC outputs stay byte-stable).
    """
    pkg = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(pkg.rglob("*.py")):
        h.update(str(f.relative_to(pkg)).encode())
        h.update(b"\0")
        h.update(f.read_bytes())
        h.update(b"\0")
    return {"wmeval": __version__, "source_sha256": h.hexdigest()}


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()
