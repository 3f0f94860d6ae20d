"""Gemini models of Google AI Studio (`gemini/...`, an API key) served without litellm.

Importing litellm costs about 150 MB and seconds of a worker's life; a worker that serves
Gemini models with chat clients' usual requests never pays it. `GeminiWire` writes the
body with `providers.gemini_wire` from the request's own objects and reads the answer (JSON,
or the SSE stream event by event) back in OpenAI's shape; `providers.wire.WireProvider` sends
it with the app's shared client through the same `Exchange` as the byte passthrough (the key
in `x-goog-api-key`, as litellm sends it, never in the URL). A request that uses what only
litellm's Gemini translation writes (`response_format`, reasoning, web search, image URLs,
files, ...) takes the litellm road (`providers.roads.choose`): `litellm.acompletion`, built
(and litellm imported) on the first such request.
"""

from __future__ import annotations

import functools
import os
import time

import orjson

from kernel.config import ModelEntry
from kernel.types import ChatRequest
from providers import gemini_wire as wire
from providers.model_info import known_system_messages
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

KEY_VARIABLES = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "PALM_API_KEY")
"""Where litellm looks for a Gemini key when the deployment has none, in its order."""


def api_key(entry: ModelEntry) -> str | None:
    """The deployment's key, else the first of `KEY_VARIABLES` set (as litellm reads it)."""
    return deployment_key(entry, KEY_VARIABLES)


def serves(entry: ModelEntry) -> bool:
    """Whether this path serves a deployment: Gemini, an API key, no other litellm setting."""
    return translates(entry, "gemini", api_key)


class GeminiWire:
    """Gemini's API, written and read here, for one deployment. Its stream has no end event:
    it is complete once a candidate gave its finish reason."""

    expected = "a GenerateContentResponse"
    end_kind = ""

    def __init__(self, entry: ModelEntry, drop_params: bool = False) -> None:
        self.entry = entry
        self.model = entry.litellm_params.upstream_model
        self.drop_params = drop_params
        key = api_key(entry)
        assert key is not None, "serves(entry) decides first"
        self.headers = {
            "x-goog-api-key": key,
            "content-type": "application/json",
            "accept-encoding": "identity",
            **extra_headers(entry),
        }

    @functools.cached_property
    def system_instruction(self) -> bool:
        """Whether the model takes a system instruction (litellm's map says so)."""
        return known_system_messages(self.entry.litellm_params.model)

    def urls(self) -> tuple[str, str]:
        params = self.entry.litellm_params
        base = (params.api_base or os.environ.get("GEMINI_API_BASE") or "").rstrip("/")
        return wire.url(self.model, base, stream=False), wire.url(self.model, base, stream=True)

    def leaves(self, request: ChatRequest) -> str | None:
        return wire.leaves(
            request.body,
            request.messages,
            system_instruction=self.system_instruction,
            drop_params=self.drop_params,
        )

    def native(self, request: ChatRequest) -> Written | None:
        """No client speaks Gemini's API to overspill."""
        return None

    def write(self, request: ChatRequest) -> Written:
        body = wire.request_body(
            request.body,
            request.messages,
            self.model,
            system_instruction=self.system_instruction,
            drop_params=self.drop_params,
        )
        return Written(dumps(body), self.headers)

    def answer(self, content: bytes, written: Written, reply: Reply) -> bytes:
        return orjson.dumps(wire.answer(orjson.loads(content), self.model, int(time.time())))

    def reader(self, written: Written) -> StreamReader:
        return wire.StreamEvents()


class GeminiProvider(Roads):
    """One Gemini deployment: overspill's translation, litellm's for what only it writes."""

    def wire_of(self, entry: ModelEntry, drop_params: bool) -> GeminiWire:
        return GeminiWire(entry, drop_params)
