"""Model-side helpers: loading a local causal LM, batching, sequence log-probs, sampling.

The sequence log-probability of a completion ``y`` given a prompt ``x`` is

    log pi(y|x) = sum_t log pi(y_t | x, y_<t),

summed over completion tokens only (prompt and padding are masked out). For a pair, chosen and
rejected sequences go through the model in one concatenated forward pass of ``2B`` rows.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from offrl.errors import ConfigError

Tensor = torch.Tensor


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    check_model_dir(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(path: str, dtype: torch.dtype = torch.float32):
    """Load any local Hugging Face causal LM (safetensors weights; no remote code is executed). A peft
    adapter folder (``adapter_config.json``, as ``--lora`` runs write) is loaded onto the base model it
    records and merged into it: a plain model that computes the same function."""
    from transformers import AutoModelForCausalLM

    from offrl.prefs.adapters import adapter_base, is_adapter_folder, load_adapter

    check_model_dir(path)
    if is_adapter_folder(path) and not os.path.exists(os.path.join(path, "config.json")):
        base = adapter_base(path)
        if not base or not os.path.isdir(base):
            raise ConfigError(f"the adapter {path} records its base model as {base!r}, which is not a folder here; "
                              "load the base with --model and the adapter on top, or fix base_model_name_or_path "
                              "in its adapter_config.json.")
        return load_adapter(load_causal_lm(base, dtype), path, base).merge_and_unload()
    check_safetensors_weights(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=False, use_safetensors=True)
    disable_dropout(model)
    return model


def load_policy(model: str, weights: str, lora=None, seed: int = 0):
    """The policy to train: ``weights`` (the starting model, or a checkpoint's ``model/`` when resuming),
    with a fresh LoRA adapter on ``model`` when ``lora`` is given, or the checkpoint's adapter when
    ``weights`` is an adapter folder."""
    from offrl.prefs.adapters import apply_lora, is_adapter_folder, load_adapter

    if is_adapter_folder(weights) and lora is not None and os.path.abspath(weights) != os.path.abspath(model):
        return load_adapter(load_causal_lm(model), weights, model, trainable=True)  # resuming an adapter run
    policy = load_causal_lm(weights)
    return apply_lora(policy, lora, model, seed=seed) if lora is not None else policy


def check_safetensors_weights(path: str) -> None:
    """Refuse, in one sentence, a model folder whose weights exist only as PyTorch ``.bin``
    files: those are pickles, which can run code when loaded, so offrl loads safetensors only."""
    import glob

    if glob.glob(os.path.join(path, "*.safetensors")):
        return
    pickles = sorted(os.path.basename(p) for p in glob.glob(os.path.join(path, "*.bin")))
    if pickles:
        raise ConfigError(
            f"--model {path} holds only PyTorch pickle weights ({', '.join(pickles[:3])}); offrl loads safetensors "
            "only (a pickle can run code when loaded): convert them once where you trust the file, e.g. "
            "AutoModel.from_pretrained(path).save_pretrained(path, safe_serialization=True).")
    raise ConfigError(f"--model {path} has no *.safetensors weights; pass a folder written by save_pretrained.")


def check_model_dir(path: str) -> None:
    from offrl.prefs.adapters import ADAPTER_CONFIG

    if os.path.isfile(os.path.join(path, ADAPTER_CONFIG)):
        return
    if not os.path.isdir(path) or not os.path.exists(os.path.join(path, "config.json")):
        raise ConfigError(
            f"--model {path} is not a local Hugging Face model folder (no config.json); "
            "pass a folder written by save_pretrained (e.g. `offrl prefs make-task` creates one)."
        )


def disable_dropout(model: torch.nn.Module) -> None:
    """Dropout makes log pi differ between identical forward passes; preference training turns it off."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


# --------------------------------------------------------------------------- batching


def length_bucketed_batches(lengths: Sequence[int], batch_size: int, seed: int, drop_last: bool = False) -> list[list[int]]:
    """Shuffled batches of similar-length examples: shuffle, sort within windows of 50 batches
    by length, cut into batches, shuffle the batch order. Cuts padding waste without making the
    batch order depend on length."""
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * 50
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start:start + window], key=lambda i: lengths[i])
        batches.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    if drop_last:
        batches = [b for b in batches if len(b) == batch_size]
    rng.shuffle(batches)
    return batches


def collate_sequences(
    prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_token_id: int
) -> dict[str, Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``completion_mask`` (1 on completion tokens)."""
    seqs = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)]
    width = max(len(s) for s in seqs)
    n = len(seqs)
    input_ids = torch.full((n, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    completion_mask = torch.zeros((n, width), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        s = seqs[i]
        input_ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        attention_mask[i, : len(s)] = 1
        completion_mask[i, len(p): len(s)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "completion_mask": completion_mask}


def collate_pairs(tokenized, indices: Sequence[int], pad_token_id: int) -> dict[str, Tensor]:
    """One batch of ``2B`` rows: chosen sequences first, then rejected (one forward pass)."""
    prompts = [tokenized.prompt_ids[i] for i in indices]
    chosen = [tokenized.completions[0][i] for i in indices]
    rejected = [tokenized.completions[1][i] for i in indices]
    batch = collate_sequences(prompts + prompts, chosen + rejected, pad_token_id)
    batch["index"] = torch.tensor(list(indices), dtype=torch.long)
    return batch


def collate_single(tokenized, indices: Sequence[int], pad_token_id: int, slot: int = 0) -> dict[str, Tensor]:
    prompts = [tokenized.prompt_ids[i] for i in indices]
    completions = [tokenized.completions[slot][i] for i in indices]
    batch = collate_sequences(prompts, completions, pad_token_id)
    batch["index"] = torch.tensor(list(indices), dtype=torch.long)
    if tokenized.labels is not None:
        batch["labels"] = torch.tensor([tokenized.labels[i] for i in indices], dtype=torch.bool)
    return batch


# --------------------------------------------------------------------------- log-probs


def token_logps(model, input_ids: Tensor, attention_mask: Tensor, completion_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token ``log pi(y_t | x, y_<t)`` on completion positions and the shifted mask, both ``(N, T')``.

    Logits are only computed from the first position any row needs (``logits_to_keep``), which
    skips the LM head on the shared prompt prefix.
    """
    first = int(completion_mask.float().argmax(dim=1).min().item()) if completion_mask.any() else 1
    first = max(first, 1)
    keep = input_ids.shape[1] - first + 1
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, logits_to_keep=keep).logits
    logits = logits[:, :-1].float()
    labels = input_ids[:, first:]
    mask = completion_mask[:, first:]
    logps = torch.gather(logits.log_softmax(-1), 2, labels.unsqueeze(-1)).squeeze(-1)
    return logps * mask, mask


