import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wmeval.core.errors import WmevalError
from wmeval.rollouts import run_world
from wmeval.statistics.paired import contributions, episode_values
from wmeval.tables import dense
from wmeval.worlds import BlobWorld

COLS = {"state_mse": ("state", 1), "pixel_mse": ("frame", 3)}


@pytest.fixture(scope="module")
def blobs(tiny_params):
    p = tiny_params
    return p, run_world(p.worlds["blobs"], p.models["blobs"].entries, p.protocol, progress=False)


def test_sharp_a_one_step_state_error_is_zero_or_a_mode_apart(blobs):
    p, t = blobs
    c = contributions("blobs", "sharp-A", t["sharp-A"], t["ground_truth"], p.protocol.n_episodes,
                      p.protocol.horizon, COLS, "x", state_delta=BlobWorld().state_delta).to_pandas()
    tf = c[(c.regime == "teacher_forced") & (c.metric == "state_mse")]
    assert len(tf) == p.protocol.n_episodes * p.protocol.horizon
    # Realized short step: 0; realized long step: (11 - 3)^2 / 2 state dims = 32.
    assert set(np.round(tf.value, 9)) <= {0.0, 32.0}
    assert (tf.value == 0).any() or (tf.value == 32).all()


def test_true_conditional_beats_reversed_on_counterfactual_plans(blobs):
    p, t = blobs
    vals = {}
    for m in ("stochastic", "reversed", "mean"):
        c = contributions("blobs", m, t[m], t["ground_truth"], p.protocol.n_episodes, p.protocol.horizon,
                          COLS, "x", state_delta=BlobWorld().state_delta).to_pandas()
        vals[m] = c[(c.regime == "open_loop") & (c.metric == "pixel_mse") & (c.condition != "random")].value.mean()
    assert vals["mean"] < vals["stochastic"] < vals["reversed"]


def test_dense_rejects_duplicate_and_missing_rows(blobs):
    p, t = blobs
    tab = t["sharp-A"].filter(pa.compute.equal(t["sharp-A"].column("regime").cast(pa.string()), "open_loop"))
    tab = tab.filter(pa.compute.equal(tab.column("plan").cast(pa.string()), "left"))
    n, H = p.protocol.n_episodes, p.protocol.horizon
    assert dense(tab, "state", n, np.arange(1, H + 1), "f").shape == (n, 1, H, 2)
    with pytest.raises(WmevalError, match=r"f: \(episode 0, sample 0, t 1\) appears 2 times"):
        dense(pa.concat_tables([tab, tab.slice(0, 1)]), "state", n, np.arange(1, H + 1), "f")
    with pytest.raises(WmevalError, match=r"appears 0 times"):
        dense(tab.slice(1), "state", n, np.arange(1, H + 1), "f")


def test_episode_values_weight_plans_equally():
    rows = []
    # Plan a has 3 valid steps of value 1, plan b one valid step of value 3: equal plan weights give 2.
    for t in (1, 2, 3):
        rows.append(dict(world="w", source="m", metric="x", regime="open_loop", condition="c1", plan="a", episode=0, t=t, value=1.0))
    rows.append(dict(world="w", source="m", metric="x", regime="open_loop", condition="c2", plan="b", episode=0, t=1, value=3.0))
    ev = episode_values(pd.DataFrame(rows))
    assert ev[ev.condition == "all"].value.item() == pytest.approx(2.0)
    assert ev[ev.condition == "c1"].value.item() == pytest.approx(1.0)
