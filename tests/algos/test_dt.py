"""Decision Transformer: causal mask, segment sampling, return-to-go bookkeeping, a short run."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl.algos import dt
from offrl.algos.common import apply_overrides
from offrl.data import Dataset
from offrl.errors import ConfigError
from offrl.nets_seq import GPT


def _tiny_config(**overrides):
    base = {"embed_dim": "16", "num_layers": "2", "num_heads": "2", "context_length": "4", "warmup_steps": "0",
            "dropout": "0.0", "max_timestep": "50"}
    base.update({k: str(v) for k, v in overrides.items()})
    return apply_overrides(dt.Config(), base)


def test_gpt_is_causal():
    """Changing token j changes no output before j (and does change output j)."""
    net = GPT(embed_dim=8, num_layers=2, num_heads=2, dropout=0.0)
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 7, 8))
    valid = jnp.ones((1, 7), bool)
    params = net.init(jax.random.PRNGKey(1), x, valid)
    base = np.asarray(net.apply(params, x, valid))
    bump = jax.random.normal(jax.random.PRNGKey(2), (8,))   # not a constant shift, which LayerNorm removes
    for j in range(7):
        out = np.asarray(net.apply(params, x.at[0, j].add(bump), valid))
        np.testing.assert_array_equal(out[0, :j], base[0, :j])
        assert not np.allclose(out[0, j], base[0, j])


def test_padding_is_invisible_to_valid_tokens():
    """Padded (invalid) tokens are masked as keys: their contents change no valid output."""
    net = GPT(embed_dim=8, num_layers=1, num_heads=1, dropout=0.0)
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 5, 8))
    valid = jnp.array([[False, False, True, True, True]])
    params = net.init(jax.random.PRNGKey(1), x, valid)
    base = np.asarray(net.apply(params, x, valid))
    out = np.asarray(net.apply(params, x.at[0, :2].set(5.0), valid))
    np.testing.assert_allclose(out[0, 2:], base[0, 2:], rtol=1e-6, atol=1e-6)
    assert np.all(np.isfinite(out))


def test_action_at_step_t_ignores_later_tokens():
    """The action predicted at step t sees (R, s) up to t and actions before t only."""
    config = _tiny_config()
    agent = dt.create(config, 3, 2, jax.random.PRNGKey(0))
    keys = jax.random.split(jax.random.PRNGKey(1), 3)
    R, s, a = jax.random.normal(keys[0], (1, 4)), jax.random.normal(keys[1], (1, 4, 3)), jax.random.normal(keys[2], (1, 4, 2))
    t, valid = jnp.arange(4)[None], jnp.ones((1, 4), bool)
    apply = lambda R, s, a: np.asarray(agent.actor.apply_fn(agent.actor.params, R, s, a, t, valid))  # noqa: E731
    base = apply(R, s, a)
    out = apply(R, s, a.at[0, 2].add(1.0))   # a_2 comes after s_2: predictions 0..2 unchanged
    np.testing.assert_array_equal(out[0, :3], base[0, :3])
    assert not np.allclose(out[0, 3], base[0, 3])
    out = apply(R.at[0, 2].add(1.0), s, a)   # R_2 comes before s_2
    np.testing.assert_array_equal(out[0, :2], base[0, :2])
    assert not np.allclose(out[0, 2], base[0, 2])


def test_masked_action_mse_by_hand():
    predicted = jnp.array([[[0.5, 0.0], [1.0, 1.0]]])
    actions = jnp.array([[[0.0, 0.0], [0.0, -1.0]]])
    # only the second step is valid: (1 + 4) / (2 * 1)
    assert float(dt.masked_action_mse(predicted, actions, jnp.array([[False, True]]))) == pytest.approx(2.5)
    # both valid: (0.25 + 5) / (2 * 2)
    assert float(dt.masked_action_mse(predicted, actions, jnp.array([[True, True]]))) == pytest.approx(5.25 / 4)


def _two_episodes():
    """Episode 0: rows 0..2 (terminal), episode 1: rows 3..8 (timeout), rewards = row index."""
    n = 9
    obs = np.arange(n, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    actions = np.linspace(-0.8, 0.8, n, dtype=np.float32)[:, None]
    terminals, timeouts = np.zeros(n, bool), np.zeros(n, bool)
    terminals[2], timeouts[8] = True, True
    return Dataset.from_arrays(obs, actions, np.arange(n, dtype=np.float32), terminals, timeouts=timeouts,
                              next_observations=obs + 1)


def test_extra_arrays_returns_to_go_timesteps_starts():
    config = _tiny_config(return_scale=10.0)
    extra = dt.extra_arrays(_two_episodes(), None, config)
    np.testing.assert_allclose(extra["returns_to_go"], np.array([3, 3, 2, 33, 30, 26, 21, 15, 8]) / 10.0, rtol=1e-6)
    np.testing.assert_array_equal(extra["timesteps"], [0, 1, 2, 0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(extra["episode_starts"], [0, 0, 0, 3, 3, 3, 3, 3, 3])
    assert extra["context"].shape == (9, 0, 4)


@pytest.mark.parametrize("name", ["dt", "tt", "diffuser"])
def test_no_episode_is_one_line_for_every_sequence_model(name):
    from offrl.algos import get_algorithm

    module = get_algorithm(name)
    empty = Dataset.from_arrays(np.zeros((0, 2), np.float32), np.zeros((0, 1), np.float32), np.zeros(0, np.float32),
                                np.zeros(0, bool))
    with pytest.raises(ConfigError, match="has no episode") as info:
        module.extra_arrays(empty, None, module.Config())
    assert "\n" not in str(info.value)


def test_empty_dataset_file_is_one_line_and_exit_2(tmp_path, capsys):
    """``offrl train --algo dt`` on a dataset file without a single transition: one line, exit 2."""
    from offrl.cli import main

    path = tmp_path / "empty.npz"      # offrl.data.save refuses to write it, so write the arrays by hand
    np.savez(path, observations=np.zeros((0, 3), np.float32), actions=np.zeros((0, 1), np.float32),
             rewards=np.zeros(0, np.float32), terminals=np.zeros(0, bool), timeouts=np.zeros(0, bool),
             next_observations=np.zeros((0, 3), np.float32))
    capsys.readouterr()
    assert main(["train", "--algo", "dt", "--dataset", str(path), "--steps", "10", "--out", str(tmp_path / "run"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "empty.npz: the dataset has zero transitions" in err[0], err
    assert not (tmp_path / "run").exists()


def test_segments_are_left_padded_at_episode_starts():
    from offrl import engine

    ds = _two_episodes()
    config = _tiny_config(normalize_observations=False)
    data, _ = engine.prepare_data(ds, config, None, dt)
    batch = jax.jit(dt.sample, static_argnums=2)(data, jax.random.PRNGKey(0), 256)
    obs, valid = np.asarray(batch.observations), np.asarray(batch.valid)
    starts = np.array([0, 0, 0, 3, 3, 3, 3, 3, 3])
    ends_seen = set()
    for b in range(256):
        end = int(obs[b, -1, 0])               # the observation equals the row index
        ends_seen.add(end)
        rows = end - 3 + np.arange(4)
        expected_valid = rows >= starts[end]
        np.testing.assert_array_equal(valid[b], expected_valid)
        np.testing.assert_array_equal(obs[b, :, 0], np.where(expected_valid, rows, 0))
        np.testing.assert_array_equal(np.asarray(batch.timesteps[b]), np.where(expected_valid, rows - starts[end], 0))
        assert np.all(np.asarray(batch.actions[b])[~expected_valid] == 0)
    assert ends_seen == set(range(9))


class _RewardEnv:
    """A stub of :class:`offrl.rollout.VectorEnv`: reward ``t + 1`` at step ``t``, episodes of 3 steps."""

    def __init__(self, num_envs):
        self.num_envs, self.obs_dim, self.action_dim, self.t = num_envs, 3, 2, 0

    def reset(self, seeds):
        self.t = 0
        return np.zeros((self.num_envs, 3), np.float32)

    def step(self, actions, active=None):
        self.t += 1
        done = np.full(self.num_envs, self.t == 3)
        return (np.full((self.num_envs, 3), self.t, np.float32), np.full(self.num_envs, float(self.t)), done,
                np.zeros(self.num_envs, bool))


def test_return_to_go_bookkeeping_in_the_rollout_carry():
    from offrl import engine
    from offrl.engine.data import DataInfo
    from offrl.rollout import run_episodes

    config = _tiny_config(return_scale=10.0)
    agents, _ = engine.create_agents(dt, config, 3, 2, seed=0, seeds=2)
    info = DataInfo(3, 2, [0.0] * 3, [1.0] * 3, [-1.0] * 2, [1.0] * 2)
    policy, carry = dt.rollout_policy(agents, info, seeds=2, envs_per_seed=1, target_return=50.0)
    seen = []

    def spy(params, carry, obs, key):
        actions, carry = policy(params, carry, obs, key)
        seen.append(carry)
        return actions, carry

    spy.observe = policy.observe
    out = run_episodes(_RewardEnv(2), spy, agents, [0, 1], jax.random.PRNGKey(0), carry=carry)
    np.testing.assert_array_equal(out["return"], [6.0, 6.0])
    last = seen[-1].history          # after acting at step 2: R = 5.0, 4.9, 4.7 (rewards 1, 2 observed)
    np.testing.assert_allclose(last["returns_to_go"][:, 1:], [[5.0, 4.9, 4.7]] * 2, rtol=1e-6)
    np.testing.assert_array_equal(last["valid"], [[False, True, True, True]] * 2)
    np.testing.assert_array_equal(last["timesteps"][:, 1:], [[0, 1, 2]] * 2)
    np.testing.assert_array_equal(last["observations"][:, 1:, 0], [[0, 1, 2]] * 2)
    assert np.all(np.abs(last["actions"][:, 1:]) <= 1.0) and np.all(last["actions"][:, 0] == 0)
    # the history's actions are the agent's own predictions at each step
    np.testing.assert_array_equal(seen[0].history["actions"][:, -1], last["actions"][:, 1])


def test_default_target_return_is_the_best_episode():
    config = dt.config_for_dataset(_tiny_config(), _two_episodes())
    assert config.target_return == pytest.approx(33.0)
    assert dt.config_for_dataset(_tiny_config(target_return=5), _two_episodes()).target_return == 5.0


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu-old-export"])
def test_numpy_forward_equals_the_flax_network(activation):
    """The NumPy transformer (offrl.policy_dt) reproduces the Flax DT on random inputs with
    padding, several heads and timesteps past the embedding table (clipped), for both
    activations; an export written before ``activation`` was recorded runs as GELU."""
    from offrl.policy_dt import NumpyDecisionTransformer

    config = _tiny_config(max_timestep=6, activation=activation.split("-")[0])
    agent = dt.create(config, 3, 2, jax.random.PRNGKey(0))
    arrays, meta = dt.export_arrays(agent)
    assert meta["activation"] == config.activation
    if activation == "gelu-old-export":
        del meta["activation"]
    policy = NumpyDecisionTransformer({**arrays, "obs_mean": np.zeros(3), "obs_std": np.ones(3),
                                       "action_low": -np.ones(2), "action_high": np.ones(2)}, meta)
    keys = jax.random.split(jax.random.PRNGKey(1), 3)
    R, s, a = jax.random.normal(keys[0], (5, 4)), jax.random.normal(keys[1], (5, 4, 3)), jax.random.uniform(keys[2], (5, 4, 2), minval=-1)
    t = jnp.array([[0, 1, 2, 3], [5, 6, 7, 8], [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 2, 3]])
    valid = jnp.array([[True] * 4, [True] * 4, [False, False, False, True], [False, False, True, True], [False, True, True, True]])
    expected = np.asarray(agent.actor.apply_fn(agent.actor.params, R, s, a, t, valid))
    got = policy.forward(np.asarray(R), np.asarray(s), np.asarray(a), np.asarray(t), np.asarray(valid))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert np.abs(expected).max() > 0.05


class _ActionEnv:
    """A stub env whose next observation depends on the action: ``s' = 0.9 s + sum(a)``, reward
    ``-|s'_0|``, episodes of 9 steps (longer than the context of 4)."""

    def __init__(self, num_envs):
        self.num_envs, self.obs_dim, self.action_dim = num_envs, 3, 2

    def reset(self, seeds):
        self.t = 0
        self.s = np.stack([np.linspace(-1, 1, 3) * (i + 1) for i in range(self.num_envs)]).astype(np.float32)
        return self.s.copy()

    def step(self, actions, active=None):
        self.t += 1
        self.s = (0.9 * self.s + np.sum(actions, axis=1, keepdims=True)).astype(np.float32)
        reward = -np.abs(self.s[:, 0])
        return self.s.copy(), reward, np.full(self.num_envs, self.t == 9), np.zeros(self.num_envs, bool)


