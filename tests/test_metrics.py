"""The public metric functions: exact tiny cases, properties, and parity with the field's packages."""

import re

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


def test_knn_radii_are_the_kth_of_every_pair_distance_bit_for_bit():
    """The radii take the k-th smallest squared distance and its square root, instead of the square root of
    every pair: the same number, bit for bit (the square root of clipped squares is monotone), duplicates and
    ties included."""
    rng = np.random.default_rng(8)
    x = np.vstack([np.round(rng.normal(size=(150, 3)), 1), np.repeat(rng.normal(size=(20, 3)), 3, axis=0)])
    sq = np.einsum("ij,ij->i", x, x)
    every = np.sqrt(np.maximum(sq[:, None] + sq[None] - 2.0 * (x @ x.T), 0.0))
    for k in (1, 3, 5):
        want = np.sort(every, axis=1)[:, k]
        for chunk in (7, 4096):
            np.testing.assert_array_equal(M.real_radii(x, k=k, chunk=chunk), want)


def test_prdc_with_precomputed_real_radii_is_the_same():
    """The statistics stage computes the real set's k-NN radii once per view and passes them to every model's
    PRDC: the rows are identical, and radii of the wrong set size are refused."""
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(120, 4)), rng.normal(size=(90, 4)) + 0.2
    radii = M.real_radii(x, k=5)
    a, b = M.prdc_rows(x, y, k=5), M.prdc_rows(x, y, k=5, radii=radii)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(M.prdc_rows(x, y, k=5, radii=radii * 0.5)["precision"], a["precision"])
    with pytest.raises(ValueError, match=r"radii has shape \(119,\), expected \(120,\)"):
        M.prdc_rows(x, y, k=5, radii=radii[1:])


@pytest.mark.parametrize(("S", "M_"), [(4, 4), (1, 4), (3, 1), (2, 3)])
def test_ssim_of_all_pairs_is_ssim_of_each_pair_bit_for_bit(S, M_):
    """ssim_pairs filters each image's mean and variance once; the values are ssim's on the broadcast pairs,
    bit for bit (the statistics stage relies on it to keep the committed numbers)."""
    from wmeval.metrics.paired import ssim_pairs

    rng = np.random.default_rng(S * 10 + M_)
    pred = rng.random((3, 2, S, 24, 20, 3))
    real = np.clip(pred[:, :, :1] + 0.1 * rng.normal(size=(3, 2, M_, 24, 20, 3)), 0, 1)
    p, g = np.broadcast_arrays(pred[:, :, :, None], real[:, :, None])
    want = M.ssim(p, g)
    got = ssim_pairs(pred, real)
    assert got.shape == (3, 2, S, M_) and np.array_equal(got, want)
    assert want.min() < 0.99                     # the pairs differ: the check can fail


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


@pytest.mark.parametrize(("nx", "ny", "m"), [(100, 90, 80), (230, 190, 60)], ids=["one-pass", "per-subset"])
def test_kid_subsets_from_one_kernel_pass_equal_a_kernel_per_subset(nx, ny, m):
    """kid() sums every subset's kernel in one pass over the kernel's rows where that is cheaper (subsets near
    the sets' size), else a kernel per subset; either way the same seeded draws scored one subset at a time with
    mmd2_unbiased give the same mean and std (up to summation order), chunked or not."""
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(nx, 8)), rng.normal(size=(ny, 8)) + 0.1
    draw = np.random.default_rng(3)
    vals = []
    for _ in range(12):
        ix, iy = draw.choice(nx, m, replace=False), draw.choice(ny, m, replace=False)
        vals.append(M.mmd2_unbiased(x[ix], y[iy]))
    for chunk in (7, 4096):
        mean, std = M.kid(x, y, num_subsets=12, subset_size=m, seed=3, chunk=chunk)
        assert mean == pytest.approx(np.mean(vals), rel=1e-9, abs=1e-15)
        assert std == pytest.approx(np.std(vals), rel=1e-9)
    assert M.kid(x, y, num_subsets=12, subset_size=m, seed=4)[0] != pytest.approx(np.mean(vals), rel=1e-6)


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


