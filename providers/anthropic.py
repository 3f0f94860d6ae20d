"""Anthropic models (`anthropic/...`) served without litellm: overspill's own translation.

Importing litellm costs about 150 MB and seconds of a worker's life; a worker that serves
Anthropic models with chat clients' usual requests never pays it. The body is written by
`providers.anthropic_wire` from the request's own objects (no copy of the client's bytes),
sent with the app's shared client through the same `Exchange` as the byte passthrough, and the
answer (JSON, or the SSE stream event by event) comes back in OpenAI's shape. A request that
uses what only litellm's Anthropic translation writes (`response_format`, extended thinking,
documents, Anthropic's server tools) goes to `fallback`: litellm's translation over the same
transport, built (and litellm imported) on the first such request.
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
from providers import anthropic_wire as wire
from providers.chunks import SseRelay, include_usage
from providers.exchange import Exchange
from providers.model_info import known_max_output
from providers.transport import Reply, Upstream

PATH = "/v1/messages"
DEFAULT_API_BASE = "https://api.anthropic.com"
SETTINGS = frozenset({"extra_headers", "max_retries", "num_retries"})
"""Deployment settings this path applies (no retries ever; extra headers sent as given)."""


def messages_url(entry: ModelEntry) -> str:
    """Where the deployment's Messages API is, as litellm finds it: `api_base`, else
    `ANTHROPIC_API_BASE`, else `ANTHROPIC_BASE_URL` (a company gateway, say), else Anthropic;
    `/v1/messages` appended unless it ends so or `LITELLM_ANTHROPIC_DISABLE_URL_SUFFIX` is set."""
    base = (
        entry.litellm_params.api_base
        or os.environ.get("ANTHROPIC_API_BASE")
        or os.environ.get("ANTHROPIC_BASE_URL")
        or DEFAULT_API_BASE
    ).rstrip("/")
    suffixless = os.environ.get("LITELLM_ANTHROPIC_DISABLE_URL_SUFFIX", "").lower() == "true"
    return base if suffixless or base.endswith(PATH) else base + PATH


def api_key(entry: ModelEntry) -> str | None:
    """The deployment's key, else `ANTHROPIC_API_KEY` (as litellm reads it), when it is one
    sent as `x-api-key` (an OAuth token, `sk-ant-oat...`, is litellm's to send)."""
    params = entry.litellm_params
    key = params.api_key.get_secret_value() if params.api_key is not None else None
    key = (key or os.environ.get("ANTHROPIC_API_KEY") or "").strip()
    return key if key and not key.startswith("sk-ant-oat") else None


def serves(entry: ModelEntry) -> bool:
    """Whether this path serves a deployment: Anthropic, an API key, no other litellm setting."""
    params = entry.litellm_params
    return (
        params.provider == "anthropic"
        and set(params.extras()) <= SETTINGS
        and api_key(entry) is not None
    )


class AnthropicProvider:
    """One Anthropic deployment: translated here, sent and relayed by overspill."""

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
        self.max_tokens = known_max_output(params.model) or wire.DEFAULT_MAX_TOKENS
        url = messages_url(entry)
        self.exchange = Exchange.of(entry, url, client, request_timeout, max_response_bytes)
        key = api_key(entry)
        assert key is not None, "serves(entry) decides first"
        self.headers = {
            "x-api-key": key,
            "anthropic-version": wire.VERSION,
            "content-type": "application/json",
            "accept": "application/json",
            "accept-encoding": "identity",
        }
        extra = params.extras().get("extra_headers")
        if isinstance(extra, dict):
            self.headers.update({str(k).lower(): str(v) for k, v in extra.items()})

    async def aclose(self) -> None:
        """The shared client is closed by its owner; the fallback, if built, by itself."""
        await self.fallback.aclose()

    def translate(self, request: ChatRequest) -> bytes:
        """The Messages body's bytes (raises `LeftToLitellm` for the fallback's requests)."""
        body = wire.request_body(
            request.body,
            request.messages,
            self.model,
            max_tokens=self.max_tokens,
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
        answer = self._json
        if request.stream:
            answer = functools.partial(self._stream, usage=include_usage(request))
        return await self.exchange.call(body, headers, request.stream, answer)

    async def _json(self, response: Reply) -> ChatResponse:
        content = await self.exchange.json_answer(response, "expected a Messages answer")
        try:
            translated = wire.answer(orjson.loads(content), int(time.time()))
        except ValueError as exc:  # not JSON, or JSON that is not a Messages answer
            raise self.exchange.bad(response, content, f"not a Messages answer ({exc})") from exc
        return ChatResponse(body=orjson.dumps(translated))

    async def _stream(self, response: Reply, usage: bool = False) -> ChatResponse:
        """Primed: an error before the first whole event, or as that event, is the call's."""
        first, chunks, cutter = await self.exchange.first_events(response)
        relay = _Relay(self.exchange, self.model, usage, response.status)
        head = relay.feed(first)  # an error event raises here
        return ChatResponse(stream=self.exchange.relay(head, chunks, response, cutter, relay))


class _Relay(SseRelay):
    """Messages stream events as OpenAI chunks (`anthropic_wire.StreamEvents` decides)."""

    def __init__(self, exchange: Exchange, model: str, include_usage: bool, status: int) -> None:
        super().__init__(
            exchange,
            end_kind="message_stop",
            include_usage=include_usage,
            status=status,
            id="",
            model=model,
        )
        self.events = wire.StreamEvents()

    def event(self, parsed: dict[str, Any]) -> bytes | None:
        delta, finish = self.events.delta(parsed)
        if delta is None:
            return None
        if self.events.id and not self.id:
            self.id = self.events.id
            self.model = self.events.model or self.model
        return self.chunk(delta, finish)

    def last_usage(self) -> dict[str, Any] | None:
        return wire.usage_of(self.events.usage) if self.events.usage else None
