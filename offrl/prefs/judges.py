"""Judges that label preference pairs (RLAIF): a program, a reward model, a pairwise LM judge,
and a constitution-style critique-and-revise labeller.

Every judge answers the same question: for a prompt ``x`` and two completions ``(a, b)``, the
probability ``P(a > b)``. Pointwise judges derive it from scores:

    programmatic:  P = 1, 0 or 1/2 as score(x, a) >, <, = score(x, b)
    reward model:  P = sigma(r(x, a) - r(x, b))                     (Bradley-Terry)

The pairwise LM judge asks any local causal LM which completion is better and reads the answer
from the log-probabilities of the two verdict strings (no sampling, no parsing). LMs favour a
position, so each pair is judged in both orders and the two answers are averaged:

    p1 = softmax(log p(v_A | x, a, b), log p(v_B | x, a, b))[A]
    p2 = softmax(log p(v_A | x, b, a), log p(v_B | x, b, a))[B]
    P(a > b) = (p1 + p2) / 2

The constitution labeller (Bai et al. 2022) has a model critique its own answer against a
principle and then revise it; (revised > original) becomes a pair. Any object with
``critique(prompt, response, principle)`` and ``revise(prompt, response, critique, principle)``
works: :class:`LMCritic` prompts a local LM; :class:`DigitsCritic` is a programmatic stand-in
on the digits task (the tiny local models cannot critique).

Example::

    judge = PairwiseLMJudge("runs/judge/model")
    p = judge.prefer(["sort:21="], ["12"], ["21"])        # tensor([P("12" > "21")])
    rows, stats = label_with_judge(prompts, samples.grouped(), judge)
"""

from __future__ import annotations

import math
import random
from typing import Protocol, Sequence

import torch

from offrl.errors import ConfigError

DEFAULT_TEMPLATE = "{prompt} a:{first} b:{second} better:"


class Judge(Protocol):
    def prefer(self, prompts: Sequence[str], first: Sequence[str], second: Sequence[str]) -> torch.Tensor:
        """``P(first_i > second_i)`` for each row, a ``(N,)`` tensor in [0, 1]."""


