"""Anthropic models (`anthropic/...`) served without litellm: overspill's own translation.

Importing litellm costs about 150 MB and seconds of a worker's life; a worker that serves
Anthropic models with chat clients' usual requests never pays it. `AnthropicWire` writes the
body with `providers.anthropic_wire` from the request's own objects (no copy of the client's
bytes) and reads the answer (JSON, or the SSE stream event by event) back in OpenAI's shape;
`providers.wire.WireProvider` sends it with the app's shared client through the same
`Exchange` as the byte passthrough. A request that uses what only litellm's Anthropic
translation writes (`response_format`, extended thinking, documents, Anthropic's server
tools) takes the litellm road (`providers.roads.choose`): litellm's translation over the same
transport, built (and litellm imported) on the first such request.

A request that came in Anthropic's own wire (`/v1/messages`) goes as the client wrote it (the
native road: its bytes while no layer changed it, with its `anthropic-version` and
`anthropic-beta` headers), and the answer's bytes come back, unless the deployment says
`messages_api: translate`.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping

import orjson

from kernel.config import ModelEntry
from kernel.types import MESSAGES_WIRE, ChatRequest
from providers import anthropic_wire as wire
from providers.exchange import Exchange
from providers.model_info import known_max_output
from providers.openai_compat import count_native
from providers.roads import Roads
from providers.transport import Reply
from providers.wire import (
    StreamReader,
    Written,
    deployment_key,
    dumps,
    extra_headers,
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


class AnthropicWire:
    """Anthropic's Messages API, written and read here, for one deployment."""

    expected = "a Messages answer"
    end_kind = "message_stop"

    def __init__(self, entry: ModelEntry, drop_params: bool = False) -> None:
        self.entry = entry
        self.model = entry.litellm_params.upstream_model
        self.drop_params = drop_params
        self.url = messages_url(entry)
        key = api_key(entry)
        assert key is not None, "serves(entry) decides first"
        self.headers = {
            "x-api-key": key,
            "anthropic-version": wire.VERSION,
            "content-type": "application/json",
            "accept": "application/json",
            "accept-encoding": "identity",
            **extra_headers(entry),
        }

    @functools.cached_property
    def max_tokens(self) -> int:
        """`max_tokens` when the request has none: the model's output cap in litellm's map."""
        return known_max_output(self.entry.litellm_params.model) or wire.DEFAULT_MAX_TOKENS

    def urls(self) -> tuple[str, str]:
        return self.url, self.url

    def leaves(self, request: ChatRequest) -> str | None:
        return wire.leaves(request.body, request.messages, drop_params=self.drop_params)

    def native(self, request: ChatRequest) -> Written | None:
        """A Messages request as its client wrote it, unless the deployment says
        `messages_api: translate` or the layers changed what a Messages body cannot say."""
        native = request.native
        if native is None or native.wire != MESSAGES_WIRE or self.entry.messages_api == "translate":
            return None
        body = native.body_for(request, self.model)
        if body is None:
            return None
        return Written(body, {**self.headers, **native.headers}, native=MESSAGES_WIRE)

    def write(self, request: ChatRequest) -> Written:
        body = wire.request_body(
            request.body,
            request.messages,
            self.model,
            max_tokens=self.max_tokens,
            drop_params=self.drop_params,
        )
        return Written(dumps(body), self.headers)

    def answer(self, content: bytes, written: Written, reply: Reply) -> bytes:
        return orjson.dumps(wire.answer(orjson.loads(content), int(time.time())))

    def reader(self, written: Written) -> StreamReader:
        return wire.StreamEvents()


class AnthropicProvider(Roads):
    """One Anthropic deployment: its roads, and the Messages API's own token count."""

    def wire_of(self, entry: ModelEntry, drop_params: bool) -> AnthropicWire:
        self.messages = AnthropicWire(entry, drop_params)
        return self.messages

    @functools.cached_property
    def counting(self) -> Exchange:
        """The Messages API's token counting (`.../v1/messages/count_tokens`)."""
        exchange = self.own.exchange
        return Exchange(
            exchange.name,
            exchange.url + "/count_tokens",
            exchange.client,
            timeout=exchange.timeout,
            stream_timeout=exchange.stream_timeout,
            phases=exchange.phases,
            max_bytes=exchange.max_bytes,
        )

    async def count_tokens(self, body: bytes, headers: Mapping[str, str]) -> bytes | None:
        """Anthropic's own count of a Messages request (its JSON answer's bytes)."""
        return await count_native(self.counting, body, {**self.messages.headers, **headers})
