"""Sweeps: the tidy table and analyses (fast), the cache counters (fast), and a queued 2x2 DVC sweep (slow)."""

import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_project
from conftest import run_checked as _run

from wmeval.core.config import compose_text
from wmeval.core.errors import WmevalError
from wmeval.features.cache import FeatureCache, read_counters
from wmeval.sweep import (
    best_of_k_vs_k,
    collect,
    encoder_sensitivity,
    fd_vs_n,
    intercept_fit,
    render_sweep,
    stability,
    sweep_report,
)

BIN = Path(sys.executable).parent


def _rev(name, params, metrics, rev=None):
    """One revision as `dvc exp show --json` (DVC 3) lists it."""
    return {"rev": rev or (name * 40)[:40], "name": name, "error": None, "experiments": None,
            "data": {"rev": rev, "timestamp": "2026-01-01T00:00:00",
                     "params": {"params.yaml": {"data": params}},
                     "metrics": {"reports/metrics.json": {"data": metrics}}, "deps": {}, "outs": {}, "meta": {}}}


def _metrics(fd, bok, ranks_scale=1.0):
    """blobs metrics for models a, b, c: FD (pooled), best-of-K and an FD ranking scaled per encoder."""
    out = {}
    for i, m in enumerate(("a", "b", "c")):
        v = fd[i]
        out[m] = {"fd": {"open_loop/frame:pooled": {"point": v, "low": v - 0.1, "high": v + 0.1}},
                  "best_of_k_mse": {"open_loop/all": {"point": bok[i], "low": bok[i] - 0.01, "high": bok[i] + 0.01}}}
    return {"blobs": out}


def _show(runs, baseline_params=None):
    exps = [{"name": n, "executor": None, "revs": [_rev(n, p, m)]} for n, p, m in runs]
    base = _rev("main", baseline_params or runs[0][1], runs[0][2], rev="f" * 40)
    base["experiments"] = exps
    return [{"rev": "workspace", "name": None, "error": None, "experiments": None, "data": base["data"]}, base]


def _params(enc, k, n):
    return {"encoder": {"name": enc}, "protocol": {"num_samples": k, "n_episodes": n, "seed": 0},
            "bootstrap": {"confidence_level": 0.95}}


def _grid():
    """FD = truth + 3/N exactly for every model; encoder 'other' reverses the order of a and b."""
    runs = []
    for enc in ("pixel", "other"):
        for n in (4, 8):
            for k in (1, 2):
                truth = [1.0, 2.0, 3.0] if enc == "pixel" else [2.0, 1.0, 3.0]
                runs.append((f"{enc}-{n}-{k}", _params(enc, k, n),
                             _metrics([t + 3.0 / n for t in truth], [0.5 / k, 0.6 / k, 0.7])))
    return runs


def test_intercept_fit_exact_and_interval():
    f = intercept_fit(np.array([1 / 4, 1 / 8, 1 / 16]), 2 + 3 * np.array([1 / 4, 1 / 8, 1 / 16]), np.zeros(3))
    assert f["intercept"] == pytest.approx(2.0) and f["slope"] == pytest.approx(3.0) and f["low"] == f["high"]
    g = intercept_fit(np.array([0.5, 0.25]), np.array([3.0, 2.0]), np.array([0.1, 0.1]))
    # a = 2 y2 - y1: SE = 0.1 * sqrt(4 + 1)
    assert g["high"] - g["intercept"] == pytest.approx(1.959964 * 0.1 * 5 ** 0.5, rel=1e-5)


def test_collect_table_and_params_columns():
    df, pcols, skipped = collect(_show(_grid()))
    assert pcols == ["encoder.name", "protocol.n_episodes", "protocol.num_samples"]
    exps = df[df.kind == "experiment"]
    assert exps.experiment.nunique() == 8 and skipped == []
    assert set(df[df.kind == "baseline"].experiment) == {"main"}
    # 3 models x (fd + best_of_k) rows per experiment
    assert (exps.groupby("experiment").size() == 6).all()
    row = exps[(exps.experiment == "pixel-4-1") & (exps.source == "b") & (exps.metric == "fd")].iloc[0]
    assert (row.world, row.condition, row.point, row["protocol.n_episodes"]) == ("blobs", "open_loop/frame:pooled",
                                                                                  2.75, 4)


