import numpy as np
import pytest

from wmeval.core.rng import make_rng
from wmeval.worlds import BlobWorld, PendulumWorld, rollout_states
from wmeval.worlds.blobs import render_blobs
from wmeval.worlds.pendulum import logged_transitions


def seed_env_step(s, a):
    """Seed 002's env_step, verbatim."""
    DT = 0.1
    th, om = s[..., 0], s[..., 1]
    om2 = om + DT * (-9.8 * np.sin(th) + 2.0 * a - 0.1 * om)
    return np.stack([th + DT * om2, om2], axis=-1)


def test_pendulum_step_is_seed_env_step():
    rng = np.random.default_rng(1)
    s = rng.uniform([-3, -5], [3, 5], size=(1000, 2))
    a = rng.uniform(-1, 1, size=(1000, 1))
    w = PendulumWorld()
    np.testing.assert_array_equal(w.step(s, a, None), seed_env_step(s, a[:, 0]))


def test_pendulum_logged_transitions_are_seeds_data():
    rng = np.random.default_rng(0)
    S = rng.uniform([-1.5, -3], [1.5, 3], size=(5000, 2))
    A = rng.uniform(-1, 1, size=5000)
    S2 = seed_env_step(S, A) + rng.normal(0, 0.01, size=(5000, 2))
    got = logged_transitions(np.random.default_rng(0))
    for x, y in zip(got, (S, A, S2)):
        np.testing.assert_array_equal(x, y)


def test_pendulum_render_follows_theta():
    w = PendulumWorld(frame_size=64)
    f = w.render(np.array([[0.0, 0.0], [np.pi / 2, 0.0]]))
    assert f.shape == (2, 64, 64, 1) and f.dtype == np.float32
    assert 0.0 <= f.min() and f.max() <= 1.0
    # theta = 0 hangs down: the bob (brightest spot) is below the centre; pi/2 is to the right.
    y0, x0 = np.unravel_index(np.argmax(f[0, :, :, 0]), (64, 64))
    y1, x1 = np.unravel_index(np.argmax(f[1, :, :, 0]), (64, 64))
    assert y0 > 50 and abs(x0 - 31.5) < 2
    assert x1 > 50 and abs(y1 - 31.5) < 2
    assert PendulumWorld(frame_size=32).render(np.zeros((3, 5, 2))).shape == (3, 5, 32, 32, 1)


def test_blob_modes():
    w = BlobWorld()
    assert w.frame_shape == (48, 48, 1)
    s = np.tile([[20.0, 24.0]], (4000, 1))
    nxt = w.step(s, np.ones((4000, 1)), make_rng(0, "t"))
    xs, counts = np.unique(nxt[:, 0], return_counts=True)
    np.testing.assert_array_equal(xs, [23.0, 31.0])  # short (3 px) and long (11 px) to the right
    assert abs(counts[0] / 4000 - 0.5) < 0.03
    left = w.step(s[:10], -np.ones((10, 1)), make_rng(0, "t"))
    assert set(left[:, 0]) <= {17.0, 9.0}
    img = w.render(np.array([[23.0, 24.0]]))[0, :, :, 0]
    assert np.unravel_index(np.argmax(img), img.shape) == (24, 23)
    assert img.max() == pytest.approx(1.0)
    # sigma 2.5 px: 5 px (two sigma) away the intensity is exp(-2).
    g = render_blobs(np.array([10.0]), np.array([10.0]), 48, 2.5)[0, :, :, 0]
    assert g[10, 15] == pytest.approx(np.exp(-0.5 * (5 / 2.5) ** 2), rel=1e-5)


def test_blob_canvas_wraps():
    w = BlobWorld()
    s = np.array([[46.0, 24.0]])
    nxt = w.step(s, np.ones((1, 1)), np.random.default_rng(0))
    assert 0 <= nxt[0, 0] < 48
    img = w.render(np.array([[47.5, 24.0]]))[0, 24, :, 0]
    assert img[0] == pytest.approx(img[47], rel=1e-6)  # symmetric across the seam
    assert w.state_delta(np.array([[1.0, 0]]), np.array([[47.0, 0]]))[0, 0] == pytest.approx(2.0)


def test_worlds_are_deterministic_for_a_seed():
    for w in (PendulumWorld(), BlobWorld()):
        a = rollout_states(w, w.initial_states(5, make_rng(3, "i")), np.ones((5, 4, 1)), make_rng(3, "f"))
        b = rollout_states(w, w.initial_states(5, make_rng(3, "i")), np.ones((5, 4, 1)), make_rng(3, "f"))
        np.testing.assert_array_equal(a, b)
        assert a.shape == (5, 5, 2)


def test_plans_carry_conditions():
    p = PendulumWorld().plans(3, 4, 2, make_rng(0, "p"))
    assert [x.name for x in p] == ["random_0", "random_1", "const_+1", "const_-1"]
    assert [x.condition for x in p] == ["random", "random", "+1", "-1"]
    assert all(x.actions.shape == (3, 4, 1) for x in p)
    assert np.all(np.abs(p[0].actions) <= 1)
    b = BlobWorld().plans(3, 4, 1, make_rng(0, "p"))
    assert [x.condition for x in b] == ["random", "left", "right"]
    assert set(np.unique(b[0].actions)) <= {-1.0, 1.0}
