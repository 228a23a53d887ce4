"""The benchmarks' measuring pieces (benchmarks/*.py; the full runs are benchmarks, not tests)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    """A script under benchmarks/, loaded as a module (its main() not run)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name[:-3]}", ROOT / "benchmarks" / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _script("pipeline.py")


def test_the_pipeline_benchmark_copies_every_input_the_stages_depend_on(bench):
    """benchmarks/pipeline.py's project copy holds every dvc.yaml dep that no stage writes (the studies, the
    benchmark results the report cites and their code), each once (no path inside another one copied)."""
    import yaml

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    written = [o if isinstance(o, str) else next(iter(o)) for st in stages.values()
               for key in ("outs", "metrics", "plots") for o in st.get(key, [])]
    inputs = {d for st in stages.values() for d in st.get("deps", []) if not any(
        d == o or d.startswith(o + "/") for o in written)}
    assert {"studies", "benchmarks/results/direction_oracle.json", "benchmarks/coverage.py",
            "benchmarks/direction_oracle.py"} <= inputs
    # a file a stage writes (bootstrap's metrics output among them) is never copied in, whatever depends on it
    late = bench._inputs({**stages, "late": {"deps": ["reports/metrics.json", "data/rollouts", "studies"]}})
    assert "reports/metrics.json" not in late and "data/rollouts" not in late and "studies" in late

    def inside(p: str, q: str) -> bool:
        return p == q or p.startswith(q + "/")

    assert all(any(inside(d, p) for p in bench.PROJECT) for d in inputs)
    assert not any(inside(p, q) for p in bench.PROJECT for q in bench.PROJECT if p != q)
    assert all((ROOT / p).exists() for p in bench.PROJECT)


def test_a_stage_process_is_timed_and_its_own_peak_memory_read(bench, tmp_path):
    """Peak RSS is the stage process's own (os.wait4), so a process that holds 400 MB reads above that and a
    bare interpreter far below; a failing process stops the benchmark with its stderr."""
    env = dict(os.environ)
    big = bench.run_process([sys.executable, "-c", "import numpy as np; a = np.ones(50_000_000); a.sum()"],
                            tmp_path, env)
    small = bench.run_process([sys.executable, "-c", "pass"], tmp_path, env)
    assert big["peak_rss_mb"] > 380 > small["peak_rss_mb"] and big["wall_s"] > 0
    with pytest.raises(SystemExit, match="boom"):
        bench.run_process([sys.executable, "-c", "raise SystemExit('boom')"], tmp_path, env)


def test_start_up_floor_runs_exactly_the_stage_imports(bench):
    for stage in bench.STAGES:
        code = bench.stage_imports(stage)
        compile(code, stage, "exec")
        assert "wmeval" in code and "def " not in code and "run(" not in code


def test_a_jackknifed_replicate_of_the_data_itself_is_the_shipped_bias_corrected_fd():
    """benchmarks/fd_replicate_spread.py's jackknifed replicate: on multiplicities all 1 (no copies) its delete-a-group
    jackknife over the held episodes is the delete-one jackknife, so it must equal distribution_bootstrap's
    bias-corrected FD; and a resample is jackknifed over the episodes it holds, an episode drawn twice deleted once
    (both copies), one not drawn not at all."""
    import numpy as np

    from wmeval.estimators import distributional as dist
    from wmeval.stats import distribution_bootstrap

    mod = _script("fd_replicate_spread.py")
    rng = np.random.default_rng(3)
    ep = np.repeat(np.arange(12), 5)
    x, y = rng.normal(size=(60, 3)), rng.normal(size=(60, 3)) + 0.2
    for fake_ids in (ep, ep + 12):                     # paired, then independent sides
        inv_r, inv_f, group = dist._cluster_index(ep, fake_ids)
        one = dist._ViewFD.of(dist.ViewSets("frame", dist.Side(x, inv_r, np.full(60, "all")),
                                            {"fake": dist.Side(y, inv_f, np.full(60, "all"))}, []), len(group))
        ones = np.ones((1, len(group)), np.int64)
        got, evaluations = mod._jackknifed(one, ones, group, one.many(ones)[:, 0, 0])
        want = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=fake_ids, metric="fd_bias_corrected",
                                      n_resamples=2 * len(group) + 3).point
        assert got[0] == pytest.approx(want, rel=1e-9, abs=1e-12) and evaluations == len(group)
        twice = ones.copy()
        twice[0, 0], twice[0, 1] = 2, 0                # episode 0 drawn twice, episode 1 not at all
        base = one.many(twice)[:, 0, 0]
        got, evaluations = mod._jackknifed(one, twice, group, base)
        assert evaluations == len(group) - 1 and np.isfinite(got[0]) and got[0] != base[0]


def test_the_fd_second_order_form_is_the_fd_near_equal_sets_and_its_self_terms_are_the_jackknifes_bias():
    """benchmarks/fd_replicate_spread.py's copy-free replicates subtract self-pair terms from the FD's second-order
    form: the form's full square must be the FD of two large samples of one distribution (a wrong Bures weight, a
    factor 2, would miss it by 2x), and the self-pair terms' sum the jackknife's bias estimate, which removes them."""
    import numpy as np

    from wmeval.estimators import distributional as dist
    from wmeval.metrics import frechet_distance
    from wmeval.stats import distribution_bootstrap

    mod = _script("fd_replicate_spread.py")
    rng = np.random.default_rng(5)
    scale = np.diag([0.5, 1.0, 2.0])
    x, y = rng.normal(size=(20000, 3)) @ scale, rng.normal(size=(20000, 3)) @ scale
    ep = np.repeat(np.arange(40), 500)
    inv_r, inv_f, group = dist._cluster_index(ep, ep + 40)
    means, covs, weights = mod.second_order_parts(x, y, inv_r, inv_f, len(group))
    m, c = means.sum(axis=0), covs.sum(axis=0)
    form = float(m @ m + np.sum(c * c * weights))
    fd = frechet_distance(x.mean(0), np.cov(x.T), y.mean(0), np.cov(y.T))
    assert form == pytest.approx(fd, rel=0.03)
    sums, biases = [], []
    for seed in range(4):
        r = np.random.default_rng(seed)
        ep = np.repeat(np.arange(24), 8)
        x, y = r.normal(size=(192, 3)) @ scale, r.normal(size=(192, 3)) @ scale
        for fake_ids in (ep, ep + 24):
            inv_r, inv_f, group = dist._cluster_index(ep, fake_ids)
            sums.append(mod.self_terms(x, y, inv_r, inv_f, len(group)).sum())
            res = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=fake_ids, n_resamples=100,
                                         metric="fd_bias_corrected")
            plug = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=fake_ids, n_resamples=100,
                                          metric="fd").point
            biases.append(plug - res.point)
    assert np.mean(sums) == pytest.approx(np.mean(biases), rel=0.1)


