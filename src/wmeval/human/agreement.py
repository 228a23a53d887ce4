"""Agreement between raters: Krippendorff's alpha on any level of measurement.

Seed 000 asks for "an agreement measure suited to the scale" of a human study. Krippendorff's alpha is
that measure: it takes any number of raters, missing ratings, and nominal, ordinal, interval or ratio
scales. It follows the conventions of the ``krippendorff`` package (raters x units, NaN for a missing
rating) and is parity-tested against it; it is written here so that a study's statistics need no
further dependency and can be resampled (two-way bootstrap over units and raters) cheaply.

The computation (Krippendorff 2011, "Computing Krippendorff's alpha-reliability"): with ``n_uc`` the
number of ratings of value ``c`` in unit ``u`` and ``m_u`` the unit's ratings, only units with
``m_u >= 2`` are pairable; the coincidences are ``o_ck = sum_u (n_uc n_uk - [c = k] n_uc) / (m_u - 1)``,
``n_c = sum_k o_ck``, ``n = sum_c n_c``, and

    alpha = 1 - (n - 1) sum_ck o_ck d2(c, k) / sum_ck n_c n_k d2(c, k)

with the level's squared distance ``d2``: nominal ``[c != k]``; ordinal
``(sum_{g=c..k} n_g - (n_c + n_k) / 2)^2`` over the ordered value domain; interval ``(c - k)^2``;
ratio ``((c - k) / (c + k))^2``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

LEVELS = ("nominal", "ordinal", "interval", "ratio")


def value_counts_of(reliability_data: Any, value_domain: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``(counts (units, values), domain (values,))`` of a raters x units matrix with NaN for missing ratings."""
    data = np.asarray(reliability_data, dtype=np.float64)
    if data.ndim != 2:
        raise ValueError(f"reliability_data must be raters x units (2-D), got shape {data.shape}")
    present = ~np.isnan(data)
    domain = np.unique(data[present]) if value_domain is None else np.asarray(value_domain, dtype=np.float64)
    if domain.ndim != 1 or len(np.unique(domain)) != len(domain):
        raise ValueError(f"value_domain must be a 1-D list of distinct values, got {value_domain!r}")
    values = data[present]
    order = np.argsort(domain)
    idx = np.clip(np.searchsorted(domain[order], values), 0, max(len(domain) - 1, 0))
    pos = order[idx] if len(domain) else idx
    bad = domain[pos] != values if len(domain) else np.ones(len(values), bool)
    if bad.any():
        raise ValueError(f"rating {float(values[bad][0])!r} is not in value_domain {domain.tolist()}")
    counts = np.zeros((data.shape[1], len(domain)))
    np.add.at(counts, (np.nonzero(present)[1], pos), 1.0)
    return counts, domain


def _squared_distances(level: str, domain: np.ndarray, n_c: np.ndarray) -> np.ndarray:
    c, k = domain[:, None], domain[None, :]
    if level == "nominal":
        return (c != k).astype(np.float64)
    if level == "interval":
        return (c - k) ** 2
    if level == "ratio":
        s = c + k
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(s == 0, 0.0, ((c - k) / np.where(s == 0, 1.0, s)) ** 2)
    # ordinal: the ranks between c and k (inclusive) minus half of each end, over the ordered domain
    cs = np.cumsum(n_c)
    i, j = np.minimum.outer(np.arange(len(domain)), np.arange(len(domain))), \
        np.maximum.outer(np.arange(len(domain)), np.arange(len(domain)))
    between = cs[j] - cs[i] + n_c[i]
    return (between - (n_c[:, None] + n_c[None, :]) / 2.0) ** 2


def krippendorff_alpha(reliability_data: Any = None, level_of_measurement: str = "interval", *,
                       value_counts: Any = None, value_domain: Any = None) -> float:
    """Krippendorff's alpha of a raters x units matrix (NaN: no rating), or of units x values counts.

    Args:
        reliability_data: ``(raters, units)``, the rating rater ``i`` gave unit ``j``; NaN where missing.
        level_of_measurement: ``nominal``, ``ordinal``, ``interval`` or ``ratio``.
        value_counts: instead of ``reliability_data``, ``(units, values)``: how many raters gave unit ``j``
            value ``v``.
        value_domain: the possible values, ordered for the ordinal, interval and ratio levels; default the
            sorted ratings that occur (``range(V)`` with ``value_counts``).

    Returns:
        alpha: 1 is perfect agreement, 0 agreement at chance, below 0 systematic disagreement.

    Raises:
        ValueError: both or neither input, an unknown level, a rating outside ``value_domain``, no unit with
            two ratings, or a single value in all pairable ratings (no expected disagreement: alpha is
            undefined).
    """
    if (reliability_data is None) == (value_counts is None):
        raise ValueError("give exactly one of reliability_data (raters x units) and value_counts (units x values)")
    if level_of_measurement not in LEVELS:
        raise ValueError(f"level_of_measurement must be one of {LEVELS}, got {level_of_measurement!r}")
    if reliability_data is not None:
        counts, domain = value_counts_of(reliability_data, value_domain)
    else:
        counts = np.asarray(value_counts, dtype=np.float64)
        if counts.ndim != 2 or (counts < 0).any() or not np.isfinite(counts).all():
            raise ValueError(f"value_counts must be units x values of counts >= 0, got shape {counts.shape}")
        domain = (np.arange(counts.shape[1], dtype=np.float64) if value_domain is None
                  else np.asarray(value_domain, dtype=np.float64))
        if domain.shape != (counts.shape[1],):
            raise ValueError(f"value_domain has {domain.size} values; value_counts has {counts.shape[1]} columns")
    if level_of_measurement != "nominal" and np.any(np.diff(domain) <= 0):
        raise ValueError(f"value_domain must be increasing for the {level_of_measurement} level, got "
                         f"{domain.tolist()}")
    m = counts.sum(axis=1)
    pairable = m >= 2
    if not pairable.any():
        raise ValueError("no unit has two or more ratings: alpha needs pairable values")
    counts, m = counts[pairable], m[pairable]
    w = counts / (m - 1.0)[:, None]
    o = counts.T @ w - np.diag(w.sum(axis=0))                       # coincidences (values x values)
    n_c = o.sum(axis=0)
    n = n_c.sum()
    d2 = _squared_distances(level_of_measurement, domain, n_c)
    expected = float(np.outer(n_c, n_c).ravel() @ d2.ravel())
    if expected <= 0:
        raise ValueError("all pairable ratings take one value: no expected disagreement, alpha is undefined")
    return float(1.0 - (n - 1.0) * float(o.ravel() @ d2.ravel()) / expected)
