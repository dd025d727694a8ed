"""``offrl train`` with a model-based algorithm refuses #24's bad inputs in one line with exit 2: a rollout
horizon of 0, fewer ensemble members than elites, a dataset too small for the model's held-out split;
``offrl model report`` refuses a model fitted on data of another shape."""

import numpy as np
import pytest

from offrl.cli import main
from offrl.data.dataset import Dataset
from offrl.data.npz import save_npz


def _file(path, n, obs_dim=2, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1, 1, (n, obs_dim)).astype(np.float32)
    a = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
    timeouts = np.zeros(n, bool)
    timeouts[9::10] = True
    save_npz(Dataset(s, a, s[:, 0].copy(), np.zeros(n, bool), timeouts, (0.9 * s).astype(np.float32),
                     metadata={"action_low": [-1.0], "action_high": [1.0]}), path)
    return str(path)


def _refused(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


@pytest.mark.parametrize("algo", ["mopo", "mobile", "combo"])
def test_train_refuses_bad_model_settings_in_one_line(tmp_path, capsys, algo):
    data = _file(tmp_path / "d.npz", 200)
    tiny = _file(tmp_path / "tiny.npz", 3)
    train = ["train", "--algo", algo, "--steps", "2", "--set", "termination=none"]
    _refused(capsys, [*train, "--dataset", data, "--out", str(tmp_path / "h"), "--set", "rollout_length=0"],
             "rollout_length")
    _refused(capsys, [*train, "--dataset", data, "--out", str(tmp_path / "e"), "--set", "ensemble_size=3",
                      "--set", "num_elites=5"], "num_elites")
    _refused(capsys, [*train, "--dataset", tiny, "--out", str(tmp_path / "t")], "too few")


def test_report_refuses_a_model_of_data_with_other_shapes(tmp_path, capsys):
    data = _file(tmp_path / "d.npz", 200)
    wider = _file(tmp_path / "wide.npz", 200, obs_dim=3)
    assert main(["model", "train", data, "--out", str(tmp_path / "m"), "--set", "ensemble_size=2", "--set", "num_elites=1",
                 "--set", "model_hidden_dims=8", "--set", "model_max_epochs=1", "--set", "termination=none"]) == 0
    capsys.readouterr()
    _refused(capsys, ["model", "report", str(tmp_path / "m"), "--data", wider], "obs_dim")
    _refused(capsys, ["model", "train", wider, "--out", str(tmp_path / "m"), "--resume"], "obs_dim")
