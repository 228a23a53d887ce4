"""The scorecard's document model and renderers, the self-contained page, plot data, and the browser harness."""

import os
import re

import browser
import numpy as np
import pandas as pd
import pytest

from wmeval.rendering.document import Doc, Table, to_html, to_markdown
from wmeval.rendering.htmlpage import figure_svg, new_figure, page
from wmeval.report.scorecard import (
    figures,
    glance,
    interval_table,
    metric_table,
    plot_data,
    ranking,
    separated_best,
)

COLS = [("one-step pixel MSE", "pixel_mse", "teacher_forced", "all")]


def _rows(points, ranks, metric="pixel_mse", regime="teacher_forced", condition="all", world="w"):
    """Interval rows for models a, b, c: ``ranks`` are (rank, low, high) per model."""
    out = []
    for (m, p), (r, lo, hi) in zip(points.items(), ranks):
        out.append({"world": world, "source": m, "metric": metric, "regime": regime, "condition": condition,
                    "unit": "observation", "point": p, "low": p * 0.9, "high": p * 1.1, "rank": r, "rank_low": lo,
                    "rank_high": hi, "n_clusters": 8, "n_resamples": 100, "confidence_level": 0.95,
                    "method": "percentile", "resampling_unit": "observation episode", "undefined_replicates": 0.0,
                    "baseline": "a", "diff_point": p - 1, "diff_low": p - 1.1, "diff_high": p - 0.9,
                    "p_better": 0.5})
    return pd.DataFrame(out)


def test_best_is_marked_only_when_the_rank_interval_is_one_one():
    sep = _rows({"a": 1.0, "b": 2.0, "c": 3.0}, [(1, 1, 1), (2, 2, 3), (3, 2, 3)])
    assert separated_best(sep, ["a", "b", "c"], "pixel_mse", "teacher_forced", "all") == "a"
    t = metric_table(sep, ["a", "b", "c"], COLS)
    assert t.classes[0][1].split() == ["num", "best"] and "best" not in t.classes[1][1]
    assert "**1 [0.9, 1.1]**" in to_markdown(_doc(t))
    overlap = _rows({"a": 1.0, "b": 1.05, "c": 3.0}, [(1, 1, 2), (2, 1, 2), (3, 3, 3)])
    assert separated_best(overlap, ["a", "b", "c"], "pixel_mse", "teacher_forced", "all") is None
    assert not any("best" in c for row in metric_table(overlap, ["a", "b", "c"], COLS).classes for c in row)


def test_glance_says_how_sure():
    sep = _rows({"a": 1.0, "b": 2.0, "c": 3.0}, [(1, 1, 1), (2, 2, 3), (3, 2, 3)])
    row = glance(sep, ["a", "b", "c"], COLS, "w").rows[0]
    assert row[2] == "`a`" and row[3] == "1 [0.9, 1.1]" and row[4].startswith("**separated**")
    overlap = _rows({"a": 1.0, "b": 1.05, "c": 3.0}, [(1, 1, 2), (2, 1, 2), (3, 3, 3)])
    row = glance(overlap, ["a", "b", "c"], COLS, "w").rows[0]
    assert row[4].startswith("not separated") and "`b`" in row[4]
    # Direction: higher is better for SSIM, so the largest value is best.
    ssim = _rows({"a": 0.5, "b": 0.9, "c": 0.7}, [(3, 3, 3), (1, 1, 1), (2, 2, 2)], metric="ssim")
    assert glance(ssim, ["a", "b", "c"], [("SSIM", "ssim", "teacher_forced", "all")], "w").rows[0][2] == "`b`"
    # A best model whose bias-corrected FD failed its two-scale check: its value without an interval, no rank claim.
    fd = _rows({"a": 1.0, "b": 2.0, "c": 3.0}, [(1, np.nan, np.nan), (2, 2, 3), (3, 2, 3)],
               metric="fd_bias_corrected", regime="open_loop", condition="frame:pooled")
    fd["bias_check"] = ["failed", "passed", "passed"]
    fd.loc[0, ["low", "high"]] = np.nan
    row = glance(fd, ["a", "b", "c"], [("FD", "fd_bias_corrected", "open_loop", "frame:pooled")], "w").rows[0]
    assert row[2] == "`a`" and "no interval" in row[3] and row[4].startswith("no rank interval"), row


def test_ranking_leaves_a_failed_bias_check_out_of_its_column():
    """The others' rank intervals are taken among themselves, so their ranks by point must be too: counting the
    failed model (best by point) would show c as "3 [2–2]", outside its own interval."""
    cols = [("FD", "fd_bias_corrected", "open_loop", "frame:pooled"), ("MSE", "pixel_mse", "teacher_forced", "all")]
    fd = _rows({"a": 1.0, "b": 2.0, "c": 3.0}, [(np.nan, np.nan, np.nan), (1, 1, 1), (2, 2, 2)],
               metric="fd_bias_corrected", regime="open_loop", condition="frame:pooled")
    fd["bias_check"] = ["failed", "passed", "passed"]
    mse = _rows({"a": 1.0, "b": 2.0, "c": 3.0}, [(1, 1, 1), (2, 2, 2), (3, 3, 3)])
    t = ranking(pd.concat([fd, mse], ignore_index=True), ["a", "b", "c"], cols)
    assert [row[1:] for row in t.rows] == [["not ranked: its bias correction fails its check ‡", "1 [1–1]"],
                                           ["1 [1–1]", "2 [2–2]"], ["2 [2–2]", "3 [3–3]"]], t.rows
    assert "rk1" in t.classes[1][1] and "rklast" in t.classes[2][1] and "changed" in t.classes[1][2]


def _doc(t: Table) -> Doc:
    d = Doc()
    d.h(2, "A <world>")
    d.p("text with `code` and **bold** & <script>alert(1)</script>")
    d.table(t)
    d.figure("<figure>svg</figure>")
    d.md("md only")
    return d


def test_markdown_and_html_render_the_same_document_and_escape_names():
    t = Table(["model", "x ↓"], [["`<b>`", "1 [0.5, 2]"]], [["", "num"]])
    md, html = to_markdown(_doc(t)), to_html(_doc(t), "t")
    assert "## A <world>" in md and "| `<b>` | 1 [0.5, 2] |" in md and "md only" in md and "<figure>" not in md
    assert "<script>" not in html and "&lt;script&gt;" in html and "<code>&lt;b&gt;</code>" in html
    assert '<span class="iv">[0.5, 2]</span>' in html and "<strong>bold</strong>" in html
    assert "<figure>svg</figure>" in html and "md only" not in html


