import json
import shutil

import numpy as np
import pytest

from offrl.cli import main
from offrl.data import save
from offrl.data.dataset import Dataset
from offrl.ope import metrics
from offrl.ope import tabular as tab
from offrl.ope.evaluate import OPEConfig, evaluate_policies
from offrl.ope.fqe import FQEConfig
from offrl.ope.policies import TabularPolicy
from offrl.ope.select import choose, selection_regret
from offrl.policy import save_numpy_policy


# ---------------------------------------------------------------------- metrics by hand
def test_metrics_by_hand():
    est, true = [3.0, 1.0, 2.0], [10.0, 30.0, 20.0]
    assert metrics.spearman(est, true) == pytest.approx(-1.0)
    assert metrics.spearman([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    np.testing.assert_allclose(metrics.ranks([5, 1, 5]), [2.5, 1, 2.5])
    assert metrics.regret_at_k(est, true, 1) == pytest.approx(30 - 10)
    assert metrics.regret_at_k(est, true, 2) == pytest.approx(30 - 20)
    np.testing.assert_allclose(metrics.relative_error([12.0], [10.0]), [0.2])
    assert np.isnan(metrics.spearman([1, 1], [1, 2]))


# ---------------------------------------------------------------------- API on a tabular MDP
def test_evaluate_policies_on_tabular_data_matches_exact_values():
    gamma, horizon = 0.8, 40          # 0.8^40 ~ 1e-4: truncation is negligible, FQE and IS target one value
    mdp = tab.random_mdp(np.random.default_rng(0), 4, 2, num_terminal=1)
    tables = [tab.random_policy(np.random.default_rng(k), 4, 2) for k in (1, 2)]
    ds = tab.sample_dataset(mdp, tab.uniform_policy(4, 2), 1500, horizon, np.random.default_rng(3))
    policies = [TabularPolicy(t, name=f"pi{k}") for k, t in enumerate(tables)]
    config = OPEConfig(estimators=("fqe", "dr", "wpdis"), discount=gamma, num_bootstrap=200, fqe_steps=2000,
                       fqe=FQEConfig(hidden_dims=(32, 32), learning_rate=1e-3, batch_size=512, tau=0.05))
    report = evaluate_policies(policies, ds, config)
    assert not report.estimated_behavior
    for k, t in enumerate(tables):
        truth = tab.policy_value(mdp, t, gamma)
        for name in ("fqe", "dr", "wpdis"):
            r = report.results[f"pi{k}"][name]
            assert abs(r.estimate - truth) < 0.05 * abs(truth), (name, r.estimate, truth)
    rows = report.table()
    assert len(rows) == 6 and {"policy", "estimator", "estimate", "ci_low", "ess"} <= set(rows[0])
    true_values = {f"pi{k}": {"value": tab.policy_value(mdp, t, gamma)} for k, t in enumerate(tables)}
    best = max(true_values, key=lambda p: true_values[p]["value"])
    assert choose(report, "fqe") == best
    assert selection_regret(report, "fqe", true_values)["ope (fqe)"]["regret"] == 0.0


# ---------------------------------------------------------------------- CLI
def _continuous_setup(tmp_path, with_log_probs=True):
    """A 2-d action dataset logged by a Gaussian policy, and two exported policies."""
    rng = np.random.default_rng(0)
    n_ep, length = 30, 20
    obs = rng.normal(size=(n_ep * length, 3)).astype(np.float32)
    mean, std = np.tanh(obs[:, :2]) * 0.5, 0.4
    act = np.clip(mean + std * rng.normal(size=mean.shape), -1, 1).astype(np.float32)
    logp = (-0.5 * ((act - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(1)
    timeouts = np.zeros(len(obs), bool)
    timeouts[length - 1::length] = True
    infos = {"action_log_probs": logp.astype(np.float32)} if with_log_probs else {}
    ds = Dataset.from_arrays(obs, act, -np.abs(act).sum(1), np.zeros(len(obs), bool), timeouts,
                             next_observations=np.roll(obs, -1, 0), infos=infos)
    path = save(ds, tmp_path / "data.hdf5")
    exports = []
    for k in range(2):
        layers = [(rng.normal(size=(3, 8)) * 0.5, np.zeros(8)), (rng.normal(size=(8, 2)) * (0.2 + k), np.zeros(2))]
        exports.append(str(save_numpy_policy(tmp_path / f"policy{k}", layers, np.zeros(3), np.ones(3), -np.ones(2), np.ones(2),
                                             {"algo": "bc", "step": 100 * (k + 1)})))
    return str(path), exports


FAST = ["--fqe-steps", "50", "--bootstrap", "20", "--bc-steps", "100"]


def test_ope_command_writes_table_json_csv_and_plot(tmp_path, capsys):
    data, exports = _continuous_setup(tmp_path)
    out = tmp_path / "out"
    rc = main(["ope", *exports, "--dataset", data, "--estimators", "fqe,dr,wis,clipped_is", "--out", str(out), *FAST])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "policy0" in printed and "clipped_is" in printed and "clip 2" in printed
    payload = json.loads((out / "ope.json").read_text())
    # 50 FQE steps cannot flatten (the window needs 2 x 3000): the report says so in one line
    assert not payload["fqe"]["converged"] and payload["fqe"]["final_step"] == 50
    assert "FQE: NOT flat (it reached --fqe-steps" in " ".join(printed.split())
    assert len(payload["rows"]) == 2 * 4 and payload["estimated_behavior"] is False
    assert (out / "ope.csv").read_text().count("\n") == 1 + 8
    assert (out / "ope.png").stat().st_size > 0
    # Nothing is overwritten without --overwrite.
    assert main(["ope", *exports, "--dataset", data, "--out", str(out), *FAST]) == 2
    assert "already exists" in capsys.readouterr().err


def test_select_with_estimated_behavior_says_so(tmp_path, capsys):
    data, exports = _continuous_setup(tmp_path, with_log_probs=False)
    rc = main(["select", *exports, "--dataset", data, "--by", "wis", *FAST])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "selected:" in printed and "ESTIMATED by behaviour cloning" in printed and "est. behaviour" in printed


@pytest.mark.parametrize("case", ["logged_missing", "action_shape", "no_candidates", "bad_estimator", "no_checkpoint", "bad_discount"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case):
    data, exports = _continuous_setup(tmp_path, with_log_probs=case != "logged_missing")
    args = ["ope", *exports, "--dataset", data, *FAST]
    if case == "logged_missing":
        args += ["--behavior", "logged"]
        expect = "no infos/action_log_probs"
    elif case == "action_shape":
        bad = save_numpy_policy(tmp_path / "wide", [(np.ones((3, 3)), np.zeros(3))], np.zeros(3), np.ones(3), -np.ones(3), np.ones(3))
        args = ["ope", str(bad), "--dataset", data, *FAST]
        expect = "3-dimensional actions but the dataset"
    elif case == "no_candidates":
        args = ["select", "--dataset", data]
        expect = "no candidate policies"
    elif case == "bad_estimator":
        args += ["--estimators", "fqe,magic"]
        expect = "unknown name 'magic'"
    elif case == "no_checkpoint":
        run = _tiny_run(tmp_path, data)
        shutil.rmtree(run / "checkpoints")
        args = ["select", str(run), "--dataset", data, *FAST]
        expect = "no checkpoint"
    else:
        args += ["--discount", "1.5"]
        expect = "--discount is 1.5; it must be a number in (0, 1]"
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert expect in err and len(err.splitlines()) == 1, err


def _tiny_run(tmp_path, data):
    from offrl.engine import train

    out = tmp_path / "run"
    train("bc", data, steps=20, eval_every=10_000, out=out, log_every=10, progress=False, env=None)
    return out


def test_ope_on_a_trained_run(tmp_path, capsys):
    data, exports = _continuous_setup(tmp_path)
    run = _tiny_run(tmp_path, data)
    assert main(["select", str(run), exports[0], "--dataset", data, "--by", "dr", *FAST]) == 0
    assert "selected:" in capsys.readouterr().out


def test_check_rolls_out_and_scores_estimators(tmp_path, capsys):
    from pathlib import Path

    import offrl

    data = str(Path(offrl.__file__).parent / "datasets" / "pendulum-medium-v0.hdf5")
    rng = np.random.default_rng(1)
    exports = [str(save_numpy_policy(tmp_path / f"pend{k}", [(rng.normal(size=(3, 8)), np.zeros(8)), (rng.normal(size=(8, 1)), np.zeros(1))],
                                     np.zeros(3), np.ones(3), [-2.0], [2.0], {"env_id": "Pendulum-v1", "step": k}))
               for k in range(2)]
    out = tmp_path / "out"
    rc = main(["ope", *exports, "--dataset", data, "--estimators", "fqe,wis", "--check", "--episodes", "2", "--out", str(out), *FAST])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "Spearman" in printed and "regret@1" in printed
    payload = json.loads((out / "ope.json").read_text())
    assert set(payload["truth"]) == {"pend0", "pend1"} and payload["truth"]["pend0"]["value"] < 0   # pendulum rewards are <= 0
    assert set(payload["check_metrics"]) == {"fqe", "wis"} and (out / "check.png").exists()
