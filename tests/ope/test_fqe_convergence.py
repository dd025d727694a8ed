"""FQE's return scaling and its stopping rule; the DOPE metrics and the distinct-candidates check."""

import itertools

import numpy as np
import pytest

from offrl.ope import fqe
from offrl.ope.check import identical_pairs
from offrl.ope.metrics import dope_metrics, estimator_metrics, paired_difference, subset_intervals, subset_metrics
from offrl.ope.policies import GaussianPolicy


def test_return_scale_by_hand():
    r = np.array([1.0, -3.0, 2.0, 2.0])                       # mean |r| = 2
    assert fqe.return_scale(r, 0.99, 1000) == pytest.approx(2.0 * 100)     # 1 / (1 - gamma) = 100 < 1000
    assert fqe.return_scale(r, 0.99, 30) == pytest.approx(2.0 * 30)        # the episodes are shorter
    assert fqe.return_scale(r, 1.0, 30) == pytest.approx(60.0)
    assert fqe.return_scale(np.zeros(4), 0.9, 10) == 1.0


def test_value_bounds_by_hand():
    r = np.array([1.0, -3.0, 2.0])
    assert fqe.value_bounds(r, 0.99, 1000) == pytest.approx((-300.0, 200.0))
    assert fqe.value_bounds(np.array([1.0, 2.0]), 0.9, 5) == pytest.approx((0.0, 20.0))   # 0: a terminal at once
    assert fqe.value_bounds(np.array([1.0, 2.0]), 1.0, 5) == pytest.approx((0.0, 10.0))


def test_has_flattened_by_hand():
    window = 2
    flat_loss = np.ones((4, 1))
    # estimate 100 -> 100.5 over the last 2 chunks: 0.5% < 1%
    assert fqe.has_flattened(np.array([[90.0], [100.0], [100.2], [100.5]]), flat_loss, window, 0.01, 0.1, 1.0)
    # 98 -> 100.5: 2.5% > 1%
    assert not fqe.has_flattened(np.array([[90.0], [98.0], [99.0], [100.5]]), flat_loss, window, 0.01, 0.1, 1.0)
    # too few chunks to judge (need 2 windows)
    assert not fqe.has_flattened(np.full((3, 1), 100.0), np.ones((3, 1)), window, 0.01, 0.1, 1.0)
    # estimates flat but the loss halves between the windows
    assert not fqe.has_flattened(np.full((4, 1), 100.0), np.array([[2.0], [2.0], [1.0], [1.0]]), window, 0.01, 0.1, 1.0)
    # one of two policies still moving blocks the stop
    est = np.array([[100.0, 10.0], [100.0, 10.0], [100.0, 10.0], [100.0, 11.0]])
    assert not fqe.has_flattened(est, np.ones((4, 2)), window, 0.01, 0.1, 1.0)
    # near 0 the floor sets the scale: |0.004 - 0| <= 0.01 * max(0.004, 1)
    assert fqe.has_flattened(np.array([[0.0], [0.0], [0.0], [0.004]]), flat_loss, window, 0.01, 0.1, 1.0)


def one_step_problem(n=2000, scale=1.0):
    """Episodes of one step (terminal) with reward ``a_0``: ``Q(s, a) = a_0`` exactly."""
    from offrl.data.dataset import Dataset

    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    act = rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    ds = Dataset.from_arrays(obs, act, scale * act[:, 0], np.ones(n, bool), next_observations=obs)
    return ds, obs, act


def test_return_scaling_changes_units_not_the_answer():
    # rewards 1000 a_0: with value_scale 1000 the critic regresses a_0 and q_values returns 1000 a_0
    ds, obs, act = one_step_problem(scale=1000.0)
    data = fqe.fqe_data(ds, np.zeros((1, len(obs), 2), np.float32), value_scale=1000.0)
    np.testing.assert_allclose(np.asarray(data.rewards), act[:, 0], rtol=1e-6)
    agents = fqe.create(fqe.FQEConfig(hidden_dims=(64, 64), learning_rate=1e-3), data)
    agents, _ = fqe.train(agents, data, num_steps=1500, chunk=500)
    q = fqe.q_values(agents, data, obs[:200], act[:200])[0, 0]
    assert np.abs(q - 1000.0 * act[:200, 0]).mean() < 50.0


def probe_of(data, obs):
    zeros = np.zeros((1, len(obs), 2), np.float32)
    return lambda agents: fqe.state_values(agents, data, obs, zeros).mean(1).mean(-1)


def test_train_until_flat_stops_early_on_a_problem_that_converges():
    ds, obs, act = one_step_problem()
    data = fqe.fqe_data(ds, np.zeros((1, len(obs), 2), np.float32))
    agents = fqe.create(fqe.FQEConfig(hidden_dims=(32, 32), learning_rate=1e-3), data)
    # V(s) at the action 0 is 0: the probe watches a value that settles within a few hundred steps
    agents, metrics, curve = fqe.train_until_flat(agents, data, probe_of(data, obs[:64]), max_steps=50_000, window=2,
                                                  tolerance=0.05, loss_tolerance=0.5, chunk=500)
    assert curve.converged
    assert curve.steps[-1] < 50_000 and len(curve.steps) >= 4           # judged on two full windows at least
    assert curve.steps.tolist() == list(range(500, curve.steps[-1] + 1, 500))
    assert curve.estimates.shape == (len(curve.steps), 1) and curve.losses.shape == (len(curve.steps), 1)
    assert np.all(np.diff(curve.seconds) >= 0)
    d = curve.to_dict()
    assert d["converged"] and d["final_step"] == curve.steps[-1]


