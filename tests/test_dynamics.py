"""The dynamics ensemble (offrl.dynamics): fit on a known linear system, early stopping, rollouts,
termination, the model buffer, the uncertainty measures and the bad-input sentences."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl import dynamics as dyn
from offrl.errors import ConfigError

A = np.array([[0.9, 0.1], [-0.2, 0.8]], np.float32)
B = np.array([[0.5], [0.3]], np.float32)
SMALL = dict(ensemble_size=4, num_elites=3, model_hidden_dims=(32, 32), termination="none")


def linear_data(n=1500, seed=0, noise=0.01):
    """``s' = A s + B a + noise``, ``r = s_0 - a_0 / 2`` on ``s, a ~ U[-1, 1]``."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    a = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
    s2 = s @ A.T + a @ B.T + noise * rng.standard_normal((n, 2)).astype(np.float32)
    r = (s[:, 0] - 0.5 * a[:, 0]).astype(np.float32)
    return {"observations": jnp.asarray(s), "actions": jnp.asarray(a), "rewards": jnp.asarray(r),
            "next_observations": jnp.asarray(s2), "masks": jnp.ones(n)}


@pytest.fixture(scope="module")
def fitted():
    settings = dyn.DynamicsSettings(**SMALL)
    model = dyn.init_dynamics(settings, 2, 1, jax.random.PRNGKey(0))
    model, report = jax.jit(dyn.fit_dynamics)(model, linear_data(), jax.random.PRNGKey(1))
    return model, report


def test_the_ensemble_fits_a_linear_system_and_disagrees_more_off_the_data(fitted):
    model, report = fitted
    test = linear_data(n=300, seed=7, noise=0.0)
    mean, std, _ = dyn.predict(model, test["observations"], test["actions"])
    elite_mean = mean[model.elites].mean(0)
    next_error = np.abs(np.asarray(test["observations"] + elite_mean[:, :2] - test["next_observations"]))
    reward_error = np.abs(np.asarray(elite_mean[:, 2] - test["rewards"]))
    assert next_error.mean() < 0.03 and reward_error.mean() < 0.05, (next_error.mean(), reward_error.mean())
    # the predicted noise level is the data's (0.01), not the prior's
    assert 0.003 < float(np.median(np.asarray(std[model.elites, :, :2]))) < 0.05
    # members agree on the data and disagree far from it
    far_obs, far_act = jnp.full((50, 2), 4.0), jnp.full((50, 1), -3.0)
    on = float(mean[:, :, :2].std(0).mean())
    off = float(dyn.predict(model, far_obs, far_act)[0][:, :, :2].std(0).mean())
    assert off > 5 * on, (on, off)
    assert float(report["model_holdout_mse"]) < 0.01
    # elites are the members with the lowest held-out error
    order = np.argsort(np.asarray(model.holdout_mse))
    assert set(np.asarray(model.elites).tolist()) == set(order[:3].tolist())


def test_early_stopping_ends_the_fit_and_the_epoch_cap_is_honoured(fitted):
    model, _ = fitted
    epochs = int(model.epochs)
    assert dyn.DynamicsSettings().model_patience < epochs < 1000  # stopped by patience, not by a cap
    capped = dyn.init_dynamics(dyn.DynamicsSettings(**SMALL, model_max_epochs=3), 2, 1, jax.random.PRNGKey(0))
    capped, report = jax.jit(dyn.fit_dynamics)(capped, linear_data(n=300), jax.random.PRNGKey(1))
    assert int(report["model_epochs"]) == 3


