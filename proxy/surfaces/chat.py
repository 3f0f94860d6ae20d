"""`/v1/chat/completions`: the core's own wire, so parsing is validation and rendering is none."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.responses import Response

from kernel.errors import InvalidChatRequest, OverspillError
from kernel.types import ChatRequest, ChatResponse, RequestContext
from proxy.http import edge_context, parse_chat_request
from proxy.responses import error_response, sse_error_event
from proxy.surfaces.surface import Conversational

if TYPE_CHECKING:
    from proxy.system import System


@dataclass(frozen=True, slots=True)
class ChatTurn(Conversational):
    """A chat completion request: the layers run it as it is."""

    chat: ChatRequest

    async def answer(self, response: ChatResponse, ctx: RequestContext) -> ChatResponse:
        """Already in the client's wire."""
        return response

    def stream_error(self, error: OverspillError) -> bytes:
        """OpenAI's error body as one SSE event."""
        return sse_error_event(error)


class ChatSurface:
    """OpenAI's Chat Completions API."""

    name = "chat"

    async def open(
        self, raw: bytes, headers: Mapping[str, str], ctx: RequestContext, system: System
    ) -> tuple[ChatTurn, RequestContext]:
        """Validate the body; the conversation id and skip flag come off it here."""
        chat = parse_chat_request(raw)
        if "documents" in chat.extensions and "documents" not in system.pipeline.names:
            raise InvalidChatRequest(
                "'documents' needs the documents layer: add it to middleware: in config.yaml",
                param="documents",
            )
        chat, resolved = edge_context(chat, headers, request_id=ctx.request_id, tenant=ctx.tenant)
        resolved.span = ctx.span
        return ChatTurn(chat), resolved

    def error(self, error: OverspillError, ctx: RequestContext) -> Response:
        """OpenAI's error shape."""
        return error_response(error, ctx)
