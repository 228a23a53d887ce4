"""The permutation test of FD = 0 that decides whether 0 is in a bias-corrected FD's interval."""

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from wmeval.estimators.distributional import Exchange, Settings, Side, _row_in, _ViewFD, replicates, view_sets
from wmeval.estimators.resample import permutation_p_value, with_zero_test
from wmeval.metrics import frechet_distance
from wmeval.stats import distribution_bootstrap
from wmeval.tables import KEY_COLUMNS, rollout_table, tensor_array

TINY = float(np.nextafter(0.0, 1.0))


def _trajectories(rng, n_groups=6, realized=1, samples=3, steps=4, d=3, shift=0.0, invalid=()):
    """A reference with ``realized`` trajectories per group and a model with ``samples``, ``steps`` rows each (with
    their step), in two strata by step; the model's rows of the groups in ``invalid`` at step 0 left out (as a
    model's invalid rows are)."""
    def side(k_range, offset, model):
        xs, traj, st = [], [], []
        for g in range(n_groups):
            for k in k_range:
                for t in range(steps):
                    if model and g in invalid and t == 0:
                        continue
                    xs.append(rng.normal(size=d) + offset + 0.3 * t)
                    traj.append((g, k, t))
                    st.append("early" if t < steps // 2 else "late")
        traj = np.array(traj, dtype=np.int64)
        return Side(np.array(xs), traj[:, 0], np.array(st), traj)
    return side(range(-realized, 0), 0.0, False), side(range(samples), shift, True)


def _weighted_fd(x_a, w_a, x_b, w_b) -> float:
    """The FD of two weighted row sets, each side's mean and covariance (weights as multiplicities, n - 1 = the
    weights' sum less 1) computed by hand."""
    def moments(x, w):
        n = w.sum()
        mu = (w[:, None] * x).sum(0) / n
        return mu, ((w[:, None] * x).T @ x - n * np.outer(mu, mu)) / (n - 1)
    (m1, s1), (m2, s2) = moments(x_a[w_a > 0], w_a[w_a > 0]), moments(x_b[w_b > 0], w_b[w_b > 0])
    return frechet_distance(m1, s1, m2, s2)


def _by_hand(ex: Exchange, c: np.ndarray, weights: dict[str, float]) -> tuple[float, float]:
    """One permuted data set's FD, pooled and stratified, from its rows and weights (row ``c``)."""
    x, unit, st = ex.sets.reference.x, ex.sets.reference.episode, ex.sets.reference.stratum
    U = len(ex.group)
    w_ref, w_model = c[:U][unit], c[U:][unit]
    pooled = _weighted_fd(x, w_ref, x, w_model)
    strat = sum(w * _weighted_fd(x[st == s], w_ref[st == s], x[st == s], w_model[st == s]) for s, w in weights.items())
    return pooled, strat


def test_a_paired_permutation_trades_each_group_whole_and_keeps_each_sides_weight():
    rng = np.random.default_rng(0)
    ref, fake = _trajectories(rng, n_groups=40, realized=4, samples=1)
    ex = Exchange.of("frame", ref, fake, ["early", "late"])
    U = len(ex.group)
    assert U == 40 * 5 and ex.on_ref.sum() == 160
    c = ex.counts(400, np.random.default_rng(1))
    w_ref, w_model = c[:, :U], c[:, U:]
    assert np.array_equal(w_ref[0], ex.on_ref.astype(float))                  # row 0: the data
    assert np.array_equal(w_model[0], (~ex.on_ref).astype(float))
    traded = np.zeros((400, 40), bool)
    for g in range(40):
        m = ex.group == g
        # A group trades whole or not at all: its 4 realized futures go to the model's side at weight 1/4 each and
        # its sample to the reference's at weight 4, so each side keeps the group's rows' weight.
        kept = (w_ref[:, m] == ex.on_ref[m]).all(1) & (w_model[:, m] == ~ex.on_ref[m]).all(1)
        flip = (w_ref[:, m] == np.where(ex.on_ref[m], 0, 4)).all(1) & \
               (w_model[:, m] == np.where(ex.on_ref[m], 0.25, 0)).all(1)
        assert (kept ^ flip).all()
        traded[:, g] = flip
        assert np.allclose(w_ref[:, m] @ ex.rows[m], ex.rows[m] @ ex.on_ref[m])
    assert not traded[0].any() and abs(traded[1:].mean() - 0.5) < 0.02       # each group traded half the time
    assert len({r.tobytes() for r in traded[1:60]}) == 59                     # independently


def test_independent_sides_deal_the_clusters_anew():
    rng = np.random.default_rng(4)
    ref, fake = _trajectories(rng, n_groups=1, realized=5, samples=3)
    ex = Exchange.of("frame", ref, fake, [], paired=False)
    c = ex.counts(3000, np.random.default_rng(5))
    U = len(ex.group)
    assert np.array_equal(c[:, :U] + c[:, U:], np.ones((3000, U)))            # each unit on one side, weight 1
    assert (c[:, :U].sum(1) == 5).all()                                        # as many to the reference as it had
    assert np.allclose(c[1:, :U].mean(0), 5 / 8, atol=0.03)


@pytest.mark.parametrize("d", [3, 40])
def test_the_permuted_fd_is_the_fd_of_the_rows_traded_by_hand(d):
    """d = 3: per-unit moments; d = 40 (fewer rows a side than 2 d): the row Grams' sample space."""
    rng = np.random.default_rng(2)
    size = {"n_groups": 8, "steps": 6} if d < 10 else {"n_groups": 4, "steps": 4}
    ref, fake = _trajectories(rng, realized=2, samples=3, d=d, shift=0.3, **size)
    ex = Exchange.of("transition", ref, fake, ["early", "late"])
    assert (_ViewFD.of(ex.sets, 2 * len(ex.group)).grams[None] is None) == (d < 10)
    c = ex.counts(6, np.random.default_rng(3))
    weights = {"early": 0.25, "late": 0.75}
    pooled, strat = ex.statistics(c, np.array([weights["early"], weights["late"]]), n_jobs=1)
    for p in range(len(c)):
        # (rank-deficient covariances at d = 40: the hand computation's square root is the less accurate)
        assert (pooled[p], strat[p]) == pytest.approx(_by_hand(ex, c[p], weights), rel=1e-9 if d < 10 else 1e-6)
    # Row 0 is the data: the model's rows against the reference's.
    st = np.concatenate([ref.stratum, fake.stratum])
    assert pooled[0] == pytest.approx(_weighted_fd(ref.x, np.ones(len(ref.x)), fake.x, np.ones(len(fake.x))))
    assert strat[0] == pytest.approx(sum(
        w * _weighted_fd(ref.x[ref.stratum == s], np.ones((ref.stratum == s).sum()), fake.x[fake.stratum == s],
                         np.ones((fake.stratum == s).sum())) for s, w in weights.items()))
    assert len(st) == len(ex.sets.reference.x)


def test_paired_permuted_fds_are_computed_on_each_groups_two_sides_lumped():
    """A paired permutation weights a group's realized trajectories alike and its model trajectories alike, so the
    FDs come from 2 units a group (not one a trajectory), equal to the unit-by-unit FDs; weights that differ within
    a (group, side) are computed unit by unit."""
    rng = np.random.default_rng(8)
    ref, fake = _trajectories(rng, n_groups=10, realized=3, samples=4, steps=6, d=3, shift=0.2)
    ex = Exchange.of("transition", ref, fake, ["early", "late"])
    U = len(ex.group)
    c = ex.counts(40, np.random.default_rng(9))
    sets, lumped = ex._lumped(c)
    assert U == 10 * 7 and lumped.shape == (40, 2 * 2 * 10) and len(np.unique(sets.reference.episode)) == 20
    assert np.array_equal(sets.reference.x, ex.sets.reference.x)
    weights = np.array([0.4, 0.6])
    pooled, strat = ex.statistics(c, weights, n_jobs=1)
    by_unit = _ViewFD.of(ex.sets, 2 * U).many(c)[:, :, 0]
    np.testing.assert_allclose(pooled, by_unit[:, 0], rtol=1e-10)
    np.testing.assert_allclose(strat, by_unit[:, 1:] @ weights, rtol=1e-10)
    # One trajectory's weight changed: not lumpable, so computed as given (and still the weighted rows' FD).
    odd = c.copy()
    odd[1:, 0] *= 2.0
    assert ex._lumped(odd)[0] is ex.sets
    p_odd, s_odd = ex.statistics(odd, weights, n_jobs=1)
    assert (p_odd[1], s_odd[1]) == pytest.approx(_by_hand(ex, odd[1], {"early": 0.4, "late": 0.6}), rel=1e-9)
    deal = Exchange.of("frame", ref, fake, [], paired=False)
    dealt = deal.counts(5, rng)
    assert deal._lumped(dealt)[0] is deal.sets and deal._lumped(dealt)[1] is dealt


def test_realized_rows_at_a_models_invalid_steps_are_left_out_of_the_test():
    """A model invalid at step 0 of groups 1 and 4: the realized rows of those steps take no part in the test, so
    that a trade moves the same steps both ways (with a drift over steps they would otherwise differ by it)."""
    rng = np.random.default_rng(6)
    ref, fake = _trajectories(rng, n_groups=6, realized=1, samples=2, steps=4, invalid=(1, 4))
    ex = Exchange.of("frame", ref, fake, [])
    assert len(ex.sets.reference.x) == len(ref.x) - 2 + len(fake.x)
    kept = ex.sets.reference.x[:len(ref.x) - 2]
    dropped = ref.x[np.isin(ref.trajectory[:, 0], [1, 4]) & (ref.trajectory[:, 2] == 0)]
    assert not any((kept == row).all(1).any() for row in dropped)
    # Without steps (distribution_bootstrap's clusters) every row takes part.
    plain = Exchange.of("frame", dataclasses.replace(ref, trajectory=ref.trajectory[:, :2]),
                        dataclasses.replace(fake, trajectory=fake.trajectory[:, :2]), [])
    assert len(plain.sets.reference.x) == len(ref.x) + len(fake.x)


def test_row_in_matches_whole_rows_and_takes_empty_arrays():
    a = np.array([[0, 1], [1, 0], [2, 5], [-3, 1]])
    b = np.array([[1, 0], [-3, 1], [0, 5]])
    assert _row_in(a, b).tolist() == [False, True, False, True]
    assert _row_in(a, b[:0]).tolist() == [False] * 4 and _row_in(a[:0], b).shape == (0,)


def test_exchange_needs_trajectories_on_both_sides():
    rng = np.random.default_rng(4)
    ref, fake = _trajectories(rng)
    assert Exchange.of("frame", ref, dataclasses.replace(fake, trajectory=None), []) is None
    with pytest.raises(ValueError, match="both sides"):
        Exchange.of("frame", ref, dataclasses.replace(fake, trajectory=ref.trajectory[:len(fake.x)]), [])


def test_permutation_p_value_counts_the_identity_and_ties_at_any_scale():
    assert permutation_p_value(np.array([3.0, 1.0, 2.0, 5.0])) == 0.5
    assert permutation_p_value(np.array([3.0, 1.0, 2.0, 0.0])) == 0.25          # never below 1 / P
    assert permutation_p_value(np.array([1.0, 1.0 - 1e-13, 0.5])) == pytest.approx(2 / 3)
    assert permutation_p_value(np.array([1.0, np.nan, 0.5])) == pytest.approx(2 / 3)
    assert np.isnan(permutation_p_value(np.array([np.nan, 1.0])))
    # A clone of the reference: every FD is rounding around 0, tied at the data's scale.
    assert permutation_p_value(np.array([3e-17, 1e-17, 0.0, 2e-17]), scale=1.0) == 1.0
    # The same clearly separated statistics at any feature scale give the same p-value.
    t = np.array([4.0, 1.0, 2.0, 4.0 * (1 - 1e-12), 3.9])
    for size in (1.0, 1e-5, 1e-10):
        assert permutation_p_value(t * size, scale=2.0 * size) == 0.4             # the data and its tie


def test_with_zero_test_puts_0_in_or_takes_it_out():
    assert with_zero_test(0.2, 0.9, 0.30, 0.95) == (0.0, 0.9)                  # accepted: widened to hold 0
    assert with_zero_test(-0.1, 0.9, 0.30, 0.95) == (-0.1, 0.9)
    assert with_zero_test(-0.4, -0.1, 0.30, 0.95) == (-0.4, 0.0)
    assert with_zero_test(-0.1, 0.9, 0.01, 0.95) == (TINY, 0.9)                # rejected: opened at 0
    assert with_zero_test(0.2, 0.9, 0.01, 0.95) == (0.2, 0.9)
    assert with_zero_test(-0.4, -0.1, 0.01, 0.95) == (-0.4, -0.1)             # no interval both agree on: kept
    assert with_zero_test(-0.4, 0.0, 0.01, 0.95) == (-0.4, 0.0)
    assert with_zero_test(-0.1, 0.9, 25 / 500, 0.95)[0] == TINY               # p = alpha rejects, at every level
    assert with_zero_test(-0.1, 0.9, 50 / 500, 0.90)[0] == TINY
    assert with_zero_test(-0.1, 0.9, 100 / 500, 0.80)[0] == TINY
    assert with_zero_test(-0.1, 0.9, 26 / 500, 0.95)[0] == -0.1
    assert with_zero_test(-0.1, 0.9, float("nan"), 0.95) == (-0.1, 0.9)       # no test: unchanged
    assert np.isnan(with_zero_test(float("nan"), float("nan"), 0.01, 0.95)).all()


def _paired_episodes(rng, n=24, rows=6, d=3, shift=0.0, paired=True):
    ep = np.repeat(np.arange(n), rows)
    a = rng.normal(size=(n, d))
    b = a if paired else rng.normal(size=(n, d))
    x = np.sqrt(0.5) * a[ep] + np.sqrt(0.5) * rng.normal(size=(n * rows, d))
    y = shift + np.sqrt(0.5) * b[ep] + np.sqrt(0.5) * rng.normal(size=(n * rows, d))
    return x, y, ep


@pytest.mark.parametrize("paired", [True, False])
def test_distribution_bootstrap_tests_0_by_permutation(paired, monkeypatch):
    rng = np.random.default_rng(7)
    x, y, ep = _paired_episodes(rng, paired=paired)
    ids = ep if paired else ep + 1000
    null = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=ids, metric="fd_bias_corrected",
                                  n_resamples=200, seed=1)
    shifted = distribution_bootstrap(x, y + 1.0, real_clusters=ep, fake_clusters=ids,
                                     metric="fd_bias_corrected", n_resamples=200, seed=1)
    assert null.p_value > 0.05 and null.low <= 0.0 <= null.high
    assert shifted.p_value == 1 / 200 and shifted.low > 0
    # The p-value is the share of permuted data sets whose plug-in FD is at least the data's: paired sides trade
    # each episode's rows, independent sides deal the 48 episodes anew, 24 to each side.
    seen = {}
    counts = Exchange.counts

    def record(self, n_permutations, rng):
        seen["exchange"], seen["counts"] = self, counts(self, n_permutations, rng)
        return seen["counts"]
    monkeypatch.setattr(Exchange, "counts", record)
    again = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=ids, metric="fd_bias_corrected",
                                   n_resamples=200, seed=1)
    assert again.p_value == null.p_value
    ex, c = seen["exchange"], seen["counts"]
    assert ex.paired == paired
    unit = ex.sets.reference.episode                                          # each row's unit, x's rows then y's
    of_x = np.arange(len(unit)) < len(x)
    rows_episode = np.concatenate([ep, ep])
    on_ref = c[:, unit] > 0                                                   # (P, rows)
    for p in range(1, 200):
        for e in range(24):                                                   # an episode's rows move together
            for side in (True, False):
                assert len(set(on_ref[p, (rows_episode == e) & (of_x == side)].tolist())) == 1
            if paired:                                                        # ... and trade as a pair
                assert on_ref[p, (rows_episode == e) & of_x][0] != on_ref[p, (rows_episode == e) & ~of_x][0]
        assert paired or on_ref[p].sum() == 24 * 6
    fds = np.array([_by_hand(ex, c[p], {})[0] for p in range(200)])
    assert null.p_value == permutation_p_value(fds, ex.scale)
    assert 0.3 < on_ref[1:, :len(x)].mean() < 0.7


