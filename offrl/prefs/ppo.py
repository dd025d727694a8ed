"""PPO-RLHF (Ziegler et al. 2019; Stiennon et al. 2020; Ouyang et al. 2022).

Reward per response token: the KL penalty to the reference, plus the reward model's (or the
program's) score on the last token (:func:`offrl.prefs.rl_losses.per_token_rewards`):

    r_t = -beta * kl_t + [t = T] * score(x, y)

then GAE over response tokens with a learned value, whitened advantages, and several epochs of

    L = clipped_surrogate(pi / pi_old, A) + vf_coef * clipped_value_loss(V, R)

The value is a linear head on the last hidden state before each token: of the policy's own trunk
(``value_model="shared"``, one forward pass for both) or of a separate model folder.

Example::

    from offrl.prefs.ppo import PPOConfig, train_ppo
    train_ppo("runs/sft/model", "runs/task/prompts_train.jsonl", "runs/ppo",
              PPOConfig(reward_model="runs/rm", kl_coef=0.05, steps=200))
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from offrl.prefs import rl_losses as R
from offrl.prefs.config import PPOConfig
from offrl.prefs.modeling import load_causal_lm, load_tokenizer
from offrl.prefs.policy_gradient import ScoredRollout, minibatch_indices, run_policy_gradient
from offrl.prefs.rewards import make_reward, probe_reward
from offrl.prefs.rollout import check_prompt_lengths, context_size, response_logps
from offrl.prefs.runs import TrainResult, resume_weights, start_run


class ValueHead(torch.nn.Module):
    """``V(s_t) = w . h_t + b`` on a hidden state ``h_t`` (``(B, T, H) -> (B, T)``)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.normal_(self.linear.weight, std=1.0 / (hidden_size + 1) ** 0.5)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)


def _device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_policy_and_reference(model: str, out: str, resume: bool, prompts: Sequence[str], max_new_tokens: int,
                              lora: str | None = None, seed: int = 0):
    """The policy (from the newest checkpoint when resuming), the frozen reference (the starting
    model; with ``lora``, the policy with its adapter disabled) and the tokenizer; refuses prompts that
    do not fit the context with the response."""
    from offrl.prefs.adapters import AdapterDisabled
    from offrl.prefs.modeling import load_policy
    from offrl.prefs.config import parse_lora

    device = _device()
    tokenizer = load_tokenizer(model)
    spec = parse_lora(lora)
    policy = load_policy(model, resume_weights(model, out, resume), spec, seed).to(device)
    if spec is not None:
        reference = AdapterDisabled(policy)
    else:
        reference = load_causal_lm(model).to(device).eval()
        reference.requires_grad_(False)
    check_prompt_lengths(tokenizer, prompts, max_new_tokens, context_size(policy))
    return policy, reference, tokenizer


def read_prompt_source(prompts) -> list[str]:
    from offrl.prefs.task import read_prompts

    return read_prompts(prompts) if isinstance(prompts, str) else list(prompts)


def train_ppo(model: str, prompts, out: str, config: PPOConfig = PPOConfig(), resume: bool = False,
              progress: bool = True, callbacks: Sequence[Callable[[dict[str, Any]], None]] = ()) -> TrainResult:
    """PPO from the model folder ``model`` (also the KL reference) on ``prompts`` (a JSONL of
    ``{"prompt": ...}`` rows or a list); writes the run folder ``out``."""
    prompts = read_prompt_source(prompts)
    policy, reference, tokenizer = load_policy_and_reference(model, out, resume, prompts, config.max_new_tokens,
                                                             config.lora, config.seed)
    device = next(policy.parameters()).device
    reward = make_reward(config.reward_model, config.uncertainty_penalty, tokenizer, device, config.reward,
                         config.reward_weights)
    probe_reward(reward, policy, tokenizer, prompts, config.max_new_tokens, config.temperature)
    torch.manual_seed(config.seed)
    shared = config.value_model == "shared"
    value_backbone = None if shared else load_causal_lm(config.value_model).to(device)
    hidden_size = (policy if shared else value_backbone).config.hidden_size
    head = ValueHead(hidden_size).to(device)
    modules = {"value_head": head} if shared else {"value_model": value_backbone, "value_head": head}

    def values_of(rollout, policy_hidden=None) -> torch.Tensor:
        if shared:
            return head(policy_hidden) * rollout.response_mask
        _, _, h = response_logps(value_backbone, rollout, hidden=True)
        return head(h) * rollout.response_mask

    def update(batch: ScoredRollout, kl_coef: float, optimizer_step, step: int) -> dict[str, float]:
        mask = batch.mask
        with torch.no_grad():
            _, _, h = response_logps(policy, batch.rollout, config.temperature, hidden=shared)
            old_values = values_of(batch.rollout, h)
            rewards, _ = R.per_token_rewards(batch.scores.score.to(device), batch.kl, mask, kl_coef)
            advantages, returns = R.generalized_advantage_estimation(rewards, old_values, mask, config.gamma,
                                                                     config.lam)
            advantages = R.masked_whiten(advantages, mask)
        stats: dict[str, list[float]] = {}
        for epoch in range(config.epochs):
            for idx in minibatch_indices(len(mask), config.minibatches, config.seed * 7919 + step * 131 + epoch):
                idx = idx.to(device)
                sub = batch.rollout.rows(idx)
                logps, _, h = response_logps(policy, sub, config.temperature, hidden=shared)
                values = values_of(sub, h)
                pg_loss, pg = R.clipped_surrogate_loss(logps, batch.logps[idx], advantages[idx], mask[idx],
                                                       config.clip_range)
                vf_loss, vf_clipfrac = R.clipped_value_loss(values, old_values[idx], returns[idx], mask[idx],
                                                            config.value_clip)
                optimizer_step(pg_loss + config.vf_coef * vf_loss)
                for k, v in (("policy/clipfrac", pg["clipfrac"]), ("policy/approxkl", pg["approxkl"]),
                             ("loss/policy", pg_loss), ("val/vf_loss", vf_loss), ("val/clipfrac", vf_clipfrac)):
                    stats.setdefault(k, []).append(v.detach().item())
        row = {k: sum(v) / len(v) for k, v in stats.items()}
        row["val/mean"] = float(R.masked_mean(old_values, mask))
        row["val/returns"] = float(R.masked_mean(returns, mask))
        return row

    start_run(out, "ppo", model, config, {"prompts": len(prompts)})
    result = run_policy_gradient(trainer="ppo", config=config, out=out, prompts=prompts, policy=policy,
                                 reference=reference, tokenizer=tokenizer, reward=reward, update=update,
                                 modules=modules, group_size=1, resume=resume, progress=progress,
                                 callbacks=callbacks, report={"prompts": len(prompts)})
    from offrl.prefs.adapters import finish_adapter

    finish_adapter(policy, tokenizer, out, config.merge_lora)
    return result
