"""The honest-intervals defects: each test fails on the code before the fix (noted per test)."""

import warnings

import numpy as np
import pandas as pd
import pytest

from wmeval.bootstrap.intervals import intervals, min_rank, summarize
from wmeval.core.config import BootstrapConfig
from wmeval.core.rng import make_rng
from wmeval.estimators.distributional import KernelBlocks, Side, _cluster_index
from wmeval.estimators.resample import (
    STUDENTIZE_LINEAR_SHARE,
    _inverted_test,
    boundary_interval,
    cluster_bootstrap,
    cluster_counts,
    distance_interval,
    jackknife_bias,
    jackknife_centred,
    jackknife_counts,
    jackknife_weights,
    linear_part,
    linear_share,
    resample_counts,
    studentized_interval,
)
from wmeval.metrics import mmd2_unbiased
from wmeval.stats import BootstrapResult, distribution_bootstrap

BOOT = BootstrapConfig(name="t", n_resamples=400, confidence_level=0.95, method="percentile", seed=0)
KEY = {"world": "w", "metric": "fd_stratified", "regime": "open_loop", "condition": "frame:uniform",
       "unit": "observation"}


def _episodes(rng, n_eps=32, rows=10, d=4, rho=0.5, latent=None):
    """Rows of ``n_eps`` episodes with intra-episode correlation ``rho`` (a shared latent per episode)."""
    a = rng.normal(size=(n_eps, d)) if latent is None else latent
    ep = np.repeat(np.arange(n_eps), rows)
    x = np.sqrt(rho) * a[ep] + np.sqrt(1 - rho) * rng.normal(size=(n_eps * rows, d))
    return Side(x, ep, np.full(len(ep), "all")), a


# 1. KID replicates: copies of a resampled episode were paired with each other (self-kernel terms).

def test_kid_replicates_are_centred_on_the_point():
    """Old: replicates averaged about +0.06 above the point on iid rows (32 episodes x 10 rows, d = 4)."""
    rng = np.random.default_rng(0)
    shifts = []
    for _ in range(10):
        ref, _ = _episodes(rng, rho=0.0)
        fake, _ = _episodes(rng, rho=0.0)
        kb = KernelBlocks.of(ref, fake, 32)
        reps = kb.at(resample_counts(32, 300, rng).astype(float))
        shifts.append((reps.mean() - kb.at(np.ones(32))) / reps.std())
    assert abs(np.mean(shifts)) < 0.3


# 2. KID on episode data: the point must not pair rows of one episode.

def test_kid_is_unbiased_on_paired_episode_data():
    """Predictions sharing each episode's latent with its realized future, same distribution (truth 0): the
    distinct-episode U-statistic averages 0; the row-level estimate (the old point) is pulled below 0."""
    rng = np.random.default_rng(1)
    new, old = [], []
    for _ in range(60):
        ref, a = _episodes(rng, rho=0.8)
        fake, _ = _episodes(rng, rho=0.8, latent=a)
        new.append(KernelBlocks.of(ref, fake, 32).at(np.ones(32)))
        old.append(mmd2_unbiased(ref.x, fake.x))
    se = np.std(new) / np.sqrt(len(new))
    assert abs(np.mean(new)) < 3 * se
    assert np.mean(old) < -10 * np.std(old) / np.sqrt(len(old))


# 3. Ranks: ties were broken by listing order.

def _two_identical(rng, B=400):
    reps = rng.normal(size=(B, 1)) + np.array([[0.0, 0.0, 1.0]])      # a and b identical, c worse
    return ["a", "b", "c"], np.array([0.0, 0.0, 1.0]), reps


def test_identical_models_share_the_rank_and_tie():
    """Old: a got [1-1] and b [2-2] (argsort order); P(better) of b against a was 0.00 with no P(tie)."""
    sources, point, reps = _two_identical(np.random.default_rng(2))
    rows = {r["source"]: r for r in summarize(KEY, sources, point, reps, np.full(3, 32), BOOT, "a")}
    assert (rows["a"]["rank"], rows["a"]["rank_low"], rows["a"]["rank_high"]) == (1, 1, 1)
    assert (rows["b"]["rank"], rows["b"]["rank_low"], rows["b"]["rank_high"]) == (1, 1, 1)
    assert rows["b"]["p_better"] == 0.0 and rows["b"]["p_tie"] == 1.0
    assert rows["c"]["rank"] == 3.0


def test_min_rank():
    np.testing.assert_array_equal(min_rank(np.array([[0.2, 0.1, 0.1, np.nan]]), axis=1), [[3, 1, 1, 4]])
    # Against scipy's rankdata(method="min") (NaN as +inf, the worst), along either axis, ties and NaNs included.
    from scipy.stats import rankdata

    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(200, 7)).astype(float)
    x[rng.random(x.shape) < 0.1] = np.nan
    x[rng.random(x.shape) < 0.05] = -np.inf
    for axis in (0, 1, -1):
        want = rankdata(np.where(np.isnan(x), np.inf, x), method="min", axis=axis)
        np.testing.assert_array_equal(min_rank(x, axis=axis), want)
    np.testing.assert_array_equal(min_rank(np.array([np.nan, np.nan, 1.0])), [2, 2, 1])
    # Values float64 arithmetic does not resolve tie (1 ulp apart); a real difference, infinities and NaN do not.
    one = 1.0012803523
    np.testing.assert_array_equal(min_rank(np.array([np.nextafter(one, 2.0), one, 2.0, np.inf, np.nan])),
                                  [1, 1, 3, 4, 4])
    np.testing.assert_array_equal(min_rank(np.array([1e300, np.inf, 1.0 + 1e-9, 1.0])), [3, 4, 2, 1])


def test_near_its_target_a_metric_ties_values_float64_does_not_resolve():
    """Action sensitivity (best at 1) ranks by |log(v)|, which is near 0 close to 1: two values 5e-14 apart there
    differ by a third of their badness, and tie only through the metric's tolerance in log space (tie_atol)."""
    key = {"world": "w", "metric": "action_sensitivity", "unit": "state", "regime": "open_loop"}
    a = 1.0 + 1e-13
    reps = np.stack([np.full(50, a), np.full(50, a + 5e-14), np.full(50, 1.1)], axis=1)
    got = {r["source"]: r for r in summarize(key, ["a", "b", "c"], np.array([a, a + 5e-14, 1.1]), reps,
                                             np.array([32, 32, 32]), BOOT, base="a")}
    assert [got[s]["rank"] for s in "abc"] == [1, 1, 3] and (got["b"]["rank_high"], got["b"]["p_tie"]) == (1, 1.0)


