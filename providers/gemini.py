"""Gemini models of Google AI Studio (`gemini/...`, an API key) served without litellm.

Importing litellm costs about 150 MB and seconds of a worker's life; a worker that serves
Gemini models with chat clients' usual requests never pays it. The body is written by
`providers.gemini_wire` from the request's own objects, sent with the app's shared client
through the same `Exchange` as the byte passthrough (the key in `x-goog-api-key`, as litellm
sends it, never in the URL), and the answer (JSON, or the SSE stream event by event) comes
back in OpenAI's shape. A request that uses what only litellm's Gemini translation writes
(`response_format`, reasoning, web search, image URLs, files, ...) goes to `fallback`, built
(and litellm imported) on the first such request.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import orjson

from kernel import tracing
from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import too_deep
from kernel.types import ChatRequest, ChatResponse, Provider, RequestContext
from providers import gemini_wire as wire
from providers.chunks import SseRelay, include_usage
from providers.exchange import Exchange
from providers.model_info import known_system_messages
from providers.transport import Reply, Upstream

SETTINGS = frozenset({"extra_headers", "max_retries", "num_retries"})
"""Deployment settings this path applies (no retries ever; extra headers sent as given)."""

KEY_VARIABLES = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "PALM_API_KEY")
"""Where litellm looks for a Gemini key when the deployment has none, in its order."""


def api_key(entry: ModelEntry) -> str | None:
    """The deployment's key, else the first of `KEY_VARIABLES` set (as litellm reads it)."""
    params = entry.litellm_params
    key = params.api_key.get_secret_value() if params.api_key is not None else None
    key = key or next((os.environ[name] for name in KEY_VARIABLES if os.environ.get(name)), "")
    return key.strip() or None


def serves(entry: ModelEntry) -> bool:
    """Whether this path serves a deployment: Gemini, an API key, no other litellm setting."""
    params = entry.litellm_params
    return (
        params.provider == "gemini"
        and set(params.extras()) <= SETTINGS
        and params.api_version is None
        and api_key(entry) is not None
    )


class GeminiProvider:
    """One Gemini deployment: translated here, sent and relayed by overspill."""

    def __init__(
        self,
        entry: ModelEntry,
        client: Upstream,
        fallback: Provider,
        *,
        drop_params: bool = False,
        request_timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        params = entry.litellm_params
        self.name = params.provider
        self.model = params.upstream_model
        self.fallback = fallback
        self.drop_params = drop_params
        self.system_instruction = known_system_messages(params.model)
        base = params.api_base or os.environ.get("GEMINI_API_BASE")
        exchanges: list[Exchange] = []
        for stream in (False, True):
            if base:  # litellm: the base as given (its version included), then the model
                url = base + wire.call_path(self.model, stream=stream)
            else:
                url = wire.DEFAULT_API_BASE + wire.api_path(self.model, stream=stream)
            exchanges.append(Exchange.of(entry, url, client, request_timeout, max_response_bytes))
        self.exchange, self.streams = exchanges
        key = api_key(entry)
        assert key is not None, "serves(entry) decides first"
        self.headers = {
            "x-goog-api-key": key,
            "content-type": "application/json",
            "accept-encoding": "identity",
        }
        extra = params.extras().get("extra_headers")
        if isinstance(extra, dict):
            self.headers.update({str(k).lower(): str(v) for k, v in extra.items()})

    async def aclose(self) -> None:
        """The shared client is closed by its owner; the fallback, if built, by itself."""
        await self.fallback.aclose()

    def translate(self, request: ChatRequest) -> bytes:
        """The `generateContent` body's bytes (raises `LeftToLitellm` for the fallback's)."""
        body = wire.request_body(
            request.body,
            request.messages,
            self.model,
            system_instruction=self.system_instruction,
            drop_params=self.drop_params,
        )
        try:
            return orjson.dumps(body)
        except orjson.JSONEncodeError as exc:  # parsed (up to 1024 levels), cannot be written
            raise too_deep("the request body") from exc

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Translate and send; a request only litellm can write goes to the fallback."""
        try:
            body = self.translate(request)
        except wire.LeftToLitellm:
            return await self.fallback.complete(request, ctx)
        headers = self.headers
        if tracing.tracer is not None:  # the upstream-call span's traceparent goes along
            headers = {**headers, **tracing.tracer.headers()}
        if request.stream:
            answer = functools.partial(self._stream, usage=include_usage(request))
            return await self.streams.call(body, headers, True, answer)
        return await self.exchange.call(body, headers, False, self._json)

    async def _json(self, response: Reply) -> ChatResponse:
        expected = "expected a GenerateContentResponse"
        content = await self.exchange.json_answer(response, expected)
        try:
            translated = wire.answer(orjson.loads(content), self.model, int(time.time()))
        except ValueError as exc:  # not JSON, or JSON that is not a Gemini answer
            raise self.exchange.bad(response, content, f"{expected} ({exc})") from exc
        return ChatResponse(body=orjson.dumps(translated))

    async def _stream(self, response: Reply, usage: bool = False) -> ChatResponse:
        """Primed: an error before the first whole event, or as that event, is the call's."""
        first, chunks, cutter = await self.streams.first_events(response)
        relay = _Relay(self.streams, self.model, usage, response.status)
        head = relay.feed(first)  # an error event raises here
        return ChatResponse(stream=self.streams.relay(head, chunks, response, cutter, relay))


class _Relay(SseRelay):
    """Gemini's stream events as OpenAI chunks (`gemini_wire.StreamEvents` decides). Gemini
    has no end event: the stream is complete once a candidate gave its finish reason."""

    def __init__(self, exchange: Exchange, model: str, include_usage: bool, status: int) -> None:
        super().__init__(
            exchange,
            end_kind="a candidate's finishReason",
            include_usage=include_usage,
            status=status,
            id="",
            model=model,
        )
        self.events = wire.StreamEvents()

    def event(self, parsed: dict[str, Any]) -> bytes | None:
        delta, finish = self.events.delta(parsed)
        self.finished = self.events.finished
        if delta is None:
            return None
        if self.events.id and not self.id:
            self.id = self.events.id
            self.model = self.events.model or self.model
        return self.chunk(delta, finish)

    def last_usage(self) -> dict[str, Any] | None:
        return wire.usage_of(self.events.usage) if self.events.usage is not None else None
