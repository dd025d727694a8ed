"""``offrl demo``: each demo's qualitative claim on its default settings (slow), and the command's wiring."""

import json

import numpy as np
import pytest

from offrl.demos.common import cartpole_expert, rollout


def test_the_scripted_expert_balances_cartpole():
    out = rollout(cartpole_expert, episodes=3, seed=0)
    assert np.all(out["lengths"] == 500)


def test_demo_command_is_registered(capsys):
    from offrl.cli import main

    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in ("extrapolation", "compounding", "causal-confusion", "dagger"))


@pytest.mark.slow
def test_extrapolation_demo_naive_dqn_runs_away_and_cql_stays_below(tmp_path):
    from offrl.demos import extrapolation

    result = extrapolation.run(out=tmp_path)
    dqn, cql = result["curves"]["dqn"], result["curves"]["discrete_cql"]
    assert dqn["q_estimate"][-1] > 10 * dqn["discounted_return"][-1]      # the naive estimate runs away
    assert dqn["q_estimate"][-1] > dqn["q_estimate"][0]
    assert cql["q_estimate"][-1] <= cql["discounted_return"][-1]          # CQL's sits below its return
    assert cql["return"][-1] > dqn["return"][-1]
    saved = json.loads((tmp_path / "extrapolation.json").read_text())
    assert saved["verdict"] == result["verdict"] and (tmp_path / "extrapolation.png").stat().st_size > 0


@pytest.mark.slow
def test_causal_confusion_demo_nuisance_wins_held_out_and_loses_deployed(tmp_path):
    from offrl.demos import causal_confusion

    result = causal_confusion.run(out=tmp_path)
    w, wo = result["rows"]["with nuisance"], result["rows"]["without nuisance"]
    assert np.mean(w["held_out_accuracy"]) > np.mean(wo["held_out_accuracy"])
    assert np.mean(w["deployed_return"]) < np.mean(wo["deployed_return"]) - 25
    assert np.mean(wo["deployed_return"]) > -150  # without the nuisance BC drives like the expert (about -120)
    assert (tmp_path / "causal_confusion.png").exists()


def test_mountain_car_expert_pushes_along_the_velocity():
    from offrl.demos.causal_confusion import mountain_car_expert

    np.testing.assert_array_equal(mountain_car_expert(np.array([[-0.5, 0.01], [-0.5, -0.02], [0.1, 0.0]])), [2, 0, 2])


@pytest.mark.slow
def test_dagger_demo_beats_bc_with_the_same_labels(tmp_path):
    from offrl.demos import dagger

    result = dagger.run(out=tmp_path)
    means = result["mean_return_after_first"]
    assert means["dagger"] > means["bc"] + 5
    assert result["dagger"][-1]["return"] > result["expert_return"] - 15
    assert [r["labels"] for r in result["bc"]] == [r["labels"] for r in result["dagger"]]


def test_cumulative_cost_by_hand():
    from offrl.demos.compounding import cumulative_cost

    mistakes = np.array([[0, 1, 0, 1], [1, 0, 0, 0]], float)
    # episode 0 alive for 4 steps: 0,1,1,2; episode 1 ends after 2 steps: 1,1,2,3
    assert cumulative_cost(mistakes, np.array([4, 2]), horizons=(1, 2, 3, 4)) == [0.5, 1.0, 1.5, 2.5]


@pytest.mark.slow
def test_compounding_demo_cost_outgrows_eps_T_within_eps_T2(tmp_path):
    from offrl.demos import compounding

    result = compounding.run(out=tmp_path)
    few = result["rows"][0]
    T = result["horizons"]
    assert few["cost"][-1] > 1.5 * few["eps_T"][-1]                    # mistakes compound along its own states
    assert few["cost"][-1] / T[-1] > few["cost"][2] / T[2]             # the per-step cost grows with the horizon
    assert all(c <= b for c, b in zip(few["cost"], few["eps_T2"]))     # within Ross & Bagnell's bound
    assert result["rows"][-1]["eps"] < few["eps"]
