"""One behaviour test applied to every continuous-action algorithm in the registry.

Each algorithm, on a tiny learnable dataset: actions and Q-values have the right shapes and
range, metrics are finite, the main loss falls, parameters change, save -> load gives the
same actions, resuming from a checkpoint equals the uninterrupted run bit for bit, and the
NumPy export matches the JAX policy when the spec declares ``exportable`` (and is refused in
one line when it does not).
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

OBS_DIM, ACTION_DIM, CHUNK = 4, 2, 100


def tiny_config(module):
    fields = {f.name for f in dataclasses.fields(module.Config)}
    overrides = {"batch_size": "32"}
    for name in ("hidden_dims", "actor_hidden_dims", "critic_hidden_dims", "vae_hidden_dims"):
        if name in fields:
            overrides[name] = "32,32"
    for name, value in (("n_actions", "4"), ("bc_warmup_steps", "50"), ("schedule_steps", "1000"),
                        ("warmup_steps", "10"), ("embed_dim", "32"), ("context_length", "5"),
                        ("rollout_starts", "64"), ("rollout_every", "10"), ("model_hidden_dims", "32,32"),
                        ("ensemble_size", "3"), ("num_elites", "2"), ("model_max_epochs", "20"), ("num_qs", "3")):
        if name in fields:
            overrides[name] = value
    # the planners' and samplers' own sizes, so that compiling their act() stays cheap
    for name, value in (("diffusion_steps", "5"), ("unet_dims", "16,32"), ("num_samples", "4"), ("flow_steps", "4"),
                        ("num_bins", "20"), ("beam_width", "4"), ("num_layers", "1")):
        if name in fields:
            overrides[name] = value
    return apply_overrides(module.Config(), overrides)


@pytest.fixture(scope="module")
def tiny_data():
    """512 transitions whose actions are a fixed function of the observation (BC can fit them)."""
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((512, OBS_DIM)).astype(np.float32)
    actions = np.tanh(obs[:, :ACTION_DIM] - 0.5 * obs[:, ACTION_DIM:])
    rewards = (obs[:, 0] - np.sum(actions**2, axis=1)).astype(np.float32)
    terminals = np.zeros(512, bool)
    terminals[::64] = True
    return Dataset.from_arrays(obs, actions, rewards, terminals, next_observations=np.roll(obs, -1, axis=0))


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


#: every continuous algorithm; this file tests the even-indexed half and
#: ``test_algorithm_behaviour_second_half.py`` the rest, so that xdist (``--dist loadfile``)
#: runs the two halves on two workers.
CONTINUOUS = sorted(algorithm_names(action_space="continuous"))


@pytest.mark.parametrize("name", CONTINUOUS[0::2])
def test_algorithm_behavior(name, tiny_data, tmp_path):
    check_algorithm_behavior(name, tiny_data, tmp_path)


def check_algorithm_behavior(name, tiny_data, tmp_path):
    module = get_algorithm(name)
    config = tiny_config(module)
    data, info = engine.prepare_data(tiny_data, config, None, module)
    agents, data_keys = engine.create_agents(module, config, OBS_DIM, ACTION_DIM, seed=0, seeds=1)
    agent0 = jax.tree_util.tree_map(lambda x: x[0], agents)

    obs = np.asarray(data["observations"][:7])
    actions = np.asarray(module.act(agent0, obs))
    assert actions.shape == (7, ACTION_DIM) and np.all(np.abs(actions) <= 1.0)
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

    loss_key = "critic_loss" if "critic_loss" in m1 else "actor_loss"
    early = float(np.mean(np.asarray(m1[loss_key])[0, :10]))
    late = float(np.mean(np.asarray(m2[loss_key])[0, -10:]))
    assert late < early, f"{name}: {loss_key} did not fall ({early:.4f} -> {late:.4f})"

    changed = [not np.array_equal(a, b) for a, b in zip(_leaves(agents.actor.params), _leaves(second.actor.params))]
    assert all(changed), f"{name}: some actor parameters did not change"

    # save -> load gives the same actions, and resuming equals the uninterrupted run
    fresh, fresh_keys = engine.create_agents(module, config, OBS_DIM, ACTION_DIM, seed=123, seeds=1)
    restored = load_checkpoint(tmp_path / f"step_{CHUNK}.msgpack", {"agent": fresh, "data_keys": fresh_keys})
    restored_agents = jax.tree_util.tree_map(jax.numpy.asarray, restored["agent"])
    one = lambda t: jax.tree_util.tree_map(lambda x: x[0], t)  # noqa: E731
    np.testing.assert_array_equal(module.act(one(restored_agents), obs), module.act(one(first), obs))
    resumed, _ = trainer.run(restored_agents, jax.numpy.asarray(restored["data_keys"]), data, CHUNK)
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(resumed), _leaves(second)))

    # NumPy export of the deterministic policy, or a one-line refusal where the spec says so
    from offrl.checkpoint import export_numpy_policy
    from offrl.errors import ConfigError

    run = engine.Run(None, name, config, {"seeds": 1}, info, second)
    if not algorithm_spec(module).exportable:
        with pytest.raises(ConfigError, match=f"does not support {name}") as refused:
            export_numpy_policy(run, tmp_path / "export")
        assert "\n" not in str(refused.value) and not (tmp_path / "export").exists()
        return
    from offrl.policy import load_numpy_policy

    policy = load_numpy_policy(export_numpy_policy(run, tmp_path / "export"))
    np.testing.assert_allclose(policy(obs), run.act(obs), rtol=1e-4, atol=1e-5)
