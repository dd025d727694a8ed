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
def test_extrapolation_demo_naive_estimates_run_away_and_cql_stays_below(tmp_path):
    from offrl.demos import extrapolation

    result = extrapolation.run(out=tmp_path)
    dqn, cql = result["curves"]["dqn"], result["curves"]["discrete_cql"]
    assert dqn["q_estimate"][-1] > 10 * dqn["discounted_return"][-1]      # the naive estimate runs away
    assert dqn["q_estimate"][-1] > dqn["q_estimate"][0]
    assert cql["q_estimate"][-1] <= cql["discounted_return"][-1]          # CQL's sits below its return
    assert cql["return"][-1] > dqn["return"][-1]
    td3, ccql = result["continuous"]["curves"]["td3"], result["continuous"]["curves"]["cql"]
    half = len(td3["q_estimate"]) // 2
    assert td3["q_estimate"][-1] > 0                                      # impossible: Pendulum pays <= 0
    assert td3["q_estimate"][-1] > td3["q_estimate"][half] + 50           # and still climbing
    assert ccql["q_estimate"][-1] < 0 and ccql["q_estimate"][-1] < ccql["q_estimate"][half]  # CQL's keeps falling
    assert ccql["q_estimate"][-1] <= ccql["discounted_return"][-1]        # and sits below its return
    gap = lambda c: c["q_estimate"][-1] - c["discounted_return"][-1]  # noqa: E731
    assert gap(td3) > gap(ccql) + 200
    assert len(result["verdict"].splitlines()) == 2
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
def test_dagger_demo_beats_bc_with_the_same_labels_on_a_continuous_and_a_discrete_env(tmp_path):
    from offrl.demos import dagger

    result = dagger.run(out=tmp_path)
    assert set(result["panels"]) == {"Pendulum-v1", "MountainCar-v0"}
    for name, p in result["panels"].items():
        means = p["mean_return_after_first"]
        assert means["dagger"] > means["bc"] + 50 if name == "Pendulum-v1" else means["dagger"] > means["bc"] + 25, (name, means)
        assert p["dagger"][-1]["return"] > p["expert_return"] - (100 if name == "Pendulum-v1" else 15), name
        assert p["bc"][-1]["return"] < p["expert_return"] - (200 if name == "Pendulum-v1" else 25), name
        assert [r["labels"] for r in p["bc"]] == [r["labels"] for r in p["dagger"]]
    assert "zoo expert pendulum-sac" in result["panels"]["Pendulum-v1"]["labeller"]
    assert (tmp_path / "dagger.png").stat().st_size > 0


def test_dagger_demo_wiring_on_tiny_settings(tmp_path):
    from offrl.demos import dagger

    tasks = {name: (factory, 20) for name, (factory, _) in dagger.TASKS.items()}
    result = dagger.run(out=tmp_path, iterations=2, eval_episodes=1, bc_steps=20, tasks=tasks)
    for p in result["panels"].values():
        assert [r["labels"] for r in p["dagger"]] == [r["labels"] for r in p["bc"]] == [20, 40]
        assert p["dagger"][0] == p["bc"][0]  # iteration 1: both clone the same expert steps
    saved = json.loads((tmp_path / "dagger.json").read_text())
    assert saved["verdict"] == result["verdict"] and len(result["verdict"].splitlines()) == 2


def test_pendulum_imitator_sees_a_noisy_state_and_its_previous_torque():
    from offrl.demos.dagger import play_with_previous_action
    from offrl.demos.experts import load_expert

    expert = load_expert("pendulum-sac")
    out = play_with_previous_action("Pendulum-v1", expert, None, 1, 0, 0.0, 2)
    seen, labels = out["observations"], out["labels"]
    assert seen.shape == (200, 4) and labels.shape == (200, 1)
    assert seen[0, 3] == 0.0                                  # no previous torque at the start
    np.testing.assert_allclose(seen[1:, 3], labels[:-1, 0], rtol=1e-6)  # then the expert's last torque
    np.testing.assert_allclose(labels, expert(seen[:, :3]), atol=1e-5)  # noise 0: labels of the seen state


# ---------------------------------------------------------------------- bundled experts
def test_bundled_experts_are_experts():
    from offrl.demos.experts import load_expert

    cartpole = load_expert("cartpole-dqn")
    assert np.all(rollout(cartpole, episodes=2, seed=7, env_id="CartPole-v1")["returns"] == 500)
    pendulum = load_expert("pendulum-sac")
    assert pendulum(np.zeros((5, 3), np.float32)).shape == (5, 1)
    returns = rollout(pendulum, episodes=4, seed=7, env_id="Pendulum-v1")["returns"]
    assert returns.mean() > -400  # a random torque policy scores about -1200


def test_best_snapshot_prefers_return_then_earliest():
    from offrl.demos.experts import best_snapshot

    snaps = [{"step": 0, "deterministic_return_mean": 600.0, "return_mean": 600.0},  # step 0 never counts
             {"step": 10, "deterministic_return_mean": 500.0, "return_mean": 490.0},
             {"step": 20, "deterministic_return_mean": 500.0, "return_mean": 500.0},
             {"step": 30, "deterministic_return_mean": 500.0, "return_mean": 500.0},
             {"step": 40, "deterministic_return_mean": 20.0, "return_mean": 20.0}]
    assert best_snapshot({"snapshots": snaps})["step"] == 20


def test_unknown_expert_is_one_clear_error():
    from offrl.demos.experts import load_expert
    from offrl.errors import ConfigError

    with pytest.raises(ConfigError, match="bundled experts: pendulum-sac, cartpole-dqn"):
        load_expert("hopper-sac")


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
