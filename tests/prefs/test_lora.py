"""LoRA adapters (peft) on the tiny locally built Llama: only the adapter trains, save -> load gives the
same logits, the reference with the adapter disabled is the base model, and the trainers run with
``lora`` (DPO, GRPO; SFT resume from an adapter checkpoint)."""

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from offrl.errors import ConfigError  # noqa: E402
from offrl.prefs.config import LoraSpec, parse_lora  # noqa: E402


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def _ids(tokenizer):
    return torch.tensor([tokenizer("sort:3142=1234")["input_ids"]])


def test_parse_lora_and_its_bad_values():
    assert parse_lora("8,16,0.05") == LoraSpec(8, 16.0, 0.05, None)
    assert parse_lora("4, 8, 0, q_proj+v_proj") == LoraSpec(4, 8.0, 0.0, ("q_proj", "v_proj"))
    assert parse_lora(None) is None and parse_lora("") is None
    for bad, words in (("0,16,0.05", "rank must be at least 1"), ("8,16", "not R,ALPHA,DROPOUT"),
                       ("8,x,0", "must be an integer"), ("8,16,1.0", "dropout must be in [0, 1)"),
                       ("8,0,0", "alpha must be > 0")):
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace(")", r"\)")):
            parse_lora(bad)
    from offrl.prefs import SFTConfig

    with pytest.raises(ConfigError, match="--lora 0,16,0"):  # refused when the config is built, before any run
        SFTConfig(lora="0,16,0")


def test_unknown_target_names_the_available_ones(tiny_task):
    from offrl.prefs.adapters import apply_lora
    from offrl.prefs.modeling import load_causal_lm

    model = load_causal_lm(tiny_task["model"])
    with pytest.raises(ConfigError, match=r"--lora target qkv is not a linear module of this model; available: "
                                          r"down_proj\+gate_proj\+k_proj\+o_proj\+q_proj\+up_proj\+v_proj\."):
        apply_lora(model, LoraSpec(4, 8, 0.0, ("qkv",)))


def test_lora_sft_trains_only_the_adapter_and_reloads_exactly(tiny_task, tmp_path):
    from safetensors.torch import load_file

    from offrl.prefs import SFTConfig, train_sft
    from offrl.prefs.adapters import AdapterDisabled
    from offrl.prefs.modeling import load_policy
    from offrl.prefs.modeling import load_causal_lm, load_tokenizer

    out = tmp_path / "sft_lora"
    cfg = SFTConfig(steps=20, batch_size=16, lr=1e-2, warmup_steps=2, log_every=10, max_length=24, eval_fraction=0.1,
                    lora="4,8,0", merge_lora=True)
    result = train_sft(tiny_task["model"], tiny_task["demos"], str(out), cfg, progress=False)
    assert result.metrics[-1]["loss"] < result.metrics[0]["loss"]
    files = set(os.listdir(out / "model"))
    assert {"adapter_config.json", "adapter_model.safetensors"} <= files and "model.safetensors" not in files
    adapter = load_file(str(out / "model" / "adapter_model.safetensors"))
    assert adapter and all("lora_" in k for k in adapter)  # only A and B were saved
    assert any("lora_B" in k and v.abs().max() > 0 for k, v in adapter.items())  # B left 0: it trained

    tokenizer = load_tokenizer(tiny_task["model"])
    ids = _ids(tokenizer)
    base = load_causal_lm(tiny_task["model"])
    # resume path: base + the saved adapter, trainable; the base weights under it are untouched
    policy = load_policy(tiny_task["model"], str(out / "model"), parse_lora(cfg.lora))
    base_state = base.state_dict()
    for name, value in policy.get_base_model().state_dict().items():
        if "lora_" in name:
            continue
        key = name.replace(".base_layer", "")
        assert torch.equal(value, base_state[key]), name
    trained = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n in trained)
    # save -> load: the same logits from the adapter, from the merged-on-load folder and from merged/
    adapted = _logits(policy, ids)
    torch.testing.assert_close(_logits(load_causal_lm(str(out / "model")), ids), adapted, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_logits(load_causal_lm(str(out / "merged")), ids), adapted, rtol=1e-5, atol=1e-5)
    # the reference with the adapter disabled is the base model, and differs from the adapted policy
    torch.testing.assert_close(_logits(AdapterDisabled(policy), ids), _logits(base, ids), rtol=0, atol=0)
    assert not torch.allclose(adapted, _logits(base, ids), atol=1e-3)


