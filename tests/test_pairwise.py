"""Paired-comparison statistics: win rates, Bradley-Terry against an independent maximum-likelihood fit, the
crossed (trajectory x rater) bootstrap, and the exclusion rules' accounting."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize

from wmeval.human import (
    ExclusionRules,
    apply_exclusions,
    bradley_terry,
    crossed_bootstrap,
    human_agreement,
    intra_rater_consistency,
    pairwise_accuracy,
    validate_evaluator,
    win_rates,
)


def judgments(rows):
    return pd.DataFrame(rows, columns=["rater", "trajectory", "left", "right", "choice"])


def simulate(rng, strengths, n_raters, n_traj, per_cell, rater_sd=0.0, traj_sd=0.0):
    """Judgments from a Bradley-Terry model; rater r and trajectory t shift every candidate's strength by a
    random effect of their own (a rater's taste, a trajectory's quirks) of sd ``rater_sd`` / ``traj_sd``."""
    names = list(strengths)
    s = np.array([strengths[n] for n in names])
    rater_fx = rng.normal(0, rater_sd, (n_raters, len(names)))
    traj_fx = rng.normal(0, traj_sd, (n_traj, len(names)))
    rows = []
    for r in range(n_raters):
        for t in range(n_traj):
            for _ in range(per_cell):
                i, j = rng.choice(len(names), 2, replace=False)
                si, sj = (s + rater_fx[r] + traj_fx[t])[[i, j]]
                win = i if rng.random() < 1 / (1 + np.exp(sj - si)) else j
                rows.append((f"r{r}", t, names[i], names[j], names[win]))
    return judgments(rows)


def test_win_rates_count_every_comparison_by_hand():
    df = judgments([("a", 0, "m", "n", "m"), ("a", 1, "n", "m", "m"), ("b", 0, "m", "o", "o"),
                    ("b", 1, "n", "o", "n")])
    got = win_rates(df)
    assert got.to_dict() == {"m": 2 / 3, "n": 1 / 3, "o": 1 / 2}
    weighted = win_rates(df, weights=np.array([3, 0, 1, 1]))   # the first counted 3 times, the second not at all
    assert weighted.to_dict() == {"m": 3 / 4, "n": 1 / 4, "o": 1 / 2}


def test_bradley_terry_weights_are_repeated_judgments_and_an_unseen_candidate_has_no_score():
    df = simulate(np.random.default_rng(5), {"a": 0.5, "b": 0.0, "c": -0.5}, 3, 4, 3)
    w = np.random.default_rng(6).integers(0, 4, len(df))
    dup = df.loc[np.repeat(np.arange(len(df)), w)].reset_index(drop=True)
    pd.testing.assert_series_equal(bradley_terry(df, weights=w), bradley_terry(dup))
    unseen = np.where((df["left"] == "c") | (df["right"] == "c"), 0, 1)
    got = bradley_terry(df, candidates=["a", "b", "c"], weights=unseen)
    assert np.isnan(got["c"]) and np.isfinite(got[["a", "b"]]).all() and abs(got[["a", "b"]].sum()) < 1e-12
    with pytest.raises(ValueError, match="non-negative integers"):
        bradley_terry(df, weights=np.full(len(df), 0.5))


def test_bradley_terry_equals_the_maximum_likelihood_fit():
    """choix's ILSR (alpha 0) against the BT likelihood maximized by scipy: the same scores, centered."""
    df = simulate(np.random.default_rng(0), {"a": 1.0, "b": 0.3, "c": 0.0, "d": -0.8}, 6, 10, 5)
    got = bradley_terry(df, alpha=0.0)
    names = list(got.index)
    i = df["choice"].map(names.index).to_numpy()
    j = np.where(df["choice"] == df["left"], df["right"], df["left"])
    j = pd.Series(j).map(names.index).to_numpy()

    def nll(s):
        return np.sum(np.logaddexp(0, s[j] - s[i]))

    ml = minimize(nll, np.zeros(len(names)), method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(got.to_numpy(), ml - ml.mean(), atol=1e-5)
    assert got.idxmax() == "a" and got.idxmin() == "d"


def test_bradley_terry_recovers_known_strengths():
    truth = {"a": 1.0, "b": 0.3, "c": 0.0, "d": -1.3}
    got = bradley_terry(simulate(np.random.default_rng(1), truth, 20, 20, 10))
    t = np.array(list(truth.values()))
    np.testing.assert_allclose(got[list(truth)].to_numpy(), t - t.mean(), atol=0.12)


def test_crossed_weights_are_products_of_the_two_multiplicities():
    """A statistic that reports its weights: each judgment's weight is m_trajectory * m_rater."""
    df = judgments([(r, t, "m", "n", "m") for r in ("a", "b", "c") for t in range(4)])
    seen = []

    def spy(d, w):
        seen.append(w.copy())
        return pd.Series({"total": float(w.sum())})

    out = crossed_bootstrap(df, spy, n_resamples=50, seed=3)
    rng = np.random.default_rng(3)
    traj, rater = pd.factorize(df["trajectory"])[0], pd.factorize(df["rater"])[0]
    for w in seen[1:6]:                        # seen[0] is the point (all ones)
        mt = np.bincount(rng.integers(0, 4, size=4), minlength=4)
        mr = np.bincount(rng.integers(0, 3, size=3), minlength=3)
        np.testing.assert_array_equal(w, mt[traj] * mr[rater])
    assert out.attrs["levels"] == {"trajectory": 4, "rater": 3}
    with pytest.raises(ValueError, match="factor 'rater' has 1 level"):
        crossed_bootstrap(df[df.rater == "a"], spy, n_resamples=10)


@pytest.mark.slow
def test_crossed_intervals_cover_where_resampling_trajectories_alone_does_not():
    """Raters with strong individual taste: the crossed interval of `a`'s win rate is wider than the
    trajectory-only one, and over simulated studies it covers the population value far more often."""
    truth = {"a": 0.4, "b": 0.0, "c": -0.4}
    big = simulate(np.random.default_rng(99), truth, 400, 60, 1, rater_sd=1.0)  # the population's win rate
    target = win_rates(big)["a"]
    hits = {"crossed": 0, "trajectory": 0}
    widths = {"crossed": [], "trajectory": []}
    for k in range(12):
        df = simulate(np.random.default_rng(k), truth, 6, 8, 6, rater_sd=1.0)
        for name, factors in (("crossed", ("trajectory", "rater")), ("trajectory", ("trajectory",))):
            ci = crossed_bootstrap(df, lambda d, w: win_rates(d, weights=w), n_resamples=150, seed=k,
                                   factors=factors).loc["a"]
            hits[name] += ci.low <= target <= ci.high
            widths[name].append(ci.high - ci.low)
    assert np.median(widths["crossed"]) > 2 * np.median(widths["trajectory"])      # measured: 0.34 vs 0.12
    assert hits["crossed"] >= 10 and hits["crossed"] >= hits["trajectory"] + 4, hits   # measured: 12 vs 5 of 12


def test_exclusions_are_declared_and_counted_never_silent():
    rows = [("a", 0, "m", "n", "m", 900, False, None), ("a", 1, "truth", "corrupt", "truth", 800, True, "truth"),
            ("b", 0, "m", "n", "n", 700, False, None), ("b", 1, "truth", "corrupt", "corrupt", 900, True, "truth"),
            ("c", 0, "m", "n", "m", 100, False, None), ("c", 1, "m", "n", "n", 1200, False, None)]
    df = pd.DataFrame(rows, columns=["rater", "trajectory", "left", "right", "choice", "response_ms",
                                     "attention_check", "expected"])
    kept, report = apply_exclusions(df, ExclusionRules(max_failed_checks=0, min_response_ms=300))
    assert report["raters_excluded"] == ["b"] and report["attention_check_trials"] == 2
    assert report["judgments_of_excluded_raters"] == 1 and report["judgments_too_fast"] == 1
    assert report["kept"] == len(kept) == 2 and set(kept["rater"]) == {"a", "c"}
    assert kept["response_ms"].min() >= 300
    lenient, r2 = apply_exclusions(df, ExclusionRules(max_failed_checks=1))
    assert r2["raters_excluded"] == [] and r2["kept"] == 4 == len(lenient)


def test_missing_or_malformed_study_fields_are_refused_not_guessed():
    base = dict(rater=["a", "a"], trajectory=[0, 1], left=["m", "truth"], right=["n", "corrupt"],
                choice=["m", "truth"], response_ms=[900.0, 800.0], attention_check=[False, True],
                expected=[None, "truth"])
    rules = ExclusionRules(min_response_ms=300)
    with pytest.raises(ValueError, match="row 1: an attention check without its 'expected' choice"):
        apply_exclusions(pd.DataFrame({**base, "expected": [None, None]}), rules)
    with pytest.raises(ValueError, match="row 0: response_ms is empty"):
        apply_exclusions(pd.DataFrame({**base, "response_ms": [np.nan, 800.0]}), rules)
    with pytest.raises(ValueError, match="row 0: attention_check = 'no'; expected True or False"):
        apply_exclusions(pd.DataFrame({**base, "attention_check": ["no", "yes"]}), rules)
    mixed = judgments([("a", 0, "m", "n", "m"), ("a", 1, "m", "n", "n")]).assign(question=["realism", "consistency"])
    for fn in (win_rates, bradley_terry, lambda d: crossed_bootstrap(d, lambda x, w: win_rates(x, weights=w))):
        with pytest.raises(ValueError, match=r"questions \['consistency', 'realism'\]; analyse one at a time"):
            fn(mixed)


def test_bad_judgments_name_the_row_and_value():
    with pytest.raises(ValueError, match=r"row 1: choice 'x' is neither candidate shown \('m', 'n'\)"):
        win_rates(judgments([("a", 0, "m", "n", "m"), ("a", 1, "m", "n", "x")]))
    with pytest.raises(ValueError, match=r"columns \['choice'\] are missing"):
        bradley_terry(pd.DataFrame({"rater": ["a"], "trajectory": [0], "left": ["m"], "right": ["n"]}))
    with pytest.raises(ValueError, match="row 0: both candidates are 'm'"):
        win_rates(judgments([("a", 0, "m", "m", "m")]))


def test_pairwise_accuracy_and_the_human_ceiling_by_hand():
    df = judgments([("a", 0, "m", "n", "m"), ("b", 0, "n", "m", "m"), ("c", 0, "m", "n", "n"),
                    ("a", 0, "n", "m", "m"),                 # a repeats the trial: never paired with itself
                    ("a", 1, "m", "o", "o")])                # judged once: no pair of raters
    scores = pd.DataFrame({"trajectory": [0, 0, 1, 1], "candidate": ["m", "n", "m", "o"], "value": [0.1, 0.3, 0.2, 0.2]})
    # lower is better: m (0.1) beats n (0.3): the metric agrees with rows 0, 1, 3 and not 2; row 4 is a tie (1/2)
    assert pairwise_accuracy(df, scores, higher_is_better=False) == pytest.approx(3.5 / 5)
    assert pairwise_accuracy(df, scores, higher_is_better=True) == pytest.approx(1.5 / 5)
    # distinct-rater pairs on (0, {m, n}): a-b, a-c, b-c, a'-b, a'-c: agree a-b and a'-b -> 2 / 5
    assert human_agreement(df) == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="row 4: no score for trajectory 1 and candidate 'o'"):
        pairwise_accuracy(df, scores.iloc[:3], higher_is_better=False)


