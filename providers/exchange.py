"""One deployment's HTTP exchange with its upstream, whatever the wire format above it.

Shared by the byte passthrough and the translated path: the call within its deadline, a JSON
answer read whole but never past `max_response_bytes`, a stream primed (read up to its first
whole event, so an error or an empty 200 is an exception before the client gets a head) and
then relayed whole event by whole event, each gap bounded by the stream timeout. What a wire
does with its events (pass them on, or translate them) and how a complete stream ends are the
`Events` it gives; errors become the tree's here, once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from time import monotonic
from typing import Protocol

from kernel.config import ModelEntry
from kernel.errors import OverspillError, UpstreamBadResponse, UpstreamError, UpstreamTimeout
from kernel.types import ChatResponse
from providers.deadline import Deadline
from providers.failures import classify_failure, error_message, parse_body
from providers.guard import EventCutter, bad_response, json_object, sse_shaped, too_large
from providers.transport import Reply, TransportError, TransportTimeout, Upstream


class Events(Protocol):
    """What one stream's wire does with its whole events."""

    def feed(self, events: bytes) -> bytes:
        """The bytes to relay for these whole events (raise for an error event)."""

    def end(self, rest: bytes) -> bytes:
        """At the stream's end (`rest`: bytes after its last whole event): the last bytes to
        relay, or raise when the stream did not end as a complete one of this wire does."""


Primed = tuple[bytes, AsyncIterator[bytes], EventCutter]
"""A stream's first whole event(s), the rest of its body, the cutter holding what follows."""


