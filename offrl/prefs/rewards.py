"""Reward functions for the online trainers: the digits task's program, a reward model of
``offrl prefs rm`` (one model, K heads, or an M-model ensemble), and Python callables
(``--reward module:function``, TRL's ``reward_funcs``), several combined with weights.

A reward function maps ``(prompts, responses)`` to a :class:`Scores`: the score the policy is
trained on and, for an ensemble, the mean and spread behind it:

    score = mean_k r_k(x, y) - c * std_k r_k(x, y)      (c = uncertainty_penalty; c = 0: the mean)

Subtracting the spread is a pessimistic reward (the LLM form of an offline-RL lower confidence
bound): where the heads disagree, the policy is off the reward model's data.

Several rewards (the reward model first, then each callable in the order given) are summed with
weights ``w`` (``--reward-weights``, default all 1):

    score(x, y) = sum_i w_i * score_i(x, y)

A reward callable is called as ``fn(prompts=prompts, completions=completions)`` with two lists of
equal length: ``prompts[i]`` is the prompt as the data holds it (a string, or a list of
``{"role", "content"}`` messages for a chat prompt; one entry per completion, so a prompt repeats
for each of its samples) and ``completions[i]`` is the sampled completion decoded to a string
(special tokens such as EOS or the end-of-turn token removed). It returns one real, finite number
per completion (a list, tuple, NumPy array or tensor). A function written for TRL's
``reward_funcs`` with a ``**kwargs`` parameter works when it reads completions as strings.
Importing the module runs it: a reward callable is the user's own code, run on purpose.

Example::

    reward = make_reward("runs/rm", uncertainty_penalty=1.0, tokenizer=policy_tokenizer,
                         functions=("my_rewards:length_penalty",), weights=(1.0, 0.1))
    scores = reward(prompts, texts)       # scores.score, scores.mean, scores.std, scores.parts
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from offrl.errors import ConfigError


@dataclass
class Scores:
    """``score`` (what the policy optimises), ``mean`` and ``std`` over ensemble heads, all ``(B,)``;
    ``parts``: each combined reward's own (unweighted) score by name."""

    score: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    parts: dict[str, torch.Tensor] = field(default_factory=dict)


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


def load_reward_function(spec: str) -> Callable:
    """The callable named by ``"module:function"`` (``module`` importable, from the current folder
    too, or a ``path/to/file.py``). A name that does not resolve to a callable is one sentence
    naming ``--reward``."""
    module_name, sep, attr = str(spec).rpartition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--reward {spec} is not MODULE:FUNCTION; e.g. --reward my_rewards:exact_match "
                          "(my_rewards.py importable, or a path: --reward path/to/my_rewards.py:exact_match).")
    try:
        if module_name.endswith(".py"):
            if not os.path.isfile(module_name):
                raise ConfigError(f"--reward {spec}: the file {module_name} does not exist.")
            loader_spec = importlib.util.spec_from_file_location(os.path.basename(module_name)[:-3], module_name)
            module = importlib.util.module_from_spec(loader_spec)
            loader_spec.loader.exec_module(module)
        else:
            added = os.getcwd() not in sys.path
            if added:
                sys.path.insert(0, os.getcwd())
            try:
                module = importlib.import_module(module_name)
            finally:
                if added:
                    sys.path.remove(os.getcwd())
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - the user's module failed to import: say how, in one line
        detail = str(err).splitlines()[0] if str(err) else ""
        raise ConfigError(f"--reward {spec}: cannot import {module_name} ({type(err).__name__}: {detail}); put the "
                          "module on PYTHONPATH or in the current folder, or pass a path to the .py file.") from None
    fn = vars(module).get(attr)  # a name the user's module defines (a user file, not an algorithm module)
    if fn is None:
        raise ConfigError(f"--reward {spec}: the module {module_name} has no attribute {attr!r}; name a function "
                          "defined there.")
    if not callable(fn):
        raise ConfigError(f"--reward {spec} is {type(fn).__name__}, not a function; name a callable "
                          "fn(prompts, completions) -> one float per completion.")
    return fn


