"""Anthropic's Messages API answer, written from a chat completion: the message and its stream.

Pure (no I/O). `from_chat` turns a whole `chat.completion` into a Messages `message`, and
`EventWriter` turns a chat completion's SSE chunks into Anthropic's event stream as they arrive,
ending with the same message (ids aside):

    message_start              the message with empty content (usage as far as known)
    ping
    per block, in order:       content_block_start, its deltas, content_block_stop
                               thinking (thinking_delta), text (text_delta), tool_use
                               (input_json_delta: one, with the whole input, at the end)
    message_delta              stop_reason, stop_sequence, the usage
    message_stop

Tool calls are written whole after the text, once their arguments are complete: chat servers may
interleave parallel calls' arguments, and an Anthropic block cannot be reopened. An error after
the first byte is an `error` event (Anthropic's own shape).

The shapes are those of the Anthropic Python SDK's types (`anthropic.types.beta`: BetaMessage,
BetaRawMessageStreamEvent); the tests validate every object with them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from kernel.json_values import is_int
from proxy.surfaces.responses_events import parse_chunk, payloads
from proxy.surfaces.responses_output import reasoning_of

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
"""A chat `finish_reason` → Anthropic's `stop_reason` (anything else: end_turn)."""
INVALID_INPUT = "_arguments"
"""The key a tool call's arguments go under when they are not a JSON object (a small model's
slip): the client's tool validation then tells the model what it sent."""


def new_id(prefix: str) -> str:
    """An id like Anthropic's: `msg_`, `toolu_` + 24 random base-62-ish characters."""
    return f"{prefix}_{os.urandom(12).hex()}"


def sse_event(event: Mapping[str, Any]) -> bytes:
    """One Messages API event on the wire: `event: <type>` and its JSON as `data:`."""
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def message_shell(model: str, message_id: str) -> dict[str, Any]:
    """The message before its content: what `message_start` carries."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage_of(None),
    }


def from_chat(
    completion: Mapping[str, Any], shell: Mapping[str, Any], stops: Sequence[str] = ()
) -> dict[str, Any]:
    """A whole chat.completion → the finished message (`stops`: the request's stop sequences,
    to tell a stop sequence from a natural end when the upstream names the one it met)."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        content.append(thinking_block(reasoning))
    text = _text_of(message.get("content"))
    if text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            function = call.get("function")
            content.append(
                tool_use_block(call.get("id"), function if isinstance(function, dict) else {})
            )
    reason, sequence = stop_of(choice, stops)
    return {
        **shell,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_of(completion.get("usage")),
    }


def thinking_block(text: str) -> dict[str, Any]:
    """A thinking block of a model's reasoning (no signature: it was not Anthropic's)."""
    return {"type": "thinking", "thinking": text, "signature": ""}


def tool_use_block(call_id: Any, function: Mapping[str, Any]) -> dict[str, Any]:
    """A tool_use block for a chat tool call."""
    return {
        "type": "tool_use",
        "id": call_id if isinstance(call_id, str) and call_id else new_id("toolu"),
        "name": function.get("name") if isinstance(function.get("name"), str) else "",
        "input": tool_input(function.get("arguments")),
    }


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the tool_use block's input object."""
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {INVALID_INPUT: arguments}


