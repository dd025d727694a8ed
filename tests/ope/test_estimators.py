import numpy as np
import pytest

from offrl.errors import OffrlError
from offrl.ope import estimators as est
from offrl.ope import tabular as tab

# ---------------------------------------------------------------------- a two-episode toy, by hand
# Episode 1: rewards (1, 2), ratios (2, 0.5); episode 2: reward (3,), ratio (0.5,); gamma = 0.5.
# Padded weights w = [[2, 1], [0.5, 0.5]]; returns G = (1 + 0.5 * 2, 3) = (2, 3).
TOY_Q = [1.0, 1.0, 2.0]
TOY_V = [1.5, 1.0, 2.5]


def toy(with_q=True):
    rho = np.array([2.0, 0.5, 0.5])
    return est.make_episodes([1.0, 2.0, 3.0], np.log(rho), np.zeros(3), [0, 2], [2, 3], discount=0.5,
                             q_taken=TOY_Q if with_q else None, v=TOY_V if with_q else None)


@pytest.mark.parametrize("name, expected", [
    ("is", (1 * 2 + 0.5 * 3) / 2),                                    # 1.75
    ("pdis", ((2 * 1 + 0.5 * 1 * 2) + 0.5 * 3) / 2),                  # 2.25
    ("wis", (1 * 2 + 0.5 * 3) / (1 + 0.5)),                           # 2.333
    ("wpdis", (2 * 1 + 0.5 * 3) / 2.5 + 0.5 * (1 * 2) / 1.5),         # 2.0667
    ("dr", ((2 * 0 + 1.5) + 0.5 * (1 * 1 + 2 * 1) + (0.5 * 1 + 2.5)) / 2),   # 3.0
    ("wdr", (0.2 * 1 + 0.5 * 1.5 + 0.5 * 2.5) + 0.5 * (2 / 3 * 1 + 0.8 * 1)),  # 2.9333
    ("dm", (1.5 + 2.5) / 2),
])
def test_toy_estimates_by_hand(name, expected):
    assert est.point_estimate(toy(), name) == pytest.approx(expected)


def test_toy_clipped_is_and_ess_by_hand():
    # Ratios clipped at 1.5: w_T = (1.5 * 0.5, 0.5) -> (0.75 * 2 + 0.5 * 3) / 2 = 1.5.
    assert est.point_estimate(toy(), "clipped_is", clip=1.5) == pytest.approx(1.5)
    result = est.estimate(toy(), "is")
    assert result.ess == pytest.approx(1.5**2 / 1.25)
    assert result.max_weight_share == pytest.approx(1 / 1.5)
    assert not result.clipped and est.estimate(toy(), "clipped_is").clipped


def test_padding_layout():
    padded = est.pad_episodes([0, 2, 3], [2, 3, 6], np.arange(6.0) + 1, fill=-1)
    np.testing.assert_array_equal(padded, [[1, 2, -1], [3, -1, -1], [4, 5, 6]])


def test_intervals_contain_the_estimate_and_t_matches_formula():
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    parts = est.Terms(x[:, None], np.ones((50, 1)))
    lo, hi = est.confidence_interval(parts, "t", 0.95)
    from scipy import stats

    half = stats.t.ppf(0.975, 49) * x.std(ddof=1) / np.sqrt(50)
    assert (lo, hi) == pytest.approx((x.mean() - half, x.mean() + half))
    lo, hi = est.confidence_interval(parts, "hoeffding", 0.95, value_range=(-3, 3))
    assert hi - lo == pytest.approx(2 * 6 * np.sqrt(np.log(2 / 0.05) / 100))
    lo, hi = est.confidence_interval(parts, "bootstrap", 0.95, num_bootstrap=2000)
    assert lo < x.mean() < hi and hi - lo == pytest.approx(2 * 1.96 * x.std() / np.sqrt(50), rel=0.2)


def test_wis_linearised_values_average_to_the_estimate():
    parts = est.terms(toy(), "wpdis")
    assert est.linearised_values(parts).mean() == pytest.approx(est.ratio_of_sums(parts)[0])


def test_zero_behavior_probability_is_refused():
    with pytest.raises(OffrlError, match="row 1"):
        est.make_episodes([1.0, 1.0], [0.0, 0.0], [0.0, -np.inf], [0], [2], discount=1.0)


def test_dr_without_q_is_refused():
    with pytest.raises(OffrlError, match="needs a Q-function"):
        est.estimate(toy(with_q=False), "dr")


def test_zero_target_probability_gives_zero_weight_not_nan():
    e = est.make_episodes([1.0, 1.0], [-np.inf, 0.0], [0.0, 0.0], [0, 1], [1, 2], discount=1.0)
    assert est.point_estimate(e, "wis") == pytest.approx(1.0)
    assert est.point_estimate(e, "is") == pytest.approx(0.5)


# ---------------------------------------------------------------------- against exact values
HORIZON, GAMMA = 6, 0.95


@pytest.fixture(scope="module")
def problem():
    mdp = tab.random_mdp(np.random.default_rng(10), 5, 3, num_terminal=1, reward_noise=0.1)
    target = tab.random_policy(np.random.default_rng(11), 5, 3, concentration=0.5)
    behavior = tab.mix_policies(target, tab.random_policy(np.random.default_rng(12), 5, 3), 0.6)
    truth = tab.policy_value(mdp, target, GAMMA, HORIZON)
    q = tab.q_values(mdp, target, GAMMA, HORIZON)
    return mdp, target, behavior, truth, q


