"""Short real runs of the discrete family that learn something (CartPole-v1, scripted expert data)."""

import pytest

from offrl.demos.extrapolation import expert_dataset
from offrl.engine import train


@pytest.fixture(scope="module")
def expert_data():
    return expert_dataset(episodes=2, steps=500, seed=0)


@pytest.mark.parametrize("algo", ["discrete_bc", "discrete_cql"])
def test_learns_to_balance_from_expert_data(algo, expert_data):
    run = train(algo, expert_data, steps=600, eval_every=600, eval_episodes=2, log_every=600, progress=False,
                config_overrides={"hidden_dims": "64,64"})
    assert run.final_returns[0] >= 400, f"{algo}: return {run.final_returns[0]} (random policy: about 20)"