def test_a_model_without_an_interval_is_not_ranked_and_moves_no_other_rank():
    """A model with one episode's ratio defined (blobs `mean`, event precision) has no replicates; ranked on its
    point, it took rank 1 and every other model's rank fell outside its own interval (`stochastic` 2 [1-1])."""
    key = {"world": "w", "metric": "event_precision", "unit": "observation", "regime": "open_loop"}
    rng = np.random.default_rng(1)
    reps = np.stack([np.full(400, 0.375), 0.28 + 0.01 * rng.standard_normal(400),
                     0.13 + 0.01 * rng.standard_normal(400)], axis=1)
    got = {r["source"]: r for r in summarize(key, ["mean", "stochastic", "reversed"], np.array([0.375, 0.28, 0.13]),
                                             reps, np.array([1, 32, 32]), BOOT, base=None)}
    assert np.isnan(got["mean"]["rank"]) and np.isnan(got["mean"]["low"])
    assert (got["stochastic"]["rank"], got["stochastic"]["rank_low"], got["stochastic"]["rank_high"]) == (1, 1, 1)
    assert (got["reversed"]["rank"], got["reversed"]["rank_low"], got["reversed"]["rank_high"]) == (2, 2, 2)


def test_models_equal_up_to_rounding_tie_in_rank_p_better_and_p_tie():
    """Two models equal in exact arithmetic come out 1 ulp apart. With their replicates exactly equal (summed in
    another order than the points), the one behind by an ulp was ranked 2 with a rank interval of [1-1]; with every
    replicate an ulp apart, it was 'separated': P(better) 1 and rank intervals [1-1] and [2-2]. They tie now."""
    boot = BOOT
    key = {"world": "w", "metric": "state_rmse", "unit": "state", "regime": "teacher_forced"}
    a = 1.0 + np.random.default_rng(0).random(200)
    for b in (a, np.nextafter(a, 0.0)):
        reps = np.stack([a, b, a + 1.0], axis=1)
        point = np.array([1.5, np.nextafter(1.5, 0.0), 2.5])
        got = {r["source"]: r for r in summarize(key, ["a", "b", "c"], point, reps, np.array([32, 32, 32]), boot,
                                                 base="a")}
        assert got["a"]["rank"] == got["b"]["rank"] == 1 and got["c"]["rank"] == 3
        assert all(r["rank_low"] <= r["rank"] <= r["rank_high"] for r in got.values())
        assert (got["a"]["rank_high"], got["b"]["rank_high"]) == (1, 1)
        assert got["b"]["p_better"] == 0.0 and got["b"]["p_tie"] == 1.0 and got["c"]["p_better"] == 0.0


# 4. The bias-corrected FD's paired difference used the percentile interval of shifted replicates.

def test_bias_corrected_difference_uses_the_basic_interval():
    rng = np.random.default_rng(3)
    B = 2000
    base = rng.gamma(1.0, 0.2, size=B)                      # skewed replicates
    reps = np.stack([base, base + rng.gamma(0.5, 0.4, size=B)], axis=1)
    point = np.array([0.1, 0.3])
    bias = reps.mean(axis=0) - point
    key = {**KEY, "metric": "fd_bias_corrected", "condition": "frame:pooled"}
    rows = summarize(key, ["a", "b"], point - bias, reps - 2 * bias, np.full(2, 32), BOOT, "a", interval="basic",
                     n_resamples=B)
    d_plug = point[1] - point[0]
    q_lo, q_hi = np.quantile(reps[:, 1] - reps[:, 0], [0.025, 0.975])
    b = rows[1]
    assert b["diff_low"] == pytest.approx(2 * d_plug - q_hi) and b["diff_high"] == pytest.approx(2 * d_plug - q_lo)
    assert b["low"] == pytest.approx(2 * point[1] - np.quantile(reps[:, 1], 0.975))
    assert b["method"] == "basic"


# 5. One cluster gave a zero-width interval silently.

def test_one_cluster_warns_and_has_no_interval():
    with pytest.warns(RuntimeWarning, match="1 cluster"):
        r = cluster_bootstrap([1.0, 2.0, 3.0], [0, 0, 0])
    assert r.point == 2.0 and np.isnan(r.low) and np.isnan(r.high)
    rows = summarize(KEY, ["a", "b"], np.array([1.0, 2.0]), np.ones((10, 2)), np.array([1, 1]), BOOT, "a")
    assert all(np.isnan(r["low"]) and np.isnan(r["rank_low"]) for r in rows)


@pytest.mark.parametrize("override", ["protocol.n_episodes=1", "dynamics.n_episodes=1",
                                      "dynamics.control_episodes=1"])
def test_config_refuses_fewer_than_two_clusters(override, tmp_path):
    import yaml

    from wmeval.core.config import ConfigError, compose_text, validate_params

    raw = yaml.safe_load(compose_text([override]))
    with pytest.raises(ConfigError, match=override.split("=")[0].split(".")[-1] + " = 1"):
        validate_params(raw)


# 6. n_clusters counted episodes whose ratio denominator is 0.

def test_n_clusters_counts_only_episodes_with_a_denominator():
    eps = np.arange(6)
    df = pd.DataFrame({"world": "w", "metric": "precision", "regime": "open_loop", "condition": "c",
                       "unit": "observation", "source": "m", "episode": eps,
                       "value": [1.0, 0.0, 0.0, 0.0, 2.0, 0.0], "denominator": [2.0, 0, 0, 0, 2.0, 1.0]})
    counts = resample_counts(6, 200, np.random.default_rng(0))
    out = intervals(df, ["world", "metric", "regime", "condition", "unit"], lambda w, u: counts, BOOT)
    assert int(out.n_clusters.iloc[0]) == 3


# The public set-level bootstrap.

def test_plain_statistic_matches_the_weighted_mean():
    """Old: np.mean was called as np.mean(values, weights) and raised a TypeError."""
    rng = np.random.default_rng(4)
    v, c = rng.normal(size=60), np.repeat(np.arange(12), 5)
    a = cluster_bootstrap(v, c, np.mean, n_resamples=300)
    b = cluster_bootstrap(v, c, n_resamples=300)
    assert (a.point, a.low, a.high) == pytest.approx((b.point, b.low, b.high), rel=1e-12)
    med = cluster_bootstrap(v, c, np.median, n_resamples=300)
    assert med.point == pytest.approx(np.median(v)) and med.low < med.point < med.high


