"""Answers back from the raters: checked against the study's key and turned into a judgments table.

Each rater's page saves ``answers-<rater>.json``; put them in ``studies/<name>/answers/``. :func:`read_answers`
checks every file against ``study.json`` (its format, the study's name and digest, the rater, every trial id
and side) and refuses, naming the file and the entry, what does not match. A trial left unanswered is counted
per rater, never silently dropped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from wmeval.core.errors import WmevalError

from .study import ANSWERS_FORMAT, FORMAT, study_digest

COLUMNS = ["rater", "trial", "trajectory", "plan", "question", "left", "right", "choice", "side", "response_ms",
           "attention_check", "expected", "repeat_of"]


def load_study(folder: str | Path) -> dict:
    """``study.json`` of an exported study (refused when missing or of another format)."""
    path = Path(folder) / "study.json"
    try:
        study = json.loads(path.read_text())
    except OSError as e:
        raise WmevalError(f"{path}: cannot read ({e.strerror}); export the study first "
                          "(`wmeval study export DESIGN.yaml`)") from None
    except json.JSONDecodeError as e:
        raise WmevalError(f"{path}: not valid JSON ({e})") from None
    if study.get("format") != FORMAT:
        raise WmevalError(f"{path}: format {study.get('format')!r}; expected {FORMAT!r}")
    return study


def read_answers(folder: str | Path) -> tuple[pd.DataFrame, dict]:
    """``(judgments, report)`` of a study's returned answers.

    ``judgments`` has one row per answered trial (:data:`COLUMNS`; ``trajectory`` is the episode shown).
    ``report`` counts, per rater, the trials shown and answered, and names the raters with no answers file.
    """
    folder = Path(folder)
    study = load_study(folder)
    digest = study_digest(folder / "study.json")
    name = study["design"]["name"]
    files = sorted((folder / "answers").glob("*.json"))
    rows, seen_raters = [], {}
    for f in files:
        try:
            ans = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise WmevalError(f"{f}: cannot read an answers file ({e})") from None
        except json.JSONDecodeError as e:
            raise WmevalError(f"{f}: not valid JSON ({e})") from None
        if not isinstance(ans, dict) or ans.get("format") != ANSWERS_FORMAT:
            raise WmevalError(f"{f}: format {ans.get('format') if isinstance(ans, dict) else None!r}; expected "
                              f"{ANSWERS_FORMAT!r} (the file a study page saves)")
        if ans.get("study") != name:
            raise WmevalError(f"{f}: answers to study {ans.get('study')!r}, not {name!r}")
        if ans.get("study_digest") != digest:
            raise WmevalError(f"{f}: answers to another export of study {name!r} (study_digest "
                              f"{str(ans.get('study_digest'))[:12]}..., this study.json is {digest[:12]}...); "
                              "pages exported again are a new study")
        rater = ans.get("rater")
        if not isinstance(rater, str) or rater not in study["raters"]:
            raise WmevalError(f"{f}: rater {rater!r} is not one of the study's {sorted(study['raters'])}")
        if rater in seen_raters:
            raise WmevalError(f"{f}: a second answers file of rater {rater!r} (the first: {seen_raters[rater]})")
        seen_raters[rater] = f.name
        key = {t["trial"]: t for t in study["raters"][rater]}
        answered = set()
        entries = ans.get("answers")
        if not isinstance(entries, list):
            raise WmevalError(f"{f}: 'answers' is {type(entries).__name__}; expected the list of answers a study page "
                              "saves (an empty list for a rater who answered nothing)")
        for i, a in enumerate(entries):
            if not isinstance(a, dict):
                raise WmevalError(f"{f}: answers[{i}] is a {type(a).__name__}; expected an object with trial, choice "
                                  "and response_ms")
            trial = a.get("trial")
            if not isinstance(trial, str) or trial not in key:
                raise WmevalError(f"{f}: answers[{i}]: trial {trial!r} is not one of rater {rater!r}'s trials")
            if trial in answered:
                raise WmevalError(f"{f}: answers[{i}]: trial {trial!r} answered twice")
            side = a.get("choice")
            if side not in ("left", "right"):
                raise WmevalError(f"{f}: answers[{i}]: choice {side!r}; expected 'left' or 'right'")
            ms = a.get("response_ms")
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
                raise WmevalError(f"{f}: answers[{i}]: response_ms {ms!r}; expected a finite non-negative number "
                                  "(milliseconds)")
            answered.add(trial)
            t = key[trial]
            rows.append({"rater": rater, "trial": trial, "trajectory": t["episode"], "plan": t["plan"],
                         "question": t["question"], "left": t["left"], "right": t["right"], "choice": t[side],
                         "side": side, "response_ms": float(ms), "attention_check": bool(t["attention_check"]),
                         "expected": t["expected"], "repeat_of": t["repeat_of"]})
    per_rater = {}
    for rater, trials in study["raters"].items():
        n_ans = sum(1 for r in rows if r["rater"] == rater)
        per_rater[rater] = {"trials": len(trials), "answered": n_ans,
                            "answers_file": seen_raters.get(rater)}
    report = {"study": name, "study_digest": digest, "answers_files": len(files),
              "raters_without_answers": sorted(r for r in study["raters"] if r not in seen_raters),
              "unanswered_trials": sum(v["trials"] - v["answered"] for v in per_rater.values() if v["answers_file"]),
              "per_rater": per_rater}
    return pd.DataFrame(rows, columns=COLUMNS), report
