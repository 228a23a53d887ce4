"""Stage rollouts: ground truth and every model's predictions -> data/rollouts/<world>/.

``<world>/<source>.parquet``: the observation protocol (frames and states);
``<world>/dynamics/<source>.parquet``: seed 002's state-level dynamics queries.
"""

import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from wmeval.core.config import load_params, world_dynamics
from wmeval.core.execution import executor_for
from wmeval.core.parallel import usable_cores
from wmeval.core.runner import main
from wmeval.rollouts import build_models
from wmeval.rollouts.dynamics import dynamics_tables
from wmeval.rollouts.episodes import (
    available_memory,
    check_memory,
    memory_needed,
    side_by_side_safe,
    world_tables,
)
from wmeval.rollouts.inputs import (
    check_declared,
    model_inputs,
    stage_deps,
    world_inputs,
)
from wmeval.tables import atomic_dir, write_blocks, write_table
from wmeval.worlds import build_world

OUT = Path("data/rollouts")
log = logging.getLogger("stages.rollouts")


def run() -> None:
    params = load_params()
    # A model's module and an imported model's files must be deps of this stage, or DVC misses their edits.
    root = Path.cwd()
    entries = {w: dict(params.models[w].entries) for w in params.worlds if w in params.models}
    worlds_cfg = {name: dataclasses.asdict(w) for name, w in params.worlds.items()}
    check_declared({**model_inputs(entries, root), **world_inputs(worlds_cfg, root)}, stage_deps(root), root)
    # Every world is built (and its params checked) before anything runs.
    worlds = {name: build_world(name, dataclasses.asdict(wcfg)) for name, wcfg in params.worlds.items()}
    n_models = {name: len(params.models[name].entries) if name in params.models else 0 for name in worlds}
    for name, world in worlds.items():
        check_memory(world, params.protocol, n_models[name])
    ex = executor_for(params.execution)           # None: here; Ray: each model on its own actor
    with atomic_dir(OUT) as tmp:
        def one(name: str) -> None:
            wcfg, world = params.worlds[name], worlds[name]
            entries = params.models[name].entries if name in params.models else {}
            models = build_models(world, entries)
            (tmp / name / "dynamics").mkdir(parents=True)
            # Each block of episodes of each observation table is written as it comes (one model's block in
            # memory at a time).
            rows = write_blocks(world_tables(wcfg, entries, params.protocol, world=world, models=models,
                                             executor=ex), tmp / name)
            for source, n in rows.items():
                log.info("%s/%s: %d rows", name, source, n)
            dyn, skipped = dynamics_tables(wcfg, world, models, world_dynamics(params, name), params.protocol,
                                           executor=ex, models_cfg=entries)
            for model, reason in skipped.items():
                log.info("%s/%s: no dynamics layers: %s", name, model, reason)
            for source, table in dyn.items():
                write_table(table, tmp / name / "dynamics" / f"{source}.parquet")
                log.info("%s/dynamics/%s: %d rows", name, source, table.num_rows)

        side_by_side = [n for n in params.worlds if side_by_side_safe(worlds[n], params.models.get(n), ex)]
        # The worlds on threads and the largest of the others (here, meanwhile) hold their blocks at once: when
        # that does not fit, one world at a time (each fits: checked above).
        need = {n: memory_needed(worlds[n], params.protocol, n_models[n]) for n in params.worlds}
        if sum(need[n] for n in side_by_side) + max((need[n] for n in params.worlds if n not in side_by_side),
                                                     default=0) > available_memory():
            side_by_side = []
        with ThreadPoolExecutor(max_workers=max(1, min(len(side_by_side), usable_cores()))) as pool:
            futures = [pool.submit(one, n) for n in side_by_side]
            for n in params.worlds:                     # the others here, one after another
                if n not in side_by_side:
                    one(n)
            for f in futures:
                f.result()


if __name__ == "__main__":
    main(run)