def _as_floats(values: Any, n: int, name: str) -> list[float]:
    """Check a reward callable's answer: ``n`` real, finite numbers."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().reshape(-1).tolist() if values.dim() <= 1 else values.tolist()
    elif hasattr(values, "tolist") and hasattr(values, "shape"):  # a NumPy array
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ConfigError(f"--reward {name} returned {type(values).__name__}, not one number per completion; "
                          f"return a list of {n} floats.")
    if len(values) != n:
        raise ConfigError(f"--reward {name} returned {len(values)} values for {n} completions; it must return one "
                          "float per completion.")
    out = []
    for i, v in enumerate(values):
        if not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
            raise ConfigError(f"--reward {name} returned {v!r} ({type(v).__name__}) for completion {i}; every "
                              "reward must be a real number.")
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"--reward {name} returned {v!r} for completion {i}; every reward must be a real "
                              "number.") from None
        if not math.isfinite(f):
            raise ConfigError(f"--reward {name} returned {f} for completion {i}; every reward must be finite.")
        out.append(f)
    return out


class FunctionReward:
    """A reward callable ``fn(prompts=..., completions=...) -> one float per completion`` (see the module docstring)."""

    def __init__(self, spec: str | Callable):
        self.fn = load_reward_function(spec) if isinstance(spec, str) else spec
        self.name = spec if isinstance(spec, str) else getattr(spec, "__name__", "reward")

    def __call__(self, prompts: Sequence, responses: Sequence[str]) -> Scores:
        values = _as_floats(self.fn(prompts=list(prompts), completions=list(responses)), len(responses), self.name)
        s = torch.tensor(values, dtype=torch.float32)
        return Scores(s, s, torch.zeros_like(s))


class CombinedReward:
    """``sum_i w_i * score_i`` over several rewards; ``mean`` likewise, ``std`` the weighted spread
    ``sqrt(sum_i (w_i std_i)^2)``; ``parts`` holds each reward's own score."""

    def __init__(self, rewards: Sequence, weights: Sequence[float]):
        self.rewards, self.weights = list(rewards), [float(w) for w in weights]
        self.name = "+".join(str(r.name) for r in self.rewards)

    def check_tokenizer(self, tokenizer) -> None:
        for r in self.rewards:
            if hasattr(r, "check_tokenizer"):
                r.check_tokenizer(tokenizer)

    def __call__(self, prompts: Sequence, responses: Sequence[str]) -> Scores:
        parts = [r(prompts, responses) for r in self.rewards]
        score = sum(w * p.score.float().cpu() for w, p in zip(self.weights, parts))
        mean = sum(w * p.mean.float().cpu() for w, p in zip(self.weights, parts))
        std = torch.sqrt(sum((w * p.std.float().cpu()) ** 2 for w, p in zip(self.weights, parts)))
        names = [_part_name(r, i) for i, r in enumerate(self.rewards)]
        return Scores(score, mean, std, {n: p.score.float().cpu() for n, p in zip(names, parts)})


def _part_name(reward, i: int) -> str:
    if isinstance(reward, RewardModelReward):
        return "reward_model"
    if isinstance(reward, FunctionReward):
        return str(reward.name).rpartition(":")[2] or f"reward_{i}"
    return str(getattr(reward, "name", f"reward_{i}"))


def make_reward(reward_model: str | None, uncertainty_penalty: float = 0.0, tokenizer=None, device="cpu",
                functions: Sequence[str | Callable] = (), weights: Sequence[float] | None = None):
    """The rewards the policy is trained on: the reward model at ``reward_model`` (checked against
    the policy's ``tokenizer``) and the reward callables ``functions`` (``"module:function"``),
    summed with ``weights`` (one per reward, the reward model first; default all 1); the digits
    task's programmatic reward when there are none."""
    if uncertainty_penalty and reward_model is None:
        raise ConfigError("--uncertainty-penalty needs --reward-model (an ensemble of `offrl prefs rm`); "
                          "the programmatic reward has no spread.")
    parts: list = [FunctionReward(f) for f in functions]
    if reward_model is not None:
        rm = RewardModelReward(reward_model, uncertainty_penalty, device)
        if tokenizer is not None:
            rm.check_tokenizer(tokenizer)
        parts.insert(0, rm)
    if not parts:
        parts = [ProgrammaticReward()]
    if weights is not None and len(weights) != len(parts):
        named = ("the reward model, then " if reward_model is not None else "") + "each --reward in order"
        raise ConfigError(f"--reward-weights has {len(weights)} weight(s) for {len(parts)} reward(s) ({named}); "
                          "give one weight per reward.")
    if len(parts) == 1 and (weights is None or weights[0] == 1.0):
        return parts[0]
    return CombinedReward(parts, weights if weights is not None else [1.0] * len(parts))


def uses_functions(reward) -> bool:
    """Whether ``reward`` calls user code (a reward callable), which :func:`probe_reward` checks first."""
    return isinstance(reward, FunctionReward) or any(isinstance(r, FunctionReward)
                                                     for r in getattr(reward, "rewards", ()))


def probe_reward(reward, policy, tokenizer, prompts: Sequence, max_new_tokens: int, temperature: float = 1.0) -> None:
    """Call the reward callables once on two samples of the first prompts *before* a run starts, so that
    one returning the wrong length, a non-number or a non-finite value is refused (one sentence) with
    the run folder untouched. The global torch RNG is left as it was."""
    if not uses_functions(reward) or not prompts:
        return
    from offrl.prefs.rollout import generate_rollout

    rollout = generate_rollout(policy, tokenizer, list(prompts[:2]), 2, max_new_tokens, temperature, seed=0)
    reward(rollout.prompts, rollout.texts)


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
