"""Policy-gradient RLHF pieces against hand-computed numbers."""

import math

import pytest

torch = pytest.importorskip("torch")

from offrl.prefs import rl_losses as R  # noqa: E402


def t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def close(x, expected):
    torch.testing.assert_close(x.double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-9, atol=1e-12)


def test_kl_estimators_hand_computed():
    logps, ref = t([-1.0, -2.0]), t([-1.5, -1.0])  # log r = ref - logp = (-0.5, 1.0)
    close(R.kl_estimate(logps, ref, "k1"), [[0.5, -1.0]])
    close(R.kl_estimate(logps, ref, "k2"), [[0.125, 0.5]])
    k3 = [math.exp(-0.5) - 1 + 0.5, math.exp(1.0) - 1 - 1.0]
    close(R.kl_estimate(logps, ref, "k3"), [k3])
    assert bool((R.kl_estimate(logps, ref, "k3") >= 0).all())
    # both k1 and k3 are unbiased: under y ~ p their means equal KL(p || q) exactly
    p, q = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64), torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)
    exact = float((p * (p / q).log()).sum())
    for est in ("k1", "k3"):
        assert float((p * R.kl_estimate(p.log(), q.log(), est)).sum()) == pytest.approx(exact, abs=1e-12)
    with pytest.raises(ValueError):
        R.kl_estimate(logps, ref, "k9")


def test_per_token_rewards_put_the_score_on_the_last_token():
    kl = t([0.1, 0.2, 0.3], [0.5, 0.5, 0.5], [1.0, 1.0, 1.0])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    rewards, non_score = R.per_token_rewards(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), kl, mask, 0.5)
    close(non_score, [[-0.05, -0.1, 0.0], [-0.25, -0.25, -0.25], [0.0, 0.0, 0.0]])
    close(rewards, [[-0.05, 0.9, 0.0], [-0.25, -0.25, 1.75], [0.0, 0.0, 0.0]])


def _gae_by_hand(r, v, gamma, lam):
    """The textbook loop on one unpadded episode."""
    T = len(r)
    adv = [0.0] * T
    running = 0.0
    for k in reversed(range(T)):
        nv = v[k + 1] if k + 1 < T else 0.0
        running = r[k] + gamma * nv - v[k] + gamma * lam * running
        adv[k] = running
    return adv


def test_gae_equals_a_hand_loop_and_respects_padding():
    gamma, lam = 0.9, 0.8
    r1, v1 = [0.0, -0.1, 1.0], [0.5, 0.4, 0.7]
    r2, v2 = [0.2, 2.0], [0.1, -0.3]
    rewards = t(r1, r2 + [9.0])  # the 9.0 sits in padding and must be ignored
    values = t(v1, v2 + [5.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv, ret = R.generalized_advantage_estimation(rewards, values, mask, gamma, lam)
    assert adv[0].tolist() == pytest.approx(_gae_by_hand(r1, v1, gamma, lam))
    assert adv[1, :2].tolist() == pytest.approx(_gae_by_hand(r2, v2, gamma, lam)) and adv[1, 2] == 0
    assert ret[0].tolist() == pytest.approx([a + v for a, v in zip(_gae_by_hand(r1, v1, gamma, lam), v1)])
    # one number by hand: last token of episode 2: delta = 2.0 - (-0.3) = 2.3
    assert adv[1, 1].item() == pytest.approx(2.3)
    # first token: delta = 0.2 + 0.9 * -0.3 - 0.1 = -0.17; A = -0.17 + 0.72 * 2.3
    assert adv[1, 0].item() == pytest.approx(-0.17 + 0.72 * 2.3)
    # gamma = lam = 1: advantages are reward-to-go minus the value
    adv, _ = R.generalized_advantage_estimation(rewards, values, mask, 1.0, 1.0)
    assert adv[0].tolist() == pytest.approx([0.9 - 0.5, 0.9 - 0.4, 1.0 - 0.7])


def test_clipped_surrogate_hand_computed():
    old = t([0.0, 0.0, 0.0, 0.0])
    logps = t([math.log(1.5), math.log(0.5), math.log(1.1), math.log(0.7)])  # ratios 1.5, 0.5, 1.1, 0.7
    adv = t([1.0, 1.0, -2.0, -1.0])
    mask = torch.ones(1, 4)
    loss, stats = R.clipped_surrogate_loss(logps, old, adv, mask, clip_range=0.2)
    # token terms max(-A rho, -A clip(rho)): (-1.2 vs -1.5 -> -1.2), (-0.5 vs -0.8 -> -0.5),
    # (2.2 vs 2.2 -> 2.2), (0.7 vs 0.8 -> 0.8)
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 2.2 + 0.8) / 4)
    assert stats["clipfrac"].item() == pytest.approx(2 / 4)  # tokens 1 and 4 take the clipped term
    assert stats["approxkl"].item() == pytest.approx(
        sum(0.5 * math.log(r) ** 2 for r in (1.5, 0.5, 1.1, 0.7)) / 4)
    # at the old policy the gradient is -A (the vanilla policy gradient)
    x = old.clone().requires_grad_()
    R.clipped_surrogate_loss(x, old, adv, mask, 0.2)[0].backward()
    close(x.grad, [[-a / 4 for a in (1.0, 1.0, -2.0, -1.0)]])
    # padding is ignored
    loss_masked, _ = R.clipped_surrogate_loss(logps, old, adv, torch.tensor([[1, 1, 0, 0]]), 0.2)
    assert loss_masked.item() == pytest.approx((-1.2 - 0.5) / 2)


