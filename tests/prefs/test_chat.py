"""Chat models end to end on a tiny locally built Llama whose tokenizer has a chat template of our own
(``<|user|>...<|end|><|assistant|>``, the turn ended by ``<|end|>``, not EOS): the rendered text, the
stop tokens, generation stopping at the end-of-turn token, SFT on chat data, short GRPO / PPO runs
on chat prompts, and chat data for a tokenizer without a template refused in one line, exit 2."""

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")

from offrl.errors import ConfigError  # noqa: E402
from offrl.prefs.chat import first_stop_mask, prompt_ids, render_prompt, stop_token_ids  # noqa: E402
from offrl.prefs.task import TaskConfig, build_tokenizer  # noqa: E402

MESSAGES = [{"role": "user", "content": "sort:312="}]


def test_rendered_text_and_stop_tokens():
    tok = build_tokenizer(chat=True)
    assert render_prompt(tok, MESSAGES) == "<bos><|user|>sort:312=<|end|><|assistant|>"
    ids = prompt_ids(tok, MESSAGES)
    # one BOS (the template's; the tokenizer adds none to a rendered conversation), then token by token
    assert tok.convert_ids_to_tokens(ids) == ["<bos>", "<|user|>", "s", "o", "r", "t", ":", "3", "1", "2", "=",
                                              "<|end|>", "<|assistant|>"]
    end = tok.convert_tokens_to_ids("<|end|>")
    assert stop_token_ids(tok) == [tok.eos_token_id, end]
    # a plain prompt is tokenized as it is, with the tokenizer's BOS
    assert tok.convert_ids_to_tokens(prompt_ids(tok, "sort:1=")) == ["<bos>", "s", "o", "r", "t", ":", "1", "="]
    # the plain task's template ends the assistant turn with EOS: EOS is the only stop token
    assert stop_token_ids(build_tokenizer()) == [build_tokenizer().eos_token_id]

    class Config:
        eos_token_id = [end, 7]

    assert stop_token_ids(tok, Config()) == [tok.eos_token_id, end, 7]


def test_first_stop_mask_by_hand():
    responses = torch.tensor([[5, 9, 6, 9, 5], [5, 5, 5, 5, 5], [8, 5, 5, 5, 5]])
    mask = first_stop_mask(responses, [9, 8])
    assert mask.tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def test_chat_pairs_tokenize_through_the_template():
    from offrl.prefs.data import load_preferences, tokenize_preferences

    tok = build_tokenizer(chat=True)
    ds = load_preferences([{"prompt": MESSAGES, "chosen": "123", "rejected": "132"}])
    assert ds.conversational
    out = tokenize_preferences(ds, tok, max_length=32)
    assert out.prompt_ids[0] == prompt_ids(tok, MESSAGES)
    end = tok.convert_tokens_to_ids("<|end|>")
    assert tok.convert_ids_to_tokens(out.completions[0][0]) == ["1", "2", "3", "<|end|>"]
    assert out.completions[1][0][-1] == end


@pytest.fixture(scope="module")
def chat_task(tmp_path_factory):
    """The digits task in chat format and its tiny Llama after a short SFT on chat demos (~10 s)."""
    from offrl.prefs.config import SFTConfig
    from offrl.prefs.sft import train_sft
    from offrl.prefs.task import make_task

    root = tmp_path_factory.mktemp("chat")
    cfg = TaskConfig(train_prompts=2000, eval_prompts=50, hidden_size=32, intermediate_size=64, layers=2, heads=2,
                     chat=True)
    paths = make_task(str(root / "task"), cfg)
    sft = SFTConfig(steps=300, batch_size=64, lr=5e-3, warmup_steps=20, log_every=100, max_length=24,
                    eval_fraction=0.05)
    paths["sft"] = train_sft(paths["model"], paths["demos"], str(root / "sft"), sft, progress=False).model_path
    return paths


