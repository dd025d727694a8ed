"""``offrl model train`` / ``offrl model report`` (offrl.dynamics_folder): a resumed fit equals the
uninterrupted one, the report's numbers on a known linear system, and the bad-input sentences (exit 2)."""

import json

import numpy as np
import pytest

from offrl import dynamics_folder
from offrl.checkpoint import latest_checkpoint
from offrl.cli import main
from offrl.data.dataset import Dataset
from offrl.data.npz import save_npz

A = np.array([[0.9, 0.1], [-0.2, 0.8]], np.float32)
B = np.array([[0.5], [0.3]], np.float32)
TINY = ["--set", "ensemble_size=3", "--set", "num_elites=2", "--set", "model_hidden_dims=32,32",
        "--set", "termination=none"]


def linear_file(path, n=800, seed=0, noise=0.01, scale=1.0):
    """``s' = A s + B a + noise``, ``r = s_0 - a_0 / 2`` on ``s ~ U[-scale, scale]``, ``a ~ U[-1, 1]``."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-scale, scale, (n, 2)).astype(np.float32)
    a = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
    s2 = (s @ A.T + a @ B.T + noise * rng.standard_normal((n, 2))).astype(np.float32)
    r = (s[:, 0] - 0.5 * a[:, 0]).astype(np.float32)
    timeouts = np.zeros(n, bool)
    timeouts[49::50] = True
    save_npz(Dataset(s, a, r, np.zeros(n, bool), timeouts, s2,
                     metadata={"action_low": [-1.0], "action_high": [1.0]}), path)
    return str(path)


def _params(folder):
    from flax import serialization

    from offrl.checkpoint import read_verified

    entry = latest_checkpoint(folder / "checkpoints")
    return entry["step"], serialization.msgpack_restore(read_verified(entry["path"]))


def test_a_killed_fit_resumes_to_the_uninterrupted_one(tmp_path, capsys):
    data = linear_file(tmp_path / "lin.npz")
    config = dynamics_folder.ModelFitConfig(ensemble_size=3, num_elites=2, model_hidden_dims=(32, 32),
                                            termination="none", model_max_epochs=6)
    dynamics_folder.train_model(data, tmp_path / "whole", config, epochs_per_checkpoint=2, progress=lambda m: None)
    record = dynamics_folder.train_model(data, tmp_path / "cut", config, epochs_per_checkpoint=2, stop_after=2,
                                         progress=lambda m: None)
    assert not record["finished"] and _params(tmp_path / "cut")[0] == 2
    assert main(["model", "train", data, "--out", str(tmp_path / "cut"), "--resume", "--epochs-per-checkpoint", "2"]) == 0
    assert json.loads((tmp_path / "cut" / "config.json").read_text())["finished"]
    (step_a, whole), (step_b, cut) = _params(tmp_path / "whole"), _params(tmp_path / "cut")
    assert step_a == step_b == 6
    import jax

    for a, b in zip(jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(cut)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_report_on_a_linear_system(tmp_path, capsys):
    """The ensemble learns s' = A s + B a: held-out RMSE of the state change near the noise (0.01), the
    reward's near 0; the numbers printed are report.json's, and the plot is written."""
    data = linear_file(tmp_path / "lin.npz", n=1500)
    assert main(["model", "train", data, "--out", str(tmp_path / "m"), *TINY]) == 0
    capsys.readouterr()
    assert main(["model", "report", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert report["heldout_rows"] == 300
    assert set(report["rmse"]) == {"ds[0]", "ds[1]", "reward"}
    assert report["rmse"]["ds[0]"] < 0.03 and report["rmse"]["ds[1]"] < 0.03 and report["rmse"]["reward"] < 0.05
    assert f"{report['rmse']['reward']:.4g}" in out and "Spearman" in out
    assert -1.0 <= report["disagreement_error_spearman"] <= 1.0
    assert (tmp_path / "m" / "plots" / "disagreement.png").stat().st_size > 1000
    # the report's RMSE by an independent route: the elites' mean prediction on the held-out rows
    from offrl import dynamics as dyn

    model, arrays, state, _ = dynamics_folder.load_model(tmp_path / "m")
    idx = np.asarray(state.hold_idx)
    mean = np.asarray(dyn.predict(model, arrays["observations"][idx], arrays["actions"][idx])[0])
    reward = mean[np.asarray(model.elites), :, -1].mean(0)
    expected = np.sqrt(np.mean((reward - np.asarray(arrays["rewards"])[idx]) ** 2))
    np.testing.assert_allclose(report["rmse"]["reward"], expected, rtol=1e-5)


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    data = linear_file(tmp_path / "lin.npz", n=400)
    other = linear_file(tmp_path / "other.npz", n=400, seed=3, scale=3.0)  # same shapes, other normalisation
    shorter = linear_file(tmp_path / "short.npz", n=300)
    tiny = linear_file(tmp_path / "tiny.npz", n=3)
    assert main(["model", "train", data, "--out", str(tmp_path / "m"), *TINY, "--set", "model_max_epochs=1"]) == 0
    capsys.readouterr()

    def refused(argv, words):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, err

    refused(["model", "report", str(tmp_path / "m"), "--data", other], "normaliser")
    refused(["model", "report", str(tmp_path / "m"), "--data", shorter], "rows 400")
    refused(["model", "train", other, "--out", str(tmp_path / "m"), "--resume"], "normaliser")
    refused(["model", "train", data, "--out", str(tmp_path / "e"), "--set", "ensemble_size=3", "--set", "num_elites=5"],
            "num_elites")
    refused(["model", "train", tiny, "--out", str(tmp_path / "t"), *TINY], "too few")
    refused(["model", "train", data, "--out", str(tmp_path / "m")], "already holds a model")
    refused(["model", "report", str(tmp_path / "nowhere")], "not a model folder")