def test_distribution_bootstrap_opens_an_interval_the_test_rejects_0_for():
    """A small paired shift whose boundary interval holds 0 but whose permutation test rejects it: the interval
    the function returns is that interval opened at 0 (the boundary interval alone would hold 0)."""
    from wmeval.estimators import distributional

    hits = 0
    for seed in range(40):
        x, y, ep = _paired_episodes(np.random.default_rng(100 + seed), n=16, rows=5, d=8, shift=0.25)
        r = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=ep, metric="fd_bias_corrected",
                                   n_resamples=100, seed=seed)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(distributional, "with_zero_test", lambda lo, hi, p, level: (lo, hi))
            alone = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=ep, metric="fd_bias_corrected",
                                           n_resamples=100, seed=seed)
        assert alone.p_value == r.p_value and alone.point == r.point
        assert (r.low, r.high) == with_zero_test(alone.low, alone.high, r.p_value, 0.95)
        hits += alone.low <= 0 < alone.high and r.p_value <= 0.05
        if hits:
            assert r.low == TINY and r.high == alone.high
            break
    assert hits


def test_the_permutation_test_holds_its_level_at_a_true_0():
    """120 paired data sets from one distribution: the test rejects 0 in about 5% of them (2-12 of 120 by chance,
    P > 0.98), where a test blind to the pairing (dealing the episodes at random) rejects in few or none: a paired
    model's FD is small beside that of episodes dealt apart."""
    rng = np.random.default_rng(8)
    rejected = 0
    for i in range(120):
        x, y, ep = _paired_episodes(rng, n=16, rows=5, d=2)
        rejected += distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=ep, metric="fd_bias_corrected",
                                           n_resamples=100, seed=i).p_value <= 0.05
    assert 2 <= rejected <= 12


