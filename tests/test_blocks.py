"""Rollouts in blocks of episodes (``protocol.episode_block``): memory holds one block, and the numbers depend on
the block size only through the random streams, never on memory."""

import dataclasses
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from wmeval.core.config import ProtocolConfig, WorldConfig
from wmeval.core.errors import ModelOutputError
from wmeval.core.rng import make_rng
from wmeval.models import Prediction
from wmeval.models.imported import write_predictions
from wmeval.rollouts import run_world
from wmeval.rollouts.episodes import (
    episode_blocks,
    largest_block,
    make_episodes,
    world_tables,
)
from wmeval.tables import METADATA_KEY, read_metadata, read_table, write_blocks
from wmeval.worlds import build_world, rollout_states

PEND = WorldConfig(name="pendulum", kind="pendulum", params={"frame_size": 16})
BLOBS = WorldConfig(name="blobs", kind="blobs", params={})
PROTO = ProtocolConfig(name="t", n_episodes=7, horizon=3, num_samples=2, num_futures=2, n_random_plans=1,
                       teacher_forced_plan="random_0", frame_dtype="uint8", seed=0)
PEND_MODELS = {"sin": {"_target_": "wmeval.models.LeastSquaresPendulumModel", "features": "sin-features",
                       "fit_seed": 0},
               "shuffled": {"_target_": "wmeval.models.ShuffledFuturesModel"}}
BLOB_MODELS = {"stochastic": {"_target_": "wmeval.models.BlobReferenceModel", "mode": "stochastic"},
               "shuffled": {"_target_": "wmeval.models.ShuffledFuturesModel"}}


def blocked(proto: ProtocolConfig, block: int, **kw) -> ProtocolConfig:
    return dataclasses.replace(proto, episode_block=block, **kw)


def rows(table, episodes=None):
    """A table's rows as a key-sorted frame, optionally only ``episodes``."""
    df = table.to_pandas()
    if episodes is not None:
        df = df[df["episode"].isin(list(episodes))]
    return df.sort_values(["regime", "plan", "episode", "sample", "t"]).reset_index(drop=True)


def same_rows(a, b):
    assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0
    for c in a.columns:
        x, y = a[c].to_numpy(), b[c].to_numpy()
        if x.dtype == object:
            assert all(np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(x, y)), c
        else:
            np.testing.assert_array_equal(x, y, err_msg=c)


