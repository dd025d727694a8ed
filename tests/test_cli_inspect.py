"""``offrl inspect`` through ``offrl.cli.main``: tables, --json, --report, --list and clean errors."""

import json

import numpy as np
import pytest

import offrl.data as data
from offrl.cli import main
from offrl.data import Dataset


def _dataset(n_episodes=12, steps=30, seed=0, action_shift=0.0):
    rng = np.random.default_rng(seed)
    n = n_episodes * steps
    seq = rng.normal(size=(n + 1, 4)).astype(np.float32)
    tout = np.zeros(n, bool)
    tout[steps - 1::steps] = True
    return Dataset.from_arrays(seq[:-1], rng.uniform(-1, 1, size=(n, 2)) + action_shift, rng.normal(size=n),
                               np.zeros(n, bool), tout, seq[1:],
                               metadata={"env_id": "Hopper-v5", "action_low": [-1.0, -1.0], "action_high": [1.0, 1.0]})


def test_inspect_prints_tables(tmp_path, capsys):
    path = data.save(_dataset(), tmp_path / "d.hdf5")
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Episode returns" in out and "estimated tier: random" in out and "recommendation: CQL" in out


def test_inspect_json_parses(tmp_path, capsys):
    path = data.save(_dataset(), tmp_path / "d.npz")
    assert main(["inspect", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["transitions"] == 360 and report["episodes"] == 12
    assert report["tier"]["estimate"] == "random" and report["recommendation"]["algorithm"] == "CQL"


def test_inspect_report_writes_plots_and_summary(tmp_path, capsys):
    path = data.save(_dataset(), tmp_path / "d-v0")
    assert main(["inspect", str(path), "--report", str(tmp_path / "rep")]) == 0
    for name in ("returns.png", "actions.png", "states.png", "summary.md", "report.json"):
        assert (tmp_path / "rep" / name).stat().st_size > 0
    assert "report written to" in capsys.readouterr().out


def test_inspect_by_registered_name_and_list(capsys):
    data.register(_dataset(), "tiny-random-v0")
    assert main(["inspect", "--list"]) == 0
    assert "tiny-random-v0" in capsys.readouterr().out
    assert main(["inspect", "tiny-random-v0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 12


def test_out_of_bounds_actions_print_a_warning_line(tmp_path, capsys):
    path = data.save(_dataset(action_shift=0.5), tmp_path / "oob.hdf5")
    assert main(["inspect", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert "offrl: warning:" in captured.err and "outside the action bounds" in captured.err
    assert json.loads(captured.out)["action_coverage"]["out_of_bounds"] > 0


@pytest.mark.parametrize("content", [b"", b"not hdf5 at all", b"\x89HDF\r\n\x1a\n" + b"\x00" * 40])
def test_bad_file_exits_2_with_one_line(tmp_path, capsys, content):
    path = tmp_path / "bad.hdf5"
    path.write_bytes(content)
    assert main(["inspect", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("offrl: error: ") and str(path) in lines[0]
    assert "Traceback" not in captured.err and captured.out == ""


def test_nan_row_exits_2_naming_key_and_row(tmp_path, capsys):
    ds = _dataset()
    arrays = {k: v.copy() for k, v in ds.arrays().items()}
    arrays["rewards"][17] = np.nan
    np.savez(tmp_path / "nan.npz", **arrays)
    assert main(["inspect", str(tmp_path / "nan.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'rewards'" in err and "row 17" in err


def test_unknown_name_and_missing_argument(capsys):
    assert main(["inspect", "no-such-dataset-v0"]) == 2
    assert "offrl collect dataset" in capsys.readouterr().err
    assert main(["inspect"]) == 2
    assert "needs a DATASET" in capsys.readouterr().err


def test_debug_shows_the_traceback(tmp_path):
    path = tmp_path / "bad.hdf5"
    path.write_bytes(b"junk")
    with pytest.raises(data.DatasetError):
        main(["--debug", "inspect", str(path)])
