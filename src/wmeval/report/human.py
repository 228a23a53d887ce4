"""The scorecard's human section and the study's protocol card, from the human stage's ``summary.json``."""

from __future__ import annotations

from typing import Any

from wmeval.rendering.document import Doc, Table


def _n(x: float | None, digits: int = 3) -> str:
    return "undefined" if x is None else f"{x:.{digits}g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"


def _iv(rec: dict, key: str) -> str:
    return f"{_n(rec.get(key))} [{_n(rec.get(key + '_low'))}, {_n(rec.get(key + '_high'))}]"


def study_card(summary: dict[str, Any]) -> dict[str, str] | None:
    """The study's protocol card (``None`` without a study): population, instructions, presentation, the
    randomization, counts, exclusions and the interval method."""
    if summary.get("study") is None:
        return None
    d, imp, ex = summary["design"], summary["import"], summary.get("exclusions") or {}
    pb = summary["presentation"]["playback"]
    return {
        "study": summary["study"],
        "world": summary["world"],
        "rater population": summary["population"],
        "questions": "; ".join(f"{q}: \"{t}\"" for q, t in summary["questions"].items()),
        "instructions": "; ".join(f"{q}: \"{t}\"" for q, t in summary["instructions"].items()),
        "candidates": ", ".join(summary["candidates"]),
        "presentation": (f"{summary['presentation']['blinding']}; context frame then two continuations, played "
                         f"together at {pb['fps']} fps, {pb['scale']}x nearest-neighbour, "
                         f"{'looped' if pb['loop'] else 'played once'} with a {pb['pause_ms']} ms hold; answers "
                         f"unlock after {pb['min_loops']} play(s); consistency trials show the actions in step"),
        "design": (f"{d['raters']} raters, {d['trials_per_rater']} compared trials each, {d['repeats']} repeated "
                   f"(sides swapped), {d['attention_checks']} attention checks (realized vs "
                   f"{summary['presentation']['corruption']}ed copy); episodes {summary['episodes']}; "
                   f"plans {summary['plans']}"),
        "randomization": (f"seed {summary['randomization']['seed']}, {summary['randomization']['generator']}; "
                          f"order: {summary['randomization']['order']}"),
        "counts": (f"{imp['answers_files']} answers files; raters without answers: "
                   f"{imp['raters_without_answers'] or 'none'}; unanswered trials: {imp['unanswered_trials']}"),
        "exclusions": (f"rules {ex.get('rules')}; of {ex.get('total', 0)} answers: "
                       f"{ex.get('attention_check_trials', 0)} attention checks, "
                       f"{ex.get('judgments_of_excluded_raters', 0)} from excluded raters"
                       f"{' ' + str(ex['raters_excluded']) if ex.get('raters_excluded') else ''}, "
                       f"{ex.get('judgments_too_fast', 0)} too fast; "
                       f"{ex.get('kept', 0)} kept") if ex else "no answers yet",
        "interval": (f"{summary['interval']['method']}, B = {summary['interval']['n_resamples']}, "
                     f"{summary['interval']['confidence_level']:.0%}, seed {summary['interval']['seed']}; "
                     f"generalizes over {summary['interval']['generalizes_over']}"),
        "rollouts": "; ".join(f"{k} sha256 {v[:12]}" for k, v in summary["rollouts"].items()),
        "evaluator scores": next((e["scores"] for e in summary.get("evaluators", []) if "scores" in e),
                                 "no evaluator scored"),
    }


def human_section(doc: Doc, summary: dict[str, Any] | None) -> None:
    """Human judgments and learned evaluators: win rates and Bradley-Terry scores per question, agreement,
    consistency, and each evaluator's verdict ("validated on <study>" or "not validated")."""
    doc.h(2, "Human judgments and learned evaluators")
    if summary is None or summary.get("study") is None:
        doc.p("No human study is declared (`human.study`), so this scorecard has no human judgments, and no "
              "automatic metric is validated against humans: every evaluator below is **not validated**. "
              "README, \"Human judgments\", says how to run a blinded study and compose it here.")
        doc.table(Table(["evaluator", "verdict"], [[f"`{e['metric']}`", e["verdict"]]
                                                   for e in (summary or {}).get("evaluators", [])]))
        return
    card = study_card(summary)
    doc.p(f"Study **{summary['study']}** on world `{summary['world']}`: {card['design']}. Raters: "
          f"{summary['population']}. Exclusions: {card['exclusions']}. Intervals: {card['interval']}.")
    if summary.get("frames_changed"):
        doc.p("The frames this study showed are no longer this run's rollouts (" + "; ".join(summary["frames_changed"])
              + "): its judgments are of other frames than the scores above, so no metric is validated against "
              "them. Export a new study from this run to validate its metrics.", "warn")
    if summary.get("status") != "analysed":
        doc.p(f"No answers have been returned yet ({card['counts']}).", "warn")
    for q, entry in summary.get("per_question", {}).items():
        doc.h(3, f"{q}: \"{summary['questions'][q]}\"")
        doc.p(f"{entry['judgments']} kept judgments from {entry['raters']} raters on {entry['trajectories']} "
              "episodes. Win rate: the share of its comparisons a candidate won (chance 0.5); Bradley-Terry: "
              "log-strength, mean 0 (P(i beats j) = 1 / (1 + exp(s_j - s_i))). Higher is better for both.")
        if entry.get("note"):
            doc.p(entry["note"], "warn")
        doc.table(Table(["candidate", "win rate ↑", "Bradley-Terry ↑", "comparisons"],
                        [[f"`{c['candidate']}`", _iv(c, "win_rate"), _iv(c, "bradley_terry"), str(c["comparisons"])]
                         for c in entry.get("candidates", [])]))
        ir, ia = entry.get("intra_rater") or {}, entry["inter_rater"]
        doc.p(f"Agreement between raters: Krippendorff's alpha ({ia['level']}) {_n(ia['alpha'])} over "
              f"{ia['items']} items judged by two or more raters. Intra-rater consistency: "
              f"{int(ir.get('repeated_trials') or 0)} repeated trials, agreement {_n(ir.get('agreement'))}, "
              f"alpha {_n(ir.get('alpha'))}.")
    doc.h(3, "Learned evaluators")
    doc.p(f"Rule: {summary.get('validation_rule', '')}. Pairwise accuracy: the share of kept judgments (between two "
          "scored candidates) in which the metric prefers the candidate the rater chose (metric ties count one "
          "half); the human ceiling is the agreement of two different raters on the same item.")
    doc.table(Table(["evaluator", "question", "pairwise accuracy ↑", "human ceiling", "judgments", "verdict"],
                    [[f"`{e['metric']}` ({e.get('direction', '')})", e.get("question", ""),
                      _iv(e, "accuracy") if "accuracy" in e else "n/a",
                      _iv(e, "human_ceiling") if "human_ceiling" in e else "n/a", str(e.get("judgments", 0)),
                      e["verdict"]] for e in summary.get("evaluators", [])]))
    doc.h(3, "Study protocol card")
    doc.table(Table(["field", "value"], [[k, v] for k, v in card.items()]))
