"""Distributional metrics on the features stage's embeddings: FD (pooled and stratified), KID, FD-infinity, PRDC.

Two declared *views* of the embeddings:

* ``frame``: each open-loop predicted frame's embedding (a clip's, for video encoders)
  against the realized futures' frames at steps 1..H. This is the published FID/FVD
  construction: a marginal over frames, blind to which history produced which frame.
* ``transition``: the frame embedding joined with the previous frame's of the same sequence
  (the context frame o_0 before step 1): the joint distribution of consecutive frames, which
  carries the motion an action caused. Not for video encoders (a clip already spans frames).

Strata are declared: ``action`` (bins of the action a_{t-1} that led to the frame, edges in
``scoring.action_bins``) or ``plan`` (the plan's condition label). Every episode runs under
every plan, so strata are crossed with episodes and the episode-clustered bootstrap
resamples all strata at once. The stratified FD is
``sum_s w_s FD_s`` with declared weights (``uniform`` or ``empirical``: the share of the
reference rows); strata below ``min_stratum_count`` rows on either side, or with a
rank-deficient covariance (n <= d), are flagged, never dropped.

Bootstrap replicates recompute the moments of the resampled episodes with each episode's
multiplicity as its rows' weight (no copies of resampled rows, no re-reading), then the
distance. With at most 2 d rows a side (Inception's d = 2048 against a few thousand rows), the
row Grams are built once and every replicate is computed in the sample space
(``metrics.RowGrams``); otherwise from per-episode sums and cross-products
(``metrics.frechet_distance_factored``), with the reference's factorisation shared by every
model of a replicate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from threadpoolctl import threadpool_limits

from wmeval.core.config import ScoringConfig
from wmeval.core.errors import WmevalError
from wmeval.core.parallel import can_fork, fork_map, usable_cores
from wmeval.core.rng import make_rng
from wmeval.estimators.resample import (
    BIAS_CHECK_LIMIT,
    BootstrapResult,
    JackknifePlan,
    bias_check_failed,
    boundary_interval,
    cluster_counts,
    distance_interval,
    jackknife_centred,
    leftover_bias,
    permutation_p_value,
    percentile_interval,
    with_zero_test,
)
from wmeval.metrics import (
    SAMPLE_SPACE_MAX,
    CovarianceFactor,
    FrechetReference,
    RowGrams,
    frechet_distance_factored,
    gaussian_stats,
    kid,
    prdc_rows,
    real_radii,
)
from wmeval.tables import LONG_COLUMNS as COLUMNS
from wmeval.tables import blocks, dense, select

VIEWS = ("frame", "transition")
GRAM_BUDGET_BYTES = 2 << 30
# Replicates work on row Grams when a side has at most this many rows per dimension: a replicate
# keeps about 63% of them, which stays inside the sample space's cheaper range (metrics.SAMPLE_SPACE_MAX).
GRAM_ROWS_PER_DIM = 2.0


@dataclass
class Side:
    """One source's rows in one view: embeddings ``x`` ``(n, d)`` float64, their episode and stratum."""

    x: np.ndarray
    episode: np.ndarray
    stratum: np.ndarray
    #: ``(n, 3)`` each row's trajectory: its exchange group (one (plan, episode): the trajectories that share a
    #: history and an action sequence), its sample within the group (realized futures ``-1, -2, ...``, a model's
    #: ``0, 1, ...``) and its step; ``None`` where no such unit holds (a control built from another episode's
    #: state), which then gets no permutation test (:class:`Exchange`)
    trajectory: np.ndarray | None = None

    def subset(self, stratum: str | None) -> "Side":
        if stratum is None:
            return self
        m = self.stratum == stratum
        return Side(self.x[m], self.episode[m], self.stratum[m],
                    None if self.trajectory is None else self.trajectory[m])


@dataclass
class ViewSets:
    """Every source of one world in one view; ``reference`` is the realized futures."""

    view: str
    reference: Side
    sources: dict[str, Side]
    strata: list[str]
    #: source -> ``(N,)``: for each of its clusters, the other reference cluster its rows depend on (a control
    #: built from another episode's state shares the actions of its own episode), which KID's cross term leaves out
    linked: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return self.reference.x.shape[1]


def _bin_labels(edges: list[float]) -> list[str]:
    return [f"a in [{lo:g}, {hi:g}{']' if i == len(edges) - 2 else ')'}" for i, (lo, hi) in
            enumerate(zip(edges[:-1], edges[1:]))]


def action_strata(actions: np.ndarray, edges: list[float], where: str) -> np.ndarray:
    """Label each action (first component) with its declared bin; out-of-range actions are an error."""
    a = np.asarray(actions, dtype=np.float64)
    idx = np.searchsorted(edges, a, side="right") - 1
    idx = np.where(a == edges[-1], len(edges) - 2, idx)
    bad = (idx < 0) | (idx > len(edges) - 2)
    if bad.any():
        raise WmevalError(f"{where}: action {a[bad][0]!r} outside the declared bins "
                          f"scoring.action_bins = {edges}; widen the outer edges")
    return np.asarray(_bin_labels(edges), dtype=object)[idx]


@dataclass
class _Embeddings:
    """Rows of one world's embeddings for a view: what :func:`view_sets` reads, with its protocol."""

    truth: pa.Table           # the ground truth's rollout table (actions, plan conditions)
    truth_emb: pa.Table       # the ground truth's feature table
    clip: bool
    n_episodes: int
    horizon: int
    strata: str
    action_bins: list[float]
    where: str

    def __post_init__(self) -> None:
        self.t_model, self.t_truth = np.arange(1, self.horizon + 1), np.arange(0, self.horizon + 1)
        self.steps = np.array([1]) if self.clip else self.t_model
        self.gt_blocks = {b.plan: b for b in blocks(self.truth)}
        self.plan_index = {plan: i for i, plan in enumerate(sorted(self.gt_blocks))}

    def labels(self, plan: str, shape: tuple[int, int]) -> np.ndarray:
        """The stratum of each (episode, step) of a plan: its condition, or the bin of the action behind it."""
        if self.strata == "plan":
            return np.full(shape, self.gt_blocks[plan].condition, dtype=object)
        acts = dense(select(self.truth, "realized", plan), "action", self.n_episodes, self.t_truth,
                     self.where)[:, 0, 1:, 0]
        if self.clip:
            acts = acts[:, :1]   # a clip is stratified by its first action
        return action_strata(acts, self.action_bins, f"{self.where} (plan {plan!r})")

    def _block(self, table: pa.Table, regime: str, view: str, plan: str) -> tuple[np.ndarray, np.ndarray]:
        """One plan's rows of a view ``(N, S, T, d or 2d)`` and their validity ``(N, T)``."""
        blk, n = select(table, regime, plan), self.n_episodes
        if regime == "realized":
            emb = dense(blk, "embedding", n, self.steps if self.clip else self.t_truth, self.where)
            cur = emb if self.clip else emb[:, :, 1:]
            prev = None if self.clip else emb[:, :, :-1]
            valid = np.ones((n, len(self.steps)), bool)
        else:
            cur = dense(blk, "embedding", n, self.steps, self.where)                          # (N, S, T, d)
            valid = dense(blk, "valid", n, self.steps, self.where)[:, 0]
            prev = None
            if view == "transition":
                ctx = dense(select(self.truth_emb, "realized", plan), "embedding", n, self.t_truth,
                            self.where)[:, :1, :1]                                            # o_0: (N, 1, 1, d)
                prev = np.concatenate([np.broadcast_to(ctx, (*cur.shape[:2], 1, cur.shape[-1])),
                                       cur[:, :, :-1]], axis=2)
        return (cur if view == "frame" else np.concatenate([prev, cur], axis=-1)), valid

    def side(self, table: pa.Table, regime: str, view: str, label: str) -> Side:
        """Every valid row of ``regime`` in ``table`` for the view, with its episode and stratum."""
        xs, eps, sts, trs = [], [], [], []
        for b in blocks(table):
            if b.regime != regime:
                continue
            x, valid = self._block(table, regime, view, b.plan)
            n, s, T, d = x.shape
            lab = self.labels(b.plan, (n, T))
            mask = np.broadcast_to(valid[:, None], (n, s, T))
            xs.append(x[mask].astype(np.float64))
            eps.append(np.broadcast_to(np.arange(n)[:, None, None], (n, s, T))[mask])
            sts.append(np.broadcast_to(lab[:, None], (n, s, T))[mask])
            group = self.plan_index[b.plan] * n + np.arange(n)
            sample = -1 - np.arange(s) if regime == "realized" else np.arange(s)
            trs.append(np.stack([np.broadcast_to(group[:, None, None], (n, s, T))[mask],
                                 np.broadcast_to(sample[None, :, None], (n, s, T))[mask],
                                 np.broadcast_to(np.arange(T)[None, None, :], (n, s, T))[mask]], axis=1))
        if not xs:
            raise WmevalError(f"{self.where}: {label} has no {regime} rows")
        return Side(np.concatenate(xs), np.concatenate(eps).astype(np.int64), np.concatenate(sts).astype(str),
                    np.concatenate(trs).astype(np.int64))


def borrowed_clusters(side: Side, borrowed: np.ndarray) -> tuple[Side, np.ndarray]:
    """A source whose episode e is built from episode ``borrowed[e]``'s state (a permutation): its rows of
    episode e take cluster id ``borrowed[e]``, so that the bootstrap resamples them with the episode they
    depend on most, and the returned link, for each cluster c, names the source's own episode e with
    ``borrowed[e] = c`` (whose actions it shares), the reference cluster KID's cross term leaves out too."""
    b = np.asarray(borrowed, dtype=np.int64)
    return Side(side.x, b[side.episode], side.stratum), np.argsort(b)


