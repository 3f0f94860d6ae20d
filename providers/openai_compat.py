"""The byte passthrough: one deployment of an upstream that already speaks OpenAI's wire format.

Chat completions, embeddings and legacy completions alike (each to its own route), and the
Responses API where the deployment speaks it.

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

import functools
from collections.abc import Callable, Mapping
from typing import Any

from kernel import prompt_cache, tracing
from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import RouteNotServed, UpstreamBadResponse
from kernel.types import (
    CHAT_WIRE,
    MESSAGES_WIRE,
    ChatRequest,
    ChatResponse,
    RequestContext,
    RouteRequest,
)
from providers.exchange import Events, Exchange
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


ROUTES = {"embeddings": "an embeddings list", "completions": "a text completion"}
"""The routes that are not conversations, forwarded to `{api_base}/<route>`, and what a JSON
answer of each is (said in a 502 when it is not)."""


class OpenAICompatProvider:
    """Sends chat requests to `{api_base}/chat/completions` with the shared upstream client,
    embeddings and legacy completions requests to `{api_base}/embeddings` and `/completions`.

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

        def exchange(path: str) -> tuple[Exchange, str | None]:
            url, basic = without_userinfo(f"{base}/{path}")
            return Exchange.of(entry, url, client, request_timeout, max_response_bytes), basic

        self.exchange, basic = exchange("chat/completions")
        self.routes = {route: exchange(route)[0] for route in ROUTES}
        self.responses: Exchange | None = None
        """The upstream's own Responses API, when the deployment is configured to use it."""
        if entry.speaks_responses():
            self.responses = exchange("responses")[0]
        self.messages: Exchange | None = None
        """The upstream's own Messages API (`messages_api: native`), and its token counting."""
        self.counting: Exchange | None = None
        if entry.speaks_messages():
            self.messages = exchange("messages")[0]
            self.counting = exchange("messages/count_tokens")[0]
        self.headers = _headers(entry)
        if basic is not None:  # as httpx did: the URL's user and password win over the key
            self.headers["authorization"] = basic

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Forward the request; raise an error from the tree when the upstream fails."""
        native = request.native
        if native is not None:
            own = {RESPONSES_WIRE: self.responses, MESSAGES_WIRE: self.messages}.get(native.wire)
            body = native.body_for(request, self.model) if own is not None else None
            if own is not None and body is not None:  # the upstream's own API of that wire
                expected = f"a JSON answer of the {native.wire} API"
                extra = native.headers
                return await self._forward(own, body, request.stream, expected, native.wire, extra)
        body = request.render(self.model)
        ended = functools.partial(prompt_cache.seen, ctx, request)
        expected = "a JSON chat completion"
        return await self._forward(self.exchange, body, request.stream, expected, ended=ended)

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        """Forward an embeddings or completions request's bytes (the client's own, when the
        model name is the same) to the route's URL; the answer's bytes come back as they are."""
        exchange = self.routes.get(request.route)
        if exchange is None:
            raise RouteNotServed(f"overspill does not forward /v1/{request.route}")
        body = request.render(self.model)
        return await self._forward(exchange, body, request.stream, ROUTES[request.route])

    async def count_tokens(self, body: bytes, headers: Mapping[str, str]) -> bytes | None:
        """The upstream's own count of a Messages request (its JSON answer), or None when the
        deployment does not speak the Messages API."""
        if self.counting is None:
            return None
        return await count_native(self.counting, body, {**self.headers, **headers})

    async def aclose(self) -> None:
        """The shared client is closed by its owner (the app)."""

    async def _forward(
        self,
        exchange: Exchange,
        body: bytes,
        stream: bool,
        expected: str,
        wire: str = CHAT_WIRE,
        extra: Mapping[str, str] | None = None,
        ended: Callable[[bytes], None] | None = None,
    ) -> ChatResponse:
        """POST `body` (with the client's `extra` headers of its wire) to `exchange`'s URL."""
        headers = self.headers if tracing.tracer is None else _traced(self.headers)
        if extra:
            headers = {**headers, **extra}
        return await forward(exchange, body, headers, stream, wire, expected, ended)


async def forward(
    exchange: Exchange,
    body: bytes,
    headers: Mapping[str, str],
    stream: bool,
    wire: str,
    expected: str,
    ended: Callable[[bytes], None] | None = None,
) -> ChatResponse:
    """POST `body` to `exchange`'s URL; the answer's bytes in `wire` (what a JSON answer of it
    is: `expected`), a stream primed and relayed until its end. A complete chat stream's last
    events go to `ended` (its usage)."""
    if stream:
        answer = functools.partial(_stream, exchange, wire, ended or _ignored)
    else:
        answer = functools.partial(_json, exchange, f"expected {expected}", wire)
    return await exchange.call(body, headers, stream, answer)


async def forward_native(
    exchange: Exchange, body: bytes, headers: Mapping[str, str], stream: bool, wire: str
) -> ChatResponse:
    """A request in the upstream's own API of `wire` (the Responses API, Anthropic's
    Messages API); the answer's bytes in that wire."""
    return await forward(exchange, body, headers, stream, wire, f"a JSON answer of the {wire} API")


async def _json(exchange: Exchange, expected: str, wire: str, response: Reply) -> ChatResponse:
    content = await exchange.json_answer(response, expected)
    passed = response.headers_starting(_PASSED_HEADER_PREFIX)
    return ChatResponse(body=content, headers=passed, wire=wire)


def _ignored(last: bytes) -> None:
    """What a stream's end is given when nobody reads its usage."""


async def _stream(
    exchange: Exchange, wire: str, ended: Callable[[bytes], None], response: Reply
) -> ChatResponse:
    """Primed; relayed until `[DONE]`, or for a native wire until its terminal event."""
    first, chunks, cutter = await exchange.first_events(response)
    error = _first_event_error(first)
    if error is not None:
        raise exchange.failure(response.status, error, response)
    markers = TERMINAL_EVENTS.get(wire)
    until: Events = (
        _UntilDone(exchange, first, ended)
        if markers is None
        else _UntilTerminal(exchange, first, markers)
    )
    passed = response.headers_starting(_PASSED_HEADER_PREFIX)
    relay = exchange.relay(first, chunks, response, cutter, until)
    return ChatResponse(stream=relay, headers=passed, wire=wire)


class _UntilDone:
    """OpenAI's events pass unchanged; a complete stream ends with `data: [DONE]`, after
    which its last events (where `usage` is) are handed to `ended`."""

    __slots__ = ("ended", "exchange", "last", "previous")

    def __init__(self, exchange: Exchange, first: bytes, ended: Callable[[bytes], None]) -> None:
        self.exchange = exchange
        self.previous, self.last = b"", first
        self.ended = ended

    def feed(self, events: bytes) -> bytes:
        self.previous, self.last = self.last, events
        return events

    def end(self, rest: bytes) -> bytes:
        if rest.strip() == b"data: [DONE]":  # the last event without its blank line
            self.ended(self.last[-prompt_cache.TAIL_BYTES :])
            return b"data: [DONE]\n\n"
        if rest.strip():
            raise self.exchange.cut_event(rest)
        if b"[DONE]" not in self.previous[-32:] + self.last[-32:]:
            raise UpstreamBadResponse(
                f"upstream {self.exchange.name} ended the stream before [DONE]",
                provider=self.exchange.name,
            )
        self.ended(
            self.previous[-prompt_cache.TAIL_BYTES :] + self.last[-prompt_cache.TAIL_BYTES :]
        )
        return b""


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
