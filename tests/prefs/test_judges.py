"""Judges (program, reward model, pairwise LM with position swap), the constitution labeller and
iterative DPO."""

import json
import math
import os

import pytest

torch = pytest.importorskip("torch")

from offrl.errors import ConfigError  # noqa: E402
from offrl.prefs import judges as J  # noqa: E402
from offrl.prefs.task import judge as digits_score  # noqa: E402


def test_programmatic_judge_and_missing_verdict():
    p = J.ProgrammaticJudge().prefer(["sort:21=", "sort:21=", "sort:21="], ["12", "21", "12"], ["21", "12", "12"])
    assert p.tolist() == [1.0, 0.0, 0.5]
    silent = J.ProgrammaticJudge(score=lambda p, c: None if c == "7" else 1.0, name="silent")
    with pytest.raises(ConfigError, match="judge silent returned no verdict for prompt row 1"):
        silent.prefer(["sort:1=", "sort:2="], ["1", "7"], ["2", "2"])


def test_reward_model_judge_is_bradley_terry():
    class FakeScorer:
        def __call__(self, prompts, completions):
            table = {"good": 2.0, "bad": -1.0, "ok": 0.0}
            return torch.tensor([table[c] for c in completions]), torch.zeros(len(completions))

    judge = J.RewardModelJudge.__new__(J.RewardModelJudge)
    judge.scorer, judge.name = FakeScorer(), "fake"
    p = judge.prefer(["x", "x"], ["good", "ok"], ["bad", "good"])
    assert p.tolist() == pytest.approx([1 / (1 + math.exp(-3.0)), 1 / (1 + math.exp(2.0))])


def test_pairwise_lm_judge_swaps_positions(tiny_sft):
    from offrl.prefs.modeling import collate_sequences, load_causal_lm, load_tokenizer, sequence_logps

    judge = J.PairwiseLMJudge(tiny_sft)
    prompts, a, b = ["sort:321=", "reverse:12="], ["123", "21"], ["312", "1"]
    p_ab, p_ba = judge.prefer(prompts, a, b), judge.prefer(prompts, b, a)
    # averaging both orders makes the verdict antisymmetric: P(a > b) + P(b > a) = 1 exactly
    torch.testing.assert_close(p_ab + p_ba, torch.ones(2), rtol=0, atol=1e-6)
    # by hand for the first pair: verdict log-probs in both orders
    model, tok = load_causal_lm(tiny_sft), load_tokenizer(tiny_sft)

    def verdict_logp(context, verdict):
        batch = collate_sequences([tok(context)["input_ids"]], [tok(verdict, add_special_tokens=False)["input_ids"]],
                                  tok.pad_token_id)
        return float(sequence_logps(model, batch).detach())

    # a chat prompt is judged on its messages' contents: the same verdict as the plain prompt
    chat = [[{"role": "user", "content": p}] for p in prompts]
    torch.testing.assert_close(judge.prefer(chat, a, b), p_ab, rtol=0, atol=0)
    assert J.prompt_text([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]) == "be brief\nhi"
    c1 = J.DEFAULT_TEMPLATE.format(prompt=prompts[0], first=a[0], second=b[0])
    c2 = J.DEFAULT_TEMPLATE.format(prompt=prompts[0], first=b[0], second=a[0])
    p1 = 1 / (1 + math.exp(verdict_logp(c1, "b") - verdict_logp(c1, "a")))
    p2 = 1 / (1 + math.exp(verdict_logp(c2, "a") - verdict_logp(c2, "b")))
    assert p_ab[0].item() == pytest.approx((p1 + p2) / 2, abs=1e-5)
    with pytest.raises(ConfigError, match="cannot give a verdict"):
        J.PairwiseLMJudge(tiny_sft, verdicts=("A", "B"))  # upper case is not in the character vocabulary


def test_label_with_judge_orders_pairs():
    prompts = ["sort:321=", "sort:11=", "sort:54="]
    groups = [["123", "321", "123"], ["11", "11"], ["45", "4"]]
    rows, stats = J.label_with_judge(prompts, groups, J.ProgrammaticJudge())
    assert stats["pairs"] == 2 and stats["tied_prompts"] == 1  # the second prompt has one distinct sample
    for row in rows:
        assert digits_score(row["prompt"], row["chosen"]) > digits_score(row["prompt"], row["rejected"])


