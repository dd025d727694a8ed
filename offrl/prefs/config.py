"""Trainer configurations of ``offrl.prefs`` and the command-line flags generated from them.

Every option is a field of a frozen dataclass, documented in the class docstring as
``name: text``; ``add_config_flags`` turns the fields into ``--name`` flags (defaults, types,
choices and help all read from the dataclass, so the CLI cannot drift from the API) and
``config_from_args`` builds the config back. Valid values are declared per field with
:func:`offrl.config.param`, the vocabulary the RL configs use too, and checked when a config is
built, from Python or from the command line, by the one checker :func:`offrl.config.check_config`:
one sentence naming the flag, the value, the valid range and the default.

This module imports neither torch nor transformers: ``offrl prefs --help`` stays light.

Example::

    parser = argparse.ArgumentParser()
    add_config_flags(parser, PreferenceConfig, skip=("loss",))
    config = config_from_args(PreferenceConfig, parser.parse_args(["--beta", "0.3"]), loss="ipo")
"""

from __future__ import annotations

import argparse
import functools
import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from offrl import config as _vocabulary
from offrl.config import (NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, UNIT, Interval, OneOf, OrNone,
                          field_docs, param)

PREFERENCE_LOSSES = ("dpo", "ipo", "cdpo", "rdpo", "kto", "simpo", "cpo", "orpo")
#: the losses without a reference model (offrl.prefs.losses.REFERENCE_FREE_LOSSES).
REFERENCE_FREE = ("simpo", "cpo", "orpo")

#: the one checker, wording its sentences for these configs' ``--flag`` form.
check_config = functools.partial(_vocabulary.check_config, flags=True)


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def bounded(default, choices: tuple | None = None, gt: float | None = None, ge: float | None = None,
           lt: float | None = None, le: float | None = None, cli: bool = True):
    """``param(default, spec)`` with the spec written as bounds (kept for :mod:`offrl.prefs.task`):
    ``gt``/``lt`` are open ends, ``ge``/``le`` closed ones; an ``int`` default makes an integer range."""
    if choices:
        spec = OneOf(tuple(choices))
    else:
        low = gt if gt is not None else ge if ge is not None else -math.inf
        high = lt if lt is not None else le if le is not None else math.inf
        ends = ("(" if gt is not None else "[") + (")" if lt is not None else "]")
        spec = Interval(low, high, ends, integer=isinstance(default, int) and not isinstance(default, bool))
    return param(default, OrNone(spec) if default is None else spec, flag=None if cli else False)




@dataclass(frozen=True)
class LoraSpec:
    """A LoRA adapter (Hu et al. 2021): ``W x + (alpha / r) B A x`` with ``A`` (r x d_in), ``B`` (d_out x r), ``B = 0`` at
    the start; ``targets`` names the linear modules that get one (None: every linear layer but the LM head)."""

    r: int
    alpha: float
    dropout: float
    targets: tuple[str, ...] | None = None


def parse_lora(text: str | None) -> LoraSpec | None:
    """``"R,ALPHA,DROPOUT[,TARGET+TARGET...]"`` (e.g. ``"8,16,0.05"`` or ``"8,16,0,q_proj+v_proj"``) -> :class:`LoraSpec`;
    None or empty -> None. A bad value is one sentence naming ``--lora``."""
    if text is None or not str(text).strip():
        return None
    parts = [p.strip() for p in str(text).split(",")]
    example = "e.g. --lora 8,16,0.05 or --lora 8,16,0,q_proj+v_proj"
    if len(parts) < 3:
        raise _config_error(f"--lora {text} is not R,ALPHA,DROPOUT[,TARGETS]; {example}.")
    try:
        r, alpha, dropout = int(parts[0]), float(parts[1]), float(parts[2])
    except ValueError:
        raise _config_error(f"--lora {text}: rank must be an integer and alpha, dropout numbers; {example}.") from None
    if r < 1:
        raise _config_error(f"--lora {text}: the rank must be at least 1 (got {r}); {example}.")
    if not alpha > 0:
        raise _config_error(f"--lora {text}: alpha must be > 0 (got {alpha}); the adapter is scaled by alpha / rank.")
    if not 0.0 <= dropout < 1.0:
        raise _config_error(f"--lora {text}: dropout must be in [0, 1) (got {dropout}).")
    targets = tuple(t for t in "+".join(parts[3:]).replace(" ", "").split("+") if t) or None
    return LoraSpec(r, alpha, dropout, targets)


