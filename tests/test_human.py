"""Krippendorff's alpha: parity with the krippendorff package on every level, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from wmeval.human import LEVELS, krippendorff_alpha

krippendorff = pytest.importorskip("krippendorff")


def _data(rng, raters, units, values, missing):
    d = rng.choice(values, size=(raters, units)).astype(float)
    d[rng.uniform(size=d.shape) < missing] = np.nan
    return d


@pytest.mark.parametrize("level", LEVELS)
def test_parity_with_the_krippendorff_package(level):
    """Random studies (2-6 raters, 5-40 units, up to 40% missing, values on a 1..7 scale or a sparse ratio scale),
    on every level: the same alpha to 1e-12."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(60):
        values = np.arange(1, 8) if rng.uniform() < 0.5 else np.array([0.0, 0.5, 2.0, 9.0])
        d = _data(rng, int(rng.integers(2, 7)), int(rng.integers(5, 41)), values, rng.uniform(0, 0.4))
        try:
            want = krippendorff.alpha(reliability_data=d, level_of_measurement=level)
        except ValueError:
            continue                                   # degenerate draw (one value): both refuse
        assert krippendorff_alpha(d, level) == pytest.approx(want, abs=1e-12), (level, d)
        checked += 1
    assert checked >= 50


def test_value_counts_and_a_declared_domain_agree_with_the_matrix():
    rng = np.random.default_rng(1)
    d = _data(rng, 4, 30, np.arange(1, 6), 0.2)
    domain = np.arange(1, 6)                            # includes values nobody used
    counts = np.stack([(d == v).sum(axis=0) for v in domain], axis=1)
    for level in LEVELS:
        a = krippendorff_alpha(d, level, value_domain=domain)
        assert krippendorff_alpha(value_counts=counts, value_domain=domain, level_of_measurement=level) == \
            pytest.approx(a, abs=1e-12)
        assert a == pytest.approx(krippendorff.alpha(reliability_data=d, value_domain=domain,
                                                     level_of_measurement=level), abs=1e-12)


def test_perfect_chance_and_systematic_disagreement():
    perfect = np.array([[1, 2, 3, 4, 5.0], [1, 2, 3, 4, 5.0]])
    assert krippendorff_alpha(perfect, "nominal") == 1.0
    opposite = np.array([[1, 2, 1, 2, 1, 2.0], [2, 1, 2, 1, 2, 1.0]])
    assert krippendorff_alpha(opposite, "nominal") < 0
    rng = np.random.default_rng(2)
    chance = np.mean([krippendorff_alpha(_data(rng, 3, 200, np.arange(5), 0.0), "interval") for _ in range(20)])
    assert abs(chance) < 0.02


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="exactly one of"):
        krippendorff_alpha()
    with pytest.raises(ValueError, match="level_of_measurement must be one of"):
        krippendorff_alpha([[1, 2], [1, 2]], "cardinal")
    with pytest.raises(ValueError, match="raters x units"):
        krippendorff_alpha([1, 2, 3])
    with pytest.raises(ValueError, match=r"rating 7\.0 is not in value_domain"):
        krippendorff_alpha([[1, 7], [1, 2]], value_domain=[1, 2, 3])
    with pytest.raises(ValueError, match="no unit has two or more ratings"):
        krippendorff_alpha([[1, np.nan], [np.nan, 2]])
    with pytest.raises(ValueError, match="alpha is undefined"):
        krippendorff_alpha([[3, 3, 3], [3, 3, 3]])
    with pytest.raises(ValueError, match="must be increasing"):
        krippendorff_alpha([[1, 2], [2, 1]], "ordinal", value_domain=[2, 1])
