"""The bootstrap stage: paired, episode-clustered intervals for every metric and horizon step.

Each world has one resampling of each unit's episodes (observation, dynamics and
control episodes), shared by every model and metric of that unit: the intervals
are paired. A replicate of a metric is ``sum(c * value) / sum(c * denominator)``
over episodes with multiplicities ``c``, then the metric's aggregate (identity, or
the square root for RMSE). Episodes without a value get weight 0 and are counted
out in ``n_clusters``.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from wmeval.core.config import Params
from wmeval.core.errors import WmevalError
from wmeval.core.execution import executor_for
from wmeval.core.rng import make_rng
from wmeval.core.stale import check_made_with, encoder_config
from wmeval.estimators.distributional import (
    KID_BLOCKS_FILE,
    Settings,
    fd_infinity_replicates,
    replicates,
    stored_kid_blocks,
    view_sets,
)
from wmeval.estimators.resample import (
    BIAS_CHECK_LIMIT,
    STUDENTIZE_LINEAR_SHARE,
    JackknifePlan,
    bias_check_failed,
    boundary_interval,
    distance_interval,
    jackknife_centred,
    leftover_bias,
    percentile_interval,
    ratio_replicates,
    resample_counts,
    with_zero_test,
)
from wmeval.metrics import REGISTRY, psnr_from_mse
from wmeval.metrics.registry import near_equal
from wmeval.tables import KEY_COLUMNS as KEYS
from wmeval.tables import (
    atomic_dir,
    atomic_write_text,
    read_metadata,
    read_table,
    write_table,
)


def _finish(x: np.ndarray, aggregate: str) -> np.ndarray:
    if aggregate == "sqrt_mean":
        return np.sqrt(np.maximum(x, 0.0))
    if aggregate == "psnr":
        return psnr_from_mse(x)
    return x


def _interval(reps: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval of the defined replicates (+inf counts: an infinite NLL is a value)."""
    ok = reps[~np.isnan(reps)]
    if ok.size == 0:
        return float("nan"), float("nan")
    if np.all(np.isposinf(ok)):
        return float("inf"), float("inf")
    alpha = (1.0 - level) / 2.0
    return (float(np.quantile(ok, alpha, method="lower")) if np.isinf(ok).any() else float(np.quantile(ok, alpha)),
            float(np.quantile(ok, 1 - alpha, method="higher")) if np.isinf(ok).any()
            else float(np.quantile(ok, 1 - alpha)))


def min_rank(badness: np.ndarray, axis: int = -1, atol: float = 0.0) -> np.ndarray:
    """Ranks (1 = best, lowest badness) with ties sharing the minimum rank; NaN counts as worst. A value within
    :data:`~wmeval.metrics.registry.TIE_RTOL` (relative) or ``atol`` of the one before it in sorted order ties with it
    (:func:`~wmeval.metrics.registry.near_equal`)."""
    bad = np.moveaxis(np.where(np.isnan(badness), np.inf, np.asarray(badness, dtype=np.float64)), axis, -1)
    # scipy.stats.rankdata(method="min") (tested against it) without importing scipy.stats (about 0.5 s per stage):
    # in each sorted row, a value's rank is the position of its first occurrence.
    order = np.argsort(bad, axis=-1, kind="stable")
    s = np.take_along_axis(bad, order, axis=-1)
    pos = np.broadcast_to(np.arange(s.shape[-1]), s.shape)
    new = np.ones(s.shape, dtype=bool)
    new[..., 1:] = ~near_equal(s[..., 1:], s[..., :-1], atol)       # inf == inf: NaNs tie as the worst
    first = np.maximum.accumulate(np.where(new, pos, 0), axis=-1)
    ranks = np.empty(s.shape)
    np.put_along_axis(ranks, order, first + 1.0, axis=-1)
    return np.moveaxis(ranks, -1, axis)


