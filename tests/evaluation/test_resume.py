"""`overspill eval --resume`: which rows a results file keeps and which probes are asked again."""

from __future__ import annotations

from dataclasses import replace

from evaluation.conditions import ConditionName
from evaluation.conversations import Conversation, generate
from evaluation.probes import Asked
from evaluation.resume import replayed, resume
from evaluation.runner import Row


def _conversation(seed: int = 1) -> Conversation[Asked]:
    made = generate(seed, fillers=2)
    return replace(made, probes=made.probes[:3])


def _rows(conversation: Conversation[Asked], condition: str, status: str = "ok") -> list[Row]:
    return [
        Row(conversation.seed, conversation.seed_set, condition, p.kind, p.question, status)
        for p in conversation.probes
    ]


def test_only_the_probes_the_file_lacks_are_asked_and_its_answers_stay() -> None:
    """A run stopped after two of three probes keeps both rows and asks the third alone."""
    conversation = _conversation()
    earlier = _rows(conversation, "full")[:2]
    resumed = resume(earlier, [conversation], ["full"], extraction_kept=False)
    assert resumed.kept == tuple(earlier)
    assert [(c.probes, condition) for c, condition in resumed.to_play] == [
        (conversation.probes[2:], "full")
    ]


def test_a_probe_that_failed_is_asked_again_and_its_row_replaced() -> None:
    """A row whose call timed out (status error) is dropped and its probe asked again."""
    conversation = _conversation()
    earlier = _rows(conversation, "drop-oldest")
    earlier[1] = replace(earlier[1], status="error", detail="timed out")
    resumed = resume(earlier, [conversation], ["drop-oldest"], extraction_kept=False)
    assert resumed.kept == (earlier[0], earlier[2])
    assert [c.probes for c, _ in resumed.to_play] == [(conversation.probes[1],)]


def test_a_finished_run_asks_nothing() -> None:
    """Every probe answered under every condition: nothing to play, every row kept."""
    conversation = _conversation()
    earlier = _rows(conversation, "full") + _rows(conversation, "summary")
    resumed = resume(earlier, [conversation], ["full", "summary"], extraction_kept=False)
    assert resumed.to_play == ()
    assert resumed.kept == tuple(earlier)


def test_a_step_made_again_plays_the_whole_conversation_and_drops_its_rows() -> None:
    """Under the summary, or overspill with no kept extraction, the answered rows of a
    conversation with a probe lacking are dropped and all its probes asked again; with the
    extraction kept, overspill asks the lacking probe alone."""
    conversation = _conversation()
    cases: tuple[tuple[ConditionName, bool, bool], ...] = (
        ("summary", True, True),
        ("overspill-turns", True, True),
        ("overspill-once", False, True),
        ("overspill-once", True, False),
    )
    for condition, kept_store, again in cases:
        earlier = _rows(conversation, condition)[:2]
        resumed = resume(earlier, [conversation], [condition], extraction_kept=kept_store)
        asked = [c.probes for c, _ in resumed.to_play]
        if again:
            assert resumed.kept == ()
            assert asked == [conversation.probes]
        else:
            assert resumed.kept == tuple(earlier)
            assert asked == [conversation.probes[2:]]
        assert replayed(condition, kept_store) is again


def test_rows_of_what_this_run_does_not_play_stay_as_they_are() -> None:
    """Another seed's rows, or another condition's, are kept whatever their status."""
    conversation, other = _conversation(1), _conversation(2)
    theirs = [*_rows(other, "full", "error"), *_rows(conversation, "masking", "overflow")]
    resumed = resume([*theirs, *_rows(conversation, "full")], [conversation], ["full"],
                     extraction_kept=False)  # fmt: skip
    assert resumed.kept[: len(theirs)] == tuple(theirs)
    assert resumed.to_play == ()
