"""The Frechet distance between Gaussian fits of two feature sets (FID, FVD), its factored and
sample-space forms for bootstrap replicates, and FD-infinity."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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

    Coordinates in which the reference does not vary (a zero diagonal entry of a PSD matrix
    zeroes its row and column: dead ReLU channels of an encoder, for one; a variance below
    ``64 eps mu^2``, the rounding of a constant non-zero coordinate's, counts as zero) are left out of the
    factor and of every compared covariance: with ``S1`` zero outside the coordinates ``K``,
    the non-zero eigenvalues of ``S2 S1`` are those of ``S2[K, K] S1[K, K]``, exactly. The
    factorisation and the eigenvalue solves then run on ``|K|`` coordinates (the default
    pipeline's frame features keep 50-76 of 128), and a reference whose only singularity is
    such coordinates gets its Cholesky factor instead of ``eigh``.

    Attributes:
        factor: ``"cholesky"`` or ``"eigh"``, which factorisation was used (for the protocol).
        support: the indices ``K`` of the coordinates with non-zero reference variance.
    """

    def __init__(self, mu: np.ndarray, sigma: np.ndarray, *, rank_deficient: bool = False) -> None:
        self.mu = np.asarray(mu, dtype=np.float64)
        self.sigma = np.asarray(sigma, dtype=np.float64)
        _check_moments(self.mu, self.sigma, "reference")
        self.trace = float(np.trace(self.sigma))
        sym = (self.sigma + self.sigma.T) / 2
        d = sym.shape[0]
        # A variance within rounding of the cancellation in sum(x^2) - n mu^2 (a coordinate constant at a non-zero
        # value, through per-episode moments) is 0 as well: a coefficient of variation below 1e-7 is not measured.
        self.support = np.flatnonzero(np.diagonal(sym) > 64 * np.finfo(np.float64).eps * self.mu ** 2)
        self._full = self.support.size == d
        if not self._full:
            sym = sym[np.ix_(self.support, self.support)]
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
        """A square root ``R`` ``(d, d)`` of the reference covariance (``R R^T = sigma``)."""
        if self._full:
            return self.root
        out = np.zeros(self.sigma.shape)
        out[np.ix_(self.support, self.support)] = self.root
        return out

    def trace_sqrt(self, sigma: np.ndarray) -> float:
        """``tr((sqrt(sigma_ref) sigma sqrt(sigma_ref))^(1/2))``."""
        if not self._full:
            sigma = sigma[np.ix_(self.support, self.support)]
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
