"""The README's interval-coverage tables, rendered from ``benchmarks/results/coverage.json``.

The README quotes how well the set-level intervals cover; typed by hand, those figures went stale when the
benchmark was rerun (the table still showed the bias-corrected FD's 99.8% at a true 0, d = 16, after the
permutation test had made it 95.0%). So the block between :data:`BEGIN` and :data:`END` is this module's output,
and ``tests/test_readme.py`` fails where it differs from what the committed results give.

    python -m wmeval.report.readme            # rewrite README.md's block from benchmarks/results/coverage.json
    python -m wmeval.report.readme --check    # exit 1, naming the difference, where the block is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BEGIN = ("<!-- coverage tables: generated from benchmarks/results/coverage.json by `python -m wmeval.report.readme`; "
         "tests/test_readme.py checks them -->")
END = "<!-- end of the generated coverage tables -->"

#: The set-level parts per table: along the features' lowest-variance axis, then along the highest.
LOWEST = ("sets", "sets_more_episodes", "sets_mid", "sets_wide")
HIGHEST = ("sets_high_axis", "sets_more_episodes_high_axis", "sets_mid_high_axis")
METRICS = (("kid", "KID"), ("fd_bias_corrected", "bias-corrected FD"))
#: The truths, the shifts as multiples of a part's ``shift`` (coverage.py: a small one and three times that).
TRUTHS = (("zero", "0", 0), ("shift", "small shift", 1), ("large shift", "large shift", 3))


def _pct(p: Any) -> str:
    return f"{float(p):.1%}" if isinstance(p, (int, float)) else "?"


def _cell(c: dict[str, Any] | None) -> str:
    """One cell: coverage (power, or the false-positive rate at a true 0), or the share withheld."""
    if c is None:
        return "·"
    withheld = float(c.get("withheld") or 0.0)
    if withheld >= 0.5:
        return f"withheld in {withheld:.1%}"
    rate = c.get("false_positive_rate") if c.get("truth") == "zero" else c.get("power")
    text = _pct(c.get("coverage")) + (f" ({_pct(rate)})" if rate is not None else "")
    return text + (f", {withheld:.1%} withheld" if withheld else "")


def _table(cov: dict[str, Any], keys: tuple[str, ...], truths: tuple = TRUTHS) -> list[str]:
    parts = [(k, cov[k]) for k in keys if cov.get(k)]
    if not parts:
        return []
    head = ["truth", "sides"] + [f"{label}, {p.get('episodes', '?')} episodes, d = {p.get('dim', '?')}"
                                 for _, p in parts for _, label in METRICS]
    shifts = {p.get("shift") for _, p in parts}
    shift = next(iter(shifts)) if len(shifts) == 1 and isinstance(next(iter(shifts)), (int, float)) else None
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for truth, label, times in truths:
        truth_label = f"{label} ({times * shift:g})" if times and shift is not None else label
        for design in ("paired", "unpaired"):
            found = [next((c for c in p.get("cells", []) if (c.get("metric"), c.get("truth"), c.get("design"))
                           == (metric, truth, design)), None) for _, p in parts for metric, _ in METRICS]
            if any(found):
                lines.append("| " + " | ".join([truth_label, design] + [_cell(c) for c in found]) + " |")
    return lines


def coverage_markdown(cov: dict[str, Any]) -> str:
    """The block: the lowest-axis and the highest-axis tables, their design, and every cell outside 93-97% by more
    than chance on its screen with its rerun on fresh data sets (:func:`wmeval.report.scorecard.screen_flags`)."""
    from wmeval.report.scorecard import _named, screen_flags

    first = cov.get("sets") or {}
    parts = [cov[k] for k in LOWEST + HIGHEST if cov.get(k)]
    sizes = sorted({int(p["datasets"]) for p in parts if isinstance(p.get("datasets"), (int, float))})
    level = first.get("confidence_level", cov.get("confidence_level"))
    nominal = f"Nominal-{float(level):.0%}" if isinstance(level, (int, float)) else "The"
    out = [BEGIN, "",
           f"{nominal} intervals on episode-clustered Gaussian features with a closed-form truth "
           f"({first.get('frames_per_episode', '?')} rows an episode, within-episode correlation "
           f"rho = {first.get('rho', '?')}; {' or '.join(map(str, sizes)) or '?'} data sets a cell), "
           "shifts along the features' lowest-variance axis:", ""]
    out += _table(cov, LOWEST)
    if (high := _table(cov, HIGHEST, TRUTHS[1:])):
        out += ["", "The same shifts along the highest-variance axis (the truth-0 cells are the ones above):",
                ""] + high
    se = [f"{100 * (0.95 * 0.05 / n) ** 0.5:.1f} points at {n} data sets" for n in sizes]
    out += ["", "In brackets: the power (the share of intervals entirely above 0), and at a true 0 the false-positive "
            "rate; \"withheld\": the share of data sets where the bias-corrected FD's two-scale check gave no interval "
            "(coverage is over the intervals given)."
            + (" A coverage near 95% has a standard error of about " + " and ".join(se) + "." if se else "")]
    flags = screen_flags(cov)
    if flags:
        fresh = (cov.get("confirmation") or {}).get("datasets")
        out += ["", "Outside 93-97% by more than chance (1.96 standard errors past the nearer end) on its screen, and "
                f"each such cell rerun on {fresh or 'more'} data sets the screen did not use (`python "
                "benchmarks/coverage.py --only confirm`):", "", "| cell (screen; rerun) | counted |", "|---|---|"]
        for f in flags:
            side = "too wide" if f["side"] > 0 else "too narrow"
            verdict = {True: f"yes: {side} on the rerun too", False: "no: within chance on the rerun",
                       None: "not rerun"}[f["confirmed"]]
            out.append(f"| {_named(f)} | {verdict} |")
    return "\n".join(out + ["", END])


def block_of(text: str, where: str = "README.md") -> tuple[int, int]:
    """The start and end offsets of the generated block in ``text`` (markers included).

    Raises:
        ValueError: no block, an end marker missing after the start, or a second block.
    """
    start = text.find(BEGIN)
    end = text.find(END, start) if start >= 0 else -1
    if start < 0 or end < 0 or text.find(BEGIN, start + 1) >= 0:
        raise ValueError(f"{where}: expected one generated coverage block, {BEGIN!r} then {END!r}")
    return start, end + len(END)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 where README.md's block differs; write nothing")
    ap.add_argument("--readme", default="README.md")
    ap.add_argument("--coverage", default="benchmarks/results/coverage.json")
    args = ap.parse_args(argv)
    text = Path(args.readme).read_text()
    try:
        start, end = block_of(text, args.readme)
    except ValueError as e:
        print(f"wmeval.report.readme: {e}", file=sys.stderr)
        return 2
    want = coverage_markdown(json.loads(Path(args.coverage).read_text()))
    if text[start:end] == want:
        return 0
    if args.check:
        print(f"{args.readme}: the coverage tables differ from {args.coverage}; run `python -m wmeval.report.readme`",
              file=sys.stderr)
        return 1
    Path(args.readme).write_text(text[:start] + want + text[end:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