def test_train_until_flat_hits_the_cap_when_the_value_is_still_moving():
    # gamma 0.99, constant reward 1 and no terminals: Q = 100, reached only after hundreds of backups;
    # with Polyak 0.005 the estimate is still climbing at 3000 steps, so the cap stops it.
    from offrl.data.dataset import Dataset

    rng = np.random.default_rng(1)
    obs = rng.normal(size=(512, 2)).astype(np.float32)
    ds = Dataset.from_arrays(obs, obs[:, :1], np.ones(512, np.float32), np.zeros(512, bool), next_observations=obs)
    data = fqe.fqe_data(ds, np.zeros((1, 512, 1), np.float32))
    agents = fqe.create(fqe.FQEConfig(hidden_dims=(32, 32), learning_rate=1e-3, tau=0.005), data)
    agents, _, curve = fqe.train_until_flat(agents, data, probe_of_1d(data, obs[:64]), max_steps=3000, window=2,
                                            tolerance=0.01, chunk=500)
    assert not curve.converged
    assert curve.steps[-1] == 3000
    assert curve.estimates[-1, 0] < 0.5 * 100.0 and curve.estimates[-1, 0] > curve.estimates[-3, 0]


def probe_of_1d(data, obs):
    zeros = np.zeros((1, len(obs), 1), np.float32)
    return lambda agents: fqe.state_values(agents, data, obs, zeros).mean(1).mean(-1)


# ---------------------------------------------------------------------- DOPE metrics
def test_dope_metrics_by_hand():
    true = np.array([10.0, 20.0, 30.0, 50.0])
    est = np.array([12.0, 18.0, 40.0, 35.0])          # picks policy 2 (true 30) over policy 3 (true 50)
    m = dope_metrics(est, true)
    assert m["mae"] == pytest.approx((2 + 2 + 10 + 15) / 4)
    assert m["range"] == 40.0 and m["mae/range"] == pytest.approx(7.25 / 40)
    assert m["regret@1"] == 20.0 and m["regret@1/range"] == pytest.approx(0.5)
    assert m["spearman"] == pytest.approx(0.8)         # ranks 1,2,4,3 vs 1,2,3,4: 1 - 6*2/(4*15)
    assert m["spearman"] == pytest.approx(estimator_metrics(est, true)["spearman"])


def test_subset_intervals_lie_within_the_metric_over_all_subsets():
    rng = np.random.default_rng(0)
    true = rng.normal(size=7) * 10
    est = true + rng.normal(size=7) * 5
    ci = subset_intervals(est, true, size=5, num=400, seed=1)
    every = [dope_metrics(est[list(c)], true[list(c)]) for c in itertools.combinations(range(7), 5)]
    for key in ("mae", "spearman", "regret@1", "mae/range"):
        values = np.array([e[key] for e in every])
        assert values.min() - 1e-12 <= ci[key][0] <= ci[key][1] <= values.max() + 1e-12, key
    perfect = subset_intervals(true, true, size=4, num=50)
    assert perfect["spearman"] == (1.0, 1.0) and perfect["regret@1"] == (0.0, 0.0) and perfect["mae"] == (0.0, 0.0)
    with pytest.raises(ValueError):
        subset_intervals(est, true, size=8)


def test_paired_difference_shares_the_subsets_and_counts_where_a_is_better():
    """A perfect estimator against a reversed one: A ranks better on every subset (Spearman +2), is never
    worse on regret; A against itself is never better and differs by 0; the subsets are those of
    subset_intervals with the same seed."""
    true = np.arange(8.0) * 10
    d = paired_difference(true, -true, true, size=5, num=200, seed=3)
    assert d["spearman"]["difference"] == pytest.approx(2.0) and d["spearman"]["a_better"] == 1.0
    assert d["spearman"]["interval"] == pytest.approx((2.0, 2.0))
    assert d["regret@1"]["interval"][1] <= 0 and d["regret@1"]["a_better"] == 1.0
    same = paired_difference(true, true, true, size=5, num=50)
    assert all(v["a_better"] == 0.0 and v["difference"] == 0.0 for v in same.values())
    noisy = true + np.random.default_rng(0).normal(size=8) * 15
    rows = subset_metrics(noisy, true, size=5, num=100, seed=7)
    assert subset_intervals(noisy, true, size=5, num=100, seed=7)["mae"] == pytest.approx(tuple(np.percentile(rows["mae"], [2.5, 97.5])))
    diff = paired_difference(noisy, true, true, size=5, num=100, seed=7)
    assert diff["mae"]["interval"] == pytest.approx(tuple(np.percentile(rows["mae"], [2.5, 97.5])))   # the truth's MAE is 0 on every subset


def test_identical_pairs_finds_a_policy_counted_twice_and_nothing_else():
    low, high = np.array([-1.0, -1.0]), np.array([1.0, 1.0])
    obs = np.random.default_rng(0).normal(size=(32, 3))
    a = GaussianPolicy(lambda o: np.tanh(o[:, :2]), low, high, std=0.1, name="a")
    a_again = GaussianPolicy(lambda o: np.tanh(o[:, :2]), low, high, std=0.1, name="a-resumed")
    noisier = GaussianPolicy(lambda o: np.tanh(o[:, :2]), low, high, std=0.3, name="a-noisier")
    other = GaussianPolicy(lambda o: np.tanh(o[:, 1:]), low, high, std=0.1, name="b")
    assert identical_pairs([a, a_again, noisier, other], obs) == [("a", "a-resumed")]
    assert identical_pairs([a, noisier, other], obs) == []
