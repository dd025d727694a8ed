"""Trainer configurations of ``offrl.prefs`` and the command-line flags generated from them.

Every option is a field of a frozen dataclass, documented in the class docstring as
``name: text``; ``add_config_flags`` turns the fields into ``--name`` flags (defaults, types,
choices and help all read from the dataclass, so the CLI cannot drift from the API) and
``config_from_args`` builds the config back. Range rules live in each field's metadata and are
checked when a config is built, from Python or from the command line, with one sentence that
names the flag, the value, the valid range and the default.

This module imports neither torch nor transformers: ``offrl prefs --help`` stays light.

Example::

    parser = argparse.ArgumentParser()
    add_config_flags(parser, PreferenceConfig, skip=("loss",))
    config = config_from_args(PreferenceConfig, parser.parse_args(["--beta", "0.3"]), loss="ipo")
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import asdict, dataclass, field
from typing import Any

from offrl.errors import ConfigError

PREFERENCE_LOSSES = ("dpo", "ipo", "cdpo", "rdpo", "kto")


def _rule(choices: tuple | None = None, gt: float | None = None, ge: float | None = None,
          lt: float | None = None, le: float | None = None, cli: bool = True) -> dict[str, Any]:
    return {"choices": choices, "gt": gt, "ge": ge, "lt": lt, "le": le, "cli": cli}


def _field(default, **rule):
    return field(default=default, metadata=_rule(**rule))


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _range_text(meta: dict[str, Any]) -> str:
    if meta.get("choices"):
        return "one of " + ", ".join(str(c) for c in meta["choices"])
    parts = []
    for key, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if meta.get(key) is not None:
            parts.append(f"{sym} {meta[key]:g}")
    return " and ".join(parts)


def check_config(config) -> None:
    """Raise :class:`ConfigError` (one sentence) for the first field outside its documented range."""
    for f in dataclasses.fields(config):
        meta, value = f.metadata, getattr(config, f.name)
        if not meta or value is None:
            continue
        bad = False
        if meta.get("choices") and value not in meta["choices"]:
            bad = True
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            bad = ((meta.get("gt") is not None and not value > meta["gt"])
                   or (meta.get("ge") is not None and not value >= meta["ge"])
                   or (meta.get("lt") is not None and not value < meta["lt"])
                   or (meta.get("le") is not None and not value <= meta["le"]))
        if bad:
            raise ConfigError(f"{flag_name(f.name)} {value} is invalid: it must be {_range_text(meta)} "
                              f"(default {f.default}).")


def field_docs(cls) -> dict[str, str]:
    """``name: text`` lines of the class docstrings along the MRO (continuation lines are joined)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        current = None
        for line in (klass.__doc__ or "").splitlines():
            stripped = line.strip()
            head, sep, rest = stripped.partition(":")
            names = [n.strip() for n in head.split("/")]
            if sep and names and all(n.isidentifier() for n in names) and line.startswith("    ") and not line.startswith("      "):
                current = names
                for n in names:
                    docs[n] = rest.strip()
            elif current and stripped and line.startswith("      "):
                for n in current:
                    docs[n] += " " + stripped
            else:
                current = None
    return docs


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
    """

    steps: int = _field(200, gt=0)
    batch_size: int = _field(32, gt=0)
    lr: float = _field(5e-6, gt=0)
    weight_decay: float = _field(0.0, ge=0)
    warmup_steps: int = _field(10, ge=0)
    grad_clip: float = _field(1.0, ge=0)
    max_length: int = _field(512, gt=1)
    max_prompt_length: int | None = _field(None, gt=0)
    bad_rows: str = _field("drop", choices=("drop", "raise"))
    eval_fraction: float = _field(0.1, ge=0, lt=1)
    log_every: int = _field(20, gt=0)
    save_every: int = _field(0, ge=0)
    seed: int = 0
    mixed_precision: str = _field("auto", choices=("auto", "no", "bf16", "fp16"))
    gradient_accumulation_steps: int = _field(1, gt=0)

    def __post_init__(self) -> None:
        check_config(self)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SFTConfig(TrainConfig):
    """Supervised fine-tuning on demonstrations (behaviour cloning: SFT = BC)."""

    lr: float = _field(1e-4, gt=0)


@dataclass(frozen=True)
class RewardModelConfig(TrainConfig):
    """Bradley-Terry reward model with ``heads`` scalar heads on one backbone.

    heads: ensemble size K; each head sees its own bootstrap weights (Poisson(1) per pair) so
      the heads disagree where data is thin; the std across heads is reported as uncertainty.
    models: ensemble of M independently trained models (seeds seed..seed+M-1, one held-out split),
      saved as <out>/member_<k>/; their heads are pooled (M*K rewards per completion).
    """

    lr: float = _field(1e-4, gt=0)
    heads: int = _field(1, gt=0)
    models: int = _field(1, gt=0)


@dataclass(frozen=True)
class PreferenceConfig(TrainConfig):
    """Offline preference optimisation against a fixed reference (the behaviour policy).

    loss: dpo, ipo, cdpo (conservative, label smoothing), rdpo (robust) or kto.
    beta: the KL price (DPO/KTO beta; IPO tau); smaller beta lets the policy drift further.
    label_smoothing: assumed label-flip rate for cdpo / rdpo.
    length_normalize: per-token mean log-probs (default: on for IPO only, as its authors advise).
    desirable_weight: KTO's lambda_D.
    undesirable_weight: KTO's lambda_U.
    reference: folder of the reference model (default: the starting model).
    kl_prompts: prompts sampled for the KL(pi || pi_ref) monitor at each log step (0 = off,
      which also frees the reference model after its log-probs are cached).
    kl_max_new_tokens: sampled completion length for the KL monitor.
    """

    loss: str = _field("dpo", choices=PREFERENCE_LOSSES)
    beta: float = _field(0.1, gt=0)
    label_smoothing: float = _field(0.0, ge=0, lt=0.5)
    length_normalize: bool | None = None
    desirable_weight: float = _field(1.0, ge=0)
    undesirable_weight: float = _field(1.0, ge=0)
    reference: str | None = None
    kl_prompts: int = _field(32, ge=0)
    kl_max_new_tokens: int = _field(32, gt=0)


# --------------------------------------------------------------------------- flags


def _base_type(hint) -> tuple[type, bool]:
    """(scalar type, optional?) of a field annotation such as ``int``, ``float | None``."""
    args = typing.get_args(hint)
    if args:
        inner = [a for a in args if a is not type(None)]
        return inner[0], len(inner) < len(args)
    return hint, False


def add_config_flags(parser: argparse.ArgumentParser, cls, skip: tuple[str, ...] = (),
                     defaults: dict[str, Any] | None = None) -> None:
    """One ``--flag`` per scalar field of ``cls`` (minus ``skip``), with the field's default, type,
    choices and docstring help. ``defaults`` overrides shown defaults for this command only."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    defaults = defaults or {}
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.metadata.get("cli", True):
            continue
        typ, optional = _base_type(hints[f.name])
        if typ not in (int, float, str, bool):
            continue
        default = defaults.get(f.name, f.default)
        help_text = docs.get(f.name, "").rstrip(".")
        kwargs: dict[str, Any] = {"dest": f"cfg__{f.name}", "default": default}
        if typ is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = typ
            if f.metadata.get("choices"):
                kwargs["choices"] = f.metadata["choices"]
            kwargs["metavar"] = f.name.upper() if not f.metadata.get("choices") else None
        if typ is not bool:
            help_text += f" (default {default})" if default is not None else " (optional)"
        parser.add_argument(flag_name(f.name), help=help_text.replace("%", "%%"), **kwargs)


