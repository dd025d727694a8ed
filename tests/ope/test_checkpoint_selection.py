"""Every kept checkpoint is a candidate: ``train(keep_checkpoints=True)``, ``load_run(step=)``,
``offrl select RUN`` over checkpoints, ``offrl train --select-by`` and ``--selected``."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from offrl.cli import main
from offrl.data import save
from offrl.errors import OffrlError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))

from pendulum_data import make_pendulum_dataset, swing_up_action  # noqa: E402

NOISE = 1.0
TINY = ["--set", "hidden_dims=32,32", "--set", "batch_size=32"]
FAST = ["--fqe-steps", "50", "--bootstrap", "20"]


@pytest.fixture(scope="module")
def pendulum_file(tmp_path_factory):
    """3 noisy swing-up episodes with the behaviour's Gaussian log-densities logged (clipping ignored)."""
    ds = make_pendulum_dataset(episodes=3, noise=NOISE, seed=1)
    mean = np.array([swing_up_action(o) for o in ds.observations], np.float64)
    z = (ds.actions - mean) / NOISE
    logp = (-0.5 * z**2 - np.log(NOISE) - 0.5 * np.log(2 * np.pi)).sum(1)
    ds = ds.replace(infos={"action_log_probs": logp.astype(np.float32)})
    return str(save(ds, tmp_path_factory.mktemp("data") / "pendulum.hdf5"))


@pytest.fixture(scope="module")
def kept_run(pendulum_file, tmp_path_factory):
    from offrl.engine import train

    out = tmp_path_factory.mktemp("runs") / "bc"
    train("bc", pendulum_file, steps=300, eval_every=100, eval_episodes=0, log_every=100, out=out, progress=False,
          config_overrides={"hidden_dims": "32,32", "batch_size": "32"}, keep_checkpoints=True)
    return out


def test_checkpoints_are_kept_and_load_by_step(kept_run, pendulum_file, tmp_path):
    from offrl.checkpoint import checkpoint_steps
    from offrl.engine import load_run, train

    assert checkpoint_steps(kept_run / "checkpoints") == [100, 200, 300]
    obs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 2.0]], np.float32)
    latest, first = load_run(kept_run), load_run(kept_run, step=100)
    assert first.step == 100 and load_run(kept_run, step=200).step == 200 and latest.step == 300
    np.testing.assert_array_equal(load_run(kept_run, step=300).act(obs), latest.act(obs))
    assert not np.allclose(first.act(obs), latest.act(obs))
    with pytest.raises(OffrlError, match="no checkpoint at step 150; the kept steps are: 100, 200, 300"):
        load_run(kept_run, step=150)
    # Without the option only the latest survives: one candidate.
    plain = tmp_path / "plain"
    train("bc", pendulum_file, steps=200, eval_every=100, eval_episodes=0, log_every=100, out=plain, progress=False,
          config_overrides={"hidden_dims": "32,32", "batch_size": "32"})
    assert checkpoint_steps(plain / "checkpoints") == [200]
    from offrl.ope.policies import load_policies

    assert [p.name for p in load_policies([plain, kept_run])] == ["plain", "bc@100", "bc@200", "bc@300"]
    assert [p.name for p in load_policies([f"{kept_run}@200"])] == ["bc@200"]


def test_a_resumed_run_keeps_checkpoints_as_it_was_started(pendulum_file, tmp_path):
    from offrl.checkpoint import checkpoint_steps
    from offrl.engine import train

    out, tiny = tmp_path / "resumed", {"hidden_dims": "32,32", "batch_size": "32"}
    common = dict(steps=300, eval_every=100, eval_episodes=0, log_every=100, out=out, progress=False, config_overrides=tiny)
    train("bc", pendulum_file, stop_at=200, keep_checkpoints=True, **common)
    assert checkpoint_steps(out / "checkpoints") == [100, 200]
    train("bc", pendulum_file, resume=True, **common)          # no flag: the run's own setting holds
    assert checkpoint_steps(out / "checkpoints") == [100, 200, 300]


def test_select_ranks_every_kept_checkpoint(kept_run, pendulum_file, tmp_path, capsys):
    out = tmp_path / "sel"
    assert main(["select", str(kept_run), "--dataset", pendulum_file, "--by", "wis", "--out", str(out), *FAST]) == 0
    payload = json.loads((out / "ope.json").read_text())
    assert payload["policies"] == ["bc@100", "bc@200", "bc@300"]
    wis = {r["policy"]: r["estimate"] for r in payload["rows"]}
    assert payload["selected"] == max(wis, key=wis.get)
    assert "selected: bc@" in capsys.readouterr().out


def test_select_checkpoint_api_with_fqe_picks_the_argmax(kept_run):
    from offrl.ope.evaluate import OPEConfig
    from offrl.ope.fqe import FQEConfig
    from offrl.ope.select import select_checkpoint

    record = select_checkpoint(kept_run, "fqe", config=OPEConfig(fqe_steps=50, num_bootstrap=20, fqe=FQEConfig(hidden_dims=(32, 32))))
    estimates = {c["step"]: c["estimate"] for c in record["candidates"]}
    assert sorted(estimates) == [100, 200, 300] and record["by"] == "fqe"
    assert record["step"] == max(estimates, key=estimates.get)
    assert all(c["ci_low"] <= c["estimate"] <= c["ci_high"] for c in record["candidates"])
    assert json.loads((kept_run / "selected.json").read_text())["step"] == record["step"]
    from offrl.ope.select import tie_message

    assert record["near_tie"] == tie_message(record["candidates"], "fqe")


