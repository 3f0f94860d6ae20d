"""`POST /v1/responses/input_tokens`: a Responses request's input tokens, on any model.

The request is read as `/v1/responses` reads it (its `previous_response_id` chain, its
`instructions`, `input` and function `tools`), and counted as overspill counts a conversation
before planning it: the model's tokenizer where litellm knows it, corrected by the scale
learned from the upstream's own counts (kernel/estimator.py). The answer is OpenAI's
`{"object": "response.input_tokens", "input_tokens": N}`; no model is called, so a count costs
nothing upstream. Anthropic's `count_tokens` is the Messages API's counterpart
(proxy/surfaces/messages.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson
from starlette.responses import Response

from kernel.errors import OverspillError
from kernel.types import ChatRequest, ChatResponse, RequestContext
from proxy.responses import error_response
from proxy.surfaces.responses import RESPONSES_WIRE, ResponsesSurface
from proxy.surfaces.responses_wire import sse_event
from proxy.surfaces.surface import Conversational, estimated_input_tokens

if TYPE_CHECKING:
    from proxy.system import System


@dataclass(frozen=True, slots=True)
class InputTokensTurn(Conversational):
    """One count: the conversation the request would send."""

    chat: ChatRequest

    @property
    def stream(self) -> bool:
        """A count is never streamed."""
        return False

    async def run(self, system: System, ctx: RequestContext) -> ChatResponse:
        """`{"object": "response.input_tokens", "input_tokens": N}`, overspill's estimate."""
        tokens = await estimated_input_tokens(self.chat, system, ctx)
        body = {"object": "response.input_tokens", "input_tokens": tokens}
        return ChatResponse(body=orjson.dumps(body), wire=RESPONSES_WIRE)

    async def answer(self, response: ChatResponse, ctx: RequestContext) -> ChatResponse:
        """Already in the client's wire."""
        return response

    def stream_error(self, error: OverspillError) -> bytes:
        """Never streamed; an error event all the same."""
        return sse_event({"type": "error", "message": error.message, "sequence_number": 0})


class InputTokensSurface:
    """OpenAI's `POST /v1/responses/input_tokens`."""

    name = "responses.input_tokens"

    def __init__(self) -> None:
        self.responses = ResponsesSurface()

    async def open(
        self, raw: bytes, headers: Mapping[str, str], ctx: RequestContext, system: System
    ) -> tuple[InputTokensTurn, RequestContext]:
        """Read the conversation as `/v1/responses` reads it (never streamed)."""
        turn, resolved = await self.responses.open(raw, headers, ctx, system)
        return InputTokensTurn(dataclasses.replace(turn.chat, stream=False)), resolved

    def error(self, error: OverspillError, ctx: RequestContext) -> Response:
        """OpenAI's error shape."""
        return error_response(error, ctx)
