"""Offline preference losses as standalone tensor functions.

Every function takes sequence log-probabilities (the sum of token log-probs of a completion
given its prompt) of the trained policy ``pi`` and of the frozen reference ``pi_ref`` and
returns per-example losses (shape ``(B,)``, not reduced) together with the implicit rewards

    r(x, y) = beta * (log pi(y|x) - log pi_ref(y|x)).

Reading a preference pair ``(x, y_w, y_l)`` as one logged decision, ``pi_ref`` is the behaviour
policy and ``beta`` plays the part of CQL's alpha: it prices every nat of divergence from the
data-generating policy. The implicit rewards are returned detached (they are metrics).
The reference-free losses (SimPO, CPO, ORPO) take only the policy's log-probs: they price
divergence through a margin or a behaviour-cloning term instead of a reference.

Example::

    losses, r_chosen, r_rejected = dpo_loss(pi_w, pi_l, ref_w, ref_l, beta=0.1)
    losses.mean().backward()
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def _log_ratio_margin(pi_chosen: Tensor, pi_rejected: Tensor, ref_chosen: Tensor, ref_rejected: Tensor) -> Tensor:
    """``h = (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))``."""
    return (pi_chosen - ref_chosen) - (pi_rejected - ref_rejected)


def _implicit_rewards(pi: Tensor, ref: Tensor, beta: float) -> Tensor:
    return (beta * (pi - ref)).detach()


def dpo_loss(
    pi_chosen: Tensor, pi_rejected: Tensor, ref_chosen: Tensor, ref_rejected: Tensor, beta: float = 0.1
) -> tuple[Tensor, Tensor, Tensor]:
    """Direct Preference Optimization (Rafailov et al. 2023, eq. 7).

        L = -log sigma(beta * h),  h = log pi(y_w)/pi_ref(y_w) - log pi(y_l)/pi_ref(y_l)

    The Bradley-Terry likelihood of the pair under the implicit reward ``beta * log pi/pi_ref``.
    At ``h = 0`` (policy == reference) the loss is ``log 2``; the gradient is
    ``-beta * sigma(-beta h) * grad h``, which vanishes as ``beta -> 0``.

    Returns ``(losses, chosen_rewards, rejected_rewards)``, each of shape ``(B,)``.
    """
    h = _log_ratio_margin(pi_chosen, pi_rejected, ref_chosen, ref_rejected)
    losses = -F.logsigmoid(beta * h)
    return losses, _implicit_rewards(pi_chosen, ref_chosen, beta), _implicit_rewards(pi_rejected, ref_rejected, beta)


def conservative_dpo_loss(
    pi_chosen: Tensor,
    pi_rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.1,
) -> tuple[Tensor, Tensor, Tensor]:
    """Conservative DPO (cDPO; Mitchell 2023): DPO with labels flipped with probability ``eps``.

        L = -(1 - eps) log sigma(beta h) - eps log sigma(-beta h)

    The minimiser is a finite margin ``h* = log((1 - eps)/eps) / beta`` instead of ``h -> inf``,
    so the policy stops drifting once a pair is "won". ``eps = 0`` recovers :func:`dpo_loss`.
    """
    h = _log_ratio_margin(pi_chosen, pi_rejected, ref_chosen, ref_rejected)
    losses = -(1.0 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    return losses, _implicit_rewards(pi_chosen, ref_chosen, beta), _implicit_rewards(pi_rejected, ref_rejected, beta)


def robust_dpo_loss(
    pi_chosen: Tensor,
    pi_rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.1,
) -> tuple[Tensor, Tensor, Tensor]:
    """Robust DPO (rDPO; Chowdhury et al. 2024, eq. 9): an unbiased loss under label-flip rate ``eps``.

        L = [(1 - eps) * (-log sigma(beta h)) - eps * (-log sigma(-beta h))] / (1 - 2 eps)

    Its expectation over noisy labels equals the clean DPO loss. Requires ``eps < 0.5``.
    """
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"robust_dpo_loss needs 0 <= label_smoothing < 0.5, got {label_smoothing}")
    h = _log_ratio_margin(pi_chosen, pi_rejected, ref_chosen, ref_rejected)
    clean = -F.logsigmoid(beta * h)
    flipped = -F.logsigmoid(-beta * h)
    losses = ((1.0 - label_smoothing) * clean - label_smoothing * flipped) / (1.0 - 2.0 * label_smoothing)
    return losses, _implicit_rewards(pi_chosen, ref_chosen, beta), _implicit_rewards(pi_rejected, ref_rejected, beta)


def ipo_loss(
    pi_chosen: Tensor, pi_rejected: Tensor, ref_chosen: Tensor, ref_rejected: Tensor, beta: float = 0.1
) -> tuple[Tensor, Tensor, Tensor]:
    """Identity Preference Optimisation (Azar et al. 2023, eq. 17; their ``tau`` is ``beta``).

        L = (h - 1 / (2 beta))^2

    A squared regression of the log-ratio margin onto the fixed target ``1/(2 beta)``: unlike
    DPO it does not push ``h`` to infinity on deterministic preferences. The minimum (0) is
    reached at ``h = 1/(2 beta)``. Pass per-token averaged log-probs to get the length-normalised
    variant (the trainer's ``length_normalize``); sums give the paper's sequence form.
    """
    h = _log_ratio_margin(pi_chosen, pi_rejected, ref_chosen, ref_rejected)
    losses = (h - 1.0 / (2.0 * beta)) ** 2
    return losses, _implicit_rewards(pi_chosen, ref_chosen, beta), _implicit_rewards(pi_rejected, ref_rejected, beta)


def kto_loss(
    pi_logps: Tensor,
    ref_logps: Tensor,
    desirable: Tensor,
    reference_point: Tensor | float,
    beta: float = 0.1,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Kahneman-Tversky Optimisation (Ethayarajh et al. 2024, eq. 8), on unpaired feedback.

        r = log pi(y|x) - log pi_ref(y|x),   z0 = reference point (a KL estimate, no gradient)
        L = lambda_D * (1 - sigma(beta (r - z0)))   if y is desirable
        L = lambda_U * (1 - sigma(beta (z0 - r)))   if y is undesirable

    ``z0`` is the paper's ``KL(pi || pi_ref)`` estimated on mismatched pairs ``(x_i, y_j)`` of the
    batch and clamped at 0 (see :func:`kto_reference_point`); it is detached here. At ``r = z0``
    each loss is ``lambda / 2``.

    Returns ``(losses, rewards)`` with ``rewards = beta * r`` (detached), shape ``(B,)``.
    """
    r = pi_logps - ref_logps
    z0 = torch.as_tensor(reference_point, dtype=r.dtype, device=r.device).detach()
    desirable = desirable.to(torch.bool)
    desirable_losses = desirable_weight * (1.0 - torch.sigmoid(beta * (r - z0)))
    undesirable_losses = undesirable_weight * (1.0 - torch.sigmoid(beta * (z0 - r)))
    losses = torch.where(desirable, desirable_losses, undesirable_losses)
    return losses, (beta * r).detach()


def kto_reference_point(pi_mismatched_logps: Tensor, ref_mismatched_logps: Tensor) -> Tensor:
    """KTO's reference point ``z0 = max(0, mean_j [log pi(y_j|x_i) - log pi_ref(y_j|x_i)])``.

    A biased but cheap estimate of ``KL(pi || pi_ref)`` from completions paired with the wrong
    prompts (Ethayarajh et al. 2024, section 4.1); detached, since the paper does not
    backpropagate through it.
    """
    return (pi_mismatched_logps - ref_mismatched_logps).mean().clamp(min=0.0).detach()


def bradley_terry_loss(reward_chosen: Tensor, reward_rejected: Tensor, margin: Tensor | None = None) -> Tensor:
    """Reward-model loss of the Bradley-Terry model (Bradley & Terry 1952; Ouyang et al. 2022 eq. 1).

        L = -log sigma(r(x, y_w) - r(x, y_l) - m)

    ``margin`` ``m`` (default 0) asks for a minimum reward gap. Returns per-pair losses ``(B,)``;
    at equal rewards the loss is ``log 2``.
    """
    diff = reward_chosen - reward_rejected
    if margin is not None:
        diff = diff - margin
    return -F.logsigmoid(diff)


def sft_loss(token_logps: Tensor, completion_mask: Tensor) -> Tensor:
    """Behaviour cloning on completions (SFT = BC): mean negative log-likelihood per completion token.

        L = - sum_{i,t} m_it log pi(y_it | x_i, y_i,<t) / sum_{i,t} m_it
    """
    mask = completion_mask.to(token_logps.dtype)
    return -(token_logps * mask).sum() / mask.sum().clamp(min=1.0)


def sampled_kl(pi_logps: Tensor, ref_logps: Tensor) -> Tensor:
    """Monte-Carlo estimate of the sequence-level ``KL(pi || pi_ref)`` from samples ``y ~ pi``.

        KL ~= mean_i [log pi(y_i|x_i) - log pi_ref(y_i|x_i)]

    Unbiased for samples drawn from ``pi`` at temperature 1; the drift that turns into reward
    hacking when ``beta`` is too small.
    """
    return (pi_logps - ref_logps).mean()


# --------------------------------------------------------------------------- reference-free losses


def _smoothed_logistic(z: Tensor, label_smoothing: float) -> Tensor:
    """``-(1 - eps) log sigma(z) - eps log sigma(-z)`` (eps = 0: the logistic loss)."""
    return -(1.0 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)


def simpo_loss(
    pi_chosen: Tensor, pi_rejected: Tensor, beta: float = 2.0, gamma: float = 0.5, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor, Tensor]:
    """Simple Preference Optimization (SimPO; Meng et al. 2024, eq. 6): no reference model.

        L = -log sigma( beta/|y_w| log pi(y_w|x) - beta/|y_l| log pi(y_l|x) - gamma )

    ``pi_chosen`` / ``pi_rejected`` are the length-averaged log-probs ``1/|y| log pi(y|x)`` (the
    trainer passes per-token means); the implicit reward is ``beta/|y| log pi(y|x)`` and ``gamma``
    is the target reward margin. ``label_smoothing`` eps gives the conservative form
    ``-(1 - eps) log sigma(z) - eps log sigma(-z)``. At equal log-probs and ``gamma = 0`` the loss is
    ``log 2``.

    Returns ``(losses, chosen_rewards, rejected_rewards)``, each ``(B,)``.
    """
    z = beta * (pi_chosen - pi_rejected) - gamma
    return _smoothed_logistic(z, label_smoothing), (beta * pi_chosen).detach(), (beta * pi_rejected).detach()


def cpo_loss(
    pi_chosen: Tensor,
    pi_rejected: Tensor,
    nll_chosen: Tensor,
    beta: float = 0.1,
    alpha: float = 1.0,
    label_smoothing: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Contrastive Preference Optimization (CPO; Xu et al. 2024, eq. 3 + NLL): DPO's logistic loss
    with the reference dropped, plus behaviour cloning on the chosen completion.

        L = -log sigma( beta log pi(y_w|x) - beta log pi(y_l|x) )  +  alpha * NLL(y_w)

    ``nll_chosen`` is the negative log-likelihood of the chosen completions (per example, or one
    scalar: the per-token mean over the batch, which broadcasts); ``label_smoothing`` as in
    :func:`simpo_loss`. The implicit reward is ``beta log pi(y|x)``.
    """
    z = beta * (pi_chosen - pi_rejected)
    losses = _smoothed_logistic(z, label_smoothing) + alpha * nll_chosen
    return losses, (beta * pi_chosen).detach(), (beta * pi_rejected).detach()


def log1mexp(x: Tensor) -> Tensor:
    """``log(1 - exp(x))`` for ``x < 0``, without cancellation (Maechler 2012: branch at ``-log 2``)."""
    return torch.where(x < -math.log(2.0), torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def log_odds_ratio(pi_chosen: Tensor, pi_rejected: Tensor) -> Tensor:
    """``log odds(y_w) - log odds(y_l)`` with ``odds(y) = P(y|x) / (1 - P(y|x))`` and ``log P = pi``:

        log OR = (pi_w - pi_l) - (log(1 - e^{pi_w}) - log(1 - e^{pi_l}))
    """
    return (pi_chosen - pi_rejected) - (log1mexp(pi_chosen) - log1mexp(pi_rejected))


def orpo_loss(
    pi_chosen: Tensor, pi_rejected: Tensor, nll_chosen: Tensor, lam: float = 0.1
) -> tuple[Tensor, Tensor, Tensor]:
    """Odds Ratio Preference Optimization (ORPO; Hong et al. 2024, eqs. 6-7): SFT plus an odds-ratio
    penalty, in one stage and without a reference model.

        L = NLL(y_w)  -  lambda * log sigma( log odds(y_w|x) - log odds(y_l|x) )

    ``pi_*`` are the length-averaged log-probs ``1/|y| log pi(y|x)`` (the paper's ``P(y|x)``;
    :func:`log_odds_ratio`), ``nll_chosen`` as in :func:`cpo_loss`, ``lam`` the paper's lambda (the
    trainer's ``beta``). At equal log-probs the odds-ratio term is ``lambda log 2``. The reported
    rewards are ``lambda * pi``.
    """
    losses = nll_chosen - lam * F.logsigmoid(log_odds_ratio(pi_chosen, pi_rejected))
    return losses, (lam * pi_chosen).detach(), (lam * pi_rejected).detach()


#: name -> paired loss function, for the trainer and the CLI.
PAIRED_LOSSES = {
    "dpo": dpo_loss,
    "ipo": ipo_loss,
    "cdpo": conservative_dpo_loss,
    "rdpo": robust_dpo_loss,
}

#: name -> reference-free paired loss (no pi_ref; CPO and ORPO add the chosen NLL).
REFERENCE_FREE_LOSSES = {
    "simpo": simpo_loss,
    "cpo": cpo_loss,
    "orpo": orpo_loss,
}
