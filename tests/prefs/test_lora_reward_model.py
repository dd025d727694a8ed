"""LoRA reward models (peft, task SEQ_CLS) on the tiny locally built Llama: the adapter run learns the
held-out preferences, only the adapter and the scoring head train (counted by hand), save -> load and
merged weights score as the adapter does, resume equals uninterrupted, and bad input is one line."""

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from offrl.errors import ConfigError  # noqa: E402
from offrl.prefs.config import parse_lora  # noqa: E402

PROMPTS = ["sort:21=", "sort:21=", "sort:3142=", "sort:3142=", "sort:977=", "sort:50="]
ANSWERS = ["12", "21", "1234", "1243", "779", "05"]


@pytest.fixture(scope="module")
def lora_rm(tiny_task, tiny_sft, tmp_path_factory):
    """A LoRA reward model (3 bootstrapped heads) trained on the oracle pairs, with merged/ written."""
    from offrl.prefs import RewardModelConfig, train_reward_model

    out = tmp_path_factory.mktemp("lora_rm") / "rm"
    cfg = RewardModelConfig(heads=3, steps=360, batch_size=16, lr=3e-3, warmup_steps=5, log_every=120, max_length=24,
                            eval_fraction=0.3, lora="8,8,0", merge_lora=True)
    return train_reward_model(tiny_sft, tiny_task["pairs"], str(out), cfg, progress=False)


def test_lora_reward_model_beats_chance_and_saves_a_peft_adapter(lora_rm, tiny_sft):
    from safetensors.torch import load_file

    first, last = lora_rm.metrics[0], lora_rm.metrics[-1]
    # the same bar as the full-weight reward model's test (tests/prefs/test_training.py), 180 held-out pairs
    assert last["eval/accuracy"] > 0.6 and last["eval/margin"] > 0 and last["loss"] < first["loss"], lora_rm.metrics
    assert last["eval/uncertainty"] > 0  # the bootstrapped heads disagree
    model = os.path.join(lora_rm.path, "model")
    files = set(os.listdir(model))
    assert {"adapter_config.json", "adapter_model.safetensors"} <= files and "model.safetensors" not in files
    config = json.load(open(os.path.join(model, "adapter_config.json")))
    assert config["task_type"] == "SEQ_CLS" and "score" in config["modules_to_save"]
    assert config["base_model_name_or_path"] == os.path.abspath(tiny_sft) and (config["r"], config["lora_alpha"]) == (8, 8)
    weights = load_file(os.path.join(model, "adapter_model.safetensors"))
    assert weights["base_model.model.score.weight"].shape == (3, 32)  # the head, saved in full by modules_to_save
    assert all("lora_" in k for k in weights if k != "base_model.model.score.weight")
    assert any("lora_B" in k and v.abs().max() > 0 for k, v in weights.items())  # B starts at 0: it trained


def _count_trainable(model):
    return {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}


def test_only_the_adapter_and_the_head_train_counted_by_hand(tiny_task):
    from offrl.prefs.reward_model import apply_reward_lora, load_reward_model

    # the tiny Llama: hidden 32, intermediate 64, 2 layers, 2 heads and 2 key-value heads (k, v: 32 -> 32)
    # a LoRA of rank r on a d_in -> d_out matrix has r * (d_in + d_out) parameters (A: r x d_in, B: d_out x r)
    r = 4
    attention = 4 * r * (32 + 32)  # q, k, v, o
    mlp = 2 * r * (32 + 64) + r * (64 + 32)  # gate, up (32 -> 64), down (64 -> 32)
    head = 2 * 32  # score: 32 -> 2 heads, no bias
    for targets, expected in ((None, 2 * (attention + mlp) + head),  # 4416
                              ("q_proj+v_proj", 2 * 2 * r * (32 + 32) + head)):  # 1088
        torch.manual_seed(0)
        model, _ = load_reward_model(tiny_task["model"], heads=2)
        total = sum(p.numel() for p in model.parameters())
        spec = parse_lora(f"{r},8,0" + (f",{targets}" if targets else ""))
        wrapped = apply_reward_lora(model, spec, tiny_task["model"])
        trainable = _count_trainable(wrapped)
        assert sum(trainable.values()) == expected, (targets, trainable)
        assert all("lora_A" in n or "lora_B" in n or n.endswith("score.modules_to_save.default.weight") for n in trainable)
        assert not any("score" in n and "lora_" in n for n, _ in wrapped.named_parameters())  # no adapter in the head
        frozen = sum(p.numel() for n, p in wrapped.named_parameters() if not p.requires_grad)
        assert frozen == total  # every base weight (and the head's original copy) is frozen
    assert expected == 1088


