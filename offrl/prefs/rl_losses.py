"""Policy-gradient RLHF as standalone tensor functions: KL estimators, per-token rewards, GAE,
PPO's clipped surrogate and value losses, group-relative advantages, the adaptive KL controller.

Shapes: per-token tensors are ``(B, T)`` over response positions with a 0/1 ``mask`` (right
padding after the first EOS); per-sequence tensors are ``(B,)``. The RLHF objective is

    max_pi  E_{x, y~pi} [ r(x, y) ] - beta * KL(pi(.|x) || pi_ref(.|x))

(Ziegler et al. 2019; Stiennon et al. 2020; Ouyang et al. 2022), with the KL spent token by
token as a reward (PPO, RLOO) or added to the loss (GRPO).

Example::

    kl = kl_estimate(logps, ref_logps, "k1")                     # (B, T)
    rewards, non_score = per_token_rewards(scores, kl, mask, kl_coef=0.05)
    advantages, returns = generalized_advantage_estimation(rewards, values, mask, gamma=1.0, lam=0.95)
    loss, stats = clipped_surrogate_loss(new_logps, logps, masked_whiten(advantages, mask), mask, 0.2)
"""

from __future__ import annotations

from typing import NamedTuple

import torch

Tensor = torch.Tensor

KL_ESTIMATORS = ("k1", "k2", "k3")


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """``sum(x * m) / sum(m)`` over ``dim`` (all elements when ``None``)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the masked entries (``shift_mean=False`` keeps the mean:
    ``(x - mean) / std + mean``, the form used to whiten rewards without moving their level).
    The variance is the unbiased one (divides by ``n - 1``). Masked-out entries come back as 0."""
    mask_f = mask.to(x.dtype)
    n = mask_f.sum()
    mean = (x * mask_f).sum() / n.clamp(min=1.0)
    var = (((x - mean) ** 2) * mask_f).sum() / (n - 1).clamp(min=1.0)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask_f


def kl_estimate(logps: Tensor, ref_logps: Tensor, estimator: str = "k1") -> Tensor:
    """Per-token estimates of ``KL(pi || pi_ref)`` from tokens sampled from ``pi`` (Schulman 2020,
    "Approximating KL divergence"), with ``log r = log pi_ref(y_t) - log pi(y_t)``:

        k1 = -log r                 unbiased, can be negative per token
        k2 = (log r)^2 / 2          biased, low variance
        k3 = (r - 1) - log r        unbiased, always >= 0 (GRPO's choice)
    """
    log_ratio = ref_logps - logps
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio ** 2
    if estimator == "k3":
        return torch.expm1(log_ratio) - log_ratio
    raise ValueError(f"kl estimator {estimator!r} is unknown; use one of {KL_ESTIMATORS}")


def per_token_rewards(scores: Tensor, kl: Tensor, mask: Tensor, kl_coef: float | Tensor) -> tuple[Tensor, Tensor]:
    """The shaped reward of PPO-RLHF (Ziegler et al. 2019, eq. 2):

        r_t = -beta * kl_t  +  [t == last response token] * score

    Returns ``(rewards, non_score_rewards)``, both ``(B, T)`` and zero outside ``mask``. A response
    with no token (empty mask) receives nothing.
    """
    mask_f = mask.to(kl.dtype)
    non_score = -kl_coef * kl * mask_f
    lengths = mask.long().sum(-1)
    last = (lengths - 1).clamp(min=0)
    rewards = non_score.clone()
    has = lengths > 0
    rows = torch.arange(kl.shape[0], device=kl.device)[has]
    rewards[rows, last[has]] += scores[has].to(kl.dtype)
    return rewards, non_score


def generalized_advantage_estimation(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0,
                                     lam: float = 0.95) -> tuple[Tensor, Tensor]:
    """GAE (Schulman et al. 2016) over response tokens; the episode ends after the last masked token.

        delta_t = r_t + gamma * V_{t+1} - V_t          (V_{t+1} = 0 past the end)
        A_t     = delta_t + gamma * lam * A_{t+1}
        R_t     = A_t + V_t                             (the value targets)

    Returns ``(advantages, returns)``, ``(B, T)``, zero outside ``mask``.
    """
    mask_f = mask.to(rewards.dtype)
    values = values * mask_f
    rewards = rewards * mask_f
    T = rewards.shape[1]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(T)):
        next_value = values[:, t + 1] if t + 1 < T else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last = (delta + gamma * lam * last) * mask_f[:, t]
        advantages[:, t] = last
    return advantages, (advantages + values) * mask_f


