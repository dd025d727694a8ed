"""offrl's sampling loop and grouped forward pass against Hugging Face's own generate and forward."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from offrl.prefs.chat import encode_prompts, first_stop_mask  # noqa: E402
from offrl.prefs.rollout import Rollout, generate_rollout, response_logps  # noqa: E402
from offrl.prefs.sampling import decoder_parts, grouped_response_logits, sample_with_cache  # noqa: E402
from offrl.prefs.task import TaskConfig, build_model, build_tokenizer  # noqa: E402

PROMPTS = ["sort:31=", "sort:904512=", "rev:7="]  # three lengths: left padding


@pytest.fixture(scope="module")
def tiny():
    tok = build_tokenizer()
    model = build_model(TaskConfig(hidden_size=32, layers=2, heads=4, intermediate_size=64), tok).eval()
    return model, tok


def hf_logits(model, rollout):
    """The model's own forward: logits that predict each response token."""
    T = rollout.response_mask.shape[1]
    position_ids = (rollout.attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=rollout.input_ids, attention_mask=rollout.attention_mask, position_ids=position_ids,
                use_cache=False, logits_to_keep=T + 1)
    return out.logits[:, :-1].float()


def hf_token_logps(model, rollout, temperature=1.0):
    logp = (hf_logits(model, rollout) / temperature).log_softmax(-1)
    return logp.gather(2, rollout.responses[..., None]).squeeze(-1) * rollout.response_mask


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_samples_equal_generate_for_a_seed_and_logps_equal_the_forward(tiny, temperature):
    model, tok = tiny
    G, eos, pad = 4, tok.eos_token_id, tok.pad_token_id
    flat = [p for p in PROMPTS for _ in range(G)]
    ids, mask = encode_prompts(tok, flat)
    torch.manual_seed(5)
    theirs = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=temperature, top_k=0,
                            top_p=1.0, max_new_tokens=12, pad_token_id=pad, eos_token_id=[eos])[:, ids.shape[1]:]
    unique_ids, unique_mask = encode_prompts(tok, PROMPTS)
    torch.manual_seed(5)
    ours, logps, entropy = sample_with_cache(decoder_parts(model), unique_ids, unique_mask, G, 12, [eos], pad,
                                             temperature)
    assert torch.equal(ours, theirs)  # same draws: the same multinomial over the same probabilities
    rmask = first_stop_mask(ours, [eos])
    assert (rmask == 0).any()  # some rows stopped early, so padding after the stop is exercised
    rollout = Rollout(flat, [""] * len(flat), torch.cat([ids, ours], 1), torch.cat([mask, rmask], 1), rmask,
                      ids.shape[1], G)
    with torch.no_grad():
        logp_all = (hf_logits(model, rollout) / temperature).log_softmax(-1)
    expected_logps = logp_all.gather(2, ours[..., None]).squeeze(-1) * rmask
    expected_entropy = -(logp_all.exp() * logp_all).sum(-1) * rmask
    assert torch.allclose(logps * rmask, expected_logps, atol=1e-5)
    assert torch.allclose(entropy * rmask, expected_entropy, atol=1e-5)


def test_generate_rollout_records_pi_old_and_score_uses_it(tiny):
    model, tok = tiny
    rollout = generate_rollout(model, tok, PROMPTS, 3, 10, temperature=1.0, seed=11)
    with torch.no_grad():
        expected = hf_token_logps(model, rollout)
    assert rollout.temperature == 1.0
    assert torch.allclose(rollout.logps, expected, atol=1e-5)
    assert rollout.sampled_logps(1.0) is not None and rollout.sampled_logps(0.5) is None


def test_grouped_forward_equals_the_full_forward_values_and_gradients(tiny):
    model, tok = tiny
    model = build_model(TaskConfig(hidden_size=32, layers=2, heads=4, intermediate_size=64, seed=3), tok)
    rollout = generate_rollout(model, tok, PROMPTS, 4, 10, seed=2)
    mask = rollout.response_mask.bool()
    theirs = hf_logits(model, rollout)
    ours = grouped_response_logits(decoder_parts(model), rollout.input_ids, rollout.attention_mask,
                                   rollout.prompt_width, 4)
    assert (ours - theirs).abs().amax(-1)[mask].max() < 1e-5
    weights = torch.randn(theirs.shape[:2])  # a loss that weighs every response token differently

    def grads(logits):
        model.zero_grad()
        logp = logits.log_softmax(-1).gather(2, rollout.responses[..., None]).squeeze(-1)
        (logp * weights * rollout.response_mask).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    for g_ours, g_theirs in zip(grads(ours), grads(theirs)):
        assert torch.allclose(g_ours, g_theirs, atol=1e-5, rtol=1e-4)
    # response_logps takes the grouped path for a grouped rollout, the full forward for a shuffled one
    shuffled = rollout.rows(torch.tensor([1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]))
    assert shuffled.group_size == 1 and rollout.rows(torch.arange(4, 12)).group_size == 4
    with torch.no_grad():
        assert torch.allclose(response_logps(model, rollout)[0], hf_token_logps(model, rollout), atol=1e-5)


def test_a_group_whose_prompts_differ_is_not_shared(tiny):
    model, tok = tiny
    rollout = generate_rollout(model, tok, PROMPTS, 2, 6, seed=0)
    assert grouped_response_logits(decoder_parts(model), rollout.input_ids, rollout.attention_mask,
                                   rollout.prompt_width, 3) is None  # groups of 3 straddle two prompts


