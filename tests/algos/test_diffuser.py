"""Diffuser: the DDPM schedule's closed forms, guided sampling, segments, bad horizons, a short run."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from offrl.algos import diffuser
from offrl.data import Dataset
from offrl.errors import ConfigError


def test_schedule_closed_forms():
    s = diffuser.cosine_schedule(20)
    betas = np.asarray(s.betas, np.float64)
    abar = np.cumprod(1.0 - betas)
    np.testing.assert_allclose(s.alpha_bars, abar, rtol=1e-4, atol=1e-7)
    assert np.all(np.diff(abar) < 0) and abar[-1] < 1e-3 and abar[0] > 0.99
    # the posterior q(x_{t-1} | x_t, x_0) is the product of q(x_t | x_{t-1}) and q(x_{t-1} | x_0):
    # precision = alpha_t / beta_t + 1 / (1 - abar_{t-1}); mean = (sqrt(alpha_t) x_t / beta_t + sqrt(abar_{t-1}) x_0 / (1 - abar_{t-1})) / precision
    for t in (1, 7, 19):
        alpha, beta, prev = 1.0 - betas[t], betas[t], abar[t - 1]
        precision = alpha / beta + 1.0 / (1.0 - prev)
        assert float(s.posterior_var[t]) == pytest.approx(1.0 / precision, rel=1e-4)
        x0, xt = 0.7, -1.3
        mean = (np.sqrt(alpha) * xt / beta + np.sqrt(prev) * x0 / (1.0 - prev)) / precision
        assert float(s.posterior_x0[t] * x0 + s.posterior_xt[t] * xt) == pytest.approx(mean, rel=1e-4)
    assert float(s.posterior_var[0]) == 0.0 and float(s.posterior_x0[0]) == pytest.approx(1.0)
    # q_sample and predict_x0 invert each other
    x0 = jax.random.normal(jax.random.PRNGKey(0), (3, 4, 2))
    eps = jax.random.normal(jax.random.PRNGKey(1), (3, 4, 2))
    t = jnp.array([0, 5, 19])
    xt = diffuser.q_sample(s, x0, t, eps)
    for i in range(3):
        np.testing.assert_allclose(diffuser.predict_x0(s, xt[i], t[i], eps[i]), x0[i], rtol=1e-3, atol=1e-3)


def test_guidance_raises_the_value_of_samples_and_inpaints_the_state():
    """With a noise prediction of 0 (``x0_hat = x_t / sqrt(abar_t)``) and J(x) = sum of the action
    channel, guided samples have a higher J than unguided ones; the first state is the given one."""
    s = diffuser.cosine_schedule(20)
    x0_fn = lambda x, t: diffuser.denoised(s, x, t[0], jnp.zeros_like(x), True)  # noqa: E731
    value_fn = lambda x, t: jnp.sum(x[..., 2], axis=-1)  # noqa: E731
    obs = jnp.array([0.5, -0.5])
    args = (x0_fn, value_fn, s, (64, 8, 3), obs, 2, jax.random.PRNGKey(0))
    plain = diffuser.guided_sample(*args, 0.0)
    guided = diffuser.guided_sample(*args, 1.0)
    assert float(jnp.mean(value_fn(guided, None))) > float(jnp.mean(value_fn(plain, None))) + 1.0
    np.testing.assert_array_equal(guided[:, 0, :2], np.broadcast_to(obs, (64, 2)))


def test_denoised_reads_the_output_as_noise_or_as_x0():
    s = diffuser.cosine_schedule(20)
    x0 = jax.random.normal(jax.random.PRNGKey(0), (2, 4, 3))
    eps = jax.random.normal(jax.random.PRNGKey(1), (2, 4, 3))
    xt = diffuser.q_sample(s, x0, jnp.array([9, 9]), eps)
    np.testing.assert_allclose(diffuser.denoised(s, xt, 9, eps, True), x0, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(diffuser.denoised(s, xt, 9, x0, False), x0)


def test_denoising_loss_by_hand():
    """A denoiser that outputs 0: with the x0 target the loss is sum w x0^2 / sum w (w: 0 on s_0,
    10 on a_0, 1 elsewhere); the input it sees has s_0 clean and the rest noised."""
    x0 = jnp.array([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]])  # (B=1, H=2, obs 2 + action 1)
    w = diffuser.loss_weights(2, 2, 1, 10.0)
    np.testing.assert_array_equal(w, [[0.0, 0.0, 10.0], [1.0, 1.0, 1.0]])
    seen = []

    def zero(params, x, t):
        seen.append(x)
        return jnp.zeros_like(x)

    s = diffuser.cosine_schedule(20)
    loss = diffuser.denoising_loss(None, zero, s, x0, jax.random.PRNGKey(0), w, False, 2)
    assert float(loss) == pytest.approx((10 * 9 + 16 + 25 + 36) / 13.0, rel=1e-6)
    np.testing.assert_array_equal(seen[0][0, 0, :2], [1.0, 2.0])
    assert not np.allclose(seen[0][0, 0, 2:], 3.0) and not np.allclose(seen[0][0, 1], x0[0, 1])
    # the noise target: the loss is sum w eps^2 / sum w for the eps that made the input
    t_key, n_key = jax.random.split(jax.random.PRNGKey(0))
    eps = jax.random.normal(n_key, x0.shape)
    loss = diffuser.denoising_loss(None, zero, s, x0, jax.random.PRNGKey(0), w, True, 2)
    assert float(loss) == pytest.approx(float(jnp.sum(w * eps[0] ** 2) / 13.0), rel=1e-5)


def _dataset(lengths):
    n = sum(lengths)
    obs = np.arange(n, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    terminals = np.zeros(n, bool)
    terminals[np.cumsum(lengths) - 1] = True
    return Dataset.from_arrays(obs, np.zeros((n, 1), np.float32), np.ones(n, np.float32), terminals, next_observations=obs + 1)


def test_segments_stay_inside_episodes():
    from offrl import engine
    from offrl.algos.common import apply_overrides

    config = apply_overrides(diffuser.Config(), {"horizon": "4", "normalize_observations": "false"})
    data, _ = engine.prepare_data(_dataset([3, 6, 5]), config, None, diffuser)
    batch = diffuser.sample(data, jax.random.PRNGKey(0), 200)
    first = np.asarray(batch.trajectories[:, 0, 0]).astype(int)
    assert set(first) == {3, 4, 5, 9, 10}      # episode 1: rows 3..8; episode 2: rows 9..13
    np.testing.assert_array_equal(np.asarray(batch.trajectories[:, :, 0]), first[:, None] + np.arange(4))


def test_horizon_longer_than_every_episode_is_one_line():
    from offrl.algos.common import apply_overrides

    config = apply_overrides(diffuser.Config(), {"horizon": "8"})
    with pytest.raises(ConfigError, match="'horizon' is 8 but the longest episode has 6 steps") as info:
        diffuser.extra_arrays(_dataset([3, 6]), None, config)
    assert "\n" not in str(info.value)


@pytest.mark.slow  # 50 s; the behaviour test covers training, save/load and the export refusal
def test_short_run(tmp_path, capsys):
    """A few hundred updates on pendulum-medium-replay: the denoising loss falls well below its
    start; evaluation plans every action; ``offrl export`` refuses the run in one line (exit 2)."""
    import offrl

    overrides = {"horizon": "4", "unet_dims": "16,16", "value_hidden_dims": "32", "diffusion_steps": "5",
                 "num_samples": "2", "learning_rate": "1e-3"}
    run = offrl.train("diffuser", "pendulum-medium-replay-v0", steps=300, seeds=1, eval_every=300, eval_episodes=1,
                      log_every=100, progress=False, out=tmp_path / "run", config_overrides=overrides)
    losses = [r["actor_loss"] for r in run.metrics]
    assert losses[-1] < 0.6 * losses[0]
    assert np.isfinite(run.metrics[-1]["eval/return"])
    last = run.metrics[-1]          # one seed x one episode: one env, so per step == per action
    assert 0 < last["eval/planning_ms_per_step"] < 60_000
    assert last["eval/planning_ms_per_action"] == pytest.approx(last["eval/planning_ms_per_step"])
    from offrl.cli import main

    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "run"), "--episodes", "2"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("planning:")]
    assert len(line) == 1 and "ms per env step for 2 envs planned together" in line[0]
    per_step, per_action = (float(t) for t in re.findall(r"([0-9.]+) ms per", line[0]))
    assert per_action == pytest.approx(per_step / 2, abs=0.06)
    assert main(["export", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not support diffuser" in err[0] and not (tmp_path / "run" / "export").exists()


def _deterministic_policy_dataset(episodes=40, length=16):
    """``a = tanh(2 s_0 - s_1)`` with linear dynamics and small noise."""
    rng = np.random.default_rng(0)
    obs, acts = [], []
    for _ in range(episodes):
        s = rng.uniform(-1, 1, 2)
        for _ in range(length):
            a = np.tanh(2.0 * s[0] - s[1])
            obs.append(s.copy())
            acts.append([a])
            s = np.array([0.9 * s[0] + 0.3 * a, 0.9 * s[1] + 0.2 * s[0]]) + 0.05 * rng.normal(size=2)
    obs, acts = np.asarray(obs, np.float32), np.asarray(acts, np.float32)
    n = len(obs)
    terminals = np.zeros(n, bool)
    terminals[length - 1::length] = True
    return Dataset.from_arrays(obs, acts, np.zeros(n, np.float32), terminals, next_observations=obs)


def test_unguided_plans_imitate_a_deterministic_policy():
    """Regression: the denoiser must learn with the first state clean in its input, as the sampler
    conditions it. Trained on noised-everywhere inputs (the old code), 400 updates gave a planned-action
    MSE of 0.67 against the actions' variance 0.88 (no use of the state); now about 0.002."""
    from offrl import engine
    from offrl.algos.common import apply_overrides

    overrides = {"horizon": "4", "unet_dims": "16,16", "value_hidden_dims": "16", "learning_rate": "1e-3",
                 "batch_size": "64", "guidance_scale": "0.0", "num_samples": "1"}
    config = apply_overrides(diffuser.Config(), overrides)
    data, _ = engine.prepare_data(_deterministic_policy_dataset(), config, None, diffuser)
    agent = diffuser.create(config, 2, 1, jax.random.PRNGKey(0))

    @jax.jit
    def train(agent, key):
        def body(a, k):
            return diffuser.update(a, diffuser.sample(data, k, config.batch_size))[0], None
        return jax.lax.scan(body, agent, jax.random.split(key, 400))[0]

    agent = train(agent, jax.random.PRNGKey(1))
    obs, actions = data["observations"][:128], data["actions"][:128]
    mse = float(jnp.mean((diffuser.act(agent, obs) - actions) ** 2))
    assert mse < 0.05 * float(jnp.var(actions))


def test_a_config_saved_before_the_x0_target_loads_as_the_noise_predictor_it_was():
    from offrl.algos.common import config_from_dict, config_to_dict

    saved = config_to_dict(diffuser.Config())
    old = {k: v for k, v in saved.items() if k not in ("predict_epsilon", "first_action_weight")}
    loaded = config_from_dict(diffuser.Config, old)
    assert loaded.predict_epsilon is True and loaded.first_action_weight == 1.0
    assert config_from_dict(diffuser.Config, saved) == diffuser.Config()  # a new config keeps its own values
