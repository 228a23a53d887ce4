"""Precision, recall, density and coverage of predicted embeddings against real ones (k-NN balls)."""

from __future__ import annotations

import numpy as np


def _kth_neighbour_radii(x: np.ndarray, k: int, chunk: int) -> np.ndarray:
    """Distance of each row to its k-th nearest neighbour in ``x``, the row itself excluded."""
    sq = np.einsum("ij,ij->i", x, x)
    out = np.empty(len(x))
    for i in range(0, len(x), chunk):
        d2 = sq[i:i + chunk, None] + sq[None]
        g = x[i:i + chunk] @ x.T
        g *= 2.0
        d2 -= g                                    # the same operations, in place
        # Column k of the sorted row is the k-th neighbour: column 0 is the row itself (distance 0). The
        # square root of the clipped squares is monotone, so it is taken of the k-th value only: the same
        # number as the k-th of the row's distances, bit for bit, without a square root per pair.
        out[i:i + chunk] = np.sqrt(np.maximum(np.partition(d2, k, axis=1)[:, k], 0.0))
    return out


def real_radii(real_features: np.ndarray, *, k: int = 5, chunk: int = 2048) -> np.ndarray:
    """The real rows' k-NN radii, which :func:`prdc_rows` takes as ``radii`` when one real set meets many fake
    sets (every model of a world against the same realized futures)."""
    return _kth_neighbour_radii(np.asarray(real_features, dtype=np.float64), k, chunk)


def prdc_rows(real_features: np.ndarray, fake_features: np.ndarray, *, k: int = 5, chunk: int = 2048,
              radii: np.ndarray | None = None) -> dict:
    """Per-row indicators behind :func:`prdc` (each metric is a mean of one of these).

    Returns:
        ``precision`` (n_fake,): fake row inside some real k-NN ball; ``density`` (n_fake,):
        number of real balls containing the fake row, over k; ``recall`` (n_real,): real row
        inside some fake k-NN ball; ``coverage`` (n_real,): nearest fake row inside the real
        row's own ball. Balls are open (strict inequalities), radii the k-th neighbour
        distance excluding the row itself, Euclidean distances in float64. Memory is
        ``O(chunk * (n_real + n_fake))``. ``radii``: the real rows' radii from :func:`real_radii`
        (computed here when not given).
    """
    x, y = np.asarray(real_features, dtype=np.float64), np.asarray(fake_features, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"prdc: features must be (n, d) with equal d, got {x.shape} and {y.shape}")
    if not 1 <= k < min(len(x), len(y)):
        raise ValueError(f"prdc: k = {k} must be in [1, min(n_real, n_fake) = {min(len(x), len(y))})")
    rr = _kth_neighbour_radii(x, k, chunk) if radii is None else np.asarray(radii, dtype=np.float64)
    if rr.shape != (len(x),):
        raise ValueError(f"prdc: radii has shape {rr.shape}, expected ({len(x)},) (one per real row)")
    rf = _kth_neighbour_radii(y, k, chunk)
    sx, sy = np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", y, y)
    in_real = np.zeros(len(y), dtype=np.int64)    # real balls containing each fake row
    recall = np.zeros(len(x), dtype=bool)
    nearest_fake = np.full(len(x), np.inf)
    for j in range(0, len(y), chunk):
        d = sx[:, None] + sy[None, j:j + chunk]                                                          # (n_r, c)
        g = x @ y[j:j + chunk].T
        g *= 2.0
        d -= g
        np.sqrt(np.maximum(d, 0.0, out=d), out=d)          # sqrt(max(sx + sy - 2 x.y, 0)), in place
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
