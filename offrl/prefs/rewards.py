"""Reward functions for the online trainers: the digits task's program or a reward model of
``offrl prefs rm`` (one model, K heads, or an M-model ensemble).

A reward function maps ``(prompts, responses)`` to a :class:`Scores`: the score the policy is
trained on and, for an ensemble, the mean and spread behind it:

    score = mean_k r_k(x, y) - c * std_k r_k(x, y)      (c = uncertainty_penalty; c = 0: the mean)

Subtracting the spread is a pessimistic reward (the LLM form of an offline-RL lower confidence
bound): where the heads disagree, the policy is off the reward model's data.

Example::

    reward = make_reward("runs/rm", uncertainty_penalty=1.0, tokenizer=policy_tokenizer)
    scores = reward(prompts, texts)       # scores.score, scores.mean, scores.std
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from offrl.errors import ConfigError


@dataclass
class Scores:
    """``score`` (what the policy optimises), ``mean`` and ``std`` over ensemble heads, all ``(B,)``."""

    score: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor


class ProgrammaticReward:
    """A verifiable reward ``score(prompt, response) -> float`` (default: the digits task's judge)."""

    def __init__(self, score: Callable[[str, str], float] | None = None, name: str = "digits"):
        from offrl.prefs.task import judge

        self.score_fn = score or judge
        self.name = name

    def __call__(self, prompts: Sequence[str], responses: Sequence[str]) -> Scores:
        s = torch.tensor([self.score_fn(p, r) for p, r in zip(prompts, responses)], dtype=torch.float32)
        return Scores(s, s, torch.zeros_like(s))


class RewardModelReward:
    """The reward model (or ensemble) at ``path``: ``mean - uncertainty_penalty * std`` over all heads."""

    def __init__(self, path: str, uncertainty_penalty: float = 0.0, device="cpu"):
        from offrl.prefs.reward_model import RewardModelScorer

        self.scorer = RewardModelScorer(path, device=device)
        self.uncertainty_penalty = uncertainty_penalty
        self.name = path

    def check_tokenizer(self, tokenizer) -> None:
        self.scorer.check_tokenizer(tokenizer, flag="--reward-model")

    def __call__(self, prompts: Sequence[str], responses: Sequence[str]) -> Scores:
        mean, std = self.scorer(list(prompts), list(responses))
        return Scores(mean - self.uncertainty_penalty * std, mean, std)


def make_reward(reward_model: str | None, uncertainty_penalty: float = 0.0, tokenizer=None, device="cpu"):
    """The reward model at ``reward_model`` (checked against the policy's ``tokenizer``), or the
    digits task's programmatic reward when it is ``None``."""
    if reward_model is None:
        if uncertainty_penalty:
            raise ConfigError("--uncertainty-penalty needs --reward-model (an ensemble of `offrl prefs rm`); "
                              "the programmatic reward has no spread.")
        return ProgrammaticReward()
    reward = RewardModelReward(reward_model, uncertainty_penalty, device)
    if tokenizer is not None:
        reward.check_tokenizer(tokenizer)
    return reward


def true_reward(prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor | None:
    """The digits judge's score when every prompt is a digits-task prompt, else ``None``."""
    from offrl.prefs.task import judge, parse_prompt

    from offrl.prefs.chat import prompt_key

    try:
        for p in {prompt_key(p): p for p in prompts}.values():
            parse_prompt(p)
    except ConfigError:
        return None
    return torch.tensor([judge(p, r) for p, r in zip(prompts, responses)], dtype=torch.float32)