def test_distribution_bootstrap_is_the_stage_code_and_pairs_shared_ids():
    rng = np.random.default_rng(5)
    ref, a = _episodes(rng, rho=0.8)
    fake, _ = _episodes(rng, rho=0.8, latent=a)
    fake.x = fake.x + np.array([0.6, 0, 0, 0])
    ep = ref.episode
    paired = {m: distribution_bootstrap(ref.x, fake.x, real_clusters=ep, fake_clusters=ep, metric=m,
                                        n_resamples=300) for m in ("fd", "fd_bias_corrected", "kid")}
    unpaired = {m: distribution_bootstrap(ref.x, fake.x, real_clusters=ep, fake_clusters=ep + 100, metric=m,
                                          n_resamples=300) for m in ("fd", "fd_bias_corrected", "kid")}
    assert isinstance(paired["fd"], BootstrapResult) and paired["fd"].n_clusters == 32
    assert unpaired["fd"].n_clusters == 64
    assert paired["kid"].point == pytest.approx(KernelBlocks.of(ref, fake, 32).at(np.ones(32)))
    # The same rows: one point for the plug-in FD however the clusters are labelled.
    assert paired["fd"].point == pytest.approx(unpaired["fd"].point, rel=1e-12)
    # Pairing cancels the shared episode latents: far narrower intervals than resampling the sides apart.
    for m in paired:
        assert (paired[m].high - paired[m].low) < 0.6 * (unpaired[m].high - unpaired[m].low)
    bc = paired["fd_bias_corrected"]
    assert bc.method == "boundary" and bc.point < paired["fd"].point
    # KID: paired, its replicates are in their linear regime and the interval is the bootstrap-t, studentized by
    # the infinitesimal jackknife on each replicate; unpaired (the resampling groups are the sides), the shared
    # latents' noise keeps them out of it (linear share 0.84) and the interval is the boundary one, until the
    # shift is larger (then the bootstrap-t, its resampling groups the two sides).
    far = distribution_bootstrap(ref.x, fake.x + 1.0, real_clusters=ep, fake_clusters=ep + 100, metric="kid",
                                 n_resamples=300)
    for r, ids, want_method, shift in ((paired["kid"], ep, "bootstrap-t", 0.0),
                                       (unpaired["kid"], ep + 100, "boundary", 0.0),
                                       (far, ep + 100, "bootstrap-t", 1.0)):
        inv_r, inv_f, group = _cluster_index(ep, ids)
        n = len(group)
        kb = KernelBlocks.of(Side(ref.x, inv_r, ref.stratum), Side(fake.x + shift, inv_f, fake.stratum), n)
        counts = cluster_counts(np.arange(n), group, n, 300, make_rng(0, "distribution_bootstrap"))
        reps = kb.at(counts.astype(float))
        assert (linear_share(reps, counts) > STUDENTIZE_LINEAR_SHARE) == (want_method == "bootstrap-t")
        assert r.method == want_method
        want = (studentized_interval(r.point, kb.standard_error(np.ones(n), group), reps,
                                     kb.standard_error(counts.astype(float), group), 0.95)
                if want_method == "bootstrap-t" else boundary_interval(r.point, reps, counts, kb.plugin(), 0.95))
        assert (r.low, r.high) == pytest.approx(want, rel=1e-12)
        if shift:
            # Independent sides: each ratio is unchanged when one side's multiplicities are scaled, so the
            # derivative's weighted mean is 0 within each side and centring per group equals centring over all.
            one_group = studentized_interval(r.point, kb.standard_error(np.ones(n)), reps,
                                             kb.standard_error(counts.astype(float)), 0.95)
            assert one_group == pytest.approx((r.low, r.high), rel=1e-9)


def test_distribution_bootstrap_refuses_bad_input_and_warns_on_one_cluster():
    x = np.random.default_rng(6).normal(size=(20, 3))
    with pytest.raises(ValueError, match="metric"):
        distribution_bootstrap(x, x, real_clusters=np.arange(20), fake_clusters=np.arange(20), metric="fid")
    with pytest.raises(ValueError, match="real_clusters"):
        distribution_bootstrap(x, x, real_clusters=np.arange(5), fake_clusters=np.arange(20), metric="fd")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = distribution_bootstrap(x, x + 1, real_clusters=np.zeros(20), fake_clusters=np.zeros(20) + 1,
                                   metric="fd", n_resamples=100)
    assert any("at least 2" in str(m.message) for m in w) and np.isnan(r.low)


# Design changes: what the headline ranks on, and FD-infinity's target.

def test_headline_is_the_bias_corrected_stratified_fd():
    from wmeval.metrics import REGISTRY

    assert not any(s.headline for s in REGISTRY["fd_stratified"].shown)
    assert all(s.headline == "transition" for s in REGISTRY["fd_stratified_bias_corrected"].shown)


def test_fd_infinity_extrapolates_both_sides():
    """Two sets from one distribution (truth 0): the plug-in FD is biased up by both sides' finite N; extrapolating
    the generated side only (Chong & Forsyth, ``metrics.fd_infinity``) keeps the reference's share; subsampling
    episodes on both sides (``FDInfinity``) removes both."""
    from wmeval.estimators.distributional import FDInfinity, Settings, ViewSets
    from wmeval.metrics import FrechetReference, fd_infinity, gaussian_stats

    rng = np.random.default_rng(8)
    cfg = Settings.defaults(fd_inf_points=6, fd_inf_min_fraction=0.25, fd_inf_draws=4)
    both, gen_only, plug = [], [], []
    for _ in range(20):
        ref, _ = _episodes(rng, n_eps=40, rho=0.3)
        fake, _ = _episodes(rng, n_eps=40, rho=0.3)
        vs = ViewSets("frame", ref, {"m": fake}, [])
        both.append(FDInfinity.of(vs, 40, cfg)(np.ones(40))[0][0])
        gen_only.append(fd_infinity(ref.x, fake.x, draws=4)["value"])
        s_r, s_f = gaussian_stats(ref.x), gaussian_stats(fake.x)
        plug.append(FrechetReference(s_r.mu, s_r.sigma).distance(s_f.mu, s_f.sigma))
    se = np.std(both) / np.sqrt(len(both))
    assert abs(np.mean(both)) < 3 * se
    assert np.mean(gen_only) > np.mean(both) + 3 * se
    assert np.mean(plug) > np.mean(gen_only)


# Coverage at a true 0: the percentile and basic intervals of KID and the bias-corrected FD covered a true 0
# 99-100% of the time (a degenerate statistic: the bootstrap's linear term is built on the noise).

def _linear_and_degenerate(rng, B=2000, n=24):
    """Replicates with a known linear part in the multiplicities and a skewed rest orthogonal to it."""
    counts = resample_counts(n, B, rng)
    x = counts - counts.mean(axis=0)
    lin = x @ (0.01 * rng.normal(size=n))
    quad = 0.01 * (rng.chisquare(3, size=B) - 3)
    quad -= x @ np.linalg.lstsq(x, quad, rcond=None)[0]            # nothing of it is linear in the counts
    return counts, lin, quad


def test_linear_part_recovers_the_linear_term_and_keeps_the_rest_spread():
    counts, lin, quad = _linear_and_degenerate(np.random.default_rng(7))
    got_lin, rest = linear_part(0.3 + lin + quad, counts)
    np.testing.assert_allclose(got_lin, lin - lin.mean(), rtol=0.02, atol=1e-4)
    rank = np.linalg.matrix_rank(counts - counts.mean(axis=0))
    # the rest's deviations are scaled up for the fitted directions, so its spread is not understated
    assert np.std(rest) == pytest.approx(np.std(quad) * np.sqrt((len(quad) - 1) / (len(quad) - 1 - rank)), rel=1e-9)
    assert linear_part(np.arange(10.0), resample_counts(24, 10, np.random.default_rng(0))) is None


