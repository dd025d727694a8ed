"""The shared generative models (offrl/algos/generative.py): losses and one sampler step on
hand-computed numbers, the samplers driven by the exact noise predictor / velocity of a Gaussian
(an independent check of the sampling maths), and small networks fitted to a bimodal action
distribution that they must reproduce."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from offrl.algos import generative as g

MU, STD = 0.3, 0.2
LR = 3e-3


def test_losses_on_hand_computed_numbers():
    # (1 + 4 + 0 + 1) / 4
    assert float(g.noise_prediction_loss(jnp.array([[1.0, 2.0], [0.0, 0.0]]), jnp.array([[0.0, 0.0], [0.0, 1.0]]))) == 1.5
    # target velocity x1 - x0 = [1, 0]; error [0, 2] -> 4 / 2
    assert float(g.velocity_loss(jnp.array([[1.0, 2.0]]), jnp.array([[0.0, 1.0]]), jnp.array([[1.0, 1.0]]))) == 2.0
    np.testing.assert_allclose(g.flow_path(jnp.zeros((2, 1)), jnp.full((2, 1), 2.0), jnp.array([0.25, 1.0])),
                               [[0.5], [2.0]])


def test_the_vp_schedule_by_hand():
    s = g.vp_schedule(2)
    b1 = 1 - math.exp(-0.1 / 2 - 0.5 * 9.9 * 1 / 4)
    b2 = 1 - math.exp(-0.1 / 2 - 0.5 * 9.9 * 3 / 4)
    np.testing.assert_allclose(s.betas, [b1, b2], rtol=1e-6)
    np.testing.assert_allclose(s.alpha_bars, [1 - b1, (1 - b1) * (1 - b2)], rtol=1e-6)
    np.testing.assert_allclose(s.alpha_bars_prev, [1.0, 1 - b1], rtol=1e-6)


def test_one_ancestral_step_by_hand():
    s = g.schedule_from_betas([0.1, 0.5])
    abar = 0.9 * 0.5
    mean = (0.4 - 0.5 / math.sqrt(1 - abar) * 0.2) / math.sqrt(0.5)
    x = g.ddpm_step(s, jnp.array([0.4]), 1, jnp.array([0.2]), jnp.array([-0.5]), clip=False)
    np.testing.assert_allclose(x, [mean - 0.5 * math.sqrt(0.5)], rtol=1e-6)
    # above 1 before the clip; the last step adds no noise
    assert float(g.ddpm_step(s, jnp.array([0.4]), 1, jnp.array([0.2]), jnp.array([1.0]))[0]) == 1.0
    last = (0.4 - 0.1 / math.sqrt(0.1) * 0.2) / math.sqrt(0.9)
    np.testing.assert_allclose(g.ddpm_step(s, jnp.array([0.4]), 0, jnp.array([0.2]), jnp.array([5.0])), [last], rtol=1e-6)


def test_the_diffusion_loss_is_zero_for_the_true_noise():
    """An 'oracle' that inverts x_t = sqrt(abar_t) a + sqrt(1 - abar_t) eps with the true a: the
    loss's noising and its time index agree with the schedule."""
    s = g.vp_schedule(5)
    actions = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (64, 2)), jnp.float32)

    def oracle(params, obs, x, t):
        abar = s.alpha_bars[t][:, None]
        return (x - jnp.sqrt(abar) * actions) / jnp.sqrt(1 - abar)

    loss, _ = g.diffusion_loss(None, oracle, s, jnp.zeros((64, 1)), actions, jax.random.key(0))
    assert float(loss) < 1e-8
    zero, _ = g.diffusion_loss(None, lambda p, o, x, t: jnp.zeros_like(x), s, jnp.zeros((64, 1)), actions, jax.random.key(0))
    assert 0.7 < float(zero) < 1.3  # E eps^2 = 1


def _exact_gaussian_eps(s):
    """E[eps | x_t] for a ~ N(MU, STD^2): sqrt(1 - abar)(x - sqrt(abar) MU) / (abar STD^2 + 1 - abar)."""
    def eps(obs, x, t):
        abar = s.alpha_bars[t][:, None]
        return jnp.sqrt(1 - abar) * (x - jnp.sqrt(abar) * MU) / (abar * STD**2 + 1 - abar)
    return eps


def test_ancestral_sampling_with_the_exact_predictor_recovers_a_gaussian():
    s = g.vp_schedule(100)
    x = np.asarray(g.ddpm_sample(_exact_gaussian_eps(s), s, jnp.zeros((20_000, 1)), 1, jax.random.key(1), clip=False))
    assert abs(x.mean() - MU) < 0.01 and abs(x.std() - STD) < 0.015, (x.mean(), x.std())


def test_with_five_steps_the_beta_variance_keeps_more_spread_than_the_posterior_variance():
    """The module's choice sigma_t^2 = beta_t against beta_t (1 - abar_{t-1}) / (1 - abar_t)."""
    s = g.vp_schedule(5)
    eps = _exact_gaussian_eps(s)
    ours = np.asarray(g.ddpm_sample(eps, s, jnp.zeros((20_000, 1)), 1, jax.random.key(2), clip=False)).std()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20_000, 1))
    for t in range(4, -1, -1):
        e = np.asarray(eps(None, jnp.asarray(x, jnp.float32), jnp.full((20_000,), t)))
        mean = (x - float(s.betas[t]) / math.sqrt(1 - float(s.alpha_bars[t])) * e) / math.sqrt(float(s.alphas[t]))
        x = mean + math.sqrt(float(s.posterior_var[t])) * rng.standard_normal(x.shape)
    assert STD > ours > x.std() + 0.02, (ours, x.std())


