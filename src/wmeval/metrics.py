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
        # Seed 000's observation layer: paired image scores (frames in [0, 1], L = 1).
        MetricInfo("psnr", True, "dB", "paired",
                   "mean of per-frame PSNR 10 log10(L^2 / MSE_frame) (per sequence, then over sequences); "
                   "an exact match counts as the declared cap of 100 dB"),
        MetricInfo("psnr_pooled", True, "dB", "paired",
                   "PSNR of the pooled MSE: 10 log10(L^2 / mean over episodes of pixel_mse)", aggregate="psnr"),
        MetricInfo("psnr_gap", None, "dB", "paired",
                   "psnr - psnr_pooled = 10 log10(AM / GM) of the frame MSEs for equal lengths; >= 0, "
                   "0 when every frame has the same error (a convention gap, not a quality)"),
        MetricInfo("ssim", True, "SSIM", "paired",
                   "mean SSIM, Gaussian window 11, sigma 1.5, K1 0.01, K2 0.03, L = 1, population "
                   "covariances, 5-px border excluded, channels averaged (skimage's definition)"),
        MetricInfo("lpips", False, "LPIPS", "paired",
                   "LPIPS distance (lpips package, v0.1 linear layers, backbone in the protocol), inputs in [-1, 1]"),
        # Stochastic futures.
        MetricInfo("single_sample_mse", False, "(intensity)^2", "stochastic",
                   "open-loop sequence MSE of sample 0 alone against each realized future (a deployment "
                   "that draws one sample)"),
        MetricInfo("best_of_k_mse", False, "(intensity)^2", "stochastic",
                   "oracle best-of-K: per realized future, the minimum sequence MSE over the model's K "
                   "samples (K = protocol.num_samples for every model); selection uses the future, which no "
                   "deployment can"),
        MetricInfo("best_of_k_curve", False, "(intensity)^2", "stochastic",
                   "best-of-K sequence MSE over nested pools K = 1..K_max (the first K samples); "
                   "cannot increase with K"),
        MetricInfo("sample_diversity", None, "(intensity)^2", "stochastic",
                   "mean squared pixel distance between distinct samples (ground_truth: between realized "
                   "futures): a spread, not coverage; no direction, compare with ground_truth"),
        MetricInfo("nll", False, "nats per step", "probabilistic",
                   "negative log-likelihood of each realized step given the realized history (teacher "
                   "forced), base measure in the protocol; zero mass gives +inf, never clipped"),
        MetricInfo("event_brier", False, "probability^2", "probabilistic",
                   "Brier score of the declared outcome event: (share of K samples with the event - "
                   "event indicator of each realized future)^2"),
        MetricInfo("event_frequency", None, "share", "probabilistic",
                   "reliability: observed event frequency among forecasts in a bin (condition p=...)",
                   aggregate="ratio"),
        MetricInfo("event_forecast", None, "share", "probabilistic",
                   "reliability: mean forecast probability of the bin", aggregate="ratio"),
        # Distributional (features stage embeddings).
        MetricInfo("fd", False, "encoder units^2", "distributional",
                   "Frechet distance between Gaussian fits of real and predicted embeddings (plug-in, "
                   "biased at finite N), pooled or within one stratum"),
        MetricInfo("fd_stratified", False, "encoder units^2", "distributional",
                   "sum over strata of w_s * FD_s with the declared weights"),
        MetricInfo("fd_bias_corrected", False, "encoder units^2", "distributional",
                   "bootstrap bias-corrected pooled FD, 2 FD - mean of replicates, with the basic interval"),
        MetricInfo("fd_infinity", False, "encoder units^2", "distributional",
                   "FD-infinity (Chong & Forsyth 2020): intercept of FD_N = a + b / N over the declared grid"),
        MetricInfo("kid", False, "encoder units^2", "distributional",
                   "unbiased MMD^2 with the kernel (x.y / d + 1)^3"),
        MetricInfo("precision", True, "share", "distributional",
                   "share of predicted embeddings inside some real k-NN ball (Kynkaanniemi 2019)", aggregate="ratio"),
        MetricInfo("recall", True, "share", "distributional",
                   "share of real embeddings inside some predicted k-NN ball", aggregate="ratio"),
        MetricInfo("density", True, "balls per sample / k", "distributional",
                   "real k-NN balls containing each predicted embedding, over k (Naeem 2020); 1 when matched",
                   aggregate="ratio"),
        MetricInfo("coverage", True, "share", "distributional",
                   "share of real embeddings whose own k-NN ball contains a predicted one", aggregate="ratio"),
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
    """The reference side of Frechet distances, factored once.

    ``tr((sqrt(S1) S2 sqrt(S1))^(1/2))`` is the sum of square roots of the eigenvalues of any
    symmetric matrix ``R^T S2 R`` with ``R R^T = S1``: they are the eigenvalues of ``S2 S1``.
    A full-rank reference uses its Cholesky factor ``R = L`` (a third of the cost of one
    symmetric eigendecomposition); a rank-deficient one (``n <= d``, or Cholesky failing) uses
    the symmetric PSD square root from ``eigh``, whose zero eigenvalues contribute nothing.
    Comparing several models with one reference reuses the factor, so each further
    distance costs one matrix product pair and one symmetric eigenvalue solve.

    Attributes:
        factor: ``"cholesky"`` or ``"eigh"``, which factorisation was used (for the protocol).
    """

    def __init__(self, mu: np.ndarray, sigma: np.ndarray, *, rank_deficient: bool = False) -> None:
        self.mu = np.asarray(mu, dtype=np.float64)
        self.sigma = np.asarray(sigma, dtype=np.float64)
        _check_moments(self.mu, self.sigma, "reference")
        self.trace = float(np.trace(self.sigma))
        sym = (self.sigma + self.sigma.T) / 2
        self.root, self.factor = None, "eigh"
        if not rank_deficient:
            try:
                self.root, self.factor = np.linalg.cholesky(sym), "cholesky"
            except np.linalg.LinAlgError:
                pass
        if self.root is None:
            self.root = _sqrtm_psd(sym)

    @property
    def sqrt_sigma(self) -> np.ndarray:
        """A square root ``R`` of the reference covariance (``R R^T = sigma``)."""
        return self.root

    def trace_sqrt(self, sigma: np.ndarray) -> float:
        """``tr((sqrt(sigma_ref) sigma sqrt(sigma_ref))^(1/2))``."""
        if self.factor == "cholesky" and self.root.shape[0] >= 512:
            # Triangular products (BLAS trmm): half the flops of two dense products (slower below d ~ 512).
            from scipy.linalg import blas

            if not hasattr(self, "_root_f"):
                self._root_f = np.asfortranarray(self.root)
            a = blas.dtrmm(1.0, self._root_f, np.asfortranarray(sigma), side=1, lower=1)      # sigma @ L
            m = blas.dtrmm(1.0, self._root_f, a, side=0, lower=1, trans_a=1)                   # L^T @ (.)
        else:
            m = self.root.T @ sigma @ self.root
        return _sum_sqrt_eig(m)

    def distance(self, mu: np.ndarray, sigma: np.ndarray) -> float:
        mu, sigma = np.asarray(mu, dtype=np.float64), np.asarray(sigma, dtype=np.float64)
        _check_moments(mu, sigma, "compared")
        if mu.shape != self.mu.shape:
            raise ValueError(f"dimension mismatch: reference {self.mu.shape}, compared {mu.shape}")
        diff = self.mu - mu
        return float(diff @ diff + self.trace + np.trace(sigma) - 2.0 * self.trace_sqrt(sigma))