def stop_of(choice: Mapping[str, Any], stops: Sequence[str]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a chat choice: a stop sequence when the upstream names
    which one it met (vLLM's `stop_reason`), else end_turn for a natural stop."""
    finish = choice.get("finish_reason")
    reason = STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn"
    met = choice.get("stop_reason")
    if reason == "end_turn" and isinstance(met, str) and met in stops:
        return "stop_sequence", met
    return reason, None


def usage_of(usage: Any) -> dict[str, Any]:
    """Chat usage → Anthropic's: input tokens are those neither read from nor written to the
    upstream's prompt cache (Anthropic counts the three apart)."""
    usage = usage if isinstance(usage, dict) else {}
    prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    details = usage.get("prompt_tokens_details")
    read = _count(details, "cached_tokens") or _count(usage, "cache_read_input_tokens")
    written = _count(usage, "cache_creation_input_tokens") or _count(
        details, "cache_creation_tokens"
    )
    return {
        "input_tokens": max(0, prompt - read - written),
        "output_tokens": completion,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
    }


def _count(holder: Any, name: str) -> int:
    value = holder.get(name) if isinstance(holder, dict) else None
    return value if is_int(value) else 0


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers answer with text parts
        return "".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
    return ""


@dataclass(slots=True)
class _Call:
    """A tool call being streamed: its id, name and arguments so far."""

    id: Any = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class EventWriter:
    """Chat completion SSE → the Messages API's SSE, incrementally.

    `start()` opens the stream (message_start, ping); `feed(data)` takes whole chat SSE events
    and returns the events they produce; `finish()` closes the open block, writes the tool
    calls, then message_delta and message_stop; `fail(type, message)` ends a stream that broke
    after its first byte with an `error` event.
    """

    def __init__(
        self,
        shell: Mapping[str, Any],
        stops: Sequence[str] = (),
        management: Mapping[str, Any] | None = None,
        compaction: str | None = None,
    ) -> None:
        self._shell = shell
        self._stops = stops
        self._management = management
        """The answer's `context_management`, carried by `message_delta`."""
        self._compaction = compaction
        """A compaction block's summary, the first block of the answer."""
        self._started = False
        self._index = -1
        self._open: str | None = None
        """The kind of the block being streamed (thinking or text), None when none is."""
        self._content: list[dict[str, Any]] = []
        self._calls: dict[int, _Call] = {}
        self._choice: dict[str, Any] = {}
        self._usage: Any = None
        self._message: dict[str, Any] | None = None

    @property
    def message(self) -> dict[str, Any] | None:
        """The final message once the stream ended (None before)."""
        return self._message

    def start(self) -> bytes:
        """`message_start` and a `ping`, and the compaction block when the answer has one
        (b"" once started)."""
        if self._started:
            return b""
        self._started = True
        started = sse_event({"type": "message_start", "message": self._shell})
        out = [started, sse_event({"type": "ping"})]
        if self._compaction is not None:
            self._whole({"type": "compaction", "content": self._compaction}, out)
        return b"".join(out)

    def replay(self, message: Mapping[str, Any]) -> bytes:
        """A whole message as the events of its stream."""
        out = [self.start()]
        for block in message.get("content") or ():
            self._whole(block, out)
        delta = {"stop_reason": message.get("stop_reason"), "stop_sequence": None}
        usage = message.get("usage") or usage_of(None)
        out.append(sse_event({"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(sse_event({"type": "message_stop"}))
        self._message = dict(message)
        return b"".join(out)

    def _whole(self, block: Mapping[str, Any], out: list[bytes]) -> None:
        """One whole block's events: its start, one delta with all of it, its stop."""
        self._index += 1
        kind = block.get("type")
        if kind == "tool_use":
            start: dict[str, Any] = {**block, "input": {}}
            delta: dict[str, Any] = {
                "type": "input_json_delta",
                "partial_json": orjson.dumps(block["input"]).decode(),
            }
        elif kind == "compaction":
            start = {"type": "compaction", "content": None}  # its summary comes as the delta
            delta = {"type": "compaction_delta", "content": block.get("content")}
        elif kind == "thinking":
            start = thinking_block("")
            delta = {"type": "thinking_delta", "thinking": block.get("thinking", "")}
        else:
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block.get("text", "")}
        out.append(self._event("content_block_start", content_block=start))
        out.append(self._event("content_block_delta", delta=delta))
        out.append(self._event("content_block_stop"))
        self._content.append(dict(block))

    def feed(self, data: bytes) -> bytes:
        """The events for whole chat SSE events (`[DONE]` and comments skipped). Raises
        UpstreamBadResponse for an event that is not a JSON object, UpstreamError for the
        upstream's own error event."""
        if self._message is not None:
            return b""
        out = [self.start()]
        for payload in payloads(data):
            self._chunk(parse_chunk(payload), out)
        return b"".join(out)

    def finish(self) -> bytes:
        """The open block closed, the tool calls, `message_delta` and `message_stop`."""
        if self._message is not None:
            return b""
        out = [self.start()]
        self._close(out)
        for key in sorted(self._calls):
            call = self._calls[key]
            arguments = "".join(call.arguments)
            self._whole(tool_use_block(call.id, {"name": call.name, "arguments": arguments}), out)
        reason, sequence = stop_of(self._choice, self._stops)
        usage = usage_of(self._usage)
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        ending: dict[str, Any] = {"type": "message_delta", "delta": delta, "usage": usage}
        if self._management is not None:
            ending["context_management"] = self._management
        out.append(sse_event(ending))
        out.append(sse_event({"type": "message_stop"}))
        self._message = {
            **self._shell,
            "content": self._content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": usage,
        }
        if self._management is not None:
            self._message["context_management"] = self._management
        return b"".join(out)

    def fail(self, kind: str, message: str) -> bytes:
        """An `error` event ending a broken stream."""
        self._message = self._message or {**self._shell, "content": self._content}
        return sse_event({"type": "error", "error": {"type": kind, "message": message}})

    def _event(self, kind: str, **fields: Any) -> bytes:
        return sse_event({"type": kind, "index": self._index, **fields})

    def _chunk(self, chunk: dict[str, Any], out: list[bytes]) -> None:
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n > 1 has no Messages form
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta, out)
            if choice.get("finish_reason"):
                self._choice = choice

    def _delta(self, delta: dict[str, Any], out: list[bytes]) -> None:
        reasoning = reasoning_of(delta)
        if reasoning:
            self._stream("thinking", reasoning, out)
        content = delta.get("content")
        if isinstance(content, str) and content:
            self._stream("text", content, out)
        calls = delta.get("tool_calls")
        for position, call in enumerate(calls if isinstance(calls, list) else ()):
            if isinstance(call, dict):
                self._call(call, position)

    def _stream(self, kind: str, text: str, out: list[bytes]) -> None:
        """A thinking or text delta: into the open block of its kind, else a new block."""
        if self._open != kind:
            self._close(out)
            self._open = kind
            self._index += 1
            block = thinking_block("") if kind == "thinking" else {"type": "text", "text": ""}
            self._content.append(block)
            out.append(self._event("content_block_start", content_block=block))
        block = self._content[-1]
        field_name = "thinking" if kind == "thinking" else "text"
        block[field_name] += text
        delta = {"type": f"{kind}_delta", field_name: text}
        out.append(self._event("content_block_delta", delta=delta))

    def _close(self, out: list[bytes]) -> None:
        if self._open is None:
            return
        if self._open == "thinking":
            out.append(
                self._event(
                    "content_block_delta", delta={"type": "signature_delta", "signature": ""}
                )
            )
        out.append(self._event("content_block_stop"))
        self._open = None

    def _call(self, call: dict[str, Any], position: int) -> None:
        index = call.get("index")
        found = self._calls.setdefault(index if isinstance(index, int) else position, _Call())
        given = call.get("id")
        if isinstance(given, str) and given and found.id is None:
            found.id = given
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        name, arguments = function.get("name"), function.get("arguments")
        if isinstance(name, str) and name and not found.name:
            found.name = name
        if isinstance(arguments, str):
            found.arguments.append(arguments)
