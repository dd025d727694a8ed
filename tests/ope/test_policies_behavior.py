import math

import numpy as np
import pytest

from offrl.data.dataset import Dataset
from offrl.errors import OffrlError
from offrl.ope import tabular as tab
from offrl.ope.behavior import BehaviorConfig, behavior_log_probs, empirical_log_probs
from offrl.ope.policies import GaussianPolicy, TabularPolicy, check_policy_matches, load_policy
from offrl.policy import save_numpy_policy


def test_deterministic_policy_density_by_hand():
    # Bounds [-2, 2]: half range 2, std 0.1 normalised -> 0.2 in env units.
    policy = GaussianPolicy(lambda obs: np.zeros((len(obs), 1)), np.array([-2.0]), np.array([2.0]), std=0.1)
    logp = policy.log_prob(np.zeros((2, 3)), np.array([[0.0], [0.2]]))
    expected = -math.log(0.2) - 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(logp, [expected, expected - 0.5])


def test_stochastic_policy_uses_its_own_std():
    # Box [-3, 3], mean 1, std 0.5: Z = Phi(4) - Phi(-8) = 0.99996833 (tables), a = 1.5 is z = 1.
    policy = GaussianPolicy(lambda obs: obs[:, :1], np.array([-3.0]), np.array([3.0]),
                            std_fn=lambda obs: np.full((len(obs), 1), 0.5))
    logp = policy.log_prob(np.array([[1.0, 0.0]]), np.array([[1.5]]))
    assert logp[0] == pytest.approx(-math.log(0.5) - 0.5 * math.log(2 * math.pi) - 0.5 - math.log(0.99996833), abs=1e-7)
    assert not policy.deterministic


def test_target_density_is_truncated_to_the_box_around_the_clipped_action():
    # mu(s) = 2 is clipped to the bound 1; std 0.5 normalised on [-1, 1] -> sigma 0.5;
    # Z = Phi(0) - Phi(-4) = 0.5 - 3.1671e-5 (tables), so the density is 2 N(a; 1, 0.25) near the bound.
    policy = GaussianPolicy(lambda obs: np.full((len(obs), 1), 2.0), np.array([-1.0]), np.array([1.0]), std=0.5)
    logp = policy.log_prob(np.zeros((3, 2)), np.array([[0.5], [1.0], [1.2]]))
    gauss = lambda a: -0.5 * ((a - 1.0) / 0.5) ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)  # noqa: E731
    np.testing.assert_allclose(logp[:2], [gauss(0.5) - math.log(0.5 - 3.1671e-5), gauss(1.0) - math.log(0.5 - 3.1671e-5)], rtol=1e-6)
    assert logp[2] == -np.inf                                       # outside the box: density 0
    # the density integrates to 1 over the box (trapezoid rule on a fine grid)
    grid = np.linspace(-1, 1, 20001)[:, None]
    assert np.trapezoid(np.exp(policy.log_prob(np.zeros((len(grid), 2)), grid)), grid[:, 0]) == pytest.approx(1.0, abs=1e-6)


def test_samples_follow_the_truncated_density():
    # mean of N(mu, s^2) truncated to [lo, hi]: mu + s (phi(alpha) - phi(beta)) / Z, an independent formula.
    from scipy import stats

    from offrl.ope.fqe import truncated_gaussian_quantile

    policy = GaussianPolicy(lambda obs: np.full((len(obs), 2), [0.9, -0.2]), np.array([-1.0, -1.0]), np.array([1.0, 1.0]), std=0.3)
    a = policy.sample(np.zeros((200_000, 1)), np.random.default_rng(0))
    assert (a >= -1).all() and (a <= 1).all()
    mu, s = np.array([0.9, -0.2]), 0.3
    alpha, beta = (-1 - mu) / s, (1 - mu) / s
    mean = mu + s * (stats.norm.pdf(alpha) - stats.norm.pdf(beta)) / (stats.norm.cdf(beta) - stats.norm.cdf(alpha))
    np.testing.assert_allclose(a.mean(0), mean, atol=4 * a.std(0).max() / np.sqrt(len(a)))
    assert mean[0] < 0.9 - 0.05                                     # truncation near the bound moves the mean
    u = np.random.default_rng(1).uniform(size=(100, 2))
    np.testing.assert_allclose(np.asarray(truncated_gaussian_quantile(u, mu, np.full(2, s), -np.ones(2), np.ones(2))),
                               policies_quantile(u, mu, s), atol=1e-5)  # the JAX sampler of FQE is the same law


def policies_quantile(u, mu, s):
    from offrl.ope.policies import truncated_gaussian_quantile

    return truncated_gaussian_quantile(u, mu, np.full(2, s), -np.ones(2), np.ones(2))


