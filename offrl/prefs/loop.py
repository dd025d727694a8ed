"""The one training loop shared by SFT, reward models and preference optimisation.

It owns devices and multi-GPU (``accelerate``: launch with ``accelerate launch``), mixed
precision (bf16 where the GPU supports it, fp32 on CPU), the length-bucketed batch order,
the learning-rate schedule, logging to ``metrics.jsonl``, safetensors checkpoints and resume.
An objective only provides ``compute(batch) -> (loss, metrics)``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

import torch

from offrl.errors import ConfigError, DivergenceError
from offrl.prefs.config import TrainConfig
from offrl.prefs.checkpoint import latest_checkpoint, load_checkpoint_state, save_checkpoint
from offrl.prefs.modeling import cosine_warmup, length_bucketed_batches
from offrl.run_folder import first_non_finite, truncate_metrics


def make_accelerator(mixed_precision: str = "auto"):
    from accelerate import Accelerator

    if mixed_precision == "auto":
        mixed_precision = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    if mixed_precision not in ("no", "bf16", "fp16"):
        raise ConfigError(f"--mixed-precision {mixed_precision} is unknown; use auto, no, bf16 or fp16.")
    return Accelerator(mixed_precision=mixed_precision)


class _IndexDataset(torch.utils.data.Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def run_loop(
    *,
    accelerator,
    model,
    tokenizer,
    lengths: list[int],
    collate: Callable[[list[int]], dict[str, torch.Tensor]],
    compute: Callable[[Any, dict[str, torch.Tensor]], tuple[torch.Tensor, dict[str, torch.Tensor]]],
    config: TrainConfig,
    out: str,
    evaluate: Callable[[Any, int], dict[str, float]] | None = None,
    resume: bool = False,
    progress: bool = True,
    description: str = "train",
    save_model: Callable[[Any, str], None] | None = None,
) -> list[dict[str, float]]:
    """Train ``model`` for ``config.steps`` steps; returns the logged metric rows."""
    os.makedirs(out, exist_ok=True)
    ckpt_dir = os.path.join(out, "checkpoints")
    torch.manual_seed(config.seed)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=config.weight_decay
    )
    start_step = 0
    ckpt = latest_checkpoint(ckpt_dir) if resume else None
    if ckpt is not None:
        state = load_checkpoint_state(ckpt, optimizer)
        start_step = int(state["step"])
    model, optimizer = accelerator.prepare(model, optimizer)
    metrics_path = os.path.join(out, "metrics.jsonl")
    history = truncate_metrics(metrics_path, start_step if ckpt is not None else 0)

    world = accelerator.num_processes
    per_device = max(1, config.batch_size // world)
    steps_per_epoch = max(1, len(lengths) // (per_device * world))

    def batches_from(step: int):
        epoch, skip = divmod(step, steps_per_epoch)
        while True:
            order = length_bucketed_batches(lengths, per_device * world, seed=config.seed * 1000 + epoch, drop_last=True)
            if not order:
                order = length_bucketed_batches(lengths, per_device * world, seed=config.seed * 1000 + epoch)
            # each global batch -> `world` consecutive per-device slices; accelerate's batch-sampler
            # sharding then hands process r every world-th slice, i.e. its part of every global batch
            order = [b[r::world] for b in order[skip:] for r in range(world)]
            loader = torch.utils.data.DataLoader(
                _IndexDataset(len(lengths)), batch_sampler=order, collate_fn=collate
            )
            yield from accelerator.prepare_data_loader(loader, device_placement=True) if world > 1 else (
                {k: v.to(accelerator.device) for k, v in b.items()} for b in loader
            )
            epoch, skip = epoch + 1, 0

    bar = None
    if progress and accelerator.is_main_process:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        bar = Progress(TextColumn(f"[bold]{description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                       TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(), transient=False)
        bar.start()
        task = bar.add_task(description, total=config.steps, completed=start_step, info="")
    model.train()
    running: list[dict[str, torch.Tensor]] = []
    t0, examples = time.perf_counter(), 0
    it = batches_from(start_step)
    try:
        for step in range(start_step, config.steps):
            batch = next(it)
            lr = config.lr * cosine_warmup(step, config.steps, config.warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with accelerator.autocast():
                loss, metrics = compute(model, batch)
            accelerator.backward(loss)
            if config.grad_clip:
                accelerator.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            metrics = {k: v.detach() for k, v in metrics.items()}
            metrics["loss"] = loss.detach()
            running.append(metrics)
            examples += int(batch["index"].numel()) * world
            done = step + 1
            if done % config.log_every == 0 or done == config.steps:
                row = {k: float(torch.stack([m[k].float() for m in running]).mean()) for k in running[0]}
                bad = first_non_finite(row)
                if bad is not None:
                    raise DivergenceError(
                        f"step {done}: '{bad[0]}' became {bad[2]} ({row}); lower --lr or raise --beta."
                    )
                elapsed = time.perf_counter() - t0
                row.update(step=done, lr=lr, examples_per_s=examples / max(elapsed, 1e-9))
                if evaluate is not None:
                    model.eval()
                    row.update(evaluate(accelerator.unwrap_model(model), done))
                    model.train()
                history.append(row)
                if accelerator.is_main_process:
                    with open(metrics_path, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
                running, examples, t0 = [], 0, time.perf_counter()
                if bar is not None:
                    bar.update(task, completed=done, info=f"loss {row['loss']:.4f}")
            elif bar is not None:
                bar.update(task, completed=done)
            if config.save_every and done % config.save_every == 0 and done < config.steps:
                accelerator.wait_for_everyone()
                if accelerator.is_main_process:
                    save_checkpoint(ckpt_dir, accelerator.unwrap_model(model), tokenizer, optimizer, done)
    finally:
        if bar is not None:
            bar.stop()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        final = accelerator.unwrap_model(model)
        if save_model is not None:
            save_model(final, os.path.join(out, "model"))
        else:
            final.save_pretrained(os.path.join(out, "model"))
            tokenizer.save_pretrained(os.path.join(out, "model"))
        if config.save_every:
            save_checkpoint(ckpt_dir, final, tokenizer, optimizer, config.steps)
    return history


def write_json(path: str, obj: Any) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=1, default=str)
