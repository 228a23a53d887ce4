"""Metric functions (pure, over arrays) and the metric registry.

Every metric has an entry in :data:`REGISTRY` with its direction
(``higher_is_better``), unit, layer and a one-line definition; the report reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
    """

    name: str
    higher_is_better: bool | None
    unit: str
    layer: str
    definition: str
    aggregate: str = "mean"
    target: float | None = None
    summary_t: str | None = None

    def badness(self, value):
        """A number that is smaller for better values (for ranking); elementwise on arrays."""
        v = np.asarray(value, dtype=np.float64)
        if self.higher_is_better is None:
            with np.errstate(divide="ignore", invalid="ignore"):
                out = np.where(v > 0, np.abs(np.log(np.where(v > 0, v, 1.0) / self.target)), np.inf)
            out = np.where(np.isnan(v), np.nan, out)
        else:
            out = -v if self.higher_is_better else v
        return float(out) if out.ndim == 0 else out

    @property
    def arrow(self) -> str:
        return "→1" if self.higher_is_better is None else ("↑" if self.higher_is_better else "↓")


REGISTRY: dict[str, MetricInfo] = {
    m.name: m for m in (
        MetricInfo("state_mse", False, "state units^2", "paired",
                   "mean over state dimensions of the squared error of the predicted state"),
        MetricInfo("state_rmse", False, "state units", "paired",
                   "square root of the mean over episodes of state_mse", aggregate="sqrt_mean"),
        MetricInfo("pixel_mse", False, "(intensity in [0, 1])^2", "paired",
                   "mean over pixels and channels of the squared frame error, frames in [0, 1] (L = 1)"),
        MetricInfo("feature_mse", False, "encoder units^2", "paired",
                   "mean over embedding dimensions of the squared error of the frame embedding"),
        MetricInfo("rollout_state_rmse", False, "state units", "rollout",
                   "open-loop state RMSE over dynamics episodes at each step (seed 002 layer 2); "
                   "headline at the last step", aggregate="sqrt_mean", summary_t="horizon"),
        MetricInfo("action_sensitivity", None, "ratio", "dynamics",
                   "mean predicted one-step spread between the two actions of a counterfactual pair over "
                   "the mean real spread (seed 002 layer 4); 1 is ideal, 0 means the action is ignored",
                   aggregate="ratio", target=1.0),
        MetricInfo("counterfactual_cosine", True, "cosine", "dynamics",
                   "cosine between predicted and true differences of the two futures of a counterfactual "
                   "pair (seed 002 layer 5); undefined for an episode where either difference vanishes "
                   "(a model that ignores the action), which is then counted out", summary_t="counterfactual_horizon"),
        MetricInfo("counterfactual_gap", False, "state units", "dynamics",
                   "norm of (predicted difference - true difference) of a counterfactual pair",
                   summary_t="counterfactual_horizon"),
        MetricInfo("control_cost", False, "task cost", "control",
                   "mean per-step task cost in the real world of random-shooting MPC that plans with the "
                   "model (seed 002 layer 6); ground_truth plans with the true simulator"),
        MetricInfo("probe_flag_rate", False, "share of steps", "physics",
                   "share of steps where the probed quantity rises over the window (seed 002 layer 7); "
                   "only windows calibrated on the true world judge models"),
        MetricInfo("reward_mse", False, "reward^2", "task",
                   "squared error of the world's reward read from the prediction, open loop (seed 003)"),
        MetricInfo("event_precision", True, "share", "task",
                   "predicted reward events (reward > threshold) that are real, pooled over steps", aggregate="ratio"),
        MetricInfo("event_recall", True, "share", "task",
                   "real reward events that are predicted, pooled over steps", aggregate="ratio"),
        MetricInfo("peak_time_offset", False, "steps", "task",
                   "|argmax_t predicted reward - argmax_t real reward| per open-loop rollout"),
    )
}


def expected_pairwise_mse(pred: np.ndarray, target: np.ndarray, event_ndim: int) -> np.ndarray:
    """Mean squared error averaged over every (prediction sample, realized future) pair.

    Args:
        pred: ``(..., K, *event)``: K predicted samples.
        target: ``(..., M, *event)``: M realized futures (M = 1 for a single reference).
        event_ndim: number of trailing event axes averaged over (3 for frames
            ``(H_img, W, C)``, 1 for states ``(D,)``).

    Returns:
        ``(...)`` float64, ``mean_{k, m} mean_event (pred_k - target_m)^2``, computed as
        ``E|p|^2 + E|g|^2 - 2 <E p, E g>`` per element without forming the K x M pairs.
        For K = M = 1 it is the plain MSE.

    >>> float(expected_pairwise_mse(np.array([[0.0], [1.0]]), np.array([[0.0]]), 1))
    0.5
    """
    p = np.asarray(pred, dtype=np.float64)
    g = np.asarray(target, dtype=np.float64)
    if p.ndim != g.ndim or p.shape[: -event_ndim - 1] != g.shape[: -event_ndim - 1] \
            or p.shape[p.ndim - event_ndim:] != g.shape[g.ndim - event_ndim:]:
        raise ValueError(f"pred {p.shape} and target {g.shape} may differ only in the sample axis "
                         f"(axis {-event_ndim - 1})")
    k = p.ndim - event_ndim - 1
    ev = tuple(range(k, p.ndim))
    pp = np.mean(p**2, axis=ev)
    gg = np.mean(g**2, axis=ev)
    cross = np.mean(p.mean(axis=k) * g.mean(axis=k), axis=tuple(range(k, p.ndim - 1)))
    return np.maximum(pp + gg - 2.0 * cross, 0.0)