def test_analyses_recover_known_values():
    df, pcols, _ = collect(_show(_grid()))
    fits, why = fd_vs_n(df, pcols)
    assert why is None
    a = fits[(fits.source == "a") & (fits["encoder.name"] == "pixel")]
    assert len(a) == 2 and np.allclose(a.intercept, 1.0) and np.allclose(a.slope, 3.0)
    assert (a.low < 1.0).all() and (a.high > 1.0).all()
    bk, why = best_of_k_vs_k(df, pcols)
    assert why is None and set(bk["protocol.num_samples"]) == {1, 2}
    es, why = encoder_sensitivity(df, pcols)
    assert why is None and len(es) == 4                           # 2 n_episodes x 2 K, one encoder pair
    assert np.allclose(es.kendall_tau, 1 / 3)                      # one of three pairs discordant
    assert all(p == ["a vs b"] for p in es.flipped_pairs)
    st, why = stability(df, pcols)
    fd_a = st[(st.metric == "fd") & (st.source == "a") & (st["encoder.name"] == "pixel")].iloc[0]
    assert fd_a.settings == 4 and fd_a.min_point == pytest.approx(1.375) and fd_a.max_point == pytest.approx(1.75)
    assert not fd_a.intervals_overlap                              # 1.75 - 0.1 > 1.375 + 0.1


def test_stability_orders_each_groups_settings_by_sample_count():
    """The fewest and the most samples' interval widths are each group's own, whatever the table's row order: with
    widths made distinct per setting and per model, and the rows shuffled, every group reads its widths at
    N x K = 4 (fewest) and 16 (most), and its own points."""
    df, pcols, _ = collect(_show(_grid()))
    size = df["protocol.n_episodes"].astype(float) * df["protocol.num_samples"].astype(float)
    offset = df.source.map({"a": 0.0, "b": 0.01, "c": 0.02}).astype(float)
    df = df.assign(low=df.point - 0.01 * size - offset, high=df.point + 0.01 * size + offset)
    st, why = stability(df.sample(frac=1.0, random_state=3), pcols)
    assert why is None and len(st) == 12                       # 2 encoders x 3 models x 2 metrics
    for _, r in st.iterrows():
        off = {"a": 0.0, "b": 0.01, "c": 0.02}[r.source]
        assert r.width_smallest == pytest.approx(2 * (0.04 + off)) and r.width_largest == pytest.approx(2 * (0.16 + off))
        own = df[(df.kind == "experiment") & (df.source == r.source) & (df.metric == r.metric)
                 & (df["encoder.name"] == r["encoder.name"])].point
        assert (r.min_point, r.max_point, r.settings) == (own.min(), own.max(), 4)


def test_report_sections_say_when_there_is_no_data(tmp_path):
    one = [r for r in _grid() if r[1]["encoder"]["name"] == "pixel" and r[1]["protocol"]["n_episodes"] == 4]
    df, pcols, skipped = collect(_show(one))
    html, md = render_sweep(df, pcols, skipped)
    assert "No data for this section: the experiments use 1 encoder(s)" in html
    assert "No data for this section: the experiments have 1 value(s) of protocol.n_episodes" in md
    assert "<script" not in html and not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)", html)
    files = sweep_report(tmp_path, tmp_path / "out", show=_show(_grid()))
    assert {f.name for f in files} >= {"sweep.parquet", "sweep.csv", "sweep.html", "sweep.md", "fd_vs_n.csv"}
    back = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert len(back) == len(collect(_show(_grid()))[0])
    assert "<svg" in (tmp_path / "out" / "sweep.html").read_text()


