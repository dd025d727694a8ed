"""SAC-N (and EDAC's diversity term, which lives here): hand numbers, NumPy gradients, a short real run."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import data as offrl_data
from offrl import engine
from offrl.algos.common import apply_overrides
from offrl.algos import sac_n
from offrl.nets import EnsembleCritic

from _pendulum import pendulum_medium


def test_ensemble_gradient_diversity_on_hand_computed_cosines():
    # N = 2: cos([1, 0], [1, 1]) = 1/sqrt(2), two ordered pairs, / (N - 1) = 1
    g = jnp.array([[[1.0, 0.0]], [[1.0, 1.0]]])
    np.testing.assert_allclose(sac_n.ensemble_gradient_diversity(g), math.sqrt(2), rtol=1e-6)
    # N = 3, lengths do not matter: cosines 0, -1, 0 -> 2 * (-1) / 2
    g = jnp.array([[[3.0, 0.0]], [[0.0, 0.5]], [[-1.0, 0.0]]])
    np.testing.assert_allclose(sac_n.ensemble_gradient_diversity(g), -1.0, rtol=1e-6)
    # two batch rows are averaged: row 0 as above (-1), row 1 all parallel (cosines 1: 6 / 2 = 3)
    g = jnp.array([[[3.0, 0.0], [1.0, 1.0]], [[0.0, 0.5], [2.0, 2.0]], [[-1.0, 0.0], [0.1, 0.1]]])
    np.testing.assert_allclose(sac_n.ensemble_gradient_diversity(g), (-1.0 + 3.0) / 2, rtol=1e-6)
    assert float(sac_n.ensemble_gradient_diversity(jnp.ones((1, 4, 2)))) == 0.0


def _numpy_action_gradients(params, obs, actions):
    """grad_a of a one-hidden-layer ReLU critic per member, by the chain rule in NumPy."""
    mlp = params["params"]["VmapCritic_0"]["MLP_0"]
    w0, b0 = np.asarray(mlp["Dense_0"]["kernel"]), np.asarray(mlp["Dense_0"]["bias"])
    w1 = np.asarray(mlp["Dense_1"]["kernel"])
    x = np.concatenate([obs, actions], axis=-1)
    out = []
    for k in range(w0.shape[0]):
        h = x @ w0[k] + b0[k]                              # (B, H)
        dh = (h > 0) * w1[k][:, 0]                         # dQ/dh
        out.append((dh @ w0[k].T)[:, obs.shape[1]:])       # dQ/da
    return np.stack(out)


def test_the_action_gradients_of_the_vmapped_ensemble_match_numpy():
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((5, 2)).astype(np.float32)
    actions = rng.uniform(-1, 1, (5, 2)).astype(np.float32)
    ensemble = EnsembleCritic((4,), num_qs=3)
    params = ensemble.init(jax.random.PRNGKey(1), obs, actions)
    # the per-member-action network reads the same parameters and gives the same Q-values
    same = sac_n.PerMemberActionCritic((4,), 3).apply(params, obs, jnp.broadcast_to(actions, (3, 5, 2)))
    np.testing.assert_allclose(same, ensemble.apply(params, obs, actions), rtol=1e-6)
    grads = sac_n.critic_action_gradients(params, obs, actions, (4,), 3)
    expected = _numpy_action_gradients(params, obs, actions)
    np.testing.assert_allclose(grads, expected, rtol=1e-5, atol=1e-6)
    # and the diversity term of those gradients, computed pair by pair in NumPy
    unit = expected / (np.linalg.norm(expected, axis=-1, keepdims=True) + 1e-10)
    pairs = sum(np.sum(unit[k] * unit[l], axis=-1) for k in range(3) for l in range(3) if k != l)
    np.testing.assert_allclose(sac_n.ensemble_gradient_diversity(grads), np.mean(pairs) / 2, rtol=1e-5)


def test_a_gradient_step_on_the_diversity_term_lowers_it():
    rng = np.random.default_rng(2)
    obs = jnp.asarray(rng.standard_normal((16, 3)), jnp.float32)
    actions = jnp.asarray(rng.uniform(-1, 1, (16, 2)), jnp.float32)
    params = EnsembleCritic((8,), num_qs=4).init(jax.random.PRNGKey(0), obs, actions)

    def esd(p):
        return sac_n.ensemble_gradient_diversity(sac_n.critic_action_gradients(p, obs, actions, (8,), 4))

    value, grads = jax.value_and_grad(esd)(params)
    assert any(float(jnp.abs(g).max()) > 0 for g in jax.tree_util.tree_leaves(grads))
    stepped = jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads)
    assert float(esd(stepped)) < float(value)


def test_the_critic_loss_adds_eta_times_the_diversity_only_when_eta_is_set():
    config = dataclasses.replace(sac_n.Config(), hidden_dims=(8,), num_qs=3)
    agent = sac_n.create(config, 3, 2, jax.random.PRNGKey(0))
    rng = np.random.default_rng(1)
    batch = sac_n.Batch(*(jnp.asarray(x, jnp.float32) for x in (rng.standard_normal((6, 3)), rng.uniform(-1, 1, (6, 2)),
                                                                 rng.standard_normal(6), rng.standard_normal((6, 3)), np.ones(6))))
    target = jnp.asarray(rng.standard_normal(6), jnp.float32)
    plain, aux = sac_n.critic_loss(agent.critic.params, agent, batch, target)
    q = agent.critic.apply_fn(agent.critic.params, batch.observations, batch.actions)
    np.testing.assert_allclose(plain, np.sum(np.mean((np.asarray(q) - np.asarray(target)) ** 2, axis=1)), rtol=1e-5)
    edac_agent = agent.replace(config=dataclasses.replace(config, diversity_weight=2.0))
    total, edac_aux = sac_n.critic_loss(agent.critic.params, edac_agent, batch, target)
    esd = sac_n.ensemble_gradient_diversity(sac_n.critic_action_gradients(agent.critic.params, batch.observations,
                                                                          batch.actions, (8,), 3))
    np.testing.assert_allclose(total, plain + 2.0 * esd, rtol=1e-5)
    assert "diversity_loss" in edac_aux and "diversity_loss" not in aux


def test_the_ensemble_disagrees_more_off_the_data_than_on_it():
    """SAC-N's pessimism in one number: after 1,000 updates on the bundled SAC data the critics'
    spread at uniformly random actions exceeds their spread at the data's actions."""
    config = apply_overrides(sac_n.Config(), {"hidden_dims": "32,32", "num_qs": "5"})
    arrays, info = engine.prepare_data(offrl_data.load("pendulum-medium-expert-v0"), config, None, sac_n)
    agents, keys = engine.create_agents(sac_n, config, info.obs_dim, info.action_dim, seed=0, seeds=1)
    agents, metrics = engine.Trainer(sac_n, config.batch_size, seeds=1).run(agents, keys, arrays, 1000)
    agent = jax.tree_util.tree_map(lambda x: x[0], agents)
    obs, actions = arrays["observations"][:2000], arrays["actions"][:2000]
    random_actions = jax.random.uniform(jax.random.PRNGKey(0), actions.shape, minval=-1.0, maxval=1.0)
    spread = lambda a: float(agent.critic.apply_fn(agent.critic.params, obs, a).std(0).mean())  # noqa: E731
    assert spread(random_actions) > spread(actions) > 0
    assert np.isfinite(np.asarray(metrics["q_std"])).all()


@pytest.mark.slow
def test_sac_n_beats_a_random_policy_on_wide_coverage_pendulum_data():
    """The noisy controller's data (action noise of half the torque range: wide coverage, where
    an ensemble's pessimism is enough); normalised 0 = uniformly random actions, 100 = the controller."""
    run = engine.train("sac_n", pendulum_medium(), steps=3000, eval_every=3000, log_every=1000, eval_episodes=5,
                       progress=False, config_overrides={"hidden_dims": "64,64", "num_qs": "10"})
    score = float(np.mean(run.final_scores))
    assert score > 30, f"SAC-N reached only {score:.1f} (random = 0, controller = 100)"


def test_num_qs_of_zero_is_refused_in_one_line():
    from offrl.algos.common import apply_overrides
    from offrl.errors import ConfigError

    with pytest.raises(ConfigError, match="'num_qs'"):
        apply_overrides(sac_n.Config(), {"num_qs": "0"})
