"""A tiny verifiable task (RLVR-style) for end-to-end preference experiments without downloads.

Prompts ask for a transformation of a digit string; a program scores the answer:

    "sort:3141="     -> "1134"      (digits in ascending order)
    "reverse:3141="  -> "1413"
    "sum:3141="      -> "9"         (sum of the digits, in decimal)

``judge(prompt, response)`` gives 1.0 for the exact answer and otherwise partial credit, the
fraction of positions that match, divided by the longer of the two lengths:

    score = #{i : response[i] == target[i]} / max(len(response), len(target))

``make_task`` writes a character-level tokenizer (built with ``tokenizers``, wrapped in
``PreTrainedTokenizerFast``), a freshly initialised tiny Llama (``LlamaConfig``), noisy
demonstrations for SFT (a share of answers corrupted: a digit changed, dropped or
duplicated) and train / held-out prompt files.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass

from offrl.errors import ConfigError
from offrl.prefs.config import bounded, check_config

TASKS = ("sort", "reverse", "sum")
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
CHARACTERS = "0123456789abcdefghijklmnopqrstuvwxyz :="
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}"
    "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)
#: the ``chat`` task's turn markers and its end-of-turn token (a special token distinct from EOS).
CHAT_TOKENS = ("<|user|>", "<|assistant|>", "<|end|>")
TURN_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@dataclass(frozen=True)
class TaskConfig:
    """The synthetic task and its tiny model.

    tasks: which transformations (some of sort, reverse, sum).
    min_digits: shortest digit string.
    max_digits: longest digit string.
    train_prompts: training prompts (disjoint from the held-out ones).
    eval_prompts: held-out prompts.
    demo_noise: share of corrupted demonstrations.
    hidden_size: the Llama's hidden size.
    layers: the Llama's layers.
    heads: the Llama's attention heads.
    intermediate_size: the Llama's MLP width.
    seed: random seed of the data and the initial weights.
    chat: chat format: prompts and demonstrations as {role, content} messages, and a tokenizer whose
      chat template marks turns with <|user|> / <|assistant|> and ends them with <|end|> (not EOS).
    """

    tasks: tuple[str, ...] = ("sort", "reverse")
    min_digits: int = bounded(3, gt=0)
    max_digits: int = bounded(6, gt=0)
    train_prompts: int = bounded(4000, gt=0)
    eval_prompts: int = bounded(200, gt=0)
    demo_noise: float = bounded(0.4, ge=0, le=1)
    hidden_size: int = bounded(64, gt=0)
    layers: int = bounded(2, gt=0)
    heads: int = bounded(4, gt=0)
    intermediate_size: int = bounded(256, gt=0)
    seed: int = 0
    chat: bool = False

    def __post_init__(self) -> None:
        check_config(self)
        if self.max_digits < self.min_digits:
            raise ConfigError(f"--max-digits {self.max_digits} is below --min-digits {self.min_digits}; "
                              "raise it or lower --min-digits.")
        if self.hidden_size % self.heads:
            raise ConfigError(f"--hidden-size {self.hidden_size} is not a multiple of --heads {self.heads}; "
                              "pick sizes that divide.")


def target(prompt: str) -> str:
    """The correct answer for a task prompt ``"<task>:<digits>="``."""
    task, digits = parse_prompt(prompt)
    if task == "sort":
        return "".join(sorted(digits))
    if task == "reverse":
        return digits[::-1]
    return str(sum(int(d) for d in digits))


def parse_prompt(prompt) -> tuple[str, str]:
    if isinstance(prompt, list):  # conversational: the last user message holds the task
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if not users:
            raise ConfigError(f"prompt {prompt!r} has no user message holding a digits-task prompt like 'sort:3141='.")
        prompt = users[-1]
    try:
        task, rest = prompt.split(":", 1)
        digits = rest.rstrip("=")
    except ValueError:
        raise ConfigError(f"prompt {prompt!r} is not a digits-task prompt like 'sort:3141='.") from None
    if task not in TASKS or not digits.isdigit():
        raise ConfigError(f"prompt {prompt!r} is not a digits-task prompt like 'sort:3141='.")
    return task, digits


def judge(prompt: str, response: str) -> float:
    """Programmatic reward in [0, 1]: 1 for the exact answer, else positional partial credit."""
    answer = target(prompt)
    response = response.strip()
    if response == answer:
        return 1.0
    if not response:
        return 0.0
    matches = sum(a == b for a, b in zip(response, answer))
    return matches / max(len(response), len(answer))


def make_prompts(n: int, cfg: TaskConfig, rng: random.Random, exclude: set[str] | None = None) -> list[str]:
    exclude = exclude or set()
    seen: set[str] = set()
    out = []
    while len(out) < n:
        task = rng.choice(cfg.tasks)
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(cfg.min_digits, cfg.max_digits)))
        prompt = f"{task}:{digits}="
        if prompt in exclude or prompt in seen:
            continue
        seen.add(prompt)
        out.append(prompt)
    return out


def corrupt(answer: str, rng: random.Random) -> str:
    """One random edit of the answer: change, drop or duplicate a digit."""
    i = rng.randrange(len(answer))
    kind = rng.choice(("change", "drop", "duplicate")) if len(answer) > 1 else "change"
    if kind == "change":
        return answer[:i] + rng.choice([d for d in "0123456789" if d != answer[i]]) + answer[i + 1:]
    if kind == "drop":
        return answer[:i] + answer[i + 1:]
    return answer[:i] + answer[i] + answer[i:]


def build_tokenizer(chat: bool = False):
    """Character-level tokenizer: one token per character, ``<bos>`` prepended, ``<eos>`` as EOS;
    with ``chat``, also the special tokens of :data:`CHAT_TOKENS` and :data:`TURN_TEMPLATE`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(list(SPECIAL_TOKENS) + list(CHARACTERS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    bos = vocab["<bos>"]
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A $B",
                                                       special_tokens=[("<bos>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    if chat:
        fast.add_special_tokens({"additional_special_tokens": list(CHAT_TOKENS)})
        fast.chat_template = TURN_TEMPLATE
    return fast


def as_chat(prompt: str) -> list[dict[str, str]]:
    """A task prompt as a one-message conversation."""
    return [{"role": "user", "content": prompt}]


def build_model(cfg: TaskConfig, tokenizer):
    """A freshly initialised tiny Llama sized for the task."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(cfg.seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
        max_position_embeddings=64, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def make_task(out: str, cfg: TaskConfig = TaskConfig()) -> dict[str, str]:
    """Write ``model/`` (random init + tokenizer), ``demos.jsonl`` (noisy SFT data),
    ``prompts_train.jsonl`` and ``prompts_eval.jsonl`` under ``out``; returns their paths."""
    import json

    from offrl.prefs.data import write_jsonl

    for t in cfg.tasks:
        if t not in TASKS:
            raise ConfigError(f"task {t!r} is unknown; use some of {TASKS}.")
    rng = random.Random(cfg.seed)
    eval_prompts = make_prompts(cfg.eval_prompts, cfg, rng)
    train_prompts = make_prompts(cfg.train_prompts, cfg, rng, exclude=set(eval_prompts))
    demos = []
    for p in train_prompts:
        answer = target(p)
        noisy = rng.random() < cfg.demo_noise
        demos.append({"prompt": as_chat(p) if cfg.chat else p, "completion": corrupt(answer, rng) if noisy else answer})
    tokenizer = build_tokenizer(cfg.chat)
    model = build_model(cfg, tokenizer)
    paths = {
        "model": os.path.join(out, "model"),
        "demos": os.path.join(out, "demos.jsonl"),
        "prompts_train": os.path.join(out, "prompts_train.jsonl"),
        "prompts_eval": os.path.join(out, "prompts_eval.jsonl"),
    }
    model.save_pretrained(paths["model"])
    tokenizer.save_pretrained(paths["model"])
    write_jsonl(paths["demos"], demos)
    shown = as_chat if cfg.chat else (lambda p: p)
    write_jsonl(paths["prompts_train"], [{"prompt": shown(p)} for p in train_prompts])
    write_jsonl(paths["prompts_eval"], [{"prompt": shown(p)} for p in eval_prompts])
    with open(os.path.join(out, "task.json"), "w") as fh:
        json.dump({**asdict(cfg), "paths": paths}, fh, indent=1)
    return paths


def read_prompts(path: str) -> list[str]:
    """Prompts from a JSONL file of ``{"prompt": ...}`` rows (or any preference file's prompts, deduplicated)."""
    import json

    from offrl.errors import DatasetError
    from offrl.prefs.data import read_numbered_rows

    rows, name, numbers, unit = read_numbered_rows(path)
    prompts, seen = [], set()
    for i, r in zip(numbers, rows):
        if "prompt" not in r:
            raise DatasetError(f"{name} {unit} {i} has no 'prompt' field; each row needs one.")
        key = r["prompt"] if isinstance(r["prompt"], str) else json.dumps(r["prompt"], sort_keys=True)
        if key not in seen:
            seen.add(key)
            prompts.append(r["prompt"])
    return prompts


def make_oracle_pairs(prompts: list[str], seed: int = 0) -> list[dict]:
    """Pairs whose chosen completion is the exact answer and rejected one a single-edit corruption
    (a clean, judge-consistent preference set for tests and reward-model sanity checks)."""
    rng = random.Random(seed)
    return [{"prompt": p, "chosen": target(p), "rejected": corrupt(target(p), rng)} for p in prompts]