def test_constitution_mechanics_and_empty_file(tmp_path, tiny_sft):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n# only a comment\n\n")
    with pytest.raises(ConfigError, match="holds no principle"):
        J.read_principles(str(empty))
    principles = tmp_path / "c.txt"
    principles.write_text("be correct\nbe exact\n")
    assert J.read_principles(str(principles)) == ["be correct", "be exact"]
    prompts = ["sort:321=", "reverse:123=", "sort:55=", "sort:9="]
    responses = ["132", "32", "55", "99"]
    rows, stats = J.constitution_pairs(prompts, responses, J.DigitsCritic(), ["be correct"])
    assert stats == {"prompts": 4, "pairs": 3, "unrevised": 1}  # "55" is already right
    by_prompt = {r["prompt"]: r for r in rows}
    assert by_prompt["sort:321="]["critique"] == "position 1 should be 2" and by_prompt["sort:321="]["chosen"] == "122"
    # a stronger stand-in fixes every error at once
    full, _ = J.constitution_pairs(prompts[:2], responses[:2], J.DigitsCritic(max_fixes=9), ["be correct"])
    assert [r["chosen"] for r in full] == ["123", "321"] and full[0]["critique"] == "position 1 should be 2; position 2 should be 3"
    assert by_prompt["reverse:123="]["chosen"] == "321" and by_prompt["sort:9="]["chosen"] == "9"
    for row in rows:
        assert digits_score(row["prompt"], row["chosen"]) > digits_score(row["prompt"], row["rejected"])
    # the LM critic runs the same mechanics with any local causal LM (the tiny one cannot critique well)
    lm_rows, lm_stats = J.constitution_pairs(prompts, responses, J.LMCritic(tiny_sft, max_new_tokens=4), ["be exact"])
    assert lm_stats["pairs"] + lm_stats["unrevised"] == 4
    assert all(set(r) >= {"prompt", "chosen", "rejected", "critique", "principle"} for r in lm_rows)


def test_iterate_rounds_chain_references_and_resume(rl_task, tmp_path):
    from offrl.prefs.config import IterateConfig
    from offrl.prefs.iterate import run_iterate

    cfg = IterateConfig(rounds=2, prompts_per_round=80, samples=4, max_new_tokens=6, steps=6, batch_size=16,
                        lr=1e-3, beta=0.3, max_length=24, eval_samples=2, compare_offline=True)
    out = str(tmp_path / "iter")
    result = run_iterate(rl_task["sft"], rl_task["prompts_train"], out, cfg, eval_prompts=rl_task["prompts_eval"],
                         progress=False, log=lambda s: None)
    rows = result["rows"]
    assert [(r["round"], r["method"]) for r in rows] == [(0, "start"), (1, "iterative"), (2, "iterative"),
                                                         (2, "offline")]
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    assert rows[1]["reference"] == rl_task["sft"]
    assert rows[2]["reference"] == os.path.join(out, "round_1", "run", "model")  # the previous round is the reference
    assert rows[3]["pairs"] <= rows[1]["pairs"] + rows[2]["pairs"]  # the same label budget
    assert json.load(open(os.path.join(out, "round_2", "run", "config.json")))["reference_model"] == rows[2]["reference"]
    again = run_iterate(rl_task["sft"], rl_task["prompts_train"], out, cfg, eval_prompts=rl_task["prompts_eval"],
                        progress=False, log=lambda s: None)
    assert [r.get("reward") for r in again["rows"][1:]] == [r.get("reward") for r in rows[1:]]


def test_cli_label_constitution_and_judges(rl_task, tmp_path, capsys):
    from offrl.cli import main

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    base = ["prefs", "label", "--model", rl_task["sft"], "--data", rl_task["prompts_eval"], "--max-prompts", "8"]
    assert main([*base, "--out", str(tmp_path / "x.jsonl"), "--constitution", str(empty)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no principle" in err[0] and not (tmp_path / "x.jsonl").exists()
    assert main([*base, "--out", str(tmp_path / "lm.jsonl"), "--judge", f"lm:{rl_task['sft']}"]) == 0
    rows = [json.loads(line) for line in open(tmp_path / "lm.jsonl")]
    assert rows and all(0.5 <= r["judge_probability"] <= 1 for r in rows)
    assert main([*base, "--out", str(tmp_path / "y.jsonl"), "--judge", "oracle"]) == 2
