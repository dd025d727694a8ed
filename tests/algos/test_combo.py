"""COMBO: the contract test and the conservative regulariser on model samples by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_algorithm_behaviour as shared

from offrl import data, engine
from offrl.algos import combo
from offrl.algos.common import Batch

tiny_data = shared.tiny_data



def test_conservative_gap_by_hand():
    """Two critics, three rows: row 0 real, rows 1-2 model; push down at rho, up at the real rows."""
    lse = jnp.array([[1.0, 2.0, 6.0], [0.0, 3.0, 3.0]])
    q = jnp.array([[0.5, 9.0, 9.0], [1.5, 9.0, 9.0]])
    real = jnp.array([1.0, 0.0, 0.0])
    everywhere = jnp.ones(3)
    # mix: (3 - 0.5) + (2 - 1.5) = 3.0; model only: (4 - 0.5) + (3 - 1.5) = 5.0
    np.testing.assert_allclose(float(combo.conservative_gap(lse, q, everywhere, real)), 3.0, rtol=1e-6)
    np.testing.assert_allclose(float(combo.conservative_gap(lse, q, 1.0 - real, real)), 5.0, rtol=1e-6)


def test_critic_loss_is_td_plus_weighted_gap_with_the_uniform_logsumexp():
    """A critic that is constant c everywhere: TD = K/2 mean (c - y)^2; each lse = c + log sum_j 1/mu_j."""
    config = combo.Config(ensemble_size=3, num_elites=2, model_hidden_dims=(4,), hidden_dims=(8,), rollout_starts=4,
                          batch_size=4, cql_weight=2.0, n_actions=3, conservative_states="model")
    agent = combo.create(config, 2, 1, jax.random.PRNGKey(0))
    params = jax.tree_util.tree_map(jnp.zeros_like, agent.critic.params)  # Q = 0 everywhere
    batch = Batch(jnp.ones((4, 2)), jnp.zeros((4, 1)), jnp.zeros(4), jnp.ones((4, 2)), jnp.ones(4),
                  extras={"is_model": jnp.array([False, True, True, True])})
    target = jnp.array([1.0, 2.0, 0.0, -1.0])
    ood = jnp.zeros((4, 9, 1))
    log_densities = jnp.full((4, 9), -jnp.log(2.0))  # mu = 1/2 for every sampled action
    loss, aux = combo.critic_loss(params, agent, batch, target, ood, log_densities)
    td = 0.5 * 2 * np.mean(np.array([1.0, 2.0, 0.0, -1.0]) ** 2)
    lse = np.log(9 * 2.0)  # log sum_j exp(0 + log 2)
    np.testing.assert_allclose(float(aux["td_loss"]), td, rtol=1e-6)
    np.testing.assert_allclose(float(loss), td + 2.0 * 2 * (lse - 0.0), rtol=1e-5)


@pytest.mark.slow
def test_combo_beats_a_random_policy_on_bundled_pendulum():
    """pendulum-medium-v0 (normalised 0 = random actor, 100 = expert; the data scores 20.6), 4000 updates
    with small networks: the conservative critic keeps Q below the data's returns and the policy swings up.
    About 6 minutes on the shared 2-core CPU (measured 358 s beside other jobs), hence slow."""
    run = engine.train("combo", data.load("pendulum-medium-v0"), steps=4000, eval_every=4000, log_every=800,
                       eval_episodes=5, progress=False,
                       config_overrides={"ensemble_size": "5", "num_elites": "3", "model_hidden_dims": "64,64",
                                         "hidden_dims": "64,64", "rollout_starts": "1000", "rollout_every": "100",
                                         "model_max_epochs": "40", "actor_lr": "3e-4", "entropy_alpha_lr": "3e-4",
                                         "reward_scaling": "0.1"})
    score = float(np.mean(run.final_scores))
    assert score > 30, f"COMBO reached only {score:.1f} (random actor = 0, data 20.6)"
