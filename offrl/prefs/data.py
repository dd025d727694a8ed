"""Preference data: paired ``(prompt, chosen, rejected)``, unpaired ``(prompt, completion, label)``
(for KTO) and demonstrations ``(prompt, completion)`` (for SFT), validated row by row.

A preference pair is a logged decision: the prompt is the state, the two completions are
actions the behaviour policy took, and the label says which one the judge preferred.

Two forms are accepted for every kind:

* plain text: ``prompt`` and completions are strings; an EOS token is appended to completions;
* conversational: ``prompt`` is a list of ``{"role", "content"}`` messages and completions are
  lists of (assistant) messages; the tokenizer's chat template renders them, and the
  completion is whatever the template adds after the prompt rendered with
  ``add_generation_prompt=True``.

Bad rows (a missing field, an empty completion, ``chosen == rejected``, a label that is not a
boolean, and, once tokenized, a prompt of ``max_prompt_length`` tokens or more) are reported by
their 1-based line (.jsonl/.json: the line a text editor shows) or row number and either dropped (``bad_rows="drop"``, counted in ``dataset.dropped``) or refused
(``bad_rows="raise"``: :class:`offrl.errors.DatasetError`). Completions cut at ``max_length``
are counted in ``TokenizedPreferences.truncated``; nothing is cut silently. A file that is not
rows at all (invalid UTF-8, truncated JSON, a line holding a number or a list) is refused in one
sentence naming the line.

Example::

    ds = load_preferences("pairs.jsonl", bad_rows="drop")
    print(ds.summary())                    # kind, rows, dropped rows with reasons
    tok = tokenize_preferences(ds, tokenizer, max_length=64)
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from offrl.errors import ConfigError, DatasetError

KINDS = {
    "paired": ("prompt", "chosen", "rejected"),
    "unpaired": ("prompt", "completion", "label"),
    "completions": ("prompt", "completion"),
}
BAD_ROW_MODES = ("drop", "raise")


@dataclass(frozen=True)
class BadRow:
    """One rejected row: its ``row`` number as a person finds it, 1-based (the line a text editor
    shows for a .jsonl or .json file, ``unit="line"``; the record's position for Parquet, a
    ``datasets.Dataset`` or a list of dicts, ``unit="row"``) and the ``reason``."""

    row: int
    reason: str
    unit: str = "row"

    def __str__(self) -> str:
        return f"{self.unit} {self.row}: {self.reason}"


@dataclass(frozen=True)
class PreferenceDataset:
    """Validated preference rows of one ``kind`` (``paired``, ``unpaired`` or ``completions``).

    ``rows`` are dicts with the kind's fields plus ``row`` (the source's 1-based line or row
    number, see :class:`BadRow`); ``dropped`` lists the rows removed by validation and why.
    """

    kind: str
    rows: tuple[Mapping[str, Any], ...]
    conversational: bool = False
    source: str = "<rows>"
    dropped: tuple[BadRow, ...] = field(default_factory=tuple)
    unit: str = "row"

    def __len__(self) -> int:
        return len(self.rows)

    def summary(self, max_listed: int = 5) -> str:
        form = "conversational" if self.conversational else "plain-text"
        text = f"{self.source}: {len(self.rows)} {self.kind} {form} rows"
        if self.dropped:
            listed = "; ".join(str(b) for b in self.dropped[:max_listed])
            more = f"; ... {len(self.dropped) - max_listed} more" if len(self.dropped) > max_listed else ""
            text += f", {len(self.dropped)} bad rows dropped ({listed}{more})"
        return text

    def split(self, eval_fraction: float, seed: int = 0) -> tuple["PreferenceDataset", "PreferenceDataset"]:
        """Deterministic train / held-out split by rows (for pairs: by prompt, so no prompt leaks)."""
        import random

        prompts = sorted({_prompt_key(r["prompt"]) for r in self.rows})
        random.Random(seed).shuffle(prompts)
        n_eval = max(1, int(round(eval_fraction * len(prompts)))) if eval_fraction > 0 else 0
        held_out = set(prompts[:n_eval])
        train = tuple(r for r in self.rows if _prompt_key(r["prompt"]) not in held_out)
        test = tuple(r for r in self.rows if _prompt_key(r["prompt"]) in held_out)
        make = lambda rows, tag: PreferenceDataset(self.kind, rows, self.conversational, f"{self.source}[{tag}]",
                                                   unit=self.unit)
        return make(train, "train"), make(test, "eval")

    def to_unpaired(self) -> "PreferenceDataset":
        """Split each pair into a desirable (chosen) and an undesirable (rejected) example, for KTO."""
        if self.kind == "unpaired":
            return self
        if self.kind != "paired":
            raise DatasetError(f"{self.source} holds {self.kind} rows; KTO needs paired or unpaired rows.")
        rows = []
        for r in self.rows:
            rows.append({"prompt": r["prompt"], "completion": r["chosen"], "label": True, "row": r["row"]})
            rows.append({"prompt": r["prompt"], "completion": r["rejected"], "label": False, "row": r["row"]})
        return PreferenceDataset("unpaired", tuple(rows), self.conversational, self.source, self.dropped, self.unit)

    def to_completions(self) -> "PreferenceDataset":
        """Demonstrations for SFT: chosen completions of pairs, desirable ones of unpaired rows."""
        if self.kind == "completions":
            return self
        if self.kind == "paired":
            rows = [{"prompt": r["prompt"], "completion": r["chosen"], "row": r["row"]} for r in self.rows]
        else:
            rows = [{"prompt": r["prompt"], "completion": r["completion"], "row": r["row"]} for r in self.rows if r["label"]]
        return PreferenceDataset("completions", tuple(rows), self.conversational, self.source, self.dropped, self.unit)


def _prompt_key(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


# --------------------------------------------------------------------------- loading


def read_rows(source: Any) -> tuple[list[dict], str]:
    """Raw rows from a JSONL/JSON/Parquet path, a Hugging Face ``datasets.Dataset`` or a list of dicts."""
    rows, name, _, _ = read_numbered_rows(source)
    return rows, name


def _utf8(path: str, raw: bytes, first_line: int = 1) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + raw.count(b"\n", 0, exc.start)
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DatasetError(f"{path} line {line} is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {column}); "
                           "re-save the file as UTF-8.") from None


def _kind_of(value: Any) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _require_objects(rows: list, numbers: list[int], name: str, unit: str) -> None:
    for row, n in zip(rows, numbers):
        if not isinstance(row, Mapping):
            raise DatasetError(f"{name} {unit} {n} is {_kind_of(row)}, not a JSON object with the rows' fields "
                               "(e.g. {\"prompt\": ..., \"chosen\": ..., \"rejected\": ...}); fix or remove it.")


def _json_list_lines(text: str, path: str) -> tuple[list, list[int]]:
    """The elements of the JSON list in ``text`` and the 1-based line each one starts on."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path} line {exc.lineno} column {exc.colno} is not valid JSON ({exc.msg}); "
                           "the file may be truncated: fix or re-export it.") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path} must hold a JSON list of row objects.")
    decoder, ws = json.JSONDecoder(), re.compile(r"[\s,]*")
    numbers, index = [], ws.match(text, text.index("[") + 1).end()
    for _ in data:
        numbers.append(text.count("\n", 0, index) + 1)
        index = ws.match(text, decoder.raw_decode(text, index)[1]).end()
    return data, numbers


