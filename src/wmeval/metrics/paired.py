"""Paired metrics: a prediction against its realized future, frame by frame (MSE, PSNR, SSIM, LPIPS).

Frames are float arrays in [0, L] (L = ``data_range``, 1.0 for wmeval's frames) in the layout
``(..., H_img, W, C)`` (channels last; the last three axes are one image).
"""

from __future__ import annotations

import numpy as np


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
        model: from :func:`wmeval.encoders.lpips_backbone.load_lpips` (its record names backbone and version).

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
