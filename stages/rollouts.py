"""Stage rollouts: ground truth and every model's predictions -> data/rollouts/<world>/<source>.parquet."""

import logging
from pathlib import Path

from wmeval.config import load_params
from wmeval.rollouts import run_world
from wmeval.stage import main
from wmeval.tables import atomic_dir, write_table

OUT = Path("data/rollouts")


def run() -> None:
    params = load_params()
    with atomic_dir(OUT) as tmp:
        for name, wcfg in params.worlds.items():
            models = params.models[name].entries if name in params.models else {}
            tables = run_world(wcfg, models, params.protocol)
            (tmp / name).mkdir()
            for source, table in tables.items():
                write_table(table, tmp / name / f"{source}.parquet")
                logging.getLogger("stages.rollouts").info("%s/%s: %d rows", name, source, table.num_rows)


if __name__ == "__main__":
    main(run)
