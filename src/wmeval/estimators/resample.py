"""Trajectory-clustered bootstrap.

Frames within an episode are correlated, so the resampling unit is the episode
(cluster). :func:`cluster_bootstrap` resamples clusters with replacement and
recomputes a unit-weighted mean from per-cluster sums and counts (no copies of
rows); :func:`resample_counts` gives the multiplicity matrix that makes a paired
bootstrap: the same resampled episodes for every model.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from wmeval.core.rng import make_rng


@dataclass(frozen=True)
class BootstrapResult:
    """A point estimate with its bootstrap interval."""

    point: float
    low: float
    high: float
    method: str
    n_resamples: int
    n_clusters: int
    confidence_level: float
    #: the permutation test of a distance of 0 where one was run (:func:`permutation_p_value`), else NaN
    p_value: float = float("nan")


def resample_counts(n_clusters: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_resamples, n_clusters)`` multiplicities: each row resamples n clusters with replacement."""
    return rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_resamples)


def percentile_interval(replicates: np.ndarray, confidence_level: float, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    alpha = (1.0 - confidence_level) / 2.0
    lo, hi = np.quantile(replicates, [alpha, 1.0 - alpha], axis=axis)
    return lo, hi


def _check_inputs(values: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(values, dtype=np.float64)
    clusters = np.asarray(clusters)
    if values.ndim != 1:
        raise ValueError(f"values must be 1-D (one value per unit), got shape {values.shape}")
    if clusters.shape != values.shape:
        raise ValueError(f"clusters shape {clusters.shape} must equal values shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"values contain non-finite entries at {np.flatnonzero(~np.isfinite(values))[:5].tolist()}")
    if values.size == 0:
        raise ValueError("values is empty")
    return values, clusters


def cluster_counts(cluster_idx: np.ndarray, strata: np.ndarray | None, n_clusters: int, n_resamples: int,
                    rng: np.random.Generator) -> np.ndarray:
    """``(B, n_clusters)`` multiplicities; with strata, clusters are resampled within their stratum."""
    if strata is None:
        return resample_counts(n_clusters, n_resamples, rng)
    strata = np.asarray(strata)
    cluster_stratum = np.empty(n_clusters, dtype=object)
    for c, st in zip(cluster_idx, strata):
        if cluster_stratum[c] is not None and cluster_stratum[c] != st:
            raise ValueError(f"cluster {c} spans strata {cluster_stratum[c]!r} and {st!r}; clusters must be nested in strata")
        cluster_stratum[c] = st
    counts = np.zeros((n_resamples, n_clusters), dtype=np.int64)
    for st in sorted(set(cluster_stratum.tolist()), key=str):
        members = np.flatnonzero(cluster_stratum == st)
        counts[:, members] = resample_counts(len(members), n_resamples, rng)
    return counts


def _bca_interval(reps: np.ndarray, point: float, jack: np.ndarray, confidence_level: float) -> tuple[float, float]:
    """Bias-corrected and accelerated percentile interval (Efron 1987); acceleration from the cluster jackknife."""
    from scipy.stats import norm

    reps = reps[np.isfinite(reps)]
    prop = np.clip(np.mean(reps < point) + 0.5 * np.mean(reps == point), 1.0 / (len(reps) + 1), 1 - 1.0 / (len(reps) + 1))
    z0 = norm.ppf(prop)
    d = jack.mean() - jack
    denom = 6.0 * np.sum(d**2) ** 1.5
    a = float(np.sum(d**3) / denom) if denom > 0 else 0.0
    alpha = (1.0 - confidence_level) / 2.0
    qs = []
    for z in (norm.ppf(alpha), norm.ppf(1 - alpha)):
        qs.append(norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))))
    lo, hi = np.quantile(reps, qs)
    return float(lo), float(hi)


def _check_bootstrap_iv(values: np.ndarray, clusters: np.ndarray, statistic, strata: np.ndarray | None,
                        method: str) -> tuple[np.ndarray, np.ndarray]:
    if method not in ("percentile", "bca"):
        raise ValueError(f"method must be 'percentile' or 'bca', got {method!r}")
    clusters = np.asarray(clusters)
    if statistic is None:
        values, clusters = _check_inputs(values, clusters)
    else:
        values = np.asarray(values)
        if clusters.shape != values.shape[:1]:
            raise ValueError(f"clusters shape {clusters.shape} must be (n_units,) = {values.shape[:1]}")
        if values.shape[0] == 0:
            raise ValueError("values is empty")
    if strata is not None and np.shape(strata) != clusters.shape:
        raise ValueError(f"strata shape {np.shape(strata)} must equal clusters shape {clusters.shape}")
    return values, clusters


def is_weighted_statistic(statistic: Callable) -> bool:
    """Whether ``statistic`` takes ``(values, weights)``: two positional parameters without defaults.

    A plain statistic such as ``np.mean`` or ``np.median`` (one required parameter) is applied to
    the resampled rows themselves (copies of each resampled cluster's units).
    """
    try:
        sig = inspect.signature(statistic)
    except (TypeError, ValueError):       # some builtins and ufuncs carry no signature: plain
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in sig.parameters.values() if p.kind in kinds and p.default is inspect.Parameter.empty]
    return len(required) >= 2


def _statistic_replicates(statistic: Callable, values: np.ndarray, inverse: np.ndarray, n_clusters: int,
                          counts: np.ndarray, jackknife: bool) -> tuple[float, np.ndarray, np.ndarray | None]:
    """Point, replicates and (for BCa) leave-one-cluster-out values of a user statistic.

    A weighted statistic gets the units' multiplicities as weights (no copies); a plain one the
    resampled units themselves, each resampled cluster's units repeated by its multiplicity.
    """
    if is_weighted_statistic(statistic):
        def at(w: np.ndarray) -> float:
            return float(statistic(values, w))
    else:
        def at(w: np.ndarray) -> float:
            return float(statistic(np.repeat(values, w.astype(np.int64), axis=0)))
    point = at(np.ones(len(values)))
    reps = np.array([at(c[inverse].astype(np.float64)) for c in counts])
    jack = (np.array([at((inverse != k).astype(np.float64)) for k in range(n_clusters)]) if jackknife else None)
    return point, reps, jack


