import numpy as np
import pytest

from wmeval.core.rng import make_rng
from wmeval.metrics import expected_pairwise_mse
from wmeval.models import (
    BlobReferenceModel,
    History,
    LeastSquaresPendulumModel,
    build_model,
)
from wmeval.worlds import BlobWorld, PendulumWorld
from wmeval.worlds.pendulum import env_step


def seed_models():
    """Seed 002's fitting code, verbatim apart from the return value."""
    rng = np.random.default_rng(0)
    S = rng.uniform([-1.5, -3], [1.5, 3], size=(5000, 2))
    A = rng.uniform(-1, 1, size=5000)
    S2 = env_step(S, A) + rng.normal(0, 0.01, size=(5000, 2))

    def fit(features):
        X = features(S, A)
        W, *_ = np.linalg.lstsq(X, S2, rcond=None)
        return W

    return {
        "linear": fit(lambda s, a: np.c_[s, a, np.ones(len(s))]),
        "action-blind": fit(lambda s, a: np.c_[s, np.sin(s[:, :1]), np.ones(len(s))]),
        "sin-features": fit(lambda s, a: np.c_[s, np.sin(s[:, :1]), a, np.ones(len(s))]),
    }


@pytest.mark.parametrize("name", ["linear", "action-blind", "sin-features"])
def test_pendulum_models_are_fitted_as_in_seed_002(name):
    m = LeastSquaresPendulumModel(name, fit_seed=0)
    np.testing.assert_allclose(m.W, seed_models()[name], rtol=0, atol=1e-12)


def _hist(s):
    return History(frames=None, states=s[:, None], actions=np.zeros((len(s), 0, 1)))


def test_action_blind_ignores_action_and_sin_features_is_accurate():
    s = np.random.default_rng(1).uniform(-1, 1, size=(50, 2))
    blind = LeastSquaresPendulumModel("action-blind")
    good = LeastSquaresPendulumModel("sin-features")
    rng = np.random.default_rng(0)
    up = blind.predict(_hist(s), np.ones((50, 5, 1)), 1, rng).states
    down = blind.predict(_hist(s), -np.ones((50, 5, 1)), 1, rng).states
    np.testing.assert_array_equal(up, down)
    pred = good.predict(_hist(s), np.ones((50, 1, 1)), 1, rng).states[:, 0, 0]
    assert np.sqrt(np.mean((pred - env_step(s, 1.0)) ** 2)) < 0.005


def test_stochastic_pendulum_samples_and_density():
    m = LeastSquaresPendulumModel("sin-features", stochastic=True)
    assert m.stochastic and np.all(m.sigma > 0.005) and np.all(m.sigma < 0.02)  # the seed's 0.01 noise
    s = np.zeros((3, 2))
    out = m.predict(_hist(s), np.zeros((3, 4, 1)), 8, np.random.default_rng(0)).states
    assert out.shape == (3, 8, 4, 2) and out[:, :, 0].std(axis=1).min() > 0
    # log_prob of the mean path is the Gaussian normaliser; a far-off path is much less likely.
    mean_path = LeastSquaresPendulumModel("sin-features").predict(_hist(s), np.zeros((3, 4, 1)), 1, None).states[:, 0]
    lp = m.log_prob(_hist(s), np.zeros((3, 4, 1)), History(None, mean_path, np.zeros((3, 4, 1))))
    np.testing.assert_allclose(lp, -np.sum(np.log(m.sigma)) - np.log(2 * np.pi), rtol=1e-9)
    lp_far = m.log_prob(_hist(s), np.zeros((3, 4, 1)), History(None, mean_path + 0.1, np.zeros((3, 4, 1))))
    assert np.all(lp_far < lp - 10)


def _blob_case():
    w = BlobWorld()
    s = np.array([[20.0, 24.0]])
    hist = History(frames=w.render(s[:, None]), states=s[:, None], actions=np.zeros((1, 0, 1)))
    short = w.render(w.shift(s, np.array([3.0])))
    long = w.render(w.shift(s, np.array([11.0])))
    return w, hist, short, long


