"""LoRA adapters (Hu et al. 2021) through ``peft``: the trained weights are ``W + (alpha / r) B A``
with only ``A`` and ``B`` updated, saved in peft's own format (``adapter_config.json`` +
``adapter_model.safetensors``), merged into the base on request.

With an adapter, the KL reference of DPO / PPO / GRPO is the base model itself: the policy with
its adapter switched off (:class:`AdapterDisabled`), so no second copy of the weights is held.

Example::

    from offrl.prefs.config import parse_lora
    policy = offrl.prefs.modeling.load_policy("runs/sft/model", "runs/sft/model", parse_lora("8,16,0.05"))
    reference = AdapterDisabled(policy)           # log pi_ref = the base's log-probs
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

import torch

from offrl.errors import ConfigError
from offrl.prefs.config import LoraSpec

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, ADAPTER_CONFIG))


def linear_module_names(model, skip: Sequence[str] = ()) -> list[str]:
    """Leaf names of the model's linear layers (``q_proj``, ``up_proj``, ...), the LM head and the
    top-level modules named in ``skip`` (a reward model's scoring head) excluded: the names
    ``--lora``'s targets may use."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules()
             if isinstance(m, torch.nn.Linear) and m is not head and name.split(".", 1)[0] not in skip}
    return sorted(names)


def check_lora_targets(model, spec: LoraSpec | None, skip: Sequence[str] = ()) -> None:
    """Refuse ``--lora`` targets that name no linear module of ``model`` (outside ``skip``), listing the available names."""
    if spec is None or not spec.targets:
        return
    available = linear_module_names(model, skip)
    missing = [t for t in spec.targets if t not in available]
    if missing:
        where = "this model's backbone" if skip else "this model"
        trained = f" ({'+'.join(skip)}, the scoring head, trains in full)" if skip else ""
        raise ConfigError(f"--lora target {'+'.join(missing)} is not a linear module of {where}; "
                          f"available: {'+'.join(available)}{trained}.")


def _peft():
    try:
        import peft
    except ImportError:  # pragma: no cover - peft is in the [llm] extra
        raise ConfigError("--lora needs the peft package; install it with `pip install peft` "
                          "(or `pip install offrl[llm]`).") from None
    return peft


def apply_lora(model, spec: LoraSpec, base_path: str | None = None, task_type: str = "CAUSAL_LM",
               modules_to_save: list[str] | None = None, seed: int = 0):
    """Wrap ``model`` in a trainable peft LoRA adapter (only ``A``, ``B`` and ``modules_to_save`` train, the
    latter in full; no adapter goes inside them); ``A``'s random initialisation is drawn from ``seed`` (the
    global torch RNG is left as it was)."""
    peft = _peft()
    check_lora_targets(model, spec, modules_to_save or ())
    config = peft.LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                             target_modules=list(spec.targets) if spec.targets else "all-linear",
                             task_type=task_type, modules_to_save=modules_to_save)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        wrapped = peft.get_peft_model(model, config)
    if base_path is not None:  # an absolute path: the adapter names its base wherever it is read from
        wrapped.peft_config["default"].base_model_name_or_path = os.path.abspath(base_path)
    return wrapped


def adapter_config(path: str) -> dict[str, Any]:
    """The adapter folder's ``adapter_config.json``."""
    with open(os.path.join(path, ADAPTER_CONFIG)) as fh:
        return json.load(fh)


def adapter_base(path: str) -> str | None:
    """The base-model folder an adapter folder records."""
    return adapter_config(path).get("base_model_name_or_path")


def adapter_task_type(path: str) -> str | None:
    """peft's ``task_type`` of an adapter folder: ``CAUSAL_LM`` (a policy) or ``SEQ_CLS`` (a reward model)."""
    return adapter_config(path).get("task_type")


def _architecture(path: str) -> dict[str, Any]:
    if is_adapter_folder(path) and not os.path.exists(os.path.join(path, "config.json")):
        path = adapter_base(path) or path
    with open(os.path.join(path, "config.json")) as fh:
        cfg = json.load(fh)
    return {k: v for k, v in cfg.items() if k not in ("_name_or_path", "transformers_version", "dtype", "torch_dtype")}


def check_adapter_base(adapter: str, base: str) -> None:
    """Refuse an adapter trained on another base: the recorded base must have the same architecture."""
    recorded = adapter_base(adapter)
    if recorded and os.path.isdir(recorded) and os.path.abspath(recorded) != os.path.abspath(base):
        if _architecture(recorded) != _architecture(base):
            raise ConfigError(f"the adapter {adapter} was trained on {recorded}, whose architecture differs from "
                              f"--model {base}; pass --model {recorded} (or retrain the adapter).")


def load_adapter(base_model, adapter: str, base_path: str, trainable: bool = False):
    """``base_model`` with the adapter folder ``adapter`` attached (trainable for resuming)."""
    peft = _peft()
    check_adapter_base(adapter, base_path)
    if not os.path.exists(os.path.join(adapter, "adapter_model.safetensors")):
        raise ConfigError(f"the adapter folder {adapter} has no adapter_model.safetensors (a .bin adapter would be unpickled, "
                          "which offrl never does); re-save it with save_pretrained(..., safe_serialization=True).")
    try:
        return peft.PeftModel.from_pretrained(base_model, adapter, is_trainable=trainable, use_safetensors=True)
    except RuntimeError as err:  # size mismatches: an adapter of another model
        raise ConfigError(f"the adapter {adapter} does not fit --model {base_path} ({str(err).splitlines()[0]}); "
                          "pass the base model it was trained on.") from None


def is_adapted(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


class AdapterDisabled:
    """The base model seen through a peft policy: every call runs with the adapter switched off, so
    ``log pi_ref`` is the base's log-probs without a second copy of the weights. It holds no
    parameters of its own and never changes the policy's train/eval mode."""

    def __init__(self, policy):
        self.policy = policy

    def __call__(self, *args, **kwargs):
        with self.policy.disable_adapter():
            return self.policy(*args, **kwargs)

    @torch.no_grad()
    def generate(self, *args, **kwargs):
        with self.policy.disable_adapter():
            return self.policy.generate(*args, **kwargs)

    def parameters(self):
        return self.policy.parameters()

    @property
    def config(self):
        return self.policy.config

    @property
    def training(self) -> bool:
        return self.policy.training

    def eval(self):
        return self

    def train(self, mode: bool = True):
        return self

    def to(self, *args, **kwargs):
        return self

    def requires_grad_(self, requires_grad: bool = True):
        return self


def save_merged(model, tokenizer, path: str) -> str:
    """Write the base with the adapter merged in (a plain Hugging Face folder) to ``path``; ``model`` keeps its adapter."""
    import copy

    merged = copy.deepcopy(model).merge_and_unload()
    merged.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


def finish_adapter(model, tokenizer, out: str, merge: bool) -> None:
    """After training: ``<out>/merged/`` when ``merge`` (only for an adapted model)."""
    if merge and is_adapted(model):
        save_merged(model, tokenizer, os.path.join(out, "merged"))