def view_sets(truth: pa.Table, truth_emb: pa.Table, model_embs: dict[str, pa.Table], views: Iterable[str],
              clip: bool, n_episodes: int, horizon: int, strata: str, action_bins: list[float],
              where: str, linked: dict[str, list[int] | None] | None = None
              ) -> tuple[dict[str, ViewSets], dict[str, str]]:
    """Build each requested view; returns the views and, for views not built, the reason.

    ``frame`` rows: every open-loop predicted frame (clip) at steps 1..H against every realized
    one. ``transition`` rows: a frame's embedding joined with the previous frame's of the same
    sequence (the context frame o_0 before step 1). Strata: ``plan`` (the plan's condition
    label) or ``action`` (the declared bin of the action a_{t-1} that led to the frame).
    ``linked``: per source, the episode each of its episodes borrows its state from (the rollouts
    table's ``borrowed_episodes`` metadata, a permutation), or ``None``: that source's rows of
    episode e take the cluster id of the episode they borrow, so that the bootstrap resamples them
    with it, and ``ViewSets.linked`` names episode e itself for KID's cross term to leave out.
    """
    borrowed = {s: np.asarray(v, dtype=np.int64) for s, v in (linked or {}).items() if v is not None}
    for s, b in borrowed.items():
        if sorted(b.tolist()) != list(range(n_episodes)):
            raise WmevalError(f"{where}: model {s!r} declares borrowed_episodes {b.tolist()[:8]}...; expected a "
                              f"permutation of the {n_episodes} episodes")
    links = {s: np.argsort(b) for s, b in borrowed.items()}
    rows = _Embeddings(truth, truth_emb, clip, n_episodes, horizon, strata, action_bins, where)
    out, skipped = {}, {}
    for view in views:
        if view not in VIEWS:
            raise WmevalError(f"scoring.views: unknown view {view!r}; expected one of {list(VIEWS)}")
        if view == "transition" and clip:
            skipped[view] = "a video encoder's clip already spans consecutive frames"
            continue
        ref = rows.side(truth_emb, "realized", view, "ground_truth")
        strata_names = sorted(set(ref.stratum.tolist()))
        sides = {s: rows.side(t, "open_loop", view, s) for s, t in model_embs.items()}
        for s, b in borrowed.items():
            sides[s], links[s] = borrowed_clusters(sides[s], b)
        out[view] = ViewSets(view, ref, sides, strata_names, links)
    return out, skipped


# ----------------------------------------------------------------------------- point estimates

@dataclass(frozen=True)
class Settings:
    """The distributional estimators' choices: the ``scoring`` section's fields of the same names
    (:class:`~wmeval.core.config.ScoringConfig` documents them and holds the defaults)."""

    strata_weights: str
    min_stratum_count: int
    kid_subsets: int
    kid_subset_size: int
    fd_inf_points: int
    fd_inf_min_fraction: float
    fd_inf_draws: int
    prdc_k: int
    seed: int

    @classmethod
    def from_scoring(cls, sc: ScoringConfig) -> Settings:
        """The distributional settings of a validated ``scoring`` section."""
        return cls(**{f.name: getattr(sc, f.name) for f in dataclasses.fields(cls)})

    @classmethod
    def defaults(cls, **overrides) -> Settings:
        """The default ``scoring`` section's settings, with ``overrides``."""
        return dataclasses.replace(cls.from_scoring(ScoringConfig(name="default")), **overrides)


def stratum_weights(vs: ViewSets, how: str) -> dict[str, float]:
    if how == "uniform":
        return {s: 1.0 / len(vs.strata) for s in vs.strata}
    if how == "empirical":
        n = len(vs.reference.stratum)
        return {s: float(np.sum(vs.reference.stratum == s)) / n for s in vs.strata}
    raise WmevalError(f"scoring.strata_weights = {how!r}; expected 'uniform' or 'empirical'")


def _fd(ref: FrechetReference, side: Side) -> float:
    s = gaussian_stats(side.x)
    return ref.distance(s.mu, s.sigma)


def _reference(side: Side) -> FrechetReference | None:
    """The Frechet reference of ``side``'s rows; ``None`` with fewer than 2 (no covariance: a stratum that the
    realized futures barely visit, whose FD is then undefined, NaN, and flagged, never a crash)."""
    if len(side.x) < 2:
        return None
    s = gaussian_stats(side.x)
    return FrechetReference(s.mu, s.sigma, rank_deficient=s.rank_deficient)


def _fd_points(base: dict, view: str, vs: ViewSets, side: Side, refs: dict, weights: dict[str, float],
               cfg: Settings) -> list[dict]:
    """FD pooled and per stratum (flagged, never dropped), then the stratified FD."""
    d, out, strat_val, flagged = vs.dim, [], 0.0, []
    factor = {s: ref.factor if ref is not None else "none" for s, ref in refs.items()}
    for s in [None, *vs.strata]:
        r, f = vs.reference.subset(s), side.subset(s)
        n_r, n_f = len(r.x), len(f.x)
        low = min(n_r, n_f) < cfg.min_stratum_count
        rank_def = min(n_r, n_f) <= d
        val = _fd(refs[s], f) if n_f >= 2 and refs[s] is not None else float("nan")
        if s is not None:
            strat_val += weights[s] * val
            if low or rank_def:
                flagged.append(s)
        out.append({**base, "metric": "fd", "condition": f"{view}:{'pooled' if s is None else s}",
                    "stratum": "pooled" if s is None else s, "value": val, "n_real": n_r, "n_fake": n_f,
                    "weight": 1.0 if s is None else weights[s], "below_min_count": low,
                    "rank_deficient": rank_def, "factor": factor[s]})
    out.append({**base, "metric": "fd_stratified", "condition": f"{view}:{cfg.strata_weights}",
                "stratum": ",".join(vs.strata), "value": strat_val, "n_real": len(vs.reference.x),
                "n_fake": len(side.x), "weight": 1.0, "below_min_count": bool(flagged),
                "rank_deficient": False, "factor": factor[None], "flagged_strata": ",".join(flagged)})
    return out


def n_clusters_of(*sides: Side) -> int:
    """The size of the cluster index space the sides' episode ids live in (ids are ``0..n-1``)."""
    return int(max(int(s.episode.max()) for s in sides if len(s.episode))) + 1


def _kid_point(base: dict, view: str, ref: Side, side: Side, cfg: Settings, xx: np.ndarray | None = None,
               link: np.ndarray | None = None) -> tuple[dict, KernelBlocks]:
    """KID: the episode-clustered U-statistic (pairs of rows from distinct episodes, :class:`KernelBlocks`),
    the estimate the bootstrap resamples; beside it the published subset convention (torch-fidelity),
    which also pairs rows of one episode, for comparison with published numbers only."""
    real, fake = ref.x, side.x
    n_r, n_f = len(real), len(fake)
    n = xx.shape[0] if xx is not None else n_clusters_of(ref, side)
    kb = KernelBlocks.of(ref, side, n, xx, link)
    value = kb.at(np.ones(n))
    if cfg.kid_subset_size >= max(n_r, n_f):
        k_pub, k_std, m, n_sub = kb.published(), 0.0, max(n_r, n_f), 1
    else:
        m, n_sub = min(cfg.kid_subset_size, n_r, n_f), cfg.kid_subsets
        k_pub, k_std = kid(real, fake, num_subsets=n_sub, subset_size=m, seed=cfg.seed)
    return {**base, "metric": "kid", "condition": f"{view}:pooled", "stratum": "pooled", "value": value,
            "kid_published": k_pub, "kid_subset_std": k_std, "kid_subset_size": m, "kid_subsets": n_sub,
            "n_real": n_r, "n_fake": n_f, "weight": 1.0, "below_min_count": False, "rank_deficient": False}, kb


def _fd_infinity_points(base: dict, view: str, vs: ViewSets, n_eps: int, cfg: Settings) -> list[dict]:
    """FD-infinity of every source (:class:`FDInfinity`, both sides extrapolated over episode subsets);
    none when the grid of episode counts has one size."""
    fi = FDInfinity.of(vs, n_eps, cfg)
    values, slope, grid, fds = fi(np.ones(n_eps))
    if len(grid) < 2:
        return []
    return [{**base, "source": src, "metric": "fd_infinity", "condition": f"{view}:pooled", "stratum": "pooled",
             "value": float(values[j]), "fd_inf_slope": float(slope[j]), "fd_inf_grid": list(grid),
             "fd_inf_fd": fds[:, j].tolist(), "n_real": len(vs.reference.x), "n_fake": len(vs.sources[src].x),
             "weight": 1.0, "below_min_count": False, "rank_deficient": False}
            for j, src in enumerate(fi.sources)]


def _prdc_episode_rows(world: str, src: str, view: str, ref: Side, side: Side, k: int,
                       radii: np.ndarray | None = None) -> list[pd.DataFrame]:
    """Precision and density per predicted episode, recall and coverage per real episode (ratios of sums)."""
    rows = prdc_rows(ref.x, side.x, k=k, radii=radii)
    out = []
    for metric, ids in (("precision", side.episode), ("density", side.episode),
                        ("recall", ref.episode), ("coverage", ref.episode)):
        num = np.bincount(ids, weights=rows[metric])
        den = np.bincount(ids).astype(np.float64)
        e = np.flatnonzero(den > 0)
        out.append(pd.DataFrame({"world": world, "source": src, "metric": metric, "regime": "open_loop",
                                 "condition": f"{view}:pooled", "unit": "observation", "episode": e, "t": 0,
                                 "value": num[e], "denominator": den[e]}))
    return out


#: KID's per-cluster-pair kernel sums, which the statistics stage writes beside its points so that the bootstrap
#: resamples them instead of building them again (about 3.5 s of its wall time on the default config).
KID_BLOCKS_FILE = "kid_blocks.parquet"


def rows_digest(side: Side) -> str:
    """A digest of a side's rows and their episodes (what KID's block sums were built from)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr(np.shape(side.x)).encode())
    h.update(np.ascontiguousarray(side.x, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(side.episode, dtype=np.int64).tobytes())
    return h.hexdigest()


def kid_block_rows(world: str, view: str, src: str, ref: Side, side: Side, kb: KernelBlocks) -> list[dict]:
    """One source's KID block sums as rows of :data:`KID_BLOCKS_FILE`: ``yy`` (the source with itself) and
    ``xy`` (the reference with the source), each ``n x n`` row-major with the digest of the rows it sums, and
    the reference's own ``xx`` (the same for every source of a view: 8 KB at 32 episodes, kept per source so
    that each source's three blocks are read together)."""
    n, dr, ds = kb.xx.shape[0], rows_digest(ref), rows_digest(side)
    row = lambda block, a, digest: {"world": world, "view": view, "source": src, "block": block, "n": n,
                                    "rows_digest": digest, "sums": a.ravel().tolist()}
    return [row("xx", kb.xx, dr), row("yy", kb.yy, ds), row("xy", kb.xy, dr + ds)]


