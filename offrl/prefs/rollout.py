"""The one rollout of the online trainers (PPO, GRPO, RLOO, iterative DPO): batched sampling with
the KV cache, then per-token log-probs of the sampled responses under any model.

Llama-style policies are sampled by :func:`offrl.prefs.sampling.sample_with_cache` (each prompt
prefilled once for its group, a static cache, no per-step Hugging Face overhead), which also
returns ``log pi_old`` and the entropy of every sampled token from the logits it sampled from
(``Rollout.logps`` / ``Rollout.entropy``), so the trainers need no second policy pass; other
models go through ``model.generate``, whose samples are the same for a seed.

Rows are ``prompt_i`` repeated ``group_size`` times (rows ``i*G ... i*G+G-1``). A prompt is plain
text or a conversation rendered by the tokenizer's chat template (:mod:`offrl.prefs.chat`).
Prompts are left-padded, responses right-padded after their first stop token (EOS or the
template's end-of-turn token, kept, so that the policy learns to stop); ``response_mask`` marks
real response tokens. Log-probs are recomputed with one forward
pass over the finished sequences with the same position ids ``generate`` used, so that
``log pi_old`` is exact for the sampled tokens.

Example::

    rollout = generate_rollout(policy, tokenizer, prompts, group_size=4, max_new_tokens=16, seed=step)
    logps, entropy, _ = response_logps(policy, rollout)       # (B, T) each
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from offrl.errors import ConfigError

Tensor = torch.Tensor


@dataclass
class Rollout:
    """Sampled responses as tensors: ``input_ids`` / ``attention_mask`` ``(B, P + T)``,
    ``response_mask`` ``(B, T)``, ``prompt_width`` ``P``; and as text."""

    prompts: list
    texts: list[str]
    input_ids: Tensor
    attention_mask: Tensor
    response_mask: Tensor
    prompt_width: int
    group_size: int = 1
    logps: Tensor | None = None  # log pi_old per response token from the sampling pass (0 outside the mask)
    entropy: Tensor | None = None  # pi's entropy at each response position, likewise
    temperature: float | None = None  # the temperature those two were taken at

    @property
    def responses(self) -> Tensor:
        return self.input_ids[:, self.prompt_width:]

    def rows(self, index: Tensor) -> "Rollout":
        """The rollout restricted to the given rows (a minibatch); still grouped if they are whole groups in order."""
        idx = index.tolist()
        pick = (lambda x: None if x is None else x[index])
        G = self.group_size
        whole_groups = G > 1 and len(idx) % G == 0 and all(
            idx[j] % G == 0 and idx[j:j + G] == list(range(idx[j], idx[j] + G)) for j in range(0, len(idx), G))
        return Rollout([self.prompts[i] for i in idx], [self.texts[i] for i in idx], self.input_ids[index],
                       self.attention_mask[index], self.response_mask[index], self.prompt_width,
                       G if whole_groups else 1,
                       pick(self.logps), pick(self.entropy), self.temperature)

    def sampled_logps(self, temperature: float) -> tuple[Tensor, Tensor] | None:
        """``(log pi_old, entropy)`` from the sampling pass if it ran at ``temperature``, else ``None``."""
        if self.logps is None or self.entropy is None or self.temperature != temperature:
            return None
        return self.logps, self.entropy


def context_size(model) -> int | None:
    """The number of positions the model supports (``max_position_embeddings``), if it says."""
    return getattr(getattr(model, "config", None), "max_position_embeddings", None)


def check_prompt_lengths(tokenizer, prompts: Sequence, max_new_tokens: int, context: int | None,
                         source: str = "prompts") -> None:
    """Refuse chat prompts for a tokenizer without a chat template, and a prompt whose (rendered)
    tokens plus ``max_new_tokens`` exceed the model's context."""
    from offrl.prefs.chat import is_conversation, prompt_ids, require_chat_template

    if any(is_conversation(p) for p in prompts):
        require_chat_template(tokenizer, source)
    if context is None:
        return
    for i, p in enumerate(prompts):
        n = len(prompt_ids(tokenizer, p))
        if n + max_new_tokens > context:
            raise ConfigError(f"{source} row {i} has {n} tokens, and with --max-new-tokens {max_new_tokens} that "
                              f"exceeds the model's context of {context} positions; shorten the prompt or lower "
                              "--max-new-tokens.")


