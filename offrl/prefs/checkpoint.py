"""Checkpoints without pickle: weights via ``save_pretrained`` (safetensors), optimizer state
flattened into ``optimizer.safetensors`` (tensors) + ``trainer_state.json`` (everything else).

Layout of ``<run>/checkpoints/step_00000100/``::

    model/                  config.json, model.safetensors, tokenizer files
    optimizer.safetensors   "state.<param index>.<name>" -> tensor, plus "rng.torch"
    trainer_state.json      step, param_groups, non-tensor optimizer state, extra trainer fields
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from offrl.errors import ConfigError


def optimizer_state_to_flat(state_dict: dict) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split ``optimizer.state_dict()`` into a flat tensor dict and a JSON-able rest."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, per_param in state_dict["state"].items():
        for name, value in per_param.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[name] = value
    meta = {"param_groups": state_dict["param_groups"], "scalars": scalars}
    return tensors, meta


def optimizer_state_from_flat(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if not key.startswith("state."):
            continue
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    for index, values in meta.get("scalars", {}).items():
        state.setdefault(int(index), {}).update(values)
    groups = []
    for g in meta["param_groups"]:
        g = dict(g)
        if "betas" in g and isinstance(g["betas"], list):
            g["betas"] = tuple(g["betas"])
        groups.append(g)
    return {"state": state, "param_groups": groups}


def save_checkpoint(directory: str, model, tokenizer, optimizer, step: int, extra: dict[str, Any] | None = None,
                    keep: int = 2) -> str:
    """Write ``<directory>/step_<step>/`` and keep only the newest ``keep`` checkpoints."""
    path = os.path.join(directory, f"step_{step:08d}")
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    model.save_pretrained(os.path.join(tmp, "model"))
    if tokenizer is not None:
        tokenizer.save_pretrained(os.path.join(tmp, "model"))
    tensors, meta = optimizer_state_to_flat(optimizer.state_dict())
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, os.path.join(tmp, "optimizer.safetensors"))
    with open(os.path.join(tmp, "trainer_state.json"), "w") as fh:
        json.dump({"step": step, "optimizer": meta, "extra": extra or {}}, fh, indent=1)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    for old in sorted(glob.glob(os.path.join(directory, "step_*")))[:-keep] if keep else []:
        if not old.endswith(".tmp"):
            shutil.rmtree(old, ignore_errors=True)
    return path


def latest_checkpoint(directory: str) -> str | None:
    found = sorted(p for p in glob.glob(os.path.join(directory, "step_*")) if not p.endswith(".tmp"))
    return found[-1] if found else None


def load_checkpoint_state(path: str, optimizer) -> dict[str, Any]:
    """Restore the optimizer and torch RNG from ``path``; returns trainer_state.json's content.
    (The weights are loaded by the caller from ``<path>/model``.)"""
    state_file = os.path.join(path, "trainer_state.json")
    if not os.path.exists(state_file):
        raise ConfigError(f"{path} is not an offrl checkpoint (no trainer_state.json); pass a step_* folder or a run folder.")
    with open(state_file) as fh:
        state = json.load(fh)
    tensors = load_file(os.path.join(path, "optimizer.safetensors"))
    rng = tensors.pop("rng.torch", None)
    optimizer.load_state_dict(optimizer_state_from_flat(tensors, state["optimizer"]))
    if rng is not None:
        torch.set_rng_state(rng)
    return state