# ---- Paired metrics: image batches, torch tensors, shape errors -----------------------------------------------

# Every public paired metric as f(pred, target, valid); expected_pairwise_mse with one sample (K = 1)
# in its sample axis, just before the image axes: (N, 1, H, W, C) for images, (N, T, 1, H, W, C) for sequences.
_PAIRED = {
    "mse": lambda p, g, v: M.mse(p, g, v),
    "psnr": lambda p, g, v: M.psnr(p, g, valid=v),
    "psnr_from_mse": lambda p, g, v: M.psnr_from_mse(M.mse(p, g, v)),
    "ssim": lambda p, g, v: M.ssim(p, g),
    "expected_pairwise_mse": lambda p, g, v: M.expected_pairwise_mse(p[..., None, :, :, :], g[..., None, :, :, :], 3),
}


def _assert_image_equals_sequence(img, seq, n):
    """Images give (N,) where length-1 sequences give (N,) per sequence or (N, 1) per frame; dicts are equal."""
    if isinstance(seq, dict):
        assert img == seq
    else:
        seq = np.asarray(seq)
        assert isinstance(img, np.ndarray) and img.shape == (n,)
        np.testing.assert_array_equal(img, seq if seq.shape == (n,) else seq[:, 0])


@pytest.mark.parametrize("name", ["mse", "psnr", "psnr_from_mse", "ssim", "expected_pairwise_mse"])
def test_paired_image_batch_equals_length_one_sequences(name):
    # (N, H, W, C) scores exactly as (N, 1, H, W, C), with the length-1 T axis left out of the result.
    rng = np.random.default_rng(8)
    g = _frames(rng, (5, 12, 13, 3))
    p = np.clip(g + rng.normal(scale=0.1, size=g.shape), 0, 1)
    p[1] = g[1]                                                      # an exact match (capped PSNR)
    f = _PAIRED[name]
    valid = np.array([True, True, False, True, True])
    for v_img, v_seq in ((None, None), (valid, valid[:, None])):
        _assert_image_equals_sequence(f(p, g, v_img), f(p[:, None], g[:, None], v_seq), 5)
    # The per-image mse and its valid mask: a masked image has no value.
    if name == "mse":
        np.testing.assert_array_equal(M.mse(p, g), np.mean((p - g) ** 2, axis=(1, 2, 3)))
        assert np.isnan(M.mse(p, g, valid)[2])
    if name == "psnr":
        per_image = np.mean((p[[0, 1, 3, 4]] - g[[0, 1, 3, 4]]) ** 2, axis=(1, 2, 3))
        r = M.psnr(p, g, valid=valid)
        with np.errstate(divide="ignore"):
            assert r["frame_mean"] == pytest.approx(np.mean(np.minimum(10 * np.log10(1 / per_image), 100.0)))
        assert r["pooled"] == pytest.approx(10 * np.log10(1 / per_image.mean()))


def _assert_same_result(a, b):
    if isinstance(b, dict):
        assert a == b
    else:
        assert isinstance(a, (np.ndarray, np.floating)) and np.shape(a) == np.shape(b)
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["mse", "psnr", "psnr_from_mse", "ssim", "expected_pairwise_mse"])
@pytest.mark.parametrize("shape", [(3, 4, 12, 12, 3), (3, 12, 12, 1)], ids=["sequences", "images"])
def test_paired_torch_tensors_equal_numpy(name, shape):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    g = _frames(rng, shape)
    p = np.clip(g + rng.normal(scale=0.1, size=g.shape), 0, 1)
    valid = rng.random(shape[:2] if len(shape) == 5 else shape[:1]) < 0.7
    valid[0] = True
    f = _PAIRED[name]
    ref = f(p, g, valid)
    for dtype in (torch.float64, torch.float32):
        # A model's output: requires grad (the functions detach it).
        pt = torch.from_numpy(p).to(dtype).requires_grad_()
        gt = torch.from_numpy(g).to(dtype)
        want = ref if dtype == torch.float64 else f(p.astype(np.float32), g.astype(np.float32), valid)
        _assert_same_result(f(pt, gt, torch.from_numpy(valid)), want)
    # Integer frames (e.g. uint8 on [0, 255]) take the numpy path's conversion too.
    q, h = (p * 255).astype(np.uint8), (g * 255).astype(np.uint8)
    _assert_same_result(f(torch.from_numpy(q), torch.from_numpy(h), valid), f(q, h, valid))


