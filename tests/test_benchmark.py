"""``offrl benchmark`` on tiny bundled Pendulum data: the table, resuming cell by cell, bad input."""

import csv
import json
from pathlib import Path

import pytest

from offrl.benchmark import results_markdown, run_benchmark
from offrl.cli import main
from offrl.errors import ConfigError

TINY = dict(envs="pendulum", tiers="medium,expert", algos="bc", seeds=2, steps=200, eval_every=100, eval_episodes=1,
            overrides={"bc.hidden_dims": "32,32"}, progress=False, log=lambda s: None)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "b"
    cells = run_benchmark(out=out, **TINY)
    return out, cells


def test_every_cell_is_trained_evaluated_and_tabulated(bench):
    out, cells = bench
    assert [(c["env"], c["tier"], c["algo"]) for c in cells] == [("pendulum", "medium", "bc"), ("pendulum", "expert", "bc")]
    for c in cells:
        assert c["metric"] == "eval/normalized_score" and c["last_step"] == 200 and c["seeds"] == 2
        assert c["best_mean"] >= c["last_mean"] and c["wall_s"] > 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [r["tier"] for r in rows] == ["medium", "expert"] and float(rows[0]["last_mean"]) == pytest.approx(cells[0]["last_mean"])
    table = (out / "results.md").read_text()
    assert "## Last evaluation" in table and "## Best evaluation" in table and "Wall time per cell" in table
    assert "| pendulum-medium | " in table and "| dataset | BC |" in table
    for name in ("learning_curves.png", "q_vs_return.png", "benchmark.json"):
        assert (out / name).stat().st_size > 0


def test_markdown_layout_hand_made():
    cells = [{"env": "hopper", "tier": "medium", "algo": a, "seeds": 3, "steps": 1000, "metric": "eval/normalized_score",
              "last_mean": m, "last_std": 1.0, "best_mean": m + 5, "best_std": 2.0, "wall_s": 60.0} for a, m in (("bc", 50.0), ("iql", 60.0))]
    text = results_markdown(cells)
    assert "| hopper-medium | 50.0 ± 1.0 | 60.0 ± 1.0 |" in text and "| hopper-medium | 55.0 ± 2.0 | 65.0 ± 2.0 |" in text
    assert "| hopper-medium | 60 | 60 |" in text and "mean ± std over 3 seeds, after 1,000 updates" in text


def test_finished_cells_are_kept_and_an_interrupted_cell_resumes(bench, tmp_path):
    out, cells = bench
    finished = out / "cells" / "pendulum-medium-bc" / "cell.json"
    before = finished.read_text(), finished.stat().st_mtime_ns
    # Interrupt the expert cell of a second benchmark halfway, then rerun: it resumes from its checkpoint.
    from offrl.engine import train

    other = tmp_path / "b2"
    run_benchmark(out=other, **{**TINY, "tiers": "medium"})
    folder = other / "cells" / "pendulum-expert-bc"
    train("bc", "pendulum-expert-v0", steps=200, seeds=2, eval_every=100, eval_episodes=1, out=folder, env="Pendulum-v1",
          log_every=100, config_overrides={"hidden_dims": "32,32"}, progress=False, stop_at=100)
    assert not (folder / "cell.json").exists()
    logged = []
    cells2 = run_benchmark(out=other, **{**TINY, "log": logged.append})
    assert any("pendulum-medium-bc (finished earlier, kept)" in line for line in logged)
    resumed = next(c for c in cells2 if c["tier"] == "expert")
    uninterrupted = next(c for c in cells if c["tier"] == "expert")
    assert resumed["last_mean"] == pytest.approx(uninterrupted["last_mean"]) and resumed["best_mean"] == pytest.approx(uninterrupted["best_mean"])
    # rerunning the first benchmark trains nothing and rewrites no finished cell
    run_benchmark(out=out, **TINY)
    assert (finished.read_text(), finished.stat().st_mtime_ns) == before
    # a run naming only some of the folder's cells still writes the folder's whole table
    run_benchmark(out=out, **{**TINY, "tiers": "expert"})
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert sorted(r["tier"] for r in rows) == ["expert", "medium"]
    assert "| pendulum-medium | " in (out / "results.md").read_text()