def test_euler_with_the_exact_velocity_recovers_a_gaussian():
    """x1 ~ N(MU, STD^2), x0 ~ N(0, 1): E[x1 - x0 | x_t = x] = MU + (t STD^2 - (1 - t)) (x - t MU) / ((1 - t)^2 + t^2 STD^2)."""
    def velocity(x, t):
        return MU + (t * STD**2 - (1 - t)) * (x - t * MU) / ((1 - t) ** 2 + t**2 * STD**2)

    x = np.asarray(g.euler_sample(velocity, jax.random.normal(jax.random.key(3), (20_000, 1)), 100, clip=False))
    assert abs(x.mean() - MU) < 0.01 and abs(x.std() - STD) < 0.01, (x.mean(), x.std())


def test_sampling_shapes_and_determinism_under_a_key():
    net = g.ActionField(3, (16, 16), time_embedding_dim=8, activation=g.mish)
    obs = jnp.ones((5, 4))
    params = net.init(jax.random.key(0), obs, jnp.zeros((5, 3)), jnp.zeros((5,), jnp.int32))
    s = g.vp_schedule(5)
    eps = lambda o, x, t: net.apply(params, o, x, t)  # noqa: E731
    a = g.ddpm_sample(eps, s, obs, 3, jax.random.key(1))
    assert a.shape == (5, 3) and np.all(np.abs(np.asarray(a)) <= 1.0)
    np.testing.assert_array_equal(a, g.ddpm_sample(eps, s, obs, 3, jax.random.key(1)))
    assert not np.array_equal(a, g.ddpm_sample(eps, s, obs, 3, jax.random.key(2)))

    flow = g.ActionField(3, (16, 16))
    fparams = flow.init(jax.random.key(0), obs, jnp.zeros((5, 3)), jnp.zeros((5,)))
    x0 = jax.random.normal(jax.random.key(4), (5, 3))
    b = g.euler_sample(lambda x, t: flow.apply(fparams, obs, x, t), x0, 10)
    assert b.shape == (5, 3) and np.all(np.abs(np.asarray(b)) <= 1.0)
    np.testing.assert_array_equal(b, g.euler_sample(lambda x, t: flow.apply(fparams, obs, x, t), x0, 10))


# ----------------------------------------------------------------------------- fitted models
def _bimodal(n, key):
    """a = +-0.5 with equal probability, plus N(0, 0.05^2): a Gaussian fit would put its mass near 0."""
    k1, k2 = jax.random.split(key)
    return (jnp.where(jax.random.bernoulli(k1, 0.5, (n, 1)), 0.5, -0.5) + 0.05 * jax.random.normal(k2, (n, 1)))


def _fit(loss_fn, net, example_t, steps=2500, batch=256):
    obs = jnp.zeros((batch, 1))
    params = net.init(jax.random.key(0), obs, jnp.zeros((batch, 1)), example_t)
    tx = optax.adam(LR)

    def step(carry, key):
        params, opt = carry
        d_key, l_key = jax.random.split(key)
        grads = jax.grad(lambda p: loss_fn(p, net.apply, obs, _bimodal(batch, d_key), l_key)[0])(params)
        updates, opt = tx.update(grads, opt, params)
        return (optax.apply_updates(params, updates), opt), None

    (params, _), _ = jax.jit(lambda c, k: jax.lax.scan(step, c, k))((params, tx.init(params)),
                                                                     jax.random.split(jax.random.key(1), steps))
    return params


def _check_bimodal(samples):
    a = np.asarray(samples)[:, 0]
    near_a_mode = np.minimum(np.abs(a - 0.5), np.abs(a + 0.5)) < 0.15
    assert near_a_mode.mean() > 0.75, f"only {near_a_mode.mean():.2f} of the samples lie near +-0.5"
    assert 0.4 < (a > 0).mean() < 0.6, f"{(a > 0).mean():.2f} of the samples are positive"
    assert abs(np.abs(a).mean() - 0.5) < 0.08


def test_a_fitted_diffusion_model_reproduces_a_bimodal_distribution():
    """20 steps: with IDQL's 5, even the exact predictor of this mixture leaves about 40% of the
    samples between the modes (IDQL then picks among them by Q)."""
    s = g.vp_schedule(20)
    net = g.ActionField(1, (64, 64), time_embedding_dim=16, activation=g.mish)
    params = _fit(lambda p, f, o, a, k: g.diffusion_loss(p, f, s, o, a, k), net, jnp.zeros((256,), jnp.int32))
    samples = g.ddpm_sample(lambda o, x, t: net.apply(params, o, x, t), s, jnp.zeros((4000, 1)), 1, jax.random.key(7))
    _check_bimodal(samples)


def test_a_fitted_flow_reproduces_a_bimodal_distribution():
    net = g.ActionField(1, (64, 64), activation=jax.nn.gelu)
    params = _fit(g.flow_matching_loss, net, jnp.zeros((256,)))
    obs = jnp.zeros((4000, 1))
    samples = g.euler_sample(lambda x, t: net.apply(params, obs, x, t), jax.random.normal(jax.random.key(7), (4000, 1)), 10)
    _check_bimodal(samples)
