"""The byte passthrough: one deployment of an upstream that already speaks OpenAI's wire format.

The request body goes out as the client's own bytes when nothing changed (only `model` is
rewritten when the upstream knows the model by another name), and the response comes back as
the upstream's bytes. No litellm on this path: it is what keeps a request that needs no help as
cheap as a minimal passthrough. Streams are primed: the first SSE event is read before the
response exists, so an error event, or a 200 that ends with no event, is an exception here;
after it the relay passes whole events only, so a stream cut mid-event ends with overspill's
error event on an event boundary, never glued to half an event. A 2xx that is not the API's
answer (HTML, empty, JSON cut short) is a 502: checked on its first and last bytes, not parsed.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from time import monotonic
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from kernel import tracing
from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import OverspillError, UpstreamBadResponse, UpstreamError, UpstreamTimeout
from kernel.types import ChatRequest, ChatResponse, RequestContext
from providers.deadline import Deadline
from providers.failures import classify_failure, error_message, parse_body
from providers.guard import EventCutter, bad_response, json_object, sse_shaped, too_large
from providers.transport import Reply, TransportError, TransportTimeout, Upstream

DEFAULT_API_BASE = "https://api.openai.com/v1"
_PASSED_HEADER_PREFIX = b"x-ratelimit-"


class OpenAICompatProvider:
    """Sends chat requests to `{api_base}/chat/completions` with the shared upstream client.

    `timeout` bounds a JSON call whole (connect, send, wait, read); for a stream it bounds the
    wait for the head and first event, then each gap between two events. Nothing is retried.
    """

    def __init__(
        self,
        entry: ModelEntry,
        client: Upstream,
        *,
        request_timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        params = entry.litellm_params
        self.name = params.provider
        self.client = client
        self.model = params.upstream_model
        base = (params.api_base or DEFAULT_API_BASE).rstrip("/") + "/chat/completions"
        self.url, basic = _without_userinfo(base)
        self.timeout = params.timeout or request_timeout
        self.stream_timeout = params.stream_timeout or self.timeout
        self.http_timeouts = (params.timeout, params.stream_timeout or params.timeout)
        """The client's per-phase timeouts when the model sets them, else the client's default."""
        self.max_bytes = max_response_bytes
        self.headers = _headers(entry)
        if basic is not None:  # as httpx did: the URL's user and password win over the key
            self.headers["authorization"] = basic

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Forward the request; raise an error from the tree when the upstream fails."""
        body = request.render(self.model)
        seconds = self.stream_timeout if request.stream else self.timeout
        headers = self.headers if tracing.tracer is None else _traced(self.headers)
        response: Reply | None = None
        try:
            with Deadline(seconds):
                response = await self.client.post(
                    self.url, body, headers, self.http_timeouts[request.stream]
                )
                if request.stream:
                    return await self._prime(response)
                return await self._json(response)
        except BaseException as exc:
            if response is not None:
                await response.aclose()
            if isinstance(exc, TimeoutError | TransportTimeout):
                what = "stream's first event" if request.stream else "answer"
                raise self._timeout(seconds, what) from exc
            if isinstance(exc, TransportError):
                raise self._transport_error(exc) from exc
            raise

    async def aclose(self) -> None:
        """The shared client is closed by its owner (the app)."""

    async def _read(self, response: Reply) -> bytes:
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

    async def _json(self, response: Reply) -> ChatResponse:
        content = await self._read(response)
        status = response.status
        if status >= 400 or _error_at_top(content):
            raise self._failure(status, content, response)
        if not json_object(content):
            why = "an empty answer" if not content else "expected a JSON chat completion"
            raise self._bad(response, content, why)
        return ChatResponse(body=content, headers=response.headers_starting(_PASSED_HEADER_PREFIX))

    def _bad(self, response: Reply, content: bytes, why: str) -> OverspillError:
        ctype = response.header("content-type")
        return bad_response(self.name, response.status, ctype, len(content), content, why)

    async def _prime(self, response: Reply) -> ChatResponse:
        if response.status >= 400:
            content = await self._read(response)
            raise self._failure(response.status, content, response)
        if "text/html" in (response.header("content-type") or ""):
            raise self._bad(response, await self._read(response), "an HTML page")
        cutter = EventCutter(self.max_bytes, self.name)
        chunks = response.chunks()
        first = b""
        async for chunk in chunks:
            first = cutter.feed(chunk)
            if first:
                break
        if not first:  # the body ended before one whole event
            rest = cutter.rest()
            if _error_at_top(rest):
                raise self._failure(response.status, rest, response)
            why = "the stream ended before its first whole event"
            if not rest.strip():
                why = "the stream ended without sending any event"
            raise self._bad(response, rest, why)
        if not sse_shaped(first):
            if _error_at_top(first):
                raise self._failure(response.status, first, response)
            raise self._bad(response, first, "expected server-sent events")
        error = _first_event_error(first)
        if error is not None:
            raise self._failure(response.status, error, response)
        return ChatResponse(
            stream=self._relay(first, chunks, response, cutter),
            headers=response.headers_starting(_PASSED_HEADER_PREFIX),
        )

    async def _relay(
        self,
        first: bytes,
        chunks: AsyncIterator[bytes],
        response: Reply,
        cutter: EventCutter,
    ) -> AsyncIterator[bytes]:
        """Whole events only (an unfinished one is held), each gap bounded by stream_timeout."""
        gap = self.stream_timeout
        previous, last = b"", first
        since = monotonic()
        try:
            yield first
            async for chunk in chunks:
                events = cutter.feed(chunk)
                now = monotonic()
                if now - since > gap:  # bytes trickle in, but no event completes
                    raise self._timeout(gap, "next event")
                if events:
                    since = now
                    yield events
                    previous, last = last, events
        except TransportError as exc:
            if isinstance(exc, TransportTimeout):
                raise self._timeout(gap, "next event") from exc
            raise self._transport_error(exc, mid_stream=True) from exc
        finally:
            await response.aclose()
        rest = cutter.rest()
        if rest.strip() == b"data: [DONE]":  # the last event without its blank line
            yield b"data: [DONE]\n\n"
            return
        if rest.strip():
            raise UpstreamBadResponse(
                f"upstream {self.name} ended the stream in the middle of an event "
                f"({len(rest)} bytes of an unfinished event were dropped)",
                provider=self.name,
            )
        if b"[DONE]" not in previous[-32:] + last[-32:]:
            raise UpstreamBadResponse(
                f"upstream {self.name} ended the stream before [DONE]", provider=self.name
            )

    def _failure(self, status: int, content: bytes | object, response: Reply) -> OverspillError:
        body = parse_body(content) if isinstance(content, bytes) else content
        return classify_failure(
            status=status,
            message=error_message(body, f"HTTP {status}"),
            body=body,
            provider=self.name,
            retry_after=response.header("retry-after"),
        )

    def _timeout(self, seconds: float, what: str) -> UpstreamTimeout:
        return UpstreamTimeout(
            f"upstream {self.name} did not send its {what} within {seconds:g} s "
            "(litellm_params.timeout / stream_timeout, else general_settings.request_timeout)",
            provider=self.name,
        )

    def _transport_error(self, exc: TransportError, *, mid_stream: bool = False) -> UpstreamError:
        what = str(exc)
        if mid_stream:
            return UpstreamError(
                f"upstream {self.name} broke the stream: the connection was closed or reset "
                f"({what})",
                provider=self.name,
            )
        return UpstreamError(
            f"cannot reach upstream {self.name} at {self.url}: {what}", provider=self.name
        )


