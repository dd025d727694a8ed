"""``benchmarks/ope.py dope``: the runner takes the ``model`` estimator through ``offrl.ope`` and reports
its DOPE metrics, its comparison with FQE on shared subsets, and the ensemble's fit; the estimators'
episode subsample; the candidate settings' syntax. Candidates and true values are stand-ins (training
and MuJoCo rollouts are the benchmark's cost, not what is tested here)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ope_bench(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")           # the module sets it when unset; keep the process's own
    spec = importlib.util.spec_from_file_location("ope_bench", ROOT / "benchmarks" / "ope.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "ope_bench", mod)
    spec.loader.exec_module(mod)
    return mod


def _dataset(tmp_path):
    """30 episodes of 10 steps of a 3-d state, 1-d action system logged by a Gaussian policy (log-probs kept)."""
    from offrl.data import save
    from offrl.data.dataset import Dataset

    rng = np.random.default_rng(0)
    n_ep, length = 30, 10
    obs = rng.normal(size=(n_ep * length, 3)).astype(np.float32)
    mean, std = 0.5 * np.tanh(obs[:, :1]), 0.4
    act = np.clip(mean + std * rng.normal(size=mean.shape), -1, 1).astype(np.float32)
    logp = (-0.5 * ((act - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(1)
    timeouts = np.zeros(len(obs), bool)
    timeouts[length - 1::length] = True
    nxt = (0.9 * obs + 0.1 * act).astype(np.float32)
    ds = Dataset.from_arrays(obs, act, -np.abs(obs[:, 0]) - 0.1 * act[:, 0] ** 2, np.zeros(len(obs), bool), timeouts,
                             next_observations=nxt, infos={"action_log_probs": logp.astype(np.float32)},
                             metadata={"env_id": "Pendulum-v1"})
    return ds, str(save(ds, tmp_path / "data.hdf5"))


def _policies(n):
    from offrl.ope.policies import GaussianPolicy

    low, high = np.array([-1.0], np.float32), np.array([1.0], np.float32)
    return [GaussianPolicy(lambda obs, k=k: np.tanh((0.2 + 0.3 * k) * obs[:, :1]) * (1 - 0.1 * k), low, high,
                           std=0.2 + 0.1 * (k % 2), name=f"p{k}") for k in range(n)]


def test_dope_accepts_the_model_estimator_and_reports_its_metrics_and_fit(tmp_path, monkeypatch, ope_bench):
    from offrl.ope import check

    ds, path = _dataset(tmp_path)
    policies = _policies(4)
    truth = {p.name: {"value": -5.0 + k, "value_se": 0.1, "return": -10.0 + k} for k, p in enumerate(policies)}
    monkeypatch.setattr(ope_bench, "dope_candidates", lambda *a, **k: (policies, {"p": {"algo": "stand-in"}}))
    monkeypatch.setattr(check, "true_values", lambda pols, env, episodes, discount: {p.name: dict(truth[p.name]) for p in pols})
    out = tmp_path / "out"
    assert ope_bench.main(["dope", "--dataset", path, "--estimators", "wis,model", "--ensemble-size", "2", "--num-elites", "1", "--model-hidden-dims", "16",
                           "--model-max-epochs", "2", "--model-horizon", "5", "--ope-episodes", "20", "--bootstrap", "20",
                           "--subsets", "20", "--out", str(out), "--tag", "t"]) == 0
    record = json.loads((out / "ope-dope-t.json").read_text())
    assert record["env"] == "Pendulum-v1" and record["ope_data"] == {"episodes": 20, "rows": 200, "of_episodes": 30, "of_rows": 300}
    model = record["metrics"]["model"]
    assert {"mae", "mae/range", "spearman", "regret@1", "regret@1/range", "select_regret@1"} <= set(model["point"])
    assert set(model["interval"]) >= {"mae", "spearman", "regret@1"}
    estimates = [r["estimate"] for r in record["rows"] if r["estimator"] == "model"]
    assert len(estimates) == 4 and all(np.isfinite(estimates))
    true = np.array([truth[p]["value"] for p in record["candidates"]])
    assert model["point"]["mae"] == pytest.approx(np.mean(np.abs(np.array(estimates) - true)))
    fit = record["model"]
    assert fit["epochs"] == 2 and fit["fit_seconds"] > 0 and np.isfinite(fit["holdout_mse"]) and len(fit["elites"]) == 1
    assert set(fit["rollout_seconds"]) == {p.name for p in policies} and fit["settings"]["ensemble_size"] == 2
    assert record["model_vs_fqe"] is None and record["fqe_curve"] is None         # FQE did not run (its cost is compiling)


def test_the_estimators_subsample_is_whole_episodes_and_the_candidate_settings_parse(tmp_path, ope_bench):
    ds, _ = _dataset(tmp_path)
    sub = ope_bench.ope_subsample(ds, 7, seed=1)
    assert sub.num_episodes == 7 and len(sub) == 70 and set(sub.episode_lengths()) == {10}
    assert ope_bench.ope_subsample(ds, 7, seed=1).observations.tobytes() == sub.observations.tobytes()
    assert ope_bench.ope_subsample(ds, 0, seed=1) is ds and ope_bench.ope_subsample(ds, 99, seed=1) is ds
    assert ope_bench.parse_candidate_settings("cql.hidden_dims=64,64; cql.bc_warmup_steps=0;iql.expectile=0.8") == {
        "cql": {"hidden_dims": "64,64", "bc_warmup_steps": "0"}, "iql": {"expectile": "0.8"}}
    with pytest.raises(SystemExit, match="ALGO.FIELD=VALUE"):
        ope_bench.parse_candidate_settings("hidden_dims=64")


def test_candidates_are_reused_only_when_trained_with_the_same_settings_on_the_same_data(tmp_path, monkeypatch, ope_bench):
    """An export is reused by a later run with the same algorithm, steps, overrides and dataset, and trained
    again when any of them differs (a stand-in trainer records the calls)."""
    import offrl.checkpoint
    import offrl.engine
    from offrl.policy import save_numpy_policy

    calls = []

    def train(algo, dataset, steps, out, config_overrides=None, **kwargs):
        calls.append((algo, steps, config_overrides))
        return algo

    def export(run, folder):
        layers = [(np.full((3, 1), 0.1 * len(calls)), np.zeros(1))]
        save_numpy_policy(folder, layers, np.zeros(3), np.ones(3), -np.ones(1), np.ones(1), {"algo": run})

    monkeypatch.setattr(offrl.engine, "train", train)
    monkeypatch.setattr(offrl.checkpoint, "export_numpy_policy", export)
    ds, _ = _dataset(tmp_path)
    console = type("Quiet", (), {"print": lambda self, *a, **k: None})()
    run = lambda data, settings: ope_bench.dope_candidates(tmp_path / "work", data, "bc=10;cql=20", [0.1, 0.5], settings, console)  # noqa: E731
    policies, bases = run(ds, {"cql": {"hidden_dims": "8,8"}})
    assert [p.name for p in policies] == ["bc-10/std0.1", "bc-10/std0.5", "cql-20/std0.1", "cql-20/std0.5"]
    assert calls == [("bc", 10, None), ("cql", 20, {"hidden_dims": "8,8"})] and bases["cql-20"]["overrides"] == {"hidden_dims": "8,8"}
    run(ds, {"cql": {"hidden_dims": "8,8"}})
    assert len(calls) == 2                                    # the same settings: both reused
    run(ds, {"cql": {"hidden_dims": "4,4"}})
    assert calls[2:] == [("cql", 20, {"hidden_dims": "4,4"})]  # other overrides: CQL only
    run(ds.replace(source=str(tmp_path / "other.hdf5")), {"cql": {"hidden_dims": "4,4"}})
    assert [c[0] for c in calls[3:]] == ["bc", "cql"]         # another dataset: both