def _config_error(message: str):
    from offrl.errors import ConfigError

    return ConfigError(message)


@dataclass(frozen=True)
class TrainConfig:
    """Options shared by every trainer.

    steps: optimizer steps.
    batch_size: examples (pairs for DPO) per step over all devices.
    lr: peak AdamW learning rate (linear warmup for warmup_steps, cosine decay to 10%).
    weight_decay: AdamW weight decay.
    warmup_steps: steps of linear learning-rate warmup.
    grad_clip: global gradient-norm clip (0: off).
    max_length: prompt + completion tokens; longer completions are truncated and counted.
    max_prompt_length: prompts with this many tokens or more are bad rows (default max_length).
    bad_rows: drop (report and drop) or raise (refuse the data).
    eval_fraction: share of prompts held out for evaluation.
    log_every: steps between metric lines (and held-out evaluations).
    save_every: steps between checkpoints (0: only the final model).
    seed: random seed.
    mixed_precision: auto (bf16 on a GPU that supports it, fp16 on an older GPU, fp32 on CPU), no, bf16 or fp16.
    gradient_accumulation_steps: batches of batch_size whose gradients are summed into one optimizer step
      (the effective batch is batch_size x this; steps counts optimizer steps).
    lora: train a LoRA adapter (peft) instead of all weights: R,ALPHA,DROPOUT[,TARGET+TARGET...] (e.g. 8,16,0.05;
      targets default to every linear layer but the LM head); model/ then holds the adapter in peft's format.
    merge_lora: with lora, also write <out>/merged/: the base model with the adapter merged in.
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    steps: int = param(200, POSITIVE_INT)
    batch_size: int = param(32, POSITIVE_INT)
    lr: float = param(5e-6, POSITIVE)
    weight_decay: float = param(0.0, NON_NEGATIVE)
    warmup_steps: int = param(10, NON_NEGATIVE_INT)
    grad_clip: float = param(1.0, NON_NEGATIVE)
    max_length: int = param(512, Interval(1, math.inf, "()", integer=True))
    max_prompt_length: int | None = param(None, OrNone(POSITIVE_INT))
    bad_rows: str = param("drop", OneOf(("drop", "raise")))
    eval_fraction: float = param(0.1, Interval(0.0, 1.0, "[)"))
    log_every: int = param(20, POSITIVE_INT)
    save_every: int = param(0, NON_NEGATIVE_INT)
    seed: int = 0
    mixed_precision: str = param("auto", OneOf(("auto", "no", "bf16", "fp16")))
    gradient_accumulation_steps: int = param(1, POSITIVE_INT)
    lora: str | None = None
    merge_lora: bool = False

    def __post_init__(self) -> None:
        check_config(self)
        parse_lora(self.lora)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SFTConfig(TrainConfig):
    """Supervised fine-tuning on demonstrations (behaviour cloning: SFT = BC)."""

    lr: float = param(1e-4, POSITIVE)


@dataclass(frozen=True)
class RewardModelConfig(TrainConfig):
    """Bradley-Terry reward model with ``heads`` scalar heads on one backbone.

    heads: ensemble size K; each head sees its own bootstrap weights (Poisson(1) per pair) so
      the heads disagree where data is thin; the std across heads is reported as uncertainty.
    models: ensemble of M independently trained models (seeds seed..seed+M-1, one held-out split),
      saved as <out>/member_<k>/; their heads are pooled (M*K rewards per completion).
    lora: train a LoRA adapter (peft, task SEQ_CLS) on the backbone and the scoring head in full:
      R,ALPHA,DROPOUT[,TARGET+TARGET...] (targets default to every linear layer of the backbone); model/ then
      holds the adapter with the head's weights, and each ensemble member (models > 1) gets its own.
    merge_lora: with lora, also write <out>/merged/ (per member with models > 1): the base with the adapter
      merged in and the trained head, a plain reward-model folder.
    """

    lr: float = param(1e-4, POSITIVE)
    heads: int = param(1, POSITIVE_INT)
    models: int = param(1, POSITIVE_INT)


@dataclass(frozen=True)
class PreferenceConfig(TrainConfig):
    """Offline preference optimisation against a fixed reference (the behaviour policy).

    loss: dpo, ipo, cdpo (conservative, label smoothing), rdpo (robust), kto, or the reference-free
      simpo, cpo and orpo.
    beta: the KL price (DPO/KTO beta; IPO tau); smaller beta lets the policy drift further
      (SimPO/CPO: the reward scale; ORPO: the odds-ratio weight lambda).
    label_smoothing: assumed label-flip rate for cdpo / rdpo (and the conservative simpo / cpo).
    length_normalize: per-token mean log-probs (default: on for IPO, SimPO and ORPO, as their authors advise).
    simpo_gamma: SimPO's target reward margin gamma.
    cpo_alpha: weight of CPO's negative log-likelihood on the chosen completions.
    desirable_weight: KTO's lambda_D.
    undesirable_weight: KTO's lambda_U.
    reference: folder of the reference model (default: the starting model; with --lora, the
      starting model is the policy with its adapter disabled, no second copy).
    kl_prompts: prompts sampled for the KL(pi || pi_ref) monitor at each log step (0 = off,
      which also frees the reference model after its log-probs are cached).
    kl_max_new_tokens: sampled completion length for the KL monitor.
    """

    loss: str = param("dpo", OneOf(PREFERENCE_LOSSES))
    beta: float = param(0.1, POSITIVE)
    label_smoothing: float = param(0.0, Interval(0.0, 0.5, "[)"))
    length_normalize: bool | None = None
    simpo_gamma: float = param(0.5, NON_NEGATIVE)
    cpo_alpha: float = param(1.0, NON_NEGATIVE)
    desirable_weight: float = param(1.0, NON_NEGATIVE)
    undesirable_weight: float = param(1.0, NON_NEGATIVE)
    reference: str | None = None
    kl_prompts: int = param(32, NON_NEGATIVE_INT)
    kl_max_new_tokens: int = param(32, POSITIVE_INT)


@dataclass(frozen=True)
class SimPOConfig(PreferenceConfig):
    """SimPO (Meng et al. 2024): PreferenceConfig with its loss and the paper's reward scale (beta 2.0;
    gamma 0.5 as TRL's CPOConfig)."""

    loss: str = param("simpo", OneOf(PREFERENCE_LOSSES))
    beta: float = param(2.0, POSITIVE)