def _frames(model, w, hist, a, k=1, rng=None):
    p = model.predict(hist, a, k, rng or np.random.default_rng(0))
    return p.frames if p.frames is not None else w.render(p.states)


def test_seed_000_blob_findings():
    """Realized short step: sharp-A has zero error, the mean beats the wrong sharp mode."""
    w, hist, short, long = _blob_case()
    a = np.ones((1, 1, 1))
    mse = {}
    for mode in ("sharp-A", "sharp-B", "mean"):
        f = _frames(BlobReferenceModel(mode, w), w, hist, a)
        mse[mode] = float(np.mean((f[0, 0, 0] - short[0]) ** 2))
    assert mse["sharp-A"] == 0.0
    assert 0 < mse["mean"] < mse["sharp-B"]
    mean = _frames(BlobReferenceModel("mean", w), w, hist, a)[0, 0, 0]
    np.testing.assert_allclose(mean, 0.5 * (short[0] + long[0]), atol=1e-6)  # faded two-blob image


def test_blob_mean_is_the_conditional_mean_over_horizon():
    w = BlobWorld()
    s0 = w.initial_states(6, make_rng(0, "i"))
    acts = np.random.default_rng(2).choice([-1.0, 1.0], size=(6, 4, 1))
    hist = History(frames=None, states=s0[:, None], actions=np.zeros((6, 0, 1)))
    mean = BlobReferenceModel("mean", w).predict(hist, acts, 1, None).frames[:, 0]
    # Monte Carlo over the true world: the mean frame of many realized futures.
    rng = np.random.default_rng(5)
    acc = np.zeros_like(mean, dtype=np.float64)
    n = 4000
    s = np.repeat(s0[:, None], n, axis=1)
    for t in range(4):
        s = w.step(s, np.repeat(acts[:, t][:, None], n, axis=1), rng)
        acc[:, t] = w.render(s).mean(axis=1)
    assert np.max(np.abs(acc - mean)) < 0.03


def test_blob_stochastic_and_reversed():
    w, hist, short, long = _blob_case()
    right = np.ones((1, 1, 1))
    st = BlobReferenceModel("stochastic", w).predict(hist, right, 400, np.random.default_rng(0)).states
    assert set(np.unique(st[0, :, 0, 0])) == {23.0, 31.0}
    rv = BlobReferenceModel("reversed", w).predict(hist, right, 400, np.random.default_rng(0)).states
    assert set(np.unique(rv[0, :, 0, 0])) == {17.0, 9.0}
    # Probability mass of realized steps: 1/2 for a mode of the right action, 0 for the reversed model.
    fut = History(None, np.array([[[23.0, 24.0]]]), right)
    assert BlobReferenceModel("stochastic", w).log_prob(hist, right, fut)[0, 0] == pytest.approx(np.log(0.5))
    assert BlobReferenceModel("reversed", w).log_prob(hist, right, fut)[0, 0] == -np.inf


def test_pairwise_mse_of_two_mode_futures():
    # The true conditional vs realized futures: K x M pairs, half of them a mode apart.
    w, hist, short, long = _blob_case()
    pred = np.stack([short[0], long[0]])[None]  # (1, K=2, ...)
    targ = np.stack([short[0], long[0]])[None]
    got = expected_pairwise_mse(pred, targ, 3)[0]
    assert got == pytest.approx(0.5 * np.mean((short[0] - long[0]) ** 2), rel=1e-6)


def test_build_model_through_hydra_target():
    w = PendulumWorld()
    m = build_model("pendulum", "lin", {"_target_": "wmeval.models.LeastSquaresPendulumModel",
                                        "features": "linear"}, w)
    assert isinstance(m, LeastSquaresPendulumModel) and m.features == "linear"
