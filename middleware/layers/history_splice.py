"""The `history_splice` layer: a cached extraction stands in before the request goes.

After a conversation has overflowed once, every later turn would overflow again and pay a failed
upstream call before recovering. When the conversation has a cache entry that is valid for the
request's exact prefix (same model, same extraction prompt, the summarised messages unchanged),
the request is sent as system messages + the extraction + the messages after it, intact. When
even the spliced request passes a share of the prompt budget (85% by default), the extraction
grows first (incremental: previous extraction + the turns since), instead of waiting for the
wall. The upstream's reported prompt size calibrates later estimates for the model.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from kernel import metrics
from kernel.config import ModelEntry
from kernel.services import Services
from kernel.store import HistoryEntry
from kernel.types import ChatRequest, ChatResponse, Message, Next, RequestContext
from middleware.condensing.condenser import Condenser, StandIn, report
from middleware.condensing.split import SYSTEM_ROLES, Split, assemble, context_message

log = logging.getLogger("overspill.history_splice")


class HistorySplice:
    """Replaces the summarised prefix of a long conversation with its cached extraction."""

    name: ClassVar[str] = "history_splice"

    def __init__(self, services: Services) -> None:
        self.condenser = Condenser(services)
        self.estimator = services.estimator

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Splice when a valid extraction is cached; otherwise pass the request on untouched."""
        entry = ctx.model
        if entry is None or ctx.skip_history:
            return await call_next(request, ctx)
        if len(request.messages) < entry.context.splice_min_messages:
            return await call_next(request, ctx)
        cached = await self.condenser.cached(ctx, request)
        if cached is None or not self._applies(cached, request, ctx):
            return await call_next(request, ctx)
        spliced, counted = await self._splice(request, ctx, entry, cached)
        response = await call_next(spliced, ctx)
        await self.estimator.observe(entry, counted, response.prompt_tokens())
        return response

    def _applies(self, cached: HistoryEntry, request: ChatRequest, ctx: RequestContext) -> bool:
        """Whether the cached extraction is valid for this request (a miss is logged)."""
        reason = self.condenser.miss_reason(cached, request, len(request.messages))
        if reason is not None:
            log.info(
                "history cache miss",
                extra={
                    "request_id": ctx.request_id,
                    "conversation": ctx.conversation_id,
                    "reason": reason,
                },
            )
        return reason is None

    async def _splice(
        self, request: ChatRequest, ctx: RequestContext, entry: ModelEntry, cached: HistoryEntry
    ) -> tuple[ChatRequest, int]:
        """The spliced request (grown first when near the wall) and its raw token count."""
        scale = await self.estimator.scale(entry)
        counts = self.estimator.counts(entry, request.messages)
        split = split_at(request.messages, cached.historical_end_index)
        stand_in = context_message(cached.extraction, len(split.historical))
        messages = assemble(request.messages, split, stand_in)
        counted = self.estimator.count(entry, messages)
        grown = await self._grown(request, ctx, entry, scale, counts, counted)
        action = "spliced"
        if grown is not None:
            split, stand_in_made = grown
            messages = assemble(request.messages, split, stand_in_made.message)
            counted = self.estimator.count(entry, messages)
            action = "spliced+extracted" if stand_in_made.extraction is not None else "spliced"
            report(ctx, stand_in_made, len(split.historical))
        before, after = int((sum(counts) + 3) * scale), int(counted * scale)
        ctx.note("action", action)
        ctx.note("messages-replaced", len(split.historical))
        ctx.note("tokens-before", before)
        ctx.note("tokens-after", after)
        metrics.splice_done(entry.model_name, grown is not None, before, after)
        return request.spliced(messages), counted

    async def _grown(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        scale: float,
        counts: tuple[int, ...],
        counted: int,
    ) -> tuple[Split, StandIn] | None:
        """A grown extraction when the splice passes `grow_at` of the prompt budget.

        Grown ahead of the wall, the tail keeps half its usual share, so the next turns have
        room before the extraction needs to grow again.
        """
        window = await self.condenser.window(entry)
        if window is None:
            return None
        plan = self.condenser.plan(
            request, entry, window=window, scale=scale, counts=counts,
            intact_share=entry.context.intact_share / 2,
        )  # fmt: skip
        wall = plan.budget.prompt_limit * entry.context.grow_at
        if counted * scale <= wall or not plan.split.historical:
            return None
        return plan.split, await self.condenser.stand_in(request, ctx, entry, plan)


def split_at(messages: tuple[Message, ...], end: int) -> Split:
    """The split a cached entry made: system messages and the summarised rest before `end`."""
    system = tuple(i for i in range(end) if messages[i].get("role") in SYSTEM_ROLES)
    historical = tuple(i for i in range(end) if i not in system)
    return Split(system, historical, tuple(range(end, len(messages))))