def _report(rows):
    from offrl.ope.estimators import OPEResult
    from offrl.ope.evaluate import OPEReport

    results = {name: {"dr": OPEResult("dr", e, lo, hi, "t", 0.95, 10.0, 0.1, 50, False, False)} for name, e, lo, hi in rows}
    return OPEReport([r[0] for r in rows], results, False, {r[0]: "x" for r in rows}, {r[0]: {} for r in rows}, {})


def test_near_tie_says_by_how_much_in_one_line():
    from offrl.ope.select import choose, near_tie

    # a@1 leads b@2 by 5.0 - 4.2 = 0.8; intervals [4, 6] and [3, 4.5] overlap on [4, 4.5]: 0.5
    report = _report([("b@2", 4.2, 3.0, 4.5), ("a@1", 5.0, 4.0, 6.0), ("c@3", 1.0, 0.0, 2.0)])
    assert choose(report, "dr") == "a@1"
    line = near_tie(report, "dr")
    assert line == ("near-tie: a@1 (dr 5.00, CI [4.00, 6.00]) leads b@2 (4.20, CI [3.00, 4.50]) by 0.80, "
                    "but the intervals overlap by 0.50; the data do not separate them.")
    assert near_tie(_report([("a@1", 5.0, 4.6, 6.0), ("b@2", 4.2, 3.0, 4.5)]), "dr") is None     # clear by 0.1
    assert near_tie(_report([("a@1", 5.0, 4.5, 6.0), ("b@2", 4.2, 3.0, 4.5)]), "dr").endswith("overlap by 0.00; the data do not separate them.")
    assert near_tie(_report([("a@1", 5.0, 4.0, 6.0)]), "dr") is None
    assert near_tie(_report([("a@1", 5.0, float("nan"), float("nan")), ("b@2", 4.0, float("nan"), float("nan"))]), "dr") is None


def test_train_select_by_writes_selected_json_and_export_uses_it(pendulum_file, tmp_path, capsys):
    run = tmp_path / "run"
    rc = main(["train", "--algo", "bc", "--dataset", pendulum_file, "--steps", "300", "--eval-every", "100",
               "--log-every", "100", "--eval-episodes", "0", "--out", str(run), "--no-progress", "--select-by", "wis", *TINY])
    assert rc == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("selected:")]
    assert len(line) == 1 and "of 3 checkpoints by wis" in line[0]
    record = json.loads((run / "selected.json").read_text())
    estimates = {c["step"]: c["estimate"] for c in record["candidates"]}
    assert sorted(estimates) == [100, 200, 300] and record["by"] == "wis"
    assert record["step"] == max(estimates, key=estimates.get)
    assert {"ci_low", "ci_high", "ess"} <= set(record["candidates"][0])
    assert main(["export", str(run), "--selected", "--out", str(tmp_path / "exp")]) == 0
    assert json.loads((tmp_path / "exp" / "policy.json").read_text())["step"] == record["step"]
    assert main(["evaluate", str(run), "--selected", "--episodes", "1"]) == 0
    # rich wraps the table's title at the terminal's width (a long tmp path under xdist): compare words
    assert f"at step {record['step']}" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("case", ["unknown_estimator", "missing_step", "missing_step_select", "no_selection"])
def test_bad_input_is_one_line_and_exit_2(case, kept_run, pendulum_file, tmp_path, capsys):
    if case == "unknown_estimator":
        out = tmp_path / "never"
        args = ["train", "--algo", "bc", "--dataset", pendulum_file, "--steps", "10", "--out", str(out), "--select-by", "magic"]
        expect = "--select-by 'magic' is not an estimator; choose one of fqe"
    elif case == "missing_step":
        args = ["export", str(kept_run), "--step", "999", "--out", str(tmp_path / "exp")]
        expect = "no checkpoint at step 999; the kept steps are: 100, 200, 300"
    elif case == "missing_step_select":
        args = ["select", f"{kept_run}@999", "--dataset", pendulum_file, "--by", "wis"]
        expect = "no checkpoint at step 999"
    else:
        args = ["evaluate", str(tmp_path), "--selected"]
        expect = "has no selected.json"
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert expect in err and len(err.splitlines()) == 1, err
    if case == "unknown_estimator":
        assert not (tmp_path / "never").exists()


def test_train_select_by_prints_the_excluded_and_near_tie_lines(monkeypatch, capsys, tmp_path):
    """`offrl train --select-by` prints select's one-line notices after its choice."""
    import types

    import offrl.ope.select as select_module
    from offrl.commands.train import print_selection

    record = {"step": 200, "candidates": [{}, {}, {}], "estimate": 5.0, "ci_low": 4.0, "ci_high": 6.0,
              "estimated_behavior": False, "excluded": "excluded from the choice by fqe: step 100 (FQE diverged at 3000).",
              "near_tie": "near-tie: step 200 leads step 300 by 0.10"}
    monkeypatch.setattr(select_module, "select_checkpoint", lambda path, by, config=None: record)
    print_selection(types.SimpleNamespace(path=tmp_path, config=types.SimpleNamespace(discount=0.99)), "fqe")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("selected: step 200 of 3 checkpoints by fqe = 5.00")
    assert out[1] == record["excluded"] and out[2] == record["near_tie"]