def clipped_surrogate_loss(logps: Tensor, old_logps: Tensor, advantages: Tensor, mask: Tensor,
                           clip_range: float = 0.2) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7), per token:

        rho_t = exp(log pi(y_t) - log pi_old(y_t))
        L     = mean_t max(-A_t rho_t, -A_t clip(rho_t, 1 - eps, 1 + eps))

    Returns the masked mean and ``{"clipfrac": share of tokens where the clipped term is taken,
    "approxkl": mean (log rho)^2 / 2}`` (both detached).
    """
    log_ratio = logps - old_logps
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    stats = {"clipfrac": masked_mean((clipped > unclipped).to(logps.dtype), mask).detach(),
             "approxkl": masked_mean(0.5 * log_ratio ** 2, mask).detach()}
    return loss, stats


def clipped_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor,
                       clip_range: float = 0.2) -> tuple[Tensor, Tensor]:
    """PPO's clipped value loss (as in OpenAI baselines' ppo2):

        V_clip = V_old + clip(V - V_old, -eps, eps)
        L      = 1/2 * mean_t max((V - R)^2, (V_clip - R)^2)

    Returns the loss and the share of tokens where the clipped error is the larger (detached).
    """
    clipped = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    err, err_clipped = (values - returns) ** 2, (clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(err, err_clipped), mask)
    return loss, masked_mean((err_clipped > err).to(values.dtype), mask).detach()


def group_advantages(rewards: Tensor, group_size: int, estimator: str = "grpo", scale: bool = True,
                     eps: float = 1e-4) -> Tensor:
    """Group-relative advantages of ``G = group_size`` samples per prompt (rows ``g*G ... g*G+G-1``).

        grpo (Shao et al. 2024):    A_i = (r_i - mean_j r_j) / (std_j r_j + eps)   (std: unbiased;
                                    ``scale=False`` keeps only the centring, as in Dr. GRPO)
        rloo (Ahmadian et al. 2024): A_i = r_i - 1/(G-1) sum_{j != i} r_j   (leave-one-out baseline)

    Returns ``(B,)``; a group whose rewards are all equal gets zero advantages.
    """
    if rewards.shape[0] % group_size:
        raise ValueError(f"{rewards.shape[0]} rewards do not split into groups of {group_size}")
    r = rewards.view(-1, group_size)
    if estimator == "grpo":
        centred = r - r.mean(-1, keepdim=True)
        out = centred / (r.std(-1, keepdim=True) + eps) if scale else centred
    elif estimator == "rloo":
        if group_size < 2:
            raise ValueError("rloo needs group_size >= 2")
        out = r - (r.sum(-1, keepdim=True) - r) / (group_size - 1)
    else:
        raise ValueError(f"estimator {estimator!r} is unknown; use grpo or rloo")
    return out.reshape(-1)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-position entropy ``-sum_v p_v log p_v`` of the softmax of ``logits`` (last axis)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


class KLController(NamedTuple):
    """The KL coefficient beta and the rule that moves it (``target=None``: fixed)."""

    coef: float
    target: float | None = None
    horizon: float = 10000.0


def kl_controller_init(coef: float, target: float | None = None, horizon: float = 10000.0) -> KLController:
    """A fixed coefficient, or Ziegler et al.'s adaptive controller when ``target`` is given."""
    return KLController(float(coef), target, float(horizon))


def kl_controller_update(state: KLController, current_kl: float, n_steps: int) -> KLController:
    """Ziegler et al. (2019, section 2.2) proportional control of beta toward a target KL:

        e       = clip(KL / KL_target - 1, -0.2, 0.2)
        beta   <- beta * (1 + e * n_steps / horizon)

    ``n_steps`` is the number of samples (episodes) since the last update. A fixed controller is
    returned unchanged.
    """
    if state.target is None:
        return state
    error = min(max(current_kl / state.target - 1.0, -0.2), 0.2)
    return state._replace(coef=state.coef * (1.0 + error * n_steps / state.horizon))