def _paired(info, point: np.ndarray, reps: np.ndarray, b: int, level: float) -> tuple[np.ndarray, ...]:
    """Paired difference to source ``b`` (point and percentile interval of the difference replicates),
    P(better) and P(tie): the shares of replicates in which a source is strictly better than ``b``,
    and as good (identical models tie in every replicate; so do values float64 does not resolve,
    :func:`~wmeval.metrics.registry.near_equal`)."""
    S = len(point)
    diff, p_better, p_tie = np.full((3, S), np.nan), np.full(S, np.nan), np.full(S, np.nan)
    with np.errstate(invalid="ignore"):
        d_reps = reps - reps[:, [b]]
        bad, bad_b = info.badness(reps), info.badness(reps[:, [b]])
        tie = near_equal(bad, bad_b, info.tie_atol)
        better = (bad < bad_b) & ~tie
    for j in range(S):
        ok = np.isfinite(d_reps[:, j])
        if ok.any() and np.isfinite(point[j]) and np.isfinite(point[b]):
            diff[0, j] = point[j] - point[b]
            diff[1, j], diff[2, j] = percentile_interval(d_reps[ok, j], level)
            p_better[j], p_tie[j] = float(better[ok, j].mean()), float(tie[ok, j].mean())
    return diff, p_better, p_tie


def summarize(key: dict, sources: list[str], point: np.ndarray, reps: np.ndarray, n_clusters: np.ndarray, boot,
              base: str | None, interval: str = "percentile", n_resamples: int | None = None) -> list[dict]:
    """Rows of one group: point, interval, paired difference to the baseline, P(better), rank interval.

    ``reps`` ``(B, S)`` are the replicates of every source on the same resampled episodes.
    ``interval="basic"`` reflects the replicates around the point (``2 point - reps``) before
    everything else, so that the level, the paired difference, P(better) and the ranks all use the
    basic interval: the interval of a bias-corrected estimate. Ranks are taken per replicate with
    ties sharing the minimum rank. A source with fewer than 2 clusters has no interval and no rank (NaN).
    """
    info = REGISTRY[key["metric"]]
    level = boot.confidence_level
    point = np.asarray(point, dtype=np.float64)
    if interval == "basic":
        with np.errstate(invalid="ignore"):
            reps = 2.0 * point[None, :] - reps
    one = np.asarray(n_clusters) < 2
    reps = np.where(one[None, :], np.nan, reps)
    undefined = np.isnan(reps).mean(axis=0)
    lo, hi = np.full(len(sources), np.nan), np.full(len(sources), np.nan)
    for j in range(len(sources)):
        if undefined[j] < 1.0 and not np.isnan(point[j]):
            lo[j], hi[j] = _interval(reps[:, j], level)
    diff, p_better, p_tie = np.full((3, len(sources)), np.nan), np.full(len(sources), np.nan), \
        np.full(len(sources), np.nan)
    if base in sources and info.ranked:
        diff, p_better, p_tie = _paired(info, point, reps, sources.index(base), level)
    # Rank among the models (ground truth excluded) in every replicate: 1 is best, ties share the minimum. A model
    # with fewer than 2 clusters has no replicates and is not ranked: ranked on its point alone, it pushed every
    # model behind it down a place its rank interval never showed (rank 2, interval [1-1]).
    rank = np.full((3, len(sources)), np.nan)
    models = [j for j, s in enumerate(sources) if s != "ground_truth" and not one[j]]
    if info.ranked and len(models) > 1:
        r = min_rank(np.asarray(info.badness(reps[:, models]), dtype=np.float64), axis=1, atol=info.tie_atol)
        pr = min_rank(np.asarray(info.badness(point[models]), dtype=np.float64), atol=info.tie_atol)
        for i, j in enumerate(models):
            rank[0, j] = pr[i]
            if not one[j]:
                rank[1, j], rank[2, j] = np.quantile(r[:, i], [(1 - level) / 2, 1 - (1 - level) / 2],
                                                     method="nearest")
    rows = []
    for i, src in enumerate(sources):
        rows.append({**key, "source": src, "point": float(point[i]), "low": float(lo[i]),
                     "high": float(hi[i]), "baseline": base, "diff_point": float(diff[0, i]),
                     "diff_low": float(diff[1, i]), "diff_high": float(diff[2, i]),
                     "p_better": float(p_better[i]), "p_tie": float(p_tie[i]), "rank": float(rank[0, i]),
                     "rank_low": float(rank[1, i]), "rank_high": float(rank[2, i]),
                     "n_clusters": int(n_clusters[i]),
                     "n_resamples": int(n_resamples or boot.n_resamples), "confidence_level": level,
                     "method": interval if interval != "percentile" else boot.method,
                     "resampling_unit": f"{key['unit']} episode",
                     "undefined_replicates": float(undefined[i]), "aggregate": info.aggregate})
    return rows