def config_from_args(cls, args: argparse.Namespace, **fixed):
    """Build ``cls`` from the ``cfg__*`` values of ``args`` plus ``fixed`` fields (validated)."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k[len("cfg__"):]: v for k, v in vars(args).items() if k.startswith("cfg__") and k[len("cfg__"):] in names}
    values.update(fixed)
    return cls(**values)


# --------------------------------------------------------------------------- online RLHF

KL_ESTIMATORS = ("k1", "k3")
GROUP_ESTIMATORS = ("grpo", "rloo")


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
    reward_model: reward-model folder or ensemble run folder of `offrl prefs rm` (unset: the digits
      task's programmatic reward).
    uncertainty_penalty: c in the reward mean - c * std over the reward model's heads.
    whiten_rewards: whiten the scores over the batch before use.
    log_every: iterations between metric lines.
    save_every: iterations between checkpoints (0: only the final model).
    seed: random seed (prompt batches and samples derive from it and the iteration).
    tensorboard: also write the metrics to TensorBoard (needs tensorboardX) beside metrics.jsonl/csv.
    """

    steps: int = _field(100, gt=0)
    batch_size: int = _field(32, gt=0)
    lr: float = _field(1e-5, gt=0)
    weight_decay: float = _field(0.0, ge=0)
    warmup_steps: int = _field(0, ge=0)
    grad_clip: float = _field(1.0, ge=0)
    max_new_tokens: int = _field(16, gt=0)
    temperature: float = _field(1.0, gt=0)
    kl_coef: float = _field(0.05, ge=0)
    kl_estimator: str = _field("k1", choices=KL_ESTIMATORS)
    kl_target: float | None = _field(None, gt=0)
    kl_horizon: float = _field(10000.0, gt=0)
    kl_budget: float = _field(0.0, ge=0)
    epochs: int = _field(4, gt=0)
    minibatches: int = _field(1, gt=0)
    clip_range: float = _field(0.2, gt=0)
    reward_model: str | None = None
    uncertainty_penalty: float = _field(0.0, ge=0)
    whiten_rewards: bool = False
    log_every: int = _field(1, gt=0)
    save_every: int = _field(0, ge=0)
    seed: int = 0
    tensorboard: bool = False

    def __post_init__(self) -> None:
        check_config(self)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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

    gamma: float = _field(1.0, ge=0, le=1)
    lam: float = _field(0.95, ge=0, le=1)
    vf_coef: float = _field(0.1, ge=0)
    value_clip: float = _field(0.2, gt=0)
    value_model: str = "shared"


