"""Supervised fine-tuning on demonstrations: behaviour cloning, SFT = BC.

    L = - sum_{i,t} m_it log pi(y_it | x_i, y_i,<t) / sum_{i,t} m_it      (:func:`offrl.prefs.losses.sft_loss`)

Example::

    from offrl.prefs import SFTConfig, train_sft
    result = train_sft("runs/task/model", "runs/task/demos.jsonl", "runs/sft", SFTConfig(lr=3e-3, steps=600))
"""

from __future__ import annotations

import torch

from offrl.prefs import losses as L
from offrl.prefs.adapters import finish_adapter
from offrl.prefs.modeling import load_policy
from offrl.prefs.config import SFTConfig, parse_lora
from offrl.prefs.data import TokenizedPreferences
from offrl.prefs.loop import make_accelerator, run_loop
from offrl.prefs.modeling import collate_single, load_tokenizer, token_logps
from offrl.prefs.runs import TrainResult, finish_run, prepare_data, resume_weights, start_run


def train_sft(model: str, data, out: str, config: SFTConfig = SFTConfig(), resume: bool = False,
              progress: bool = True) -> TrainResult:
    """Behaviour cloning: maximise ``sum_t log pi(y_t | x, y_<t)`` on demonstration completions."""
    tokenizer = load_tokenizer(model)
    policy = load_policy(model, resume_weights(model, out, resume), parse_lora(config.lora), config.seed)
    _, train_tok, eval_tok, report = prepare_data(data, tokenizer, config, kind="completions")
    accelerator = make_accelerator(config.mixed_precision)
    pad = tokenizer.pad_token_id

    def compute(m, batch):
        logps, mask = token_logps(m, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
        return L.sft_loss(logps, mask), {"tokens": mask.sum().float()}

    def evaluate(m, step):
        if eval_tok is None:
            return {}
        return {"eval/nll_per_token": mean_nll(m, eval_tok, pad, accelerator.device)}

    start_run(out, "sft", model, config, report)
    history = run_loop(accelerator=accelerator, model=policy, tokenizer=tokenizer, lengths=train_tok.lengths(),
                       collate=lambda idx: collate_single(train_tok, idx, pad), compute=compute, config=config,
                       out=out, evaluate=evaluate, resume=resume, progress=progress, description="sft")
    finish_adapter(policy, tokenizer, out, config.merge_lora)
    return finish_run(out, history, report)


@torch.no_grad()
def mean_nll(model, tokenized: TokenizedPreferences, pad: int, device, batch_size: int = 128) -> float:
    """Held-out negative log-likelihood per completion token."""
    total, count = 0.0, 0.0
    for start in range(0, len(tokenized), batch_size):
        batch = collate_single(tokenized, list(range(start, min(start + batch_size, len(tokenized)))), pad)
        logps, mask = token_logps(model, batch["input_ids"].to(device), batch["attention_mask"].to(device),
                                  batch["completion_mask"].to(device))
        total -= float(logps.sum())
        count += float(mask.sum())
    return total / max(count, 1.0)