def _source_by_episode(g: pd.DataFrame) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """``g.pivot(index="source", columns="episode")`` of ``value`` and ``denominator`` as arrays: the sorted
    sources, the sorted episodes and two ``(sources, episodes)`` float arrays, NaN where a source has no row for an
    episode (the same numbers as pandas' pivot, which took 3.1 of the stage's 4 s of per-episode intervals).

    Raises:
        ValueError: a (source, episode) pair has more than one row (as pivot does).
    """
    src_codes, sources = pd.factorize(g["source"], sort=True)
    if (src_codes < 0).any():
        raise ValueError("a row has no source (NaN)")
    ep = g["episode"].to_numpy()
    episodes = np.unique(ep)
    ep_codes = np.searchsorted(episodes, ep)
    cell = src_codes.astype(np.int64) * len(episodes) + ep_codes
    if len(np.unique(cell)) != len(cell):
        raise ValueError("Index contains duplicate entries, cannot reshape: a (source, episode) pair has several rows")
    shape = (len(sources), len(episodes))
    num, den = np.full(shape, np.nan), np.full(shape, np.nan)
    num.flat[cell] = g["value"].to_numpy(dtype=np.float64)
    den.flat[cell] = g["denominator"].to_numpy(dtype=np.float64)
    return list(sources), episodes, num, den


def intervals(df: pd.DataFrame, by: list[str], counts_for, boot, baselines: dict[str, str | None] | None = None,
              keep: dict | None = None) -> pd.DataFrame:
    """Interval rows for every group in ``by`` (which must include world, metric, unit), one per source.

    With a baseline model for the world, each row also carries the paired difference to it
    (``diff_*``: same resampled episodes for both) and ``p_better``, the share of replicates in
    which the model is better than the baseline (by the metric's direction). ``keep`` collects
    the replicates per group key (for derived metrics).
    """
    rows = []
    for key, g in df.groupby(by, observed=True, sort=True):
        key = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        info = REGISTRY[key["metric"]]
        sources, episodes, num, den = _source_by_episode(g)
        present = ~np.isnan(num)
        v = np.where(present, num, 0.0)
        d = np.where(present, den, 0.0)
        c = counts_for(key["world"], key["unit"])[:, episodes]   # (B, n)
        # A replicate can be undefined (a ratio over resampled episodes with zero denominator,
        # e.g. precision when no event is predicted): the interval uses the defined replicates
        # and the share of undefined ones is reported beside it.
        # +inf values (an NLL of zero mass) make every resample that draws them +inf (0 * inf is not 0).
        inf = np.isposinf(v)
        v = np.where(inf, 0.0, v)
        with np.errstate(invalid="ignore", divide="ignore"):
            reps = _finish(ratio_replicates(v, d, c), info.aggregate)             # (B, S)
            point = _finish(v.sum(axis=1) / d.sum(axis=1), info.aggregate)
        if inf.any():
            reps[(c @ inf.T.astype(np.int64)) > 0] = np.inf
            point[inf.any(axis=1)] = np.inf
        # Clusters that carry weight: an episode whose ratio denominator is 0 (e.g. precision with no
        # predicted event) adds nothing to any replicate, so it is not counted.
        n_clusters = (present & (d != 0)).sum(axis=1)
        if keep is not None:
            keep[tuple(key.values())] = (sources, point, reps, n_clusters)
        rows += summarize(key, sources, point, reps, n_clusters, boot, (baselines or {}).get(key["world"]))
    return pd.DataFrame(rows)