def test_half_sampling_holds_half_of_each_resampling_group_once():
    """benchmarks/fd_half_sampling.py's replicates draw without replacement: 0/1 multiplicities, n_g // 2 of each
    group's clusters in every row (a bootstrap draw, or halving the whole index, would break one or the other), and
    every cluster in about half of the rows."""
    mod = _script("fd_half_sampling.py")
    group = np.array([0] * 9 + [1] * 6)
    counts = mod.half_counts(group, 400, np.random.default_rng(0))
    assert set(np.unique(counts)) == {0, 1}
    assert (counts[:, group == 0].sum(axis=1) == 4).all() and (counts[:, group == 1].sum(axis=1) == 3).all()
    share = counts.mean(axis=0)
    assert np.allclose(share[group == 0], 4 / 9, atol=0.08) and np.allclose(share[group == 1], 0.5, atol=0.08)
    assert len({tuple(r) for r in counts}) > 300


def test_a_permutation_is_the_fd_of_the_rows_it_deals_to_each_side():
    """benchmarks/fd_half_sampling.py's permuted sets: the FD under each permutation's multiplicities equals the FD
    of the rows dealt by hand (numpy moments), with paired sides each episode's real and generated rows swapped
    together, with independent ones whole episodes dealt, each side keeping its size; row 0 is the data itself."""
    from wmeval.estimators import distributional as dist
    from wmeval.metrics import frechet_distance

    mod = _script("fd_half_sampling.py")
    rng = np.random.default_rng(4)
    n, t = 6, 4
    ep = np.repeat(np.arange(n), t)
    x, y = rng.normal(size=(n * t, 3)), rng.normal(size=(n * t, 3)) + 0.3

    def fd(a, b):
        return frechet_distance(a.mean(0), np.cov(a.T), b.mean(0), np.cov(b.T))

    for paired in (True, False):
        sets, counts = mod.permutation_sets(x, y, ep, ep, paired, 8, np.random.default_rng(1))
        got = dist._ViewFD.of(sets, counts.shape[1]).many(counts)[:, 0, 0]
        assert got[0] == pytest.approx(fd(x, y), rel=1e-9)
        real = counts[:, :counts.shape[1] // 2]
        assert (real.sum(axis=1) == n).all()
        for p in range(1, 8):
            if paired:
                swap = real[p, n:][ep][:, None] == 1
                want = fd(np.where(swap, y, x), np.where(swap, x, y))
            else:
                rows, unit = np.concatenate([x, y]), np.concatenate([ep, ep + n])
                want = fd(rows[real[p, unit] == 1], rows[real[p, unit] == 0])
            assert got[p] == pytest.approx(want, rel=1e-9)
        assert len({tuple(r) for r in real}) > 4


def test_half_sampling_benchmark_rejects_a_large_shift_and_its_bootstrap_is_the_shipped_interval(monkeypatch):
    """One data set of benchmarks/fd_half_sampling.py at a large shift: the permutation test's p-value is its
    smallest, 1 / permutations, and both intervals lie above 0; on the same resampling counts its bootstrap interval
    is distribution_bootstrap's bias-corrected FD interval (the same replicates, centring and boundary interval), and
    its half-sampling interval is built on half_counts' draws."""
    from wmeval.estimators import distributional as dist
    from wmeval.estimators import resample
    from wmeval.stats import distribution_bootstrap

    mod = _script("fd_half_sampling.py")
    real_counts, real_half, calls = resample.cluster_counts, mod.half_counts, []
    fixed = real_counts(np.arange(10), np.zeros(10, np.int64), 10, 40, np.random.default_rng(9))

    def same_counts(*args, **kwargs):
        return fixed

    def recorded_half(group, n_resamples, rng):
        calls.append((tuple(group), n_resamples))
        return real_half(group, n_resamples, rng)

    monkeypatch.setattr(resample, "cluster_counts", same_counts)
    monkeypatch.setattr(dist, "cluster_counts", same_counts)
    monkeypatch.setattr(mod, "half_counts", recorded_half)
    job = (2, "paired", "large", 3.0, 0, 0, 10, 4, 0.5, 40, 50, 0)
    row = mod._dataset(job)
    assert row["truth"] == pytest.approx(9.0) and row["p_value"] == pytest.approx(1 / 50)
    assert len(calls) == 1 and len(calls[0][0]) == 10 and calls[0][1] == 40      # one draw, over the 10 episodes
    for name in mod.INTERVALS:
        lo, hi = row[name][:2]
        assert 0 < lo < hi
    x, y, ep, _, _ = mod.data_set(job)                      # the data set _dataset drew
    want = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=ep, metric="fd_bias_corrected",
                                  n_resamples=40)
    assert row["point"] == pytest.approx(want.point, rel=1e-9)
    assert row["bootstrap"][:2] == pytest.approx((want.low, want.high), rel=1e-9)


