"""Synthetic raters for paired-comparison studies: for tests, and to plan a study's size before running it.

A :class:`RaterPopulation` declares a Bradley-Terry model per question with two crossed random effects: each
rater shifts every candidate's log-strength by a taste of their own (sd ``rater_sd``), each trajectory by a
difficulty shared by all raters (sd ``trajectory_sd``). A rater answers

    P(left chosen) = (1 - lapse) / (1 + exp(-(s_left - s_right))) + lapse / 2,

``s = mean + rater's deviation + trajectory's deviation``, and passes an attention check with probability
``attention``. Answer times are lognormal.

Every draw comes from a generator keyed by what it belongs to (:func:`wmeval.core.rng.make_rng`, strings
hashed by CRC-32, never Python's salted ``hash``): a rater's taste by ``(seed, rater, question, candidate)``,
a trajectory's deviation by ``(seed, trajectory, question, candidate)``, an answer by ``(seed, rater,
trajectory, question, left, right, k)`` with ``k`` the number of times this rater already saw this exact
trial. So the answers are the same whatever the order of the trials and whichever other raters exist, and a
trial shown again is an independent draw. The deviations are standard normals scaled by their sd, so two
populations that differ only in an sd share their random numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

import numpy as np
import pandas as pd

from ..core.rng import make_rng

_TRIAL_COLUMNS = ("rater", "trajectory", "question", "left", "right")


def _key(value) -> int | str:
    """A stable stream key: a non-negative integer as itself, anything else as its text (hashed by make_rng)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and int(value) >= 0:
        return int(value)
    return str(value)


@lru_cache(maxsize=1 << 16)
def _deviation(seed: int, kind: str, unit, question: str, candidate: str) -> float:
    """The standard-normal deviation of ``candidate`` under ``question`` for one rater or trajectory."""
    return float(make_rng(seed, kind, _key(unit), question, candidate).standard_normal())


@dataclass(frozen=True)
class RaterPopulation:
    """A population of raters answering paired comparisons.

    Attributes:
        strengths: question -> candidate -> population-mean Bradley-Terry log-strength.
        rater_sd: sd of a rater's own deviation of each candidate's strength (taste), drawn once per
            (rater, question, candidate).
        trajectory_sd: sd of a trajectory's deviation of each candidate's strength (difficulty), drawn once
            per (trajectory, question, candidate) and shared by all raters.
        lapse: probability that an answer is a fair coin flip (not on attention checks).
        attention: probability of passing an attention check (choosing ``expected``); else the other one.
        response_ms: median (ms) and sigma of the lognormal answer times.
        seed: non-negative seed of every draw.
    """

    strengths: dict[str, dict[str, float]]
    rater_sd: float = 0.0
    trajectory_sd: float = 0.0
    lapse: float = 0.0
    attention: float = 1.0
    response_ms: tuple[float, float] = (2500.0, 0.5)
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.strengths:
            raise ValueError("RaterPopulation: strengths declare no question")
        for q, cands in self.strengths.items():
            if len(cands) < 2:
                raise ValueError(f"RaterPopulation: question {q!r} has {len(cands)} candidate(s); a comparison "
                                 "needs at least 2")
            for c, s in cands.items():
                if not math.isfinite(float(s)):
                    raise ValueError(f"RaterPopulation: the strength of {c!r} under {q!r} is {s!r}; expected a "
                                     "finite number")
        for name in ("rater_sd", "trajectory_sd"):
            v = float(getattr(self, name))
            if not v >= 0 or not math.isfinite(v):
                raise ValueError(f"RaterPopulation: {name} = {v!r}; expected a finite sd >= 0")
        for name in ("lapse", "attention"):
            v = float(getattr(self, name))
            if not 0 <= v <= 1:
                raise ValueError(f"RaterPopulation: {name} = {v!r}; expected a probability in [0, 1]")
        median, sigma = self.response_ms
        if not (median > 0 and sigma >= 0 and math.isfinite(median) and math.isfinite(sigma)):
            raise ValueError(f"RaterPopulation: response_ms = {self.response_ms!r}; expected (median > 0, "
                             "sigma >= 0)")
        if int(self.seed) != self.seed or self.seed < 0:
            raise ValueError(f"RaterPopulation: seed = {self.seed!r}; expected a non-negative integer")


def _mean_strength(population: RaterPopulation, question: str, candidate: str) -> float:
    """The population-mean log-strength (``ValueError`` naming an unknown question or candidate)."""
    if question not in population.strengths:
        raise ValueError(f"question {question!r} is not among the population's questions "
                         f"{sorted(population.strengths)}")
    cands = population.strengths[question]
    if candidate not in cands:
        raise ValueError(f"candidate {candidate!r} has no strength under question {question!r} (known: "
                         f"{sorted(cands)})")
    return float(cands[candidate])


