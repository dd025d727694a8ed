"""GRPO (Shao et al. 2024) and RLOO (Ahmadian et al. 2024): policy gradients with a group
baseline instead of a value model, on the PPO trainers' rollout and KL code.

G samples per prompt; every token of sample i gets the sequence advantage A_i:

    GRPO:  A_i = (s_i - mean_g s) / std_g s;   L = clipped_surrogate(A) + beta * mean_t k3_t
    RLOO:  R_i = s_i - beta * sum_t kl_t;      A_i = R_i - mean_{j != i} R_j;   L = clipped_surrogate(A)

(GRPO prices the KL in the loss, RLOO in the reward, as their papers do.) The surrogate is
averaged over all response tokens of the minibatch; with ``epochs = 1`` and one minibatch the
ratio is 1 and the clipped surrogate is the plain policy gradient.

Example::

    from offrl.prefs.grpo import GRPOConfig, train_grpo
    train_grpo("runs/sft/model", "runs/task/prompts_train.jsonl", "runs/grpo", GRPOConfig(estimator="rloo"))
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from offrl.prefs import rl_losses as R
from offrl.prefs.config import GRPOConfig
from offrl.prefs.policy_gradient import ScoredRollout, minibatch_indices, run_policy_gradient
from offrl.prefs.ppo import load_policy_and_reference, read_prompt_source
from offrl.prefs.rewards import make_reward
from offrl.prefs.rollout import response_logps
from offrl.prefs.runs import TrainResult, start_run


def group_policy_gradient_loss(logps: torch.Tensor, old_logps: torch.Tensor, ref_logps: torch.Tensor,
                               advantages: torch.Tensor, mask: torch.Tensor, clip_range: float, kl_coef: float,
                               kl_estimator: str = "k3") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO's per-token objective with sequence advantages ``(B,)`` broadcast over tokens:

        L = mean_t [ clipped_surrogate_t(A_i) + beta * kl_t(pi || pi_ref) ]

    (pass ``kl_coef = 0`` for RLOO, whose KL already sits in the reward)."""
    loss, stats = R.clipped_surrogate_loss(logps, old_logps, advantages[:, None].expand_as(logps), mask, clip_range)
    if kl_coef:
        kl = R.masked_mean(R.kl_estimate(logps, ref_logps, kl_estimator), mask)
        loss = loss + kl_coef * kl
        stats["kl_loss"] = kl.detach()
    return loss, stats


def train_grpo(model: str, prompts, out: str, config: GRPOConfig = GRPOConfig(), resume: bool = False,
               progress: bool = True, callbacks: Sequence[Callable[[dict[str, Any]], None]] = ()) -> TrainResult:
    """GRPO or RLOO (``config.estimator``) from the model folder ``model`` (also the KL reference)."""
    prompts = read_prompt_source(prompts)
    policy, reference, tokenizer = load_policy_and_reference(model, out, resume, prompts, config.max_new_tokens)
    device = next(policy.parameters()).device
    reward = make_reward(config.reward_model, config.uncertainty_penalty, tokenizer, device)
    rloo = config.estimator == "rloo"

    def update(batch: ScoredRollout, kl_coef: float, optimizer_step, step: int) -> dict[str, float]:
        mask = batch.mask
        score = batch.scores.score.to(device)
        if rloo:
            advantages = R.group_advantages(score - kl_coef * batch.kl.sum(-1), config.group_size, "rloo")
        else:
            advantages = R.group_advantages(score, config.group_size, "grpo", config.scale_rewards)
        stats: dict[str, list[float]] = {}
        for epoch in range(config.epochs):
            for idx in minibatch_indices(len(mask), config.minibatches, config.seed * 7919 + step * 131 + epoch):
                idx = idx.to(device)
                logps, _, _ = response_logps(policy, batch.rollout.rows(idx), config.temperature)
                loss, st = group_policy_gradient_loss(logps, batch.logps[idx], batch.ref_logps[idx], advantages[idx],
                                                      mask[idx], config.clip_range, 0.0 if rloo else kl_coef,
                                                      config.kl_estimator)
                optimizer_step(loss)
                for k, v in {"policy/clipfrac": st["clipfrac"], "policy/approxkl": st["approxkl"], "loss/policy": loss,
                             **({"loss/kl": st["kl_loss"]} if "kl_loss" in st else {})}.items():
                    stats.setdefault(k, []).append(v.detach().item())
        row = {k: sum(v) / len(v) for k, v in stats.items()}
        groups = score.view(-1, config.group_size)
        row["objective/group_std"] = float(groups.std(-1).mean())
        row["objective/zero_std_groups"] = float((groups.std(-1) == 0).float().mean())
        return row

    start_run(out, config.estimator, model, config, {"prompts": len(prompts)})
    return run_policy_gradient(trainer=config.estimator, config=config, out=out, prompts=prompts, policy=policy,
                               reference=reference, tokenizer=tokenizer, reward=reward, update=update,
                               group_size=config.group_size, resume=resume, progress=progress, callbacks=callbacks,
                               report={"prompts": len(prompts)})
