"""Model-based algorithms on the bundled Pendulum data: the dynamics ensemble fits it."""

import jax
import numpy as np

from offrl import data, dynamics as dyn, engine
from offrl.algos import get_algorithm
from offrl.algos.common import apply_overrides


def test_the_ensemble_predicts_held_out_pendulum_transitions():
    """One-step error of the elites' mean on held-out rows, in the env's units, and the registered
    (never-terminating) Pendulum termination chosen from the dataset's env id."""
    module = get_algorithm("mopo")
    dataset = data.load("pendulum-medium-v0")
    config = apply_overrides(module.Config(), {"ensemble_size": "4", "num_elites": "3", "model_hidden_dims": "64,64",
                                               "model_max_epochs": "40"})
    arrays, info = engine.prepare_data(dataset, config, dataset.metadata["env_id"], module)
    config = module.config_for_dataset(config, dataset, info)
    assert config.termination == "pendulum"
    train = {k: v[:8000] for k, v in arrays.items()}
    test = {k: v[8000:] for k, v in arrays.items()}
    model = dyn.init_dynamics(config, info.obs_dim, info.action_dim, jax.random.PRNGKey(0))
    model, report = jax.jit(dyn.fit_dynamics)(model, train, jax.random.PRNGKey(1))
    mean, _, _ = dyn.predict(model, test["observations"], test["actions"])
    elite = mean[model.elites].mean(0)
    state_error = np.abs(np.asarray(test["observations"] + elite[:, :-1] - test["next_observations"]))
    reward_error = np.abs(np.asarray(elite[:, -1] - test["rewards"]))
    # cos, sin in [-1, 1], angular velocity in [-8, 8], reward in [-16.3, 0]
    assert state_error[:, :2].mean() < 0.02 and state_error[:, 2].mean() < 0.1, state_error.mean(0)
    assert reward_error.mean() < 0.2, reward_error.mean()  # about 1% of the reward range