# --------------------------------------------------------------------------- flags


def add_config_flags(parser: argparse.ArgumentParser, cls, skip: tuple[str, ...] = (),
                     defaults: dict[str, Any] | None = None) -> None:
    """One ``--flag`` per scalar field of ``cls`` (minus ``skip``): :func:`offrl.config.add_flags`."""
    _vocabulary.add_flags(parser, cls, prefix="cfg", skip=skip, defaults=defaults)


def config_from_args(cls, args: argparse.Namespace, **fixed):
    """Build ``cls`` from the ``cfg__*`` values of ``args`` plus ``fixed`` fields (validated)."""
    return _vocabulary.from_args(cls, args, prefix="cfg", **fixed)


# --------------------------------------------------------------------------- online RLHF

KL_ESTIMATORS = ("k1", "k3")
GROUP_ESTIMATORS = ("grpo", "rloo", "reinforce++")
#: how GRPO averages its per-token loss (offrl.prefs.rl_losses.aggregate_token_loss).
GRPO_LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo", "gspo")


@dataclass(frozen=True)
class PolicyGradientConfig:
    """Options shared by the policy-gradient RLHF trainers (PPO, GRPO, RLOO).

    steps: iterations; each samples a rollout batch and optimises on it.
    batch_size: prompts per iteration.
    lr: peak AdamW learning rate (linear warmup, cosine decay to 10%).
    weight_decay: AdamW weight decay.
    warmup_steps: iterations of linear learning-rate warmup.
    grad_clip: global gradient-norm clip (0: off).
    max_new_tokens: response length cap in tokens.
    temperature: sampling temperature of the rollouts (log-probs are taken at the same temperature).
    kl_coef: beta, the price of one nat of KL(pi || pi_ref) (the starting value when kl_target is set).
    kl_estimator: per-token KL estimator: k1 (log pi - log pi_ref) or k3 (non-negative; see rl_losses).
    kl_target: target KL per sequence of the adaptive controller (Ziegler et al. 2019); unset: fixed kl_coef.
    kl_horizon: horizon of the adaptive controller, in samples.
    kl_budget: KL per sequence beyond which the guardrails warn (0: no budget).
    epochs: optimisation passes over each rollout batch.
    minibatches: minibatches per pass.
    clip_range: epsilon of the clipped policy ratio.
    reward_model: reward-model folder or ensemble run folder of `offrl prefs rm` (unset, with no --reward:
      the digits task's programmatic reward).
    reward: reward callables MODULE:FUNCTION (or path/to/file.py:FUNCTION), called as
      fn(prompts=[...], completions=[...]) with the prompts as the data holds them (strings or message lists)
      and the completions as strings, returning one float per completion (repeatable).
    reward_weights: one weight per reward (the reward model first, then each --reward in order), comma-separated
      (default: all 1); the policy's score is the weighted sum.
    uncertainty_penalty: c in the reward mean - c * std over the reward model's heads.
    whiten_rewards: whiten the scores over the batch before use.
    log_every: iterations between metric lines.
    save_every: iterations between checkpoints (0: only the final model).
    seed: random seed (prompt batches and samples derive from it and the iteration).
    tensorboard: also write the metrics to TensorBoard (needs tensorboardX) beside metrics.jsonl/csv.
    lora: train a LoRA adapter (peft): R,ALPHA,DROPOUT[,TARGET+TARGET...]; the KL reference is then the
      policy with its adapter disabled (no second copy of the model).
    merge_lora: with lora, also write <out>/merged/: the base model with the adapter merged in.
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    steps: int = param(100, POSITIVE_INT)
    batch_size: int = param(32, POSITIVE_INT)
    lr: float = param(1e-5, POSITIVE)
    weight_decay: float = param(0.0, NON_NEGATIVE)
    warmup_steps: int = param(0, NON_NEGATIVE_INT)
    grad_clip: float = param(1.0, NON_NEGATIVE)
    max_new_tokens: int = param(16, POSITIVE_INT)
    temperature: float = param(1.0, POSITIVE)
    kl_coef: float = param(0.05, NON_NEGATIVE)
    kl_estimator: str = param("k1", OneOf(KL_ESTIMATORS))
    kl_target: float | None = param(None, OrNone(POSITIVE))
    kl_horizon: float = param(10000.0, POSITIVE)
    kl_budget: float = param(0.0, NON_NEGATIVE)
    epochs: int = param(4, POSITIVE_INT)
    minibatches: int = param(1, POSITIVE_INT)
    clip_range: float = param(0.2, POSITIVE)
    reward_model: str | None = None
    reward: tuple[str, ...] = ()
    reward_weights: tuple[float, ...] | None = param(None, parse=str)  # "1,0.5" from the command line
    uncertainty_penalty: float = param(0.0, NON_NEGATIVE)
    whiten_rewards: bool = False
    log_every: int = param(1, POSITIVE_INT)
    save_every: int = param(0, NON_NEGATIVE_INT)
    seed: int = 0
    tensorboard: bool = False
    lora: str | None = None
    merge_lora: bool = False

    def __post_init__(self) -> None:
        check_config(self)
        parse_lora(self.lora)
        if isinstance(self.reward, str):  # one callable given as a string
            object.__setattr__(self, "reward", (self.reward,))
        object.__setattr__(self, "reward", tuple(self.reward))
        if self.reward_weights is not None:
            object.__setattr__(self, "reward_weights", _parse_weights(",".join(map(str, self.reward_weights)))
                               if not isinstance(self.reward_weights, str) else _parse_weights(self.reward_weights))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _parse_weights(text: str) -> tuple[float, ...]:
    """``--reward-weights 1,0.5`` -> ``(1.0, 0.5)`` (:func:`offrl.prefs.rewards.parse_reward_weights`, without torch)."""
    try:
        weights = tuple(float(w) for w in str(text).split(",") if w.strip())
    except ValueError:
        raise _config_error(f"--reward-weights {text} is not a comma-separated list of numbers; e.g. "
                            "--reward-weights 1,0.5.") from None
    if not weights or not all(math.isfinite(w) for w in weights):
        raise _config_error(f"--reward-weights {text} must be finite numbers, one per reward; e.g. "
                            "--reward-weights 1,0.5.")
    return weights


@dataclass(frozen=True)
class PPOConfig(PolicyGradientConfig):
    """PPO-RLHF (Ziegler et al. 2019; Ouyang et al. 2022): per-token KL penalty in the reward, GAE, value model.

    gamma: discount over response tokens.
    lam: GAE lambda.
    vf_coef: weight of the value loss.
    value_clip: epsilon of the clipped value loss.
    value_model: shared (a value head on the policy's trunk) or a model folder (a separate small model
      whose last hidden state feeds the value head).
    """

    gamma: float = param(1.0, UNIT)
    lam: float = param(0.95, UNIT)
    vf_coef: float = param(0.1, NON_NEGATIVE)
    value_clip: float = param(0.2, POSITIVE)
    value_model: str = "shared"


@dataclass(frozen=True)
class GRPOConfig(PolicyGradientConfig):
    """Group-relative policy gradients without a value model: GRPO (Shao et al. 2024) and RLOO
    (Ahmadian et al. 2024) on the same rollout and KL code.

    estimator: grpo (group-normalised advantages, KL in the loss), rloo (leave-one-out baseline,
      KL in the sequence reward) or reinforce++ (KL-shaped token rewards, returns-to-go whitened
      over the batch; KL in the reward).
    group_size: samples per prompt (G).
    scale_rewards: divide GRPO's centred rewards by the group's std.
    loss_type: how the per-token loss is averaged: bnpo (token mean over the minibatch, this trainer's
      original form), grpo (mean of per-sequence means), dapo (token sum over the rollout's tokens per
      minibatch), dr_grpo (token sum over B x max_new_tokens) or gspo (sequence-level ratios, grpo's mean).
    clip_range_high: DAPO's clip-higher upper epsilon (the paper uses 0.28 with clip_range 0.2;
      unset: clip_range, the symmetric clip).
    dynamic_sampling: drop groups whose rewards are all equal (DAPO; no gradient, only dilution).
    overlong_buffer: DAPO's soft overlong punishment over the last N tokens before max_new_tokens
      (0: off).
    """

    kl_coef: float = param(0.04, NON_NEGATIVE)
    kl_estimator: str = param("k3", OneOf(KL_ESTIMATORS))
    epochs: int = param(1, POSITIVE_INT)
    estimator: str = param("grpo", OneOf(GROUP_ESTIMATORS))
    group_size: int = param(4, Interval(2, math.inf, "[)", integer=True))
    scale_rewards: bool = True
    loss_type: str = param("bnpo", OneOf(GRPO_LOSS_TYPES))
    clip_range_high: float | None = param(None, OrNone(POSITIVE))
    dynamic_sampling: bool = False
    overlong_buffer: int = param(0, NON_NEGATIVE_INT)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.overlong_buffer > self.max_new_tokens:
            from offrl.errors import ConfigError

            raise ConfigError(f"--overlong-buffer {self.overlong_buffer} is longer than --max-new-tokens "
                              f"{self.max_new_tokens}; pass at most {self.max_new_tokens} (0: off).")


ONLINE_DPO_LOSSES = ("dpo", "ipo", "simpo")


@dataclass(frozen=True)
class OnlineDPOConfig(PolicyGradientConfig):
    """Online DPO (Guo et al. 2024; TRL's OnlineDPOTrainer): each iteration samples two completions per
    prompt from the current policy, labels the pair, and takes one preference-loss step on it.

    loss: dpo, ipo or the reference-free simpo.
    beta: the loss's KL price (DPO beta, IPO tau; SimPO's reward scale).
    simpo_gamma: SimPO's target reward margin gamma.
    length_normalize: per-token mean log-probs (default: on for IPO and SimPO).
    judge: label the pairs with a judge: digits (the program), rm:PATH (a reward model, P = sigma(r_a - r_b))
      or lm:PATH (a pairwise LM judge); unset: the higher score of --reward-model / --reward (or the digits
      program) is chosen.
    """

    lr: float = param(5e-4, POSITIVE)
    kl_coef: float = param(0.0, NON_NEGATIVE)
    epochs: int = param(1, POSITIVE_INT)
    loss: str = param("dpo", OneOf(ONLINE_DPO_LOSSES))
    beta: float = param(0.1, POSITIVE)
    simpo_gamma: float = param(0.5, NON_NEGATIVE)
    length_normalize: bool | None = None
    judge: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.judge is not None and (self.reward_model is not None or self.reward):
            raise _config_error(f"--judge {self.judge} and --reward-model / --reward both label the pairs; pass one "
                                "of them.")

    @property
    def average(self) -> bool:
        """Whether the loss reads per-token mean log-probs."""
        return self.length_normalize if self.length_normalize is not None else self.loss in ("ipo", "simpo")


@dataclass(frozen=True)
class IterateConfig:
    """Iterative (online) DPO: rounds of sample -> judge -> preference optimisation -> evaluate.

    rounds: number of rounds.
    prompts_per_round: fresh training prompts sampled each round.
    samples: completions sampled per prompt from the current policy (K).
    max_new_tokens: completion length cap in tokens.
    judge: digits (the program), rm:PATH (a reward model) or lm:PATH (a pairwise LM judge).
    keep_reference: keep the starting (SFT) model as the reference instead of the previous round's policy.
    loss: preference loss of each round: dpo, ipo or kto.
    beta: the loss's KL price.
    steps: optimizer steps per round.
    lr: peak learning rate of each round.
    batch_size: pairs per step.
    max_length: prompt + completion tokens.
    eval_samples: samples per held-out prompt for the true reward and KL(pi || pi_start).
    compare_offline: also train one-shot offline preference optimisation from the start model on the
      same number of labels, sampled once from the start model.
    seed: random seed.
    lora: train each round as a LoRA adapter (peft) on the previous round's model: R,ALPHA,DROPOUT[,TARGETS].
    """

    COMMAND_FLAGS: ClassVar[bool] = True

    rounds: int = param(3, POSITIVE_INT)
    prompts_per_round: int = param(500, POSITIVE_INT)
    samples: int = param(4, Interval(2, math.inf, "[)", integer=True))
    max_new_tokens: int = param(10, POSITIVE_INT)
    judge: str = "digits"
    keep_reference: bool = False
    loss: str = param("dpo", OneOf(("dpo", "ipo", "kto")))
    beta: float = param(0.1, POSITIVE)
    steps: int = param(100, POSITIVE_INT)
    lr: float = param(5e-4, POSITIVE)
    batch_size: int = param(32, POSITIVE_INT)
    max_length: int = param(32, Interval(1, math.inf, "()", integer=True))
    eval_samples: int = param(4, NON_NEGATIVE_INT)
    compare_offline: bool = False
    seed: int = 0
    lora: str | None = None

    def __post_init__(self) -> None:
        check_config(self)
        parse_lora(self.lora)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
