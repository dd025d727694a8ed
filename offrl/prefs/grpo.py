"""GRPO (Shao et al. 2024), RLOO (Ahmadian et al. 2024) and REINFORCE++ (Hu 2025): policy gradients
without a value model, on the PPO trainers' rollout and KL code, with GRPO's loss family.

G samples per prompt; advantages are per sequence (GRPO, RLOO) or per token (REINFORCE++):

    GRPO:        A_i = (s_i - mean_g s) / std_g s;               L = agg_t[ clip_t(A_i) + beta * k3_t ]
    RLOO:        R_i = s_i - beta * sum_t kl_t;  A_i = R_i - mean_{j != i} R_j;   L = agg_t[ clip_t(A_i) ]
    REINFORCE++: A_t = whiten_batch( sum_{u >= t} (-beta kl_u + [u = T] s) );     L = agg_t[ clip_t(A_t) ]

(GRPO prices the KL in the loss, RLOO and REINFORCE++ in the reward, as their papers do.)
``clip_t`` is the clipped surrogate with DAPO's asymmetric clip (``clip_range``, ``clip_range_high``)
on token ratios, or GSPO's sequence ratio; ``agg_t`` is ``loss_type``'s normalisation
(:func:`offrl.prefs.rl_losses.aggregate_token_loss`). DAPO's other parts are switches:
``dynamic_sampling`` drops groups with equal rewards, ``overlong_buffer`` adds the soft overlong
penalty to the scores. With ``epochs = 1`` and one minibatch the ratio is 1 and the clipped
surrogate is the plain policy gradient. The first gradient step of a rollout takes ``pi_old`` as
the policy's own detached log-probs (its parameters have not moved since sampling, so the two
are equal); later steps use the sampling pass's log-probs.

Example::

    from offrl.prefs.grpo import GRPOConfig, train_grpo
    train_grpo("runs/sft/model", "runs/task/prompts_train.jsonl", "runs/dapo",
               GRPOConfig(loss_type="dapo", clip_range_high=0.28, dynamic_sampling=True, kl_coef=0.0))
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from offrl.prefs import rl_losses as R
from offrl.prefs.adapters import finish_adapter
from offrl.prefs.config import GRPOConfig
from offrl.prefs.policy_gradient import ScoredRollout, minibatch_indices, run_policy_gradient
from offrl.prefs.ppo import load_policy_and_reference, read_prompt_source
from offrl.prefs.rewards import make_reward, probe_reward
from offrl.prefs.rollout import response_logps
from offrl.prefs.runs import TrainResult, start_run


def group_policy_gradient_loss(logps: torch.Tensor, old_logps: torch.Tensor, ref_logps: torch.Tensor,
                               advantages: torch.Tensor, mask: torch.Tensor, clip_range: float, kl_coef: float,
                               kl_estimator: str = "k3", loss_type: str = "bnpo", clip_range_high: float | None = None,
                               max_completion_length: int | None = None,
                               num_tokens: torch.Tensor | float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO's objective with sequence advantages ``(B,)`` broadcast over tokens (or per-token ``(B, T)``):

        l_t = -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) + beta * kl_t(pi || pi_ref)
        L   = aggregate_{loss_type}(l)

    ``rho`` is the token ratio, or GSPO's sequence ratio for ``loss_type="gspo"``. Pass
    ``kl_coef = 0`` when the KL already sits in the reward (RLOO, REINFORCE++)."""
    level = "sequence" if loss_type == "gspo" else "token"
    ratio = R.importance_ratio(logps, old_logps, mask, level)
    adv = advantages if advantages.dim() == 2 else advantages[:, None]
    per_token = R.asymmetric_clipped_objective(ratio, adv, clip_range, clip_range_high).expand_as(logps)
    stats = {}
    if kl_coef:
        kl = R.kl_estimate(logps, ref_logps, kl_estimator)
        per_token = per_token + kl_coef * kl
        stats["kl_loss"] = R.masked_mean(kl, mask).detach()
    loss = R.aggregate_token_loss(per_token, mask, loss_type, max_completion_length, num_tokens)
    high = clip_range if clip_range_high is None else clip_range_high
    ratio_t = ratio.expand_as(logps).detach()
    adv_t = adv.expand_as(logps)
    low_clipped = ((ratio_t < 1 - clip_range) & (adv_t < 0)).to(logps.dtype)
    high_clipped = ((ratio_t > 1 + high) & (adv_t > 0)).to(logps.dtype)
    stats.update(clipfrac=R.masked_mean(low_clipped + high_clipped, mask),
                 clipfrac_high=R.masked_mean(high_clipped, mask),
                 approxkl=R.masked_mean(0.5 * (logps - old_logps).detach() ** 2, mask))
    return loss, stats