def _headers(entry: ModelEntry) -> dict[str, str]:
    params = entry.litellm_params
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    if params.api_key is not None:
        headers["authorization"] = "Bearer " + params.api_key.get_secret_value()
    extras: dict[str, Any] = params.extras()
    if isinstance(extras.get("organization"), str):
        headers["openai-organization"] = extras["organization"]
    extra_headers = extras.get("extra_headers")
    if isinstance(extra_headers, dict):
        headers.update({str(k).lower(): str(v) for k, v in extra_headers.items()})
    return headers


def _without_userinfo(url: str) -> tuple[str, str | None]:
    """The URL without `user:password@`, and those as a Basic authorization header value."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    basic = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=host)), basic


def _traced(headers: dict[str, str]) -> dict[str, str]:
    """The deployment's headers and the current upstream-call span's `traceparent`."""
    assert tracing.tracer is not None
    return {**headers, **tracing.tracer.headers()}


def _error_at_top(content: bytes) -> bool:
    """Whether a 200 JSON body is really an error (`{"error": ...}`)."""
    head = content[:32].lstrip()
    return head.startswith((b'{"error"', b'{ "error"'))


def _first_event_error(buffer: bytes) -> object | None:
    """The error payload when the stream's first event is an error event, else None."""
    for line in buffer.splitlines():
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload.startswith(b"{") and b'"error"' in payload:
            body = parse_body(payload)
            if isinstance(body, dict) and "error" in body:
                return body
        return None
    return None