@dataclass(frozen=True)
class CovarianceFactor:
    """Mean and covariance of a (weighted) row set, the covariance dense or as centred rows.

    ``rows`` ``A`` ``(r, d)`` with ``A^T A = sigma``: for rows ``x_i`` with weights (multiplicities)
    ``w_i``, ``A_i = sqrt(w_i / (n - 1)) (x_i - mu)`` with ``n = sum w_i``, which is the ``ddof = 1``
    covariance of the data set in which row ``i`` occurs ``w_i`` times. When ``r < d`` this is a
    cheaper form than ``sigma`` and it keeps the distance in the r-dimensional sample space
    (:func:`frechet_distance_factored`).
    """

    mu: np.ndarray
    n: float
    rows: np.ndarray | None = None
    sigma: np.ndarray | None = None

    @classmethod
    def from_rows(cls, x: np.ndarray, weights: np.ndarray | None = None) -> "CovarianceFactor":
        """Args: x ``(m, d)``; weights ``(m,)`` >= 0 (zero-weight rows are left out), default all 1."""
        x = np.asarray(x, dtype=np.float64)
        w = np.ones(len(x)) if weights is None else np.asarray(weights, dtype=np.float64)
        if x.ndim != 2 or w.shape != (len(x),) or np.any(w < 0):
            raise ValueError(f"rows {x.shape} and weights {w.shape} must be (m, d) and (m,) with weights >= 0")
        keep = w > 0
        if not keep.all():
            x, w = x[keep], w[keep]
        n = float(w.sum())
        if n <= 1:
            raise ValueError(f"a covariance needs a total weight above 1, got {n}")
        mu = (w @ x) / n
        return cls(mu, n, rows=(x - mu) * np.sqrt(w / (n - 1.0))[:, None])

    @property
    def dim(self) -> int:
        return self.mu.shape[0]

    @property
    def trace(self) -> float:
        if self.rows is not None:
            return float(np.einsum("ij,ij->", self.rows, self.rows))
        return float(np.trace(self.sigma))

    def dense(self) -> np.ndarray:
        """The ``(d, d)`` covariance."""
        return self.sigma if self.sigma is not None else self.rows.T @ self.rows