def test_boundary_interval_without_a_linear_term_is_the_basic_interval_of_the_rest():
    """Replicates with nothing linear in the counts: at any scale, the test's interval is the basic interval of the
    (rescaled) rest; its upper end is then raised to the percentile interval's (recentred on 2 center - mean), which
    is longer here, where the rest is skewed to the right."""
    rng = np.random.default_rng(8)
    counts, _, quad = _linear_and_degenerate(rng)
    reps = 0.3 + quad
    lin, rest = linear_part(reps, counts)
    assert not np.any(lin)
    q_lo, q_hi = np.quantile(rest, [0.025, 0.975])
    pct_hi = np.quantile(reps, 0.975) + 2 * (0.3 - reps.mean())
    assert pct_hi > 0.6 - q_lo + 0.02
    for scale in (0.0, -1e-18, 1e-300, 0.3):
        assert _inverted_test(0.3, reps, counts, scale, 0.95, 512) == pytest.approx((0.6 - q_hi, 0.6 - q_lo),
                                                                                   rel=1e-12)
        assert boundary_interval(0.3, reps, counts, scale, 0.95) == pytest.approx((0.6 - q_hi, pct_hi), rel=1e-12)


def test_boundary_interval_takes_the_percentile_upper_end_where_the_test_admits_a_positive_distance():
    """The upper end is the larger of the inverted test's and the percentile interval's (the replicates recentred on
    2 center - mean); the lower end is the test's alone. An interval at or below 0 (the estimate under what the
    degenerate part gives at a true 0) keeps the test's ends."""
    counts, lin, quad = _linear_and_degenerate(np.random.default_rng(9))
    reps = 0.02 + 0.2 * lin + quad
    for center in (0.02, 0.05, -0.2):
        t_lo, t_hi = _inverted_test(center, reps, counts, 0.05, 0.95, 512)
        lo, hi = boundary_interval(center, reps, counts, 0.05, 0.95)
        pct_hi = np.quantile(reps, 0.975) + 2 * (center - reps.mean())
        assert lo == t_lo
        assert hi == (max(t_hi, pct_hi) if t_hi > 0 else t_hi)
    # the case the rule is for: a positive upper end below the percentile's
    assert 0 < _inverted_test(0.02, reps, counts, 0.05, 0.95, 512)[1] < boundary_interval(0.02, reps, counts, 0.05,
                                                                                           0.95)[1]
    assert boundary_interval(-0.2, reps, counts, 0.05, 0.95)[1] <= 0


def test_the_bias_corrected_fd_is_scaled_by_its_corrected_estimate_only_in_the_linear_regime():
    """boundary_interval(corrected=...): the corrected estimate replaces the scale where the replicates' linear part
    carries over STUDENTIZE_LINEAR_SHARE of their variance (the test's linear term at the estimate is then the
    replicates' own; with a positive bias the interval is wider than with the plug-in), not near 0 and not where the
    corrected estimate is not a positive number. Before it, the plug-in everywhere."""
    counts, lin, quad = _linear_and_degenerate(np.random.default_rng(21))
    far, near = 0.5 + 3.0 * lin + quad, 0.2 + 0.3 * lin + quad
    assert linear_share(near, counts) < STUDENTIZE_LINEAR_SHARE < linear_share(far, counts)
    assert boundary_interval(0.5, far, counts, 0.5, 0.95, corrected=0.4) == boundary_interval(0.5, far, counts, 0.4,
                                                                                               0.95)
    assert boundary_interval(0.2, near, counts, 0.2, 0.95, corrected=0.1) == boundary_interval(0.2, near, counts, 0.2,
                                                                                               0.95)
    assert boundary_interval(0.2, near, counts, 0.1, 0.95) != boundary_interval(0.2, near, counts, 0.2, 0.95)
    for bad in (np.nan, 0.0, -0.1):
        assert boundary_interval(0.5, far, counts, 0.5, 0.95, corrected=bad) == boundary_interval(0.5, far, counts,
                                                                                                  0.5, 0.95)
    # the smaller scale makes the linear term at a candidate distance larger: the interval widens on both sides
    lo_c, hi_c = boundary_interval(0.5, far + 0.1, counts, 0.4, 0.95)
    lo_p, hi_p = boundary_interval(0.5, far + 0.1, counts, 0.5, 0.95)
    assert lo_c < lo_p and hi_c > hi_p


def test_distribution_bootstrap_scales_the_bias_corrected_fd_by_its_corrected_estimate_far_from_0(monkeypatch):
    """distribution_bootstrap(metric="fd_bias_corrected"): the boundary interval of the plug-in as its center, scaled
    by the corrected estimate (the result's point) in the replicates' linear regime and by the plug-in near 0.
    Before: the plug-in as both."""
    import wmeval.estimators.distributional as dist

    seen, real = [], dist.boundary_interval

    def spy(center, reps, counts, scale, level, corrected=None):
        out = real(center, reps, counts, scale, level, corrected=corrected)
        # the scale the interval used: the corrected estimate's where that gives this interval
        used = corrected if corrected is not None and out == real(center, reps, counts, corrected, level) else scale
        seen.append((center, used))
        return out

    monkeypatch.setattr(dist, "boundary_interval", spy)
    rng = np.random.default_rng(5)
    ref, a = _episodes(rng)
    fake, _ = _episodes(rng, latent=a)
    for shift, linear in ((0.0, False), (1.5, True)):
        y = fake.x + np.array([0.0, 0.0, 0.0, shift])
        kw = dict(real_clusters=ref.episode, fake_clusters=fake.episode, n_resamples=300)
        r = distribution_bootstrap(ref.x, y, metric="fd_bias_corrected", **kw)
        plug = distribution_bootstrap(ref.x, y, metric="fd", **kw).point
        center, scale = seen[-1]
        assert center == pytest.approx(plug, rel=1e-12)
        assert scale == pytest.approx(r.point if linear else plug, rel=1e-12)
        assert r.point != pytest.approx(plug, rel=1e-3)          # the two scales differ


def test_boundary_interval_takes_no_jump_at_a_zero_scale():
    """A plug-in of 0, or a rounding error below it, gives the interval of a tiny positive one (the review's
    clone of relabelled episodes: V = +8.9e-16 and V = 0 gave different intervals, one excluding 0)."""
    counts, lin, quad = _linear_and_degenerate(np.random.default_rng(11))
    reps = lin + quad
    ref = boundary_interval(0.0, reps, counts, 1e-300, 0.95)
    for scale in (0.0, -1e-15):
        assert boundary_interval(0.0, reps, counts, scale, 0.95) == ref
    assert ref[0] <= 0.0 <= ref[1]


