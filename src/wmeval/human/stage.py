"""The human stage: the declared study's answers -> ``data/human/`` (``summary.json``, ``judgments.parquet``)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from wmeval.core.config import Params
from wmeval.core.errors import WmevalError
from wmeval.tables import atomic_dir

from .analysis import analyse_study


def human_stage(params: Params, stats: Path, out: Path, root: Path = Path("."),
                rollouts: Path = Path("data/rollouts")) -> dict:
    """Analyse ``params.human.study`` (or record that there is none) and write ``out`` atomically. Evaluators are
    validated only while the frames the study showed are still those in ``rollouts`` (the run's, that the
    statistics scored)."""
    h = params.human
    if h.study is None:
        summary = {"status": "no study", "study": None,
                   "evaluators": [{"metric": m, "validated": False, "verdict": "not validated",
                                   "note": "no human study is declared (human.study)"} for m in h.evaluators]}
        judgments = pd.DataFrame()
    else:
        folder = root / h.study
        if not (folder / "study.json").is_file():
            raise WmevalError(f"{folder / 'study.json'}: missing; human.study = {h.study!r} must be a study exported "
                              "with `wmeval study export`")
        episodes = pd.read_parquet(stats / "episodes.parquet") if h.evaluators else None
        try:
            summary, judgments = analyse_study(folder, episodes=episodes, evaluators=list(h.evaluators),
                                               n_resamples=h.n_resamples, confidence_level=h.confidence_level,
                                               seed=h.seed, rollouts=root / rollouts)
        except ValueError as e:
            raise WmevalError(f"{h.study}: {e}") from None
        summary["path"] = h.study
    with atomic_dir(out) as tmp:
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
        judgments.to_parquet(tmp / "judgments.parquet", index=False)
    return summary