@dataclass(frozen=True)
class GRPOConfig(PolicyGradientConfig):
    """Group-relative policy gradients without a value model: GRPO (Shao et al. 2024) and RLOO
    (Ahmadian et al. 2024) on the same rollout and KL code.

    estimator: grpo (group-normalised advantages, KL in the loss) or rloo (leave-one-out baseline,
      KL in the sequence reward).
    group_size: samples per prompt (G).
    scale_rewards: divide GRPO's centred rewards by the group's std.
    """

    kl_coef: float = _field(0.04, ge=0)
    kl_estimator: str = _field("k3", choices=KL_ESTIMATORS)
    epochs: int = _field(1, gt=0)
    estimator: str = _field("grpo", choices=GROUP_ESTIMATORS)
    group_size: int = _field(4, ge=2)
    scale_rewards: bool = True


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
    """

    rounds: int = _field(3, gt=0)
    prompts_per_round: int = _field(500, gt=0)
    samples: int = _field(4, ge=2)
    max_new_tokens: int = _field(10, gt=0)
    judge: str = "digits"
    keep_reference: bool = False
    loss: str = _field("dpo", choices=("dpo", "ipo", "kto"))
    beta: float = _field(0.1, gt=0)
    steps: int = _field(100, gt=0)
    lr: float = _field(5e-4, gt=0)
    batch_size: int = _field(32, gt=0)
    max_length: int = _field(32, gt=1)
    eval_samples: int = _field(4, ge=0)
    compare_offline: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        check_config(self)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