def test_rollouts_have_the_right_shapes_and_stop_at_a_registered_terminal(fitted):
    """Hopper's termination on a model of ``z' = z - 0.2``: from z = 1.0 the second step (z' = 0.6) ends."""
    rng = np.random.default_rng(0)
    n = 1500  # the fixture's shapes and settings: the compiled fit is reused
    s = np.stack([rng.uniform(0.0, 2.0, n), rng.uniform(-0.1, 0.1, n)], 1).astype(np.float32)
    a = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
    s2 = np.stack([s[:, 0] - 0.2, 0.5 * s[:, 1]], 1).astype(np.float32)
    data = {"observations": jnp.asarray(s), "actions": jnp.asarray(a), "rewards": jnp.ones(n),
            "next_observations": jnp.asarray(s2), "masks": jnp.ones(n)}
    settings = dyn.DynamicsSettings(**SMALL)
    model, _ = jax.jit(dyn.fit_dynamics)(dyn.init_dynamics(settings, 2, 1, jax.random.PRNGKey(0)), data,
                                         jax.random.PRNGKey(1))
    model = model.replace(settings=dataclasses.replace(settings, termination="hopper"))
    starts = jnp.array([[1.0, 0.0], [1.9, 0.0], [1.0, 0.05]])
    policy = lambda obs, key: jax.random.uniform(key, (obs.shape[0], 1), minval=-1, maxval=1)  # noqa: E731
    traj, valid = jax.jit(dyn.rollout, static_argnums=(1, 4))(model, policy, starts, jax.random.PRNGKey(2), 4)
    assert traj.observations.shape == (4, 3, 2) and traj.actions.shape == (4, 3, 1)
    assert traj.rewards.shape == traj.masks.shape == traj.uncertainty.shape == valid.shape == (4, 3)
    np.testing.assert_allclose(np.asarray(traj.next_observations[:, 1, 0]), [1.7, 1.5, 1.3, 1.1], atol=0.05)
    # row 0: z 1.0 -> 0.8 -> 0.6 (terminal at step 1): valid for steps 0, 1 only, mask 0 at step 1
    np.testing.assert_array_equal(np.asarray(valid[:, 0]), [True, True, False, False])
    assert float(traj.masks[0, 0]) == 1.0 and float(traj.masks[1, 0]) == 0.0
    np.testing.assert_array_equal(np.asarray(valid[:, 1]), [True] * 4)
    # the step after a terminal starts from the predicted state
    np.testing.assert_allclose(np.asarray(traj.observations[1:, 1]), np.asarray(traj.next_observations[:-1, 1]))


def test_the_termination_registry():
    assert dyn.termination_for_env("Hopper-v5") == "hopper"
    assert dyn.termination_for_env("walker2d-medium-v2") == "walker2d"
    assert dyn.termination_for_env("Pendulum-v1") == "pendulum"
    assert dyn.termination_for_env("CartPole-v1") == "learned" and dyn.termination_for_env(None) == "learned"
    obs = jnp.zeros((3, 11))
    nxt = jnp.array([[1.2, 0.1] + [0.0] * 9, [0.6, 0.0] + [0.0] * 9, [1.2, 0.3] + [0.0] * 9])
    np.testing.assert_array_equal(np.asarray(dyn.TERMINATIONS["hopper"](obs, None, nxt)), [False, True, True])
    walker = jnp.array([[1.2, 0.5] + [0.0] * 15, [2.1, 0.0] + [0.0] * 15, [1.0, -1.5] + [0.0] * 15])
    np.testing.assert_array_equal(np.asarray(dyn.TERMINATIONS["walker2d"](None, None, walker)), [False, True, True])


def test_the_model_buffer_keeps_only_live_rows_and_wraps():
    buffer = dyn.buffer_init(5, 1, 1)
    rows = lambda values: dyn.Transitions(*(jnp.asarray(values, jnp.float32).reshape(2, 2, *s) for s in  # noqa: E731
                                            ((1,), (1,), (), (1,), (), ())))
    buffer = dyn.buffer_add(buffer, rows([1, 2, 3, 4]), jnp.array([[True, False], [True, True]]))
    assert int(buffer.size) == 3 and int(buffer.pointer) == 3
    np.testing.assert_array_equal(np.asarray(buffer.data.rewards), [1, 3, 4, 0, 0])
    buffer = dyn.buffer_add(buffer, rows([5, 6, 7, 8]), jnp.array([[True, True], [True, False]]))
    assert int(buffer.size) == 5 and int(buffer.pointer) == 1
    np.testing.assert_array_equal(np.asarray(buffer.data.rewards), [7, 3, 4, 5, 6])
    drawn = dyn.buffer_sample(buffer, jax.random.PRNGKey(0), 200)
    assert set(np.asarray(drawn.rewards).tolist()) == {3.0, 4.0, 5.0, 6.0, 7.0}


def test_mopo_uncertainty_is_the_largest_member_std_norm():
    std = jnp.array([[[3.0, 4.0], [1.0, 0.0]],     # member 0: norms 5, 1
                     [[0.0, 1.0], [2.0, 2.0]]])    # member 1: norms 1, 2.828
    np.testing.assert_allclose(np.asarray(dyn.mopo_uncertainty(std)), [5.0, np.sqrt(8.0)], rtol=1e-6)