def test_the_head_is_found_whatever_the_class_calls_it():
    from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2ForSequenceClassification

    from offrl.prefs.config import LoraSpec
    from offrl.prefs.reward_model import apply_reward_lora, reward_head_names

    bert = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                    num_attention_heads=2, intermediate_size=32, num_labels=1))
    gpt2 = GPT2ForSequenceClassification(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, num_labels=1))
    assert reward_head_names(bert) == ["classifier"] and reward_head_names(gpt2) == ["score"]
    wrapped = apply_reward_lora(bert, LoraSpec(2, 4, 0.0, ("query", "value")), None)
    trainable = _count_trainable(wrapped)
    # classifier 16 -> 1 with a bias, in full; query and value 16 -> 16 at rank 2 in the one layer
    assert sum(trainable.values()) == (16 + 1) + 2 * 2 * (16 + 16), trainable
    assert any("classifier.modules_to_save" in n for n in trainable)


def test_save_then_load_scores_identically(tiny_task, tmp_path):
    from offrl.prefs.reward_model import RewardModelScorer, apply_reward_lora, load_reward_model

    torch.manual_seed(0)
    model, tokenizer = load_reward_model(tiny_task["model"], heads=2)
    wrapped = apply_reward_lora(model, parse_lora("4,8,0"), tiny_task["model"], seed=3)
    with torch.no_grad():  # a non-trivial adapter: B = 0 would make the adapter invisible
        g = torch.Generator().manual_seed(1)
        for name, p in wrapped.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    folder = tmp_path / "adapter"
    wrapped.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))

    class InMemory(RewardModelScorer):
        def __init__(self):
            self.path, self.models, self.tokenizer, self.device = "memory", [wrapped.eval()], tokenizer, "cpu"

    expected, expected_std = InMemory()(PROMPTS, ANSWERS)
    loaded, loaded_std = RewardModelScorer(str(folder))(PROMPTS, ANSWERS)
    torch.testing.assert_close(loaded, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(loaded_std, expected_std, rtol=0, atol=1e-6)
    # the base model alone (adapter and trained head absent) scores differently: the adapter was read
    base, _ = RewardModelScorer(tiny_task["model"])(PROMPTS, ANSWERS)
    assert not torch.allclose(base, expected, atol=1e-3)


def _hand_merged(adapter: str, base: str, heads: int):
    """The base reward model with W + (alpha / r) B A written into each targeted matrix and the saved head."""
    from safetensors.torch import load_file

    from offrl.prefs.reward_model import load_reward_model

    config = json.load(open(os.path.join(adapter, "adapter_config.json")))
    scale = config["lora_alpha"] / config["r"]
    saved = load_file(os.path.join(adapter, "adapter_model.safetensors"))
    model, _ = load_reward_model(base, heads=heads)
    state = model.state_dict()
    with torch.no_grad():
        for key, a in saved.items():
            if key.endswith("lora_A.weight"):
                name = key[len("base_model.model."):-len(".lora_A.weight")]
                b = saved[key.replace("lora_A", "lora_B")]
                state[name + ".weight"] += scale * b @ a
        state["score.weight"].copy_(saved["base_model.model.score.weight"])
    return model.eval()


def test_merged_weights_score_as_the_adapter(lora_rm, tiny_sft):
    from offrl.prefs.reward_model import RewardModelScorer

    adapter, std = RewardModelScorer(lora_rm.path)(PROMPTS, ANSWERS)  # the run folder: model/, the adapter
    assert type(RewardModelScorer(lora_rm.path).models[0]).__name__ == "PeftModelForSequenceClassification"
    merged, merged_std = RewardModelScorer(os.path.join(lora_rm.path, "merged"))(PROMPTS, ANSWERS)
    assert os.path.exists(os.path.join(lora_rm.path, "merged", "model.safetensors"))
    torch.testing.assert_close(merged, adapter, rtol=0, atol=1e-5)
    torch.testing.assert_close(merged_std, std, rtol=0, atol=1e-5)
    # an independent route: merge W + (alpha / r) B A by hand from the saved tensors
    hand = _hand_merged(os.path.join(lora_rm.path, "model"), tiny_sft, heads=3)

    class Hand(RewardModelScorer):
        def __init__(self, tokenizer):
            self.path, self.models, self.tokenizer, self.device = "hand", [hand], tokenizer, "cpu"

    by_hand, _ = Hand(RewardModelScorer(lora_rm.path).tokenizer)(PROMPTS, ANSWERS)
    torch.testing.assert_close(by_hand, adapter, rtol=0, atol=1e-5)


def test_lora_reward_model_scores_rlhf_and_labels(lora_rm, tiny_task, tiny_sft, tmp_path):
    """--reward-model PATH of a LoRA run: GRPO's reward, the rm:PATH judge and labelling all read the adapter."""
    from offrl.prefs import GRPOConfig, train_grpo
    from offrl.prefs.judges import make_judge
    from offrl.prefs.labelling import sample_and_label
    from offrl.prefs.rewards import RewardModelReward
    from offrl.prefs.task import read_prompts

    reward = RewardModelReward(lora_rm.path)
    scores = reward(PROMPTS, ANSWERS)
    from offrl.prefs.reward_model import score_with_reward_model

    torch.testing.assert_close(scores.mean, score_with_reward_model(os.path.join(lora_rm.path, "merged"), PROMPTS,
                                                                    ANSWERS)[0], rtol=0, atol=1e-5)
    p = make_judge(f"rm:{lora_rm.path}").prefer(PROMPTS[:1], ANSWERS[:1], ANSWERS[1:2])
    torch.testing.assert_close(p, torch.sigmoid(scores.mean[:1] - scores.mean[1:2]), rtol=0, atol=1e-6)
    prompts = read_prompts(tiny_task["prompts_train"])[:4]
    rows, _ = sample_and_label(tiny_sft, prompts, samples=3, max_new_tokens=6, reward_model=lora_rm.path)
    assert rows and all({"prompt", "chosen", "rejected"} <= set(r) for r in rows)
    cfg = GRPOConfig(steps=1, batch_size=2, group_size=2, max_new_tokens=6, log_every=1, reward_model=lora_rm.path)
    result = train_grpo(tiny_sft, tiny_task["prompts_train"], str(tmp_path / "grpo"), cfg, progress=False)
    assert result.metrics[0]["step"] == 1


def test_lora_reward_model_resume_equals_uninterrupted(tiny_task, tmp_path):
    from safetensors.torch import load_file

    from offrl.prefs import RewardModelConfig, train_reward_model
    from offrl.prefs.checkpoint import verify_checkpoint

    cfg = RewardModelConfig(heads=2, steps=6, save_every=3, batch_size=8, lr=5e-3, warmup_steps=1, log_every=3,
                            max_length=24, eval_fraction=0.0, lora="4,8,0")
    whole = train_reward_model(tiny_task["model"], tiny_task["pairs"], str(tmp_path / "whole"), cfg, progress=False)
    cut = tmp_path / "cut"
    train_reward_model(tiny_task["model"], tiny_task["pairs"], str(cut), cfg, progress=False)
    step3 = cut / "checkpoints" / "step_00000003"
    listed = open(step3 / "checksums.sha256").read()
    assert "model/adapter_model.safetensors" in listed and "model/adapter_config.json" in listed
    assert verify_checkpoint(str(step3))
    shutil.rmtree(cut / "checkpoints" / "step_00000006")  # as if killed after step 3
    shutil.rmtree(cut / "model")
    resumed = train_reward_model(tiny_task["model"], tiny_task["pairs"], str(cut), cfg, resume=True, progress=False)
    assert [m["step"] for m in resumed.metrics] == [3, 6]
    assert resumed.metrics[-1]["loss"] == pytest.approx(whole.metrics[-1]["loss"], abs=1e-6)
    a = load_file(os.path.join(whole.model_path, "adapter_model.safetensors"))
    b = load_file(os.path.join(resumed.model_path, "adapter_model.safetensors"))
    start = load_file(str(step3 / "model" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and "base_model.model.score.weight" in a
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6)
    assert not torch.allclose(start["base_model.model.score.weight"], a["base_model.model.score.weight"])
    # a damaged adapter in the checkpoint is refused by its checksum
    with open(step3 / "model" / "adapter_model.safetensors", "r+b") as fh:
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    from offrl.errors import CheckpointError

    with pytest.raises(CheckpointError, match="adapter_model.safetensors does not match"):
        verify_checkpoint(str(step3))


def test_lora_reward_model_ensemble_gives_each_member_its_adapter(tiny_task, tmp_path):
    from safetensors.torch import load_file

    from offrl.prefs import RewardModelConfig, train_reward_model
    from offrl.prefs.reward_model import score_with_reward_model

    cfg = RewardModelConfig(models=2, steps=4, batch_size=8, lr=5e-3, warmup_steps=1, log_every=4, max_length=24,
                            eval_fraction=0.2, lora="2,4,0,q_proj+v_proj", merge_lora=True)
    result = train_reward_model(tiny_task["model"], tiny_task["pairs"], str(tmp_path / "rm"), cfg, progress=False)
    assert result.summary["members"] == 2 and result.summary["eval/uncertainty"] > 0
    members = [load_file(str(tmp_path / "rm" / f"member_{k}" / "model" / "adapter_model.safetensors")) for k in (0, 1)]
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    assert not torch.equal(members[0][key], members[1][key])  # seeds seed, seed + 1: two adapters
    assert all(os.path.exists(tmp_path / "rm" / f"member_{k}" / "merged" / "config.json") for k in (0, 1))
    means, stds = score_with_reward_model(str(tmp_path / "rm"), PROMPTS, ANSWERS)
    assert means.shape == (len(PROMPTS),) and bool((stds > 0).all())


def _main(args, capsys):
    from offrl.cli import main

    code = main(args)
    return code, capsys.readouterr().err.strip().splitlines()


def test_bad_lora_input_one_line_exit_2_run_folder_untouched(tiny_task, tmp_path, capsys):
    for lora, words in (("4,8,0,qkv+v_proj", "--lora target qkv is not a linear module of this model's backbone; "
                                             "available: down_proj+gate_proj+k_proj+o_proj+q_proj+up_proj+v_proj"),
                        ("4,8,0,score", "--lora target score is not a linear module of this model's backbone"),
                        ("0,8,0", "the rank must be at least 1 (got 0)")):
        out = tmp_path / f"rm_{lora.replace(',', '_')}"
        code, err = _main(["prefs", "rm", "--model", tiny_task["model"], "--data", tiny_task["pairs"], "--out", str(out),
                           "--steps", "1", "--lora", lora, "--no-progress"], capsys)
        assert code == 2 and len(err) == 1 and words in err[0], (lora, err)
        assert not out.exists(), lora


def test_policy_adapter_is_not_a_reward_model_and_foreign_base_is_refused(tiny_task, tmp_path, capsys):
    from offrl.prefs.adapters import apply_lora
    from offrl.prefs.modeling import load_causal_lm
    from offrl.prefs.reward_model import RewardModelScorer
    from offrl.prefs.task import TaskConfig, make_task

    policy = tmp_path / "policy_adapter"
    apply_lora(load_causal_lm(tiny_task["model"]), parse_lora("2,4,0"), tiny_task["model"]).save_pretrained(str(policy))
    with pytest.raises(ConfigError, match="is a CAUSAL_LM adapter .a policy., not a reward model"):
        RewardModelScorer(str(policy))
    # resuming a LoRA reward-model run on a base of another architecture: one line, the run folder untouched
    other = make_task(str(tmp_path / "other"), TaskConfig(train_prompts=20, eval_prompts=5, hidden_size=48,
                                                          intermediate_size=64, layers=1, heads=2))
    run = tmp_path / "run"
    common = ["--data", tiny_task["pairs"], "--out", str(run), "--batch-size", "8", "--max-length", "24",
              "--lora", "2,4,0", "--no-progress"]
    code, _ = _main(["prefs", "rm", "--model", tiny_task["model"], *common, "--steps", "2", "--save-every", "1"], capsys)
    assert code == 0
    before = {os.path.join(d, f): os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(run) for f in fs}
    code, err = _main(["prefs", "rm", "--model", other["model"], *common, "--steps", "4", "--resume"], capsys)
    assert code == 2 and len(err) == 1 and "whose architecture differs from --model" in err[0], err
    assert {os.path.join(d, f): os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(run) for f in fs} == before


def test_a_policy_adapter_starts_a_full_weight_reward_model(tiny_task, tmp_path, capsys):
    """``rm --model`` an `sft --lora` model/: the adapter is merged into the backbone under a fresh head;
    with --lora that is refused (the new adapter needs a base folder of full weights)."""
    from offrl.prefs import RewardModelConfig, train_reward_model
    from offrl.prefs.adapters import apply_lora
    from offrl.prefs.modeling import load_causal_lm, load_tokenizer
    from offrl.prefs.reward_model import load_reward_model

    policy = apply_lora(load_causal_lm(tiny_task["model"]), parse_lora("2,4,0"), tiny_task["model"])
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    folder = tmp_path / "sft_adapter"
    policy.save_pretrained(str(folder))
    load_tokenizer(tiny_task["model"]).save_pretrained(str(folder))
    rm, _ = load_reward_model(str(folder), heads=1, policy_adapter=True)
    merged = load_causal_lm(str(folder)).model.state_dict()
    base = load_causal_lm(tiny_task["model"]).model.state_dict()
    state = rm.model.state_dict()
    assert state.keys() == merged.keys()
    assert all(torch.equal(state[k], merged[k]) for k in state)
    assert not torch.equal(state["layers.0.self_attn.q_proj.weight"], base["layers.0.self_attn.q_proj.weight"])
    cfg = RewardModelConfig(steps=2, batch_size=8, log_every=1, max_length=24, eval_fraction=0.0)
    result = train_reward_model(str(folder), tiny_task["pairs"], str(tmp_path / "rm"), cfg, progress=False)
    assert os.path.exists(os.path.join(result.model_path, "model.safetensors"))
    out = tmp_path / "rm_lora"
    code, err = _main(["prefs", "rm", "--model", str(folder), "--data", tiny_task["pairs"], "--out", str(out),
                       "--steps", "1", "--lora", "2,4,0", "--no-progress"], capsys)
    assert code == 2 and len(err) == 1 and "is an adapter folder; pass its run's merged/ folder" in err[0], err
    assert not out.exists()
