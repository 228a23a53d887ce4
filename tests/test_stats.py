import numpy as np
import pyarrow as pa
import pytest
from scipy import stats as sps

from wmeval.estimators.resample import (
    cluster_bootstrap,
    ratio_replicates,
    resample_counts,
)


def test_matches_scipy_bootstrap_of_cluster_means():
    """With equal cluster sizes the cluster bootstrap of the mean is scipy's bootstrap of cluster means."""
    rng = np.random.default_rng(0)
    n_clusters, size = 40, 5
    means = rng.normal(size=n_clusters)
    values = np.repeat(means, size) + 0.1 * rng.normal(size=n_clusters * size)
    clusters = np.repeat(np.arange(n_clusters), size)
    ours = cluster_bootstrap(values, clusters, n_resamples=20000, seed=1)
    cm = values.reshape(n_clusters, size).mean(axis=1)
    ref = sps.bootstrap((cm,), np.mean, n_resamples=20000, method="percentile", random_state=2).confidence_interval
    se = cm.std(ddof=1) / np.sqrt(n_clusters)
    assert ours.point == pytest.approx(values.mean())
    assert abs(ours.low - ref.low) < 0.05 * se * 4 and abs(ours.high - ref.high) < 0.05 * se * 4
    assert ours.n_clusters == n_clusters and ours.method == "percentile"


def test_cluster_interval_is_wider_than_frame_level_under_correlation():
    # rho = 0.8 within episodes of 16 frames: frame resampling understates the uncertainty.
    rng = np.random.default_rng(3)
    n, T, rho = 64, 16, 0.8
    shared = rng.normal(size=(n, 1)) * np.sqrt(rho)
    values = (shared + rng.normal(size=(n, T)) * np.sqrt(1 - rho)).ravel()
    clusters = np.repeat(np.arange(n), T)
    cl = cluster_bootstrap(values, clusters, n_resamples=4000, seed=0)
    iid = cluster_bootstrap(values, np.arange(values.size), n_resamples=4000, seed=0)
    # Design effect 1 + (T - 1) rho = 13: widths differ by about sqrt(13) = 3.6.
    ratio = (cl.high - cl.low) / (iid.high - iid.low)
    assert 2.8 < ratio < 4.5


def test_same_seed_same_interval_and_unequal_clusters():
    rng = np.random.default_rng(0)
    values = rng.normal(size=100)
    clusters = rng.integers(0, 17, size=100)
    a = cluster_bootstrap(values, clusters, n_resamples=500, seed=4)
    b = cluster_bootstrap(values, clusters, n_resamples=500, seed=4)
    c = cluster_bootstrap(values, clusters, n_resamples=500, seed=5)
    assert a == b and a != c
    assert a.low <= a.point <= a.high


def test_bad_inputs():
    with pytest.raises(ValueError, match="shape"):
        cluster_bootstrap(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="non-finite"):
        cluster_bootstrap(np.array([1.0, np.nan]), np.array([0, 1]))
    with pytest.raises(ValueError, match="method"):
        cluster_bootstrap(np.zeros(3), np.arange(3), method="bca2")


def test_paired_replicates_cancel_shared_noise():
    """Paired resampling: the difference of two models that share episode effects is tight."""
    rng = np.random.default_rng(1)
    base = rng.normal(size=50) * 5
    values = np.stack([base, base + 0.1])
    counts = resample_counts(50, 2000, np.random.default_rng(0))
    assert np.all(counts.sum(axis=1) == 50)
    reps = ratio_replicates(values, np.ones_like(values), counts)
    diff = reps[:, 1] - reps[:, 0]
    np.testing.assert_allclose(diff, 0.1, atol=1e-12)
    assert reps[:, 0].std() > 0.3


def test_ratio_replicates_weight_missing_clusters_out():
    counts = np.array([[1, 1, 1], [3, 0, 0], [0, 0, 3]])
    values = np.array([[1.0, 2.0, 0.0]])       # cluster 2 has no value: 0 / 0
    dens = np.array([[1.0, 1.0, 0.0]])
    reps = ratio_replicates(values, dens, counts)[:, 0]
    assert reps[0] == pytest.approx(1.5) and reps[1] == pytest.approx(1.0) and np.isnan(reps[2])