def test_page_is_self_contained():
    fig, ax = new_figure()
    ax.plot([1, 2], [3, 4])
    html = page("t", figure_svg(fig, "cap"))
    assert "default-src 'none'" in html
    # No attribute may point outside the document (namespace declarations are not fetched).
    refs = re.findall(r'(?:src|href|xlink:href)="([^"#][^"]*)"', html)
    assert refs == [], refs
    assert "<?xml" not in html and "<!DOCTYPE svg" not in html and "<svg" in html


def test_figures_draw_curves_with_bands_and_skip_missing_data():
    cv = pd.concat([_rows({"a": 1.0 + t, "b": 2.0 + t, "c": 3.0}, [(1, 1, 1)] * 3).assign(t=t) for t in (1, 2, 3)])
    svg = figures.curves(cv, "pixel_mse", "all", ["a", "b", "c"], "title", "caption")
    assert svg.count("<svg") == 1 and "caption" in svg
    assert figures.curves(cv, "ssim", "all", ["a"], "t", "c") == ""          # no rows: no figure
    assert figures.reliability(cv, ["a"], "e") == ""


def test_plot_data_and_interval_table_columns():
    cv = pd.concat([_rows({"a": 1.0, "b": 2.0, "c": 3.0}, [(1, 1, 1)] * 3).assign(t=t) for t in (1, 2)])
    kv = _rows({"a": 1.0, "b": 2.0, "c": 3.0}, [(1, 1, 1)] * 3).assign(k=1)
    iv = _rows({"a": 1.0, "b": 2.0, "c": 3.0}, [(1, 1, 1), (2, 2, 2), (3, 3, 3)])
    files = plot_data(cv, kv, iv)
    curve = files["curves/w-pixel-mse-teacher-forced-all.csv"]
    assert list(curve.columns) == ["model", "t", "point", "low", "high"] and len(curve) == 6
    assert (curve.low <= curve.point).all() and (curve.point <= curve.high).all()
    assert list(files["kcurves/w-all.csv"].columns) == ["model", "k", "point", "low", "high"]
    out = interval_table(iv, {"bootstrap": {"strata": "crossed with episodes"}})
    for col in ("method", "n_resamples", "confidence_level", "resampling_unit", "strata", "low", "high"):
        assert col in out, col
    assert len(out) == len(iv)


def _require_browser():
    why = browser.available()
    if why and os.environ.get("CI"):
        pytest.fail(f"CI must run the browser test: {why}")
    if why:
        pytest.skip(why)


def test_browser_harness_reports_requests_and_console_errors(tmp_path):
    """The harness itself: a page that fetches from the network and logs an error is caught."""
    _require_browser()
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><table><tbody><tr><td>1</td></tr></tbody></table>'
                   '<img src="http://example.invalid/x.png"><script>console.error("boom")</script></body></html>')
    out = browser.inspect(bad, tmp_path / "shots")
    assert any("example.invalid" in u for u in out["non_local_requests"]), out["requests"]
    assert any("boom" in e["message"] for e in out["console_errors"]), out["console_errors"]
    assert out["broken_imgs"] == 1 and out["tables"] == 1 and out["empty_tables"] == 0
    assert (tmp_path / "shots" / "scorecard_first_screen.png").stat().st_size > 1000


def test_scorecard_cites_the_coverage_benchmark(root):
    """The intro sentence is built from benchmarks/results/coverage.json's numbers."""
    import json

    from wmeval.report.scorecard import _chance_cells, beyond_chance, coverage_glance, coverage_note

    cov = json.loads((root / "benchmarks" / "results" / "coverage.json").read_text())
    text = coverage_note(cov)
    assert f"{cov['cluster']['coverage']:.1%}" in text and f"{cov['iid_frames']['coverage']:.1%}" in text
    assert f"{cov['frechet']['basic_coverage']:.1%}" in text
    for cell in cov["sets"]["cells"]:
        assert f"{cell['design']} {cell['truth']}: {cell['coverage']:.1%}" in text
    # The first screen: the default design's cells as a table (one row per truth and sides, a column per metric),
    # each with its power or false-positive rate, then the cells of every part outside 93-97% beyond chance.
    lead, table, tail = coverage_glance(cov)
    assert "benchmarks/coverage.py" in lead and f"{cov['cluster']['coverage']:.1%}" in lead
    assert table.header == ["truth", "sides", "KID", "bias-corrected FD"] and len(table.rows) == 6
    rows = {(r[0].split(" ")[0 if r[0].startswith("0") else 1], r[1]): r for r in table.rows}
    shift = cov["sets"]["shift"]
    truth_key = {"zero": "0", "shift": f"{shift:g}", "large shift": f"{3 * shift:g}"}
    for cell in cov["sets"]["cells"]:
        row = rows[(truth_key[cell["truth"]], cell["design"])]
        shown = row[table.header.index("KID" if cell["metric"] == "kid" else "bias-corrected FD")]
        rate = (f"(power {cell['power']:.0%})" if "power" in cell
                else f"(false positives {cell['false_positive_rate']:.1%})")
        assert shown == f"{cell['coverage']:.1%} {rate}", (cell, shown)
    narrow_, wide_ = beyond_chance(cov)
    parts = [k for k in ("sets", "sets_more_episodes", "sets_mid", "sets_wide", "sets_high_axis",
                         "sets_more_episodes_high_axis", "sets_mid_high_axis") if cov.get(k)]
    assert tail.startswith(f"Of {len(_chance_cells(cov))} cells tested "
                           f"({sum(len(cov[k]['cells']) for k in parts)} in {len(parts)} parts: 32 and 64 episodes")
    assert all(n in tail for n in narrow_) and f"too wide (conservative): {len(wide_)} cell" in tail
    assert coverage_glance(None) == ("", None, "")
    # The other parts in brief: each metric's range of coverage.
    more = cov["sets_more_episodes"]
    fd = [c["coverage"] for c in more["cells"] if c["metric"] == "fd_bias_corrected"]
    assert f"{more['episodes']} episodes, KID " in text and f"bias-corrected FD {min(fd):.1%}-{max(fd):.1%}" in text
    assert coverage_note(None) == ""
    # Cells whose intervals the bias check withheld say so, in part or in all.
    wide = {"dim": 64, "episodes": 32, "datasets": 150, "cells": [
        {"metric": "fd_bias_corrected", "truth": "zero", "design": "unpaired", "coverage": float("nan"),
         "false_positive_rate": float("nan"), "withheld": 1.0},
        {"metric": "fd_bias_corrected", "truth": "shift", "design": "unpaired", "coverage": 1.0, "power": 0.0,
         "withheld": 0.96},
        {"metric": "kid", "truth": "zero", "design": "unpaired", "coverage": 0.953, "false_positive_rate": 0.013,
         "withheld": 0.0}]}
    text = coverage_note({**cov, "sets_wide": wide})
    assert ("At d = 64, KID 95.3%, bias-corrected FD withheld by its bias check in 96.0%-100.0% of data sets "
            "(unpaired zero, unpaired shift)") in text
    text = coverage_note({**cov, "sets": {**cov["sets"], "cells": [*cov["sets"]["cells"], *wide["cells"][:2]]}})
    assert "unpaired zero: no interval (the bias check withheld all)" in text
    assert "unpaired shift: 96.0% withheld by the bias check, the 16 given covered 100.0% (power 0%)" in text
    # The shift along the highest-variance axis: each metric's range, and every cell below 93% named.
    high = {"episodes": 32, "datasets": 400, "shift_axis_variance": 2.0, "cells": [
        {"metric": "kid", "truth": "shift", "design": "paired", "coverage": 0.88, "power": 1.0, "withheld": 0.0,
         "width_ratio": 0.802},
        {"metric": "kid", "truth": "zero", "design": "paired", "coverage": 0.9675, "false_positive_rate": 0.03,
         "withheld": 0.0, "width_ratio": 1.4},
        {"metric": "fd_bias_corrected", "truth": "shift", "design": "paired", "coverage": 0.95, "power": 1.0,
         "withheld": 0.0, "width_ratio": 1.0}]}
    plain = {k: v for k, v in cov.items() if not k.endswith("high_axis")}
    assert "highest-variance" not in coverage_note(plain)
    text = coverage_note({**plain, "sets_high_axis": high})
    assert "highest-variance axis instead" in text and "at 32 episodes, KID 88.0%-96.8%, bias-corrected FD 95.0%" in text
    assert "Below 93%: KID paired shift 88.0% (32 episodes)." in text and text.count("Below 93%") == 1
    # ... with its rerun on fresh data sets beside it, where it has one for these screen figures
    conf = {"datasets": 1000, "cells": [{
        "part": "sets_high_axis", "metric": "kid", "truth": "shift", "design": "paired", "coverage": 0.934,
        "datasets": 1000, "withheld": 0.0, "screen": {"coverage": 0.88, "width_ratio": 0.802, "datasets": 400}}]}
    text = coverage_note({**plain, "sets_high_axis": high, "confirmation": conf})
    assert "Below 93%: KID paired shift 88.0% (93.4% on 1000 fresh data sets) (32 episodes)." in text
    stale = {**conf, "cells": [{**conf["cells"][0], "screen": {**conf["cells"][0]["screen"], "coverage": 0.87}}]}
    assert "Below 93%: KID paired shift 88.0% (32 episodes)." in coverage_note({**plain, "sets_high_axis": high,
                                                                               "confirmation": stale})
    # The d = 16 part is named by its dimension.
    mid = {**high, "dim": 16, "cells": high["cells"][:1]}
    text = coverage_note({**plain, "sets_high_axis": high, "sets_mid_high_axis": mid})
    assert "; at 32 episodes, d = 16, KID 88.0%" in text
    assert "KID paired shift 88.0% (32 episodes); KID paired shift 88.0% (32 episodes, d = 16)." in text