def test_half_sampling_cell_summary_counts_each_interval_and_its_hybrid():
    """benchmarks/fd_half_sampling.py's cell summary: coverage over all data sets and over those the check passes,
    the share above 0, the width over a normal interval of the estimates' spread, the permutation test's rejections,
    and each hybrid (0 put in where the test accepts it, taken out where it rejects)."""
    mod = _script("fd_half_sampling.py")
    rows = [{"truth": 1.0, "point": 1.2, "p_value": 0.5, "bootstrap": (0.5, 1.5, False, 0.1),
             "half": (1.1, 1.4, True, 0.1)},
            {"truth": 1.0, "point": 0.8, "p_value": 0.01, "bootstrap": (-0.2, 0.9, False, 0.1),
             "half": (0.6, 1.2, False, 0.1)},
            {"truth": 1.0, "point": 1.0, "p_value": 0.01, "bootstrap": (0.7, 0.95, True, 0.1),
             "half": (-0.1, 0.8, False, 0.1)}]
    cell = mod.cell_summary(rows)
    sd = np.std([1.2, 0.8, 1.0])
    assert cell["permutation_rejects"] == pytest.approx(2 / 3) and cell["estimate_sd"] == pytest.approx(sd)
    boot, half = cell["bootstrap"], cell["half"]
    assert boot["coverage"] == pytest.approx(1 / 3) and boot["coverage_given"] == pytest.approx(1 / 2)
    assert half["coverage"] == pytest.approx(1 / 3) and half["coverage_given"] == pytest.approx(1 / 2)
    assert boot["above_0"] == pytest.approx(2 / 3) and half["above_0"] == pytest.approx(2 / 3)
    assert boot["below"] == pytest.approx(2 / 3) and half["above"] == pytest.approx(1 / 3)
    assert boot["check_fails"] == pytest.approx(1 / 3) and half["check_fails"] == pytest.approx(1 / 3)
    assert boot["width_ratio"] == pytest.approx(np.mean([1.0, 1.1, 0.25]) / (2 * 1.959964 * sd))
    # hybrids: row 0 accepts 0 (its interval stretched to 0), rows 1 and 2 reject it (lower end just above 0)
    assert cell["bootstrap+permutation"] == pytest.approx({"coverage": 1 / 3, "above_0": 2 / 3})
    assert cell["half+permutation"] == pytest.approx({"coverage": 2 / 3, "above_0": 2 / 3})
    assert mod.hybrid(0.5, 2.0, True) == (0.0, 2.0) and mod.hybrid(-0.5, 2.0, False)[0] > 0
    assert np.isnan(mod.hybrid(-0.5, -0.1, False)[0])


def test_coverage_reruns_of_one_metric_keep_the_others_cells_in_place():
    """benchmarks/coverage.py --only sets --set-metrics kid: a part's KID cells are replaced, its FD cells kept from
    the previous results, in their order; a part new to the file is taken whole."""
    mod = _script("coverage.py")

    def cell(metric, truth, design, cov):
        return {"metric": metric, "truth": truth, "design": design, "coverage": cov}

    old = {"sets": {"datasets": 400, "cells": [cell("kid", "zero", "paired", 0.9), cell("fd_bias_corrected", "zero",
                                                                                         "paired", 0.8),
                                               cell("kid", "shift", "paired", 0.7)]}}
    new = {"sets": {"datasets": 400, "cells": [cell("kid", "zero", "paired", 0.91), cell("kid", "shift", "paired", 0.95)]},
           "sets_mid": {"datasets": 400, "cells": [cell("kid", "zero", "paired", 0.5)]}}
    out = mod.merge_metrics(old, new, ["kid"])
    assert [c["coverage"] for c in out["sets"]["cells"]] == [0.91, 0.8, 0.95]
    assert out["sets_mid"] == new["sets_mid"]
    assert mod.merge_metrics(old, new, ["kid", "fd_bias_corrected"])["sets"] == new["sets"]



def test_coverage_confirm_reruns_each_flagged_cell_on_fresh_data_sets_of_its_own_design():
    """benchmarks/coverage.py --only confirm: each cell outside 93-97% beyond chance on its screen is rerun on data
    sets from the part's count on (none of the screen's), with the part's stored design rather than the command
    line's; its figures are those of _set_dataset on exactly those data sets, stamped with the screen's figures."""
    import argparse

    mod = _script("coverage.py")
    part = {"dim": 3, "episodes": 5, "frames_per_episode": 3, "rho": 0.3, "shift": 0.8, "datasets": 400,
            "n_resamples": 40, "cells": [
                {"metric": "kid", "truth": "shift", "design": "unpaired", "coverage": 0.85, "width_ratio": 0.9,
                 "withheld": 0.0, "power": 0.5},                              # too narrow on its screen
                {"metric": "kid", "truth": "zero", "design": "paired", "coverage": 0.95, "width_ratio": 1.0,
                 "withheld": 0.0, "false_positive_rate": 0.05}]}             # within 93-97%: not rerun
    high = {**part, "shift_axis_variance": 2.0, "cells": [{**part["cells"][0], "coverage": 0.995}]}
    # a part of 150 data sets, its flagged cell the FD's at a true 0 with paired sides
    wide = {**part, "dim": 2, "datasets": 150, "cells": [{
        "metric": "fd_bias_corrected", "truth": "zero", "design": "paired", "coverage": 1.0, "width_ratio": 0.9,
        "withheld": 0.0, "false_positive_rate": 0.0}, {**part["cells"][0], "coverage": 0.96}]}
    args = argparse.Namespace(jobs=1, confirm_datasets=4, seed=0, set_dim=4, set_episodes=32, set_frames=10,
                              set_rho=0.5, set_shift=0.5, set_resamples=500, set_datasets=400,
                              set_metrics=["kid", "fd_bias_corrected"])
    got = mod.confirm(args, {"sets": part, "sets_wide": wide, "sets_high_axis": high})
    expected = [("sets", "kid", "shift", "unpaired", 0, 3, 400, 0.85, "too narrow"),
                ("sets_wide", "fd_bias_corrected", "zero", "paired", 0, 2, 150, 1.0, "too wide"),
                ("sets_high_axis", "kid", "shift", "unpaired", -1, 3, 400, 0.995, "too wide")]
    assert [(c["part"], c["metric"], c["truth"], c["design"]) for c in got["cells"]] == [e[:4] for e in expected]
    for c, (_, metric, truth, design, axis, dim, first, screen, side) in zip(got["cells"], expected):
        assert c["first_dataset"] == first and c["datasets"] == 4
        assert c["screen"] == {"coverage": screen, "width_ratio": 0.9, "datasets": first, "side": side}
        run = argparse.Namespace(**{**vars(args), "set_dim": dim, "set_episodes": 5, "set_frames": 3, "set_rho": 0.3,
                                    "set_shift": 0.8, "set_resamples": 40, "set_shift_axis": axis,
                                    "set_metrics": [metric]})
        truths = {t[0]: t for t in mod._set_truths(run)}
        _, delta, values = truths[truth]
        assert c["true_value"] == values[metric] and delta[axis] == (0.8 if truth == "shift" else 0.0)

        def recount(start):
            res = [mod._set_dataset((run, truth, delta, design, i, values)) for i in range(start, start + 4)]
            return mod._cell_summary(res, metric, truth, values[metric], design)

        fresh = recount(first)
        assert {k: c[k] for k in fresh} == fresh
        assert recount(0)["mean_point"] != c["mean_point"]            # not the screen's data sets