def test_clipped_value_loss_hand_computed():
    values, old, returns = t([1.0, 0.0]), t([0.5, 0.5]), t([2.0, 0.0])
    loss, clipfrac = R.clipped_value_loss(values, old, returns, torch.ones(1, 2), clip_range=0.2)
    # token 1: v=1 -> err 1; clipped v=0.7 -> err 1.69 (max 1.69); token 2: err 0, clipped 0.3 -> 0.09
    assert loss.item() == pytest.approx(0.5 * (1.69 + 0.09) / 2)
    assert clipfrac.item() == pytest.approx(1.0)


def test_group_advantages_grpo_and_rloo():
    r = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 2.0, 2.0, 2.0], dtype=torch.float64)
    a = R.group_advantages(r, 4, "grpo", eps=0.0 + 1e-12)
    std = math.sqrt(((0.5 ** 2) * 2) / 3)  # group 1: mean 0.5, deviations (0.5, -0.5, 0, 0), unbiased std
    assert a[:4].tolist() == pytest.approx([0.5 / std, -0.5 / std, 0.0, 0.0])
    assert a[4:].tolist() == pytest.approx([0.0] * 4)  # all equal: no signal
    assert R.group_advantages(r, 4, "grpo", scale=False)[:4].tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])
    rloo = R.group_advantages(r, 4, "rloo")
    # r_1 minus the mean of the other three: 1 - (0 + 0.5 + 0.5)/3
    assert rloo[:4].tolist() == pytest.approx([1 - 1 / 3, 0 - 2 / 3, 0.5 - 0.5, 0.5 - 0.5])
    assert rloo[4:].tolist() == pytest.approx([0.0] * 4)
    # RLOO is the centred reward scaled by G/(G-1)
    assert rloo.tolist() == pytest.approx((R.group_advantages(r, 4, "grpo", scale=False) * 4 / 3).tolist())
    with pytest.raises(ValueError):
        R.group_advantages(r, 3)


def test_adaptive_kl_controller_update():
    fixed = R.kl_controller_init(0.1)
    assert R.kl_controller_update(fixed, 100.0, 64) == fixed
    state = R.kl_controller_init(0.2, target=6.0, horizon=10000)
    # KL 9 -> e = clip(0.5) = 0.2; beta = 0.2 * (1 + 0.2 * 512 / 10000)
    up = R.kl_controller_update(state, 9.0, 512)
    assert up.coef == pytest.approx(0.2 * (1 + 0.2 * 512 / 10000))
    # KL 4.5 -> e = -0.25 -> clipped to -0.2
    down = R.kl_controller_update(state, 4.5, 512)
    assert down.coef == pytest.approx(0.2 * (1 - 0.2 * 512 / 10000))
    # KL 6.6 -> e = 0.1 (inside the clip)
    assert R.kl_controller_update(state, 6.6, 1000).coef == pytest.approx(0.2 * (1 + 0.1 * 0.1))


def test_whiten_and_masked_mean_and_entropy():
    x, mask = t([1.0, 2.0, 3.0, 100.0]), torch.tensor([[1, 1, 1, 0]])
    assert R.masked_mean(x, mask).item() == pytest.approx(2.0)
    w = R.masked_whiten(x, mask, eps=0.0)
    close(w, [[-1.0, 0.0, 1.0, 0.0]])  # unbiased std of (1, 2, 3) is 1
    close(R.masked_whiten(x, mask, shift_mean=False, eps=0.0), [[1.0, 2.0, 3.0, 0.0]])
    uniform = torch.zeros(2, 4)
    assert R.entropy_from_logits(uniform).tolist() == pytest.approx([math.log(4)] * 2)
