"""offrl: offline reinforcement learning from fixed, logged data.

The public API, re-exported lazily so that ``import offrl`` stays fast and needs neither
JAX nor torch until a name that uses them is touched.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    # data
    "Dataset": "offrl.data",
    "load_dataset": ("offrl.data", "load"),
    "save_dataset": ("offrl.data", "save"),
    "register_dataset": ("offrl.data", "register"),
    "list_datasets": ("offrl.data", "list_datasets"),
    "inspect_dataset": ("offrl.data.doctor", "inspect_dataset"),
    # errors
    "OffrlError": "offrl.errors",
    "DatasetError": "offrl.errors",
    "ConfigError": "offrl.errors",
    # environments
    "normalized_score": "offrl.envs",
    "reference_returns": "offrl.envs",
    # training
    "train": "offrl.engine",
    "evaluate": "offrl.engine",
    "load_run": "offrl.engine",
    "load_numpy_policy": ("offrl.policy", "load_numpy_policy"),
    "measure_throughput": "offrl.engine",
    "finetune": ("offrl.finetuning", "finetune"),
    "sweep": ("offrl.sweeps", "sweep"),
    "FinetuneConfig": ("offrl.finetuning", "FinetuneConfig"),
    "ALGORITHMS": ("offrl.algos", "ALGORITHMS"),
    "register_algorithm": ("offrl.algos", "register"),
    "algorithm_spec": ("offrl.algos", "algorithm_spec"),
    "AlgorithmSpec": ("offrl.algos.contract", "AlgorithmSpec"),
    "export_numpy_policy": ("offrl.checkpoint", "export_numpy_policy"),
    "run_benchmark": ("offrl.benchmark", "run_benchmark"),
    "check_config": ("offrl.config", "check_config"),
    "RunSettings": ("offrl.settings", "RunSettings"),
    # off-policy evaluation
    "evaluate_policies": ("offrl.ope.evaluate", "evaluate_policies"),
    "OPEConfig": ("offrl.ope.config", "OPEConfig"),
    "load_target_policy": ("offrl.ope.policies", "load_policy"),
    "select_checkpoint": ("offrl.ope.select", "select_checkpoint"),
    # language-model preference optimisation (needs the `llm` extra: torch + transformers)
    "load_preferences": "offrl.prefs",
    "train_sft": "offrl.prefs",
    "train_reward_model": "offrl.prefs",
    "train_preferences": "offrl.prefs",
    "PreferenceConfig": "offrl.prefs",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'offrl' has no attribute {name!r}")
    module_name, attr = target if isinstance(target, tuple) else (target, name)
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value