# ----------------------------------------------------------------------------- the pipeline's trajectories

def _embedding_table(source: str, regime: str, arrays: dict[str, np.ndarray], t0: int, valid=None) -> pa.Table:
    """A features table: per plan, ``(N, S, T, d)`` embeddings at steps ``t0..``, with their keys."""
    parts = []
    for plan, x in arrays.items():
        n, s, T, d = x.shape
        t = rollout_table(world="w", source=source, regime=regime, plan=plan, condition=plan, episodes=np.arange(n),
                          t=np.arange(t0, t0 + T), frames=None, states=x, actions=np.zeros((n, T, 1)),
                          frame_dtype="float32", valid=None if valid is None else valid[plan])
        parts.append(t.select(list(KEY_COLUMNS)).append_column("embedding", tensor_array(
            x.reshape(n * s * T, d).astype(np.float32))))
    return pa.concat_tables(parts)


def _world(rng, n=6, H=3, d=3, realized=2, samples={"m": 3, "k1": 1}, shift=0.0):
    truth = {p: rng.normal(size=(n, realized, H + 1, d)) for p in ("a", "b")}
    models = {m: {p: rng.normal(size=(n, k, H, d)) + shift for p in ("a", "b")} for m, k in samples.items()}
    valid = {p: np.ones((n, H), bool) for p in ("a", "b")}
    valid["b"][2, 1] = False                                         # the model's episode 2, plan b, step 2: invalid
    truth_t = pa.concat_tables([rollout_table(world="w", source="ground_truth", regime="realized", plan=p,
                                              condition=p, episodes=np.arange(n), t=np.arange(H + 1), frames=None,
                                              states=x, actions=np.zeros((n, H + 1, 1)), frame_dtype="float32")
                                for p, x in truth.items()])
    embs = {m: _embedding_table(m, "open_loop", arrays, 1, valid) for m, arrays in models.items()}
    return truth_t, _embedding_table("ground_truth", "realized", truth, 0), embs


