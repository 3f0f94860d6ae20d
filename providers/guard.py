"""What an upstream's answer must look like before it reaches a client, for every provider.

An upstream that answers 2xx with something that is not the API's response (an HTML page, an
empty body, JSON cut short, a stream that stops mid-event) is `UpstreamBadResponse`; an answer
over `general_settings.max_response_bytes` (for a stream: one event over it) is
`UpstreamTooLarge`, found while reading, so nothing past the limit is ever buffered.

The byte passthrough uses `EventCutter` and the checks directly. litellm reads the upstream
itself, so its HTTP client gets `guard_response` as a response hook: the hook checks the head
and wraps the body in a counting stream, recording what it found in the call's `Watch` (set by
the provider in a context variable), which the provider reads before litellm's own exception.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from kernel.errors import UpstreamBadResponse, UpstreamError, UpstreamTooLarge

_ENDS = (b"\n\n", b"\r\n\r\n")
_SSE_FIELDS = (b"data:", b"event:", b":", b"id:", b"retry:")
_HEAD_CHARS = 40


def bad_response(
    provider: str, status: int, content_type: str | None, size: int | None, head: bytes, why: str
) -> UpstreamBadResponse:
    """The upstream answered with something that is not the API's response."""
    seen = f"HTTP {status}, content-type {content_type or '(none)'}, "
    seen += "an empty body" if size == 0 else f"{size} bytes" if size is not None else "a body"
    start = head[:_HEAD_CHARS].decode("utf-8", "replace").strip()
    if start and size != 0:
        seen += f" starting {start!r}"
    return UpstreamBadResponse(
        f"upstream {provider} answered with something that is not the API's response ({why}): "
        f"{seen}. Check the model's api_base and that the server there speaks the API",
        provider=provider,
        upstream_status=status,
    )


def too_large(provider: str, limit: int, *, event: bool) -> UpstreamTooLarge:
    """The answer (or one event of a stream) is over the limit."""
    what = "a single stream event" if event else "the answer"
    return UpstreamTooLarge(
        f"upstream {provider} sent more than {limit} bytes in {what}; overspill stopped reading "
        "(general_settings.max_response_bytes)",
        provider=provider,
    )


def json_object(body: bytes) -> bool:
    """Whether a body looks like one whole JSON object: `{` first and `}` last (no parse)."""
    return body[:64].lstrip()[:1] == b"{" and body[-64:].rstrip()[-1:] == b"}"


def sse_shaped(events: bytes) -> bool:
    """Whether complete SSE events start with an SSE field (not `<html>` or `{`)."""
    return events.lstrip().startswith(_SSE_FIELDS)


def _boundary(data: bytes) -> int:
    """The index just after the last blank line in `data`, or -1."""
    lf = data.rfind(b"\n\n")
    crlf = data.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else -1, crlf + 4 if crlf >= 0 else -1)


class EventCutter:
    """Cuts a byte stream at SSE event ends: passes whole events on, holds an unfinished one.

    An upstream's chunks usually end on an event's end, so the common case is one `endswith`.
    The unfinished event is held as a list of chunks (no quadratic joining) and may not grow
    past `limit` bytes.
    """

    __slots__ = ("held", "limit", "provider", "size", "tail")

    def __init__(self, limit: int, provider: str) -> None:
        self.limit = limit
        self.provider = provider
        self.held: list[bytes] = []
        self.size = 0
        self.tail = b""

    def feed(self, chunk: bytes) -> bytes:
        """The whole events `chunk` completes (b"" when none)."""
        if not self.held and chunk.endswith(_ENDS):
            return chunk
        tail = self.tail  # a blank line may span chunks: the held bytes' last three
        data = tail + chunk
        end = _boundary(data)
        if end < 0:
            self.held.append(chunk)
            self.size += len(chunk)
            self.tail = data[-3:]
            if self.size > self.limit:
                raise too_large(self.provider, self.limit, event=True)
            return b""
        end -= len(tail)
        out = b"".join([*self.held, chunk[:end]])
        rest = chunk[end:]
        self.held = [rest] if rest else []
        self.size = len(rest)
        self.tail = rest[-3:]
        if self.size > self.limit:
            raise too_large(self.provider, self.limit, event=True)
        return out

    def rest(self) -> bytes:
        """The unfinished event's bytes (at the stream's end: what was cut off)."""
        return b"".join(self.held)


