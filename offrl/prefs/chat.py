"""Chat-format prompts: rendering with the tokenizer's chat template and the template's stop tokens.

A prompt is either plain text (a string, tokenized as it is, with the tokenizer's special tokens)
or a conversation, a list of ``{"role", "content"}`` messages, rendered by the tokenizer's own
chat template with the assistant's turn opened:

    text(x) = apply_chat_template(x, add_generation_prompt=True, tokenize=False)

and tokenized without adding special tokens again (the template writes its own BOS). Generation
stops at the first *stop token*: the tokenizer's EOS, the model's ``generation_config`` EOS ids,
and the end-of-turn token the template writes after an assistant message (``<|im_end|>``,
``<|eot_id|>``, ``<end_of_turn>``, ...), found by rendering a short conversation and reading the
first special token after the assistant's content.

Example::

    ids = prompt_ids(tokenizer, [{"role": "user", "content": "sort:312="}])
    stops = stop_token_ids(tokenizer)          # e.g. [eos, <|im_end|>]
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from offrl.errors import ConfigError

_CONTENT = "offrl-end-of-content"


def is_conversation(value: Any) -> bool:
    """A non-empty list of ``{"role", "content"}`` messages."""
    return (isinstance(value, list) and len(value) > 0
            and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in value))


def prompt_key(prompt: Any) -> str:
    """A hashable key for a plain or chat prompt."""
    import json

    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def require_chat_template(tokenizer, source: str = "the prompts") -> None:
    """Refuse chat-format data for a tokenizer without a chat template, in one sentence."""
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"{source} holds chat-format prompts (lists of {{role, content}} messages), but the model's "
                          "tokenizer has no chat template; set one (tokenizer.chat_template = '<jinja template>', then "
                          "save_pretrained into the model folder) or pass plain-text prompts.")


def render_prompt(tokenizer, prompt: Any) -> str:
    """The text the model sees: a string as it is, a conversation through the chat template with
    the assistant's turn opened (``add_generation_prompt=True``)."""
    if isinstance(prompt, str):
        return prompt
    if not is_conversation(prompt):
        raise ConfigError(f"prompt {prompt!r} is neither a string nor a list of {{role, content}} messages.")
    require_chat_template(tokenizer)
    return tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=False)


def prompt_ids(tokenizer, prompt: Any) -> list[int]:
    """Token ids of :func:`render_prompt` (special tokens added for plain text only)."""
    return list(tokenizer(render_prompt(tokenizer, prompt), add_special_tokens=isinstance(prompt, str))["input_ids"])


def _special_ids(tokenizer) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for i, token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(token, "special", False):
            ids.add(int(i))
    return ids


def end_of_turn_id(tokenizer) -> int | None:
    """The special token the chat template writes right after an assistant message, if any."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"},
                                              {"role": "assistant", "content": _CONTENT}], tokenize=False)
    except Exception:  # noqa: BLE001 - a template with other rules (roles, a system turn): EOS only
        return None
    at = text.rfind(_CONTENT)
    if at < 0:
        return None
    suffix = text[at + len(_CONTENT):]
    ids = tokenizer(suffix, add_special_tokens=False)["input_ids"] if suffix else []
    return int(ids[0]) if ids and ids[0] in _special_ids(tokenizer) else None


def stop_token_ids(tokenizer, generation_config=None) -> list[int]:
    """The ids that end a response: the tokenizer's EOS, ``generation_config.eos_token_id`` (an
    int or a list) and the template's end-of-turn token, without repeats (EOS first)."""
    found: list[int] = []

    def add(value) -> None:
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            if v is not None and int(v) not in found:
                found.append(int(v))

    add(tokenizer.eos_token_id)
    add(getattr(generation_config, "eos_token_id", None))
    add(end_of_turn_id(tokenizer))
    return found


def first_stop_mask(responses, stop_ids: Sequence[int]):
    """``(B, T)`` long mask, 1 up to and including each row's first stop token (all 1 without one)."""
    import torch

    is_stop = torch.isin(responses, torch.tensor(list(stop_ids), device=responses.device))
    after = (is_stop.long().cumsum(-1) - is_stop.long()) > 0
    return (~after).long()


def encode_prompts(tokenizer, prompts: Sequence[Any], device="cpu"):
    """Left-padded ``(input_ids, attention_mask)`` of the rendered prompts (plain and chat prompts may mix)."""
    import torch

    ids = [prompt_ids(tokenizer, p) for p in prompts]
    width = max(len(i) for i in ids)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
    attention = torch.zeros((len(ids), width), dtype=torch.long)
    for row, seq in enumerate(ids):
        if seq:
            input_ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            attention[row, width - len(seq):] = 1
    return input_ids.to(device), attention.to(device)
