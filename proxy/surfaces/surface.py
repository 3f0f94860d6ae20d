"""What an API surface is: the adapter between one client wire and overspill's core.

Every route a client calls (`/v1/chat/completions`, `/v1/responses`, `/v1/embeddings`,
`/v1/completions`) runs the same endpoint (proxy/endpoint.py: auth, limits, model checks,
disconnects, one log line). What differs per API is here, behind two small protocols:

    Surface   parses the client's bytes into a `Turn` and renders errors in its API's shape
    Turn      one parsed request: what the core runs (the layers for a conversation, the
              router for a route), and how the core's answer goes back in the client's wire

The layers never learn which API the client spoke: a conversation reaches them as a
`ChatRequest` whatever its wire. Adding an API is one more surface; no layer changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from starlette.responses import Response

from kernel.errors import InvalidChatRequest, OverspillError
from kernel.types import ChatRequest, ChatResponse, RequestContext

if TYPE_CHECKING:
    from proxy.system import System


class Turn(Protocol):
    """One client request on a surface, parsed and validated."""

    @property
    def model(self) -> str:
        """The model name the client asked for (checked against the caller's key, resolved)."""
        ...

    @property
    def stream(self) -> bool:
        """Whether the client asked for a stream of events."""
        ...

    async def run(self, system: System, ctx: RequestContext) -> ChatResponse:
        """The core's answer: the layers for a conversation, the router for a route."""
        ...

    async def answer(self, response: ChatResponse, ctx: RequestContext) -> ChatResponse:
        """The core's answer in the client's wire: a JSON body, or the primed event stream."""
        ...

    def stream_error(self, error: OverspillError) -> bytes:
        """An error after the stream's first byte, as this wire's last event(s)."""
        ...


class Conversational:
    """What a turn that carries a conversation (`chat`) shares: its model and stream are the
    request's, and the layers run it. The surfaces' turns build on it."""

    __slots__ = ()
    chat: ChatRequest

    @property
    def model(self) -> str:
        """The model the client asked for."""
        return self.chat.model

    @property
    def stream(self) -> bool:
        """Whether the client asked for a stream."""
        return self.chat.stream

    async def run(self, system: System, ctx: RequestContext) -> ChatResponse:
        """The layers, then the model's deployment."""
        return await system.pipeline.handle(self.chat, ctx)


class Surface(Protocol):
    """One API a client speaks."""

    name: str
    """The API's name in logs and traces (`chat`, `responses`, `embeddings`, ...)."""

    async def open(
        self, raw: bytes, headers: Mapping[str, str], ctx: RequestContext, system: System
    ) -> tuple[Turn, RequestContext]:
        """Parse and validate the body; the turn, and the context resolved from the request
        (conversation id, skip flag) that replaces `ctx` (keeping its request id, tenant and
        span). Raises an error of the tree naming what to fix."""
        ...

    def error(self, error: OverspillError, ctx: RequestContext) -> Response:
        """An error as a whole response in this API's shape."""
        ...


async def estimated_input_tokens(chat: ChatRequest, system: System, ctx: RequestContext) -> int:
    """A conversation's input tokens as overspill counts them before planning (messages and
    tools, corrected by the model's learned scale): what the count routes answer without a
    model (`/v1/messages/count_tokens`, `/v1/responses/input_tokens`)."""
    entry, services = ctx.model, system.services
    assert entry is not None
    if services is None:
        raise InvalidChatRequest("token counting is not available in this configuration")
    estimator = services.estimator
    counted = estimator.count(entry, chat.messages, chat.body.get("tools"))
    ctx.note("count", "estimated")
    return int(counted * await estimator.scale(entry))
