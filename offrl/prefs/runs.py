"""What every trainer does around its loop: load and split the data, pick the weights to resume
from, write ``config.json`` at the start and ``summary.json`` at the end.

Run folders hold ``config.json``, ``metrics.jsonl``, ``summary.json``, ``model/`` (the final
weights, safetensors, with the tokenizer) and ``checkpoints/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from offrl.errors import DatasetError
from offrl.prefs.config import TrainConfig
from offrl.prefs.data import load_preferences, tokenize_preferences
from offrl.prefs.loop import write_json


@dataclass
class TrainResult:
    """A finished run: its folder, the logged metric rows and the summary (report + last row)."""

    path: str
    metrics: list[dict[str, float]]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def model_path(self) -> str:
        return os.path.join(self.path, "model")


def prepare_data(data, tokenizer, config: TrainConfig, kind: str | None = None, split_seed: int | None = None):
    """Load, validate, split (by prompt) and tokenize ``data``; returns
    ``(dataset, train_tokens, eval_tokens or None, report)`` where ``report`` counts rows, dropped
    bad rows and truncated completions."""
    dataset = load_preferences(data, bad_rows=config.bad_rows)
    if kind == "completions":
        dataset = dataset.to_completions()
    elif kind == "unpaired":
        dataset = dataset.to_unpaired()
    elif kind == "paired" and dataset.kind != "paired":
        raise DatasetError(f"{dataset.source} holds {dataset.kind} rows; this trainer needs prompt/chosen/rejected pairs.")
    seed = config.seed if split_seed is None else split_seed
    train, held_out = dataset.split(config.eval_fraction, seed=seed) if config.eval_fraction > 0 else (dataset, None)
    kw = dict(max_length=config.max_length, max_prompt_length=config.max_prompt_length, bad_rows=config.bad_rows)
    train_tok = tokenize_preferences(train, tokenizer, **kw)
    eval_tok = tokenize_preferences(held_out, tokenizer, **kw) if held_out is not None and len(held_out) else None
    # rows refused when read (the whole file's, before any split) and when tokenized (each part's)
    dropped = sorted(set(dataset.dropped) | set(train_tok.dropped) | set(eval_tok.dropped if eval_tok else ()),
                     key=lambda b: b.row)
    report = {
        "data": dataset.source,
        "kind": dataset.kind,
        "rows_train": len(train_tok),
        "rows_eval": len(eval_tok) if eval_tok else 0,
        "bad_rows_dropped": len(dropped),
        "bad_rows": [str(b) for b in dropped[:50]],
        "truncated_completions": train_tok.truncated + (eval_tok.truncated if eval_tok else 0),
    }
    per_step = config.batch_size * int(getattr(config, "gradient_accumulation_steps", 1))
    if len(train_tok) < per_step:
        raise DatasetError(
            f"{dataset.source} has {len(train_tok)} training examples, fewer than the {per_step} of one optimizer step "
            f"(--batch-size {config.batch_size} x --gradient-accumulation-steps "
            f"{getattr(config, 'gradient_accumulation_steps', 1)}); lower them or add data."
        )
    return dataset, train_tok, eval_tok, report


def resume_weights(model: str, out: str, resume: bool) -> str:
    """The newest checkpoint's weights under ``out`` when resuming, else the starting ``model``."""
    from offrl.prefs.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(os.path.join(out, "checkpoints")) if resume else None
    return os.path.join(ckpt, "model") if ckpt else model


def start_run(out: str, trainer: str, model: str, config: TrainConfig, report: dict[str, Any] | None = None,
              **extra: Any) -> None:
    """Take the run folder's lock (:mod:`offrl.locking`: a second writer is refused, naming this
    process's PID; :func:`finish_run` or an error in the loop gives it back), then write
    ``<out>/config.json``: the trainer, the starting model, every config field and the data report
    (by the main process only under ``accelerate launch``)."""
    from offrl.locking import acquire
    from offrl.prefs.loop import is_main_process

    if not is_main_process():
        return
    acquire(out)
    write_json(os.path.join(out, "config.json"),
               {"trainer": trainer, "model": model, **extra, **config.to_json(), **(report or {})})


def finish_run(out: str, history: list[dict[str, float]], report: dict[str, Any] | None = None,
               **extra: Any) -> TrainResult:
    """Write ``<out>/summary.json`` (the data report, ``extra`` and the last metric row) and return the result."""
    from offrl.prefs.loop import is_main_process

    from offrl.locking import release

    summary = {**(report or {}), **extra, **(history[-1] if history else {})}
    if is_main_process():
        try:
            write_json(os.path.join(out, "summary.json"), summary)
        finally:
            release(out, everything=True)
    return TrainResult(out, history, summary)
