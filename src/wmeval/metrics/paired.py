"""Paired metrics: a prediction against its realized future, frame by frame (MSE, PSNR, SSIM, LPIPS).

Frames are float arrays in [0, L] (L = ``data_range``, 1.0 for wmeval's frames) in the layout
``(..., H_img, W, C)`` (channels last; the last three axes are one image).

Inputs: numpy arrays (any dtype ``np.asarray`` converts) or torch tensors on any device, which
are detached and copied to numpy first (bfloat16 and other float types numpy lacks go through
float32, which holds them exactly); torch is never imported here for that. Results are numpy
float64 (or Python floats) whatever the input type.

Shapes: an image batch ``(N, H_img, W, C)`` scores exactly as the same data given as sequences
of length 1, ``(N, 1, H_img, W, C)``, with the length-1 frame axis T left out of the result:

============================  =======================  ===========================
function                      ``(N, T, H_img, W, C)``  ``(N, H_img, W, C)``
============================  =======================  ===========================
:func:`ssim`                  ``(N, T)``               ``(N,)`` per image
:func:`lpips_distance`        ``(N, T)``               ``(N,)`` per image
:func:`mse`                   ``(N,)`` per sequence    ``(N,)`` per image
:func:`psnr`                  dict of floats           dict of floats
============================  =======================  ===========================

(The ``valid`` mask follows: ``(N, T)`` for sequences, ``(N,)`` for images.) A shape outside
these raises ``ValueError`` naming the argument, its shape and the accepted shapes.
"""

from __future__ import annotations

import numpy as np


def _numpy(x):
    """``x`` as numpy if it is a torch tensor (detected by duck typing: torch stays a lazy import), else ``x``."""
    if not (hasattr(x, "detach") and hasattr(x, "cpu") and hasattr(x, "numpy")):
        return x
    t = x.detach().cpu()
    try:
        return t.numpy()
    except TypeError:  # bfloat16, float8: no numpy dtype; float32 holds every such value exactly
        if not t.is_floating_point():
            raise
        return t.float().numpy()


def _frame_pair(fn: str, pred, target, dtype, ndims, accepted: str) -> tuple[np.ndarray, np.ndarray]:
    """``pred`` and ``target`` as ``dtype`` arrays of one shape whose rank is in ``ndims`` (``None``: >= 3)."""
    p, g = np.asarray(_numpy(pred), dtype=dtype), np.asarray(_numpy(target), dtype=dtype)
    for name, a in (("pred", p), ("target", g)):
        if (a.ndim < 3) if ndims is None else (a.ndim not in ndims):
            raise ValueError(f"{fn}: {name} has shape {a.shape}; accepted: {accepted}")
    if p.shape != g.shape:
        raise ValueError(f"{fn}: pred has shape {p.shape} but target has shape {g.shape}; they must be equal, "
                         f"accepted: {accepted}")
    return p, g


def _valid_mask(fn: str, valid, shape: tuple[int, ...], what: str) -> np.ndarray:
    """The ``valid`` mask as booleans of ``shape`` (all True for ``None``)."""
    if valid is None:
        return np.ones(shape, dtype=bool)
    v = np.asarray(_numpy(valid), dtype=bool)
    if v.shape != shape:
        raise ValueError(f"{fn}: valid has shape {v.shape}; accepted: {shape}, {what}")
    return v