def kid_blocks_table(rows: list[dict]) -> pa.Table:
    schema = pa.schema([("world", pa.string()), ("view", pa.string()), ("source", pa.string()),
                        ("block", pa.string()), ("n", pa.int64()), ("rows_digest", pa.string()),
                        ("sums", pa.list_(pa.float64()))])
    return pa.Table.from_pylist(rows, schema=schema)


def stored_kid_blocks(table: pa.Table, world: str, sets: dict[str, ViewSets], n: int, where: str
                      ) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``{(view, source): (xx, yy, xy)}`` for ``world`` from a :data:`KID_BLOCKS_FILE` table, each padded to
    ``n`` clusters (episodes with no rows add zero blocks). Every block's digest must be that of the rows in
    ``sets``: blocks summed over other rows would give stale KID replicates.

    Raises:
        WmevalError: a block's rows differ from ``sets``' (naming ``where``, the view, source and block), or a
        block has more clusters than ``n``.
    """
    out = {}
    rows = table.filter(pc.equal(table.column("world"), world)).to_pylist()
    by_key = {(r["view"], r["source"], r["block"]): r for r in rows}
    for view, vs in sets.items():
        dr = rows_digest(vs.reference)
        for src, side in vs.sources.items():
            want = {"xx": dr, "yy": rows_digest(side)}
            want["xy"] = want["xx"] + want["yy"]
            mats = []
            for block in ("xx", "yy", "xy"):
                r = by_key.get((view, src, block))
                if r is None:
                    break
                if r["rows_digest"] != want[block] or r["n"] > n:
                    raise WmevalError(
                        f"{where}: KID block {block!r} of {world}/{view}/{src} was summed over other rows than the "
                        f"features now hold (digest {r['rows_digest']} != {want[block]}, clusters {r['n']} vs {n}); "
                        "run `dvc repro` to rebuild the statistics")
                m = np.zeros((n, n))
                m[:r["n"], :r["n"]] = np.asarray(r["sums"], dtype=np.float64).reshape(r["n"], r["n"])
                mats.append(m)
            if len(mats) == 3:
                out[view, src] = tuple(mats)
    return out


class _ViewShared:
    """What every source of one view is compared with: the reference's Frechet factors (pooled and per
    stratum), KID's reference block sums and PRDC's real radii. Built once per process, by the first task
    that asks (the statistics stage runs the tasks in forked processes)."""

    def __init__(self, vs: ViewSets, cfg: Settings) -> None:
        self.vs, self.cfg, self._value = vs, cfg, None

    def get(self) -> tuple:
        if self._value is None:
            vs, cfg = self.vs, self.cfg
            refs = {None: _reference(vs.reference), **{s: _reference(vs.reference.subset(s)) for s in vs.strata}}
            n_cl = n_clusters_of(vs.reference, *vs.sources.values())
            xx = KernelBlocks.self_blocks(vs.reference, n_cl)
            radii = real_radii(vs.reference.x, k=cfg.prdc_k) if len(vs.reference.x) > cfg.prdc_k else None
            self._value = (stratum_weights(vs, cfg.strata_weights), refs, n_cl, xx, radii)
        return self._value


def _source_points(world: str, view: str, vs: ViewSets, src: str, shared: _ViewShared,
                   cfg: Settings) -> tuple[list[dict], list[pd.DataFrame]]:
    side = vs.sources[src]
    if len(side.x) < 2:
        raise WmevalError(f"{world}/{src}: fewer than 2 open-loop embeddings in view {view!r}")
    weights, refs, _, xx, radii = shared.get()
    base = {"world": world, "source": src, "regime": "open_loop", "view": view, "dim": vs.dim}
    points = _fd_points(base, view, vs, side, refs, weights, cfg)
    kid, kb = _kid_point(base, view, vs.reference, side, cfg, xx, vs.linked.get(src))
    points.append(kid)
    eps = []
    if min(len(vs.reference.x), len(side.x)) > cfg.prdc_k:
        eps = _prdc_episode_rows(world, src, view, vs.reference, side, cfg.prdc_k, radii)
    return points, eps, kid_block_rows(world, view, src, vs.reference, side, kb)


def _infinity_points(world: str, view: str, vs: ViewSets, shared: _ViewShared,
                     cfg: Settings) -> tuple[list[dict], list[pd.DataFrame]]:
    n_cl = shared.get()[2]
    return _fd_infinity_points({"world": world, "regime": "open_loop", "view": view, "dim": vs.dim},
                               view, vs, n_cl, cfg), [], []


def point_tasks(world: str, sets: dict[str, ViewSets], cfg: Settings) -> list[Callable[[], tuple]]:
    """:func:`point_estimates`' work as independent tasks in the serial order: one per view and source (FD, KID,
    PRDC) and each view's FD-infinity, each returning its raw ``(points, episode_rows, kid_block_rows)``; a view's
    shared reference factors are built once, by whichever of its tasks runs first. :func:`gather_points` turns
    their results, in this order, into the serial tables."""
    tasks: list[Callable[[], tuple]] = []
    for view, vs in sets.items():
        shared = _ViewShared(vs, cfg)
        tasks += [partial(_source_points, world, view, vs, src, shared, cfg) for src in sorted(vs.sources)]
        tasks.append(partial(_infinity_points, world, view, vs, shared, cfg))
    return tasks


def gather_points(parts: Iterable[tuple]) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    """The point and PRDC tables and KID's block rows from :func:`point_tasks`' results, in task order."""
    points, ep_rows, kid = [], [], []
    for p, e, k in parts:
        points += p
        ep_rows += e
        kid += k
    pts = pd.DataFrame(points)
    eps = pd.concat(ep_rows, ignore_index=True)[COLUMNS] if ep_rows else pd.DataFrame(columns=COLUMNS)
    return pts, eps, kid


def point_estimates(world: str, sets: dict[str, ViewSets], cfg: Settings) -> tuple[pd.DataFrame, pd.DataFrame]:
    """FD (pooled, per stratum, stratified), KID and FD-infinity points; PRDC as per-episode rows.

    Returns:
        ``(points, episode_rows)``: ``points`` one row per (source, metric, condition) with the
        sample counts and flags; ``episode_rows`` PRDC in the COLUMNS schema (shares per episode).
    """
    return gather_points(task() for task in point_tasks(world, sets, cfg))[:2]


# ----------------------------------------------------------------------------- bootstrap replicates

@dataclass
class Moments:
    """Per-episode first and second moments of one side, for multiplicity-weighted recomputation.

    With ``grams`` (``(N, d, d)``, used when they fit the memory budget) a replicate's cross-product
    is one contraction over episodes; otherwise the rows are weighted directly (``X^T diag(w) X``).
    """

    n_episodes: int
    counts: np.ndarray                 # (N,) rows per episode
    sums: np.ndarray                   # (N, d)
    grams: np.ndarray | None           # (N, d, d)
    x: np.ndarray                      # (n, d) the side's rows (not a copy)
    episode: np.ndarray                # (n,)

    @classmethod
    def of(cls, side: Side, n_episodes: int, use_grams: bool) -> "Moments":
        d = side.x.shape[1]
        counts = np.bincount(side.episode, minlength=n_episodes).astype(np.float64)
        sums = np.zeros((n_episodes, d))
        np.add.at(sums, side.episode, side.x)
        grams = None
        if use_grams:
            grams = np.zeros((n_episodes, d, d))
            for e in np.flatnonzero(counts):
                xe = side.x[side.episode == e]
                grams[e] = xe.T @ xe
        return cls(n_episodes, counts, sums, grams, side.x, side.episode)

    def factor(self, c: np.ndarray) -> CovarianceFactor:
        """The resampled set's moments with episode multiplicities ``c``, in the cheaper form.

        Few distinct rows for the dimension (``r <= SAMPLE_SPACE_MAX * d``: high-dimensional
        features, or a small stratum): the multiplicity-weighted centred rows, so that the distance
        is computed in the r-dimensional sample space. Otherwise the dense covariance from :meth:`at`.
        """
        d = self.x.shape[1]
        if float(c @ self.counts) < 2:
            return CovarianceFactor(np.zeros(d), float(c @ self.counts), sigma=np.zeros((d, d)))
        w = c[self.episode]
        if np.count_nonzero(w) <= SAMPLE_SPACE_MAX * d:
            return CovarianceFactor.from_rows(self.x, w)
        mu, sigma, n = self.at(c)
        return CovarianceFactor(mu, n, sigma=sigma)

    def at(self, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """Mean, covariance (ddof = 1) and row count of the resampled set with episode multiplicities ``c``."""
        mu, sigma, n = self.at_many(np.asarray(c, dtype=np.float64)[None])
        return mu[0], sigma[0], float(n[0])

    def at_many(self, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`at` for the rows of ``c`` ``(b, N)`` at once: means ``(b, d)``, covariances ``(b, d, d)``, counts ``(b,)``.

        With per-episode Grams, every cross-product is one row of a single matrix product
        ``c @ grams`` (b x N by N x d^2): each Gram is read once for the b sets, not once per set."""
        c = np.asarray(c, dtype=np.float64)
        d = self.x.shape[1]
        n = c @ self.counts
        s = c @ self.sums
        if self.grams is not None:
            g = (c @ self.grams.reshape(self.n_episodes, d * d)).reshape(len(c), d, d)
        else:
            g = np.stack([self.x.T @ (self.x * ci[self.episode][:, None]) for ci in c])
        mu = s / n[:, None]
        return mu, (g - n[:, None, None] * (mu[:, :, None] * mu[:, None, :])) / (n - 1.0)[:, None, None], n

    def factors(self, c: np.ndarray) -> list[CovarianceFactor]:
        """:meth:`factor` for each row of ``c`` ``(b, N)``; the dense ones' moments in one :meth:`at_many`."""
        c = np.asarray(c, dtype=np.float64)
        d = self.x.shape[1]
        out: list = [None] * len(c)
        dense = []
        for i, ci in enumerate(c):
            if float(ci @ self.counts) < 2 or np.count_nonzero(ci[self.episode]) <= SAMPLE_SPACE_MAX * d:
                out[i] = self.factor(ci)
            else:
                dense.append(i)
        if dense:
            mu, sigma, n = self.at_many(c[dense])
            for k, i in enumerate(dense):
                out[i] = CovarianceFactor(mu[k], float(n[k]), sigma=sigma[k])
        return out


