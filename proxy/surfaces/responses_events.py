"""The Responses API's event stream, written from a chat completion's SSE chunks as they arrive.

Pure (no I/O): `EventWriter` takes the chunks' bytes and returns the Responses API's events,
ending with the response object responses_output.py's `from_chat` would make of the same answer
(ids aside). The events are the OpenAI Python SDK's ResponseStreamEvent classes (the tests
validate every one), in the order of OpenAI's reference for streaming events
(developers.openai.com/api/reference/resources/responses/streaming-events): `response.created`,
`response.in_progress`, per item `output_item.added`, its `content_part.added` and deltas, then
`.done` events carrying the whole text, `content_part.done`, `output_item.done`, and last
`response.completed`, or `response.incomplete` (the whole response, status `incomplete` with
`incomplete_details.reason`), or `response.failed` followed by an `error` event. Every event
carries a `sequence_number` counting from 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from kernel.errors import UpstreamBadResponse, UpstreamError
from proxy.surfaces.responses_output import (
    call_item,
    ending,
    finished,
    message_item,
    new_id,
    reasoning_item,
    reasoning_of,
    text_part,
    token_logprobs,
)

RESPONSE_ERROR_CODES = frozenset(
    {
        "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch",
        "bio_policy", "vector_store_timeout", "invalid_image", "invalid_image_format",
        "invalid_base64_image", "invalid_image_url", "image_too_large", "image_too_small",
        "image_parse_error", "image_content_policy_violation", "invalid_image_mode",
        "image_file_too_large", "unsupported_image_media_type", "empty_image_file",
        "failed_to_download_image", "image_file_not_found",
    }
)  # fmt: skip
"""The codes a response's `error` may carry (the SDK's ResponseError.code); any other code is
`server_error` there, and stays as it was in the `error` event that follows."""


def sse_event(event: Mapping[str, Any]) -> bytes:
    """One Responses API event on the wire: `event: <type>` and its JSON as `data:`."""
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


@dataclass(slots=True)
class _Item:
    """An output item being streamed: its place, its id, and its parts' text so far."""

    kind: str
    index: int
    id: str
    parts: dict[str, list[str]] = field(default_factory=dict)
    """Text so far per part type, in the order the parts began (a content part's index is its
    place here): `output_text` and `refusal` for a message, `reasoning_text` for reasoning,
    `arguments` for a function call."""
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    call_id: str = ""
    name: str = ""

    def text(self, part: str) -> str:
        """A part's whole text."""
        return "".join(self.parts.get(part, ()))

    def content(self, part: str) -> dict[str, Any]:
        """A content part as it ends."""
        if part == "output_text":
            return text_part(self.text(part), self.logprobs)
        return {"type": part, part if part == "refusal" else "text": self.text(part)}

    def final(self, status: str) -> dict[str, Any]:
        """The item as it ends, with `status`."""
        if self.kind == "reasoning":
            return reasoning_item(self.id, self.text("reasoning_text"), status)
        if self.kind == "function_call":
            function = {"name": self.name, "arguments": self.text("arguments")}
            return call_item(self.id, self.call_id, function, status)
        return message_item(self.id, [self.content(part) for part in self.parts], status)


PREFIXES = {"reasoning": "rs", "message": "msg", "function_call": "fc"}
"""An output item's id prefix, by its type (OpenAI's)."""

TEXT_DONE = {
    "output_text": ("response.output_text.done", "text"),
    "refusal": ("response.refusal.done", "refusal"),
    "reasoning_text": ("response.reasoning_text.done", "text"),
}
"""A content part's `.done` event, and the field carrying its whole text."""