@torch.no_grad()
def generate_rollout(policy, tokenizer, prompts: Sequence, group_size: int = 1, max_new_tokens: int = 16,
                     temperature: float = 1.0, seed: int = 0) -> Rollout:
    """``group_size`` samples per prompt from ``policy`` at ``temperature`` (no top-k / top-p:
    draws from pi itself), one batched pass with the KV cache (offrl's sampling loop where
    :func:`offrl.prefs.sampling.decoder_parts` supports the model, else ``generate``), stopped at
    the stop tokens of :func:`offrl.prefs.chat.stop_token_ids`. The global torch RNG is left as it
    was; ``seed`` alone fixes the samples."""
    from offrl.prefs.chat import encode_prompts, first_stop_mask, stop_token_ids
    from offrl.prefs.sampling import decoder_parts, sample_with_cache

    device = next(policy.parameters()).device
    was_training = policy.training
    policy.eval()
    rng_state = torch.get_rng_state()
    cuda_state = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    torch.manual_seed(seed)
    flat = [p for p in prompts for _ in range(group_size)]
    stops, pad = stop_token_ids(tokenizer, getattr(policy, "generation_config", None)), tokenizer.pad_token_id
    parts = decoder_parts(policy)
    logps = entropy = None
    try:
        if parts is not None:
            unique_ids, unique_mask = encode_prompts(tokenizer, list(prompts), device)
            responses, logps, entropy = sample_with_cache(parts, unique_ids, unique_mask, group_size, max_new_tokens,
                                                          stops, pad, temperature)
            prompt_ids = unique_ids.repeat_interleave(group_size, 0)
            prompt_mask = unique_mask.repeat_interleave(group_size, 0)
        else:
            prompt_ids, prompt_mask = encode_prompts(tokenizer, flat, device)
            out = policy.generate(input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=True,
                                  temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                                  pad_token_id=pad, eos_token_id=stops)
            responses = out[:, prompt_ids.shape[1]:]
    finally:
        torch.set_rng_state(rng_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state_all(cuda_state)
        if was_training:
            policy.train()
    width = prompt_ids.shape[1]
    response_mask = first_stop_mask(responses, stops)
    responses = responses.masked_fill(response_mask == 0, pad)
    if logps is not None:
        logps, entropy = logps * response_mask, entropy * response_mask
    input_ids = torch.cat([prompt_ids, responses], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    texts = tokenizer.batch_decode([r[m.bool()].tolist() for r, m in zip(responses.cpu(), response_mask.cpu())],
                                   skip_special_tokens=True)
    return Rollout(flat, texts, input_ids, attention_mask, response_mask, width, group_size, logps, entropy,
                   temperature if logps is not None else None)


def response_logps(model, rollout: Rollout, temperature: float = 1.0, entropy: bool = False,
                   hidden: bool = False) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Per-token ``log pi(y_t | x, y_<t)`` of the rollout's responses under ``model`` (``(B, T)``, 0
    outside the mask), optionally the per-token entropy of pi and the last hidden state *before*
    each response token (``(B, T, H)``, what a value head reads). Groups that share a prompt run
    it once (:func:`offrl.prefs.sampling.grouped_response_logits`) where the model is supported."""
    from offrl.prefs.adapters import AdapterDisabled
    from offrl.prefs.rl_losses import entropy_from_logits
    from offrl.prefs.sampling import decoder_parts, grouped_response_logits

    if isinstance(model, AdapterDisabled) and not hidden:  # the base: the policy with its adapter off
        with model.policy.disable_adapter():
            return response_logps(model.policy, rollout, temperature, entropy)
    P = rollout.prompt_width
    T = rollout.response_mask.shape[1]
    parts = decoder_parts(model) if rollout.group_size > 1 and not hidden else None
    logits = grouped_response_logits(parts, rollout.input_ids, rollout.attention_mask, P, rollout.group_size) \
        if parts is not None else None
    if logits is None:
        position_ids = (rollout.attention_mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=rollout.input_ids, attention_mask=rollout.attention_mask, position_ids=position_ids,
                    use_cache=False, logits_to_keep=T + 1, output_hidden_states=hidden)
        logits = out.logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = logits.log_softmax(-1)
    mask = rollout.response_mask
    logps = torch.gather(logp_all, 2, rollout.responses.unsqueeze(-1)).squeeze(-1) * mask
    ent = entropy_from_logits(logits) * mask if entropy else None
    states = out.hidden_states[-1][:, P - 1:P + T - 1] if hidden else None  # hidden: always the model's own forward
    return logps, ent, states
