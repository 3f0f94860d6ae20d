"""The `history_splice` layer: a cached extraction stands in, grown ahead of the wall.

When a conversation has a cache entry valid for the request's exact prefix (same model, same
extraction prompt, the summarised messages unchanged), the request is sent as system messages
+ the extraction + the messages after it, intact. Between growths that prefix is the same bytes
turn after turn, so the upstream's prompt cache keeps serving it.

With a known window (config, litellm's model map, Ollama discovery) the layer keeps the
conversation under the wall itself, with hysteresis (shares of the prompt budget, per model):

- past `context.compact_at` (0.7), the extraction grows AFTER the response was sent, as a
  background job of the system (single flight per conversation through the store, across
  replicas; the entry is written whole or not at all), and the next turn splices from it;
- past `context.grow_at` (0.85) the request is not sent as it is: it waits for a running
  growth (bounded by `context.max_wait_seconds`), else grows its own extraction first. Such a
  turn is counted (`overspill_compaction_waited_turns_total`, note `waited`). This also covers
  a conversation's FIRST compaction, so a known window never costs a failed upstream call;
- a growth plans its intact tail so the spliced request lands near `context.compact_to` (0.5),
  leaving room for several turns before the next one;
- after a background growth, the new spliced prompt is sent once for one token
  (`context.warm_cache`, self-hosted models by default), so the turn after a growth finds the
  new prefix in the upstream's cache like any other turn.

With an unknown window a cached extraction is still spliced, and overflow_recovery's fail-first
stays the way in (and the safety net either way). The upstream's reported prompt size
calibrates later estimates for the model.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar

from kernel import metrics
from kernel.config import ModelEntry
from kernel.services import Services
from kernel.store import HistoryEntry
from kernel.tokens import REPLY_PRIMING_TOKENS
from kernel.types import ChatRequest, ChatResponse, Message, Next, RequestContext
from middleware.condensing.condenser import Condenser, Plan, report
from middleware.condensing.split import Split, assemble, context_message, partition
from middleware.layers.hysteresis import tail_share

log = logging.getLogger("overspill.history_splice")


@dataclass(frozen=True, slots=True)
class Fit:
    """The request as it would go now: its messages, their raw count, and the wall."""

    messages: tuple[Message, ...]
    counted: int
    replaced: int
    limit: int | None
    """The prompt budget in upstream tokens (None: the window is unknown)."""
    scale: float
    whole: int
    """The raw count of the request's whole conversation (before any splice)."""

    @property
    def estimate(self) -> int:
        """The estimated upstream prompt tokens."""
        return int(self.counted * self.scale)

    def past(self, share: float) -> bool:
        """Whether the request passes `share` of the prompt budget (never, window unknown)."""
        return self.limit is not None and self.estimate > self.limit * share


def _compacts(fit: Fit, ctx: RequestContext, entry: ModelEntry) -> bool:
    """Whether the conversation is past the point where background compaction starts: the
    client's own threshold (in tokens) when it gave one, else `context.compact_at`."""
    if ctx.compact_threshold is not None:
        return fit.limit is not None and fit.estimate > ctx.compact_threshold
    return fit.past(entry.context.compact_at)


