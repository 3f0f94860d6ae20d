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
from collections.abc import Callable
from typing import Any

from kernel import prompt_cache, tracing
from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import RouteNotServed, UpstreamBadResponse
from kernel.types import CHAT_WIRE, ChatRequest, ChatResponse, RequestContext, RouteRequest
from providers.exchange import Events, Exchange
from providers.failures import parse_body
from providers.transport import Reply, Upstream, without_userinfo

DEFAULT_API_BASE = "https://api.openai.com/v1"
_PASSED_HEADER_PREFIX = b"x-ratelimit-"
RESPONSES_WIRE = "responses"
"""The wire of OpenAI's Responses API (`{api_base}/responses`)."""
_TERMINAL_EVENTS = (b'"response.completed"', b'"response.incomplete"', b'"response.failed"')


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
        self.headers = _headers(entry)
        if basic is not None:  # as httpx did: the URL's user and password win over the key
            self.headers["authorization"] = basic

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Forward the request; raise an error from the tree when the upstream fails."""
        if request.native is not None and request.native.wire == RESPONSES_WIRE and self.responses:
            body = request.native.body_for(request, self.model)
            if body is not None:  # the upstream's own Responses API; the answer in that wire
                expected = "a JSON response object"
                return await self._forward(
                    self.responses, body, request.stream, expected, RESPONSES_WIRE
                )
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

    async def aclose(self) -> None:
        """The shared client is closed by its owner (the app)."""

    async def _forward(
        self,
        exchange: Exchange,
        body: bytes,
        stream: bool,
        expected: str,
        wire: str = CHAT_WIRE,
        ended: Callable[[bytes], None] | None = None,
    ) -> ChatResponse:
        """POST `body` to `exchange`'s URL; the answer's bytes in `wire` (what a JSON answer of
        it is: `expected`). A complete chat stream's last events go to `ended` (its usage)."""
        headers = self.headers if tracing.tracer is None else _traced(self.headers)
        if stream:
            answer = functools.partial(_stream, exchange, wire, ended or _ignored)
        else:
            answer = functools.partial(_json, exchange, f"expected {expected}", wire)
        return await exchange.call(body, headers, stream, answer)


async def _json(exchange: Exchange, expected: str, wire: str, response: Reply) -> ChatResponse:
    content = await exchange.json_answer(response, expected)
    passed = response.headers_starting(_PASSED_HEADER_PREFIX)
    return ChatResponse(body=content, headers=passed, wire=wire)


def _ignored(last: bytes) -> None:
    """What a stream's end is given when nobody reads its usage."""


async def _stream(
    exchange: Exchange, wire: str, ended: Callable[[bytes], None], response: Reply
) -> ChatResponse:
    """Primed; relayed until `[DONE]`, or for the Responses API until its terminal event."""
    first, chunks, cutter = await exchange.first_events(response)
    error = _first_event_error(first)
    if error is not None:
        raise exchange.failure(response.status, error, response)
    until: Events = (
        _UntilTerminal(exchange, first)
        if wire == RESPONSES_WIRE
        else _UntilDone(exchange, first, ended)
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


class _UntilTerminal:
    """The Responses API's events pass unchanged; a complete stream has sent its terminal
    event (`response.completed`, `.incomplete` or `.failed`); it has no `[DONE]`."""

    __slots__ = ("done", "exchange")

    def __init__(self, exchange: Exchange, first: bytes) -> None:
        self.exchange = exchange
        self.done = _terminal(first)

    def feed(self, events: bytes) -> bytes:
        if not self.done:
            self.done = _terminal(events)
        return events

    def end(self, rest: bytes) -> bytes:
        if rest.strip():
            raise self.exchange.cut_event(rest)
        if not self.done:
            raise UpstreamBadResponse(
                f"upstream {self.exchange.name} ended the stream before its response was "
                "completed (no response.completed, .incomplete or .failed event)",
                provider=self.exchange.name,
            )
        return b""


def _terminal(events: bytes) -> bool:
    """Whether these whole events hold the Responses API's last event of a stream."""
    return any(marker in events for marker in _TERMINAL_EVENTS)


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