def test_generation_stops_at_the_end_of_turn_token(chat_task):
    from offrl.prefs.modeling import load_causal_lm, load_tokenizer, sample_completions
    from offrl.prefs.rollout import generate_rollout
    from offrl.prefs.task import read_prompts

    tok = load_tokenizer(chat_task["sft"])
    policy = load_causal_lm(chat_task["sft"])
    prompts = read_prompts(chat_task["prompts_eval"])[:16]
    assert isinstance(prompts[0], list)
    end = tok.convert_tokens_to_ids("<|end|>")
    rollout = generate_rollout(policy, tok, prompts, group_size=2, max_new_tokens=12, seed=0)
    lengths = rollout.response_mask.sum(-1)
    stopped = 0
    for row in range(len(lengths)):
        n = int(lengths[row])
        tokens = rollout.responses[row].tolist()
        ends = [i for i in range(n) if tokens[i] == end]
        assert ends in ([], [n - 1])  # at most one <|end|>, the last response token
        assert all(t == tok.pad_token_id for t in tokens[n:])
        stopped += bool(ends)
    assert stopped >= 0.9 * len(lengths)  # the SFT model ends its turns; answers are <= 7 tokens, not 12
    assert float(lengths.float().mean()) < 9
    assert rollout.prompts[0] == prompts[0] and "<|end|>" not in rollout.texts[0]
    # the sampler of label / iterate / eval stops there too (and keeps the stop token in the ids)
    drawn = sample_completions(policy, tok, prompts, 1, 12, seed=0)
    assert sum(c[-1] == end for c in drawn.completion_ids) >= 0.9 * len(prompts)
    assert all(end not in c[:-1] for c in drawn.completion_ids)


def test_short_grpo_and_ppo_runs_on_chat_prompts(chat_task, tmp_path):
    from offrl.prefs.config import GRPOConfig, PPOConfig
    from offrl.prefs.grpo import train_grpo
    from offrl.prefs.ppo import train_ppo

    g = train_grpo(chat_task["sft"], chat_task["prompts_train"], str(tmp_path / "grpo"),
                   GRPOConfig(steps=3, batch_size=8, group_size=3, lr=1e-3, max_new_tokens=10, log_every=1),
                   progress=False)
    p = train_ppo(chat_task["sft"], chat_task["prompts_train"], str(tmp_path / "ppo"),
                  PPOConfig(steps=3, batch_size=8, lr=1e-3, max_new_tokens=10, log_every=1), progress=False)
    for result in (g, p):
        first = result.metrics[0]
        assert first["objective/kl"] == pytest.approx(0.0, abs=1e-6)  # pi == pi_ref at the first rollout
        assert 0.2 < first["objective/true_reward"] <= 1.0  # the judge reads the task from the user message
        assert first["response/length"] < 9  # stopped at <|end|>, not at the 10-token cap
        assert result.metrics[-1]["objective/kl"] != 0.0


def test_iterate_on_chat_prompts(chat_task, tmp_path):
    from offrl.prefs.config import IterateConfig
    from offrl.prefs.iterate import run_iterate
    from offrl.prefs.task import read_prompts

    cfg = IterateConfig(rounds=1, prompts_per_round=64, samples=2, steps=4, batch_size=8, max_new_tokens=10,
                        eval_samples=1)
    result = run_iterate(chat_task["sft"], chat_task["prompts_train"], str(tmp_path / "it"), cfg,
                         eval_prompts=read_prompts(chat_task["prompts_eval"])[:8], progress=False, log=lambda s: None)
    first = json.loads(open(tmp_path / "it" / "round_1" / "pairs.jsonl").readline())
    assert isinstance(first["prompt"], list) and isinstance(first["chosen"], str)
    assert result["rows"][1]["pairs"] > 0 and result["rows"][1]["length"] < 9


def _without_template(model: str, dest) -> str:
    shutil.copytree(model, dest)
    os.remove(os.path.join(dest, "chat_template.jinja"))
    return str(dest)


def _main(args, capsys):
    from offrl.cli import main

    code = main(args)
    return code, capsys.readouterr().err.strip().splitlines()


def test_chat_data_without_a_chat_template_one_line_exit_2(chat_task, tmp_path, capsys):
    from offrl.prefs.modeling import load_tokenizer

    bare = _without_template(chat_task["model"], tmp_path / "bare")
    assert not load_tokenizer(bare).chat_template
    words = "holds chat-format prompts (lists of {role, content} messages), but the model's tokenizer has no chat template"
    for command, data_flag, data in (("sft", "--data", chat_task["demos"]),
                                     ("grpo", "--prompts", chat_task["prompts_train"]),
                                     ("ppo", "--prompts", chat_task["prompts_train"]),
                                     ("iterate", "--prompts", chat_task["prompts_train"])):
        out = tmp_path / f"out_{command}"
        code, err = _main(["prefs", command, "--model", bare, data_flag, data, "--out", str(out), "--steps", "1",
                           *(["--no-progress"] if command != "label" else [])], capsys)
        assert code == 2 and len(err) == 1 and words in err[0], (command, err)
        assert not out.exists(), command  # the run folder untouched
    out = tmp_path / "pairs.jsonl"
    code, err = _main(["prefs", "label", "--model", bare, "--data", chat_task["prompts_train"], "--out", str(out)],
                      capsys)
    assert code == 2 and len(err) == 1 and words in err[0] and not out.exists()
    with pytest.raises(ConfigError, match="no chat template"):
        render_prompt(load_tokenizer(bare), MESSAGES)
