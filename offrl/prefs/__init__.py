"""Offline preference optimisation for language models (PyTorch + transformers + accelerate).

A preference pair ``(x, y_w, y_l)`` is a logged decision, the reference policy is the behaviour
policy, and ``beta`` plays the part of CQL's alpha. Pipeline::

    SFT (= BC) -> sample -> label (judge or reward model) -> DPO / IPO / KTO -> eval, frontier

Importing this package imports torch; ``import offrl`` does not.
"""

from offrl.prefs.data import (
    BadRow,
    PreferenceDataset,
    TokenizedPreferences,
    load_preferences,
    tokenize_preferences,
)
from offrl.prefs.losses import (
    bradley_terry_loss,
    conservative_dpo_loss,
    dpo_loss,
    ipo_loss,
    kto_loss,
    kto_reference_point,
    robust_dpo_loss,
    sampled_kl,
    sft_loss,
)
from offrl.prefs.train import (
    PreferenceConfig,
    RewardModelConfig,
    SFTConfig,
    TrainResult,
    score_with_reward_model,
    train_preferences,
    train_reward_model,
    train_sft,
)

__all__ = [
    "BadRow",
    "PreferenceDataset",
    "TokenizedPreferences",
    "load_preferences",
    "tokenize_preferences",
    "bradley_terry_loss",
    "conservative_dpo_loss",
    "dpo_loss",
    "ipo_loss",
    "kto_loss",
    "kto_reference_point",
    "robust_dpo_loss",
    "sampled_kl",
    "sft_loss",
    "PreferenceConfig",
    "RewardModelConfig",
    "SFTConfig",
    "TrainResult",
    "score_with_reward_model",
    "train_preferences",
    "train_reward_model",
    "train_sft",
]
