"""Each preference loss against hand-computed numbers and its known limits."""

import math

import pytest

torch = pytest.importorskip("torch")

from offrl.prefs import losses as L  # noqa: E402


def t(*values):
    return torch.tensor(values, dtype=torch.float64)


def test_dpo_hand_computed():
    # h = (-1 - -2) - (-3 - -2.5) = 1 - (-0.5) = 1.5; beta*h = 0.15; -log sigma(0.15)
    losses, r_c, r_r = L.dpo_loss(t(-1.0), t(-3.0), t(-2.0), t(-2.5), beta=0.1)
    assert losses.item() == pytest.approx(math.log1p(math.exp(-0.15)), abs=1e-12)
    assert r_c.item() == pytest.approx(0.1 * 1.0)
    assert r_r.item() == pytest.approx(0.1 * -0.5)
    # policy == reference: log 2
    losses, _, _ = L.dpo_loss(t(-4.0, -1.0), t(-2.0, -7.0), t(-4.0, -1.0), t(-2.0, -7.0), beta=0.5)
    assert torch.allclose(losses, torch.full((2,), math.log(2.0), dtype=torch.float64))


def test_dpo_gradient_vanishes_as_beta_goes_to_zero():
    grads = []
    for beta in (1.0, 1e-1, 1e-3, 1e-6):
        pi_c = t(-1.0).requires_grad_()
        losses, _, _ = L.dpo_loss(pi_c, t(-3.0), t(-2.0), t(-2.5), beta=beta)
        losses.sum().backward()
        # d/d pi_c [-log sigma(beta h)] = -beta * sigma(-beta h)
        assert pi_c.grad.item() == pytest.approx(-beta * (1 / (1 + math.exp(beta * 1.5))), rel=1e-9)
        grads.append(abs(pi_c.grad.item()))
    assert grads == sorted(grads, reverse=True) and grads[-1] < 1e-6


def test_ipo_squared_target():
    beta = 0.25  # target margin 1/(2 beta) = 2
    losses, _, _ = L.ipo_loss(t(-1.0), t(-3.0), t(-1.0), t(-1.0), beta=beta)  # h = 0 - (-2) = 2
    assert losses.item() == pytest.approx(0.0, abs=1e-12)
    losses, _, _ = L.ipo_loss(t(0.0), t(0.0), t(0.0), t(0.0), beta=beta)  # h = 0
    assert losses.item() == pytest.approx(4.0)
    # overshooting the target is penalised too (DPO would keep pushing)
    losses, _, _ = L.ipo_loss(t(0.0), t(-5.0), t(0.0), t(0.0), beta=beta)  # h = 5
    assert losses.item() == pytest.approx(9.0)
    pi_r = t(-5.0).requires_grad_()
    L.ipo_loss(t(0.0), pi_r, t(0.0), t(0.0), beta=beta)[0].sum().backward()
    assert pi_r.grad.item() == pytest.approx(-2 * (5.0 - 2.0))  # d/d pi_r (h - 2)^2 = -2 (h - 2)


def test_conservative_and_robust_dpo():
    h, beta, eps = 2.0, 0.5, 0.2
    args = (t(h), t(0.0), t(0.0), t(0.0))
    sp = lambda z: math.log1p(math.exp(-z))  # -log sigma(z)
    cdpo, _, _ = L.conservative_dpo_loss(*args, beta=beta, label_smoothing=eps)
    assert cdpo.item() == pytest.approx((1 - eps) * sp(beta * h) + eps * sp(-beta * h))
    rdpo, _, _ = L.robust_dpo_loss(*args, beta=beta, label_smoothing=eps)
    assert rdpo.item() == pytest.approx(((1 - eps) * sp(beta * h) - eps * sp(-beta * h)) / (1 - 2 * eps))
    # eps = 0 recovers DPO
    dpo, _, _ = L.dpo_loss(*args, beta=beta)
    assert L.conservative_dpo_loss(*args, beta=beta, label_smoothing=0.0)[0].item() == pytest.approx(dpo.item())
    assert L.robust_dpo_loss(*args, beta=beta, label_smoothing=0.0)[0].item() == pytest.approx(dpo.item())
    # cDPO's minimiser is the finite margin log((1-eps)/eps)/beta
    h_star = math.log((1 - eps) / eps) / beta
    x = t(h_star).requires_grad_()
    L.conservative_dpo_loss(x, t(0.0), t(0.0), t(0.0), beta=beta, label_smoothing=eps)[0].sum().backward()
    assert x.grad.item() == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        L.robust_dpo_loss(*args, beta=beta, label_smoothing=0.5)


def test_kto_hand_computed():
    sig = lambda z: 1 / (1 + math.exp(-z))
    pi, ref = t(-1.0, -2.0), t(-2.0, -1.0)  # r = +1, -1
    labels = torch.tensor([True, False])
    losses, rewards = L.kto_loss(pi, ref, labels, reference_point=0.5, beta=2.0, desirable_weight=1.0,
                                 undesirable_weight=1.5)
    assert losses[0].item() == pytest.approx(1 - sig(2.0 * (1.0 - 0.5)))
    assert losses[1].item() == pytest.approx(1.5 * (1 - sig(2.0 * (0.5 - -1.0))))
    assert rewards.tolist() == pytest.approx([2.0, -2.0])
    # at r == z0 each loss is lambda / 2
    losses, _ = L.kto_loss(t(0.3, 0.3), t(0.0, 0.0), labels, reference_point=0.3, beta=1.0, undesirable_weight=2.0)
    assert losses.tolist() == pytest.approx([0.5, 1.0])
    # the reference point is a clamped mean log-ratio, without gradient
    z0 = L.kto_reference_point(t(-1.0, -3.0).requires_grad_(), t(-2.0, -1.0))
    assert z0.item() == pytest.approx(0.0) and not z0.requires_grad
    assert L.kto_reference_point(t(-1.0, -1.0), t(-2.0, -1.5)).item() == pytest.approx(0.75)


def test_bradley_terry_and_sft_and_kl():
    assert L.bradley_terry_loss(t(1.0), t(1.0)).item() == pytest.approx(math.log(2))
    assert L.bradley_terry_loss(t(2.0), t(0.0)).item() == pytest.approx(math.log1p(math.exp(-2.0)))
    assert L.bradley_terry_loss(t(2.0), t(0.0), margin=t(2.0)).item() == pytest.approx(math.log(2))
    logps = t(-1.0, -2.0, -9.0)[None]
    mask = torch.tensor([[1, 1, 0]])
    assert L.sft_loss(logps, mask).item() == pytest.approx(1.5)
    assert L.sampled_kl(t(-1.0, -2.0), t(-1.5, -3.0)).item() == pytest.approx(0.75)
