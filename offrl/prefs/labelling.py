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
    from offrl.prefs.chat import prompt_key

    table = {(prompt_key(p), c): float(s) for p, c, s in zip(prompts, completions, scores)}
    return lambda p, c: table[(prompt_key(p), c)]


def sample_and_label(model: str, prompts: Sequence[str], judge: str = "digits", reward_model: str | None = None,
                     samples: int = 4, max_new_tokens: int = 16, temperature: float = 1.0,
                     seed: int = 0) -> tuple[list[dict], dict[str, float]]:
    """Sample ``samples`` completions per prompt from the model folder ``model`` and label pairs.

    With ``reward_model`` (or the programmatic ``judge="digits"``) every sample is scored and the
    best and worst form the pair; with a pairwise judge (``rm:PATH``, ``lm:PATH``, see
    :func:`offrl.prefs.judges.make_judge`) two distinct samples are compared."""
    from offrl.prefs.judges import ProgrammaticJudge, label_with_judge, make_judge
    from offrl.prefs.modeling import load_causal_lm, load_tokenizer, sample_completions

    chosen_judge = None if reward_model else make_judge(judge)
    policy, tokenizer = load_causal_lm(model), load_tokenizer(model)
    drawn = sample_completions(policy, tokenizer, prompts, samples, max_new_tokens, temperature, seed=seed)
    if reward_model:
        from offrl.prefs.reward_model import RewardModelScorer

        scorer = RewardModelScorer(reward_model)
        scorer.check_tokenizer(tokenizer)
        flat = [p for p in prompts for _ in range(samples)]
        means, _ = scorer(flat, drawn.texts)
        return label_pairs(prompts, drawn.grouped(), table_scorer(flat, drawn.texts, means.tolist()), seed=seed)
    if isinstance(chosen_judge, ProgrammaticJudge):
        return label_pairs(prompts, drawn.grouped(), chosen_judge.score, seed=seed)
    return label_with_judge(prompts, drawn.grouped(), chosen_judge, seed=seed)


def critique_and_revise(model: str, prompts: Sequence[str], constitution: str, critic: str = "digits",
                        max_new_tokens: int = 16, temperature: float = 1.0, seed: int = 0, max_fixes: int = 1) -> tuple[list[dict], dict[str, float]]:
    """One completion per prompt from ``model``, critiqued against a principle of the ``constitution``
    file and revised by the ``critic`` (``digits``: the programmatic stand-in; ``lm:PATH``: a local LM,
    e.g. the model itself; ``max_fixes``: errors the digits critic fixes per revision); (revised > original) pairs."""
    from offrl.errors import ConfigError
    from offrl.prefs.judges import DigitsCritic, LMCritic, constitution_pairs, read_principles
    from offrl.prefs.modeling import load_causal_lm, load_tokenizer, sample_completions

    principles = read_principles(constitution)
    if critic == "digits":
        reviser = DigitsCritic(max_fixes)
    elif critic.startswith("lm:") and len(critic) > 3:
        reviser = LMCritic(critic[3:], max_new_tokens)
    else:
        raise ConfigError(f"--critic {critic} is unknown; use digits or lm:PATH (a local causal LM folder).")
    policy, tokenizer = load_causal_lm(model), load_tokenizer(model)
    drawn = sample_completions(policy, tokenizer, prompts, 1, max_new_tokens, temperature, seed=seed)
    return constitution_pairs(list(prompts), drawn.texts, reviser, principles, seed=seed)
