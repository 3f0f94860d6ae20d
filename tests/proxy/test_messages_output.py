"""Chat answers written as Anthropic's `message` and event stream (messages_output.py), each
object validated with the Anthropic SDK's types, and the stream read by the SDK's own
accumulator into the message the JSON path writes."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson
import pytest
from anthropic.lib.streaming._beta_messages import accumulate_event
from anthropic.types import ErrorResponse
from anthropic.types.beta import BetaMessage, BetaRawMessageStreamEvent
from pydantic import TypeAdapter

from providers.fake import completion, sse_events
from proxy.surfaces.messages_output import (
    INVALID_INPUT,
    EventWriter,
    from_chat,
    message_shell,
    usage_of,
)

EVENTS: TypeAdapter[Any] = TypeAdapter(BetaRawMessageStreamEvent)


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    event = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + orjson.dumps(event) + b"\n\n"


def read_events(data: bytes) -> list[Any]:
    """Each `event:`/`data:` pair, its name checked against its type, validated by the SDK
    (a `ping` carries nothing; an `error` is the SDK's ErrorResponse)."""
    parsed = []
    for block in data.split(b"\n\n"):
        if not block.strip():
            continue
        name, data_line = block.split(b"\n")
        payload = orjson.loads(data_line.removeprefix(b"data: "))
        assert name == b"event: " + payload["type"].encode()
        if payload["type"] == "ping":
            assert payload == {"type": "ping"}
            continue
        if payload["type"] == "error":
            parsed.append(ErrorResponse.model_validate(payload))
            continue
        parsed.append(EVENTS.validate_python(payload))
    return parsed


def accumulated(events: list[Any]) -> BetaMessage:
    snapshot = None
    buffers: dict[int, bytes] = {}
    for event in events:
        snapshot = accumulate_event(
            event=event,
            current_snapshot=snapshot,
            json_bufs=buffers,
            request_headers=httpx2.Headers(),
        )
    assert snapshot is not None
    return BetaMessage.model_validate(snapshot.model_dump())


def tool_completion() -> dict[str, Any]:
    body = completion("Let me read it.", prompt_tokens=40, completion_tokens=9)
    message = body["choices"][0]["message"]
    message["reasoning_content"] = "The file matters."
    message["tool_calls"] = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "Read", "arguments": '{"file_path": "a.py"}'},
        },
        {"id": "call_2", "type": "function", "function": {"name": "Bash", "arguments": "not json"}},
    ]
    body["choices"][0]["finish_reason"] = "tool_calls"
    return body


def test_a_completion_becomes_a_message() -> None:
    """Thinking, text, tool_use blocks in order; stop_reason tool_use; usage as Anthropic's."""
    made = from_chat(tool_completion(), message_shell("claude-x", "msg_1"))
    message = BetaMessage.model_validate(made)
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert made["content"][2]["input"] == {"file_path": "a.py"}
    assert made["content"][3]["input"] == {INVALID_INPUT: "not json"}
    assert message.stop_reason == "tool_use"
    assert message.model == "claude-x"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (40, 9)


@pytest.mark.parametrize(
    ("finish", "choice", "expected"),
    [
        ("stop", {}, ("end_turn", None)),
        ("length", {}, ("max_tokens", None)),
        ("content_filter", {}, ("refusal", None)),
        ("stop", {"stop_reason": "END"}, ("stop_sequence", "END")),
        ("stop", {"stop_reason": "other"}, ("end_turn", None)),
    ],
)
def test_stop_reasons(
    finish: str, choice: dict[str, Any], expected: tuple[str, str | None]
) -> None:
    """finish_reason → stop_reason; a stop sequence only when the upstream names one asked."""
    body = completion("x")
    body["choices"][0].update(finish_reason=finish, **choice)
    made = from_chat(body, message_shell("m", "msg"), stops=["END"])
    assert (made["stop_reason"], made["stop_sequence"]) == expected


