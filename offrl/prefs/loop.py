"""The one training loop shared by SFT, reward models and preference optimisation.

It owns devices and multi-GPU (``accelerate``: launch with ``accelerate launch``), mixed
precision (bf16 where the GPU supports it, fp16 on older GPUs, fp32 on CPU; recorded under
``"launch"`` in ``config.json``), gradient accumulation, the length-bucketed batch order,
the learning-rate schedule, logging to ``metrics.jsonl``, safetensors checkpoints and resume.
An objective only provides ``compute(batch) -> (loss, metrics)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any, Callable, Mapping

import torch

from offrl.progress import ProgressBar
from offrl.errors import ConfigError, DivergenceError
from offrl.prefs.config import TrainConfig
from offrl.prefs.checkpoint import latest_checkpoint, load_checkpoint_state, save_checkpoint
from offrl.prefs.modeling import cosine_warmup, length_bucketed_batches
from offrl.run_folder import append_bytes, first_non_finite, read_metrics, truncate_metrics


def resolve_mixed_precision(requested: str, cuda: bool, bf16_supported: bool) -> tuple[str, str]:
    """``(mode, reason)``: ``auto`` is bf16 on a CUDA GPU that supports it (Ampere and later),
    fp16 (with loss scaling) on an older CUDA GPU and fp32 (``"no"``) on CPU; an explicit
    ``no``/``bf16``/``fp16`` is kept."""
    if requested not in ("auto", "no", "bf16", "fp16"):
        raise ConfigError(f"--mixed-precision {requested} is unknown; use auto, no, bf16 or fp16.")
    if requested != "auto":
        return requested, "requested"
    if cuda and bf16_supported:
        return "bf16", "auto: CUDA GPU with bf16 support"
    if cuda:
        return "fp16", "auto: CUDA GPU without bf16 support"
    return "no", "auto: no CUDA GPU (fp32 on CPU)"


def check_launch(env: Mapping[str, str]) -> None:
    """Refuse an ``accelerate launch --num_processes N`` (N > 1) that started ONE process: accelerate's
    simple launcher (chosen without ``--multi_gpu`` or several visible GPUs) exports
    ``MASTER_ADDR`` for the processes it was asked for but starts only this one, which would then
    train alone on the whole batch while the user believes it is sharded."""
    launched_alone = "ACCELERATE_USE_CPU" in env and "MASTER_ADDR" in env and not any(
        k in env for k in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"))
    if launched_alone:
        raise ConfigError("accelerate launch --num_processes N started one process here (its simple launcher, used "
                          "without GPUs or --multi_gpu); run `accelerate launch --multi_gpu --num_processes N -m offrl "
                          "prefs ...` (offrl joins the processes over gloo on CPU) or `torchrun --nproc_per_node N -m offrl prefs ...`.")


def check_deepspeed(distributed_type, config: TrainConfig) -> None:
    """Under DeepSpeed (``accelerate launch --config_file`` with ``distributed_type: DEEPSPEED``)
    accelerate steps the engine inside ``backward`` and ZeRO partitions the optimizer state, so
    this loop's own accumulation and its flattened optimizer checkpoints do not apply."""
    if str(distributed_type).split(".")[-1] != "DEEPSPEED":
        return
    if int(getattr(config, "gradient_accumulation_steps", 1)) > 1:
        raise ConfigError(f"--gradient-accumulation-steps {config.gradient_accumulation_steps} is not supported under "
                          "DeepSpeed (it steps inside backward); pass 1 and raise --batch-size instead.")
    if config.save_every:
        raise ConfigError(f"--save-every {config.save_every} is not supported under DeepSpeed ZeRO (the optimizer state "
                          "is partitioned over processes); pass --save-every 0 (the final model is still written).")


def make_accelerator(mixed_precision: str = "auto"):
    """An :class:`accelerate.Accelerator` with the precision chosen by :func:`resolve_mixed_precision`
    (its reason kept as ``accelerator.precision_reason``).

    On a machine without CUDA, ``accelerate launch --num_processes 2`` alone starts ONE process
    (accelerate's simple launcher); ``accelerate launch --multi_gpu --num_processes 2`` (its
    torchrun launcher, whatever the device) or ``torchrun --nproc_per_node 2`` starts two, which
    join over gloo here."""
    from accelerate import Accelerator

    check_launch(os.environ)
    cuda = torch.cuda.is_available()
    mode, reason = resolve_mixed_precision(mixed_precision, cuda, cuda and torch.cuda.is_bf16_supported())
    # several processes without CUDA (`accelerate launch --multi_gpu` or torchrun on a CPU machine):
    # accelerate needs cpu=True to join them as MULTI_CPU over gloo instead of running each alone
    multi_cpu = not cuda and int(os.environ.get("WORLD_SIZE", "1")) > 1
    accelerator = Accelerator(mixed_precision=mode, cpu=multi_cpu)
    accelerator.precision_reason = reason
    return accelerator


def is_main_process() -> bool:
    """Whether this is the main process of an ``accelerate launch`` (always true for one process)."""
    from accelerate import PartialState

    return PartialState().is_main_process


PRECISION_NAMES = {"no": "fp32", "bf16": "bf16", "fp16": "fp16"}


