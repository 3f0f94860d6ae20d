"""A provider built on its first request, its module imported off the event loop.

litellm's import takes seconds and over 100 MB: a process that serves a litellm-path model
(`anthropic/...`) but is not asked for it never pays that, and starts as fast and small as
one with OpenAI-wire models only. The first request to such a model waits for the import
(in a thread, so other requests go on meanwhile); every later one costs an attribute read.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
from collections.abc import Callable

from kernel.types import (
    ChatRequest,
    ChatResponse,
    Provider,
    RequestContext,
    RouteRequest,
    forwarder,
)

FREEZE_AFTER_IMPORT = False
"""Set by the serving process (proxy/server.py), which freezes its startup objects: a deferred
module's objects (litellm: ~200k) are never garbage either, and rescanning them in every full
collection cost ~14% of a 200-message Anthropic request's CPU at 16 concurrent requests.
What requests in flight hold at that moment is frozen with it, once per process."""


def _import(module: str) -> None:
    importlib.import_module(module)
    if FREEZE_AFTER_IMPORT:
        gc.freeze()


class DeferredProvider:
    """Stands for the provider `build` makes once `module` is imported."""

    def __init__(self, name: str, module: str, build: Callable[[], Provider]) -> None:
        self.name = name
        self.module = module
        self._build = build
        self._provider: Provider | None = None
        self._lock = asyncio.Lock()

    @property
    def built(self) -> bool:
        """Whether the first request has built the provider."""
        return self._provider is not None

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Build the provider if this is the first request, then send the request through it."""
        provider = self._provider
        if provider is None:
            provider = await self._built()
        return await provider.complete(request, ctx)

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        """Build the provider if this is the first request, then forward the request."""
        provider = self._provider
        if provider is None:
            provider = await self._built()
        return await forwarder(provider, request).send(request, ctx)

    async def _built(self) -> Provider:
        async with self._lock:  # concurrent first requests import and build once
            if self._provider is None:
                await asyncio.to_thread(_import, self.module)
                self._provider = self._build()
            return self._provider

    async def aclose(self) -> None:
        """Close the built provider, if any."""
        if self._provider is not None:
            await self._provider.aclose()
