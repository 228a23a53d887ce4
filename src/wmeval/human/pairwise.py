"""Paired-comparison judgments: exclusions, win rates, Bradley-Terry scores, and intervals that resample
trajectories and raters crossed.

A *judgment* is one rater's choice between two candidates (models, the realized future, controls) shown
for one trajectory (the episode whose context the trial shows) under one question (``realism`` or
``consistency``). Judgments come as a table with the columns

==============  ==================================================================================
rater           the rater's id
trajectory      the episode (context) the trial showed: the unit the results generalize over,
                with the raters
question        ``realism``, ``consistency``, ... (analyse one question at a time)
left, right     the two candidates shown (names; their screen positions are the study's business)
choice          the name of the chosen candidate (one of ``left`` and ``right``)
response_ms     optional: the time to answer, for the too-fast rule
attention_check optional: True on a check trial (a realized future against a corrupted one)
expected        optional: the correct choice of a check trial
==============  ==================================================================================

Bradley-Terry scores are fitted with the ``choix`` package (Maystre & Grossglauser's iterative Luce
spectral ranking, the field's implementation); the rest is written here because no library resamples
two crossed random factors. The crossed bootstrap (Owen 2007, "The pigeonhole bootstrap") resamples
trajectories and raters independently with replacement; a judgment then counts ``m_t * m_r`` times, the
product of its trajectory's and its rater's multiplicities. Its intervals generalize over both new
trajectories and new raters; resampling one factor alone is too narrow when the other varies (a rater's
taste, a trajectory's difficulty), which the tests show.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .agreement import krippendorff_alpha

REQUIRED = ("rater", "trajectory", "left", "right", "choice")


def check_judgments(judgments: pd.DataFrame, where: str = "judgments") -> pd.DataFrame:
    """The judgments, checked: the required columns are there and every choice is one of its trial's two
    candidates (else a ``ValueError`` naming the row and the value)."""
    missing = [c for c in REQUIRED if c not in judgments.columns]
    if missing:
        raise ValueError(f"{where}: columns {missing} are missing (have {list(judgments.columns)})")
    df = judgments.reset_index(drop=True)
    for c in REQUIRED:
        if df[c].isna().any():
            row = int(np.flatnonzero(df[c].isna().to_numpy())[0])
            raise ValueError(f"{where}: row {row}: column {c!r} is empty")
    bad = (df["choice"] != df["left"]) & (df["choice"] != df["right"])
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"{where}: row {row}: choice {df.at[row, 'choice']!r} is neither candidate shown "
                         f"({df.at[row, 'left']!r}, {df.at[row, 'right']!r})")
    same = df["left"] == df["right"]
    if same.any():
        row = int(np.flatnonzero(same.to_numpy())[0])
        raise ValueError(f"{where}: row {row}: both candidates are {df.at[row, 'left']!r}")
    return df


@dataclass(frozen=True)
class ExclusionRules:
    """Declared exclusion rules (a study's config).

    Attributes:
        max_failed_checks: a rater who fails more attention checks than this is excluded entirely.
        min_response_ms: answers faster than this are excluded (``None``: no rule).
    """

    max_failed_checks: int = 0
    min_response_ms: float | None = None


def apply_exclusions(judgments: pd.DataFrame, rules: ExclusionRules) -> tuple[pd.DataFrame, dict]:
    """``(kept judgments, report)``: attention-check trials leave the analysis (they compare no candidates),
    raters over ``rules.max_failed_checks`` failed checks are excluded with all their answers, then answers
    under ``rules.min_response_ms``. The report counts each, and ``kept + excluded == total``: nothing is
    dropped silently."""
    df = check_judgments(judgments)
    total = len(df)
    checks = pd.Series(False, df.index)
    if "attention_check" in df:
        flag = df["attention_check"]
        bad = ~flag.isin([True, False, 0, 1])
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"judgments: row {row}: attention_check = {flag.iloc[row]!r}; expected True or False")
        checks = flag.astype(bool)
    if checks.any():
        if "expected" not in df:
            raise ValueError("judgments: attention checks need the column 'expected' (the correct choice)")
        gap = checks & df["expected"].isna()
        if gap.any():
            row = int(np.flatnonzero(gap.to_numpy())[0])
            raise ValueError(f"judgments: row {row}: an attention check without its 'expected' choice")
    failed = (df.loc[checks, "choice"] != df.loc[checks, "expected"]).groupby(df.loc[checks, "rater"]).sum()
    excluded_raters = sorted(failed[failed > rules.max_failed_checks].index.tolist())
    by_rater = df["rater"].isin(excluded_raters)
    fast = pd.Series(False, df.index)
    if rules.min_response_ms is not None:
        if "response_ms" not in df:
            raise ValueError("judgments: the min_response_ms rule needs the column 'response_ms'")
        gap = ~checks & df["response_ms"].isna()
        if gap.any():
            row = int(np.flatnonzero(gap.to_numpy())[0])
            raise ValueError(f"judgments: row {row}: response_ms is empty, and the min_response_ms rule needs it")
        fast = df["response_ms"] < rules.min_response_ms
    kept = df[~checks & ~by_rater & ~fast]
    report = {"total": total, "attention_check_trials": int(checks.sum()),
              "raters_excluded": excluded_raters,
              "judgments_of_excluded_raters": int((~checks & by_rater).sum()),
              "judgments_too_fast": int((~checks & ~by_rater & fast).sum()), "kept": len(kept),
              "rules": {"max_failed_checks": rules.max_failed_checks, "min_response_ms": rules.min_response_ms}}
    assert report["kept"] + report["attention_check_trials"] + report["judgments_of_excluded_raters"] \
        + report["judgments_too_fast"] == total
    return kept.reset_index(drop=True), report


def _one_question(df: pd.DataFrame) -> None:
    if "question" in df and df["question"].nunique(dropna=False) > 1:
        raise ValueError(f"judgments hold the questions {sorted(map(str, df['question'].unique()))}; analyse one "
                         "at a time (select the rows of one question first)")


def _candidates(df: pd.DataFrame, candidates: list[str] | None) -> list[str]:
    seen = sorted(set(df["left"]) | set(df["right"]))
    if candidates is None:
        return seen
    unknown = sorted(set(seen) - set(candidates))
    if unknown:
        raise ValueError(f"judgments: candidates {unknown} are not among {candidates}")
    return list(candidates)


def win_rates(judgments: pd.DataFrame, candidates: list[str] | None = None,
              weights: np.ndarray | None = None) -> pd.Series:
    """Per candidate, the share of its comparisons it won (weighted by ``weights``, one per judgment); NaN for a
    candidate with no (weighted) comparison."""
    df = check_judgments(judgments)
    _one_question(df)
    names = _candidates(df, candidates)
    return pd.Series(_win_rates_of(df, names)(_weights(df, weights)), index=names, name="win_rate")


def _weights(df: pd.DataFrame, weights: np.ndarray | None) -> np.ndarray:
    return np.ones(len(df)) if weights is None else np.asarray(weights, dtype=np.float64)


def _win_rates_of(df: pd.DataFrame, names: list[str]) -> Callable[[np.ndarray], np.ndarray]:
    """The win rates of checked judgments as a function of the float weights (what the replicates change)."""
    codes = {c: pd.Categorical(df[c], categories=names).codes for c in ("choice", "left", "right")}

    def rates(w: np.ndarray) -> np.ndarray:
        def count(col: str) -> np.ndarray:
            return np.bincount(codes[col], weights=w, minlength=len(names))

        with np.errstate(invalid="ignore", divide="ignore"):
            return count("choice") / (count("left") + count("right"))

    return rates


def bradley_terry(judgments: pd.DataFrame, candidates: list[str] | None = None,
                  weights: np.ndarray | None = None, alpha: float = 0.01) -> pd.Series:
    """Bradley-Terry log-strengths per candidate (mean 0; P(i beats j) = 1 / (1 + exp(s_j - s_i))), fitted by
    ``choix.ilsr_pairwise`` on the (winner, loser) pairs, each repeated its integer weight. ``alpha`` is
    choix's regularization, which keeps the scores finite when a candidate never wins or never loses. A
    candidate with no (weighted) comparison has no score (NaN), not the regularization's."""
    df = check_judgments(judgments)
    _one_question(df)
    names = _candidates(df, candidates)
    if weights is not None:
        w = np.asarray(weights)
        if np.any(w != np.round(w)) or np.any(w < 0):
            raise ValueError("bradley_terry: weights must be non-negative integers (multiplicities)")
    return pd.Series(_bradley_terry_of(df, names, alpha)(weights), index=names, name="bradley_terry")


def _bradley_terry_of(df: pd.DataFrame, names: list[str], alpha: float = 0.01
                      ) -> Callable[[np.ndarray | None], np.ndarray]:
    """The Bradley-Terry scores of checked judgments as a function of the integer weights (None: all 1)."""
    import choix

    index = {n: i for i, n in enumerate(names)}
    loser = np.where(df["choice"] == df["left"], df["right"], df["left"])
    pairs = np.stack([df["choice"].map(index).to_numpy(), pd.Series(loser).map(index).to_numpy()], axis=1)

    def scores_of(weights: np.ndarray | None) -> np.ndarray:
        p = pairs if weights is None else np.repeat(pairs, np.asarray(weights).astype(np.int64), axis=0)
        seen = np.isin(np.arange(len(names)), p)
        scores = choix.ilsr_pairwise(len(names), [tuple(x) for x in p.tolist()], alpha=alpha)
        return np.where(seen, scores - scores[seen].mean() if seen.any() else np.nan, np.nan)

    return scores_of


@dataclass(frozen=True)
class PreparedStatistic:
    """A statistic for :func:`crossed_bootstrap` (``statistic(df, weights)``, a Series) with ``prepare(df)``: a
    function of the weights alone giving the same values (bit for bit, tested) in the Series' order, for the
    replicates, which change only the weights (the checks, groupings and lookups are done once)."""

    statistic: Callable[[pd.DataFrame, np.ndarray], pd.Series]
    prepare: Callable[[pd.DataFrame], Callable[[np.ndarray], np.ndarray]]

    def __call__(self, df: pd.DataFrame, weights: np.ndarray) -> pd.Series:
        return self.statistic(df, weights)


def crossed_bootstrap(judgments: pd.DataFrame,
                      statistic: Callable[[pd.DataFrame, np.ndarray], pd.Series], *,
                      n_resamples: int = 2000, confidence_level: float = 0.95, seed: int = 0,
                      factors: tuple[str, ...] = ("trajectory", "rater")) -> pd.DataFrame:
    """Percentile intervals of ``statistic(judgments, weights)`` (a Series) resampling ``factors`` crossed.

    Each factor's levels are drawn with replacement, independently; a judgment's weight is the product of
    its levels' multiplicities (integers). ``factors=("trajectory",)`` resamples trajectories alone (for
    comparison: too narrow when raters differ). Returns ``point, low, high`` and ``undefined_replicates``
    (replicates where the entry was NaN, left out of its interval) per entry of the statistic, with the
    factors and their level counts in ``attrs``.

    Raises:
        ValueError: a factor with fewer than 2 levels (the interval would have zero width).
    """
    df = check_judgments(judgments)
    _one_question(df)
    codes = {}
    for f in factors:
        codes[f], levels = pd.factorize(df[f])
        if len(levels) < 2:
            raise ValueError(f"crossed_bootstrap: factor {f!r} has {len(levels)} level(s); resampling needs at "
                             "least 2")
    point = statistic(df, np.ones(len(df), dtype=np.int64))
    # A statistic with a ``prepare(df)`` (:class:`PreparedStatistic`) does its work that does not depend on the
    # weights once: ``prepare(df)(w)`` is ``statistic(df, w)``'s values in its index's order (checked here, on the
    # data's own weights: a mislabelled interval is refused, not written).
    fast = statistic.prepare(df) if callable(getattr(statistic, "prepare", None)) else None
    if fast is not None:
        got, want = np.asarray(fast(np.ones(len(df), dtype=np.int64)), dtype=np.float64), point.to_numpy(np.float64)
        if got.shape != want.shape or not np.array_equal(got, want, equal_nan=True):
            raise ValueError(f"crossed_bootstrap: the prepared statistic gives {got.tolist()} on the data, the "
                             f"statistic {want.tolist()} (index {list(point.index)}): it must give the same values "
                             "in the same order")
    rng = np.random.default_rng(seed)
    reps = []
    for _ in range(n_resamples):
        w = np.ones(len(df), dtype=np.int64)
        for f in factors:
            n = int(codes[f].max()) + 1
            mult = np.bincount(rng.integers(0, n, size=n), minlength=n)
            w *= mult[codes[f]]
        reps.append(np.asarray(fast(w), dtype=np.float64) if fast is not None
                    else statistic(df, w).reindex(point.index).to_numpy(dtype=np.float64))
    reps = np.stack(reps)
    tail = (1 - confidence_level) / 2 * 100
    # A replicate that leaves an entry undefined (a candidate never shown in it) is left out of that entry's
    # interval, and counted.
    out = pd.DataFrame({"point": point.to_numpy(dtype=np.float64),
                        "low": np.nanpercentile(reps, tail, axis=0),
                        "high": np.nanpercentile(reps, 100 - tail, axis=0),
                        "undefined_replicates": np.isnan(reps).sum(axis=0)}, index=point.index)
    out.attrs.update({"factors": list(factors), "levels": {f: int(codes[f].max()) + 1 for f in factors},
                      "n_resamples": n_resamples, "confidence_level": confidence_level, "seed": seed,
                      "method": "percentile, " + " x ".join(factors) + " resampled crossed"})
    return out


def rates_and_scores(names: list[str]) -> PreparedStatistic:
    """Win rates and Bradley-Terry scores of ``names`` (``win_rate:<name>``, ``bradley_terry:<name>``), for
    :func:`crossed_bootstrap`, prepared once per table for its replicates."""

    def both(d: pd.DataFrame, w: np.ndarray) -> pd.Series:
        wr = win_rates(d, names, w).add_prefix("win_rate:")
        bt = bradley_terry(d, names, w).add_prefix("bradley_terry:")
        return pd.concat([wr, bt])

    def prepare(d: pd.DataFrame) -> Callable[[np.ndarray], np.ndarray]:
        rates, scores = _win_rates_of(d, names), _bradley_terry_of(d, names)
        return lambda w: np.concatenate([rates(np.asarray(w, dtype=np.float64)), scores(w)])

    return PreparedStatistic(both, prepare)


def pairwise_accuracy(judgments: pd.DataFrame, scores: pd.DataFrame, *, higher_is_better: bool,
                      weights: np.ndarray | None = None) -> float:
    """The share of (weighted) judgments in which an automatic metric prefers the candidate the rater chose.

    ``scores``: columns ``trajectory, candidate, value``, the metric's value of each candidate's continuation
    of each trajectory; with a ``plan`` column too (and one in the judgments), each judgment is scored on its
    own plan. A metric tie counts one half. A judgment whose candidate has no score is refused.
    """
    df = check_judgments(judgments)
    _one_question(df)
    return _accuracy_of(df, scores, higher_is_better)(_weights(df, weights))


def _accuracy_of(df: pd.DataFrame, scores: pd.DataFrame, higher_is_better: bool) -> Callable[[np.ndarray], float]:
    """The pairwise accuracy of checked judgments as a function of the float weights."""
    missing_cols = [c for c in ("trajectory", "candidate", "value") if c not in scores.columns]
    if missing_cols:
        raise ValueError(f"scores: columns {missing_cols} are missing")
    by = ["trajectory", "plan"] if "plan" in scores.columns and "plan" in df else ["trajectory"]
    value = scores.set_index([*by, "candidate"])["value"]
    if not value.index.is_unique:
        raise ValueError(f"scores: more than one value for a ({', '.join(by)}, candidate)")
    chosen = np.where(df["choice"] == df["left"], df["left"], df["right"])
    other = np.where(df["choice"] == df["left"], df["right"], df["left"])
    keys = [df[c].to_numpy() for c in by]
    vc = value.reindex(pd.MultiIndex.from_arrays([*keys, chosen])).to_numpy(dtype=np.float64)
    vo = value.reindex(pd.MultiIndex.from_arrays([*keys, other])).to_numpy(dtype=np.float64)
    gap = np.isnan(vc) | np.isnan(vo)
    if gap.any():
        row = int(np.flatnonzero(gap)[0])
        t = df.at[row, "trajectory"]
        raise ValueError(f"judgments: row {row}: no score for trajectory {getattr(t, 'item', lambda: t)()!r} and "
                         f"candidate {(chosen if np.isnan(vc[row]) else other)[row]!r}")
    agree = np.where(vc == vo, 0.5, (vc > vo) if higher_is_better else (vc < vo))

    def accuracy(w: np.ndarray) -> float:
        return float(np.sum(w * agree) / np.sum(w)) if np.sum(w) > 0 else float("nan")

    return accuracy


def _item(df: pd.DataFrame) -> list[np.ndarray]:
    """What makes two judgments of one pair the same item: the trajectory, and the plan (the actions shown)
    when the table has that column."""
    return [df["trajectory"].to_numpy()] + ([df["plan"].astype(str).to_numpy()] if "plan" in df else [])


def human_agreement(judgments: pd.DataFrame, weights: np.ndarray | None = None) -> float:
    """The ceiling for :func:`pairwise_accuracy`: the chance that two *different* raters who judged the same
    pair of candidates on the same trajectory (and plan, when the table has a ``plan`` column) chose alike (pairs of judgments weighted by the product of their
    weights; a rater is never paired with itself, so a repeated trial or a bootstrap copy adds no agreement).
    NaN when no pair was judged by two raters."""
    df = check_judgments(judgments)
    _one_question(df)
    return _agreement_of(df)(_weights(df, weights))


def _agreement_of(df: pd.DataFrame) -> Callable[[np.ndarray], float]:
    """:func:`human_agreement` of checked judgments as a function of the float weights."""
    pair = [tuple(sorted(p)) for p in zip(df["left"], df["right"])]
    rater, choice = df["rater"].to_numpy(), df["choice"].to_numpy()
    groups = []
    for _, idx in pd.Series(range(len(df))).groupby([*_item(df), pair]).groups.items():
        idx = np.asarray(list(idx))
        if len(idx) >= 2:
            r, c = rater[idx], choice[idx]
            groups.append((idx, r[:, None] != r[None, :], c[:, None] == c[None, :]))

    def agreement(w: np.ndarray) -> float:
        agree = total = 0.0
        for idx, other, same in groups:
            ww = w[idx]
            prod = np.triu(ww[:, None] * ww[None, :] * other, k=1)
            total += prod.sum()
            agree += (prod * same).sum()
        return agree / total if total > 0 else float("nan")

    return agreement


def validate_evaluator(judgments: pd.DataFrame, scores: pd.DataFrame, *, higher_is_better: bool,
                       n_resamples: int = 2000, confidence_level: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """An automatic metric against held-out human judgments: its pairwise accuracy and the human-human agreement
    ceiling, each with a crossed (trajectory x rater) interval, and the verdict. A metric is *validated* on
    these judgments when its accuracy's interval lies above chance (0.5); the ceiling says how far it is from
    what raters achieve among themselves."""

    def both(d: pd.DataFrame, w: np.ndarray) -> pd.Series:
        return pd.Series({"evaluator": pairwise_accuracy(d, scores, higher_is_better=higher_is_better, weights=w),
                          "human ceiling": human_agreement(d, w)})

    def prepare(d: pd.DataFrame) -> Callable[[np.ndarray], np.ndarray]:
        accuracy, agreement = _accuracy_of(d, scores, higher_is_better), _agreement_of(d)
        def values(w: np.ndarray) -> np.ndarray:
            wf = w.astype(np.float64)
            return np.array([accuracy(wf), agreement(wf)])

        return values

    out = crossed_bootstrap(judgments, PreparedStatistic(both, prepare), n_resamples=n_resamples,
                            confidence_level=confidence_level, seed=seed)
    out["validated"] = [bool(out.at["evaluator", "low"] > 0.5), None]
    out.attrs["rule"] = "validated: the evaluator's pairwise-accuracy interval lies above 0.5 (chance)"
    return out


def intra_rater_consistency(judgments: pd.DataFrame) -> pd.DataFrame:
    """How consistently each rater answers a trial shown again (the same trajectory, plan when the table has a
    ``plan`` column, and pair of candidates, in either screen order): per rater and for all raters, the repeated trials, the share of pairs of their
    answers that agree, and Krippendorff's alpha (nominal: the repeats as coders, the trials as units; chance
    agreement corrected). A rater without repeated trials has NaN, and ``repeated_trials`` 0."""
    df = check_judgments(judgments)
    _one_question(df)
    first = np.minimum(df["left"].to_numpy(dtype=object), df["right"].to_numpy(dtype=object))
    second = np.maximum(df["left"].to_numpy(dtype=object), df["right"].to_numpy(dtype=object))
    df = df.assign(_pair=[f"{a}\x1f{b}" for a, b in zip(first, second)],
                   _code=(df["choice"].to_numpy(dtype=object) == first).astype(np.float64))
    rows = {}
    trials = {}
    for rater, g in df.groupby("rater", sort=True):
        units = [u for _, u in g.groupby([*_item(g), g["_pair"].to_numpy()]) if len(u) >= 2]
        trials[rater] = units
        rows[rater] = _consistency(units)
    rows["all raters"] = _consistency([u for units in trials.values() for u in units])
    return pd.DataFrame.from_dict(rows, orient="index")


def _consistency(units: list[pd.DataFrame]) -> dict:
    if not units:
        return {"repeated_trials": 0, "agreement": np.nan, "alpha": np.nan}
    agree = total = 0.0
    width = max(len(u) for u in units)
    data = np.full((width, len(units)), np.nan)
    for j, u in enumerate(units):
        c = u["_code"].to_numpy()
        data[: len(c), j] = c
        same = c[:, None] == c[None, :]
        k = len(c)
        agree += (same.sum() - k) / 2
        total += k * (k - 1) / 2
    try:
        alpha = krippendorff_alpha(data, "nominal")
    except (ValueError, ZeroDivisionError):
        alpha = np.nan                                # one value throughout: no disagreement to correct for
    return {"repeated_trials": len(units), "agreement": agree / total, "alpha": alpha}
