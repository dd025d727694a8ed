"""Preference data: forms, sources, and bad rows reported by row number (dropped or refused)."""

import json

import pytest

pytest.importorskip("torch")

from offrl.errors import DatasetError  # noqa: E402
from offrl.prefs.data import load_preferences, tokenize_preferences, write_jsonl  # noqa: E402
from offrl.prefs.task import build_tokenizer  # noqa: E402

GOOD = {"prompt": "sort:31=", "chosen": "13", "rejected": "31"}
ROWS = [
    GOOD,
    {"prompt": "sort:21=", "chosen": "12"},                        # 1: missing rejected
    {"prompt": "sort:54=", "chosen": "", "rejected": "54"},         # 2: empty chosen
    {"prompt": "reverse:12=", "chosen": "21", "rejected": "21"},    # 3: chosen == rejected
    {"prompt": "reverse:" + "9" * 60 + "=", "chosen": "9", "rejected": "8"},  # 4: prompt too long
    {"prompt": "reverse:45=", "chosen": "54", "rejected": "45"},
]


def test_bad_rows_dropped_with_row_numbers_and_reasons(tmp_path):
    path = tmp_path / "pairs.jsonl"
    write_jsonl(str(path), ROWS)
    ds = load_preferences(str(path), bad_rows="drop")
    assert ds.kind == "paired" and len(ds) == 3
    assert [(b.row, b.reason) for b in ds.dropped] == [
        (2, "missing field 'rejected'"),
        (3, "empty chosen"),
        (4, "chosen == rejected (no preference to learn)"),
    ]
    assert "3 bad rows dropped" in ds.summary() and "line 3: empty chosen" in ds.summary()
    tok = tokenize_preferences(ds, build_tokenizer(), max_length=32)
    assert len(tok) == 2
    assert [b.row for b in tok.dropped] == [2, 3, 4, 5]
    assert "max_prompt_length is 32" in tok.dropped[-1].reason


def test_bad_rows_refused_with_row_number(tmp_path):
    path = tmp_path / "pairs.jsonl"
    write_jsonl(str(path), ROWS)
    with pytest.raises(DatasetError, match=r"line 2: missing field 'rejected'"):
        load_preferences(str(path), bad_rows="raise")
    ds = load_preferences(ROWS[:1] + ROWS[4:], bad_rows="raise")
    with pytest.raises(DatasetError, match=r"row 2: prompt is \d+ tokens"):
        tokenize_preferences(ds, build_tokenizer(), max_length=32, bad_rows="raise")


def test_truncation_is_counted_not_silent():
    ds = load_preferences([{"prompt": "sort:1=", "chosen": "1" * 40, "rejected": "2"}])
    tok = tokenize_preferences(ds, build_tokenizer(), max_length=16)
    assert tok.truncated == 1
    assert len(tok.prompt_ids[0]) + len(tok.completions[0][0]) == 16
    assert tok.completions[1][0][-1] == build_tokenizer().eos_token_id  # EOS appended to plain text


def test_sources_jsonl_parquet_hf_and_unpaired(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [GOOD, {"prompt": "sort:54=", "chosen": "45", "rejected": "54"}]
    pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "p.parquet"))
    from_parquet = load_preferences(str(tmp_path / "p.parquet"))
    from_hf = load_preferences(datasets.Dataset.from_list(rows))
    assert [r["chosen"] for r in from_parquet.rows] == [r["chosen"] for r in from_hf.rows] == ["13", "45"]
    unpaired = load_preferences([
        {"prompt": "sort:31=", "completion": "13", "label": True},
        {"prompt": "sort:31=", "completion": "31", "label": "yes"},
        {"prompt": "sort:31=", "completion": "  ", "label": False},
    ])
    assert unpaired.kind == "unpaired" and len(unpaired) == 1
    assert [b.row for b in unpaired.dropped] == [2, 3]
    split = from_hf.to_unpaired()
    assert [r["label"] for r in split.rows] == [True, False, True, False]
    with pytest.raises(DatasetError, match="columns"):
        load_preferences([{"text": "x"}])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GOOD) + "\n{not json\n")
    with pytest.raises(DatasetError, match="line 2"):
        load_preferences(str(bad))


def test_conversational_form_uses_chat_template():
    tokenizer = build_tokenizer()
    conv = [{"prompt": [{"role": "user", "content": "sort:31="}],
             "chosen": [{"role": "assistant", "content": "13"}],
             "rejected": [{"role": "assistant", "content": "31"}]}]
    ds = load_preferences(conv)
    assert ds.conversational
    tok = tokenize_preferences(ds, tokenizer, max_length=32)
    plain = tokenize_preferences(load_preferences([GOOD]), tokenizer, max_length=32)
    # the task's chat template renders exactly like the plain form
    assert tok.prompt_ids == plain.prompt_ids and tok.completions == plain.completions
    mixed = conv + [GOOD]
    assert load_preferences(mixed).dropped[0].reason.startswith("prompt is not a list")
