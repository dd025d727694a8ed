"""Every estimator of one target policy against its value in closed form, on a 1-D linear-Gaussian system.

    s_0 ~ N(m0, v0),   s_{t+1} = A s_t + B a_t + w_t,   w_t ~ N(0, sw^2),   r_t = -(q s_t^2 + rho a_t^2)

Under a policy ``a ~ N(k s, sd^2)`` the state stays Gaussian (forward moments):
``m_{t+1} = (A + B k) m_t``, ``v_{t+1} = (A + B k)^2 v_t + B^2 sd^2 + sw^2``, and with ``E s_t^2 = m_t^2 + v_t``

    J_H = sum_{t<H} gamma^t E r_t = -sum_{t<H} gamma^t [q E s_t^2 + rho (k^2 E s_t^2 + sd^2)].

Backwards (exact time-dependent Q of that policy): ``V_H = 0``, ``V_t(s) = -(P_t s^2 + c_t)``,

    Q_t(s, a) = -(q s^2 + rho a^2) - gamma [P_{t+1} ((A s + B a)^2 + sw^2) + c_{t+1}]
    P_t = q + rho k^2 + gamma P_{t+1} (A + B k)^2,   c_t = rho sd^2 + gamma [P_{t+1} (B^2 sd^2 + sw^2) + c_{t+1}]

and the discounted infinite-horizon value is the fixed point ``P = (q + rho k^2) / (1 - gamma (A + B k)^2)``,
``c = (rho sd^2 + gamma P (B^2 sd^2 + sw^2)) / (1 - gamma)``, ``J = -(P (m0^2 + v0) + c)``.
Behaviour ``N(KB s, SB^2)`` logs the data; the target is ``N(KT s, ST^2)``. The estimators get the
target's log-density from :class:`offrl.ope.policies.GaussianPolicy` (unbounded box: the plain Gaussian).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from offrl.ope import estimators as est
from offrl.ope.policies import GaussianPolicy

A, B, SW, Q_S, RHO, M0, V0 = 0.9, 0.5, 0.3, 1.0, 0.5, 1.0, 0.25
KB, SB = -0.2, 0.6          # behaviour
KT, ST = -0.5, 0.4          # target
GAMMA, H = 0.9, 5


def forward_value(k, sd, horizon, gamma, m0=M0, v0=V0):
    """``J_H`` by the forward recursion on the state's mean and variance."""
    m, v, value = m0, v0, 0.0
    for t in range(horizon):
        second = m * m + v
        value += gamma**t * -(Q_S * second + RHO * (k * k * second + sd * sd))
        m, v = (A + B * k) * m, (A + B * k) ** 2 * v + B * B * sd * sd + SW * SW
    return value


def backward(k, sd, horizon, gamma):
    """``(P_t, c_t)`` for ``t = 0..H`` (``P_H = c_H = 0``)."""
    p, c = np.zeros(horizon + 1), np.zeros(horizon + 1)
    for t in range(horizon - 1, -1, -1):
        p[t] = Q_S + RHO * k * k + gamma * p[t + 1] * (A + B * k) ** 2
        c[t] = RHO * sd * sd + gamma * (p[t + 1] * (B * B * sd * sd + SW * SW) + c[t + 1])
    return p, c


def infinite_value(k, sd, gamma):
    p = (Q_S + RHO * k * k) / (1 - gamma * (A + B * k) ** 2)
    c = (RHO * sd * sd + gamma * p * (B * B * sd * sd + SW * SW)) / (1 - gamma)
    return -(p * (M0**2 + V0) + c)


P, C = backward(KT, ST, H, GAMMA)
STEPS = np.arange(H)
TRUTH = forward_value(KT, ST, H, GAMMA)


def q_exact(s, a, t=STEPS):
    return -(Q_S * s * s + RHO * a * a) - GAMMA * (P[t + 1] * ((A * s + B * a) ** 2 + SW * SW) + C[t + 1])


def v_exact(s, t=STEPS):
    return -(P[t] * s * s + C[t])


TARGET = GaussianPolicy(lambda obs: KT * obs[:, :1], np.array([-np.inf]), np.array([np.inf]),
                        std_fn=lambda obs: np.full((len(obs), 1), ST), name="target")