def test_boundary_interval_warns_when_too_few_replicates_fit_the_linear_part():
    rng = np.random.default_rng(12)
    counts = resample_counts(40, 30, rng)
    reps = rng.normal(size=30)
    with pytest.warns(RuntimeWarning, match="30 replicates cannot fit a linear part on 40 clusters"):
        lo, hi = boundary_interval(0.1, reps, counts, 0.5, 0.95)
    # the basic interval of the replicates, its upper end raised to the percentile interval's (recentred)
    pct_hi = np.quantile(reps, 0.975) + 2 * (0.1 - reps.mean())
    assert (lo, hi) == pytest.approx((0.2 - np.quantile(reps, 0.975), max(0.2 - np.quantile(reps, 0.025), pct_hi)))
    assert hi > 0.2 - np.quantile(reps, 0.025)


def test_the_stage_gives_kid_the_boundary_interval_of_its_u_statistic_and_v_statistic():
    """replicate_rows: KID's interval is boundary_interval(U, replicates, counts, V) near 0 and the bootstrap-t
    (studentized_interval by KernelBlocks.standard_error) far from it, which one named in ``method``; the
    bias-corrected FD is FD - its jackknife bias, with the boundary interval of the plug-in replicates recentred
    on FD + that bias, scaled by the corrected estimate where the replicates are in their linear regime and by the
    plug-in below it (boundary_interval's corrected), per source."""
    from wmeval.bootstrap.intervals import replicate_rows
    from wmeval.estimators.distributional import Replicates

    rng = np.random.default_rng(13)
    ref, a = _episodes(rng, rho=0.5)
    fake, _ = _episodes(rng, rho=0.5, latent=a)
    far = Side(fake.x + 1.0, fake.episode, fake.stratum)
    fake.x = fake.x + 0.05
    kbs = [KernelBlocks.of(ref, fake, 32), KernelBlocks.of(ref, far, 32)]
    counts = resample_counts(32, 400, rng)
    c = counts.astype(float)
    u, reps, v = (np.array([kb.at(np.ones(32)) for kb in kbs]), np.stack([kb.at(c) for kb in kbs], axis=1),
                  np.array([kb.plugin() for kb in kbs]))
    se, rse = np.array([kb.standard_error(np.ones(32)) for kb in kbs]), np.stack([kb.standard_error(c) for kb in kbs], 1)
    # FD replicates with a linear part in the multiplicities (its size at a candidate distance depends on the scale):
    # "near" below the linear regime, "far" in it
    fd_lin = (c - 1.0) @ rng.normal(0.0, 0.01, 32)
    fd_reps = np.stack([0.3 + 0.3 * fd_lin + rng.gamma(2.0, 0.01, 400), 0.3 + 1.5 * fd_lin + rng.gamma(2.0, 0.01, 400)],
                       axis=1)
    assert linear_share(fd_reps[:, 0], counts) < STUDENTIZE_LINEAR_SHARE < linear_share(fd_reps[:, 1], counts)
    bias = 0.06
    wpts = pd.DataFrame({"metric": ["kid", "kid", "fd", "fd"], "condition": ["frame:pooled"] * 4,
                         "source": ["near", "far", "near", "far"], "value": [*u, 0.25, 0.25]})
    rows = replicate_rows("w", [Replicates("kid", "frame:pooled", ["near", "far"], reps, np.array([32, 32]),
                                           {"scale": v, "se": se, "replicate_se": rse}),
                                Replicates("fd", "frame:pooled", ["near", "far"], fd_reps, np.array([32, 32]),
                                           {"jackknife_bias": np.array([bias, bias])})],
                          wpts, BOOT, None, counts)
    kid = {r["source"]: r for r in rows if r["metric"] == "kid"}
    assert linear_share(reps[:, 0], counts) < STUDENTIZE_LINEAR_SHARE < linear_share(reps[:, 1], counts)
    assert (kid["near"]["low"], kid["near"]["high"]) == boundary_interval(u[0], reps[:, 0], counts, v[0], 0.95)
    assert kid["near"]["method"] == "boundary" and kid["near"]["point"] == u[0]
    assert (kid["far"]["low"], kid["far"]["high"]) == studentized_interval(u[1], se[1], reps[:, 1], rse[:, 1], 0.95)
    assert kid["far"]["method"] == "bootstrap-t"
    bc = {r["source"]: r for r in rows if r["metric"] == "fd_bias_corrected"}
    for j, src in enumerate(("near", "far")):
        assert bc[src]["point"] == pytest.approx(0.25 - bias) and bc[src]["method"] == "boundary"
        centred = fd_reps[:, j] - fd_reps[:, j].mean() + 0.25 + bias
        # the scale: the corrected estimate in the linear regime (the linear term at it is the replicates' own),
        # the plug-in below it; each differs from what the other scale gives
        scale, other = (0.25 - bias, 0.25) if src == "far" else (0.25, 0.25 - bias)
        want = boundary_interval(0.25, centred, counts, scale, 0.95)
        assert (bc[src]["low"], bc[src]["high"]) == pytest.approx(want)
        assert want != pytest.approx(boundary_interval(0.25, centred, counts, other, 0.95))


# The bias-corrected FD: the bootstrap's own bias correction (2 FD - mean FD*) left a positive bias at moderate d,
# so a boundary interval around it excluded a true 0 too often, and the basic interval covered it 99-100%.

def _plug_var(x: np.ndarray, m: np.ndarray) -> float:
    """The plug-in (biased, 1/n) variance of the rows of ``x`` weighted by ``m``."""
    return float(np.sum(m * (x - m @ x / m.sum()) ** 2) / m.sum())


def test_delete_one_jackknife_of_the_plug_in_variance_is_the_unbiased_variance():
    """Exactly, also when only some clusters hold rows (weights on the 9 present of 12 clusters)."""
    x = np.random.default_rng(1).normal(size=12)
    present = np.arange(12) < 9
    c = jackknife_counts(np.zeros(12))
    w = jackknife_weights(c, np.zeros(12), present)
    point = _plug_var(x, present.astype(float))
    bias = jackknife_bias(np.array([_plug_var(x, r * present) for r in c.astype(float)]), point, w)
    assert point - bias == pytest.approx(np.var(x[:9], ddof=1), rel=1e-12)


def test_grouped_jackknife_removes_a_one_over_n_bias_and_no_linear_term():
    """Delete-a-group (10 clusters in 4 groups of 3, 3, 2, 2; two independent sides): on the plug-in variance
    (bias -1/n a side) unbiased over 4000 data sets (the uncorrected mean 1.8 is 13 standard errors off); on a
    mean (no bias) the estimate is exactly 0 whatever the group sizes (unequal groups' weights cancel the
    linear part)."""
    group = np.repeat(["a", "b"], 10)
    c = jackknife_counts(group, max_groups=4)
    w = jackknife_weights(c, group)
    assert c.shape == (8, 20) and sorted(c[:4].sum(axis=1).tolist()) == [17, 17, 18, 18]
    rng = np.random.default_rng(2)
    stat = lambda z, m: _plug_var(z[:10], m[:10]) + _plug_var(z[10:], m[10:])     # noqa: E731
    mean = lambda z, m: float(m[:10] @ z[:10] / m[:10].sum())                      # noqa: E731
    raw, corrected = [], []
    for _ in range(4000):
        z = rng.normal(size=20)
        t = stat(z, np.ones(20))
        raw.append(t)
        corrected.append(t - jackknife_bias(np.array([stat(z, r.astype(float)) for r in c]), t, w))
    se = np.std(corrected) / np.sqrt(4000)
    assert abs(np.mean(corrected) - 2.0) < 3 * se and abs(np.mean(raw) - 1.8) < 3 * se
    z = rng.normal(size=20)
    assert jackknife_bias(np.array([mean(z, r.astype(float)) for r in c]), mean(z, np.ones(20)), w) == \
        pytest.approx(0.0, abs=1e-14)