def read_numbered_rows(source: Any) -> tuple[list[dict], str, list[int], str]:
    """``(rows, name, numbers, unit)``: :func:`read_rows`'s rows with the 1-based number a person
    uses to find each one (``unit`` "line" for .jsonl/.json files, "row" otherwise). Invalid
    UTF-8, invalid or truncated JSON and a row that is not an object (a number, a list) are
    refused in one :class:`~offrl.errors.DatasetError` sentence naming the line."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise DatasetError(f"{path} does not exist; pass a .jsonl, .json or .parquet file.")
        if path.endswith(".jsonl"):
            rows, numbers = [], []
            with open(path, "rb") as fh:
                for lineno, raw in enumerate(fh, start=1):
                    line = _utf8(path, raw, lineno) if raw.strip() else ""
                    line = line.lstrip("\ufeff") if lineno == 1 else line  # a byte-order mark
                    if not line.strip():
                        continue
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise DatasetError(f"{path} line {lineno} is not valid JSON ({exc.msg}); fix or remove that line.") from None
                    numbers.append(lineno)
            _require_objects(rows, numbers, path, "line")
            return rows, path, numbers, "line"
        if path.endswith(".json"):
            with open(path, "rb") as fh:
                text = _utf8(path, fh.read()).lstrip("\ufeff")
            rows, numbers = _json_list_lines(text, path)
            _require_objects(rows, numbers, path, "line")
            return rows, path, numbers, "line"
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
            return rows, path, list(range(1, len(rows) + 1)), "row"
        raise DatasetError(f"{path} has an unknown extension; use .jsonl, .json or .parquet.")
    if hasattr(source, "to_list") and hasattr(source, "column_names"):  # datasets.Dataset
        rows = list(source.to_list())
        return rows, f"<datasets.Dataset {len(source)} rows>", list(range(1, len(rows) + 1)), "row"
    if isinstance(source, Sequence):
        numbers = list(range(1, len(source) + 1))
        _require_objects(list(source), numbers, "<rows>", "row")
        return [dict(r) for r in source], "<rows>", numbers, "row"
    raise DatasetError(f"cannot read preference data from {type(source).__name__}; pass a path, a datasets.Dataset or a list of dicts.")


def detect_kind(rows: list[dict], source: str) -> str:
    keys: set[str] = set()
    for r in rows[:100]:
        keys.update(r)
    if {"chosen", "rejected"} & keys:
        return "paired"
    if "label" in keys:
        return "unpaired"
    if "completion" in keys:
        return "completions"
    raise DatasetError(
        f"{source} has columns {sorted(keys)}; expected prompt/chosen/rejected (paired), "
        "prompt/completion/label (unpaired) or prompt/completion (demonstrations)."
    )


def _is_conversation(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in value)


def _empty(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip() == ""
    if isinstance(value, list):
        return len(value) == 0 or all(not str(m.get("content", "")).strip() for m in value)
    return True


def _check_row(row: Mapping[str, Any], kind: str, conversational: bool) -> str | None:
    """The reason a row is bad, or None."""
    for key in KINDS[kind]:
        if key not in row or row[key] is None:
            return f"missing field {key!r}"
    prompt = row["prompt"]
    text_fields = ("chosen", "rejected") if kind == "paired" else ("completion",)
    if conversational:
        if not _is_conversation(prompt):
            return "prompt is not a list of {role, content} messages like the other rows"
        for key in text_fields:
            value = row[key]
            if isinstance(value, str):
                continue
            if not _is_conversation(value):
                return f"{key} is neither a string nor a list of messages"
    else:
        if not isinstance(prompt, str):
            return "prompt is not a string like the other rows"
        for key in text_fields:
            if not isinstance(row[key], str):
                return f"{key} is not a string"
    for key in text_fields:
        if _empty(row[key]):
            return f"empty {key}"
    if kind == "paired" and row["chosen"] == row["rejected"]:
        return "chosen == rejected (no preference to learn)"
    if kind == "unpaired" and not isinstance(row["label"], bool) and row["label"] not in (0, 1):
        return f"label {row['label']!r} is not a boolean"
    return None


def load_preferences(
    source: Any,
    kind: str | None = None,
    bad_rows: str = "drop",
) -> PreferenceDataset:
    """Read and validate preference rows; see the module docstring for the accepted forms.

    ``kind`` is detected from the columns when not given. ``bad_rows="drop"`` removes bad rows
    and lists them in ``dataset.dropped``; ``"raise"`` refuses the data at the first bad row.
    """
    if isinstance(source, PreferenceDataset):
        return source
    if bad_rows not in BAD_ROW_MODES:
        raise ConfigError(f"bad_rows={bad_rows!r} is unknown; use one of {BAD_ROW_MODES}.")
    rows, name, numbers, unit = read_numbered_rows(source)
    if not rows:
        raise DatasetError(f"{name} holds no rows.")
    kind = kind or detect_kind(rows, name)
    if kind not in KINDS:
        raise ConfigError(f"kind={kind!r} is unknown; use one of {tuple(KINDS)}.")
    first_prompt = next((r.get("prompt") for r in rows if r.get("prompt") is not None), None)
    conversational = _is_conversation(first_prompt)
    good, dropped = [], []
    for i, row in zip(numbers, rows):
        reason = _check_row(row, kind, conversational)
        if reason is not None:
            if bad_rows == "raise":
                raise DatasetError(f"{name} {unit} {i}: {reason}; fix the row or pass bad_rows='drop' (--bad-rows drop).")
            dropped.append(BadRow(i, reason, unit))
            continue
        clean = {k: row[k] for k in KINDS[kind]}
        if kind == "unpaired":
            clean["label"] = bool(clean["label"])
        clean["row"] = i
        good.append(clean)
    if not good:
        raise DatasetError(f"{name}: all {len(rows)} rows are bad (first: {dropped[0]}); fix the data.")
    return PreferenceDataset(kind, tuple(good), conversational, name, tuple(dropped), unit)


def write_jsonl(path: str, rows: Iterable[Mapping[str, Any]]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


# --------------------------------------------------------------------------- tokenization


@dataclass
class TokenizedPreferences:
    """Token ids ready for batching. ``completions`` holds one list per completion slot:
    ``[chosen, rejected]`` for pairs, ``[completion]`` otherwise; ``labels`` for unpaired rows.
    ``truncated`` counts completions cut at ``max_length``; ``dropped`` the rows refused."""

    kind: str
    prompt_ids: list[list[int]]
    completions: list[list[list[int]]]
    rows: list[int]
    labels: list[bool] | None = None
    truncated: int = 0
    dropped: list[BadRow] = field(default_factory=list)
    prompts: list[Any] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def lengths(self) -> list[int]:
        """Longest prompt+completion length per example (for length bucketing)."""
        return [len(p) + max(len(c[i]) for c in self.completions) for i, p in enumerate(self.prompt_ids)]


def render_example(tokenizer, prompt: Any, completion: Any, conversational: bool) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids); the completion starts where prompt and prompt+completion diverge."""
    if conversational:
        messages = completion if isinstance(completion, list) else [{"role": "assistant", "content": completion}]
        prompt_ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        full_ids = tokenizer.apply_chat_template(list(prompt) + list(messages), tokenize=True)
        if isinstance(prompt_ids, Mapping):
            prompt_ids, full_ids = prompt_ids["input_ids"], full_ids["input_ids"]
        prompt_ids, full_ids = list(prompt_ids), list(full_ids)
    else:
        eos = tokenizer.eos_token or ""
        text = completion if completion.endswith(eos) else completion + eos
        prompt_ids = tokenizer(prompt)["input_ids"]
        full_ids = tokenizer(prompt + text)["input_ids"]
    n = 0
    while n < min(len(prompt_ids), len(full_ids)) and prompt_ids[n] == full_ids[n]:
        n += 1
    return full_ids[:n], full_ids[n:]