def test_cells_outside_93_97_beyond_chance_are_named():
    """beyond_chance flags a cell only when its coverage lies more than 1.96 binomial standard errors past the
    nearer end of 93-97%, the error at that end with the intervals given; the high-axis parts' truth-0 cells (the
    lowest-axis parts' data sets again) and mostly withheld cells are left out; the scorecard's note names them."""
    from wmeval.report.scorecard import beyond_chance, coverage_glance, coverage_note

    def cell(metric, truth, design, p, held=0.0):
        return {"metric": metric, "truth": truth, "design": design, "coverage": p, "withheld": held,
                ("false_positive_rate" if truth == "zero" else "power"): 0.5}

    sets = {"dim": 4, "episodes": 32, "frames_per_episode": 10, "rho": 0.5, "datasets": 400, "cells": [
        cell("kid", "shift", "paired", 0.92),               # 0.8 SE below 93%: chance
        cell("kid", "large shift", "paired", 0.89),         # 3.1 SE below
        cell("fd_bias_corrected", "shift", "unpaired", 0.99),  # 2.3 SE above 97%
        cell("fd_bias_corrected", "zero", "paired", 0.902, held=0.3),  # 2.2 SE at 400, 1.8 at the 280 given
        cell("fd_bias_corrected", "zero", "unpaired", 0.5, held=0.9)]}
    # 1.1 and 1.4 SE above 97% (the latter 2.5 with the error taken at its own 99%, which would flag it)
    wide = {"dim": 64, "episodes": 32, "datasets": 150, "cells": [cell("kid", "shift", "paired", 0.985),
                                                                   cell("kid", "large shift", "paired", 0.99)]}
    high = {"episodes": 64, "datasets": 400, "cells": [cell("kid", "zero", "paired", 0.80),
                                                        cell("kid", "shift", "unpaired", 0.90)]}
    cov = {"sets": sets, "sets_wide": wide, "sets_more_episodes_high_axis": high}
    narrow_, wide_ = beyond_chance(cov)
    assert narrow_ == ["KID paired large shift 89.0% (32 episodes, d = 4)",
                       "KID unpaired shift 90.0% (64 episodes, d = 4, highest axis)"]
    assert wide_ == ["bias-corrected FD unpaired shift 99.0% (32 episodes, d = 4)"]
    full = {"cluster": {"coverage": 0.95, "coverage_se": 0.01}, "iid_frames": {"coverage": 0.4}, "datasets": 500,
            "episodes": 64, "frames_per_episode": 16, "rho": 0.8, "confidence_level": 0.95, **cov}
    text = coverage_note(full)
    assert ("Outside 93-97% by more than chance (over 1.96 standard errors past the nearer end): too narrow: KID "
            "paired large shift 89.0% (32 episodes, d = 4), KID unpaired shift 90.0% (64 episodes, d = 4, highest "
            "axis); too wide (conservative): bias-corrected FD unpaired shift 99.0% (32 episodes, d = 4).") in text
    # The first screen names the too-narrow cells and counts the too-wide; 7 cells tested (the mostly withheld
    # one and the high-axis truth-0 one left out).
    _, _, tail = coverage_glance(full)
    assert tail.startswith("Of 7 cells tested (9 in 3 parts: 32 and 64 episodes, d = 4, 64, the shift along the "
                           "lowest- and the highest-variance axis;") and tail.endswith(
        "too narrow: KID paired large shift 89.0% (32 episodes, d = 4), KID unpaired shift 90.0% (64 episodes, d = 4, "
        "highest axis); too wide (conservative): 1 cell.")
    inside = {**full, "sets": {**sets, "cells": sets["cells"][:1]}, "sets_more_episodes_high_axis": None}
    assert "by more than chance" not in coverage_note(inside)
    assert coverage_glance(inside)[2].endswith("none too narrow; none too wide.")


