"""The gateway bench's mock answers are the real APIs' shapes (checked against the openai SDK's
types, and for Anthropic against the mock the end-to-end tests use)."""

from __future__ import annotations

import orjson
import pytest
from openai.types import Completion, CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from bench.gateway import wire
from tests.mocks.anthropic import Answers as AnthropicAnswers

ROUTES = {route.suffix: route for route in wire.routes(chunks=20)}
TEXT = "".join(f"tok{i} " for i in range(20))


def data_events(events: tuple[bytes, ...]) -> list[bytes]:
    """The `data:` payloads of a stream, in order."""
    return [
        line.removeprefix(b"data: ")
        for event in events
        for line in event.split(b"\n")
        if line.startswith(b"data: ")
    ]


def test_routes_longest_suffix_first() -> None:
    """`/chat/completions` is matched before `/completions` (the mock takes the first match)."""
    suffixes = [route.suffix for route in wire.routes()]
    assert suffixes.index("/chat/completions") < suffixes.index("/completions")
    assert set(suffixes) == {
        "/chat/completions",
        "/completions",
        "/embeddings",
        "/responses",
        "/messages",
    }


def test_chat_completion() -> None:
    """The JSON answer is a chat.completion with the whole text and its usage."""
    answer = ChatCompletion.model_validate_json(ROUTES["/chat/completions"].json)
    assert answer.choices[0].message.content == TEXT
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 20


def test_chat_stream() -> None:
    """20 content chunks, a finish chunk, then [DONE]; the usage chunk parses too."""
    route = ROUTES["/chat/completions"]
    payloads = data_events(route.events)
    assert payloads[-1] == b"[DONE]"
    chunks = [ChatCompletionChunk.model_validate_json(p) for p in payloads[:-1]]
    assert len(chunks) == 21
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == TEXT
    assert chunks[-1].choices[0].finish_reason == "stop"
    (usage,) = data_events((route.usage_event,))
    assert ChatCompletionChunk.model_validate_json(usage).usage is not None


def test_completions() -> None:
    """The legacy completion, whole and streamed."""
    route = ROUTES["/completions"]
    assert Completion.model_validate_json(route.json).choices[0].text == TEXT
    payloads = data_events(route.events)
    assert payloads[-1] == b"[DONE]"
    # The API streams `finish_reason: null` until the last chunk, which the SDK's type (also
    # its stream chunks') does not allow: the last chunk is checked by it, the others by hand.
    assert Completion.model_validate_json(payloads[-2]).choices[0].finish_reason == "stop"
    chunks = [orjson.loads(p) for p in payloads[:-2]]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == TEXT


def test_embeddings() -> None:
    """One embedding vector, no stream."""
    answer = CreateEmbeddingResponse.model_validate_json(ROUTES["/embeddings"].json)
    assert len(answer.data[0].embedding) == wire.EMBEDDING_SIZE
    assert ROUTES["/embeddings"].events == ()


def test_response_object() -> None:
    """The JSON answer is a completed `response` whose output text is the whole text."""
    answer = Response.model_validate_json(ROUTES["/responses"].json)
    assert answer.status == "completed"
    assert answer.output_text == TEXT


def test_responses_stream_grammar() -> None:
    """The Responses events come in the API's order, each named by its `event:` line, numbered
    from 0, and the deltas add up to the text."""
    route = ROUTES["/responses"]
    adapter: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
    names = [event.split(b"\n", 1)[0].removeprefix(b"event: ").decode() for event in route.events]
    events = [adapter.validate_json(p) for p in data_events(route.events)]
    assert [event.type for event in events] == names
    assert names == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * 20,
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == TEXT
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == TEXT


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_messages(stream: bool) -> None:
    """Anthropic's message and its events are the end-to-end tests' mock's (without `ping`)."""
    theirs = AnthropicAnswers(20)
    route = ROUTES["/messages"]
    if not stream:
        assert orjson.loads(route.json) == orjson.loads(theirs.message(wire.MODEL))
        return
    expected = [e for e in theirs.events(wire.MODEL) if not e.startswith(b"event: ping")]
    assert list(route.events) == expected
