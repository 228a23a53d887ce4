"""Stage report: the Markdown scorecard -> reports/scorecard.md."""

import json
from pathlib import Path

import pandas as pd

from wmeval.report import render_markdown
from wmeval.stage import main
from wmeval.tables import atomic_write_text


def run() -> None:
    intervals = pd.read_parquet("data/bootstrap/intervals.parquet")
    protocol = json.loads(Path("data/bootstrap/protocol.json").read_text())
    curves = pd.read_parquet("data/bootstrap/curves.parquet")
    kpath = Path("data/bootstrap/kcurves.parquet")
    kcurves = pd.read_parquet(kpath) if kpath.exists() else None
    atomic_write_text("reports/scorecard.md", render_markdown(intervals, protocol, curves, kcurves))


if __name__ == "__main__":
    main(run)