def _mean_replicates(values: np.ndarray, inverse: np.ndarray, n_clusters: int, counts: np.ndarray,
                     jackknife: bool) -> tuple[float, np.ndarray, np.ndarray | None]:
    """The unit-weighted mean's point, replicates and (for BCa) leave-one-cluster-out values, vectorised."""
    sums = np.bincount(inverse, weights=values, minlength=n_clusters)
    sizes = np.bincount(inverse, minlength=n_clusters).astype(np.float64)
    reps = ratio_replicates(sums[None], sizes[None], counts)[:, 0]
    jack_w = np.ones(n_clusters)[None] - np.eye(n_clusters)
    jack = ratio_replicates(sums[None], sizes[None], jack_w)[:, 0] if jackknife else None
    return float(values.mean()), reps, jack


def cluster_bootstrap(values: np.ndarray, clusters: np.ndarray,
                      statistic: Callable[[np.ndarray, np.ndarray], float] | None = None, *,
                      strata: np.ndarray | None = None, n_resamples: int = 2000,
                      confidence_level: float = 0.95, method: Literal["percentile", "bca"] = "percentile",
                      seed: int = 0) -> BootstrapResult:
    """Cluster (trajectory) bootstrap interval of a statistic of per-unit values.

    Args:
        values: ``(n_units, ...)`` one value (or one row, e.g. an embedding) per unit.
        clusters: ``(n_units,)`` cluster id of each unit (e.g. the episode); clusters are
            resampled with replacement, whole.
        statistic: either a plain statistic of the resampled units, ``statistic(values) -> float``
            (e.g. ``np.mean``, ``np.median``: one required parameter), or a weighted one,
            ``statistic(values, weights) -> float`` (two required parameters), where ``weights``
            ``(n_units,)`` are the units' multiplicities in a replicate (no resampled copies are
            made, e.g. Frechet distance from weighted moments). ``None``: the unit-weighted mean
            of 1-D ``values`` (vectorised over replicates).
        strata: ``(n_units,)`` stratum of each unit; clusters must be nested in strata and are
            resampled within them (each replicate keeps every stratum's cluster count).
        n_resamples: bootstrap replicates B.
        confidence_level: e.g. 0.95.
        method: ``percentile``, or ``bca`` (bias-corrected and accelerated; the acceleration from
            the leave-one-cluster-out jackknife).
        seed: seed of the resampling.

    Returns:
        :class:`BootstrapResult`; ``point`` is the statistic on the data as given. With fewer
        than 2 clusters there is nothing to resample: a warning, and ``low = high = NaN``
        (one cluster would otherwise give a zero-width interval).

    >>> r = cluster_bootstrap(np.array([1.0, 1.0, 3.0, 3.0]), np.array([0, 0, 1, 1]), n_resamples=200)
    >>> r.low <= r.point <= r.high, r.n_clusters
    (True, 2)
    >>> float(round(cluster_bootstrap(np.arange(6.0), np.repeat([0, 1, 2], 2), np.median).point, 2))
    2.5
    """
    values, clusters = _check_bootstrap_iv(values, clusters, statistic, strata, method)
    _, inverse = np.unique(clusters, return_inverse=True)
    n_clusters = int(inverse.max()) + 1
    counts = cluster_counts(inverse, strata, n_clusters, n_resamples, make_rng(seed, "cluster_bootstrap"))
    if statistic is None:
        point, reps, jack = _mean_replicates(values, inverse, n_clusters, counts, method == "bca")
    else:
        point, reps, jack = _statistic_replicates(statistic, values, inverse, n_clusters, counts, method == "bca")
    if n_clusters < 2:
        warnings.warn(f"cluster_bootstrap: {n_clusters} cluster; an interval needs at least 2 independent "
                      f"clusters (low and high are NaN)", RuntimeWarning, stacklevel=2)
        return BootstrapResult(point, float("nan"), float("nan"), method, n_resamples, n_clusters,
                               confidence_level)
    if method == "bca":
        lo, hi = _bca_interval(reps, point, jack, confidence_level)
    else:
        lo, hi = percentile_interval(reps[np.isfinite(reps)], confidence_level)
    return BootstrapResult(point, float(lo), float(hi), method, n_resamples, n_clusters, confidence_level)


