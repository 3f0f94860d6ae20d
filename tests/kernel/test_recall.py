"""Tests for kernel.recall: what a turn reuses from its conversation's earlier turns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.conversation import chain
from kernel.recall import CHAINS, Recall
from kernel.tokens import TokenCounter
from tests.reliability import examples

Message = dict[str, Any]


class Counting(TokenCounter):
    """A token counter that records which messages it was asked to count."""

    def __init__(self) -> None:
        super().__init__("gpt-4o-mini")
        self.asked: list[Mapping[str, Any]] = []

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Count one message, remembering it was asked."""
        self.asked.append(message)
        return super().count_message(message)


def talk(size: int, tag: str = "") -> list[Message]:
    """A system prompt and `size - 1` alternating turns."""
    roles = ("user", "assistant")
    return [{"role": "system", "content": "be brief"}] + [
        {"role": roles[i % 2], "content": f"turn {i}{tag}"} for i in range(size - 1)
    ]


def fresh(messages: list[Message]) -> tuple[Message, ...]:
    """The messages as a new request parses them (new objects, equal values)."""
    return tuple(dict(message) for message in messages)


def test_a_turn_reuses_the_previous_turns_chain_and_counts() -> None:
    """The next turn counts only its new messages and reuses the chain the last turn made."""
    recall, counter = Recall(), Counting()
    first = recall.history("t", "c", fresh(talk(10)))
    expected = first.chain(6, "p")
    first.counts(counter)
    counter.asked.clear()
    second = recall.history("t", "c", fresh(talk(12)))
    assert second.known is not None
    assert second.chain(6, "p") == expected
    assert second.counts(counter) == tuple(map(TokenCounter("gpt-4o-mini").count_message, talk(12)))
    assert counter.asked == talk(12)[10:]


def test_an_edited_message_in_the_middle_never_matches() -> None:
    """A history edited before the cached end (same size) gives the edit's own chain."""
    recall = Recall()
    messages = talk(12)
    old = recall.history("t", "c", fresh(messages)).chain(8, "p")
    edited = [*messages[:4], {**messages[4], "content": "turn X"}, *messages[5:], *talk(2)[1:]]
    history = recall.history("t", "c", fresh(edited))
    assert history.known is None
    assert not history.chain_matches(8, "p", old)
    assert history.chain(8, "p") == chain(edited, 8, "p")


def test_a_branch_never_matches() -> None:
    """A conversation that went another way after turn 5 (same sizes) does not reuse a later
    chain."""
    recall = Recall()
    old = recall.history("t", "c", fresh(talk(12))).chain(10, "p")
    branch = talk(6) + [{**m, "content": m["content"].upper()} for m in talk(14)[6:]]
    history = recall.history("t", "c", fresh(branch))
    assert not history.chain_matches(10, "p", old)
    assert history.chain(10, "p") == chain(branch, 10, "p")


@pytest.mark.reliability("tenants")
def test_tenants_never_share() -> None:
    """The same conversation id and messages under another tenant start from nothing."""
    recall = Recall()
    recall.history("a", "c", fresh(talk(10))).chain(5, "p")
    assert recall.history("b", "c", fresh(talk(12))).known is None
    assert recall.history("a", "c", fresh(talk(12))).known is not None


@pytest.mark.reliability("memory")
def test_remembering_is_bounded() -> None:
    """At most max_conversations conversations, each with per_conversation requests, and
    at most CHAINS chains per request."""
    recall = Recall(max_conversations=3, per_conversation=2)
    for index in range(10):
        for tag in ("x", "y", "z"):  # three conversations sharing one id
            recall.history("t", f"c{index}", fresh(talk(4, tag)))
    assert len(recall) == 3
    assert recall.requests() == 6
    history = recall.history("t", "c9", fresh(talk(20)))
    for end in range(12):
        history.chain(end, "p")
    assert history.seen is not None
    assert len(history.seen.chains) == CHAINS


def test_messages_json_cannot_write_are_still_answered() -> None:
    """Messages orjson cannot write (a non-string key) are derived each time, never stored."""
    recall = Recall()
    odd: list[Any] = [*talk(3), {"role": "user", "content": "x", 1: "y"}]
    history = recall.history("t", "c", tuple(odd))
    assert history.seen is None
    assert history.chain(2, "p") == chain(odd, 2, "p")
    assert recall.requests() == 0


def test_an_extended_fingerprint_is_the_whole_requests_own() -> None:
    """A fingerprint extended from the previous turn's equals the one made from nothing."""
    grown, whole = Recall(), Recall()
    grown.history("t", "c", fresh(talk(5)))
    extended = grown.history("t", "c", fresh(talk(9))).seen
    direct = whole.history("t", "c", fresh(talk(9))).seen
    assert extended is not None
    assert direct is not None
    assert (extended.size, extended.digest) == (direct.size, direct.digest)


def test_recall_needs_room() -> None:
    """A Recall that could keep nothing is refused."""
    with pytest.raises(ValueError, match="at least one"):
        Recall(max_conversations=0)


contents = st.sampled_from(["a", "b", "a b", "", "tool output"])
messages_st = st.builds(
    lambda role, content, ordered: (
        {"role": role, "content": content} if ordered else {"content": content, "role": role}
    ),
    st.sampled_from(["system", "user", "assistant"]),
    contents,
    st.booleans(),
)
changes = st.one_of(
    st.tuples(st.just("append"), st.lists(messages_st, min_size=1, max_size=3)),
    st.tuples(st.just("edit"), st.integers(0, 30), messages_st),
    st.tuples(st.just("cut"), st.integers(0, 30)),
)


def _changed(messages: list[Message], change: tuple[Any, ...]) -> list[Message]:
    if change[0] == "append":
        return [*messages, *change[1]]
    if change[0] == "edit" and messages:
        index = change[1] % len(messages)
        return [*messages[:index], change[2], *messages[index + 1 :]]
    if change[0] == "cut":
        return messages[: change[1] % (len(messages) + 1)]
    return messages


@settings(max_examples=examples(60, 500), deadline=None)
@given(st.lists(messages_st, max_size=8), st.lists(changes, min_size=1, max_size=8), st.data())
def test_what_is_reused_is_what_would_be_derived(
    start: list[Message], steps: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    """Over appends, edits and branches, every chain and count equals a fresh derivation."""
    recall, counter, plain = Recall(per_conversation=2), TokenCounter(), TokenCounter()
    messages = start
    for step in steps:
        messages = _changed(messages, step)
        history = recall.history("t", "c", fresh(messages))
        end = data.draw(st.integers(0, len(messages)))
        assert history.chain(end, "p") == chain(messages, end, "p")
        assert history.counts(counter) == tuple(map(plain.count_message, messages))