def psnr_gap_rows(kept: dict, by: list[str], boot, baselines: dict) -> list[dict]:
    """``psnr - psnr_pooled`` from the same replicates (same resampled episodes)."""
    rows = []
    for k, (sources, point, reps, n) in kept.items():
        key = dict(zip(by, k))
        if key["metric"] != "psnr":
            continue
        other = kept.get(tuple({**key, "metric": "psnr_pooled"}.values()))
        if other is None or other[0] != sources:
            continue
        rows += summarize({**key, "metric": "psnr_gap"}, sources, point - other[1], reps - other[2], n, boot,
                          baselines.get(key["world"]))
    return rows


#: Plug-in metrics whose jackknife bias-corrected form is reported beside them (boundary interval).
BIAS_CORRECTED = {"fd": "fd_bias_corrected", "fd_stratified": "fd_stratified_bias_corrected"}


def _world_sets(params: Params, world: str, wp: dict, rollouts: Path, features: Path) -> dict:
    sc = params.scoring
    fe_dir = features / params.encoder.name / world
    gt = rollouts / world / "ground_truth.parquet"
    truth = read_table(gt, columns=[c for c in pq.read_schema(gt).names if c != "frame"])   # keys and actions
    truth_emb = read_table(fe_dir / "ground_truth.parquet", columns=[*KEYS, "embedding"])
    embs = {m: read_table(fe_dir / f"{m}.parquet", columns=[*KEYS, "embedding"]) for m in wp["models"]}
    clip = read_metadata(fe_dir / "ground_truth.parquet")["clip"] is not None
    linked = {m: read_metadata(rollouts / world / f"{m}.parquet").get("borrowed_episodes") for m in wp["models"]}
    sets, _ = view_sets(truth, truth_emb, embs, sc.views, clip, wp["n_episodes"], wp["horizon"], sc.strata,
                        list(map(float, wp["distributional"].get("action_bins", sc.action_bins))), str(fe_dir),
                        linked)
    return sets


