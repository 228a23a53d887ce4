"""Stage statistics: per-episode metric contributions -> data/stats/."""

from pathlib import Path

from wmeval.config import load_params
from wmeval.scores import compute_statistics
from wmeval.stage import main
from wmeval.tables import atomic_dir

OUT = Path("data/stats")


def run() -> None:
    params = load_params()
    with atomic_dir(OUT) as tmp:
        compute_statistics(params, Path("data/rollouts"), Path("data/features"), tmp)


if __name__ == "__main__":
    main(run)
