"""The offline trainers, one file per method, gathered under their historical import path.

    offrl.prefs.sft           train_sft            (SFT = behaviour cloning)
    offrl.prefs.reward_model  train_reward_model   (Bradley-Terry, ensembles)
    offrl.prefs.preference    train_preferences    (DPO / IPO / cDPO / rDPO / KTO)
    offrl.prefs.ppo, .grpo    the policy-gradient RLHF trainers
"""

from offrl.prefs.config import PREFERENCE_LOSSES, PreferenceConfig, RewardModelConfig, SFTConfig
from offrl.prefs.preference import train_preferences
from offrl.prefs.reward_model import score_with_reward_model, train_reward_model
from offrl.prefs.runs import TrainResult
from offrl.prefs.sft import train_sft

__all__ = ["PREFERENCE_LOSSES", "PreferenceConfig", "RewardModelConfig", "SFTConfig", "TrainResult",
           "score_with_reward_model", "train_preferences", "train_reward_model", "train_sft"]
