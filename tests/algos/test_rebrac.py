"""ReBRAC: its penalties against hand-computed numbers, the next-action arrays, and a short real run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import data as offrl_data
from offrl import engine
from offrl.algos import rebrac
from offrl.data import Dataset
from offrl.engine.data import sampler


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


def test_next_actions_follow_the_episode_and_are_unknown_at_cuts_gaps_and_the_last_row():
    obs = jnp.array([[0.0], [1.0], [2.0], [10.0], [11.0]])
    next_obs = jnp.array([[1.0], [2.0], [3.0], [99.0], [12.0]])  # row 2 ends an episode; row 3's successor is not row 4
    actions = jnp.array([[0.1], [0.2], [0.3], [0.4], [0.5]])
    nxt, known = rebrac.next_action_arrays(np.asarray(obs), np.asarray(next_obs), np.asarray(actions))
    np.testing.assert_allclose(nxt, [[0.2], [0.3], [0.3], [0.4], [0.5]], rtol=1e-6)
    np.testing.assert_array_equal(known, [1, 1, 0, 0, 0])


def test_minibatches_carry_the_next_actions_from_the_data_in_agent_units():
    """Episodes of a random walk cut by timeouts: the sampled next actions are the data's own
    (rescaled) next actions inside episodes and switched off at the cuts."""
    rng = np.random.default_rng(0)
    obs = np.cumsum(rng.standard_normal((41, 3)), axis=0).astype(np.float32)
    actions = rng.uniform(-2, 2, (40, 2)).astype(np.float32)
    timeouts = np.zeros(40, bool)
    timeouts[[19, 39]] = True
    next_obs = obs[1:].copy()
    next_obs[19] += 5.0                    # the cut episode's true next state, not the next episode's first
    ds = Dataset.from_arrays(obs[:40], actions, rng.standard_normal(40), np.zeros(40, bool), timeouts,
                             next_observations=next_obs)
    arrays, info = engine.prepare_data(ds, rebrac.Config(), None, rebrac)
    batch = sampler(rebrac)(arrays, jax.random.PRNGKey(0), 256)
    agent_actions = info.to_agent_action(actions)                 # [-1, 1]
    rows = np.array([int(np.flatnonzero(np.all(np.asarray(arrays["observations"]) == o, axis=1))[0])
                     for o in np.asarray(batch.observations)])
    follows = ~np.isin(rows, [19, 39])
    np.testing.assert_array_equal(np.asarray(batch.extras["next_action_known"]), follows.astype(np.float32))
    np.testing.assert_allclose(np.asarray(batch.extras["next_actions"])[follows], agent_actions[rows[follows] + 1], rtol=1e-6)
    assert not follows.all() and np.abs(np.asarray(batch.extras["next_actions"])).max() <= 1.0


def test_minibatches_without_next_actions_train_without_the_critic_penalty():
    """A caller's own minibatch of the five transition fields trains without the penalty; one whose
    next actions are all unknown gives the same loss, one whose next actions are known a different one."""
    config = rebrac.Config(hidden_dims=(8,), batch_size=4, critic_bc_weight=100.0)
    agent = rebrac.create(config, 3, 2, jax.random.PRNGKey(0))
    rng = np.random.default_rng(1)
    fields = (rng.standard_normal((4, 3)), rng.uniform(-1, 1, (4, 2)), rng.standard_normal(4), rng.standard_normal((4, 3)), np.ones(4))
    plain = rebrac.Batch(*(jnp.asarray(x, jnp.float32) for x in fields))
    off = plain._replace(extras={"next_actions": jnp.ones((4, 2)), "next_action_known": jnp.zeros(4)})
    on = plain._replace(extras={"next_actions": jnp.ones((4, 2)), "next_action_known": jnp.ones(4)})
    loss = lambda b: float(rebrac.update(agent, b)[1]["critic_loss"])  # noqa: E731
    assert loss(plain) == loss(off) != loss(on)


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


def test_a_grid_over_the_bc_weights_is_one_compiled_program():
    """Both BC weights are traced fields: a 2 x 2 grid over them is one vmapped program of four
    members, while a grid over the (static) width splits."""
    from offrl.sweeps.grid import parse_grid, plan_programs

    grid = parse_grid(rebrac.Config, ["actor_bc_weight=0.01,0.1", "critic_bc_weight=0.01,0.5"])
    plan = plan_programs(rebrac.Config, grid)
    assert plan.traced == ("actor_bc_weight", "critic_bc_weight") and plan.static == ()
    assert [len(p.members) for p in plan.programs] == [4]
    split = plan_programs(rebrac.Config, parse_grid(rebrac.Config, ["critic_bc_weight=0.01,0.5", "hidden_dims=8;16"]))
    assert [len(p.members) for p in split.programs] == [2, 2]


def test_a_traced_critic_bc_weight_trains_as_the_static_one():
    """One update with critic_bc_weight 0.5 given through agent.hparams equals the update with 0.5
    in the config (and differs from the default's), on a batch whose next actions are known."""
    import dataclasses

    rng = np.random.default_rng(2)
    f = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    batch = rebrac.Batch(f(8, 3), jnp.tanh(f(8, 2)), f(8), f(8, 3), jnp.ones(8),
                         extras={"next_actions": jnp.tanh(f(8, 2)), "next_action_known": jnp.ones(8)})
    base = rebrac.Config(hidden_dims=(8,), batch_size=8)

    def leaves(config, hparams=None):
        agent = rebrac.create(config, 3, 2, jax.random.PRNGKey(0))
        if hparams:
            agent = agent.replace(hparams={k: jnp.asarray(v, jnp.float32) for k, v in hparams.items()})
        agent, _ = jax.jit(rebrac.update)(agent, batch)
        return [np.asarray(x) for x in jax.tree_util.tree_leaves(agent.critic.params)]

    static, traced = leaves(dataclasses.replace(base, critic_bc_weight=0.5)), leaves(base, {"critic_bc_weight": 0.5})
    for a, b in zip(static, traced):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert any(not np.allclose(a, b) for a, b in zip(static, leaves(base)))
