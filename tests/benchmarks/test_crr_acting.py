"""benchmarks/crr_acting.py: d3rlpy's CRR acting rule, drawn with probabilities softmax(Q)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from benchmark_script import load

from offrl.algos import crr

acting = load("benchmarks/crr_acting.py", "crr_acting")


def test_softmax_q_action_draws_a_policy_sample_with_probability_softmax_q():
    agent = crr.create(crr.Config(hidden_dims=(16, 16)), obs_dim=3, action_dim=2, key=jax.random.key(0))
    # scale the critic so that softmax(Q) over the 4 candidates is far from uniform
    params = jax.tree_util.tree_map(lambda p: p * 4.0, agent.critic.params)
    agent = agent.replace(critic=agent.critic.replace(params=params))
    obs = jnp.array([0.3, -0.2, 0.5])
    mean, log_std = agent.actor.apply_fn(agent.actor.params, obs[None])

    def one(key):
        sample_key, _ = jax.random.split(key)
        candidates = crr.sample_actions(sample_key, jnp.broadcast_to(mean, (4, 2)), jnp.broadcast_to(log_std, (4, 2)))
        q = agent.critic.apply_fn(agent.critic.params, jnp.broadcast_to(obs, (4, 3)), candidates).min(0)
        chosen = acting.softmax_q_action(agent, obs, key)
        return candidates, jax.nn.softmax(q), chosen

    candidates, probs, chosen = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(1), 4000))
    match = np.all(np.isclose(np.asarray(candidates), np.asarray(chosen)[:, None]), axis=-1)
    assert match.any(axis=1).all()                            # every action is one of the policy's samples
    index = match.argmax(axis=1)
    p_chosen = np.asarray(probs)[np.arange(4000), index]
    # a draw by softmax(Q) picks candidate j with probability p_j, so E[p_chosen] = E[sum_j p_j^2]
    expected = float((np.asarray(probs) ** 2).sum(axis=1).mean())
    assert expected > 0.4                                     # far from a uniform draw's 0.25
    assert abs(p_chosen.mean() - expected) < 0.02