def test_adapter_from_another_base_is_refused(tiny_task, tmp_path):
    from offrl.prefs.adapters import apply_lora, load_adapter
    from offrl.prefs.modeling import load_causal_lm
    from offrl.prefs.task import TaskConfig, make_task

    other = make_task(str(tmp_path / "other"), TaskConfig(train_prompts=20, eval_prompts=5, hidden_size=48,
                                                          intermediate_size=64, layers=1, heads=2))
    wrapped = apply_lora(load_causal_lm(other["model"]), LoraSpec(2, 4, 0.0), other["model"])
    wrapped.save_pretrained(str(tmp_path / "adapter"))
    with pytest.raises(ConfigError, match="was trained on .* whose architecture differs from --model"):
        load_adapter(load_causal_lm(tiny_task["model"]), str(tmp_path / "adapter"), tiny_task["model"])


def test_lora_dpo_uses_the_disabled_adapter_as_reference(tiny_task, tiny_sft, tmp_path):
    from safetensors.torch import load_file

    from offrl.prefs import PreferenceConfig, train_preferences

    common = dict(loss="dpo", beta=0.5, steps=12, batch_size=16, lr=2e-3, warmup_steps=2, log_every=6, max_length=24,
                  eval_fraction=0.2, kl_prompts=4, kl_max_new_tokens=6)
    full = train_preferences(tiny_sft, tiny_task["pairs"], str(tmp_path / "full"), PreferenceConfig(**common),
                             progress=False)
    lora = train_preferences(tiny_sft, tiny_task["pairs"], str(tmp_path / "lora"),
                             PreferenceConfig(**common, lora="4,8,0"), progress=False)
    # the cached reference log-probs (base with the adapter off) equal those of a separate reference copy
    ref_full = load_file(str(tmp_path / "full" / "reference_logps.safetensors"))["logps"]
    ref_lora = load_file(str(tmp_path / "lora" / "reference_logps.safetensors"))["logps"]
    torch.testing.assert_close(ref_lora, ref_full, rtol=1e-5, atol=1e-5)
    last = lora.metrics[-1]
    # held out: pairs ordered above chance (every implicit reward is 0 at the start, B = 0)
    assert last["eval/margin"] > 0 and last["eval/accuracy"] > 0.55 and last["kl_sampled"] == last["kl_sampled"], last
    assert full.metrics[-1]["step"] == 12
    assert os.path.exists(tmp_path / "lora" / "model" / "adapter_model.safetensors")


def test_lora_grpo_runs_with_zero_kl_at_the_start(tiny_task, tiny_sft, tmp_path):
    from offrl.prefs import GRPOConfig, train_grpo

    cfg = GRPOConfig(steps=2, batch_size=4, group_size=3, lr=5e-3, max_new_tokens=6, log_every=1, lora="4,8,0")
    result = train_grpo(tiny_sft, tiny_task["prompts_train"], str(tmp_path / "grpo"), cfg, progress=False)
    # B = 0 at the start: pi == base (pi_old from the sampling pass: equal up to float rounding)
    assert abs(result.metrics[0]["objective/kl"]) < 1e-6
    assert result.metrics[1]["objective/kl"] != 0.0
    assert os.path.exists(tmp_path / "grpo" / "model" / "adapter_config.json")


def test_lora_sft_resume_equals_uninterrupted(tiny_task, tmp_path):
    from offrl.prefs import SFTConfig, train_sft
    from offrl.prefs.modeling import load_causal_lm, load_tokenizer

    common = dict(batch_size=16, lr=1e-2, warmup_steps=1, log_every=2, max_length=24, eval_fraction=0.0, lora="4,8,0")
    whole = train_sft(tiny_task["model"], tiny_task["demos"], str(tmp_path / "whole"), SFTConfig(steps=4, **common),
                      progress=False)
    first = SFTConfig(steps=4, save_every=2, **common)
    # interrupt after step 2 by running a 2-step prefix, then resume to 4 with the same schedule
    train_sft(tiny_task["model"], tiny_task["demos"], str(tmp_path / "parts"), first, progress=False)
    import shutil

    shutil.rmtree(tmp_path / "parts" / "checkpoints" / "step_00000004")
    resumed = train_sft(tiny_task["model"], tiny_task["demos"], str(tmp_path / "parts"), first, resume=True,
                        progress=False)
    assert [r["step"] for r in resumed.metrics] == [2, 4]
    ids = _ids(load_tokenizer(tiny_task["model"]))
    torch.testing.assert_close(_logits(load_causal_lm(str(tmp_path / "parts" / "model")), ids),
                               _logits(load_causal_lm(whole.model_path), ids), rtol=1e-5, atol=1e-5)


