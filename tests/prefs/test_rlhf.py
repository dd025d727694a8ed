"""PPO / GRPO / RLOO on the digits task: the true reward rises, the contract holds (metric names,
zero KL at the first rollout, resume == uninterrupted), rewards from a reward-model ensemble,
and bad input is refused in one line with exit code 2."""

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")

from offrl.prefs.config import GRPOConfig, PPOConfig  # noqa: E402
from offrl.prefs.grpo import train_grpo  # noqa: E402
from offrl.prefs.ppo import train_ppo  # noqa: E402

METRICS = ("objective/kl", "objective/entropy", "objective/rlhf_reward", "objective/non_score_reward",
           "objective/scores", "objective/true_reward", "policy/clipfrac", "policy/approxkl", "kl_coef")


def test_grpo_raises_the_true_reward(rl_task, tmp_path):
    cfg = GRPOConfig(steps=60, batch_size=32, group_size=4, lr=3e-3, kl_coef=0.01, max_new_tokens=8, log_every=10)
    result = train_grpo(rl_task["sft"], rl_task["prompts_train"], str(tmp_path / "grpo"), cfg, progress=False)
    rewards = [m["objective/true_reward"] for m in result.metrics]
    # each row averages 10 iterations x 128 samples (standard error ~0.01)
    assert rewards[-1] > rewards[0] + 0.04, rewards
    assert result.metrics[-1]["objective/kl"] > 0.1  # it moved away from the reference to get there


def test_ppo_raises_the_true_reward_with_a_value_head(rl_task, tmp_path):
    cfg = PPOConfig(steps=50, batch_size=64, lr=1e-3, kl_coef=0.01, max_new_tokens=8, log_every=10)
    result = train_ppo(rl_task["sft"], rl_task["prompts_train"], str(tmp_path / "ppo"), cfg, progress=False)
    rewards = [m["objective/true_reward"] for m in result.metrics]
    assert max(rewards[-2:]) > rewards[0] + 0.03, rewards
    assert result.metrics[-1]["val/vf_loss"] < result.metrics[0]["val/vf_loss"]  # the value learns
    for name in METRICS + ("val/vf_loss",):
        assert name in result.metrics[-1], name
    assert os.path.exists(tmp_path / "ppo" / "model" / "model.safetensors")
    assert os.path.exists(tmp_path / "ppo" / "value_head.safetensors")