def test_strata_keep_each_strata_cluster_count():
    from wmeval.estimators.resample import cluster_counts

    clusters = np.arange(10)
    strata = np.array(["a"] * 3 + ["b"] * 7)
    counts = cluster_counts(clusters, strata, 10, 500, np.random.default_rng(0))
    assert np.all(counts[:, :3].sum(axis=1) == 3) and np.all(counts[:, 3:].sum(axis=1) == 7)
    with pytest.raises(ValueError, match="nested in strata"):
        cluster_bootstrap(np.zeros(4), np.array([0, 0, 1, 1]), strata=np.array(["a", "b", "b", "b"]))


def test_stratified_interval_is_narrower_when_strata_differ():
    # Two strata with very different means: resampling within strata removes the between-strata noise.
    rng = np.random.default_rng(0)
    v = np.concatenate([rng.normal(0, 0.1, 20), rng.normal(10, 0.1, 20)])
    c, st = np.arange(40), np.repeat([0, 1], 20)
    plain = cluster_bootstrap(v, c, n_resamples=2000, seed=1)
    strat = cluster_bootstrap(v, c, strata=st, n_resamples=2000, seed=1)
    assert (strat.high - strat.low) < 0.2 * (plain.high - plain.low)


def test_generic_statistic_matches_the_mean_fast_path():
    rng = np.random.default_rng(2)
    v, c = rng.normal(size=60), np.repeat(np.arange(15), 4)
    fast = cluster_bootstrap(v, c, n_resamples=300, seed=3)
    generic = cluster_bootstrap(v, c, lambda x, w: float(np.sum(w * x) / np.sum(w)), n_resamples=300, seed=3)
    assert generic.point == pytest.approx(fast.point) and generic.low == pytest.approx(fast.low)
    assert generic.high == pytest.approx(fast.high)


def test_bca_matches_scipy_on_cluster_means():
    rng = np.random.default_rng(4)
    cm = rng.exponential(size=40)          # skewed: BCa differs from percentile
    v, c = np.repeat(cm, 3), np.repeat(np.arange(40), 3)
    ours = cluster_bootstrap(v, c, n_resamples=20000, method="bca", seed=5)
    ref = sps.bootstrap((cm,), np.mean, n_resamples=20000, method="BCa", random_state=6).confidence_interval
    se = cm.std(ddof=1) / np.sqrt(40)
    assert abs(ours.low - ref.low) < 0.15 * se and abs(ours.high - ref.high) < 0.15 * se
    pct = cluster_bootstrap(v, c, n_resamples=20000, seed=5)
    assert ours.high > pct.high  # right-skewed statistic: BCa shifts the interval up


def test_weighted_frechet_statistic_without_copies():
    from wmeval.metrics import frechet_distance

    rng = np.random.default_rng(7)
    real = rng.normal(size=(200, 3))
    ref_mu, ref_sigma = np.zeros(3), np.eye(3)

    def fd(x, w):
        mu = w @ x / w.sum()
        xc = x - mu
        sigma = (xc * w[:, None]).T @ xc / (w.sum() - 1)
        return frechet_distance(ref_mu, ref_sigma, mu, sigma)

    r = cluster_bootstrap(real, np.repeat(np.arange(50), 4), fd, n_resamples=300, seed=0)
    assert r.low <= r.point <= r.high and r.n_clusters == 50


