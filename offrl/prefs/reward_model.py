"""Bradley-Terry reward models, optionally an ensemble (K bootstrapped heads, M models).

    L = -log sigma(r(x, y_w) - r(x, y_l))          (Bradley & Terry 1952; Ouyang et al. 2022, eq. 1)

Any Hugging Face causal LM folder can be the backbone: the LM head is replaced by a fresh
linear scoring head read at the last non-pad token. The ensemble's spread is the uncertainty
that the RLHF trainers can subtract (``mean - c * std``) and the guardrails report watches.

With ``lora`` (``--lora R,ALPHA,DROPOUT[,TARGETS]``) the backbone's weights stay frozen: each targeted
linear layer computes ``W x + (alpha / r) B A x`` and trains ``A``, ``B`` only (``r (d_in + d_out)``
parameters), while the scoring head trains in full (peft ``modules_to_save``). ``model/`` then holds
a peft adapter (task ``SEQ_CLS``, the head's weights inside it), which every reward-model loader reads
onto the base it records; each member of an ensemble (``models > 1``) gets its own adapter.

Example::

    from offrl.prefs import RewardModelConfig, train_reward_model, score_with_reward_model
    train_reward_model("runs/sft/model", "pairs.jsonl", "runs/rm", RewardModelConfig(heads=4))
    mean, std = score_with_reward_model("runs/rm", ["sort:21="], ["12"])
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import torch

from offrl.errors import ConfigError
from offrl.prefs import losses as L
from offrl.prefs.config import LoraSpec, RewardModelConfig, parse_lora
from offrl.prefs.adapters import finish_adapter, is_adapted
from offrl.prefs.data import TokenizedPreferences
from offrl.prefs.loop import make_accelerator, run_loop, write_json
from offrl.prefs.modeling import (check_model_dir, check_safetensors_weights, collate_pairs, collate_sequences,
                                  disable_dropout, load_tokenizer)
from offrl.prefs.runs import TrainResult, finish_run, prepare_data, resume_weights, start_run


def load_reward_model(path: str, heads: int | None = None, base: str | None = None, trainable: bool = False,
                      policy_adapter: bool = False):
    """A sequence-classification model with ``heads`` scalar outputs and its tokenizer.

    ``path`` is a model folder (a causal LM gets a fresh scoring head) or a peft LoRA adapter folder
    of ``offrl prefs rm --lora`` (``adapter_config.json``, task ``SEQ_CLS``): loaded onto ``base`` (default:
    the base the adapter records) with its scoring head, unmerged, trainable when ``trainable``
    (resuming). With ``policy_adapter`` (a reward model's starting point) a policy adapter folder
    (``CAUSAL_LM``, e.g. ``offrl prefs sft --lora``'s ``model/``) is merged into its base, which gets a
    fresh scoring head; otherwise it is refused."""
    from offrl.prefs.adapters import adapter_base, adapter_task_type, is_adapter_folder, load_adapter

    check_model_dir(path)
    if is_adapter_folder(path) and not os.path.exists(os.path.join(path, "config.json")):
        base = base or adapter_base(path)
        if not base or not os.path.isdir(base):
            raise ConfigError(f"the adapter {path} records its base model as {base!r}, which is not a "
                              "folder here; fix base_model_name_or_path in its adapter_config.json.")
        if adapter_task_type(path) == "CAUSAL_LM" and policy_adapter:
            return _reward_model_on_policy_adapter(path, heads)
        if adapter_task_type(path) != "SEQ_CLS":
            raise ConfigError(f"{path} is a {adapter_task_type(path)} adapter (a policy), not a reward model; pass the "
                              "model/ folder of an `offrl prefs rm` run (or merge the adapter first with --merge-lora).")
        backbone, _ = load_reward_model(base, heads=adapter_heads(path, base))
        model = load_adapter(backbone, path, base, trainable=trainable)
        has_tokenizer = any(os.path.exists(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer_config.json"))
        tokenizer = load_tokenizer(path if has_tokenizer else base)
        model.config.pad_token_id = tokenizer.pad_token_id
        return model, tokenizer
    check_safetensors_weights(path)
    tokenizer = load_tokenizer(path)
    kwargs = {"num_labels": heads} if heads else {}
    model = _auto_sequence_classifier().from_pretrained(path, dtype=torch.float32, use_safetensors=True, **kwargs)
    model.config.pad_token_id = tokenizer.pad_token_id
    disable_dropout(model)
    return model, tokenizer


def _reward_model_on_policy_adapter(path: str, heads: int | None):
    """The base of a policy adapter with the adapter merged into its backbone and a fresh scoring head."""
    from offrl.prefs.adapters import adapter_base
    from offrl.prefs.modeling import load_causal_lm

    policy = load_causal_lm(path)  # base + adapter, merged
    model, _ = load_reward_model(adapter_base(path), heads=heads)
    backbone = getattr(model, model.base_model_prefix)
    backbone.load_state_dict(getattr(policy, policy.base_model_prefix).state_dict())
    tokenizer = load_tokenizer(path if os.path.exists(os.path.join(path, "tokenizer_config.json")) else adapter_base(path))
    return model, tokenizer


def _auto_sequence_classifier():
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification


def reward_head_names(model) -> list[str]:
    """The top-level modules of a sequence-classification model that are not its backbone: the scoring
    head, whatever the class calls it (``score`` for Llama / GPT-2, ``classifier`` for BERT ...)."""
    backbone = getattr(model, getattr(model, "base_model_prefix", ""), None)
    names = [name for name, child in model.named_children()
             if child is not backbone and any(True for _ in child.parameters())]
    if backbone is None or not names:
        raise ConfigError(f"cannot tell the scoring head of {type(model).__name__} from its backbone "
                          f"(top-level modules: {', '.join(n for n, _ in model.named_children())}); "
                          "train this reward model without --lora.")
    return names


def _head_output_name(model) -> str:
    """Qualified name of the head's last linear layer, the one with ``num_labels`` outputs."""
    heads = set(reward_head_names(model))
    found = [name for name, m in model.named_modules()
             if name.split(".", 1)[0] in heads and isinstance(m, torch.nn.Linear)
             and m.out_features == model.config.num_labels]
    if not found:
        raise ConfigError(f"the scoring head of {type(model).__name__} has no linear layer with "
                          f"{model.config.num_labels} outputs; train this reward model without --lora.")
    return found[-1]


def adapter_heads(adapter: str, base: str) -> int | None:
    """Number of reward heads of a reward-model adapter folder, read from the shape of its saved head
    (peft's ``modules_to_save``) without loading the base's weights; None if no head weight is saved."""
    from safetensors import safe_open
    from transformers import AutoConfig

    with torch.device("meta"):
        probe = _auto_sequence_classifier().from_config(AutoConfig.from_pretrained(base))
    key = f"base_model.model.{_head_output_name(probe)}.weight"
    weights = os.path.join(adapter, "adapter_model.safetensors")
    if not os.path.exists(weights):
        return None  # load_adapter names the missing file
    with safe_open(weights, "pt") as fh:
        return int(fh.get_slice(key).get_shape()[0]) if key in fh.keys() else None


def apply_reward_lora(model, spec: LoraSpec, base_path: str, seed: int = 0):
    """``model`` wrapped in a trainable peft LoRA adapter (task ``SEQ_CLS``) on the backbone's linear layers
    (``spec.targets``, default all of them), the scoring head trained in full (peft's ``modules_to_save``)."""
    from offrl.prefs.adapters import apply_lora, check_lora_targets, linear_module_names

    heads = reward_head_names(model)
    check_lora_targets(model, spec, heads)
    targets = spec.targets or tuple(linear_module_names(model, heads))
    return apply_lora(model, replace(spec, targets=targets), base_path, task_type="SEQ_CLS", modules_to_save=heads,
                      seed=seed)


def rewards(model, batch) -> torch.Tensor:
    """``(N, heads)`` rewards of the rows of a collated batch."""
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits.float()


def train_reward_model(model: str, data, out: str, config: RewardModelConfig = RewardModelConfig(),
                       resume: bool = False, progress: bool = True, _split_seed: int | None = None) -> TrainResult:
    """Bradley-Terry reward model on K bootstrapped heads (and, with ``config.models = M > 1``,
    M independently trained members)."""
    if config.models > 1:
        return _train_reward_ensemble(model, data, out, config, resume, progress)
    rm, tokenizer = _starting_reward_model(model, out, config, resume)
    _, train_tok, eval_tok, report = prepare_data(data, tokenizer, config, kind="paired", split_seed=_split_seed)
    accelerator = make_accelerator(config.mixed_precision)
    pad = tokenizer.pad_token_id
    g = torch.Generator().manual_seed(config.seed)
    bootstrap = torch.poisson(torch.ones(len(train_tok), config.heads), generator=g) if config.heads > 1 else None

    def compute(m, batch):
        r_c, r_r = rewards(m, batch).chunk(2, dim=0)  # (B, K)
        per_head = L.bradley_terry_loss(r_c, r_r)
        if bootstrap is not None:
            w = bootstrap[batch["index"].cpu()].to(per_head.device)
            loss = (per_head * w).sum() / w.sum().clamp(min=1.0)
        else:
            loss = per_head.mean()
        margin = (r_c - r_r).mean(-1)
        return loss, {"accuracy": (margin > 0).float().mean(), "margin": margin.mean()}

    def evaluate(m, step):
        if eval_tok is None:
            return {}
        return {f"eval/{k}": v for k, v in reward_model_metrics(m, eval_tok, pad, accelerator.device).items()}

    start_run(out, "reward_model", model, config, report)
    history = run_loop(accelerator=accelerator, model=rm, tokenizer=tokenizer, lengths=train_tok.lengths(),
                       collate=lambda idx: collate_pairs(train_tok, idx, pad), compute=compute, config=config,
                       out=out, evaluate=evaluate, resume=resume, progress=progress, description="reward model")
    finish_adapter(rm, tokenizer, out, config.merge_lora)
    return finish_run(out, history, report)


def _starting_reward_model(model: str, out: str, config: RewardModelConfig, resume: bool):
    """The model to train: the newest checkpoint's when resuming, else ``model`` with a fresh scoring head
    (drawn from ``config.seed``), with a fresh LoRA adapter when ``config.lora`` is set."""
    from offrl.prefs.adapters import is_adapter_folder

    spec = parse_lora(config.lora)
    weights = resume_weights(model, out, resume)
    if spec is not None and is_adapter_folder(weights) and os.path.abspath(weights) != os.path.abspath(model):
        return load_reward_model(weights, heads=config.heads, base=model, trainable=True)  # resuming an adapter run
    if spec is not None and is_adapter_folder(model):  # the new adapter must record a base folder of full weights
        raise ConfigError(f"--model {model} is an adapter folder; pass its run's merged/ folder (written with "
                          "--merge-lora) to train a LoRA reward model on it, or drop --lora to train full weights.")
    torch.manual_seed(config.seed)  # the fresh scoring head's initialisation
    rm, tokenizer = load_reward_model(weights, heads=config.heads, policy_adapter=True)
    if is_adapted(rm):  # starting from a LoRA reward model: its merged weights
        rm = rm.merge_and_unload()
    return (apply_reward_lora(rm, spec, model, config.seed) if spec is not None else rm), tokenizer


def _train_reward_ensemble(model: str, data, out: str, config: RewardModelConfig, resume: bool,
                           progress: bool) -> TrainResult:
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
    _, _, eval_tok, report = prepare_data(data, tokenizer, replace(config, models=1), kind="paired")
    metrics = {}
    if eval_tok is not None:
        metrics = {f"eval/{k}": v for k, v in reward_model_metrics(loaded, eval_tok, tokenizer.pad_token_id).items()}
    result = finish_run(out, [], report, **metrics, members=config.models)
    return TrainResult(out, histories[-1], result.summary)


@torch.no_grad()
def reward_model_metrics(model, tokenized: TokenizedPreferences, pad: int, device="cpu",
                         batch_size: int = 128) -> dict[str, float]:
    """Held-out preference accuracy, mean reward margin, ensemble disagreement and length bias.

    ``uncertainty`` is the std across heads of the margin ``r(x, y_w) - r(x, y_l)``, averaged over
    pairs (margins, unlike raw rewards, do not depend on each head's arbitrary offset);
    ``length_correlation`` is the Pearson correlation of the (head-mean) reward with the completion's
    token count over all chosen and rejected completions: a strong positive value warns that the
    model may be rewarding length rather than quality.
    """
    rewards_c, rewards_r, lengths_c, lengths_r = [], [], [], []
    models = model if isinstance(model, (list, tuple)) else [model]
    for start in range(0, len(tokenized), batch_size):
        idx = list(range(start, min(start + batch_size, len(tokenized))))
        batch = {k: v.to(device) for k, v in collate_pairs(tokenized, idx, pad).items()}
        r_c, r_r = torch.cat([rewards(m, batch) for m in models], dim=-1).chunk(2, dim=0)
        rewards_c.append(r_c.cpu())
        rewards_r.append(r_r.cpu())
        lengths_c += [len(tokenized.completions[0][i]) for i in idx]
        lengths_r += [len(tokenized.completions[1][i]) for i in idx]
    r_c, r_r = torch.cat(rewards_c), torch.cat(rewards_r)
    mean_c, mean_r = r_c.mean(-1), r_r.mean(-1)
    lengths = torch.tensor(lengths_c + lengths_r, dtype=torch.float32)
    return {
        "accuracy": float((mean_c > mean_r).float().mean()),
        "margin": float((mean_c - mean_r).mean()),
        "uncertainty": float((r_c - r_r).std(-1).mean()) if r_c.shape[-1] > 1 else 0.0,
        "length_correlation": pearson(torch.cat([mean_c, mean_r]), lengths),
    }


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation ``sum (a - a_bar)(b - b_bar) / (|a - a_bar| |b - b_bar|)``; 0 when either is constant."""
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    denom = float(a.norm() * b.norm())
    return float((a * b).sum()) / denom if denom > 0 else 0.0


def reward_model_folders(path: str) -> list[str]:
    """The model folders behind ``path``: a reward-model folder, a single-model run folder or an
    ensemble run folder (``ensemble.json``)."""
    from offrl.prefs.adapters import is_adapter_folder

    if os.path.exists(os.path.join(path, "model", "config.json")) or is_adapter_folder(os.path.join(path, "model")):
        path = os.path.join(path, "model")
    if os.path.exists(os.path.join(path, "ensemble.json")):
        with open(os.path.join(path, "ensemble.json")) as fh:
            return [os.path.join(path, m) for m in json.load(fh)["members"]]
    check_model_dir(path)
    return [path]


class RewardModelScorer:
    """Scores (prompt, completion) texts with a reward model or ensemble: ``(mean, std)`` over all heads.

    Rewards are only defined up to a per-head constant (Bradley-Terry is shift-invariant), so
    compare them between completions of one prompt, not across heads.
    """

    def __init__(self, path: str, device="cpu"):
        folders = reward_model_folders(path)
        self.path = path
        self.models = [load_reward_model(f)[0].eval().to(device) for f in folders]
        self.tokenizer = load_tokenizer(folders[0])
        self.device = device

    def check_tokenizer(self, tokenizer, flag: str = "--reward-model") -> None:
        """Refuse a policy whose tokenizer differs from the reward model's (token ids would mean other text)."""
        if self.tokenizer.get_vocab() != tokenizer.get_vocab():
            raise ConfigError(f"{flag} {self.path} uses a different tokenizer from the policy's "
                              f"({len(self.tokenizer)} vs {len(tokenizer)} tokens); train the reward model "
                              "from the policy's model folder.")

    @torch.no_grad()
    def __call__(self, prompts: list, completions: list[str], batch_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
        from offrl.prefs.chat import require_chat_template
        from offrl.prefs.data import render_example

        tokenizer = self.tokenizer
        means, stds = [], []
        eos = tokenizer.eos_token or ""
        for start in range(0, len(prompts), batch_size):
            ps, cs = prompts[start:start + batch_size], completions[start:start + batch_size]
            p_ids, c_ids = [], []
            for p, c in zip(ps, cs):
                if isinstance(p, str):
                    ids = tokenizer(p)["input_ids"]
                    p_ids.append(ids)
                    c_ids.append(tokenizer(p + c + eos)["input_ids"][len(ids):])
                else:  # a conversation: the chat template renders prompt and answer (offrl.prefs.data)
                    require_chat_template(tokenizer, "the reward model's prompts")
                    ids, rest = render_example(tokenizer, p, c, True)
                    p_ids.append(ids)
                    c_ids.append(rest)
            batch = collate_sequences(p_ids, c_ids, tokenizer.pad_token_id)
            batch = {k: v.to(self.device) for k, v in batch.items()}
            r = torch.cat([rewards(m, batch) for m in self.models], dim=-1).cpu()
            means.append(r.mean(-1))
            stds.append(r.std(-1) if r.shape[-1] > 1 else torch.zeros(r.shape[0]))
        return torch.cat(means), torch.cat(stds)


def score_with_reward_model(path: str, prompts: list[str], completions: list[str],
                            batch_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean reward, ensemble std) for each (prompt, completion) under the reward model at ``path``."""
    return RewardModelScorer(path)(prompts, completions, batch_size)
