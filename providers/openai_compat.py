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

from collections.abc import AsyncIterator
from time import monotonic
from typing import Any

import httpx

from kernel import tracing
from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import OverspillError, UpstreamBadResponse, UpstreamError, UpstreamTimeout
from kernel.types import ChatRequest, ChatResponse, RequestContext
from providers.deadline import Deadline
from providers.failures import classify_failure, error_message, parse_body
from providers.guard import EventCutter, bad_response, json_object, sse_shaped, too_large

DEFAULT_API_BASE = "https://api.openai.com/v1"
_PASSED_HEADER_PREFIX = b"x-ratelimit-"


class OpenAICompatProvider:
    """Sends chat requests to `{api_base}/chat/completions` with a shared httpx client.

    `timeout` bounds a JSON call whole (connect, send, wait, read); for a stream it bounds the
    wait for the head and first event, then each gap between two events. Nothing is retried.
    """

    def __init__(
        self,
        entry: ModelEntry,
        client: httpx.AsyncClient,
        *,
        request_timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        params = entry.litellm_params
        self.name = params.provider
        self.client = client
        self.model = params.upstream_model
        self.url = (params.api_base or DEFAULT_API_BASE).rstrip("/") + "/chat/completions"
        self.timeout = params.timeout or request_timeout
        self.stream_timeout = params.stream_timeout or self.timeout
        self.http_timeouts = (params.timeout, params.stream_timeout or params.timeout)
        """httpx's own per-phase timeouts when the model sets them, else the client's default."""
        self.max_bytes = max_response_bytes
        self.headers = _headers(entry)

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Forward the request; raise an error from the tree when the upstream fails."""
        body = request.render(self.model)
        seconds = self.stream_timeout if request.stream else self.timeout
        explicit = self.http_timeouts[request.stream]
        upstream = self.client.build_request(
            "POST",
            self.url,
            content=body,
            headers=self.headers if tracing.tracer is None else _traced(self.headers),
            timeout=explicit if explicit is not None else httpx.USE_CLIENT_DEFAULT,
        )
        response: httpx.Response | None = None
        try:
            with Deadline(seconds):
                response = await self.client.send(upstream, stream=True)
                if request.stream:
                    return await self._prime(response)
                return await self._json(response)
        except BaseException as exc:
            if response is not None:
                await response.aclose()
            if isinstance(exc, TimeoutError | httpx.TimeoutException):
                what = "stream's first event" if request.stream else "answer"
                raise self._timeout(seconds, what) from exc
            if isinstance(exc, httpx.HTTPError):
                raise self._transport_error(exc) from exc
            raise

    async def aclose(self) -> None:
        """The shared client is closed by its owner (the app)."""

    async def _read(self, response: httpx.Response) -> bytes:
        """The whole body, read no further than `max_bytes`."""
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise too_large(self.name, self.max_bytes, event=False)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise too_large(self.name, self.max_bytes, event=False)
            chunks.append(chunk)
        await response.aclose()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _json(self, response: httpx.Response) -> ChatResponse:
        content = await self._read(response)
        status = response.status_code
        if status >= 400 or _error_at_top(content):
            raise self._failure(status, content, response.headers)
        if not json_object(content):
            why = "an empty answer" if not content else "expected a JSON chat completion"
            raise self._bad(response, content, why)
        return ChatResponse(body=content, headers=_passed_headers(response))

    def _bad(self, response: httpx.Response, content: bytes, why: str) -> OverspillError:
        ctype = response.headers.get("content-type")
        return bad_response(self.name, response.status_code, ctype, len(content), content, why)

    async def _prime(self, response: httpx.Response) -> ChatResponse:
        if response.status_code >= 400:
            content = await self._read(response)
            raise self._failure(response.status_code, content, response.headers)
        if "text/html" in response.headers.get("content-type", ""):
            raise self._bad(response, await self._read(response), "an HTML page")
        cutter = EventCutter(self.max_bytes, self.name)
        chunks = response.aiter_raw()
        first = b""
        async for chunk in chunks:
            first = cutter.feed(chunk)
            if first:
                break
        if not first:  # the body ended before one whole event
            rest = cutter.rest()
            if _error_at_top(rest):
                raise self._failure(response.status_code, rest, response.headers)
            why = "the stream ended before its first whole event"
            if not rest.strip():
                why = "the stream ended without sending any event"
            raise self._bad(response, rest, why)
        if not sse_shaped(first):
            if _error_at_top(first):
                raise self._failure(response.status_code, first, response.headers)
            raise self._bad(response, first, "expected server-sent events")
        error = _first_event_error(first)
        if error is not None:
            raise self._failure(response.status_code, error, response.headers)
        return ChatResponse(
            stream=self._relay(first, chunks, response, cutter), headers=_passed_headers(response)
        )

    async def _relay(
        self,
        first: bytes,
        chunks: AsyncIterator[bytes],
        response: httpx.Response,
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
        except httpx.HTTPError as exc:
            if isinstance(exc, httpx.TimeoutException):
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

    def _failure(
        self, status: int, content: bytes | object, headers: httpx.Headers
    ) -> OverspillError:
        body = parse_body(content) if isinstance(content, bytes) else content
        return classify_failure(
            status=status,
            message=error_message(body, f"HTTP {status}"),
            body=body,
            provider=self.name,
            retry_after=headers.get("retry-after"),
        )

    def _timeout(self, seconds: float, what: str) -> UpstreamTimeout:
        return UpstreamTimeout(
            f"upstream {self.name} did not send its {what} within {seconds:g} s "
            "(litellm_params.timeout / stream_timeout, else general_settings.request_timeout)",
            provider=self.name,
        )

    def _transport_error(self, exc: httpx.HTTPError, *, mid_stream: bool = False) -> UpstreamError:
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
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


def _traced(headers: dict[str, str]) -> dict[str, str]:
    """The deployment's headers and the current upstream-call span's `traceparent`."""
    assert tracing.tracer is not None
    return {**headers, **tracing.tracer.headers()}


def _passed_headers(response: httpx.Response) -> dict[str, str]:
    return {
        key.decode("latin-1"): value.decode("latin-1")
        for key, value in response.headers.raw
        if key.lower().startswith(_PASSED_HEADER_PREFIX)
    }


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
