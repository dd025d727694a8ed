"""Trainers: SFT (behaviour cloning), Bradley-Terry reward models, DPO / IPO / cDPO / rDPO / KTO.

Each trainer is thin: it tokenizes validated data, (for preference losses) computes the
reference log-probs once and caches them in ``<out>/reference_logps.safetensors`` (the
reference model is then freed unless the sampled-KL monitor needs it), and hands a
``compute(model, batch)`` to :func:`offrl.prefs.loop.run_loop`.

Run folders hold ``config.json``, ``metrics.jsonl``, ``summary.json``, ``model/`` (the final
weights, safetensors, with the tokenizer) and ``checkpoints/``.

Example::

    from offrl.prefs import PreferenceConfig, train_preferences
    result = train_preferences("runs/sft/model", "pairs.jsonl", "runs/dpo",
                               PreferenceConfig(loss="dpo", beta=0.1, steps=300, lr=5e-4))
    result.summary["eval/accuracy"]
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from offrl.errors import ConfigError, DatasetError
from offrl.prefs import losses as L
from offrl.prefs.data import TokenizedPreferences, load_preferences, tokenize_preferences
from offrl.prefs.loop import TrainConfig, make_accelerator, run_loop, write_json
from offrl.prefs.modeling import (
    collate_pairs,
    collate_single,
    collate_sequences,
    load_causal_lm,
    load_tokenizer,
    reference_logps,
    sample_completions,
    sequence_logps,
)


@dataclass(frozen=True)
class SFTConfig(TrainConfig):
    """Supervised fine-tuning on demonstrations (behaviour cloning: SFT = BC)."""

    lr: float = 1e-4


@dataclass(frozen=True)
class RewardModelConfig(TrainConfig):
    """Bradley-Terry reward model with ``heads`` scalar heads on one backbone.

    heads: ensemble size K; each head sees its own bootstrap weights (Poisson(1) per pair) so
    the heads disagree where data is thin; the std across heads is reported as uncertainty.
    models: ensemble of M independently trained models (seeds seed..seed+M-1, one held-out split),
      saved as ``<out>/member_<k>/``; their heads are pooled (M*K rewards per completion).
    """

    lr: float = 1e-4
    heads: int = 1
    models: int = 1


@dataclass(frozen=True)
class PreferenceConfig(TrainConfig):
    """Offline preference optimisation against a fixed reference (the behaviour policy).

    loss: "dpo", "ipo", "cdpo" (conservative, label smoothing), "rdpo" (robust) or "kto".
    beta: the KL price (DPO/KTO beta; IPO tau). Smaller beta lets the policy drift further.
    label_smoothing: assumed label-flip rate for cdpo / rdpo.
    length_normalize: use per-token mean log-probs (default for IPO, as its authors advise).
    desirable_weight / undesirable_weight: KTO's lambda_D / lambda_U.
    reference: folder of the reference model (default: the starting model).
    kl_prompts: prompts sampled for the KL(pi || pi_ref) monitor at each log step (0 = off,
      which also frees the reference model after its log-probs are cached).
    kl_max_new_tokens: sampled completion length for the KL monitor.
    """

    loss: str = "dpo"
    beta: float = 0.1
    label_smoothing: float = 0.0
    length_normalize: bool | None = None
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0
    reference: str | None = None
    kl_prompts: int = 32
    kl_max_new_tokens: int = 32


@dataclass
class TrainResult:
    path: str
    metrics: list[dict[str, float]]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def model_path(self) -> str:
        return os.path.join(self.path, "model")


# --------------------------------------------------------------------------- shared set-up


def _prepare_data(data, tokenizer, config: TrainConfig, kind: str | None = None, split_seed: int | None = None):
    dataset = load_preferences(data, bad_rows=config.bad_rows)
    if kind == "completions":
        dataset = dataset.to_completions()
    elif kind == "unpaired":
        dataset = dataset.to_unpaired()
    elif kind == "paired" and dataset.kind != "paired":
        raise DatasetError(f"{dataset.source} holds {dataset.kind} rows; this trainer needs prompt/chosen/rejected pairs.")
    seed = config.seed if split_seed is None else split_seed
    train, held_out = dataset.split(config.eval_fraction, seed=seed) if config.eval_fraction > 0 else (dataset, None)
    kw = dict(max_length=config.max_length, max_prompt_length=config.max_prompt_length, bad_rows=config.bad_rows)
    train_tok = tokenize_preferences(train, tokenizer, **kw)
    eval_tok = tokenize_preferences(held_out, tokenizer, **kw) if held_out is not None and len(held_out) else None
    dropped = sorted(set(train_tok.dropped) | set(eval_tok.dropped if eval_tok else dataset.dropped), key=lambda b: b.row)
    report = {
        "data": dataset.source,
        "kind": dataset.kind,
        "rows_train": len(train_tok),
        "rows_eval": len(eval_tok) if eval_tok else 0,
        "bad_rows_dropped": len(dropped),
        "bad_rows": [str(b) for b in dropped[:50]],
        "truncated_completions": train_tok.truncated + (eval_tok.truncated if eval_tok else 0),
    }
    if len(train_tok) < config.batch_size:
        raise DatasetError(
            f"{dataset.source} has {len(train_tok)} training examples, fewer than --batch-size {config.batch_size}; "
            "lower the batch size or add data."
        )
    return dataset, train_tok, eval_tok, report


# --------------------------------------------------------------------------- SFT


def train_sft(model: str, data, out: str, config: SFTConfig = SFTConfig(), resume: bool = False,
              progress: bool = True) -> TrainResult:
    """Behaviour cloning: maximise ``sum_t log pi(y_t | x, y_<t)`` on demonstration completions."""
    tokenizer = load_tokenizer(model)
    policy = load_causal_lm(_resume_weights(model, out, resume))
    _, train_tok, eval_tok, report = _prepare_data(data, tokenizer, config, kind="completions")
    accelerator = make_accelerator(config.mixed_precision)
    pad = tokenizer.pad_token_id

    def compute(m, batch):
        from offrl.prefs.modeling import token_logps

        logps, mask = token_logps(m, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
        loss = L.sft_loss(logps, mask)
        return loss, {"tokens": mask.sum().float()}

    def evaluate(m, step):
        if eval_tok is None:
            return {}
        return {"eval/nll_per_token": _mean_nll(m, eval_tok, pad, accelerator.device)}

    write_json(os.path.join(out, "config.json"), {"trainer": "sft", "model": model, **config.to_json(), **report})
    history = run_loop(accelerator=accelerator, model=policy, tokenizer=tokenizer, lengths=train_tok.lengths(),
                       collate=lambda idx: collate_single(train_tok, idx, pad), compute=compute, config=config,
                       out=out, evaluate=evaluate, resume=resume, progress=progress, description="sft")
    summary = {**report, **(history[-1] if history else {})}
    write_json(os.path.join(out, "summary.json"), summary)
    return TrainResult(out, history, summary)


@torch.no_grad()
def _mean_nll(model, tokenized: TokenizedPreferences, pad: int, device, batch_size: int = 128) -> float:
    from offrl.prefs.modeling import token_logps

    total, count = 0.0, 0.0
    for start in range(0, len(tokenized), batch_size):
        batch = collate_single(tokenized, list(range(start, min(start + batch_size, len(tokenized)))), pad)
        logps, mask = token_logps(model, batch["input_ids"].to(device), batch["attention_mask"].to(device),
                                  batch["completion_mask"].to(device))
        total -= float(logps.sum())
        count += float(mask.sum())
    return total / max(count, 1.0)


def _resume_weights(model: str, out: str, resume: bool) -> str:
    from offrl.prefs.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(os.path.join(out, "checkpoints")) if resume else None
    return os.path.join(ckpt, "model") if ckpt else model


# --------------------------------------------------------------------------- reward model


def load_reward_model(path: str, heads: int | None = None):
    """A sequence-classification model with ``heads`` scalar outputs (any HF causal LM folder works:
    the LM head is replaced by a fresh linear scoring head on the last non-pad token)."""
    from transformers import AutoModelForSequenceClassification

    from offrl.prefs.modeling import _check_model_dir, disable_dropout

    _check_model_dir(path)
    tokenizer = load_tokenizer(path)
    kwargs = {"num_labels": heads} if heads else {}
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32, **kwargs)
    model.config.pad_token_id = tokenizer.pad_token_id
    disable_dropout(model)
    return model, tokenizer


def _rewards(model, batch) -> torch.Tensor:
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits.float()


def train_reward_model(model: str, data, out: str, config: RewardModelConfig = RewardModelConfig(),
                       resume: bool = False, progress: bool = True, _split_seed: int | None = None) -> TrainResult:
    """Bradley-Terry reward model ``-log sigma(r(x, y_w) - r(x, y_l))`` on K bootstrapped heads
    (and, with ``config.models = M > 1``, M independently trained members)."""
    if config.models > 1:
        return _train_reward_ensemble(model, data, out, config, resume, progress)
    torch.manual_seed(config.seed)  # the fresh scoring head's initialisation
    rm, tokenizer = load_reward_model(_resume_weights(model, out, resume), heads=config.heads)
    _, train_tok, eval_tok, report = _prepare_data(data, tokenizer, config, kind="paired", split_seed=_split_seed)
    accelerator = make_accelerator(config.mixed_precision)
    pad = tokenizer.pad_token_id
    g = torch.Generator().manual_seed(config.seed)
    bootstrap = torch.poisson(torch.ones(len(train_tok), config.heads), generator=g) if config.heads > 1 else None

    def compute(m, batch):
        r = _rewards(m, batch)
        r_c, r_r = r.chunk(2, dim=0)  # (B, K)
        per_head = L.bradley_terry_loss(r_c, r_r)
        if bootstrap is not None:
            w = bootstrap[batch["index"].cpu()].to(per_head.device)
            loss = (per_head * w).sum() / w.sum().clamp(min=1.0)
        else:
            loss = per_head.mean()
        margin = (r_c - r_r).mean(-1)
        return loss, {"accuracy": (margin > 0).float().mean(), "margin": margin.mean()}

    def evaluate(m, step):
        return {f"eval/{k}": v for k, v in reward_model_metrics(m, eval_tok, pad, accelerator.device).items()} if eval_tok else {}

    write_json(os.path.join(out, "config.json"), {"trainer": "reward_model", "model": model, **config.to_json(), **report})
    history = run_loop(accelerator=accelerator, model=rm, tokenizer=tokenizer, lengths=train_tok.lengths(),
                       collate=lambda idx: collate_pairs(train_tok, idx, pad), compute=compute, config=config,
                       out=out, evaluate=evaluate, resume=resume, progress=progress, description="reward model")
    summary = {**report, **(history[-1] if history else {})}
    write_json(os.path.join(out, "summary.json"), summary)
    return TrainResult(out, history, summary)


def _train_reward_ensemble(model: str, data, out: str, config: RewardModelConfig, resume: bool,
                           progress: bool) -> TrainResult:
    from dataclasses import replace

    members, histories = [], []
    for k in range(config.models):
        member_cfg = replace(config, models=1, seed=config.seed + k)
        result = train_reward_model(model, data, os.path.join(out, f"member_{k}"), member_cfg, resume, progress,
                                    _split_seed=config.seed)
        members.append(f"member_{k}/model")
        histories.append(result.metrics)
    write_json(os.path.join(out, "ensemble.json"), {"members": members})
    loaded = [load_reward_model(os.path.join(out, m))[0].eval() for m in members]
    tokenizer = load_tokenizer(os.path.join(out, members[0]))
    cfg = replace(config, models=1)
    dataset, _, eval_tok, report = _prepare_data(data, tokenizer, cfg, kind="paired")
    summary = dict(report)
    if eval_tok is not None:
        summary.update({f"eval/{k}": v for k, v in reward_model_metrics(loaded, eval_tok, tokenizer.pad_token_id).items()})
    summary["members"] = config.models
    write_json(os.path.join(out, "summary.json"), summary)
    return TrainResult(out, histories[-1], summary)


@torch.no_grad()
def reward_model_metrics(model, tokenized: TokenizedPreferences, pad: int, device="cpu", batch_size: int = 128) -> dict[str, float]:
    """Held-out preference accuracy, mean reward margin, ensemble disagreement (``uncertainty``: the
    std across heads of the margin ``r(x, y_w) - r(x, y_l)``, averaged over pairs; margins, unlike raw
    rewards, do not depend on each head's arbitrary offset) and the Pearson correlation of reward with completion length: a strong positive
    correlation warns that the model may be rewarding length rather than quality."""
    rewards_c, rewards_r, lengths_c, lengths_r = [], [], [], []
    for start in range(0, len(tokenized), batch_size):
        idx = list(range(start, min(start + batch_size, len(tokenized))))
        batch = {k: v.to(device) for k, v in collate_pairs(tokenized, idx, pad).items()}
        models = model if isinstance(model, (list, tuple)) else [model]
        r_c, r_r = torch.cat([_rewards(m, batch) for m in models], dim=-1).chunk(2, dim=0)
        rewards_c.append(r_c.cpu())
        rewards_r.append(r_r.cpu())
        lengths_c += [len(tokenized.completions[0][i]) for i in idx]
        lengths_r += [len(tokenized.completions[1][i]) for i in idx]
    r_c, r_r = torch.cat(rewards_c), torch.cat(rewards_r)
    mean_c, mean_r = r_c.mean(-1), r_r.mean(-1)
    rewards = torch.cat([mean_c, mean_r])
    lengths = torch.tensor(lengths_c + lengths_r, dtype=torch.float32)
    return {
        "accuracy": float((mean_c > mean_r).float().mean()),
        "margin": float((mean_c - mean_r).mean()),
        "uncertainty": float((r_c - r_r).std(-1).mean()) if r_c.shape[-1] > 1 else 0.0,
        "length_correlation": _pearson(rewards, lengths),
    }


def _pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a - a.mean(), b - b.mean()
    denom = float(a.norm() * b.norm())
    return float((a * b).sum()) / denom if denom > 0 else 0.0


@torch.no_grad()
def score_with_reward_model(path: str, prompts: list[str], completions: list[str], batch_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean reward, ensemble std) for each (prompt, completion) under the reward model at ``path``.
    Rewards are only defined up to a per-head constant (Bradley-Terry is shift-invariant), so compare
    them between completions of one prompt, not across heads."""
    if os.path.exists(os.path.join(path, "model", "config.json")):  # a single-model run folder
        path = os.path.join(path, "model")
    if os.path.exists(os.path.join(path, "ensemble.json")):
        members = json.load(open(os.path.join(path, "ensemble.json")))["members"]
        models = [load_reward_model(os.path.join(path, m))[0].eval() for m in members]
        tokenizer = load_tokenizer(os.path.join(path, members[0]))
    else:
        model, tokenizer = load_reward_model(path)
        models = [model.eval()]
    means, stds = [], []
    eos = tokenizer.eos_token or ""
    for start in range(0, len(prompts), batch_size):
        p_ids = [tokenizer(p)["input_ids"] for p in prompts[start:start + batch_size]]
        full = [tokenizer(p + c + eos)["input_ids"] for p, c in zip(prompts[start:start + batch_size], completions[start:start + batch_size])]
        batch = collate_sequences(p_ids, [f[len(p):] for p, f in zip(p_ids, full)], tokenizer.pad_token_id)
        r = torch.cat([_rewards(m, batch) for m in models], dim=-1)
        means.append(r.mean(-1))
        stds.append(r.std(-1) if r.shape[-1] > 1 else torch.zeros(r.shape[0]))
    return torch.cat(means), torch.cat(stds)


# --------------------------------------------------------------------------- DPO / IPO / KTO


PREFERENCE_LOSSES = ("dpo", "ipo", "cdpo", "rdpo", "kto")


def _data_fingerprint(tokenized: TokenizedPreferences, reference: str, average: bool) -> str:
    h = hashlib.sha256()
    h.update(os.path.abspath(reference).encode())
    h.update(str(average).encode())
    h.update(json.dumps([tokenized.prompt_ids, tokenized.completions]).encode())
    return h.hexdigest()[:16]


def cached_reference_logps(reference, tokenized: TokenizedPreferences, pad: int, cache: str, average: bool,
                           device="cpu", reference_path: str = "", autocast=None) -> torch.Tensor:
    """Reference log-probs ``(N, slots)`` computed once and stored in ``cache`` (safetensors),
    keyed by a fingerprint of the tokens and the reference folder; recomputed if either changes."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    key = _data_fingerprint(tokenized, reference_path, average)
    if os.path.exists(cache):
        with safe_open(cache, "pt") as fh:
            if (fh.metadata() or {}).get("fingerprint") == key:
                return fh.get_tensor("logps")
    model = load_causal_lm(reference).to(device) if isinstance(reference, str) else reference
    logps = reference_logps(model, tokenized, pad, average=average, device=device, autocast=autocast)
    os.makedirs(os.path.dirname(os.path.abspath(cache)), exist_ok=True)
    save_file({"logps": logps.contiguous()}, cache, metadata={"fingerprint": key})
    return logps


def add_mismatched_slot(tokenized: TokenizedPreferences, max_length: int, seed: int = 0) -> TokenizedPreferences:
    """Append a second completion slot holding another example's completion, ``(x_i, y_pi(i))`` with a
    fixed derangement ``pi``: KTO's KL reference point is estimated on these mismatched pairs, and
    fixing them lets their reference log-probs be cached like the others."""
    import random

    n = len(tokenized)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    partner = [0] * n
    for k, i in enumerate(order):
        partner[i] = order[(k + 1) % n]
    room = [max(1, max_length - len(p)) for p in tokenized.prompt_ids]
    tokenized.completions = [tokenized.completions[0], [tokenized.completions[0][partner[i]][: room[i]] for i in range(n)]]
    return tokenized


def train_preferences(model: str, data, out: str, config: PreferenceConfig = PreferenceConfig(),
                      resume: bool = False, progress: bool = True, reference_cache: str | None = None) -> TrainResult:
    """Train ``model`` with ``config.loss`` on preference data against a fixed reference.

    Per log step the metrics hold the implicit rewards of chosen / rejected completions
    (``beta * log pi/pi_ref``), their margin, the pair accuracy (margin > 0), the held-out
    versions of these (``eval/...``) and ``kl_sampled``: ``mean log pi(y|x) - log pi_ref(y|x)``
    over completions sampled from the current policy for ``kl_prompts`` held-out prompts.
    """
    if config.loss not in PREFERENCE_LOSSES:
        raise ConfigError(f"loss={config.loss!r} is unknown; use one of {PREFERENCE_LOSSES}.")
    if config.beta <= 0:
        raise ConfigError(f"--beta {config.beta} must be positive.")
    reference_path = config.reference or model
    tokenizer = load_tokenizer(model)
    policy = load_causal_lm(_resume_weights(model, out, resume))
    kto = config.loss == "kto"
    dataset, train_tok, eval_tok, report = _prepare_data(data, tokenizer, config, kind="unpaired" if kto else "paired")
    if kto:
        add_mismatched_slot(train_tok, config.max_length, config.seed)
    accelerator = make_accelerator(config.mixed_precision)
    device = accelerator.device
    pad = tokenizer.pad_token_id
    average = config.length_normalize if config.length_normalize is not None else config.loss == "ipo"

    cache = reference_cache or os.path.join(out, "reference_logps.safetensors")
    reference = load_causal_lm(reference_path).to(device) if config.kl_prompts > 0 else reference_path
    ref_train = cached_reference_logps(reference, train_tok, pad, cache, average, device, reference_path,
                                       accelerator.autocast)
    ref_eval = (cached_reference_logps(reference, eval_tok, pad, cache.replace(".safetensors", "_eval.safetensors"),
                                       average, device, reference_path, accelerator.autocast) if eval_tok else None)
    if config.kl_prompts <= 0:
        reference = None  # the cached log-probs are all training needs
    else:
        reference.eval()
    kl_source = eval_tok if eval_tok is not None else train_tok
    kl_prompts = kl_source.prompts[: config.kl_prompts]

    def compute(m, batch):
        idx = batch["index"].cpu()
        if kto:
            logps = sequence_logps(m, batch, average=average)
            with torch.no_grad():
                pi_kl = sequence_logps(m, {k[3:]: v for k, v in batch.items() if k.startswith("kl_")}, average=average)
            z0 = L.kto_reference_point(pi_kl, ref_train[idx, 1].to(pi_kl.device))
            ref = ref_train[idx, 0].to(logps.device)
            losses, rewards = L.kto_loss(logps, ref, batch["labels"], z0, config.beta,
                                         config.desirable_weight, config.undesirable_weight)
            lab = batch["labels"].to(rewards.device)
            n_d, n_u = lab.sum().clamp(min=1), (~lab).sum().clamp(min=1)
            return losses.mean(), {"rewards/desirable": (rewards * lab).sum() / n_d,
                                   "rewards/undesirable": (rewards * ~lab).sum() / n_u, "kl_reference_point": z0}
        logps = sequence_logps(m, batch, average=average)
        pi_c, pi_r = logps.chunk(2, dim=0)
        ref = ref_train[idx].to(logps.device)
        losses, r_c, r_r = _paired_loss(config, pi_c, pi_r, ref[:, 0], ref[:, 1])
        return losses.mean(), {"rewards/chosen": r_c.mean(), "rewards/rejected": r_r.mean(),
                               "rewards/margin": (r_c - r_r).mean(), "rewards/accuracy": (r_c > r_r).float().mean(),
                               "logps/chosen": pi_c.detach().mean(), "logps/rejected": pi_r.detach().mean()}

    def evaluate(m, step):
        row = {}
        if eval_tok is not None and kto:
            row.update({f"eval/{k}": v for k, v in kto_eval_metrics(m, eval_tok, ref_eval[:, 0], config.beta, pad,
                                                                   average, device).items()})
        if eval_tok is not None and not kto:
            row.update({f"eval/{k}": v for k, v in implicit_reward_metrics(m, eval_tok, ref_eval, config.beta, pad,
                                                                          average, device).items()})
        if reference is not None and kl_prompts:
            row["kl_sampled"] = sampled_kl(m, reference, tokenizer, kl_prompts, config.kl_max_new_tokens,
                                           seed=step, conversational=dataset.conversational)
        return row

    write_json(os.path.join(out, "config.json"),
               {"trainer": config.loss, "model": model, "reference_model": reference_path, **config.to_json(), **report})
    history = run_loop(accelerator=accelerator, model=policy, tokenizer=tokenizer, lengths=train_tok.lengths(),
                       collate=(lambda idx: _collate_kto(train_tok, idx, pad)) if kto else
                       (lambda idx: collate_pairs(train_tok, idx, pad)),
                       compute=compute, config=config, out=out, evaluate=evaluate, resume=resume,
                       progress=progress, description=config.loss)
    summary = {**report, **(history[-1] if history else {})}
    write_json(os.path.join(out, "summary.json"), summary)
    return TrainResult(out, history, summary)


def _collate_kto(tokenized: TokenizedPreferences, indices, pad: int) -> dict[str, torch.Tensor]:
    batch = collate_single(tokenized, indices, pad)
    batch.update({f"kl_{k}": v for k, v in collate_single(tokenized, indices, pad, slot=1).items() if k != "labels"})
    return batch


def _paired_loss(config: PreferenceConfig, pi_c, pi_r, ref_c, ref_r):
    if config.loss in ("cdpo", "rdpo"):
        return L.PAIRED_LOSSES[config.loss](pi_c, pi_r, ref_c, ref_r, config.beta, config.label_smoothing)
    return L.PAIRED_LOSSES[config.loss](pi_c, pi_r, ref_c, ref_r, config.beta)


@torch.no_grad()
def implicit_reward_metrics(model, tokenized: TokenizedPreferences, ref_logps: torch.Tensor, beta: float, pad: int,
                            average: bool = False, device="cpu", batch_size: int = 128) -> dict[str, float]:
    """Held-out implicit-reward accuracy and margin: ``r = beta * (log pi - log pi_ref)``."""
    r_c, r_r = [], []
    for start in range(0, len(tokenized), batch_size):
        idx = list(range(start, min(start + batch_size, len(tokenized))))
        batch = {k: v.to(device) for k, v in collate_pairs(tokenized, idx, pad).items()}
        pi_c, pi_r = sequence_logps(model, batch, average=average).float().cpu().chunk(2)
        r_c.append(beta * (pi_c - ref_logps[idx, 0]))
        r_r.append(beta * (pi_r - ref_logps[idx, 1]))
    c, r = torch.cat(r_c), torch.cat(r_r)
    return {"accuracy": float((c > r).float().mean()), "margin": float((c - r).mean()),
            "rewards/chosen": float(c.mean()), "rewards/rejected": float(r.mean())}


@torch.no_grad()
def kto_eval_metrics(model, tokenized: TokenizedPreferences, ref_logps: torch.Tensor, beta: float, pad: int,
                     average: bool = False, device="cpu", batch_size: int = 128) -> dict[str, float]:
    """Held-out implicit rewards of desirable and undesirable completions, their gap (``margin``), and,
    where a desirable and an undesirable completion share a source row (pairs split for KTO), the
    share of such pairs ordered correctly (``accuracy``)."""
    rewards = []
    for start in range(0, len(tokenized), batch_size):
        idx = list(range(start, min(start + batch_size, len(tokenized))))
        batch = {k: v.to(device) for k, v in collate_single(tokenized, idx, pad).items()}
        rewards.append(beta * (sequence_logps(model, batch, average=average).float().cpu() - ref_logps[idx]))
    r = torch.cat(rewards)
    labels = torch.tensor(tokenized.labels, dtype=torch.bool)
    out = {"rewards/desirable": float(r[labels].mean()) if labels.any() else 0.0,
           "rewards/undesirable": float(r[~labels].mean()) if (~labels).any() else 0.0}
    out["margin"] = out["rewards/desirable"] - out["rewards/undesirable"]
    by_row: dict[int, dict[bool, float]] = {}
    for row, lab, value in zip(tokenized.rows, tokenized.labels, r.tolist()):
        by_row.setdefault(row, {})[lab] = value
    pairs = [(v[True], v[False]) for v in by_row.values() if len(v) == 2]
    if pairs:
        out["accuracy"] = sum(c > rj for c, rj in pairs) / len(pairs)
    return out


@torch.no_grad()
def sampled_kl(policy, reference, tokenizer, prompts, max_new_tokens: int = 32, num_samples: int = 1, seed: int = 0,
               conversational: bool = False) -> float:
    """``KL(pi || pi_ref) ~= mean [log pi(y|x) - log pi_ref(y|x)]`` over ``y ~ pi(.|x)`` at temperature 1,
    scored on the exact generated token ids."""
    samples = sample_completions(policy, tokenizer, prompts, num_samples, max_new_tokens, 1.0, seed=seed,
                                 conversational=conversational)
    batch = samples.batch(tokenizer.pad_token_id, next(policy.parameters()).device)
    return float(L.sampled_kl(sequence_logps(policy, batch), sequence_logps(reference, batch)))