def _main(args, capsys):
    from offrl.cli import main

    code = main(args)
    return code, capsys.readouterr().err.strip().splitlines()


def _snapshot(folder):
    """Every file under ``folder`` with its size and modification time (to see that nothing changed)."""
    return {os.path.relpath(os.path.join(d, f), folder): (os.path.getsize(os.path.join(d, f)),
                                                          os.path.getmtime(os.path.join(d, f)))
            for d, _, files in os.walk(folder) for f in files}


def test_lora_bad_input_one_line_exit_2_run_folder_untouched(tiny_task, tmp_path, capsys):
    """A target the model does not have (the available ones named) and a rank of 0, on every trainer."""
    data = {"sft": ("--data", tiny_task["demos"]), "dpo": ("--data", tiny_task["pairs"]),
            "simpo": ("--data", tiny_task["pairs"]), "grpo": ("--prompts", tiny_task["prompts_train"]),
            "ppo": ("--prompts", tiny_task["prompts_train"]), "online-dpo": ("--prompts", tiny_task["prompts_train"]),
            "iterate": ("--prompts", tiny_task["prompts_train"])}
    for command, (flag, path) in data.items():
        for lora, words in (("4,8,0,qkv+v_proj", "--lora target qkv is not a linear module of this model; available: "
                                                 "down_proj+gate_proj+k_proj+o_proj+q_proj+up_proj+v_proj."),
                            ("0,8,0", "the rank must be at least 1 (got 0)")):
            out = tmp_path / f"{command}_{lora[0]}"
            extra = [] if command in ("iterate",) else ["--no-progress"]
            code, err = _main(["prefs", command, "--model", tiny_task["model"], flag, path, "--out", str(out),
                               "--steps", "1", "--lora", lora, *extra], capsys)
            assert code == 2 and len(err) == 1 and words in err[0], (command, lora, err)
            assert not out.exists(), (command, lora)


def test_adapter_from_another_base_one_line_exit_2_run_folder_untouched(tiny_task, tmp_path, capsys):
    import json
    import shutil

    from offrl.prefs.task import TaskConfig, make_task

    other = make_task(str(tmp_path / "other"), TaskConfig(train_prompts=20, eval_prompts=5, hidden_size=48,
                                                          intermediate_size=64, layers=1, heads=2))
    run = tmp_path / "run"
    common = ["--data", tiny_task["demos"], "--out", str(run), "--batch-size", "8", "--max-length", "24",
              "--lora", "2,4,0", "--no-progress"]
    code, _ = _main(["prefs", "sft", "--model", tiny_task["model"], *common, "--steps", "4", "--save-every", "2"],
                    capsys)
    assert code == 0
    before = _snapshot(run)
    # resuming the adapter run on a base of another architecture
    code, err = _main(["prefs", "sft", "--model", other["model"], *common, "--steps", "6", "--resume"], capsys)
    assert code == 2 and len(err) == 1, err
    assert "was trained on" in err[0] and "whose architecture differs from --model" in err[0]
    assert _snapshot(run) == before
    # an adapter folder whose recorded base is gone, given as --model
    adapter = tmp_path / "adapter"
    shutil.copytree(run / "model", adapter)
    cfg = json.load(open(adapter / "adapter_config.json"))
    cfg["base_model_name_or_path"] = str(tmp_path / "gone")
    json.dump(cfg, open(adapter / "adapter_config.json", "w"))
    out = tmp_path / "out"
    code, err = _main(["prefs", "sft", "--model", str(adapter), "--data", tiny_task["demos"], "--out", str(out),
                       "--steps", "1", "--no-progress"], capsys)
    assert code == 2 and len(err) == 1 and "records its base model as" in err[0] and not out.exists(), err
    # an adapter of another base whose recorded base is gone: the shapes do not fit
    from offrl.prefs.adapters import apply_lora, load_adapter
    from offrl.prefs.modeling import load_causal_lm

    foreign = tmp_path / "foreign"
    apply_lora(load_causal_lm(other["model"]), LoraSpec(2, 4, 0.0), str(tmp_path / "gone")).save_pretrained(str(foreign))
    with pytest.raises(ConfigError, match="does not fit --model"):
        load_adapter(load_causal_lm(tiny_task["model"]), str(foreign), tiny_task["model"])