# The sample-space form pays 2 r_a r_b d (A B^T) + r^3 (its Gram) + an r-square eigensolve; the dense form
# 4 r d^2 to form both covariances + Cholesky, two triangular products and a d-square eigensolve. The
# eigensolves dominate on CPUs, so the sample space stays cheaper a little past r = d.
SAMPLE_SPACE_MAX = 1.2


def _sum_sqrt_eig(g: np.ndarray, rank: int | None = None) -> float:
    """Sum of square roots of the eigenvalues of the symmetric PSD ``g`` (negative rounding clipped to 0).

    ``rank``: a known bound on the rank of ``g`` (a sample-space Gram of centred rows); the
    eigenvalues beyond it are exact zeros that the solver returns as rounding noise, and each
    would add ``sqrt(noise)`` to the sum, so the smallest ``n - rank`` count as 0.
    """
    lam = np.linalg.eigvalsh((g + g.T) / 2)
    if rank is not None and rank < lam.size:
        lam[: lam.size - max(rank, 0)] = 0.0
    return float(np.sum(np.sqrt(np.clip(lam, 0.0, None))))


def frechet_distance_factored(a: CovarianceFactor, b: CovarianceFactor,
                              reference: FrechetReference | None = None) -> float:
    """The Frechet distance of two :class:`CovarianceFactor` s, in the smallest space their forms allow.

    With rows ``A`` ``(r_a, d)`` and ``B`` ``(r_b, d)``, ``tr((sqrt(S_a) S_b sqrt(S_a))^(1/2))`` is the
    nuclear norm of ``A B^T``: the square roots of the eigenvalues of the ``min(r_a, r_b)``-square
    Gram ``(A B^T)(A B^T)^T``, which are the non-zero eigenvalues of ``S_a S_b`` (used while
    ``min(r_a, r_b) <= SAMPLE_SPACE_MAX * d``). With one side dense and the other ``r < d`` rows,
    ``B S_a B^T`` has them too. Otherwise :class:`FrechetReference` (``reference``, when given,
    must be ``a``'s, and is reused).

    >>> x = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [3.0, 1.0, 0.0]])
    >>> a, b = CovarianceFactor.from_rows(x[:2]), CovarianceFactor.from_rows(x)
    >>> sa, sb = a.dense(), b.dense()
    >>> bool(np.isclose(frechet_distance_factored(a, b), frechet_distance(a.mu, sa, b.mu, sb)))
    True
    """
    if a.mu.shape != b.mu.shape:
        raise ValueError(f"dimension mismatch: {a.mu.shape} and {b.mu.shape}")
    d = a.dim
    diff = a.mu - b.mu
    ra = len(a.rows) if a.rows is not None else None
    rb = len(b.rows) if b.rows is not None else None
    if ra is not None and rb is not None and min(ra, rb) <= SAMPLE_SPACE_MAX * d:
        m = a.rows @ b.rows.T
        # Centred rows: rank(A) <= r_a - 1 (and <= d), so the Gram's rank is at most min(r_a - 1, r_b - 1, d).
        cross = _sum_sqrt_eig(m @ m.T if ra <= rb else m.T @ m, rank=min(ra - 1, rb - 1, d))
    elif rb is not None and rb < d:
        cross = _sum_sqrt_eig(b.rows @ a.dense() @ b.rows.T)
    elif ra is not None and ra < d:
        cross = _sum_sqrt_eig(a.rows @ b.dense() @ a.rows.T)
    else:
        ref = reference if reference is not None else FrechetReference(a.mu, a.dense(), rank_deficient=a.n <= d)
        cross = ref.trace_sqrt(b.dense())
    return float(diff @ diff + a.trace + b.trace - 2.0 * cross)


