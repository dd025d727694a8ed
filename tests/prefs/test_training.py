"""Short real runs on the tiny digits task: DPO learns, the reward model beats chance,
checkpoints resume exactly, and the CLI works end to end."""

import json
import os

import pytest

torch = pytest.importorskip("torch")

from offrl.prefs.checkpoint import optimizer_state_from_flat, optimizer_state_to_flat  # noqa: E402
from offrl.prefs import (  # noqa: E402
    PreferenceConfig,
    RewardModelConfig,
    SFTConfig,
    train_preferences,
    train_reward_model,
    train_sft,
)


def test_dpo_raises_heldout_accuracy_and_margin(tiny_task, tiny_sft, tmp_path):
    cfg = PreferenceConfig(loss="dpo", beta=0.5, steps=80, batch_size=16, lr=2e-3, warmup_steps=5, log_every=20,
                           max_length=24, eval_fraction=0.3, kl_prompts=8, kl_max_new_tokens=8)
    result = train_preferences(tiny_sft, tiny_task["pairs"], str(tmp_path / "dpo"), cfg, progress=False)
    first, last = result.metrics[0], result.metrics[-1]
    # at step 0 pi == pi_ref: every implicit reward is 0 (margin 0, accuracy 0 by the strict c > r test),
    # so any held-out accuracy above chance (0.5) and positive margin was learned
    assert last["eval/accuracy"] > 0.6, last
    assert first["eval/margin"] > 0.1 and last["eval/margin"] > 0.1
    assert last["rewards/accuracy"] > 0.65 and last["loss"] < 0.69
    assert "kl_sampled" in last and last["kl_sampled"] == last["kl_sampled"]
    assert os.path.exists(tmp_path / "dpo" / "model" / "model.safetensors")
    assert os.path.exists(tmp_path / "dpo" / "reference_logps.safetensors")


def test_ipo_and_kto_learn_heldout_preferences(tiny_task, tiny_sft, tmp_path):
    for loss, beta, lr in (("ipo", 1.0, 3e-3), ("kto", 1.0, 1e-3)):
        cfg = PreferenceConfig(loss=loss, beta=beta, steps=40, batch_size=16, lr=lr, warmup_steps=5, log_every=20,
                               max_length=24, eval_fraction=0.2, kl_prompts=0)
        result = train_preferences(tiny_sft, tiny_task["pairs"], str(tmp_path / loss), cfg, progress=False)
        first, last = result.metrics[0], result.metrics[-1]
        if loss == "ipo":
            assert last["loss"] < first["loss"], result.metrics
        assert last["eval/margin"] > 0.05, (loss, last)
        assert last["eval/accuracy"] > 0.55, (loss, last)


def test_reward_model_ensemble_beats_chance(tiny_task, tiny_sft, tmp_path):
    cfg = RewardModelConfig(heads=3, steps=120, batch_size=16, lr=5e-3, warmup_steps=5, log_every=40, max_length=24,
                            eval_fraction=0.3)
    result = train_reward_model(tiny_sft, tiny_task["pairs"], str(tmp_path / "rm"), cfg, progress=False)
    last = result.metrics[-1]
    assert last["eval/accuracy"] > 0.6, last
    assert last["eval/margin"] > 0
    assert last["eval/uncertainty"] > 0  # the bootstrapped heads disagree


class _LengthRewardModel(torch.nn.Module):
    """A stand-in reward model whose reward is ``sign * (number of non-pad tokens)``."""

    def __init__(self, sign: float):
        super().__init__()
        self.sign = sign

    def forward(self, input_ids, attention_mask, use_cache=False):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.sign * attention_mask.sum(-1, keepdim=True).float())


def test_reward_model_metrics_length_correlation_and_accuracy():
    from offrl.prefs.data import load_preferences, tokenize_preferences
    from offrl.prefs.reward_model import pearson, reward_model_metrics
    from offrl.prefs.task import build_tokenizer

    # hand-computed: a = (1, 2, 3), b = (2, 4, 7): a - 2 = (-1, 0, 1), b - 13/3 = (-7/3, -1/3, 8/3)
    # sum = 7/3 + 8/3 = 5; |a| = sqrt 2; |b| = sqrt(114/9); r = 5 / (sqrt 2 * sqrt(114) / 3)
    r = pearson(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 7.0]))
    assert r == pytest.approx(15 / (2 ** 0.5 * 114 ** 0.5), abs=1e-12)
    assert pearson(torch.ones(3), torch.tensor([1.0, 2.0, 3.0])) == 0.0
    tokenizer = build_tokenizer()
    rows = [{"prompt": "sort:21=", "chosen": "1" * (k + 2), "rejected": "2" * (k + 1)} for k in range(6)]
    tok = tokenize_preferences(load_preferences(rows), tokenizer, max_length=24)
    longer = reward_model_metrics(_LengthRewardModel(1.0), tok, tokenizer.pad_token_id)
    # chosen is always the longer completion: a pure length reward ranks every pair right, margin 1 token
    assert longer["accuracy"] == 1.0 and longer["margin"] == pytest.approx(1.0)
    # the prompt is the same for all rows, so reward = prompt length + completion length: correlation exactly 1
    assert longer["length_correlation"] == pytest.approx(1.0, abs=1e-9)
    shorter = reward_model_metrics(_LengthRewardModel(-1.0), tok, tokenizer.pad_token_id)
    assert shorter["accuracy"] == 0.0 and shorter["length_correlation"] == pytest.approx(-1.0, abs=1e-9)


