"""The online learner's minibatches and its successor rule: offline rows come from the spec's
sampler, online rows carry the next env step's action where the buffer holds ``next_actions``,
so ReBRAC's critic penalty stays on when it is fine-tuned (by hand on a tiny batch, and through
``offrl finetune``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import engine
from offrl.algos import rebrac
from offrl.algos.common import Batch
from offrl.engine.data import sample_transitions
from offrl.engine.online import OnlineLearner, mixed_batch, transition_row
from offrl.finetuning import finetune
from offrl.replay import add_rows, init_buffer, sample_mixed

EPISODE = 3  # the fake env's time limit


class CountingEnv:
    """One env (one member): obs = [t, episode], each episode truncated after EPISODE steps."""

    num_envs = 1

    def __init__(self):
        self.t, self.episode = 0, 0

    def _obs(self):
        return np.array([[self.t, self.episode, 0.0]], np.float32)

    def reset(self, seeds):
        self.t = 0
        self.episode += 1
        return self._obs()

    def reset_env(self, index, seed=None):
        return self.reset([seed])[0]

    def step(self, actions, active=None):
        self.t += 1
        truncated = np.array([self.t >= EPISODE])
        return self._obs(), np.array([0.5], np.float32), np.array([False]), truncated


def _learner(config, start_steps=10**6, update_every=4):
    agents = jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], rebrac.create(config, 3, 2, jax.random.PRNGKey(0)))
    example = transition_row(3, (2,), next_actions=np.zeros(2, np.float32), next_action_known=np.zeros((), np.float32))

    def choose(agents, obs, env_step):  # action = (0.01 * env_step, -0.01 * env_step): each step's is distinct
        actions = np.array([[0.01 * env_step, -0.01 * env_step]], np.float32)
        return actions, actions, {}

    return OnlineLearner(rebrac, agents, jnp.zeros((1, 2), jnp.uint32), CountingEnv(), choose=choose,
                         example_row=example, capacity=64, batch_size=config.batch_size, update_every=update_every,
                         start_steps=start_steps, mix_ratio=0.0, config=config)


def _buffer(learner):
    return {k: np.asarray(v[0]) for k, v in learner.buffers.data.items()}, int(np.asarray(learner.buffers.size)[0])


def test_online_rows_hold_the_next_steps_action_within_an_episode():
    """Chunks of 4 env steps, episodes of 3 (so episodes cross chunks), then a restart cutting an
    open episode: row t's next action is row t+1's action unless row t ended its episode, was
    cut by the restart, or is the newest row."""
    learner = _learner(rebrac.Config(hidden_dims=(8,), batch_size=4))
    learner.chunk()
    learner.chunk()
    learner.restart([0])   # cuts the episode open at step 7 (rows 6, 7)
    learner.chunk()
    data, size = _buffer(learner)
    assert size == 12
    ends = {2, 5, 7, 10}                      # timeouts at rows 2, 5 (episodes 1, 2), the cut at 7, then row 10
    for t in range(size):
        if t in ends or t == size - 1:
            assert data["next_action_known"][t] == 0.0, t
            np.testing.assert_allclose(data["next_actions"][t], data["actions"][t])
        else:
            assert data["next_action_known"][t] == 1.0, t
            np.testing.assert_allclose(data["next_actions"][t], data["actions"][t + 1])
            np.testing.assert_allclose(data["next_observations"][t], data["observations"][t + 1])
    # row 3 (the last of chunk 1, episode 2 going on) got its next action at the start of chunk 2
    assert data["next_action_known"][3] == 1.0


def test_rebrac_critic_penalty_on_online_rows_equals_the_hand_computed_value():
    """A tiny batch of online rows: the update's ``critic_bc_penalty`` is
    mean_i k'_i ||a'_i - a'_D,i||^2 with a' = clip(pi'(s') + clip(sigma eps, -c, c), -1, 1) and
    eps from the update's noise key, and its critic loss is the TD loss against
    y = r + gamma m (min_k Q'_k(s', a') - beta_Q k' ||a' - a'_D||^2)."""
    config = rebrac.Config(hidden_dims=(8,), batch_size=4, critic_bc_weight=0.5)
    learner = _learner(config)
    learner.chunk()
    data, _ = _buffer(learner)
    idx = np.array([0, 1, 2, 3])  # row 2 ends an episode; row 3 is the newest, its next action not chosen yet
    batch = Batch.from_rows({k: jnp.asarray(v[idx]) for k, v in data.items()})
    known = np.asarray(batch.extras["next_action_known"])
    np.testing.assert_array_equal(known, [1, 1, 0, 0])
    agent = jax.tree_util.tree_map(lambda x: x[0], learner.agents)
    _, metrics = jax.jit(rebrac.update)(agent, batch)

    _, noise_key = jax.random.split(agent.rng)
    mu = np.asarray(agent.actor.apply_fn(agent.target_actor_params, batch.next_observations))
    eps = np.asarray(jax.random.normal(noise_key, mu.shape))
    a_next = np.clip(mu + np.clip(config.policy_noise * eps, -config.noise_clip, config.noise_clip), -1, 1)
    data_next = np.asarray(batch.extras["next_actions"])
    penalty = known * ((a_next - data_next) ** 2).sum(-1)
    assert float(metrics["critic_bc_penalty"]) == pytest.approx(penalty.mean(), rel=1e-5)
    assert penalty.mean() > 0
    q_next = np.asarray(agent.critic.apply_fn(agent.target_critic_params, batch.next_observations, jnp.asarray(a_next))).min(0)
    y = np.asarray(batch.rewards) + config.discount * np.asarray(batch.masks) * (q_next - config.critic_bc_weight * penalty)
    q = np.asarray(agent.critic.apply_fn(agent.critic.params, batch.observations, batch.actions))
    assert float(metrics["critic_loss"]) == pytest.approx(float(((q - y[None]) ** 2).mean(1).sum()), rel=1e-5)


def test_mixed_batch_draws_the_rows_sample_mixed_draws_with_the_default_sampler():
    rng = np.random.default_rng(0)
    row = transition_row(3, (2,))
    offline = {k: jnp.asarray(rng.standard_normal((50, *np.shape(v))), jnp.float32) for k, v in row.items()}
    buffer = add_rows(init_buffer(row, 16), {k: jnp.asarray(rng.standard_normal((10, *np.shape(v))), jnp.float32)
                                             for k, v in row.items()})
    key = jax.random.PRNGKey(3)
    for fraction in (0.0, 0.25, 1.0):
        ours = mixed_batch(sample_transitions, offline, buffer, key, 8, fraction)
        theirs = sample_mixed(offline, buffer, key, 8, fraction)
        for name in row:
            np.testing.assert_array_equal(getattr(ours, name), theirs[name])


def test_mixed_batch_draws_the_offline_rows_with_the_spec_sampler():
    """A sampler that marks its rows: the first round(B f) rows of the batch are its, the rest the buffer's."""
    row = transition_row(3, (2,))
    offline = {k: jnp.zeros((20, *np.shape(v)), jnp.float32) for k, v in row.items()}
    buffer = add_rows(init_buffer(row, 8), {k: jnp.ones((8, *np.shape(v)), jnp.float32) for k, v in row.items()})

    def marking(data, key, n):
        return sample_transitions(data, key, n)._replace(rewards=jnp.full(n, 7.0))

    batch = mixed_batch(marking, offline, buffer, jax.random.PRNGKey(0), 8, 0.25)
    np.testing.assert_array_equal(batch.rewards, [7, 7, 1, 1, 1, 1, 1, 1])


def test_finetuning_rebrac_keeps_its_critic_penalty_online(tmp_path, pendulum_small):
    """Online data only (mix 0): every minibatch row is an online row, and the penalty is nonzero."""
    from offrl import data

    path = data.save(pendulum_small.replace(metadata={**pendulum_small.metadata, "env_id": "Pendulum-v1"}), tmp_path / "p.hdf5")
    engine.train("rebrac", str(path), steps=20, seeds=1, eval_every=20, eval_episodes=0, log_every=20,
                 out=tmp_path / "offline", config_overrides={"hidden_dims": "32,32", "batch_size": "32"}, progress=False)
    result = finetune(tmp_path / "offline", out=tmp_path / "ft", progress=False, steps=80, update_every=20, start_steps=40,
                      eval_every=80, eval_episodes=0, checkpoint_every=80, log_every=40, mix_ratio=0.0)
    online = [r for r in result.metrics if r.get("phase") == "online" and "critic_bc_penalty" in r]
    assert online and all(r["critic_bc_penalty"] > 0 for r in online), online
