"""Stage statistics: per-episode metric contributions -> data/stats/."""

import wmeval.core.stage_process  # noqa: F401, I001  first: memory settings before numpy and pyarrow load

from pathlib import Path

from wmeval.core.config import load_params
from wmeval.core.runner import main
from wmeval.statistics.compute import compute_statistics
from wmeval.tables import atomic_dir

ROLLOUTS, FEATURES, OUT = Path("data/rollouts"), Path("data/features"), Path("data/stats")


def run() -> None:
    params = load_params()
    with atomic_dir(OUT) as tmp:
        compute_statistics(params, ROLLOUTS, FEATURES, tmp)


if __name__ == "__main__":
    main(run)