@pytest.mark.parametrize("n,block", [(7, 3), (2, 3), (70, 32), (33, 32), (200, 3), (5, 4)])
def test_blocks_cover_every_episode_once_in_near_equal_blocks_of_two_or_more(n, block):
    b = episode_blocks(n, block)
    assert b[0][0] == 0 and b[-1][1] == n and all(h == lo for (_, h), (lo, _) in zip(b, b[1:]))
    sizes = [h - lo for lo, h in b]
    assert max(sizes) <= block and max(sizes) - min(sizes) <= 1 and min(sizes) >= 2
    assert len(b) == -(-n // block)                      # as few blocks as the size allows
    assert largest_block(n, block) == max(sizes)


def test_a_deterministic_world_and_model_give_the_same_rows_in_any_blocks():
    """Pendulum and a least-squares model draw nothing: blocks of 3 give exactly the rows of one block."""
    one = run_world(PEND, PEND_MODELS, PROTO, progress=False)
    three = run_world(PEND, PEND_MODELS, blocked(PROTO, 3), progress=False)
    for source in ("ground_truth", "sin"):
        same_rows(rows(one[source]), rows(three[source]))


def test_each_block_draws_its_own_streams_and_one_block_draws_what_an_unblocked_run_did(monkeypatch):
    """A stochastic world (M futures) and a stochastic model (K samples). Every stream of a later block is keyed by
    the block (the same key would repeat block 0's noise); block 0 keeps the unblocked key, so a protocol of one
    block is the run of before (its numbers unchanged)."""
    from wmeval.rollouts import episodes

    keys = []

    def recording(seed, *key):
        keys.append(key)
        return make_rng(seed, *key)

    monkeypatch.setattr(episodes, "make_rng", recording)
    run_world(BLOBS, BLOB_MODELS, blocked(PROTO, 3), progress=False)
    drawn = [k for k in keys if k[1] in ("future", "model")]
    by_block = {b: {k[:-2] if k[-2:-1] == ("block",) else k for k in drawn
                    if (k[-2:] == ("block", b) if b else k[-2:-1] != ("block",))} for b in range(3)}
    assert by_block[0] and by_block[0] == by_block[1] == by_block[2]      # the same streams, one set per block
    assert len(drawn) == 3 * len(by_block[0])                             # ... and no stream shared by two blocks
    assert {k for k in keys if k[1] not in ("future", "model")} == {("blobs", "initial_states"), ("blobs", "plans")}

    monkeypatch.undo()
    one = run_world(BLOBS, BLOB_MODELS, PROTO, progress=False)             # N = 7 <= 32: one block
    unkeyed = run_world(BLOBS, BLOB_MODELS, blocked(PROTO, 7), progress=False)
    for source in one:
        assert one[source].equals(unkeyed[source])
    three = run_world(BLOBS, BLOB_MODELS, blocked(PROTO, 3), progress=False)
    same_rows(rows(one["ground_truth"]).drop(columns=["frame", "state", "reward"]),
              rows(three["ground_truth"]).drop(columns=["frame", "state", "reward"]))   # the same rows ...
    assert not np.array_equal(np.stack(rows(one["stochastic"])["frame"].to_numpy()),      # ... with new draws
                              np.stack(rows(three["stochastic"])["frame"].to_numpy()))


def test_the_shuffled_control_borrows_within_its_block_and_says_so():
    """Each block derangement: episode e starts from the state of the episode its metadata names, in its block."""
    proto = blocked(PROTO, 3, horizon=2)
    t = run_world(PEND, {"shuffled": PEND_MODELS["shuffled"]}, proto, progress=False)["shuffled"]
    borrowed = np.array(json.loads(t.schema.metadata[METADATA_KEY])["borrowed_episodes"])
    assert borrowed.tolist() == [1, 0, 3, 2, 6, 4, 5]
    world = build_world("pendulum", {"kind": "pendulum", "params": {"frame_size": 16}})
    eps = make_episodes(world, proto)
    plan = eps.plans[0]
    expect = rollout_states(world, eps.s0[borrowed], plan.actions, np.random.default_rng(0))[:, 1:]
    got = rows(t)
    got = got[(got["regime"] == "open_loop") & (got["plan"] == plan.name)]
    np.testing.assert_allclose(np.stack(got["state"].to_numpy()).reshape(7, 2, -1), expect, atol=1e-12)


def test_the_stage_appends_each_sources_blocks_to_one_file(tmp_path):
    """write_blocks: one file per source, equal to the whole table, one row group set per block."""
    proto = blocked(PROTO, 3)
    written = write_blocks(world_tables(BLOBS, BLOB_MODELS, proto, False), tmp_path)
    whole = run_world(BLOBS, BLOB_MODELS, proto, progress=False)
    assert set(written) == set(whole) == {"ground_truth", "stochastic", "shuffled"}
    for source, table in whole.items():
        got = read_table(tmp_path / f"{source}.parquet")
        assert written[source] == table.num_rows == got.num_rows
        same_rows(rows(got), rows(table))
        assert got.column("episode").to_pylist() == table.column("episode").to_pylist()    # in block order
        assert read_metadata(tmp_path / f"{source}.parquet") == json.loads(table.schema.metadata[METADATA_KEY])
        assert pq.ParquetFile(tmp_path / f"{source}.parquet").metadata.num_row_groups >= 3    # a block each


class StatesSometimes:
    """Returns states for blocks of 2 episodes and frames only for larger ones."""

    def __init__(self, world):
        self.world = world

    def predict(self, history, actions, num_samples, rng):
        n, H = actions.shape[:2]
        frames = np.zeros((n, 1, H, *self.world.frame_shape))
        states = np.zeros((n, 1, H, self.world.state_dim)) if n == 2 else None
        return Prediction(frames=frames, states=states)


def test_a_model_that_changes_its_output_between_blocks_is_refused():
    with pytest.raises(ModelOutputError, match=r"model 'm' on world 'pendulum': episodes 4\.\.6 give a table unlike "
                                               r"that of the first block of episodes: columns"):
        run_world(PEND, {"m": {"_target_": "test_blocks.StatesSometimes"}}, blocked(PROTO, 3), progress=False)


def test_imported_predictions_are_read_block_by_block(tmp_path, monkeypatch):
    """An imported model's files hold all N episodes; each block checks and converts only its own (never all N),
    and a file missing an episode of a later block is refused naming it."""
    from wmeval.models import imported as imported_module

    checked = []
    real_check = imported_module.check_frames
    monkeypatch.setattr(imported_module, "check_frames",
                        lambda a, shape, where: checked.append(len(a)) or real_check(a, shape, where))
    models = {"sharp-A": {"_target_": "wmeval.models.BlobReferenceModel", "mode": "sharp-A"}}
    proto = blocked(PROTO, 3)
    t = run_world(BLOBS, models, proto, progress=False)["sharp-A"].to_pandas()
    arrays = {}
    for (regime, plan), g in t.groupby(["regime", "plan"], observed=True):
        g = g.sort_values(["episode", "sample", "t"])
        frames = np.stack(g["frame"].to_numpy())
        arrays[(regime, plan)] = {"episode": np.arange(7)[::-1].copy(),
                                  "frames": frames.reshape(7, 1, 3, 48, 48, 1)[::-1].copy()}
    write_predictions(tmp_path / "preds", "blobs", 3, False, arrays)
    imported = {"imp": {"_target_": "wmeval.models.ImportedModel", "path": str(tmp_path / "preds")}}
    got = run_world(BLOBS, imported, proto, progress=False)["imp"]
    a, b = rows(got), t.sort_values(["regime", "plan", "episode", "sample", "t"]).reset_index(drop=True)
    np.testing.assert_array_equal(np.stack(a["frame"].to_numpy()), np.stack(b["frame"].to_numpy()))
    assert checked and set(checked) <= {2, 3}                     # blocks of 2, 2 and 3 episodes
    arrays[next(iter(arrays))] = {"episode": np.arange(6), "frames": arrays[next(iter(arrays))]["frames"][1:]}
    write_predictions(tmp_path / "short", "blobs", 3, False, arrays)
    imported = {"imp": {"_target_": "wmeval.models.ImportedModel", "path": str(tmp_path / "short")}}
    with pytest.raises(ModelOutputError, match=r"1 evaluation episodes are missing, e\.g\. \[6\]"):
        run_world(BLOBS, imported, proto, progress=False)
