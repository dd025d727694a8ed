"""The rollout layer: a stateful policy's carry, seeded resets, collection flags, episode padding."""

import gymnasium as gym
import jax
import numpy as np
import pytest

from offrl.rollout import OnlineRollout, VectorEnv, collect_steps, run_episodes

COUNTING = "offrl-test/Counting-v0"


class CountingEnv(gym.Env):
    """obs = [t, horizon]; reward = 1 + t + a; terminates at t == horizon (drawn in 2..7 from the
    reset's random stream); the registered time limit (5) truncates the longer episodes."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.horizon = 0, int(self.np_random.integers(2, 8))
        return np.array([self.t, self.horizon], np.float32), {}

    def step(self, action):
        reward = 1.0 + self.t + float(action[0])
        self.t += 1
        return np.array([self.t, self.horizon], np.float32), reward, self.t >= self.horizon, False, {}


if COUNTING not in gym.registry:
    gym.register(COUNTING, entry_point=CountingEnv, max_episode_steps=5)


def counting_policy(calls=None):
    """A stateful toy policy: the carry counts the steps of the current episode of each env; the
    action is ``carry / 10``; the carry is also reported as an extra."""

    def act(params, carry, obs, key):
        if calls is not None:
            calls.append(obs.shape)
        return (carry[:, None] / 10.0).astype(np.float32), carry + 1, {"carry": carry.copy()}

    return act


def reset_counts(carry, done):
    return np.where(done, 0, carry)


def test_vector_env_facts_and_inactive_envs_untouched():
    env = VectorEnv(COUNTING, 3)
    assert (env.num_envs, env.obs_dim, env.action_dim, env.max_episode_steps) == (3, 2, 1, 5)
    np.testing.assert_array_equal(env.action_low, [-1.0])
    obs = env.reset([0, 1, 2])
    nxt, rewards, term, trunc = env.step(np.zeros((3, 1)), active=np.array([True, False, True]))
    np.testing.assert_array_equal(nxt[:, 0], [1, 0, 1])
    np.testing.assert_array_equal(nxt[1], obs[1])
    np.testing.assert_array_equal(rewards, [1.0, 0.0, 1.0])
    assert not term[1] and not trunc[1]


def test_collect_steps_threads_and_resets_the_carry():
    env = VectorEnv(COUNTING, 3)
    calls = []
    budgets = [23, 17, 20]
    out = collect_steps(env, counting_policy(calls), None, budgets, seed=4, key=jax.random.PRNGKey(0),
                        carry=np.zeros(3, np.int64), reset_carry=reset_counts)
    assert len(calls) == max(budgets) and all(shape == (3, 2) for shape in calls)  # one batched call per step
    assert len(out["rewards"]) == sum(budgets)
    t_in_episode = out["observations"][:, 0]
    # the carry equals the step index within the episode, so it was threaded and reset per episode
    np.testing.assert_array_equal(out["infos/carry"], t_in_episode)
    np.testing.assert_allclose(out["actions"][:, 0], t_in_episode / 10.0, rtol=1e-6)
    np.testing.assert_allclose(out["rewards"], 1.0 + t_in_episode + t_in_episode / 10.0, rtol=1e-6)
    assert (t_in_episode == 0).sum() > 3 * 3  # several episodes per env


def test_collect_steps_flags_match_a_plain_gymnasium_loop():
    budgets = [13, 9, 11]
    key = jax.random.PRNGKey(3)

    def noise_policy(params, carry, obs, key):
        return np.asarray(jax.random.uniform(key, (len(obs), 1), minval=-1, maxval=1)), carry

    out = collect_steps(VectorEnv(COUNTING, 3), noise_policy, None, budgets, seed=2, key=key)

    # reference: today's collector, env by env
    rows = {k: [] for k in ("observations", "actions", "rewards", "terminals", "timeouts", "_cut")}
    envs = [gym.make(COUNTING) for _ in budgets]
    obs = np.stack([e.reset(seed=2 * 1000 + i)[0] for i, e in enumerate(envs)])
    streams = [{k: [] for k in rows} for _ in envs]
    for t in range(max(budgets)):
        actions = np.asarray(jax.random.uniform(jax.random.fold_in(key, t), (3, 1), minval=-1, maxval=1))
        for i, e in enumerate(envs):
            if t >= budgets[i]:
                continue
            nxt, r, term, trunc, _ = e.step(actions[i])
            last = t == budgets[i] - 1
            for k, v in (("observations", obs[i].copy()), ("actions", actions[i]), ("rewards", r), ("terminals", term),
                         ("timeouts", not term and (trunc or last)), ("_cut", last and not (term or trunc))):
                streams[i][k].append(v)
            obs[i] = e.reset()[0] if (term or trunc) else nxt
    for k in rows:
        expected = np.concatenate([np.asarray(s[k]) for s in streams])
        np.testing.assert_allclose(out[k].astype(np.float64), expected.astype(np.float64), rtol=1e-6, err_msg=k)
    assert out["terminals"].any() and out["timeouts"].any() and out["_cut"].any()
    ends = np.cumsum(budgets) - 1
    assert np.all(out["timeouts"][ends] | out["terminals"][ends])  # every env's stream ends an episode


def test_run_episodes_pads_rewards_and_seeded_resets_reproduce():
    env = VectorEnv(COUNTING, 4)
    calls = []
    seeds = [10, 11, 12, 13]
    out = run_episodes(env, counting_policy(calls), None, seeds, jax.random.PRNGKey(0), carry=np.zeros(4, np.int64))
    lengths = out["length"]
    assert out["rewards"].shape == (4, lengths.max()) and len(calls) == lengths.max()
    for i, n in enumerate(lengths):
        t = np.arange(n)
        np.testing.assert_allclose(out["rewards"][i, :n], 1.0 + t + t / 10.0, rtol=1e-6)
        assert np.all(out["rewards"][i, n:] == 0)
        assert np.isclose(out["return"][i], out["rewards"][i].sum())
    horizons = out["first_observations"][:, 1]
    np.testing.assert_array_equal(lengths, np.minimum(horizons, 5))
    np.testing.assert_array_equal(out["first_actions"], np.zeros((4, 1)))
    again = run_episodes(env, counting_policy(), None, seeds, jax.random.PRNGKey(1), carry=np.zeros(4, np.int64))
    np.testing.assert_array_equal(again["return"], out["return"])


def test_run_episodes_seeded_pendulum_returns():
    env = VectorEnv("Pendulum-v1", 3)

    def pd(params, carry, obs, key):  # a deterministic controller: torque against the angular velocity
        return np.clip(-params * obs[:, 2:3], -2, 2), carry

    a = run_episodes(env, pd, 0.5, [0, 1, 2], jax.random.PRNGKey(0))
    b = run_episodes(env, pd, 0.5, [0, 1, 2], jax.random.PRNGKey(0))
    c = run_episodes(env, pd, 0.5, [3, 4, 5], jax.random.PRNGKey(0))
    np.testing.assert_array_equal(a["length"], [200, 200, 200])
    np.testing.assert_array_equal(a["return"], b["return"])
    assert not np.allclose(a["return"], c["return"])
    assert len(np.unique(a["return"])) == 3


def test_run_episodes_max_steps_cuts():
    env = VectorEnv("Pendulum-v1", 2)
    out = run_episodes(env, lambda p, c, o, k: (np.zeros((2, 1)), c), None, [0, 1], jax.random.PRNGKey(0), max_steps=7)
    np.testing.assert_array_equal(out["length"], [7, 7])
    assert out["rewards"].shape == (2, 7)


def test_online_rollout_auto_resets_and_reports_finished_episodes():
    env = VectorEnv(COUNTING, 3)
    rollout = OnlineRollout(env, seed=5)
    first = rollout.obs.copy()
    for i in range(3):  # env i first reset with seed + i
        np.testing.assert_array_equal(first[i], gym.make(COUNTING).reset(seed=5 + i)[0])
    batches = [rollout.step(np.full((3, 1), 0.5, np.float32)) for _ in range(30)]
    returns = {i: [] for i in range(3)}
    running, length = np.zeros(3), np.zeros(3, int)
    for prev, cur in zip(batches, batches[1:] + [None]):
        done = prev["terminals"] | prev["timeouts"]
        assert not (prev["terminals"] & prev["timeouts"]).any()
        np.testing.assert_array_equal(prev["terminals"], prev["next_observations"][:, 0] >= prev["observations"][:, 1])
        running += prev["rewards"]
        length += 1
        for i in np.flatnonzero(done):
            returns[i].append((float(running[i]), int(length[i])))
            running[i], length[i] = 0, 0
        if cur is not None:
            # an unfinished env continues from its next observation; a finished one starts again at t = 0
            np.testing.assert_array_equal(cur["observations"][~done], prev["next_observations"][~done])
            assert np.all(cur["observations"][done, 0] == 0)
    assert sum(b["timeouts"].sum() for b in batches) > 0 and sum(b["terminals"].sum() for b in batches) > 0
    for i in range(3):
        got = [(r, n) for j, r, n in rollout.finished if j == i]
        assert len(got) == len(returns[i]) > 2
        np.testing.assert_allclose([g[0] for g in got], [r[0] for r in returns[i]], rtol=1e-6)
        assert [g[1] for g in got] == [r[1] for r in returns[i]]
    rollout.reset_all([5, 6, 7])
    np.testing.assert_array_equal(rollout.obs, first)


def test_reset_seeds_must_match_num_envs():
    with pytest.raises(ValueError, match="one seed per env"):
        VectorEnv(COUNTING, 2).reset([0])
