"""The README's two commands are the ones CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"\*\*(Run the (?:pipeline|tests))\*\*.*?```bash\n(.*?)\n```", text, re.S)
    return dict(blocks)


def test_ci_runs_the_readme_commands():
    cmds = readme_commands()
    assert set(cmds) == {"Run the pipeline", "Run the tests"}
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert cmds["Run the tests"] in ci and cmds["Run the pipeline"] in ci
    assert cmds["Run the pipeline"].endswith("dvc repro")


def test_readme_coverage_tables_are_what_the_committed_benchmark_gives(tmp_path):
    """The README's interval-coverage tables are generated from benchmarks/results/coverage.json
    (wmeval.report.readme): typed by hand they went stale when the benchmark was rerun. A figure changed in the results
    changes the block, --check then fails without writing, and a rewrite puts the new figure in."""
    import json

    from wmeval.report.readme import END, block_of, coverage_markdown, main

    text = (ROOT / "README.md").read_text()
    cov = json.loads((ROOT / "benchmarks" / "results" / "coverage.json").read_text())
    start, end = block_of(text)
    assert text[start:end] == coverage_markdown(cov), "stale: run `python -m wmeval.report.readme`"
    block = text[start:end]
    # Every set-level cell's coverage is in it, as the tables print it.
    for key in ("sets", "sets_mid", "sets_wide"):
        for c in cov[key]["cells"]:
            assert (f"{c['coverage']:.1%}" in block) or c.get("withheld", 0) >= 0.5
    # A changed figure: the block differs, --check refuses it and leaves the file, a rewrite fixes it.
    cell = next(c for c in cov["sets"]["cells"] if c["metric"] == "kid" and c["truth"] == "large shift"
                and c["design"] == "paired")
    cell["coverage"] = 0.9123
    (tmp_path / "README.md").write_text(text)
    (tmp_path / "coverage.json").write_text(json.dumps(cov))
    args = ["--readme", str(tmp_path / "README.md"), "--coverage", str(tmp_path / "coverage.json")]
    assert main([*args, "--check"]) == 1 and (tmp_path / "README.md").read_text() == text
    assert main(args) == 0
    rewritten = (tmp_path / "README.md").read_text()
    assert "| large shift (1.5) | paired | 91.2% (100.0%) |" in rewritten and rewritten != text
    assert rewritten[:start] == text[:start] and rewritten.endswith(text[end:]) and main([*args, "--check"]) == 0
    # Without its markers, or with two blocks: exit 2, nothing written.
    for broken in (text.replace(END, ""), text + block):
        (tmp_path / "README.md").write_text(broken)
        assert main(args) == 2 and (tmp_path / "README.md").read_text() == broken