def test_bad_input_is_one_sentence():
    with pytest.raises(ConfigError, match="num_elites"):
        dyn.init_dynamics(dyn.DynamicsSettings(ensemble_size=3, num_elites=5), 2, 1, jax.random.PRNGKey(0))
    with pytest.raises(ConfigError, match="too few"):
        dyn.holdout_size(dyn.DynamicsSettings(), 4)
    model = dyn.init_dynamics(dyn.DynamicsSettings(**SMALL), 2, 1, jax.random.PRNGKey(0))
    with pytest.raises(ConfigError, match="horizon is 0"):
        dyn.rollout(model, lambda o, k: jnp.zeros((o.shape[0], 1)), jnp.zeros((2, 2)), jax.random.PRNGKey(0), 0)


def test_a_fit_in_chunks_of_epochs_equals_the_fit_at_once():
    """fit_begin -> fit_epochs(2) -> fit_epochs(2) -> fit_epochs -> fit_end (what `offrl model train --resume`
    runs) gives the same parameters, elites and epochs as fit_dynamics."""
    settings = dyn.DynamicsSettings(**SMALL, model_max_epochs=5)
    data = linear_data(n=300)
    model = dyn.init_dynamics(settings, 2, 1, jax.random.PRNGKey(0))
    whole, _ = jax.jit(dyn.fit_dynamics)(model, data, jax.random.PRNGKey(1))
    state = dyn.fit_begin(model, data, jax.random.PRNGKey(1))
    chunk = jax.jit(dyn.fit_epochs, static_argnums=3)
    state = chunk(model, chunk(model, state, data, 2), data, 2)
    assert chunk._cache_size() == 1   # the state fit_begin makes has the types fit_epochs returns: no recompile
    assert int(state.count) == 4 and not bool(dyn.fit_finished(settings, state))
    state = chunk(model, state, data, None)
    assert bool(dyn.fit_finished(settings, state))
    pieces, _ = dyn.fit_end(model, state, data)
    assert int(pieces.epochs) == int(whole.epochs) == 5
    np.testing.assert_array_equal(np.asarray(pieces.elites), np.asarray(whole.elites))
    for a, b in zip(jax.tree_util.tree_leaves(pieces.params), jax.tree_util.tree_leaves(whole.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_model_samples_stay_inside_the_data_box(fitted):
    """fit_end records the data's ranges; a step far outside them is clipped to the box, rewards too."""
    model, _ = fitted
    data = linear_data()
    low = np.minimum(np.asarray(data["observations"]).min(0), np.asarray(data["next_observations"]).min(0))
    np.testing.assert_allclose(np.asarray(model.observation_low), low)
    assert float(model.reward_high) == float(np.asarray(data["rewards"]).max())
    step = dyn.model_step(model, jnp.full((4, 2), 0.9), jnp.full((4, 1), 30.0), jax.random.PRNGKey(0))
    high = np.maximum(np.asarray(data["observations"]).max(0), np.asarray(data["next_observations"]).max(0))
    assert np.all(np.asarray(step.next_observations) <= high + 1e-6)
    assert np.all(np.asarray(step.rewards) >= float(model.reward_low) - 1e-6)
    nxt, r = dyn.clip_to_data(model, jnp.array([[5.0, -5.0]]), jnp.array([-9.0]))
    np.testing.assert_allclose(np.asarray(nxt), [[high[0], low[1]]])
    np.testing.assert_allclose(np.asarray(r), [float(model.reward_low)])


def test_predict_elites_is_predict_of_each_elite_on_its_own_rows(fitted):
    """Row ``[e, r]`` of predict_elites is predict's member ``elites[e]`` on that row (the elites in a shuffled order)."""
    model, _ = fitted
    model = model.replace(elites=jnp.asarray([2, 0, 3]))
    rng = np.random.default_rng(3)
    obs = jnp.asarray(rng.uniform(-1, 1, (3, 5, 2)), jnp.float32)
    act = jnp.asarray(rng.uniform(-1, 1, (3, 5, 1)), jnp.float32)
    got = dyn.predict_elites(model, obs, act)
    for e, member in enumerate([2, 0, 3]):
        want = dyn.predict(model, obs[e], act[e])
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g[e]), np.asarray(w[member]), rtol=1e-5, atol=1e-6)