@pytest.mark.slow
def test_statistics_read_in_episode_windows_change_no_value(tmp_path, tiny_params, monkeypatch):
    """The statistics stage reads frames one window of episodes at a time (bounded memory): with one episode
    per window, every row of both built-in worlds (paired errors, frame scores, NLL, task signals,
    counterfactuals, distributional sets, dynamics) comes out exactly as when all episodes are read at once.
    A row with an episode outside the protocol is refused by name, never skipped by the windows."""
    import dataclasses

    import pandas as pd

    from wmeval.core.config import world_dynamics
    from wmeval.core.errors import WmevalError
    from wmeval.core.stale import encoder_config
    from wmeval.encoders import build_encoder
    from wmeval.features import Caches, embed_file
    from wmeval.rollouts import build_models
    from wmeval.rollouts.dynamics import dynamics_tables
    from wmeval.rollouts.episodes import world_tables
    from wmeval.statistics.compute import world_rows
    from wmeval.tables import episode_windows, io, read_table, write_table
    from wmeval.worlds import build_world

    p = tiny_params
    encoder = build_encoder(p.encoder)
    caches = Caches(encoder, str(tmp_path / "cache"))
    made_with = {"encoder_config": encoder_config(p.encoder.name, p.encoder.kind, p.encoder.params, p.encoder.precision)}
    rollouts, features = tmp_path / "rollouts", tmp_path / "features"
    for name, wcfg in p.worlds.items():
        world = build_world(name, dataclasses.asdict(wcfg))
        models = build_models(world, p.models[name].entries)
        (rollouts / name / "dynamics").mkdir(parents=True)
        (features / encoder.name / name).mkdir(parents=True)
        for source, table in world_tables(wcfg, p.models[name].entries, p.protocol, False, world=world,
                                          models=models):
            write_table(table, rollouts / name / f"{source}.parquet")
            emb, _ = embed_file(rollouts / name / f"{source}.parquet", encoder, progress=False, caches=caches,
                                made_with=made_with)
            write_table(emb, features / encoder.name / name / f"{source}.parquet")
        dyn, _ = dynamics_tables(wcfg, world, models, world_dynamics(p, name), p.protocol, progress=False)
        for source, table in dyn.items():
            write_table(table, rollouts / name / "dynamics" / f"{source}.parquet")

    def everything(world):
        r = world_rows(p, world, rollouts, features)
        return [pd.concat(getattr(r, k), ignore_index=True) for k in
                ("contributions", "sequences", "episodes", "curves", "distributional")], r.record

    for world in p.worlds:
        whole, record = everything(world)
        with monkeypatch.context() as m:
            m.setattr(io, "WINDOW_BYTES", 1)
            n = p.protocol.n_episodes
            assert len(episode_windows([rollouts / world / "ground_truth.parquet"], n)) == n
            parts, record_w = everything(world)
        assert record_w == record
        for a, b in zip(whole, parts):
            assert len(a) > 0
            key = [c for c in a.columns if c not in ("value", "denominator")
                   and not a[c].map(lambda v: isinstance(v, (list, np.ndarray, dict))).any()]
            a, b = (x.sort_values(key, kind="stable").reset_index(drop=True) for x in (a, b))
            pd.testing.assert_frame_equal(a, b, check_exact=True)
        assert set(whole[0].episode) == set(range(n))
    # The stage splits the built-in worlds into frame and point parts in forked processes: the same files, byte
    # for byte, as each world's rows made one after another by world_rows.
    import os

    from wmeval.core import parallel
    from wmeval.statistics import compute

    (tmp_path / "forked").mkdir()
    (tmp_path / "serial").mkdir()
    with monkeypatch.context() as m:            # forked, whatever the suite runs its stages with (WMEVAL_JOBS)
        m.setenv("WMEVAL_JOBS", "2")
        assert parallel.usable_cores() == min(2, len(os.sched_getaffinity(0)))
        compute.compute_statistics(p, rollouts, features, tmp_path / "forked")
    with monkeypatch.context() as m:            # every world through world_rows, one after another, here
        m.setattr(compute, "BUILTIN_WORLDS", set())
        compute.compute_statistics(p, rollouts, features, tmp_path / "serial")
    files = sorted(f.name for f in (tmp_path / "serial").iterdir())
    assert "kid_blocks.parquet" in files and files == sorted(f.name for f in (tmp_path / "forked").iterdir())
    for name in files:
        assert (tmp_path / "forked" / name).read_bytes() == (tmp_path / "serial" / name).read_bytes(), name
    # A block missing for a whole window is named, never skipped for those episodes.
    import pyarrow.compute as pc

    path = rollouts / "pendulum" / "linear.parquet"
    t = read_table(path)
    drop = pc.and_(pc.equal(t.column("episode"), 2), pc.equal(t.column("plan").cast(pa.string()), "random_0"))
    write_table(t.filter(pc.invert(drop)), path)
    with monkeypatch.context() as m:
        m.setattr(io, "WINDOW_BYTES", 1)
        with pytest.raises(WmevalError, match=r"linear.parquet: episodes 2\.\.2 have no rows of the blocks "
                                              r"\[\('open_loop', 'random_0'\), \('teacher_forced', 'random_0'\)\]"):
            world_rows(p, "pendulum", rollouts, features)
    # A stray episode id is named, with its file and column.
    i = t.schema.get_field_index("episode")
    write_table(t.set_column(i, t.schema.field(i), pa.array([99] * t.num_rows, pa.int32())), path)
    with pytest.raises(WmevalError, match=r"linear.parquet: column 'episode' has value 99; the protocol has "
                                          r"episodes 0\.\.\d+"):
        world_rows(p, "pendulum", rollouts, features)
