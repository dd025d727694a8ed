import pytest


@pytest.fixture(scope="session")
def pendulum_zoo(tmp_path_factory):
    """A small Pendulum zoo: 2000 SAC steps (64x64 networks, lr 1e-3), snapshots every 500.

    The last snapshot beats the random actor (about -800 vs -1070), so every tier is defined.
    """
    from offrl.algos import sac
    from offrl.collect.train import TrainBehaviorConfig, train_behavior

    out = tmp_path_factory.mktemp("zoo") / "pendulum"
    config = TrainBehaviorConfig(steps=2000, start_steps=100, update_every=50, snapshot_every=500, eval_episodes=2, seed=0)
    train_behavior("Pendulum-v1", out, config, sac_config=sac.Config(hidden_dims=(64, 64), actor_lr=1e-3, critic_lr=1e-3, entropy_alpha_lr=1e-3), command="test fixture", progress=False)
    return out