def test_coverage_run_stamp_records_the_code_its_figures_come_from():
    """A run's stamp holds the sha256 of coverage.py and of every wmeval module it imports (not its bookkeeping:
    the scorecard, the digest), under a key that is the stamp's own digest; a file changed while the run went on
    stops it, naming the file; the runs kept in the file are those its figures carry."""
    import hashlib
    import json

    from wmeval.core.digest import file_sha256

    mod = _script("coverage.py")
    key, stamp = mod.run_stamp(["--only", "sets"])
    assert key == hashlib.sha256(json.dumps(stamp, sort_keys=True).encode()).hexdigest()[:12]
    assert stamp["command"] == "python benchmarks/coverage.py --only sets"
    for rel in ("benchmarks/coverage.py", "src/wmeval/estimators/resample.py", "src/wmeval/stats.py",
                "src/wmeval/metrics/frechet.py", "src/wmeval/core/rng.py"):
        assert stamp["code"][rel] == file_sha256(ROOT / rel), rel
    assert not any(rel.startswith(("src/wmeval/report", "src/wmeval/lineage")) or rel == "src/wmeval/core/digest.py"
                   for rel in stamp["code"])
    assert stamp["packages"]["numpy"] == np.__version__ and stamp["kernels"]["blas"] is not None
    mod.check_code_unchanged(stamp)                                   # nothing changed: no exit
    with pytest.raises(SystemExit, match="src/wmeval/stats.py changed while the run went on"):
        mod.check_code_unchanged({**stamp, "code": {**stamp["code"], "src/wmeval/stats.py": "0" * 64}})

    tagged = mod._tagged({"sets": {"datasets": 4, "cells": [{"metric": "kid"}, {"metric": "fd_bias_corrected"}]}}, "k2")
    assert [c["run"] for c in tagged["sets"]["cells"]] == ["k2", "k2"]
    old = {"runs": {"k0": {"date": "a"}, "k1": {"date": "b"}}}
    res = {"run": "k1", "frechet": {"run": "k1"}, **tagged, "confirmation": {"run": "k2", "cells": [{"part": "sets"}]}}
    out = mod.with_runs(res, old, "k2", {"date": "c"})
    assert out["runs"] == {"k1": {"date": "b"}, "k2": {"date": "c"}}       # k0: no figure carries it any more
    assert {k: v for k, v in out.items() if k != "runs"} == res
    # a run only a part's own stamp carries (--only confirm's, --only bias') is kept
    for part in ("confirmation", "fd_bias", "frechet"):
        only = {"run": "k1", part: {"run": "k2", "cells": []}}
        assert set(mod.with_runs(only, old, "k2", {"date": "c"})["runs"]) == {"k1", "k2"}, part


def test_coverage_writes_nothing_when_its_code_changed_while_it_ran(tmp_path, monkeypatch):
    """main(): where the code it recorded at its start differs at its end, it exits naming the files and leaves
    the results file as it was."""
    import wmeval.core.digest as digest

    mod = _script("coverage.py")
    out = tmp_path / "coverage.json"
    out.write_text('{"before": true}\n')
    monkeypatch.setattr(digest, "changed_files", lambda code, root=None: ["src/wmeval/stats.py"])
    monkeypatch.setattr(sys, "argv", ["coverage.py", "--only", "bias", "--bias-datasets", "1", "--set-episodes", "4",
                                      "--set-frames", "3", "--jobs", "1", "--out", str(out)])
    monkeypatch.setattr(mod, "fd_bias", lambda args: {"dims": []})
    with pytest.raises(SystemExit, match="src/wmeval/stats.py changed while the run went on"):
        mod.main()
    assert out.read_text() == '{"before": true}\n'


def test_coverage_confirm_refuses_a_screen_computed_with_code_that_has_changed():
    """--only confirm on a flagged cell whose screen's run recorded other code stops before any rerun, naming the
    changed file: its rerun would test other intervals than the screen's."""
    import argparse

    mod = _script("coverage.py")
    key, stamp = mod.run_stamp([])
    part = {"dim": 3, "episodes": 5, "frames_per_episode": 3, "rho": 0.3, "shift": 0.8, "datasets": 400,
            "n_resamples": 40, "cells": [{"metric": "kid", "truth": "shift", "design": "unpaired", "coverage": 0.85,
                                          "width_ratio": 0.9, "withheld": 0.0, "power": 0.5, "run": key}]}
    args = argparse.Namespace(jobs=1, confirm_datasets=1, seed=0)
    other = {**stamp, "code": {**stamp["code"], "src/wmeval/estimators/resample.py": "0" * 64}}
    with pytest.raises(SystemExit, match="src/wmeval/estimators/resample.py"):
        mod.confirm(args, {"sets": part, "runs": {key: other}})


