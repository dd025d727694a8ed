"""offrl train / evaluate / plot / export from the command line, and the NumPy-only policy."""

import json
import subprocess
import sys

import numpy as np
import pytest

from offrl import data as offrl_data
from offrl.cli import main


@pytest.fixture(scope="module")
def dataset_file(tmp_path_factory, pendulum_small):
    path = tmp_path_factory.mktemp("data") / "pendulum.npz"
    offrl_data.save(pendulum_small, path)
    return path


def test_train_evaluate_plot_export_from_the_cli(tmp_path, dataset_file, capsys):
    out = tmp_path / "run"
    rc = main(["train", "--algo", "td3_bc", "--dataset", str(dataset_file), "--steps", "40", "--seeds", "2",
               "--eval-every", "20", "--eval-episodes", "1", "--log-every", "20", "--out", str(out), "--no-progress",
               "--set", "hidden_dims=32,32", "--config.batch_size", "32", "--set", "alpha=3.0"])
    assert rc == 0
    record = json.loads((out / "config.json").read_text())
    assert record["algo"] == "td3_bc" and record["config"]["alpha"] == 3.0 and record["config"]["batch_size"] == 32
    assert record["settings"]["env"] == "Pendulum-v1" and record["settings"]["seeds"] == 2
    printed = capsys.readouterr().out
    assert "±" in printed and "Q / return" in printed

    assert main(["evaluate", str(out), "--episodes", "1"]) == 0
    assert "Pendulum-v1" in capsys.readouterr().out

    assert main(["plot", str(out), "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "q_vs_return.png").stat().st_size > 1000

    assert main(["export", str(out), "--format", "numpy", "--seed", "1"]) == 0
    export = out / "export"
    meta = json.loads((export / "policy.json").read_text())
    assert meta["seed"] == 1 and meta["step"] == 40 and meta["env_id"] == "Pendulum-v1"

    # NumPy alone (no JAX import) reproduces the JAX policy, obs normalisation and action bounds included
    obs = np.asarray(offrl_data.load(str(dataset_file)).observations[:16], np.float64)
    np.save(tmp_path / "obs.npy", obs)
    script = (
        "import sys, numpy as np\n"
        "from offrl.policy import load_numpy_policy\n"
        f"p = load_numpy_policy({str(export)!r})\n"
        f"np.save({str(tmp_path / 'act.npy')!r}, p(np.load({str(tmp_path / 'obs.npy')!r})))\n"
        "assert 'jax' not in sys.modules, 'the NumPy policy imported JAX'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    numpy_actions = np.load(tmp_path / "act.npy")
    from offrl.engine import load_run

    jax_actions = load_run(out).act(obs.astype(np.float32), seed=1)
    np.testing.assert_allclose(numpy_actions, jax_actions, rtol=1e-4, atol=1e-5)
    assert np.all(np.abs(numpy_actions) <= 2.0) and np.abs(numpy_actions).max() > 0  # Pendulum bounds are [-2, 2]


def test_bad_config_field_is_one_line_and_exit_code_2(tmp_path, dataset_file, capsys):
    rc = main(["train", "--algo", "iql", "--dataset", str(dataset_file), "--steps", "10", "--out", str(tmp_path / "x"),
               "--set", "expectil=0.8"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and "expectil" in err and "valid fields:" in err and "expectile" in err
    rc = main(["train", "--algo", "iql", "--dataset", str(dataset_file), "--steps", "10", "--out", str(tmp_path / "y"),
               "--set", "expectile=high"])
    assert rc == 2 and "expectile" in capsys.readouterr().err
    assert main(["train", "--algo", "nope", "--dataset", str(dataset_file), "--out", str(tmp_path / "z")]) == 2
    assert "unknown algorithm 'nope'" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path / "missing")]) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_misspelt_config_flag_names_the_field_and_lists_the_algorithms_fields(capsys):
    rc = main(["train", "--algo", "td3_bc", "--dataset", "unused.npz", "--config.alpah", "3.0"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "unknown config field 'alpah'" in err and "--config.alpah" in err
    # TD3+BC's own field and the fields it inherits from TD3's config are both listed; IQL's are not
    assert "alpha" in err and "policy_noise" in err and "expectile" not in err


def test_other_unknown_flags_still_get_argparses_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--algo", "iql", "--stepz", "3"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --stepz 3" in capsys.readouterr().err