def test_a_deterministic_target_without_std_is_refused():
    policy = GaussianPolicy(lambda obs: np.zeros((len(obs), 1)), np.array([-1.0]), np.array([1.0]), std=0.0, name="p")
    with pytest.raises(OffrlError, match="positive --target-std"):
        policy.log_prob(np.zeros((2, 1)), np.zeros((2, 1)))


def test_action_shape_mismatch_is_one_clear_error():
    policy = GaussianPolicy(lambda obs: np.zeros((len(obs), 2)), -np.ones(2), np.ones(2), name="p")
    ds = Dataset.from_arrays(np.zeros((3, 4)), np.zeros((3, 3)), np.zeros(3), np.zeros(3, bool), next_observations=np.zeros((3, 4)))
    with pytest.raises(OffrlError, match="2-dimensional actions but the dataset"):
        check_policy_matches(policy, ds)
    with pytest.raises(OffrlError, match="acts in 2 dimensions"):
        policy.log_prob(ds.observations, ds.actions)


def test_load_exported_policy_and_bad_paths(tmp_path):
    w1, b1 = np.ones((3, 4)) * 0.1, np.zeros(4)
    w2, b2 = np.ones((4, 2)) * 0.1, np.zeros(2)
    folder = save_numpy_policy(tmp_path / "export", [(w1, b1), (w2, b2)], np.zeros(3), np.ones(3),
                               -np.ones(2) * 2, np.ones(2) * 2, {"algo": "bc", "step": 7})
    policy = load_policy(folder, std=0.2)
    assert policy.meta["algo"] == "bc" and policy.meta["step"] == 7 and policy.action_dim == 2
    obs = np.ones((5, 3))
    np.testing.assert_allclose(policy.mean(obs), 2 * np.tanh(np.tanh(0.0) + np.maximum(obs @ w1, 0) @ w2), rtol=1e-6)
    with pytest.raises(OffrlError, match="does not exist"):
        load_policy(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(OffrlError, match="neither a run folder"):
        load_policy(tmp_path / "empty")
    with pytest.raises(OffrlError, match="must be positive"):
        load_policy(folder, std=0.0)


def test_tabular_policy_log_prob():
    policy = TabularPolicy(np.array([[0.25, 0.75], [1.0, 0.0]]))
    logp = policy.log_prob(np.eye(2)[[0, 0, 1, 1]], np.array([[0.0], [1.0], [0.0], [1.0]]))
    np.testing.assert_allclose(np.exp(logp), [0.25, 0.75, 1.0, 0.0])


# ---------------------------------------------------------------------- behaviour
def test_logged_behavior_is_used_and_missing_log_probs_are_refused():
    mdp = tab.random_mdp(np.random.default_rng(0), 4, 2)
    ds = tab.sample_dataset(mdp, tab.uniform_policy(4, 2), 20, 5, np.random.default_rng(1))
    logp, estimated = behavior_log_probs(ds, "auto")
    assert not estimated and np.allclose(logp, np.log(0.5))
    bare = ds.replace(infos={})
    with pytest.raises(OffrlError, match="no infos/action_log_probs.*--behavior estimated"):
        behavior_log_probs(bare, "logged")
    logp, estimated = behavior_log_probs(bare, "auto", discrete=True)
    assert estimated


def test_empirical_discrete_behavior_recovers_the_logging_policy():
    mdp = tab.random_mdp(np.random.default_rng(0), 4, 3)
    pi = tab.random_policy(np.random.default_rng(1), 4, 3)
    ds = tab.sample_dataset(mdp, pi, 5000, 10, np.random.default_rng(2))
    logp = empirical_log_probs(ds.observations, ds.actions)
    np.testing.assert_allclose(np.exp(logp), np.exp(ds.infos["action_log_probs"]), atol=0.02)


def test_gaussian_behavior_cloning_recovers_log_probs():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4000, 2)).astype(np.float32)
    mean = np.stack([0.5 * obs[:, 0], 0.3 * obs[:, 1] - 0.2], axis=1)
    std = np.array([0.3, 0.2])
    act = mean + std * rng.normal(size=mean.shape)
    true = (-0.5 * ((act - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(1)
    ds = Dataset.from_arrays(obs, act, np.zeros(4000), np.zeros(4000, bool), next_observations=obs)
    logp, estimated = behavior_log_probs(ds, "estimated", config=BehaviorConfig(hidden_dims=(64, 64), steps=1500))
    assert estimated
    assert abs(logp.mean() - true.mean()) < 0.1           # average log-likelihood close to the truth
    assert np.corrcoef(logp, true)[0, 1] > 0.95
