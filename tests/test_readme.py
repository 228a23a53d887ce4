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