def simulate(datasets: int, n: int, rng, horizon: int = H, kb: float = KB, sb: float = SB):
    """``datasets`` independent datasets of ``n`` behaviour episodes: ``s, a, r, s', log rho``, each ``(R, n, H)``."""
    s, a, nxt = (np.empty((datasets, n, horizon)) for _ in range(3))
    x = M0 + math.sqrt(V0) * rng.normal(size=(datasets, n))
    for t in range(horizon):
        s[..., t] = x
        a[..., t] = kb * x + sb * rng.normal(size=x.shape)
        x = A * x + B * a[..., t] + SW * rng.normal(size=x.shape)
        nxt[..., t] = x
    r = -(Q_S * s * s + RHO * a * a)
    log_b = -0.5 * ((a - kb * s) / sb) ** 2 - math.log(sb) - 0.5 * math.log(2 * math.pi)
    log_t = TARGET.log_prob(s.reshape(-1, 1), a.reshape(-1, 1)).reshape(s.shape)
    return s, a, r, nxt, log_t - log_b


def episodes(r, log_ratio, q=None, v=None, i=0):
    n = r.shape[1]
    return est.Episodes(r[i], log_ratio[i], np.ones((n, r.shape[2]), bool), GAMMA,
                        None if q is None else q[i], None if v is None else v[i])


def estimates(name, r, log_ratio, q=None, v=None):
    return np.array([est.point_estimate(episodes(r, log_ratio, q, v, i), name) for i in range(len(r))])


def z_score(values, truth):
    """``(mean - truth) / standard error of the mean`` over independent datasets."""
    return (values.mean() - truth) / (values.std(ddof=1) / math.sqrt(len(values)))


# ---------------------------------------------------------------------- the closed forms
def test_forward_moments_and_backward_recursion_agree():
    assert -(P[0] * (M0**2 + V0) + C[0]) == pytest.approx(TRUTH, rel=1e-12)
    assert forward_value(KT, ST, 400, 0.8) == pytest.approx(infinite_value(KT, ST, 0.8), rel=1e-10)
    # the smoothed policy's value is not the deterministic one's: the tests below can tell them apart
    assert TRUTH - forward_value(KT, 0.0, H, GAMMA) < -0.3


# ---------------------------------------------------------------------- DR and the IS family
@pytest.fixture(scope="module")
def repeated():
    """400 independent datasets at each of n = 50, 200, 800 episodes."""
    rng = np.random.default_rng(0)
    return {n: simulate(400, n, rng) for n in (50, 200, 800)}


def test_dr_with_the_exact_q_is_unbiased_and_its_error_shrinks_with_n(repeated):
    spread = {}
    for n, (s, a, r, _, log_ratio) in repeated.items():
        dr = estimates("dr", r, log_ratio, q_exact(s, a), v_exact(s))
        assert abs(z_score(dr, TRUTH)) < 3, (n, dr.mean(), TRUTH)
        spread[n] = dr.std(ddof=1)
        # the other estimators of the same target policy agree with the same truth
        for name in ("pdis", "wpdis", "wdr"):
            values = estimates(name, r, log_ratio, q_exact(s, a), v_exact(s))
            assert abs(z_score(values, TRUTH)) < 3, (n, name, values.mean(), TRUTH)
    # the error scales as 1 / sqrt(n): each 4x more episodes halves it
    assert spread[200] / spread[50] == pytest.approx(0.5, abs=0.1)
    assert spread[800] / spread[200] == pytest.approx(0.5, abs=0.1)
    # a good Q is what DR's variance reduction buys: well below per-decision IS on the same data
    s, a, r, _, log_ratio = repeated[200]
    assert spread[200] < 0.7 * estimates("pdis", r, log_ratio).std(ddof=1)


def test_dr_with_a_wrong_q_is_still_unbiased(repeated):
    # Q~ = Q / 2 + 2 + s - a is wrong everywhere; V~(s) = E_{a~pi} Q~(s, a) = V(s) / 2 + 2 + s - KT s exactly.
    wrong_sd = {}
    for n, (s, a, r, _, log_ratio) in repeated.items():
        dr = estimates("dr", r, log_ratio, 0.5 * q_exact(s, a) + 2 + s - a, 0.5 * v_exact(s) + 2 + s - KT * s)
        assert abs(z_score(dr, TRUTH)) < 3, (n, dr.mean(), TRUTH)
        wrong_sd[n] = dr.std(ddof=1)
    s, a, r, _, log_ratio = repeated[200]
    assert wrong_sd[200] > 1.5 * estimates("dr", r, log_ratio, q_exact(s, a), v_exact(s)).std(ddof=1)


