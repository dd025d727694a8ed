"""Preference files that are not rows at all are refused in one sentence naming the 1-based line
a text editor shows; dropped bad rows are counted with or without an evaluation split; model
folders load safetensors only."""

import json

import pytest

pytest.importorskip("torch")

from offrl.errors import ConfigError, DatasetError  # noqa: E402
from offrl.prefs.data import load_preferences, read_numbered_rows  # noqa: E402

GOOD = {"prompt": "sort:31=", "chosen": "13", "rejected": "31"}


def _lines(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def _refused(path, pattern):
    with pytest.raises(DatasetError, match=pattern) as exc:
        load_preferences(str(path))
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_invalid_utf8_names_the_line_and_column(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(_lines(GOOD, "").encode() + b'{"prompt": "caf\xe9", "chosen": "a", "rejected": "b"}\n')
    _refused(path, r"line 3 is not valid UTF-8 \(byte 0xe9 at column 16\)")  # line 2 is blank
    whole = tmp_path / "pairs.json"
    whole.write_bytes(b'[\n  {"prompt": "a", "chosen": "b", "rejected": "c"},\n  {"prompt": "\xff"}\n]')
    _refused(whole, r"line 3 is not valid UTF-8 \(byte 0xff at column 15\)")


@pytest.mark.parametrize("value, kind", [("3", "a number"), ("[1, 2]", "a list"), ('"text"', "a string"), ("null", "null")])
def test_a_line_that_is_not_an_object_is_refused_naming_it(tmp_path, value, kind):
    path = tmp_path / "pairs.jsonl"
    path.write_text(_lines(GOOD, GOOD, value))
    _refused(path, rf"line 3 is {kind}, not a JSON object")


def test_json_list_elements_are_numbered_by_the_line_they_start_on(tmp_path):
    path = tmp_path / "pairs.json"
    path.write_text('[\n  {"prompt": "a", "chosen": "b", "rejected": "c"},\n\n  {"prompt": "d",\n   "chosen": "e"},\n  7\n]\n')
    with pytest.raises(DatasetError, match=r"line 6 is a number"):
        load_preferences(str(path))
    path.write_text('[\n  {"prompt": "a", "chosen": "b", "rejected": "c"},\n\n  {"prompt": "d",\n   "chosen": "e"}\n]\n')
    rows, _, numbers, unit = read_numbered_rows(str(path))
    assert numbers == [2, 4] and unit == "line"
    ds = load_preferences(str(path))
    assert [(b.row, str(b)) for b in ds.dropped] == [(4, "line 4: missing field 'rejected'")]


def test_truncated_json_names_line_and_column(tmp_path):
    path = tmp_path / "pairs.json"
    text = json.dumps([GOOD, GOOD], indent=1)
    path.write_text(text[:-20])
    line = text[:-20].count("\n") + 1
    _refused(path, rf"line {line} column \d+ is not valid JSON .*truncated")


def test_row_numbers_are_the_lines_an_editor_shows(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(_lines(GOOD, "", {"prompt": "x", "chosen": "1", "rejected": "1"}))
    with pytest.raises(DatasetError, match=r"line 3: chosen == rejected"):
        load_preferences(str(path), bad_rows="raise")
    assert [b.row for b in load_preferences([GOOD, {"prompt": "p"}]).dropped] == [2]  # a list: 1-based rows


def test_dropped_rows_are_counted_with_an_evaluation_split(tmp_path):
    from offrl.prefs.config import SFTConfig
    from offrl.prefs.runs import prepare_data
    from offrl.prefs.task import build_tokenizer

    rows = [{"prompt": f"sort:{i}{i + 1}=", "chosen": f"{i + 1}{i}", "rejected": f"{i}{i + 1}"} for i in range(1, 9)]
    rows[2] = {"prompt": "sort:33=", "chosen": "33", "rejected": "33"}        # line 3: chosen == rejected
    rows[5] = {"prompt": "sort:66=", "chosen": ""}                            # line 6: missing rejected
    path = tmp_path / "pairs.jsonl"
    path.write_text(_lines(*rows))
    tokenizer = build_tokenizer()
    for eval_fraction in (0.0, 0.25):
        config = SFTConfig(eval_fraction=eval_fraction, batch_size=2, max_length=24)
        _, train, held_out, report = prepare_data(str(path), tokenizer, config, kind="paired")
        assert report["bad_rows_dropped"] == 2, eval_fraction
        assert report["bad_rows"] == ["line 3: chosen == rejected (no preference to learn)", "line 6: missing field 'rejected'"]
        assert report["rows_train"] + report["rows_eval"] == 6


def test_a_model_folder_with_only_bin_weights_is_refused_in_one_line(tmp_path):
    from offrl.prefs.modeling import load_causal_lm
    from offrl.prefs.reward_model import load_reward_model

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"not even a pickle")
    for load in (load_causal_lm, lambda p: load_reward_model(p)):
        with pytest.raises(ConfigError, match=r"holds only PyTorch pickle weights \(pytorch_model.bin\); offrl loads safetensors only") as exc:
            load(str(tmp_path))
        assert "\n" not in str(exc.value)


def test_the_loaders_ask_transformers_for_safetensors(tmp_path, monkeypatch):
    """Independent of the folder check: from_pretrained itself is told use_safetensors=True."""
    import transformers

    from offrl.prefs.modeling import load_causal_lm

    seen = {}

    def fake(path, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fake)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(RuntimeError):
        load_causal_lm(str(tmp_path))
    assert seen["use_safetensors"] is True and seen["trust_remote_code"] is False


def test_cli_exit_2_for_a_list_line(tmp_path, capsys):
    from offrl.cli import main
    from offrl.prefs.task import TaskConfig, make_task

    task = make_task(str(tmp_path / "task"), TaskConfig(train_prompts=20, eval_prompts=5, hidden_size=8,
                                                         intermediate_size=16, layers=1, heads=2))
    path = tmp_path / "pairs.jsonl"
    path.write_text(_lines(GOOD, "[1, 2]"))
    capsys.readouterr()
    assert main(["prefs", "dpo", "--model", task["model"], "--data", str(path), "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{path} line 2 is a list, not a JSON object" in err
