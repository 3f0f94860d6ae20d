"""The `overflow_recovery` layer: one strike, then a condensed retry, then a loud failure.

The full request is tried first. On the first `ContextWindowExceeded` (before any byte reached
the client: streams are primed) the older history is condensed into an extraction, cached per
conversation, and the request is retried once as system messages + the extraction + the intact
tail. A second overflow is final: logged at critical level and answered 400 with what was tried.
A spliced request is condensed from the client's whole conversation (`ChatRequest.whole`), so
the cache stays keyed to the history the client really sends. The retry keeps an intact tail
sized to leave it near `context.compact_to` of the budget (middleware/layers/hysteresis.py), so
the turn after a recovery does not grow the extraction again at once.

With a known window, history_splice compacts before the upstream can refuse; this layer is
then the safety net (an estimate that was off), and the way in when the window is unknown.
When an outer layer placed content without knowing the window and will place it again within
the one the overflow states (`RequestContext.outer_replaces`: the documents layer), that first
overflow is passed through untouched: condensing a history full of documents would spend
model calls on what the documents layer can place without any.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import ClassVar

from kernel import metrics
from kernel.config import ModelEntry
from kernel.errors import ContextWindowExceeded
from kernel.services import Services
from kernel.types import ChatRequest, ChatResponse, Next, RequestContext
from middleware.condensing.budget import correction
from middleware.condensing.condenser import Condenser, report
from middleware.condensing.split import assemble
from middleware.layers.hysteresis import tail_share
from middleware.layers.shadow import would

log = logging.getLogger("overspill.overflow_recovery")


class OverflowRecovery:
    """Recovers from the first context-window overflow of a request by condensing history."""

    name: ClassVar[str] = "overflow_recovery"

    def __init__(self, services: Services) -> None:
        self.condenser = Condenser(services)
        self.estimator = services.estimator

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Try the request; on an overflow, condense and retry exactly once."""
        entry = ctx.model
        if entry is None:
            return await call_next(request, ctx)
        if ctx.shadow:
            try:
                return await call_next(request, ctx)
            except ContextWindowExceeded:
                would(ctx, self.name, "would-recover", "(condense the history, retry once)")
                raise
        try:
            return await call_next(request, ctx)
        except ContextWindowExceeded as overflow:
            if not overflow.estimated:
                counted = self.estimator.count(entry, request.messages, request.body.get("tools"))
                await self.estimator.observe(entry, counted, overflow.requested)
                if ctx.outer_replaces is not None and overflow.limit:
                    raise  # the outer layer places its content again within the stated window
            retry, before, after = await self._recover(request.whole(), ctx, entry, overflow)
        ctx.note("attempts", 2)
        try:
            response = await call_next(retry, ctx)
        except ContextWindowExceeded as again:
            dropped = self._truncated(retry, entry, again) if ctx.may_truncate else None
            if dropped is None:
                metrics.recovery_done(entry.model_name, "failed")
                raise self._final(again, request, ctx, before, after) from again
            retry, removed = dropped
            ctx.note("truncated", removed)
            try:
                response = await call_next(retry, ctx)
            except ContextWindowExceeded as third:
                metrics.recovery_done(entry.model_name, "failed")
                raise self._final(third, request, ctx, before, after) from third
        except Exception:
            metrics.recovery_done(entry.model_name, "error")
            raise
        metrics.recovery_done(entry.model_name, "recovered")
        counted = self.estimator.count(entry, retry.messages, retry.body.get("tools"))
        await self.estimator.observe(entry, counted, response.prompt_tokens())
        return response

    async def _recover(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        overflow: ContextWindowExceeded,
    ) -> tuple[ChatRequest, int, int]:
        """`_condense`, counted (impossible: nothing to condense, or no window known)."""
        try:
            retry, before, after = await self._condense(request, ctx, entry, overflow)
        except ContextWindowExceeded:
            metrics.recovery_done(entry.model_name, "impossible")
            raise
        except Exception:
            metrics.recovery_done(entry.model_name, "error")
            raise
        metrics.compaction(self.name, before, after)
        return retry, before, after

    def _truncated(
        self, retry: ChatRequest, entry: ModelEntry, again: ContextWindowExceeded
    ) -> tuple[ChatRequest, int] | None:
        """The condensed retry without its oldest turns, sized to the window the upstream
        stated, and how many messages went; None when it stated none or nothing can go.
        System messages (the stand-in among them) and the newest turn always stay."""
        if again.limit is None:
            return None
        # what the upstream counted; when it did not say, at least more than its window
        reported = again.requested or again.limit + 1
        scale = correction(
            self.estimator.count(entry, retry.messages, retry.body.get("tools")), reported
        )
        plan = self.condenser.plan(retry, entry, window=again.limit, scale=scale)
        if not plan.split.historical:
            return None
        kept = [
            retry.messages[i] for i in (*plan.split.system, *plan.split.pinned, *plan.split.tail)
        ]
        return retry.with_messages(kept), len(plan.split.historical)

    def _final(
        self,
        again: ContextWindowExceeded,
        request: ChatRequest,
        ctx: RequestContext,
        before: int,
        after: int,
    ) -> ContextWindowExceeded:
        """The second strike: logged at critical level, answered with what was tried."""
        message = (
            f"the conversation still exceeds the context window after overspill condensed "
            f"its history once ({before} → {after} estimated tokens); upstream said: "
            f"{again.message}"
        )
        log.critical(message, extra={"request_id": ctx.request_id, "model": request.model})
        return ContextWindowExceeded(
            message, requested=again.requested, limit=again.limit, provider=again.provider
        )

    async def _condense(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        overflow: ContextWindowExceeded,
    ) -> tuple[ChatRequest, int, int]:
        """The retry: oversized tail messages shrunk, the historical part stood in for."""
        condenser = self.condenser
        window = await condenser.window(entry, overflow.limit)
        if not window:
            raise overflow
        scale = await self._scale(entry, request, overflow)
        counts = condenser.counts(ctx, request, entry)
        plan = condenser.plan(request, entry, window=window, scale=scale, counts=counts)
        compact = condenser.plan(
            request, entry, window=window, scale=scale, counts=counts,
            intact_share=tail_share(entry, plan, None),
        )  # fmt: skip
        if compact.split.historical:  # land near compact_to: the next turns do not grow at once
            plan = dataclasses.replace(compact, tail_budget=plan.tail_budget)  # same "oversized"
        messages = list(request.messages)
        shrunk = await condenser.shrink_oversized(messages, plan, entry, ctx.spending())
        if not plan.split.historical and not shrunk:
            raise overflow
        made = (
            await condenser.stand_in(request, ctx, entry, plan) if plan.split.historical else None
        )
        # overspill's own calls (extraction, condensing) may have taught a higher ratio
        scale = max(scale, await self.estimator.scale(entry))
        if made is not None:
            report(ctx, made, len(plan.split.historical))
            stood = assemble(messages, plan.split, made.message)
            messages = condenser.refit(stood, len(plan.split.system), entry, plan, scale)
        if shrunk:
            ctx.note("oversized", ",".join(shrunk))
        before = plan.tokens(range(len(request.messages)))
        after = self.estimator.count(entry, messages, request.body.get("tools"))
        after = int(after * scale)
        ctx.note("tokens-before", before)
        ctx.note("tokens-after", after)
        log.info(
            "overflow recovered",
            extra={"request_id": ctx.request_id, "conversation": ctx.conversation_id, **ctx.notes},
        )
        return request.with_messages(messages), before, after

    async def _scale(
        self, entry: ModelEntry, request: ChatRequest, overflow: ContextWindowExceeded
    ) -> float:
        """The learned ratio, raised to the upstream's own count when it stated one."""
        learned = await self.estimator.scale(entry)
        if overflow.estimated:
            return learned
        counted = self.estimator.count(entry, request.messages, request.body.get("tools"))
        return max(learned, correction(counted, overflow.requested))