def test_a_flag_counts_only_where_its_rerun_on_fresh_data_sets_confirms_it(root):
    """A cell outside 93-97% beyond chance on its screen, rerun on data sets the screen did not use
    (coverage.json's confirmation, benchmarks/coverage.py --only confirm), counts only where the rerun lies outside
    on the same side by more than chance too; a rerun made for other screen figures (stale), or on fewer data sets
    than the screen's, is not used; the scorecard says which flags the reruns kept."""
    from wmeval.report.scorecard import beyond_chance, coverage_glance, coverage_note, screen_flags, unconfirmed

    def cell(metric, truth, design, p, width=1.0):
        return {"metric": metric, "truth": truth, "design": design, "coverage": p, "withheld": 0.0,
                "width_ratio": width, ("false_positive_rate" if truth == "zero" else "power"): 0.5}

    sets = {"dim": 4, "episodes": 32, "frames_per_episode": 10, "rho": 0.5, "datasets": 400, "cells": [
        cell("kid", "shift", "paired", 0.8925, 0.98),            # too narrow on the screen
        cell("fd_bias_corrected", "shift", "unpaired", 0.99, 1.42),  # too wide
        cell("kid", "large shift", "unpaired", 0.995, 1.5),       # too wide
        cell("kid", "zero", "paired", 0.95)]}

    def rerun(metric, truth, design, p, screen_p, width, datasets=1000, withheld=0.0):
        return {"part": "sets", "metric": metric, "truth": truth, "design": design, "coverage": p,
                "datasets": datasets, "withheld": withheld,
                "screen": {"coverage": screen_p, "width_ratio": width, "datasets": 400}}

    full = {"cluster": {"coverage": 0.95, "coverage_se": 0.01}, "iid_frames": {"coverage": 0.4}, "datasets": 500,
            "episodes": 64, "frames_per_episode": 16, "rho": 0.8, "confidence_level": 0.95, "sets": sets}
    assert beyond_chance(full) == (["KID paired shift 89.2% (32 episodes, d = 4)"],
                                   ["bias-corrected FD unpaired shift 99.0% (32 episodes, d = 4)",
                                    "KID unpaired large shift 99.5% (32 episodes, d = 4)"])
    confirmed = {**full, "confirmation": {"datasets": 1000, "cells": [
        # 92.6% of 1000: 0.5 SE below 93%, within chance: the screen's flag is not kept
        rerun("kid", "shift", "paired", 0.926, 0.8925, 0.98),
        # 98.9% of 1000: 3.6 SE above 97%, kept, with the rerun's figure
        rerun("fd_bias_corrected", "shift", "unpaired", 0.989, 0.99, 1.42),
        # 98.2% of 1000: 2.2 SE above, but 3.7% withheld leaves 963 given: 2.2 SE still; kept
        rerun("kid", "large shift", "unpaired", 0.982, 0.995, 1.5, withheld=0.037)]}}
    assert beyond_chance(confirmed) == ([], [
        "bias-corrected FD unpaired shift 99.0% (32 episodes, d = 4; 98.9% on 1000 fresh data sets)",
        "KID unpaired large shift 99.5% (32 episodes, d = 4; 98.2% on 1000 fresh data sets, 963 intervals given)"])
    assert unconfirmed(confirmed) == ["KID paired shift 89.2% (32 episodes, d = 4; 92.6% on 1000 fresh data sets)"]
    assert [f["confirmed"] for f in screen_flags(confirmed)] == [False, True, True]
    # A rerun outside on the other side does not confirm the flag; the rerun's withheld data sets are not counted
    # as given (98.2% of 500 given is 1.6 SE above 97%: within chance).
    other = {**confirmed, "confirmation": {"cells": [rerun("kid", "shift", "paired", 0.99, 0.8925, 0.98),
                                                     rerun("kid", "large shift", "unpaired", 0.982, 0.995, 1.5,
                                                           withheld=0.5)]}}
    assert [f["confirmed"] for f in screen_flags(other)] == [False, None, False]
    # Stale: made for other screen figures (the part rerun since), or for another data-set count; or smaller than
    # the screen: not used, and the screen's flag stands.
    for bad in (rerun("kid", "shift", "paired", 0.926, 0.90, 0.98),
                rerun("kid", "shift", "paired", 0.926, 0.8925, 0.97),
                {**rerun("kid", "shift", "paired", 0.926, 0.8925, 0.98), "screen": {
                    "coverage": 0.8925, "width_ratio": 0.98, "datasets": 300}},
                rerun("kid", "shift", "paired", 0.926, 0.8925, 0.98, datasets=200),
                {**rerun("kid", "shift", "paired", 0.926, 0.8925, 0.98), "part": "sets_more_episodes"}):
        stale = {**full, "confirmation": {"cells": [bad]}}
        assert beyond_chance(stale)[0] == ["KID paired shift 89.2% (32 episodes, d = 4)"], bad
        assert unconfirmed(stale) == [] and screen_flags(stale)[0]["confirmation"] is None
    # The first screen counts what the reruns kept and names the flags they did not; the note names those too.
    _, _, tail = coverage_glance(confirmed)
    assert "none too narrow; too wide (conservative): 2 cells." in tail
    assert ("past the nearer end, on its screen and, where rerun, again on data sets the screen did not use): "
            "none too narrow;") in tail
    assert tail.endswith("Of the 3 cells outside on their screen, 3 were rerun (`python benchmarks/coverage.py --only "
                         "confirm`): 2 outside on the same side again; within chance on the rerun: KID paired shift "
                         "89.2% (32 episodes, d = 4; 92.6% on 1000 fresh data sets).")
    assert "Of the 3 cells outside on their screen, 2 were rerun" in coverage_glance(other)[2]
    assert "rerun" not in coverage_glance(full)[2]
    # A rerun as large as the screen is used.
    same = {**full, "confirmation": {"cells": [rerun("kid", "shift", "paired", 0.926, 0.8925, 0.98, datasets=400)]}}
    assert screen_flags(same)[0]["confirmed"] is False and unconfirmed(same)
    # A rerun with withheld data sets says how many intervals it gave.
    assert "98.2% on 1000 fresh data sets, 963 intervals given)" in beyond_chance(confirmed)[1][1]
    # A screen rerun with the same code repeats its width ratio only to about 1e-14: the rerun still matches.
    near = {**full, "sets": {**sets, "cells": [{**sets["cells"][0], "width_ratio": 0.98 * (1 + 1e-13)},
                                               *sets["cells"][1:]]}, "confirmation": confirmed["confirmation"]}
    assert screen_flags(near)[0]["confirmed"] is False
    # The oracle's count takes only the kept flags: a too-wide cell whose rerun is within chance is not counted.
    from wmeval.core.digest import file_sha256
    from wmeval.report.scorecard import oracle_wide

    script = "benchmarks/direction_oracle.py"
    oracle = {"rho": 0.5, "frames_per_episode": 10, "run": {"code": {script: file_sha256(root / script)}}, "cells": [
        {"dim": 4, "episodes": 32, "design": "unpaired", "truth": t, "axis": "lowest", "true_value": v, "datasets": 500,
         "estimated_raised": {"coverage": 0.996}} for t, v in (("shift", 0.25), ("large shift", 2.25))]}
    sets_sized = {**sets, "shift": 0.5}
    assert oracle_wide({**full, "sets": sets_sized}, oracle, root) == [
        "bias-corrected FD unpaired shift 99.0% (32 episodes, d = 4)",
        "KID unpaired large shift 99.5% (32 episodes, d = 4)"]
    within = {**confirmed, "sets": sets_sized, "confirmation": {"cells": [
        rerun("fd_bias_corrected", "shift", "unpaired", 0.975, 0.99, 1.42),
        rerun("kid", "large shift", "unpaired", 0.982, 0.995, 1.5, withheld=0.037)]}}
    assert oracle_wide(within, oracle, root) == [
        "KID unpaired large shift 99.5% (32 episodes, d = 4; 98.2% on 1000 fresh data sets, 963 intervals given)"]
    assert ("Outside on their screen, within chance on data sets the screen did not use: KID paired shift 89.2% "
            "(32 episodes, d = 4; 92.6% on 1000 fresh data sets).") in coverage_note(confirmed)