def replicate_rows(world: str, reps: list, wpts: pd.DataFrame, boot, base: str | None, counts: np.ndarray
                   ) -> list[dict]:
    """Interval rows of one world's distributional replicates: each metric, and for the plug-in FDs their
    jackknife bias-corrected form (what the headline and ranks use); ``counts`` ``(B, N)`` are the
    replicates' episode multiplicities."""
    rows, B = [], len(counts)
    for r in reps:
        sel = wpts[(wpts.metric == r.metric) & (wpts.condition == r.condition)].set_index("source")
        point = sel.value.reindex(r.sources).to_numpy(dtype=np.float64)
        key = {"world": world, "metric": r.metric, "regime": "open_loop", "condition": r.condition,
               "unit": "observation"}
        n = r.n_clusters
        # FD-infinity is refitted in each replicate (on effective episode counts, so copies of an episode are
        # not new ones); the basic interval reflects any shift left around the point.
        group = summarize(key, r.sources, point, r.values, n, boot, base, n_resamples=B,
                          interval="basic" if r.metric == "fd_infinity" else "percentile")
        if r.metric == "kid":
            _boundary(group, point, r.values, counts, r.extra["scale"], n, boot.confidence_level,
                      r.extra["se"], r.extra["replicate_se"])
        rows += group
        if r.metric in BIAS_CORRECTED and (r.metric == "fd_stratified" or r.condition.endswith(":pooled")):
            # Jackknife bias correction: FD - bias, the bias from the delete-a-group jackknife over episodes
            # (the bootstrap's own estimate, mean(FD*) - FD, leaves a positive bias at moderate d: at d = 16
            # with independent sides, 0.48 of a plug-in bias of 2.23; the jackknife's leaves 0.15). Its
            # interval is the boundary interval of the plug-in replicates recentred on FD + bias (it covers a
            # true 0), scaled by the corrected estimate in the replicates' linear regime (``corrected``); its
            # paired differences and ranks use the basic reflection of the replicates around the
            # corrected point (summarize(interval="basic") of replicates whose mean is that point).
            bias = r.extra["jackknife_bias"]
            corrected = point - bias
            leftovers = r.extra.get("leftover_bias", np.full((0, len(r.sources)), np.nan))
            failed = np.atleast_1d(bias_check_failed(leftovers, r.values)).astype(bool)
            # A source whose correction fails its check neither gets nor lends a comparison: the paired
            # differences, P(better) and ranks are taken among the others (none at all when it is the baseline).
            group = summarize({**key, "metric": BIAS_CORRECTED[r.metric]}, r.sources, corrected,
                              jackknife_centred(r.values, corrected, 0.0), n, boot, base, interval="basic",
                              n_resamples=B)
            keep = [j for j in range(len(r.sources)) if not failed[j]]
            if len(keep) < len(r.sources):
                kept = summarize({**key, "metric": BIAS_CORRECTED[r.metric]}, [r.sources[j] for j in keep],
                                 corrected[keep], jackknife_centred(r.values[:, keep], corrected[keep], 0.0),
                                 n[keep], boot, base, interval="basic", n_resamples=B)
                by_source = {row["source"]: row for row in kept}
                group = [by_source.get(row["source"], row) for row in group]
            _boundary(group, point, jackknife_centred(r.values, point, bias), counts, point, n,
                      boot.confidence_level, corrected=corrected)
            _zero_test(group, r.extra.get("p_value", np.full(len(r.sources), np.nan)), boot.confidence_level)
            _bias_check(group, leftovers, failed)
            rows += group
    return rows


#: What a row whose bias correction fails its two-scale check no longer carries.
WITHHELD = ("low", "high", "rank", "diff_point", "diff_low", "diff_high", "p_better", "p_tie", "rank_low", "rank_high")


def _bias_check(group: list[dict], leftovers: np.ndarray, failed: np.ndarray) -> None:
    """Give each bias-corrected row its two-scale check (:class:`~wmeval.estimators.resample.JackknifePlan`;
    ``leftovers`` ``(H, S)``, one estimate per half of the episodes; ``failed`` ``(S,)`` from
    :func:`~wmeval.estimators.resample.bias_check_failed`): ``leftover_bias``, what the jackknife's correction is
    estimated to leave, with its standard error ``leftover_bias_se``, and ``bias_check`` (passed, failed, or
    unchecked without 2 usable halves). A failed row keeps its point but no interval, paired difference,
    P(better), rank or rank interval (the others are ranked among themselves): its bias is not of the form the
    correction removes, and nothing in its replicates shows it."""
    mean, se = (np.atleast_1d(v) for v in leftover_bias(leftovers))
    for j, row in enumerate(group):
        row["leftover_bias"], row["leftover_bias_se"] = float(mean[j]), float(se[j])
        row["bias_check"] = "unchecked" if not np.isfinite(se[j]) else "failed" if failed[j] else "passed"
        if failed[j]:
            row.update({k: float("nan") for k in WITHHELD})


def _zero_test(group: list[dict], p_value: np.ndarray, level: float) -> None:
    """Give each bias-corrected row its permutation test of FD = 0 (``p_value``; NaN: none ran, a control built
    from another episode's state) and put 0 in its interval or take it out as the test decides
    (:func:`~wmeval.estimators.resample.with_zero_test`): whether a model is told from the reference is the test's."""
    for j, row in enumerate(group):
        row["p_value"] = float(p_value[j])
        row["low"], row["high"] = with_zero_test(row["low"], row["high"], float(p_value[j]), level)


