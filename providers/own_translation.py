"""A provider whose wire overspill translates itself (Anthropic's, Gemini's): no litellm.

What every such provider does the same way: the body written by its wire from the request's
own objects (a request the wire leaves to litellm goes to `fallback`, built and litellm
imported on the first such request), sent with the app's shared client through an
`Exchange`, the JSON answer read back as a `chat.completion`, the stream primed and relayed
event by event as OpenAI chunks. A subclass says how its wire writes and reads. Embeddings
and legacy completions are litellm's calls (the fallback's), where the provider's API has them.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import orjson

from kernel import tracing
from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import RouteNotServed, too_deep
from kernel.types import (
    ChatRequest,
    ChatResponse,
    Provider,
    RequestContext,
    RouteRequest,
    forwarder,
)
from providers.chunks import SseRelay, include_usage
from providers.exchange import Exchange
from providers.model_info import route_refusal
from providers.translation import LeftToLitellm
from providers.transport import Reply, Upstream

SETTINGS = frozenset({"extra_headers", "max_retries", "num_retries"})
"""Deployment settings these providers apply (no retries ever; extra headers sent as
given): a deployment with any other litellm setting stays on litellm's path."""


def deployment_key(entry: ModelEntry, variables: Sequence[str]) -> str | None:
    """The deployment's key, else the first of `variables` set (as litellm reads them);
    None when there is none, or only blanks."""
    params = entry.litellm_params
    key = params.api_key.get_secret_value() if params.api_key is not None else None
    key = key or next((os.environ[name] for name in variables if os.environ.get(name)), "")
    return key.strip() or None


def translates(entry: ModelEntry, provider: str, key: Callable[[ModelEntry], str | None]) -> bool:
    """Whether an own translation serves a deployment: its provider, no litellm setting
    beyond `SETTINGS`, and a key it sends (`key` of the deployment)."""
    return (
        entry.litellm_params.provider == provider
        and set(entry.litellm_params.extras()) <= SETTINGS
        and key(entry) is not None
    )


class StreamReader(Protocol):
    """A wire's reading of one stream: each event's delta, what it learnt on the way."""

    id: str | None
    model: str | None
    finished: bool
    """The stream said it is complete (False where the relay's end event says it)."""

    def delta(self, event: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """(the delta to send or None, the finish reason or None) for one event."""

    def openai_usage(self) -> dict[str, Any] | None:
        """The stream's usage in OpenAI's terms, once known."""


class OwnTranslation:
    """One deployment: translated here, sent and relayed by overspill."""

    expected = "the API's answer"
    """What a JSON answer should be (said in a 502 when it is not)."""
    end_kind = ""
    """The `type` of the event a complete stream ends with ("": the reader says)."""

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
        self.entry = entry
        self.name = params.provider
        self.model = params.upstream_model
        self.fallback = fallback
        self.drop_params = drop_params
        url, stream_url = self.urls()
        self.exchange = Exchange.of(entry, url, client, request_timeout, max_response_bytes)
        self.streams = self.exchange
        if stream_url != url:
            self.streams = Exchange.of(
                entry, stream_url, client, request_timeout, max_response_bytes
            )
        self.headers = self.wire_headers()
        extra = params.extras().get("extra_headers")
        if isinstance(extra, dict):
            self.headers.update({str(k).lower(): str(v) for k, v in extra.items()})

    def urls(self) -> tuple[str, str]:
        """(the URL of a call, of a streamed call)."""
        raise NotImplementedError

    def wire_headers(self) -> dict[str, str]:
        """The wire's headers (its key among them); the deployment's extra headers follow."""
        raise NotImplementedError

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The wire's body (raises `LeftToLitellm` for the fallback's requests)."""
        raise NotImplementedError

    def answer(self, data: object, created: int) -> dict[str, Any]:
        """The `chat.completion` for a parsed JSON answer (ValueError: not one)."""
        raise NotImplementedError

    def reader(self) -> StreamReader:
        """A fresh reader for one stream."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """The shared client is closed by its owner; the fallback, if built, by itself."""
        await self.fallback.aclose()

    def translate(self, request: ChatRequest) -> bytes:
        """The body's bytes (raises `LeftToLitellm` for the fallback's requests)."""
        body = self.body(request)
        try:
            return orjson.dumps(body)
        except orjson.JSONEncodeError as exc:  # parsed (up to 1024 levels), cannot be written
            raise too_deep("the request body") from exc

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Translate and send; a request only litellm can write goes to the fallback."""
        try:
            body = self.translate(request)
        except LeftToLitellm:
            return await self.fallback.complete(request, ctx)
        headers = self.headers
        if tracing.tracer is not None:  # the upstream-call span's traceparent goes along
            headers = {**headers, **tracing.tracer.headers()}
        if request.stream:
            answer = functools.partial(self._stream, include_usage(request))
            return await self.streams.call(body, headers, True, answer)
        return await self.exchange.call(body, headers, False, self._json)

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        """Embeddings and legacy completions go through litellm's calls (the fallback), but
        a route the provider's API lacks (Anthropic has no embeddings) is a 400 at once."""
        refused = route_refusal(self.entry, request.route, request.model)
        if refused is not None:
            raise RouteNotServed(refused)
        return await forwarder(self.fallback, request).send(request, ctx)

    async def _json(self, response: Reply) -> ChatResponse:
        expected = f"expected {self.expected}"
        content = await self.exchange.json_answer(response, expected)
        try:
            translated = self.answer(orjson.loads(content), int(time.time()))
        except ValueError as exc:  # not JSON, or JSON that is not the wire's answer
            raise self.exchange.bad(response, content, f"not {self.expected} ({exc})") from exc
        return ChatResponse(body=orjson.dumps(translated))

    async def _stream(self, usage: bool, response: Reply) -> ChatResponse:
        """Primed: an error before the first whole event, or as that event, is the call's."""
        first, chunks, cutter = await self.streams.first_events(response)
        relay = WireRelay(self.streams, self, usage, response.status)
        head = relay.feed(first)  # an error event raises here
        return ChatResponse(stream=self.streams.relay(head, chunks, response, cutter, relay))


class WireRelay(SseRelay):
    """A wire's stream events as OpenAI chunks (its `StreamReader` decides)."""

    def __init__(
        self, exchange: Exchange, provider: OwnTranslation, include_usage: bool, status: int
    ) -> None:
        super().__init__(
            exchange,
            end_kind=provider.end_kind or "the finish reason",
            include_usage=include_usage,
            status=status,
            id="",
            model=provider.model,
        )
        self.reader = provider.reader()

    def event(self, parsed: dict[str, Any]) -> bytes | None:
        delta, finish = self.reader.delta(parsed)
        self.finished = self.finished or self.reader.finished
        if delta is None:
            return None
        if self.reader.id and not self.id:
            self.id = self.reader.id
            self.model = self.reader.model or self.model
        return self.chunk(delta, finish)

    def last_usage(self) -> dict[str, Any] | None:
        return self.reader.openai_usage()
