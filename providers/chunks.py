"""A provider's SSE stream relayed as OpenAI `chat.completion.chunk` events.

Shared by the wires that translate a stream (Anthropic's own, and litellm's parsers): the
upstream's whole events parsed one by one (`ping` skipped, an `error` event raised as the
call's failure, the end event noted: OpenAI's wire ends with `[DONE]`), each turned into a
chunk by the wire's `event`, the role on the first chunk, and at the end the usage event when
the request asked for it and `[DONE]`. A stream that ends before its end event, or in the
middle of an event, is an error, never a silent end.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from kernel.errors import UpstreamBadResponse
from kernel.types import ChatRequest
from providers.exchange import Exchange

DONE = "[DONE]"
"""OpenAI's wire's last line (its `data:`), named as a relay's end kind."""
_DONE = DONE.encode()


class SseRelay:
    """One stream: `event` (a wire's) turns each parsed upstream event into chunk bytes."""

    def __init__(
        self,
        exchange: Exchange,
        *,
        end_kind: str,
        include_usage: bool,
        status: int,
        id: str,
        model: str,
    ) -> None:
        self.exchange = exchange
        self.name = exchange.name
        self.end_kind = end_kind
        self.include_usage = include_usage
        self.status = status
        self.id = id
        self.model = model
        self.created = int(time.time())
        self.finished = False
        self.role_sent = False

    def event(self, parsed: dict[str, Any]) -> bytes | None:
        """The chunk bytes for one upstream event (None: it carries nothing for the client)."""
        raise NotImplementedError

    def last_usage(self) -> dict[str, Any] | None:
        """The stream's usage in OpenAI's terms, once known."""
        raise NotImplementedError

    def feed(self, data: bytes) -> bytes:
        """The OpenAI events for whole upstream events (b"" when none carries anything)."""
        out: list[bytes] = []
        for event in data.replace(b"\r\n", b"\n").split(b"\n\n"):
            payload = sse_data(event)
            if payload is None:
                continue
            if payload == _DONE and self.end_kind == DONE:  # OpenAI's wire: its last line
                self.finished = True
                continue
            try:
                parsed = orjson.loads(payload)
            except orjson.JSONDecodeError as exc:
                raise UpstreamBadResponse(
                    f"upstream {self.name} sent a stream event that is not JSON "
                    f"({len(payload)} bytes starting {payload[:40]!r})",
                    provider=self.name,
                    upstream_status=self.status,
                ) from exc
            kind = parsed.get("type") if isinstance(parsed, dict) else None
            if kind == "ping":
                continue
            if kind == "error" or (isinstance(parsed, dict) and "error" in parsed and not kind):
                raise self.exchange.failure(_event_status(parsed), parsed, None)
            if kind == self.end_kind:
                self.finished = True
                continue
            if isinstance(parsed, dict):
                rendered = self.event(parsed)
                if rendered is not None:
                    out.append(rendered)
        return b"".join(out)

    def chunk(self, delta: dict[str, Any], finish: str | None) -> bytes:
        """An OpenAI chunk event (the first one carries the role)."""
        if not self.role_sent:
            delta = {"role": "assistant", **delta}
            self.role_sent = True
        return sse(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    def end(self, rest: bytes) -> bytes:
        """After the end event: the usage event when asked for, and `[DONE]`."""
        if rest.strip():
            raise self.exchange.cut_event(rest)
        if not self.finished:
            raise UpstreamBadResponse(
                f"upstream {self.name} ended the stream before its end event ({self.end_kind})",
                provider=self.name,
            )
        usage = self.last_usage() if self.include_usage else None
        if usage is None:
            return b"data: [DONE]\n\n"
        last = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage,
        }
        return sse(last) + b"data: [DONE]\n\n"


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def sse_data(event: bytes) -> bytes | None:
    """The `data:` payload of one SSE event (its data lines joined), or None."""
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[5:].strip() for line in lines)


def _event_status(event: dict[str, Any]) -> int | None:
    """An error event's HTTP status when it names one (Gemini's `error.code`: a stream that
    began 200 can end in a 429), else None."""
    error = event.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) and 400 <= code <= 599 else None


def include_usage(request: ChatRequest) -> bool:
    """Whether the request asked for the usage event (`stream_options.include_usage`)."""
    options = request.body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True
