"""The `overflow_recovery` layer: one strike, then a condensed retry, then a loud failure.

The full request is tried first. On the first `ContextWindowExceeded` (before any byte reached
the client: streams are primed) the older history is condensed into an extraction, cached per
conversation, and the request is retried once as system messages + the extraction + the intact
tail. A second overflow is final: logged at critical level and answered 400 with what was tried.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from kernel.config import ModelEntry
from kernel.errors import ContextWindowExceeded
from kernel.services import Services
from kernel.types import ChatRequest, ChatResponse, Next, RequestContext
from middleware.condensing.condenser import Condenser, prompt_tokens, report
from middleware.condensing.history import assemble, correction

log = logging.getLogger("overspill.overflow_recovery")


class OverflowRecovery:
    """Recovers from the first context-window overflow of a request by condensing history."""

    name: ClassVar[str] = "overflow_recovery"

    def __init__(self, services: Services) -> None:
        self.services = services
        self.condenser = Condenser(services)

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Try the request; on an overflow, condense and retry exactly once."""
        if ctx.internal or ctx.model is None:
            return await call_next(request, ctx)
        try:
            return await call_next(request, ctx)
        except ContextWindowExceeded as overflow:
            self._learn(ctx.model, request, overflow.requested)
            # A spliced request is condensed from the client's own messages, so the cache
            # stays keyed to the history the client really sends.
            original = ctx.unspliced or request
            retry, before, after = await self._condense(original, ctx, ctx.model, overflow)
        ctx.note("attempts", 2)
        try:
            response = await call_next(retry, ctx)
        except ContextWindowExceeded as again:
            message = (
                f"the conversation still exceeds the context window after overspill condensed "
                f"its history once ({before} → {after} estimated tokens); upstream said: "
                f"{again.message}"
            )
            log.critical(message, extra={"request_id": ctx.request_id, "model": request.model})
            raise ContextWindowExceeded(
                message, requested=again.requested, limit=again.limit, provider=again.provider
            ) from again
        self._learn(ctx.model, retry, prompt_tokens(response))
        return response

    def _learn(self, entry: ModelEntry, request: ChatRequest, reported: int | None) -> None:
        """The upstream's count of a request we can estimate corrects later estimates."""
        estimate = self.condenser.counter(entry).count_messages(request.messages)
        self.services.calibration.observe(entry.model_name, estimate, reported)

    async def _condense(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        overflow: ContextWindowExceeded,
    ) -> tuple[ChatRequest, int, int]:
        """The retry: oversized tail messages shrunk, the historical part stood in for."""
        condenser = self.condenser
        window = overflow.limit or self.services.window_of(request.model)
        if not window:
            raise overflow
        estimate = condenser.counter(entry).count_messages(request.messages)
        learned = self.services.calibration.ratio(entry.model_name)
        scale = max(learned, correction(estimate, overflow.requested))
        plan = condenser.plan(request, entry, window=window, scale=scale)
        messages = list(request.messages)
        shrunk = await condenser.shrink_oversized(messages, plan, entry)
        if not plan.split.historical and not shrunk:
            raise overflow
        if plan.split.historical:
            stand_in = await condenser.stand_in(request, ctx, entry, plan)
            messages = assemble(messages, plan.split, stand_in.message)
            report(ctx, stand_in, len(plan.split.historical))
        if shrunk:
            ctx.note("oversized", ",".join(shrunk))
        before = plan.tokens(range(len(request.messages)))
        after = int(condenser.counter(entry).count_messages(messages) * scale)
        ctx.note("tokens-before", before)
        ctx.note("tokens-after", after)
        log.info(
            "overflow recovered",
            extra={"request_id": ctx.request_id, "conversation": ctx.conversation_id, **ctx.notes},
        )
        return request.with_messages(messages), before, after
