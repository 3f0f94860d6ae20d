"""Split planning: system kept, tail intact, tool groups whole, within budget."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from middleware.condensing.split import (
    assemble,
    context_message,
    partition,
    split_history,
    units,
    units_from_end,
)


def msg(role: str, content: str = "x", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


def test_tool_calls_stay_with_their_results() -> None:
    """An assistant tool_calls message and its tool results form one unit."""
    messages = [
        msg("user"),
        msg("assistant", tool_calls=[{"id": "a"}]),
        msg("tool", tool_call_id="a"),
        msg("tool", tool_call_id="b"),
        msg("user"),
    ]
    assert units(messages) == [(0, 1), (1, 4), (4, 5)]


def test_split_keeps_system_and_the_newest_turns() -> None:
    """System messages stay verbatim; the newest turns that fit stay; older ones are condensed."""
    messages = [msg("system"), *(msg("user" if i % 2 == 0 else "assistant") for i in range(10))]
    split = split_history(messages, [10] * len(messages), tail_budget=30)
    assert split.system == (0,)
    assert split.tail == (8, 9, 10)
    assert split.historical == tuple(range(1, 8))
    assert split.historical_end == 8


def test_last_user_message_is_kept_even_over_budget() -> None:
    """The newest user message (and what follows) is always in the tail."""
    messages = [msg("user"), msg("assistant"), msg("user", "big"), msg("assistant")]
    split = split_history(messages, [5, 5, 1000, 5], tail_budget=10)
    assert split.tail == (2, 3)
    assert split.historical == (0, 1)


def test_assemble_puts_the_stand_in_between_system_and_tail() -> None:
    """The retry is system messages, the one labelled context message, then the tail."""
    messages = [msg("system", "rules"), msg("user", "a"), msg("assistant", "b"), msg("user", "c")]
    split = split_history(messages, [1, 100, 100, 1], tail_budget=10)
    stand_in = context_message("notes", replaced=len(split.historical))
    sent = assemble(messages, split, stand_in)
    assert [m["content"] for m in sent][0::2] == ["rules", "c"]
    assert sent[1]["role"] == "system"
    assert str(sent[1]["content"]).startswith("[overspill: condensed history] The 2 earliest")


roles = st.sampled_from(["system", "user", "assistant", "tool_group"])


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append(msg("system"))
    for role in draw(st.lists(roles, min_size=1, max_size=40)):
        if role == "tool_group":
            calls = draw(st.integers(1, 3))
            messages.append(msg("assistant", tool_calls=[{"id": str(i)} for i in range(calls)]))
            messages.extend(msg("tool", tool_call_id=str(i)) for i in range(calls))
        else:
            messages.append(msg(role))
    messages.append(msg("user", "latest"))
    return messages


@given(conversations(), st.data(), st.integers(0, 500))
def test_split_properties(messages: list[dict[str, Any]], data: st.DataObject, budget: int) -> None:
    """System intact, tool pairs whole, last user present, tail within budget unless required."""
    counts = data.draw(st.lists(st.integers(1, 60), min_size=len(messages), max_size=len(messages)))
    split = split_history(messages, counts, tail_budget=budget)
    everything = sorted(split.system + split.historical + split.tail)
    assert everything == list(range(len(messages)))
    assert all(messages[i]["role"] == "system" for i in split.system)
    assert all(messages[i]["role"] != "system" for i in split.historical)
    assert len(messages) - 1 in split.tail
    tail_start = split.historical_end
    assert messages[tail_start]["role"] not in ("tool",)
    assert split.historical == tuple(
        i for i in range(tail_start) if messages[i]["role"] != "system"
    )
    assert split == split_history(messages, counts, tail_budget=budget)
    system = [i for i, m in enumerate(messages) if m["role"] == "system"]
    assert split == split_history(messages, counts, tail_budget=budget, system=system)
    tail_cost = sum(counts[i] for i in split.tail if messages[i]["role"] != "system")
    if split.tail[0] < _required_start(messages):
        assert tail_cost <= budget


def _required_start(messages: list[dict[str, Any]]) -> int:
    """Start of the unit holding the newest user message: the tail never starts later."""
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return next(start for start, end in units(messages) if start <= last_user < end)


any_roles = st.sampled_from(
    ["system", "developer", "user", "assistant", "calls", "tool", "function"]
)


def _any_message(role: str) -> dict[str, Any]:
    if role == "calls":
        return msg("assistant", tool_calls=[{"id": "c"}])
    return msg(role)


@given(st.lists(any_roles.map(_any_message), max_size=30))
def test_units_from_end_are_units_newest_first(messages: list[dict[str, Any]]) -> None:
    """Read from the end, the units are the same as read from the start, stray results too."""
    assert list(units_from_end(messages)) == list(reversed(units(messages)))


@given(st.lists(any_roles.map(_any_message), max_size=30), st.data())
def test_partition_is_system_and_the_rest(messages: list[dict[str, Any]], data: Any) -> None:
    """Partition puts each index before `end` on one side: system roles, or the rest."""
    end = data.draw(st.integers(0, len(messages)))
    system, historical = partition(messages, end)
    assert system == tuple(i for i in range(end) if messages[i]["role"] in ("system", "developer"))
    assert historical == tuple(i for i in range(end) if i not in system)
    every = partition(messages, len(messages))[0]
    assert partition(messages, end, every) == (system, historical)


def test_an_agents_older_tool_exchanges_can_be_condensed() -> None:
    """After the last user message, older tool exchanges that do not fit are condensed (the
    newest stays); the user message is condensed with them and pinned, sent again verbatim."""
    calls = [msg("assistant", tool_calls=[{"id": str(i)}]) for i in range(3)]
    messages = [msg("system"), msg("user", "the task")]
    for index, call in enumerate(calls):
        messages += [call, msg("tool", tool_call_id=str(index))]
    split = split_history(messages, [5, 5, 5, 100, 5, 100, 5, 100], tail_budget=150)
    assert split.tail == (6, 7)
    assert split.historical == (1, 2, 3, 4, 5)
    assert split.pinned == (1,)
    stand_in = context_message("notes", replaced=len(split.historical))
    sent = assemble(messages, split, stand_in)
    assert [m["role"] for m in sent] == ["system", "system", "user", "assistant", "tool"]
    assert sent[2]["content"] == "the task"


def test_a_chats_last_turn_is_never_pinned() -> None:
    """A conversation whose last message is the user's keeps the old split: nothing pinned."""
    messages = [msg("user"), msg("assistant"), msg("user", "big")]
    split = split_history(messages, [5, 5, 1000], tail_budget=10)
    assert split.pinned == ()
    assert split.tail == (2,)


def test_a_trailing_system_message_does_not_count_as_the_newest_turn() -> None:
    """A system message after the newest tool exchange (an agent's reminder) leaves that
    exchange in the tail."""
    messages = [msg("user", "the task")]
    for index in range(2):
        messages += [
            msg("assistant", tool_calls=[{"id": str(index)}]),
            msg("tool", tool_call_id=str(index)),
        ]
    messages.append(msg("system", "reminder"))
    split = split_history(messages, [5, 5, 100, 5, 100, 5], tail_budget=50)
    assert split.tail == (3, 4, 5)
    assert split.pinned == (0,)