class SimulatedRater:
    """One rater of a :class:`RaterPopulation`, with their own taste; answers trials one at a time."""

    def __init__(self, population: RaterPopulation, rater: str):
        self.population = population
        self.rater = rater
        self._seen: dict[tuple, int] = {}

    def _strength(self, trajectory, question: str, candidate: str) -> float:
        p = self.population
        s = _mean_strength(p, question, candidate)
        if p.rater_sd:
            s += p.rater_sd * _deviation(p.seed, "taste", _key(self.rater), question, candidate)
        if p.trajectory_sd:
            s += p.trajectory_sd * _deviation(p.seed, "trajectory", _key(trajectory), question, candidate)
        return s

    def choose(self, *, trajectory, question: str, left: str, right: str,
               attention_check: bool = False, expected: str | None = None) -> tuple[str, float]:
        """``(chosen candidate name, response time in ms)`` for one trial.

        An attention check (``attention_check=True``) is passed (``expected`` chosen) with probability
        ``attention``; its candidates need no strength. Otherwise the Bradley-Terry choice, a coin flip with
        probability ``lapse``.

        Raises:
            ValueError: an unknown question or candidate, both candidates the same, or a check whose
                ``expected`` is not one of the two shown.
        """
        p = self.population
        if left == right:
            raise ValueError(f"both candidates are {left!r}")
        if attention_check:
            if expected is None or (isinstance(expected, float) and math.isnan(expected)):
                raise ValueError("an attention check needs its 'expected' choice")
            if expected not in (left, right):
                raise ValueError(f"expected {expected!r} is neither candidate shown ({left!r}, {right!r})")
        else:
            s_left = self._strength(trajectory, question, left)
            s_right = self._strength(trajectory, question, right)
        trial = (_key(trajectory), str(question), str(left), str(right))
        k = self._seen.get(trial, 0)
        self._seen[trial] = k + 1
        rng = make_rng(p.seed, "answer", _key(self.rater), *trial, k)
        u = rng.random(3)
        median, sigma = p.response_ms
        ms = float(median * math.exp(sigma * rng.standard_normal()))
        if attention_check:
            return (expected if u[0] < p.attention else (right if expected == left else left)), ms
        if u[0] < p.lapse:
            return (left if u[1] < 0.5 else right), ms
        p_left = 1.0 / (1.0 + math.exp(-(s_left - s_right)))
        return (left if u[2] < p_left else right), ms


def simulate_judgments(population: RaterPopulation, trials: pd.DataFrame) -> pd.DataFrame:
    """Answers to ``trials`` by raters of ``population``.

    Args:
        population: the raters' model.
        trials: columns ``rater, trajectory, question, left, right``, and optionally ``attention_check``
            and ``expected``.

    Returns:
        A copy of ``trials`` (same index) with ``choice`` and ``response_ms`` added, each rater a
        :class:`SimulatedRater`; the k-th showing of an identical trial to a rater (in table order) is its
        k-th independent draw.
    """
    missing = [c for c in _TRIAL_COLUMNS if c not in trials.columns]
    if missing:
        raise ValueError(f"trials: columns {missing} are missing (have {list(trials.columns)})")
    n = len(trials)
    checks = np.zeros(n, dtype=bool)
    if "attention_check" in trials:
        flag = trials["attention_check"]
        bad = ~flag.isin([True, False, 0, 1])
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"trials: row {row}: attention_check = {flag.iloc[row]!r}; expected True or False")
        checks = flag.to_numpy().astype(bool)
    if checks.any() and "expected" not in trials:
        raise ValueError("trials: attention checks need the column 'expected' (the correct choice)")
    expected = trials["expected"].to_numpy(dtype=object) if "expected" in trials else np.full(n, None, object)
    raters: dict = {}
    choice = np.empty(n, dtype=object)
    ms = np.empty(n)
    cols = [trials[c].to_numpy(dtype=object) for c in _TRIAL_COLUMNS]
    for i, (rater, traj, question, left, right) in enumerate(zip(*cols)):
        sim = raters.get(rater)
        if sim is None:
            sim = raters[rater] = SimulatedRater(population, rater)
        try:
            choice[i], ms[i] = sim.choose(trajectory=traj, question=question, left=left, right=right,
                                          attention_check=bool(checks[i]),
                                          expected=expected[i] if checks[i] else None)
        except ValueError as e:
            raise ValueError(f"trials: row {i}: {e}") from None
    return trials.assign(choice=choice, response_ms=ms)


def design_trials(candidates: list[str], *, n_raters: int, n_trajectories: int, trials_per_rater: int,
                  questions: tuple[str, ...] = ("realism",), seed: int = 0) -> pd.DataFrame:
    """A balanced random design for benchmarks and planning.

    Each rater gets ``trials_per_rater`` trials per question, drawn without replacement from trajectory x
    unordered candidate pair (a fresh random pass over all of them each time they run out), each shown in a
    random left/right order. The draws are keyed by ``(seed, rater, question)``.

    Returns:
        Columns ``rater`` (``'r00'``, ``'r01'``, ...), ``trajectory`` (int), ``question``, ``left``, ``right``.
    """
    names = list(candidates)
    if len(set(names)) != len(names) or len(names) < 2:
        raise ValueError(f"design_trials: candidates {names} must be at least 2 distinct names")
    for name, v in (("n_raters", n_raters), ("n_trajectories", n_trajectories),
                    ("trials_per_rater", trials_per_rater)):
        if int(v) != v or v < 1:
            raise ValueError(f"design_trials: {name} = {v!r}; expected a positive integer")
    if not questions:
        raise ValueError("design_trials: no question")
    pairs = list(combinations(range(len(names)), 2))
    cells = np.array([(t, i, j) for t in range(n_trajectories) for i, j in pairs])
    width = max(2, len(str(n_raters - 1)))
    rows = []
    for r in range(n_raters):
        rater = f"r{r:0{width}d}"
        for q in questions:
            rng = make_rng(seed, "design", rater, str(q))
            passes = -(-trials_per_rater // len(cells))
            order = np.concatenate([rng.permutation(len(cells)) for _ in range(passes)])[:trials_per_rater]
            swap = rng.random(trials_per_rater) < 0.5
            for c, s in zip(order, swap):
                t, i, j = cells[c]
                left, right = (names[j], names[i]) if s else (names[i], names[j])
                rows.append((rater, int(t), q, left, right))
    return pd.DataFrame(rows, columns=list(_TRIAL_COLUMNS))
