"""Stage 1, rollouts: ground truth and every model's predictions, as rollout tables.

- :mod:`.episodes`: evaluation episodes and plans, the observation protocol (teacher-forced and
  open-loop predictions, K samples, M realized futures): :func:`run_world`;
- :mod:`.dynamics`: seed 002's state-level dynamics queries (rollout curves, counterfactual
  pairs, MPC control, probes): :func:`dynamics_tables`;
- :mod:`.planning`: random-shooting MPC.
"""

from wmeval.rollouts.dynamics import dynamics_tables
from wmeval.rollouts.episodes import (
    GROUND_TRUTH,
    build_models,
    export_episodes,
    make_episodes,
    run_world,
)

__all__ = ["GROUND_TRUTH", "build_models", "dynamics_tables", "export_episodes", "make_episodes", "run_world"]