def test_an_evaluator_that_tracks_the_truth_is_validated_and_noise_is_not():
    truth = {"a": 1.0, "b": 0.0, "c": -1.0}
    df = simulate(np.random.default_rng(7), truth, 6, 8, 3)
    true_scores = pd.DataFrame([(t, c, v) for t in range(8) for c, v in truth.items()],
                               columns=["trajectory", "candidate", "value"])
    noise = true_scores.assign(value=np.random.default_rng(8).normal(size=len(true_scores)))
    good = validate_evaluator(df, true_scores, higher_is_better=True, n_resamples=200)
    bad = validate_evaluator(df, noise, higher_is_better=True, n_resamples=200)
    assert good.at["evaluator", "validated"] and not bad.at["evaluator", "validated"]
    assert good.at["evaluator", "point"] > 0.7 > bad.at["evaluator", "point"]
    assert good.at["human ceiling", "point"] == bad.at["human ceiling", "point"]          # the same judgments
    # BT with these gaps: two raters agree with probability p^2 + (1 - p)^2, 0.60 and 0.79 for gaps 1 and 2
    assert 0.55 < good.at["human ceiling", "point"] < 0.8


def test_intra_rater_consistency_on_repeated_trials():
    df = judgments([("a", 0, "m", "n", "m"), ("a", 0, "n", "m", "m"),     # shown again, sides swapped: agrees
                    ("a", 1, "m", "n", "n"), ("a", 1, "m", "n", "m"),     # disagrees
                    ("b", 0, "m", "n", "m"), ("b", 0, "m", "n", "m"), ("b", 1, "m", "o", "o"),
                    ("c", 0, "m", "n", "n")])                           # c repeats nothing
    got = intra_rater_consistency(df)
    assert got.loc["a", "repeated_trials"] == 2 and got.loc["a", "agreement"] == 0.5
    assert got.loc["b", "agreement"] == 1.0 and np.isnan(got.loc["b", "alpha"])   # one value: alpha undefined
    assert got.loc["c", "repeated_trials"] == 0 and np.isnan(got.loc["c", "agreement"])
    # all raters: units (1, 1), (0, 1), (1, 1): o_11 = 4, o_01 = o_10 = 1, n = 6 -> alpha = 1 - 5 * 2 / (2 * 5) = 0
    assert got.loc["all raters", "agreement"] == pytest.approx(2 / 3) and got.loc["all raters", "alpha"] == 0.0
    # A rater who always picks the stronger candidate is perfectly consistent (alpha 1); a coin flipper is not.
    rng = np.random.default_rng(0)
    rows = []
    for t in range(30):
        for _ in range(2):
            pair = ["m", "n"] if t % 2 else ["n", "o"]
            rows.append(("steady", t, *pair, "m" if "m" in pair else "o"))      # m > n > o: the stronger
            rows.append(("coin", t, *pair, pair[rng.integers(2)]))
    got = intra_rater_consistency(judgments(rows))
    assert got.loc["steady", "alpha"] == 1.0 and got.loc["coin", "alpha"] < 0.4


