"""One behaviour test applied to every discrete-action algorithm (spec ``action_space="discrete"``).

On a tiny learnable dataset with 3 actions: integer actions of the right shape and range,
Q-values of shape (B,), finite metrics, the main loss falls, every network's parameters
change, save -> load gives the same actions, resume equals the uninterrupted run bit for bit,
the NumPy export (argmax over an MLP) matches the JAX policy; plus the family check in
prepare_data.
"""

import dataclasses

import jax
import numpy as np
import pytest

from offrl import engine
from offrl.algos import algorithm_names, algorithm_spec, get_algorithm
from offrl.algos.common import apply_overrides
from offrl.checkpoint import load_checkpoint, save_checkpoint
from offrl.data import Dataset
from offrl.errors import ConfigError

OBS_DIM, NUM_ACTIONS, CHUNK = 4, 3, 100
DISCRETE = sorted(algorithm_names(action_space="discrete"))


def tiny_config(module):
    fields = {f.name for f in dataclasses.fields(module.Config)}
    overrides = {"batch_size": "32", "hidden_dims": "32,32"}
    return apply_overrides(module.Config(), {k: v for k, v in overrides.items() if k in fields})


@pytest.fixture(scope="module")
def tiny_data():
    """512 transitions whose action is the argmax of the first three observation entries."""
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((512, OBS_DIM)).astype(np.float32)
    actions = obs[:, :NUM_ACTIONS].argmax(1)
    rewards = (actions == 0).astype(np.float32) + 0.1 * obs[:, 3]
    terminals = np.zeros(512, bool)
    terminals[::64] = True
    return Dataset.from_arrays(obs, actions[:, None], rewards, terminals, next_observations=np.roll(obs, -1, axis=0),
                               metadata={"num_actions": NUM_ACTIONS})


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_the_family_is_registered():
    assert set(DISCRETE) >= {"discrete_bc", "dqn", "double_dqn", "discrete_cql", "discrete_bcq", "discrete_iql"}


@pytest.mark.parametrize("name", DISCRETE)
def test_discrete_algorithm_behavior(name, tiny_data, tmp_path):
    module = get_algorithm(name)
    config = tiny_config(module)
    data, info = engine.prepare_data(tiny_data, config, None, module)
    assert info.discrete and info.num_actions == NUM_ACTIONS and info.action_dim == NUM_ACTIONS
    assert data["actions"].dtype == np.int32 and data["actions"].shape == (512,)
    agents, data_keys = engine.create_agents(module, config, OBS_DIM, info.action_dim, seed=0, seeds=1)
    agent0 = jax.tree_util.tree_map(lambda x: x[0], agents)

    obs = np.asarray(data["observations"][:7])
    actions = np.asarray(module.act(agent0, obs))
    assert actions.shape == (7,) and np.issubdtype(actions.dtype, np.integer)
    assert np.all((actions >= 0) & (actions < NUM_ACTIONS))
    q = module.q_value(agent0, obs, actions)
    assert q is None or np.asarray(q).shape == (7,)

    trainer = engine.Trainer(module, config.batch_size, seeds=1)
    first, m1 = trainer.run(agents, data_keys, data, CHUNK)
    save_checkpoint(tmp_path, {"agent": first, "data_keys": data_keys}, CHUNK)
    second, m2 = trainer.run(first, data_keys, data, CHUNK)
    for metrics in (m1, m2):
        for key, values in metrics.items():
            assert np.isfinite(np.asarray(values)).all(), f"{name}: metric {key} is not finite"
    assert int(np.asarray(second.step)[0]) == 2 * CHUNK

    loss_key = "actor_loss" if "critic_loss" not in m1 else "critic_loss"
    early, late = float(np.mean(np.asarray(m1[loss_key])[0, :10])), float(np.mean(np.asarray(m2[loss_key])[0, -10:]))
    assert late < early, f"{name}: {loss_key} did not fall ({early:.4f} -> {late:.4f})"
    for field in ("actor", "critic", "behavior", "value"):
        if hasattr(agents, field):
            before, after = _leaves(getattr(agents, field).params), _leaves(getattr(second, field).params)
            assert all(not np.array_equal(a, b) for a, b in zip(before, after)), f"{name}: {field} did not change"

    fresh, fresh_keys = engine.create_agents(module, config, OBS_DIM, info.action_dim, seed=123, seeds=1)
    restored = load_checkpoint(tmp_path / f"step_{CHUNK}.msgpack", {"agent": fresh, "data_keys": fresh_keys})
    restored_agents = jax.tree_util.tree_map(jax.numpy.asarray, restored["agent"])
    one = lambda t: jax.tree_util.tree_map(lambda x: x[0], t)  # noqa: E731
    np.testing.assert_array_equal(module.act(one(restored_agents), obs), module.act(one(first), obs))
    resumed, _ = trainer.run(restored_agents, jax.numpy.asarray(restored["data_keys"]), data, CHUNK)
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(resumed), _leaves(second)))

    run = engine.Run(None, name, config, {"seeds": 1}, info, second)
    from offrl.checkpoint import export_numpy_policy
    from offrl.policy import load_numpy_policy

    if not algorithm_spec(module).exportable:  # discrete BCQ's greedy action also needs its behaviour model
        with pytest.raises(ConfigError, match=f"does not support {name}"):
            export_numpy_policy(run, tmp_path / "export")
        return

    policy = load_numpy_policy(export_numpy_policy(run, tmp_path / "export"))
    np.testing.assert_array_equal(policy(obs), run.act(obs).reshape(-1))


