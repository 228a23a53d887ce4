"""Stage bootstrap: episode-clustered, paired intervals -> data/bootstrap/, reports/metrics.json."""

from pathlib import Path

from wmeval.bootstrap import bootstrap_stage
from wmeval.config import load_params
from wmeval.stage import main


def run() -> None:
    bootstrap_stage(load_params(), Path("data/stats"), Path("data/bootstrap"), Path("reports/metrics.json"))


if __name__ == "__main__":
    main(run)
