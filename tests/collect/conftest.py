import pytest


@pytest.fixture(scope="session")
def pendulum_zoo(tmp_path_factory):
    """A tiny Pendulum zoo: 600 SAC steps (64x64 networks), snapshots every 150 (shared by the tier tests)."""
    from offrl.collect.sac import SACConfig
    from offrl.collect.train import TrainBehaviorConfig, train_behavior

    out = tmp_path_factory.mktemp("zoo") / "pendulum"
    config = TrainBehaviorConfig(steps=600, start_steps=100, update_every=50, snapshot_every=150, eval_episodes=2, seed=0)
    train_behavior("Pendulum-v1", out, config, sac_config=SACConfig(hidden_dims=(64, 64)), command="test fixture", progress=False)
    return out