def test_first_rollout_has_zero_kl_and_rloo_runs(rl_task, tmp_path):
    cfg = GRPOConfig(estimator="rloo", steps=2, batch_size=4, group_size=3, lr=1e-3, max_new_tokens=6, log_every=1)
    result = train_grpo(rl_task["sft"], rl_task["prompts_train"], str(tmp_path / "rloo"), cfg, progress=False)
    first = result.metrics[0]
    # pi == pi_ref; pi_old comes from the sampling pass, equal to the reference's forward pass up to float rounding
    assert first["objective/kl"] == pytest.approx(0.0, abs=1e-6)
    assert first["objective/non_score_reward"] == pytest.approx(0.0, abs=1e-6)
    assert first["objective/rlhf_reward"] == pytest.approx(first["objective/scores"])
    assert first["policy/clipfrac"] == 0.0  # one epoch: the ratio is exactly 1
    assert result.metrics[1]["objective/kl"] != 0.0
    rows = [json.loads(line) for line in open(tmp_path / "rloo" / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2]
    import csv

    with open(tmp_path / "rloo" / "metrics.csv") as fh:  # the shared run-folder log writes the CSV too
        assert [int(float(r["step"])) for r in csv.DictReader(fh)] == [1, 2]
    assert json.load(open(tmp_path / "rloo" / "config.json"))["estimator"] == "rloo"


def _weights(path):
    from safetensors.torch import load_file

    return load_file(path)


def test_ppo_resume_equals_uninterrupted_and_separate_value_model(rl_task, tmp_path):
    cfg = PPOConfig(steps=4, batch_size=6, lr=1e-3, max_new_tokens=6, log_every=1, save_every=2, epochs=2,
                    minibatches=2, kl_target=1.0, kl_coef=0.1, value_model=rl_task["sft"])
    full, cut = str(tmp_path / "full"), str(tmp_path / "cut")
    a = train_ppo(rl_task["sft"], rl_task["prompts_train"], full, cfg, progress=False)
    train_ppo(rl_task["sft"], rl_task["prompts_train"], cut, cfg, progress=False)
    shutil.rmtree(os.path.join(cut, "checkpoints", "step_00000004"))  # as if killed after iteration 2
    shutil.rmtree(os.path.join(cut, "model"))
    b = train_ppo(rl_task["sft"], rl_task["prompts_train"], cut, cfg, resume=True, progress=False)
    assert [m["step"] for m in b.metrics] == [1, 2, 3, 4]
    for key in ("objective/kl", "objective/scores", "kl_coef", "val/vf_loss"):
        assert [m[key] for m in a.metrics] == pytest.approx([m[key] for m in b.metrics], rel=1e-5, abs=1e-6), key
    assert a.metrics[-1]["kl_coef"] != 0.1  # the adaptive controller moved beta
    for name in ("model/model.safetensors", "value_head.safetensors", "value_model.safetensors"):
        wa, wb = _weights(os.path.join(full, name)), _weights(os.path.join(cut, name))
        for k in wa:
            torch.testing.assert_close(wa[k], wb[k], rtol=1e-5, atol=1e-6)


def test_reward_from_an_ensemble_with_uncertainty_penalty(rl_task, tiny_task, tmp_path):
    from offrl.prefs.config import RewardModelConfig
    from offrl.prefs.reward_model import train_reward_model

    rm = train_reward_model(rl_task["sft"], tiny_task["pairs"], str(tmp_path / "rm"),
                            RewardModelConfig(heads=3, steps=5, batch_size=16, lr=1e-3, log_every=5, max_length=24,
                                              eval_fraction=0.0), progress=False)
    cfg = GRPOConfig(steps=1, batch_size=4, group_size=2, max_new_tokens=6, reward_model=rm.model_path,
                     uncertainty_penalty=2.0)
    row = train_grpo(rl_task["sft"], rl_task["prompts_train"], str(tmp_path / "g"), cfg, progress=False).metrics[0]
    assert row["objective/rm_std"] > 0
    assert row["objective/scores"] == pytest.approx(row["objective/rm_mean"] - 2.0 * row["objective/rm_std"], abs=1e-5)


def _main(args, capsys):
    from offrl.cli import main

    code = main(args)
    return code, capsys.readouterr().err.strip().splitlines()


def test_bad_input_one_line_exit_2(rl_task, tiny_task, tmp_path, capsys):
    from offrl.prefs.task import build_tokenizer

    base = ["--model", rl_task["sft"], "--prompts", rl_task["prompts_train"], "--no-progress", "--steps", "1",
            "--batch-size", "2"]
    out = tmp_path / "o"
    code, err = _main(["prefs", "ppo", *base, "--out", str(out), "--kl-target", "0"], capsys)
    assert code == 2 and len(err) == 1 and "--kl-target is 0.0; it must be a number > 0" in err[0]
    long_prompts = tmp_path / "long.jsonl"
    long_prompts.write_text(json.dumps({"prompt": "sort:" + "1" * 70 + "="}) + "\n")
    code, err = _main(["prefs", "grpo", "--model", rl_task["sft"], "--prompts", str(long_prompts),
                       "--out", str(out)], capsys)
    assert code == 2 and len(err) == 1 and "row 0 has 77 tokens" in err[0] and "context of 64" in err[0]
    # a reward model whose tokenizer differs from the policy's
    rm = tmp_path / "rm"
    shutil.copytree(rl_task["sft"], rm)
    other = build_tokenizer()
    other.add_tokens(["@"])
    other.save_pretrained(rm)
    code, err = _main(["prefs", "grpo", *base, "--out", str(out), "--reward-model", str(rm)], capsys)
    assert code == 2 and len(err) == 1 and "uses a different tokenizer from the policy's" in err[0]
    assert not out.exists() or not (out / "model").exists()  # nothing written


@pytest.mark.slow
def test_grpo_longer_run_keeps_improving(rl_task, tmp_path):
    """300 iterations (a few minutes on 2 shared cores): the true reward keeps rising past the short test's."""
    cfg = GRPOConfig(steps=300, batch_size=32, group_size=4, lr=3e-3, kl_coef=0.01, max_new_tokens=8, log_every=50)
    result = train_grpo(rl_task["sft"], rl_task["prompts_train"], str(tmp_path / "grpo"), cfg, progress=False)
    rewards = [m["objective/true_reward"] for m in result.metrics]
    assert rewards[-1] > rewards[0] + 0.1, rewards
