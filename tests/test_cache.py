"""The content-addressed embedding cache: reuse, new rows only, crashes, corruption, concurrent writers."""

import multiprocessing as mp

import numpy as np
import pytest

from wmeval.features.cache import FeatureCache, encoder_key


def enc(x):
    return x.reshape(len(x), -1)[:, :4].astype(np.float32) * 2.0


def items(n, seed=0):
    return np.random.default_rng(seed).integers(0, 255, size=(n, 3, 3, 1), dtype=np.uint8)


def test_warm_run_embeds_nothing_and_new_rows_only(tmp_path):
    key = encoder_key({"encoder": "toy"})
    x = items(100)
    c1 = FeatureCache(tmp_path, key)
    np.testing.assert_array_equal(c1.embed(x, enc, chunk=30), enc(x))
    assert c1.stats.embedded == 100 and len(list((tmp_path / key).glob("*.parquet"))) == 4
    c2 = FeatureCache(tmp_path, key)
    np.testing.assert_array_equal(c2.embed(x, enc), enc(x))
    assert c2.stats.embedded == 0 and c2.stats.hits == 100
    more = np.concatenate([x, items(7, seed=1)])
    c3 = FeatureCache(tmp_path, key)
    np.testing.assert_array_equal(c3.embed(more, enc), enc(more))
    assert c3.stats.embedded == 7
    # Another encoder identity shares nothing.
    c4 = FeatureCache(tmp_path, encoder_key({"encoder": "toy", "weights_sha256": "x"}))
    c4.embed(x, enc)
    assert c4.stats.embedded == 100


def test_duplicate_rows_are_embedded_once(tmp_path):
    x = items(10)
    c = FeatureCache(tmp_path, "k")
    out = c.embed(np.concatenate([x, x]), enc)
    assert c.stats.embedded == 10
    np.testing.assert_array_equal(out[:10], out[10:])


def test_interrupted_run_keeps_finished_chunks(tmp_path):
    x = items(50)
    calls = {"n": 0}

    def flaky(batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # killed in the middle of the third chunk
        return enc(batch)

    with pytest.raises(KeyboardInterrupt):
        FeatureCache(tmp_path, "k").embed(x, flaky, chunk=10)
    c = FeatureCache(tmp_path, "k")
    np.testing.assert_array_equal(c.embed(x, enc, chunk=10), enc(x))
    assert c.stats.embedded == 30 and c.stats.hits == 20
    assert not list((tmp_path / "k").glob(".tmp-*"))


def test_corrupt_shard_is_detected_and_recomputed(tmp_path, caplog):
    x = items(20)
    FeatureCache(tmp_path, "k").embed(x, enc, chunk=10)
    shard = sorted((tmp_path / "k").glob("*.parquet"))[0]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])            # truncated
    c = FeatureCache(tmp_path, "k")
    with caplog.at_level("WARNING"):
        np.testing.assert_array_equal(c.embed(x, enc), enc(x))
    assert c.stats.corrupt_shards == 1 and c.stats.embedded == 10
    assert "truncated or corrupted" in caplog.text
    assert (tmp_path / "k" / "corrupt" / shard.name).exists()


def _worker(args):
    root, seed = args
    x = np.concatenate([items(200, seed=0), items(50, seed=seed)])
    c = FeatureCache(root, "k")
    out = c.embed(x, enc, chunk=16)
    return bool(np.array_equal(out, enc(x)))


def test_concurrent_writers_share_the_cache(tmp_path):
    with mp.get_context("spawn").Pool(2) as pool:
        assert all(pool.map(_worker, [(tmp_path, 1), (tmp_path, 2)]))
    c = FeatureCache(tmp_path, "k")
    x = np.concatenate([items(200), items(50, 1), items(50, 2)])
    np.testing.assert_array_equal(c.embed(x, enc), enc(x))
    assert c.stats.embedded == 0 and c.stats.corrupt_shards == 0


def test_input_signature_is_part_of_the_key(tmp_path):
    """The same encoder on grayscale and RGB frames writes separate shards (no mixed dims)."""
    from wmeval.core.config import EncoderConfig
    from wmeval.encoders import build_encoder
    from wmeval.features import Caches

    enc = build_encoder(EncoderConfig("pixel", "pixel", False, {"resolution": 2}))
    caches = Caches(enc, str(tmp_path))
    gray = np.random.default_rng(0).random((5, 8, 8, 1), dtype=np.float32)
    rgb = np.random.default_rng(1).random((5, 8, 8, 3), dtype=np.float32)
    a = caches.get(gray).embed(gray, enc)
    b = caches.get(rgb).embed(rgb, enc)
    assert a.shape == (5, 4) and b.shape == (5, 12)
    assert caches.get(gray) is not caches.get(rgb)
    np.testing.assert_array_equal(Caches(enc, str(tmp_path)).get(gray).embed(gray, enc), a)