@dataclass
class Watch:
    """What the response hook saw of one litellm call's upstream answer."""

    provider: str
    stream: bool
    limit: int
    end_markers: tuple[bytes, ...] = ()
    """Bytes only a complete stream's last events carry (none known: not checked)."""
    status: int = 0
    content_type: str = ""
    size: int = 0
    tail: bytes = b""
    error: UpstreamError | None = None
    reached_end: bool = False
    pending: int = field(default=0, repr=False)

    def finished(self) -> bool:
        """Whether the stream's raw bytes reached the provider's end event."""
        return self.reached_end or not self.end_markers

    def fail(self, error: UpstreamError) -> UpstreamError:
        """Record `error` (the provider raises it whatever litellm makes of it)."""
        if self.error is None:
            self.error = error
        return self.error


WATCH: contextvars.ContextVar[Watch | None] = contextvars.ContextVar("upstream_watch", default=None)
"""The current litellm call's watch (None outside a guarded call)."""


async def guard_response(response: httpx.Response) -> None:
    """An httpx response hook: checks a guarded call's head, then counts its body as it comes."""
    watch = WATCH.get()
    if watch is None:
        return
    watch.status = response.status_code
    watch.content_type = response.headers.get("content-type", "")
    ctype = watch.content_type.lower()
    declared = response.headers.get("content-length")
    size = int(declared) if declared is not None and declared.isdigit() else None
    if 200 <= response.status_code < 300:
        why = ""
        if "text/html" in ctype:
            why = "an HTML page"
        elif watch.stream and not ("event-stream" in ctype or "ndjson" in ctype):
            why = "a stream was asked for"
        elif size == 0:
            why = "an empty answer"
        if why:
            await response.aclose()
            error = bad_response(watch.provider, response.status_code, ctype, size, b"", why)
            raise watch.fail(error)
    mode = "sse" if "event-stream" in ctype else "ndjson" if "ndjson" in ctype else "json"
    if size is not None and size > watch.limit and mode == "json":
        await response.aclose()
        raise watch.fail(too_large(watch.provider, watch.limit, event=False))
    if isinstance(response.stream, httpx.AsyncByteStream):
        response.stream = _Counted(response.stream, watch, mode)


def _line_end(data: bytes) -> int:
    """The index just after the last newline in `data`, or -1 (ndjson: one event a line)."""
    found = data.rfind(b"\n")
    return found + 1 if found >= 0 else -1


class _Counted(httpx.AsyncByteStream):
    """A response body counted as litellm reads it; over the limit, reading stops."""

    def __init__(self, inner: httpx.AsyncByteStream, watch: Watch, mode: str) -> None:
        self.inner = inner
        self.watch = watch
        self.events = mode != "json"
        self.boundary = _line_end if mode == "ndjson" else _boundary

    async def __aiter__(self) -> AsyncIterator[bytes]:
        watch = self.watch
        async for chunk in self.inner:
            watch.size += len(chunk)
            if self.events:
                data = watch.tail[-3:] + chunk
                end = self.boundary(data)
                watch.pending = len(data) - end if end >= 0 else watch.pending + len(chunk)
                over = watch.pending > watch.limit
            else:
                over = watch.size > watch.limit
            if self.events and not watch.reached_end:
                seen = watch.tail[-16:] + chunk
                watch.reached_end = any(marker in seen for marker in watch.end_markers)
            watch.tail = (watch.tail + chunk)[-64:]
            if over:
                raise watch.fail(too_large(watch.provider, watch.limit, event=self.events))
            yield chunk
        if watch.size == 0 and 200 <= watch.status < 300:
            ctype = watch.content_type
            raise watch.fail(bad_response(watch.provider, watch.status, ctype, 0, b"", "no body"))

    async def aclose(self) -> None:
        """Close the connection's body."""
        await self.inner.aclose()