def test_cached_tokens_are_counted_apart() -> None:
    """Input tokens exclude what the cache read or wrote, as Anthropic counts them."""
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 60},
        "cache_creation_input_tokens": 10,
    }
    assert usage_of(usage) == {
        "input_tokens": 30,
        "output_tokens": 5,
        "cache_creation_input_tokens": 10,
        "cache_read_input_tokens": 60,
    }


def test_a_text_stream_is_anthropics_event_grammar() -> None:
    """message_start, ping, one text block's start/deltas/stop, message_delta, message_stop;
    the SDK accumulates the message the JSON path writes."""
    writer = EventWriter(message_shell("m", "msg_1"))
    data = writer.start()
    for event in sse_events(["Hel", "lo"]):
        data += writer.feed(event)
    data += writer.finish()
    events = read_events(data)
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    message = accumulated(events)
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello"
    assert message.stop_reason == "end_turn"
    assert writer.message is not None
    assert writer.message["content"] == [{"type": "text", "text": "Hello"}]


def test_a_streamed_tool_call_is_one_whole_block() -> None:
    """Thinking and text stream live; interleaved tool-call arguments come whole at the end,
    each as one tool_use block the SDK parses into its input."""
    writer = EventWriter(message_shell("m", "msg_1"))
    calls = [
        chunk({"role": "assistant", "reasoning_content": "Hmm."}),
        chunk({"content": "Reading."}),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c0", "function": {"name": "Read", "arguments": '{"file'}}
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "c1",
                        "function": {"name": "Read", "arguments": '{"file_path": "b"}'},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '_path": "a"}'}}]}),
        chunk({}, "tool_calls"),
        chunk({}, None, usage={"prompt_tokens": 20, "completion_tokens": 7}, choices=[]),
        b"data: [DONE]\n\n",
    ]
    data = writer.start() + b"".join(writer.feed(event) for event in calls) + writer.finish()
    message = accumulated(read_events(data))
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[2].input == {"file_path": "a"}  # type: ignore[union-attr]
    assert message.content[3].input == {"file_path": "b"}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == 7
    assert message.usage.input_tokens == 20
    json_path = from_chat(tool_completion(), message_shell("m", "x"))
    assert [b["type"] for b in json_path["content"]] == [b.type for b in message.content]


def test_a_compaction_block_and_context_management_ride_the_stream() -> None:
    """The answer's compaction block comes first; context_management in message_delta."""
    management = {
        "applied_edits": [
            {
                "type": "clear_tool_uses_20250919",
                "cleared_tool_uses": 2,
                "cleared_input_tokens": 900,
            }
        ]
    }
    writer = EventWriter(message_shell("m", "msg"), management=management, compaction="Summary.")
    data = writer.start() + b"".join(map(writer.feed, sse_events(["ok"]))) + writer.finish()
    message = accumulated(read_events(data))
    assert message.content[0].type == "compaction"
    assert message.content[0].content == "Summary."
    assert message.context_management is not None
    applied = message.context_management.applied_edits[0]
    assert applied.type == "clear_tool_uses_20250919"
    assert applied.cleared_tool_uses == 2


def test_a_whole_message_replays_as_its_stream() -> None:
    """`replay` writes a finished message's events; the SDK reads the same message back."""
    made = from_chat(tool_completion(), message_shell("m", "msg_1"))
    shell = {**made, "content": [], "stop_reason": None}
    message = accumulated(read_events(EventWriter(shell).replay(made)))
    assert (
        message.model_dump(exclude_none=True)["content"]
        == BetaMessage.model_validate(made).model_dump(exclude_none=True)["content"]
    )


def test_an_error_after_the_first_byte_is_an_error_event() -> None:
    """`fail` writes Anthropic's error event."""
    writer = EventWriter(message_shell("m", "msg"))
    writer.start()
    [event] = read_events(writer.fail("overloaded_error", "busy"))
    assert event.type == "error"
    assert event.error.type == "overloaded_error"