def test_bad_encoder_output_is_a_clear_error(tmp_path):
    from wmeval.core.errors import WmevalError

    with pytest.raises(WmevalError, match="wrong count or non-finite"):
        FeatureCache(tmp_path, "k").embed(items(3), lambda x: np.full((3, 2), np.nan))


def test_large_rows_reach_the_encoder_in_bounded_chunks(tmp_path, monkeypatch):
    """The encoder never gets more than COMPUTE_BYTES of rows (as float32) at once, whatever ``chunk`` says; the
    embeddings are the same."""
    from wmeval.features import cache

    monkeypatch.setattr(cache, "COMPUTE_BYTES", 4 * 9 * 7)             # 7 rows of 3 x 3 x 1
    sizes = []

    def counting(x):
        sizes.append(len(x))
        return enc(x)

    x = items(50)
    np.testing.assert_array_equal(FeatureCache(tmp_path, "k").embed(x, counting, chunk=30), enc(x))
    assert max(sizes) == 7 and sum(sizes) == 50


def _recording_worker(args):
    root, seed = args
    c = FeatureCache(root, "k")
    c.embed(np.concatenate([items(40), items(30, seed)]), enc)   # shared rows and its own
    stats = c.stats.as_dict()
    c.record(file=f"w{seed}", **{f"file_{k}": v for k, v in stats.items()})
    return stats


def test_counters_are_exact_under_concurrent_writers_without_a_lock(tmp_path):
    """Four processes embed overlapping rows into one cache at once and record their counts: the totals are the
    sum of what each saw (one record file each, no read-modify-write), and no lock file is used."""
    from wmeval.features.cache import read_counters

    with mp.get_context("spawn").Pool(4) as pool:
        seen = pool.map(_recording_worker, [(tmp_path, s) for s in (1, 2, 3, 4)])
    totals = read_counters(tmp_path, "k")
    assert totals["records"] == 4
    for k in ("rows", "hits", "embedded", "corrupt_shards"):
        assert totals[k] == sum(s[k] for s in seen), k
    assert totals["rows"] == 4 * 70 and totals["embedded"] >= 40 + 4 * 30
    assert not list(tmp_path.rglob("*.lock")) and not list(tmp_path.rglob(".lock"))
    assert read_counters(tmp_path)["k"]["records"] == 4


def test_cache_prune_removes_only_the_keys_no_run_of_this_code_can_hit(tmp_path, capsys):
    """`wmeval cache list` shows each encoder key and whether this code made it; `prune` removes the keys made by
    other encoder code or library releases, or before the code was keyed, and keeps the current ones."""
    from wmeval.cli import main
    from wmeval.encoders.zoo import embedding_code
    from wmeval.features.cache import cache_entries

    now = embedding_code()
    identities = {"current": {"encoder": "pixel", "kind": "pixel", "code": now},
                  "other": {"encoder": "pixel", "kind": "pixel", "code": {**now, "sha256": "0" * 64}},
                  "before": {"encoder": "pixel", "kind": "pixel"}}
    keys = {}
    for name, ident in identities.items():
        keys[name] = encoder_key(ident)
        FeatureCache(tmp_path, keys[name], ident).embed(items(5, seed=len(keys)), enc)
    (tmp_path / "stats.jsonl").write_text("{}\n")
    (tmp_path / "not-a-key").mkdir()
    entries = {e["key"]: e for e in cache_entries(tmp_path)}
    assert set(entries) == set(keys.values())
    assert [entries[keys[n]]["current"] for n in identities] == [True, False, False]
    assert all(e["shards"] == 1 and e["bytes"] > 0 for e in entries.values())

    assert main(["cache", "list", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "holds 3 encoder key(s)" in out and out.count("this code") == 1
    assert "other code or library releases" in out and "code before it was keyed" in out
    assert main(["cache", "prune", "--dry-run", "--cache-dir", str(tmp_path)]) == 0
    assert "would remove 2 encoder key(s)" in capsys.readouterr().out and len(cache_entries(tmp_path)) == 3
    assert main(["cache", "prune", "--cache-dir", str(tmp_path)]) == 0
    assert "removed 2 encoder key(s)" in capsys.readouterr().out
    assert [e["key"] for e in cache_entries(tmp_path)] == [keys["current"]]
    assert (tmp_path / "stats.jsonl").is_file() and (tmp_path / "not-a-key").is_dir()
    c = FeatureCache(tmp_path, keys["current"])
    c.embed(items(5, seed=1), enc)
    assert c.stats.embedded == 0                                   # the kept key still serves its rows
    assert main(["cache", "list", "--cache-dir", str(tmp_path / "nowhere")]) == 0
    assert "does not exist" in capsys.readouterr().out
