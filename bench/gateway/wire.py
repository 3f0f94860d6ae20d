"""What the mock upstream answers, per upstream wire: built here, served by `mock_upstream.go`.

Every answer is fixed bytes (only the model name `mock-model` in it), built once by
`routes()` and written to the manifest the Go mock reads, so the mock never encodes JSON on
a request and one Python module holds the wire shapes (tests/bench/test_wire.py checks
them against the openai SDK's types). A route is found by the end of the request path, so
`api_base` `.../v1` and `...` both work. The text of every answer is `tok0 tok1 ... tokN-1 `
(N = `chunks`), one token per streamed delta.

OpenAI: `/chat/completions` (a `chat.completion`, or N `chat.completion.chunk` events, a
finish chunk, a usage chunk when the request asks `stream_options.include_usage`, and
`[DONE]`), `/completions` (the legacy `text_completion`, JSON and SSE), `/embeddings`, and
`/responses` (a `response` object, or the Responses event grammar). Anthropic: `/messages`
(a `message`, or message_start ... message_stop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

MODEL = "mock-model"
CREATED = 1_700_000_000
PROMPT_TOKENS = 100
EMBEDDING_SIZE = 16


@dataclass(frozen=True)
class Route:
    """One route of the mock: its path's end, its JSON answer, its stream's events."""

    suffix: str
    json: bytes
    events: tuple[bytes, ...] = ()
    usage_event: bytes = b""
    """Sent before the last event when the request has `"include_usage": true`."""
    content_type: str = "text/event-stream"

    def manifest(self) -> dict[str, Any]:
        """The Go mock's view of this route (text, since every answer is UTF-8)."""
        return {
            "suffix": self.suffix,
            "json": self.json.decode(),
            "events": [event.decode() for event in self.events],
            "usage_event": self.usage_event.decode(),
        }


@dataclass(frozen=True)
class Answers:
    """The pieces every wire's answer is made of."""

    chunks: int = 20
    pieces: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pieces", tuple(f"tok{i} " for i in range(self.chunks)))

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _data(payload: object) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _named(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\n" + _data(payload)


def chat_completions(answers: Answers) -> Route:
    """OpenAI's Chat Completions: a `chat.completion`, or its chunks and `[DONE]`."""
    usage = {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": answers.chunks,
        "total_tokens": PROMPT_TOKENS + answers.chunks,
    }
    head = {"id": "chatcmpl-mock", "created": CREATED, "model": MODEL}
    head["system_fingerprint"] = "fp_mock"
    message = {"role": "assistant", "content": answers.text}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
    body = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}

    def chunk(delta: dict[str, str], finish: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _data({**head, "object": "chat.completion.chunk", "choices": [choice]})

    events = [
        chunk({"role": "assistant", "content": piece} if i == 0 else {"content": piece}, None)
        for i, piece in enumerate(answers.pieces)
    ]
    events.append(chunk({}, "stop"))
    events.append(b"data: [DONE]\n\n")
    usage_event = _data({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    return Route("/chat/completions", orjson.dumps(body), tuple(events), usage_event)


def completions(answers: Answers) -> Route:
    """OpenAI's legacy Completions: a `text_completion`, or its chunks and `[DONE]`."""
    usage = {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": answers.chunks,
        "total_tokens": PROMPT_TOKENS + answers.chunks,
    }
    head = {"id": "cmpl-mock", "object": "text_completion", "created": CREATED, "model": MODEL}

    def choice(text: str, finish: str | None) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    body = {**head, "choices": [choice(answers.text, "stop")], "usage": usage}
    events = [_data({**head, "choices": [choice(piece, None)]}) for piece in answers.pieces]
    events.append(_data({**head, "choices": [choice("", "stop")]}))
    events.append(b"data: [DONE]\n\n")
    usage_event = _data({**head, "choices": [], "usage": usage})
    return Route("/completions", orjson.dumps(body), tuple(events), usage_event)


def embeddings(_answers: Answers) -> Route:
    """OpenAI's Embeddings: one vector of `EMBEDDING_SIZE` floats (no stream)."""
    vector = [round(0.01 * (i + 1), 2) for i in range(EMBEDDING_SIZE)]
    body = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": vector}],
        "model": MODEL,
        "usage": {"prompt_tokens": PROMPT_TOKENS, "total_tokens": PROMPT_TOKENS},
    }
    return Route("/embeddings", orjson.dumps(body))


def responses(answers: Answers) -> Route:
    """OpenAI's Responses: a `response` object, or its event grammar, numbered in order."""
    usage = {
        "input_tokens": PROMPT_TOKENS,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": answers.chunks,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": PROMPT_TOKENS + answers.chunks,
    }
    text_part = {"type": "output_text", "text": answers.text, "annotations": [], "logprobs": []}
    item_id = "msg_mock"
    done_item = {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [text_part],
    }

    def response(status: str, output: list[Any], usage: object) -> dict[str, Any]:
        return {
            "id": "resp_mock",
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "model": MODEL,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "temperature": 1.0,
            "top_p": 1.0,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "usage": usage,
        }

    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    grammar: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": response("in_progress", [], None)}),
        ("response.in_progress", {"response": response("in_progress", [], None)}),
        (
            "response.output_item.added",
            {"output_index": 0, "item": {**done_item, "status": "in_progress", "content": []}},
        ),
        (
            "response.content_part.added",
            {**where, "part": {**text_part, "text": ""}},
        ),
    ]
    grammar += [
        ("response.output_text.delta", {**where, "delta": piece, "logprobs": []})
        for piece in answers.pieces
    ]
    grammar += [
        ("response.output_text.done", {**where, "text": answers.text, "logprobs": []}),
        ("response.content_part.done", {**where, "part": text_part}),
        ("response.output_item.done", {"output_index": 0, "item": done_item}),
        ("response.completed", {"response": response("completed", [done_item], usage)}),
    ]
    events = tuple(
        _named(name, {"type": name, "sequence_number": number, **payload})
        for number, (name, payload) in enumerate(grammar)
    )
    body = response("completed", [done_item], usage)
    return Route("/responses", orjson.dumps(body), events)


def messages(answers: Answers) -> Route:
    """Anthropic's Messages: a `message`, or message_start ... message_stop."""
    message: dict[str, Any] = {
        "id": "msg_mock01",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": answers.text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": answers.chunks},
    }
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": 1},
    }
    grammar: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": start}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
    ]
    grammar += [
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
        for piece in answers.pieces
    ]
    grammar += [
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": answers.chunks},
            },
        ),
        ("message_stop", {}),
    ]
    events = tuple(_named(name, {"type": name, **payload}) for name, payload in grammar)
    return Route("/messages", orjson.dumps(message), events)


WIRES = {
    "openai": (chat_completions, completions, embeddings, responses),
    "anthropic": (messages,),
}
"""The routes each upstream wire serves (one mock serves them all: the suffixes differ)."""


def routes(chunks: int = 20) -> list[Route]:
    """Every route the mock serves, longest suffix first (`/chat/completions` before
    `/completions`)."""
    answers = Answers(chunks)
    built = [make(answers) for makers in WIRES.values() for make in makers]
    return sorted(built, key=lambda route: -len(route.suffix))


def manifest(chunks: int = 20) -> bytes:
    """The Go mock's input: every route's answers."""
    return orjson.dumps({"routes": [route.manifest() for route in routes(chunks)]})