def test_an_undefined_jackknife_row_adds_nothing():
    assert jackknife_bias(np.array([1.0, np.nan, 3.0]), 1.0, np.full(3, 0.5)) == pytest.approx(1.0)
    assert np.isnan(jackknife_bias(np.array([np.nan, np.nan]), 1.0, np.full(2, 0.5)))
    assert jackknife_bias(np.array([np.nan]), 1.0, np.zeros(1)) == 0.0      # no weighted row: no bias


def test_jackknife_centred_replaces_the_bootstrap_bias():
    reps = np.array([[1.0, np.nan], [3.0, np.nan]])
    assert np.allclose(jackknife_centred(reps, np.array([0.5, 0.5]), np.array([0.1, 0.1]))[:, 0], [-0.4, 1.6])
    assert np.isnan(jackknife_centred(reps, 0.5, 0.1)[:, 1]).all()


def test_bias_corrected_fd_is_nearly_unbiased_at_a_true_zero_in_moderate_dimension():
    """d = 16, 32 episodes of 10 rows a side, independent sides, one distribution: the plug-in FD averages
    about 2.2; the bootstrap's correction left about 0.48 (old code), the jackknife's about 0.15
    (``benchmarks/coverage.py --only bias``)."""
    rng = np.random.default_rng(4)
    points = []
    for _ in range(30):
        ref, _ = _episodes(rng, d=16)
        fake, _ = _episodes(rng, d=16)
        points.append(distribution_bootstrap(ref.x, fake.x, real_clusters=ref.episode,
                                             fake_clusters=fake.episode + 100, metric="fd_bias_corrected",
                                             n_resamples=100, seed=0).point)
    assert abs(np.mean(points)) < 0.3


def test_boundary_interval_bounds_solve_the_inverted_test():
    """At each positive bound, ``center - theta`` sits on the quantile of ``D* - u L*`` with u = sqrt(theta / scale)."""
    counts, lin, quad = _linear_and_degenerate(np.random.default_rng(9))
    center, scale = 0.3, 0.4
    reps = center + lin + quad
    lo, hi = _inverted_test(center, reps, counts, scale, 0.95, 512)
    assert 0 < lo < center < hi
    assert boundary_interval(center, reps, counts, scale, 0.95)[0] == lo
    lin_fit, rest = linear_part(reps, counts)
    for theta, q in ((lo, 0.975), (hi, 0.025)):
        u = np.sqrt(theta / scale)
        assert center - theta == pytest.approx(np.quantile(rest - center - u * lin_fit, q), abs=1e-9)
    # The linear term shrinks towards 0 with theta: the lower bound lies above the plain basic interval's.
    assert lo > 2 * center - np.quantile(reps, 0.975)


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["kid", "fd_bias_corrected"])
def test_intervals_cover_a_true_zero_at_about_the_nominal_level(metric):
    """A clone of the reference's distribution (paired episodes, truth 0), 150 data sets: the old percentile
    (KID) and basic (bias-corrected FD) intervals excluded 0 in none or one of them (coverage 99-100%, no power
    near 0); the boundary interval excludes it in a few (benchmarks/coverage.py measures it on 400 sets)."""
    rng = np.random.default_rng(10)
    above, below = 0, 0
    for _ in range(150):
        ref, a = _episodes(rng, n_eps=32, rows=5, d=3)
        fake, _ = _episodes(rng, n_eps=32, rows=5, d=3, latent=a)
        r = distribution_bootstrap(ref.x, fake.x, real_clusters=ref.episode, fake_clusters=fake.episode,
                                   metric=metric, n_resamples=200, seed=int(rng.integers(1 << 30)))
        above += r.low > 0
        below += r.high < 0
    assert 3 <= above + below <= 15


def test_source_by_episode_is_pandas_pivot_and_refuses_duplicates():
    """The per-group pivot (sources x episodes, NaN where a source has no row) is built with numpy instead of
    pandas' pivot: the same sources, episodes and numbers, missing cells included."""
    from wmeval.bootstrap.intervals import _source_by_episode

    rng = np.random.default_rng(4)
    rows = [(s, e) for s in ("b-model", "a-model", "c") for e in rng.permutation(30)[:20]]
    g = pd.DataFrame({"source": [s for s, _ in rows], "episode": np.array([e for _, e in rows], dtype=np.int64),
                      "value": rng.normal(size=len(rows)), "denominator": rng.integers(0, 3, len(rows)).astype(float)})
    g.loc[3, "value"] = np.nan
    num = g.pivot(index="source", columns="episode", values="value")
    den = g.pivot(index="source", columns="episode", values="denominator").reindex_like(num)
    sources, episodes, v, d = _source_by_episode(g)
    assert sources == list(num.index) == ["a-model", "b-model", "c"]
    np.testing.assert_array_equal(episodes, num.columns.to_numpy())
    np.testing.assert_array_equal(v, num.to_numpy())
    np.testing.assert_array_equal(d, den.to_numpy())
    with pytest.raises(ValueError, match="duplicate"):
        _source_by_episode(pd.concat([g, g.iloc[:1]]))


def test_bootstrap_refuses_statistics_without_kid_block_sums(tmp_path, tiny_params):
    """Statistics made before KID's block sums were stored: the bootstrap names the missing file and says what to
    run, instead of a bare FileNotFoundError."""
    from wmeval.bootstrap.intervals import distributional_rows
    from wmeval.core.errors import WmevalError

    pd.DataFrame({"world": ["blobs"], "metric": ["kid"], "value": [0.0]}).to_parquet(tmp_path / "distributional.parquet")
    with pytest.raises(WmevalError, match=r"kid_blocks.parquet: missing .* run `dvc repro`"):
        distributional_rows(tiny_params, tmp_path, tmp_path, tmp_path, {"worlds": {}}, None, {})


# The bias-corrected FD's two-scale check: with few independent rows for the dimension the FD's bias is not the
# a / m the jackknife removes, and its interval (old code) covered a true 0 in 41% of data sets at d = 64 with
# independent sides, without a sign of it.