def ratio_replicates(values: np.ndarray, denominators: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Paired replicates of ``sum(value) / sum(denominator)`` over resampled clusters, for many series.

    Args:
        values, denominators: ``(n_series, n_clusters)`` per-cluster sums; a cluster a series
            has no value for has 0 in both (weight 0). Denominator 1 everywhere gives the mean.
        counts: ``(n_resamples, n_clusters)`` from :func:`resample_counts`, shared by every series.

    Returns:
        ``(n_resamples, n_series)``; NaN where a replicate's denominator is 0.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        return (counts @ values.T) / (counts @ denominators.T)


#: At most this many deletion groups per resampling group in :func:`jackknife_counts`.
JACKKNIFE_GROUPS = 32


def jackknife_counts(group: np.ndarray, max_groups: int = JACKKNIFE_GROUPS,
                     within: np.ndarray | None = None) -> np.ndarray:
    """Delete-a-group jackknife over clusters: ``(R, n_clusters)`` multiplicities, each row deleting one group.

    Within each resampling group (``group``, one label per cluster: one group for a paired design,
    one per side for independent sides), its ``n`` clusters are split into ``min(n, max_groups)``
    contiguous deletion groups (delete-one when ``n <= max_groups``). A group of one cluster has no
    deletion row. :func:`jackknife_weights` gives the rows' weights in the bias estimate. With ``within``
    (``(n_clusters,)`` booleans), the jackknife of the subset: the other clusters have multiplicity 0 in
    every row, and only the subset's clusters are deleted.

    >>> jackknife_counts(np.array(["a", "a", "a"])).tolist()
    [[0, 1, 1], [1, 0, 1], [1, 1, 0]]
    >>> jackknife_counts(np.zeros(4), within=np.array([1, 0, 1, 1], bool)).tolist()
    [[0, 0, 1, 1], [1, 0, 0, 1], [1, 0, 1, 0]]
    """
    group = np.asarray(group)
    inside = np.ones(len(group), bool) if within is None else np.asarray(within, bool)
    rows = []
    for label in sorted(set(group.tolist()), key=str):
        members = np.flatnonzero((group == label) & inside)
        if len(members) < 2:
            continue
        for part in np.array_split(members, min(len(members), max_groups)):
            row = inside.astype(np.int64)
            row[part] = 0
            rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(group))


def jackknife_weights(counts: np.ndarray, group: np.ndarray, present: np.ndarray | None = None,
                      within: np.ndarray | None = None) -> np.ndarray:
    """The weights of the jackknife's bias estimate ``sum_r w_r (T_r - T)`` over :func:`jackknife_counts`' rows.

    A statistic whose bias is ``a / m`` in the ``m`` clusters of a resampling group that hold its rows
    (``present``; all of them by default) has bias ``a / (m - m_r)`` without the ``m_r`` of them that row
    ``r`` deletes; with ``w_r = (m - m_r) / m`` the estimate's expectation is exactly ``a / m``, and the
    statistic's first-order (linear) part cancels whatever the deletion groups' sizes (delete-one:
    ``w = (m - 1) / m``, the textbook ``(m - 1) (mean T_-i - T)``). The groups' bias terms add. A row that
    deletes no present cluster, or deletes all of a group's, weighs 0.

    Args:
        counts: ``(R, n_clusters)`` from :func:`jackknife_counts`.
        group: ``(n_clusters,)`` the resampling groups it was made with.
        present: ``(n_clusters,)`` or ``(S, n_clusters)`` booleans: the clusters with rows, per series.
        within: the subset ``counts`` was made for (``jackknife_counts(..., within=)``): only its clusters count.

    Returns:
        ``(R,)``, or ``(R, S)`` for a 2-D ``present``.

    >>> c = jackknife_counts(np.zeros(4))
    >>> jackknife_weights(c, np.zeros(4)).tolist(), jackknife_weights(c, np.zeros(4), [1, 1, 1, 0]).tolist()
    ([0.75, 0.75, 0.75, 0.75], [0.6666666666666666, 0.6666666666666666, 0.6666666666666666, 0.0])
    """
    group = np.asarray(group)
    pres = np.ones((1, len(group)), bool) if present is None else np.atleast_2d(np.asarray(present, bool))
    inside = np.ones(len(group), bool) if within is None else np.asarray(within, bool)
    pres = pres & inside
    deleted = (np.asarray(counts) == 0) & inside                        # (R, N)
    w = np.zeros((len(deleted), len(pres)))
    for r, row in enumerate(deleted):
        in_group = group == group[np.flatnonzero(row)[0]]
        m = (pres & in_group).sum(axis=1).astype(np.float64)             # (S,)
        m_r = (pres & row).sum(axis=1).astype(np.float64)
        ok = (m_r > 0) & (m_r < m)
        w[r, ok] = (m[ok] - m_r[ok]) / m[ok]
    return w[:, 0] if present is None or np.ndim(present) == 1 else w


def jackknife_bias(values: np.ndarray, base: np.ndarray | float, weights: np.ndarray) -> np.ndarray | float:
    """The jackknife's bias estimate ``sum_r weights_r (values_r - base)``: ``values`` ``(R,)`` or ``(R, S)`` the
    statistic on :func:`jackknife_counts`' rows, ``base`` on all clusters (computed the same way), ``weights``
    from :func:`jackknife_weights` (``(R,)`` or ``(R, S)``). A row where the statistic is undefined (a deletion
    that leaves a side fewer than 2 rows) adds nothing; NaN when no weighted row is defined."""
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim < v.ndim:
        w = w.reshape((-1,) + (1,) * (v.ndim - 1)) * np.ones_like(v)
    with np.errstate(invalid="ignore"):              # an undefined (infinite) row with weight 0: unused
        terms = w * (v - np.asarray(base, dtype=np.float64))
    used = (w != 0) & np.isfinite(terms)
    out = np.where(used, terms, 0.0).sum(axis=0)
    return np.where(used.any(axis=0) | ~(w != 0).any(axis=0), out, np.nan)[()]


def jackknife_centred(replicates: np.ndarray, point: np.ndarray | float, bias: np.ndarray | float) -> np.ndarray:
    """Bootstrap replicates ``(B,)`` or ``(B, S)`` shifted so that their mean is ``point + bias``: the bootstrap's
    own bias estimate (``mean - point``) replaced by the jackknife's (:func:`jackknife_bias`), their spread kept."""
    r = np.asarray(replicates, dtype=np.float64)
    with warnings.catch_warnings():                  # a column without a finite replicate stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return r - np.nanmean(r, axis=0) + np.asarray(point, dtype=np.float64) + np.asarray(bias, dtype=np.float64)