def logged(problem, n, seed, q_noise=0.0, q_bias=0.0):
    mdp, target, behavior, _, q = problem
    ds = tab.sample_dataset(mdp, behavior, n, HORIZON, np.random.default_rng(seed))
    s, a = tab.state_index(ds.observations), ds.actions[:, 0].astype(int)
    starts, ends = ds.episode_bounds()
    t = np.arange(len(ds)) - np.repeat(starts, ends - starts)       # step within the episode
    q_hat = q + q_bias + q_noise * np.random.default_rng(seed + 1).normal(size=q.shape)
    v_hat = (target[None] * q_hat).sum(-1)
    return est.make_episodes(ds.rewards, np.log(target[s, a]), ds.infos["action_log_probs"], starts, ends, GAMMA,
                             q_taken=q_hat[t, s, a], v=v_hat[t, s])


@pytest.mark.parametrize("name", ["is", "pdis", "dr"])
def test_unbiased_estimators_cover_the_truth(problem, name):
    truth = problem[3]
    widths = []
    for n in (500, 8000):
        episodes = logged(problem, n, seed=n, q_noise=0.5)   # DR with a poor Q is still unbiased
        result = est.estimate(episodes, name, ci="t", confidence=0.999)
        assert result.ci_low < truth < result.ci_high, (name, n, result)
        widths.append(result.ci_high - result.ci_low)
    assert widths[1] < widths[0] / 3       # ~ 1 / sqrt(n): 4x narrower for 16x the data


def per_block(parts, groups, size):
    """The estimate on each of ``groups`` disjoint blocks of ``size`` consecutive episodes."""
    block = lambda x: x.reshape(groups, size, -1).sum(1)  # noqa: E731
    num, den = block(parts.numer), block(parts.denom)
    return np.divide(num, den, out=np.zeros_like(num), where=den != 0).sum(-1)


def replicate(problem, name, groups, size, seed, **kwargs):
    episodes = logged(problem, groups * size, seed, **kwargs)
    return per_block(est.terms(episodes, name), groups, size)


def test_wis_bias_shrinks_with_n():
    # A near-greedy target logged by the uniform policy: WIS of one episode is that episode's
    # return, so its mean is the behaviour policy's value; the bias then shrinks as n grows.
    mdp = tab.random_mdp(np.random.default_rng(10), 5, 3, num_terminal=1, reward_noise=0.1)
    target = tab.mix_policies(tab.greedy_policy(mdp.rewards), tab.uniform_policy(5, 3), 0.3)
    behavior = tab.uniform_policy(5, 3)
    truth = tab.policy_value(mdp, target, GAMMA, HORIZON)
    bias, se = {}, {}
    for groups, size in ((20000, 1), (8000, 5), (500, 80)):
        ds = tab.sample_dataset(mdp, behavior, groups * size, HORIZON, np.random.default_rng(size))
        s, a = tab.state_index(ds.observations), ds.actions[:, 0].astype(int)
        episodes = est.make_episodes(ds.rewards, np.log(target[s, a]), ds.infos["action_log_probs"], *ds.episode_bounds(), GAMMA)
        values = per_block(est.terms(episodes, "wis"), groups, size)
        bias[size], se[size] = values.mean() - truth, values.std() / np.sqrt(groups)
    behavior_gap = tab.policy_value(mdp, behavior, GAMMA, HORIZON) - truth
    assert abs(bias[1] - behavior_gap) < 4 * se[1]
    assert bias[80] < 0 and abs(bias[80]) < abs(bias[5]) / 2 and abs(bias[80]) < abs(bias[1]) / 2


def test_dr_variance_below_is_with_a_good_q(problem):
    spread = {name: replicate(problem, name, 300, 20, seed=3, q_noise=0.05).std() for name in ("is", "pdis", "dr")}
    assert spread["dr"] < 0.6 * spread["pdis"] and spread["pdis"] < spread["is"]


def test_clipping_trades_bias_for_variance(problem):
    truth = problem[3]
    plain = replicate(problem, "is", 2000, 10, seed=4)
    rows = []
    for clip in (1.0, 1.5, 1e9):
        episodes = logged(problem, 2000 * 10, seed=4)
        values = per_block(est.terms(episodes, "clipped_is", clip), 2000, 10)
        rows.append((values.mean() - truth, values.std()))
    np.testing.assert_allclose(rows[-1], (plain.mean() - truth, plain.std()))   # no clip = IS
    (bias_1, sd_1), (bias_15, sd_15), (bias_inf, sd_inf) = rows
    assert sd_1 < sd_15 < sd_inf                           # tighter clip, less variance ...
    assert bias_1 < bias_15 < 0                            # ... and more (downward) bias, rewards >= 0
    assert abs(bias_inf) < 4 * sd_inf / np.sqrt(2000)


def test_self_normalised_estimators_converge(problem):
    truth = problem[3]
    episodes = logged(problem, 8000, seed=5, q_noise=0.5)
    for name in ("wis", "wpdis", "wdr"):
        result = est.estimate(episodes, name, num_bootstrap=400, confidence=0.999)
        assert result.ci_low < truth < result.ci_high, (name, result)
        assert 0 < result.ess < 8000 and result.max_weight_share < 0.01


def test_dm_with_exact_q_is_exact_up_to_start_states(problem):
    mdp, target, _, truth, q = problem
    episodes = logged(problem, 4000, seed=6)
    result = est.estimate(episodes, "dm", ci="t", confidence=0.999)
    assert result.ci_low < truth < result.ci_high
    assert np.isnan(result.ess)
