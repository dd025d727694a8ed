"""The model-based estimator (offrl.ope.model_based) on the linear-Gaussian system of
test_linear_gaussian, whose target value is known in closed form: its interval covers the truth and
its error falls with the number of logged episodes; the interval's bootstrap by hand; bad input."""

import numpy as np
import pytest
from test_linear_gaussian import GAMMA, H, TARGET, TRUTH, simulate

from offrl.data.dataset import Dataset
from offrl.dynamics import DynamicsSettings
from offrl.errors import ConfigError
from offrl.ope import model_based

SETTINGS = model_based.ModelOPESettings(horizon=None, samples=20,
                                        dynamics=DynamicsSettings(ensemble_size=5, num_elites=3, model_hidden_dims=(64, 64),
                                                                  termination="none", model_batch_size=32,
                                                                  model_max_epochs=300))


def linear_dataset(n, seed):
    s, a, r, nxt, _ = simulate(1, n, np.random.default_rng(seed))
    flat = lambda x: x[0].reshape(-1, 1).astype(np.float32)  # noqa: E731
    timeouts = np.zeros((n, H), bool)
    timeouts[:, -1] = True
    return Dataset(flat(s), flat(a), r[0].reshape(-1).astype(np.float32), np.zeros(n * H, bool), timeouts.reshape(-1),
                   flat(nxt), metadata={})


@pytest.mark.slow
def test_the_interval_covers_the_truth_and_the_error_falls_with_n():
    """Two datasets at each of n = 100 and 800 episodes (H = 5, gamma = 0.9): every interval covers the
    closed-form value, and the mean absolute error at 800 is below that at 100."""
    errors = {}
    for n in (100, 800):
        errors[n] = []
        for seed in (1, 2):
            result = model_based.model_estimate(linear_dataset(n, seed), TARGET, SETTINGS, GAMMA, seed=seed)
            assert result.ci_low <= TRUTH <= result.ci_high, (n, seed, result, TRUTH)
            assert result.num_episodes == n
            errors[n].append(abs(result.estimate - TRUTH))
    assert np.mean(errors[800]) < np.mean(errors[100]), errors
    assert np.mean(errors[800]) < 0.05 * abs(TRUTH), errors


def test_the_bootstrap_draws_one_elite_and_resampled_starts():
    """With one start state the replicates are the elites' own values; with identical elites the
    interval is the start-state bootstrap's."""
    returns = np.array([[1.0], [2.0], [4.0]])
    low, high = model_based.interval(returns, 0.95, 2000, seed=0)
    assert (low, high) == (1.0, 4.0)
    same = np.tile(np.arange(100.0), (3, 1))
    low, high = model_based.interval(same, 0.9, 4000, seed=0)
    se = np.arange(100.0).std() / 10
    assert low == pytest.approx(49.5 - 1.645 * se, abs=0.3 * se) and high == pytest.approx(49.5 + 1.645 * se, abs=0.3 * se)


def test_returns_of_a_hand_set_model_are_its_discounted_rewards():
    """An ensemble whose elites predict ds = 0 and rewards -1 and -3 (std at the lower bound): each elite's
    H-step return is r (1 - gamma^H) / (1 - gamma)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algos"))
    from model_based_helpers import constant_ensemble

    settings = DynamicsSettings(ensemble_size=2, num_elites=2, model_hidden_dims=(4,), termination="none")
    model = constant_ensemble(settings, 1, 1, means=[[0.0, -1.0], [0.0, -3.0]], raw_logvars=np.full((2, 2), -40.0),
                              elites=[0, 1])
    returns = model_based.member_returns(model, TARGET, np.zeros((3, 1), np.float32), horizon=4, discount=0.5)
    geometric = (1 - 0.5**4) / (1 - 0.5)
    # reward noise: the smallest log-variance bound, -10 (std exp(-5) per step): 0.04 is 5 of its sigmas
    np.testing.assert_allclose(returns, [[-geometric] * 3, [-3 * geometric] * 3], atol=0.04)
    with pytest.raises(ConfigError, match="horizon is 0"):
        model_based.member_returns(model, TARGET, np.zeros((3, 1), np.float32), horizon=0, discount=0.5)


def test_ope_and_select_by_model_on_the_command_line(tmp_path, capsys, monkeypatch):
    """`offrl ope --estimators model` prints a model row per policy, `offrl select --by model` picks one,
    and a rollout horizon of 0 is one line, exit 2 (a small ensemble stands in for the default one)."""
    import dataclasses

    from test_ope_api_and_cli import FAST, _continuous_setup

    from offrl.cli import main

    fit = model_based.fitted_model
    small = dict(ensemble_size=3, num_elites=2, model_hidden_dims=(16,), model_max_epochs=3)
    monkeypatch.setattr(model_based, "fitted_model",
                        lambda dataset, settings, seed=0: fit(dataset, dataclasses.replace(settings, **small), seed))
    data, exports = _continuous_setup(tmp_path)
    assert main(["ope", *exports, "--dataset", data, "--estimators", "model,wis", "--model-horizon", "5", *FAST]) == 0
    out = capsys.readouterr().out
    assert out.count("model") >= 2 and "policy0" in out and "policy1" in out
    assert main(["select", *exports, "--dataset", data, "--by", "model", "--model-horizon", "5", *FAST]) == 0
    assert "selected:" in capsys.readouterr().out
    assert main(["ope", *exports, "--dataset", data, "--estimators", "model", "--model-horizon", "0", *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model-horizon" in err, err
