"""The valid-values vocabulary of algorithm configs: :mod:`offrl.config`, re-exported.

Algorithm files declare their fields with ``param(default, spec)`` from here or from
:mod:`offrl.config` directly (the same objects); :func:`check_config` is the one checker used
by RL and language-model configs alike.
"""

from offrl.config import (ANY_INT, ANY_REAL, BOOL, DISCOUNT, LEARNING_RATE, NON_NEGATIVE, NON_NEGATIVE_INT, POLYAK,
                          POSITIVE, POSITIVE_INT, REWARD_SCALING, UNIT, VALID, WIDTHS, Interval, OneOf, OrNone,
                          RewardScaling, Widths, check_config, param)

__all__ = ["ANY_INT", "ANY_REAL", "BOOL", "DISCOUNT", "Interval", "LEARNING_RATE", "NON_NEGATIVE", "NON_NEGATIVE_INT",
           "OneOf", "OrNone", "POLYAK", "POSITIVE", "POSITIVE_INT", "REWARD_SCALING", "RewardScaling", "UNIT", "VALID",
           "WIDTHS", "Widths", "check_config", "param"]