def test_mixed_type_param_column_is_written(tmp_path):
    runs = _grid()[:2]
    runs[0][1]["encoder"]["device"], runs[1][1]["encoder"]["device"] = "cpu", 0
    files = sweep_report(tmp_path, tmp_path / "out", show=_show(runs))
    back = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert set(back["encoder.device"]) == {"cpu", "0"} and files


def test_no_experiments_is_a_clear_error():
    show = _show(_grid()[:1])
    show[1]["experiments"] = [{"name": "queued-one", "executor": {"state": "queued"}, "revs": [
        {**_rev("queued-one", {}, {}), "data": None}]}]
    with pytest.raises(WmevalError, match="no DVC experiments with results.*queued-one: no data"):
        collect(show)


def test_cache_counters_persist_per_encoder_key(tmp_path):
    items = np.arange(4 * 3, dtype=np.uint8).reshape(4, 3)

    def enc(x):
        return x.astype(np.float32)

    for run, batch in enumerate((items, np.concatenate([items, items + 100]))):
        c = FeatureCache(tmp_path, "k1")
        before = c.stats.as_dict()
        c.embed(batch, enc)
        delta = {k: v - before[k] for k, v in c.stats.as_dict().items()}
        c.record(file=f"run{run}", **{f"file_{k}": v for k, v in delta.items()})
    assert read_counters(tmp_path, "k1") == {"rows": 12, "hits": 4, "embedded": 8, "corrupt_shards": 0,
                                             "records": 2}
    assert read_counters(tmp_path, "never") == {"rows": 0, "hits": 0, "embedded": 0, "corrupt_shards": 0,
                                                "records": 0}
    lines = [json.loads(x) for x in (tmp_path / "stats.jsonl").read_text().splitlines()]
    assert [x["file_embedded"] for x in lines] == [4, 4] and lines[0]["experiment"] is None
    assert lines[0]["workspace"] == os.getcwd()


# ----------------------------------------------------------------------------- the queued sweep (slow)

def _env(cache: Path) -> dict:
    # One BLAS/OpenMP thread per process: the FD bootstrap's threads oversubscribe 2 cores otherwise.
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "DVC_NO_ANALYTICS": "1",
            "WMEVAL_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}