@dataclass
class KernelBlocks:
    """Per-cluster-pair sums of KID's polynomial kernel: the episode-clustered unbiased MMD^2 and its replicates.

    Rows within an episode are correlated, and a model's predictions are paired with the realized
    futures of the same episode, so pairs of rows from one episode are not independent draws. The
    estimate is the U-statistic over pairs of rows from *distinct* clusters, within each set and
    across the two sets::

        MMD^2 = mean_{e != f} k(x_e., x_f.) + mean_{e != f} k(y_e., y_f.) - 2 mean_{e != f} k(x_e., y_f.)

    (each mean over the row pairs of distinct clusters e, f). It is unbiased when clusters are
    independent, whatever the correlation inside one. A replicate with multiplicities ``c`` keeps
    the same rule: copies of one cluster are one cluster, never paired with each other.

    Cluster ids index ``0..n-1``; the two sides share an id when they are the same episode (paired),
    and an unpaired comparison gives the sides disjoint ids.
    """

    xx: np.ndarray            # (n, n) sum of k over rows of x in cluster e and rows of x in cluster f
    yy: np.ndarray
    xy: np.ndarray
    nx: np.ndarray            # (n,) rows per cluster
    ny: np.ndarray
    dx: float                 # sum_i k(x_i, x_i): the self-pairs, for the published (row-level) estimate
    dy: float
    link: np.ndarray | None = None   # (n,): the x cluster each y cluster also depends on (-1: none)

    @staticmethod
    def _blocks(a: Side, b: Side, n: int, chunk: int = 2048) -> np.ndarray:
        d = a.x.shape[1]
        out = np.zeros((n, n))
        onehot_b = np.zeros((len(b.x), n))
        onehot_b[np.arange(len(b.x)), b.episode] = 1.0
        for i in range(0, len(a.x), chunk):
            k = a.x[i:i + chunk] @ b.x.T
            k /= d
            k += 1.0
            k3 = k * k
            k3 *= k                                                         # (x.y / d + 1)^3, in place
            onehot_a = np.zeros((n, len(k)))
            onehot_a[a.episode[i:i + chunk], np.arange(len(k))] = 1.0
            out += onehot_a @ (k3 @ onehot_b)
        return out

    @staticmethod
    def self_blocks(side: Side, n: int) -> np.ndarray:
        """A set's own block sums (one reference shared by every model: build once, pass to :meth:`of`)."""
        return KernelBlocks._blocks(side, side, n)

    @classmethod
    def of(cls, ref: Side, fake: Side, n: int, xx: np.ndarray | None = None,
           link: np.ndarray | None = None) -> KernelBlocks:
        """``link``: ``(n,)``, for each of ``fake``'s clusters another cluster of ``ref`` its rows depend on
        (a control built from another episode's state), left out of the cross term like its own."""
        d = ref.x.shape[1]
        diag = (lambda s: float(np.sum((np.einsum("ij,ij->i", s.x, s.x) / d + 1.0) ** 3)))
        if link is not None and np.shape(link) != (n,):
            raise WmevalError(f"KernelBlocks: link has shape {np.shape(link)}, expected ({n},)")
        return cls(cls._blocks(ref, ref, n) if xx is None else xx, cls._blocks(fake, fake, n),
                   cls._blocks(ref, fake, n), np.bincount(ref.episode, minlength=n).astype(float),
                   np.bincount(fake.episode, minlength=n).astype(float), diag(ref), diag(fake), link)

    @classmethod
    def from_sums(cls, ref: Side, fake: Side, xx: np.ndarray, yy: np.ndarray, xy: np.ndarray,
                  link: np.ndarray | None = None) -> KernelBlocks:
        """:meth:`of` with the block sums already built (the statistics stage's, see :func:`stored_kid_blocks`):
        only the rows per cluster and the self-pair sums are taken from the sides."""
        n, d = xx.shape[0], ref.x.shape[1]
        diag = (lambda s: float(np.sum((np.einsum("ij,ij->i", s.x, s.x) / d + 1.0) ** 3)))
        if link is not None and np.shape(link) != (n,):
            raise WmevalError(f"KernelBlocks: link has shape {np.shape(link)}, expected ({n},)")
        return cls(xx, yy, xy, np.bincount(ref.episode, minlength=n).astype(float),
                   np.bincount(fake.episode, minlength=n).astype(float), diag(ref), diag(fake), link)

    def published(self) -> float:
        """The row-level unbiased MMD^2 on all rows (every row pair but a row with itself, the torch-fidelity
        estimate on one subset holding every row): pairs rows of one episode, so biased on episode data."""
        m, n = self.nx.sum(), self.ny.sum()
        return float((self.xx.sum() - self.dx) / (m * (m - 1)) + (self.yy.sum() - self.dy) / (n * (n - 1))
                     - 2.0 * self.xy.sum() / (m * n))

    def plugin(self) -> float:
        """The squared distance between the two sets' kernel mean embeddings, every row pair included (the
        V-statistic, >= 0): the size of the difference the replicates' linear term is built on
        (:func:`~wmeval.estimators.resample.boundary_interval`'s ``scale``)."""
        m, n = self.nx.sum(), self.ny.sum()
        return float(self.xx.sum() / (m * m) + self.yy.sum() / (n * n) - 2.0 * self.xy.sum() / (m * n))

    @staticmethod
    def _distinct(c: np.ndarray, block: np.ndarray, na: np.ndarray, nb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Kernel sum and row-pair count over pairs of distinct clusters, per row of ``c`` ``(B, n)``."""
        c2 = c * c
        total = np.einsum("bi,bi->b", c @ block, c) - c2 @ np.diag(block)     # a matrix product: 14-25x einsum's pass
        pairs = (c @ na) * (c @ nb) - c2 @ (na * nb)
        return total, pairs

    def _linked_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The y clusters ``e`` with a link to another x cluster, and those x clusters ``f = link[e]``: the
        cross-term pairs left out besides each cluster with itself."""
        e = np.flatnonzero((self.link >= 0) & (self.link != np.arange(len(self.link))))
        return e, self.link[e]

    def at(self, c: np.ndarray) -> np.ndarray | float:
        """The MMD^2 of the sets with cluster multiplicities ``c`` (``(n,)`` or ``(B, n)``); NaN when a set
        has rows in fewer than 2 distinct clusters (no pair to average)."""
        cc = np.atleast_2d(np.asarray(c, dtype=np.float64))
        sxx, pxx = self._distinct(cc, self.xx, self.nx, self.nx)
        syy, pyy = self._distinct(cc, self.yy, self.ny, self.ny)
        sxy, pxy = self._distinct(cc, self.xy, self.nx, self.ny)
        if self.link is not None:
            e, f = self._linked_pairs()
            both = cc[:, f] * cc[:, e]
            sxy = sxy - both @ self.xy[f, e]
            pxy = pxy - both @ (self.nx[f] * self.ny[e])
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where((pxx > 0) & (pyy > 0) & (pxy > 0), sxx / pxx + syy / pyy - 2.0 * sxy / pxy, np.nan)
        return float(out[0]) if np.ndim(c) == 1 else out

    def standard_error(self, c: np.ndarray, group: np.ndarray | None = None) -> np.ndarray | float:
        """The infinitesimal jackknife's standard error of :meth:`at` on the data set with multiplicities ``c``
        (``(n,)`` or ``(B, n)``): ``sqrt(sum_i c_i (D_i - mean_c D)^2)``, summed over the resampling groups
        ``group`` ``(n,)`` (one group when None: every episode resampled together), with ``D_i`` the statistic's
        derivative in ``c_i``. Each of its three ratios ``S / P`` differentiates as ``(dS - (S / P) dP) / P``; a
        cluster pair left out (a cluster with itself, a linked pair) is left out of the derivative too.

        Every copy of a cluster is a unit of the resampled data set with that derivative, so this is the
        bootstrap-t's studentizing scale (:func:`~wmeval.estimators.resample.studentized_interval`): the
        data's own standard error, computed the same way on the data (``c = 1``) and on each replicate.
        NaN where :meth:`at` is."""
        cc = np.atleast_2d(np.asarray(c, dtype=np.float64))
        grad = np.zeros_like(cc)
        defined = np.ones(len(cc), dtype=bool)         # every ratio has a pair to average (where at() is finite)
        for block, na, nb, sign in ((self.xx, self.nx, self.nx, 1.0), (self.yy, self.ny, self.ny, 1.0),
                                    (self.xy, self.nx, self.ny, -2.0)):
            s, p = self._distinct(cc, block, na, nb)
            ds = cc @ block.T + cc @ block - 2.0 * cc * np.diag(block)
            dp = na[None] * (cc @ nb)[:, None] + nb[None] * (cc @ na)[:, None] - 2.0 * cc * (na * nb)[None]
            if sign < 0 and self.link is not None:
                e, f = self._linked_pairs()            # x cluster f with y cluster e: out of the cross term
                both = cc[:, f] * cc[:, e]
                s, p = s - both @ self.xy[f, e], p - both @ (self.nx[f] * self.ny[e])
                for d_, w in ((ds, self.xy[f, e]), (dp, self.nx[f] * self.ny[e])):
                    np.subtract.at(d_.T, f, (cc[:, e] * w).T)        # d(c_f c_e w) / dc_f = c_e w
                    np.subtract.at(d_.T, e, (cc[:, f] * w).T)
            defined &= p > 0
            with np.errstate(invalid="ignore", divide="ignore"):
                r = s / p
                grad += sign * (ds - r[:, None] * dp) / p[:, None]
        groups = np.zeros(cc.shape[1], dtype=np.int64) if group is None else np.unique(group, return_inverse=True)[1]
        var = np.zeros(len(cc))
        for g in np.unique(groups):
            cg, dg = cc[:, groups == g], grad[:, groups == g]
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = (cg * dg).sum(axis=1) / cg.sum(axis=1)
            var += (cg * (dg - mean[:, None]) ** 2).sum(axis=1)
        se = np.where(defined, np.sqrt(var), np.nan)
        return float(se[0]) if np.ndim(c) == 1 else se


@dataclass
class Replicates:
    """Replicates for one (world, metric, condition): ``values`` ``(B, S)`` in ``sources`` order."""

    metric: str
    condition: str
    sources: list[str]
    values: np.ndarray
    n_clusters: np.ndarray | None = None      # (S,) episodes with rows, per source
    #: ``scale`` ``(S,)``: KID's plug-in squared distance (V-statistic), the size of the difference its replicates'
    #: linear part is built on (:func:`~wmeval.estimators.resample.boundary_interval`), with ``se`` ``(S,)`` and
    #: ``replicate_se`` ``(B, S)``, the infinitesimal jackknife's standard errors on the data and in each replicate
    #: (:meth:`KernelBlocks.standard_error`, the bootstrap-t's scale); for the pooled and
    #: stratified FDs, ``jackknife_bias`` ``(S,)``: the episode jackknife's bias estimate (the stratified FD's is
    #: the strata's, weighted), which the bias-corrected form subtracts, and ``leftover_bias`` ``(H, S)``: what its
    #: two-scale check estimates the correction leaves, per half (:class:`~wmeval.estimators.resample.JackknifePlan`),
    #: and ``p_value`` ``(S,)``: the permutation test of FD = 0 on the plug-in (:class:`Exchange`), NaN where none ran
    extra: dict = field(default_factory=dict)


def _episode_counts(vs: ViewSets, sources: list[str], stratum: str | None) -> np.ndarray:
    """Per source, the episodes that carry rows (of the stratum) on both sides: the clusters that count."""
    ref = set(np.unique(vs.reference.subset(stratum).episode).tolist())
    return np.array([len(ref & set(np.unique(vs.sources[src].subset(stratum).episode).tolist()))
                     for src in sources])


def _sample_grams(ref: Side, fakes: dict[str, Side], d: int) -> dict[str, RowGrams] | None:
    """Row Grams of the reference and each model (one shared shift), when the sample space is the cheaper
    place for replicates (at most ``GRAM_ROWS_PER_DIM * d`` rows a side) and they fit the memory budget."""
    n_r = len(ref.x)
    sizes = [len(f.x) for f in fakes.values()]
    if n_r < 2 or max([n_r, *sizes]) > GRAM_ROWS_PER_DIM * d:
        return None
    if 8 * (n_r * n_r + sum(n * n + n_r * n for n in sizes)) > GRAM_BUDGET_BYTES:
        return None
    shift = ref.x.mean(axis=0)
    xs = ref.x - shift
    aa = xs @ xs.T
    return {src: RowGrams.of(ref.x, f.x, shift, aa=aa) for src, f in fakes.items()}


@dataclass
class _ViewFD:
    """One view's FD replicates (pooled and per stratum, every source): what they read, built once.

    A key (``None`` for pooled, else a stratum) takes the sample-space route when its row Grams fit
    (``grams[key]``), else the per-episode moments (``ref_m``, ``src_m``).
    """

    d: int
    keys: list[str | None]
    sources: list[str]
    grams: dict[str | None, dict[str, RowGrams] | None]
    episodes: dict[str | None, tuple[np.ndarray, dict[str, np.ndarray]]]
    ref_m: dict[str | None, Moments]
    src_m: dict[tuple[str, str | None], Moments]

    @classmethod
    def of(cls, vs: ViewSets, n_eps: int) -> _ViewFD:
        d, sources, keys = vs.dim, sorted(vs.sources), [None, *vs.strata]
        grams = {s: _sample_grams(vs.reference.subset(s), {src: vs.sources[src].subset(s) for src in sources}, d)
                 for s in keys}
        dense_keys = [s for s in keys if grams[s] is None]
        banks = len(dense_keys) * (len(sources) + 1)
        use_grams = banks * n_eps * d * d * 8 <= GRAM_BUDGET_BYTES
        return cls(d, keys, sources, grams,
                   {s: (vs.reference.subset(s).episode, {src: vs.sources[src].subset(s).episode for src in sources})
                    for s in keys if grams[s] is not None},
                   {s: Moments.of(vs.reference.subset(s), n_eps, use_grams) for s in dense_keys},
                   {(src, s): Moments.of(vs.sources[src].subset(s), n_eps, use_grams)
                    for src in sources for s in dense_keys})

    def _sample_space(self, s: str | None, c: np.ndarray, out: np.ndarray) -> None:
        ep_r, ep_src = self.episodes[s]
        w_r = c[ep_r]
        if w_r.sum() < 2:
            return
        for j, src in enumerate(self.sources):
            w_f = c[ep_src[src]]
            if w_f.sum() >= 2:
                out[j] = self.grams[s][src].frechet_distance(w_r, w_f)

    def _moments(self, s: str | None, c: np.ndarray, out: np.ndarray) -> None:
        """``out`` ``(b, S)``: the FDs of key ``s`` for the replicates ``c`` ``(b, N)``, moments in batches."""
        refs = self.ref_m[s].factors(c)
        fakes = {src: self.src_m[src, s].factors(c) for src in self.sources}
        for b, ref in enumerate(refs):
            if ref.n < 2:
                continue
            shared = None            # the reference's factorisation, when both sides are dense
            for j, src in enumerate(self.sources):
                f = fakes[src][b]
                if f.n < 2:
                    continue
                if ref.rows is None and f.rows is None and shared is None:
                    shared = FrechetReference(ref.mu, ref.sigma, rank_deficient=ref.n <= self.d)
                out[b, j] = frechet_distance_factored(ref, f, shared)

    def many(self, counts: np.ndarray) -> np.ndarray:
        """FD of every (key, source) for a block of replicates' multiplicities ``(b, N)``: ``(b, keys, S)``."""
        c = np.atleast_2d(counts).astype(np.float64)
        vals = np.full((len(c), len(self.keys), len(self.sources)), np.nan)
        for i, s in enumerate(self.keys):
            if self.grams[s] is not None:
                for b in range(len(c)):
                    self._sample_space(s, c[b], vals[b, i])
            else:
                self._moments(s, c, vals[:, i])
        return vals


@dataclass
class Exchange:
    """One (view, source)'s permutation test of FD = 0 on the plug-in FD, and the sets its permuted FDs are
    computed on.

    Paired sides (the bootstrap stage; ``distribution_bootstrap`` where the sides share cluster ids): a sign-flip
    test. Each exchange group (:attr:`Side.trajectory`: a (plan, episode), whose realized futures and model samples
    share the history and the actions; a cluster in ``distribution_bootstrap``) trades sides or not at random: its
    reference rows go to the model's side and its model rows to the reference's, each side's rows of the group
    reweighted so that the side keeps the group's weight (rows x their count on the other side over their own:
    4 realized futures against K = 1 sample trade, the realized futures at weight 1/4 each, the sample at 4). Under FD = 0 (the model's futures and the
    realized ones have one distribution over the evaluation's histories) a group's contribution to the difference
    is as likely reversed, so the flips give the statistic's null distribution: exactly where the group's
    trajectories are exchangeable and as many on each side (a sign flip is then a permutation of them), and to
    first order otherwise. Trading trajectories one by one instead (one of K + 1 to the reference) would dilute a
    group's own difference by 1/K in the permuted sets and reject models whose futures match the realized ones
    over the histories but not history by history. Where the rows carry their step (the bootstrap stage), a
    realized row at a step the model has no valid row for (an invalid row, left out of the model's side) is left
    out of the test, so that a trade moves the same steps both ways.

    Independent sides (``distribution_bootstrap`` where the sides share no cluster id): the units of the one group
    (each cluster) are dealt anew, as many to the reference as it has.

    Both sides hold every row: unit ``u`` on the reference side, ``U + u`` on the model's, and a permuted data set
    weights each copy (:meth:`counts`), so that its FD is computed by :class:`_ViewFD` as a bootstrap replicate's is.
    """

    sets: ViewSets
    group: np.ndarray      # (U,) each unit's exchange group
    on_ref: np.ndarray     # (U,) the unit is the reference's in the data
    rows: np.ndarray       # (U,) each unit's rows
    paired: bool
    #: the rows' total variance (the trace of their covariance, both sides together): the size of the FDs'
    #: rounding, below which two permuted FDs tie (:func:`~wmeval.estimators.resample.permutation_p_value`)
    scale: float

    @classmethod
    def of(cls, view: str, ref: Side, fake: Side, strata: list[str], paired: bool = True) -> Exchange | None:
        """The exchange between ``ref`` and ``fake``; ``None`` where either side's rows carry no trajectory."""
        if ref.trajectory is None or fake.trajectory is None:
            return None
        if ref.trajectory.shape[1] > 2:            # (group, sample, step): the realized rows at the model's steps
            steps = np.unique(fake.trajectory[:, [0, 2]], axis=0)
            keep = _row_in(ref.trajectory[:, [0, 2]], steps)
            ref = Side(ref.x[keep], ref.episode[keep], ref.stratum[keep], ref.trajectory[keep])
        uniq, unit = np.unique(np.concatenate([ref.trajectory[:, :2], fake.trajectory[:, :2]]), axis=0,
                               return_inverse=True)
        unit = np.asarray(unit).reshape(-1)
        rows, label = np.concatenate([ref.x, fake.x]), np.concatenate([ref.stratum, fake.stratum])
        on_ref = np.zeros(len(uniq), bool)
        on_ref[unit[:len(ref.x)]] = True
        if (on_ref[unit[len(ref.x):]]).any():
            raise ValueError("Exchange.of: a trajectory holds rows of both sides")
        sets = ViewSets(view, Side(rows, unit, label), {"model": Side(rows, unit + len(uniq), label)}, strata)
        scale = float(np.trace(np.atleast_2d(np.cov(rows, rowvar=False)))) if len(rows) > 1 else 0.0
        return cls(sets, uniq[:, 0], on_ref, np.bincount(unit, minlength=len(uniq)).astype(np.float64), paired,
                   scale)

    def counts(self, n_permutations: int, rng: np.random.Generator) -> np.ndarray:
        """``(P, 2U)`` the units' weights on the reference side, then on the model's: row 0 the data (the
        identity), each other row a permuted data set (paired: each group traded or not, reweighted; independent:
        the units dealt anew)."""
        _, g = np.unique(self.group, return_inverse=True)
        g = np.asarray(g).reshape(-1)
        n_groups = int(g.max()) + 1 if len(g) else 0
        if self.paired:
            ref_rows = np.bincount(g, weights=self.rows * self.on_ref, minlength=n_groups)
            fake_rows = np.bincount(g, weights=self.rows * ~self.on_ref, minlength=n_groups)
            both = (ref_rows > 0) & (fake_rows > 0)             # a group one side lacks stays where it is
            flip = (rng.integers(0, 2, size=(n_permutations, n_groups)) * both).astype(bool)
            flip[0] = False
            f = flip[:, g]
            ratio = np.where(both, ref_rows / np.where(both, fake_rows, 1.0), 1.0)[g]     # (U,)
            ref = np.where(self.on_ref, ~f, f * ratio)
            model = np.where(self.on_ref, f / ratio, ~f)
            return np.concatenate([ref, model], axis=1).astype(np.float64)
        n_ref = np.bincount(g, weights=self.on_ref.astype(np.float64), minlength=n_groups).astype(np.int64)
        start = np.concatenate([[0], np.cumsum(np.bincount(g, minlength=n_groups))[:-1]])
        order = np.argsort(g[None, :] + rng.random((n_permutations, len(g))), axis=1)   # by group, then at random
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(len(g))[None, :] - start[g[order]], axis=1)
        ref = rank < n_ref[g][None, :]
        ref[0] = self.on_ref
        return np.concatenate([ref, ~ref], axis=1).astype(np.float64)

    def statistics(self, counts: np.ndarray, weights: np.ndarray, n_jobs: int | None = None, progress=None,
                   executor=None) -> tuple[np.ndarray, np.ndarray]:
        """``(pooled, stratified)`` ``(P,)``: the plug-in FD pooled, and stratified with the strata's
        ``weights``, of each permuted data set (rows of :meth:`counts`)."""
        sets, counts = self._lumped(counts)
        one = _ViewFD.of(sets, counts.shape[1])
        blocks = replicate_blocks(counts)
        vals = np.concatenate(_map_replicates(one.many, blocks, n_jobs, _BlockProgress(progress, blocks), executor,
                                              per_item=len(blocks[0])))[:, :, 0]        # (P, 1 + strata)
        return vals[:, 0], vals[:, 1:] @ np.asarray(weights, dtype=np.float64)

    def _lumped(self, counts: np.ndarray) -> tuple[ViewSets, np.ndarray]:
        """The sets and weights the permuted FDs are computed on. With paired sides every permuted data set
        (:meth:`counts`) gives a group's realized trajectories one weight and its model trajectories another, so
        each (group, side of origin) is lumped into one unit: the same weighted rows, so the same FDs up to rounding,
        from moments over 2 units a group instead of one a trajectory (4 times fewer with 4 realized futures
        and K = 4: the default bootstrap stage's peak memory 1.69 -> 0.94 GB). Weights that differ within a (group,
        side), as the independent sides' deal gives, are computed unit by unit, as given."""
        if not self.paired:
            return self.sets, counts
        n_units = len(self.group)
        pairs, block = np.unique(np.stack([self.group, self.on_ref.astype(self.group.dtype)]), axis=1,
                                 return_inverse=True)
        block, n_blocks = np.asarray(block).reshape(-1), pairs.shape[1]
        if n_blocks == n_units:                       # a unit a (group, side) already (distribution_bootstrap)
            return self.sets, counts
        first = np.empty(n_blocks, np.int64)
        first[block[::-1]] = np.arange(n_units)[::-1]                    # each block's first unit
        lumped = np.concatenate([counts[:, first], counts[:, n_units + first]], axis=1)
        if not np.array_equal(counts, np.concatenate([lumped[:, block], lumped[:, n_blocks + block]], axis=1)):
            return self.sets, counts
        ref = self.sets.reference                       # its rows' episode is their unit (the model's: U + unit)
        row_block = block[ref.episode]
        return ViewSets(self.sets.view, Side(ref.x, row_block, ref.stratum),
                        {"model": Side(ref.x, row_block + n_blocks, ref.stratum)}, self.sets.strata), lumped

    def p_values(self, counts: np.ndarray, weights: np.ndarray, n_jobs: int | None = None, progress=None,
                 executor=None) -> tuple[float, float]:
        """``(pooled, stratified)``: the test's p-values over the permuted data sets of ``counts``."""
        pooled, stratified = self.statistics(counts, weights, n_jobs, progress, executor)
        return permutation_p_value(pooled, self.scale), permutation_p_value(stratified, self.scale)