def test_lora_adapter_applies_and_the_disabled_reference_is_the_base(tiny):
    pytest.importorskip("peft")
    from offrl.prefs.adapters import AdapterDisabled, apply_lora
    from offrl.prefs.config import parse_lora

    model, tok = tiny
    base = build_model(TaskConfig(hidden_size=32, layers=2, heads=4, intermediate_size=64, seed=4), tok)
    policy = apply_lora(base, parse_lora("4,8,0"))
    with torch.no_grad():  # peft starts B at 0; move it so that the adapter changes the logits
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.add_(0.5 * torch.randn_like(p))
    policy.eval()
    assert decoder_parts(policy) is not None
    rollout = generate_rollout(policy, tok, PROMPTS, 3, 8, seed=1)
    with torch.no_grad():
        adapted = hf_token_logps(policy, rollout)
        with policy.disable_adapter():
            plain = hf_token_logps(policy, rollout)
        assert (adapted - plain).abs().max() > 1e-3  # the adapter matters
        assert torch.allclose(rollout.logps, adapted, atol=1e-5)
        assert torch.allclose(response_logps(policy, rollout)[0], adapted, atol=1e-5)
        assert torch.allclose(response_logps(AdapterDisabled(policy), rollout)[0], plain, atol=1e-5)


def test_unsupported_models_fall_back_to_generate(tiny):
    from transformers import GPT2Config, GPT2LMHeadModel

    model, tok = tiny
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64,
                                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)).eval()
    assert decoder_parts(gpt2) is None
    rollout = generate_rollout(gpt2, tok, PROMPTS, 2, 6, seed=0)
    assert rollout.logps is None and rollout.sampled_logps(1.0) is None
    with torch.no_grad():  # the fallback forward: response_logps still equals the model's own
        assert torch.allclose(response_logps(gpt2, rollout)[0], hf_token_logps(gpt2, rollout), atol=1e-6)
    penalised = build_model(TaskConfig(hidden_size=32, layers=2, heads=4, intermediate_size=64), tok)
    penalised.generation_config.repetition_penalty = 1.3  # a logits processor generate would apply
    assert decoder_parts(penalised) is None


def test_first_gradient_step_with_detached_pi_old_keeps_loss_and_gradient(tiny):
    """pi_old = pi_theta.detach() (the parameters have not moved since sampling) gives the same GRPO
    loss and gradient as pi_old from a separate no-grad pass of the same policy."""
    from offrl.prefs import rl_losses as R
    from offrl.prefs.grpo import group_policy_gradient_loss

    model, tok = tiny
    model = build_model(TaskConfig(hidden_size=32, layers=2, heads=4, intermediate_size=64, seed=5), tok)
    reference = build_model(TaskConfig(hidden_size=32, layers=2, heads=4, intermediate_size=64, seed=6), tok)
    rollout = generate_rollout(model, tok, PROMPTS, 4, 10, seed=3)
    scores = torch.tensor([float(i % 3) for i in range(12)])
    advantages = R.group_advantages(scores, 4, "grpo")
    with torch.no_grad():
        ref = hf_token_logps(reference, rollout)
        separate = hf_token_logps(model, rollout)
    results = []
    for detached in (True, False):
        model.zero_grad()
        logps = hf_token_logps(model, rollout)
        old = logps.detach() if detached else separate
        loss, _ = group_policy_gradient_loss(logps, old, ref, advantages, rollout.response_mask, 0.2, 0.04, "k3")
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.allclose(loss_a, loss_b, atol=1e-7)
    for a, b in zip(grads_a, grads_b):
        assert torch.allclose(a, b, atol=1e-7, rtol=1e-5)
    assert any(g.abs().max() > 0 for g in grads_a)


@pytest.mark.parametrize("family", ["llama-gqa", "qwen2"])
def test_grouped_query_attention_and_qwen2_match_generate_and_the_forward(tiny, family):
    """Two key/value heads for four query heads (GQA), and Qwen2's biased q/k/v projections."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    _, tok = tiny
    common = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(7)
    model = (LlamaForCausalLM(LlamaConfig(**common)) if family == "llama-gqa" else
             Qwen2ForCausalLM(Qwen2Config(**common, use_sliding_window=False))).eval()
    parts = decoder_parts(model)
    assert parts is not None and parts.kv_heads == 2
    G, eos, pad = 3, tok.eos_token_id, tok.pad_token_id
    ids, mask = encode_prompts(tok, [p for p in PROMPTS for _ in range(G)])
    torch.manual_seed(1)
    theirs = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_k=0, top_p=1.0,
                            max_new_tokens=8, pad_token_id=pad, eos_token_id=[eos])[:, ids.shape[1]:]
    unique_ids, unique_mask = encode_prompts(tok, PROMPTS)
    torch.manual_seed(1)
    ours, _, _ = sample_with_cache(parts, unique_ids, unique_mask, G, 8, [eos], pad)
    assert torch.equal(ours, theirs)
    rollout = generate_rollout(model, tok, PROMPTS, G, 8, seed=4)
    with torch.no_grad():
        expected = hf_token_logps(model, rollout)
        assert torch.allclose(rollout.logps, expected, atol=1e-5)
        assert torch.allclose(response_logps(model, rollout)[0], expected, atol=1e-5)
