"""Anthropic models (`anthropic/...`) served without litellm: overspill's own translation.

Importing litellm costs about 150 MB and seconds of a worker's life; a worker that serves
Anthropic models with chat clients' usual requests never pays it. The body is written by
`providers.anthropic_wire` from the request's own objects (no copy of the client's bytes),
sent with the app's shared client through the same `Exchange` as the byte passthrough, and the
answer (JSON, or the SSE stream event by event) comes back in OpenAI's shape. A request that
uses what only litellm's Anthropic translation writes (`response_format`, extended thinking,
documents, Anthropic's server tools) goes to `fallback`: litellm's translation over the same
transport, built (and litellm imported) on the first such request.

A request that came in Anthropic's own wire (`/v1/messages`) goes as the client wrote it (the
native road: its bytes while no layer changed it, with its `anthropic-version` and
`anthropic-beta` headers), and the answer's bytes come back, unless the deployment says
`messages_api: translate`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from kernel import tracing
from kernel.config import ModelEntry
from kernel.types import MESSAGES_WIRE, ChatRequest, ChatResponse, RequestContext
from providers import anthropic_wire as wire
from providers.exchange import Exchange
from providers.model_info import known_max_output
from providers.openai_compat import count_native, forward_native
from providers.own_translation import (
    OwnTranslation,
    StreamReader,
    deployment_key,
    translates,
)

PATH = "/v1/messages"
DEFAULT_API_BASE = "https://api.anthropic.com"


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
    key = deployment_key(entry, ("ANTHROPIC_API_KEY",))
    return key if key and not key.startswith("sk-ant-oat") else None


def serves(entry: ModelEntry) -> bool:
    """Whether this path serves a deployment: Anthropic, an API key, no other litellm setting."""
    return translates(entry, "anthropic", api_key)


class AnthropicProvider(OwnTranslation):
    """One Anthropic deployment: translated here, sent and relayed by overspill."""

    expected = "a Messages answer"
    end_kind = "message_stop"

    @functools.cached_property
    def max_tokens(self) -> int:
        """`max_tokens` when the request has none: the model's output cap in litellm's map."""
        return known_max_output(self.entry.litellm_params.model) or wire.DEFAULT_MAX_TOKENS

    def urls(self) -> tuple[str, str]:
        url = messages_url(self.entry)
        return url, url

    @functools.cached_property
    def counting(self) -> Exchange:
        """The Messages API's token counting (`.../v1/messages/count_tokens`)."""
        return Exchange(
            self.exchange.name,
            self.exchange.url + "/count_tokens",
            self.exchange.client,
            timeout=self.exchange.timeout,
            stream_timeout=self.exchange.stream_timeout,
            phases=self.exchange.phases,
            max_bytes=self.exchange.max_bytes,
        )

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """A Messages request as its client wrote it (the native road), else translated."""
        native = request.native
        if (
            native is not None
            and native.wire == MESSAGES_WIRE
            and self.entry.messages_api != "translate"
        ):
            body = native.body_for(request, self.model)
            if body is not None:
                headers = {**self.headers, **native.headers}
                if tracing.tracer is not None:
                    headers.update(tracing.tracer.headers())
                return await forward_native(
                    self.exchange, body, headers, request.stream, MESSAGES_WIRE
                )
        return await super().complete(request, ctx)

    async def count_tokens(self, body: bytes, headers: Mapping[str, str]) -> bytes | None:
        """Anthropic's own count of a Messages request (its JSON answer's bytes)."""
        return await count_native(self.counting, body, {**self.headers, **headers})

    def wire_headers(self) -> dict[str, str]:
        key = api_key(self.entry)
        assert key is not None, "serves(entry) decides first"
        return {
            "x-api-key": key,
            "anthropic-version": wire.VERSION,
            "content-type": "application/json",
            "accept": "application/json",
            "accept-encoding": "identity",
        }

    def body(self, request: ChatRequest) -> dict[str, Any]:
        return wire.request_body(
            request.body,
            request.messages,
            self.model,
            max_tokens=self.max_tokens,
            drop_params=self.drop_params,
        )

    def answer(self, data: object, created: int) -> dict[str, Any]:
        return wire.answer(data, created)

    def reader(self) -> StreamReader:
        return wire.StreamEvents()