def test_a_point_outside_its_interval_is_flagged():
    from wmeval.report.scorecard import cell

    row = _rows({"a": 1.0}, [(1, 1, 1)]).iloc[0]
    assert cell(row) == "1 [0.9, 1.1]"
    above = row.copy()
    above["low"], above["high"] = 1.5, 2.0          # plug-in FD replicates above the point
    assert cell(above) == "1 [1.5, 2] †"


def test_an_interval_the_permutation_test_opened_at_0_is_written_open():
    """A lower end raised to the smallest positive double (the test of FD = 0 took 0 out) reads (0, high], not
    [4.94e-324, high]; a true lower end, however small, keeps its bracket."""
    from wmeval.estimators.resample import with_zero_test
    from wmeval.report.scorecard import cell

    row = _rows({"a": 1.0}, [(1, 1, 1)]).iloc[0]
    row["point"], (row["low"], row["high"]) = 2e-4, with_zero_test(-1e-4, 3e-3, 0.01, 0.95)
    row["p_value"], row["confidence_level"] = 0.01, 0.95
    assert cell(row) == "2.00e-04 (0, 0.003]"
    row["point"] = -1e-4                            # the corrected estimate below 0, the test excluding 0
    assert cell(row) == "-1.00e-04 (0, 0.003] §"
    row["point"], row["low"] = 2e-4, 1e-12
    assert cell(row) == "2.00e-04 [1.00e-12, 0.003]"
    # An interval lying at or below 0 is kept when the test rejects 0, and marked; not when it accepts 0.
    row["point"], row["confidence_level"] = -2e-4, 0.95
    row["low"], row["high"] = with_zero_test(-5e-4, -1e-5, 0.01, 0.95)
    assert (row["low"], row["high"]) == (-5e-4, -1e-5) and cell(row) == "-2.00e-04 [-5.00e-04, -1.00e-05] §"
    row["point"] = 1e-5                             # a point above such an interval: outside it (†), not §
    assert cell(row) == "1.00e-05 [-5.00e-04, -1.00e-05] †"
    row["point"], row["p_value"] = -2e-4, 0.3
    row["low"], row["high"] = with_zero_test(-5e-4, -1e-5, 0.3, 0.95)
    assert cell(row) == "-2.00e-04 [-5.00e-04, 0]"


def test_ranking_marks_first_last_and_changes():
    from wmeval.report.scorecard import ranking

    cols = [("pixel", "pixel_mse", "teacher_forced", "all"), ("ssim", "ssim", "teacher_forced", "all")]
    iv = pd.concat([_rows({"a": 1.0, "b": 2.0, "c": 3.0}, [(1, 1, 1), (2, 2, 2), (3, 3, 3)]),
                    _rows({"a": 0.5, "b": 0.9}, [(2, 2, 2), (1, 1, 1)], metric="ssim")])   # c has no SSIM
    t = ranking(iv, ["a", "b", "c"], cols)
    assert t.rows[0] == ["`a` (rank changes)", "1 [1–1]", "2 [2–2]"]
    assert t.classes[0][1] == "num rk1" and t.classes[0][2] == "num rklast changed"     # last of 2 ranked
    assert t.classes[2][1] == "num rklast" and t.rows[2][2] == "–"


def test_the_ranking_leaves_out_a_model_without_an_interval_and_ties_what_float64_does_not_resolve():
    """As the bootstrap stage ranks (wmeval.bootstrap.intervals.summarize): a model with one episode (no interval)
    is not ranked, and points an ulp apart tie; otherwise a rank falls outside its own interval (`b` 2 [1-1])."""
    from wmeval.report.scorecard import ranking

    cols = [("pixel", "pixel_mse", "teacher_forced", "all")]
    iv = _rows({"a": 0.5, "b": 1.0, "c": 2.0}, [(np.nan, np.nan, np.nan), (1, 1, 1), (2, 2, 2)])
    iv.loc[iv.source == "a", "n_clusters"] = 1
    t = ranking(iv, ["a", "b", "c"], cols)
    assert [r[1] for r in t.rows] == ["–", "1 [1–1]", "2 [2–2]"]
    iv = _rows({"a": 1.0, "b": np.nextafter(1.0, 2.0), "c": 2.0}, [(1, 1, 1), (1, 1, 1), (3, 3, 3)])
    assert [r[1] for r in ranking(iv, ["a", "b", "c"], cols).rows] == ["1 [1–1]", "1 [1–1]", "3 [3–3]"]