def expected_pairwise_mse(pred, target, event_ndim: int) -> np.ndarray:
    """Mean squared error averaged over every (prediction sample, realized future) pair.

    Args:
        pred: ``(..., K, *event)``: K predicted samples; numpy array or torch tensor.
        target: ``(..., M, *event)``: M realized futures (M = 1 for a single reference).
        event_ndim: number of trailing event axes averaged over (3 for frames
            ``(H_img, W, C)``, 1 for states ``(D,)``).

    For frames (``event_ndim=3``) an image batch ``pred (N, K, H_img, W, C)``, ``target
    (N, M, H_img, W, C)`` gives ``(N,)``, the same values as sequences of length 1
    ``(N, 1, K, H_img, W, C)``, ``(N, 1, M, H_img, W, C)`` give as ``(N, 1)``.

    Returns:
        ``(...)`` float64 numpy, ``mean_{k, m} mean_event (pred_k - target_m)^2``, computed as
        ``E|p|^2 + E|g|^2 - 2 <E p, E g>`` per element without forming the K x M pairs.
        For K = M = 1 it is the plain MSE.

    Raises:
        ValueError: ``pred`` or ``target`` has fewer than ``event_ndim + 1`` axes, or they differ
            other than in the sample axis.

    >>> float(expected_pairwise_mse(np.array([[0.0], [1.0]]), np.array([[0.0]]), 1))
    0.5
    """
    p = np.asarray(_numpy(pred), dtype=np.float64)
    g = np.asarray(_numpy(target), dtype=np.float64)
    accepted = (f"pred (..., K, *event) and target (..., M, *event) with event_ndim = {event_ndim} event axes, "
                f"equal except in the sample axis (axis {-event_ndim - 1})")
    for name, a in (("pred", p), ("target", g)):
        if event_ndim < 0 or a.ndim < event_ndim + 1:
            raise ValueError(f"expected_pairwise_mse: {name} has shape {a.shape}; accepted: {accepted}")
    if p.ndim != g.ndim or p.shape[: -event_ndim - 1] != g.shape[: -event_ndim - 1] \
            or p.shape[p.ndim - event_ndim:] != g.shape[g.ndim - event_ndim:]:
        raise ValueError(f"expected_pairwise_mse: pred has shape {p.shape} but target has shape {g.shape}; "
                         f"accepted: {accepted}")
    k = p.ndim - event_ndim - 1
    ev = tuple(range(k, p.ndim))
    pp = np.mean(p**2, axis=ev)
    gg = np.mean(g**2, axis=ev)
    cross = np.mean(p.mean(axis=k) * g.mean(axis=k), axis=tuple(range(k, p.ndim - 1)))
    return np.maximum(pp + gg - 2.0 * cross, 0.0)


def mse(pred, target, valid=None) -> np.ndarray:
    """Per-sequence MSE: mean over pixels of each frame, then over the valid frames of each sequence.

    Args:
        pred, target: numpy arrays or torch tensors of equal shape, one of
            ``(N, T, H_img, W, C)``: N sequences of T frames (more leading axes allowed:
            ``(..., T, H_img, W, C)``);
            ``(N, H_img, W, C)``: N images, scored as sequences of one frame (a single sequence
            of T frames is ``(1, T, H_img, W, C)``);
            ``(H_img, W, C)``: one frame.
        valid: booleans, ``(..., T)`` for sequences, ``(N,)`` for images (ignored for one frame);
            padded frames (``False``) are excluded. By convention a sequence with no valid frame
            has no value: ``NaN`` (the caller counts it out, never as 0). ``None``: every frame
            is valid.

    Returns:
        float64 numpy: ``(...)`` per-sequence MSE for sequences ``(..., T, H_img, W, C)``, ``(N,)``
        per-image MSE for images (equal to the result for ``(N, 1, H_img, W, C)``), a scalar for
        one frame. Average these over sequences (sequence first, then sequences) for a dataset MSE.

    Raises:
        ValueError: the shapes of ``pred``, ``target`` or ``valid`` are not accepted.

    >>> p, g = np.zeros((1, 2, 1, 1, 1)), np.array([0.0, 1.0]).reshape(1, 2, 1, 1, 1)
    >>> mse(p, g, np.array([[True, False]])).tolist()
    [0.0]
    """
    p, g = _frame_pair("mse", pred, target, np.float64, None,
                       "equal shapes (N, T, H_img, W, C) sequences (or (..., T, H_img, W, C)), "
                       "(N, H_img, W, C) images or (H_img, W, C) one frame")
    if p.ndim == 4:  # images: sequences of one frame
        v = None if valid is None else _valid_mask("mse", valid, p.shape[:1], "one flag per image")[:, None]
        return mse(p[:, None], g[:, None], v)
    per_frame = np.mean((p - g) ** 2, axis=(-3, -2, -1))
    if p.ndim == 3:
        return per_frame
    v = _valid_mask("mse", valid, per_frame.shape, "one flag per frame of (..., T, H_img, W, C)")
    n = v.sum(axis=-1)
    with np.errstate(invalid="ignore"):
        return np.where(n > 0, np.sum(np.where(v, per_frame, 0.0), axis=-1) / np.maximum(n, 1), np.nan)


PSNR_CAP_DB = 100.0
"""The declared PSNR of an exact match: above any non-zero error of 8-bit frames up to 4096^2 pixels."""


