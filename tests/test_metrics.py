"""The public metric functions: exact tiny cases, properties, and parity with the field's packages."""

import numpy as np
import pytest

from wmeval import metrics as M


def _frames(rng, shape):
    return rng.random(shape)


def test_mse_sequence_first_with_valid_mask():
    p = np.zeros((2, 3, 2, 2, 1))
    g = np.zeros_like(p)
    g[0, 0] = 1.0          # sequence 0: errors 1, 0, (padded 0) -> 0.5 over its two valid frames
    g[0, 2] = 5.0          # padded frame: excluded
    g[1, :] = 0.5          # sequence 1: 0.25 everywhere
    valid = np.array([[True, True, False], [True, True, True]])
    np.testing.assert_allclose(M.mse(p, g, valid), [0.5, 0.25])
    # An all-padding sequence has no value (NaN), never 0.
    assert np.isnan(M.mse(p, g, np.array([[False] * 3, [True] * 3]))[0])
    with pytest.raises(ValueError):
        M.mse(p, g[:, :2])


def test_psnr_conventions_and_gap():
    rng = np.random.default_rng(0)
    g = _frames(rng, (3, 4, 8, 8, 3))
    p = np.clip(g + rng.normal(scale=rng.uniform(0.01, 0.2, size=(3, 4, 1, 1, 1)), size=g.shape), 0, 1)
    r = M.psnr(p, g)
    per_frame = np.mean((p - g) ** 2, axis=(2, 3, 4))
    assert r["frame_mean"] == pytest.approx(np.mean(10 * np.log10(1 / per_frame)))
    assert r["pooled"] == pytest.approx(10 * np.log10(1 / per_frame.mean()))
    # Equal sequence lengths: the gap is 10 log10(AM / GM) of the frame MSEs, and >= 0.
    am, gm = per_frame.mean(), np.exp(np.log(per_frame).mean())
    assert r["gap"] == pytest.approx(10 * np.log10(am / gm)) and r["gap"] > 0
    # Equal errors everywhere: the two conventions agree.
    q = np.full_like(g, 0.25)
    assert M.psnr(q, np.full_like(g, 0.5))["gap"] == pytest.approx(0.0, abs=1e-12)
    # Exact matches: capped (declared) or infinite.
    assert M.psnr(g, g)["frame_mean"] == 100.0
    assert M.psnr(g, g, cap_db=None)["pooled"] == np.inf


def test_psnr_matches_skimage():
    from skimage.metrics import peak_signal_noise_ratio

    rng = np.random.default_rng(1)
    g = _frames(rng, (1, 1, 16, 16, 3))
    p = np.clip(g + 0.05 * rng.normal(size=g.shape), 0, 1)
    assert M.psnr(p, g)["pooled"] == pytest.approx(peak_signal_noise_ratio(g[0, 0], p[0, 0], data_range=1.0),
                                                   rel=1e-12)


@pytest.mark.parametrize("shape, channels", [((24, 20, 3), 3), ((48, 48, 1), 1), ((11, 13, 1), 1)])
def test_ssim_matches_skimage(shape, channels):
    from skimage.metrics import structural_similarity

    rng = np.random.default_rng(2)
    g = _frames(rng, (3, *shape))
    p = np.clip(g + rng.normal(scale=0.1, size=g.shape) + 0.05, 0, 1)
    ours = M.ssim(p, g)
    ref = [structural_similarity(g[i], p[i], gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                                 data_range=1.0, channel_axis=-1) for i in range(3)]
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(M.ssim(g, g), 1.0, atol=1e-12)       # SSIM(x, x) = 1
    # Data range matters: the same arrays read on [0, 255] have tiny constants.
    ref255 = structural_similarity(g[0] * 255, p[0] * 255, gaussian_weights=True, sigma=1.5,
                                   use_sample_covariance=False, data_range=255.0, channel_axis=-1)
    assert M.ssim(p[0] * 255, g[0] * 255, data_range=255.0) == pytest.approx(ref255, rel=1e-9)
    with pytest.raises(ValueError, match="window"):
        M.ssim(p[:, :10, :10], g[:, :10, :10])


