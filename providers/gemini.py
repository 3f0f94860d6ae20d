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
from typing import Any

from kernel.config import ModelEntry
from kernel.types import ChatRequest
from providers import gemini_wire as wire
from providers.model_info import known_system_messages
from providers.own_translation import (
    OwnTranslation,
    StreamReader,
    deployment_key,
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


class GeminiProvider(OwnTranslation):
    """One Gemini deployment: translated here, sent and relayed by overspill. Gemini's
    stream has no end event: it is complete once a candidate gave its finish reason."""

    expected = "a GenerateContentResponse"

    @functools.cached_property
    def system_instruction(self) -> bool:
        """Whether the model takes a system instruction (litellm's map says so)."""
        return known_system_messages(self.entry.litellm_params.model)

    def urls(self) -> tuple[str, str]:
        params = self.entry.litellm_params
        base = (params.api_base or os.environ.get("GEMINI_API_BASE") or "").rstrip("/")
        return wire.url(self.model, base, stream=False), wire.url(self.model, base, stream=True)

    def wire_headers(self) -> dict[str, str]:
        key = api_key(self.entry)
        assert key is not None, "serves(entry) decides first"
        return {
            "x-goog-api-key": key,
            "content-type": "application/json",
            "accept-encoding": "identity",
        }

    def body(self, request: ChatRequest) -> dict[str, Any]:
        return wire.request_body(
            request.body,
            request.messages,
            self.model,
            system_instruction=self.system_instruction,
            drop_params=self.drop_params,
        )

    def answer(self, data: object, created: int) -> dict[str, Any]:
        return wire.answer(data, self.model, created)

    def reader(self) -> StreamReader:
        return wire.StreamEvents()