@pytest.mark.slow
def test_queued_sweep_shares_the_cache_and_audits(tmp_path):
    dvc, wmeval = str(BIN / "dvc"), str(BIN / "wmeval")
    cache = tmp_path / "cache"
    env = _env(cache)
    proj = make_project(tmp_path / "proj", [])
    cfg = proj / "conf" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("protocol: default", "protocol: tiny")
                   .replace("dynamics: default", "dynamics: tiny").replace("bootstrap: percentile", "bootstrap: tiny")
                   .replace("worlds: [pendulum, blobs]", "worlds: [blobs]")
                   .replace("models: [pendulum, blobs]", "models: [blobs]"))
    (proj / "params.yaml").write_text(compose_text([], proj))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    _run([*git, "commit", "-qam", "tiny blobs"], proj, env)
    _run([dvc, "repro"], proj, env)
    _run([*git, "add", "-A"], proj, env)
    _run([*git, "commit", "-qm", "lock"], proj, env)

    # The README's commands: queue a grid, run it. The smallest grid that shows both the shared cache (K = 1 at
    # N = 4 rolls out the committed run's ground truth: num_samples changes only the models) and FD against 1/N
    # (two values of N at one K).
    _run([dvc, "exp", "run", "--queue", "-S", "protocol.num_samples=1", "-S", "protocol.n_episodes=4,6"], proj, env)
    # Two workers, as the README runs them: the experiments side by side. The asserted counts do not depend on
    # which finishes first: the N = 4 experiment's ground truth is all the baseline's (embedded before the queue
    # starts), and the N = 6 experiment's has episodes no run had (its rows the baseline also has are hits either
    # way). (The call returns once the workers have stopped: they hold its output pipes.)
    _run([dvc, "queue", "start", "-j", "2"], proj, env)
    deadline = time.time() + 600
    while True:
        status = _run([dvc, "queue", "status"], proj, env).stdout
        if not any(s in status for s in ("Queued", "Running")):
            break
        assert time.time() < deadline, status
        time.sleep(3)
    assert status.count("Success") == 2, status + _run([dvc, "queue", "logs", "-e"], proj, env, check=False).stderr

    # The tidy table: one block of rows per experiment, the swept params as columns.
    out = tmp_path / "sweep"
    _run([wmeval, "sweep", "--out", str(out)], proj, env)
    df = pd.read_parquet(out / "sweep.parquet")
    exps = df[df.kind == "experiment"]
    grid = exps.drop_duplicates("experiment")[["protocol.num_samples", "protocol.n_episodes"]]
    assert sorted(map(tuple, grid.to_numpy().tolist())) == [(1, 4), (1, 6)]
    sizes = exps.groupby("experiment").size()
    assert len(sizes) == 2 and (sizes > 100).all()
    assert {"world", "source", "metric", "condition", "point", "low", "high"} <= set(df.columns)
    html = (out / "sweep.html").read_text()
    assert "FD against 1/N" in html and "No data for this section: the experiments use 1 encoder(s)" in html
    assert (out / "sweep.md").read_text().startswith("# wmeval sweep")

    # The shared cache: an experiment whose ground-truth rollouts another run already embedded embeds none.
    lines = [json.loads(x) for x in (cache / "stats.jsonl").read_text().splitlines()]
    gt = [x for x in lines if x["file"] == "blobs/ground_truth.parquet"]
    names = dict(zip(exps.experiment, zip(exps["protocol.num_samples"], exps["protocol.n_episodes"])))
    by_n: dict = {}
    for x in sorted(gt, key=lambda x: x["time"]):
        n = 4 if x["experiment"] is None else names[x["experiment"]][1]   # None: the baseline `dvc repro`
        by_n.setdefault(n, []).append(x)
    assert sorted(by_n) == [4, 6] and len(by_n[4]) == 2 and len(by_n[6]) == 1, gt
    first, second = by_n[4]
    assert first["experiment"] is None and first["file_embedded"] > 0, by_n[4]    # the baseline embeds its rows
    assert second["file_embedded"] == 0 and second["file_hits"] == second["file_rows"] > 0, by_n[4]  # K = 1: none
    assert by_n[6][0]["file_embedded"] > 0, by_n[6]                               # N = 6: rows no run had
    key = gt[0]["encoder_key"]
    counters = read_counters(cache, key)
    same = [x for x in lines if x["encoder_key"] == key]
    for c in ("rows", "hits", "embedded"):
        assert counters[c] == sum(x[f"file_{c}"] for x in same)
    assert counters["records"] == len(same)

    # Audit: the workspace (the baseline run) traces to dvc.lock; then an experiment, applied.
    import yaml

    r = _run([wmeval, "audit", "blobs/reversed/fd_stratified", "--json"], proj, env)
    lin = json.loads(r.stdout)
    lock = yaml.safe_load((proj / "dvc.lock").read_text())
    outs = {o["path"]: o["md5"] for st in lock["stages"].values() for o in st["outs"]}
    assert [s["stage"] for s in lin["stages"]] == ["bootstrap", "statistics", "features", "rollouts"]
    assert lin["metrics_file"]["md5"] == lin["metrics_file"]["lock_md5"] == outs["reports/metrics.json"]
    for t in lin["feature_tables"] + lin["rollout_tables"]:
        cov = t["covered_by"]
        assert cov["md5"] == outs[cov["out"]] and cov["listed_md5"] == t["md5"], t
    assert [t["path"] for t in lin["feature_tables"]] == ["data/features/pixel/blobs/reversed.parquet",
                                                          "data/features/pixel/blobs/ground_truth.parquet"]
    assert lin["rollout_tables"][0]["metadata"]["model_config"]["mode"] == "reversed"
    text = _run([wmeval, "audit", "blobs/reversed/fd_stratified"], proj, env).stdout
    assert outs["data/features"] in text and "interval: percentile, B = 100" in text

    exp = exps[(exps["protocol.num_samples"] == 1) & (exps["protocol.n_episodes"] == 6)].experiment.iloc[0]
    _run([dvc, "exp", "apply", exp], proj, env)
    lin = json.loads(_run([wmeval, "audit", "blobs/reversed/fd_stratified", "--json"], proj, env).stdout)
    want = exps[(exps.experiment == exp) & (exps.source == "reversed") & (exps.metric == "fd_stratified")]
    assert {c["key"]: c["values"]["point"] for c in lin["conditions"]} == dict(zip(want.condition, want.point))
    assert lin["rollout_tables"][0]["metadata"]["protocol"]["n_episodes"] == 6

    # A hand-edited metrics file: refused, naming the file and both md5s.
    m = proj / "reports" / "metrics.json"
    expected = json.loads(_run([wmeval, "audit", "blobs/reversed/fd", "--json"], proj, env).stdout)[
        "metrics_file"]["lock_md5"]
    m.write_text(m.read_text().replace('"point": 0.', '"point": 9.', 1))
    r = _run([wmeval, "audit", "blobs/reversed/fd_stratified"], proj, env, check=False)
    assert r.returncode == 2 and "refusing to audit" in r.stderr
    assert "reports/metrics.json (out of stage 'bootstrap'): md5 " in r.stderr and f"dvc.lock expects {expected}" \
        in r.stderr