def test_reward_model_ensemble_of_models(tiny_task, tiny_sft, tmp_path):
    from offrl.prefs.reward_model import score_with_reward_model

    cfg = RewardModelConfig(models=2, steps=10, batch_size=16, lr=2e-3, warmup_steps=2, log_every=10, max_length=24,
                            eval_fraction=0.2)
    result = train_reward_model(tiny_sft, tiny_task["pairs"], str(tmp_path / "rm"), cfg, progress=False)
    assert json.load(open(tmp_path / "rm" / "ensemble.json"))["members"] == ["member_0/model", "member_1/model"]
    assert result.summary["eval/uncertainty"] > 0 and result.summary["members"] == 2
    means, stds = score_with_reward_model(str(tmp_path / "rm"), ["sort:21=", "sort:21="], ["12", "21"])
    assert means.shape == (2,) and bool((stds > 0).all())


def _weights(path):
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "model.safetensors"))


def test_resume_equals_uninterrupted(tiny_task, tmp_path):
    cfg = SFTConfig(steps=12, batch_size=8, lr=3e-3, warmup_steps=2, log_every=4, save_every=6, max_length=24,
                    eval_fraction=0.0)
    full = str(tmp_path / "full")
    train_sft(tiny_task["model"], tiny_task["demos"], full, cfg, progress=False)
    cut = str(tmp_path / "cut")
    train_sft(tiny_task["model"], tiny_task["demos"], cut, cfg, progress=False)
    import shutil

    shutil.rmtree(os.path.join(cut, "checkpoints", "step_00000012"))  # as if killed after step 6
    shutil.rmtree(os.path.join(cut, "model"))
    resumed = train_sft(tiny_task["model"], tiny_task["demos"], cut, cfg, resume=True, progress=False)
    assert [m["step"] for m in resumed.metrics] == [4, 8, 12]
    a, b = _weights(os.path.join(full, "model")), _weights(os.path.join(cut, "model"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    state = json.load(open(os.path.join(cut, "checkpoints", "step_00000012", "trainer_state.json")))
    assert state["step"] == 12


def test_optimizer_state_roundtrip_without_pickle():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.9))
    model(torch.ones(4, 3)).sum().backward()
    opt.step()
    tensors, meta = optimizer_state_to_flat(opt.state_dict())
    json.dumps(meta)  # the non-tensor part is plain JSON
    assert all(isinstance(v, torch.Tensor) for v in tensors.values())
    restored = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=1.0)
    restored.load_state_dict(optimizer_state_from_flat(tensors, json.loads(json.dumps(meta))))
    a, b = opt.state_dict(), restored.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for i in a["state"]:
        for k in a["state"][i]:
            torch.testing.assert_close(a["state"][i][k], b["state"][i][k])


def test_cli_make_task_sft_eval_and_bad_rows(tmp_path, capsys):
    from offrl.cli import main

    task = str(tmp_path / "task")
    assert main(["prefs", "make-task", "--out", task, "--train-prompts", "120", "--eval-prompts", "10",
                 "--hidden-size", "32", "--layers", "1"]) == 0
    assert main(["prefs", "sft", "--model", f"{task}/model", "--data", f"{task}/demos.jsonl", "--out",
                 str(tmp_path / "sft"), "--steps", "4", "--batch-size", "8", "--max-length", "24",
                 "--no-progress", "--lr", "1e-3"]) == 0
    assert main(["prefs", "eval", "--model", str(tmp_path / "sft" / "model"), "--data", f"{task}/prompts_eval.jsonl",
                 "--samples", "2", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "reward" in out and "kl" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "sort:1=", "chosen": "1", "rejected": "1"}) + "\n")
    code = main(["prefs", "dpo", "--model", f"{task}/model", "--data", str(bad), "--out", str(tmp_path / "d"),
                 "--bad-rows", "raise", "--no-progress"])
    assert code == 2
    assert "line 1: chosen == rejected" in capsys.readouterr().err
    assert main(["prefs", "sft", "--model", str(tmp_path / "nope"), "--data", str(bad), "--out", str(tmp_path / "x")]) == 2
