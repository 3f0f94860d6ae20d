"""The roads a chat request can take to a provider whose API overspill translates itself.

Anthropic's and Gemini's deployments have up to three: the **native** road (a Messages
request sent as its client wrote it, for Anthropic), overspill's **own** translation, and
**litellm** (its translation over overspill's transport for Anthropic, `litellm.acompletion`
for Gemini). `choose` picks one per request before anything is sent, from what the request
uses and what the wire writes (its `leaves` check); `Roads` takes it. Every other provider
has one road, chosen per deployment by `proxy/system.py` (the byte passthrough, litellm's
translation over overspill's transport, or `litellm.acompletion`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import RouteNotServed
from kernel.types import (
    ChatRequest,
    ChatResponse,
    Provider,
    RequestContext,
    RouteRequest,
    forwarder,
)
from providers.model_info import route_refusal
from providers.transport import Upstream
from providers.wire import Wire, WireProvider, Written

log = logging.getLogger("overspill.providers")


@dataclass(frozen=True, slots=True)
class Road:
    """The road one request takes."""

    name: Literal["native", "own", "litellm"]
    why: str = ""
    """What of the request only litellm writes (the litellm road's reason)."""
    native: Written | None = None
    """The native road's request, as its client wrote it."""


OWN = Road("own")


def choose(request: ChatRequest, wire: Wire) -> Road:
    """A request's road: native when its client spoke the wire's API and it can go so, else
    overspill's translation unless the request uses what only litellm writes."""
    native = wire.native(request)
    if native is not None:
        return Road("native", native=native)
    why = wire.leaves(request)
    return OWN if why is None else Road("litellm", why)


def header_safe(text: str, limit: int = 200) -> str:
    """A reason as a header value: non-ASCII and control characters escaped, at most
    `limit` characters (a reason names the client's own keys and types)."""
    return text.encode("unicode_escape").decode("ascii")[:limit]


class Roads:
    """One deployment whose API overspill translates: each request takes the road `choose`
    picks; embeddings and legacy completions are litellm's calls, where the API has them."""

    def __init__(
        self,
        entry: ModelEntry,
        client: Upstream,
        litellm: Provider,
        *,
        drop_params: bool = False,
        request_timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.entry = entry
        self.name = entry.litellm_params.provider
        self.model = entry.litellm_params.upstream_model
        """The model's name upstream (a native request's `model` is written so)."""
        self.own = WireProvider(
            entry,
            client,
            self.wire_of(entry, drop_params),
            request_timeout=request_timeout,
            max_response_bytes=max_response_bytes,
        )
        self.litellm = litellm
        """Built (and litellm imported) on the first request that takes this road."""

    def wire_of(self, entry: ModelEntry, drop_params: bool) -> Wire:
        """The deployment's API, as overspill's translation writes it."""
        raise NotImplementedError

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """The request on its road (`choose`); the litellm road's reason noted."""
        road = choose(request, self.own.wire)
        if road.name == "litellm":
            log.debug("%s: litellm writes this request (%s)", self.name, road.why)
            ctx.note("litellm", header_safe(road.why))
            return await self.litellm.complete(request, ctx)
        if road.native is not None:
            return await self.own.deliver(road.native, request)
        return await self.own.complete(request, ctx)

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        """Embeddings and legacy completions go through litellm's calls, but a route the
        provider's API lacks (Anthropic has no embeddings) is a 400 at once."""
        refused = route_refusal(self.entry, request.route, request.model)
        if refused is not None:
            raise RouteNotServed(refused)
        return await forwarder(self.litellm, request).send(request, ctx)

    async def aclose(self) -> None:
        """The shared client is closed by its owner; the litellm road, if built, by itself."""
        await self.litellm.aclose()