def test_a_withheld_interval_claims_neither_a_move_nor_noise():
    """A setting whose interval is missing (a bias-corrected FD withheld by its bias check: null in metrics.json)
    is left out of the stability check, and a flipped pair with a missing interval is not judged."""
    df, pcols, _ = collect(_show(_grid()))
    gone = (df.experiment == "pixel-4-1") & (df.source == "a") & (df.metric == "fd")
    df.loc[gone, ["low", "high"]] = np.nan
    st, _ = stability(df, pcols)
    fd_a = st[(st.metric == "fd") & (st.source == "a") & (st["encoder.name"] == "pixel")]
    assert fd_a.settings.tolist() == [3] and fd_a.min_point.iloc[0] == pytest.approx(1.375)   # 1.75 left out
    es, _ = encoder_sensitivity(df, pcols)
    row = es[(es["protocol.n_episodes"] == 4) & (es["protocol.num_samples"] == 1)].iloc[0]
    assert row.flipped_pairs == ["a vs b"] and row.flips_within_noise == [None]
    other = es[(es["protocol.n_episodes"] == 8) & (es["protocol.num_samples"] == 1)].iloc[0]
    assert other.flips_within_noise == [False]
    _, md = render_sweep(df, pcols, [])
    assert "protocol.num_samples=1 | other vs pixel | 3 | 0.3333 | a vs b (no interval) |" in md


def test_a_pair_an_ulp_apart_under_one_encoder_is_not_a_flip():
    """Models float64 does not tell apart under one encoder tie there (wmeval.metrics.registry.near_equal): their
    order under the other encoder is no flip."""
    df, pcols, _ = collect(_show(_grid()))
    setting = (df["protocol.n_episodes"] == 4) & (df["protocol.num_samples"] == 1) & (df.metric == "fd")
    pix = setting & (df["encoder.name"] == "pixel")
    other = setting & (df["encoder.name"] != "pixel")
    pa_, pb_ = (float(df.loc[other & (df.source == s), "point"].iloc[0]) for s in "ab")
    a = float(df.loc[pix & (df.source == "a"), "point"].iloc[0])
    # b an ulp from a under pixel, on the side opposite to the other encoder's order: a flip by sign alone
    df.loc[pix & (df.source == "b"), "point"] = np.nextafter(a, -np.inf if pb_ > pa_ else np.inf)
    es, _ = encoder_sensitivity(df, pcols)
    row = es[(es["protocol.n_episodes"] == 4) & (es["protocol.num_samples"] == 1)].iloc[0]
    assert row.flipped_pairs == [], row.flipped_pairs