@pytest.mark.parametrize("name", ["mse", "psnr", "psnr_from_mse", "ssim", "expected_pairwise_mse"])
def test_paired_bfloat16_tensors_go_through_float32(name):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    g = torch.from_numpy(_frames(rng, (2, 3, 12, 12, 3))).to(torch.bfloat16)
    p = (g.float() + 0.05 * torch.from_numpy(rng.normal(size=g.shape)).float()).clamp(0, 1).to(torch.bfloat16)
    f = _PAIRED[name]
    got = f(p.requires_grad_(), g, None)
    _assert_same_result(got, f(p.detach().float().numpy(), g.float().numpy(), None))
    # and an image batch of bfloat16 equals its length-1 sequences
    _assert_image_equals_sequence(f(p[:, 0], g[:, 0], None), f(p[:, :1], g[:, :1], None), 2)
    if name == "psnr_from_mse":
        m = torch.tensor([0.01, 0.0], dtype=torch.bfloat16)
        np.testing.assert_array_equal(M.psnr_from_mse(m), M.psnr_from_mse(m.float().numpy()))


def test_lpips_distance_images_torch_and_bfloat16():
    torch = pytest.importorskip("torch")

    class SquaredError(torch.nn.Module):
        """A stand-in for ``lpips.LPIPS`` (same call), so that no weights are needed."""

        def forward(self, a, b, normalize=False):
            return ((a - b) ** 2).mean(dim=(1, 2, 3), keepdim=True)

    model = SquaredError()
    rng = np.random.default_rng(11)
    g = _frames(rng, (5, 16, 16, 3)).astype(np.float32)
    p = np.clip(g + rng.normal(scale=0.1, size=g.shape), 0, 1).astype(np.float32)
    img = M.lpips_distance(p, g, model, batch_size=2)
    assert img.shape == (5,)
    np.testing.assert_array_equal(img, M.lpips_distance(p[:, None], g[:, None], model, batch_size=2)[:, 0])
    np.testing.assert_allclose(img, np.mean((p - g) ** 2, axis=(1, 2, 3)), rtol=1e-5)
    seq = M.lpips_distance(p.reshape(1, 5, 16, 16, 3), g.reshape(1, 5, 16, 16, 3), model)
    assert seq.shape == (1, 5)
    pt = torch.from_numpy(p).requires_grad_()
    np.testing.assert_array_equal(M.lpips_distance(pt, torch.from_numpy(g), model, batch_size=2), img)
    pb, gb = torch.from_numpy(p).to(torch.bfloat16), torch.from_numpy(g).to(torch.bfloat16)
    np.testing.assert_array_equal(M.lpips_distance(pb, gb, model),
                                  M.lpips_distance(pb.float().numpy(), gb.float().numpy(), model))
    with pytest.raises(ValueError, match=re.escape("lpips_distance: pred and target have shape (5, 16, 16, 4)")
                       + ".*C = 1 or 3"):
        M.lpips_distance(np.zeros((5, 16, 16, 4)), np.zeros((5, 16, 16, 4)), model)
    with pytest.raises(ValueError, match=re.escape("lpips_distance: target has shape (16, 16)")):
        M.lpips_distance(np.zeros((16, 16, 3)), np.zeros((16, 16)), model)


_ACCEPT_PSNR = "(N, T, H_img, W, C) sequences or (N, H_img, W, C) images"


