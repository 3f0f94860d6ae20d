"""The `history_splice` layer (outermost): a cached extraction stands in before the request goes.

After a conversation has overflowed once, every later turn would overflow again and pay a failed
upstream call before recovering. When the conversation has a cache entry that is valid for the
request's exact prefix (same model, same extraction prompt, the summarised messages unchanged),
the request is sent as system messages + the extraction + the messages after it, intact. When
even the spliced request passes a share of the budget (85% by default), the extraction grows
first (incremental: previous extraction + the turns since), instead of waiting for the wall.
The upstream's reported prompt size calibrates later estimates for the model.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from kernel.config import ModelEntry
from kernel.services import Services
from kernel.store import HistoryEntry
from kernel.types import ChatRequest, ChatResponse, Message, Next, RequestContext
from middleware.condensing.condenser import Condenser, StandIn, prompt_tokens, report
from middleware.condensing.history import Split, assemble, context_message

log = logging.getLogger("overspill.history_splice")

SKIP_HEADER = "x-overspill-skip-history"


class HistorySplice:
    """Replaces the summarised prefix of a long conversation with its cached extraction."""

    name: ClassVar[str] = "history_splice"

    def __init__(self, services: Services) -> None:
        self.services = services
        self.condenser = Condenser(services)

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Splice when a valid extraction is cached; otherwise pass the request on untouched."""
        entry = ctx.model
        if entry is None or ctx.internal or not self._wanted(request, ctx, entry):
            return await call_next(request, ctx)
        conversation = self.condenser.conversation(request, ctx)
        cached = await self.condenser.cached(ctx, conversation)
        if cached is None:
            return await call_next(request, ctx)
        reason = self.condenser.miss_reason(cached, request, len(request.messages))
        if reason is not None:
            log.info(
                "history cache miss",
                extra={
                    "request_id": ctx.request_id,
                    "conversation": conversation,
                    "reason": reason,
                },
            )
            return await call_next(request, ctx)
        spliced, estimate = await self._splice(request, ctx, entry, cached)
        ctx.unspliced = request
        response = await call_next(spliced, ctx)
        self._calibrate(entry, estimate, response)
        return response

    def _wanted(self, request: ChatRequest, ctx: RequestContext, entry: ModelEntry) -> bool:
        """Long enough, and the client did not opt out (header or `overspill.skip_history`)."""
        if len(request.messages) < entry.context.splice_min_messages:
            return False
        if ctx.headers.get(SKIP_HEADER, "").strip().lower() in ("1", "true", "yes"):
            return False
        options = request.extensions.get("overspill") or {}
        return not options.get("skip_history")

    async def _splice(
        self, request: ChatRequest, ctx: RequestContext, entry: ModelEntry, cached: HistoryEntry
    ) -> tuple[ChatRequest, int]:
        """The spliced request (grown first when near the wall) and its estimated size."""
        condenser = self.condenser
        scale = self.services.calibration.ratio(entry.model_name)
        counts = condenser.counts(entry, request.messages)
        split = _split_at(request.messages, cached.historical_end_index)
        stand_in = context_message(cached.extraction, len(split.historical))
        messages = assemble(request.messages, split, stand_in)
        kept = sum(counts[i] for i in split.system + split.tail)
        estimate = int((kept + condenser.counter(entry).count_message(stand_in) + 3) * scale)
        action = "spliced"
        window = self.services.window_of(request.model)
        if window is not None:
            # Grown ahead of the wall, the tail keeps half its usual share, so the next turns
            # have room before the extraction needs to grow again.
            plan = condenser.plan(
                request, entry, window=window, scale=scale, counts=counts,
                intact_share=entry.context.intact_share / 2,
            )  # fmt: skip
            if estimate > plan.budget.input * entry.context.grow_at and plan.split.historical:
                grown = await self.condenser.stand_in(request, ctx, entry, plan)
                messages = assemble(request.messages, plan.split, grown.message)
                estimate = self.condenser.estimate(entry, messages)
                split = plan.split
                action = "spliced+extracted" if _extracted(grown) else "spliced"
                report(ctx, grown, len(split.historical))
        ctx.note("action", action)
        ctx.note("messages-replaced", len(split.historical))
        ctx.note("tokens-before", int((sum(counts) + 3) * scale))
        ctx.note("tokens-after", estimate)
        return request.with_messages(messages), estimate

    def _calibrate(self, entry: ModelEntry, estimate: int, response: ChatResponse) -> None:
        """Learn the model's token ratio from the upstream's own prompt count."""
        calibration = self.services.calibration
        raw = int(estimate / calibration.ratio(entry.model_name))
        calibration.observe(entry.model_name, raw, prompt_tokens(response))


def _split_at(messages: tuple[Message, ...], end: int) -> Split:
    """The split a cached entry made: system messages and the summarised rest before `end`."""
    system = tuple(i for i in range(end) if messages[i].get("role") in ("system", "developer"))
    historical = tuple(i for i in range(end) if i not in system)
    return Split(system, historical, tuple(range(end, len(messages))))


def _extracted(stand_in: StandIn) -> bool:
    return stand_in.extraction is not None
