import numpy as np
import pytest
from pytorch_fid.fid_score import calculate_frechet_distance

from wmeval.metrics import FrechetReference, frechet_distance, gaussian_stats


def _pair(d, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) / np.sqrt(d)
    b = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) / np.sqrt(d) + 0.3
    return gaussian_stats(a), gaussian_stats(b)


@pytest.mark.parametrize("d, seed", [(4, 0), (32, 1), (128, 2)])
def test_agrees_with_pytorch_fid(d, seed):
    a, b = _pair(d, 4 * d + 50, seed)
    ours = frechet_distance(a.mu, a.sigma, b.mu, b.sigma)
    ref = calculate_frechet_distance(a.mu, a.sigma, b.mu, b.sigma)
    assert ours == pytest.approx(ref, rel=1e-6)


def test_closed_forms_and_properties():
    rng = np.random.default_rng(0)
    s = gaussian_stats(rng.normal(size=(500, 6)))
    assert abs(frechet_distance(s.mu, s.sigma, s.mu, s.sigma)) < 1e-9            # FD(x, x) = 0
    # Commuting (diagonal) covariances: sum of (sqrt(a) - sqrt(b))^2 plus the mean term.
    a, b = np.diag([1.0, 4.0, 9.0]), np.diag([4.0, 1.0, 9.0])
    mu = np.array([1.0, 0.0, -1.0])
    assert frechet_distance(np.zeros(3), a, mu, b) == pytest.approx(2.0 + 1.0 + 1.0, rel=1e-12)
    ref = FrechetReference(np.zeros(3), a)
    assert ref.distance(mu, b) == pytest.approx(frechet_distance(np.zeros(3), a, mu, b))
    assert frechet_distance(mu, b, np.zeros(3), a) == pytest.approx(4.0, rel=1e-12)  # symmetric


def test_rank_deficient_covariances_are_finite_and_flagged():
    rng = np.random.default_rng(1)
    a, b = gaussian_stats(rng.normal(size=(10, 64))), gaussian_stats(rng.normal(size=(10, 64)))
    assert a.rank_deficient and np.linalg.matrix_rank(a.sigma) == 9
    fd = frechet_distance(a.mu, a.sigma, b.mu, b.sigma)
    assert np.isfinite(fd) and fd > 0
    assert fd == pytest.approx(calculate_frechet_distance(a.mu, a.sigma, b.mu, b.sigma), rel=1e-4)


def test_bad_inputs():
    with pytest.raises(ValueError, match="dimension mismatch"):
        frechet_distance(np.zeros(2), np.eye(2), np.zeros(3), np.eye(3))
    with pytest.raises(ValueError, match=r"must be \(d,\) and \(d, d\)"):
        frechet_distance(np.zeros(2), np.eye(3), np.zeros(2), np.eye(2))
    with pytest.raises(ValueError, match="non-finite"):
        gaussian_stats(np.array([[0.0, np.nan], [1.0, 1.0]]))


@pytest.mark.parametrize("n_a,n_b,d", [(5, 7, 12), (30, 9, 12), (9, 30, 12), (40, 50, 12), (3, 3, 6), (80, 90, 12)])
@pytest.mark.parametrize("form", ["rows/rows", "dense/rows", "rows/dense"])
def test_factored_distance_equals_the_dense_one(n_a, n_b, d, form):
    """Sample-space (nuclear norm of A B^T), mixed and dense forms against frechet_distance on the moments."""
    from wmeval.metrics import CovarianceFactor, frechet_distance_factored

    rng = np.random.default_rng(n_a * 100 + n_b)
    xa, xb = rng.normal(size=(n_a, d)), rng.normal(size=(n_b, d)) * 1.5 + 0.2
    wa, wb = rng.integers(0, 3, n_a).astype(float), rng.integers(0, 3, n_b).astype(float)
    wa[:2] = wb[:2] = 1.0
    a, b = CovarianceFactor.from_rows(xa, wa), CovarianceFactor.from_rows(xb, wb)
    # The weighted factor is the covariance of the data set with row i repeated w_i times.
    copies = np.repeat(xa, wa.astype(int), axis=0)
    np.testing.assert_allclose(a.dense(), np.cov(copies.T), rtol=1e-10, atol=1e-12)
    if form == "dense/rows":
        a = CovarianceFactor(a.mu, a.n, sigma=a.dense())
    if form == "rows/dense":
        b = CovarianceFactor(b.mu, b.n, sigma=b.dense())
    # A singular reference (n <= d) needs the eigh square root: Cholesky of it loses digits.
    want = FrechetReference(a.mu, a.dense(), rank_deficient=a.n <= d).distance(b.mu, b.dense())
    # A singular covariance's zero eigenvalues come out of any eigensolver as +-eps * scale, and each
    # adds sqrt(eps * scale) to the trace term: ~1e-8 relative, for either method.
    singular = min(np.count_nonzero(wa), np.count_nonzero(wb)) <= d
    assert frechet_distance_factored(a, b) == pytest.approx(want, rel=1e-7 if singular else 1e-10)