def launch_record(accelerator, config: TrainConfig) -> dict[str, Any]:
    """How this run is laid out: processes, device, precision (and why), batch per process and per optimizer step."""
    world = accelerator.num_processes
    accumulation = int(getattr(config, "gradient_accumulation_steps", 1))
    return {"processes": world, "device": str(accelerator.device),
            "mixed_precision": PRECISION_NAMES.get(str(accelerator.mixed_precision), str(accelerator.mixed_precision)),
            "mixed_precision_reason": getattr(accelerator, "precision_reason", "requested"),
            "batch_per_process": max(1, config.batch_size // world), "gradient_accumulation_steps": accumulation,
            "examples_per_optimizer_step": max(1, config.batch_size // world) * world * accumulation}


def _record_launch(out: str, record: dict[str, Any]) -> None:
    """Add ``record`` to ``<out>/config.json`` under ``"launch"`` (main process only)."""
    path = os.path.join(out, "config.json")
    data = json.load(open(path)) if os.path.exists(path) else {}
    data["launch"] = record
    write_json(path, data)


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
    """Train ``model`` for ``config.steps`` steps; returns the logged metric rows. The main process
    holds ``out``'s lock (:mod:`offrl.locking`) throughout."""
    from offrl.locking import RunLock

    check_deepspeed(accelerator.distributed_type, config)
    os.makedirs(out, exist_ok=True)
    with RunLock(out) if accelerator.is_main_process else contextlib.nullcontext():
        return _run_loop(accelerator, model, tokenizer, lengths, collate, compute, config, out, evaluate, resume,
                         progress, description, save_model)


def _run_loop(accelerator, model, tokenizer, lengths, collate, compute, config, out, evaluate, resume, progress,
              description, save_model) -> list[dict[str, float]]:
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
    # the main process alone rewrites the log (truncated to the checkpoint); the others read it after
    history = truncate_metrics(metrics_path, start_step if ckpt is not None else 0) if accelerator.is_main_process else []
    accelerator.wait_for_everyone()
    if not accelerator.is_main_process:
        history = [r for r in read_metrics(metrics_path) if r.get("step", 0) <= (start_step if ckpt is not None else 0)]

    world = accelerator.num_processes
    accumulation = int(getattr(config, "gradient_accumulation_steps", 1))
    per_device = max(1, config.batch_size // world)
    per_step = per_device * world * accumulation  # examples per optimizer step over all processes
    steps_per_epoch = max(1, len(lengths) // per_step)
    launch = launch_record(accelerator, config)
    if accelerator.is_main_process:
        _record_launch(out, launch)
        if progress:
            print(f"{description}: {launch['processes']} process(es) on {launch['device']}, precision "
                  f"{launch['mixed_precision']} ({launch['mixed_precision_reason']}), {per_device} examples per process "
                  f"x {accumulation} accumulation step(s) = {per_step} per optimizer step", flush=True)

    def batches_from(step: int):
        epoch, skip = divmod(step, steps_per_epoch)
        while True:
            order = length_bucketed_batches(lengths, per_step, seed=config.seed * 1000 + epoch, drop_last=True)
            if not order:
                order = length_bucketed_batches(lengths, per_step, seed=config.seed * 1000 + epoch)
            # each optimizer step's batch -> `accumulation` micro-batches -> `world` consecutive per-device
            # slices each; accelerate's batch-sampler sharding then hands process r every world-th slice,
            # i.e. its part of every micro-batch
            micro = per_device * world
            order = [m[r::world] for b in order[skip:] for m in (b[i:i + micro] for i in range(0, len(b), micro))
                     for r in range(world) if m[r::world]]
            loader = torch.utils.data.DataLoader(
                _IndexDataset(len(lengths)), batch_sampler=order, collate_fn=collate
            )
            yield from accelerator.prepare_data_loader(loader, device_placement=True) if world > 1 else (
                {k: v.to(accelerator.device) for k, v in b.items()} for b in loader
            )
            epoch, skip = epoch + 1, 0

    bar = ProgressBar(bool(progress and accelerator.is_main_process), total=config.steps, title=description, start=start_step)
    model.train()
    running: list[dict[str, torch.Tensor]] = []
    t0, examples = time.perf_counter(), 0
    it = batches_from(start_step)
    try:
        for step in range(start_step, config.steps):
            lr = config.lr * cosine_warmup(step, config.steps, config.warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            parts = []
            for micro in range(accumulation):
                batch = next(it)
                # gradients of the micro-batches add up locally; processes synchronise on the last one
                sync = micro == accumulation - 1 or world == 1
                with contextlib.nullcontext() if sync else accelerator.no_sync(model):
                    with accelerator.autocast():
                        loss, metrics = compute(model, batch)
                    accelerator.backward(loss / accumulation)
                parts.append({**{k: v.detach() for k, v in metrics.items()}, "loss": loss.detach()})
                examples += int(batch["index"].numel()) * world
            if config.grad_clip:
                accelerator.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            running.append({k: torch.stack([p[k].float() for p in parts]).mean() for k in parts[0]})
            done = step + 1
            if done % config.log_every == 0 or done == config.steps:
                means = {k: torch.stack([m[k].float() for m in running]).mean() for k in running[0]}
                if world > 1:  # every process logs the global batch's mean, as one process would
                    means = accelerator.reduce(means, reduction="mean")
                row = {k: float(v) for k, v in means.items()}
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
                    append_bytes(metrics_path, (json.dumps(row) + "\n").encode())
                running, examples, t0 = [], 0, time.perf_counter()
                bar.update(done, f"loss {row['loss']:.4f}")
            else:
                bar.update(done)
            if config.save_every and done % config.save_every == 0 and done < config.steps:
                accelerator.wait_for_everyone()
                if accelerator.is_main_process:
                    save_checkpoint(ckpt_dir, accelerator.unwrap_model(model), tokenizer, optimizer, done)
    finally:
        bar.close()
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
    """Write ``obj`` as JSON through a temporary file and a rename: a full disk leaves the old file."""
    from offrl.run_folder import atomic_write, disk_errors

    folder = os.path.dirname(os.path.abspath(path))
    with disk_errors(folder):
        os.makedirs(folder, exist_ok=True)
    atomic_write(path, json.dumps(obj, indent=1, default=str))