def test_deferred_figures_are_drawn_side_by_side_into_the_same_bytes(monkeypatch):
    """The scorecard's figures are built and drawn at the end in forked processes: each placeholder becomes
    exactly the SVG the figure gives when drawn in place, in its own position, whether the figure was built before
    (figure_svg) or is built there too (deferred_figure; a build may return "" for no figure)."""
    from wmeval.core import parallel
    from wmeval.rendering.htmlpage import deferred_figure, deferred_figures, figure_svg, new_figure

    monkeypatch.setenv("WMEVAL_JOBS", "2")                  # forked here, whatever the suite runs its stages with
    pools = []

    class Counted(parallel.ProcessPoolExecutor):
        def __init__(self, *args, **kwargs):
            pools.append(kwargs.get("max_workers"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", Counted)

    def make(i):
        fig, ax = new_figure()
        ax.plot([0, 1, 2], [i, 2 * i, i * i], label=f"model {i}")
        ax.legend()
        return fig, f"caption {i}"

    def built(i):
        return "" if i == 1 else figure_svg(*make(i))

    direct = [figure_svg(*make(i)) for i in range(3)]
    with deferred_figures() as resolve:
        marks = [figure_svg(*make(i)) for i in range(3)] + [deferred_figure(built, i) for i in range(3)]
        assert all(m.startswith("<!--wmeval-figure-") for m in marks)
        page = resolve("<p>a</p>" + "<p>b</p>".join(marks))
    assert page == "<p>a</p>" + "<p>b</p>".join(direct + [direct[0], "", direct[2]])
    assert [deferred_figure(built, i) for i in range(3)] == [direct[0], "", direct[2]]      # outside: at once
    assert pools == ([2] if parallel.usable_cores() >= 2 else [])   # two forked workers drew them (one core: serial)


def test_figures_show_savefigs_tight_box_from_one_draw():
    """The SVG's size is savefig(bbox_inches="tight")'s (long tick labels and a legend outside the axes kept in
    view), its viewBox that box on the figure's own canvas, and the figure is drawn once, not twice."""
    import io

    import matplotlib.pyplot as plt

    from wmeval.rendering.htmlpage import figure_svg, new_figure

    def figure():
        fig, ax = new_figure(3.0, 2.0)
        ax.barh(["a model with a very long name indeed", "b"], [1.0, 2.0], label="FD")
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
        ax.set_title("a title above the axes")
        return fig

    fig = figure()
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "wmeval"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    header = r'width="([\d.]+)pt" height="([\d.]+)pt" viewBox="([-\d. ]+)"'
    want = [float(v) for v in re.search(header, buf.getvalue()).groups()[:2]]
    fig, draws = figure(), []
    fig.canvas.mpl_connect("draw_event", lambda e: draws.append(1))
    svg = figure_svg(fig)
    w, h, view = re.search(header, svg).groups()
    assert abs(float(w) - want[0]) < 1e-3 and abs(float(h) - want[1]) < 1e-3, (w, h, want)
    x0, y0, vw, vh = map(float, view.split())
    assert x0 < 0 and (vw, vh) == (float(w), float(h))        # the long label reaches left of the canvas: shown
    assert x0 + vw > 3.0 * 72                                    # the legend right of it: shown
    assert draws == [1]
    assert "a model with a very long name indeed" in svg


def test_fork_map_keeps_item_order_and_equals_the_serial_map():
    import numpy as np

    from wmeval.core.parallel import fork_map

    x = np.random.default_rng(0).normal(size=(50, 40, 40))
    items = list(range(len(x)))

    def fn(i):
        return float(np.linalg.eigvalsh(x[i] @ x[i].T).sum())

    done = []
    assert fork_map(fn, items, n_jobs=2, progress=done.append) == fork_map(fn, items, n_jobs=1) == \
        [fn(i) for i in items]
    assert sum(done) == len(items)


def test_wmeval_jobs_caps_the_workers_and_a_bad_value_is_named(monkeypatch):
    import os

    from wmeval.core.errors import WmevalError
    from wmeval.core.parallel import usable_cores

    monkeypatch.delenv("WMEVAL_JOBS", raising=False)
    cores = usable_cores()
    assert cores == len(os.sched_getaffinity(0))
    monkeypatch.setenv("WMEVAL_JOBS", "1")
    assert usable_cores() == 1
    monkeypatch.setenv("WMEVAL_JOBS", str(cores + 5))
    assert usable_cores() == cores
    for bad in ("two", "0", "-1"):
        monkeypatch.setenv("WMEVAL_JOBS", bad)
        with pytest.raises(WmevalError, match=f"WMEVAL_JOBS = '{bad}'"):
            usable_cores()


def test_fork_map_workers_die_with_a_killed_parent(tmp_path):
    """A stage killed mid-run (SIGKILL, OOM) must not leave its forked workers behind, each blocked on a queue
    nobody writes to: they used to outlive the reliability tests' killed bootstrap."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pids = tmp_path / "pids"
    script = f"""
import os, time
from wmeval.core.parallel import fork_map
def fn(i):
    with open({str(pids)!r}, "a") as f:
        f.write(str(os.getpid()) + "\\n")
    time.sleep(60)
fork_map(fn, list(range(4)), n_jobs=2)
"""
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 30
    while not (pids.exists() and len(set(pids.read_text().split())) >= 2):
        assert time.time() < deadline and parent.poll() is None, "the workers did not start"
        time.sleep(0.1)
    workers = [int(x) for x in set(pids.read_text().split())]
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"                # a zombie is gone, waiting to be reaped

    deadline = time.time() + 10
    while any(alive(w) for w in workers):
        assert time.time() < deadline, f"workers {workers} outlived their killed parent"
        time.sleep(0.1)


def test_deferred_figures_nest_and_restore_the_outer_context():
    """An inner deferred_figures (a report inside a report) renders its own figures; the outer one still holds and
    renders its own, before and after the inner block."""
    from wmeval.rendering.htmlpage import deferred_figures, figure_svg, new_figure

    def fig(i):
        f, ax = new_figure()
        ax.plot([0, 1], [0, i])
        return f

    direct = [figure_svg(fig(i)) for i in range(3)]
    with deferred_figures() as outer:
        first = figure_svg(fig(0))
        with deferred_figures() as inner:
            assert inner(figure_svg(fig(1))) == direct[1]
        last = figure_svg(fig(2))
        assert outer(first + last) == direct[0] + direct[2]


def test_the_interval_card_names_each_models_method_where_kid_switches_to_the_bootstrap_t():
    """KID's rows carry the boundary interval near 0 and the bootstrap-t far from it: a card whose rows mix the two
    names both, which models carry which, and explains each; a card of one method names that one alone."""
    from wmeval.report.cards import BOUNDARY_NOTE, STUDENTIZED_NOTE, CardContext, _interval

    rows = pd.DataFrame({"source": ["far", "near", "near2"], "method": ["bootstrap-t", "boundary", "boundary"],
                         "n_resamples": [500] * 3, "confidence_level": [0.95] * 3,
                         "resampling_unit": ["observation episode"] * 3, "n_clusters": [32, 32, 32]})
    ctx = CardContext("w", {}, {"bootstrap": {"seed": 0}}, "kid", "open_loop", rows)
    text = _interval(ctx)["interval"]
    assert text.startswith("bootstrap-t or boundary bootstrap (bootstrap-t: far; boundary: near, near2), B = 500")
    assert BOUNDARY_NOTE in text and STUDENTIZED_NOTE in text
    assert text.count("ranks come from the replicates") == 1
    one = _interval(CardContext("w", {}, {"bootstrap": {"seed": 0}}, "kid", "open_loop", rows.iloc[1:]))["interval"]
    assert one.startswith("boundary bootstrap, B = 500") and STUDENTIZED_NOTE not in one
    far = _interval(CardContext("w", {}, {"bootstrap": {"seed": 0}}, "kid", "open_loop", rows.iloc[:1]))["interval"]
    assert far.startswith("bootstrap-t bootstrap, B = 500") and BOUNDARY_NOTE not in far
    assert far.endswith("ranks come from the replicates themselves")


def test_too_wide_cells_the_rule_itself_gives_with_the_noise_known_are_named(root, tmp_path):
    """oracle_wide names a too-wide cell (beyond chance) only where benchmarks/direction_oracle.py's cell of the same
    design (dimension, episodes, sides, truth, axis, shift size, rho, rows per episode) has the boundary test's rule
    (estimated_raised) above 97% beyond chance too; the first screen counts them, the validation section names them,
    and oracle_note gives the oracle's figures and which direction-free rules stay within 93-97%, with its run. An
    oracle computed with code that has changed since, or without a record of its code, is not used, and the note
    says why instead."""
    from wmeval.core.digest import file_sha256
    from wmeval.report.scorecard import coverage_glance, coverage_note, oracle_note, oracle_wide

    def cell(metric, truth, design, p):
        return {"metric": metric, "truth": truth, "design": design, "coverage": p, "withheld": 0.0,
                ("false_positive_rate" if truth == "zero" else "power"): 0.3}

    sets = {"dim": 4, "episodes": 32, "frames_per_episode": 10, "rho": 0.5, "datasets": 400, "shift": 0.5,
            "cells": [cell("kid", "shift", "unpaired", 0.995), cell("fd_bias_corrected", "shift", "unpaired", 0.99),
                      cell("kid", "shift", "paired", 0.995), cell("fd_bias_corrected", "shift", "paired", 0.98),
                      cell("kid", "large shift", "unpaired", 0.995)]}
    high = {"episodes": 32, "datasets": 400, "cells": [cell("kid", "shift", "unpaired", 0.995)]}
    cov = {"cluster": {"coverage": 0.95, "coverage_se": 0.01}, "iid_frames": {"coverage": 0.4}, "datasets": 500,
           "episodes": 64, "frames_per_episode": 16, "rho": 0.8, "confidence_level": 0.95, "sets": sets,
           "sets_high_axis": high}

    def ocell(design, axis, raised, truth="shift", episodes=32, size=0.5, restricted=0.978):
        rules = {r: {"coverage": v, "power": 0.3} for r, v in
                 (("known", 0.952), ("estimated", 0.986), ("estimated_raised", raised), ("restricted", restricted),
                  ("worst", 1.0))}
        return {"dim": 4, "episodes": episodes, "design": design, "truth": truth, "axis": axis, "datasets": 500,
                "true_value": size * size, **rules}

    script = "benchmarks/direction_oracle.py"
    run = {"date": "2026-12-07T22:00:00Z", "command": "python benchmarks/direction_oracle.py",
           "code": {script: file_sha256(root / script)}, "packages": {"numpy": "2.4.6"}}
    oracle = {"datasets": 500, "rho": 0.5, "frames_per_episode": 10, "run": run, "cells": [
        ocell("unpaired", "lowest", 0.996), ocell("unpaired", "highest", 0.975), ocell("paired", "lowest", 0.996),
        ocell("unpaired", "lowest", 0.996, truth="large shift", episodes=64, size=1.5)]}
    # Named: the unpaired low-axis cells (both metrics) and the paired KID cell, whose oracle is above 97% too. Not:
    # the paired FD cell (98.0% of 400 is within chance of 97%), the high-axis cell (its oracle's 97.5% of 500 is
    # within chance), the large shift (the oracle's only large-shift cell has 64 episodes).
    assert oracle_wide(cov, oracle, root) == ["KID unpaired shift 99.5% (32 episodes, d = 4)",
                                        "bias-corrected FD unpaired shift 99.0% (32 episodes, d = 4)",
                                        "KID paired shift 99.5% (32 episodes, d = 4)"]
    oracle["cells"][2] = ocell("paired", "lowest", 0.96)
    assert len(oracle_wide(cov, oracle, root)) == 2 and oracle_wide(cov, None, root) == []
    # Another design is not matched: rho, rows per episode, or the shift's size.
    assert oracle_wide(cov, {**oracle, "rho": 0.8}, root) == []
    assert oracle_wide(cov, {**oracle, "frames_per_episode": 16}, root) == []
    assert oracle_wide(cov, {**oracle, "cells": [ocell("unpaired", "lowest", 0.996, size=0.6)]}, root) == []
    # A cell without the rule's figure, or without its design, is skipped, not a crash.
    broken = {k: v for k, v in ocell("unpaired", "lowest", 0.996).items() if k != "estimated_raised"}
    assert oracle_wide(cov, {**oracle, "cells": [broken, {"dim": 4}]}, root) == []
    tail = coverage_glance({**cov, "direction_oracle": oracle}, root)[2]
    assert "too wide (conservative): 5 cells. In 2 of the too-wide, the boundary test's rule covers above 97%" in tail
    assert "boundary test's rule covers" not in coverage_glance(cov, root)[2]
    text = coverage_note({**cov, "direction_oracle": oracle}, root)
    assert ("Of those too wide, KID unpaired shift 99.5% (32 episodes, d = 4), bias-corrected FD unpaired shift "
            "99.0% (32 episodes, d = 4): there the boundary test's rule") in text
    note = oracle_note(oracle, root)
    assert ("at 32 episodes, d = 4: the true direction 95.2% and 95.2%, the estimated difference's 98.6% and 98.6%, "
            "that with the upper-end rule (the boundary test's) 99.6% and 97.5%") in note
    assert note.endswith("Within 93-97% on both axes in every design: none of the rules that do not know the "
                         "direction. Computed on 2026-12-07 (`python benchmarks/direction_oracle.py`, numpy 2.4.6), "
                         "with the code it is read with.")
    inside = {**oracle, "cells": [ocell("unpaired", a, 0.99, restricted=0.955) for a in ("lowest", "highest")]}
    assert "Within 93-97% on both axes in every design: the restricted estimate's." in oracle_note(inside, root)
    assert oracle_note(None) == "" and oracle_note({"datasets": 1, "run": run,
                                                    "cells": [ocell("paired", "lowest", 0.9)]}, root) == ""
    # Its script edited since the run: not used, and the note names the file.
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / script).write_text((root / script).read_text() + "# edited\n")
    assert oracle_wide(cov, oracle, tmp_path) == []
    assert "boundary test's rule covers" not in coverage_glance({**cov, "direction_oracle": oracle}, tmp_path)[2]
    assert oracle_note(oracle, tmp_path) == (
        "benchmarks/results/direction_oracle.json was computed with code that has changed since "
        "(benchmarks/direction_oracle.py), so its figures are not used; rerun `python benchmarks/direction_oracle.py`.")
    # No record of its code: not used either.
    bare = {k: v for k, v in oracle.items() if k != "run"}
    assert oracle_wide(cov, bare, root) == [] and "carries no record of the code" in oracle_note(bare, root)
    other = {**oracle, "run": {**run, "code": {"README.md": file_sha256(root / "README.md")}}}   # not its script
    assert oracle_wide(cov, other, root) == [] and "carries no record of the code" in oracle_note(other, root)


def test_figures_computed_with_code_changed_since_are_named_and_their_reruns_not_used(root):
    """coverage.json's runs record each file of the code behind its figures (benchmarks/coverage.py). A group whose
    run's code differs from the files now is named on the first screen with the changed files; a figure without a
    run, or with one the file lacks, is named as unrecorded in Interval validation; a rerun on fresh data sets made
    with other code than its screen's is not used (the flag counts on its screen alone)."""
    from wmeval.core.digest import file_sha256
    from wmeval.report.scorecard import (
        coverage_glance,
        coverage_note,
        runs_note,
        screen_flags,
        stale_figures,
    )

    files = ("benchmarks/coverage.py", "src/wmeval/stats.py")
    now = {rel: file_sha256(root / rel) for rel in files}
    runs = {"A": {"date": "2026-12-07T10:00:00Z", "command": "python benchmarks/coverage.py", "code": now,
                  "packages": {"numpy": "2.4.6", "scipy": "1.17.1"}, "kernels": {"blas": ["openblas Haswell"]}},
            "B": {"date": "2026-12-08T10:00:00Z", "command": "python benchmarks/coverage.py --only confirm",
                  "code": {**now, "src/wmeval/stats.py": "0" * 64}}}
    wide = {"metric": "kid", "truth": "shift", "design": "unpaired", "coverage": 0.995, "withheld": 0.0,
            "width_ratio": 1.4, "power": 0.2, "run": "A"}
    sets = {"dim": 4, "episodes": 32, "frames_per_episode": 10, "rho": 0.5, "datasets": 400, "shift": 0.5,
            "cells": [wide, {**wide, "truth": "zero", "coverage": 0.95, "run": "Z"}]}
    conf = {"datasets": 1000, "run": "A", "cells": [{
        "part": "sets", "metric": "kid", "truth": "shift", "design": "unpaired", "coverage": 0.9, "datasets": 1000,
        "withheld": 0.0, "screen": {"coverage": 0.995, "width_ratio": 1.4, "datasets": 400}}]}
    cov = {"cluster": {"coverage": 0.95, "coverage_se": 0.01}, "iid_frames": {"coverage": 0.4}, "datasets": 500,
           "episodes": 64, "frames_per_episode": 16, "rho": 0.8, "confidence_level": 0.95, "run": "A",
           "sets": sets, "confirmation": conf, "runs": runs}
    (flag,) = screen_flags(cov)
    assert flag["confirmation"] is not None and flag["confirmed"] is False          # same code: the rerun is used
    again = {**cov, "runs": {**runs, "C": {**runs["A"], "date": "2026-12-09T10:00:00Z"}},
             "confirmation": {**conf, "run": "C"}}
    assert screen_flags(again)[0]["confirmation"] is not None                       # another run, the same code
    assert stale_figures(cov, root) == ({}, ["the set-level cells at 32 episodes, d = 4"])  # run Z: not in runs
    note = runs_note(cov, root)
    assert "None of that code has changed since" in note and "`python benchmarks/coverage.py` on 2026-12-07" in note
    assert note.endswith("Without a record of the code that computed them: the set-level cells at 32 episodes, d = 4.")
    assert "Computed with code that has changed" not in coverage_glance(cov, root)[2]

    later = {**cov, "confirmation": {**conf, "run": "B"}}
    (flag,) = screen_flags(later)
    assert flag["confirmation"] is None and flag["confirmed"] is None               # other code: not used
    assert stale_figures(later, root)[0] == {"the reruns on fresh data sets": ["src/wmeval/stats.py"]}
    tail = coverage_glance(later, root)[2]
    assert ("Computed with code that has changed since, so they may not describe the intervals this code gives: the "
            "reruns on fresh data sets (changed: src/wmeval/stats.py)") in tail
    assert "too wide (conservative): 1 cell" in tail
    assert "None of that code has changed since" not in coverage_note(later, root)
    assert "(changed: src/wmeval/stats.py)" in coverage_note(later, root)
    # Every group is checked: the plug-in FD's, the bias corrections', a high-axis part's (each stamped with run B).
    high = {**sets, "shift_axis_variance": 2.0, "cells": [{**wide, "run": "B"}]}
    each = {**cov, "sets": {**sets, "cells": [wide]}, "frechet": {"dim": 8, "run": "B"}, "fd_bias": {"run": "B"},
            "sets_high_axis": high}
    assert set(stale_figures(each, root)[0]) == {"the plug-in FD's intervals", "the FD bias corrections' leftovers",
                                                 "the set-level cells at 32 episodes, d = 4, highest axis"}
    # ... the first screen says so without set-level parts too
    means_only = {k: v for k, v in each.items() if k not in ("sets", "sets_high_axis", "confirmation")}
    assert "the plug-in FD's intervals; the FD bias corrections' leftovers (changed: src/wmeval/stats.py)" in \
        coverage_glance(means_only, root)[2]


def test_an_interval_open_at_0_is_muted_like_any_other_in_html():
    from wmeval.rendering.document import _html_cell

    assert _html_cell("2.00e-04 (0, 0.003] §") == '2.00e-04 <span class="iv">(0, 0.003]</span> §'
    assert _html_cell("1 [0.9, 1.1] †") == '1 <span class="iv">[0.9, 1.1]</span> †'
    assert _html_cell("0.5 (<1% of replicates undefined)") == "0.5 (&lt;1% of replicates undefined)"