class Exchange:
    """Calls to one URL with the shared client, `timeout` (JSON) / `stream_timeout` (streams)
    as deadlines and `phases` as the client's per-phase timeouts (None: its defaults)."""

    def __init__(
        self,
        name: str,
        url: str,
        client: Upstream,
        *,
        timeout: float,
        stream_timeout: float,
        phases: tuple[float | None, float | None],
        max_bytes: int,
    ) -> None:
        self.name = name
        self.url = url
        self.client = client
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self.phases = phases
        self.max_bytes = max_bytes

    @classmethod
    def of(
        cls, entry: ModelEntry, url: str, client: Upstream, request_timeout: float, max_bytes: int
    ) -> Exchange:
        """A deployment's exchange: its `timeout` / `stream_timeout` when set (each also the
        client's per-phase timeout then), else `request_timeout` as the deadline."""
        params = entry.litellm_params
        timeout = params.timeout or request_timeout
        return cls(
            params.provider,
            url,
            client,
            timeout=timeout,
            stream_timeout=params.stream_timeout or timeout,
            phases=(params.timeout, params.stream_timeout or params.timeout),
            max_bytes=max_bytes,
        )

    async def call(
        self,
        body: bytes,
        headers: Mapping[str, str],
        stream: bool,
        answer: Callable[[Reply], Awaitable[ChatResponse]],
    ) -> ChatResponse:
        """POST `body`, then `answer` the reply, all within the deadline; the reply is closed
        and the failure is the tree's when anything goes wrong."""
        seconds = self.stream_timeout if stream else self.timeout
        response: Reply | None = None
        try:
            with Deadline(seconds):
                response = await self.client.post(self.url, body, headers, self.phases[stream])
                return await answer(response)
        except BaseException as exc:
            if response is not None:
                await response.aclose()
            if isinstance(exc, TimeoutError | TransportTimeout):
                what = "stream's first event" if stream else "answer"
                raise self.timeout_error(seconds, what) from exc
            if isinstance(exc, TransportError):
                raise self.transport_error(exc) from exc
            raise

    async def read(self, response: Reply) -> bytes:
        """The whole body, read no further than `max_bytes`."""
        declared = response.header("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise too_large(self.name, self.max_bytes, event=False)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.chunks():
            size += len(chunk)
            if size > self.max_bytes:
                raise too_large(self.name, self.max_bytes, event=False)
            chunks.append(chunk)
        await response.aclose()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def json_answer(self, response: Reply, expected: str) -> bytes:
        """A JSON answer's bytes; a failure status, an `{"error": ...}` body or one that is
        not a JSON object (`expected` says what it should have been) raise."""
        content = await self.read(response)
        if response.status >= 400 or error_at_top(content):
            raise self.failure(response.status, content, response)
        if not json_object(content):
            raise self.bad(response, content, "an empty answer" if not content else expected)
        return content

    async def first_events(
        self, response: Reply
    ) -> tuple[bytes, AsyncIterator[bytes], EventCutter]:
        """The stream's first whole event(s), the rest of its body, and the cutter holding
        what came after them; whatever is not the start of an event stream raises."""
        if response.status >= 400:
            raise self.failure(response.status, await self.read(response), response)
        if "text/html" in (response.header("content-type") or ""):
            raise self.bad(response, await self.read(response), "an HTML page")
        cutter = EventCutter(self.max_bytes, self.name)
        chunks = response.chunks()
        first = b""
        async for chunk in chunks:
            first = cutter.feed(chunk)
            if first:
                break
        if not first:  # the body ended before one whole event
            rest = cutter.rest()
            if error_at_top(rest):
                raise self.failure(response.status, rest, response)
            why = "the stream ended before its first whole event"
            if not rest.strip():
                why = "the stream ended without sending any event"
            raise self.bad(response, rest, why)
        if not sse_shaped(first):
            if error_at_top(first):
                raise self.failure(response.status, first, response)
            raise self.bad(response, first, "expected server-sent events")
        return first, chunks, cutter

    async def relay(
        self,
        head: bytes,
        chunks: AsyncIterator[bytes],
        response: Reply,
        cutter: EventCutter,
        events: Events,
    ) -> AsyncIterator[bytes]:
        """`head`, then whole events as `events` makes them, each gap bounded by the stream
        timeout, then what `events.end` adds; a cut connection or a cut event raises."""
        gap = self.stream_timeout
        since = monotonic()
        try:
            if head:
                yield head
            async for chunk in chunks:
                whole = cutter.feed(chunk)
                now = monotonic()
                if now - since > gap:  # bytes trickle in, but no event completes
                    raise self.timeout_error(gap, "next event")
                if whole:
                    since = now
                    out = events.feed(whole)
                    if out:
                        yield out
        except TransportError as exc:
            if isinstance(exc, TransportTimeout):
                raise self.timeout_error(gap, "next event") from exc
            raise self.transport_error(exc, mid_stream=True) from exc
        finally:
            await response.aclose()
        last = events.end(cutter.rest())
        if last:
            yield last

    def cut_event(self, rest: bytes) -> UpstreamBadResponse:
        """A stream that ended in the middle of an event."""
        return UpstreamBadResponse(
            f"upstream {self.name} ended the stream in the middle of an event "
            f"({len(rest)} bytes of an unfinished event were dropped)",
            provider=self.name,
        )

    def failure(
        self, status: int | None, content: bytes | object, response: Reply | None
    ) -> OverspillError:
        """An upstream's error answer (or a stream's error event: no status, no head),
        classified: overflow, rate limit, auth, ..."""
        body = parse_body(content) if isinstance(content, bytes) else content
        return classify_failure(
            status=status,
            message=error_message(body, f"HTTP {status}"),
            body=body,
            provider=self.name,
            retry_after=response.header("retry-after") if response is not None else None,
        )

    def bad(self, response: Reply, content: bytes, why: str) -> OverspillError:
        """A 2xx that is not the API's answer."""
        ctype = response.header("content-type")
        return bad_response(self.name, response.status, ctype, len(content), content, why)

    def timeout_error(self, seconds: float, what: str) -> UpstreamTimeout:
        return UpstreamTimeout(
            f"upstream {self.name} did not send its {what} within {seconds:g} s "
            "(litellm_params.timeout / stream_timeout, else general_settings.request_timeout)",
            provider=self.name,
        )

    def transport_error(self, exc: TransportError, *, mid_stream: bool = False) -> UpstreamError:
        if mid_stream:
            return UpstreamError(
                f"upstream {self.name} broke the stream: the connection was closed or reset "
                f"({exc})",
                provider=self.name,
            )
        return UpstreamError(
            f"cannot reach upstream {self.name} at {self.url}: {exc}", provider=self.name
        )


def error_at_top(content: bytes) -> bool:
    """Whether a body is an error object: `{"error": ...}`, or Anthropic's `{"type": "error"`."""
    head = content[:40].lstrip()
    return head.startswith((b'{"error"', b'{ "error"', b'{"type":"error"', b'{"type": "error"'))