def test_prdc_matches_the_prdc_package_and_is_chunk_invariant():
    import prdc as P

    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 6))
    y = rng.normal(size=(250, 6)) * 1.3 + 0.3
    ref = P.compute_prdc(x, y, 5)
    for chunk in (7, 64, 4096):
        ours = M.prdc(x, y, k=5, chunk=chunk)
        for key in ("precision", "recall", "density", "coverage"):
            assert ours[key] == pytest.approx(float(ref[key]), abs=1e-12), (key, chunk)
    same = M.prdc(x, x, k=3)
    assert same["precision"] == 1.0 and same["recall"] == 1.0 and same["coverage"] == 1.0
    with pytest.raises(ValueError, match="k ="):
        M.prdc(x, y, k=300)


def test_kid_matches_torch_fidelity_and_is_unbiased():
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("torch_fidelity.metric_kid")
    rng = np.random.default_rng(4)
    x = rng.normal(size=(200, 16))
    y = rng.normal(size=(200, 16)) + 0.2
    # All rows in one subset: no dependence on either package's subset draw.
    ref = tf.kid_features_to_metric(torch.from_numpy(x), torch.from_numpy(y), kid_subsets=1, kid_subset_size=200,
                                    verbose=False, rng_seed=0, kid_kernel="poly", kid_degree=3, kid_gamma=None,
                                    kid_coef0=1)
    assert M.kid(x, y, num_subsets=1, subset_size=200)[0] == pytest.approx(ref["kernel_inception_distance_mean"],
                                                                          rel=1e-9)
    # Same distribution: unbiased MMD^2 averages to ~0 (can be negative), a shift does not.
    same = [M.mmd2_unbiased(rng.normal(size=(100, 4)), rng.normal(size=(100, 4))) for _ in range(40)]
    assert abs(np.mean(same)) < 3 * np.std(same) / np.sqrt(40) + 1e-12
    assert min(same) < 0 < M.mmd2_unbiased(x, y)
    m1, s1 = M.kid(x, y, num_subsets=10, subset_size=50, seed=1)
    assert (m1, s1) == M.kid(x, y, num_subsets=10, subset_size=50, seed=1) and s1 > 0


def test_fd_infinity_recovers_a_known_intercept():
    # Plug-in FD against an exact reference is biased by ~ tr(sigma)/N-type terms; the line
    # through 1/N extrapolates to the population value (here 0: identical distributions).
    rng = np.random.default_rng(5)
    d = 4
    real = rng.normal(size=(200000, d))
    fake = rng.normal(size=(4000, d))
    r = M.fd_infinity(real, fake, grid=[500, 1000, 2000, 4000], draws=8, seed=0)
    assert r["slope"] > 0 and all(np.diff(r["fd"]) < 0)
    assert abs(r["value"]) < 0.3 * r["fd"][-1]
    with pytest.raises(ValueError):
        M.fd_infinity(real, fake, grid=[5000])


def test_best_of_k_is_nested_and_non_increasing():
    rng = np.random.default_rng(6)
    e = rng.random((50, 8))
    curve = M.best_of_k(e)
    assert np.all(np.diff(curve, axis=-1) <= 0)
    np.testing.assert_array_equal(curve[:, 0], e[:, 0])       # K = 1 is the single first sample
    np.testing.assert_array_equal(M.best_of_k(e, 8), e.min(axis=1))
    with pytest.raises(ValueError):
        M.best_of_k(e, 9)


def test_frechet_cholesky_and_eigh_paths_agree_and_rank_deficient_is_finite():
    rng = np.random.default_rng(7)
    a = M.gaussian_stats(rng.normal(size=(400, 20)) @ rng.normal(size=(20, 20)))
    b = M.gaussian_stats(rng.normal(size=(400, 20)))
    chol = M.FrechetReference(a.mu, a.sigma)
    eig = M.FrechetReference(a.mu, a.sigma, rank_deficient=True)
    assert chol.factor == "cholesky" and eig.factor == "eigh"
    assert chol.distance(b.mu, b.sigma) == pytest.approx(eig.distance(b.mu, b.sigma), rel=1e-10)
    small = M.gaussian_stats(rng.normal(size=(10, 20)))        # n <= d: singular covariance
    assert small.rank_deficient
    ref = M.FrechetReference(small.mu, small.sigma, rank_deficient=True)
    # Zero eigenvalues carry rounding of ~1e-16 whose square roots add ~1e-8 each: relative to the trace.
    assert abs(ref.distance(small.mu, small.sigma)) < 1e-6 * np.trace(small.sigma)
    assert np.isfinite(ref.distance(b.mu, b.sigma))