def test_v_at_the_mean_action_biases_dr_by_the_closed_form_amount(repeated):
    # The defect this suite guards: V(s) read at the mean action, Q(s, KT s), while the weights use the
    # Gaussian. Q_t(s, KT s) - E_a Q_t(s, a) = (rho + gamma P_{t+1} B^2) ST^2, and E_b[w_{t-1} f(s_t)] = E_pi f(s_t),
    # so E[DR] - J = sum_t gamma^t (rho + gamma P_{t+1} B^2) ST^2, whatever n.
    bias = sum(GAMMA**t * (RHO + GAMMA * P[t + 1] * B * B) * ST**2 for t in range(H))
    for n, (s, a, r, _, log_ratio) in repeated.items():
        dr = estimates("dr", r, log_ratio, q_exact(s, a), q_exact(s, KT * s))
        assert abs(z_score(dr, TRUTH + bias)) < 3, (n, dr.mean() - TRUTH, bias)
        assert z_score(dr, TRUTH) > 25


def test_dr_with_fqes_sampled_v_is_unbiased(repeated):
    # V from offrl.ope.fqe.policy_value: the mean of Q(s, a_k) over value_samples draws a_k ~ pi(.|s)
    # (antithetic pairs), here with the exact Q as the critic. A noisy but unbiased V keeps DR unbiased.
    import jax
    import jax.numpy as jnp

    from offrl.ope import fqe

    class ExactCritic:
        """``Q_t(s, a)`` with ``params = (P_{t+1}, c_{t+1})`` per row."""

        @staticmethod
        def apply(params, obs, actions):
            p_next, c_next = params
            s, a = obs[..., 0], actions[..., 0]
            return -(Q_S * s * s + RHO * a * a) - GAMMA * (p_next * ((A * s + B * a) ** 2 + SW * SW) + c_next)

    s, a, r, _, log_ratio = repeated[200]
    config = fqe.FQEConfig(value_samples=4)
    t = np.broadcast_to(STEPS, s.shape).reshape(-1)
    obs = jnp.asarray(s.reshape(-1, 1))
    target = fqe.GaussianTarget(KT * obs, jnp.full_like(obs, ST))
    value = jax.jit(lambda params, obs, target, key: fqe.policy_value(ExactCritic, params, obs, target, config, key,
                                                                       -jnp.inf, jnp.inf, config.value_samples))
    v = np.asarray(value((jnp.asarray(P[t + 1]), jnp.asarray(C[t + 1])), obs, target, jax.random.PRNGKey(0))).reshape(s.shape)
    assert np.abs(v - v_exact(s)).max() > 1e-3                       # it is a Monte-Carlo V ...
    assert abs((v - v_exact(s)).mean()) < 3 * (v - v_exact(s)).std() / math.sqrt(v.size)   # ... without bias
    dr = estimates("dr", r, log_ratio, q_exact(s, a), v)
    assert abs(z_score(dr, TRUTH)) < 3


@pytest.mark.parametrize("ci", ["bootstrap", "t"])
def test_drs_interval_covers_the_truth_at_the_nominal_rate(ci):
    datasets = 200
    s, a, r, _, log_ratio = simulate(datasets, 200, np.random.default_rng(1))
    q, v = q_exact(s, a), v_exact(s)
    intervals = [est.estimate(episodes(r, log_ratio, q, v, i), "dr", ci=ci, confidence=0.95, seed=i).ci for i in range(datasets)]
    covered = [low <= TRUTH <= high for low, high in intervals]
    # 95% nominal: binomial sd over 200 datasets is 1.5 points
    assert 0.90 <= np.mean(covered) <= 0.99, np.mean(covered)