#: The two-scale check of a jackknife bias correction (:class:`JackknifePlan`): random halvings of the clusters
#: (each gives two complementary halves), and the leftover bias, in standard deviations of the replicates, above
#: which an interval is withheld (:func:`bias_check_failed`): a bias of 0.75 standard errors alone takes a normal
#: 95% interval's coverage to 88%.
BIAS_CHECK_SPLITS = 2
BIAS_CHECK_LIMIT = 0.75
#: Deletion groups per resampling group in a half's jackknife (delete-one up to this many clusters).
BIAS_CHECK_GROUPS = 8


@dataclass(frozen=True)
class JackknifePlan:
    """Multiplicity rows for a jackknife bias correction and its two-scale check, evaluated in one batch.

    The delete-a-group jackknife removes a bias of the form ``a / m`` in the ``m`` clusters. Where the bias is not
    of that form (the FD with few independent rows for its dimension: 32 episodes x 10 rows at d = 64 keep 4.3 of
    a plug-in bias of 22.7), the corrected estimate keeps a bias that nothing in its replicates shows. The check
    repeats the correction on random halves of the clusters (each resampling group halved, ``BIAS_CHECK_SPLITS``
    times; each half's jackknife deletes ``BIAS_CHECK_GROUPS`` groups): for a statistic with bias
    ``a / m + c / m^2``, the correction deleting groups of ``g`` leaves ``-c / (m (m - g))``, so
    ``(corrected on the half - corrected on all) / (m (m - g) / (m_h (m_h - g_h)) - 1)``, averaged over the
    halves, estimates what the correction leaves on all ``m`` clusters (Richardson's two-scale estimate; ``m``,
    ``g`` per resampling group, counting the clusters with rows, and the ratio averaged over the groups: exact
    for per-group terms of that form).

    ``counts`` ``(R, N)``: row 0 every cluster, then the jackknife's rows (:func:`jackknife_counts`), then per half
    its mask and its own jackknife rows. Evaluate the statistic on every row, then :meth:`estimate`.

    >>> plan = JackknifePlan.of(np.zeros(32, dtype=int))
    >>> plan.counts.shape, plan.halves.sum(axis=1).tolist()       # 1 + 32 + 4 x (1 + 8) rows
    ((69, 32), [16, 16, 16, 16])
    """

    group: np.ndarray
    counts: np.ndarray
    halves: np.ndarray                       # (H, N) booleans
    parts: tuple                             # per (all, half...): (row of its clusters, start, stop of its rows)

    @classmethod
    def of(cls, group: np.ndarray, splits: int = BIAS_CHECK_SPLITS, seed: int = 0) -> "JackknifePlan":
        """Rows for ``group`` (one label per cluster, as :func:`jackknife_counts`); the halvings depend on
        ``seed`` and the clusters alone."""
        group = np.asarray(group)
        n = len(group)
        rng = make_rng(seed, "jackknife halves", n)
        halves: list[np.ndarray] = []
        for _ in range(splits):
            for _try in range(64):                   # distinct halvings (few clusters have few of them)
                a = np.zeros(n, bool)
                for label in sorted(set(group.tolist()), key=str):
                    members = rng.permutation(np.flatnonzero(group == label))
                    a[members[:len(members) // 2]] = True
                if a.any() and not a.all() and not any((a == h).all() for h in halves):
                    halves += [a, ~a]
                    break
        rows, parts = [np.ones((1, n), dtype=np.int64)], []
        for within in [None, *halves]:
            jc = (jackknife_counts(group) if within is None else
                  jackknife_counts(group, max_groups=BIAS_CHECK_GROUPS, within=within))
            if within is not None:
                rows.append(within.astype(np.int64)[None])
            start = sum(len(r) for r in rows)
            parts.append((start - 1, start, start + len(jc)))
            rows.append(jc)
        return cls(group, np.concatenate(rows), np.array(halves, dtype=bool).reshape(len(halves), n), tuple(parts))

    def estimate(self, values: np.ndarray, present: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(bias, leftovers)`` from ``values`` ``(R,)`` or ``(R, S)``, the statistic on the rows of ``counts``;
        ``present`` as in :func:`jackknife_weights`. ``bias`` is the jackknife's estimate on all clusters,
        ``leftovers`` ``(H,)`` or ``(H, S)`` each half's two-scale estimate of what the corrected statistic keeps
        (NaN where a half lacks 2 clusters with rows, or holds all of them); :func:`bias_check_failed` reads them."""
        v = np.asarray(values, dtype=np.float64)
        pres = np.ones(len(self.group), bool) if present is None else np.asarray(present, bool)
        pres2 = np.atleast_2d(pres)                                                   # (S or 1, N)
        labels = sorted(set(self.group.tolist()), key=str)

        def bias_of(part: tuple, within: np.ndarray | None):
            base, start, stop = part
            if stop == start:
                return np.full(v.shape[1:], np.nan)[()]
            w = jackknife_weights(self.counts[start:stop], self.group, pres, within)
            b = jackknife_bias(v[start:stop], v[base], w)
            if within is None:
                return b
            # A half whose deletions weigh nothing for a series has no correction for it: NaN, not the plug-in.
            return np.where((np.asarray(w) != 0).any(axis=0), b, np.nan)[()]

        def sizes(part: tuple, within: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
            """Per resampling group ``(L, S)``: the clusters with rows, and the mean size of the deletion groups
            among them (those clusters over the deletion rows that remove any of them)."""
            _, start, stop = part
            inside = np.ones(len(self.group), bool) if within is None else within
            deleted = self.counts[start:stop] == 0                                    # (r, N)
            m, g = [], []
            for lab in labels:
                mine = pres2 & inside & (self.group == lab)                            # (S, N)
                m.append(mine.sum(axis=-1).astype(np.float64))
                k = (deleted[:, None, :] & mine[None]).any(axis=-1).sum(axis=0)       # (S,)
                g.append(m[-1] / np.maximum(k, 1))
            return np.array(m), np.array(g)

        bias = bias_of(self.parts[0], None)
        full = v[0] - bias
        m_all, g_all = sizes(self.parts[0], None)
        left = []
        for part, within in zip(self.parts[1:], self.halves):
            m_h, g_h = sizes(part, within)
            # Per resampling group the leftover -c / (m (m - g)) grows by this ratio on the half; with two
            # groups (independent sides) their mean. A group the half leaves with fewer than 2 clusters, or
            # none removed: no estimate.
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where((m_h >= 2) & (m_h < m_all),
                                 m_all * (m_all - g_all) / (m_h * (m_h - g_h)) - 1.0, np.nan).mean(axis=0)
            left.append((v[part[0]] - bias_of(part, within) - full) / (ratio if v.ndim > 1 else ratio[0]))
        halves = np.array(left) if left else np.full((0, *v.shape[1:]), np.nan)
        return np.asarray(bias)[()], halves


def leftover_bias(leftovers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(leftover, se)``: the mean of the halves' estimates (:meth:`JackknifePlan.estimate`) over their first axis,
    and its standard error from their spread (NaN without 2 usable halves)."""
    h = np.asarray(leftovers, dtype=np.float64)
    n = np.isfinite(h).sum(axis=0)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(h, axis=0) if len(h) else np.full(h.shape[1:], np.nan)
        se = np.where(n >= 2, np.nanstd(h, axis=0, ddof=1) / np.sqrt(n), np.nan) if len(h) else mean
    return np.asarray(mean)[()], np.asarray(se)[()]


def bias_check_failed(leftovers: np.ndarray, replicates: np.ndarray) -> np.ndarray | bool:
    """Whether a bias-corrected estimate fails its two-scale check (:class:`JackknifePlan`): the leftover bias
    (the mean of ``leftovers``, the halves' estimates, ``(H,)`` or ``(H, S)``) is above ``BIAS_CHECK_LIMIT``
    standard deviations of the ``replicates`` ``(B,)`` or ``(B, S)``, in either direction, and above twice its
    own standard error (the halves' spread: four estimates from halves of the episodes are noisy). Without 2
    usable halves the check is not made (passes)."""
    mean, se = leftover_bias(leftovers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sd = np.nanstd(np.asarray(replicates, dtype=np.float64), axis=0)
    with np.errstate(invalid="ignore"):
        return ((np.abs(mean) > BIAS_CHECK_LIMIT * sd) & (np.abs(mean) > 2.0 * se))[()]


def linear_part(replicates: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Split replicates into their linear part in the cluster multiplicities and the rest.

    The linear (Hajek) part is the least-squares fit of the replicates on their ``counts``
    (Efron's regression of bootstrap replicates on resampling counts): robust where a statistic is a
    small difference of large terms (an FD of 1e-7 from traces of order 1), where finite differences
    would return rounding noise. The fit is shrunk by the share of its sum of squares that ``p``
    fitted directions would pick up from the rest by chance (to 0 where that is all of it). The rest
    is the degenerate (quadratic and higher) part, its deviations scaled by
    ``sqrt((B - 1) / (B - 1 - p))``, so that its spread is not understated by the fit.

    Args:
        replicates: ``(B,)`` finite replicates.
        counts: ``(B, n_clusters)`` their multiplicities.

    Returns:
        ``(linear, rest)``, each ``(B,)`` with ``linear + rest`` the replicates up to the rescaling
        (``linear`` has mean 0); ``None`` with too few replicates to fit (``B <= p + 2``).
    """
    x = np.asarray(counts, dtype=np.float64)
    x = x - x.mean(axis=0)
    y = np.asarray(replicates, dtype=np.float64)
    beta, _, rank, _ = np.linalg.lstsq(x, y - y.mean(), rcond=None)
    b = len(y)
    if b <= rank + 2:
        return None
    linear = x @ beta
    rest = y - linear
    # A fit on p directions picks up p / (B - 1 - p) of the rest's variance by chance: shrink the linear
    # part by that share (to 0 where it is all chance), so that noise is never extrapolated as signal.
    noise = rank * float(np.sum((rest - rest.mean()) ** 2)) / (b - 1 - rank)
    fitted = float(linear @ linear)
    linear = linear * (np.sqrt(1.0 - noise / fitted) if fitted > noise else 0.0)
    return linear, rest.mean() + (rest - rest.mean()) * np.sqrt((b - 1) / (b - 1 - rank))


def boundary_interval(center: float, replicates: np.ndarray, counts: np.ndarray, scale: float,
                      confidence_level: float, grid: int = 512, corrected: float | None = None) -> tuple[float, float]:
    """Interval for a distance ``theta >= 0`` whose estimator is degenerate at 0 (KID's MMD^2), by test inversion.

    Near ``theta = 0`` such an estimator is a quadratic form: ``T - theta = L + D``, with a linear term
    ``L`` whose spread grows with ``theta`` (it vanishes at 0) and a degenerate quadratic term ``D``
    (a weighted sum of centred chi-squares: skewed, with a short left tail). The plain bootstrap
    mimics neither at a small truth: its linear term is built on the *estimated* difference, which
    carries noise, so it is too wide at 0, and a percentile or basic interval then covers a true 0
    99-100% of the time (no power near 0). Here each replicate is split into its linear part ``L*``
    in the cluster multiplicities and the degenerate rest ``D*`` (:func:`linear_part`). A candidate
    ``theta`` is accepted when ``center - theta`` lies between the ``alpha/2`` and ``1 - alpha/2``
    quantiles of ``D* - u L* - center`` with ``u = sqrt(theta / scale)`` (0 for ``theta <= 0``): the
    linear term shrunk to the size it has at ``theta`` (``scale``, the plug-in squared distance the
    replicates' linear term is built on, stands for ``u = 1``), in the percentile orientation, and
    the degenerate term in the basic one. The test's interval spans the accepted values. At a true 0 it is
    the basic interval of ``D*`` (KID: 93-97% coverage in ``benchmarks/coverage.py``); far from 0, the
    percentile interval of the replicates. Its upper end is then raised (next paragraph).

    Where the test accepts a positive distance, the upper end is then raised to the percentile interval's where
    that is longer: the ``1 - alpha/2`` quantile of the replicates recentred on the estimate they imply
    (``2 center - mean``: KID's U-statistic, the FD's jackknife-corrected value). The test builds the linear term
    at ``theta`` from the replicates', which lies along the *estimated* difference; when the estimate is low that
    is mostly noise, spread over all the features' directions, and for a true difference along a high-variance
    direction the linear term at ``theta`` is understated, so the upper end falls short. The percentile's upper
    end, built on the plug-in's own linear term, reaches further: in ``benchmarks/coverage.py``, 9 of the 16 cells
    below 93% (KID and the bias-corrected FD, mostly shifts along the highest-variance axis) rose into 93-97%, and
    none fell; the cells left below are in the linear regime far from 0 (KID's carry the bootstrap-t, which this
    does not touch; the FD's rose less, 90.5 to 91.2% and 90.2 to 92.5%, then further with ``corrected``, below).
    The lower end, which decides whether a distance is told from 0, is the test's alone, so power and the
    false-positive rate at a true 0 do not change; nor does an interval at or below 0 (an estimate under what the
    degenerate part gives at a true 0), which keeps a true 0's coverage at the test's. The price of that exception:
    as the estimate rises through the point where the test's upper end crosses 0, the upper end jumps from about 0
    to the percentile's (taking the union there too would raise a true 0's coverage to 1 minus the false-positive rate, up to 98%).

    It needs an estimator (nearly) unbiased at 0, as KID's U-statistic is. For the FD, ``center`` and ``scale`` are
    the plug-in, ``corrected`` the jackknife-corrected estimate (see ``corrected``), and the replicates are
    recentred on it plus the jackknife's bias estimate (:func:`jackknife_centred`): with
    the bootstrap's own bias estimate (``2 FD - mean FD*``) a positive bias is left at moderate dimension, and
    this interval covered a true 0 in 87-90% of data sets (independent sides, d = 16).

    Args:
        center: the statistic on the data (the plug-in FD, or KID's U-statistic) the replicates resample.
        replicates: ``(B,)`` (non-finite ones are left out, with their rows of ``counts``).
        counts: ``(B, n_clusters)`` the replicates' cluster multiplicities.
        scale: the plug-in squared distance behind the linear term (KID's V-statistic), raised to what the
            degenerate part's spread allows (see the code); no linear part: the basic interval of ``D*``. With too
            few replicates to fit the linear part (``B <= clusters + 2``): a warning, and the basic interval of
            the replicates.
        confidence_level: e.g. 0.95.
        grid: points of the first scan over ``u`` before each bound is refined by bisection.
        corrected: for a bias-corrected distance (the FD less its jackknife bias), the corrected estimate: it replaces
            ``scale`` where the replicates are in their linear regime (their linear part carrying over
            :data:`STUDENTIZE_LINEAR_SHARE` of their variance, as :func:`linear_share` measures, where KID takes the
            bootstrap-t) and it is a positive number, so that at the estimate the linear term is the replicates' own.
            With the plug-in as scale the test shrinks the linear term at the estimate by ``sqrt(corrected /
            plug-in)``: the plug-in's bias counted as noise in the estimated difference, which holds where the
            features vary alike in every direction. Far from 0 the estimated difference lies close to the true one,
            so the replicates' linear term has about the size the true difference's has at the estimate, and that
            shrinkage understates it, most for a difference along a high-variance direction: the interval covered
            91.2-92.5% with the shift along the highest-variance axis (``benchmarks/coverage.py``; 92.5-94.8% with
            the corrected estimate, no cell lower, no power lost). Near 0 the plug-in stays: there the replicates'
            linear term is mostly the noise of the estimated difference, and a corrected estimate near 0 as the
            scale would stretch it without bound (at a true 0 the intervals were 2.6 times as wide, for no coverage).

    Returns:
        ``(low, high)``; NaN without a finite replicate. With too few replicates to fit the linear part, the basic
        interval's upper end is raised in the same way.
    """
    reps = np.asarray(replicates, dtype=np.float64)
    low, high = _inverted_test(center, reps, counts, scale, confidence_level, grid, corrected)
    ok = np.isfinite(reps)
    if np.isfinite(high) and high > 0 and ok.sum() > 1:
        # Where the test accepts a positive distance, the upper end is at least the percentile interval's,
        # recentred on the estimate the replicates imply (2 center - their mean): see the docstring.
        q_hi = float(np.quantile(reps[ok], 1.0 - (1.0 - confidence_level) / 2.0))
        high = max(high, q_hi + 2.0 * (float(center) - float(np.mean(reps[ok]))))
    return float(low), float(high)


def _inverted_test(center: float, replicates: np.ndarray, counts: np.ndarray, scale: float,
                   confidence_level: float, grid: int, corrected: float | None = None) -> tuple[float, float]:
    """:func:`boundary_interval`'s test inversion alone (its upper end before the percentile's is taken)."""
    reps = np.asarray(replicates, dtype=np.float64)
    ok = np.isfinite(reps)
    if not ok.any() or not np.isfinite(center):
        return float("nan"), float("nan")
    a_lo, a_hi = (1.0 - confidence_level) / 2.0, 1.0 - (1.0 - confidence_level) / 2.0
    parts = linear_part(reps[ok], np.asarray(counts)[ok])
    if parts is None:
        warnings.warn(f"boundary_interval: {int(ok.sum())} replicates cannot fit a linear part on "
                      f"{np.shape(counts)[1]} clusters (more than clusters + 2 are needed); the basic interval of the "
                      "replicates instead, which is conservative at a true 0", RuntimeWarning, stacklevel=3)
        q_lo, q_hi = np.quantile(reps[ok], [a_lo, a_hi])
        return float(2.0 * center - q_hi), float(2.0 * center - q_lo)
    lin, rest = parts
    if (corrected is not None and np.isfinite(corrected) and corrected > 0
            and _linear_fraction(lin, rest) > STUDENTIZE_LINEAR_SHARE):
        scale = corrected                     # the linear regime: the linear term at the estimate at full size
    # The linear term's growth per unit of distance, var(L*) / scale, is at most 4 sd(D*) (its variance is
    # 4 d' S d / n for a difference d, and the degenerate term's sd at least sqrt(2) |S| / n): a plug-in
    # below what that allows (two sets that are copies of each other, scale ~ 0, or a rounding error below
    # 0) is raised to it, so that a linear term is never extrapolated from a difference the data cannot resolve.
    scale = max(float(scale), 0.0) if np.isfinite(scale) else 0.0
    spread = float(np.std(rest))
    if spread > 0:
        scale = max(scale, float(np.var(lin)) / (4.0 * spread))
    dev0 = rest - center
    q0_lo, q0_hi = np.quantile(dev0, [a_lo, a_hi])
    lo0, hi0 = center - q0_hi, center - q0_lo                     # theta <= 0: no linear term
    if scale <= 0 or not np.any(lin):                             # no linear part: the basic interval of D*
        return float(lo0), float(hi0)

    def accepted(u: np.ndarray) -> np.ndarray:
        u = np.atleast_1d(u)
        dev = dev0[None, :] - u[:, None] * lin[None, :]
        q_lo, q_hi = np.quantile(dev, [a_lo, a_hi], axis=1)
        gap = center - scale * u * u
        return (q_lo <= gap) & (gap <= q_hi)

    # Beyond u_max every theta is refused: center - scale u^2 < min(dev0) - u max|lin| <= the lower quantile.
    big, span = float(np.max(np.abs(lin))), max(float(center - dev0.min()), 0.0)
    u_max = 1.01 * (big + np.sqrt(big * big + 4.0 * scale * span)) / (2.0 * scale) + 1e-300
    us = np.linspace(0.0, u_max, grid + 1)
    acc = accepted(us)
    acc[0] = lo0 <= 0.0 <= hi0

    def refine(inside: float, outside: float) -> float:
        for _ in range(60):
            mid = 0.5 * (inside + outside)
            if accepted(mid)[0]:
                inside = mid
            else:
                outside = mid
        return inside

    pos = np.flatnonzero(acc[1:]) + 1
    if lo0 <= 0.0:
        low = lo0
    elif pos.size:
        low = scale * refine(us[pos[0]], us[pos[0] - 1]) ** 2
    else:                                    # nothing accepted on the grid: the interval at theta = center
        u = np.sqrt(max(center, 0.0) / scale)
        q_lo, q_hi = np.quantile(dev0 - u * lin, [a_lo, a_hi])
        return float(center - q_hi), float(center - q_lo)
    if pos.size:
        k = pos[-1]
        high = scale * refine(us[k], us[min(k + 1, grid)]) ** 2 if k < grid else scale * us[k] ** 2
    else:                                    # lo0 <= 0 here: the accepted values are [lo0, min(hi0, 0)]
        high = min(hi0, 0.0)
    return float(low), float(max(high, low))


#: A permuted statistic within this share of the largest statistic's size (or of ``scale``) of the data's ties with it.
PERMUTATION_TIE_RTOL = 1e-10


def permutation_p_value(statistics: np.ndarray, scale: float = 0.0) -> float:
    """The permutation test's p-value: the share of permuted data sets whose statistic is at least the data's.

    ``statistics`` ``(P,)``: row 0 the data itself (the identity permutation, which counts, so that the
    p-value is never below ``1 / P``), the rest the permuted data sets'. A permuted statistic below the data's
    by no more than :data:`PERMUTATION_TIE_RTOL` times the larger of ``scale`` (the size of the data whose
    rounding the statistics carry: for an FD, the rows' total variance) and the statistics' own largest size
    counts as at least it (a model whose rows are the reference's gives p = 1 whatever the features' scale). NaN
    where the data's statistic is not finite; a NaN or +inf permuted one counts as at least it (a -inf one, which
    no FD is, as below it).
    """
    t = np.asarray(statistics, dtype=np.float64)
    if t.size == 0 or not np.isfinite(t[0]):
        return float("nan")
    size = max(float(scale), float(np.max(np.abs(t[np.isfinite(t)]))))
    return float(np.mean(~(t < t[0] - PERMUTATION_TIE_RTOL * size)))


def with_zero_test(low: float, high: float, p_value: float, confidence_level: float) -> tuple[float, float]:
    """An interval for a distance ``theta >= 0`` with 0 put in or taken out as a permutation test of
    ``theta = 0`` at ``alpha = 1 - confidence_level`` decides (:func:`permutation_p_value`).

    The test accepts 0 (``p_value > alpha``; it rejects at ``p_value <= alpha``, ``alpha`` rounded to 12
    decimals so that 50 of 500 rejects at 90%): the interval is widened to hold 0. It rejects 0: the interval's
    lower end, where it was at or below 0, is raised to the smallest positive double (an interval open at 0, which
    reports write (0, high]). A test that rejects 0 for an interval lying entirely at or below 0 (an estimate below
    what a true 0 gives, with a permuted statistic that still says the sides differ) leaves the interval as it is:
    no interval the two agree on exists, and the bootstrap's is kept. No p-value (NaN), or no interval: unchanged.
    """
    if not (np.isfinite(p_value) and np.isfinite(low) and np.isfinite(high)):
        return low, high
    if p_value > round(1.0 - confidence_level, 12):
        return min(low, 0.0), max(high, 0.0)
    if high <= 0.0:
        return low, high
    return max(low, float(np.nextafter(0.0, 1.0))), high


#: The share of the replicates' variance in their linear part (:func:`linear_share`) above which KID's interval is
#: the bootstrap-t (:func:`studentized_interval`) rather than the boundary interval: the linear regime, far from 0,
#: where the estimate is skewed and heavy-tailed across data sets and the boundary interval covered 86.5-90.8% of
#: data sets with the shift along the features' highest-variance axis (``benchmarks/coverage.py``, 400 a cell;
#: 89.3-90.6% in ``benchmarks/kid_interval_variants.py``, 1000 a cell, where this value was chosen at commit 5eca392;
#: both before the boundary interval's upper-end rule, with which the latter's are 90.2-93.2%). The same share marks
#: the bias-corrected FD's linear regime, where its boundary interval is scaled by the corrected estimate
#: (:func:`boundary_interval`'s ``corrected``; not tuned for the FD).
STUDENTIZE_LINEAR_SHARE = 0.9


def linear_share(replicates: np.ndarray, counts: np.ndarray) -> float:
    """The share of the finite replicates' variance carried by their linear part in the multiplicities, as
    :func:`linear_part` splits them: var(L) / (var(L) + var(rest)), with ``L`` shrunk by what the fit picks up by
    chance and the rest's spread inflated by ``sqrt((B - 1) / (B - 1 - p))`` for the ``p`` fitted directions (1.07 at
    32 clusters and B = 500, 1.34 at 128), so that noise is never counted as linear: near 1 far from a degenerate
    point, lower near it; NaN when no linear part can be fitted (``B <= p + 2``)."""
    reps = np.asarray(replicates, dtype=np.float64)
    ok = np.isfinite(reps)
    parts = linear_part(reps[ok], np.asarray(counts)[ok]) if ok.any() else None
    if parts is None:
        return float("nan")
    return _linear_fraction(*parts)


def _linear_fraction(lin: np.ndarray, rest: np.ndarray) -> float:
    """:func:`linear_part`'s split as :func:`linear_share` reports it: var(L) / (var(L) + var(rest)), NaN at 0."""
    total = float(lin.var() + rest.var())
    return float(lin.var() / total) if total > 0 else float("nan")


def studentized_interval(center: float, se: float, replicates: np.ndarray, replicate_se: np.ndarray,
                         confidence_level: float) -> tuple[float, float]:
    """The bootstrap-t interval: ``(center - t_hi se, center - t_lo se)``, with ``t_lo`` and ``t_hi`` the
    ``alpha/2`` and ``1 - alpha/2`` quantiles of ``t* = (T* - center) / se*`` over the replicates, each studentized
    by its own standard error ``se*`` computed as ``se`` is on the data (Efron and Tibshirani 1993, ch. 12).
    It corrects the skewness of a statistic whose spread grows with its value, which a percentile interval keeps.
    Replicates without a finite value and a positive finite ``se*`` are left out; NaN when none is left or ``se``
    is not positive and finite."""
    reps, rse = np.asarray(replicates, dtype=np.float64), np.asarray(replicate_se, dtype=np.float64)
    ok = np.isfinite(reps) & np.isfinite(rse) & (rse > 0)
    if not ok.any() or not (np.isfinite(se) and se > 0 and np.isfinite(center)):
        return float("nan"), float("nan")
    a = (1.0 - confidence_level) / 2.0
    t_lo, t_hi = np.quantile((reps[ok] - center) / rse[ok], [a, 1.0 - a])
    return float(center - t_hi * se), float(center - t_lo * se)


def distance_interval(center: float, replicates: np.ndarray, counts: np.ndarray, scale: float,
                      confidence_level: float, se: float, replicate_se: np.ndarray
                      ) -> tuple[float, float, str]:
    """KID's interval: the bootstrap-t (:func:`studentized_interval`) where the replicates' linear part carries
    more than :data:`STUDENTIZE_LINEAR_SHARE` of their variance (:func:`linear_share`), else the boundary interval
    (:func:`boundary_interval`, which covers a true 0). Returns ``(low, high, method)``, the method
    ``"bootstrap-t"`` or ``"boundary"``.

    Each alone fails somewhere (``benchmarks/kid_interval_variants.py``, 1000 data sets a cell, 32 episodes,
    d = 4): the boundary interval covered 90.2-93.2% with a shift along the features' highest-variance axis (89.3-90.6%
    before its upper-end rule), where
    the estimate is skewed (0.9-1.2) and heavy-tailed; the bootstrap-t covers 83.9% at a small shift with
    independent sides, where the replicates are mostly degenerate and their standard errors noisy. The switch
    takes each where it holds. Its cost: a few replicates with a small ``se*`` give long t tails, and the
    bootstrap-t's lower bound can fall below 0 where the boundary interval's does not (power against a large
    unpaired shift 97.8% instead of 100% in ``benchmarks/coverage.py``)."""
    share = linear_share(replicates, counts)
    if np.isfinite(share) and share > STUDENTIZE_LINEAR_SHARE:
        low, high = studentized_interval(center, se, replicates, replicate_se, confidence_level)
        if np.isfinite(low) and np.isfinite(high):
            return low, high, "bootstrap-t"
    low, high = boundary_interval(center, replicates, counts, scale, confidence_level)
    return low, high, "boundary"
