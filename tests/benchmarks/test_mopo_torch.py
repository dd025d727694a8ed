"""``benchmarks/peers/mopo_torch.py`` computes what offrl computes: the same ensemble forward pass,
Gaussian NLL, weight decay and MOPO penalty on the same weights and rows (offrl's weights copied into
the peer), each also against hand-computed numbers; and the peer's fit and rollouts do their job."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def peer():
    spec = importlib.util.spec_from_file_location("mopo_torch", ROOT / "benchmarks" / "peers" / "mopo_torch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OBS, ACT, MEMBERS, HIDDEN = 3, 2, 3, (8, 6)


def offrl_model(seed: int = 0, max_logvar: float = 0.2, min_logvar: float = -0.4):
    """A fresh offrl ensemble with tight log-variance bounds (so the soft clamp matters) and
    weights scaled up (so raw log-variances reach past both bounds)."""
    import jax
    import jax.numpy as jnp

    from offrl import dynamics as dyn

    settings = dyn.DynamicsSettings(ensemble_size=MEMBERS, num_elites=2, model_hidden_dims=HIDDEN)
    model = dyn.init_dynamics(settings, OBS, ACT, jax.random.PRNGKey(seed))
    member = dict(model.params["params"]["VmapGaussianMember_0"])
    for name in member:
        if name.startswith("Dense_"):
            member[name] = {"kernel": 3.0 * member[name]["kernel"],
                            "bias": jax.random.normal(jax.random.PRNGKey(seed + 1), member[name]["bias"].shape)}
    member["max_logvar"] = jnp.full_like(member["max_logvar"], max_logvar)
    member["min_logvar"] = jnp.full_like(member["min_logvar"], min_logvar)
    return model.replace(params={"params": {"VmapGaussianMember_0": member}})


def copy_into_peer(model, peer, weight_decays):
    """offrl's member weights as the peer's (the peer has no terminal logit: that output column is dropped)."""
    member = model.params["params"]["VmapGaussianMember_0"]
    net = peer.EnsembleModel(OBS, ACT, HIDDEN, MEMBERS, weight_decays)
    out = OBS + 1
    with torch.no_grad():
        for l, layer in enumerate(net.layers()):
            kernel, bias = np.array(member[f"Dense_{l}"]["kernel"]), np.array(member[f"Dense_{l}"]["bias"])
            if layer is net.output:
                kernel, bias = kernel[..., : 2 * out], bias[..., : 2 * out]
            layer.weight.copy_(torch.as_tensor(kernel))
            layer.bias.copy_(torch.as_tensor(bias)[:, None, :])
        net.max_logvar.copy_(torch.as_tensor(np.array(member["max_logvar"][0])))
        net.min_logvar.copy_(torch.as_tensor(np.array(member["min_logvar"][0])))
    return net


def offrl_decays(base: float, layers: int) -> list[float]:
    return [base * (1.0 + 3.0 * l / (layers - 1)) for l in range(layers)]


def test_gaussian_nll_by_hand(peer):
    # member 0: error 1, logvar 0 -> 1 per entry; member 1: error 2, logvar log 2 -> 4/2 + log 2
    mean = torch.tensor([[[1.0, 1.0]], [[2.0, 2.0]]])
    logvar = torch.tensor([[[0.0, 0.0]], [[np.log(2.0)] * 2]], dtype=torch.float32)
    targets = torch.zeros(1, 2)
    assert peer.gaussian_nll(mean, logvar, targets).item() == pytest.approx(1.0 + 2.0 + np.log(2.0), rel=1e-6)


def test_soft_clamp_by_hand(peer):
    sp = lambda v: float(np.log1p(np.exp(v)))  # noqa: E731
    low, high = torch.tensor([-1.0]), torch.tensor([1.0])
    x = torch.tensor([0.0, 50.0, -50.0])
    # v = 1 - softplus(1 - x), then -1 + softplus(v + 1)
    expected = [-1.0 + sp(1.0 - sp(1.0 - xi) + 1.0) for xi in (0.0, 50.0, -50.0)]
    out = peer.soft_clamp(x, low, high).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert out[0] == pytest.approx(0.09437, abs=1e-4)      # softplus(1) = 1.31326, softplus(0.68674) = 1.09437
    assert out[1] == pytest.approx(1.126928, abs=1e-5)     # far above: -1 + softplus(2); a soft bound, not a hard one
    assert out[2] == pytest.approx(-1.0, abs=1e-6)         # far below: -1 + softplus(-49)


def test_forward_nll_and_decay_match_offrl(peer):
    import jax.numpy as jnp

    from offrl import dynamics as dyn

    model = offrl_model()
    decays = offrl_decays(2.5e-5, len(HIDDEN) + 1)
    net = copy_into_peer(model, peer, decays)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((MEMBERS, 16, OBS + ACT)).astype(np.float32)
    y = rng.standard_normal((MEMBERS, 16, OBS + 1)).astype(np.float32)

    mean, logvar, _ = model.net.apply(model.params, jnp.asarray(x))
    p_mean, p_logvar = net(x)
    np.testing.assert_allclose(p_mean.detach().numpy(), np.asarray(mean), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(p_logvar.detach().numpy(), np.asarray(logvar), rtol=1e-5, atol=1e-5)
    assert float(jnp.max(logvar)) > 0.0 and float(jnp.min(logvar)) < -0.2  # the clamp is exercised near both bounds

    ours = float(dyn.gaussian_nll(mean, logvar, jnp.asarray(y)))
    theirs = peer.gaussian_nll(p_mean, p_logvar, torch.as_tensor(y)).item()
    assert theirs == pytest.approx(ours, rel=1e-5)
    # offrl's output layer has one more column (the terminal logit), decayed with the last coefficient
    logit_column = np.asarray(model.params["params"]["VmapGaussianMember_0"][f"Dense_{len(HIDDEN)}"]["kernel"])[..., -1]
    logit_decay = 0.5 * decays[-1] * float(np.sum(logit_column.astype(np.float64) ** 2))
    assert net.decay_loss().item() + logit_decay == pytest.approx(float(dyn.weight_decay(model.params, 2.5e-5)), rel=1e-5)

    # the whole loss: offrl's adds a BCE term and counts the (per-member) log-variance bounds once per member
    terminals = jnp.zeros((MEMBERS, 16))
    total, _ = dyn.model_loss(model.params, model.net, jnp.asarray(x), jnp.asarray(y), terminals, 2.5e-5)
    _, _, logit = model.net.apply(model.params, jnp.asarray(x))
    bce = float(jnp.sum(jnp.mean(jnp.logaddexp(0.0, logit), axis=-1)))  # BCE against 0 targets
    bounds = 0.01 * (0.2 - (-0.4)) * (OBS + 1)
    peer_total = peer.model_loss(net, x, torch.as_tensor(y)).item()
    assert peer_total - bounds + logit_decay == pytest.approx(float(total) - bce - MEMBERS * bounds, rel=1e-5)


def test_mopo_penalty_matches_offrl(peer):
    import jax
    import jax.numpy as jnp

    from offrl import dynamics as dyn
    from offrl.algos.mopo import penalised_rewards

    # by hand: member norms 5 and 1 on row 0, 0 and 2 on row 1
    std = np.array([[[3.0, 4.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 2.0]]])
    np.testing.assert_allclose(peer.mopo_uncertainty(std), [5.0, 2.0])
    np.testing.assert_allclose(np.asarray(dyn.mopo_uncertainty(jnp.asarray(std))), [5.0, 2.0])

    # the same weights and input normaliser: the peer's step penalty is offrl's u(s, a)
    model = offrl_model(seed=3)
    rng = np.random.default_rng(1)
    obs = rng.standard_normal((32, OBS)).astype(np.float32)
    actions = rng.uniform(-1, 1, (32, ACT)).astype(np.float32)
    dynamics = peer.EnsembleDynamics(OBS, ACT, HIDDEN, MEMBERS, elites=2, weight_decays=offrl_decays(2.5e-5, 3),
                                     penalty_coef=2.0)
    dynamics.model = copy_into_peer(model, peer, offrl_decays(2.5e-5, 3))
    mu, sigma = rng.standard_normal(OBS + ACT).astype(np.float32), rng.uniform(0.5, 2.0, OBS + ACT).astype(np.float32)
    dynamics.mu, dynamics.sigma = mu[None], sigma[None]
    model = model.replace(input_mean=jnp.asarray(mu), input_std=jnp.asarray(sigma))
    _, std_ours, _ = dyn.predict(model, jnp.asarray(obs), jnp.asarray(actions))
    next_obs, rewards, terminals, u = dynamics.step(obs, actions)
    np.testing.assert_allclose(u[:, 0], np.asarray(dyn.mopo_uncertainty(std_ours)), rtol=1e-5)
    zeros = jnp.zeros(32)
    np.testing.assert_allclose(np.asarray(penalised_rewards(zeros, std_ours, 2.0)), -2.0 * u[:, 0], rtol=1e-5)
    assert next_obs.shape == (32, OBS) and rewards.shape == (32, 1) and not terminals.any()


def test_peer_fit_learns_a_linear_model(peer):
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((600, OBS)).astype(np.float32)
    actions = rng.uniform(-1, 1, (600, ACT)).astype(np.float32)
    next_obs = obs + 0.5 * actions[:, :1]
    rewards = obs[:, 0] - actions[:, 1]
    dynamics = peer.EnsembleDynamics(OBS, ACT, (32, 32), MEMBERS, elites=2, weight_decays=(0.0, 0.0, 0.0), batch_size=64)
    dynamics.begin_fit(obs, actions, rewards, next_obs)
    first = dynamics.fit_epoch()
    assert first["steps"] == int(np.ceil(480 / 64))
    for _ in range(30):
        last = dynamics.fit_epoch()
    assert last["holdout_mse"].mean() < 0.2 * first["holdout_mse"].mean()
    dynamics.end_fit()
    assert sorted(dynamics.elites.tolist()) == sorted(np.argsort(dynamics.best)[:2].tolist())


def test_peer_rollout_drops_terminated_rows(peer):
    rng = np.random.default_rng(0)
    n = 50
    obs = rng.standard_normal((n, OBS)).astype(np.float32)
    actions = rng.uniform(-1, 1, (n, ACT)).astype(np.float32)
    real = peer.ReplayBuffer.of(obs, actions, np.zeros(n), obs, np.zeros(n))
    dynamics = peer.EnsembleDynamics(OBS, ACT, (8,), MEMBERS, elites=2, weight_decays=(0.0, 0.0))
    agent = peer.MOPO(OBS, ACT, dynamics, hidden=(16, 16), rollout_starts=20, horizon=4)
    assert agent.refill(real, 20, 4) == 80  # never terminal: every row lives 4 steps
    dynamics.terminal_fn = lambda o, a, s: np.ones((o.shape[0], 1), bool)
    assert agent.refill(real, 20, 4) == 20  # all terminal at once: one step each
    assert agent.model_buffer.size == 100
    info = agent.update(*agent.mixed_batch(real, 40))
    assert all(np.isfinite(v) for v in info.values())


def test_benchmark_refuses_a_bad_flag():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("model_based_speed", ROOT / "benchmarks" / "model_based_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from offrl.errors import ConfigError

    with pytest.raises(ConfigError, match="--sections"):
        module.main(["--sections", "dynamics,planning"])
    with pytest.raises(ConfigError, match="--kit"):
        module.main(["--kit", str(ROOT / "no-such-folder")])


@pytest.mark.slow
def test_benchmark_quick_run_writes_every_section(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("model_based_speed", ROOT / "benchmarks" / "model_based_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "speed.json"
    assert module.main(["--quick", "--torch-threads", "1", "--json", str(out)]) == 0
    import json

    record = json.loads(out.read_text())
    assert set(record["sections"]) == {"dynamics", "mopo", "rollout"}
    for row in record["ratios"]:
        assert row["peer_rate"] > 0 and row["ratio"] == pytest.approx(row["offrl_rate"] / row["peer_rate"])
    assert record["sections"]["rollout"]["offrl"]["units_per_round"] == 1000 * 5  # every row lives the horizon
    assert record["sections"]["rollout"]["torch reference"]["units_per_round"] == 1000 * 5
