"""The engine's shared rules: action bounds precedence, renamed config fields, the run folder's
resume truncation and finite check."""

import json
import math
import warnings

import numpy as np
import pytest

from offrl.algos import cql, iql
from offrl.algos.common import apply_overrides, config_from_dict
from offrl.data import Dataset
from offrl.data.checks import action_bounds
from offrl.engine import prepare_data
from offrl.run_folder import first_non_finite, truncate_metrics


def _pendulum_like(actions, metadata=None):
    n = len(actions)
    obs = np.zeros((n, 3), np.float32)
    ds = Dataset.from_arrays(obs, np.asarray(actions, np.float32).reshape(n, 1), np.zeros(n, np.float32),
                             np.zeros(n, bool), next_observations=obs)
    return ds.replace(metadata=dict(metadata or {}))


def test_action_bounds_precedence_metadata_then_env_then_data():
    actions = np.array([-0.5, 0.25, 0.5])
    # metadata beats the env (Pendulum-v1's box is [-2, 2]) and the data
    ds = _pendulum_like(actions, {"action_low": [-4.0], "action_high": [4.0], "env_id": "Pendulum-v1"})
    assert [float(b[0]) for b in action_bounds(ds, "Pendulum-v1", from_data=True)] == [-4.0, 4.0]
    # the env's box beats the data
    ds = _pendulum_like(actions, {"env_id": "Pendulum-v1"})
    assert [float(b[0]) for b in action_bounds(ds, from_data=True)] == [-2.0, 2.0]
    # nothing known: None for the doctor, the data's box for the engine
    ds = _pendulum_like(actions)
    assert action_bounds(ds) is None
    assert [float(b[0]) for b in action_bounds(ds, from_data=True)] == [-1.0, 1.0]
    ds = _pendulum_like([-3.0, 1.0, 2.0])
    assert [float(b[0]) for b in action_bounds(ds, from_data=True)] == [-3.0, 2.0]
    # the engine rescales with the same rule: metadata's [-4, 4] maps 0.5 to 0.125
    ds = _pendulum_like(actions, {"action_low": [-4.0], "action_high": [4.0]})
    data, info = prepare_data(ds, iql.Config(reward_scaling="none"), env_id="Pendulum-v1")
    assert info.action_low == [-4.0] and float(data["actions"][2, 0]) == pytest.approx(0.125)


def test_renamed_fields_are_accepted_with_a_warning():
    with pytest.warns(FutureWarning, match="now called 'awr_inverse_temperature'"):
        config = apply_overrides(iql.Config(), {"temperature": "10"})
    assert config.awr_inverse_temperature == 10.0
    with pytest.warns(FutureWarning, match="logsumexp_temperature"):
        old = config_from_dict(cql.Config, {"cql_temperature": 2.0, "temperature_lr": 1e-3})
    assert old.logsumexp_temperature == 2.0 and old.entropy_alpha_lr == 1e-3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_overrides(iql.Config(), {"awr_inverse_temperature": "1"})


def test_truncate_metrics_keeps_rows_up_to_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": s / 10}) + "\n" for s in (10, 20, 30, 40)))
    rows = truncate_metrics(path, 20)
    assert [r["step"] for r in rows] == [10, 20]
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [10, 20]


def test_first_non_finite_finds_the_earliest_step():
    metrics = {"a": np.array([[0.0, 1.0, np.inf], [0.0, 0.0, 0.0]]), "b": np.array([[0.0, 0.0, 0.0], [0.0, np.nan, 0.0]])}
    name, index, value = first_non_finite(metrics)
    assert name == "b" and index == (1, 1) and math.isnan(value)
    assert first_non_finite({"a": np.zeros((2, 3))}) is None
    assert first_non_finite({"loss": float("inf"), "x": 1.0})[0] == "loss"
