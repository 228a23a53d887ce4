"""The metric registry: direction, unit, layer, definition and aggregate of every metric the report shows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Shown:
    """One scorecard column a metric declares: in which layer table, under which label, for which rows.

    ``label`` and ``condition`` are templates over the world's protocol: ``{H}`` (observation horizon),
    ``{Hd}`` (dynamics horizon), ``{Hr}`` (an environment's frame rollout horizon), ``{cf}``
    (counterfactual horizon); ``{pair}``, ``{task}`` and
    ``{view}`` expand to one column per counterfactual pair, control task or distributional view;
    ``{opair}`` to one per counterfactual pair the observation protocol rolled out (no state or branching needed).

    Attributes:
        section: the layer table (``observation``, ``image``, ``stochastic``, ``distributional``,
            ``dynamics``, ``task``).
        headline: the column is the layer's headline (the at-a-glance and ranking tables); a string
            restricts it to expanded conditions starting with it.
    """

    section: str
    label: str
    regime: str = "open_loop"
    condition: str = "all"
    headline: bool | str = False


#: Values this close, relative to the larger, tie wherever models are ordered (ranks, rank intervals, P(better),
#: P(tie), the scorecard's ranking, a sweep's flipped pairs): float64 does not resolve them, and a point and its
#: replicates are summed in different orders. Two pendulum models equal in exact arithmetic (action sensitivity)
#: came out an ulp apart: one ranked 2 with a rank interval of [1-1], P(better) 0.02 on differences at that level.
TIE_RTOL = 1e-12


def near_equal(a, b, atol: float = 0.0) -> np.ndarray:
    """Elementwise: equal (infinities of one sign included), or finite and within ``TIE_RTOL`` of each other relative
    to the larger, or within ``atol`` (:attr:`MetricInfo.tie_atol`, for badness in log space)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.abs(a - b)
        close = np.isfinite(a) & np.isfinite(b) & ((gap <= TIE_RTOL * np.maximum(np.abs(a), np.abs(b)))
                                                   | (gap <= atol))
    return (a == b) | close


@dataclass(frozen=True)
class MetricInfo:
    """Registry entry: how a metric is read and aggregated.

    Attributes:
        higher_is_better: direction; ``None`` when the ideal is ``target`` (e.g. a ratio of 1).
        aggregate: how per-episode ``(value, denominator)`` pairs combine over episodes:
            ``mean`` (denominator 1), ``ratio`` (sum of values / sum of denominators), or
            ``sqrt_mean`` (square root of the mean: an RMSE from per-episode MSEs).
        summary_t: for curve metrics, which step the headline number is taken at
            (``"horizon"`` or ``"counterfactual_horizon"``); ``None`` for per-episode metrics.
        shown: the scorecard columns that show this metric (:class:`Shown`).
        card: the protocol-card fields this metric shows beyond those every card has (the
            renderers are :data:`wmeval.report.cards.CARD_FIELDS`): e.g. ``frames`` (resolution and
            data range), ``encoder`` (encoder, weights, preprocessing, comparability).
    """

    name: str
    higher_is_better: bool | None
    unit: str
    layer: str
    definition: str
    aggregate: str = "mean"
    target: float | None = None
    summary_t: str | None = None
    card: tuple[str, ...] = ()
    shown: tuple[Shown, ...] = ()

    @property
    def uses_encoder(self) -> bool:
        """Computed on encoder features: its value, and a model ranking by it, depend on the encoder."""
        return "encoder" in self.card

    @property
    def tie_atol(self) -> float:
        """The absolute tolerance (:func:`near_equal`) on :meth:`badness` under which two values tie: ``TIE_RTOL`` for
        a metric with a target, whose badness ``|log(v / target)|`` is near 0 close to the target (two values
        ``TIE_RTOL`` apart differ by about that much there); 0 otherwise (the values' own relative tolerance)."""
        return TIE_RTOL if self.higher_is_better is None and self.target is not None else 0.0

    def badness(self, value):
        """A number that is smaller for better values (for ranking); elementwise on arrays."""
        v = np.asarray(value, dtype=np.float64)
        if self.higher_is_better is None and self.target is None:
            out = np.full(v.shape, np.nan)            # a diagnostic without a direction: never ranked
        elif self.higher_is_better is None:
            with np.errstate(divide="ignore", invalid="ignore"):
                out = np.where(v > 0, np.abs(np.log(np.where(v > 0, v, 1.0) / self.target)), np.inf)
            out = np.where(np.isnan(v), np.nan, out)
        else:
            out = -v if self.higher_is_better else v
        return float(out) if out.ndim == 0 else out

    @property
    def arrow(self) -> str:
        if self.higher_is_better is None:
            return "·" if self.target is None else f"→{self.target:g}"
        return "↑" if self.higher_is_better else "↓"

    @property
    def ranked(self) -> bool:
        return self.higher_is_better is not None or self.target is not None


REGISTRY: dict[str, MetricInfo] = {
    m.name: m for m in (
        MetricInfo("state_mse", False, "state units^2", "paired",
                   "mean over state dimensions of the squared error of the predicted state"),
        MetricInfo("state_rmse", False, "state units", "paired",
                   "square root of the mean over episodes of state_mse", aggregate="sqrt_mean",
                   shown=(Shown("observation", "one-step state RMSE", "teacher_forced", headline=True),
                          Shown("observation", "open-loop state RMSE (H={H})", headline=True))),
        MetricInfo("pixel_mse", False, "(intensity in [0, 1])^2", "paired",
                   "mean over pixels and channels of the squared frame error, frames in [0, 1] (L = 1)",
                   card=("frames", "no_selection"),
                   shown=(Shown("observation", "one-step pixel MSE", "teacher_forced", headline=True),
                          Shown("observation", "open-loop pixel MSE (H={H})", headline=True),
                          Shown("stochastic", "mean-over-samples MSE"))),
        MetricInfo("feature_mse", False, "encoder units^2", "paired",
                   "mean over embedding dimensions of the squared error of the frame embedding",
                   card=("frames", "encoder"),
                   shown=(Shown("observation", "open-loop feature MSE"),)),
        MetricInfo("rollout_state_rmse", False, "state units", "rollout",
                   "open-loop state RMSE over dynamics episodes at each step (seed 002 layer 2); "
                   "headline at the last step", aggregate="sqrt_mean", summary_t="horizon",
                   shown=(Shown("dynamics", "rollout RMSE @{Hd}, random actions", condition="random @t={Hd}",
                                headline=True),
                          Shown("dynamics", "rollout RMSE @{Hd}, planner's actions", condition="planner @t={Hd}",
                                headline=True))),
        MetricInfo("rollout_pixel_rmse", False, "intensity in [0, 1]", "rollout",
                   "open-loop pixel RMSE (frames in [0, 1], every sample against the real frames) at each step from "
                   "the control starts of an environment, under random actions and under the actions the "
                   "model's own MPC took on the first control task (seed 002 layer 2 on frames); headline at the "
                   "last step", aggregate="sqrt_mean", summary_t="rollout_horizon", card=("frames",),
                   shown=(Shown("dynamics", "pixel rollout RMSE @{Hr}, random actions", condition="random @t={Hr}",
                                headline=True),
                          Shown("dynamics", "pixel rollout RMSE @{Hr}, planner's actions",
                                condition="planner @t={Hr}", headline=True))),
        MetricInfo("pixel_action_sensitivity", None, "ratio", "observation",
                   "energy distance between the model's predicted frames under the two plans of a counterfactual "
                   "pair from the same o_0 (L2 over the frame in [0, 1], steps 1..H; sampling noise removed), over "
                   "the same for the realized futures, from the observation protocol's open-loop rows; needs no "
                   "state: 1 is ideal, 0 means the action is ignored; blind to the direction of the effect",
                   aggregate="ratio", target=1.0, card=("frames",),
                   shown=(Shown("observation", "action sensitivity, pixels ({opair})", condition="{opair}"),)),
        MetricInfo("feature_action_sensitivity", None, "ratio", "observation",
                   "the same energy-distance ratio in the encoder's feature space (L2 over the embedding, steps 1..H)",
                   aggregate="ratio", target=1.0, card=("encoder",),
                   shown=(Shown("observation", "action sensitivity, features ({opair})", condition="{opair}"),)),
        MetricInfo("pixel_counterfactual_cosine", True, "cosine", "observation",
                   "cosine between the predicted and the realized difference of the futures under the two plans of "
                   "a counterfactual pair from the same o_0 (sample means, frames in [0, 1] flattened; seed 002 layer "
                   "5 on frames); per step, headline at the protocol horizon; 0 for a model that ignores the action; an "
                   "episode where the realized difference vanishes is counted out at that step",
                   summary_t="protocol_horizon", card=("frames",),
                   shown=(Shown("observation", "counterfactual cosine, pixels @{H} ({opair})",
                                condition="{opair} @t={H}"),)),
        MetricInfo("pixel_counterfactual_gap", False, "intensity in [0, 1]", "observation",
                   "root mean square over pixels of (predicted difference - realized difference) of the futures of a "
                   "counterfactual pair (sample means); a model that ignores the action scores the RMS of the real "
                   "effect", summary_t="protocol_horizon", card=("frames",),
                   shown=(Shown("observation", "counterfactual gap, pixels @{H} ({opair})",
                                condition="{opair} @t={H}"),)),
        MetricInfo("feature_counterfactual_cosine", True, "cosine", "observation",
                   "the counterfactual cosine in the encoder's feature space (embeddings of the predicted and "
                   "realized frames)", summary_t="protocol_horizon", card=("encoder",),
                   shown=(Shown("observation", "counterfactual cosine, features @{H} ({opair})",
                                condition="{opair} @t={H}"),)),
        MetricInfo("feature_counterfactual_gap", False, "encoder units", "observation",
                   "root mean square over embedding dimensions of (predicted difference - realized difference) of "
                   "a counterfactual pair's futures", summary_t="protocol_horizon", card=("encoder",),
                   shown=(Shown("observation", "counterfactual gap, features @{H} ({opair})",
                                condition="{opair} @t={H}"),)),
        MetricInfo("action_sensitivity", None, "ratio", "dynamics",
                   "mean predicted one-step spread between the two actions of a counterfactual pair over "
                   "the mean real spread (seed 002 layer 4); 1 is ideal, 0 means the action is ignored",
                   aggregate="ratio", target=1.0,
                   shown=(Shown("dynamics", "action sensitivity ({pair})", condition="{pair}", headline=True),)),
        MetricInfo("counterfactual_cosine", True, "cosine", "dynamics",
                   "cosine between predicted and true differences of the two futures of a counterfactual "
                   "pair (seed 002 layer 5); 0 for a model that ignores the action (no predicted difference); "
                   "undefined for an episode where the true difference vanishes, which is then counted out", summary_t="counterfactual_horizon",
                   shown=(Shown("dynamics", "counterfactual cosine @{cf}", condition="{pair} @t={cf}"),)),
        MetricInfo("counterfactual_gap", False, "state units", "dynamics",
                   "norm of (predicted difference - true difference) of a counterfactual pair",
                   summary_t="counterfactual_horizon",
                   shown=(Shown("dynamics", "counterfactual gap @{cf}", condition="{pair} @t={cf}", headline=True),)),
        MetricInfo("control_cost", False, "task cost", "control",
                   "mean per-step task cost in the real world of random-shooting MPC that plans with the "
                   "model (seed 002 layer 6); ground_truth plans with the true simulator",
                   shown=(Shown("dynamics", "MPC cost: {task}", "closed_loop", "{task}", headline=True),)),
        MetricInfo("probe_flag_rate", False, "share of steps", "physics",
                   "share of steps where the probed quantity rises over the window (seed 002 layer 7); "
                   "only windows calibrated on the true world judge models"),
        MetricInfo("reward_mse", False, "reward^2", "task",
                   "squared error of the world's reward read from the prediction, open loop (seed 003)",
                   shown=(Shown("task", "reward MSE", headline=True),)),
        MetricInfo("event_precision", True, "share", "task",
                   "predicted reward events (reward > threshold) that are real, pooled over steps", aggregate="ratio",
                   card=("reward_event",),
                   shown=(Shown("task", "event precision"),)),
        MetricInfo("event_recall", True, "share", "task",
                   "real reward events that are predicted, pooled over steps", aggregate="ratio",
                   card=("reward_event",),
                   shown=(Shown("task", "event recall"),)),
        MetricInfo("peak_time_offset", False, "steps", "task",
                   "|argmax_t predicted reward - argmax_t real reward| per open-loop rollout",
                   shown=(Shown("task", "peak time offset"),)),
        # Seed 000's observation layer: paired image scores (frames in [0, 1], L = 1).
        MetricInfo("psnr", True, "dB", "paired",
                   "mean of per-frame PSNR 10 log10(L^2 / MSE_frame) (per sequence, then over sequences); "
                   "an exact match counts as the declared cap of 100 dB",
                   card=("frames", "psnr_cap", "no_selection"),
                   shown=(Shown("image", "one-step PSNR (frame mean), dB", "teacher_forced"),
                          Shown("image", "open-loop PSNR (frame mean)"))),
        MetricInfo("psnr_pooled", True, "dB", "paired",
                   "PSNR of the pooled MSE: 10 log10(L^2 / mean over episodes of pixel_mse)", aggregate="psnr",
                   card=("frames", "psnr_cap", "no_selection"),
                   shown=(Shown("image", "one-step PSNR (pooled MSE), dB", "teacher_forced"),
                          Shown("image", "open-loop PSNR (pooled)"))),
        MetricInfo("psnr_gap", None, "dB", "paired",
                   "psnr - psnr_pooled = 10 log10(AM / GM) of the frame MSEs for equal lengths; >= 0, "
                   "0 when every frame has the same error (a convention gap, not a quality)",
                   card=("frames", "psnr_cap", "no_selection"),
                   shown=(Shown("image", "one-step PSNR gap", "teacher_forced"),)),
        MetricInfo("ssim", True, "SSIM", "paired",
                   "mean SSIM, Gaussian window 11, sigma 1.5, K1 0.01, K2 0.03, L = 1, population "
                   "covariances, 5-px border excluded, channels averaged (skimage's definition)",
                   card=("frames", "ssim_window", "no_selection"),
                   shown=(Shown("image", "one-step SSIM", "teacher_forced"),
                          Shown("image", "open-loop SSIM", headline=True))),
        MetricInfo("lpips", False, "LPIPS", "paired",
                   "LPIPS distance (lpips package, v0.1 linear layers, backbone in the protocol), inputs in [-1, 1]",
                   card=("frames", "no_selection", "lpips_backbone"),
                   shown=(Shown("image", "one-step LPIPS", "teacher_forced"),
                          Shown("image", "open-loop LPIPS"))),
        # Stochastic futures.
        MetricInfo("single_sample_mse", False, "(intensity)^2", "stochastic",
                   "open-loop sequence MSE of sample 0 alone against each realized future (a deployment "
                   "that draws one sample)", card=("frames", "no_selection"),
                   shown=(Shown("stochastic", "single-sample MSE"),)),
        MetricInfo("best_of_k_mse", False, "(intensity)^2", "stochastic",
                   "oracle best-of-K: per realized future, the minimum sequence MSE over the model's K "
                   "samples (K = protocol.num_samples for every model); selection uses the future, which no "
                   "deployment can", card=("frames", "best_of_k_rule"),
                   shown=(Shown("stochastic", "best-of-K MSE (oracle)", headline=True),)),
        MetricInfo("best_of_k_curve", False, "(intensity)^2", "stochastic",
                   "best-of-K sequence MSE over nested pools K = 1..K_max (the first K samples); "
                   "cannot increase with K", card=("frames", "best_of_k_rule")),
        MetricInfo("sample_diversity", None, "(intensity)^2", "stochastic",
                   "mean squared pixel distance between distinct samples (ground_truth: between realized "
                   "futures): a spread, not coverage; no direction, compare with ground_truth",
                   card=("frames", "no_selection"),
                   shown=(Shown("stochastic", "sample diversity"),)),
        MetricInfo("nll", False, "nats per step", "probabilistic",
                   "negative log-likelihood of each realized step given the realized history (teacher "
                   "forced), base measure in the protocol; zero mass gives +inf, never clipped",
                   card=("nll_base_measure",),
                   shown=(Shown("stochastic", "NLL, nats/step", "teacher_forced", headline=True),)),
        MetricInfo("event_brier", False, "probability^2", "probabilistic",
                   "Brier score of the declared outcome event: (share of K samples with the event - "
                   "event indicator of each realized future)^2", card=("outcome_event",),
                   shown=(Shown("stochastic", "event Brier"),)),
        MetricInfo("event_frequency", None, "share", "probabilistic",
                   "reliability: observed event frequency among forecasts in a bin (condition p=...)",
                   aggregate="ratio", card=("outcome_event",)),
        MetricInfo("event_forecast", None, "share", "probabilistic",
                   "reliability: mean forecast probability of the bin", aggregate="ratio", card=("outcome_event",)),
        # Distributional (features stage embeddings).
        MetricInfo("fd", False, "encoder units^2", "distributional",
                   "Frechet distance between Gaussian fits of real and predicted embeddings (plug-in, "
                   "biased upward at finite N and falling with N; for comparison with published numbers), "
                   "pooled or within one stratum",
                   card=("frames", "encoder", "views_strata", "fd_sample_counts", "fd_estimator"),
                   shown=(Shown("distributional", "{view}: FD pooled (plug-in)", condition="{view}:pooled"),)),
        MetricInfo("fd_stratified", False, "encoder units^2", "distributional",
                   "plug-in: sum over strata of w_s * FD_s with the declared weights (biased upward at finite "
                   "N; for comparison with published numbers)",
                   card=("frames", "encoder", "views_strata", "fd_sample_counts", "fd_estimator"),
                   shown=(Shown("distributional", "{view}: FD stratified (plug-in)", condition="{view}:uniform"),
                          Shown("distributional", "{view}: FD stratified (plug-in)",
                                condition="{view}:empirical"))),
        MetricInfo("fd_stratified_bias_corrected", False, "encoder units^2", "distributional",
                   "jackknife bias-corrected stratified FD, FD_strat minus the episode jackknife's bias "
                   "estimate (delete-one up to 32 episodes, else 32 groups), with the boundary interval: the "
                   "headline and the ranks (its interval covers; the plug-in's does not)",
                   card=("frames", "encoder", "views_strata", "fd_sample_counts", "fd_estimator", "fd_bias_check",
                         "fd_zero_test"),
                   shown=(Shown("distributional", "{view}: FD stratified, bias-corrected",
                                condition="{view}:uniform", headline="transition"),
                          Shown("distributional", "{view}: FD stratified, bias-corrected",
                                condition="{view}:empirical", headline="transition"))),
        MetricInfo("fd_bias_corrected", False, "encoder units^2", "distributional",
                   "jackknife bias-corrected pooled FD, FD minus the episode jackknife's bias estimate "
                   "(delete-one up to 32 episodes, else 32 groups), with the boundary interval",
                   card=("frames", "encoder", "views_strata", "fd_sample_counts", "fd_estimator", "fd_bias_check",
                         "fd_zero_test"),
                   shown=(Shown("distributional", "{view}: FD bias-corrected", condition="{view}:pooled"),)),
        MetricInfo("fd_infinity", False, "encoder units^2", "distributional",
                   "FD-infinity, both sides extrapolated: intercept of FD_M = a + b / M over subsets of M "
                   "episodes (the same episodes on both sides), its own bootstrap replicates",
                   card=("frames", "encoder", "views_strata", "fd_inf_grid", "fd_estimator"),
                   shown=(Shown("distributional", "{view}: FD-infinity", condition="{view}:pooled"),)),
        MetricInfo("kid", False, "encoder units^2", "distributional",
                   "unbiased MMD^2 with the kernel (x.y / d + 1)^3: the U-statistic over pairs of rows from "
                   "distinct episodes, within each set and across the two",
                   card=("frames", "encoder", "views_strata", "kid_estimator"),
                   shown=(Shown("distributional", "{view}: KID", condition="{view}:pooled"),)),
        MetricInfo("precision", True, "share", "distributional",
                   "share of predicted embeddings inside some real k-NN ball (Kynkaanniemi 2019)", aggregate="ratio",
                   card=("frames", "encoder", "views_strata", "prdc_k", "prdc_radii"),
                   shown=(Shown("distributional", "{view}: precision", condition="{view}:pooled"),)),
        MetricInfo("recall", True, "share", "distributional",
                   "share of real embeddings inside some predicted k-NN ball", aggregate="ratio",
                   card=("frames", "encoder", "views_strata", "prdc_k", "prdc_radii"),
                   shown=(Shown("distributional", "{view}: recall", condition="{view}:pooled"),)),
        MetricInfo("density", True, "balls per sample / k", "distributional",
                   "real k-NN balls containing each predicted embedding, over k (Naeem 2020); 1 when matched",
                   aggregate="ratio", card=("frames", "encoder", "views_strata", "prdc_k", "prdc_radii"),
                   shown=(Shown("distributional", "{view}: density", condition="{view}:pooled"),)),
        MetricInfo("coverage", True, "share", "distributional",
                   "share of real embeddings whose own k-NN ball contains a predicted one", aggregate="ratio",
                   card=("frames", "encoder", "views_strata", "prdc_k", "prdc_radii"),
                   shown=(Shown("distributional", "{view}: coverage", condition="{view}:pooled"),)),
    )
}
