"""IDQL: the expectile weights by hand, its critic is IQL's (one update matches IQL's exactly),
the sampled candidates and the critic's choice among them, and a short real run on Pendulum."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import engine
from offrl.algos import generative, idql, iql
from offrl.algos.common import Batch

from _pendulum import pendulum_medium

OBS_DIM, ACTION_DIM = 3, 2


def _batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    f = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    return Batch(f(n, OBS_DIM), jnp.tanh(f(n, ACTION_DIM)), f(n), f(n, OBS_DIM), jnp.ones(n))


def _config(**changes):
    return dataclasses.replace(idql.Config(), hidden_dims=(16, 16), actor_hidden_dims=(16, 16), num_samples=8,
                               actor_ema=0.25, **changes)


UPDATE = jax.jit(idql.update)  # one compilation for the tests' shared config


def test_expectile_weights_by_hand():
    # tau = 0.7, v = 1: q above v weighs tau / |q - v|, below (1 - tau) / |q - v|; q == v hits the 1e-6 floor
    w = idql.expectile_weights(jnp.array([3.0, -1.0, 1.5, 1.0]), jnp.asarray(1.0), 0.7)
    np.testing.assert_allclose(w, [0.7 / 2, 0.3 / 2, 0.7 / 0.5, 0.7 / 1e-6], rtol=1e-5)


def test_the_critic_and_value_updates_are_iqls():
    """Same key -> same critic and value initialisation; after one update on the same batch
    IDQL's Q, V and target Q equal IQL's (whose actor does not enter those losses)."""
    config = _config()
    a = idql.create(config, OBS_DIM, ACTION_DIM, jax.random.key(3))
    b = iql.create(iql.Config(hidden_dims=(16, 16), expectile=config.expectile), OBS_DIM, ACTION_DIM, jax.random.key(3))
    batch = _batch()
    a, ma = UPDATE(a, batch)
    b, mb = jax.jit(iql.update)(b, batch)
    for x, y in ((a.critic.params, b.critic.params), (a.value.params, b.value.params),
                 (a.target_critic_params, b.target_critic_params)):
        for u, v in zip(jax.tree_util.tree_leaves(x), jax.tree_util.tree_leaves(y)):
            np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-7)
    for key in ("value_loss", "critic_loss", "v", "q", "adv"):
        np.testing.assert_allclose(ma[key], mb[key], rtol=1e-6)
    assert np.isfinite(float(ma["actor_loss"]))


def test_the_denoiser_ema_follows_its_rate():
    agent = idql.create(_config(), OBS_DIM, ACTION_DIM, jax.random.key(0))
    before = agent.actor_ema_params
    agent, _ = UPDATE(agent, _batch())
    for e0, e1, p in zip(*(jax.tree_util.tree_leaves(t) for t in (before, agent.actor_ema_params, agent.actor.params))):
        np.testing.assert_allclose(e1, 0.75 * e0 + 0.25 * p, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("selection", ["argmax", "expectile_weights"])
def test_the_action_is_one_of_the_samples_chosen_by_the_critic(selection):
    agent = idql.create(_config(), OBS_DIM, ACTION_DIM, jax.random.key(0))
    for seed in range(3):
        agent, _ = UPDATE(agent, _batch(seed=seed))
    agent = agent.replace(config=dataclasses.replace(agent.config, selection=selection))
    obs, key = jnp.array([0.3, -0.2, 0.5]), jax.random.key(5)
    action = jax.jit(idql.plan)(agent, obs, key)
    # the same candidates drawn through the shared sampler
    obs_n = jnp.broadcast_to(obs, (8, OBS_DIM))
    eps = lambda s, x, t: agent.actor.apply_fn(agent.actor_ema_params, s, x, t)  # noqa: E731
    candidates = generative.ddpm_sample(eps, idql.schedule(agent.config), obs_n, ACTION_DIM, jax.random.split(key)[0])
    distance = np.abs(np.asarray(candidates) - np.asarray(action)).sum(1)
    assert distance.min() == 0.0, "the action is not one of the N candidates"
    if selection == "argmax":
        q = agent.critic.apply_fn(agent.target_critic_params, obs_n, candidates).min(0)
        assert int(np.argmin(distance)) == int(np.argmax(q))


def test_act_shapes_range_and_determinism():
    agent = idql.create(_config(), OBS_DIM, ACTION_DIM, jax.random.key(0))
    obs = jnp.asarray(np.random.default_rng(1).standard_normal((5, OBS_DIM)), jnp.float32)
    a = np.asarray(idql.act(agent, obs))
    assert a.shape == (5, ACTION_DIM) and np.all(np.abs(a) <= 1.0)
    np.testing.assert_array_equal(a, idql.act(agent, obs))
    plan = jax.jit(idql.plan)
    x, y = (plan(agent, obs[0], jax.random.key(k)) for k in (1, 2))
    assert not np.array_equal(x, y)  # the samples depend on the key


def test_idql_beats_a_random_policy_on_pendulum():
    """The noisy swing-up controller data of tests/engine (normalised: random 0, controller 100)."""
    run = engine.train("idql", pendulum_medium(), steps=2500, eval_every=2500, log_every=500, eval_episodes=5,
                       progress=False, config_overrides={"hidden_dims": "64,64", "actor_hidden_dims": "64,64",
                                                         "actor_ema": "0.01", "num_samples": "32"})
    score = float(np.mean(run.final_scores))
    assert score > 15, f"IDQL reached only {score:.1f} (random = 0, controller = 100)"