def test_jackknife_of_a_subset_is_the_jackknife_of_the_subset_alone():
    """jackknife_counts/jackknife_weights with ``within``: the same bias estimate as on the subset's clusters alone."""
    rng = np.random.default_rng(21)
    x = rng.normal(size=10)
    within = np.array([1, 0, 1, 1, 0, 1, 1, 0, 1, 1], bool)
    c = jackknife_counts(np.zeros(10), within=within)
    assert (c[:, ~within] == 0).all() and len(c) == within.sum()
    full = _plug_var(x, within.astype(float))
    bias = jackknife_bias(np.array([_plug_var(x, r.astype(float)) for r in c]), full,
                          jackknife_weights(c, np.zeros(10), within=within))
    xs = x[within]
    cs = jackknife_counts(np.zeros(len(xs)))
    alone = jackknife_bias(np.array([_plug_var(xs, r.astype(float)) for r in cs]), _plug_var(xs, np.ones(len(xs))),
                           jackknife_weights(cs, np.zeros(len(xs))))
    assert bias == pytest.approx(alone, rel=1e-12)
    assert full - bias == pytest.approx(np.var(xs, ddof=1), rel=1e-12)      # the unbiased variance of the subset


def _deterministic(plan, present=None, a=7.0, c=5.0):
    """A statistic whose value depends only on how many clusters with rows a row keeps: a / m + c / m^2 per
    resampling group (its bias; the truth is 0), summed over the groups; ``(R,)`` or ``(R, S)``."""
    pres = np.ones((1, plan.counts.shape[1]), bool) if present is None else np.atleast_2d(present)
    total = 0.0
    for lab in sorted(set(plan.group.tolist()), key=str):
        m = ((plan.counts[:, None, :] > 0) & pres[None] & (plan.group == lab)).sum(axis=2).astype(float)
        with np.errstate(divide="ignore"):                 # a row without such clusters: infinite, unused
            total = total + a / m + c / m ** 2
    return total[:, 0] if present is None else total


