"""Synthetic raters (wmeval.human.simulate): determinism from stable keys, the declared choice probabilities,
taste and difficulty effects, attention checks, and the population truth of benchmarks/human_coverage.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wmeval.human import (
    ExclusionRules,
    apply_exclusions,
    bradley_terry,
    human_agreement,
    win_rates,
)
from wmeval.human.simulate import (
    RaterPopulation,
    SimulatedRater,
    design_trials,
    simulate_judgments,
)

ROOT = Path(__file__).resolve().parents[1]
STRENGTHS = {"a": 0.8, "b": 0.2, "c": -0.1, "d": -0.9}


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_human_coverage", ROOT / "benchmarks" / "human_coverage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def population(**kw) -> RaterPopulation:
    return RaterPopulation({"realism": dict(STRENGTHS), "consistency": {"a": 0.0, "b": 0.5, "c": 0.0, "d": 0.0}},
                           **kw)


def answers(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["rater", "question", "trajectory", "left", "right"]).reset_index(drop=True)


def test_answers_depend_on_the_trial_not_on_the_order_or_the_other_raters():
    pop = population(rater_sd=0.7, trajectory_sd=0.7, lapse=0.1, seed=3)
    trials = design_trials(list(STRENGTHS), n_raters=6, n_trajectories=5, trials_per_rater=30,
                           questions=("realism", "consistency"), seed=1)
    assert not trials.duplicated().any()                      # 30 of 5 x 6 cells: no trial repeated
    got = simulate_judgments(pop, trials)
    pd.testing.assert_frame_equal(got, simulate_judgments(pop, trials))
    shuffled = simulate_judgments(pop, trials.sample(frac=1.0, random_state=0))
    pd.testing.assert_frame_equal(shuffled.sort_index(), got)
    alone = simulate_judgments(pop, trials[trials.rater == "r03"])     # the other raters do not exist
    pd.testing.assert_frame_equal(alone, got[got.rater == "r03"])
    row = trials.iloc[7]
    one = SimulatedRater(pop, row.rater).choose(trajectory=row.trajectory, question=row.question,
                                                left=row.left, right=row.right)
    assert one == (got.at[7, "choice"], got.at[7, "response_ms"])
    other = simulate_judgments(RaterPopulation(pop.strengths, rater_sd=0.7, trajectory_sd=0.7, lapse=0.1, seed=4),
                               trials)
    assert (other["choice"] != got["choice"]).mean() > 0.2                    # the seed matters
    assert set(got.columns) == {"rater", "trajectory", "question", "left", "right", "choice", "response_ms"}


def test_a_trial_shown_again_is_a_fresh_draw():
    pop = RaterPopulation({"realism": {"a": 0.0, "b": 0.0}}, seed=2)
    trials = pd.DataFrame({"rater": "x", "trajectory": 0, "question": "realism", "left": ["a"] * 400,
                           "right": ["b"] * 400})
    got = simulate_judgments(pop, trials)
    shares = (got["choice"] == "a").mean()
    assert 0.4 < shares < 0.6 and got["response_ms"].nunique() == 400
    # the k-th showing is the k-th draw: a rater asked one at a time answers the same
    rater = SimulatedRater(pop, "x")
    seq = [rater.choose(trajectory=0, question="realism", left="a", right="b") for _ in range(400)]
    assert [c for c, _ in seq] == got["choice"].tolist()


def test_win_rate_and_answer_times_follow_the_declared_model():
    """No random effects: P(a beats d) = (1 - lapse) logistic(0.8 + 0.9) + lapse / 2, within 4 SE; the answer
    times lognormal with the declared median and sigma."""
    lapse, n = 0.2, 12_000
    pop = population(lapse=lapse, response_ms=(1800.0, 0.4), seed=5)
    trials = pd.DataFrame({"rater": np.arange(n) % 40, "trajectory": np.arange(n) // 40, "question": "realism",
                           "left": np.where(np.arange(n) % 2, "a", "d"), "right": np.where(np.arange(n) % 2, "d", "a")})
    got = simulate_judgments(pop, trials)
    p = (1 - lapse) / (1 + np.exp(-1.7)) + lapse / 2
    observed = (got["choice"] == "a").mean()
    assert abs(observed - p) < 4 * np.sqrt(p * (1 - p) / n), (observed, p)
    assert abs(observed - 1 / (1 + np.exp(-1.7))) > 0.05                       # the lapse is there
    logs = np.log(got["response_ms"])
    assert abs(np.median(got["response_ms"]) / 1800 - 1) < 0.03 and abs(logs.std() - 0.4) < 0.02
    coin = simulate_judgments(population(lapse=1.0), trials)                   # all coin flips: a's strength gone
    assert abs((coin["choice"] == "a").mean() - 0.5) < 4 * np.sqrt(0.25 / n)


def test_taste_lowers_agreement_between_raters_and_shared_difficulty_raises_it():
    """Every rater judges the same trials: with a taste of their own (rater_sd) two raters agree less than
    without; with trajectory deviations shared by all raters, more."""
    rows = [(f"r{r}", t, "realism", a, b) for r in range(25) for t in range(12) for a, b in combinations("abd", 2)]
    trials = pd.DataFrame(rows, columns=["rater", "trajectory", "question", "left", "right"])
    agree = {}
    for name, kw in {"none": {}, "taste": {"rater_sd": 1.5}, "difficulty": {"trajectory_sd": 1.5}}.items():
        got = simulate_judgments(population(seed=8, **kw), trials).drop(columns="question")
        agree[name] = human_agreement(got)
    # measured: 0.59 (taste), 0.64 (none), 0.74 (difficulty)
    assert agree["taste"] < agree["none"] - 0.03 and agree["difficulty"] > agree["none"] + 0.05, agree


def test_taste_and_difficulty_are_drawn_once_per_rater_and_trajectory():
    """A rater with a strong taste prefers the same candidate on every trajectory (their deviation is drawn
    once); a rater's answers about one trajectory show that trajectory's deviation to every rater."""
    pop = RaterPopulation({"realism": {"a": 0.0, "b": 0.0}}, rater_sd=4.0, seed=1)
    trials = pd.DataFrame({"rater": np.repeat(["x", "y", "z"], 200), "trajectory": np.tile(np.arange(200), 3),
                           "question": "realism", "left": "a", "right": "b"})
    by_rater = (simulate_judgments(pop, trials)["choice"] == "a").groupby(trials["rater"]).mean()
    assert ((by_rater < 0.2) | (by_rater > 0.8)).sum() >= 2, by_rater            # |N(0, 4 sqrt 2)| > 1.4: likely
    pop = RaterPopulation({"realism": {"a": 0.0, "b": 0.0}}, trajectory_sd=4.0, seed=1)
    trials = pd.DataFrame({"rater": np.tile(np.arange(100), 3), "trajectory": np.repeat([0, 1, 2], 100),
                           "question": "realism", "left": "a", "right": "b"})
    by_traj = (simulate_judgments(pop, trials)["choice"] == "a").groupby(trials["trajectory"]).mean()
    assert ((by_traj < 0.2) | (by_traj > 0.8)).sum() >= 2, by_traj


def test_attention_checks_pass_with_the_declared_probability():
    rows = [(f"r{r}", t, "realism", "truth", "corrupt", True, "truth") for r in range(10) for t in range(20)]
    rows += [(f"r{r}", t, "realism", "a", "b", False, None) for r in range(10) for t in range(20)]
    trials = pd.DataFrame(rows, columns=["rater", "trajectory", "question", "left", "right", "attention_check",
                                         "expected"])
    checks = trials["attention_check"].to_numpy()
    for attention, passed in ((1.0, 1.0), (0.0, 0.0)):
        got = simulate_judgments(population(attention=attention, lapse=1.0), trials)
        assert (got.loc[checks, "choice"] == "truth").mean() == passed
        kept, report = apply_exclusions(got.drop(columns="question"), ExclusionRules(max_failed_checks=0))
        assert len(report["raters_excluded"]) == (0 if passed else 10)
    half = simulate_judgments(population(attention=0.5), trials)
    assert 0.4 < (half.loc[checks, "choice"] == "truth").mean() < 0.6
    assert (half.loc[~checks, "choice"].isin(["a", "b"])).all()


def test_bradley_terry_recovers_the_declared_ordering():
    pop = population(rater_sd=0.5, trajectory_sd=0.5, lapse=0.05, seed=11)
    trials = design_trials(list(STRENGTHS), n_raters=30, n_trajectories=40, trials_per_rater=80, seed=11)
    got = simulate_judgments(pop, trials).drop(columns="question")
    bt = bradley_terry(got)
    assert list(bt.sort_values(ascending=False).index) == ["a", "b", "c", "d"], bt
    assert list(win_rates(got).sort_values(ascending=False).index) == ["a", "b", "c", "d"]


def test_design_is_balanced_and_cycles_through_all_cells():
    names = ["a", "b", "c"]
    d = design_trials(names, n_raters=12, n_trajectories=4, trials_per_rater=12, questions=("q1", "q2"), seed=5)
    assert list(d.columns) == ["rater", "trajectory", "question", "left", "right"]
    assert d.groupby(["rater", "question"]).size().eq(12).all() and d["rater"].iloc[0] == "r00"
    pair = d[["left", "right"]].apply(lambda r: tuple(sorted(r)), axis=1)
    per_rater = d.assign(pair=pair).groupby(["rater", "question"])[["trajectory", "pair"]]
    assert per_rater.apply(lambda g: g.duplicated().sum()).eq(0).all()     # exactly the 4 x 3 cells, once each
    assert 0.35 < (d["left"] < d["right"]).mean() < 0.65                   # screen order randomized
    more = design_trials(names, n_raters=2, n_trajectories=2, trials_per_rater=15, seed=5)   # 6 cells, cycled
    counts = more.assign(pair=more[["left", "right"]].apply(lambda r: tuple(sorted(r)), axis=1)) \
        .groupby(["rater", "trajectory", "pair"]).size()
    assert counts.between(2, 3).all() and len(counts) == 12
    pd.testing.assert_frame_equal(more, design_trials(names, n_raters=2, n_trajectories=2, trials_per_rater=15, seed=5))
    assert len(design_trials(names, n_raters=101, n_trajectories=1, trials_per_rater=1)["rater"].iloc[0]) == 4


def test_errors_name_the_unknown_candidate_question_or_setting():
    pop = population()
    base = {"rater": ["x"], "trajectory": [0], "question": ["realism"], "left": ["a"], "right": ["b"]}
    with pytest.raises(ValueError, match=r"row 0: candidate 'zz' has no strength under question 'realism'"):
        simulate_judgments(pop, pd.DataFrame({**base, "right": ["zz"]}))
    with pytest.raises(ValueError, match=r"question 'fun' is not among the population's questions"):
        SimulatedRater(pop, "x").choose(trajectory=0, question="fun", left="a", right="b")
    with pytest.raises(ValueError, match=r"expected 'c' is neither candidate shown \('a', 'b'\)"):
        simulate_judgments(pop, pd.DataFrame({**base, "attention_check": [True], "expected": ["c"]}))
    with pytest.raises(ValueError, match="columns \\['question'\\] are missing"):
        simulate_judgments(pop, pd.DataFrame(base).drop(columns="question"))
    for bad, what in (({"rater_sd": -0.1}, "rater_sd"), ({"trajectory_sd": float("nan")}, "trajectory_sd"),
                      ({"lapse": 1.5}, "lapse"), ({"attention": -0.1}, "attention"),
                      ({"response_ms": (0.0, 0.5)}, "response_ms")):
        with pytest.raises(ValueError, match=what):
            population(**bad)
    with pytest.raises(ValueError, match="candidates"):
        design_trials(["a", "a"], n_raters=1, n_trajectories=1, trials_per_rater=1)


def test_population_win_rates_match_a_large_simulation(bench):
    """The benchmark's truth (Gauss-Hermite over the random effects' difference, the lapse mixed in) against
    one large simulated study; ignoring the random effects would be off by far more than the tolerance."""
    strengths = {"a": 1.5, "b": 0.5, "c": -0.5, "d": -1.5}
    kw = {"rater_sd": 1.0, "trajectory_sd": 1.0, "lapse": 0.1}
    truth = bench.population_win_rates(strengths, **kw)
    pop = RaterPopulation({"realism": strengths}, seed=21, **kw)
    got = win_rates(simulate_judgments(pop, design_trials(list(strengths), n_raters=1000, n_trajectories=1000,
                                                          trials_per_rater=30, seed=21)).drop(columns="question"))
    assert (got - truth).abs().max() < 0.02, (got, truth)                      # measured 0.009
    naive = bench.population_win_rates(strengths, rater_sd=0.0, trajectory_sd=0.0, lapse=0.1)
    assert (naive - truth).abs().max() > 0.06              # measured 0.081
    # the quadrature itself: no random effects is the logistic exactly; else a plain Monte Carlo mean
    exact = np.mean([(0.9 / (1 + np.exp(-(1.5 - s))) + 0.05) for s in (0.5, -0.5, -1.5)])
    assert naive["a"] == pytest.approx(exact, abs=1e-12)
    z = np.random.default_rng(0).normal(size=2_000_000) * 2.0
    mc = np.mean([np.mean(0.9 / (1 + np.exp(-(1.5 - s + z))) + 0.05) for s in (0.5, -0.5, -1.5)])
    assert truth["a"] == pytest.approx(mc, abs=1e-3)                          # MC se ~2e-4
    assert truth.mean() == pytest.approx(0.5, abs=1e-12)                       # every game has one winner


def test_benchmark_quick_run_and_its_fast_statistic(bench, tmp_path):
    out = tmp_path / "hc.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "human_coverage.py"), "--quick", "--out", str(out)],
                   check=True, capture_output=True, cwd=ROOT)
    res = json.loads(out.read_text())
    assert {c["factors"] for c in res["coverage"]} == {"trajectory x rater", "trajectory only", "rater only"}
    assert res["power"] and res["command"].startswith("python benchmarks/human_coverage.py --quick")
