"""Online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback"; TRL's
``OnlineDPOTrainer``): preference optimisation on pairs the *current* policy samples.

    each iteration:  x ~ prompts;  y_a, y_b ~ pi_theta(.|x)
                     label: (y_w, y_l) = the pair ordered by a judge, a reward model or reward callables
                     one step on  L = loss(log pi(y_w|x), log pi(y_l|x), log pi_ref(y_w|x), log pi_ref(y_l|x))

with ``loss`` DPO's ``-log sigma(beta h)``, IPO's ``(h - 1/(2 beta))^2`` or the reference-free
SimPO (:mod:`offrl.prefs.losses`). ``pi_ref`` is the frozen starting model, or, with ``lora``, the
policy with its adapter disabled. Pairs the labeller cannot order (equal scores, a judge's 1/2,
identical completions) are dropped. Iterative DPO (:mod:`offrl.prefs.iterate`) is the batch
form of the same idea: many pairs per round, many steps per round; here one step per batch of
fresh pairs. The rollout, KL monitor, checkpoints and metrics are the policy-gradient trainers'
(:mod:`offrl.prefs.policy_gradient`), with two samples per prompt; log-probs are taken at the
sampling ``temperature`` (1 by default: the policy itself).

Example::

    from offrl.prefs.config import OnlineDPOConfig
    from offrl.prefs.online_dpo import train_online_dpo
    train_online_dpo("runs/sft/model", "runs/task/prompts_train.jsonl", "runs/odpo",
                     OnlineDPOConfig(beta=0.1, steps=100, judge="digits"))
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from offrl.prefs import losses as L
from offrl.prefs.adapters import finish_adapter
from offrl.prefs.config import OnlineDPOConfig
from offrl.prefs.modeling import sequence_from_tokens
from offrl.prefs.policy_gradient import ScoredRollout, run_policy_gradient
from offrl.prefs.ppo import load_policy_and_reference, read_prompt_source
from offrl.prefs.rewards import Scores, make_reward, probe_reward
from offrl.prefs.rollout import response_logps
from offrl.prefs.runs import TrainResult, start_run

Tensor = torch.Tensor


def online_preference_loss(pi_chosen: Tensor, pi_rejected: Tensor, ref_chosen: Tensor, ref_rejected: Tensor,
                           config: OnlineDPOConfig) -> tuple[Tensor, Tensor, Tensor]:
    """``config.loss`` on sequence log-probs ``(B,)`` (sums, or per-token means with ``config.average``):
    the offline losses of :mod:`offrl.prefs.losses` unchanged. Returns ``(losses, r_chosen, r_rejected)``."""
    if config.loss == "simpo":
        return L.simpo_loss(pi_chosen, pi_rejected, config.beta, config.simpo_gamma)
    return L.PAIRED_LOSSES[config.loss](pi_chosen, pi_rejected, ref_chosen, ref_rejected, config.beta)


def order_pairs(scores: Tensor, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
    """Row indices ``(chosen, rejected)`` of the pairs ``(2i, 2i+1)`` whose scores differ and whose
    completions differ; the higher score is chosen."""
    s = scores.float().view(-1, 2)
    keep = [i for i in range(s.shape[0]) if s[i, 0] != s[i, 1] and texts[2 * i] != texts[2 * i + 1]]
    keep_t = torch.tensor(keep, dtype=torch.long)
    first_wins = (s[keep_t, 0] > s[keep_t, 1]).long() if keep else torch.zeros(0, dtype=torch.long)
    chosen = 2 * keep_t + (1 - first_wins)
    rejected = 2 * keep_t + first_wins
    return chosen, rejected


def pair_loss(policy, batch: ScoredRollout, chosen: Tensor, rejected: Tensor, config: OnlineDPOConfig):
    """The loss on the labelled pairs of a scored rollout: the policy's log-probs of the chosen and
    rejected rows in one forward pass (with gradients), the reference's from the rollout."""
    rows = torch.cat([chosen, rejected]).to(batch.mask.device)
    logps, _, _ = response_logps(policy, batch.rollout.rows(rows), config.temperature)
    mask = batch.mask[rows]
    seq = sequence_from_tokens(logps, mask, config.average)
    ref = sequence_from_tokens(batch.ref_logps[rows], mask, config.average)
    n = len(chosen)
    losses, r_c, r_r = online_preference_loss(seq[:n], seq[n:], ref[:n], ref[n:], config)
    return losses.mean(), {"rewards/chosen": r_c.mean(), "rewards/rejected": r_r.mean(),
                           "rewards/margin": (r_c - r_r).mean(), "rewards/accuracy": (r_c > r_r).float().mean(),
                           "logps/chosen": seq[:n].detach().mean(), "logps/rejected": seq[n:].detach().mean()}


