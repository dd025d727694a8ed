"""Offline -> online fine-tuning: bad input, resume == uninterrupted, and one short real run per remedy."""

import hashlib
import json

import jax
import numpy as np
import pytest

from offrl import engine
from offrl.cli import main
from offrl.finetuning import FinetuneConfig, finetune, online_summary

TINY = {"hidden_dims": "32,32", "batch_size": "32"}
SHORT = dict(steps=120, update_every=20, start_steps=40, eval_every=60, eval_episodes=1, checkpoint_every=60, log_every=60)


@pytest.fixture(scope="module")
def offline_runs(tmp_path_factory, pendulum_small):
    """Tiny offline runs of each fine-tunable family on a saved Pendulum file (so the run can reload it)."""
    from offrl import data

    root = tmp_path_factory.mktemp("o2o")
    path = data.save(pendulum_small.replace(metadata={**pendulum_small.metadata, "env_id": "Pendulum-v1"}), root / "pend.hdf5")
    runs = {}
    for name, algo, extra in (("cql", "cql", {"n_actions": "2", "bc_warmup_steps": "10"}),
                              ("cal_ql", "cal_ql", {"n_actions": "2", "bc_warmup_steps": "10"}),
                              ("cal_ql_online", "cal_ql", {"n_actions": "2", "bc_warmup_steps": "10", "calibrated_online": "true"}),
                              ("td3_bc", "td3_bc", {}), ("iql", "iql", {})):
        engine.train(algo, str(path), steps=40, seeds=2, eval_every=40, eval_episodes=1, log_every=20, out=root / name,
                     config_overrides={**TINY, **extra}, progress=False)
        runs[name] = root / name
    return runs


def _digest(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_bad_input_is_one_line_exit_2_and_leaves_the_run_untouched(offline_runs, tmp_path, capsys):
    run = offline_runs["cql"]
    before = _digest(run)
    cases = [
        ([str(tmp_path)], "is not an offrl run folder"),
        ([str(run), "--mix-ratio", "1.5"], "--mix-ratio is 1.5; it must be a number in [0, 1]"),
        ([str(run), "--env", "Hopper-v5"], "--env Hopper-v5 has observations of size 11 and actions of size 3"),
        ([str(run), "--checkpoint-every", "30", "--update-every", "20"], "--checkpoint-every is 30"),
    ]
    for argv, message in cases:
        code = main(["finetune", *argv, "--out", str(tmp_path / "ft"), "--no-progress"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and message in err and len(err.splitlines()) == 1, (argv, err)
    assert _digest(run) == before
    # a run whose dataset names no env, with no --env
    record = json.loads((run / "config.json").read_text())
    record["data"]["env_id"], record["settings"]["env"] = None, None
    noenv = tmp_path / "noenv"
    noenv.mkdir()
    (noenv / "config.json").write_text(json.dumps(record))
    assert main(["finetune", str(noenv), "--no-progress"]) == 2
    assert "pass --env ENV" in capsys.readouterr().err


def test_resume_after_a_kill_equals_the_uninterrupted_run(offline_runs, tmp_path):
    kwargs = dict(**SHORT, mix_ratio=0.5, progress=False)
    full = finetune(offline_runs["cal_ql_online"], out=tmp_path / "full", **kwargs)
    finetune(offline_runs["cal_ql_online"], out=tmp_path / "killed", stop_at=60, **kwargs)
    resumed = finetune(offline_runs["cal_ql_online"], out=tmp_path / "killed", resume=True, **kwargs)
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(full.agent), _leaves(resumed.agent)))
    rows = lambda r: [(x["step"], x["seed"], x.get("eval/return")) for x in r.metrics]  # noqa: E731
    assert rows(full) == rows(resumed)


@pytest.mark.parametrize("algo,options", [
    ("cql", {"mix_ratio": 0.0}),                       # the naive continuation: online data only
    ("cql", {"mix_ratio": 0.5, "alpha_decay": 0.01}),  # replay mixing + alpha decay
    ("cal_ql", {"mix_ratio": 0.5}),                    # Cal-QL: plain CQL online (CORL's default)
    ("cal_ql_online", {"mix_ratio": 0.5}),             # Cal-QL with calibrated_online: MC returns of the online episodes
    ("td3_bc", {"mix_ratio": 0.25, "bc_anneal_steps": 60}),  # annealed BC
    ("iql", {"mix_ratio": 0.5, "utd": 2}),
])
def test_each_remedy_runs_and_logs_across_the_boundary(offline_runs, tmp_path, algo, options):
    result = finetune(offline_runs[algo], out=tmp_path / "ft", **SHORT, progress=False, **options)
    online = [r for r in result.metrics if r.get("phase") == "online"]
    offline = [r for r in result.metrics if r.get("phase") == "offline"]
    assert offline and online and min(r["step"] for r in online) > max(r["step"] for r in offline)
    assert {r["env_step"] for r in online} == {60, 120}
    for row in online:
        assert all(np.isfinite(v) for k, v in row.items() if isinstance(v, float) and not k.startswith("eval/"))
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    assert {"unlearning_dip", "cumulative_regret", "online_return"} <= set(summary)
    assert summary == pytest.approx(online_summary(result.metrics, result.settings["offline_steps"]), nan_ok=True)
    assert (tmp_path / "ft" / "plots" / "finetune.png").exists()
    last = [r for r in online if r["env_step"] == 120][0]
    if "alpha_decay" in options:  # cql_alpha * exp(-0.01 * updates since the boundary)
        assert last["cql_alpha"] < 5.0 * np.exp(-0.01 * 40)
    if algo == "cal_ql":  # the bound is off online unless calibrated_online
        assert "calql_bound_rate" not in last
    if algo == "cal_ql_online":
        assert 0.0 <= last["calql_bound_rate"] <= 1.0
    # the source run is a complete run folder the engine can still load
    assert engine.load_run(offline_runs[algo]).step == 40


def test_finetuning_an_iql_run_keeps_its_actor_moments(offline_runs, tmp_path):
    """Issue 21 defect 2: the online phase drops IQL's decayed cosine schedule but not the actor's
    Adam moments; with no update yet (start_steps beyond the run) they equal the offline checkpoint's."""
    import optax

    def adam(state):
        is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)  # noqa: E731
        return [x for x in jax.tree_util.tree_leaves(state, is_leaf=is_adam) if is_adam(x)][0]

    offline = engine.load_run(offline_runs["iql"])
    result = finetune(offline_runs["iql"], out=tmp_path / "ft", steps=40, update_every=20, start_steps=1000,
                      eval_every=40, eval_episodes=0, checkpoint_every=40, log_every=40, progress=False)
    assert result.config.cosine_actor_lr is False and offline.config.cosine_actor_lr is True
    before, after = adam(offline.agent.actor.opt_state), adam(result.agent.actor.opt_state)
    assert int(np.asarray(after.count)[0]) == offline.step == 40
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(before.mu), _leaves(after.mu)))
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(before.nu), _leaves(after.nu)))
    # the fine-tuning folder reloads (its optimiser structure is the carried-over one) and evaluates
    reloaded = engine.load_run(tmp_path / "ft")
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(reloaded.agent), _leaves(result.agent)))
