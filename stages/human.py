"""Stage human: the declared human study's returned answers -> data/human/ (summary.json, judgments.parquet)."""

import wmeval.core.stage_process  # noqa: F401, I001  first: memory settings before numpy and pyarrow load

from pathlib import Path

from wmeval.core.config import load_params
from wmeval.core.runner import main
from wmeval.human.stage import human_stage

STATS, OUT = Path("data/stats"), Path("data/human")


def run() -> None:
    human_stage(load_params(), STATS, OUT)


if __name__ == "__main__":
    main(run)