@pytest.mark.parametrize("call, message", [
    (lambda: M.psnr(np.zeros((3, 8, 8)), np.zeros((3, 8, 8))),
     f"psnr: pred has shape (3, 8, 8); accepted: equal shapes {_ACCEPT_PSNR}"),
    (lambda: M.psnr(np.zeros((1, 2, 3, 8, 8, 1)), np.zeros((1, 2, 3, 8, 8, 1))),
     "psnr: pred has shape (1, 2, 3, 8, 8, 1); accepted: equal shapes (N, T, H_img, W, C)"),
    (lambda: M.psnr(np.zeros((2, 3, 8, 8, 1)), np.zeros((2, 3, 8, 8, 3))),
     "psnr: pred has shape (2, 3, 8, 8, 1) but target has shape (2, 3, 8, 8, 3); they must be equal"),
    (lambda: M.psnr(np.zeros((4, 8, 8, 1)), np.ones((4, 8, 8, 1)), valid=np.ones((4, 1), bool)),
     "psnr: valid has shape (4, 1); accepted: (4,), one flag per image"),
    (lambda: M.psnr(np.zeros((4, 2, 8, 8, 1)), np.ones((4, 2, 8, 8, 1)), valid=np.ones((2, 4), bool)),
     "psnr: valid has shape (2, 4); accepted: (4, 2)"),
    (lambda: M.mse(np.zeros((8, 8)), np.zeros((8, 8))),
     "mse: pred has shape (8, 8); accepted: equal shapes (N, T, H_img, W, C)"),
    (lambda: M.mse(np.zeros((2, 3, 8, 8, 1)), np.zeros((2, 2, 8, 8, 1))),
     "mse: pred has shape (2, 3, 8, 8, 1) but target has shape (2, 2, 8, 8, 1)"),
    (lambda: M.mse(np.zeros((2, 3, 8, 8, 1)), np.zeros((2, 3, 8, 8, 1)), np.ones((2, 2), bool)),
     "mse: valid has shape (2, 2); accepted: (2, 3)"),
    (lambda: M.mse(np.zeros((4, 8, 8, 1)), np.zeros((4, 8, 8, 1)), np.ones((4, 1), bool)),
     "mse: valid has shape (4, 1); accepted: (4,), one flag per image"),
    (lambda: M.ssim(np.zeros((12, 12, 3)), np.zeros((12, 12))),
     "ssim: target has shape (12, 12); accepted: equal shapes (..., H_img, W, C)"),
    (lambda: M.ssim(np.zeros((2, 12, 12, 3)), np.zeros((2, 12, 12, 1))),
     "ssim: pred has shape (2, 12, 12, 3) but target has shape (2, 12, 12, 1)"),
    (lambda: M.ssim(np.zeros((2, 10, 12, 1)), np.zeros((2, 10, 12, 1))),
     "ssim: pred and target have shape (2, 10, 12, 1): images (10, 12) are smaller than the 11-pixel window"),
    (lambda: M.expected_pairwise_mse(np.zeros((4,)), np.zeros((4,)), 3),
     "expected_pairwise_mse: pred has shape (4,); accepted: pred (..., K, *event)"),
    (lambda: M.expected_pairwise_mse(np.zeros((2, 3, 4)), np.zeros((3, 1, 4)), 1),
     "expected_pairwise_mse: pred has shape (2, 3, 4) but target has shape (3, 1, 4)"),
], ids=["psnr-3d", "psnr-6d", "psnr-mismatch", "psnr-valid-images", "psnr-valid-sequences", "mse-2d",
        "mse-mismatch", "mse-valid-sequences", "mse-valid-images", "ssim-2d", "ssim-mismatch", "ssim-window",
        "epm-rank", "epm-mismatch"])
