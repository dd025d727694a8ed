"""Evaluating a policy: true reward and sampled KL on prompts, implicit-reward accuracy on pairs.

    reward   = mean_x,y~pi score(x, y)                   (a judge: the task's program, a reward model)
    KL       ~= mean [log pi(y|x) - log pi_ref(y|x)],  y ~ pi(.|x) at temperature 1
    r_hat    = beta * (log pi(y|x) - log pi_ref(y|x))   (DPO's implicit reward)

Example::

    from offrl.prefs.evaluation import evaluate_file
    metrics = evaluate_file("runs/dpo/model", "runs/task/prompts_eval.jsonl", reference="runs/sft/model")
"""

from __future__ import annotations

import statistics
from typing import Callable, Sequence

import torch

from offrl.prefs import losses as L
from offrl.prefs.data import TokenizedPreferences
from offrl.prefs.modeling import collate_pairs, collate_single, sample_completions, sequence_logps
from offrl.prefs.task import judge


@torch.no_grad()
def implicit_reward_metrics(model, tokenized: TokenizedPreferences, ref_logps: torch.Tensor, beta: float, pad: int,
                            average: bool = False, device="cpu", batch_size: int = 128) -> dict[str, float]:
    """Held-out implicit-reward accuracy and margin: ``r = beta * (log pi - log pi_ref)``."""
    r_c, r_r = [], []
    for start in range(0, len(tokenized), batch_size):
        idx = list(range(start, min(start + batch_size, len(tokenized))))
        batch = {k: v.to(device) for k, v in collate_pairs(tokenized, idx, pad).items()}
        pi_c, pi_r = sequence_logps(model, batch, average=average).float().cpu().chunk(2)
        r_c.append(beta * (pi_c - ref_logps[idx, 0]))
        r_r.append(beta * (pi_r - ref_logps[idx, 1]))
    c, r = torch.cat(r_c), torch.cat(r_r)
    return {"accuracy": float((c > r).float().mean()), "margin": float((c - r).mean()),
            "rewards/chosen": float(c.mean()), "rewards/rejected": float(r.mean())}


@torch.no_grad()
def kto_eval_metrics(model, tokenized: TokenizedPreferences, ref_logps: torch.Tensor, beta: float, pad: int,
                     average: bool = False, device="cpu", batch_size: int = 128) -> dict[str, float]:
    """Held-out implicit rewards of desirable and undesirable completions, their gap (``margin``), and,
    where a desirable and an undesirable completion share a source row (pairs split for KTO), the
    share of such pairs ordered correctly (``accuracy``)."""
    rewards = []
    for start in range(0, len(tokenized), batch_size):
        idx = list(range(start, min(start + batch_size, len(tokenized))))
        batch = {k: v.to(device) for k, v in collate_single(tokenized, idx, pad).items()}
        rewards.append(beta * (sequence_logps(model, batch, average=average).float().cpu() - ref_logps[idx]))
    r = torch.cat(rewards)
    labels = torch.tensor(tokenized.labels, dtype=torch.bool)
    out = {"rewards/desirable": float(r[labels].mean()) if labels.any() else 0.0,
           "rewards/undesirable": float(r[~labels].mean()) if (~labels).any() else 0.0}
    out["margin"] = out["rewards/desirable"] - out["rewards/undesirable"]
    by_row: dict[int, dict[bool, float]] = {}
    for row, lab, value in zip(tokenized.rows, tokenized.labels, r.tolist()):
        by_row.setdefault(row, {})[lab] = value
    pairs = [(v[True], v[False]) for v in by_row.values() if len(v) == 2]
    if pairs:
        out["accuracy"] = sum(c > rj for c, rj in pairs) / len(pairs)
    return out