@dataclass(frozen=True)
class RowGrams:
    """Inner products of two row sets, for Frechet distances of any reweighting without touching ``d``.

    ``aa = X X^T`` ``(n_a, n_a)``, ``bb = Y Y^T`` ``(n_b, n_b)``, ``ab = X Y^T`` ``(n_a, n_b)``, all after
    subtracting one common ``shift`` from both sets (a shared shift leaves every distance unchanged
    and keeps the centring below free of cancellation). Built once, in ``O(n^2 d)``.
    """

    aa: np.ndarray
    bb: np.ndarray
    ab: np.ndarray
    dim: int | None = None

    @classmethod
    def of(cls, x: np.ndarray, y: np.ndarray, shift: np.ndarray | None = None,
           aa: np.ndarray | None = None) -> "RowGrams":
        """Args: x ``(n_a, d)``, y ``(n_b, d)``; ``shift`` ``(d,)`` (default: the mean of ``x``); ``aa``: a
        precomputed ``X X^T`` with the same shift (one reference shared by several models)."""
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        shift = x.mean(axis=0) if shift is None else shift
        xs, ys = x - shift, y - shift
        return cls(xs @ xs.T if aa is None else aa, ys @ ys.T, xs @ ys.T, x.shape[1])

    def frechet_distance(self, w_a: np.ndarray, w_b: np.ndarray) -> float:
        """FD between the row sets with multiplicities ``w_a`` ``(n_a,)`` and ``w_b`` ``(n_b,)`` (ddof = 1).

        The same number as :func:`frechet_distance_factored` on the weighted centred rows, computed
        from inner products only: with ``u_i = x_i . mu_a`` etc. from the Grams, the centred cross
        products are ``C = K - u 1^T - 1 v^T + mu_a . mu_b`` on the rows with weight > 0, and
        ``tr((sqrt(S_a) S_b sqrt(S_a))^(1/2))`` is the nuclear norm of ``D_a C D_b`` with
        ``D = diag(sqrt(w / (n - 1)))``. Per call: ``O(r^2)`` gathers, one ``r^3`` Gram and an
        ``r``-square eigensolve, where ``r`` counts the rows with weight > 0; nothing scales with ``d``.
        """
        w_a, w_b = np.asarray(w_a, dtype=np.float64), np.asarray(w_b, dtype=np.float64)
        ka, kb = np.flatnonzero(w_a), np.flatnonzero(w_b)
        wa, wb = w_a[ka], w_b[kb]
        na, nb = float(wa.sum()), float(wb.sum())
        if na <= 1 or nb <= 1:
            raise ValueError(f"a covariance needs a total weight above 1, got {na} and {nb}")
        gaa, gbb, k = self.aa[np.ix_(ka, ka)], self.bb[np.ix_(kb, kb)], self.ab[np.ix_(ka, kb)]
        x_ma = gaa @ wa / na                       # x_i . mu_a
        y_mb = gbb @ wb / nb                       # y_j . mu_b
        x_mb = k @ wb / nb                         # x_i . mu_b
        ma_y = wa @ k / na                         # mu_a . y_j
        ma_ma, mb_mb, ma_mb = wa @ x_ma / na, wb @ y_mb / nb, wa @ x_mb / na
        tr_a = wa @ (np.diag(gaa) - 2.0 * x_ma + ma_ma) / (na - 1.0)
        tr_b = wb @ (np.diag(gbb) - 2.0 * y_mb + mb_mb) / (nb - 1.0)
        m = (k - x_mb[:, None] - ma_y[None, :] + ma_mb)
        m *= np.sqrt(wa / (na - 1.0))[:, None]
        m *= np.sqrt(wb / (nb - 1.0))[None, :]
        rank = min(len(ka) - 1, len(kb) - 1, *([self.dim] if self.dim is not None else []))
        cross = _sum_sqrt_eig(m @ m.T if len(ka) <= len(kb) else m.T @ m, rank=rank)
        return float(ma_ma + mb_mb - 2.0 * ma_mb + tr_a + tr_b - 2.0 * cross)


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


# ----------------------------------------------------------------------------- paired image metrics
#
# Frames are float arrays in [0, L] (L = ``data_range``, 1.0 for wmeval's frames) in the layout
# ``(..., H_img, W, C)`` (channels last; the last three axes are one image).