def psnr_from_mse(m, data_range: float = 1.0, cap_db: float | None = PSNR_CAP_DB) -> np.ndarray:
    """``10 log10(L^2 / MSE)`` in dB, higher is better, elementwise.

    An exact match (MSE = 0) has infinite PSNR; ``cap_db`` (default 100 dB, above any
    non-zero error of 8-bit frames up to 4096^2 pixels) caps it so averages stay finite.
    ``cap_db=None`` returns ``inf`` for exact matches.

    Args:
        m: MSE values of any shape (e.g. :func:`mse`'s ``(N,)``), numpy or torch.

    Returns:
        float64 numpy of ``m``'s shape.
    """
    m = np.asarray(_numpy(m), dtype=np.float64)
    with np.errstate(divide="ignore"):
        out = 10.0 * np.log10(data_range**2 / m)
    return out if cap_db is None else np.minimum(out, cap_db)


def psnr(pred, target, *, data_range: float = 1.0, valid=None,
         cap_db: float | None = PSNR_CAP_DB) -> dict[str, float]:
    """PSNR of frame sequences in both averaging conventions, and their gap.

    Args:
        pred, target: numpy arrays or torch tensors of equal shape in [0, ``data_range``]:
            ``(N, T, H_img, W, C)`` (N sequences of T frames) or ``(N, H_img, W, C)`` (N images,
            scored exactly as ``(N, 1, H_img, W, C)``).
        valid: mask of real (non-padded) frames, ``(N, T)`` for sequences, ``(N,)`` for images.

    Returns:
        Python floats (the same for images and for sequences of length 1):
        ``frame_mean``: per-frame PSNR averaged over each sequence's valid frames, then over
        sequences; ``pooled``: PSNR of the pooled MSE (the sequence-then-dataset MSE of
        :func:`mse`); ``gap`` = frame_mean - pooled, which for equal sequence lengths is
        ``10 log10(AM / GM)`` of the per-frame MSEs (>= 0, equal to 0 when all errors are equal).
        For images ``frame_mean`` is the mean per-image PSNR and ``pooled`` the PSNR of the mean MSE.

    Raises:
        ValueError: the shapes of ``pred``, ``target`` or ``valid`` are not accepted, or no frame is valid.

    >>> r = psnr(np.zeros((1, 2, 1, 1, 1)), np.full((1, 2, 1, 1, 1), 0.1))
    >>> round(r["frame_mean"], 6), round(r["gap"], 12)
    (20.0, 0.0)
    """
    p, g = _frame_pair("psnr", pred, target, np.float64, (4, 5),
                       "equal shapes (N, T, H_img, W, C) sequences or (N, H_img, W, C) images")
    if p.ndim == 4:  # images: sequences of one frame
        v = None if valid is None else _valid_mask("psnr", valid, p.shape[:1], "one flag per image")[:, None]
        return psnr(p[:, None], g[:, None], data_range=data_range, valid=v, cap_db=cap_db)
    per_frame = np.mean((p - g) ** 2, axis=(-3, -2, -1))
    v = _valid_mask("psnr", valid, per_frame.shape, "one flag per frame of (N, T, H_img, W, C)")
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
    y = np.einsum("bhwck,k->bhwc", sliding_window_view(x, SSIM_WINDOW, axis=1), w)
    return np.einsum("bhwck,k->bhwc", sliding_window_view(y, SSIM_WINDOW, axis=2), w)


def ssim(pred, target, *, data_range: float = 1.0) -> np.ndarray:
    """Mean SSIM per image pair (Wang et al. 2004), higher is better, 1 for identical images.

    Gaussian window of 11 taps with sigma 1.5, K1 = 0.01, K2 = 0.03, population (not sample)
    covariances, constants from ``data_range`` L. Borders: the SSIM map is averaged over the
    pixels whose whole window lies inside the image (the 5-pixel border is excluded), which is
    what ``skimage.metrics.structural_similarity(gaussian_weights=True, sigma=1.5,
    use_sample_covariance=False, data_range=L)`` does after its reflect-padded filtering. Each
    channel is scored separately and the channels averaged.

    Args:
        pred, target: numpy arrays or torch tensors of equal shape ``(..., H_img, W, C)`` with
            ``H_img, W >= 11``: ``(N, T, H_img, W, C)`` sequences, ``(N, H_img, W, C)`` images,
            ``(H_img, W, C)`` one image, or any other leading axes.

    Returns:
        ``(...)`` float64 numpy, one value per image: ``(N, T)`` for sequences, ``(N,)`` for
        images (the values ``(N, 1, H_img, W, C)`` gives as ``(N, 1)``), a scalar for one image.

    Raises:
        ValueError: the shapes are not accepted or the images are smaller than the window.
    """
    p, g = _frame_pair("ssim", pred, target, np.float64, None,
                       "equal shapes (..., H_img, W, C), e.g. (N, T, H_img, W, C) sequences or "
                       "(N, H_img, W, C) images")
    if min(p.shape[-3:-1]) < SSIM_WINDOW:
        raise ValueError(f"ssim: pred and target have shape {p.shape}: images {p.shape[-3:-1]} are smaller than "
                         f"the {SSIM_WINDOW}-pixel window; accepted: H_img, W >= {SSIM_WINDOW}")
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