@torch.no_grad()
def sampled_kl(policy, reference, tokenizer, prompts, max_new_tokens: int = 32, num_samples: int = 1, seed: int = 0,
               conversational: bool = False) -> float:
    """``KL(pi || pi_ref) ~= mean [log pi(y|x) - log pi_ref(y|x)]`` over ``y ~ pi(.|x)`` at temperature 1,
    scored on the exact generated token ids."""
    samples = sample_completions(policy, tokenizer, prompts, num_samples, max_new_tokens, 1.0, seed=seed,
                                 conversational=conversational)
    batch = samples.batch(tokenizer.pad_token_id, next(policy.parameters()).device)
    return float(L.sampled_kl(sequence_logps(policy, batch), sequence_logps(reference, batch)))


@torch.no_grad()
def evaluate_policy(policy, reference, tokenizer, prompts: Sequence[str], num_samples: int = 4,
                    max_new_tokens: int = 10, seed: int = 1234, score: Callable[[str, str], float] = judge,
                    batch_size: int = 512) -> dict[str, float]:
    """True reward and KL to the reference on held-out prompts.

    reward: mean judge score of samples ``y ~ pi(.|x)`` (temperature 1); exact: share of exact
    answers; greedy_reward: judge score of the greedy answer; kl: ``mean log pi(y|x) - log
    pi_ref(y|x)`` over the same samples (a Monte-Carlo estimate of the sequence KL), kl_se its
    standard error; length: mean completion length in tokens.
    """
    conversational = bool(prompts) and isinstance(prompts[0], list)
    samples = sample_completions(policy, tokenizer, prompts, num_samples, max_new_tokens, 1.0, seed=seed,
                                 conversational=conversational)
    flat_prompts = [p for p in prompts for _ in range(num_samples)]
    scores = [score(p, c) for p, c in zip(flat_prompts, samples.texts)]
    diffs = []
    for start in range(0, len(samples.texts), batch_size):
        part = type(samples)(samples.prompt_ids[start:start + batch_size], samples.completion_ids[start:start + batch_size],
                             samples.texts[start:start + batch_size], 1)
        batch = part.batch(tokenizer.pad_token_id, next(policy.parameters()).device)
        diffs.append(sequence_logps(policy, batch) - sequence_logps(reference, batch))
    diff = torch.cat(diffs).double()
    greedy = sample_completions(policy, tokenizer, prompts, 1, max_new_tokens, 0.0, conversational=conversational)
    return {
        "reward": statistics.fmean(scores),
        "exact": statistics.fmean(float(s == 1.0) for s in scores),
        "greedy_reward": statistics.fmean(score(p, c) for p, c in zip(prompts, greedy.texts)),
        "kl": float(diff.mean()),
        "kl_se": float(diff.std() / max(1.0, len(diff)) ** 0.5),
        "length": statistics.fmean(len(c) for c in samples.completion_ids),
    }


def evaluate_file(model: str, data: str, reference: str | None = None, beta: float = 0.1, samples: int = 4,
                  max_new_tokens: int = 16, max_length: int = 512) -> dict[str, float]:
    """Evaluate the model folder ``model`` on a file: for pair rows, the implicit-reward metrics
    (``implicit accuracy`` ...) against ``reference`` (default: the model itself); for prompt rows,
    :func:`evaluate_policy` with the digits judge."""
    from offrl.prefs.data import load_preferences, read_rows, tokenize_preferences
    from offrl.prefs.modeling import load_causal_lm, load_tokenizer, reference_logps
    from offrl.prefs.task import read_prompts

    rows, _ = read_rows(data)
    tokenizer = load_tokenizer(model)
    policy = load_causal_lm(model)
    ref_model = load_causal_lm(reference) if reference else policy
    if rows and "chosen" in rows[0]:
        tok = tokenize_preferences(load_preferences(data), tokenizer, max_length=max_length)
        ref = reference_logps(ref_model, tok, tokenizer.pad_token_id)
        metrics = implicit_reward_metrics(policy, tok, ref, beta, tokenizer.pad_token_id)
        return {f"implicit {k}": v for k, v in metrics.items()}
    return evaluate_policy(policy, ref_model, tokenizer, read_prompts(data), samples, max_new_tokens)
