import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl.ope import fqe
from offrl.ope import tabular as tab


def test_fqe_target_and_loss_by_hand():
    y = fqe.fqe_target(jnp.array([1.0, 2.0]), jnp.array([1.0, 0.0]), jnp.array([10.0, 10.0]), 0.9)
    np.testing.assert_allclose(y, [10.0, 2.0])
    assert float(fqe.fqe_loss(jnp.array([9.0, 2.0]), y)) == pytest.approx(0.5)


GAMMA = 0.8


@pytest.fixture(scope="module")
def tabular_problem():
    mdp = tab.random_mdp(np.random.default_rng(3), 5, 3, num_terminal=1)
    target = tab.random_policy(np.random.default_rng(4), 5, 3, concentration=0.5)
    ds = tab.sample_dataset(mdp, tab.uniform_policy(5, 3), 3000, 15, np.random.default_rng(5))
    return mdp, target, ds


def test_fqe_recovers_the_exact_q_on_a_tabular_mdp(tabular_problem):
    mdp, target, ds = tabular_problem
    policies = np.stack([target, tab.uniform_policy(5, 3)])             # two policies in one vmapped run
    next_probs = policies[:, tab.state_index(ds.next_observations)]        # (P, N, A)
    data = fqe.fqe_data(ds, next_probs)
    config = fqe.FQEConfig(hidden_dims=(64, 64), learning_rate=5e-4, discount=GAMMA, tau=0.05, batch_size=512, num_actions=3)
    agents = fqe.create(config, data, seeds=2)
    assert agents.step.shape == (2, 2)
    agents, metrics = fqe.train(agents, data, num_steps=3000, chunk=1000)
    assert np.isfinite(metrics["fqe/loss"]).all()
    states = np.eye(5)[:4]                                                  # the non-terminal states
    for p in range(2):
        exact = tab.q_values(mdp, policies[p], GAMMA)[:4]
        for a in range(3):
            q = fqe.q_values(agents, data, states, np.full((4, 1), a))[p].mean(0)    # mean over seeds
            np.testing.assert_allclose(q, exact[:, a], atol=0.04 * np.abs(exact).max())
    v = fqe.state_values(agents, data, states, np.broadcast_to(policies[:, None, :4], (2, 4, 4, 3))[:, 0])
    exact_v = np.stack([tab.state_values(mdp, policies[p], GAMMA)[:4] for p in range(2)])
    np.testing.assert_allclose(v.mean(1), exact_v, atol=0.04 * np.abs(exact_v).max())


def test_fqe_continuous_critic_learns_a_constant_reward_value():
    # One-step episodes (terminal after every step) with reward a_0: Q(s, a) = a_0 exactly.
    from offrl.data.dataset import Dataset

    rng = np.random.default_rng(0)
    obs = rng.normal(size=(2000, 3)).astype(np.float32)
    act = rng.uniform(-1, 1, size=(2000, 2)).astype(np.float32)
    ds = Dataset.from_arrays(obs, act, act[:, 0], np.ones(2000, bool), next_observations=obs)
    data = fqe.fqe_data(ds, np.zeros((1, 2000, 2), np.float32))
    for extra in ({}, {"target_update_period": 50}, {"layer_norm": True}):
        agents = fqe.create(fqe.FQEConfig(hidden_dims=(64, 64), learning_rate=1e-3, **extra), data)
        names = str(jax.tree_util.tree_structure(agents.critic.params))
        assert ("LayerNorm" in names) == bool(extra.get("layer_norm"))
        agents, _ = fqe.train(agents, data, num_steps=1500, chunk=500)
        q = fqe.q_values(agents, data, obs[:200], act[:200])[0, 0]
        assert np.abs(q - act[:200, 0]).mean() < 0.05


def test_hard_target_update_copies_every_period():
    from offrl.data.dataset import Dataset

    obs = np.random.default_rng(0).normal(size=(64, 2)).astype(np.float32)
    ds = Dataset.from_arrays(obs, obs[:, :1], obs[:, 0], np.zeros(64, bool), next_observations=obs)
    data = fqe.fqe_data(ds, np.zeros((1, 64, 1), np.float32))
    agents = fqe.create(fqe.FQEConfig(hidden_dims=(8,), learning_rate=1e-2, target_update_period=3, batch_size=8), data)
    same = lambda a: all(bool(jnp.all(x == y)) for x, y in zip(jax.tree_util.tree_leaves(a.critic.params), jax.tree_util.tree_leaves(a.target_params)))  # noqa: E731
    for step in range(1, 7):
        agents, _ = fqe.train(agents, data, num_steps=1, chunk=1)
        assert same(agents) == (step % 3 == 0), step
