"""Preference learning for language models (PyTorch + transformers + accelerate).

A preference pair ``(x, y_w, y_l)`` is a logged decision, the reference policy is the behaviour
policy, and ``beta`` plays the part of CQL's alpha. Pipelines::

    offline:  SFT (= BC) -> sample -> label (judge or reward model) -> DPO / IPO / KTO -> eval, frontier
    online:   SFT -> reward model -> PPO / GRPO / RLOO with a KL penalty to the SFT policy;
              online / iterative DPO on pairs sampled from the current policy

Names are re-exported lazily: importing ``offrl.prefs`` (or its torch-free ``config`` module)
does not import torch; touching a trainer or a loss does.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "BadRow": "offrl.prefs.data",
    "PreferenceDataset": "offrl.prefs.data",
    "TokenizedPreferences": "offrl.prefs.data",
    "load_preferences": "offrl.prefs.data",
    "tokenize_preferences": "offrl.prefs.data",
    "bradley_terry_loss": "offrl.prefs.losses",
    "conservative_dpo_loss": "offrl.prefs.losses",
    "dpo_loss": "offrl.prefs.losses",
    "ipo_loss": "offrl.prefs.losses",
    "kto_loss": "offrl.prefs.losses",
    "kto_reference_point": "offrl.prefs.losses",
    "robust_dpo_loss": "offrl.prefs.losses",
    "sampled_kl": "offrl.prefs.losses",
    "sft_loss": "offrl.prefs.losses",
    "TrainConfig": "offrl.prefs.config",
    "PreferenceConfig": "offrl.prefs.config",
    "RewardModelConfig": "offrl.prefs.config",
    "SFTConfig": "offrl.prefs.config",
    "TrainResult": "offrl.prefs.runs",
    "score_with_reward_model": "offrl.prefs.reward_model",
    "train_preferences": "offrl.prefs.preference",
    "train_reward_model": "offrl.prefs.reward_model",
    "train_sft": "offrl.prefs.sft",
    "PolicyGradientConfig": "offrl.prefs.config",
    "PPOConfig": "offrl.prefs.config",
    "GRPOConfig": "offrl.prefs.config",
    "train_ppo": "offrl.prefs.ppo",
    "train_grpo": "offrl.prefs.grpo",
    "IterateConfig": "offrl.prefs.config",
    "run_iterate": "offrl.prefs.iterate",
    "OnlineDPOConfig": "offrl.prefs.config",
    "train_online_dpo": "offrl.prefs.online_dpo",
    "ProgrammaticJudge": "offrl.prefs.judges",
    "RewardModelJudge": "offrl.prefs.judges",
    "PairwiseLMJudge": "offrl.prefs.judges",
    "evaluate_policy": "offrl.prefs.evaluation",
    "label_pairs": "offrl.prefs.labelling",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'offrl.prefs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
