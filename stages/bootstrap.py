"""Stage bootstrap: episode-clustered, paired intervals -> data/bootstrap/, reports/metrics.json."""

import wmeval.core.stage_process  # noqa: F401, I001  first: memory settings before numpy and pyarrow load

from pathlib import Path

from wmeval.bootstrap import bootstrap_stage
from wmeval.core.config import load_params
from wmeval.core.runner import main

STATS, ROLLOUTS, FEATURES = Path("data/stats"), Path("data/rollouts"), Path("data/features")
OUT, METRICS = Path("data/bootstrap"), Path("reports/metrics.json")


def run() -> None:
    bootstrap_stage(load_params(), STATS, ROLLOUTS, FEATURES, OUT, METRICS)


if __name__ == "__main__":
    main(run)