def tokenize_preferences(
    dataset: PreferenceDataset,
    tokenizer,
    max_length: int = 512,
    max_prompt_length: int | None = None,
    bad_rows: str = "drop",
) -> TokenizedPreferences:
    """Tokenize rows; a prompt of ``max_prompt_length`` (default ``max_length``) tokens or more is a
    bad row (dropped and reported, or refused); a completion running past ``max_length`` is
    truncated there and counted in ``truncated``. Chat-format rows for a tokenizer without a chat
    template are refused in one sentence."""
    if bad_rows not in BAD_ROW_MODES:
        raise ConfigError(f"bad_rows={bad_rows!r} is unknown; use one of {BAD_ROW_MODES}.")
    max_prompt_length = max_prompt_length or max_length
    if dataset.conversational:
        from offrl.prefs.chat import require_chat_template

        require_chat_template(tokenizer, dataset.source)
    slots = ("chosen", "rejected") if dataset.kind == "paired" else ("completion",)
    out = TokenizedPreferences(dataset.kind, [], [[] for _ in slots], [], [] if dataset.kind == "unpaired" else None)
    out.dropped = list(dataset.dropped)
    for r in dataset.rows:
        rendered = [render_example(tokenizer, r["prompt"], r[s], dataset.conversational) for s in slots]
        prompt_ids = min((p for p, _ in rendered), key=len)
        if len(prompt_ids) >= max_prompt_length:
            reason = f"prompt is {len(prompt_ids)} tokens, max_prompt_length is {max_prompt_length}"
            if bad_rows == "raise":
                raise DatasetError(
                    f"{dataset.source} {dataset.unit} {r['row']}: {reason}; raise --max-length or pass --bad-rows drop."
                )
            out.dropped.append(BadRow(r["row"], reason, dataset.unit))
            continue
        room = max_length - len(prompt_ids)
        for slot, (p_ids, c_ids) in enumerate(rendered):
            c_ids = p_ids[len(prompt_ids):] + c_ids
            if len(c_ids) > room:
                c_ids = c_ids[:room]
                out.truncated += 1
            out.completions[slot].append(c_ids)
        out.prompt_ids.append(list(prompt_ids))
        out.rows.append(r["row"])
        out.prompts.append(r["prompt"])
        if out.labels is not None:
            out.labels.append(bool(r["label"]))
    if not out.prompt_ids:
        raise DatasetError(f"{dataset.source}: no row fits max_length={max_length}; raise --max-length.")
    return out