class EventWriter:
    """Chat completion SSE → the Responses API's SSE, incrementally.

    `start()` opens the stream; `feed(data)` takes whole chat SSE events and returns the events
    they produce; `finish()` closes every open item in output order and ends with the whole
    response; `fail(code, message)` ends a stream that broke after its first byte. An item
    opens at its first delta: the reasoning, the message (a content part per text and refusal),
    a function call per chat tool-call `index`. As OpenAI streams its items one after another,
    the reasoning and the message close when an item of another kind begins; function calls
    stay open to the end (some servers interleave parallel calls' arguments).
    """

    def __init__(self, shell: Mapping[str, Any]) -> None:
        self._shell = shell
        self._sequence = 0
        self._started = False
        self._items: list[_Item] = []
        self._output: list[dict[str, Any] | None] = []
        """Each item's final form once closed (None while it is open), in output order."""
        self._reasoning: _Item | None = None
        self._message: _Item | None = None
        self._answered = False
        """Whether a message item was opened."""
        self._calls: dict[int, _Item] = {}
        """The function calls by their chat tool-call `index`."""
        self._finish_reason: Any = None
        self._usage: Any = None
        self._response: dict[str, Any] | None = None

    @property
    def response(self) -> dict[str, Any] | None:
        """The final response object once the stream ended (None before)."""
        return self._response

    def start(self) -> bytes:
        """`response.created` and `response.in_progress` (b"" once started)."""
        if self._started:
            return b""
        self._started = True
        created = self._emit({"type": "response.created", "response": self._shell})
        return created + self._emit({"type": "response.in_progress", "response": self._shell})

    def feed(self, data: bytes) -> bytes:
        """The events for whole chat SSE events (`data: [DONE]` and comments skipped). Raises
        UpstreamBadResponse for an event that is not a JSON object, UpstreamError for the
        upstream's own error event."""
        if self._response is not None:
            return b""
        out = [] if self._started else [self.start()]
        for payload in payloads(data):
            self._chunk(parse_chunk(payload), out)
        return b"".join(out)

    def finish(self) -> bytes:
        """Close every open item in output order, then `response.completed` (or
        `response.incomplete`) with the whole response and its usage."""
        if self._response is not None:
            return b""
        out = [self.start()]
        status, details = ending(self._finish_reason)
        if not self._answered and not self._calls:
            self._part(self._new_message(out), "output_text", out)  # as the JSON path: a message
        still_open = [item for item in self._items if self._output[item.index] is None]
        for item in still_open:
            last = item is self._items[-1]
            self._close(item, status if last and status == "incomplete" else "completed", out)
        response = finished(self._shell, status, details, self._final_output(), self._usage)
        self._response = response
        out.append(self._emit({"type": f"response.{status}", "response": response}))
        return b"".join(out)

    def fail(self, code: str | None, message: str) -> bytes:
        """End a broken stream: `response.failed` (status failed, `error`, the output so far)
        then an `error` event with the code as given."""
        if self._response is not None:
            return b""
        out = [self.start()]
        output = [
            final if final is not None else item.final("incomplete")
            for item, final in zip(self._items, self._output, strict=True)
        ]
        response = finished(self._shell, "failed", None, output, self._usage)
        known = code if code in RESPONSE_ERROR_CODES else "server_error"
        response["error"] = {"code": known, "message": message}
        self._response = response
        out.append(self._emit({"type": "response.failed", "response": response}))
        error = {"type": "error", "code": code, "message": message, "param": None}
        out.append(self._emit(error))
        return b"".join(out)

    def _emit(self, event: dict[str, Any]) -> bytes:
        event["sequence_number"] = self._sequence
        self._sequence += 1
        return sse_event(event)

    def _chunk(self, chunk: dict[str, Any], out: list[bytes]) -> None:
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n > 1 has no Responses form
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta, choice, out)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]

    def _delta(self, delta: dict[str, Any], choice: dict[str, Any], out: list[bytes]) -> None:
        reasoning = reasoning_of(delta)
        if reasoning:
            self._reason(reasoning, out)
        content, refusal = delta.get("content"), delta.get("refusal")
        if isinstance(content, str) and content:
            self._text("output_text", content, token_logprobs(choice), out)
        if isinstance(refusal, str) and refusal:
            self._text("refusal", refusal, [], out)
        calls = delta.get("tool_calls")
        for position, call in enumerate(calls if isinstance(calls, list) else ()):
            if isinstance(call, dict):
                self._call(call, position, out)

    def _reason(self, text: str, out: list[bytes]) -> None:
        self._end_message(out)
        item = self._reasoning
        if item is None:
            item = self._reasoning = self._add("reasoning", out)
            self._part(item, "reasoning_text", out)
        item.parts["reasoning_text"].append(text)
        delta = {"type": "response.reasoning_text.delta", "delta": text}
        out.append(self._emit(_at(item, 0, delta)))

    def _text(self, part: str, text: str, logprobs: list[dict[str, Any]], out: list[bytes]) -> None:
        self._end_reasoning(out)
        item = self._message or self._new_message(out)
        if part not in item.parts:
            self._part(item, part, out)
        item.parts[part].append(text)
        delta: dict[str, Any] = {"type": "response.refusal.delta", "delta": text}
        if part == "output_text":
            item.logprobs.extend(logprobs)
            delta = {"type": "response.output_text.delta", "delta": text, "logprobs": logprobs}
        place = 0 if next(iter(item.parts)) == part else 1  # a message has two parts at most
        out.append(self._emit(_at(item, place, delta)))

    def _call(self, call: dict[str, Any], position: int, out: list[bytes]) -> None:
        self._end_reasoning(out)
        self._end_message(out)
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        key, name = call.get("index"), function.get("name")
        item = self._calls.get(key if isinstance(key, int) else position)
        if item is None:
            given = call.get("id")
            call_id = given if isinstance(given, str) else new_id("call")
            item = self._add("function_call", out, call_id, name)
            self._calls[key if isinstance(key, int) else position] = item
        elif isinstance(name, str) and not item.name:
            item.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.parts.setdefault("arguments", []).append(arguments)
            delta = {
                "type": "response.function_call_arguments.delta",
                "item_id": item.id,
                "output_index": item.index,
                "delta": arguments,
            }
            out.append(self._emit(delta))

    def _add(self, kind: str, out: list[bytes], call_id: str = "", name: Any = "") -> _Item:
        item = _Item(kind, len(self._items), new_id(PREFIXES[kind]), call_id=call_id)
        item.name = name if isinstance(name, str) else ""
        self._items.append(item)
        self._output.append(None)
        added = {"type": "response.output_item.added", "output_index": item.index}
        added["item"] = item.final("in_progress")
        out.append(self._emit(added))
        return item

    def _new_message(self, out: list[bytes]) -> _Item:
        self._answered = True
        self._message = self._add("message", out)
        return self._message

    def _part(self, item: _Item, part: str, out: list[bytes]) -> None:
        item.parts[part] = []
        added = {"type": "response.content_part.added", "part": item.content(part)}
        out.append(self._emit(_at(item, len(item.parts) - 1, added)))

    def _end_reasoning(self, out: list[bytes]) -> None:
        """Close the reasoning item, if one is open (another kind of item begins)."""
        if self._reasoning is not None:
            self._close(self._reasoning, "completed", out)
            self._reasoning = None

    def _end_message(self, out: list[bytes]) -> None:
        """Close the message item, if one is open (another kind of item begins)."""
        if self._message is not None:
            self._close(self._message, "completed", out)
            self._message = None

    def _close(self, item: _Item, status: str, out: list[bytes]) -> None:
        for part in item.parts:
            item.parts[part] = [item.text(part)]  # joined once; the events below reuse it
        if item.kind == "function_call":
            arguments = {
                "type": "response.function_call_arguments.done",
                "item_id": item.id,
                "output_index": item.index,
                "name": item.name,
                "arguments": item.text("arguments"),
            }
            out.append(self._emit(arguments))
        else:
            for place, part in enumerate(item.parts):
                self._close_part(item, place, part, out)
        final = self._output[item.index] = item.final(status)
        done = {"type": "response.output_item.done", "output_index": item.index, "item": final}
        out.append(self._emit(done))

    def _close_part(self, item: _Item, place: int, part: str, out: list[bytes]) -> None:
        kind, field_name = TEXT_DONE[part]
        done: dict[str, Any] = {"type": kind, field_name: item.text(part)}
        if part == "output_text":
            done["logprobs"] = item.logprobs
        out.append(self._emit(_at(item, place, done)))
        part_done = {"type": "response.content_part.done", "part": item.content(part)}
        out.append(self._emit(_at(item, place, part_done)))

    def _final_output(self) -> list[dict[str, Any]]:
        return [final for final in self._output if final is not None]