def test_paired_shape_errors_name_argument_shape_and_accepted(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_frechet_reference_leaves_out_constant_coordinates_exactly():
    """Dead ReLU channels (a coordinate the reference never varies in) zero a row and column of its covariance:
    Cholesky fails on the whole matrix, so the reference fell back to eigh. On the coordinates that vary it
    factors, and the distance is the one the eigh square root of the whole matrix gives."""
    rng = np.random.default_rng(11)
    x = np.maximum(rng.normal(size=(500, 24)) @ rng.normal(size=(24, 24)), 0.0)
    x[:, [0, 5, 6, 17]] = 0.0                                       # four dead channels
    y = np.maximum(rng.normal(size=(400, 24)) @ rng.normal(size=(24, 24)), 0.0) * 1.3
    y[:, [0, 5]] = 0.0                                              # dead in the other set too
    a, b = M.gaussian_stats(x), M.gaussian_stats(y)
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(a.sigma)
    ref = M.FrechetReference(a.mu, a.sigma)
    assert ref.factor == "cholesky" and ref.support.tolist() == [i for i in range(24) if i not in (0, 5, 6, 17)]
    def fd_via_eigh(root, sigma_b):
        return float(((a.mu - b.mu) ** 2).sum() + np.trace(a.sigma) + np.trace(b.sigma)
                     - 2 * np.sum(np.sqrt(np.clip(np.linalg.eigvalsh(root.T @ sigma_b @ root), 0, None))))

    # An independent route: tr((sqrt(S_a) S_b sqrt(S_a))^(1/2)) is the nuclear norm of A B^T for centred rows.
    def nuclear(y_rows, b_stats):
        ca, cb = (x - a.mu) / np.sqrt(len(x) - 1), (y_rows - b_stats.mu) / np.sqrt(len(y_rows) - 1)
        return float(((a.mu - b_stats.mu) ** 2).sum() + np.trace(a.sigma) + np.trace(b_stats.sigma)
                     - 2 * np.linalg.svd(ca @ cb.T, compute_uv=False).sum())

    scale = np.trace(a.sigma) + np.trace(b.sigma)                  # the size of the terms FD is a difference of
    assert ref.distance(b.mu, b.sigma) == pytest.approx(nuclear(y, b), abs=1e-13 * scale)
    # A channel dead in the compared set alone (9) makes an exactly zero eigenvalue of sqrt(S_a) S_b sqrt(S_a), which
    # eigvalsh returns as rounding of either sign (up to about n eps of the largest); a positive one adds its square
    # root: 2.7e-7 here with OpenBLAS's Haswell kernels, 0 with its SkylakeX ones. That floor is left: zeroing
    # eigenvalues that small costs more on real features, whose spectra run on down to 1e-17 of the largest (on the
    # pendulum's pixel features 2.5e-8 off a 40-digit reference, where the clip at 0 alone is 1.5e-9 off).
    y9 = y.copy()
    y9[:, 9] = 0.0
    b9 = M.gaussian_stats(y9)
    root = M.frechet._sqrtm_psd(a.sigma)
    floor = 2.0 * np.sqrt(24 * np.finfo(np.float64).eps * np.linalg.eigvalsh(root @ b9.sigma @ root).max())
    assert ref.distance(b9.mu, b9.sigma) == pytest.approx(nuclear(y9, b9), abs=1e-13 * scale + floor)
    # The old path (eigh of the whole matrix) agrees to its own rounding (the square roots of rounding-level
    # eigenvalues, sqrt(1e-16 * |S|) each, for the zero ones): 7e-9 relative here.
    assert ref.distance(b.mu, b.sigma) == pytest.approx(fd_via_eigh(M.frechet._sqrtm_psd(a.sigma), b.sigma),
                                                        rel=1e-7)
    assert ref.distance(a.mu, a.sigma) == pytest.approx(0.0, abs=1e-9 * np.trace(a.sigma))
    r = ref.sqrt_sigma
    assert r.shape == (24, 24) and np.allclose(r @ r.T, a.sigma, atol=1e-10 * np.abs(a.sigma).max())
    # A coordinate constant at a non-zero value, through sum(x^2) - n mu^2 (the bootstrap's per-episode moments),
    # comes out as rounding of either sign: it leaves the factor too.
    x2 = np.hstack([x, np.full((len(x), 1), 0.7)])
    n, mu = len(x2), x2.mean(axis=0)
    noisy = (x2.T @ x2 - n * np.outer(mu, mu)) / (n - 1)
    assert noisy[24, 24] > 0.0                                      # rounding above 0: kept by a test "> 0"
    ref2 = M.FrechetReference(mu, noisy)
    assert ref2.factor == "cholesky" and 24 not in ref2.support and ref2.support.size == 20
    # A reference that never varies: no factor to take, the distance is the means' and the other trace.
    flat = M.FrechetReference(np.ones(3), np.zeros((3, 3)))
    assert flat.distance(np.zeros(3), np.eye(3)) == pytest.approx(6.0)
