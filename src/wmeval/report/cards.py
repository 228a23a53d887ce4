"""Protocol cards: what was compared, how, with how many samples, and how the interval was made.

A card is assembled from declarations: fields every card has, fields by the metric's resampling
unit (observation, dynamics or control episodes, probes), the fields the metric itself names in
its registry entry (:attr:`wmeval.metrics.MetricInfo.card`), and the interval's fields. Adding a
metric never touches this file unless it needs a field no metric has had before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from wmeval.core.errors import WmevalError
from wmeval.estimators.resample import BIAS_CHECK_LIMIT, STUDENTIZE_LINEAR_SHARE
from wmeval.metrics import REGISTRY, MetricInfo

REGIME_LABEL = {"teacher_forced": "one-step", "open_loop": "open-loop", "closed_loop": "closed-loop",
                "probe": "probe"}


@dataclass(frozen=True)
class CardContext:
    """What a card field may read: the world's protocol record, the run's, and the interval rows."""

    world: str
    wp: dict[str, Any]            # protocol["worlds"][world]
    protocol: dict[str, Any]
    metric: str
    regime: str
    rows: pd.DataFrame            # the metric's interval rows for this (world, regime)

    @property
    def info(self) -> MetricInfo:
        return REGISTRY[self.metric]

    @property
    def sc(self) -> dict[str, Any]:
        return self.protocol.get("scoring", {})

    @property
    def enc(self) -> dict[str, Any]:
        return self.protocol["encoder"]

    @property
    def dyn(self) -> dict[str, Any]:
        return self.wp["dynamics"]

    @property
    def unit(self) -> str:
        return str(self.rows.unit.iloc[0]) if "unit" in self.rows and len(self.rows) else "observation"

    @property
    def regime_label(self) -> str:
        return REGIME_LABEL.get(self.regime, self.regime)


def _short(x: Any) -> str:
    """A nested protocol value as one line."""
    if isinstance(x, dict):
        return "; ".join(f"{k}: {_short(v)}" for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return ", ".join(_short(v) for v in x)
    return str(x)


# ----------------------------------------------------------------------------- fields every card has

def _head(c: CardContext) -> dict[str, str]:
    info = c.info
    direction = {True: "higher is better", False: "lower is better", None: (
        f"closest to {info.target:g} is best" if info.target is not None else "no direction (a diagnostic)")}
    return {"metric": c.metric, "direction": f"{info.arrow} {direction[info.higher_is_better]}",
            "unit": info.unit, "layer": info.layer, "definition": info.definition, "world": c.world,
            "regime": c.regime_label, "conditions": ", ".join(sorted(set(map(str, c.rows.condition))))}


def _observation(c: CardContext) -> dict[str, str]:
    wp = c.wp
    ks = ", ".join(f"{m} {k}" for m, k in wp["models"].items())
    tf = f"; teacher-forced along realization 0 of {wp['teacher_forced_plan']}" if c.regime == "teacher_forced" else ""
    return {"compared": (f"each model's {c.regime_label} predictions against the ground-truth world's realized "
                         f"futures of the same episodes and plans"),
            "horizon": f"H = {wp['horizon']} steps" + tf,
            "sample counts": (f"N = {wp['n_episodes']} episodes x {len(wp['plans'])} plans "
                              f"({', '.join(wp['plans'])}); M = {wp['num_futures']} realized futures per plan; "
                              f"K samples: {ks}")}


def _dynamics(c: CardContext) -> dict[str, str]:
    d = c.dyn
    return {"compared": "state predictions against the true simulator from the same states and actions",
            "horizon": f"{d['horizon']} steps; counterfactual horizon {d['counterfactual_horizon']}",
            "sample counts": f"{d['n_episodes']} dynamics episodes, {d['n_random_plans']} random plan(s)"}


def _control(c: CardContext) -> dict[str, str]:
    d = c.dyn
    return {"compared": "task cost in the real world of MPC planning with each model (ground_truth: the simulator)",
            "horizon": f"{d['control_steps']} steps per episode; plans of {d['plan_horizon']} steps",
            "sample counts": f"{d['control_episodes']} control episodes per task; {d['n_plans']} plans per step"}


def _probe(c: CardContext) -> dict[str, str]:
    d = c.dyn
    return {"compared": "the probed invariant on each model's zero-action rollouts, the true world first",
            "horizon": f"{d['probe_horizon']} steps",
            "window": (f"w in {d['probe_windows']}, tolerance {d['probe_tolerance']}, a window is used only "
                       f"if the true world's flag rate stays <= {d['probe_max_true_rate']}")}


#: Fields by the resampling unit of the metric's rows (anything else is a probe).
UNIT_FIELDS: dict[str, Callable[[CardContext], dict[str, str]]] = {
    "observation": _observation, "dynamics": _dynamics, "control": _control}


def _interval(c: CardContext) -> dict[str, str]:
    r, boot = c.rows.iloc[0], c.protocol["bootstrap"]
    ncl = sorted(set(int(x) for x in c.rows.n_clusters)) if "n_clusters" in c.rows else []
    clusters = "-".join(map(str, (ncl[0], ncl[-1]))) if len(ncl) > 1 else ncl[0] if ncl else "?"
    methods = list(dict.fromkeys(c.rows.method)) if "method" in c.rows else [r.method]
    if len(methods) > 1:       # KID: the boundary interval near 0, the bootstrap-t far from it, per model
        per = "; ".join(f"{m}: {', '.join(sorted(set(map(str, c.rows.source[c.rows.method == m]))))}"
                        for m in methods)
        method = f"{' or '.join(methods)} bootstrap ({per})"
    else:
        method = f"{methods[0]} bootstrap"
    return {"interval": (f"{method}, B = {int(r.n_resamples)}, {r.confidence_level:.0%}, resampling "
                         f"unit: {r.resampling_unit} ({clusters} clusters), paired across the world's models, "
                         f"seed {boot['seed']}"
                         + (BOUNDARY_NOTE if "boundary" in methods else "")
                         + (STUDENTIZED_NOTE if "bootstrap-t" in methods else "")
                         + (RANKS_NOTE if "bootstrap-t" in methods and "boundary" not in methods else "")),
            "strata in the resampling": boot.get("strata", "none")}


BOUNDARY_NOTE = ("; boundary interval: each replicate split into its linear part in the episode multiplicities and "
                 "the degenerate rest, and each candidate value accepted when the estimate is plausible with the "
                 "linear part shrunk to its size there (it vanishes at 0), so that the interval covers a true 0 at "
                 "about the nominal level (benchmarks/coverage.py); where it admits a positive distance, its upper "
                 "end is at least the percentile interval's (recentred on the estimate), which reaches a real "
                 "difference the estimate understates; the paired differences and ranks come from the replicates "
                 "themselves")
#: BOUNDARY_NOTE's last clause, for a card whose rows all carry the bootstrap-t.
RANKS_NOTE = "; the paired differences and ranks come from the replicates themselves"
STUDENTIZED_NOTE = (f"; bootstrap-t (KID far from 0, where the replicates' linear part carries over "
                    f"{STUDENTIZE_LINEAR_SHARE:.0%} of their variance): each replicate studentized by its own infinitesimal-jackknife standard error, the "
                    "interval T - t se from the quantiles of t, which corrects the estimate's skew where the boundary "
                    "interval was too narrow (benchmarks/kid_interval_variants.py)")


# ----------------------------------------------------------------------------- fields a metric names

def _frames(c: CardContext) -> dict[str, str]:
    return {"resolution and data range": (f"frames {c.wp['frame_shape']} stored as {c.wp['frame_dtype']}, "
                                          f"decoded to [0, 1], L = {c.sc.get('data_range', 1.0):g}")}


def _encoder(c: CardContext) -> dict[str, str]:
    enc = c.enc
    return {"encoder": f"{enc['encoder']} ({enc['kind']}, {enc.get('returns', 'features')})",
            "weights sha256": enc.get("weights_sha256") or "none: a weight-free encoder",
            "preprocessing": _short(enc.get("preprocessing", {})),
            "precision": {"fp32": "fp32 (the reference)", "bf16": "bf16 autocast (opt-in; embeddings rounded)",
                          "tf32": "TF32 matmuls and convolutions (opt-in, CUDA)"}.get(
                              enc.get("precision", "fp32"), str(enc.get("precision"))),
            "clip length and frame rate": (f"{_short(enc['clip'])} at {enc.get('frame_rate')} fps"
                                           if enc.get("clip") else "single frames (no clip)"),
            "comparability": ("comparable to published FID/FVD numbers with the same preprocessing"
                              if enc.get("comparable_to_published") else
                              "NOT comparable to published FID/FVD (weight-free encoder)")}


def _no_selection(c: CardContext) -> dict[str, str]:
    if c.unit != "observation":
        return {}
    return {"K and selection rule": "no selection: errors average every (sample, realized future) pair"}


def _views(c: CardContext) -> dict[str, str]:
    sc = c.sc
    return {"views and strata": (f"{sc.get('distributional', '')}; strata: {sc.get('strata')} "
                                 f"(bins {c.wp['distributional'].get('action_bins', sc.get('action_bins'))}) with {sc.get('strata_weights')} weights; "
                                 f"strata under {sc.get('min_stratum_count')} rows or with n <= d flagged, kept")}


#: Every field a registry entry may name in ``card``, in the order a card shows them.
CARD_FIELDS: dict[str, Callable[[CardContext], dict[str, str]]] = {
    "frames": _frames,
    "ssim_window": lambda c: {"window": _short(c.sc.get("ssim", {}))},
    "psnr_cap": lambda c: {"PSNR cap": f"{c.sc.get('psnr_cap_db', 100):g} dB for an exact match"},
    "best_of_k_rule": lambda c: {"K and selection rule": c.sc.get("best_of_k", "oracle")},
    "no_selection": _no_selection,
    "lpips_backbone": lambda c: {"backbone": str(c.sc.get("lpips_protocol") or c.sc.get("lpips"))},
    "nll_base_measure": lambda c: {"base measure": c.wp.get("nll", {}).get("base_measure", "n/a")},
    "outcome_event": lambda c: {"event": f"{c.wp.get('outcome_event')}; {c.sc.get('event_forecast', '')}"},
    "reward_event": lambda c: {"event": f"{c.wp.get('event')}, with the world's reward read from each prediction"},
    "encoder": _encoder,
    "views_strata": _views,
    "kid_estimator": lambda c: {"estimator": (
        "U-statistic over row pairs from distinct episodes, within each set and across the two: rows of one "
        "episode are correlated, and a prediction is never compared with the realized future of its own "
        "episode; replicates never pair an episode with itself or its copies. The published subset form "
        f"(torch-fidelity, {c.sc.get('kid_subsets')} subsets of {c.sc.get('kid_subset_size')} rows, all rows in "
        "one when they fit) pairs rows of one episode; it is kept as kid_published in the statistics table, "
        "for comparison with published numbers only")},
    "fd_inf_grid": lambda c: {"grid": (
        f"{c.sc.get('fd_inf_points')} episode counts M from {c.sc.get('fd_inf_min_fraction')} N to N, "
        f"{c.sc.get('fd_inf_draws')} draws of M episodes each (the same episodes on both sides); FD_M = a + b / M "
        "fitted, a reported: the FD as both sides grow without bound (Chong & Forsyth extrapolate the "
        "generated side only, which keeps the finite reference's bias). Interval: FD-infinity refitted "
        f"in each of B = {c.protocol['bootstrap'].get('n_resamples_fd_infinity')} resamplings, with M the "
        "effective count (sum c)^2 / sum c^2 of the drawn episodes' multiplicities c (copies are not new "
        "episodes)")},
    "fd_sample_counts": lambda c: {"sample counts across models": (
        "models differ in rows (K samples give K times the rows); the plug-in FD falls with N, so models are "
        "ranked and marked separated only on the bias-corrected forms, whose first-order bias is removed "
        "on each model's own N (the delete-one-episode jackknife)")},
    "fd_bias_check": lambda c: {"bias check": (
        "the jackknife's correction is repeated on 4 random halves of the episodes and what it leaves is "
        f"estimated (Richardson's two-scale estimate); above {BIAS_CHECK_LIMIT} standard deviations of the "
        "replicates and twice its own standard error (too few independent rows for the dimension), the row has "
        "no interval, paired difference, rank or rank interval, and takes no part in the others' (`leftover_bias`, "
        "`leftover_bias_se`, `bias_check` in reports/intervals.csv)")},
    "fd_zero_test": lambda c: {"test of 0": (
        f"a permutation test of FD = 0 on the plug-in, {c.protocol['bootstrap'].get('n_resamples_distributional')} "
        "permuted data sets with the data counted as one, decides whether the interval holds 0: a sign-flip test, "
        "in which each (plan, episode) trades its realized futures and the model's samples, which share the history "
        "and the actions, between the sides or not at random, each reweighted so that a side keeps the group's "
        "weight (under FD = 0 a group's contribution to the difference is, to first order, as likely reversed; "
        "exact where the trajectories are exchangeable and as many on each side); realized rows at a step where the "
        "model's row is "
        "invalid take no part. "
        f"Rejected (p <= {round(1 - c.protocol['bootstrap'].get('confidence_level', 0.95), 6):g}): "
        "an interval whose lower end was at or below 0 is opened at 0, (0, high], and one lying at or below 0 is "
        "kept as it is; accepted: it is widened to "
        "hold 0 (`p_value` in reports/intervals.csv). A control built from another episode's state has no such "
        "unit, no test, and keeps the boundary interval")},
    "prdc_k": lambda c: {"k": str(c.sc.get("prdc_k"))},
    "prdc_radii": lambda c: {"radii": (
        "the k-NN radii of both sets are computed once on all rows and held fixed in the bootstrap "
        "replicates (ratios of per-episode sums): the interval leaves out the radii's own sampling "
        "variation, so it is narrower than a full resampling")},
}
#: Fields a registry entry may name that follow the interval's (how the interval treats the estimator).
AFTER_INTERVAL: dict[str, Callable[[CardContext], dict[str, str]]] = {
    "fd_estimator": lambda c: {"estimator": c.protocol["bootstrap"].get("distributional", "")},
}


def protocol_card(world: str, wp: dict[str, Any], protocol: dict[str, Any], metric: str, regime: str,
                  rows: pd.DataFrame) -> dict[str, str]:
    """What was compared, how, with how many samples, and how the interval was made, for one metric."""
    c = CardContext(world, wp, protocol, metric, regime, rows)
    unknown = set(c.info.card) - set(CARD_FIELDS) - set(AFTER_INTERVAL)
    if unknown:
        raise WmevalError(f"metric registry: {metric!r} names card fields {sorted(unknown)} that no renderer "
                          "in wmeval.report.cards knows")
    card = {**_head(c), **UNIT_FIELDS.get(c.unit, _probe)(c)}
    for name, field in CARD_FIELDS.items():
        if name in c.info.card:
            card.update(field(c))
    card.update(_interval(c))
    for name, field in AFTER_INTERVAL.items():
        if name in c.info.card:
            card.update(field(c))
    return card


def protocol_cards(intervals: pd.DataFrame, protocol: dict[str, Any]) -> dict[str, dict[str, dict[str, dict]]]:
    """``{world: {metric: {regime: card}}}`` for every metric with an interval."""
    out: dict = {}
    for (world, metric, regime), rows in intervals.groupby(["world", "metric", "regime"], sort=True):
        if world in protocol["worlds"]:
            out.setdefault(world, {}).setdefault(metric, {})[regime] = protocol_card(
                world, protocol["worlds"][world], protocol, metric, regime, rows)
    return out
