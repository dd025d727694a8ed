"""``offrl demo``: each demo's qualitative claim on its default settings (slow), and the command's wiring."""

import json

import numpy as np
import pytest

from offrl.demos.common import cartpole_expert, rollout


def test_the_scripted_expert_balances_cartpole():
    out = rollout(cartpole_expert, episodes=3, seed=0)
    assert np.all(out["lengths"] == 500)


def test_demo_command_is_registered(capsys):
    from offrl.cli import main

    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "extrapolation" in capsys.readouterr().out


@pytest.mark.slow
def test_extrapolation_demo_naive_dqn_runs_away_and_cql_stays_below(tmp_path):
    from offrl.demos import extrapolation

    result = extrapolation.run(out=tmp_path)
    dqn, cql = result["curves"]["dqn"], result["curves"]["discrete_cql"]
    assert dqn["q_estimate"][-1] > 10 * dqn["discounted_return"][-1]      # the naive estimate runs away
    assert dqn["q_estimate"][-1] > dqn["q_estimate"][0]
    assert cql["q_estimate"][-1] <= cql["discounted_return"][-1]          # CQL's sits below its return
    assert cql["return"][-1] > dqn["return"][-1]
    saved = json.loads((tmp_path / "extrapolation.json").read_text())
    assert saved["verdict"] == result["verdict"] and (tmp_path / "extrapolation.png").stat().st_size > 0