def _boundary(group: list[dict], center: np.ndarray, reps: np.ndarray, counts: np.ndarray, scale: np.ndarray,
              n_clusters: np.ndarray, level: float, se: np.ndarray | None = None,
              replicate_se: np.ndarray | None = None, corrected: np.ndarray | None = None) -> None:
    """Give each row of ``group`` (one per source) the boundary interval of its distance
    (:func:`~wmeval.estimators.resample.boundary_interval` of ``center`` and ``reps``: it covers a true 0, where
    the percentile and basic intervals of a degenerate statistic cover it 99-100% of the time); with standard
    errors ``se`` ``(S,)`` and ``replicate_se`` ``(B, S)`` (KID's), the bootstrap-t instead where the replicates
    are in their linear regime (:func:`~wmeval.estimators.resample.distance_interval`; ``method`` says which); with
    ``corrected`` ``(S,)`` (the bias-corrected FDs' corrected estimates), the boundary interval's ``corrected``.
    Sources with fewer than 2 clusters keep no interval."""
    for j, row in enumerate(group):
        row["method"] = "boundary"
        if not (n_clusters[j] >= 2 and np.isfinite(row["point"])):
            continue
        if se is None:
            row["low"], row["high"] = boundary_interval(float(center[j]), reps[:, j], counts, float(scale[j]),
                                                        level, corrected=None if corrected is None
                                                        else float(corrected[j]))
        else:
            row["low"], row["high"], row["method"] = distance_interval(
                float(center[j]), reps[:, j], counts, float(scale[j]), level, float(se[j]), replicate_se[:, j])



def _permutation_rng(seed: int, world: str, view: str, source: str) -> np.random.Generator:
    """The generator of one (world, view, model)'s permutation test: its own stream, so a model's p-value does not
    depend on which others are evaluated beside it."""
    return make_rng(seed, "fd_permutation", world, view, source)


def distributional_rows(params: Params, stats: Path, rollouts: Path, features: Path, protocol: dict, counts_for,
                        baselines: dict) -> pd.DataFrame:
    """FD (pooled, strata, stratified) and their bias-corrected forms, KID and FD-infinity intervals per world."""
    boot = params.bootstrap
    pts = pd.read_parquet(stats / "distributional.parquet")
    if pts.empty:
        return pd.DataFrame()
    settings = Settings.from_scoring(params.scoring)
    executor = executor_for(params.execution)     # None: threads here; Ray: tasks on the cluster, same bits
    B = boot.n_resamples_distributional
    B_inf = min(boot.n_resamples_fd_infinity, B)      # the first B_inf of the same resamplings
    # KID's block sums as the statistics stage built them (each checked against the rows read here).
    if not (stats / KID_BLOCKS_FILE).exists():
        raise WmevalError(f"{stats / KID_BLOCKS_FILE}: missing (statistics made by an older wmeval, which did not store "
                          "KID's block sums); run `dvc repro` to rebuild the statistics")
    kid_table = pq.read_table(stats / KID_BLOCKS_FILE)
    rows = []
    for world, wp in protocol["worlds"].items():
        wpts = pts[pts.world == world]
        if wpts.empty:
            continue
        sets = _world_sets(params, world, wp, rollouts, features)
        counts = counts_for(world, "observation", B)
        plan = JackknifePlan.of(np.zeros(counts.shape[1], dtype=np.int64))
        n_jack = len(plan.counts) if len(plan.counts) > 1 else 0   # the jackknife's and its check's rows
        kid = stored_kid_blocks(kid_table, world, sets, counts.shape[1], str(stats / KID_BLOCKS_FILE))
        n_tests = sum(vs.reference.trajectory is not None and s.trajectory is not None
                      for vs in sets.values() for s in vs.sources.values())
        with tqdm(total=(B + B_inf + n_jack) * len(sets) + B * n_tests, desc=f"FD replicates {world}", unit="rep",
                  leave=False, mininterval=5) as bar:
            reps = replicates(sets, counts, settings, n_jobs=boot.n_jobs or None, progress=bar, executor=executor,
                              kid_blocks=kid, n_permutations=B,
                              permutation_rng=partial(_permutation_rng, boot.seed, world))
            inf_reps = (fd_infinity_replicates(sets, counts[:B_inf], settings, n_jobs=boot.n_jobs or None,
                                               progress=bar, executor=executor)
                        if (wpts.metric == "fd_infinity").any() else [])
        rows += replicate_rows(world, reps, wpts, boot, baselines.get(world), counts)
        rows += replicate_rows(world, inf_reps, wpts, boot, baselines.get(world), counts[:B_inf])
    return pd.DataFrame(rows)


