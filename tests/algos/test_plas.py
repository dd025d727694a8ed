"""PLAS: the latent bound, the warm-up schedule (VAE first and then frozen, actor after), acting
through the decoder, and a real run."""

import jax
import jax.numpy as jnp
import numpy as np

from offrl import data, engine
from offrl.algos import plas
from offrl.algos.common import Batch


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_latent_actions_stay_within_the_bound():
    net = plas.LatentActor(latent_dim=3, hidden_dims=(16,), max_latent_action=2.0)
    obs = jnp.ones((8, 4)) * 10.0
    params = jax.tree_util.tree_map(lambda p: p * 100.0, net.init(jax.random.PRNGKey(0), obs))  # saturate tanh
    z = net.apply(params, obs)
    assert float(jnp.abs(z).max()) <= 2.0 + 1e-6 and float(jnp.abs(z).max()) > 1.9


def test_vae_trains_only_during_the_warm_up_and_the_actor_only_after():
    cfg = plas.Config(hidden_dims=(8,), vae_hidden_dims=(8,), warmup_steps=2, batch_size=16)
    agent = plas.create(cfg, 3, 2, jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (16, 3))
    batch = Batch(obs, jnp.tanh(obs[:, :2]), obs[:, 0], obs, jnp.ones(16))
    update = jax.jit(plas.update)
    states = [agent]
    for _ in range(4):
        agent, metrics = update(agent, batch)
        states.append(agent)
    changed = lambda a, b: any(not np.array_equal(x, y) for x, y in zip(_leaves(a), _leaves(b)))  # noqa: E731
    assert changed(states[0].vae.params, states[1].vae.params) and changed(states[1].vae.params, states[2].vae.params)
    assert not changed(states[2].vae.params, states[4].vae.params)            # frozen from step 2 on
    assert not changed(states[0].actor.params, states[2].actor.params)        # actor waits for the VAE
    assert changed(states[2].actor.params, states[3].actor.params)
    assert changed(states[0].critic.params, states[1].critic.params)          # critic from the start
    assert float(metrics["vae_loss"]) == 0.0 and float(metrics["actor_loss"]) != 0.0
    # acting is decoding the latent action
    expected = agent.vae.apply_fn(agent.vae.params, obs, agent.actor.apply_fn(agent.actor.params, obs), method="decode")
    np.testing.assert_allclose(plas.act(agent, obs), expected, rtol=1e-6)


def test_critic_held_during_the_warm_up_is_d3rlpys_schedule():
    cfg = plas.Config(hidden_dims=(8,), vae_hidden_dims=(8,), warmup_steps=2, batch_size=16, critic_during_warmup=False)
    agent = plas.create(cfg, 3, 2, jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (16, 3))
    batch = Batch(obs, jnp.tanh(obs[:, :2]), obs[:, 0], obs, jnp.ones(16))
    update = jax.jit(plas.update)
    states, losses = [agent], []
    for _ in range(3):
        agent, metrics = update(agent, batch)
        states.append(agent)
        losses.append(float(metrics["critic_loss"]))
    changed = lambda a, b: any(not np.array_equal(x, y) for x, y in zip(_leaves(a), _leaves(b)))  # noqa: E731
    assert not changed(states[0].critic.params, states[2].critic.params)      # only the VAE moves in the warm-up
    assert not changed(states[0].target_critic_params, states[2].target_critic_params)
    assert changed(states[0].vae.params, states[2].vae.params)
    assert losses[:2] == [0.0, 0.0] and losses[2] > 0.0
    assert changed(states[2].critic.params, states[3].critic.params)          # and the critic after it
    assert changed(states[2].target_critic_params, states[3].target_critic_params)


def test_plas_beats_a_random_policy_on_bundled_pendulum():
    run = engine.train("plas", data.load("pendulum-medium-expert-v0"), steps=3000, eval_every=3000, log_every=1000,
                       eval_episodes=5, progress=False,
                       config_overrides={"hidden_dims": "64,64", "vae_hidden_dims": "64,64", "batch_size": "256",
                                         "reward_scaling": "0.1", "warmup_steps": "1000", "actor_lr": "3e-4",
                                         "vae_lr": "1e-3"})
    score = float(np.mean(run.final_scores))
    assert score > 30, f"PLAS reached only {score:.1f} (random actor = 0, data about 63)"
