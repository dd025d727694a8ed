"""The guardrails: each rule on hand-made metric rows, the live monitor and the report on a real
PPO run against a deliberately exploitable (length-biased) reward model."""

import json
import os
import random

import pytest

from offrl.prefs.guard import GuardRules, guard_warnings


def _rows(proxy, true=None, kl=None, std=None, agreement=None):
    rows = []
    for i, p in enumerate(proxy):
        row = {"step": i + 1, "objective/rm_mean": p, "objective/scores": p, "objective/kl": (kl or [0.0] * len(proxy))[i]}
        if true is not None:
            row["objective/true_reward"] = true[i]
        if std is not None:
            row["objective/rm_std"] = std[i]
        if agreement is not None:
            row["guard/pair_agreement"] = agreement[i]
        rows.append(row)
    return rows


def _kinds(rows, **rules):
    return [w["kind"] for w in guard_warnings(rows, GuardRules(**rules))]


def test_guard_rules_on_hand_made_rows():
    # proxy up, true down: first two rows mean true 0.5, last two 0.4 -> drop 0.1 > 0.02
    assert _kinds(_rows([0, 0, 1, 1], true=[0.5, 0.5, 0.4, 0.4])) == ["reward_hacking"]
    assert _kinds(_rows([0, 0, 1, 1], true=[0.5, 0.5, 0.49, 0.49])) == []  # a drop within the tolerance
    assert _kinds(_rows([0, 0, 1, 1], true=[0.5, 0.5, 0.6, 0.6])) == []  # both rise: learning, not hacking
    assert _kinds(_rows([1, 1, 0, 0], true=[0.5, 0.5, 0.4, 0.4])) == []  # the proxy fell too
    assert _kinds(_rows([0, 0, 1], true=[0.5, 0.5, 0.1])) == []  # fewer than 2 windows of rows
    assert _kinds(_rows([0, 0, 1, 1], std=[0.1, 0.1, 0.2, 0.2])) == ["ensemble_disagreement"]  # ratio 2 > 1.5
    assert _kinds(_rows([0, 0, 1, 1], std=[0.1, 0.1, 0.14, 0.14])) == []
    assert _kinds(_rows([0, 0, 1, 1], agreement=[0.9, 0.9, 0.7, 0.7])) == ["agreement_drop"]
    assert _kinds(_rows([0, 0, 1, 1], kl=[1, 2, 3, 9]), kl_budget=8.0) == ["kl_budget"]
    assert _kinds(_rows([0], kl=[9]), kl_budget=8.0) == ["kl_budget"]  # the budget needs no history
    assert _kinds(_rows([0, 0, 1, 1], kl=[1, 2, 3, 9]), kl_budget=0.0) == []  # no budget set


def test_length_biased_reward_model_is_caught(rl_task, tmp_path, capsys):
    """PPO against a reward model trained on pairs whose chosen side is the right answer plus junk
    digits: the proxy rises, the true reward falls, and both the live monitor and the report say so."""
    torch = pytest.importorskip("torch")  # noqa: F841
    from offrl.cli import main
    from offrl.prefs.config import PPOConfig, RewardModelConfig
    from offrl.prefs.data import write_jsonl
    from offrl.prefs.ppo import train_ppo
    from offrl.prefs.reward_model import train_reward_model
    from offrl.prefs.task import read_prompts, target

    rng = random.Random(0)
    rows = [{"prompt": p, "chosen": target(p) + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 4))),
             "rejected": target(p)} for p in read_prompts(rl_task["prompts_train"])[:1500]]
    write_jsonl(str(tmp_path / "length_pairs.jsonl"), rows)
    rm = train_reward_model(rl_task["sft"], str(tmp_path / "length_pairs.jsonl"), str(tmp_path / "rm"),
                            RewardModelConfig(heads=3, steps=100, batch_size=32, lr=2e-3, log_every=50, max_length=24,
                                              eval_fraction=0.1), progress=False)
    assert rm.summary["eval/length_correlation"] > 0.5  # the bias the reward model learned
    run = str(tmp_path / "ppo")
    cfg = PPOConfig(steps=12, batch_size=32, lr=1e-3, kl_coef=0.01, max_new_tokens=8, log_every=3,
                    reward_model=rm.model_path, kl_budget=3.0)
    result = train_ppo(rl_task["sft"], rl_task["prompts_train"], run, cfg, progress=False)
    first, last = result.metrics[0], result.metrics[-1]
    assert last["objective/rm_mean"] > first["objective/rm_mean"] + 0.5
    assert last["objective/true_reward"] < first["objective/true_reward"] - 0.03
    live = [json.loads(line)["kind"] for line in open(os.path.join(run, "guard_warnings.jsonl"))]
    assert "reward_hacking" in live and "kl_budget" in live
    assert "guardrails, iteration" in capsys.readouterr().err
    assert main(["prefs", "guard", run]) == 0
    report = json.load(open(os.path.join(run, "guard", "report.json")))
    assert {w["kind"] for w in report["warnings"]} >= {"reward_hacking", "kl_budget"}
    assert [a["step"] for a in report["reward_model_heldout_accuracy"]] == [50, 100]
    for png in ("rewards.png", "kl.png", "disagreement.png", "length.png", "rm_accuracy.png"):
        assert os.path.getsize(os.path.join(run, "guard", png)) > 5_000, png
    assert "reward_hacking" in open(os.path.join(run, "guard", "report.md")).read()


def test_guard_cli_bad_run_folder(tmp_path, capsys):
    from offrl.cli import main

    assert main(["prefs", "guard", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not an online RLHF run folder" in err[0]