# ----------------------------------------------------------------------------- Frechet distance

@dataclass(frozen=True)
class GaussianStats:
    """Sufficient statistics of a feature set: mean ``(d,)``, covariance ``(d, d)`` (float64), count."""

    mu: np.ndarray
    sigma: np.ndarray
    n: int

    @property
    def rank_deficient(self) -> bool:
        """A sample covariance of n vectors has rank at most n - 1: singular when n <= d."""
        return self.n <= self.mu.shape[0]


def gaussian_stats(features: np.ndarray) -> GaussianStats:
    """Mean and unbiased covariance (``ddof = 1``, as pytorch-fid) of ``features`` ``(n, d)``, in float64.

    >>> s = gaussian_stats(np.array([[0.0, 0.0], [2.0, 2.0]]))
    >>> s.mu.tolist(), s.sigma.tolist(), s.n
    ([1.0, 1.0], [[2.0, 2.0], [2.0, 2.0]], 2)
    """
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"features must be (n >= 2, d), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("features contain non-finite values")
    mu = x.mean(axis=0)
    xc = x - mu
    return GaussianStats(mu, xc.T @ xc / (x.shape[0] - 1), x.shape[0])


def _sqrtm_psd(m: np.ndarray) -> np.ndarray:
    """Symmetric PSD square root through ``eigh`` (negative rounding eigenvalues clipped to 0)."""
    w, v = np.linalg.eigh((m + m.T) / 2)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


class FrechetReference:
    """The reference side of Frechet distances, with ``sqrt(sigma1)`` computed once.

    Comparing several models with one reference reuses the square root, so each
    further distance costs two matrix products and one symmetric eigenvalue solve.
    """

    def __init__(self, mu: np.ndarray, sigma: np.ndarray) -> None:
        self.mu = np.asarray(mu, dtype=np.float64)
        self.sigma = np.asarray(sigma, dtype=np.float64)
        _check_moments(self.mu, self.sigma, "reference")
        self.sqrt_sigma = _sqrtm_psd(self.sigma)
        self.trace = float(np.trace(self.sigma))

    def distance(self, mu: np.ndarray, sigma: np.ndarray) -> float:
        mu, sigma = np.asarray(mu, dtype=np.float64), np.asarray(sigma, dtype=np.float64)
        _check_moments(mu, sigma, "compared")
        if mu.shape != self.mu.shape:
            raise ValueError(f"dimension mismatch: reference {self.mu.shape}, compared {mu.shape}")
        m = self.sqrt_sigma @ sigma @ self.sqrt_sigma
        lam = np.linalg.eigvalsh((m + m.T) / 2)
        tr_sqrt = float(np.sum(np.sqrt(np.clip(lam, 0.0, None))))
        diff = self.mu - mu
        return float(diff @ diff + self.trace + np.trace(sigma) - 2.0 * tr_sqrt)


def _check_moments(mu: np.ndarray, sigma: np.ndarray, side: str) -> None:
    if mu.ndim != 1 or sigma.shape != (mu.shape[0], mu.shape[0]):
        raise ValueError(f"{side}: mu {mu.shape} and sigma {sigma.shape} must be (d,) and (d, d)")
    if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(sigma))):
        raise ValueError(f"{side}: moments contain non-finite values")


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray) -> float:
    """Squared 2-Wasserstein (Frechet) distance between N(mu1, sigma1) and N(mu2, sigma2), exact in float64.

    ``|mu1 - mu2|^2 + tr(sigma1) + tr(sigma2) - 2 tr((sqrt(sigma1) sigma2 sqrt(sigma1))^(1/2))``, the
    last term from the eigenvalues of the symmetric PSD matrix ``sqrt(sigma1) sigma2 sqrt(sigma1)``:
    no complex numbers, and singular (rank-deficient, n <= d) covariances are handled (their
    zero eigenvalues contribute nothing). Lower is better; 0 for identical moments.

    Args:
        mu1, mu2: ``(d,)`` means. sigma1, sigma2: ``(d, d)`` covariances.

    >>> round(frechet_distance(np.zeros(2), np.eye(2), np.ones(2), 4 * np.eye(2)), 12)
    4.0
    """
    return FrechetReference(mu1, sigma1).distance(mu2, sigma2)