def test_exported_numpy_dt_acts_like_the_jax_rollout(tmp_path):
    """Over a 9-step rollout (padding while the context of 4 fills, then a full sliding window)
    the NumPy DT's actions equal the JAX carry policy's to 1e-5, with the same target return,
    observation normalisation and action bounds."""
    from offrl import engine
    from offrl.checkpoint import export_numpy_policy
    from offrl.engine.data import DataInfo
    from offrl.policy import load_numpy_policy
    from offrl.rollout import run_episodes

    config = _tiny_config(return_scale=10.0, max_timestep=7, target_return=12.0)
    agents, _ = engine.create_agents(dt, config, 3, 2, seed=3, seeds=1)
    info = DataInfo(3, 2, [0.5, -0.2, 0.1], [2.0, 0.5, 1.5], [-2.0, 0.0], [2.0, 1.0])
    jax_policy, carry = dt.rollout_policy(agents, info, seeds=1, envs_per_seed=2, target_return=30.0)
    jax_actions = []

    def spy(params, carry, obs, key):
        actions, carry = jax_policy(params, carry, obs, key)
        jax_actions.append(np.asarray(actions))
        return actions, carry

    spy.observe = jax_policy.observe
    out = run_episodes(_ActionEnv(2), spy, agents, [0, 1], jax.random.PRNGKey(0), carry=carry)

    folder = export_numpy_policy(engine.Run(None, "dt", config, {"seeds": 1}, info, agents), tmp_path / "export")
    policy = load_numpy_policy(folder)
    assert policy.meta["target_return"] == 12.0 and policy.context_length == 4
    env, numpy_actions, total = _ActionEnv(2), [], np.zeros(2)
    obs = env.reset([0, 1])
    policy.reset(target_return=30.0, num_envs=2)
    for _ in range(9):
        action = policy.act(obs)
        numpy_actions.append(action)
        obs, reward, _, _ = env.step(action)
        policy.observe(reward)
        total += reward
    assert len(jax_actions) == 9
    np.testing.assert_allclose(np.stack(numpy_actions), np.stack(jax_actions), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(total, out["return"], rtol=1e-4)
    assert np.stack(numpy_actions).std() > 0.01        # the actions are not a constant
    # the default target is the run's; a single observation gives a single action
    policy.reset()
    assert policy.remaining[0] == pytest.approx(1.2) and policy.act(np.zeros(3)).shape == (2,)
    with pytest.raises(ValueError, match="num_envs=3"):
        policy.act(np.zeros((3, 3)))


TINY_SET = ["--set", "embed_dim=16", "--set", "num_layers=1", "--set", "context_length=4", "--set", "warmup_steps=0"]


def test_cli_train_then_evaluate_with_target_returns(tmp_path, capsys):
    """``offrl train --algo dt`` stores the dataset's best return as the target; ``offrl
    evaluate --target-return`` / ``--target-returns`` use the carry policy; bad targets exit 2."""
    import json

    from offrl.cli import main

    out = tmp_path / "run"
    assert main(["train", "--algo", "dt", "--dataset", "pendulum-medium-replay-v0", "--steps", "20", "--log-every", "20",
                 "--eval-every", "20", "--eval-episodes", "1", "--out", str(out), "--no-progress", *TINY_SET]) == 0
    record = json.loads((out / "config.json").read_text())
    assert record["config"]["target_return"] == pytest.approx(-820.0662, abs=1e-3)
    assert main(["evaluate", str(out), "--episodes", "1", "--target-return", "-300"]) == 0
    assert main(["evaluate", str(out), "--episodes", "1", "--target-returns=-900,-300"]) == 0
    rows = json.loads((out / "plots" / "target_returns.json").read_text())
    assert [r["target"] for r in rows] == [-900.0, -300.0] and (out / "plots" / "target_returns.png").exists()
    capsys.readouterr()
    assert main(["evaluate", str(out), "--target-return", "high"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'high' is not a finite number" in err[0]
    assert main(["evaluate", str(out), "--target-returns=-100,x"]) == 2
    # offrl export writes the transformer; NumPy alone (no JAX import) plays it with its context
    import subprocess
    import sys

    assert main(["export", str(out)]) == 0
    script = ("import sys, numpy as np\n"
              "from offrl.policy import load_numpy_policy\n"
              f"p = load_numpy_policy({str(out / 'export')!r})\n"
              "p.reset(-300.0)\n"
              "a = []\n"
              "for k in range(6):\n"
              "    a.append(p.act(np.array([1.0, 0.0, 0.1]) * k))\n"
              "    p.observe(-1.0)\n"
              "assert np.abs(np.array(a)).max() <= 2.0 and np.array(a).shape == (6, 1)\n"
              "assert 'jax' not in sys.modules, 'the NumPy DT imported JAX'\n")
    subprocess.run([sys.executable, "-c", script], check=True)


@pytest.mark.slow
def test_dt_learns_pendulum_beats_random():
    """2000 updates on pendulum-medium-v0 (small model): the return-conditioned policy beats the
    uniform random policy by a wide margin and a higher target gives a higher return."""
    import offrl
    from offrl.engine import evaluate
    from offrl.envs import make_env

    overrides = {"embed_dim": "64", "num_layers": "2", "learning_rate": "1e-3", "warmup_steps": "200",
                 "context_length": "10"}
    run = offrl.train("dt", "pendulum-medium-v0", steps=2000, seeds=1, eval_every=2000, eval_episodes=5,
                      progress=False, config_overrides=overrides)
    env, rng, random_returns = make_env("Pendulum-v1"), np.random.default_rng(0), []
    for k in range(5):
        env.reset(seed=20_000 + k)
        total, done = 0.0, False
        while not done:
            _, r, term, trunc, _ = env.step(rng.uniform(-2, 2, size=1).astype(np.float32))
            total, done = total + r, term or trunc
        random_returns.append(total)
    low = evaluate(run, episodes=5, policy_options={"target_return": -1000.0})["return"][0]
    high = evaluate(run, episodes=5, policy_options={"target_return": -150.0})["return"][0]
    assert high > np.mean(random_returns) + 300, (high, np.mean(random_returns))
    assert high > low


def test_dt_activation_defaults_to_relu_and_old_runs_load_as_gelu():
    """New runs use the authors' gym default (ReLU); a saved config without the field (runs
    written before it existed) reads back as GELU, the block those runs trained."""
    from offrl.algos.common import config_from_dict, config_to_dict

    assert dt.Config().activation == "relu"
    saved = config_to_dict(dt.Config())
    assert config_from_dict(dt.Config, saved).activation == "relu"
    del saved["activation"]
    assert config_from_dict(dt.Config, saved).activation == "gelu"
    with pytest.raises(ConfigError, match="activation"):
        apply_overrides(dt.Config(), {"activation": "tanh"})


def test_relu_and_gelu_blocks_differ():
    """The field reaches the network: the same parameters give different outputs."""
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 8))
    valid = jnp.ones((2, 5), bool)
    relu, gelu = GPT(8, 1, 2, 0.0, "relu"), GPT(8, 1, 2, 0.0, "gelu")
    params = relu.init(jax.random.PRNGKey(1), x, valid)
    assert np.abs(np.asarray(relu.apply(params, x, valid)) - np.asarray(gelu.apply(params, x, valid))).max() > 1e-3


def test_hash_dropout_rate_is_exact_and_unbiased():
    """The kept fraction matches 1 - round(rate 2^16) / 2^16 within 4 binomial standard errors
    on 10^6 elements, and the scaled output's mean equals the input's."""
    from offrl.nets_seq import dropout_keep

    n = 1_000_000
    for rate in (0.1, 0.5, 0.9):
        keep, scale = dropout_keep(jax.random.PRNGKey(3), (1000, 1000), rate)
        p = round(rate * 65536) / 65536
        assert scale == pytest.approx(1 / (1 - p))
        kept = float(jnp.mean(keep))
        assert abs(kept - (1 - p)) < 4 * np.sqrt(p * (1 - p) / n), (rate, kept)
        assert float(jnp.mean(jnp.where(keep, scale, 0.0))) == pytest.approx(1.0, abs=4 * np.sqrt(p / (1 - p) / n))
    with pytest.raises(ValueError, match="drops every element"):
        dropout_keep(jax.random.PRNGKey(0), (4,), 0.99999999)


def test_hash_dropout_masks_are_uncorrelated_across_elements_and_keys():
    """Neighbouring elements (the two halves of one hash word, and adjacent words), the same
    element under two keys, and a 2-D lag all show correlations within 5 standard errors of 0."""
    from offrl.nets_seq import dropout_keep

    n = 1_000_000
    k1, k2 = dropout_keep(jax.random.PRNGKey(0), (n,), 0.3)[0], dropout_keep(jax.random.PRNGKey(1), (n,), 0.3)[0]
    a, b = np.asarray(k1, np.float64), np.asarray(k2, np.float64)
    bound = 5 / np.sqrt(n)
    for lag in (1, 2, 3, 64):
        assert abs(np.corrcoef(a[:-lag], a[lag:])[0, 1]) < bound, lag
    assert abs(np.corrcoef(a, b)[0, 1]) < bound
    grid = a.reshape(1000, 1000)
    assert abs(np.corrcoef(grid[:-1].ravel(), grid[1:].ravel())[0, 1]) < bound


def test_dropout_is_identity_when_deterministic_and_fresh_per_call_site():
    """No randomness at evaluation; in training two dropout layers of one network draw
    different masks (each call site folds its own key), and one key reproduces one mask."""
    from offrl.nets_seq import Dropout

    x = jnp.ones((4, 256))
    layer = Dropout(0.5)
    assert np.array_equal(np.asarray(layer.apply({}, x, True)), np.asarray(x))
    first = np.asarray(layer.apply({}, x, False, rngs={"dropout": jax.random.PRNGKey(0)}))
    again = np.asarray(layer.apply({}, x, False, rngs={"dropout": jax.random.PRNGKey(0)}))
    other = np.asarray(layer.apply({}, x, False, rngs={"dropout": jax.random.PRNGKey(1)}))
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert set(np.unique(first)) <= {0.0, 2.0}

    class Two(nn.Module):
        @nn.compact
        def __call__(self, x):
            return Dropout(0.5)(x, False), Dropout(0.5)(x, False)

    u, v = Two().apply({}, x, rngs={"dropout": jax.random.PRNGKey(0)})
    assert not np.array_equal(np.asarray(u), np.asarray(v))


def test_sequence_dense_matches_flax_dense_in_parameters_outputs_and_gradients():
    """offrl.nets_seq.Dense is nn.Dense with another weight-gradient product order: the same
    initial parameters for a key, the same outputs, and gradients equal to float32 rounding."""
    from offrl.nets_seq import Dense

    x = jax.random.normal(jax.random.PRNGKey(0), (3, 7, 5))
    ours, flax_dense = Dense(4), nn.Dense(4)
    p_ours, p_flax = ours.init(jax.random.PRNGKey(1), x), flax_dense.init(jax.random.PRNGKey(1), x)
    jax.tree_util.tree_map(np.testing.assert_array_equal, p_ours, p_flax)
    np.testing.assert_allclose(ours.apply(p_ours, x), flax_dense.apply(p_flax, x), rtol=1e-6, atol=1e-6)

    def loss(module, params, x):
        return jnp.sum(jnp.sin(module.apply(params, x)) * jnp.arange(4.0))

    g_ours = jax.grad(loss, argnums=(1, 2))(ours, p_ours, x)
    g_flax = jax.grad(loss, argnums=(1, 2))(flax_dense, p_flax, x)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), g_ours, g_flax)
    assert float(jnp.abs(g_ours[0]["params"]["kernel"]).max()) > 0.1
