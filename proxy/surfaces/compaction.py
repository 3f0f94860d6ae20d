"""`POST /v1/responses/compact`: a conversation's compacted window, on any model.

The conversation (`previous_response_id`'s chain and `input`, as `/v1/responses` reads them) is
planned as the layers plan a growth: the older part is stood in for by the conversation's
extraction (the cached one when it is still valid, so the answer comes at once; else made now
through the model ladder) and the newest turns are kept intact, landing near the model's
`context.compact_to`. The answer is OpenAI's `response.compaction` object: the conversation's
system items, one `compaction` item holding the extraction (overspill reads its own back when
the client sends it in `input`), then the kept items.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import Response

from kernel.errors import InvalidChatRequest, OverspillError
from kernel.types import ChatRequest, ChatResponse, Message, RequestContext
from middleware.condensing.condenser import Condenser, StandIn
from middleware.condensing.prompt import render_transcript
from middleware.condensing.strategies import mask_messages
from middleware.layers.hysteresis import tail_share
from proxy.responses import error_response
from proxy.surfaces.responses import RESPONSES_WIRE, ResponsesSurface, compaction_item
from proxy.surfaces.responses_wire import new_id, sse_event, to_items
from proxy.surfaces.surface import Conversational

if TYPE_CHECKING:
    from proxy.system import System


@dataclass(frozen=True, slots=True)
class CompactTurn(Conversational):
    """One compaction request: the conversation to compact."""

    chat: ChatRequest
    instructed: bool
    """Whether the first message is the request's `instructions` (not part of the window:
    the client sends its instructions again)."""

    @property
    def stream(self) -> bool:
        """A compaction is never streamed."""
        return False

    async def run(self, system: System, ctx: RequestContext) -> ChatResponse:
        """The compacted window as a `response.compaction` object."""
        assert system.services is not None
        assert ctx.model is not None
        output, usage = await compacted(
            Condenser(system.services), self.chat, ctx, instructed=self.instructed
        )
        made = {
            "id": new_id("cmp"),
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": output,
            "usage": usage,
        }
        return ChatResponse(body=orjson.dumps(made), wire=RESPONSES_WIRE)

    async def answer(self, response: ChatResponse, ctx: RequestContext) -> ChatResponse:
        """Already in the client's wire."""
        return response

    def stream_error(self, error: OverspillError) -> bytes:
        """Never streamed; an error event all the same."""
        return sse_event({"type": "error", "message": error.message, "sequence_number": 0})


@dataclass(frozen=True, slots=True)
class Compacted:
    """A conversation's compacted window: its system messages, the stand-in for its older part
    (None when nothing needed condensing), the newest messages intact, and the estimated
    tokens before and after."""

    system: tuple[Message, ...]
    stand_in: StandIn | None
    tail: tuple[Message, ...]
    replaced: int
    """Messages the stand-in covers."""
    before: int
    after: int


async def compact(
    condenser: Condenser, request: ChatRequest, ctx: RequestContext, *, first: int = 0
) -> Compacted:
    """The conversation compacted as a growth would be (the cached extraction when it is still
    valid, so at once; else made now through the model ladder), landing near the model's
    `context.compact_to`. Messages before `first` are not part of the window."""
    entry = ctx.model
    assert entry is not None
    window = await condenser.window(entry)
    if window is None:
        raise InvalidChatRequest(
            f"the context window of model {entry.model_name!r} is unknown, so overspill cannot "
            "tell what to keep: set context.window for it in config.yaml",
            param="model",
        )
    scale = await condenser.estimator.scale(entry)
    counts = condenser.counts(ctx, request, entry)
    plan = condenser.plan(request, entry, window=window, scale=scale, counts=counts)
    compact = condenser.plan(
        request, entry, window=window, scale=scale, counts=counts,
        intact_share=tail_share(entry, plan, None),
    )  # fmt: skip
    messages = request.messages
    before = int(sum(counts) * scale)
    if not compact.split.historical:
        return Compacted((), None, messages[first:], 0, before, before)
    made = await condenser.stand_in(request, ctx, entry, compact)
    system = tuple(messages[i] for i in compact.split.system if i >= first)
    tail = tuple(messages[i] for i in (*compact.split.pinned, *compact.split.tail))
    after = compact.tokens((*compact.split.system, *compact.split.pinned, *compact.split.tail))
    after += condenser.estimator.counter(entry).count_message(made.message)
    return Compacted(system, made, tail, len(compact.split.historical), before, after)


async def compacted(
    condenser: Condenser, request: ChatRequest, ctx: RequestContext, *, instructed: bool
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The conversation's compacted items (without the instructions' message), and the tokens
    it took (before, after)."""
    done = await compact(condenser, request, ctx, first=1 if instructed else 0)
    if done.stand_in is None:
        return to_items(done.tail), _usage(done.before, done.before)
    content = done.stand_in.message.get("content")
    output = [
        *to_items(done.system),
        compaction_item(content if isinstance(content, str) else ""),
        *to_items(done.tail),
    ]
    return output, _usage(done.before, done.after)


def summary_text(done: Compacted, total: int, *, tagged: bool = True) -> str:
    """A summary of a whole conversation of `total` messages from its compaction, written
    without a model call: the stand-in's notes on the older messages, then the newest ones as
    they were (long tool results masked), after a line saying what it covers. `tagged`: in the
    `<analysis>` / `<summary>` form a coding agent's compaction prompt asks for."""
    assert done.stand_in is not None
    first = total - len(done.tail) + 1
    covers = (
        f"overspill wrote this summary itself, without a model call: the conversation's "
        f"{done.replaced} earliest messages are condensed in its notes (its extraction, kept "
        f"as the conversation grew), and messages {first}-{total} are quoted after them as "
        "they were, long tool results replaced by placeholders naming what was there."
    )
    notes = done.stand_in.message.get("content")
    recent = render_transcript(mask_messages(done.tail, replies=False))
    body = f"{notes}\n\nThe conversation's newest messages, as they were:\n{recent}"
    if not tagged:
        return f"{covers}\n\n{body}"
    return f"<analysis>\n{covers}\n</analysis>\n\n<summary>\n{body}\n</summary>"


def _usage(before: int, after: int) -> dict[str, Any]:
    """The compaction's token accounting in the Responses API's usage shape."""
    return {
        "input_tokens": before,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": after,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": before + after,
    }


class CompactSurface:
    """OpenAI's `POST /v1/responses/compact`."""

    name = "responses.compact"

    def __init__(self) -> None:
        self.responses = ResponsesSurface()

    async def open(
        self, raw: bytes, headers: Mapping[str, str], ctx: RequestContext, system: System
    ) -> tuple[CompactTurn, RequestContext]:
        """Read the conversation as `/v1/responses` reads it (never streamed)."""
        turn, resolved = await self.responses.open(raw, headers, ctx, system)
        if system.services is None:
            raise InvalidChatRequest("compaction is not available in this configuration")
        instructed = isinstance(turn.body.get("instructions"), str)
        return CompactTurn(dataclasses.replace(turn.chat, stream=False), instructed), resolved

    def error(self, error: OverspillError, ctx: RequestContext) -> Response:
        """OpenAI's error shape."""
        return error_response(error, ctx)
