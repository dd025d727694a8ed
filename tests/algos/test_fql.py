"""FQL: the one-step objective by hand, the TD target built from the one-step policy with either
aggregation, the distillation target is the flow's Euler sample (scan == Python loop), the
NumPy export at z = 0, a short real run on Pendulum, and `offrl finetune` of an FQL run."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import engine, losses
from offrl.algos import fql
from offrl.algos.common import Batch

from _pendulum import pendulum_medium

OBS_DIM, ACTION_DIM = 3, 2


def _batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    f = lambda *s: jnp.asarray(rng.standard_normal(s), jnp.float32)  # noqa: E731
    return Batch(f(n, OBS_DIM), jnp.tanh(f(n, ACTION_DIM)), f(n), f(n, OBS_DIM), jnp.asarray(rng.random(n) > 0.2, jnp.float32))


def _agent(**changes):
    config = dataclasses.replace(fql.Config(), hidden_dims=(16, 16), flow_steps=4, **changes)
    return fql.create(config, OBS_DIM, ACTION_DIM, jax.random.PRNGKey(0))  # raw key data, as the engine keeps it


def test_the_one_step_objective_by_hand():
    q, mu, flow = jnp.array([1.0, 3.0]), jnp.array([[0.5, 0.0], [0.0, -1.0]]), jnp.zeros((2, 2))
    # -mean q + alpha * mean over all four entries: -2 + 2 * (0.25 + 1) / 4
    loss, aux = fql.one_step_objective(q, mu, flow, 2.0)
    np.testing.assert_allclose([loss, aux["distill_loss"], aux["q_loss"]], [-2 + 2 * 1.25 / 4, 1.25 / 4, -2.0], rtol=1e-6)
    # normalised: -mean q / mean |q| = -1; lambda is held fixed, so dL/dq_i = -1 / (2 * 2)
    loss, _ = fql.one_step_objective(q, mu, flow, 2.0, normalize_q_loss=True)
    np.testing.assert_allclose(loss, -1 + 2 * 1.25 / 4, rtol=1e-6)
    grad = jax.grad(lambda q: fql.one_step_objective(q, mu, flow, 2.0, normalize_q_loss=True)[0])(q)
    np.testing.assert_allclose(grad, [-0.25, -0.25], rtol=1e-6)
    np.testing.assert_allclose(fql.aggregate(jnp.array([[1.0, 4.0], [3.0, 2.0]]), "mean"), [2.0, 3.0])
    np.testing.assert_allclose(fql.aggregate(jnp.array([[1.0, 4.0], [3.0, 2.0]]), "min"), [1.0, 2.0])


@pytest.mark.parametrize("q_agg", ["mean", "min"])
def test_the_td_target_uses_the_one_step_policy_at_the_next_state(q_agg):
    agent = _agent(q_agg=q_agg, discount=0.9)
    batch = _batch()
    _, metrics = jax.jit(fql.update)(agent, batch)
    _, next_key, _, _ = jax.random.split(agent.rng, 4)
    a_next = agent.actor.apply_fn(agent.actor.params, batch.next_observations, jax.random.normal(next_key, batch.actions.shape))
    q_next = np.asarray(agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, a_next))
    q_next = q_next.min(0) if q_agg == "min" else q_next.mean(0)
    target = np.asarray(batch.rewards) + 0.9 * np.asarray(batch.masks) * q_next
    q = np.asarray(agent.critic.apply_fn(agent.critic.params, batch.observations, batch.actions))
    np.testing.assert_allclose(metrics["critic_loss"], ((q - target) ** 2).mean(1).sum(), rtol=1e-5)


def test_the_distillation_target_is_the_flows_euler_sample():
    agent = _agent()
    for seed in range(3):
        agent, _ = jax.jit(fql.update)(agent, _batch(seed=seed))
    obs = _batch().observations
    z = jax.random.normal(jax.random.key(1), (obs.shape[0], ACTION_DIM))
    x = z
    for k in range(4):  # the Euler loop written out
        x = x + agent.flow.apply_fn(agent.flow.params, obs, x, jnp.full((obs.shape[0],), k / 4)) / 4
    np.testing.assert_allclose(fql.flow_actions(agent, obs, z), np.clip(x, -1, 1), rtol=1e-5, atol=1e-6)


def test_the_actor_step_descends_the_one_step_objective():
    """One actor step lowers L_mu at the same noise, critic and flow targets."""
    agent = _agent(alpha=3.0)
    batch = _batch()
    z = jax.random.normal(jax.random.key(2), batch.actions.shape)
    targets = fql.flow_actions(agent, batch.observations, z)
    before, _ = fql.actor_loss(agent.actor.params, agent, batch, z, targets)
    from offrl.algos.common import apply_gradients_with_loss

    actor, _, _ = apply_gradients_with_loss(agent.actor, fql.actor_loss, agent, batch, z, targets)
    after, _ = fql.actor_loss(actor.params, agent, batch, z, targets)
    assert float(after) < float(before)


def test_act_explore_and_the_numpy_layers():
    agent = _agent()
    agent, _ = jax.jit(fql.update)(agent, _batch())
    obs = _batch(n=6, seed=3).observations
    a = np.asarray(fql.act(agent, obs))
    assert a.shape == (6, ACTION_DIM) and np.all(np.abs(a) <= 1.0)
    np.testing.assert_array_equal(a, agent.actor.apply_fn(agent.actor.params, obs, jnp.zeros((6, ACTION_DIM))))
    e1, e2 = (np.asarray(fql.explore(agent, obs, jax.random.key(k))) for k in (1, 2))
    assert np.all(np.abs(e1) <= 1.0) and not np.array_equal(e1, e2)
    # relu hidden layers, tanh output, over the observation alone (the house NumPy policy)
    x = np.asarray(obs)
    layers = fql.policy_layers(jax.tree_util.tree_map(np.asarray, agent))
    assert layers[0][0].shape == (OBS_DIM, 16)
    for w, b in layers[:-1]:
        x = np.maximum(x @ w + b, 0.0)
    np.testing.assert_allclose(np.tanh(x @ layers[-1][0] + layers[-1][1]), a, rtol=1e-5, atol=1e-6)


def test_the_target_critic_is_polyak_averaged():
    agent = _agent(tau=0.5)
    new, _ = jax.jit(fql.update)(agent, _batch())
    expected = losses.soft_update(agent.target_critic_params, new.critic.params, 0.5)
    for u, v in zip(jax.tree_util.tree_leaves(new.target_critic_params), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(u, v, rtol=1e-6)


def test_fql_beats_a_random_policy_on_pendulum():
    """The noisy swing-up controller data of tests/engine (normalised: random 0, controller 100)."""
    run = engine.train("fql", pendulum_medium(), steps=2000, eval_every=2000, log_every=500, eval_episodes=5,
                       progress=False, config_overrides={"hidden_dims": "64,64", "normalize_q_loss": "true", "alpha": "1"})
    score = float(np.mean(run.final_scores))
    assert score > 15, f"FQL reached only {score:.1f} (random = 0, controller = 100)"


def test_offrl_finetune_continues_an_fql_run_online(tmp_path):
    from offrl import data
    from offrl.finetuning import finetune

    dataset = pendulum_medium()
    path = data.save(dataset.replace(metadata={**dataset.metadata, "env_id": "Pendulum-v1"}), tmp_path / "pend.hdf5")
    engine.train("fql", str(path), steps=20, seeds=1, eval_every=20, eval_episodes=0, log_every=20, out=tmp_path / "offline",
                 config_overrides={"hidden_dims": "32,32", "batch_size": "32", "flow_steps": "3"}, progress=False)
    result = finetune(tmp_path / "offline", out=tmp_path / "ft", progress=False, steps=80, update_every=20, start_steps=40,
                      eval_every=80, eval_episodes=1, checkpoint_every=80, log_every=40)
    online = [r for r in result.metrics if r.get("phase") == "online"]
    assert {r["env_step"] for r in online} == {40, 80}
    assert all(np.isfinite(v) for r in online for k, v in r.items() if isinstance(v, float) and not k.startswith("eval/"))
    assert result.step > 20  # the agent was updated online