@pytest.mark.parametrize("n", [8, 32, 100])
def test_two_scale_check_estimates_what_the_jackknife_leaves(n):
    """A statistic with bias 7 / m: the jackknife removes it and the check finds nothing left; with 7 / m + 5 / m^2
    the corrected value keeps -5 / (m (m - g)) for deletion groups of g, and the check recovers it: exactly where
    the groups are equal (delete-one, or 100 = 32 groups of 3 or 4: within 1%)."""
    from wmeval.estimators.resample import JackknifePlan, leftover_bias

    plan = JackknifePlan.of(np.zeros(n, dtype=int))
    bias, halves = plan.estimate(_deterministic(plan, c=0.0))
    assert bias == pytest.approx(7.0 / n, rel=1e-9) and np.abs(halves).max() < 1e-12
    values = _deterministic(plan)
    bias, halves = plan.estimate(values)
    left, se = leftover_bias(halves)
    kept = values[0] - bias
    assert kept < 0 and left == pytest.approx(kept, rel=1e-9 if n <= 32 else 1e-2)
    # Per series, on the clusters that hold its rows (the second lacks a quarter of them).
    present = np.ones((2, n), bool)
    present[1, :n // 4] = False
    values = _deterministic(plan, present)
    bias2, halves2 = plan.estimate(values, present)
    kept2 = values[0] - bias2
    assert halves2.shape == (4, 2)
    assert leftover_bias(halves2)[0] == pytest.approx(kept2, rel=0.02)


def test_two_scale_check_with_independent_sides_and_few_clusters():
    """Two resampling groups (independent sides): each side's leftover grows by its own ratio, so the check
    recovers a sum of per-side terms. With 3 or 4 clusters the two halvings are distinct (there are only 3), so
    the halves' spread is not a copy of itself; a half whose deletions weigh nothing gives NaN, not the plug-in."""
    from wmeval.estimators.resample import JackknifePlan, leftover_bias

    group = np.repeat([0, 1], 16)
    plan = JackknifePlan.of(group)
    assert plan.halves.sum(axis=1).tolist() == [16, 16, 16, 16]
    assert all((plan.halves[:, group == g].sum(axis=1) == 8).all() for g in (0, 1))
    values = _deterministic(plan)
    bias, halves = plan.estimate(values)
    assert leftover_bias(halves)[0] == pytest.approx(values[0] - bias, rel=1e-9)
    for n in (3, 4):
        plan = JackknifePlan.of(np.zeros(n, dtype=int))
        assert len(plan.halves) == 4 and len({h.tobytes() for h in plan.halves}) == 4
        _, halves = plan.estimate(_deterministic(plan))
        assert np.isfinite(halves).sum() == (2 if n == 3 else 4)      # a half of 1 cluster has no jackknife
    # A series whose rows in a half lie in one of its deletion groups: that half has no correction for it (every
    # deletion removes all or none of them), so no estimate, where the plug-in would have passed for one.
    plan = JackknifePlan.of(np.zeros(40, dtype=int))
    first = np.flatnonzero(plan.halves[0])[:3]                       # the half's first deletion group (20 in 8)
    assert (plan.counts[plan.parts[1][1]][first] == 0).all()
    present = np.ones((2, 40), bool)
    present[1] = plan.halves[1]
    present[1, first] = True
    _, halves = plan.estimate(_deterministic(plan, present), present)
    assert np.isnan(halves[0, 1]) and np.isfinite(halves[0, 0]) and np.isfinite(halves[1, 1])


def test_bias_corrected_fd_withholds_its_interval_where_the_correction_fails():
    """d = 64, 32 episodes x 10 rows a side, independent sides, one distribution: the corrected FD keeps a bias of
    about 4 (benchmarks/coverage.py), and the old interval excluded the true 0 in most data sets. Now: a warning
    naming the check and NaN bounds. The same design at d = 4 keeps its interval, which holds 0."""
    rng = np.random.default_rng(22)
    ref, _ = _episodes(rng, d=64)
    fake, _ = _episodes(rng, d=64)
    with pytest.warns(RuntimeWarning, match="fails its two-scale check"):
        r = distribution_bootstrap(ref.x, fake.x, real_clusters=ref.episode, fake_clusters=fake.episode + 100,
                                   metric="fd_bias_corrected", n_resamples=150)
    assert np.isnan(r.low) and np.isnan(r.high) and r.point > 1.0
    ref, _ = _episodes(rng, d=4)
    fake, _ = _episodes(rng, d=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = distribution_bootstrap(ref.x, fake.x, real_clusters=ref.episode, fake_clusters=fake.episode + 100,
                                   metric="fd_bias_corrected", n_resamples=150)
    assert r.low <= 0.0 <= r.high


def test_a_failed_bias_check_leaves_the_point_and_withholds_the_rest():
    """replicate_rows: a source whose halves agree on a leftover above the limit loses its interval, paired
    difference and rank interval (the scorecard says why), and lends none: the others' paired differences and
    rank intervals are taken among themselves, and with a failed baseline there are no paired differences."""
    from wmeval.bootstrap.intervals import replicate_rows
    from wmeval.estimators.distributional import Replicates
    from wmeval.report.scorecard import cell

    rng = np.random.default_rng(23)
    counts = resample_counts(32, 300, rng)
    # Paired replicates (a shared episode effect): b would rank first, and a beats c in every replicate.
    reps = rng.normal(0.3, 0.05, size=(300, 1)) + rng.normal(0, 0.005, size=(300, 3)) + np.array([0.0, -0.2, 0.05])
    halves = np.array([[0.002, 0.08, 0.001], [0.004, 0.09, 0.0], [-0.001, 0.085, 0.002], [0.003, 0.075, -0.001]])
    wpts = pd.DataFrame({"metric": ["fd"] * 3, "condition": ["frame:pooled"] * 3, "source": ["a", "b", "c"],
                         "value": [0.3, 0.1, 0.35]})

    def rows_with(base):
        out = replicate_rows("w", [Replicates("fd", "frame:pooled", ["a", "b", "c"], reps, np.array([32, 32, 32]),
                                              {"jackknife_bias": np.full(3, 0.02), "leftover_bias": halves})],
                             wpts, BOOT, base, counts)
        return {r["source"]: r for r in out if r["metric"] == "fd_bias_corrected"}

    bc = rows_with("a")
    assert [bc[s]["bias_check"] for s in "abc"] == ["passed", "failed", "passed"]
    assert bc["b"]["leftover_bias"] == pytest.approx(0.0825) and bc["b"]["leftover_bias_se"] > 0
    assert np.isnan([bc["b"][k] for k in ("low", "high", "diff_low", "p_better", "rank", "rank_low",
                                          "rank_high")]).all()
    assert bc["b"]["point"] == pytest.approx(0.08)
    # a and c are ranked between themselves (b, always better, would have pushed both down a rank).
    assert (bc["a"]["rank_low"], bc["a"]["rank_high"], bc["c"]["rank_low"], bc["c"]["rank_high"]) == (1, 1, 2, 2)
    assert (bc["a"]["rank"], bc["c"]["rank"]) == (1, 2)
    assert bc["c"]["p_better"] == 0.0 and bc["c"]["diff_point"] == pytest.approx(0.05)
    assert "no interval: the bias correction fails its check" in cell(pd.Series(bc["b"]))
    assert "[" in cell(pd.Series(bc["a"]))
    failed_base = rows_with("b")
    assert all(np.isnan(failed_base[s]["diff_point"]) and np.isnan(failed_base[s]["p_better"]) for s in "abc")
    assert failed_base["a"]["rank_high"] == 1 and np.isfinite(failed_base["c"]["low"])
    halves = halves[:, :2]
    reps, wpts = reps[:, :2], wpts.iloc[:2]
    counts_2 = counts

    def two(h):
        return replicate_rows("w", [Replicates("fd", "frame:pooled", ["a", "b"], reps, np.array([32, 32]),
                                               {"jackknife_bias": np.array([0.02, 0.02]), "leftover_bias": h})],
                              wpts, BOOT, "a", counts_2)
    # Halves that disagree (a leftover within twice its standard error) do not fail the check.
    noisy = np.array([[0.0, 0.3], [0.0, -0.2], [0.0, 0.25], [0.0, -0.15]])
    assert [r["bias_check"] for r in two(noisy) if r["metric"] == "fd_bias_corrected"] == ["passed", "passed"]
    # Fewer than 2 usable halves: not checked.
    lone = np.array([[0.0, 0.3], [0.0, np.nan], [np.nan, np.nan], [np.nan, np.nan]])
    assert [r["bias_check"] for r in two(lone) if r["metric"] == "fd_bias_corrected"] == ["passed", "unchecked"]


def test_studentized_interval_reflects_the_quantiles_of_t_and_skips_replicates_without_a_scale():
    """Bootstrap-t: (T - t_hi se, T - t_lo se) with t* = (T* - T) / se*. On replicates whose t* are skewed right,
    the interval reaches further below T than above it (a percentile orientation, T + t se, would do the
    opposite); replicates with a NaN value or a zero or NaN se* are left out, not counted as t = inf."""
    t = np.linspace(-1.0, 3.0, 401)                       # quantiles 0.025 and 0.975 of t*: -0.9 and 2.9
    center, se = 1.0, 0.5
    rse = np.full(len(t), 2.0)
    reps = center + t * rse
    lo, hi = studentized_interval(center, se, reps, rse, 0.95)
    assert (lo, hi) == pytest.approx((center - 2.9 * se, center + 0.9 * se), rel=1e-12)
    bad_reps, bad_se = np.r_[reps, np.nan, 50.0, 50.0], np.r_[rse, 1.0, 0.0, np.nan]
    assert studentized_interval(center, se, bad_reps, bad_se, 0.95) == (lo, hi)
    assert np.isnan(studentized_interval(center, 0.0, reps, rse, 0.95)).all()


def test_distance_interval_is_the_boundary_interval_near_zero_and_the_bootstrap_t_far_from_it():
    """The switch on the replicates' linear share: a same-distribution pair (truth 0) keeps the boundary interval,
    which covers a true 0; a clear shift takes the bootstrap-t; each is exactly its own function's interval."""
    rng = np.random.default_rng(21)
    ref, a = _episodes(rng, rho=0.5)
    counts = resample_counts(32, 400, rng)
    c = counts.astype(float)
    for shift, method in ((0.0, "boundary"), (1.0, "bootstrap-t")):
        fake, _ = _episodes(rng, rho=0.5, latent=a)
        fake.x = fake.x + np.array([shift, 0, 0, 0])
        kb = KernelBlocks.of(ref, fake, 32)
        u, reps, se, rse = kb.at(np.ones(32)), kb.at(c), kb.standard_error(np.ones(32)), kb.standard_error(c)
        lo, hi, got = distance_interval(u, reps, counts, kb.plugin(), 0.95, se, rse)
        assert got == method
        want = (boundary_interval(u, reps, counts, kb.plugin(), 0.95) if method == "boundary"
                else studentized_interval(u, se, reps, rse, 0.95))
        assert (lo, hi) == want and lo < u < hi


def test_distance_interval_falls_back_to_the_boundary_interval_without_a_usable_standard_error():
    """In the linear regime but with no standard error on the data (NaN or 0) or none on any replicate, the
    bootstrap-t has no scale: the boundary interval, named so."""
    rng = np.random.default_rng(22)
    ref, a = _episodes(rng, rho=0.5)
    fake, _ = _episodes(rng, rho=0.5, latent=a)
    fake.x = fake.x + np.array([1.0, 0, 0, 0])
    kb = KernelBlocks.of(ref, fake, 32)
    counts = resample_counts(32, 400, rng)
    u, reps = kb.at(np.ones(32)), kb.at(counts.astype(float))
    assert linear_share(reps, counts) > STUDENTIZE_LINEAR_SHARE
    rse = kb.standard_error(counts.astype(float))
    want = (*boundary_interval(u, reps, counts, kb.plugin(), 0.95), "boundary")
    for se, r in ((np.nan, rse), (0.0, rse), (kb.standard_error(np.ones(32)), np.zeros_like(rse))):
        assert distance_interval(u, reps, counts, kb.plugin(), 0.95, se, r) == want
