"""Random-shooting model-predictive control (seed 002, layer 6).

At every real step the planner draws ``n_plans`` random action sequences of
``plan_horizon`` steps, rolls each out *with the model*, sums the task cost of the
predicted states, and executes the first action of the cheapest plan *in the real
world*; then it replans. The planner never sees the true dynamics: only the
real states it lands in.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Predict = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (B, D), (B, H, A) -> (B, H, D)


def random_shooting_mpc(predict: Predict, real_step: Callable[[np.ndarray, np.ndarray], np.ndarray],
                        cost: Callable[[np.ndarray], np.ndarray],
                        sample_actions: Callable[[tuple[int, ...]], np.ndarray],
                        start: np.ndarray, steps: int, n_plans: int, plan_horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Run MPC from ``start`` ``(E, D)`` for ``steps`` real steps, all episodes at once.

    Args:
        predict: the model, open loop: states ``(B, D)`` and plans ``(B, H, A)`` to ``(B, H, D)``.
        real_step: the true world's one step, ``(E, D), (E, A) -> (E, D)``.
        cost: per-step task cost of states ``(..., D) -> (...)``.
        sample_actions: ``shape -> (*shape, A)`` candidate actions (the caller's seeded RNG).
        start: initial real states.
        steps, n_plans, plan_horizon: the planner budget (seed 002: 60, 256, 15).

    Returns:
        real states ``(E, steps + 1, D)`` (index 0 is ``start``) and executed actions ``(E, steps, A)``.
    """
    s = np.asarray(start, dtype=np.float64)
    e, d = s.shape
    states, actions = [s], []
    for _ in range(steps):
        plans = sample_actions((e, n_plans, plan_horizon))            # (E, K, H, A)
        a_dim = plans.shape[-1]
        sim = predict(np.repeat(s, n_plans, axis=0), plans.reshape(e * n_plans, plan_horizon, a_dim))
        total = cost(sim.reshape(e, n_plans, plan_horizon, d)).sum(axis=-1)  # (E, K)
        best = np.argmin(total, axis=1)
        a = plans[np.arange(e), best, 0]                               # (E, A)
        s = real_step(s, a)
        states.append(s)
        actions.append(a)
    return np.stack(states, axis=1), np.stack(actions, axis=1)