def ssim_pairs(pred: np.ndarray, real: np.ndarray, *, data_range: float = 1.0) -> np.ndarray:
    """:func:`ssim` of every (sample, future) pair: ``(..., S, H_img, W, C)`` and ``(..., M, H_img, W, C)``
    float64 -> ``(..., S, M)``, the values :func:`ssim` gives on the broadcast pairs, bit for bit (tested).

    Each image's local mean and variance are filtered once instead of once per pair: 2S + 2M + SM Gaussian
    filterings instead of 5SM (80 -> 32 for K = M = 4)."""
    img = pred.shape[-3:]
    if min(img[:2]) < SSIM_WINDOW:
        raise ValueError(f"ssim_pairs: images {img[:2]} are smaller than the {SSIM_WINDOW}-pixel window")
    lead, S, M = pred.shape[:-4], pred.shape[-4], real.shape[-4]
    x, y = pred.reshape(-1, S, *img), real.reshape(-1, M, *img)
    c1, c2 = (SSIM_K1 * data_range) ** 2, (SSIM_K2 * data_range) ** 2
    out = np.empty((len(x), S, M))
    chunk = max(1, (1 << 24) // max(1, M * int(np.prod(img))))
    for i in range(0, len(x), chunk):
        a, b = x[i:i + chunk], y[i:i + chunk]
        n = len(a)

        def blur(v: np.ndarray) -> np.ndarray:      # (n, k, *img) -> (n, k, h', w', C)
            f = _blur_valid(v.reshape(-1, *img))
            return f.reshape(n, -1, *f.shape[1:])

        mx, my = blur(a), blur(b)
        vx, vy = blur(a * a) - mx * mx, blur(b * b) - my * my
        for k in range(S):
            mxk, vxk = mx[:, k:k + 1], vx[:, k:k + 1]
            cxy = blur(a[:, k:k + 1] * b) - mxk * my
            m = ((2 * mxk * my + c1) * (2 * cxy + c2)) / ((mxk * mxk + my * my + c1) * (vxk + vy + c2))
            out[i:i + n, k] = m.reshape(-1, *m.shape[2:]).mean(axis=(1, 2)).mean(axis=-1).reshape(n, M)
    return out.reshape(*lead, S, M)


def lpips_distance(pred, target, model, *, batch_size: int = 64, device: str = "cpu") -> np.ndarray:
    """LPIPS distance per image pair, lower is better, through an ``lpips.LPIPS`` module.

    Args:
        pred, target: numpy arrays or torch tensors of equal shape ``(..., H_img, W, C)`` in
            [0, 1], C = 1 or 3 (grayscale is repeated to RGB): ``(N, T, H_img, W, C)``
            sequences, ``(N, H_img, W, C)`` images, ``(H_img, W, C)`` one image. Scored in float32.
        model: from :func:`wmeval.encoders.lpips_backbone.load_lpips` (its record names backbone and version).

    Returns:
        ``(...)`` float64 numpy, one value per image: ``(N, T)`` for sequences, ``(N,)`` for
        images (the values ``(N, 1, H_img, W, C)`` gives as ``(N, 1)``), a scalar for one image.

    Raises:
        ValueError: the shapes are not accepted.
    """
    import torch

    accepted = "equal shapes (..., H_img, W, C) with C = 1 or 3, e.g. (N, T, H_img, W, C) or (N, H_img, W, C)"
    p, g = _frame_pair("lpips_distance", pred, target, np.float32, None, accepted)
    if p.shape[-1] not in (1, 3):
        raise ValueError(f"lpips_distance: pred and target have shape {p.shape} with C = {p.shape[-1]} channels; "
                         f"accepted: {accepted}")
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
