"""The end-to-end experiment (SFT -> sample -> judge-labelled pairs -> DPO/IPO/KTO -> reward & KL)."""

import json
import os

import pytest

pytest.importorskip("torch")

from offrl.prefs.experiment import FrontierConfig, frontier_table, run_frontier  # noqa: E402
from offrl.prefs.labelling import label_pairs  # noqa: E402
from offrl.prefs.task import TaskConfig, corrupt, judge, target  # noqa: E402
from offrl.prefs.config import (GRPOConfig, IterateConfig, OnlineDPOConfig, PPOConfig, PreferenceConfig,  # noqa: E402
                                SFTConfig)


def test_judge_and_task_targets():
    assert target("sort:3141=") == "1134" and target("reverse:3141=") == "1413" and target("sum:3141=") == "9"
    assert judge("sort:3141=", "1134") == 1.0
    assert judge("sort:3141=", "1144") == pytest.approx(3 / 4)
    assert judge("sort:3141=", "11345") == pytest.approx(4 / 5)
    assert judge("sort:3141=", "") == 0.0
    import random

    rng = random.Random(0)
    assert all(corrupt("1134", rng) != "1134" for _ in range(50))


def test_label_pairs_best_vs_worst_and_ties():
    rows, stats = label_pairs(["sort:21=", "sort:33="], [["12", "21", "1"], ["33", "33"]], judge)
    assert stats["pairs"] == 1 and stats["tied_prompts"] == 1
    assert rows[0]["chosen"] == "12" and rows[0]["rejected"] in ("21", "1") and rows[0]["score_chosen"] == 1.0


def test_tiny_frontier_pipeline_runs_end_to_end(tmp_path):
    cfg = FrontierConfig(
        task=TaskConfig(train_prompts=300, eval_prompts=20, hidden_size=32, intermediate_size=64, heads=2),
        methods=("dpo", "kto", "simpo", "orpo", "ppo", "grpo", "dapo", "iterate", "online-dpo"),
        betas={"dpo": (0.3,), "kto": (0.3,), "simpo": (2.0,), "orpo": (0.3,), "ppo": (0.1,), "grpo": (0.1,),
               "dapo": (0.0,), "iterate": (0.3,), "online-dpo": (0.3,)},
        ppo=PPOConfig(steps=2, batch_size=8, max_new_tokens=6, lr=1e-3),
        grpo=GRPOConfig(steps=2, batch_size=4, group_size=2, max_new_tokens=6, lr=1e-3),
        dapo=GRPOConfig(steps=2, batch_size=4, group_size=2, max_new_tokens=6, lr=1e-3, loss_type="dapo",
                        clip_range_high=0.28, dynamic_sampling=True),
        online_dpo=OnlineDPOConfig(steps=2, batch_size=8, max_new_tokens=6, lr=1e-3),
        iterate=IterateConfig(rounds=1, prompts_per_round=40, steps=4, batch_size=8, max_length=24, max_new_tokens=6,
                              eval_samples=0),
        sft=SFTConfig(steps=30, batch_size=32, lr=5e-3, warmup_steps=5, log_every=15, max_length=24),
        preference=PreferenceConfig(steps=10, batch_size=16, lr=1e-3, warmup_steps=2, log_every=5, max_length=24,
                                    kl_prompts=0, eval_fraction=0.1),
        label_prompts=200, samples_per_prompt=4, eval_samples=2, max_new_tokens=8,
    )
    result = run_frontier(str(tmp_path), cfg, progress=False, log=lambda s: None)
    methods = [(r["method"], r["beta"]) for r in result["rows"]]
    assert methods == [("sft", None), ("dpo", 0.3), ("kto", 0.3), ("simpo", 2.0), ("orpo", 0.3), ("ppo", 0.1),
                       ("grpo", 0.1), ("dapo", 0.0), ("iterate", 0.3), ("online-dpo", 0.3)]
    sft = result["rows"][0]
    assert sft["kl"] == pytest.approx(0.0, abs=1e-6)  # the reference against itself
    assert all(0.0 <= r["reward"] <= 1.0 for r in result["rows"])
    assert result["label_stats"]["pairs"] > 50
    assert os.path.getsize(tmp_path / "frontier.png") > 10_000
    assert json.load(open(tmp_path / "results.json"))["rows"][1]["method"] == "dpo"
    assert frontier_table(result).row_count == 10
    runs = tmp_path / "runs"
    dapo = json.load(open(runs / "dapo_beta0" / "config.json"))
    assert dapo["loss_type"] == "dapo" and dapo["dynamic_sampling"] and dapo["kl_coef"] == 0.0
    assert json.load(open(runs / "online-dpo_beta0.3" / "config.json"))["trainer"] == "online-dpo"
    assert json.load(open(runs / "simpo_beta2" / "config.json"))["loss"] == "simpo"
    assert all(r["kl"] != 0 for r in result["rows"][1:])  # every method moved away from the SFT policy
    # rerunning reuses every finished stage
    again = run_frontier(str(tmp_path), cfg, progress=False, log=lambda s: None)
    assert [r["reward"] for r in again["rows"][1:]] == [r["reward"] for r in result["rows"][1:]]


@pytest.mark.slow
def test_full_frontier_dpo_beats_sft(tmp_path):
    """The default experiment (~13 min on 2 shared cores): some beta (KL coefficient) of each method,
    offline and online, beats SFT's reward."""
    result = run_frontier(str(tmp_path), FrontierConfig(), progress=False, log=lambda s: None)
    sft = result["rows"][0]["reward"]
    for method in ("dpo", "ipo", "kto", "ppo", "grpo", "iterate"):
        assert max(r["reward"] for r in result["rows"] if r["method"] == method) > sft + 0.02, method