def sequence_logps(model, batch: dict[str, Tensor], average: bool = False) -> Tensor:
    """``log pi(y|x)`` per row (sum over completion tokens; ``average=True`` divides by the count)."""
    logps, mask = token_logps(model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    return sequence_from_tokens(logps, mask, average)


def sequence_from_tokens(logps: Tensor, mask: Tensor, average: bool = False) -> Tensor:
    """``sum_t logps`` per row, or the mean over the row's completion tokens when ``average``."""
    total = logps.sum(-1)
    return total / mask.sum(-1).clamp(min=1) if average else total


@torch.no_grad()
def reference_logps(model, tokenized, pad_token_id: int, batch_size: int = 64, average: bool = False,
                    device: torch.device | str = "cpu", progress=None, autocast=None) -> Tensor:
    """Reference log-probs for every example and completion slot: ``(N, slots)``, computed once
    (under ``autocast()`` when given, so that they match the policy's precision at step 0)."""
    import contextlib

    autocast = autocast or contextlib.nullcontext
    model.eval()
    n = len(tokenized)
    slots = len(tokenized.completions)
    out = torch.zeros((n, slots), dtype=torch.float32)
    order = sorted(range(n), key=lambda i: tokenized.lengths()[i]) if n < 200_000 else list(range(n))
    for start in range(0, n, batch_size):
        idx = order[start:start + batch_size]
        prompts = [tokenized.prompt_ids[i] for i in idx] * slots
        comps = [c for s in range(slots) for c in (tokenized.completions[s][i] for i in idx)]
        batch = {k: v.to(device) for k, v in collate_sequences(prompts, comps, pad_token_id).items()}
        with autocast():
            logps = sequence_logps(model, batch, average=average).float().cpu().view(slots, len(idx)).T
        out[torch.tensor(idx)] = logps
        if progress is not None:
            progress(len(idx))
    return out


# --------------------------------------------------------------------------- sampling


@dataclass
class Samples:
    """Sampled completions: token ids exactly as generated (EOS kept when produced) and their text."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    texts: list[str]
    num_samples: int

    def grouped(self) -> list[list[str]]:
        k = self.num_samples
        return [self.texts[i:i + k] for i in range(0, len(self.texts), k)]

    def batch(self, pad_token_id: int, device="cpu") -> dict[str, Tensor]:
        b = collate_sequences(self.prompt_ids, self.completion_ids, pad_token_id)
        return {k: v.to(device) for k, v in b.items()}


@torch.no_grad()
def sample_completions(
    model,
    tokenizer,
    prompts: Sequence[Any],
    num_samples: int = 1,
    max_new_tokens: int = 16,
    temperature: float = 1.0,
    batch_size: int = 256,
    seed: int = 0,
    conversational: bool = False,
) -> Samples:
    """``num_samples`` completions per prompt sampled from ``model`` at ``temperature`` with no
    top-k / top-p filtering (so they are draws from pi itself); greedy when ``temperature == 0``.
    Samples of prompt ``i`` are rows ``i*num_samples ... (i+1)*num_samples - 1``. Chat prompts are
    rendered by the tokenizer's chat template and sampling stops at the template's stop tokens
    (:mod:`offrl.prefs.chat`; ``conversational`` is read from the prompts themselves and kept for
    callers that pass it)."""
    from offrl.prefs.chat import encode_prompts, stop_token_ids

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    generator_state = torch.get_rng_state()
    torch.manual_seed(seed)
    flat = [p for p in prompts for _ in range(num_samples)]
    stops, pad = stop_token_ids(tokenizer, getattr(model, "generation_config", None)), tokenizer.pad_token_id
    prompt_ids, completion_ids = [], []
    try:
        for start in range(0, len(flat), batch_size):
            ids, attention = encode_prompts(tokenizer, flat[start:start + batch_size], device)
            kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=stops)
            if temperature > 0:
                kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            else:
                kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
            out = model.generate(input_ids=ids, attention_mask=attention, **kwargs).cpu()
            width = ids.shape[1]
            mask = attention.cpu()
            for row in range(out.shape[0]):
                prompt_ids.append(out[row, :width][mask[row].bool()].tolist())
                gen = out[row, width:].tolist()
                first = next((i for i, t in enumerate(gen) if t in stops), None)
                if first is not None:
                    gen = gen[: first + 1]
                completion_ids.append(gen)
    finally:
        torch.set_rng_state(generator_state)
        if was_training:
            model.train()
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    return Samples(prompt_ids, completion_ids, texts, num_samples)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def cosine_warmup(step: int, total: int, warmup: int) -> float:
    """LR multiplier: linear warmup for ``warmup`` steps, then cosine decay to 10% at ``total``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))
