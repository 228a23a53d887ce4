"""Stage rollouts: ground truth and every model's predictions -> data/rollouts/<world>/.

``<world>/<source>.parquet``: the observation protocol (frames and states);
``<world>/dynamics/<source>.parquet``: seed 002's state-level dynamics queries.
"""

import wmeval.core.stage_process  # noqa: F401, I001  first: memory settings before numpy and pyarrow load

import dataclasses
import logging
from pathlib import Path

from wmeval.core.config import load_params, world_dynamics
from wmeval.core.execution import executor_for
from wmeval.core.parallel import fork_map, usable_cores
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
    cfgs = {name: params.models[name].entries if name in params.models else {} for name in worlds}
    built: dict = {}                        # each world's models, built once (on first use) for both queries

    def models(name: str) -> dict:
        if name not in built:
            built[name] = build_models(worlds[name], cfgs[name])
        return built[name]

    with atomic_dir(OUT) as tmp:
        def observe(name: str) -> None:
            wcfg, world = params.worlds[name], worlds[name]
            (tmp / name / "dynamics").mkdir(parents=True)
            # Each block of episodes of each observation table is written as it comes (one model's block in
            # memory at a time).
            rows = write_blocks(world_tables(wcfg, cfgs[name], params.protocol, world=world, models=models(name),
                                             executor=ex), tmp / name)
            for source, n in rows.items():
                log.info("%s/%s: %d rows", name, source, n)

        def dynamics(name: str, n_jobs: int) -> None:
            wcfg, world = params.worlds[name], worlds[name]
            dyn, skipped = dynamics_tables(wcfg, world, models(name), world_dynamics(params, name), params.protocol,
                                           executor=ex, models_cfg=cfgs[name], n_jobs=n_jobs)
            for model, reason in skipped.items():
                log.info("%s/%s: no dynamics layers: %s", name, model, reason)
            for source, table in dyn.items():
                write_table(table, tmp / name / "dynamics" / f"{source}.parquet")
                log.info("%s/dynamics/%s: %d rows", name, source, table.num_rows)

        side_by_side = [n for n in params.worlds if side_by_side_safe(worlds[n], params.models.get(n), ex)]
        # The worlds side by side and the largest of the others (here, afterwards) hold their blocks at once: when
        # that does not fit, one world at a time (each fits: checked above).
        need = {n: memory_needed(worlds[n], params.protocol, n_models[n]) for n in params.worlds}
        if sum(need[n] for n in side_by_side) + max((need[n] for n in params.worlds if n not in side_by_side),
                                                     default=0) > available_memory():
            side_by_side = []
        # Forked processes, not threads: the rollouts are many small numpy calls, and threads waited for the GIL
        # (13.6 s on 2 cores for 14.9 CPU-seconds). The side-by-side worlds' observation tables first, one world
        # per process (each writes its own files); then each world's dynamics queries, one source per process
        # (the pendulum's took 8.8 of the 14.9 s); the other worlds one after another, here.
        cores = usable_cores()
        for n in side_by_side:                          # built here, before the fork: both queries use them
            models(n)
        fork_map(observe, side_by_side, n_jobs=min(len(side_by_side), cores))
        for n in params.worlds:
            if n not in side_by_side:
                observe(n)
            dynamics(n, cores if n in side_by_side else 1)

if __name__ == "__main__":
    main(run)
