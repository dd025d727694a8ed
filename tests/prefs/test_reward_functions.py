"""Reward functions as Python callables (``--reward module:function``, TRL's ``reward_funcs``): loaded by
name or path, combined with weights, used by GRPO; every bad one refused in one line, exit 2, the run
folder untouched."""

import json

import pytest

torch = pytest.importorskip("torch")

from offrl.errors import ConfigError  # noqa: E402
from offrl.prefs.rewards import CombinedReward, FunctionReward, load_reward_function, make_reward  # noqa: E402

MODULE = '''
import math

def length(prompts, completions):
    return [len(c) for c in completions]

def exact(prompts, completions, **kwargs):
    from offrl.prefs.task import judge
    return [float(judge(p, c) == 1.0) for p, c in zip(prompts, completions)]

def first_char(prompts, completions):
    import numpy as np
    return np.array([float(c[:1] == "1") for c in completions])

def too_few(prompts, completions):
    return [0.0] * (len(completions) - 1)

def not_finite(prompts, completions):
    return [math.nan] + [0.0] * (len(completions) - 1)

def words(prompts, completions):
    return ["good" for _ in completions]

def one_number(prompts, completions):
    return 1.0

NOT_A_FUNCTION = 3
'''


@pytest.fixture()
def reward_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(MODULE)
    (tmp_path / "broken_rewards.py").write_text("import a_module_that_does_not_exist\n")
    monkeypatch.chdir(tmp_path)  # importable by name from the current folder
    return str(tmp_path / "my_rewards.py")


def test_callables_by_name_and_path_combined_with_weights(reward_module):
    prompts = ["sort:312=", [{"role": "user", "content": "reverse:12="}], "sort:55="]
    completions = ["123", "21", "5"]
    assert load_reward_function("my_rewards:length")(prompts, completions) == [3, 2, 1]
    reward = make_reward(None, functions=("my_rewards:length", f"{reward_module}:exact"), weights=(0.5, 2.0))
    assert isinstance(reward, CombinedReward)
    scores = reward(prompts, completions)
    # by hand: 0.5 * length + 2 * exact  (exact: 1, 1, 0)
    assert scores.score.tolist() == pytest.approx([0.5 * 3 + 2, 0.5 * 2 + 2, 0.5 * 1 + 0])
    assert scores.parts["length"].tolist() == [3, 2, 1] and scores.parts["exact"].tolist() == [1, 1, 0]
    assert scores.std.tolist() == [0, 0, 0]
    single = make_reward(None, functions=("my_rewards:first_char",))  # a NumPy array is accepted
    assert isinstance(single, FunctionReward)
    assert single(prompts, completions).score.tolist() == [1.0, 0.0, 0.0]
    assert make_reward(None).name == "digits"  # no callable, no reward model: the program


@pytest.mark.parametrize("spec, words", [
    ("no_colon", "is not MODULE:FUNCTION"),
    ("no_such_module_xyz:f", "cannot import no_such_module_xyz (ModuleNotFoundError"),
    ("broken_rewards:f", "cannot import broken_rewards (ModuleNotFoundError: No module named 'a_module_that"),
    ("my_rewards:missing", "the module my_rewards has no attribute 'missing'"),
    ("my_rewards:NOT_A_FUNCTION", "is int, not a function"),
    ("nowhere/r.py:f", "the file nowhere/r.py does not exist"),
])
def test_bad_names_are_refused_when_loaded(reward_module, spec, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        load_reward_function(spec)


@pytest.mark.parametrize("name, words", [
    ("too_few", "returned 2 values for 3 completions"),
    ("not_finite", "returned nan for completion 0; every reward must be finite"),
    ("words", "returned 'good' (str) for completion 0; every reward must be a real number"),
    ("one_number", "returned float, not one number per completion"),
])
def test_bad_answers_are_refused(reward_module, name, words):
    reward = make_reward(None, functions=(f"my_rewards:{name}",))
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        reward(["sort:1=", "sort:2=", "sort:3="], ["1", "2", "3"])


def _main(args, capsys):
    from offrl.cli import main

    code = main(args)
    return code, capsys.readouterr().err.strip().splitlines()


def test_grpo_trains_on_weighted_callables(tiny_task, reward_module, tmp_path, capsys):
    out = tmp_path / "run"
    code, _ = _main(["prefs", "grpo", "--model", tiny_task["model"], "--prompts", tiny_task["prompts_train"],
                     "--out", str(out), "--steps", "2", "--batch-size", "4", "--group-size", "2",
                     "--max-new-tokens", "4", "--no-progress", "--reward", "my_rewards:exact",
                     "--reward", f"{reward_module}:length", "--reward-weights", "1,0.25"], capsys)
    assert code == 0
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    for row in rows:
        assert row["objective/scores"] == pytest.approx(row["rewards/exact"] + 0.25 * row["rewards/length"], abs=1e-5)
        assert 0 < row["rewards/length"] <= 4  # untrained model: up to 4 characters
    config = json.load(open(out / "config.json"))
    assert config["reward"] == ["my_rewards:exact", f"{reward_module}:length"] and config["reward_weights"] == [1, 0.25]


def test_bad_reward_callables_one_line_exit_2_run_folder_untouched(tiny_task, reward_module, tmp_path, capsys):
    base = ["--model", tiny_task["model"], "--prompts", tiny_task["prompts_train"], "--steps", "1",
            "--batch-size", "2", "--max-new-tokens", "4", "--no-progress"]
    cases = [
        (["--reward", "no_such_module_xyz:f"], "cannot import no_such_module_xyz"),
        (["--reward", "my_rewards:NOT_A_FUNCTION"], "is int, not a function"),
        (["--reward", "my_rewards:too_few"], "returned 3 values for 4 completions"),  # probed on 2 x 2 samples
        (["--reward", "my_rewards:not_finite"], "must be finite"),
        (["--reward", "my_rewards:words"], "must be a real number"),
        (["--reward", "my_rewards:length", "--reward-weights", "1,2"], "2 weight(s) for 1 reward(s)"),
        (["--reward", "my_rewards:length", "--reward-weights", "1,x"], "not a comma-separated list of numbers"),
        (["--reward", "my_rewards:length", "--reward-weights", "nan"], "must be finite numbers"),
    ]
    for command in ("grpo", "ppo"):
        for extra, words in cases:
            out = tmp_path / "out"
            code, err = _main(["prefs", command, *base, "--out", str(out), *extra], capsys)
            assert code == 2 and len(err) == 1 and words in err[0], (command, extra, err)
            assert not out.exists(), (command, extra)
