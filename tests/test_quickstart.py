"""offrl quickstart: a tiny real run on the bundled dataset writes the whole report; the verdict is honest."""

import json

import pytest

from offrl.quickstart import DEFAULT_DATASET, verdict, run_quickstart


def test_bundled_default_dataset_exists_and_is_suboptimal():
    import offrl.data as data
    from offrl.envs import normalized_score

    ds = data.load(DEFAULT_DATASET)
    assert ds.metadata["tier"] in ("medium-replay", "medium-expert")
    score = float(normalized_score(ds.metadata["env_id"], ds.metadata["dataset_return_mean"], ds.metadata))
    assert score < 80  # room for offline RL to improve on the data
    assert {"action_log_probs", "action_mean", "action_std"} <= set(ds.infos)


def test_verdict_says_when_offline_rl_did_not_win():
    bc = {"score_mean": 50.0, "score_std": 1.0}
    assert verdict({"bc": bc, "iql": {"score_mean": 70.0, "score_std": 3.0}}, 40.0).startswith("Offline RL beat BC: IQL scored 70.0 vs BC 50.0 (+20.0")
    assert "did NOT clearly beat" in verdict({"bc": bc, "iql": {"score_mean": 52.0, "score_std": 5.0}}, None)
    assert "did NOT beat" in verdict({"bc": bc, "cql": {"score_mean": 30.0, "score_std": 1.0}}, None)


def test_tiny_quickstart_writes_report(tmp_path, capsys):
    from rich.console import Console

    out = tmp_path / "qs"
    console = Console(record=True, width=140)
    result = run_quickstart(out=out, algos=("bc", "iql"), steps={"bc": 40, "iql": 40}, seeds=1, eval_episodes=1,
                            evaluations=2, progress=False, console=console)
    for name in ("summary.md", "learning_curves.png", "q_vs_return.png", "results.json", "doctor/summary.md",
                 "doctor/returns.png", "runs/bc/metrics.jsonl", "runs/iql/config.json"):
        assert (out / name).exists(), name
    saved = json.loads((out / "results.json").read_text())
    assert set(saved["algorithms"]) == {"bc", "iql"} and saved["algorithms"]["iql"]["steps"] == 40
    assert saved["verdict"] == result["verdict"] and "BC" in saved["verdict"]
    assert saved["algorithms"]["iql"]["q_estimate"] is not None and saved["algorithms"]["bc"]["q_estimate"] is None
    summary = (out / "summary.md").read_text()
    assert "| BC | 40 | 1 |" in summary and result["verdict"] in summary
    assert saved["behavior"]["score"] is not None


def test_quickstart_cli_rejects_unknown_algorithm(tmp_path, capsys):
    from offrl.cli import main

    assert main(["quickstart", "--algos", "bc,nope", "--out", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("offrl: error:") and "nope" in err and len(err.strip().splitlines()) == 1


def test_summary_row_is_run_summary_plus_the_critic_monitor():
    from offrl.engine import Run
    from offrl.quickstart import summary_row

    rows = [{"step": 10, "seed": s, "eval/return": -500.0, "eval/normalized_score": 40.0 + s,
             "eval/q_estimate": -20.0, "eval/discounted_return": -30.0} for s in (0, 1)]
    rows += [{"step": 20, "seed": s, "eval/return": -200.0 - 100 * s, "eval/normalized_score": 80.0 - 10 * s,
              "eval/q_estimate": -10.0 - 2 * s, "eval/discounted_return": -12.0} for s in (0, 1)]
    run = Run(None, "iql", None, {"seeds": 2}, None, None, rows)
    row = summary_row(run)
    assert {k: row[k] for k in run.summary()} == run.summary()
    assert row["score_mean"] == 75.0 and row["score_std"] == 5.0 and row["return_mean"] == -250.0
    assert row["steps"] == 20 and row["score_per_seed"] == [80.0, 70.0]
    assert row["q_estimate"] == -11.0 and row["discounted_return"] == -12.0


def test_plot_runs_draws_the_behavior_line(tmp_path, monkeypatch):
    import matplotlib.axes

    from offrl.engine import Run
    from offrl.plotting import plot_runs

    drawn = []
    original = matplotlib.axes.Axes.axhline
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline", lambda self, y=0, *a, **k: drawn.append((y, k.get("label"))) or original(self, y, *a, **k))
    rows = [{"step": 10, "seed": 0, "eval/return": -500.0, "eval/normalized_score": 40.0}]
    plot_runs([Run(None, "bc", None, {"seeds": 1}, None, None, rows)], tmp_path, baselines={"behaviour (dataset mean)": 59.2})
    assert (59.2, "behaviour (dataset mean)") in drawn and (tmp_path / "learning_curves.png").exists()


def test_quickstart_on_the_bundled_discrete_dataset_trains_the_discrete_family(tmp_path):
    from offrl.quickstart import run_quickstart

    result = run_quickstart("cartpole-medium-expert-v0", out=tmp_path / "qs", steps=200, seeds=1, eval_episodes=2,
                            evaluations=1, progress=False)
    assert set(result["algorithms"]) == {"discrete_bc", "discrete_iql"}
    assert "BC" in result["verdict"] and result["env_id"] == "CartPole-v1"
