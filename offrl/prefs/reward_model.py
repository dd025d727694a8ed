"""Bradley-Terry reward models, optionally an ensemble (K bootstrapped heads, M models).

    L = -log sigma(r(x, y_w) - r(x, y_l))          (Bradley & Terry 1952; Ouyang et al. 2022, eq. 1)

Any Hugging Face causal LM folder can be the backbone: the LM head is replaced by a fresh
linear scoring head read at the last non-pad token. The ensemble's spread is the uncertainty
that the RLHF trainers can subtract (``mean - c * std``) and the guardrails report watches.

Example::

    from offrl.prefs import RewardModelConfig, train_reward_model, score_with_reward_model
    train_reward_model("runs/sft/model", "pairs.jsonl", "runs/rm", RewardModelConfig(heads=4))
    mean, std = score_with_reward_model("runs/rm", ["sort:21="], ["12"])
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import torch

from offrl.errors import ConfigError
from offrl.prefs import losses as L
from offrl.prefs.config import RewardModelConfig
from offrl.prefs.data import TokenizedPreferences
from offrl.prefs.loop import make_accelerator, run_loop, write_json
from offrl.prefs.modeling import (check_model_dir, check_safetensors_weights, collate_pairs, collate_sequences,
                                  disable_dropout, load_tokenizer)
from offrl.prefs.runs import TrainResult, finish_run, prepare_data, resume_weights, start_run


def load_reward_model(path: str, heads: int | None = None):
    """A sequence-classification model with ``heads`` scalar outputs and its tokenizer."""
    from transformers import AutoModelForSequenceClassification

    check_model_dir(path)
    check_safetensors_weights(path)
    tokenizer = load_tokenizer(path)
    kwargs = {"num_labels": heads} if heads else {}
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32, use_safetensors=True, **kwargs)
    model.config.pad_token_id = tokenizer.pad_token_id
    disable_dropout(model)
    return model, tokenizer


def rewards(model, batch) -> torch.Tensor:
    """``(N, heads)`` rewards of the rows of a collated batch."""
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits.float()


def train_reward_model(model: str, data, out: str, config: RewardModelConfig = RewardModelConfig(),
                       resume: bool = False, progress: bool = True, _split_seed: int | None = None) -> TrainResult:
    """Bradley-Terry reward model on K bootstrapped heads (and, with ``config.models = M > 1``,
    M independently trained members)."""
    if config.lora:
        raise ConfigError("--lora is not supported for reward models yet; train the reward model's full weights "
                          "(drop --lora).")
    if config.models > 1:
        return _train_reward_ensemble(model, data, out, config, resume, progress)
    torch.manual_seed(config.seed)  # the fresh scoring head's initialisation
    rm, tokenizer = load_reward_model(resume_weights(model, out, resume), heads=config.heads)
    _, train_tok, eval_tok, report = prepare_data(data, tokenizer, config, kind="paired", split_seed=_split_seed)
    accelerator = make_accelerator(config.mixed_precision)
    pad = tokenizer.pad_token_id
    g = torch.Generator().manual_seed(config.seed)
    bootstrap = torch.poisson(torch.ones(len(train_tok), config.heads), generator=g) if config.heads > 1 else None

    def compute(m, batch):
        r_c, r_r = rewards(m, batch).chunk(2, dim=0)  # (B, K)
        per_head = L.bradley_terry_loss(r_c, r_r)
        if bootstrap is not None:
            w = bootstrap[batch["index"].cpu()].to(per_head.device)
            loss = (per_head * w).sum() / w.sum().clamp(min=1.0)
        else:
            loss = per_head.mean()
        margin = (r_c - r_r).mean(-1)
        return loss, {"accuracy": (margin > 0).float().mean(), "margin": margin.mean()}

    def evaluate(m, step):
        if eval_tok is None:
            return {}
        return {f"eval/{k}": v for k, v in reward_model_metrics(m, eval_tok, pad, accelerator.device).items()}

    start_run(out, "reward_model", model, config, report)
    history = run_loop(accelerator=accelerator, model=rm, tokenizer=tokenizer, lengths=train_tok.lengths(),
                       collate=lambda idx: collate_pairs(train_tok, idx, pad), compute=compute, config=config,
                       out=out, evaluate=evaluate, resume=resume, progress=progress, description="reward model")
    return finish_run(out, history, report)


def _train_reward_ensemble(model: str, data, out: str, config: RewardModelConfig, resume: bool,
                           progress: bool) -> TrainResult:
    members, histories = [], []
    for k in range(config.models):
        member_cfg = replace(config, models=1, seed=config.seed + k)
        result = train_reward_model(model, data, os.path.join(out, f"member_{k}"), member_cfg, resume, progress,
                                    _split_seed=config.seed)
        members.append(f"member_{k}/model")
        histories.append(result.metrics)
    write_json(os.path.join(out, "ensemble.json"), {"members": members})
    loaded = [load_reward_model(os.path.join(out, m))[0].eval() for m in members]
    tokenizer = load_tokenizer(os.path.join(out, members[0]))
    _, _, eval_tok, report = prepare_data(data, tokenizer, replace(config, models=1), kind="paired")
    metrics = {}
    if eval_tok is not None:
        metrics = {f"eval/{k}": v for k, v in reward_model_metrics(loaded, eval_tok, tokenizer.pad_token_id).items()}
    result = finish_run(out, [], report, **metrics, members=config.models)
    return TrainResult(out, histories[-1], result.summary)


@torch.no_grad()
def reward_model_metrics(model, tokenized: TokenizedPreferences, pad: int, device="cpu",
                         batch_size: int = 128) -> dict[str, float]:
    """Held-out preference accuracy, mean reward margin, ensemble disagreement and length bias.

    ``uncertainty`` is the std across heads of the margin ``r(x, y_w) - r(x, y_l)``, averaged over
    pairs (margins, unlike raw rewards, do not depend on each head's arbitrary offset);
    ``length_correlation`` is the Pearson correlation of the (head-mean) reward with the completion's
    token count over all chosen and rejected completions: a strong positive value warns that the
    model may be rewarding length rather than quality.
    """
    rewards_c, rewards_r, lengths_c, lengths_r = [], [], [], []
    models = model if isinstance(model, (list, tuple)) else [model]
    for start in range(0, len(tokenized), batch_size):
        idx = list(range(start, min(start + batch_size, len(tokenized))))
        batch = {k: v.to(device) for k, v in collate_pairs(tokenized, idx, pad).items()}
        r_c, r_r = torch.cat([rewards(m, batch) for m in models], dim=-1).chunk(2, dim=0)
        rewards_c.append(r_c.cpu())
        rewards_r.append(r_r.cpu())
        lengths_c += [len(tokenized.completions[0][i]) for i in idx]
        lengths_r += [len(tokenized.completions[1][i]) for i in idx]
    r_c, r_r = torch.cat(rewards_c), torch.cat(rewards_r)
    mean_c, mean_r = r_c.mean(-1), r_r.mean(-1)
    lengths = torch.tensor(lengths_c + lengths_r, dtype=torch.float32)
    return {
        "accuracy": float((mean_c > mean_r).float().mean()),
        "margin": float((mean_c - mean_r).mean()),
        "uncertainty": float((r_c - r_r).std(-1).mean()) if r_c.shape[-1] > 1 else 0.0,
        "length_correlation": pearson(torch.cat([mean_c, mean_r]), lengths),
    }


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation ``sum (a - a_bar)(b - b_bar) / (|a - a_bar| |b - b_bar|)``; 0 when either is constant."""
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    denom = float(a.norm() * b.norm())
    return float((a * b).sum()) / denom if denom > 0 else 0.0


def reward_model_folders(path: str) -> list[str]:
    """The model folders behind ``path``: a reward-model folder, a single-model run folder or an
    ensemble run folder (``ensemble.json``)."""
    if os.path.exists(os.path.join(path, "model", "config.json")):
        path = os.path.join(path, "model")
    if os.path.exists(os.path.join(path, "ensemble.json")):
        with open(os.path.join(path, "ensemble.json")) as fh:
            return [os.path.join(path, m) for m in json.load(fh)["members"]]
    check_model_dir(path)
    return [path]


class RewardModelScorer:
    """Scores (prompt, completion) texts with a reward model or ensemble: ``(mean, std)`` over all heads.

    Rewards are only defined up to a per-head constant (Bradley-Terry is shift-invariant), so
    compare them between completions of one prompt, not across heads.
    """

    def __init__(self, path: str, device="cpu"):
        folders = reward_model_folders(path)
        self.path = path
        self.models = [load_reward_model(f)[0].eval().to(device) for f in folders]
        self.tokenizer = load_tokenizer(folders[0])
        self.device = device

    def check_tokenizer(self, tokenizer, flag: str = "--reward-model") -> None:
        """Refuse a policy whose tokenizer differs from the reward model's (token ids would mean other text)."""
        if self.tokenizer.get_vocab() != tokenizer.get_vocab():
            raise ConfigError(f"{flag} {self.path} uses a different tokenizer from the policy's "
                              f"({len(self.tokenizer)} vs {len(tokenizer)} tokens); train the reward model "
                              "from the policy's model folder.")

    @torch.no_grad()
    def __call__(self, prompts: list, completions: list[str], batch_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
        from offrl.prefs.chat import require_chat_template
        from offrl.prefs.data import render_example

        tokenizer = self.tokenizer
        means, stds = [], []
        eos = tokenizer.eos_token or ""
        for start in range(0, len(prompts), batch_size):
            ps, cs = prompts[start:start + batch_size], completions[start:start + batch_size]
            p_ids, c_ids = [], []
            for p, c in zip(ps, cs):
                if isinstance(p, str):
                    ids = tokenizer(p)["input_ids"]
                    p_ids.append(ids)
                    c_ids.append(tokenizer(p + c + eos)["input_ids"][len(ids):])
                else:  # a conversation: the chat template renders prompt and answer (offrl.prefs.data)
                    require_chat_template(tokenizer, "the reward model's prompts")
                    ids, rest = render_example(tokenizer, p, c, True)
                    p_ids.append(ids)
                    c_ids.append(rest)
            batch = collate_sequences(p_ids, c_ids, tokenizer.pad_token_id)
            batch = {k: v.to(self.device) for k, v in batch.items()}
            r = torch.cat([rewards(m, batch) for m in self.models], dim=-1).cpu()
            means.append(r.mean(-1))
            stds.append(r.std(-1) if r.shape[-1] > 1 else torch.zeros(r.shape[0]))
        return torch.cat(means), torch.cat(stds)


def score_with_reward_model(path: str, prompts: list[str], completions: list[str],
                            batch_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean reward, ensemble std) for each (prompt, completion) under the reward model at ``path``."""
    return RewardModelScorer(path)(prompts, completions, batch_size)
