import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wmeval.core.errors import WmevalError
from wmeval.rollouts import run_world
from wmeval.tables import (
    KEY_COLUMNS,
    atomic_dir,
    decode_frames,
    read_metadata,
    read_table,
    rollout_table,
    tensor_numpy,
    with_metadata,
    write_table,
)


def _table(frame_dtype="float32"):
    rng = np.random.default_rng(0)
    frames = rng.random((3, 2, 4, 5, 6, 1)).astype(np.float32)
    states = rng.normal(size=(3, 2, 4, 2))
    actions = rng.uniform(-1, 1, size=(3, 4, 1))
    t = rollout_table(world="w", source="m", regime="open_loop", plan="p", condition="c",
                      episodes=np.arange(3), t=np.arange(1, 5), frames=frames, states=states,
                      actions=actions, frame_dtype=frame_dtype, logp=rng.normal(size=(3, 4)))
    return t, frames, states, actions


def test_parquet_round_trip(tmp_path):
    table, frames, states, actions = _table()
    path = tmp_path / "x.parquet"
    write_table(with_metadata(table, {"seed": 7, "world": {"kind": "w"}}), path)
    back = read_table(path)
    assert set(KEY_COLUMNS) <= set(back.column_names)
    assert back.num_rows == 3 * 2 * 4
    # Rows are ordered episode, sample, t: reshape restores the arrays, no per-row loop.
    np.testing.assert_array_equal(tensor_numpy(back, "frame").reshape(frames.shape), frames)
    np.testing.assert_array_equal(tensor_numpy(back, "state").reshape(states.shape), states)
    act = tensor_numpy(back, "action").reshape(3, 2, 4, 1)
    np.testing.assert_array_equal(act[:, 1], actions)
    assert back.column("t").to_pylist()[:5] == [1, 2, 3, 4, 1]
    assert back.column("sample").to_pylist()[:8] == [0] * 4 + [1] * 4
    assert read_metadata(path) == {"seed": 7, "world": {"kind": "w"}}
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"


def test_uint8_frames_quantize_within_half_a_level(tmp_path):
    table, frames, *_ = _table("uint8")
    stored = tensor_numpy(table, "frame")
    assert stored.dtype == np.uint8
    assert np.max(np.abs(decode_frames(stored).reshape(frames.shape) - frames)) <= 0.5 / 255 + 1e-7


def test_read_table_errors_name_the_file(tmp_path):
    with pytest.raises(WmevalError, match="missing"):
        read_table(tmp_path / "nope.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(WmevalError, match="bad.parquet: cannot be read"):
        read_table(bad)
    table, *_ = _table()
    write_table(table.drop_columns(["regime"]), tmp_path / "nokey.parquet")
    with pytest.raises(WmevalError, match=r"nokey.parquet: columns \['regime'\] are missing"):
        read_table(tmp_path / "nokey.parquet")


def test_atomic_dir_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with atomic_dir(out) as tmp:
            (tmp / "half.parquet").write_text("x")
            raise RuntimeError("boom")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    with atomic_dir(out) as tmp:
        (tmp / "a").write_text("1")
    assert (out / "a").read_text() == "1"


def test_rollout_files_carry_columns_and_metadata(tiny_params, tmp_path):
    p = tiny_params
    tables = run_world(p.worlds["blobs"], p.models["blobs"].entries, p.protocol, progress=False)
    assert set(tables) == {"ground_truth", "sharp-A", "sharp-B", "mean", "stochastic", "reversed", "shuffled"}
    write_table(tables["stochastic"], tmp_path / "s.parquet")
    meta = read_metadata(tmp_path / "s.parquet")
    assert meta["format"] == "wmeval-rollouts/1" and meta["seed"] == 0
    assert meta["world"]["kind"] == "blobs" and meta["world"]["sigma"] == 2.5
    assert meta["model_config"]["mode"] == "stochastic" and meta["num_samples"] == 2
    assert len(meta["code"]["source_sha256"]) == 64
    s = read_table(tmp_path / "s.parquet")
    N, H, K = p.protocol.n_episodes, p.protocol.horizon, p.protocol.num_samples
    n_plans = p.protocol.n_random_plans + 2
    assert s.num_rows == N * K * H * (n_plans + 1)  # open loop for every plan + teacher forced
    assert set(s.column("regime").to_pylist()) == {"open_loop", "teacher_forced"}
    assert set(s.column("condition").to_pylist()) == {"random", "left", "right"}
    assert s.column("logp").null_count == N * K * H * n_plans  # density only on teacher-forced rows
    gt = tables["ground_truth"]
    assert set(gt.column("regime").to_pylist()) == {"realized"}
    assert gt.num_rows == N * p.protocol.num_futures * (H + 1) * n_plans
    assert "state" not in tables["mean"].column_names  # the mean model has frames only


def test_rollouts_are_deterministic(tiny_params):
    p = tiny_params
    a = run_world(p.worlds["blobs"], p.models["blobs"].entries, p.protocol, progress=False)
    b = run_world(p.worlds["blobs"], p.models["blobs"].entries, p.protocol, progress=False)
    for k in a:
        assert a[k].equals(b[k])


def test_frame_tables_are_written_in_small_row_groups(tmp_path):
    """A table of large tensor rows is written in row groups of ROW_GROUP_BYTES of tensor data (reading a tensor
    column decodes one row group at a time, so a read's transient memory is bounded), and reads back exactly; a
    table without tensor columns keeps Arrow's single row group."""
    import pyarrow.parquet as pq

    from wmeval.tables import io

    frames = np.random.default_rng(0).integers(0, 256, size=(300, 210, 160, 3), dtype=np.uint8)
    t = pa.table({"episode": np.arange(300), "frame": io.tensor_array(frames)})
    io.write_table(t, tmp_path / "f.parquet")
    meta = pq.ParquetFile(tmp_path / "f.parquet").metadata
    assert io.row_group_rows(t) == 83 and meta.num_row_groups == 4 and meta.row_group(0).num_rows == 83
    np.testing.assert_array_equal(io.tensor_numpy(io.read_table(tmp_path / "f.parquet", ["episode", "frame"]),
                                                  "frame"), frames)
    io.write_table(pa.table({"episode": np.arange(300)}), tmp_path / "s.parquet")
    assert pq.ParquetFile(tmp_path / "s.parquet").metadata.num_row_groups == 1


def test_atomic_writes_get_the_mode_of_any_new_file(tmp_path):
    """mkstemp makes 0600 files: a scorecard or a study page written through it would be unreadable to others."""
    import os
    import stat

    from wmeval.tables.io import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "page.html", "x")
        assert stat.S_IMODE((tmp_path / "page.html").stat().st_mode) == 0o644
        os.umask(0o077)
        atomic_write_text(tmp_path / "private.html", "x")
        assert stat.S_IMODE((tmp_path / "private.html").stat().st_mode) == 0o600
    finally:
        os.umask(old)