def _row_in(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(len(a),)``: whether each row of the integer array ``a`` ``(n, 2)`` is a row of ``b`` ``(m, 2)``."""
    if not len(a) or not len(b):
        return np.zeros(len(a), bool)
    lo = np.minimum(a.min(axis=0), b.min(axis=0))
    span = np.maximum(a.max(axis=0), b.max(axis=0)) - lo + 1
    key = lambda r: (r[:, 0] - lo[0]) * span[1] + (r[:, 1] - lo[1])             # noqa: E731
    return np.isin(key(a), key(b))


def fd_inf_grid(n_episodes: int, cfg: Settings) -> list[int]:
    """FD-infinity's declared grid of episode counts: ``fd_inf_points`` sizes from
    ``fd_inf_min_fraction`` of the episodes (at least 2) to all of them."""
    lo = max(2, int(np.ceil(cfg.fd_inf_min_fraction * n_episodes)))
    return sorted(set(int(v) for v in np.linspace(min(lo, n_episodes), n_episodes, cfg.fd_inf_points)))


@dataclass
class FDInfinity:
    """FD-infinity with both sides extrapolated, by subsampling episodes: one view, every source.

    For each M in the grid of episode counts, ``fd_inf_draws`` subsets of M of the (resampled)
    episodes are drawn without replacement, the *same* episodes for the reference and every model
    (paired), and the FD of their rows computed; the line ``FD_M = a + b / M`` is fitted and its
    intercept ``a`` is FD-infinity: the FD between the two distributions as both sides' episode
    counts grow without bound. Subsampling episodes (not rows) keeps each episode's correlated rows
    together, so the 1/M term carries both sides' finite-sample bias. (Chong & Forsyth 2020 subsample
    generated rows only, which leaves the finite reference's bias in; ``metrics.fd_infinity`` is
    that published form.) The point and every bootstrap replicate run this same computation, the
    replicate on its resampled episodes (a subset is a multivariate hypergeometric draw over the
    episodes' multiplicities), with subset seeds derived from (seed, view, replicate).
    """

    view: str
    d: int
    sources: list[str]
    ref_m: Moments
    src_m: dict[str, Moments]
    cfg: Settings

    @classmethod
    def of(cls, vs: ViewSets, n_eps: int, cfg: Settings) -> FDInfinity:
        sources = sorted(vs.sources)
        use_grams = (len(sources) + 1) * n_eps * vs.dim * vs.dim * 8 <= GRAM_BUDGET_BYTES
        return cls(vs.view, vs.dim, sources, Moments.of(vs.reference, n_eps, use_grams),
                   {src: Moments.of(vs.sources[src], n_eps, use_grams) for src in sources}, cfg)

    def _fd_all(self, c: np.ndarray) -> np.ndarray:
        """``(b, S)``: every source's FD on each row's episode multiplicities ``c`` ``(b, N)`` (moments in one batch)."""
        out = np.full((len(c), len(self.sources)), np.nan)
        mu, sigma, n = self.ref_m.at_many(c)
        fakes = {src: self.src_m[src].at_many(c) for src in self.sources}
        for b in range(len(c)):
            if n[b] < 2:
                continue
            ref = FrechetReference(mu[b], sigma[b], rank_deficient=n[b] <= self.d)
            for j, src in enumerate(self.sources):
                f_mu, f_sigma, f_n = fakes[src]
                if f_n[b] >= 2:
                    out[b, j] = ref.distance(f_mu[b], f_sigma[b])
        return out

    def __call__(self, counts: np.ndarray, replicate: int | str = "point"
                 ) -> tuple[np.ndarray, np.ndarray, list[int], np.ndarray]:
        """``(values (S,), slopes (S,), grid, mean FD per grid size (len(grid), S))`` for episode multiplicities
        ``counts``.

        The line is fitted to every draw against 1 / its effective episode count
        ``(sum c)^2 / sum c^2`` (= 1 / M for M distinct episodes, so the point's fit is on 1 / M)."""
        c = np.asarray(counts, dtype=np.int64)
        n_eps = int(c.sum())
        grid = fd_inf_grid(n_eps, self.cfg)
        if len(grid) < 2:
            nan = np.full(len(self.sources), np.nan)
            return nan, nan, grid, np.full((len(grid), len(self.sources)), np.nan)
        rng = np.random.default_rng([self.cfg.seed, VIEWS.index(self.view),
                                     *([0] if replicate == "point" else [1, int(replicate)])])
        subs, inv_size = [], []
        for m in grid:
            draws = [c] if m == n_eps else [rng.multivariate_hypergeometric(c, m)
                                             for _ in range(self.cfg.fd_inf_draws)]
            for sub in draws:
                subs.append(sub.astype(np.float64))
                # 1 / the effective episode count (sum c)^2 / sum c^2: M for distinct episodes (the point);
                # fewer for a resampled subset holding copies, whose rows carry no new information.
                inv_size.append(float(sub @ sub) / float(sub.sum()) ** 2)
        fds = self._fd_all(np.stack(subs))
        design = np.stack([np.ones(len(inv_size)), np.asarray(inv_size)], axis=1)
        ok = np.all(np.isfinite(fds), axis=0)
        values, slopes = np.full(len(self.sources), np.nan), np.full(len(self.sources), np.nan)
        if ok.any():
            coef, *_ = np.linalg.lstsq(design, fds[:, ok], rcond=None)
            values[ok], slopes[ok] = coef[0], coef[1]
        sizes = [m for m in grid for _ in range(1 if m == n_eps else self.cfg.fd_inf_draws)]
        per_size = np.stack([fds[[i for i, m2 in enumerate(sizes) if m2 == m]].mean(axis=0) for m in grid])
        return values, slopes, grid, per_size


def _map_replicates(fn, items, n_jobs: int | None, progress, executor, per_item: int = 1) -> list:
    """``[fn(x) for x in items]``, merged in item order, each result depending on its item alone, computed with
    single-threaded BLAS wherever it runs: as Ray tasks (``executor``; an item holds ``per_item`` replicates, so
    a task takes ``execution.replicates_per_shard`` replicates, not that many items); on Linux in ``n_jobs``
    forked worker processes (:func:`wmeval.core.parallel.fork_map`: a replicate is many small LAPACK calls, so
    threads would wait for the GIL); elsewhere on ``n_jobs`` threads. The same bits in every case."""
    if executor is not None:
        return executor.map(fn, items, chunk=max(1, executor.cfg.replicates_per_shard // per_item),
                            progress=None if progress is None else progress.update)
    if can_fork():
        return fork_map(fn, items, n_jobs, None if progress is None else progress.update)
    out = []
    with threadpool_limits(limits=1), ThreadPoolExecutor(max_workers=n_jobs or usable_cores()) as pool:
        for v in pool.map(fn, items):
            out.append(v)
            if progress is not None:
                progress.update()
    return out


#: At most this many replicates have their moments computed together (one matrix product over the
#: per-episode Grams).
REPLICATE_BLOCK = 16


def replicate_blocks(counts: np.ndarray) -> list[np.ndarray]:
    """The rows of ``counts`` ``(B, N)`` in consecutive blocks: :data:`REPLICATE_BLOCK` rows, fewer when B < 256,
    so that there are at least 16 blocks to spread over workers (6 replicates in one block ran on one core).
    The size depends on B alone: a replicate's numbers never depend on how the blocks are spread over workers."""
    size = min(REPLICATE_BLOCK, max(1, len(counts) // 16))
    return [counts[i:i + size] for i in range(0, len(counts), size)]


class _BlockProgress:
    """A progress bar's ``update`` counted in replicates for a map over :func:`replicate_blocks`."""

    def __init__(self, progress, blocks: list[np.ndarray]) -> None:
        self.progress, self.sizes, self.done = progress, [len(b) for b in blocks], 0

    def update(self, blocks: int = 1) -> None:
        # Counted in block order: exact for the ordered maps; Ray's parts finish in any order, which can only
        # misplace the last (shorter) block's count until the bar ends.
        if self.progress is not None:
            self.progress.update(sum(self.sizes[self.done:self.done + blocks]))
        self.done += blocks


class _FDInfinityReplicate:
    """Replicate ``b`` of FD-infinity from row ``b`` of the counts (a picklable callable for Ray tasks)."""

    def __init__(self, one: FDInfinity, counts: np.ndarray) -> None:
        self.one, self.counts = one, counts

    def __call__(self, b: int) -> np.ndarray:
        return self.one(self.counts[b], b)[0]


def fd_infinity_replicates(sets: dict[str, ViewSets], counts: np.ndarray, cfg: Settings, n_jobs: int | None = None,
                           progress=None, executor=None) -> list[Replicates]:
    """FD-infinity recomputed in every replicate (rows of ``counts`` ``(B, N)``), per view: its own
    replicates, not the plug-in's spread. Serial, threaded and Ray runs (``executor``:
    :class:`wmeval.core.execution.RayExecutor`) agree (seeds per replicate)."""
    out = []
    for view, vs in sets.items():
        one = _FDInfinityReplicate(FDInfinity.of(vs, counts.shape[1], cfg), counts)
        reps = _map_replicates(one, list(range(counts.shape[0])), n_jobs, progress, executor)
        out.append(Replicates("fd_infinity", f"{view}:pooled", one.one.sources, np.stack(reps),
                              n_clusters=_episode_counts(vs, one.one.sources, None)))
    return out


def _present(vs: ViewSets, key: str | None, sources: list[str], n_eps: int) -> np.ndarray:
    """``(S, N)``: per source, the episodes with rows of ``key`` (a stratum, or ``None``) on either side."""
    ref = np.zeros(n_eps, bool)
    ref[vs.reference.subset(key).episode] = True
    out = np.repeat(ref[None, :], len(sources), axis=0)
    for j, src in enumerate(sources):
        out[j, vs.sources[src].subset(key).episode] = True
    return out


def _jackknife_biases(one: _ViewFD, vs: ViewSets, n_eps: int, n_jobs: int, progress, executor
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``(bias, leftovers)``: ``(1 + strata, S)`` the episode jackknife's bias estimate of every (key, source)
    FD of one view, and ``(H, 1 + strata, S)`` its two-scale check's estimates of the bias the correction leaves,
    one per half of the episodes (:class:`~wmeval.estimators.resample.JackknifePlan`
    over the episodes, one resampling group as the replicates'; each key's and source's weights on the episodes
    that hold its rows), on the same computation as the replicates (the rows of all episodes included, so that
    the difference is the deletion's alone)."""
    plan = JackknifePlan.of(np.zeros(n_eps, dtype=np.int64))
    if len(plan.counts) == 1:                                       # one episode: no bias estimate
        shape = (len(one.keys), len(one.sources))
        return np.full(shape, np.nan), np.full((0, *shape), np.nan)
    # The jackknife's rows in their own blocks, then the check's: the same batches, so the same bits, as before it.
    split = plan.parts[0][2]
    blocks = replicate_blocks(plan.counts[:split]) + replicate_blocks(plan.counts[split:])
    fd = np.concatenate(_map_replicates(one.many, blocks, n_jobs, _BlockProgress(progress, blocks), executor,
                                        per_item=len(blocks[0])))     # (rows, keys, S)
    parts = [plan.estimate(fd[:, k], _present(vs, key, one.sources, n_eps)) for k, key in enumerate(one.keys)]
    return np.stack([p[0] for p in parts]), np.stack([p[1] for p in parts], axis=1)


def replicates(sets: dict[str, ViewSets], counts: np.ndarray, cfg: Settings, n_jobs: int | None = None,
               progress=None, executor=None,
               kid_blocks: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
               n_permutations: int = 0,
               permutation_rng: Callable[[str, str], np.random.Generator] | None = None) -> list[Replicates]:
    """FD (pooled, strata, stratified) and KID replicates over the rows of ``counts`` ``(B, N)``.

    Each replicate depends only on its row of ``counts``: serial and parallel runs give identical
    numbers. Replicates are spread over ``n_jobs`` workers (all cores by default: forked processes on
    Linux, else threads; :func:`_map_replicates`), each with single-threaded BLAS: threaded BLAS inside
    every worker oversubscribes the cores many times over (measured: 6 s became 110 s on 2 cores).

    Per view and stratum, one of two forms: with at most ``GRAM_ROWS_PER_DIM * d`` rows a side
    (Inception's d = 2048 against a few thousand rows), the row Grams are built once and every
    replicate works in the sample space (:class:`~wmeval.metrics.RowGrams`: nothing scales with d);
    otherwise per-episode moments weighted by multiplicity (:class:`Moments`). With ``executor`` (Ray), the
    replicates run as Ray tasks instead, each with single-threaded BLAS too: the same bits. ``kid_blocks``:
    KID's block sums per (view, source) as the statistics stage stored them (:func:`stored_kid_blocks`,
    checked against these rows); the others are built here.

    With ``n_permutations`` (and ``permutation_rng(view, source)``, each test's generator), the pooled and
    stratified FDs carry ``p_value`` ``(S,)``: the permutation test of FD = 0 on the plug-in (:class:`Exchange`;
    :func:`~wmeval.estimators.resample.permutation_p_value`), NaN for a source whose rows carry no trajectory.
    """
    n_jobs = n_jobs or usable_cores()
    if permutation_rng is None:
        permutation_rng = partial(make_rng, cfg.seed, "fd_permutation")
    out: list[Replicates] = []
    for view, vs in sets.items():
        one = _ViewFD.of(vs, counts.shape[1])
        sources = one.sources
        blocks = replicate_blocks(counts)
        fd = np.concatenate(_map_replicates(one.many, blocks, n_jobs, _BlockProgress(progress, blocks),
                                            executor, per_item=len(blocks[0])))   # (B, 1 + strata, S)
        bias, left = _jackknife_biases(one, vs, counts.shape[1], n_jobs, progress, executor)   # (1 + strata, S)
        pooled = _episode_counts(vs, sources, None)
        weights = stratum_weights(vs, cfg.strata_weights)
        w = np.array([weights[s] for s in vs.strata])
        p_pooled, p_strat = np.full(len(sources), np.nan), np.full(len(sources), np.nan)
        for j, src in enumerate(sources):
            ex = Exchange.of(view, vs.reference, vs.sources[src], vs.strata) if n_permutations else None
            if ex is not None:
                p_pooled[j], p_strat[j] = ex.p_values(ex.counts(n_permutations, permutation_rng(view, src)), w,
                                                      n_jobs, progress, executor)
        out.append(Replicates("fd", f"{view}:pooled", sources, fd[:, 0], pooled,
                              {"jackknife_bias": bias[0], "leftover_bias": left[:, 0], "p_value": p_pooled}))
        for i, s in enumerate(vs.strata, start=1):
            out.append(Replicates("fd", f"{view}:{s}", sources, fd[:, i], _episode_counts(vs, sources, s)))
        out.append(Replicates("fd_stratified", f"{view}:{cfg.strata_weights}", sources,
                              np.tensordot(fd[:, 1:], w, axes=([1], [0])), pooled,
                              {"jackknife_bias": np.tensordot(bias[1:], w, axes=([0], [0])),
                               "leftover_bias": np.tensordot(left[:, 1:], w, axes=([1], [0])),
                               "p_value": p_strat}))
        c, n = counts.astype(np.float64), counts.shape[1]
        stored = kid_blocks or {}
        xx = None if all((view, src) in stored for src in sources) else KernelBlocks.self_blocks(vs.reference, n)
        kbs = [KernelBlocks.from_sums(vs.reference, vs.sources[src], *stored[view, src], vs.linked.get(src))
               if (view, src) in stored else KernelBlocks.of(vs.reference, vs.sources[src], n, xx, vs.linked.get(src))
               for src in sources]
        ones = np.ones(n)
        out.append(Replicates("kid", f"{view}:pooled", sources, np.stack([kb.at(c) for kb in kbs], axis=1), pooled,
                              {"scale": np.array([kb.plugin() for kb in kbs]),
                               "se": np.array([kb.standard_error(ones) for kb in kbs]),
                               "replicate_se": np.stack([kb.standard_error(c) for kb in kbs], axis=1)}))
    return out


# ----------------------------------------------------------------------------- the public set-level bootstrap

#: The metrics :func:`distribution_bootstrap` takes, and the interval each carries.
#: KID's is the boundary interval near 0 and the bootstrap-t far from it (:func:`~wmeval.estimators.resample.
#: distance_interval`; the result's ``method`` says which).
SET_METRICS = {"fd": "percentile", "fd_bias_corrected": "boundary", "kid": "boundary or bootstrap-t"}


def _cluster_index(real_clusters: np.ndarray, fake_clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both sides' cluster ids in one index space ``0..n-1``, and each cluster's resampling group.

    When the sides share any id, the design is paired: every cluster is an episode, resampled in one
    group (``paired``), and an episode that one side lacks is still a unit (its rows count on the
    side that has them). When they share none, each side is resampled on its own (``real``, ``fake``).
    """
    ids, inverse = np.unique(np.concatenate([np.asarray(real_clusters), np.asarray(fake_clusters)]),
                             return_inverse=True)
    inv_r, inv_f = inverse[:len(real_clusters)], inverse[len(real_clusters):]
    on_r, on_f = np.zeros(len(ids), bool), np.zeros(len(ids), bool)
    on_r[inv_r], on_f[inv_f] = True, True
    group = (np.full(len(ids), "paired") if (on_r & on_f).any() else np.where(on_r, "real", "fake"))
    return inv_r, inv_f, group


def distribution_bootstrap(real: np.ndarray, fake: np.ndarray, *, real_clusters: np.ndarray,
                           fake_clusters: np.ndarray, metric: str, n_resamples: int = 500,
                           confidence_level: float = 0.95, seed: int = 0) -> BootstrapResult:
    """Cluster-bootstrap interval of a set-level distance between real and generated embeddings.

    The same code the bootstrap stage runs on every world: FD replicates recompute the moments of
    the resampled clusters' rows weighted by multiplicity (:class:`Moments`, :class:`_ViewFD`); KID is
    the U-statistic over row pairs from distinct clusters, in the point and in every replicate
    (:class:`KernelBlocks`).

    Args:
        real, fake: ``(n, d)`` and ``(m, d)`` embeddings.
        real_clusters, fake_clusters: ``(n,)`` and ``(m,)`` cluster ids (e.g. episode ids). Rows whose
            cluster id appears on both sides are one episode, resampled together (paired: a model's
            predictions and the realized futures of the same episodes), and then every episode is
            resampled in one group (an episode one side lacks still counts on the other); when the
            sides share no id, each side is resampled independently of the other.
        metric: ``fd`` (plug-in, percentile interval; biased upward at finite N, for comparison with
            published numbers), ``fd_bias_corrected`` (FD minus the delete-a-group jackknife's bias estimate,
            :func:`~wmeval.estimators.resample.jackknife_counts`, with the boundary interval of the replicates
            recentred on FD + that bias: the bootstrap's own estimate, ``2 FD - mean FD*``, leaves a positive
            bias in moderate d; no interval, with a warning, where the correction fails its two-scale check,
            :class:`~wmeval.estimators.resample.JackknifePlan`: with too few independent rows for the
            dimension it leaves a bias its interval would not show; 0 put in the interval or taken out as a
            permutation test of FD = 0 on the plug-in decides, ``n_resamples`` permutations with the data counted
            as one: paired sides trade each cluster's real and generated rows at random, each reweighted to the
            other's row count (:class:`Exchange`), independent sides deal the clusters to the sides anew, as many to
            each as it has; the result's ``p_value``, and a lower end of the
            smallest positive double where the test excludes 0, :func:`~wmeval.estimators.resample.with_zero_test`)
            or ``kid`` (unbiased MMD^2 with the
            kernel ``(x.y / d + 1)^3``; near 0 the boundary interval,
            :func:`~wmeval.estimators.resample.boundary_interval`, which covers a true 0 at about the nominal
            level where a percentile interval covers it 99-100% of the time, and far from 0, where the
            replicates' linear part carries most of their variance, the bootstrap-t studentized by each
            replicate's infinitesimal-jackknife standard error, :meth:`KernelBlocks.standard_error`:
            :func:`~wmeval.estimators.resample.distance_interval`; ``method`` says which).
        n_resamples, confidence_level, seed: B, the level, and the resampling's seed.

    Returns:
        :class:`~wmeval.estimators.resample.BootstrapResult`; ``n_clusters`` counts distinct ids
        over both sides; ``p_value`` the permutation test's (``fd_bias_corrected`` only, else NaN). With fewer
        than 2 clusters in a resampling group: a warning and a NaN interval.

    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(200, 3)), rng.normal(size=(200, 3)) + 1.0
    >>> ep = np.repeat(np.arange(20), 10)
    >>> r = distribution_bootstrap(x, y, real_clusters=ep, fake_clusters=ep, metric="fd", n_resamples=100)
    >>> bool(r.low < 3.0 < r.high), r.n_clusters
    (True, 20)
    """
    if metric not in SET_METRICS:
        raise ValueError(f"metric must be one of {sorted(SET_METRICS)}, got {metric!r}")
    real, fake = np.asarray(real, dtype=np.float64), np.asarray(fake, dtype=np.float64)
    if real.ndim != 2 or fake.ndim != 2 or real.shape[1] != fake.shape[1] or min(len(real), len(fake)) < 2:
        raise ValueError(f"real and fake must be (n >= 2, d) with equal d, got {real.shape} and {fake.shape}")
    for name, x, c in (("real", real, real_clusters), ("fake", fake, fake_clusters)):
        if np.shape(c) != (len(x),):
            raise ValueError(f"{name}_clusters shape {np.shape(c)} must be ({len(x)},)")
    inv_r, inv_f, group = _cluster_index(real_clusters, fake_clusters)
    n = len(group)
    counts = cluster_counts(np.arange(n), group, n, n_resamples, make_rng(seed, "distribution_bootstrap"))
    sizes = {g: int(np.sum(group == g)) for g in np.unique(group)}
    if min(sizes.values()) < 2:
        warnings.warn(f"distribution_bootstrap: resampling groups {sizes} (clusters); an interval needs at least "
                      "2 independent clusters in each (low and high are NaN)", RuntimeWarning, stacklevel=2)
    label = np.full(len(real), "all", dtype=object)
    ref, side = Side(real, inv_r, label.astype(str)), Side(fake, inv_f, np.full(len(fake), "all"))
    enough = min(sizes.values()) >= 2
    if metric == "kid":
        kb = KernelBlocks.of(ref, side, n)
        c = counts.astype(np.float64)
        point, reps = kb.at(np.ones(n)), kb.at(c)
        lo, hi, method = (distance_interval(point, reps, counts, kb.plugin(), confidence_level,
                                            kb.standard_error(np.ones(n), group), kb.standard_error(c, group))
                          if enough else (np.nan, np.nan, "boundary"))
        return BootstrapResult(float(point), float(lo), float(hi), method, n_resamples, n, confidence_level)
    vs = ViewSets("frame", ref, {"fake": side}, [])
    point = _fd(_reference(ref), side)
    one = _ViewFD.of(vs, n)
    with threadpool_limits(limits=1):
        reps = np.concatenate([one.many(block) for block in replicate_blocks(counts)])[:, 0, 0]
    ok = reps[np.isfinite(reps)]
    p_value = float("nan")
    if not (ok.size and enough):
        lo, hi = np.nan, np.nan
    elif metric == "fd_bias_corrected":
        plan = JackknifePlan.of(group)
        present = np.zeros(n, bool)
        present[inv_r], present[inv_f] = True, True
        with threadpool_limits(limits=1):
            split = plan.parts[0][2]               # the jackknife's rows in one batch, as before the check
            jk = np.concatenate([one.many(plan.counts[:split]),
                                 *(one.many(block) for block in replicate_blocks(plan.counts[split:]))])[:, 0, 0]
        bias, leftovers = plan.estimate(jk, present)
        bias, leftover = float(bias), float(leftover_bias(leftovers)[0])
        fin = np.isfinite(reps)
        if bias_check_failed(leftovers, reps[fin]):
            warnings.warn(f"distribution_bootstrap: the jackknife's bias correction fails its two-scale check "
                          f"(it leaves an estimated {leftover:.4g}, {abs(leftover) / np.std(reps[fin]):.1f} standard "
                          f"deviations of the replicates; the limit is {BIAS_CHECK_LIMIT}): too few independent rows "
                          f"for the dimension ({n} clusters, d = {real.shape[1]}); no interval (low and high are NaN). "
                          "Compare on KID, or with more episodes", RuntimeWarning, stacklevel=2)
            lo, hi = np.nan, np.nan
        else:
            lo, hi = boundary_interval(point, jackknife_centred(reps[fin], point, bias), counts[fin], point,
                                       confidence_level, corrected=point - bias)
        p_value = _permutation_test(ref, side, group, n_resamples, seed)
        lo, hi = with_zero_test(lo, hi, p_value, confidence_level)
        point -= bias
    else:
        lo, hi = percentile_interval(ok, confidence_level)
    return BootstrapResult(float(point), float(lo), float(hi), SET_METRICS[metric], n_resamples, n,
                           confidence_level, p_value)


def _permutation_test(ref: Side, side: Side, group: np.ndarray, n_permutations: int, seed: int) -> float:
    """:func:`distribution_bootstrap`'s permutation test of FD = 0 on the plug-in (:class:`Exchange`): paired sides
    (``group`` all ``paired``) trade each cluster's real and generated rows or not at random; independent sides
    deal the clusters to the sides anew, as many to each as it has."""
    paired = group[0] == "paired"
    if paired:                                # each cluster a group of one real and one generated unit
        ref_t = np.stack([ref.episode, np.full(len(ref.x), -1)], axis=1)
        fake_t = np.stack([side.episode, np.zeros(len(side.x), np.int64)], axis=1)
    else:                                     # one group; each cluster its own unit
        ref_t = np.stack([np.zeros(len(ref.x), np.int64), -1 - ref.episode], axis=1)
        fake_t = np.stack([np.zeros(len(side.x), np.int64), side.episode], axis=1)
    ex = Exchange.of("frame", dataclasses.replace(ref, trajectory=ref_t),
                     dataclasses.replace(side, trajectory=fake_t), [], paired=paired)
    counts = ex.counts(n_permutations, make_rng(seed, "distribution_bootstrap", "permutation"))
    with threadpool_limits(limits=1):
        return ex.p_values(counts, np.zeros(0), n_jobs=1)[0]
