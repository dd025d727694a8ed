"""Turning sampled completions into preference pairs with a scorer (a judge or a reward model).

    k samples per prompt -> score each -> (prompt, best, worst); prompts whose samples tie give no pair.

Example::

    from offrl.prefs.labelling import label_pairs
    rows, stats = label_pairs(prompts, samples.grouped(), judge)
"""

from __future__ import annotations

import random
import statistics
from typing import Callable, Sequence


def label_pairs(prompts: Sequence[str], groups: Sequence[Sequence[str]], score: Callable[[str, str], float],
                seed: int = 0) -> tuple[list[dict], dict[str, float]]:
    """Pairs ``(prompt, best, worst)`` from k scored samples per prompt; prompts whose samples all
    score the same give no pair. Returns the rows (with both scores) and counts."""
    rng = random.Random(seed)
    rows, ties, all_scores = [], 0, []
    for prompt, samples in zip(prompts, groups):
        scored = [(score(prompt, s), rng.random(), s) for s in samples]
        all_scores += [s for s, _, _ in scored]
        best, worst = max(scored), min(scored)
        if best[0] == worst[0] or best[2] == worst[2]:
            ties += 1
            continue
        rows.append({"prompt": prompt, "chosen": best[2], "rejected": worst[2],
                     "score_chosen": best[0], "score_rejected": worst[0]})
    return rows, {"prompts": len(prompts), "pairs": len(rows), "tied_prompts": ties,
                  "mean_sample_score": statistics.fmean(all_scores) if all_scores else 0.0}


def table_scorer(prompts: Sequence[str], completions: Sequence[str], scores: Sequence[float]) -> Callable[[str, str], float]:
    """A ``score(prompt, completion)`` that looks up precomputed (batched) scores."""
    table = {(p, c): float(s) for p, c, s in zip(prompts, completions, scores)}
    return lambda p, c: table[(p, c)]


def sample_and_label(model: str, prompts: Sequence[str], judge: str = "digits", reward_model: str | None = None,
                     samples: int = 4, max_new_tokens: int = 16, temperature: float = 1.0,
                     seed: int = 0) -> tuple[list[dict], dict[str, float]]:
    """Sample ``samples`` completions per prompt from the model folder ``model`` and label pairs with
    the digits judge or, when ``reward_model`` is given, that reward model (or ensemble)'s mean."""
    from offrl.errors import ConfigError
    from offrl.prefs.modeling import load_causal_lm, load_tokenizer, sample_completions
    from offrl.prefs.task import judge as digits_judge

    if reward_model is None and judge != "digits":
        raise ConfigError(f"--judge {judge} is unknown; use 'digits' or pass --reward-model PATH.")
    policy, tokenizer = load_causal_lm(model), load_tokenizer(model)
    drawn = sample_completions(policy, tokenizer, prompts, samples, max_new_tokens, temperature, seed=seed)
    if reward_model:
        from offrl.prefs.reward_model import RewardModelScorer

        scorer = RewardModelScorer(reward_model)
        scorer.check_tokenizer(tokenizer)
        flat = [p for p in prompts for _ in range(samples)]
        means, _ = scorer(flat, drawn.texts)
        score = table_scorer(flat, drawn.texts, means.tolist())
    else:
        score = digits_judge
    return label_pairs(prompts, drawn.grouped(), score, seed=seed)
