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

from collections.abc import Mapping
from typing import Any

from kernel import tracing
from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import UpstreamBadResponse
from kernel.types import MESSAGES_WIRE, ChatRequest, ChatResponse, RequestContext
from providers.exchange import Exchange
from providers.failures import parse_body
from providers.transport import Reply, Upstream, without_userinfo

DEFAULT_API_BASE = "https://api.openai.com/v1"
_PASSED_HEADER_PREFIX = b"x-ratelimit-"
RESPONSES_WIRE = "responses"
"""The wire of OpenAI's Responses API (`{api_base}/responses`)."""
TERMINAL_EVENTS = {
    RESPONSES_WIRE: (b'"response.completed"', b'"response.incomplete"', b'"response.failed"'),
    MESSAGES_WIRE: (b'"message_stop"',),
}
"""Per native wire, the events one of which ends a complete stream (neither has `[DONE]`)."""


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
        self.model = params.upstream_model
        base = (params.api_base or DEFAULT_API_BASE).rstrip("/")
        url, basic = without_userinfo(base + "/chat/completions")
        self.exchange = Exchange.of(entry, url, client, request_timeout, max_response_bytes)
        self.responses: Exchange | None = None
        """The upstream's own Responses API, when the deployment is configured to use it."""
        if entry.speaks_responses():
            native, _ = without_userinfo(base + "/responses")
            self.responses = Exchange.of(entry, native, client, request_timeout, max_response_bytes)
        self.messages: Exchange | None = None
        """The upstream's own Messages API (`messages_api: native`), and its token counting."""
        self.counting: Exchange | None = None
        if entry.speaks_messages():
            native, _ = without_userinfo(base + "/messages")
            self.messages = Exchange.of(entry, native, client, request_timeout, max_response_bytes)
            self.counting = Exchange.of(
                entry, native + "/count_tokens", client, request_timeout, max_response_bytes
            )
        self.headers = _headers(entry)
        if basic is not None:  # as httpx did: the URL's user and password win over the key
            self.headers["authorization"] = basic

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Forward the request; raise an error from the tree when the upstream fails."""
        headers = self.headers if tracing.tracer is None else _traced(self.headers)
        native = request.native
        exchange = {RESPONSES_WIRE: self.responses, MESSAGES_WIRE: self.messages}.get(
            native.wire if native is not None else ""
        )
        if native is not None and exchange is not None:
            body = native.body_for(request, self.model)
            if body is not None:
                headers = {**headers, **native.headers}
                return await forward_native(exchange, body, headers, request.stream, native.wire)
        answer = self._stream if request.stream else self._json
        return await self.exchange.call(request.render(self.model), headers, request.stream, answer)

    async def count_tokens(self, body: bytes, headers: Mapping[str, str]) -> bytes | None:
        """The upstream's own count of a Messages request (its JSON answer), or None when the
        deployment does not speak the Messages API."""
        if self.counting is None:
            return None
        return await count_native(self.counting, body, {**self.headers, **headers})

    async def aclose(self) -> None:
        """The shared client is closed by its owner (the app)."""

    async def _json(self, response: Reply) -> ChatResponse:
        content = await self.exchange.json_answer(response, "expected a JSON chat completion")
        return ChatResponse(body=content, headers=response.headers_starting(_PASSED_HEADER_PREFIX))

    async def _stream(self, response: Reply) -> ChatResponse:
        first, chunks, cutter = await self.exchange.first_events(response)
        error = _first_event_error(first)
        if error is not None:
            raise self.exchange.failure(response.status, error, response)
        events = _UntilDone(self.exchange, first)
        return ChatResponse(
            stream=self.exchange.relay(first, chunks, response, cutter, events),
            headers=response.headers_starting(_PASSED_HEADER_PREFIX),
        )


class _UntilDone:
    """OpenAI's events pass unchanged; a complete stream ends with `data: [DONE]`."""

    __slots__ = ("exchange", "last", "previous")

    def __init__(self, exchange: Exchange, first: bytes) -> None:
        self.exchange = exchange
        self.previous, self.last = b"", first

    def feed(self, events: bytes) -> bytes:
        self.previous, self.last = self.last, events
        return events

    def end(self, rest: bytes) -> bytes:
        if rest.strip() == b"data: [DONE]":  # the last event without its blank line
            return b"data: [DONE]\n\n"
        if rest.strip():
            raise self.exchange.cut_event(rest)
        if b"[DONE]" not in self.previous[-32:] + self.last[-32:]:
            raise UpstreamBadResponse(
                f"upstream {self.exchange.name} ended the stream before [DONE]",
                provider=self.exchange.name,
            )
        return b""


async def forward_native(
    exchange: Exchange, body: bytes, headers: Mapping[str, str], stream: bool, wire: str
) -> ChatResponse:
    """A request in the upstream's own API of `wire` (the Responses API, Anthropic's
    Messages API); the answer's bytes in that wire, a stream primed and relayed until its
    terminal event."""

    async def json(response: Reply) -> ChatResponse:
        content = await exchange.json_answer(response, f"expected a JSON answer of the {wire} API")
        passed = response.headers_starting(_PASSED_HEADER_PREFIX)
        return ChatResponse(body=content, headers=passed, wire=wire)

    async def events(response: Reply) -> ChatResponse:
        first, chunks, cutter = await exchange.first_events(response)
        error = _first_event_error(first)
        if error is not None:
            raise exchange.failure(response.status, error, response)
        until = _UntilTerminal(exchange, first, TERMINAL_EVENTS[wire])
        relay = exchange.relay(first, chunks, response, cutter, until)
        passed = response.headers_starting(_PASSED_HEADER_PREFIX)
        return ChatResponse(stream=relay, headers=passed, wire=wire)

    return await exchange.call(body, headers, stream, events if stream else json)


async def count_native(exchange: Exchange, body: bytes, headers: Mapping[str, str]) -> bytes:
    """The upstream's own token count of a Messages request (its JSON answer's bytes)."""

    async def json(response: Reply) -> ChatResponse:
        return ChatResponse(body=await exchange.json_answer(response, "expected a token count"))

    answered = await exchange.call(body, headers, False, json)
    assert answered.body is not None
    return answered.body


class _UntilTerminal:
    """A native wire's events pass unchanged; a complete stream has sent one of its terminal
    events (`response.completed`, `.incomplete` or `.failed`; `message_stop`): it has no
    `[DONE]`."""

    __slots__ = ("done", "exchange", "markers")

    def __init__(self, exchange: Exchange, first: bytes, markers: tuple[bytes, ...]) -> None:
        self.exchange = exchange
        self.markers = markers
        self.done = self._terminal(first)

    def _terminal(self, events: bytes) -> bool:
        return any(marker in events for marker in self.markers)

    def feed(self, events: bytes) -> bytes:
        if not self.done:
            self.done = self._terminal(events)
        return events

    def end(self, rest: bytes) -> bytes:
        if rest.strip():
            raise self.exchange.cut_event(rest)
        if not self.done:
            ends = " or ".join(marker.decode().strip('"') for marker in self.markers)
            raise UpstreamBadResponse(
                f"upstream {self.exchange.name} ended the stream before its last event ({ends})",
                provider=self.exchange.name,
            )
        return b""


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


def _first_event_error(buffer: bytes) -> object | None:
    """The error payload when the stream's first event is an error event, else None."""
    for line in buffer.splitlines():
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload.startswith(b"{") and b'"error"' in payload:
            body = parse_body(payload)
            if isinstance(body, dict) and ("error" in body or body.get("type") == "error"):
                return body
        return None
    return None
