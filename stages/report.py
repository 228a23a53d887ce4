"""Stage report: the scorecard (Markdown and self-contained HTML), plot data, protocol cards, provenance.

Writes reports/scorecard.md, reports/scorecard.html, reports/plots/ (data for `dvc plots`),
reports/protocols.json (protocol strings; the numbers are in reports/metrics.json),
reports/intervals.csv (every interval with its method, B, level, resampling unit and strata)
and reports/provenance.json. The human section comes from data/human/summary.json (the human stage).
"""

import wmeval.core.stage_process  # noqa: F401, I001  first: memory settings before numpy and pyarrow load

import json
from pathlib import Path

import pandas as pd

from wmeval.core.runner import main
from wmeval.lineage.provenance import run_record
from wmeval.report import interval_table, plot_data, protocol_cards, render
from wmeval.report.human import study_card
from wmeval.tables import atomic_dir, atomic_write_text

BOOT, OUT = Path("data/bootstrap"), Path("reports")
HUMAN = Path("data/human")                             # the human stage's summary (human.study; none by default)
POINTS = Path("data/stats/distributional.parquet")   # the distributional point estimates (FD vs 1/N figure)
COVERAGE = Path("benchmarks/results/coverage.json")      # the interval-coverage benchmark the report cites
ORACLE = Path("benchmarks/results/direction_oracle.json")  # what the boundary test's rule covers with the noise known


def run() -> None:
    intervals = pd.read_parquet(BOOT / "intervals.parquet")
    protocol = json.loads((BOOT / "protocol.json").read_text())
    curves = pd.read_parquet(BOOT / "curves.parquet")
    kpath = BOOT / "kcurves.parquet"
    kcurves = pd.read_parquet(kpath) if kpath.exists() else None
    points = pd.read_parquet(POINTS)
    provenance = run_record(Path("."))
    human = json.loads((HUMAN / "summary.json").read_text())
    provenance["human_study"] = study_card(human)       # the study's protocol card (None without a study)
    coverage = json.loads(COVERAGE.read_text())
    # The scorecard's coverage text reads the oracle beside the benchmark it explains (report.scorecard.oracle_wide).
    coverage["direction_oracle"] = json.loads(ORACLE.read_text())
    cards = protocol_cards(intervals, protocol)
    md, page = render(intervals, protocol, curves, kcurves, points, provenance, coverage, cards, human)
    # Everything is rendered before anything is written; each file is replaced atomically.
    with atomic_dir(OUT / "plots") as tmp:
        for rel, table in plot_data(curves, kcurves, intervals).items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            table.to_csv(tmp / rel, index=False, float_format="%.10g")
    atomic_write_text(OUT / "intervals.csv", interval_table(intervals, protocol).to_csv(index=False, float_format="%.10g"))
    protocols = {"bootstrap": protocol["bootstrap"], "encoder": protocol["encoder"], "cards": cards,
                 "human": study_card(human)}
    atomic_write_text(OUT / "protocols.json", json.dumps(protocols, indent=2, sort_keys=True) + "\n")
    atomic_write_text(OUT / "provenance.json", json.dumps(provenance, indent=2, sort_keys=True, default=str) + "\n")
    atomic_write_text(OUT / "scorecard.md", md)
    atomic_write_text(OUT / "scorecard.html", page)


if __name__ == "__main__":
    main(run)