def test_coverage_runs_stamp_every_figure_and_a_partial_rerun_keeps_the_others_runs(tmp_path):
    """Two tiny runs of the script: the first stamps every figure with its run; ``--only sets --set-metrics kid``
    then stamps the KID cells with a second run and keeps the FD cells' (and every other figure's) first, and the
    file holds both runs' records."""
    import json
    import subprocess

    out = tmp_path / "coverage.json"
    tiny = ["--datasets", "2", "--resamples", "20", "--fd-datasets", "2", "--fd-resamples", "10", "--set-datasets", "2",
            "--set-resamples", "30", "--set-episodes", "6", "--set-more-episodes", "0", "--set-mid-dim", "0",
            "--set-wide-dim", "0", "--bias-datasets", "2", "--jobs", "1", "--out", str(out)]
    script = str(ROOT / "benchmarks" / "coverage.py")
    subprocess.run([sys.executable, script, *tiny], check=True, capture_output=True)
    first = json.loads(out.read_text())
    (k1,) = first["runs"]
    cells = [c for key in ("sets", "sets_high_axis") for c in first[key]["cells"]]
    assert {first["run"], first["frechet"]["run"], first["fd_bias"]["run"], *(c["run"] for c in cells)} == {k1}
    assert first["runs"][k1]["command"].endswith(" ".join(tiny[-4:]))
    subprocess.run([sys.executable, script, *tiny, "--only", "sets", "--set-metrics", "kid"], check=True,
                   capture_output=True)
    second = json.loads(out.read_text())
    (k2,) = set(second["runs"]) - {k1}
    for key in ("sets", "sets_high_axis"):
        assert {(c["metric"], c["run"]) for c in second[key]["cells"]} == {("kid", k2), ("fd_bias_corrected", k1)}
    assert second["run"] == second["frechet"]["run"] == second["fd_bias"]["run"] == k1


def test_kid_switch_rules_are_compared_on_the_dumped_data_sets(tmp_path):
    """kid_interval_variants.py --compare-rules: per cell, the share of data sets whose chosen interval holds the
    truth; z > 2 takes the bootstrap-t only where the point is over 2 standard errors above 0."""
    import json

    mod = _script("kid_interval_variants.py")
    rows = [{"dim": 4, "episodes": 32, "shift": 0.5, "axis": -1, "design": "paired", "truth": 1.0, "point": p,
             "se": 0.1, "linear_share": 0.5, "bounds": {"boundary": b, "bootstrap_t": t, "hybrid": b}}
            for p, b, t in ((1.0, (0.9, 1.1), (1.2, 1.3)),      # z = 10: the bootstrap-t, which misses
                            (0.15, (0.0, 2.0), (1.5, 1.6)))]    # z = 1.5: the boundary interval, which covers
    dump = tmp_path / "d.jsonl"
    dump.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (cell,) = mod.compare_rules([str(dump)])["cells"]
    assert cell["coverage"]["boundary"] == 1.0 and cell["coverage"]["bootstrap_t"] == 0.0
    assert cell["coverage"]["z > 2"] == 0.5 and cell["coverage"]["union if z > 2"] == 1.0


def test_double_bootstrap_inner_resamples_draw_from_each_replicate():
    """kid_interval_variants.inner_counts: each inner resample draws every group's n_g episodes from its replicate's
    multiset: group sizes kept, an episode absent from the replicate never drawn, and on average the replicate's
    own multiplicities."""
    from wmeval.core.rng import make_rng
    from wmeval.estimators.resample import cluster_counts

    mod = _script("kid_interval_variants.py")
    group = np.repeat([0, 1], [5, 7])
    counts = cluster_counts(np.arange(12), group, 12, 6, make_rng(0, "outer"))
    inner = mod.inner_counts(counts, group, 4000, make_rng(0, "inner"))
    assert inner.shape == (4000, 6, 12)
    assert (inner[..., :5].sum(axis=2) == 5).all() and (inner[..., 5:].sum(axis=2) == 7).all()
    assert (inner[:, counts == 0] == 0).all()
    np.testing.assert_allclose(inner.mean(axis=0), counts, atol=0.1)


def test_double_bootstrap_calibration_corrects_a_skewed_mean():
    """kid_interval_variants.calibrated_percentile on the mean of 12 exponential draws (true mean 1), where the
    percentile interval is too narrow on the right: the calibrated levels move its upper end out on average, and it
    covers more often (by 4.0-9.3 points over 10 other runs of 150 data sets; reversed levels, p_b taken as the
    share above the estimate, or no calibration fail)."""
    from wmeval.estimators.resample import cluster_counts

    mod = _script("kid_interval_variants.py")
    n, hits = 12, []
    for i in range(150):
        rng = np.random.default_rng(i)
        x = rng.exponential(size=n)

        def at(c, x=x):
            return c @ x / c.sum(axis=1)

        counts = cluster_counts(np.arange(n), None, n, 300, rng)
        reps = at(counts.astype(float))
        lo, hi = np.quantile(reps, [0.025, 0.975])
        clo, chi = mod.calibrated_percentile(at, float(x.mean()), reps, counts, np.zeros(n, int), 60, rng)
        assert clo < chi
        hits.append((lo <= 1.0 <= hi, clo <= 1.0 <= chi, chi - hi))
    percentile, calibrated, upper_shift = np.mean(hits, axis=0)
    assert upper_shift > 0 and calibrated >= percentile + 0.02, (percentile, calibrated, upper_shift)


