"""Every config field of every algorithm declares its valid values, and every out-of-range value
is refused before anything runs, with one line naming the field, the value and the range."""

import dataclasses
import math

import numpy as np
import pytest

from offrl import data as offrl_data
from offrl.algos import ALGORITHMS
from offrl.algos.common import apply_overrides, config_from_dict, config_to_dict
from offrl.config import VALID, Interval, OneOf, OrNone, RewardScaling, Widths, check_config
from offrl.cli import main
from offrl.data import Dataset
from offrl.errors import ConfigError

FIELDS = [(name, f.name) for name, module in sorted(ALGORITHMS.items()) for f in dataclasses.fields(module.Config)]


def out_of_range_values(spec) -> list:
    """Values that ``spec`` must refuse (built from the spec, so a new field is covered too)."""
    if isinstance(spec, OrNone):
        return out_of_range_values(spec.spec)
    if hasattr(spec, "invalid_examples"):  # a spec defined beside its algorithm (e.g. TT's fitted bin edges)
        return list(spec.invalid_examples)
    if isinstance(spec, Interval):
        bad = ["abc", math.nan, math.inf]
        if math.isfinite(spec.low):
            bad.append(spec.low if spec.ends[0] == "(" else spec.low - 1)
        if math.isfinite(spec.high):
            bad.append(spec.high if spec.ends[1] == ")" else spec.high + 1)
        if spec.integer:
            bad.append(max(spec.low, 1) + 0.5)
        return bad
    if isinstance(spec, OneOf):
        return ["nonsense", 2] if set(spec.values) == {True, False} else ["nonsense", 1]
    if isinstance(spec, Widths):
        return [(0,), (), (64, -1), 256, (64.5,)]
    if isinstance(spec, RewardScaling):
        return ["0", "-1", "abc", "nan", 1.0]
    raise AssertionError(f"no out-of-range examples for {spec!r}")


def test_the_range_checker_reads_like_a_range():
    assert str(Interval(0.0, 1.0, "()")) == "a number in (0, 1)"
    assert str(Interval(1, math.inf, "[)", integer=True)) == "an integer >= 1"
    assert Interval(0.0, 1.0, "(]").contains(1.0) and not Interval(0.0, 1.0, "(]").contains(0.0)
    assert not Interval(1, math.inf, "[)", integer=True).contains(True)  # a bool is not an integer here
    assert Widths().contains((256, 256)) and not Widths().contains((256, 0))
    assert RewardScaling().contains("returns") and RewardScaling().contains("0.1") and not RewardScaling().contains("-2")


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_field_declares_its_valid_values_and_the_defaults_are_valid(algo):
    config_cls = ALGORITHMS[algo].Config
    undeclared = [f.name for f in dataclasses.fields(config_cls) if VALID not in f.metadata]
    assert not undeclared, f"{algo}.Config fields without a range: {undeclared}"
    check_config(config_cls())
    assert config_from_dict(config_cls, config_to_dict(config_cls())) == config_cls()


@pytest.mark.parametrize("algo,field", FIELDS)
def test_every_field_refuses_out_of_range_values_in_one_line(algo, field):
    config = ALGORITHMS[algo].Config()
    spec = next(f.metadata[VALID] for f in dataclasses.fields(config) if f.name == field)
    for value in out_of_range_values(spec):
        with pytest.raises(ConfigError) as info:
            apply_overrides(config, {field: value}) if not isinstance(value, str) else check_config(
                dataclasses.replace(config, **{field: value}))
        message = str(info.value)
        assert "\n" not in message and f"'{field}'" in message and str(spec) in message, message
        assert f"--set {field}=" in message


def test_string_values_from_the_command_line_are_converted_then_checked():
    from offrl.algos import iql

    for field, value, words in (("expectile", "1.5", "a number in (0, 1)"), ("hidden_dims", "0", "positive integer layer widths"),
                                ("batch_size", "0", "an integer >= 1"), ("discount", "1", "[0, 1)")):
        with pytest.raises(ConfigError, match=field) as info:
            apply_overrides(iql.Config(), {field: value})
        assert words in str(info.value)
    assert apply_overrides(iql.Config(), {"expectile": "0.9", "hidden_dims": "64,64"}).hidden_dims == (64, 64)


def test_ordered_fields_are_checked():
    from offrl.algos import awac

    with pytest.raises(ConfigError, match="'log_std_min' .* must be below 'log_std_max'"):
        apply_overrides(awac.Config(), {"log_std_min": "0.5", "log_std_max": "0.0"})


def test_a_run_folder_with_an_out_of_range_config_is_refused_on_load():
    from offrl.algos import bc

    with pytest.raises(ConfigError, match="batch_size"):
        config_from_dict(bc.Config, {**config_to_dict(bc.Config()), "batch_size": 0})


@pytest.fixture(scope="module")
def dataset_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    n = 200
    obs = rng.normal(size=(n + 1, 3)).astype(np.float32)
    ds = Dataset.from_arrays(obs[:-1], rng.uniform(-1, 1, (n, 1)), rng.normal(size=n), np.zeros(n, bool),
                             next_observations=obs[1:], metadata={"env_id": "Pendulum-v1"})
    path = tmp_path_factory.mktemp("data") / "d.npz"
    offrl_data.save(ds, path)
    return path


@pytest.mark.parametrize("setting,needle", [("expectile=1.5", "'expectile' of iql is 1.5; it must be a number in (0, 1)"),
                                            ("hidden_dims=0", "'hidden_dims' of iql is 0; it must be one or more positive"),
                                            ("batch_size=0", "'batch_size' of iql is 0; it must be an integer >= 1")])
def test_train_cli_refuses_out_of_range_values_with_exit_2_and_writes_nothing(tmp_path, dataset_file, capsys, setting, needle):
    out = tmp_path / "run"
    rc = main(["train", "--algo", "iql", "--dataset", str(dataset_file), "--steps", "10", "--out", str(out), "--set", setting])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and needle in err, err
    assert not out.exists()


@pytest.mark.parametrize("argv", [["inspect", "{data}", "--env", "NoSuchEnv-v9"],
                                  ["train", "--algo", "bc", "--dataset", "{data}", "--env", "NoSuchEnv-v9", "--out", "{out}"],
                                  ["evaluate", "{out}", "--env", "NoSuchEnv-v9"],
                                  ["collect", "train-behavior", "--env", "NoSuchEnv-v9", "--out", "{out}"],
                                  ["collect", "dataset", "--env", "NoSuchEnv-v9", "--tier", "medium", "--zoo", "{out}", "--out", "{out}/d.hdf5"]],
                         ids=["inspect", "train", "evaluate", "collect-train", "collect-dataset"])
def test_unknown_env_ids_are_refused_wherever_accepted(tmp_path, dataset_file, capsys, argv):
    out = tmp_path / "never"
    rc = main([a.format(data=dataset_file, out=out) for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0, err
    assert "--env 'NoSuchEnv-v9' is not a registered Gymnasium environment" in err
    assert not out.exists()


def test_a_near_miss_env_id_gets_a_suggestion(dataset_file, capsys):
    assert main(["inspect", str(dataset_file), "--env", "hopper-v5"]) == 2
    assert "did you mean Hopper-v5" in capsys.readouterr().err
