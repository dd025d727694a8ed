"""Checkpoints without pickle: weights via ``save_pretrained`` (safetensors), optimizer state
flattened into ``optimizer.safetensors`` (tensors) + ``trainer_state.json`` (everything else).

Layout of ``<run>/checkpoints/step_00000100/``::

    model/                  config.json, model.safetensors, tokenizer files
    optimizer.safetensors   "state.<param index>.<name>" -> tensor, plus "rng.torch"
    trainer_state.json      step, param_groups, non-tensor optimizer state, extra trainer fields
    checksums.sha256        "<sha256>  <relative path>" for every file above (``sha256sum -c`` reads it)

The folder is written as ``step_<step>.tmp/`` and renamed, so a kill leaves the previous
checkpoint whole; the ``.tmp`` folders a kill leaves are removed at the next save. Before a
checkpoint is read every file is checked against ``checksums.sha256``: a damaged, truncated or
missing file is refused in one :class:`~offrl.errors.CheckpointError` sentence naming it, and
:func:`latest_checkpoint` falls back to the newest checkpoint that verifies, with a
:class:`~offrl.checkpoint.CheckpointWarning`. A checkpoint written before checksums (no
``checksums.sha256``) loads with a warning that it is unverified.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import warnings
from typing import Any, Callable

import torch
from safetensors.torch import load_file, save_file

from offrl.checkpoint import CheckpointWarning
from offrl.errors import CheckpointError
from offrl.run_folder import disk_errors

MANIFEST = "checksums.sha256"
_MANIFEST_LINE = re.compile(r"([0-9a-f]{64})  (\S.*)")


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


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(path: str) -> None:
    """Write ``<path>/checksums.sha256``: the SHA-256 of every file under the folder ``path``."""
    lines = []
    for root, _, files in os.walk(path):
        for name in sorted(files):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            if rel != MANIFEST:
                lines.append(f"{_sha256(full)}  {rel}\n")
    with open(os.path.join(path, MANIFEST), "w") as fh:
        fh.write("".join(sorted(lines, key=lambda line: line[66:])))
        fh.flush()
        os.fsync(fh.fileno())


def verify_checkpoint(path: str) -> bool:
    """Check every file of the checkpoint folder ``path`` against its ``checksums.sha256``;
    ``True`` when verified, ``False`` (with a warning) for a checkpoint written before checksums.
    Raises :class:`~offrl.errors.CheckpointError` naming the first damaged or missing file."""
    manifest = os.path.join(path, MANIFEST)
    if not os.path.isfile(os.path.join(path, "trainer_state.json")) and not os.path.exists(manifest):
        raise CheckpointError(f"{path} is not an offrl checkpoint (no trainer_state.json); pass a step_* folder or a run folder.")
    if not os.path.exists(manifest):
        warnings.warn(f"checkpoint {path} has no {MANIFEST} (written before checkpoints were checksummed); "
                      "loading it unverified.", CheckpointWarning, stacklevel=2)
        return False
    try:
        with open(manifest, encoding="ascii") as fh:
            entries = [_MANIFEST_LINE.fullmatch(line.rstrip("\n")) for line in fh if line.strip()]
    except UnicodeDecodeError:
        entries = [None]
    if not entries or any(e is None or ".." in e.group(2).split("/") or e.group(2).startswith("/") for e in entries):
        raise CheckpointError(f"{manifest} is damaged, so checkpoint {path} cannot be verified; resume from another checkpoint.")
    if "trainer_state.json" not in {e.group(2) for e in entries}:
        raise CheckpointError(f"{manifest} does not list trainer_state.json; the checkpoint {path} is incomplete.")
    for entry in entries:
        full = os.path.join(path, *entry.group(2).split("/"))
        if not os.path.isfile(full):
            raise CheckpointError(f"checkpoint {path} is incomplete: {full} is missing; resume from another checkpoint.")
        if _sha256(full) != entry.group(1):
            raise CheckpointError(f"checkpoint {path} is damaged: {full} does not match the SHA-256 recorded when it "
                                  "was written; resume from an earlier checkpoint or retrain.")
    return True


def clean_stale_temporaries(directory: str) -> list[str]:
    """Remove the ``step_*.tmp`` folders a killed save leaves in ``directory``; returns them."""
    stale = sorted(glob.glob(os.path.join(directory, "step_*.tmp")))
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def save_checkpoint(directory: str, model, tokenizer, optimizer, step: int, extra: dict[str, Any] | None = None,
                    keep: int = 2, write_extra: Callable[[str], None] | None = None) -> str:
    """Write ``<directory>/step_<step>/`` with its ``checksums.sha256`` and keep only the newest
    ``keep`` checkpoints. ``write_extra(folder)`` writes further files (extra modules) into the
    checkpoint before it is checksummed. A full disk or a read-only folder is one
    :class:`~offrl.errors.RunFolderError` sentence; the partial folder is removed."""
    path = os.path.join(directory, f"step_{step:08d}")
    tmp = path + ".tmp"
    with disk_errors(directory):
        os.makedirs(directory, exist_ok=True)
        clean_stale_temporaries(directory)
        try:
            os.makedirs(tmp)
            model.save_pretrained(os.path.join(tmp, "model"))
            if tokenizer is not None:
                tokenizer.save_pretrained(os.path.join(tmp, "model"))
            tensors, meta = optimizer_state_to_flat(optimizer.state_dict())
            tensors["rng.torch"] = torch.get_rng_state()
            save_file(tensors, os.path.join(tmp, "optimizer.safetensors"))
            with open(os.path.join(tmp, "trainer_state.json"), "w") as fh:
                json.dump({"step": step, "optimizer": meta, "extra": extra or {}}, fh, indent=1)
            if write_extra is not None:
                write_extra(tmp)
            write_manifest(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
    for old in sorted(glob.glob(os.path.join(directory, "step_*")))[:-keep] if keep else []:
        if not old.endswith(".tmp"):
            shutil.rmtree(old, ignore_errors=True)
    return path


def latest_checkpoint(directory: str) -> str | None:
    """The newest ``step_*`` checkpoint under ``directory`` that verifies (:func:`verify_checkpoint`),
    falling back past damaged ones with a warning naming them; ``None`` when there is none, one
    :class:`~offrl.errors.CheckpointError` sentence when none is intact."""
    found = sorted((p for p in glob.glob(os.path.join(directory, "step_*")) if not p.endswith(".tmp")), reverse=True)
    problems = []
    for path in found:
        try:
            verify_checkpoint(path)
        except CheckpointError as exc:
            problems.append(str(exc).split(";")[0])
            continue
        if problems:
            warnings.warn(f"{'; '.join(problems)}; falling back to the newest intact checkpoint, {path}.",
                          CheckpointWarning, stacklevel=2)
        return path
    if problems:
        raise CheckpointError(f"no intact checkpoint in {directory}: {'; '.join(problems)}; "
                              "delete the folder to train afresh.")
    return None


def load_checkpoint_state(path: str, optimizer) -> dict[str, Any]:
    """Restore the optimizer and torch RNG from ``path`` (after :func:`verify_checkpoint`);
    returns trainer_state.json's content. (The weights are loaded by the caller from ``<path>/model``.)"""
    verify_checkpoint(path)
    state_file = os.path.join(path, "trainer_state.json")
    try:
        with open(state_file) as fh:
            state = json.load(fh)
        tensors = load_file(os.path.join(path, "optimizer.safetensors"))
    except Exception as exc:  # an unverified (pre-checksum) checkpoint that does not decode
        raise CheckpointError(f"checkpoint {path} is unreadable ({type(exc).__name__}); resume from another checkpoint.") from None
    if not isinstance(state, dict) or "step" not in state or "optimizer" not in state:
        raise CheckpointError(f"{state_file} lacks 'step' or 'optimizer'; the checkpoint {path} is damaged.")
    rng = tensors.pop("rng.torch", None)
    optimizer.load_state_dict(optimizer_state_from_flat(tensors, state["optimizer"]))
    if rng is not None:
        torch.set_rng_state(rng)
    return state
