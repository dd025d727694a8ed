"""ReBRAC: its penalties against hand-computed numbers, the next-action arrays, and a short real run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import data as offrl_data
from offrl import engine
from offrl.algos import rebrac
from offrl.data import Dataset


def test_critic_target_subtracts_the_next_action_penalty_only_where_the_next_action_is_known():
    rewards, masks = jnp.array([1.0, 0.5, 1.0]), jnp.array([1.0, 0.0, 1.0])
    next_q = jnp.array([2.0, 3.0, 2.0])
    next_actions = jnp.array([[0.5, 0.0], [0.0, 0.0], [0.5, 0.0]])
    data_next = jnp.array([[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    known = jnp.array([1.0, 1.0, 0.0])
    y = rebrac.critic_target(rewards, masks, next_q, next_actions, data_next, known, critic_bc_weight=0.1, discount=0.9)
    # row 0: 1 + 0.9 * (2 - 0.1 * 0.25); row 1: terminal; row 2: penalty off -> 1 + 0.9 * 2
    np.testing.assert_allclose(y, [2.7775, 0.5, 2.8], rtol=1e-6)


def test_actor_objective_sums_the_bc_term_over_action_dimensions_and_normalises_q():
    q = jnp.array([2.0, -4.0])
    policy = jnp.array([[0.5, 0.0], [0.0, 1.0]])
    actions = jnp.zeros((2, 2))
    # lambda = 1 / mean|q| = 1/3; rows: 0.1*0.25 - 2/3 and 0.1*1 + 4/3
    loss = rebrac.actor_objective(q, policy, actions, actor_bc_weight=0.1)
    np.testing.assert_allclose(loss, np.mean([0.025 - 2 / 3, 0.1 + 4 / 3]), rtol=1e-6)
    # lambda is held constant: dL/dq_i = -lambda / B
    grad_q = jax.grad(lambda q_: rebrac.actor_objective(q_, policy, actions, 0.1))(q)
    np.testing.assert_allclose(grad_q, [-1 / 6, -1 / 6], rtol=1e-6)
    # dL/dpi = 2 beta (pi - a) / B
    grad_pi = jax.grad(lambda p: rebrac.actor_objective(q, p, actions, 0.1))(policy)
    np.testing.assert_allclose(grad_pi, 2 * 0.1 * np.asarray(policy) / 2, rtol=1e-6)
    unnormalised = rebrac.actor_objective(q, policy, actions, 0.1, normalize_q=False)
    np.testing.assert_allclose(unnormalised, np.mean([0.025 - 2.0, 0.1 + 4.0]), rtol=1e-6)


def test_next_actions_follow_the_episode_and_are_unknown_at_cuts_and_gaps():
    obs = np.array([[0.0], [1.0], [2.0], [10.0], [11.0]])
    next_obs = np.array([[1.0], [2.0], [3.0], [99.0], [12.0]])  # row 3's successor is not row 4
    actions = np.array([[0.1], [0.2], [0.3], [0.4], [0.5]])
    dones = np.array([False, False, True, False, True])           # row 2 ends episode A (a timeout)
    nxt, known = rebrac.next_actions_of(actions, obs, next_obs, dones)
    np.testing.assert_allclose(nxt, [[0.2], [0.3], [0.3], [0.4], [0.5]], rtol=1e-6)
    np.testing.assert_array_equal(known, [1, 1, 0, 0, 0])


def test_the_engine_puts_next_actions_on_the_device_in_agent_units():
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((40, 3)).astype(np.float32)
    actions = rng.uniform(-2, 2, (40, 2)).astype(np.float32)
    timeouts = np.zeros(40, bool)
    timeouts[19] = timeouts[39] = True
    ds = Dataset.from_arrays(obs, actions, rng.standard_normal(40), np.zeros(40, bool), timeouts,
                             next_observations=np.roll(obs, -1, axis=0))
    arrays, _ = engine.prepare_data(ds, rebrac.Config(), None, rebrac)
    a, nxt, known = (np.asarray(arrays[k]) for k in ("actions", "next_actions", "next_action_known"))
    follows = np.ones(40, bool)
    follows[[19, 39]] = False
    np.testing.assert_array_equal(known, follows.astype(np.float32))
    np.testing.assert_allclose(nxt[:-1][follows[:-1]], a[1:][follows[:-1]], rtol=1e-6)
    assert np.abs(nxt).max() <= 1.0


def test_rebrac_beats_a_random_policy_on_bundled_pendulum():
    """pendulum-medium-expert-v0: normalised 0 = the random step-0 actor, 100 = the expert, data 59."""
    run = engine.train("rebrac", offrl_data.load("pendulum-medium-expert-v0"), steps=5000, eval_every=5000,
                       log_every=1000, eval_episodes=5, progress=False,
                       config_overrides={"hidden_dims": "64,64", "batch_size": "256"})
    score = run.evaluations()[-1]["eval/normalized_score"]
    assert score > 30, f"ReBRAC reached only {score:.1f} (random = 0, data = 59)"
    critic_losses = [r["critic_loss"] for r in run.metrics if "critic_loss" in r]
    assert critic_losses and all(np.isfinite(critic_losses))


@pytest.mark.parametrize("field,value", [("actor_bc_weight", -1.0), ("num_qs", 0), ("batch_size", 0)])
def test_out_of_range_fields_are_refused(field, value):
    from offrl.algos.common import apply_overrides
    from offrl.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        apply_overrides(rebrac.Config(), {field: value})
