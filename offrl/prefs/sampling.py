"""offrl's own sampling loop for Llama-style decoders: one prefill per distinct prompt, a static KV
cache, and the policy's log-probs and entropy of every sampled token taken from the logits it
sampled from.

For a prompt ``x`` (left-padded to width ``P``, ``n`` real tokens) and ``G`` samples of at most
``T`` tokens, at step ``t``

    p_t = softmax(z_t / tau),   y_t ~ p_t,   log pi_old(y_t) = log p_t(y_t),   H_t = -sum_v p_t(v) log p_t(v)

where ``z_t`` are the logits of the last position (``x, y_<t`` at positions ``0 .. n + t - 1``,
the same position ids ``generate`` and :func:`offrl.prefs.rollout.response_logps` use). The
prompt is run once and its keys/values are copied to its ``G`` rows (prefix sharing); every
decode step writes one column of a cache allocated once for ``P + T`` positions. Sampling is
``torch.multinomial`` over the ``(B G, V)`` probabilities each step, as Hugging Face ``generate``
does, so a seed gives the same draws; rows that have stopped keep being fed (their tokens are
masked afterwards) and the loop ends when every row has stopped.

The layers are called module by module (``q_proj``, ``mlp``, the norms, ``rotary_emb``), so a
peft LoRA adapter inside them applies (and ``disable_adapter`` switches it off); what Hugging
Face's forward adds around them per call (mask construction, output capture, cache objects) is
what this loop saves. :func:`grouped_response_logits` uses the same prefix sharing for the
log-prob passes over finished rollouts (reference and training, differentiable): each prompt
runs once and its ``G`` responses attend to its keys and values. Models of another
architecture, or whose generation config asks for a logits processor, return ``None`` from
:func:`decoder_parts` and go through ``generate`` and the model's own forward.

Example::

    parts = decoder_parts(policy)
    if parts is not None:
        tokens, logps, entropy = sample_with_cache(parts, prompt_ids, prompt_mask, group_size=4,
                                                   max_new_tokens=16, stop_ids=[eos], pad_id=pad)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

Tensor = torch.Tensor

SUPPORTED = ("llama", "qwen2")  # decoder layers: norm -> attention (rotary, GQA) -> norm -> gated MLP
_PROCESSOR_DEFAULTS = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "bad_words_ids": None,
                       "min_length": 0, "min_new_tokens": None, "suppress_tokens": None,
                       "begin_suppress_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
                       "encoder_repetition_penalty": 1.0, "sequence_bias": None, "epsilon_cutoff": 0.0,
                       "eta_cutoff": 0.0, "typical_p": 1.0, "min_p": None, "exponential_decay_length_penalty": None}


@dataclass(frozen=True)
class DecoderParts:
    """The modules of a Llama-style causal LM that the loop calls."""

    embed: torch.nn.Module
    layers: Sequence[torch.nn.Module]
    norm: torch.nn.Module
    rotary: torch.nn.Module
    head: torch.nn.Module
    heads: int
    kv_heads: int
    head_dim: int


def decoder_parts(model) -> DecoderParts | None:
    """The parts of ``model`` (a Hugging Face causal LM, possibly inside a peft wrapper) if it is of a
    supported architecture without sliding-window attention, attention dropout or gradient
    checkpointing, and its generation config asks for no logits processor; else ``None``."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(inner, "config", None)
    if getattr(config, "model_type", None) not in SUPPORTED or getattr(config, "use_sliding_window", False):
        return None
    checkpointing = "is_activation_checkpointing" if hasattr(type(inner), "is_activation_checkpointing") else \
        "is_gradient_checkpointing"
    if getattr(config, "attention_dropout", 0.0) or getattr(inner, checkpointing, False):
        return None
    body = getattr(inner, "model", None)
    if not all(hasattr(body, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return None
    generation = getattr(inner, "generation_config", None)
    for field, default in _PROCESSOR_DEFAULTS.items():
        value = getattr(generation, field, default)
        if value is not None and value != default:
            return None
    attn = body.layers[0].self_attn
    heads = config.num_attention_heads
    return DecoderParts(body.embed_tokens, list(body.layers), body.norm, body.rotary_emb, inner.lm_head, heads,
                        getattr(config, "num_key_value_heads", None) or heads, attn.head_dim)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _layer(layer, h: Tensor, cos: Tensor, sin: Tensor, parts: DecoderParts, k_cache: Tensor, v_cache: Tensor,
           at: int, mask: Tensor) -> Tensor:
    """One decoder layer over ``h`` ``(N, S, H)`` at cache columns ``at .. at + S - 1``; attends to
    columns ``< at + S`` where ``mask`` ``(N, 1, S, at + S)`` allows."""
    N, S, _ = h.shape
    attn = layer.self_attn
    x = layer.input_layernorm(h)
    q = attn.q_proj(x).view(N, S, parts.heads, parts.head_dim).transpose(1, 2)
    k = attn.k_proj(x).view(N, S, parts.kv_heads, parts.head_dim).transpose(1, 2)
    v = attn.v_proj(x).view(N, S, parts.kv_heads, parts.head_dim).transpose(1, 2)
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    k_cache[:, :, at:at + S] = k
    v_cache[:, :, at:at + S] = v
    keys, values = k_cache[:, :, :at + S], v_cache[:, :, :at + S]
    out = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling,
                                                           enable_gqa=parts.kv_heads != parts.heads)
    h = h + attn.o_proj(out.transpose(1, 2).reshape(N, S, -1))
    return h + layer.mlp(layer.post_attention_layernorm(h))


def _prefix_mask(attention_mask: Tensor) -> Tensor:
    """``(N, 1, S, S)``: causal, padded keys hidden; a padded query sees itself (no empty row)."""
    S = attention_mask.shape[1]
    causal = torch.ones(S, S, dtype=torch.bool, device=attention_mask.device).tril()
    eye = torch.eye(S, dtype=torch.bool, device=attention_mask.device)
    return ((causal[None] & attention_mask.bool()[:, None, :]) | eye[None])[:, None]


def grouped_response_logits(parts: DecoderParts, input_ids: Tensor, attention_mask: Tensor, prompt_width: int,
                            group_size: int) -> Tensor | None:
    """Float logits ``(B G, T, V)`` that predict the ``T`` response tokens of rows whose ``G`` members
    share their prompt (columns ``< prompt_width``): each prompt is run once, its keys and values
    copied to its ``G`` rows, and the responses attend to them, as in one forward pass over the whole
    sequences (same position ids ``cumsum(mask) - 1``); differentiable. ``None`` if some group's
    prompts differ."""
    N, width = input_ids.shape
    P, G, T = prompt_width, group_size, width - prompt_width
    prompt_ids, prompt_mask = input_ids[::G, :P], attention_mask[::G, :P]
    if N % G or not (torch.equal(input_ids[:, :P], prompt_ids.repeat_interleave(G, 0))
                     and torch.equal(attention_mask[:, :P], prompt_mask.repeat_interleave(G, 0))):
        return None
    device = input_ids.device
    lengths = prompt_mask.sum(-1, keepdim=True).repeat_interleave(G, 0)
    h_p = parts.embed(prompt_ids)
    cos_p, sin_p = parts.rotary(h_p, (prompt_mask.cumsum(-1) - 1).clamp(min=0))
    h_r = parts.embed(input_ids[:, P:])
    cos_r, sin_r = parts.rotary(h_r, lengths + torch.arange(T, device=device))
    cos_p, sin_p, cos_r, sin_r = cos_p[:, None], sin_p[:, None], cos_r[:, None], sin_r[:, None]
    mask_p = _prefix_mask(prompt_mask)
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    own = (causal[None] & attention_mask[:, None, P:].bool()) | torch.eye(T, dtype=torch.bool, device=device)[None]
    mask_r = torch.cat([prompt_mask.bool().repeat_interleave(G, 0)[:, None, :].expand(N, T, P), own], -1)[:, None]
    for layer in parts.layers:
        attn = layer.self_attn
        x_p, x_r = layer.input_layernorm(h_p), layer.input_layernorm(h_r)
        q_p, k_p, v_p = (_heads(proj(x_p), n, parts.head_dim) for proj, n in
                         ((attn.q_proj, parts.heads), (attn.k_proj, parts.kv_heads), (attn.v_proj, parts.kv_heads)))
        q_r, k_r, v_r = (_heads(proj(x_r), n, parts.head_dim) for proj, n in
                         ((attn.q_proj, parts.heads), (attn.k_proj, parts.kv_heads), (attn.v_proj, parts.kv_heads)))
        q_p, k_p = _rotate(q_p, cos_p, sin_p), _rotate(k_p, cos_p, sin_p)
        q_r, k_r = _rotate(q_r, cos_r, sin_r), _rotate(k_r, cos_r, sin_r)
        gqa = parts.kv_heads != parts.heads
        out_p = torch.nn.functional.scaled_dot_product_attention(q_p, k_p, v_p, attn_mask=mask_p, scale=attn.scaling,
                                                                 enable_gqa=gqa)
        keys = torch.cat([k_p.repeat_interleave(G, 0), k_r], 2)
        values = torch.cat([v_p.repeat_interleave(G, 0), v_r], 2)
        out_r = torch.nn.functional.scaled_dot_product_attention(q_r, keys, values, attn_mask=mask_r,
                                                                 scale=attn.scaling, enable_gqa=gqa)
        h_p = h_p + attn.o_proj(out_p.transpose(1, 2).flatten(2))
        h_r = h_r + attn.o_proj(out_r.transpose(1, 2).flatten(2))
        h_p = h_p + layer.mlp(layer.post_attention_layernorm(h_p))
        h_r = h_r + layer.mlp(layer.post_attention_layernorm(h_r))
    first = _logits(parts, h_p[:, -1:]).repeat_interleave(G, 0)
    return torch.cat([first, _logits(parts, h_r[:, :-1])], 1)


def _heads(x: Tensor, n: int, head_dim: int) -> Tensor:
    return x.view(*x.shape[:2], n, head_dim).transpose(1, 2)


def _logits(parts: DecoderParts, h: Tensor) -> Tensor:
    return parts.head(parts.norm(h)).float()


def _token_stats(logits: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
    logp = logits.log_softmax(-1)
    return logp.gather(-1, tokens[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


@torch.no_grad()
def sample_with_cache(parts: DecoderParts, prompt_ids: Tensor, prompt_mask: Tensor, group_size: int,
                      max_new_tokens: int, stop_ids: Sequence[int], pad_id: int,
                      temperature: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """``group_size`` samples of each (left-padded, ``(B, P)``) prompt; rows ``i G .. i G + G - 1``
    belong to prompt ``i``. Returns ``(tokens, logps, entropy)``, each ``(B G, T')`` with ``T' <=
    max_new_tokens`` (the loop stops once every row has produced a stop token); tokens after a row's
    first stop token are ``pad_id``. Uses the global torch RNG."""
    B, P = prompt_ids.shape
    N, T = B * group_size, max_new_tokens
    device = prompt_ids.device
    mask_bool = prompt_mask.bool()
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    prefill_mask = _prefix_mask(prompt_mask)
    h = parts.embed(prompt_ids)
    cos, sin = parts.rotary(h, positions)
    cos, sin = cos[:, None], sin[:, None]
    dtype = h.dtype
    caches = [(torch.empty(B, parts.kv_heads, P + T, parts.head_dim, dtype=dtype, device=device),
               torch.empty(B, parts.kv_heads, P + T, parts.head_dim, dtype=dtype, device=device)) for _ in parts.layers]
    for layer, (kc, vc) in zip(parts.layers, caches):
        h = _layer(layer, h, cos, sin, parts, kc, vc, 0, prefill_mask)
    logits = _logits(parts, h[:, -1]).repeat_interleave(group_size, 0)
    if group_size > 1:  # prefix sharing: the prompt's keys and values, copied to its G rows
        caches = [(kc.repeat_interleave(group_size, 0), vc.repeat_interleave(group_size, 0)) for kc, vc in caches]
    key_valid = torch.ones(N, P + T, dtype=torch.bool, device=device)
    key_valid[:, :P] = mask_bool.repeat_interleave(group_size, 0)
    steps = positions[:, -1:].repeat_interleave(group_size, 0) + 1 + torch.arange(T, device=device)
    cos_all, sin_all = parts.rotary(h, steps)  # every decode step's rotation, computed once
    stops = torch.tensor(list(stop_ids), device=device)
    running = torch.ones(N, dtype=torch.bool, device=device)
    tokens, logps, entropy = [], [], []
    for t in range(T):
        scaled = logits / temperature if temperature != 1.0 else logits
        token = torch.multinomial(scaled.softmax(-1), num_samples=1).squeeze(1)
        token = torch.where(running, token, torch.full_like(token, pad_id))
        lp, ent = _token_stats(scaled, token)
        tokens.append(token)
        logps.append(lp)
        entropy.append(ent)
        running = running & ~torch.isin(token, stops)
        if t == T - 1 or not bool(running.any()):
            break
        h = parts.embed(token[:, None])
        cos, sin = cos_all[:, None, t:t + 1], sin_all[:, None, t:t + 1]
        step_mask = key_valid[:, None, None, :P + t + 1]
        for layer, (kc, vc) in zip(parts.layers, caches):
            h = _layer(layer, h, cos, sin, parts, kc, vc, P + t, step_mask)
        logits = _logits(parts, h[:, -1])
    return torch.stack(tokens, 1), torch.stack(logps, 1), torch.stack(entropy, 1)