def test_view_sets_give_each_row_its_trajectory_and_replicates_test_each_model_on_its_own_stream():
    rng = np.random.default_rng(9)
    n, H = 6, 3
    truth, truth_emb, embs = _world(rng, n=n, H=H)
    sets, _ = view_sets(truth, truth_emb, embs, ["frame", "transition"], False, n, H, "plan", [-1.0, 1.0], "w")
    vs = sets["transition"]
    ref, m = vs.reference, vs.sources["m"]
    # (group, sample, step): a group per (plan, episode), plans apart; realized futures -1, -2, the samples 0..2.
    assert set(map(tuple, ref.trajectory[:, :2].tolist())) == {(g, s) for g in range(2 * n) for s in (-1, -2)}
    assert set(map(tuple, m.trajectory[:, :2].tolist())) == {(g, s) for g in range(2 * n) for s in (0, 1, 2)}
    assert (ref.trajectory[:, 0] % n == ref.episode).all() and (m.trajectory[:, 0] % n == m.episode).all()
    assert set(ref.trajectory[:, 2].tolist()) == set(range(H))
    assert not ((m.trajectory[:, 0] == n + 2) & (m.trajectory[:, 2] == 1)).any()     # the invalid step
    assert ((m.trajectory[:, 0] == n + 2) & (m.trajectory[:, 2] == 2)).sum() == 3
    ex = Exchange.of("transition", ref, m, vs.strata)
    assert len(ex.group) == 2 * n * 5 and len(ex.sets.reference.x) == len(ref.x) - 2 + len(m.x)
    # The stage's p-values are each model's own test, pooled and stratified, on its own stream.
    cfg = Settings.defaults()
    counts = np.ones((2, n), np.int64)
    rngs = lambda view, src: np.random.default_rng(abs(hash((view, src))) % 2**32)     # noqa: E731
    reps = replicates(sets, counts, cfg, n_jobs=1, n_permutations=60, permutation_rng=rngs)
    got = {(r.metric, r.condition): dict(zip(r.sources, r.extra["p_value"])) for r in reps if "p_value" in r.extra}
    w = np.array([0.5, 0.5])
    for view in ("frame", "transition"):
        for src in ("m", "k1"):
            e = Exchange.of(view, sets[view].reference, sets[view].sources[src], sets[view].strata)
            pooled, strat = e.p_values(e.counts(60, rngs(view, src)), w, n_jobs=1)
            assert got["fd", f"{view}:pooled"][src] == pooled
            assert got["fd_stratified", f"{view}:uniform"][src] == strat
    alone, _ = view_sets(truth, truth_emb, {"m": embs["m"]}, ["frame"], False, n, H, "plan", [-1.0, 1.0], "w")
    reps_alone = replicates(alone, counts, cfg, n_jobs=1, n_permutations=60, permutation_rng=rngs)
    assert reps_alone[0].extra["p_value"][0] == got["fd", "frame:pooled"]["m"]
    # No permutations: no test.
    assert np.isnan(replicates(alone, counts, cfg, n_jobs=1)[0].extra["p_value"]).all()
