import numpy as np
import pytest

from offrl.ope import tabular as tab


def test_one_state_mdp_values_by_hand():
    # One state, two actions with rewards 1 and 3, a self-loop: V = (0.5 * 1 + 0.5 * 3) / (1 - gamma).
    mdp = tab.TabularMDP(np.ones((1, 2, 1)), np.array([[1.0, 3.0]]), np.array([1.0]), np.array([False]))
    pi = np.array([[0.5, 0.5]])
    assert tab.policy_value(mdp, pi, gamma=0.9) == pytest.approx(2.0 / 0.1)
    # Finite horizon 3, undiscounted: three steps of expected reward 2.
    assert tab.policy_value(mdp, pi, gamma=1.0, horizon=3) == pytest.approx(6.0)
    q = tab.q_values(mdp, pi, gamma=0.5, horizon=2)
    np.testing.assert_allclose(q[1], [[1.0, 3.0]])           # one step left
    np.testing.assert_allclose(q[0], [[1.0 + 0.5 * 2.0, 3.0 + 0.5 * 2.0]])


def test_terminal_state_ends_value():
    # State 0 moves to the terminal state 1 under action 1 (reward 5), stays under action 0 (reward 1).
    p = np.zeros((2, 2, 2))
    p[0, 0, 0] = p[0, 1, 1] = p[1, :, 1] = 1.0
    mdp = tab.TabularMDP(p, np.array([[1.0, 5.0], [100.0, 100.0]]), np.array([1.0, 0.0]), np.array([False, True]))
    always_end = np.array([[0.0, 1.0], [0.5, 0.5]])
    assert tab.policy_value(mdp, always_end, gamma=0.9) == pytest.approx(5.0)
    assert tab.policy_value(mdp, always_end, gamma=1.0, horizon=10) == pytest.approx(5.0)


def test_infinite_horizon_is_the_limit_of_finite_horizons():
    mdp = tab.random_mdp(np.random.default_rng(0), 5, 3, num_terminal=1)
    pi = tab.random_policy(np.random.default_rng(1), 5, 3)
    np.testing.assert_allclose(tab.q_values(mdp, pi, 0.9), tab.q_values(mdp, pi, 0.9, horizon=400)[0], atol=1e-10)


def test_sampled_returns_match_the_exact_value():
    mdp = tab.random_mdp(np.random.default_rng(0), 5, 3, num_terminal=1, reward_noise=0.3)
    pi = tab.random_policy(np.random.default_rng(1), 5, 3)
    ds = tab.sample_dataset(mdp, pi, 20_000, horizon=8, rng=np.random.default_rng(2))
    returns = ds.episode_returns()
    se = returns.std() / np.sqrt(len(returns))
    assert abs(returns.mean() - tab.policy_value(mdp, pi, 1.0, horizon=8)) < 4 * se
    # Layout: every episode ends with a terminal or a timeout; lengths <= horizon; log-probs are pi's.
    assert ds.num_episodes == 20_000 and ds.episode_lengths().max() == 8
    assert ds.terminals.any() and ds.timeouts.any()
    s, a = tab.state_index(ds.observations), ds.actions[:, 0].astype(int)
    np.testing.assert_allclose(ds.infos["action_log_probs"], np.log(pi[s, a]), rtol=1e-6)
    np.testing.assert_array_equal(ds.observations[1:][~ds.dones[:-1]], ds.next_observations[:-1][~ds.dones[:-1]])


def test_mix_policies_bounds_the_ratio():
    target = tab.random_policy(np.random.default_rng(0), 4, 3, concentration=0.3)
    behavior = tab.mix_policies(target, tab.uniform_policy(4, 3), 0.5)
    assert (target / behavior).max() <= 1.0 / (0.5 + 0.5 / 3) + 1e-12