class JudgeScores:
    """A pairwise judge as scores over each prompt's two samples: ``s_a = P(a > b)``, ``s_b = 1 - s_a``."""

    def __init__(self, judge):
        self.judge = judge
        self.name = getattr(judge, "name", "judge")

    def __call__(self, prompts: Sequence, responses: Sequence[str]) -> Scores:
        p = self.judge.prefer(list(prompts[0::2]), list(responses[0::2]), list(responses[1::2])).float().cpu()
        s = torch.stack([p, 1 - p], dim=-1).reshape(-1)
        return Scores(s, s, torch.zeros_like(s))


def make_labeller(config: OnlineDPOConfig, tokenizer, device):
    """The scores pairs are ordered by: the judge, or the reward model / callables (default: the digits program)."""
    if config.judge is not None:
        from offrl.prefs.judges import make_judge

        return JudgeScores(make_judge(config.judge, device))
    return make_reward(config.reward_model, config.uncertainty_penalty, tokenizer, device, config.reward,
                       config.reward_weights)


def train_online_dpo(model: str, prompts, out: str, config: OnlineDPOConfig = OnlineDPOConfig(), resume: bool = False,
                     progress: bool = True,
                     callbacks: Sequence[Callable[[dict[str, Any]], None]] = ()) -> TrainResult:
    """Online DPO / IPO / SimPO from the model folder ``model`` (also the reference) on ``prompts``."""
    prompts = read_prompt_source(prompts)
    policy, reference, tokenizer = load_policy_and_reference(model, out, resume, prompts, config.max_new_tokens,
                                                             config.lora, config.seed)
    device = next(policy.parameters()).device
    labeller = make_labeller(config, tokenizer, device)
    probe_reward(labeller, policy, tokenizer, prompts, config.max_new_tokens, config.temperature)

    def update(batch: ScoredRollout, kl_coef: float, optimizer_step, step: int) -> dict[str, float]:
        chosen, rejected = order_pairs(batch.scores.score, batch.rollout.texts)
        row = {"objective/labelled_pairs": float(len(chosen)) / max(1, len(batch.rollout.texts) // 2)}
        if len(chosen) == 0:  # every pair tied: no step this iteration
            return {**row, "loss/preference": 0.0, "rewards/chosen": 0.0, "rewards/rejected": 0.0,
                    "rewards/margin": 0.0, "rewards/accuracy": 0.0, "logps/chosen": 0.0, "logps/rejected": 0.0}
        loss, stats = pair_loss(policy, batch, chosen, rejected, config)
        optimizer_step(loss)
        row["loss/preference"] = float(loss.detach())
        row.update({k: float(v) for k, v in stats.items()})
        return row

    start_run(out, "online-dpo", model, config, {"prompts": len(prompts)})
    result = run_policy_gradient(trainer="online-dpo", config=config, out=out, prompts=prompts, policy=policy,
                                 reference=reference, tokenizer=tokenizer, reward=labeller, update=update,
                                 group_size=2, resume=resume, progress=progress, callbacks=callbacks,
                                 report={"prompts": len(prompts)})
    finish_adapter(policy, tokenizer, out, config.merge_lora)
    return result


__all__ = ["OnlineDPOConfig", "train_online_dpo", "online_preference_loss", "order_pairs", "pair_loss"]
