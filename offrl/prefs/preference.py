"""Offline preference optimisation against a fixed reference (DPO, IPO, cDPO, rDPO, KTO) or
without one (SimPO, CPO, ORPO).

The trainer tokenizes validated data, computes the reference log-probs once and caches them in
``<out>/reference_logps.safetensors`` (the reference model is then freed unless the sampled-KL
monitor needs it; the reference-free losses skip it), and hands a ``compute(model, batch)`` built from the loss functions of
:mod:`offrl.prefs.losses` to :func:`offrl.prefs.loop.run_loop`.

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
import random

import torch

from offrl.prefs import losses as L
from offrl.prefs.adapters import AdapterDisabled, finish_adapter
from offrl.prefs.modeling import load_policy
from offrl.prefs.config import PREFERENCE_LOSSES, REFERENCE_FREE, PreferenceConfig, parse_lora
from offrl.prefs.data import TokenizedPreferences
from offrl.prefs.evaluation import implicit_reward_metrics, kto_eval_metrics, sampled_kl
from offrl.prefs.loop import make_accelerator, run_loop
from offrl.prefs.modeling import (
    collate_pairs,
    collate_single,
    load_causal_lm,
    load_tokenizer,
    reference_logps,
    sequence_from_tokens,
    sequence_logps,
    token_logps,
)
from offrl.prefs.runs import TrainResult, finish_run, prepare_data, resume_weights, start_run

__all__ = ["PREFERENCE_LOSSES", "PreferenceConfig", "train_preferences", "cached_reference_logps",
           "add_mismatched_slot"]


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
    reference_path = config.reference or model
    tokenizer = load_tokenizer(model)
    lora = parse_lora(config.lora)
    policy = load_policy(model, resume_weights(model, out, resume), lora, config.seed)
    kto = config.loss == "kto"
    dataset, train_tok, eval_tok, report = prepare_data(data, tokenizer, config, kind="unpaired" if kto else "paired")
    if kto:
        add_mismatched_slot(train_tok, config.max_length, config.seed)
    accelerator = make_accelerator(config.mixed_precision)
    device = accelerator.device
    pad = tokenizer.pad_token_id
    average = (config.length_normalize if config.length_normalize is not None
               else config.loss in ("ipo", "simpo", "orpo"))
    reference_free = config.loss in REFERENCE_FREE

    cache = reference_cache or os.path.join(out, "reference_logps.safetensors")
    if lora is not None and config.reference in (None, model):  # the base = the policy with its adapter off
        reference = AdapterDisabled(policy.to(device))
    else:
        reference = load_causal_lm(reference_path).to(device) if config.kl_prompts > 0 else reference_path
    if reference_free:  # no reference log-probs: the implicit rewards are beta * log pi itself
        ref_train = torch.zeros((len(train_tok), 2))
        ref_eval = torch.zeros((len(eval_tok), 2)) if eval_tok else None
    else:
        with accelerator.main_process_first():  # the main process writes the cache; the others then read it
            ref_train = cached_reference_logps(reference, train_tok, pad, cache, average, device, reference_path,
                                               accelerator.autocast)
            ref_eval = (cached_reference_logps(reference, eval_tok, pad,
                                               cache.replace(".safetensors", "_eval.safetensors"), average, device,
                                               reference_path, accelerator.autocast) if eval_tok else None)
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
        if reference_free:
            return reference_free_objective(m, batch, config, average)
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

    start_run(out, config.loss, model, config, report, reference_model=reference_path)
    history = run_loop(accelerator=accelerator, model=policy, tokenizer=tokenizer, lengths=train_tok.lengths(),
                       collate=(lambda idx: _collate_kto(train_tok, idx, pad)) if kto else
                       (lambda idx: collate_pairs(train_tok, idx, pad)),
                       compute=compute, config=config, out=out, evaluate=evaluate, resume=resume,
                       progress=progress, description=config.loss)
    finish_adapter(policy, tokenizer, out, config.merge_lora)
    return finish_run(out, history, report)


def _collate_kto(tokenized: TokenizedPreferences, indices, pad: int) -> dict[str, torch.Tensor]:
    batch = collate_single(tokenized, indices, pad)
    batch.update({f"kl_{k}": v for k, v in collate_single(tokenized, indices, pad, slot=1).items() if k != "labels"})
    return batch


def reference_free_objective(model, batch: dict[str, torch.Tensor], config: PreferenceConfig,
                             average: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SimPO, CPO or ORPO on one batch of ``2B`` rows (chosen first): one forward pass gives the
    sequence log-probs and the chosen completions' per-token NLL (the mean over their tokens, as
    TRL's CPO/ORPO trainers take it)."""
    tokens, mask = token_logps(model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    logps = sequence_from_tokens(tokens, mask, average)
    pi_c, pi_r = logps.chunk(2, dim=0)
    n = pi_c.shape[0]
    nll = L.sft_loss(tokens[:n], mask[:n])
    if config.loss == "simpo":
        losses, r_c, r_r = L.simpo_loss(pi_c, pi_r, config.beta, config.simpo_gamma, config.label_smoothing)
    elif config.loss == "cpo":
        losses, r_c, r_r = L.cpo_loss(pi_c, pi_r, nll, config.beta, config.cpo_alpha, config.label_smoothing)
    else:
        losses, r_c, r_r = L.orpo_loss(pi_c, pi_r, nll, config.beta)
    metrics = {"rewards/chosen": r_c.mean(), "rewards/rejected": r_r.mean(), "rewards/margin": (r_c - r_r).mean(),
               "rewards/accuracy": (r_c > r_r).float().mean(), "logps/chosen": pi_c.detach().mean(),
               "logps/rejected": pi_r.detach().mean(), "nll": nll.detach()}
    if config.loss == "orpo":
        metrics["log_odds_ratio"] = L.log_odds_ratio(pi_c.detach(), pi_r.detach()).mean()
    return losses.mean(), metrics


def _paired_loss(config: PreferenceConfig, pi_c, pi_r, ref_c, ref_r):
    if config.loss in ("cdpo", "rdpo"):
        return L.PAIRED_LOSSES[config.loss](pi_c, pi_r, ref_c, ref_r, config.beta, config.label_smoothing)
    return L.PAIRED_LOSSES[config.loss](pi_c, pi_r, ref_c, ref_r, config.beta)