def prompt_text(prompt) -> str:
    """The prompt as the judge's template reads it: a string as it is; a chat prompt as its messages'
    contents, one per line (the judge is asked about the conversation, not the policy's chat markup)."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content", "")) for m in prompt)


def _checked(p: torch.Tensor, prompts: Sequence[str], name: str) -> torch.Tensor:
    bad = [i for i, v in enumerate(p.tolist()) if not (isinstance(v, float) and math.isfinite(v) and 0 <= v <= 1)]
    if bad:
        raise ConfigError(f"judge {name} returned no verdict for prompt row {bad[0]} ({prompts[bad[0]]!r}); "
                          "a judge must return a probability in [0, 1] for every pair.")
    return p


class ProgrammaticJudge:
    """Compares the scores of a program ``score(prompt, completion) -> float`` (default: the digits judge)."""

    def __init__(self, score=None, name: str = "digits"):
        from offrl.prefs.task import judge

        self.score = score or judge
        self.name = name

    def prefer(self, prompts, first, second) -> torch.Tensor:
        out = []
        for p, a, b in zip(prompts, first, second):
            sa, sb = self.score(p, a), self.score(p, b)
            out.append(float("nan") if sa is None or sb is None else 0.5 if sa == sb else float(sa > sb))
        return _checked(torch.tensor(out, dtype=torch.float32), prompts, self.name)


class RewardModelJudge:
    """``P(a > b) = sigma(r(x, a) - r(x, b))`` under a reward model (or an ensemble's mean)."""

    def __init__(self, path: str, device="cpu"):
        from offrl.prefs.reward_model import RewardModelScorer

        self.scorer = RewardModelScorer(path, device)
        self.name = path

    def prefer(self, prompts, first, second) -> torch.Tensor:
        n = len(prompts)
        means, _ = self.scorer(list(prompts) * 2, list(first) + list(second))
        return _checked(torch.sigmoid(means[:n] - means[n:]), prompts, self.name)


class PairwiseLMJudge:
    """A local causal LM asked ``template`` (with ``{prompt}``, ``{first}``, ``{second}``) and scored by
    the log-probabilities of the verdict strings; both orders, averaged (see the module docstring)."""

    def __init__(self, path: str, template: str = DEFAULT_TEMPLATE, verdicts: tuple[str, str] = ("a", "b"),
                 device="cpu", batch_size: int = 64):
        from offrl.prefs.modeling import load_causal_lm, load_tokenizer

        self.model = load_causal_lm(path).to(device).eval()
        self.tokenizer = load_tokenizer(path)
        self.template, self.name, self.device, self.batch_size = template, path, device, batch_size
        ids = [self.tokenizer(v, add_special_tokens=False)["input_ids"] for v in verdicts]
        unk = self.tokenizer.unk_token_id
        if not all(ids) or ids[0] == ids[1] or any(unk is not None and unk in i for i in ids):
            raise ConfigError(f"judge {path} cannot give a verdict: the verdicts {verdicts} tokenize to {ids}; "
                              "pass two verdict strings its tokenizer spells differently without unknown tokens.")
        self.verdict_ids = ids

    @torch.no_grad()
    def _verdict_logps(self, contexts: list[str]) -> torch.Tensor:
        """``(N, 2)`` log p(verdict | context) for both verdicts."""
        from offrl.prefs.modeling import collate_sequences, sequence_logps

        ctx = [self.tokenizer(c)["input_ids"] for c in contexts]
        out = []
        for start in range(0, len(ctx), self.batch_size):
            part = ctx[start:start + self.batch_size]
            cols = []
            for v in self.verdict_ids:
                batch = collate_sequences(part, [v] * len(part), self.tokenizer.pad_token_id)
                cols.append(sequence_logps(self.model, {k: t.to(self.device) for k, t in batch.items()}).float().cpu())
            out.append(torch.stack(cols, -1))
        return torch.cat(out)

    def prefer(self, prompts, first, second) -> torch.Tensor:
        fill = lambda p, x, y: self.template.format(prompt=prompt_text(p), first=x, second=y)  # noqa: E731
        n = len(prompts)
        logps = self._verdict_logps([fill(p, a, b) for p, a, b in zip(prompts, first, second)]
                                    + [fill(p, b, a) for p, a, b in zip(prompts, first, second)])
        probs = logps.softmax(-1)
        p = 0.5 * (probs[:n, 0] + probs[n:, 1])
        return _checked(p, prompts, self.name)


def label_with_judge(prompts: Sequence[str], groups: Sequence[Sequence[str]], judge: Judge, tie_margin: float = 0.0,
                     seed: int = 0) -> tuple[list[dict], dict[str, float]]:
    """One pair per prompt from its sampled completions: the first two distinct ones are judged and
    ordered by ``P(a > b)``; prompts with fewer than two distinct completions, or a verdict within
    ``tie_margin`` of 1/2, give no pair."""
    rng = random.Random(seed)
    todo = []
    for prompt, samples in zip(prompts, groups):
        distinct = list(dict.fromkeys(samples))
        if len(distinct) >= 2:
            a, b = rng.sample(distinct, 2)
            todo.append((prompt, a, b))
    p = judge.prefer([t[0] for t in todo], [t[1] for t in todo], [t[2] for t in todo]) if todo else torch.zeros(0)
    rows = []
    for (prompt, a, b), prob in zip(todo, p.tolist()):
        if abs(prob - 0.5) <= tie_margin:
            continue
        chosen, rejected = (a, b) if prob > 0.5 else (b, a)
        rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected, "judge_probability": max(prob, 1 - prob)})
    return rows, {"prompts": len(prompts), "pairs": len(rows), "tied_prompts": len(prompts) - len(rows)}


# --------------------------------------------------------------------------- constitution


def read_principles(path: str) -> list[str]:
    """Non-empty lines of a text file (``#`` starts a comment line)."""
    import os

    if not os.path.exists(path):
        raise ConfigError(f"--constitution {path} does not exist; pass a text file with one principle per line.")
    with open(path, encoding="utf-8") as fh:
        principles = [line.strip() for line in fh if line.strip() and not line.strip().startswith("#")]
    if not principles:
        raise ConfigError(f"--constitution {path} holds no principle; write one principle per line.")
    return principles