class HistorySplice:
    """Replaces the summarised prefix of a long conversation with its cached extraction."""

    name: ClassVar[str] = "history_splice"

    def __init__(self, services: Services) -> None:
        self.condenser = Condenser(services)
        self.estimator = services.estimator
        self.store = services.store
        self.warm = services.warm

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Splice a valid extraction; grow it first only when the request cannot fit."""
        entry = ctx.model
        if entry is None or ctx.skip_history:
            return await call_next(request, ctx)
        if len(request.messages) < entry.context.splice_min_messages:
            return await call_next(request, ctx)
        cached = await self._valid(request, ctx)
        window = await self.condenser.window(entry)
        if cached is None and window is None:
            return await call_next(request, ctx)
        fit = await self._fit(request, ctx, entry, cached, window)
        grown = False
        if fit.past(entry.context.grow_at):
            fit, cached, grown = await self._make_room(request, ctx, entry, fit, cached, window)
        elif _compacts(fit, ctx, entry) and entry.context.background:
            self._grow_later(request, ctx, entry)
        if cached is None and not grown:
            return await call_next(request, ctx)  # fits whole: the client's own bytes go
        self._note(request, ctx, entry, fit, grown)
        response = await call_next(request.spliced(fit.messages), ctx)
        await self.estimator.observe(entry, fit.counted, response.prompt_tokens())
        return response

    async def _valid(self, request: ChatRequest, ctx: RequestContext) -> HistoryEntry | None:
        """The cached extraction when it is valid for this request (a miss is logged)."""
        cached = await self.condenser.cached(ctx, request)
        if cached is None:
            return None
        reason = self.condenser.miss_reason(cached, ctx, request, len(request.messages))
        if reason is not None:
            log.info(
                "history cache miss",
                extra={
                    "request_id": ctx.request_id,
                    "conversation": ctx.conversation_id,
                    "reason": reason,
                },
            )
            return None
        return cached

    async def _fit(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        cached: HistoryEntry | None,
        window: int | None,
    ) -> Fit:
        """The request spliced from `cached` (whole when None), measured against the budget."""
        scale = await self.estimator.scale(entry)
        counts = self.condenser.counts(ctx, request, entry)
        whole = counted = REPLY_PRIMING_TOKENS + sum(counts)
        replaced = 0
        messages = request.messages
        if cached is not None:
            split = split_at(request.messages, cached.historical_end_index)
            stand_in = context_message(cached.extraction, len(split.historical))
            messages = tuple(assemble(request.messages, split, stand_in))
            replaced = len(split.historical)
            kept = sum(counts[i] for i in (*split.system, *split.tail))
            own = self.estimator.counter(entry).count_message(stand_in)
            counted = REPLY_PRIMING_TOKENS + kept + own  # = estimator.count(messages)
        limit = None
        if window is not None:
            plan = self.condenser.plan(request, entry, window=window, scale=scale, counts=counts)
            limit = plan.budget.prompt_limit
        return Fit(messages, counted, replaced, limit, scale, whole)

    async def _make_room(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        fit: Fit,
        cached: HistoryEntry | None,
        window: int | None,
    ) -> tuple[Fit, HistoryEntry | None, bool]:
        """Past `grow_at`: wait for a running growth, else grow now (the turn waits either
        way and is counted). Returns the new fit, the entry it uses, and whether it grew."""
        assert window is not None
        if await self.store.flight_busy(ctx.tenant, ctx.conversation_id):
            metrics.compaction_waited(entry.model_name, "job")
            ctx.note("waited", "job")
            await self._wait_for_flight(ctx, entry)
            cached = await self._valid(request, ctx) or cached
            fit = await self._fit(request, ctx, entry, cached, window)
            if not fit.past(entry.context.grow_at):
                return fit, cached, False
        plan = await self._plan(request, ctx, entry, window, cached)
        if plan is None:
            return fit, cached, False  # nothing left to condense: overflow_recovery's turn
        if "waited" not in ctx.notes:
            metrics.compaction_waited(entry.model_name, "extraction")
            ctx.note("waited", "extraction")
        made = await self.condenser.stand_in(request, ctx, entry, plan)
        report(ctx, made, len(plan.split.historical))
        messages = tuple(assemble(request.messages, plan.split, made.message))
        counted = self.estimator.count(entry, messages)
        grown = Fit(messages, counted, len(plan.split.historical), fit.limit, fit.scale, fit.whole)
        return grown, await self._valid(request, ctx), True

    async def _wait_for_flight(self, ctx: RequestContext, entry: ModelEntry) -> None:
        """Wait (bounded) until the conversation's running growth lets go of its flight."""
        try:
            async with asyncio.timeout(entry.context.max_wait_seconds):
                async with self.store.single_flight(ctx.tenant, ctx.conversation_id):
                    pass
        except TimeoutError:
            log.warning(
                "a background growth is still running after context.max_wait_seconds; "
                "growing this turn's own extraction",
                extra={"request_id": ctx.request_id, "conversation": ctx.conversation_id},
            )

    async def _plan(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        window: int,
        cached: HistoryEntry | None,
    ) -> Plan | None:
        """The growth's plan: its tail sized so the spliced request lands near `compact_to`;
        None when it would condense nothing beyond what `cached` already covers."""
        scale = await self.estimator.scale(entry)
        counts = self.condenser.counts(ctx, request, entry)
        first = self.condenser.plan(request, entry, window=window, scale=scale, counts=counts)
        share = tail_share(entry, first, cached)
        plan = self.condenser.plan(
            request, entry, window=window, scale=scale, counts=counts, intact_share=share
        )
        covered = cached.historical_end_index if cached is not None else 0
        if not plan.split.historical or plan.split.historical_end <= covered:
            return None
        return plan

    def _grow_later(self, request: ChatRequest, ctx: RequestContext, entry: ModelEntry) -> None:
        """Ask the shell to grow the extraction once the response has been sent."""
        job_ctx = RequestContext(
            request_id=f"{ctx.request_id}-compaction",
            tenant=ctx.tenant,
            model=entry,
            conversation_hint=ctx.conversation_id,
        )
        whole = request.whole()
        ctx.note("compaction", "scheduled")
        ctx.after_response(f"compaction {ctx.conversation_id}", self.job(whole, job_ctx, entry))

    def job(
        self, request: ChatRequest, ctx: RequestContext, entry: ModelEntry
    ) -> Callable[[], Coroutine[Any, Any, None]]:
        """The background growth for `request`'s conversation (see `grow`)."""

        async def run() -> None:
            result = "failed"
            try:
                result = await self.grow(request, ctx, entry)
            except asyncio.CancelledError:
                result = "cancelled"
                raise
            finally:
                metrics.compaction_job(entry.model_name, result)

        return run

    async def grow(self, request: ChatRequest, ctx: RequestContext, entry: ModelEntry) -> str:
        """Grow the conversation's extraction for `request` unless someone else is at it.

        Returns done, busy, unneeded, or cut (no model could condense it: nothing stored).
        The entry is written whole by the condenser, or not at all."""
        if await self.store.flight_busy(ctx.tenant, ctx.conversation_id):
            return "busy"
        window = await self.condenser.window(entry)
        if window is None:
            return "unneeded"
        cached = await self._valid(request, ctx)
        plan = await self._plan(request, ctx, entry, window, cached)
        if plan is None:
            return "unneeded"
        made = await self.condenser.stand_in(request, ctx, entry, plan, store_fallback=False)
        log.info(
            "history grown in the background",
            extra={
                "request_id": ctx.request_id,
                "conversation": ctx.conversation_id,
                "action": made.action,
                "messages_condensed": len(plan.split.historical),
            },
        )
        made_by = made.extraction.strategy if made.extraction is not None else None
        if made_by is not None and made_by not in entry.context.strategies:
            return "cut"  # the listed strategies could not condense it: nothing stored
        if made.action == "reused":
            return "unneeded"
        await self._warm(request, ctx, entry, window)
        return "done"

    async def _warm(
        self, request: ChatRequest, ctx: RequestContext, entry: ModelEntry, window: int
    ) -> None:
        """Send the conversation as its next turn will start (system messages + the new
        extraction + the intact tail), so the upstream's prefix cache holds the new prefix
        and that turn reads only what it adds."""
        if self.warm is None:
            return
        cached = await self._valid(request, ctx)
        if cached is None:
            return  # stored nothing this request can use (the store is down): nothing to warm
        fit = await self._fit(request, ctx, entry, cached, window)
        await self.warm(request.spliced(fit.messages), entry)

    def _note(
        self, request: ChatRequest, ctx: RequestContext, entry: ModelEntry, fit: Fit, grown: bool
    ) -> None:
        """The splice's notes and metrics."""
        before = int(fit.whole * fit.scale)
        if not grown:
            ctx.note("action", "spliced")
        elif ctx.notes.get("action", "").startswith("extracted"):
            ctx.note("action", "spliced+extracted")
        ctx.note("messages-replaced", fit.replaced)
        ctx.note("tokens-before", before)
        ctx.note("tokens-after", fit.estimate)
        metrics.splice_done(entry.model_name, grown, before, fit.estimate)


def split_at(messages: tuple[Message, ...], end: int) -> Split:
    """The split a cached entry made: system messages and the summarised rest before `end`."""
    system, historical = partition(messages, end)
    return Split(system, historical, tuple(range(end, len(messages))))