def mse(pred: np.ndarray, target: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Per-sequence MSE: mean over pixels of each frame, then over the valid frames of each sequence.

    Args:
        pred, target: ``(..., T, H_img, W, C)`` frames (or ``(H_img, W, C)`` for one frame).
        valid: ``(..., T)`` booleans; padded frames (``False``) are excluded. By convention a
            sequence with no valid frame has no value: ``NaN`` (the caller counts it out,
            never as 0). ``None``: every frame is valid.

    Returns:
        ``(...)`` float64 per-sequence MSE (a scalar for a single frame). Average these over
        sequences (sequence first, then sequences) for a dataset MSE.

    >>> float(mse(np.zeros((2, 1, 1, 1)), np.array([0.0, 1.0]).reshape(2, 1, 1, 1), np.array([True, False])))
    0.0
    """
    p, g = np.asarray(pred, dtype=np.float64), np.asarray(target, dtype=np.float64)
    if p.shape != g.shape or p.ndim < 3:
        raise ValueError(f"pred {p.shape} and target {g.shape} must be equal shapes (..., H_img, W, C)")
    per_frame = np.mean((p - g) ** 2, axis=(-3, -2, -1))
    if p.ndim == 3:
        return per_frame
    v = np.ones(per_frame.shape, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    if v.shape != per_frame.shape:
        raise ValueError(f"valid {v.shape} must match the frame axes {per_frame.shape}")
    n = v.sum(axis=-1)
    with np.errstate(invalid="ignore"):
        return np.where(n > 0, np.sum(np.where(v, per_frame, 0.0), axis=-1) / np.maximum(n, 1), np.nan)


PSNR_CAP_DB = 100.0
"""The declared PSNR of an exact match: above any non-zero error of 8-bit frames up to 4096^2 pixels."""


def psnr_from_mse(m: np.ndarray, data_range: float = 1.0, cap_db: float | None = PSNR_CAP_DB) -> np.ndarray:
    """``10 log10(L^2 / MSE)`` in dB, higher is better.

    An exact match (MSE = 0) has infinite PSNR; ``cap_db`` (default 100 dB, above any
    non-zero error of 8-bit frames up to 4096^2 pixels) caps it so averages stay finite.
    ``cap_db=None`` returns ``inf`` for exact matches.
    """
    m = np.asarray(m, dtype=np.float64)
    with np.errstate(divide="ignore"):
        out = 10.0 * np.log10(data_range**2 / m)
    return out if cap_db is None else np.minimum(out, cap_db)


def psnr(pred: np.ndarray, target: np.ndarray, *, data_range: float = 1.0, valid: np.ndarray | None = None,
         cap_db: float | None = PSNR_CAP_DB) -> dict[str, float]:
    """PSNR of frame sequences in both averaging conventions, and their gap.

    Args:
        pred, target: ``(N, T, H_img, W, C)`` (N sequences of T frames) in [0, ``data_range``].
        valid: ``(N, T)`` mask of real (non-padded) frames.

    Returns:
        ``frame_mean``: per-frame PSNR averaged over each sequence's valid frames, then over
        sequences; ``pooled``: PSNR of the pooled MSE (the sequence-then-dataset MSE of
        :func:`mse`); ``gap`` = frame_mean - pooled, which for equal sequence lengths is
        ``10 log10(AM / GM)`` of the per-frame MSEs (>= 0, equal to 0 when all errors are equal).

    >>> r = psnr(np.zeros((1, 2, 1, 1, 1)), np.full((1, 2, 1, 1, 1), 0.1))
    >>> round(r["frame_mean"], 6), round(r["gap"], 12)
    (20.0, 0.0)
    """
    p, g = np.asarray(pred, dtype=np.float64), np.asarray(target, dtype=np.float64)
    if p.shape != g.shape or p.ndim != 5:
        raise ValueError(f"pred {p.shape} and target {g.shape} must both be (N, T, H_img, W, C)")
    per_frame = np.mean((p - g) ** 2, axis=(-3, -2, -1))
    v = np.ones(per_frame.shape, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    keep = v.any(axis=1)
    if not keep.any():
        raise ValueError("psnr: no valid frame")
    fp = psnr_from_mse(per_frame, data_range, cap_db)
    seq_psnr = np.sum(np.where(v, fp, 0.0), axis=1)[keep] / v.sum(axis=1)[keep]
    seq_mse = mse(p, g, v)[keep]
    frame_mean = float(np.mean(seq_psnr))
    pooled = float(psnr_from_mse(np.mean(seq_mse), data_range, cap_db))
    return {"frame_mean": frame_mean, "pooled": pooled, "gap": frame_mean - pooled}


SSIM_WINDOW, SSIM_SIGMA, SSIM_K1, SSIM_K2 = 11, 1.5, 0.01, 0.03


def _gaussian_taps(sigma: float = SSIM_SIGMA, size: int = SSIM_WINDOW) -> np.ndarray:
    r = np.arange(size) - size // 2
    w = np.exp(-0.5 * (r / sigma) ** 2)
    return w / w.sum()


def _blur_valid(x: np.ndarray) -> np.ndarray:
    """Separable Gaussian filter over the image axes of ``(B, H, W, C)`` float64, 'valid' part only."""
    from numpy.lib.stride_tricks import sliding_window_view

    w = _gaussian_taps()
    y = sliding_window_view(x, SSIM_WINDOW, axis=1) @ w
    return sliding_window_view(y, SSIM_WINDOW, axis=2) @ w


def ssim(pred: np.ndarray, target: np.ndarray, *, data_range: float = 1.0) -> np.ndarray:
    """Mean SSIM per image pair (Wang et al. 2004), higher is better, 1 for identical images.

    Gaussian window of 11 taps with sigma 1.5, K1 = 0.01, K2 = 0.03, population (not sample)
    covariances, constants from ``data_range`` L. Borders: the SSIM map is averaged over the
    pixels whose whole window lies inside the image (the 5-pixel border is excluded), which is
    what ``skimage.metrics.structural_similarity(gaussian_weights=True, sigma=1.5,
    use_sample_covariance=False, data_range=L)`` does after its reflect-padded filtering. Each
    channel is scored separately and the channels averaged.

    Args:
        pred, target: ``(..., H_img, W, C)`` with ``H_img, W >= 11``.

    Returns:
        ``(...)`` float64.
    """
    p, g = np.asarray(pred, dtype=np.float64), np.asarray(target, dtype=np.float64)
    if p.shape != g.shape or p.ndim < 3:
        raise ValueError(f"pred {p.shape} and target {g.shape} must be equal shapes (..., H_img, W, C)")
    if min(p.shape[-3:-1]) < SSIM_WINDOW:
        raise ValueError(f"ssim: images {p.shape[-3:-1]} are smaller than the {SSIM_WINDOW}-pixel window")
    lead = p.shape[:-3]
    x, y = p.reshape(-1, *p.shape[-3:]), g.reshape(-1, *g.shape[-3:])
    c1, c2 = (SSIM_K1 * data_range) ** 2, (SSIM_K2 * data_range) ** 2
    out = np.empty(len(x))
    chunk = max(1, (1 << 24) // max(1, int(np.prod(x.shape[1:]))))
    for i in range(0, len(x), chunk):
        a, b = x[i:i + chunk], y[i:i + chunk]
        mx, my = _blur_valid(a), _blur_valid(b)
        vx = _blur_valid(a * a) - mx * mx
        vy = _blur_valid(b * b) - my * my
        cxy = _blur_valid(a * b) - mx * my
        s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
        out[i:i + chunk] = s.mean(axis=(1, 2)).mean(axis=-1)
    return out.reshape(lead)


def lpips_distance(pred: np.ndarray, target: np.ndarray, model, *, batch_size: int = 64, device: str = "cpu"
                   ) -> np.ndarray:
    """LPIPS distance per image pair, lower is better, through an ``lpips.LPIPS`` module.

    Args:
        pred, target: ``(..., H_img, W, C)`` in [0, 1]; grayscale (C = 1) is repeated to RGB.
        model: from :func:`wmeval.perceptual.load_lpips` (its record names backbone and version).

    Returns:
        ``(...)`` float64.
    """
    import torch

    p, g = np.asarray(pred, dtype=np.float32), np.asarray(target, dtype=np.float32)
    if p.shape != g.shape or p.ndim < 3 or p.shape[-1] not in (1, 3):
        raise ValueError(f"pred {p.shape} and target {g.shape} must be equal shapes (..., H_img, W, 1 or 3)")
    lead = p.shape[:-3]
    p, g = p.reshape(-1, *p.shape[-3:]), g.reshape(-1, *g.shape[-3:])
    out = []
    model = model.to(device)
    with torch.no_grad():
        for i in range(0, len(p), batch_size):
            a = torch.from_numpy(p[i:i + batch_size]).permute(0, 3, 1, 2).to(device)
            b = torch.from_numpy(g[i:i + batch_size]).permute(0, 3, 1, 2).to(device)
            if a.shape[1] == 1:
                a, b = a.repeat(1, 3, 1, 1), b.repeat(1, 3, 1, 1)
            out.append(model(a, b, normalize=True).reshape(-1).double().cpu().numpy())
    return (np.concatenate(out) if out else np.empty(0)).reshape(lead)


# ----------------------------------------------------------------------------- distributional metrics

def _polynomial_kernel_sum(a: np.ndarray, b: np.ndarray, d: int, chunk: int = 4096) -> tuple[float, float]:
    """``(sum_ij k(a_i, b_j), sum_i k(a_i, b_i))`` for ``k(x, y) = (x.y / d + 1)^3``, chunked."""
    total = 0.0
    for i in range(0, len(a), chunk):
        total += float(np.sum((a[i:i + chunk] @ b.T / d + 1.0) ** 3))
    diag = float(np.sum((np.einsum("ij,ij->i", a, b) / d + 1.0) ** 3)) if a.shape == b.shape else float("nan")
    return total, diag


def mmd2_unbiased(x: np.ndarray, y: np.ndarray) -> float:
    """Unbiased MMD^2 with the polynomial kernel ``(x.y / d + 1)^3`` (KID's kernel) on all rows."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    m, n, d = len(x), len(y), x.shape[1]
    sxx, dxx = _polynomial_kernel_sum(x, x, d)
    syy, dyy = _polynomial_kernel_sum(y, y, d)
    sxy, _ = _polynomial_kernel_sum(x, y, d)
    return (sxx - dxx) / (m * (m - 1)) + (syy - dyy) / (n * (n - 1)) - 2.0 * sxy / (m * n)


def kid(real_features: np.ndarray, fake_features: np.ndarray, *, num_subsets: int = 100, subset_size: int = 1000,
        seed: int = 0) -> tuple[float, float]:
    """Kernel Inception Distance (Binkowski et al. 2018): mean and std of unbiased MMD^2 over subsets.

    Polynomial kernel of degree 3, gamma = 1/d, coef 1. Each of ``num_subsets`` draws picks
    ``min(subset_size, n_real, n_fake)`` rows of each side without replacement (seeded); lower is
    better and the estimate can be slightly negative. The torch-fidelity convention.

    Returns:
        ``(mean, std)`` over subsets (std with ``ddof = 0``, as torch-fidelity).
    """
    x, y = np.asarray(real_features, dtype=np.float64), np.asarray(fake_features, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or min(len(x), len(y)) < 2:
        raise ValueError(f"kid: features must be (n >= 2, d) with equal d, got {x.shape} and {y.shape}")
    m = min(subset_size, len(x), len(y))
    rng = np.random.default_rng(seed)
    vals = [mmd2_unbiased(x[rng.choice(len(x), m, replace=False)], y[rng.choice(len(y), m, replace=False)])
            for _ in range(num_subsets)]
    return float(np.mean(vals)), float(np.std(vals))


def fd_infinity(real_features: np.ndarray, fake_features: np.ndarray, *, grid: list[int] | None = None,
                draws: int = 1, seed: int = 0) -> dict:
    """FD-infinity (Chong & Forsyth 2020): the FD extrapolated to infinitely many generated samples.

    FD is computed with the full real set against ``draws`` random subsets (without replacement)
    of N generated rows for each N in ``grid``; a least-squares line ``FD_N = a + b / N`` is fitted
    and its intercept ``a`` is FD-infinity. Default grid: 15 points evenly spaced from
    ``n_fake / 5`` to ``n_fake`` (at least ``d + 2`` each where possible).

    Returns:
        ``{"value": a, "slope": b, "grid": [...], "fd": [mean FD per N]}``.
    """
    x, y = np.asarray(real_features, dtype=np.float64), np.asarray(fake_features, dtype=np.float64)
    n = len(y)
    if grid is None:
        lo = min(n, max(n // 5, x.shape[1] + 2))
        grid = sorted(set(int(v) for v in np.linspace(lo, n, 15)))
    if len(grid) < 2 or min(grid) < 2 or max(grid) > n:
        raise ValueError(f"fd_infinity: grid {grid} needs >= 2 sizes in [2, n_fake = {n}]")
    ref = gaussian_stats(x)
    ref = FrechetReference(ref.mu, ref.sigma, rank_deficient=ref.rank_deficient)
    rng = np.random.default_rng(seed)
    fds = []
    for size in grid:
        vals = []
        for _ in range(draws):
            s = gaussian_stats(y[rng.choice(n, size, replace=False)])
            vals.append(ref.distance(s.mu, s.sigma))
        fds.append(float(np.mean(vals)))
    design = np.stack([np.ones(len(grid)), 1.0 / np.asarray(grid, dtype=np.float64)], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, np.asarray(fds), rcond=None)
    return {"value": float(a), "slope": float(b), "grid": list(map(int, grid)), "fd": fds}


def _kth_neighbour_radii(x: np.ndarray, k: int, chunk: int) -> np.ndarray:
    """Distance of each row to its k-th nearest neighbour in ``x``, the row itself excluded."""
    sq = np.einsum("ij,ij->i", x, x)
    out = np.empty(len(x))
    for i in range(0, len(x), chunk):
        d2 = sq[i:i + chunk, None] + sq[None] - 2.0 * (x[i:i + chunk] @ x.T)
        d = np.sqrt(np.maximum(d2, 0.0))
        # Column k of the sorted row is the k-th neighbour: column 0 is the row itself (distance 0).
        out[i:i + chunk] = np.partition(d, k, axis=1)[:, k]
    return out


def prdc_rows(real_features: np.ndarray, fake_features: np.ndarray, *, k: int = 5, chunk: int = 2048) -> dict:
    """Per-row indicators behind :func:`prdc` (each metric is a mean of one of these).

    Returns:
        ``precision`` (n_fake,): fake row inside some real k-NN ball; ``density`` (n_fake,):
        number of real balls containing the fake row, over k; ``recall`` (n_real,): real row
        inside some fake k-NN ball; ``coverage`` (n_real,): nearest fake row inside the real
        row's own ball. Balls are open (strict inequalities), radii the k-th neighbour
        distance excluding the row itself, Euclidean distances in float64. Memory is
        ``O(chunk * (n_real + n_fake))``.
    """
    x, y = np.asarray(real_features, dtype=np.float64), np.asarray(fake_features, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"prdc: features must be (n, d) with equal d, got {x.shape} and {y.shape}")
    if not 1 <= k < min(len(x), len(y)):
        raise ValueError(f"prdc: k = {k} must be in [1, min(n_real, n_fake) = {min(len(x), len(y))})")
    rr, rf = _kth_neighbour_radii(x, k, chunk), _kth_neighbour_radii(y, k, chunk)
    sx, sy = np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", y, y)
    in_real = np.zeros(len(y), dtype=np.int64)    # real balls containing each fake row
    recall = np.zeros(len(x), dtype=bool)
    nearest_fake = np.full(len(x), np.inf)
    for j in range(0, len(y), chunk):
        d = np.sqrt(np.maximum(sx[:, None] + sy[None, j:j + chunk] - 2.0 * (x @ y[j:j + chunk].T), 0.0))  # (n_r, c)
        in_real[j:j + chunk] = np.sum(d < rr[:, None], axis=0)
        recall |= np.any(d < rf[None, j:j + chunk], axis=1)
        nearest_fake = np.minimum(nearest_fake, d.min(axis=1))
    return {"precision": (in_real > 0).astype(np.float64), "density": in_real / k,
            "recall": recall.astype(np.float64), "coverage": (nearest_fake < rr).astype(np.float64)}


def prdc(real_features: np.ndarray, fake_features: np.ndarray, *, k: int = 5, chunk: int = 2048) -> dict[str, float]:
    """Precision and recall (Kynkaanniemi et al. 2019), density and coverage (Naeem et al. 2020).

    Exactly the ``prdc`` package's definitions (k-th neighbour excluding self, strict
    inequalities, Euclidean distance), computed in chunks so that 50k x 50k fits in bounded
    memory. All four are higher-is-better shares (density can exceed 1). Recall and coverage
    describe the real set's support as estimated by k-NN balls, not a manifold's volume.
    """
    return {name: float(v.mean()) for name, v in prdc_rows(real_features, fake_features, k=k, chunk=chunk).items()}


def best_of_k(errors: np.ndarray, k: int | None = None) -> np.ndarray:
    """Oracle best-of-K error: the minimum over the first K samples of a nested pool.

    Args:
        errors: ``(..., K_max)`` error of each sample against the realized future (the same
            future for every sample).
        k: pool size; ``None`` returns the whole curve ``(..., K_max)`` for K = 1..K_max.

    A nested pool's minimum cannot increase with K. It is a diagnostic that uses the realized
    future to select, which no deployment can: report it beside single-sample and
    mean-over-samples error, with K fixed across compared models.

    >>> best_of_k(np.array([3.0, 1.0, 2.0])).tolist()
    [3.0, 1.0, 1.0]
    """
    e = np.asarray(errors, dtype=np.float64)
    curve = np.minimum.accumulate(e, axis=-1)
    if k is None:
        return curve
    if not 1 <= k <= e.shape[-1]:
        raise ValueError(f"best_of_k: k = {k} outside 1..{e.shape[-1]}")
    return curve[..., k - 1]