class LMCritic:
    """Critique and revision by a local causal LM, greedy, from two templates."""

    critique_template = "{prompt}{response} critique ({principle}):"
    revise_template = "{prompt}{response} critique ({principle}):{critique} revision:"

    def __init__(self, path: str, max_new_tokens: int = 16):
        from offrl.prefs.modeling import load_causal_lm, load_tokenizer

        self.model, self.tokenizer = load_causal_lm(path).eval(), load_tokenizer(path)
        self.max_new_tokens = max_new_tokens

    def _complete(self, texts: list[str]) -> list[str]:
        from offrl.prefs.modeling import sample_completions

        return sample_completions(self.model, self.tokenizer, texts, 1, self.max_new_tokens, 0.0).texts

    def critique(self, prompts, responses, principle: str) -> list[str]:
        return self._complete([self.critique_template.format(prompt=p, response=r, principle=principle)
                               for p, r in zip(prompts, responses)])

    def revise(self, prompts, responses, critiques, principle: str) -> list[str]:
        return self._complete([self.revise_template.format(prompt=p, response=r, principle=principle, critique=c)
                               for p, r, c in zip(prompts, responses, critiques)])


class DigitsCritic:
    """A programmatic critic for the digits task standing in for a capable LM critic: the critique
    lists up to ``max_fixes`` wrong positions (and a wrong length), the revision fixes exactly those."""

    def __init__(self, max_fixes: int = 1):
        self.max_fixes = max_fixes

    def critique(self, prompts, responses, principle: str) -> list[str]:
        from offrl.prefs.task import target

        out = []
        for p, r in zip(prompts, responses):
            t, r = target(p), r.strip()
            wrong = [i for i, (x, y) in enumerate(zip(r, t)) if x != y][: self.max_fixes]
            notes = [f"position {i} should be {t[i]}" for i in wrong]
            if len(r) != len(t) and len(wrong) < self.max_fixes:
                notes.append(f"length should be {len(t)}")
            out.append("; ".join(notes))
        return out

    def revise(self, prompts, responses, critiques, principle: str) -> list[str]:
        from offrl.prefs.task import target

        out = []
        for p, r, c in zip(prompts, responses, critiques):
            r, t = r.strip(), target(p)
            for note in filter(None, c.split("; ")):
                if note.startswith("position"):
                    i = int(note.split()[1])
                    r = r[:i] + t[i] + r[i + 1:]
                else:
                    r = (r + t[len(r):])[: len(t)]
            out.append(r)
        return out


def constitution_pairs(prompts: Sequence[str], responses: Sequence[str], critic, principles: Sequence[str],
                       seed: int = 0) -> tuple[list[dict], dict[str, float]]:
    """For each (prompt, response): a principle drawn at random, the critic's critique, its revision;
    ``(revised > original)`` is a pair whenever the revision is a different, non-empty completion."""
    if not principles:
        raise ConfigError("the constitution holds no principle; write one principle per line.")
    rng = random.Random(seed)
    chosen = [rng.choice(list(principles)) for _ in prompts]
    rows = []
    for principle in dict.fromkeys(chosen):
        idx = [i for i, c in enumerate(chosen) if c == principle]
        ps, rs = [prompts[i] for i in idx], [responses[i] for i in idx]
        critiques = critic.critique(ps, rs, principle)
        revisions = critic.revise(ps, rs, critiques, principle)
        for p, r, c, v in zip(ps, rs, critiques, revisions):
            if v.strip() and v.strip() != r.strip():
                rows.append({"prompt": p, "chosen": v, "rejected": r, "critique": c, "principle": principle})
    return rows, {"prompts": len(prompts), "pairs": len(rows), "unrevised": len(prompts) - len(rows)}


def make_judge(spec: str, device="cpu"):
    """``digits`` (the program), ``rm:PATH`` (a reward model) or ``lm:PATH`` (a pairwise LM judge)."""
    if spec == "digits":
        return ProgrammaticJudge()
    kind, _, path = spec.partition(":")
    if kind == "rm" and path:
        return RewardModelJudge(path, device)
    if kind == "lm" and path:
        return PairwiseLMJudge(path, device=device)
    raise ConfigError(f"--judge {spec} is unknown; use digits, rm:PATH (a reward model) or lm:PATH (a pairwise LM judge).")