def bootstrap_stage(params: Params, stats: Path, rollouts: Path, features: Path, out: Path, metrics_file: Path) -> None:
    """Intervals from ``stats`` (and, for the distributional metrics, the ``rollouts`` and ``features``
    tables) to ``out`` and ``metrics_file``."""
    boot = params.bootstrap
    episodes = pd.read_parquet(stats / "episodes.parquet")
    curves = pd.read_parquet(stats / "curves.parquet")
    kcurves = pd.read_parquet(stats / "kcurves.parquet")
    if episodes.empty:
        raise WmevalError(f"{stats / 'episodes.parquet'}: no rows")
    protocol = json.loads((stats / "protocol.json").read_text())
    check_made_with(stats / "protocol.json", protocol.get("scoring"), dataclasses.asdict(params.scoring), "scoring",
                    subset=True)
    for world in protocol["worlds"]:
        fe = features / params.encoder.name / world / "ground_truth.parquet"
        check_made_with(fe, read_metadata(fe).get("encoder_config"),
                        encoder_config(params.encoder.name, params.encoder.kind, params.encoder.params,
                                       params.encoder.precision), "encoder")
    cache: dict[tuple[str, str], np.ndarray] = {}

    def counts_for(world: str, unit: str, n_resamples: int | None = None) -> np.ndarray:
        # One resampling per (world, unit), shared by every model and metric: paired intervals.
        # The distributional replicates use the first B' rows of the same draw.
        if (world, unit) not in cache:
            n = protocol["worlds"][world]["units"][unit]
            b = max(boot.n_resamples, boot.n_resamples_distributional)
            cache[world, unit] = resample_counts(n, b, make_rng(boot.seed, "bootstrap", world, unit))
        return cache[world, unit][: n_resamples or boot.n_resamples]

    group = ["world", "metric", "regime", "condition", "unit"]
    baselines = {w: wp.get("baseline") for w, wp in protocol["worlds"].items()}
    kept: dict = {}
    iv = intervals(episodes, group, counts_for, boot, baselines, keep=kept)
    iv = pd.concat([iv, pd.DataFrame(psnr_gap_rows(kept, group, boot, baselines)),
                    distributional_rows(params, stats, rollouts, features, protocol, counts_for, baselines)],
                   ignore_index=True)
    cv = intervals(curves, [*group, "t"], counts_for, boot)
    kv = intervals(kcurves, [*group, "t"], counts_for, boot).rename(columns={"t": "k"}) if len(kcurves) else None
    metrics: dict = {}
    for r in iv.itertuples():
        d = metrics.setdefault(r.world, {}).setdefault(r.source, {}).setdefault(r.metric, {})
        d[f"{r.regime}/{r.condition}"] = {"point": r.point, "low": r.low, "high": r.high}
        if r.baseline is not None and r.source != r.baseline and np.isfinite(r.diff_point):
            d[f"{r.regime}/{r.condition}"].update(diff_to_baseline=r.diff_point, diff_low=r.diff_low,
                                                  diff_high=r.diff_high, p_better=r.p_better, p_tie=r.p_tie)
    protocol["bootstrap"] = {"n_resamples": boot.n_resamples, "confidence_level": boot.confidence_level,
                             "method": boot.method, "seed": boot.seed, "resampling_unit": "episode",
                             "paired": True, "n_resamples_distributional": boot.n_resamples_distributional,
                             "n_resamples_fd_infinity": min(boot.n_resamples_fd_infinity,
                                                            boot.n_resamples_distributional),
                             "distributional": "FD replicates recompute moments from the resampled episodes' rows "
                                               "weighted by multiplicity; the plug-in FD interval is for a biased "
                                               "estimator (it falls with N); fd_bias_corrected and "
                                               "fd_stratified_bias_corrected (FD minus the delete-one-episode "
                                               "jackknife's bias estimate; over 32 episodes, 32 groups of "
                                               "episodes) are what headlines and ranks use; KID is the "
                                               "U-statistic over row pairs from distinct episodes, its replicates "
                                               "never pair an episode with itself or its copies. KID far from "
                                               "0 (its replicates' linear part carrying over "
                                               f"{STUDENTIZE_LINEAR_SHARE:.0%} of their variance) carries the "
                                               "bootstrap-t, each replicate studentized by its own "
                                               "infinitesimal-jackknife standard error; otherwise both carry "
                                               "the boundary interval: a test inverted for "
                                               "each candidate value, each replicate split into its linear part "
                                               "(the least-squares fit on the episode multiplicities, shrunk to "
                                               "its size at the candidate, percentile orientation) and the "
                                               "degenerate rest (basic orientation; the FD's replicates "
                                               "recentred on FD + the jackknife's bias, their linear part at full "
                                               "size at the plug-in near 0 and at the corrected estimate in their "
                                               "linear regime), so that it covers a true "
                                               "0 (paired differences and ranks: KID's replicates themselves, the "
                                               "bias-corrected FDs' reflected around the corrected point); "
                                               "the bias-corrected FDs' intervals then hold 0 or exclude it as a "
                                               "permutation test of FD = 0 on the plug-in decides (p_value; "
                                               "rejected at p <= 1 - confidence_level; n_resamples_distributional "
                                               "permuted data sets, the data counted as one): a sign-flip test in "
                                               "which each (plan, episode) trades its realized futures and the "
                                               "model's samples between the sides or not at random, each reweighted "
                                               "so that a side keeps the group's weight; realized rows at a step "
                                               "where the model's row is invalid take no part; a rejected 0 raises "
                                               "a lower end at or below 0 to the smallest positive double, (0, "
                                               "high], and leaves an interval at or below 0 as it is; "
                                               "no test for a control built from another episode's state, which "
                                               "keeps the boundary interval); "
                                               "the bias-corrected FDs' correction is checked on halves of the "
                                               "episodes (JackknifePlan), and a row whose estimated leftover "
                                               f"bias is above {BIAS_CHECK_LIMIT} replicate standard deviations "
                                               "and twice its own standard error has no interval, paired "
                                               "difference, P(better), rank or rank interval, and takes no part "
                                               "in the others'; "
                                               "fd_infinity is refitted in each of its own replicates (basic "
                                               "interval)",
                             "strata": "strata are crossed with episodes (every episode runs every plan), so "
                                       "resampling episodes resamples within every stratum at once",
                             "rank": "rank among models in each replicate (1 = best, ties share the minimum "
                                     "rank), percentile interval over replicates; P(tie) is reported beside "
                                     "P(better)"}
    with atomic_dir(out) as tmp:
        write_table(pa.Table.from_pandas(iv, preserve_index=False), tmp / "intervals.parquet")
        write_table(pa.Table.from_pandas(cv, preserve_index=False), tmp / "curves.parquet")
        if kv is not None:
            write_table(pa.Table.from_pandas(kv, preserve_index=False), tmp / "kcurves.parquet")
        (tmp / "protocol.json").write_text(json.dumps(protocol, indent=2, sort_keys=True))
    # NaN (an undefined ratio, e.g. precision without predicted events) is written as null.
    text = json.dumps(_nan_to_none(metrics), indent=2, sort_keys=True)
    atomic_write_text(metrics_file, text + "\n")


def _nan_to_none(x):
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x