def sequence_advantages(batch: ScoredRollout, score: torch.Tensor, config: GRPOConfig, kl_coef: float) -> torch.Tensor:
    """``(B,)`` group advantages (grpo, rloo) or ``(B, T)`` token advantages (reinforce++)."""
    if config.estimator == "reinforce++":
        return R.reinforce_plus_plus_advantages(score, batch.kl, batch.mask, kl_coef)
    if config.estimator == "rloo":
        return R.group_advantages(score - kl_coef * batch.kl.sum(-1), config.group_size, "rloo")
    return R.group_advantages(score, config.group_size, "grpo", config.scale_rewards)


def train_grpo(model: str, prompts, out: str, config: GRPOConfig = GRPOConfig(), resume: bool = False,
               progress: bool = True, callbacks: Sequence[Callable[[dict[str, Any]], None]] = ()) -> TrainResult:
    """GRPO, RLOO or REINFORCE++ (``config.estimator``) from the model folder ``model`` (also the KL reference)."""
    prompts = read_prompt_source(prompts)
    policy, reference, tokenizer = load_policy_and_reference(model, out, resume, prompts, config.max_new_tokens,
                                                             config.lora, config.seed)
    device = next(policy.parameters()).device
    reward = make_reward(config.reward_model, config.uncertainty_penalty, tokenizer, device, config.reward,
                         config.reward_weights)
    probe_reward(reward, policy, tokenizer, prompts, config.max_new_tokens, config.temperature)
    kl_in_loss = config.estimator == "grpo"

    def update(batch: ScoredRollout, kl_coef: float, optimizer_step, step: int) -> dict[str, float]:
        mask = batch.mask
        score = batch.scores.score.to(device)
        row: dict[str, float] = {}
        if config.overlong_buffer:
            penalty = R.overlong_penalty(mask.sum(-1), config.max_new_tokens, config.overlong_buffer).to(score)
            score = score + penalty
            row["objective/overlong_penalty"] = float(penalty.mean())
        advantages = sequence_advantages(batch, score, config, kl_coef)
        rows = torch.arange(len(mask), device=device)
        groups = score.view(-1, config.group_size)
        row["objective/group_std"] = float(groups.std(-1).mean())
        row["objective/zero_std_groups"] = float((groups.std(-1) == 0).float().mean())
        if config.dynamic_sampling:
            rows = rows[R.nonzero_variance_groups(score, config.group_size)]
            row["objective/kept_samples"] = float(len(rows))
            if len(rows) == 0:  # every group tied: no gradient step this iteration
                return {**row, **{k: 0.0 for k in ("policy/clipfrac", "policy/clipfrac_high", "policy/approxkl",
                                                   "loss/policy")}, **({"loss/kl": 0.0} if kl_in_loss and kl_coef else {})}
        num_tokens = mask[rows].sum() / config.minibatches  # dapo: the rollout's tokens per gradient step
        stats: dict[str, list[float]] = {}
        first = True
        for epoch in range(config.epochs):
            for part in minibatch_indices(len(rows), config.minibatches, config.seed * 7919 + step * 131 + epoch):
                idx = rows if config.minibatches == 1 else rows[part.to(device)]  # one minibatch: in rollout order
                logps, _, _ = response_logps(policy, batch.rollout.rows(idx), config.temperature)
                old = logps.detach() if first else batch.logps[idx]  # unmoved parameters: pi_old = pi_theta
                first = False
                loss, st = group_policy_gradient_loss(
                    logps, old, batch.ref_logps[idx], advantages[idx], mask[idx], config.clip_range,
                    kl_coef if kl_in_loss else 0.0, config.kl_estimator, config.loss_type, config.clip_range_high,
                    config.max_new_tokens, num_tokens)
                optimizer_step(loss)
                for k, v in {"policy/clipfrac": st["clipfrac"], "policy/clipfrac_high": st["clipfrac_high"],
                             "policy/approxkl": st["approxkl"], "loss/policy": loss,
                             **({"loss/kl": st["kl_loss"]} if "kl_loss" in st else {})}.items():
                    stats.setdefault(k, []).append(v.detach().item())
        row.update({k: sum(v) / len(v) for k, v in stats.items()})
        return row

    start_run(out, config.estimator, model, config, {"prompts": len(prompts)})
    result = run_policy_gradient(trainer=config.estimator, config=config, out=out, prompts=prompts, policy=policy,
                                 reference=reference, tokenizer=tokenizer, reward=reward, update=update,
                                 group_size=config.group_size, resume=resume, progress=progress,
                                 callbacks=callbacks, report={"prompts": len(prompts)})
    finish_adapter(policy, tokenizer, out, config.merge_lora)
    return result