def test_direction_oracle_noise_is_the_covariance_of_coverage_designs_mean_difference():
    """benchmarks/direction_oracle.py's S must be the covariance of the difference of the two sides' episode-mean
    averages as benchmarks/coverage.py draws them (shared episode latent when paired): checked by simulation."""
    oracle = _script("direction_oracle.py")
    d, n, t, rho = 3, 8, 5, 0.5
    chol = np.linalg.cholesky(np.diag(np.linspace(0.5, 2.0, d)))
    rng = np.random.default_rng(0)
    for design in ("paired", "unpaired"):
        diffs = []
        for _ in range(6000):
            a = rng.normal(size=(n, d))
            b = a if design == "paired" else rng.normal(size=(n, d))
            ep = np.repeat(np.arange(n), t)
            x = (np.sqrt(rho) * a[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
            y = (np.sqrt(rho) * b[ep] + np.sqrt(1 - rho) * rng.normal(size=(n * t, d))) @ chol.T
            diffs.append(y.mean(axis=0) - x.mean(axis=0))
        got = np.var(np.array(diffs), axis=0)
        want = oracle.noise_variances(d, n, t, rho, design)
        np.testing.assert_allclose(got, want, rtol=0.08)


def test_direction_oracle_restricted_direction_minimizes_the_mahalanobis_distance_on_the_sphere():
    """The restricted estimate is the point of |x|^2 = theta closest to dh in S^-1: no point of a dense sample of
    the sphere is closer (a formula with S in place of S^-1, or with the raw dh's direction, fails this)."""
    oracle = _script("direction_oracle.py")
    rng = np.random.default_rng(1)
    lam = np.array([0.3, 1.0, 3.0])
    sphere = rng.normal(size=(200_000, 3))
    sphere /= np.linalg.norm(sphere, axis=1, keepdims=True)
    for _ in range(5):
        dh = rng.normal(size=3) * 1.5
        for theta in (0.05, 1.0, 6.0):
            x = np.sqrt(theta) * oracle.restricted_direction(dh, lam, np.array([theta]))[0]
            obj = np.sum((dh - x) ** 2 / lam)
            others = np.sum((dh[None] - np.sqrt(theta) * sphere) ** 2 / lam[None], axis=1)
            assert obj <= others.min() + 1e-9
            assert obj < np.sum((dh - np.sqrt(theta) * dh / np.linalg.norm(dh)) ** 2 / lam) - 1e-6


def test_direction_oracle_test_has_its_level_along_the_true_direction():
    """With the true direction, the oracle's test accepts the true theta in 95% of draws of dh: along the highest-
    variance axis at a large shift, where the linear term carries most of T's spread (a linear term of half its
    size accepts about 68%), and at a small shift along the lowest axis, where the degenerate part does."""
    oracle = _script("direction_oracle.py")
    lam = oracle.noise_variances(4, 32, 10, 0.5, "unpaired")
    rng = np.random.default_rng(2)
    test = oracle.Test(lam, 8000, rng)
    for axis, size in ((3, 1.5), (0, 0.5)):
        e = np.eye(4)[axis]
        delta = size * e
        theta = np.array([size * size])
        hits = 0
        k = 2000
        for _ in range(k):
            dh = delta + rng.normal(size=4) * np.sqrt(lam)
            hits += bool(test.accepts(float(dh @ dh - lam.sum()), theta, e[None])[0])
        assert abs(hits / k - 0.95) < 3.5 * np.sqrt(0.95 * 0.05 / k)


def test_direction_oracle_interval_is_the_hull_of_a_dense_scan_and_reaches_0_as_the_shipped_test():
    """Test.interval against a brute-force scan of 6000 candidate distances: its ends are the first and last accepted
    (to the scan's spacing), and its lower end is 0 wherever T is not too high for a distance of 0 (T below the
    degenerate part's 97.5% quantile), as the shipped test's (a lower end fixed at 0, or always the first accepted
    distance, fails)."""
    oracle = _script("direction_oracle.py")
    lam = oracle.noise_variances(4, 32, 10, 0.5, "unpaired")
    test = oracle.Test(lam, 4000, np.random.default_rng(3))
    q_hi0 = np.quantile(test.deg, 0.975)
    checked_low_zero = checked_low_positive = 0
    for t, axis in ((-0.1, 0), (0.05, 0), (0.3, 3), (0.9, 0), (2.4, 3), (3.0, 0)):
        e = np.eye(4)[axis]
        low, high = test.interval(t, lambda th: np.repeat(e[None], len(th), axis=0))
        grid = np.linspace(0.0, 12.0, 6001)
        acc = test.accepts(t, grid, np.repeat(e[None], len(grid), axis=0))
        assert acc.any() and not acc[-1]
        step = grid[1] - grid[0]
        assert abs(high - grid[acc].max()) <= step
        if t <= q_hi0:
            assert low == 0.0
            checked_low_zero += 1
        else:
            assert abs(low - grid[acc].min()) <= step and low > 0
            checked_low_positive += 1
    assert checked_low_zero >= 2 and checked_low_positive >= 2
    # T just below what a distance of 0 allows from below, along a direction where a small positive distance is
    # accepted: the shipped test's lower end is its basic interval's at 0 (below 0), not that positive distance.
    e = np.array([0.395, -0.243, 0.717, -0.52])
    e /= np.linalg.norm(e)
    t = float(np.quantile(test.deg, 0.025)) - 0.0005
    grid = np.linspace(0.0, 1.0, 1001)
    acc = test.accepts(t, grid, np.repeat(e[None], len(grid), axis=0))
    assert not acc[0] and acc.any()
    assert test.interval(t, lambda th: np.repeat(e[None], len(th), axis=0))[0] == 0.0


def test_direction_oracle_raised_upper_end_is_boundary_intervals_rule_on_its_replicates():
    """The oracle's upper-end rule equals boundary_interval's, the replicates' 97.5% quantile recentred on the
    estimate (q_hi + 2 (center - mean)), on replicates T + 2 dh'z + |z|^2 - tr S, up to their sample mean."""
    oracle = _script("direction_oracle.py")
    lam = oracle.noise_variances(4, 32, 10, 0.5, "unpaired")
    test = oracle.Test(lam, 8000, np.random.default_rng(4))
    dh = np.array([0.5, 0.1, -0.2, 0.3])
    t = float(dh @ dh - lam.sum())
    reps = t + 2.0 * (test.z @ dh) + test.deg
    shipped = np.quantile(reps, 0.975) + 2.0 * (t - reps.mean())
    raised = test.raised(t, dh, 1e-9)
    assert abs(raised - shipped) <= 2.0 * abs(reps.mean() - t) + 1e-12
    assert raised > t + 0.1                      # the 97.5% quantile, not the 2.5% (below t)
    assert test.raised(t, dh, 10.0) == 10.0 and np.isnan(test.raised(t, dh, float("nan")))


def test_direction_oracle_cell_counts_each_rules_intervals():
    """_cell's coverage and power are the shares of its data sets' intervals (intervals(), replayed on the same
    random stream) that contain the truth and lie above 0."""
    oracle = _script("direction_oracle.py")
    job = (4, 32, 10, 0.5, "unpaired", "shift", 0, 0.5, 30, 600, 7)
    got = oracle._cell(job)
    d, episodes, frames, rho, design, truth, axis, size, datasets, draws, seed = job
    lam = oracle.noise_variances(d, episodes, frames, rho, design)
    rng = np.random.default_rng([seed, d, episodes, 0, axis, 50])
    test = oracle.Test(lam, draws, rng)
    delta = np.eye(d)[axis] * size
    hits = {r: 0 for r in oracle.RULES}
    above = {r: 0 for r in oracle.RULES}
    for _ in range(datasets):
        dh = delta + rng.normal(size=d) * np.sqrt(lam)
        for rule, (low, high) in oracle.intervals(test, dh, np.eye(d)[axis]).items():
            hits[rule] += bool(low <= size * size <= high)
            above[rule] += bool(low > 0)
    for rule in oracle.RULES:
        assert got[rule] == {"coverage": hits[rule] / datasets, "power": above[rule] / datasets}
    assert 0 < got["known"]["coverage"] <= 1 and got["worst"]["coverage"] >= got["known"]["coverage"] - 0.2


def test_sign_flip_benchmark_data_its_marginal_model_and_its_schemes():
    """benchmarks/fd_sign_flip.py: the ``marginal`` model reverses each history's action effect yet matches the
    realized futures over the histories (pooled FD near 0 where each group's own difference is large); ``invalid``
    leaves out the model's last 2 steps in half the groups, whose realized rows the test then leaves out too; the
    schemes are the shipped sign flip and the one-by-one deal within each group."""
    from wmeval.estimators.distributional import Exchange

    mod = _script("fd_sign_flip.py")
    rng = np.random.default_rng(0)
    ref, model = mod.data_set(rng, 400, 1, 1, 5, 0.7, "marginal")
    group_diff = [model.x[model.episode == g, 0].mean() - ref.x[ref.episode == g, 0].mean() for g in range(400)]
    assert np.mean(np.abs(group_diff)) > 1.0 and abs(np.mean(group_diff)) < 0.1
    assert mod.population_fd(groups=4000) < 0.01
    ref, model = mod.data_set(rng, 8, 1, 4, 5, 0.7, "invalid")
    assert len(ref.x) == 8 * 5 and len(model.x) == 8 * 4 * 5 - 4 * 4 * 2
    assert len(Exchange.of("frame", ref, model, []).sets.reference.x) == len(ref.x) - 4 * 2 + len(model.x)
    args = {"seed": 0, "groups": 8, "steps": 5, "rho": 0.7, "permutations": 20}
    seen = []
    real = Exchange.counts

    def record(self, n, rng):
        seen.append(self.paired)
        return real(self, n, rng)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Exchange, "counts", record)
        for scheme in ("flip", "deal", "flip, no steps"):
            assert len(mod._rejects(("shift", scheme, 1, 4, 0, args))) == 2
    assert seen == [True, False, True]
    assert mod._rejects(("shift", "flip", 1, 4, 0, {**args, "permutations": 200, "groups": 64}))[0]


def test_direction_oracle_run_stamp_records_its_code():
    """direction_oracle.py's results carry the sha256 of the script that computed them (the scorecard reads them only
    while that file is unchanged: report.scorecard.oracle_stale), the command and numpy's release; the committed
    results were computed with the committed script."""
    import json

    from wmeval.core.digest import changed_files, file_sha256

    stamp = _script("direction_oracle.py").run_stamp(["--datasets", "5"])
    script = "benchmarks/direction_oracle.py"
    assert stamp["code"] == {script: file_sha256(ROOT / script)}
    assert stamp["command"] == "python benchmarks/direction_oracle.py --datasets 5"
    assert stamp["packages"] == {"numpy": np.__version__}
    committed = json.loads((ROOT / "benchmarks" / "results" / "direction_oracle.json").read_text())["run"]
    assert changed_files(committed["code"], ROOT) == []


def test_a_centred_permuted_sets_null_draw_is_the_shipped_bias_corrected_fd_of_the_rows_it_deals():
    """benchmarks/fd_permutation_leftover.py's (and fd_permutation_degenerate.py's) null draw: a permuted data set's
    own delete-one jackknife (jackknife_rows, corrected) gives distribution_bootstrap's bias-corrected FD of the rows
    that permutation deals to each side, paired (episodes' rows swapped) and independent (episodes dealt anew)."""
    from wmeval.estimators import distributional as dist
    from wmeval.stats import distribution_bootstrap

    fh, fl = _script("fd_half_sampling.py"), _script("fd_permutation_leftover.py")
    rng = np.random.default_rng(5)
    n, t = 8, 4
    ep = np.repeat(np.arange(n), t)
    x, y = rng.normal(size=(n * t, 3)), rng.normal(size=(n * t, 3)) * 1.3 + 0.4
    for paired in (True, False):
        sets, counts = fh.permutation_sets(x, y, ep, ep, paired, 4, np.random.default_rng(2))
        view = dist._ViewFD.of(sets, counts.shape[1])
        n_units = counts.shape[1] // 2
        rows_all, unit = np.concatenate([x, y]), np.concatenate([ep, ep + n])
        for p in range(1, 4):
            rows, grp = fl.jackknife_rows(counts[p], paired, n_units)
            got = fl.corrected(float(view.many(counts[p:p + 1])[0, 0, 0]), view.many(rows)[:, 0, 0], grp)
            real = counts[p, :n_units]
            if paired:
                swap = real[n:][ep][:, None] == 1
                a, b, a_ids, b_ids = np.where(swap, y, x), np.where(swap, x, y), ep, ep
            else:
                a, b = rows_all[real[unit] == 1], rows_all[real[unit] == 0]
                a_ids, b_ids = unit[real[unit] == 1], unit[real[unit] == 0]
            want = distribution_bootstrap(a, b, real_clusters=a_ids, fake_clusters=b_ids, metric="fd_bias_corrected",
                                          n_resamples=2 * n_units + 3).point
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_permutation_degenerate_inversion_spans_the_values_its_test_accepts():
    """benchmarks/fd_permutation_degenerate.py's test inversion: its (low, high) are the smallest and largest theta
    accepted by the test written out by hand (every pair of null draw and linear part), checked on a fine grid; with
    no linear part it is the interval of the null draws alone, center - their quantiles."""
    mod = _script("fd_permutation_degenerate.py")
    rng = np.random.default_rng(6)
    dev0 = rng.chisquare(3, size=60) * 0.1 - 0.2             # skewed null draws
    lin = (rng.chisquare(2, size=80) - 2.0) * 0.3              # skewed: a sign error in the linear term shows
    q_lo0, q_hi0 = np.quantile(dev0, [0.025, 0.975])
    for center, scale in ((0.05, 0.3), (1.5, 1.2), (4.0, 3.0)):
        low, high = mod.inverted(center, dev0, lin, scale, 0.95)
        thetas = np.linspace(0.0, 12.0, 6001)
        pairs = dev0[None, :, None] - np.sqrt(thetas / scale)[:, None, None] * lin[None, None, :]
        q = np.quantile(pairs.reshape(len(thetas), -1), [0.025, 0.975], axis=1)
        ok = (q[0] <= center - thetas) & (center - thetas <= q[1])
        assert ok.any()
        tol = 12.0 / 6000 * 2
        assert low <= thetas[ok].min() + tol and high >= thetas[ok].max() - tol
        if center - q_hi0 <= 0:                                # a distance of 0 accepted: the basic lower end
            assert low == pytest.approx(center - q_hi0)
        else:
            assert low == pytest.approx(thetas[ok].min(), abs=tol)
        assert high <= thetas[ok].max() + tol
    q_lo, q_hi = np.quantile(dev0, [0.025, 0.975])
    assert mod.inverted(0.3, dev0, np.zeros(80), 1.0, 0.95) == pytest.approx((0.3 - q_hi, 0.3 - q_lo))


def test_debiased_quotient_estimates_the_true_directions_variance_where_the_estimated_direction_overstates_it():
    """benchmarks/debiased_direction.py's rule: for a shift along the lowest-variance axis the estimated direction's
    quotient dh' S dh / |dh|^2 is pulled up by noise, which leans toward the high-variance axes; the debiased ratio
    (dh' S dh - tr S^2) / (|dh|^2 - tr S) is near the true lam_min in the median (within 10%) and the estimated one
    is not; where |dh|^2 <= tr S it falls back to the estimated quotient."""
    mod = _script("debiased_direction.py")
    lam = np.linspace(0.5, 2.0, 16) * 0.004                 # noise as in coverage.py's paired d = 16 design
    delta = np.zeros(16)
    delta[0] = 0.5
    rng = np.random.default_rng(7)
    deb, est = np.array([mod.debiased_quotient(delta + rng.normal(size=16) * np.sqrt(lam), lam, 0.25)
                         for _ in range(2000)]).T
    assert abs(np.median(deb) / lam[0] - 1) < 0.1 and np.median(est) / lam[0] > 1.3
    small = np.zeros(16)
    small[0] = 1e-3                                        # |dh|^2 far below tr S: no resolvable difference
    q_deb, q_est = mod.debiased_quotient(small, lam, 0.25)
    assert q_deb == q_est == pytest.approx(lam[0])


def test_permutation_degenerate_debiased_scale_takes_the_noise_out_of_the_linear_term():
    """benchmarks/fd_permutation_degenerate.py's debiased scale: point var(L) / (var(L) - 2 var(null)), kept at least
    var(L) / (4 sd(null)) and at most 4 plug-ins; where var(L) <= 2 var(null) or the estimate is not positive, the
    shipped test's scale (the plug-in near 0, the estimate where the linear part carries over 90%)."""
    mod = _script("fd_permutation_degenerate.py")
    rng = np.random.default_rng(8)
    lin = rng.normal(size=400)
    lin = (lin - lin.mean()) / lin.std() * 2.0               # var 4
    null = rng.normal(size=100)
    null = (null - null.mean()) / null.std() * 0.5           # var 0.25
    assert mod.debiased_scale(3.0, 3.5, lin, null) == pytest.approx(3.0 * 4.0 / (4.0 - 0.5))
    assert mod.test_scale(3.0, 3.5, lin, null) == pytest.approx(3.0)          # linear share 4 / 4.25 > 0.9
    wide = null * 4.0                                        # var 4: 2 var(null) > var(L)
    assert mod.debiased_scale(3.0, 3.5, lin, wide) == mod.test_scale(3.0, 3.5, lin, wide) == pytest.approx(3.5)
    assert mod.debiased_scale(-0.1, 5.0, lin, null) == mod.test_scale(-0.1, 5.0, lin, null) == 5.0   # no estimate
    assert mod.debiased_scale(3.0, 0.6, lin, null) == pytest.approx(2.4)        # at most 4 plug-ins
    assert mod.debiased_scale(0.01, 0.02, lin, null) == pytest.approx(4.0 / (4.0 * 0.5))   # the lower bound