@pytest.mark.parametrize("argv,needle", [
    (["--envs", "pendulum,atlantis"], "--envs: unknown environment 'atlantis'"),
    (["--envs", "pendulum", "--tiers", "medium,mediocre"], "--tiers: unknown tier 'mediocre'"),
    (["--envs", "pendulum", "--algos", "bc,sarsa"], "--algos: unknown algorithm 'sarsa'"),
    (["--envs", "pendulum", "--steps", "100", "--eval-every", "500"], "--steps 100 is smaller than the evaluation interval --eval-every 500"),
    (["--envs", "pendulum", "--tiers", "full-replay"], "--tiers: unknown tier 'full-replay'"),
    (["--envs", "hopper", "--tiers", "expert"], "no dataset 'hopper-expert-v0'"),
    (["--envs", "pendulum", "--set", "bc.batch_size=0"], "'batch_size' of bc is 0"),
])
def test_bad_requests_are_one_line_exit_2_and_write_nothing(tmp_path, capsys, argv, needle):
    out = tmp_path / "never"
    rc = main(["benchmark", "--out", str(out), "--algos", "bc", "--tiers", "medium", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and needle in err, err
    assert not out.exists()


def test_a_folder_of_another_benchmark_is_refused_and_its_cells_kept(bench, capsys):
    out, _ = bench
    finished = out / "cells" / "pendulum-medium-bc" / "cell.json"
    before = finished.read_text()
    rc = main(["benchmark", "--out", str(out), "--envs", "pendulum", "--tiers", "medium", "--algos", "bc", "--seeds", "2",
               "--steps", "400", "--eval-every", "100", "--eval-episodes", "1", "--set", "bc.hidden_dims=32,32"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "holds a benchmark made with --steps 200, not 400" in err and err.count("\n") == 0
    assert finished.read_text() == before
    assert json.loads((out / "benchmark.json").read_text())["steps"] == 200


# ---------------------------------------------------------------------- --peer d3rlpy, with a fake peer Python
FAKE_PEER = """#!{python}
import json, sys
driver, request = sys.argv[1], json.load(open(sys.argv[2]))
assert driver.endswith("d3rlpy_driver.py"), driver
if {fail}:
    print("ModuleNotFoundError: No module named 'd3rlpy'", file=sys.stderr)
    sys.exit(1)
print("some library log line")
print(json.dumps({{"metric": "eval/normalized_score", "last_step": request["steps"], "last_mean": 40.0 + request["seeds"],
                  "last_std": 1.5, "best_step": request["eval_every"], "best_mean": 50.0, "best_std": 2.5, "wall_s": 12.0,
                  "unmatched": ["bc_warmup_steps=1"], "echo": request}}))
"""


def _fake_peer(folder, fail=False):
    import stat
    import sys

    path = folder / ("fail-python" if fail else "fake-python")
    path.write_text(FAKE_PEER.format(python=sys.executable, fail=fail))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_peer_runs_beside_finished_cells_and_is_tabulated(bench, tmp_path):
    import shutil

    out = tmp_path / "b"
    shutil.copytree(bench[0], out)
    kept = (out / "cells" / "pendulum-medium-bc" / "cell.json").read_text()
    logged = []
    # a failing peer: logged in one line, the table says so, nothing kept, retried next time
    cells = run_benchmark(out=out, **{**TINY, "log": logged.append}, peer="d3rlpy", peer_python=_fake_peer(tmp_path, fail=True))
    assert any("d3rlpy failed on pendulum-medium-bc (exit 1): ModuleNotFoundError" in line for line in logged)
    assert not (out / "cells" / "pendulum-medium-bc" / "peer-d3rlpy.json").exists()
    assert "| pendulum-medium-bc | " in (out / "results.md").read_text() and "| failed |" in (out / "results.md").read_text()
    assert cells[0]["peer_last_mean"] is None
    cells = run_benchmark(out=out, **TINY, peer="d3rlpy", peer_python=_fake_peer(tmp_path))
    assert (out / "cells" / "pendulum-medium-bc" / "cell.json").read_text() == kept
    request = json.loads((out / "cells" / "pendulum-medium-bc" / "peer-d3rlpy.json").read_text())["echo"]
    # same file, schedule, seeds and the cell's resolved config (the override included)
    assert request["steps"] == 200 and request["seeds"] == 2 and request["eval_every"] == 100 and request["eval_episodes"] == 1
    assert request["config"]["hidden_dims"] == [32, 32] and request["algo"] == "bc" and request["env_id"] == "Pendulum-v1"
    assert request["dataset_path"].endswith("pendulum-medium-v0.hdf5") and len(request["references"]) == 2
    # the driver runs in this directory: a file under it is named relative to it, so no machine path is recorded
    path = Path(request["dataset_path"])
    assert path.exists() and path.is_absolute() != path.absolute().is_relative_to(Path.cwd())
    assert [c["peer_last_mean"] for c in cells] == [42.0, 42.0] and cells[0]["peer_wall_s"] == 12.0
    table = (out / "results.md").read_text()
    offrl = f"{cells[0]['last_mean']:.1f} ± {cells[0]['last_std']:.1f}"
    assert "## Beside d3rlpy" in table and f"| pendulum-medium-bc | {offrl} | 42.0 ± 1.5 |" in table
    assert f"| 50.0 ± 2.5 | {cells[0]['wall_s']:.0f} | 12 |" in table and "bc_warmup_steps=1" in table
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert rows[0]["peer"] == "d3rlpy" and float(rows[0]["peer_last_mean"]) == 42.0 and float(rows[0]["peer_wall_s"]) == 12.0


# offrl field -> d3rlpy config field, for each algorithm the driver maps (values must be equal)
D3RLPY_FIELDS = {
    "rebrac": {"actor_lr": "actor_learning_rate", "critic_lr": "critic_learning_rate", "batch_size": "batch_size",
               "discount": "gamma", "tau": "tau", "num_qs": "n_critics", "policy_noise": "target_smoothing_sigma",
               "noise_clip": "target_smoothing_clip", "policy_delay": "update_actor_interval",
               "actor_bc_weight": "actor_beta", "critic_bc_weight": "critic_beta"},
    "crr": {"actor_lr": "actor_learning_rate", "critic_lr": "critic_learning_rate", "batch_size": "batch_size",
            "discount": "gamma", "num_qs": "n_critics", "advantage_temperature": "beta", "max_weight": "max_weight",
            "num_action_samples": "n_action_samples", "advantage_type": "advantage_type", "weight_type": "weight_type",
            "target_update_interval": "target_update_interval"},
    "bear": {"actor_lr": "actor_learning_rate", "critic_lr": "critic_learning_rate", "vae_lr": "imitator_learning_rate",
             "alpha_lr": "alpha_learning_rate", "batch_size": "batch_size", "discount": "gamma", "tau": "tau",
             "num_qs": "n_critics", "kl_weight": "vae_kl_weight", "lmbda": "lam", "num_target_samples": "n_target_samples",
             "num_mmd_samples": "n_mmd_action_samples", "mmd_kernel": "mmd_kernel", "mmd_sigma": "mmd_sigma",
             "mmd_epsilon": "alpha_threshold", "initial_alpha": "initial_alpha", "warmup_steps": "warmup_steps"},
    "plas": {"actor_lr": "actor_learning_rate", "critic_lr": "critic_learning_rate", "vae_lr": "imitator_learning_rate",
             "batch_size": "batch_size", "discount": "gamma", "tau": "tau", "num_qs": "n_critics", "lmbda": "lam",
             "kl_weight": "beta", "warmup_steps": "warmup_steps"},
}


def _d3rlpy_driver():
    import importlib.util

    from offrl.peers import driver_path

    spec = importlib.util.spec_from_file_location("d3rlpy_driver", driver_path("d3rlpy"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("algo", sorted(D3RLPY_FIELDS))
def test_d3rlpy_driver_maps_offrl_default_config(algo):
    """The driver's d3rlpy config for offrl's default config of the algorithm (as ``peer_request``
    sends it: the run folder's ``config.json`` form) has offrl's values, networks and the settings
    it cannot match named in ``unmatched``."""
    pytest.importorskip("d3rlpy")
    import importlib

    import numpy as np

    from offrl.algos.common import config_to_dict
    from offrl.peers import PEER_ALGOS

    assert algo in PEER_ALGOS["d3rlpy"]
    cfg = json.loads(json.dumps(config_to_dict(importlib.import_module(f"offrl.algos.{algo}").Config())))
    driver = _d3rlpy_driver()
    built, unmatched = driver.build_algo(algo, cfg, 1000, 1.0, -np.ones(3), np.ones(3))
    d3 = built.config
    assert {k: getattr(d3, v) for k, v in D3RLPY_FIELDS[algo].items()} == {k: cfg[k] for k in D3RLPY_FIELDS[algo]}
    assert d3.actor_encoder_factory.hidden_units == d3.critic_encoder_factory.hidden_units == cfg["hidden_dims"]
    if "vae_hidden_dims" in cfg:
        assert d3.imitator_encoder_factory.hidden_units == cfg["vae_hidden_dims"]
    assert d3.observation_scaler is None and d3.reward_scaler is None   # offrl's defaults: neither
    built.create_impl((11,), 3)                                         # the networks build
    if algo == "rebrac":
        assert d3.critic_encoder_factory.use_layer_norm and not d3.actor_encoder_factory.use_layer_norm
        assert unmatched == []
        _, unmatched = driver.build_algo(algo, {**cfg, "normalize_q": False}, 1000, 1.0, -np.ones(3), np.ones(3))
        assert [u.split(" ")[0] for u in unmatched] == ["normalize_q=False"]
    elif algo == "crr":
        assert d3.target_update_type == "hard" and [u.split(" ")[0] for u in unmatched] == ["log_std_min=-5.0", "advantage", "act"]
        soft, unmatched = driver.build_algo(algo, {**cfg, "target_update_interval": None, "num_qs": 2, "log_std_min": -20.0,
                                                   "advantage_after_critic_step": True}, 1000, 1.0, -np.ones(3), np.ones(3))
        assert soft.config.target_update_type == "soft" and soft.config.tau == cfg["tau"]
        assert [u.split(" ")[0] for u in unmatched] == ["num_qs=2", "act"]
    elif algo == "bear":
        assert d3.temp_learning_rate == 0.0 and d3.initial_temperature < 1e-12   # offrl's BEAR has no entropy term
        # 1000 updates, all inside the 40k warm-up; the alpha learning rate d3rlpy ignores
        assert [u.split(" ")[0] for u in unmatched] == ["alpha_lr=0.001", "alpha", "MMD", "act"]
        _, unmatched = driver.build_algo(algo, {**cfg, "warmup_steps": 0, "alpha_lr": cfg["actor_lr"], "latent_dim": 4},
                                         1000, 1.0, -np.ones(3), np.ones(3))
        assert [u.split(" ")[0] for u in unmatched] == ["latent_dim=4", "MMD", "MMD", "act"]
    else:
        assert [u.split(" ")[0] for u in unmatched] == ["critic"]
        scaled, unmatched = driver.build_algo(algo, {**cfg, "max_latent_action": 3.0, "warmup_steps": 0,
                                                     "normalize_observations": True}, 1000, 2.0, -np.ones(3), np.ones(3))
        assert [u.split(" ")[0] for u in unmatched] == ["max_latent_action=3.0"]
        _, unmatched = driver.build_algo(algo, {**cfg, "critic_during_warmup": False}, 1000, 1.0, -np.ones(3), np.ones(3))
        assert unmatched == []                                          # d3rlpy's schedule: nothing unmatched
        assert type(scaled.config.observation_scaler).__name__ == "StandardObservationScaler"
        assert scaled.config.reward_scaler.multiplier == 2.0


@pytest.mark.parametrize("argv,env,needle", [
    (["--peer", "d3rlpy"], None, "--peer d3rlpy needs a Python that has d3rlpy installed: pass --peer-python PATH"),
    (["--peer", "d3rlpy"], "/no/such/python", "OFFRL_PEER_PYTHON '/no/such/python' is not an executable file"),
    (["--peer", "d3rlpy", "--peer-python", "/no/such/python"], None, "--peer-python '/no/such/python' is not an executable file"),
    (["--peer", "rllib", "--peer-python", "python"], None, "--peer 'rllib' is unknown; choose one of: d3rlpy"),
    (["--peer", "d3rlpy", "--algos", "bc,cal_ql", "--peer-python", "python"], None, "--peer d3rlpy cannot run cal_ql"),
])
def test_bad_peer_requests_are_one_line_exit_2(tmp_path, capsys, monkeypatch, argv, env, needle):
    if env is None:
        monkeypatch.delenv("OFFRL_PEER_PYTHON", raising=False)
    else:
        monkeypatch.setenv("OFFRL_PEER_PYTHON", env)
    out = tmp_path / "never"
    rc = main(["benchmark", "--out", str(out), "--envs", "pendulum", "--tiers", "medium", "--algos", "bc", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and needle in err, err
    assert not out.exists()


def test_cpu_budget_gives_each_algorithm_its_own_updates_and_settings():
    """--budget cpu: CQL, BCQ and AWAC get their own update counts and narrower networks (CQL
    without its BC warm-up), the rest the budget's 30k; an explicit --steps applies to all, and
    a user's --set wins over the budget's setting of the same field."""
    from offrl.benchmark import BUDGETS, make_spec

    spec = make_spec("pendulum", "medium", "bc,cql,bcq,awac,iql")
    assert spec.steps == 30_000 and spec.steps_of("bc") == spec.steps_of("iql") == 30_000
    assert spec.steps_of("cql") == spec.steps_of("bcq") == spec.steps_of("awac") == 20_000
    assert spec.overrides["cql"] == {"hidden_dims": "128,128", "bc_warmup_steps": "0", "cql_alpha": "10",  # CORL's Gym settings
                                     "actor_lr": "3e-5", "normalize_observations": "true"}
    assert spec.overrides["awac"] == {"actor_hidden_dims": "256,256", "batch_size": "256", "lam": "0.3333",  # CORL's D4RL config
                                      "normalize_weights": "false", "max_weight": "100", "normalize_observations": "true"}
    assert "bc" not in spec.overrides and BUDGETS["cpu"]["algos"]["bcq"]["set"]["vae_hidden_dims"] == "256,256"
    fixed = make_spec("pendulum", "medium", "bc,cql", steps=1000, eval_every=500)
    assert fixed.steps_of("cql") == fixed.steps_of("bc") == 1000 and fixed.algo_steps == {}
    mine = make_spec("pendulum", "medium", "cql", overrides={"cql.hidden_dims": "64,64"})
    assert mine.overrides["cql"] == {"hidden_dims": "64,64", "bc_warmup_steps": "0", "cql_alpha": "10", "actor_lr": "3e-5",
                                     "normalize_observations": "true"}


NEW_ALGOS = "rebrac,sac_n,edac,lb_sac,spot,xql,crr,bear,plas,td3_awr,brac,mopo,mobile,combo,idql,fql"


def test_cpu_budget_covers_the_new_algorithms_and_keeps_the_cpu_tables_cells(tmp_path):
    """benchmarks/new_algos_table.sh's request is accepted: each of the 16 algorithms gets its
    budget entry's updates and (range-checked) settings. The cpu table's request (cpu_table.sh)
    still claims its folder: the benchmark.json recorded there matches what --budget cpu gives now."""
    import shutil
    from pathlib import Path

    from offrl.benchmark import BUDGETS, _claim_folder, make_spec

    entries = BUDGETS["cpu"]["algos"]
    spec = make_spec("halfcheetah,hopper,walker2d", "medium,medium-replay", NEW_ALGOS, seeds=3)
    assert spec.algos == tuple(NEW_ALGOS.split(",")) and len(spec.cells()) == 96
    for algo in spec.algos:
        assert spec.steps_of(algo) == entries[algo]["steps"] >= 20_000, algo
        assert spec.overrides.get(algo, {}) == entries[algo].get("set", {}), algo
    recorded = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cpu-table" / "benchmark.json"
    shutil.copy(recorded, tmp_path / "benchmark.json")
    old = make_spec("halfcheetah,hopper,walker2d", "medium,medium-replay,medium-expert", "bc,td3_bc,iql,bcq,awac,cql",
                    seeds=3, dataset_pattern="benchmarks/data/tiers/{env}-{tier}-v0.hdf5")
    _claim_folder(tmp_path, old)   # raises ConfigError if any cell setting of the six changed
    assert old.algo_steps == {"awac": 20_000, "cql": 20_000, "bcq": 20_000} and old.steps == 30_000


def test_markdown_header_states_per_algorithm_updates_and_settings():
    cells = [{"env": "hopper", "tier": "medium", "algo": a, "seeds": 3, "steps": n, "metric": "eval/normalized_score",
              "last_mean": 50.0, "last_std": 1.0, "best_mean": 55.0, "best_std": 1.0, "wall_s": 10.0, "settings": s}
             for a, n, s in (("bc", 30_000, {}), ("cql", 20_000, {"hidden_dims": "128,128", "bc_warmup_steps": "0"}))]
    text = results_markdown(cells)
    assert "after 30,000 updates (BC), 20,000 updates (CQL)." in text
    assert "Settings other than each algorithm's defaults: CQL bc_warmup_steps=0, hidden_dims=128,128." in text


def test_a_folder_from_before_per_algorithm_budgets_resumes_with_the_same_steps(tmp_path):
    """benchmark.json files written before `algo_steps` existed mean every algorithm ran `steps`:
    the same explicit --steps resumes them."""
    from offrl.benchmark import _claim_folder, _spec_record, make_spec

    spec = make_spec("pendulum", "medium", "bc,cql", steps=30_000)
    record = _spec_record(spec)
    del record["algo_steps"]
    (tmp_path / "benchmark.json").write_text(json.dumps(record))
    _claim_folder(tmp_path, spec)   # no error
    with pytest.raises(ConfigError, match="per-algorithm steps"):
        _claim_folder(tmp_path, make_spec("pendulum", "medium", "bc,cql"))


def test_a_request_for_some_of_the_tables_algorithms_resumes_their_cells(tmp_path):
    """cpu_table.sh ENVS bc continues the BC cells of the recorded table: the per-algorithm
    settings are compared for the requested algorithms only, and the record keeps the others'."""
    import shutil
    from pathlib import Path

    from offrl.benchmark import _claim_folder, make_spec

    recorded = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cpu-table" / "benchmark.json"
    shutil.copy(recorded, tmp_path / "benchmark.json")
    before = json.loads((tmp_path / "benchmark.json").read_text())
    pattern = "benchmarks/data/tiers/{env}-{tier}-v0.hdf5"
    for algos in ("bc", "bc,cql", "cql"):
        _claim_folder(tmp_path, make_spec("hopper", "medium-replay", algos, seeds=3, dataset_pattern=pattern))
    after = json.loads((tmp_path / "benchmark.json").read_text())
    assert after == before            # nothing of the other algorithms' settings is lost
    with pytest.raises(ConfigError, match="per-algorithm steps"):   # CQL's cells ran 20k updates, not 30k
        _claim_folder(tmp_path, make_spec("hopper", "medium", "cql", steps=30_000, seeds=3, dataset_pattern=pattern))
    with pytest.raises(ConfigError, match="--set"):                  # BCQ's ran 128 x 128
        _claim_folder(tmp_path, make_spec("hopper", "medium", "bcq", seeds=3, dataset_pattern=pattern,
                                          overrides={"bcq": {"hidden_dims": "64,64"}}))


def test_a_new_algorithm_adds_a_row_to_a_table_that_lacks_it(tmp_path):
    """new_algos_table.sh run one algorithm at a time: a folder whose record holds ReBRAC's cells takes
    EDAC's (an algorithm it has not run: nothing to compare), keeps ReBRAC's settings, and still
    refuses ReBRAC at other settings."""
    from offrl.benchmark import BUDGETS, _claim_folder, make_spec

    pattern = "benchmarks/data/tiers/{env}-{tier}-v0.hdf5"

    def spec(algos, **kw):
        return make_spec("hopper", "medium", algos, seeds=3, dataset_pattern=pattern, budget="cpu", **kw)

    _claim_folder(tmp_path, spec("rebrac"))
    _claim_folder(tmp_path, spec("edac"))           # no error: EDAC is a new row
    record = json.loads((tmp_path / "benchmark.json").read_text())
    assert record["algos"] == ["edac", "rebrac"]
    assert record["algo_steps"] == {"rebrac": BUDGETS["cpu"]["algos"]["rebrac"]["steps"],
                                    "edac": BUDGETS["cpu"]["algos"]["edac"]["steps"]}
    assert record["overrides"]["rebrac"] == {"hidden_dims": "128,128"}
    with pytest.raises(ConfigError, match="--set"):
        _claim_folder(tmp_path, spec("rebrac", overrides={"rebrac": {"hidden_dims": "64,64"}}))