def test_prepared_statistics_give_the_generic_replicates_bit_for_bit(monkeypatch):
    """The study's statistics do their weight-free work once per table (PreparedStatistic); every replicate, and
    so every interval, is the generic ``statistic(df, w)``'s to the bit, ties, unseen candidates and all."""
    from wmeval.human import pairwise
    from wmeval.human.pairwise import rates_and_scores

    truth = {"a": 1.0, "b": 0.0, "c": -1.0, "d": 0.0}
    df = simulate(np.random.default_rng(3), truth, 5, 6, 2, rater_sd=0.5)
    names = ["a", "b", "c", "d", "never-shown"]
    stat = rates_and_scores(names)
    fast = crossed_bootstrap(df, stat, n_resamples=80, seed=4)
    generic = crossed_bootstrap(df, stat.statistic, n_resamples=80, seed=4)        # no prepare: the generic path
    pd.testing.assert_frame_equal(fast, generic, check_exact=True)
    assert fast.at["win_rate:never-shown", "undefined_replicates"] == 80
    scores = pd.DataFrame([(t, c, round(v + 0.3 * t)) for t in range(6) for c, v in truth.items()],
                          columns=["trajectory", "candidate", "value"])            # rounded: metric ties
    want = validate_evaluator(df, scores, higher_is_better=True, n_resamples=80, seed=2)
    monkeypatch.setattr(pairwise, "PreparedStatistic", lambda statistic, prepare: statistic)
    got = validate_evaluator(df, scores, higher_is_better=True, n_resamples=80, seed=2)
    pd.testing.assert_frame_equal(want, got, check_exact=True)


def test_a_prepared_statistic_that_disagrees_with_itself_is_refused():
    """A prepare() whose values are not the statistic's, in its order, would mislabel every interval: refused."""
    from wmeval.human.pairwise import PreparedStatistic

    df = simulate(np.random.default_rng(5), {"a": 1.0, "b": 0.0}, 3, 4, 2)
    rates = PreparedStatistic(lambda d, w: win_rates(d, weights=w),
                              lambda d: (lambda w: win_rates(d, weights=w).to_numpy()[::-1]))   # reversed order
    with pytest.raises(ValueError, match="the same values in the same order"):
        crossed_bootstrap(df, rates, n_resamples=10)
