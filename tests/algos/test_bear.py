"""BEAR: the MMD by hand and against a NumPy loop, the multiplier's direction, and a real run."""

import math
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import data, engine
from offrl.algos import bear


def test_mmd_by_hand_on_two_one_dimensional_samples():
    x, y = jnp.array([[[0.0], [1.0]]]), jnp.array([[[0.0], [0.0]]])
    # laplacian, sigma = 0.5: k = exp(-|d|); mean k(x,x) = (1 + e^-1)/2, k(y,y) = 1, mean k(x,y) = (1 + e^-1)/2
    expected = math.sqrt((1 - math.exp(-1)) / 2 + 1e-6)
    assert float(bear.mmd(x, y, "laplacian", 0.5)[0]) == pytest.approx(expected, rel=1e-6)
    # gaussian, sigma = 0.5: k = exp(-d^2) gives the same numbers for |d| in {0, 1}
    assert float(bear.mmd(x, y, "gaussian", 0.5)[0]) == pytest.approx(expected, rel=1e-6)
    assert float(bear.mmd(x, x, "laplacian", 0.5)[0]) == pytest.approx(1e-3, rel=1e-3)  # sqrt(0 + 1e-6)


def numpy_mmd(x, y, kernel, sigma):
    def k(a, b):
        d = np.abs(a - b).sum() if kernel == "laplacian" else ((a - b) ** 2).sum()
        return np.exp(-d / (2 * sigma))

    out = []
    for xs, ys in zip(x, y):
        kxx = np.mean([k(a, b) for a in xs for b in xs])
        kyy = np.mean([k(a, b) for a in ys for b in ys])
        kxy = np.mean([k(a, b) for a in xs for b in ys])
        out.append(np.sqrt(kxx + kyy - 2 * kxy + 1e-6))
    return np.array(out)


@pytest.mark.parametrize("kernel", ["laplacian", "gaussian"])
def test_mmd_matches_a_numpy_double_loop(kernel):
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, (3, 4, 2)), rng.uniform(-1, 1, (3, 5, 2)) * 0.5
    np.testing.assert_allclose(bear.mmd(jnp.asarray(x), jnp.asarray(y), kernel, 0.3), numpy_mmd(x, y, kernel, 0.3),
                               rtol=1e-5)


def test_multiplier_grows_while_the_mmd_exceeds_epsilon():
    agent = SimpleNamespace(config=bear.Config(mmd_epsilon=0.05))  # alpha_loss reads only the config
    params = {"value": jnp.log(jnp.float32(2.0))}
    grad_of = lambda d: jax.grad(lambda p: bear.alpha_loss(p, agent, d)[0])(params)["value"]  # noqa: E731
    # d(-alpha * mean(MMD - eps)) / d log alpha = -alpha * mean(MMD - eps) = -2 * 0.35
    assert float(grad_of(jnp.array([0.5, 0.3]))) == pytest.approx(-0.7, rel=1e-6)
    assert float(grad_of(jnp.array([0.5, 0.3]))) < 0    # gradient descent raises log alpha
    assert float(grad_of(jnp.array([0.01, 0.02]))) > 0  # and lowers it when the constraint holds


def test_bear_beats_a_random_policy_on_bundled_pendulum():
    run = engine.train("bear", data.load("pendulum-medium-expert-v0"), steps=3000, eval_every=3000, log_every=1000,
                       eval_episodes=5, progress=False,
                       config_overrides={"hidden_dims": "64,64", "vae_hidden_dims": "64,64", "batch_size": "256",
                                         "reward_scaling": "0.1", "warmup_steps": "1000"})
    score = float(np.mean(run.final_scores))
    assert score > 30, f"BEAR reached only {score:.1f} (random actor = 0, data about 63)"
