"""Settings of an off-policy evaluation (:class:`OPEConfig`), with their valid values.

Kept apart from :mod:`offrl.ope.evaluate` so that ``offrl ope --help`` can generate its flags
from these fields without importing JAX (FQE's own settings, :class:`offrl.ope.fqe.FQEConfig`,
are built on first use).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from offrl.config import ANY_INT, NON_NEGATIVE, POSITIVE, POSITIVE_INT, Interval, OneOf, OrNone, check_config, param
from offrl.ope.behavior import BEHAVIOR_MODES, BehaviorConfig
from offrl.ope.estimators import CI_METHODS, DEFAULT_CLIP
from offrl.ope.policies import DEFAULT_TARGET_STD

if TYPE_CHECKING:
    from offrl.dynamics import DynamicsSettings
    from offrl.ope.fqe import FQEConfig

#: names accepted by ``--estimators`` (``fqe`` is the direct method with FQE's Q; ``model`` the
#: target policy rolled out in a learned dynamics ensemble, :mod:`offrl.ope.model_based`).
OPE_ESTIMATORS = ("fqe", "dr", "wdr", "is", "pdis", "wis", "wpdis", "clipped_is", "model")
DEFAULT_ESTIMATORS = ("fqe", "dr", "wdr", "wis", "wpdis", "pdis", "is", "clipped_is")
#: the most FQE seeds per policy: memory and time grow linearly with them, and past ~30 the
#: Student-t interval of their mean barely narrows further.
MAX_FQE_SEEDS = 32


def _fqe_config():
    from offrl.ope.fqe import FQEConfig

    return FQEConfig()


def _dynamics_config():
    from offrl.dynamics import DynamicsSettings

    return DynamicsSettings()


@dataclass(frozen=True)
class OPEConfig:
    """How the policies' values are estimated.

    estimators: the estimators to run (names of OPE_ESTIMATORS).
    discount: discount of the estimated value (1 = undiscounted return over the data's episodes).
    behavior: behaviour log-probs: the dataset's infos/action_log_probs (logged), behaviour cloning (estimated),
      or logged when present (auto).
    target_std: std of the Gaussian (truncated to the action box) that every estimator evaluates in place of a deterministic policy, in [-1, 1] action units (must be > 0).
    clip: per-step ratio clip of clipped_is.
    ci: interval method: bootstrap percentile, t or hoeffding.
    confidence: interval confidence.
    num_bootstrap: bootstrap resamples.
    fqe_steps: the most FQE gradient steps (the cap); FQE stops earlier once its start-state estimates and loss have flattened.
    fqe_window: FQE steps over which the flattening is judged (a multiple of 1000, the chunk).
    fqe_tolerance: FQE stops when every estimate moved by at most this fraction over the last fqe_window steps ...
    fqe_loss_tolerance: ... and its mean loss over them is within this fraction of the fqe_window steps before.
    fqe_seeds: independently initialised FQE critics per policy, fitted together (vmap); the fqe/dr/wdr estimate is their mean and its interval adds their spread to the bootstrap's (1 = no seed term; each seed costs one more fit).
    fqe_divergence_margin: FQE diverged for a policy when a seed's start-state estimate stays outside the data's value bounds, by more than this fraction of their width, for a whole fqe_window ...
    fqe_loss_growth: ... or its mean loss over fqe_window steps exceeds this factor times its lowest earlier window; the policy is frozen at its last chunk that passed and select skips it.
    model_horizon: steps of each model rollout of the model estimator (default: the data's longest episode).
    model_samples: model rollouts per start state and elite.
    fqe: FQE's network and optimiser settings.
    dynamics: the model estimator's dynamics ensemble (offrl.dynamics.DynamicsSettings).
    behavior_cloning: the behaviour-cloning fit of an estimated behaviour policy.
    seed: seed of the bootstrap and the fits.
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    estimators: tuple[str, ...] = DEFAULT_ESTIMATORS
    discount: float = param(0.99, Interval(0.0, 1.0, "(]"))
    behavior: str = param("auto", OneOf(BEHAVIOR_MODES))
    target_std: float = param(DEFAULT_TARGET_STD, POSITIVE)
    clip: float = param(DEFAULT_CLIP, POSITIVE)
    ci: str = param("bootstrap", OneOf(CI_METHODS))
    confidence: float = param(0.95, Interval(0.0, 1.0, "()"))
    num_bootstrap: int = param(1000, Interval(10, math.inf, "[)", integer=True), flag="--bootstrap")
    fqe_steps: int = param(50_000, POSITIVE_INT)
    fqe_window: int = param(3_000, Interval(1000, math.inf, "[)", integer=True))
    fqe_tolerance: float = param(0.01, POSITIVE)
    fqe_loss_tolerance: float = param(0.1, POSITIVE)
    fqe_seeds: int = param(1, Interval(1, MAX_FQE_SEEDS, "[]", integer=True))
    fqe_divergence_margin: float = param(0.1, NON_NEGATIVE)
    fqe_loss_growth: float = param(4.0, Interval(1.0, math.inf, "()"))
    model_horizon: int | None = param(None, OrNone(POSITIVE_INT))
    model_samples: int = param(1, POSITIVE_INT)
    fqe: FQEConfig = field(default_factory=_fqe_config, metadata={"flag": False})
    dynamics: DynamicsSettings = field(default_factory=_dynamics_config, metadata={"flag": False})
    behavior_cloning: BehaviorConfig = field(default_factory=BehaviorConfig, metadata={"flag": False})
    seed: int = param(0, ANY_INT, flag=False)

    def __post_init__(self) -> None:
        check_config(self)


__all__ = ["DEFAULT_ESTIMATORS", "MAX_FQE_SEEDS", "OPE_ESTIMATORS", "OPEConfig"]