@pytest.mark.parametrize("n_a,n_b,d", [(6, 9, 12), (30, 9, 12), (40, 50, 12)])
def test_gram_form_equals_the_factored_form(n_a, n_b, d):
    """RowGrams (inner products only) against frechet_distance_factored on the same weighted rows."""
    from wmeval.metrics import CovarianceFactor, RowGrams, frechet_distance_factored

    rng = np.random.default_rng(n_a + 7 * n_b)
    x = rng.normal(size=(n_a, d)) + 3.0                       # far from 0: the shift keeps it exact
    y = rng.normal(size=(n_b, d)) * 1.3 + 3.2
    wa, wb = rng.integers(0, 3, n_a).astype(float), rng.integers(0, 3, n_b).astype(float)
    wa[:3] = wb[:3] = 1.0
    want = frechet_distance_factored(CovarianceFactor.from_rows(x, wa), CovarianceFactor.from_rows(y, wb))
    grams = RowGrams.of(x, y)
    # Both know the rank bound of their sample-space Gram, so no rounding noise enters the sum.
    assert grams.frechet_distance(wa, wb) == pytest.approx(want, rel=1e-12)
    # A shared reference Gram gives the same number; unit weights give the plain FD of the rows.
    again = RowGrams.of(x, y, shift=x.mean(axis=0), aa=grams.aa)
    assert again.frechet_distance(wa, wb) == grams.frechet_distance(wa, wb)
    a, b = gaussian_stats(x), gaussian_stats(y)
    plain = FrechetReference(a.mu, a.sigma, rank_deficient=a.n <= d).distance(b.mu, b.sigma)
    assert grams.frechet_distance(np.ones(n_a), np.ones(n_b)) == pytest.approx(plain, rel=1e-7)


@pytest.mark.parametrize("n_a,n_b,d", [(6, 9, 12), (30, 9, 12), (40, 50, 12)])
def test_sample_space_forms_match_a_40_digit_reference(n_a, n_b, d):
    """Singular covariances: the nuclear norm of A B^T by mpmath's SVD at 40 digits is the truth."""
    import mpmath as mp

    from wmeval.metrics import CovarianceFactor, RowGrams, frechet_distance_factored

    rng = np.random.default_rng(n_a + 7 * n_b)
    x, y = rng.normal(size=(n_a, d)) + 3.0, rng.normal(size=(n_b, d)) * 1.3 + 3.2
    wa, wb = rng.integers(0, 3, n_a).astype(float), rng.integers(0, 3, n_b).astype(float)
    wa[:3] = wb[:3] = 1.0
    a, b = CovarianceFactor.from_rows(x, wa), CovarianceFactor.from_rows(y, wb)
    with mp.workdps(40):
        nuclear = sum(mp.svd_r(mp.matrix(a.rows.tolist()) * mp.matrix(b.rows.tolist()).T, compute_uv=False))
        truth = float(mp.mpf(float((a.mu - b.mu) @ (a.mu - b.mu))) + a.trace + b.trace - 2 * nuclear)
    assert frechet_distance_factored(a, b) == pytest.approx(truth, rel=1e-12)
    assert RowGrams.of(x, y).frechet_distance(wa, wb) == pytest.approx(truth, rel=1e-12)
