"""The shared pair schema on hand-written rows: both conversation forms, validation errors that
name the row and the field, and presenting a pair in either order."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from reflectrm.judging.types import Message
from reflectrm_harness.datasets import (
    DatasetError,
    Pair,
    Presented,
    pair_from_row,
    pair_to_row,
    read_pairs,
    read_rows,
)

PROMPT_ROW = {"id": "p1", "source": "demo", "prompt": "q", "chosen": "good", "rejected": "bad"}
MESSAGES_ROW = {
    "id": 7,
    "benchmark": "rmb",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and now?"},
    ],
    "chosen": "good",
    "rejected": "bad",
}


def write_jsonl(path: Path, lines: list[str], gzipped: bool = False) -> Path:
    text = "".join(line + "\n" for line in lines)
    if gzipped:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_a_prompt_is_one_user_turn() -> None:
    pair = pair_from_row(PROMPT_ROW)
    assert pair == Pair("p1", (Message("user", "q"),), "good", "bad", benchmark="demo")
    assert pair.meta == {}


def test_messages_are_the_whole_conversation_and_win_over_a_prompt() -> None:
    pair = pair_from_row({**MESSAGES_ROW, "prompt": "ignored"})
    assert pair.id == "7"
    assert pair.benchmark == "rmb"
    assert pair.conversation == (
        Message("system", "be brief"),
        Message("user", "hi"),
        Message("assistant", "hello"),
        Message("user", "and now?"),
    )
    # An empty `messages` list falls back to the prompt.
    assert pair_from_row({**PROMPT_ROW, "messages": []}).conversation == (Message("user", "q"),)


def test_caller_arguments_name_the_benchmark_the_metadata_and_a_missing_id() -> None:
    row = {k: v for k, v in PROMPT_ROW.items() if k != "id"}
    pair = pair_from_row(row, default_id=3, benchmark="rewardbench", meta={"subset": "s"})
    assert (pair.id, pair.benchmark, dict(pair.meta)) == ("3", "rewardbench", {"subset": "s"})


@pytest.mark.parametrize("field", ["id", "chosen", "rejected"])
def test_a_missing_field_is_named_with_the_row(field: str) -> None:
    row = {k: v for k, v in PROMPT_ROW.items() if k != field}
    with pytest.raises(DatasetError, match=rf"^train\.jsonl:4: missing field `{field}`"):
        pair_from_row(row, where="train.jsonl:4")


def test_a_file_row_missing_a_field_names_the_file_line_and_field(tmp_path: Path) -> None:
    bad = {k: v for k, v in PROMPT_ROW.items() if k != "rejected"}
    path = write_jsonl(
        tmp_path / "pairs.jsonl", [json.dumps(PROMPT_ROW), "", json.dumps({**bad, "id": "p2"})]
    )
    with pytest.raises(DatasetError) as caught:
        list(read_pairs(path))
    message = str(caught.value)
    assert message.startswith(f"{path}:3: missing field `rejected`")  # line 3: blank lines count
    assert "chosen, id, prompt, source" in message  # what the row has instead


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"prompt": None}, "neither `prompt` nor `messages`"),
        ({"prompt": 5}, "field `prompt` must be a string, not int"),
        ({"chosen": None}, "field `chosen` must be a string, not null"),
        ({"rejected": ["a"]}, "field `rejected` must be a string, not list"),
        ({"id": {"n": 1}}, "field `id` must be a string or an integer, not dict"),
        ({"messages": "hi"}, "field `messages` must be a list, not str"),
        ({"messages": ["hi"]}, "`messages[0]` must be an object with `role` and `content`"),
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            "`messages[0].role` must be one of system, user, assistant, not 'tool'",
        ),
        (
            {"messages": [{"role": "user", "content": 1}]},
            "field `messages[0].content` must be a string, not int",
        ),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
            "must end with a user turn",
        ),
    ],
)
def test_invalid_values_are_named_with_the_row_and_field(change: dict, error: str) -> None:
    with pytest.raises(DatasetError, match=r"^pairs\.jsonl:2: ") as caught:
        pair_from_row({**PROMPT_ROW, **change}, where="pairs.jsonl:2")
    assert error in str(caught.value)


def test_a_row_without_where_is_named_by_its_id() -> None:
    with pytest.raises(DatasetError, match=r"^pair 'p1': field `chosen`"):
        pair_from_row({**PROMPT_ROW, "chosen": 1})


def test_plain_and_gzipped_files_read_the_same(tmp_path: Path) -> None:
    lines = [json.dumps(PROMPT_ROW), json.dumps(MESSAGES_ROW)]
    plain = write_jsonl(tmp_path / "a.jsonl", lines)
    packed = write_jsonl(tmp_path / "a.jsonl.gz", lines, gzipped=True)
    assert list(read_pairs(plain)) == list(read_pairs(packed))
    assert [where for where, _ in read_rows(packed)] == [f"{packed}:1", f"{packed}:2"]


def test_unreadable_lines_are_named_with_their_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [json.dumps(PROMPT_ROW), "{oops"])
    with pytest.raises(DatasetError, match=rf"{path.name}:2: not JSON"):
        list(read_rows(path))
    path = write_jsonl(tmp_path / "y.jsonl", ["[1, 2]"])
    with pytest.raises(DatasetError, match=rf"{path.name}:1: a row must be a JSON object"):
        list(read_rows(path))


@pytest.mark.parametrize("position", [1, 2])
def test_presenting_puts_the_chosen_response_where_asked(position: int) -> None:
    pair = pair_from_row(PROMPT_ROW)
    shown = pair.present(position)
    assert isinstance(shown, Presented)
    assert shown.gold == position
    assert shown.responses[shown.gold - 1] == "good"
    assert shown.responses[2 - shown.gold] == "bad"
    responses, gold = shown  # unpacks as (responses, gold position)
    assert (responses, gold) == ((("good", "bad"), 1) if position == 1 else (("bad", "good"), 2))


def test_presenting_refuses_a_third_position() -> None:
    with pytest.raises(ValueError, match="1 or 2"):
        pair_from_row(PROMPT_ROW).present(0)


def test_a_pair_written_as_a_row_reads_back_the_same() -> None:
    pair = pair_from_row(MESSAGES_ROW, benchmark="")
    assert pair_from_row(pair_to_row(pair)) == pair