def _at(item: _Item, content_index: int, event: dict[str, Any]) -> dict[str, Any]:
    """`event` placed at one of `item`'s content parts."""
    event["item_id"] = item.id
    event["output_index"] = item.index
    event["content_index"] = content_index
    return event


def _place(item: _Item, part: str) -> int:
    """A content part's index in its item."""
    return next(place for place, name in enumerate(item.parts) if name == part)


def payloads(data: bytes) -> list[bytes]:
    """The `data:` payloads of whole SSE events (`[DONE]`, comments and blank events left out)."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    found = []
    for event in data.split(b"\n\n"):
        if event.startswith(b"data:") and b"\n" not in event:  # the usual one-line event
            payload = event[5:].strip()
        else:
            lines = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
            payload = b"\n".join(lines)
        if payload and payload != b"[DONE]":
            found.append(payload)
    return found


def parse_chunk(payload: bytes) -> dict[str, Any]:
    """One chat chunk, parsed; the upstream's error event raised as an UpstreamError."""
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError:
        chunk = None
    if not isinstance(chunk, dict):
        raise UpstreamBadResponse(
            f"the upstream sent a stream event that is not a JSON object ({len(payload)} bytes "
            f"starting {payload[:40]!r})"
        )
    error = chunk.get("error")
    if error is not None and not chunk.get("choices"):
        message = error.get("message") if isinstance(error, dict) else None
        raise UpstreamError(
            f"the upstream's stream ended with an error: {message or 'no message'}",
            upstream_body=chunk,
        )
    return chunk
