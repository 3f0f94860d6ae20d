"""Where the right value stood in what the model was shown, and the report's count by place."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from evaluation.places import LAST, OUT, QUOTED, SHOWN, stood
from evaluation.report import read_jsonl, table
from evaluation.runner import Row
from middleware.condensing.relevance import Passage, quoted


def holds(word: str) -> Callable[[str], bool]:
    """A probe's `present`: whether a text holds `word`."""
    return lambda text: word in text


def test_the_place_is_the_one_nearest_the_question_that_holds_the_value() -> None:
    """The quoted turns' last excerpt, then earlier in the quoted turns, then anywhere in
    the prompt, else not shown; a value quoted and also in the notes stood where quoted."""
    cabin = Passage(1, "user", "We booked the cabin by Lake Tahoe.")
    reply = Passage(2, "assistant", "Which week?")
    dog = Passage(7, "user", "The dog is called Max.")
    shown = f"notes: Tahoe, Oslo\n\nuser: hello\n\n{quoted([cabin, reply, dog])}"
    assert stood(holds("Max"), shown) == LAST
    assert stood(holds("Tahoe"), shown) == QUOTED
    assert stood(holds("Oslo"), shown) == SHOWN
    assert stood(holds("Lima"), shown) == OUT
    assert stood(holds("Oslo"), "notes: Oslo, nothing quoted") == SHOWN


def _row(condition: str, question: str, right: bool, place: str) -> Row:
    return Row(41, "locomo", condition, "single_hop", question, "ok", "a", right, True, stood=place)


def test_the_report_counts_right_answers_by_where_the_answer_stood() -> None:
    """Per condition, right answers of those whose answer stood at each place; beside the
    whole dialogue, the same for the questions it answered right (kept)."""
    rows = [
        _row("full", "q1", True, SHOWN),
        _row("full", "q2", True, SHOWN),
        _row("full", "q3", False, SHOWN),
        _row("overspill-once", "q1", True, LAST),
        _row("overspill-once", "q2", False, QUOTED),
        _row("overspill-once", "q3", True, LAST),
    ]
    printed = table(rows, ["full", "overspill-once"]).split("where the right answer stood")[1]
    right, kept = printed.split("of those right on full, kept:")
    lines = {line[:21].strip(): line[21:].split() for line in right.splitlines()}
    assert lines[LAST] == ["-", "2", "of", "2"]
    assert lines[QUOTED] == ["-", "0", "of", "1"]
    assert lines[SHOWN] == ["2", "of", "3", "-"]
    cells = {line[:21].strip(): line[21:].split() for line in kept.splitlines()}
    assert cells[LAST] == ["-", "1", "of", "1"]
    assert cells[QUOTED] == ["-", "0", "of", "1"]
    assert "where the right answer stood" not in table(
        [Row(41, "locomo", "full", "single_hop", "q", "ok", "a", True, True)], ["full"]
    )


def test_a_row_naming_no_known_place_is_refused() -> None:
    """A results line whose place is not one the eval writes is an error naming the line;
    a row written before rows said where (no place) is read."""
    good = _row("full", "q1", True, SHOWN).as_dict()
    assert read_jsonl([orjson.dumps({**good, "stood": ""})], "rows.jsonl")[0].stood == ""
    with pytest.raises(ValueError, match=r"rows.jsonl:1: stood is 'middle', not one of"):
        read_jsonl([orjson.dumps({**good, "stood": "middle"})], "rows.jsonl")
