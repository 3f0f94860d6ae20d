"""Tests for kernel.conversation: identity, canonical message form, the hash chain."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kernel.conversation import (
    DERIVED_PREFIX,
    canonical,
    chain,
    chain_matches,
    derived_id,
    given_id,
)
from kernel.errors import InvalidChatRequest

Message = dict[str, Any]
ROLES = ("system", "developer", "user", "assistant", "tool")

messages_st = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(ROLES),
    st.text(max_size=40),
)
histories = st.lists(messages_st, max_size=12)
tenants = st.text(max_size=20)


def opened(history: list[Message]) -> list[Message]:
    """The history with a system prompt and a first user message in front."""
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}, *history]


def derive(tenant: str, messages: list[Message]) -> str:
    """The derived id (no header, no metadata)."""
    return derived_id(tenant, messages)


# --- identity ------------------------------------------------------------------------------


def test_header_wins_over_metadata() -> None:
    """The X-Conversation-Id header is the id even when the body names another."""
    assert given_id("conv-1", {"conversation_id": "other"}) == "conv-1"


def test_metadata_used_without_header() -> None:
    """metadata.conversation_id is the id when there is no header."""
    assert given_id(None, {"conversation_id": "a.b:c_d-9"}) == "a.b:c_d-9"


def test_non_string_metadata_id_is_refused() -> None:
    """A non-string metadata.conversation_id is a 400 naming the field, not silently ignored."""
    with pytest.raises(InvalidChatRequest, match="must be a string") as caught:
        given_id(None, {"conversation_id": 42})
    assert caught.value.param == "metadata.conversation_id"


@pytest.mark.parametrize("value", ["", "x" * 129, "has space", "slash/no", "é", "line\n"])
def test_invalid_header_is_rejected(value: str) -> None:
    """A header outside 1-128 chars of [A-Za-z0-9._:-] is a 400 naming the header."""
    with pytest.raises(InvalidChatRequest, match="X-Conversation-Id") as caught:
        given_id(value, None)
    assert caught.value.param == "X-Conversation-Id"


def test_invalid_metadata_id_is_rejected() -> None:
    """An invalid metadata.conversation_id is a 400 naming that field."""
    with pytest.raises(InvalidChatRequest) as caught:
        given_id(None, {"conversation_id": "a b"})
    assert caught.value.param == "metadata.conversation_id"


def test_no_header_and_no_metadata_id_gives_none() -> None:
    """Without a client id the edge derives one (lazily, from tenant and opening)."""
    assert given_id(None, None) is None
    assert given_id(None, {"team": "blue"}) is None


def test_longest_valid_header_is_accepted() -> None:
    """128 characters is still a valid id."""
    value = "a" * 128
    assert given_id(value, None) == value


def test_derived_id_is_prefixed_hex() -> None:
    """A derived id is `d-` plus 32 hex digits."""
    assert re.fullmatch(DERIVED_PREFIX + "[0-9a-f]{32}", derive("t", opened([])))


def test_derived_id_ignores_messages_after_first_user() -> None:
    """Only the opening system/developer messages and the first user message count."""
    base = [{"role": "developer", "content": "rules"}, {"role": "user", "content": "q1"}]
    grown = [*base, {"role": "system", "content": "late note"}, {"role": "user", "content": "q2"}]
    assert derive("t", base) == derive("t", grown)


def test_derived_id_depends_on_system_prompt() -> None:
    """Another system prompt gives another conversation."""
    one = [{"role": "system", "content": "a"}, {"role": "user", "content": "hi"}]
    two = [{"role": "system", "content": "b"}, {"role": "user", "content": "hi"}]
    assert derive("t", one) != derive("t", two)


@given(tenants, histories, histories)
def test_derived_id_is_stable_as_conversation_grows(
    tenant: str, history: list[Message], more: list[Message]
) -> None:
    """Appending turns never changes the derived id."""
    messages = opened(history)
    assert derive(tenant, messages) == derive(tenant, messages + more)


@given(tenants, tenants, histories)
def test_derived_id_differs_per_tenant(one: str, two: str, history: list[Message]) -> None:
    """Two tenants never derive the same id for the same messages."""
    assume(one != two)
    assert derive(one, opened(history)) != derive(two, opened(history))


# --- canonical form ------------------------------------------------------------------------


def test_sdk_extra_fields_do_not_change_canonical_form() -> None:
    """An assistant message re-sent with the SDK's null/empty extras is the same message."""
    plain = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    resent = {
        "tool_calls": [
            {
                "function": {"arguments": "{}", "name": "f"},
                "type": "function",
                "id": "c1",
            }
        ],
        "role": "assistant",
        "refusal": None,
        "annotations": [],
        "audio": None,
        "function_call": None,
    }
    assert canonical(plain) == canonical(resent)


