"""CQL: hand-computed critic-loss numbers, the OOD action sampler, the BC warm-up switch, and
a short bandit run that must learn."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training.train_state import TrainState

from offrl.algos import cql
from offrl.algos.common import Batch
from offrl.nets import tanh_gaussian_log_prob, tanh_gaussian_sample

# Eager op-by-op dispatch is slow on a shared CPU: compile the pieces the tests call.
CREATE = jax.jit(cql.create, static_argnums=(0, 1, 2))
CRITIC_LOSS = jax.jit(cql.critic_loss)
ACTOR_LOSS = jax.jit(cql.actor_loss)
SAMPLE_OOD = jax.jit(cql._sample_ood)
#: one small configuration shared by the hand-computed tests (one compile of each piece).
SMALL = cql.Config(hidden_dims=(8,), num_qs=2, cql_alpha=5.0, n_actions=4, bc_warmup_steps=10)


def _linear_critic_agent(config, slopes):
    """An agent whose critic ensemble is ``Q_k(s, a) = slopes[k] * sum_j a_j`` (no parameters used)."""
    slopes = jnp.asarray(slopes, jnp.float32)

    def apply_fn(params, obs, actions):
        return slopes[:, None] * jnp.sum(actions, axis=-1)[None, :]

    agent = CREATE(config, 1, 1, jax.random.PRNGKey(0))
    critic = TrainState.create(apply_fn=apply_fn, params={"unused": jnp.zeros(())}, tx=optax.sgd(0.0))
    return agent.replace(critic=critic)


def _batch(actions, rewards=None):
    actions = jnp.asarray(actions, jnp.float32).reshape(-1, 1)
    B = actions.shape[0]
    obs = jnp.zeros((B, 1))
    rewards = jnp.zeros(B) if rewards is None else jnp.asarray(rewards, jnp.float32)
    return Batch(obs, actions, rewards, obs, jnp.zeros(B))


def test_critic_loss_is_td_plus_alpha_times_importance_sampled_lse_minus_data_q():
    """One state, data action 0 (Q = 0), target 0; OOD actions +-0.5 drawn from the uniform
    density on [-1, 1] (log mu = log 0.5). With Q(s, a) = a:
    lse = log(exp(0.5 - log 0.5) + exp(-0.5 - log 0.5)) = log(2 (e^0.5 + e^-0.5)),
    loss = 0 (TD) + alpha * (lse - 0) per critic, summed over the two identical critics."""
    agent = _linear_critic_agent(SMALL, [1.0, 1.0])
    batch = _batch([0.0])
    ood = jnp.array([[[0.5], [-0.5]]])
    log_mu = jnp.full((1, 2), math.log(0.5))
    loss, aux = CRITIC_LOSS(agent.critic.params, agent, batch, jnp.zeros(1), ood, log_mu)
    lse = math.log(2 * (math.exp(0.5) + math.exp(-0.5)))
    assert float(aux["td_loss"]) == pytest.approx(0.0, abs=1e-6)
    assert float(aux["cql_gap"]) == pytest.approx(lse, rel=1e-5)
    assert float(loss) == pytest.approx(2 * 5.0 * lse, rel=1e-5)


def test_penalty_sign_pushes_ood_q_down_and_data_q_up():
    """Two critics with slopes 1 and 2; data action 0.2, OOD actions +-1 with policy log-density 0.
    The penalty's gradient w.r.t. Q on the data action is -alpha per critic (averaged over the
    batch of one), and the TD term doubles each critic's error: d loss / d slope_k =
    2 (slope_k * 0.2 - y) * 0.2 + alpha * (softmax-weighted OOD action - 0.2)."""
    config = SMALL

    def loss_of_slopes(slopes):
        agent = _linear_critic_agent(config, [0.0, 0.0])
        critic = agent.critic.replace(apply_fn=lambda p, o, a: p["slopes"][:, None] * jnp.sum(a, -1)[None, :],
                                      params={"slopes": slopes})
        agent = agent.replace(critic=critic)
        return cql.critic_loss(critic.params, agent, _batch([0.2]), jnp.array([0.1]),
                               jnp.array([[[1.0], [-1.0]]]), jnp.zeros((1, 2)))[0]

    slopes = jnp.array([1.0, 2.0])
    grad = jax.jit(jax.grad(loss_of_slopes))(slopes)
    expected = []
    for k in (1.0, 2.0):
        w = math.exp(k) / (math.exp(k) + math.exp(-k))
        soft_action = w * 1.0 + (1 - w) * -1.0
        expected.append(2 * (k * 0.2 - 0.1) * 0.2 + 5.0 * (soft_action - 0.2))
    np.testing.assert_allclose(grad, expected, rtol=1e-5)


def test_ood_sampler_layout_densities_and_no_gradient_to_the_actor():
    agent = CREATE(SMALL, 3, 2, jax.random.PRNGKey(1))
    rng = np.random.default_rng(0)
    B = 5
    obs = jnp.asarray(rng.normal(size=(B, 3)), jnp.float32)
    nxt = jnp.asarray(rng.normal(size=(B, 3)), jnp.float32)
    batch = Batch(obs, jnp.zeros((B, 2)), jnp.zeros(B), nxt, jnp.ones(B))
    ood, log_mu, next_actions = SAMPLE_OOD(agent, batch, jax.random.PRNGKey(2))
    assert ood.shape == (B, 12, 2) and log_mu.shape == (B, 12) and next_actions.shape == (B, 2)
    assert np.all(np.abs(ood) <= 1.0)
    np.testing.assert_allclose(log_mu[:, :4], -2 * math.log(2.0), rtol=1e-6)
    # Current-policy actions carry pi(.|s)'s log-density, next-state actions pi(.|s')'s.
    for rows, states in ((slice(4, 8), obs), (slice(8, 12), nxt)):
        mean, log_std = agent.actor.apply_fn(agent.actor.params, states)
        expected = tanh_gaussian_log_prob(mean[:, None], log_std[:, None], ood[:, rows])
        np.testing.assert_allclose(log_mu[:, rows], expected, rtol=1e-3, atol=1e-3)

    def total(actor_params):
        a = agent.replace(actor=agent.actor.replace(params=actor_params))
        o, lm, na = cql._sample_ood(a, batch, jax.random.PRNGKey(2))
        return o.sum() + lm.sum() + na.sum()

    grads = jax.jit(jax.grad(total))(agent.actor.params)
    assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree_util.tree_leaves(grads))


def test_actor_clones_the_data_during_warm_up_and_follows_q_after():
    """Before ``bc_warmup_steps`` the actor loss ignores the critic; afterwards it is
    ``alpha log pi - min_k Q_k``, so scaling Q changes it."""
    config = SMALL
    batch = _batch([0.3, -0.4])
    key = jax.random.PRNGKey(3)
    small, big = _linear_critic_agent(config, [1.0, 2.0]), _linear_critic_agent(config, [100.0, 200.0])
    params = small.actor.params
    warm = [float(ACTOR_LOSS(params, a, batch, key)[0]) for a in (small, big)]
    assert warm[0] == pytest.approx(warm[1], rel=1e-6)
    after = [a.replace(step=jnp.asarray(10, jnp.int32)) for a in (small, big)]
    late = [float(ACTOR_LOSS(params, a, batch, key)[0]) for a in after]
    assert late[0] != pytest.approx(late[1], rel=1e-3)
    # Hand check of the SAC loss: mean(alpha log pi(a) - min_k Q_k(s, a)) with the same sample.
    mean, log_std = small.actor.apply_fn(params, batch.observations)
    actions, log_probs = tanh_gaussian_sample(key, mean, log_std)
    q_min = jnp.minimum(1.0 * actions[:, 0], 2.0 * actions[:, 0])
    assert late[0] == pytest.approx(float(jnp.mean(log_probs - q_min)), rel=1e-5, abs=1e-6)


BANDIT = cql.Config(hidden_dims=(32, 32), batch_size=128, actor_lr=1e-3, critic_lr=1e-3,
                    entropy_alpha_lr=1e-3, bc_warmup_steps=50, n_actions=4)


def test_cql_learns_the_best_action_of_a_bandit():
    """Masks = 0 (targets are the rewards), data actions uniform on [-1, 1], reward
    ``-4 (a - 0.5)^2``: cloning gives a mean near 0, the conservative critic (whose penalty is
    neutral under uniform data) must lead the policy to 0.5. A flipped penalty or actor sign fails."""
    update = jax.jit(cql.update)
    agent = CREATE(BANDIT, 1, 1, jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    for _ in range(400):
        obs = rng.normal(size=(BANDIT.batch_size, 1)).astype(np.float32)
        actions = rng.uniform(-1, 1, size=(BANDIT.batch_size, 1)).astype(np.float32)
        batch = Batch(obs, actions, -4.0 * (actions[:, 0] - 0.5) ** 2, obs, np.zeros(BANDIT.batch_size, np.float32))
        agent, metrics = update(agent, batch)
    assert all(np.isfinite(float(v)) for v in metrics.values())
    obs = np.random.default_rng(2).normal(size=(256, 1)).astype(np.float32)
    mean_action = float(cql.act(agent, jnp.asarray(obs)).mean())
    assert 0.3 < mean_action < 0.7, mean_action


def test_warm_up_is_not_dominated_by_saturated_data_actions():
    """85% of the data actions are N(0, 0.1), 15% sit at the bound +1 (as Pendulum's clipped
    torques do). The warm-up fits a Gaussian in u = atanh(a) space, whose maximum-likelihood
    std is that of the clipped u's: sqrt(0.15 * 0.85) * atanh(1 - eps) (plus the bulk's 0.1):
    0.95 (log -0.05) with eps = 1e-2, but 2.6 (log 0.95) with the former eps = 1e-6, where the
    saturated actions dominate the fit. Measured after 300 steps: log-std -0.06 (eps 1e-2)
    against 0.24 and still rising (eps 1e-6, 0.56 after 1,000 steps)."""
    config = dataclasses.replace(BANDIT, bc_warmup_steps=10**6)
    update = jax.jit(cql.update)
    agent = CREATE(config, 1, 1, jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    B = config.batch_size
    for _ in range(300):
        actions = np.clip(rng.normal(0.0, 0.1, size=(B, 1)), -1, 1).astype(np.float32)
        actions[rng.random(B) < 0.15] = 1.0
        obs = np.zeros((B, 1), np.float32)
        agent, _ = update(agent, Batch(obs, actions, np.zeros(B, np.float32), obs, np.zeros(B, np.float32)))
    mean, log_std = agent.actor.apply_fn(agent.actor.params, jnp.zeros((1, 1)))
    assert -0.2 < float(log_std[0, 0]) < 0.1, float(log_std[0, 0])
    assert 0.0 < float(jnp.tanh(mean[0, 0])) < 0.45, float(mean[0, 0])


# ---------------------------------------------------------------------- CQL(rho)
RHO = dataclasses.replace(SMALL, variant="rho")


def test_rho_penalty_is_the_exp_q_weighted_mean_of_prior_q_minus_data_q():
    """Critics Q_k(s, a) = k * a (k = 1, 2), data action 0.2, target 0.1, prior samples
    a_j = 0.5, -0.5, 0: per critic w_j = exp(k a_j) / sum_i exp(k a_i) and the penalty is
    sum_j w_j k a_j - 0.2 k; the loss is sum_k (0.2 k - 0.1)^2 + alpha * sum_k penalty_k."""
    agent = _linear_critic_agent(RHO, [1.0, 2.0])
    prior = jnp.array([[[0.5], [-0.5], [0.0]]])
    loss, aux = CRITIC_LOSS(agent.critic.params, agent, _batch([0.2]), jnp.array([0.1]), prior, jnp.zeros((1, 3)))
    gaps, td = [], 0.0
    for k in (1.0, 2.0):
        q = [k * 0.5, -k * 0.5, 0.0]
        w = [math.exp(x) / sum(math.exp(y) for y in q) for x in q]
        gaps.append(sum(wi * qi for wi, qi in zip(w, q)) - 0.2 * k)
        td += (0.2 * k - 0.1) ** 2
    assert float(aux["td_loss"]) == pytest.approx(td, rel=1e-5)
    assert float(aux["cql_gap"]) == pytest.approx(np.mean(gaps), rel=1e-5)
    assert float(loss) == pytest.approx(td + 5.0 * sum(gaps), rel=1e-5)
    # the log-sum-exp of CQL(H) on the same Q-values is a different number
    assert float(aux["q_ood_lse"]) != pytest.approx(math.log(sum(math.exp(x) for x in (0.5, -0.5, 0.0))), rel=1e-3)


def test_rho_penalty_gradient_holds_the_weights_constant():
    """Danskin: d/d slope_k of the penalty is sum_j w_j a_j - a_data with w fixed; letting the
    gradient flow through the softmax would add sum_j w_j a_j (k a_j - sum_i w_i k a_i)."""

    def loss_of_slopes(slopes):
        agent = _linear_critic_agent(RHO, [0.0, 0.0])
        critic = agent.critic.replace(apply_fn=lambda p, o, a: p["slopes"][:, None] * jnp.sum(a, -1)[None, :],
                                      params={"slopes": slopes})
        agent = agent.replace(critic=critic)
        return cql.critic_loss(critic.params, agent, _batch([0.2]), jnp.array([0.1]),
                               jnp.array([[[1.0], [-1.0], [0.5]]]), jnp.zeros((1, 3)))[0]

    grad = jax.jit(jax.grad(loss_of_slopes))(jnp.array([1.0, 2.0]))
    expected = []
    for k in (1.0, 2.0):
        a = np.array([1.0, -1.0, 0.5])
        w = np.exp(k * a) / np.exp(k * a).sum()
        expected.append(2 * (k * 0.2 - 0.1) * 0.2 + 5.0 * (float(w @ a) - 0.2))
    np.testing.assert_allclose(grad, expected, rtol=1e-5)


def test_rho_update_penalises_the_previous_policys_actions_at_s():
    """The update's critic loss equals critic_loss on the n current-state policy actions drawn by
    _sample_ood with the update's key (rho = pi_{k-1}: the actor before this step's update)."""
    agent = CREATE(RHO, 3, 2, jax.random.PRNGKey(1))
    rng = np.random.default_rng(0)
    B = 5
    batch = Batch(*(jnp.asarray(x, jnp.float32) for x in (rng.normal(size=(B, 3)), rng.uniform(-0.9, 0.9, (B, 2)),
                                                          rng.normal(size=B), rng.normal(size=(B, 3)), np.ones(B))))
    _, metrics = jax.jit(cql.update)(agent, batch)
    _, ood_key, _ = jax.random.split(agent.rng, 3)
    ood, log_mu, next_actions = SAMPLE_OOD(agent, batch, ood_key)
    next_q = agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, next_actions).min(0)
    target = batch.rewards + RHO.discount * batch.masks * next_q
    n = RHO.n_actions
    loss, _ = CRITIC_LOSS(agent.critic.params, agent, batch, target, ood[:, n:2 * n], log_mu[:, n:2 * n])
    assert float(metrics["critic_loss"]) == pytest.approx(float(loss), rel=1e-5)
    uniform_loss, _ = CRITIC_LOSS(agent.critic.params, agent, batch, target, ood[:, :n], log_mu[:, :n])
    assert float(metrics["critic_loss"]) != pytest.approx(float(uniform_loss), rel=1e-4)


def test_default_update_is_cql_h_unchanged():
    """Three default-config updates on a fixed batch give the numbers the update gave before the
    ``variant`` field existed (recorded from that commit, b9a3289, with this script); that change
    also left the lowered program unchanged (benchmarks/update_program_identity.py: cql d22eb09b2d6f3e4a
    both). The critic's broadcast inputs (nets.EnsembleCritic) changed the program, not these numbers."""
    config = cql.Config(hidden_dims=(8,), n_actions=3, batch_size=4, bc_warmup_steps=1)
    assert config.variant == "h"
    agent = cql.create(config, 3, 2, jax.random.PRNGKey(7))
    rng = np.random.default_rng(3)
    batch = Batch(*(jnp.asarray(x, jnp.float32) for x in (rng.standard_normal((4, 3)), rng.uniform(-0.9, 0.9, (4, 2)),
                                                          rng.standard_normal(4), rng.standard_normal((4, 3)),
                                                          np.array([1, 1, 0, 1]))))
    update = jax.jit(cql.update)
    for _ in range(3):
        agent, metrics = update(agent, batch)
    recorded = {"critic_loss": 40.38985061645508, "actor_loss": -0.3487187623977661, "cql_gap": 3.7015628814697266,
                "q_ood_lse": 3.640937328338623, "q": -0.060625381767749786}
    for key, value in recorded.items():
        assert float(metrics[key]) == pytest.approx(value, rel=1e-5, abs=1e-6), key
    critic_sum = float(sum(jnp.sum(x) for x in jax.tree_util.tree_leaves(agent.critic.params)))
    actor_sum = float(sum(jnp.sum(x) for x in jax.tree_util.tree_leaves(agent.actor.params)))
    assert critic_sum == pytest.approx(-0.25861868262290955, rel=1e-5)
    assert actor_sum == pytest.approx(2.419227123260498, rel=1e-5)


def test_variant_outside_its_choices_is_refused():
    from offrl.algos.common import apply_overrides
    from offrl.errors import ConfigError

    assert apply_overrides(cql.Config(), {"variant": "rho"}).variant == "rho"
    with pytest.raises(ConfigError, match="variant"):
        apply_overrides(cql.Config(), {"variant": "kl"})


def test_cql_rho_beats_a_random_policy_on_wide_coverage_pendulum_data():
    """The noisy controller's data (tests/algos/_pendulum.py; normalised 0 = uniformly random
    actions, 100 = the controller). Measured: 65.5 after 3,000 updates with the paper's alpha 5."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from _pendulum import pendulum_medium

    from offrl import engine

    run = engine.train("cql", pendulum_medium(), steps=2000, eval_every=2000, log_every=1000, eval_episodes=5,
                       progress=False, config_overrides={"hidden_dims": "64,64", "variant": "rho",
                                                         "bc_warmup_steps": "500"})
    assert run.config.variant == "rho"
    score = float(np.mean(run.final_scores))
    assert score > 30, f"CQL(rho) reached only {score:.1f} (random = 0, controller = 100)"
    assert all(np.isfinite(r["cql_gap"]) for r in run.metrics if "cql_gap" in r)
