"""A user world model for wmeval: the copy-last-frame (persistence) baseline.

It predicts that nothing changes: every future frame is the last observed one.
It works on any world with frames, needs no training, and ignores the action,
which the action-conditional layers of the scorecard are there to catch.

Use it (see README.md beside this file)::

    PYTHONPATH=examples/user_model dvc exp run \
        -S '+models.blobs.entries.persistence._target_=persistence.PersistenceModel'
"""

from __future__ import annotations

import numpy as np

from wmeval.models import History, Prediction


class PersistenceModel:
    """Repeat the last observed frame for every step and sample."""

    stochastic = False  # asked for one sample per condition

    def predict(self, history: History, actions: np.ndarray, num_samples: int,
                rng: np.random.Generator) -> Prediction:
        last = history.frames[:, -1]                     # (N, H_img, W, C) in [0, 1]
        n, horizon = actions.shape[:2]
        frames = np.broadcast_to(last[:, None, None], (n, num_samples, horizon, *last.shape[1:]))
        return Prediction(frames=frames)