def test_canonical_drops_empty_fields_and_sorts_keys() -> None:
    """Null, empty-list and empty-string fields are dropped; keys are sorted."""
    message: Message = {"role": "user", "name": None, "content": "hi", "tool_calls": []}
    assert canonical(message) == b'{"content":"hi","role":"user"}'
    assert canonical({"role": "assistant", "content": ""}) == b'{"role":"assistant"}'


def test_canonical_keeps_meaningful_fields() -> None:
    """name, tool_call_id and content parts are part of the form."""
    message = {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "lookup",
        "content": [{"type": "text", "text": "42", "cache_control": None}],
    }
    expected = (
        b'{"content":[{"text":"42","type":"text"}],"name":"lookup","role":"tool",'
        b'"tool_call_id":"c1"}'
    )
    assert canonical(message) == expected


def test_canonical_distinguishes_tool_arguments() -> None:
    """Different tool call arguments are different messages."""

    def call(arguments: str) -> Message:
        function = {"name": "f", "arguments": arguments}
        return {"role": "assistant", "tool_calls": [{"id": "1", "function": function}]}

    assert canonical(call('{"a":1}')) != canonical(call('{"a":2}'))


# --- chain ---------------------------------------------------------------------------------


@given(histories, st.data())
def test_changing_an_earlier_message_changes_chain(history: list[Message], data: Any) -> None:
    """Editing any message before `end` gives another chain."""
    assume(history)
    end = data.draw(st.integers(1, len(history)))
    index = data.draw(st.integers(0, end - 1))
    edited = list(history)
    edited[index] = {**history[index], "content": str(history[index]["content"]) + "!"}
    assert chain(history, end, "p1") != chain(edited, end, "p1")


@given(histories, st.data())
def test_reordering_changes_chain(history: list[Message], data: Any) -> None:
    """Swapping two different messages before `end` gives another chain."""
    assume(len(history) >= 2)
    i, j = data.draw(
        st.lists(st.integers(0, len(history) - 1), min_size=2, max_size=2, unique=True)
    )
    assume(canonical(history[i]) != canonical(history[j]))
    swapped = list(history)
    swapped[i], swapped[j] = history[j], history[i]
    assert chain(history, len(history), "p1") != chain(swapped, len(history), "p1")


@given(histories, histories, st.data())
def test_appending_after_end_keeps_chain(
    history: list[Message], more: list[Message], data: Any
) -> None:
    """Messages after `end` do not affect the chain."""
    end = data.draw(st.integers(0, len(history)))
    value = chain(history, end, "p1")
    assert chain(history + more, end, "p1") == value
    assert chain_matches(history + more, end, "p1", value)


@given(histories)
def test_equal_canonical_forms_give_equal_chains(history: list[Message]) -> None:
    """Extra null fields on every message do not change the chain."""
    noisy = [{**message, "refusal": None, "annotations": []} for message in history]
    assert chain(history, len(history), "p1") == chain(noisy, len(noisy), "p1")


@given(histories)
def test_prompt_version_changes_chain(history: list[Message]) -> None:
    """Another extraction prompt version gives another chain."""
    assert chain(history, len(history), "p1") != chain(history, len(history), "p2")


def test_chain_distinguishes_end() -> None:
    """Covering fewer messages gives another chain."""
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert chain(history, 1, "p") != chain(history, 2, "p")


def test_chain_rejects_end_out_of_range() -> None:
    """chain raises on an end past the history; chain_matches says False instead."""
    history = [{"role": "user", "content": "a"}]
    value = chain(history, 1, "p")
    with pytest.raises(ValueError, match="end must be between 0 and 1"):
        chain(history, 2, "p")
    assert not chain_matches(history, 2, "p", value)
    assert not chain_matches(history, -1, "p", value)
    assert not chain_matches(history, 1, "p", "0" * 64)
