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


# --------------------------------------------------------------------------- GRPO's loss family

from offrl.prefs.config import GRPO_LOSS_TYPES  # noqa: E402  (TRL's loss_type names; gspo: sequence ratios)


def importance_ratio(logps: Tensor, old_logps: Tensor, mask: Tensor, level: str = "token") -> Tensor:
    """The policy ratio pi / pi_old per token, or per sequence as GSPO takes it (Zheng et al. 2025, eq. 7):

        token:     rho_t = exp(log pi(y_t) - log pi_old(y_t))                        (B, T)
        sequence:  s_i   = exp( 1/|y_i| sum_t [log pi(y_t) - log pi_old(y_t)] )      (B, 1)

    The sequence ratio is the geometric mean of the token ratios, so it does not grow with length.
    """
    log_ratio = logps - old_logps
    if level == "token":
        return torch.exp(log_ratio)
    if level == "sequence":
        return torch.exp(masked_mean(log_ratio, mask, dim=-1)).unsqueeze(-1)
    raise ValueError(f"importance-ratio level {level!r} is unknown; use token or sequence")


def asymmetric_clipped_objective(ratio: Tensor, advantages: Tensor, clip_low: float = 0.2,
                                 clip_high: float | None = None) -> Tensor:
    """Per-token loss of the clipped surrogate with DAPO's decoupled clip ("clip-higher"; Yu et al. 2025, section 3.1):

        l_t = -min( rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t )

    ``clip_high = None`` is the symmetric PPO clip (``eps_high = eps_low``); a larger ``eps_high``
    lets unlikely tokens with positive advantage gain probability faster (against entropy collapse).
    ``ratio`` and ``advantages`` broadcast (``(B, T)``, ``(B, 1)`` or ``(B,)[:, None]``); not reduced.
    """
    high = clip_low if clip_high is None else clip_high
    return -torch.minimum(ratio * advantages, torch.clamp(ratio, 1.0 - clip_low, 1.0 + high) * advantages)


def aggregate_token_loss(per_token: Tensor, mask: Tensor, loss_type: str = "grpo",
                         max_completion_length: int | None = None, num_tokens: Tensor | float | None = None) -> Tensor:
    """Reduce a per-token loss ``(B, T)`` to a scalar, the way each member of the family normalises:

        grpo, gspo (Shao et al. 2024):  1/B sum_i 1/|y_i| sum_t l_it          (each sequence weighs the same)
        bnpo:                           sum_it l_it / sum_i |y_i|              (token mean over this batch)
        dapo (Yu et al. 2025, sec. 3.3):  sum_it l_it / N                        (N: tokens of the whole rollout
                                                                                 batch per gradient step)
        dr_grpo (Liu et al. 2025):      sum_it l_it / (B * L_max)              (a constant: no length bias)

    ``num_tokens`` is dapo's ``N`` (default: this batch's tokens, when dapo equals bnpo);
    ``max_completion_length`` is Dr. GRPO's ``L_max``.
    """
    mask_f = mask.to(per_token.dtype)
    per_token = per_token.expand_as(mask_f) if per_token.shape != mask_f.shape else per_token
    total = (per_token * mask_f).sum()
    if loss_type in ("grpo", "gspo"):
        return ((per_token * mask_f).sum(-1) / mask_f.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return total / mask_f.sum().clamp(min=1.0)
    if loss_type == "dapo":
        n = mask_f.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=per_token.dtype)
        return total / n.clamp(min=1.0)
    if loss_type == "dr_grpo":
        if not max_completion_length:
            raise ValueError("dr_grpo needs max_completion_length (L_max)")
        return total / (per_token.shape[0] * max_completion_length)
    raise ValueError(f"loss type {loss_type!r} is unknown; use one of {GRPO_LOSS_TYPES}")


def nonzero_variance_groups(rewards: Tensor, group_size: int) -> Tensor:
    """DAPO's dynamic sampling filter (Yu et al. 2025, section 3.2): ``(B,)`` True on the samples of groups
    whose rewards are not all equal. A group with one reward for every sample has zero group-relative
    advantage everywhere and contributes no gradient, only dilution."""
    r = rewards.view(-1, group_size)
    keep = (r != r[:, :1]).any(-1)
    return keep.repeat_interleave(group_size)


def overlong_penalty(lengths: Tensor, max_length: int, buffer: int) -> Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, section 3.4, eq. 13), added to the reward:

        R(y) = 0                                    |y| <= L_max - L_cache
             = ((L_max - L_cache) - |y|) / L_cache  L_max - L_cache < |y| <= L_max
             = -1                                   |y| > L_max

    ``buffer`` is ``L_cache``; the penalty falls linearly from 0 to -1 across the buffer.
    """
    lengths = lengths.to(torch.float64)
    start = max_length - buffer
    inside = (start - lengths) / max(buffer, 1)
    out = torch.where(lengths <= start, torch.zeros_like(lengths), inside)
    return torch.where(lengths > max_length, torch.full_like(lengths, -1.0), out)


def reinforce_plus_plus_advantages(scores: Tensor, kl: Tensor, mask: Tensor, kl_coef: float,
                                   gamma: float = 1.0) -> Tensor:
    """REINFORCE++ (Hu 2025; OpenRLHF): PPO's KL-shaped token rewards, returns-to-go, no value model,
    advantages normalised over the whole batch (not per group):

        r_t = -beta kl_t + [t = T] score,   G_t = sum_{s >= t} gamma^{s-t} r_s,   A = whiten_batch(G)

    Returns ``(B, T)`` advantages, zero outside ``mask``.
    """
    rewards, _ = per_token_rewards(scores, kl, mask, kl_coef)
    mask_f = mask.to(rewards.dtype)
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = (rewards[:, t] + gamma * running) * mask_f[:, t]
        returns[:, t] = running
    return masked_whiten(returns, mask)