# ---------------------------------------------------------------------- FQE, end to end
def test_fqe_and_dr_end_to_end_estimate_the_smoothed_policy():
    """``evaluate_policies`` with the JAX FQE on this system: a deterministic policy ``a = KT s``
    evaluated with ``target_std`` 0.04 on the box [-10, 10] (sigma = 0.4 = ST), so the truncation is
    below 1e-60 and the closed form holds; discount 0.8, 200 logged episodes of 30 steps. FQE's
    ``V(s_0)`` must land within 5% of the smoothed policy's value, which is 20% away from the
    deterministic policy's (what FQE fitted for the mean action estimated)."""
    from offrl.data.dataset import Dataset
    from offrl.ope.evaluate import OPEConfig, evaluate_policies
    from offrl.ope.fqe import FQEConfig

    gamma, horizon, n = 0.8, 30, 200
    s, a, r, nxt, _ = simulate(1, n, np.random.default_rng(2), horizon, kb=-0.4, sb=0.5)
    log_b = -0.5 * ((a + 0.4 * s) / 0.5) ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)
    timeouts = np.zeros(s.shape, bool)
    timeouts[..., -1] = True
    flat = lambda x: x.reshape(-1, 1).astype(np.float32)  # noqa: E731
    ds = Dataset.from_arrays(flat(s), flat(a), r.reshape(-1).astype(np.float32), np.zeros(s.size, bool), timeouts.reshape(-1),
                             next_observations=flat(nxt), infos={"action_log_probs": log_b.reshape(-1).astype(np.float32)})
    assert np.abs(s).max() < 10 and np.abs(a).max() < 10
    policy = GaussianPolicy(lambda obs: KT * obs[:, :1], np.array([-10.0]), np.array([10.0]), std=0.04, name="target")
    config = OPEConfig(estimators=("fqe", "dr", "wdr", "wpdis"), discount=gamma, fqe_steps=2000, num_bootstrap=200,
                       fqe=FQEConfig(hidden_dims=(64, 64), learning_rate=2e-3, tau=0.02))
    results = evaluate_policies([policy], ds, config).results["target"]
    truth_infinite = infinite_value(KT, ST, gamma)                   # what FQE's V(s_0) targets (it bootstraps at timeouts)
    truth_horizon = forward_value(KT, ST, horizon, gamma)            # what the weighted estimators target (30 steps)
    tolerance = 0.05 * abs(truth_infinite)
    assert abs(truth_infinite - infinite_value(KT, 0.0, gamma)) > 3 * tolerance   # the deterministic value would fail
    assert abs(results["fqe"].estimate - truth_infinite) < tolerance, results["fqe"].estimate
    assert abs(results["dr"].estimate - truth_horizon) < tolerance, results["dr"].estimate
    for name in ("dr", "wdr", "wpdis"):                              # one dataset: its intervals hold the truth
        assert results[name].ci_low <= truth_horizon <= results[name].ci_high, (name, results[name].ci)


def long_horizon_dataset(gamma_horizon: int = 100, n: int = 100, seed: int = 7):
    """``n`` behaviour episodes of ``gamma_horizon`` steps, cut by timeouts (FQE bootstraps there)."""
    from offrl.data.dataset import Dataset

    s, a, r, nxt, _ = simulate(1, n, np.random.default_rng(seed), gamma_horizon, kb=-0.4, sb=0.5)
    log_b = -0.5 * ((a + 0.4 * s) / 0.5) ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)
    timeouts = np.zeros(s.shape, bool)
    timeouts[..., -1] = True
    flat = lambda x: x.reshape(-1, 1).astype(np.float32)  # noqa: E731
    return Dataset.from_arrays(flat(s), flat(a), r.reshape(-1).astype(np.float32), np.zeros(s.size, bool), timeouts.reshape(-1),
                               next_observations=flat(nxt), infos={"action_log_probs": log_b.reshape(-1).astype(np.float32)})


def fqe_at_discount_099(ope_overrides=None, **fqe_overrides):
    from offrl.ope.evaluate import OPEConfig, evaluate_policies
    from offrl.ope.fqe import FQEConfig

    ds = long_horizon_dataset()
    policy = GaussianPolicy(lambda obs: KT * obs[:, :1], np.array([-10.0]), np.array([10.0]), std=0.04, name="target")
    config = OPEConfig(estimators=("fqe",), discount=0.99, num_bootstrap=20, fqe=FQEConfig(hidden_dims=(64, 64), **fqe_overrides),
                       **(ope_overrides or {}))
    report = evaluate_policies([policy], ds, config)
    return report.results["target"]["fqe"].estimate, report.fqe


def test_fqe_with_its_defaults_reaches_the_closed_form_value_at_discount_099():
    """At gamma 0.99 the value is ~100 steps of reward deep (J = -35.3, 93% of it the constant
    c / (1 - gamma) that only repeated backups carry back). FQE with its default target-network
    rate, learning rate, return scaling and stopping rule (only the width narrowed to 64 x 64)
    must land within 5% of it and report that it flattened before its cap (measured: 0.96 of the
    truth at 11-13k steps; run on to 30k it stays at 0.967, the fit this dataset allows). The
    previous defaults (Polyak 0.005, Adam 1e-4, raw rewards, a fixed 20k steps) reach 0.61 of it."""
    truth = infinite_value(KT, ST, 0.99)
    estimate, curve = fqe_at_discount_099()
    assert curve["converged"] and curve["final_step"] < 60_000, curve["final_step"]
    assert curve["outside_value_bounds"] == [] and curve["value_bounds"][0] < truth < curve["value_bounds"][1]
    assert abs(estimate - truth) < 0.05 * abs(truth), (estimate, truth, curve["final_step"])
