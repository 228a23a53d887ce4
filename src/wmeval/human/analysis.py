"""The human section of a scorecard, from a study's returned answers: exclusions, win rates and Bradley-Terry
scores with crossed (trajectory x rater) intervals, agreement between raters, intra-rater consistency, and the
validation of automatic metrics against the judgments.

Everything here is computed per question (``realism``, ``consistency``); attention checks only decide
exclusions. The *trajectory* of a trial is the episode whose context it showed; an item (for agreement and
consistency) is a trajectory, a plan and a pair of candidates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .agreement import krippendorff_alpha
from .answers import read_answers
from .pairwise import (
    ExclusionRules,
    apply_exclusions,
    crossed_bootstrap,
    intra_rater_consistency,
    rates_and_scores,
    validate_evaluator,
)
from .study import INSTRUCTIONS, frames_changed

GENERALIZES = ("new trajectories (episodes of the world) and new raters from the declared population: both are "
               "resampled, crossed")


def _records(df: pd.DataFrame) -> list[dict]:
    out = []
    for name, row in df.iterrows():
        rec = {"name": str(name)}
        for k, v in row.items():
            if isinstance(v, (np.floating, float)):
                rec[k] = None if np.isnan(v) else float(v)
            elif isinstance(v, (np.integer,)):
                rec[k] = int(v)
            elif isinstance(v, (np.bool_,)):
                rec[k] = bool(v)
            else:
                rec[k] = v
        out.append(rec)
    return out


def inter_rater_alpha(judgments: pd.DataFrame) -> dict:
    """Krippendorff's alpha (nominal: which of the pair was chosen) between raters, over the items (trajectory,
    plan, pair) that two or more raters judged; each rater's first kept answer to an item (a repeat counts
    only when the first showing was excluded)."""
    df = judgments
    first = np.minimum(df["left"].to_numpy(dtype=object), df["right"].to_numpy(dtype=object))
    second = np.maximum(df["left"].to_numpy(dtype=object), df["right"].to_numpy(dtype=object))
    item = [f"{t}\x1f{p}\x1f{a}\x1f{b}" for t, p, a, b in
            zip(df["trajectory"], df.get("plan", pd.Series([""] * len(df))), first, second)]
    code = (df["choice"].to_numpy(dtype=object) == first).astype(np.float64)
    table = pd.DataFrame({"rater": df["rater"].to_numpy(), "item": item, "code": code})
    table = table.drop_duplicates(["rater", "item"])
    shared = table.groupby("item")["rater"].transform("size") >= 2
    table = table[shared]
    if table.empty:
        return {"alpha": None, "items": 0, "raters": 0, "level": "nominal",
                "note": "no item was judged by two raters"}
    matrix = table.pivot(index="rater", columns="item", values="code").to_numpy(dtype=np.float64)
    try:
        alpha = float(krippendorff_alpha(matrix, "nominal"))
    except (ValueError, ZeroDivisionError):
        alpha = None
    return {"alpha": alpha, "items": int(matrix.shape[1]), "raters": int(matrix.shape[0]), "level": "nominal"}


def evaluator_scores(episodes: pd.DataFrame, world: str, metric: str, plan_conditions: dict[str, str]) -> pd.DataFrame:
    """Per (episode, plan, source), a metric's value on the open-loop continuations of the plan's condition (the
    statistics stage's ``episodes.parquet``; two random plans share the condition ``random``)."""
    base = episodes[(episodes["world"] == world) & (episodes["metric"] == metric) & (episodes["regime"] == "open_loop")]
    parts = []
    for plan, cond in plan_conditions.items():
        sel = base[base["condition"] == cond]
        if sel.empty:
            raise ValueError(f"episodes.parquet: no open-loop value of metric {metric!r} for world {world!r} under "
                             f"condition {cond!r} (plan {plan!r}); metrics there: "
                             f"{sorted(episodes.loc[episodes['world'] == world, 'metric'].unique())}")
        parts.append(pd.DataFrame({"trajectory": sel["episode"].to_numpy(), "plan": plan,
                                   "candidate": sel["source"].to_numpy(), "value": sel["value"].to_numpy()}))
    return pd.concat(parts, ignore_index=True)


def analyse_study(folder: str | Path, *, episodes: pd.DataFrame | None = None, evaluators: list[str] = (),
                  n_resamples: int = 1000, confidence_level: float = 0.95, seed: int = 0,
                  rollouts: str | Path | None = None) -> tuple[dict, pd.DataFrame]:
    """``(summary, judgments)`` of the study in ``folder``: the summary is what the scorecard shows (JSON-ready),
    the judgments every answer with its exclusion status.

    ``rollouts``: the rollouts folder the ``episodes`` scores were computed from (the run's ``data/rollouts``).
    A metric is validated only when the frames the pages showed are still that run's frames there (the digests
    of the decoded frames in ``study.json``); otherwise the judgments are of other frames than the scores, every
    evaluator is "not validated", and ``frames_changed`` names what changed. Without ``rollouts`` (no scores to
    compare, or a caller who vouches for them) nothing is checked."""
    from wmeval.metrics.registry import REGISTRY

    from .answers import load_study

    study = load_study(folder)
    design = study["design"]
    judgments, imported = read_answers(folder)
    rules = ExclusionRules(**design["exclusions"])
    summary = {"study": design["name"], "world": design["world"], "population": design["population"],
               "questions": {q: study["questions"][q] for q in design["questions"]},
               "instructions": {q: (design["instructions"] or {}).get(q, INSTRUCTIONS[q]) for q in design["questions"]},
               "candidates": design["candidates"], "presentation": {
                   "playback": design["playback"], "corruption": design["corruption"],
                   "blinding": "candidate names hidden; sides drawn per trial; order shuffled per rater"},
               "design": {k: design[k] for k in ("raters", "trials_per_rater", "repeats", "attention_checks")},
               "episodes": study["episodes"], "plans": study["plans"],
               "randomization": study["randomization"], "rollouts": study["rollouts"],
               "import": imported, "interval": {
                   "method": "percentile, pigeonhole bootstrap (trajectories x raters resampled crossed)",
                   "n_resamples": n_resamples, "confidence_level": confidence_level, "seed": seed,
                   "generalizes_over": GENERALIZES}}
    if judgments.empty:
        summary["status"] = "no answers yet"
        summary["per_question"] = {}
        summary["evaluators"] = [{"metric": m, "validated": False, "verdict": "not validated",
                                  "note": "no answers have come back yet"} for m in evaluators]
        return summary, judgments
    kept, excluded = apply_exclusions(judgments, rules)
    summary["exclusions"] = excluded
    summary["status"] = "analysed"
    per_question = {}
    for q in design["questions"]:
        dq = kept[kept["question"] == q].reset_index(drop=True)
        entry: dict = {"judgments": int(len(dq)), "raters": int(dq["rater"].nunique()),
                       "trajectories": int(dq["trajectory"].nunique())}
        if dq["rater"].nunique() >= 2 and dq["trajectory"].nunique() >= 2:
            names = list(design["candidates"])

            res = crossed_bootstrap(dq, rates_and_scores(names), n_resamples=n_resamples,
                                    confidence_level=confidence_level, seed=seed)
            table = []
            for c in names:
                w, b = res.loc[f"win_rate:{c}"], res.loc[f"bradley_terry:{c}"]
                table.append({"candidate": c, "win_rate": float(w["point"]), "win_rate_low": float(w["low"]),
                              "win_rate_high": float(w["high"]), "bradley_terry": float(b["point"]),
                              "bradley_terry_low": float(b["low"]), "bradley_terry_high": float(b["high"]),
                              "comparisons": int(((dq["left"] == c) | (dq["right"] == c)).sum())})
            # Best first; a candidate never compared (no score) last.
            entry["candidates"] = sorted(table, key=lambda r: (np.isnan(r["bradley_terry"]),
                                                               -np.nan_to_num(r["bradley_terry"])))
        else:
            entry["candidates"] = []
            entry["note"] = "intervals need at least 2 raters and 2 trajectories after exclusions"
        entry["inter_rater"] = inter_rater_alpha(dq)
        cons = intra_rater_consistency(dq) if len(dq) else None
        entry["intra_rater"] = _records(cons.loc[["all raters"]])[0] if cons is not None else None
        per_question[q] = entry
    summary["per_question"] = per_question
    summary["evaluators"] = []
    changed = frames_changed(study, Path(rollouts) / design["world"]) if rollouts is not None and evaluators else []
    summary["frames_changed"] = changed
    if changed:
        summary["evaluators"] = [
            {"metric": m, "validated": False, "verdict": "not validated",
             "note": "the study's pages showed other frames than this run's rollouts (" + "; ".join(changed)
                     + "): the judgments say nothing about this run's scores. Export a new study from this run "
                     "to validate against it"} for m in evaluators]
        evaluators = []
    for metric in evaluators:
        info = REGISTRY.get(metric)
        if info is None or info.higher_is_better is None:
            raise ValueError(f"human.evaluators: {metric!r} is not a metric with a direction "
                             f"(choose from {sorted(k for k, v in REGISTRY.items() if v.higher_is_better is not None)})")
        if episodes is None:
            raise ValueError("human.evaluators: validating a metric needs the statistics stage's episodes table")
        scores = evaluator_scores(episodes, design["world"], metric, study["plan_conditions"])
        scored = set(scores["candidate"])
        for q in design["questions"]:
            dq = kept[kept["question"] == q].reset_index(drop=True)
            both_scored = dq["left"].isin(scored) & dq["right"].isin(scored)
            dv = dq[both_scored].reset_index(drop=True)
            rec = {"metric": metric, "question": q, "direction": "higher is better" if info.higher_is_better
                   else "lower is better", "judgments": int(len(dv)),
                   "judgments_without_scores": int((~both_scored).sum()),
                   "scores": "per episode and plan: the open-loop value under the plan's condition (statistics "
                             "stage), over all of a model's samples; the pages show sample 0"}
            if dv["rater"].nunique() >= 2 and dv["trajectory"].nunique() >= 2:
                v = validate_evaluator(dv, scores, higher_is_better=bool(info.higher_is_better),
                                       n_resamples=n_resamples, confidence_level=confidence_level, seed=seed)
                for row in ("evaluator", "human ceiling"):
                    key = "accuracy" if row == "evaluator" else "human_ceiling"
                    rec[key] = _nan(v.at[row, "point"])
                    rec[f"{key}_low"] = _nan(v.at[row, "low"])
                    rec[f"{key}_high"] = _nan(v.at[row, "high"])
                rec["validated"] = bool(v.at["evaluator", "validated"])
                rec["verdict"] = f"validated on {design['name']}" if rec["validated"] else "not validated"
            else:
                rec["validated"] = False
                rec["verdict"] = "not validated"
                rec["note"] = "too few judgments between scored candidates (2 raters and 2 trajectories needed)"
            summary["evaluators"].append(rec)
    summary["validation_rule"] = ("validated on <study>: the metric's pairwise accuracy against the kept judgments "
                                  "has a crossed interval above 0.5 (chance)")
    judgments = judgments.assign(analysed=judgments["trial"].isin(kept["trial"]).to_numpy())
    return summary, judgments


def _nan(x: float) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x