@pytest.mark.parametrize("algo,expected", [("iql", "discrete one: discrete_bc"), ("bc", "discrete one")])
def test_a_continuous_algorithm_on_discrete_data_names_the_family(tiny_data, algo, expected):
    module = get_algorithm(algo)
    with pytest.raises(ConfigError, match=expected):
        engine.prepare_data(tiny_data, module.Config(), None, module)


def test_a_discrete_algorithm_on_continuous_data_names_the_family():
    rng = np.random.default_rng(0)
    ds = Dataset.from_arrays(rng.standard_normal((20, 3)), rng.uniform(-1, 1, (20, 2)), np.zeros(20), np.zeros(20, bool))
    module = get_algorithm("dqn")
    with pytest.raises(ConfigError, match="continuous one: bc, td3"):
        engine.prepare_data(ds, module.Config(), None, module)


@pytest.mark.parametrize("actions,match", [
    ([0, 1, 2, 1.5], "row 3 is 1.5, not an integer"),
    ([0, 1, 3, 1], "row 2 is 3, outside the 3 discrete actions 0..2"),
    ([0, -1, 2, 1], "row 1 is -1, outside"),
])
def test_bad_discrete_actions_are_one_sentence(actions, match):
    from offrl.errors import DatasetError

    ds = Dataset.from_arrays(np.zeros((4, 2)), np.asarray(actions)[:, None], np.zeros(4), np.arange(4) == 3,
                             metadata={"num_actions": 3})
    with pytest.raises(DatasetError, match=match):
        engine.prepare_data(ds, get_algorithm("dqn").Config(), None, get_algorithm("dqn"))


def test_env_with_another_number_of_actions_is_refused():
    from offrl.errors import DatasetError

    ds = Dataset.from_arrays(np.zeros((4, 4)), np.asarray([[0], [1], [2], [1]]), np.zeros(4), np.zeros(4, bool),
                             metadata={"num_actions": 3})
    with pytest.raises(DatasetError, match="3 discrete actions .* 'CartPole-v1' has 2"):
        engine.prepare_data(ds, get_algorithm("dqn").Config(), "CartPole-v1", get_algorithm("dqn"))
    with pytest.raises(DatasetError, match="continuous Box action space"):
        engine.prepare_data(ds, get_algorithm("dqn").Config(), "Pendulum-v1", get_algorithm("dqn"))
