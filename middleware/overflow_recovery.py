"""The `overflow_recovery` layer: one strike, then a condensed retry, then a loud failure.

The full request is tried first. On the first `ContextWindowExceeded` (before any byte reached
the client: streams are primed) the older history is condensed into an extraction, cached per
conversation, and the request is retried once as system messages + the extraction + the intact
tail. A second overflow is final: logged at critical level and answered 400 with what was tried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from middleware.conversation import chain, chain_matches, conversation_id
from middleware.extraction import (
    PROMPT_VERSION,
    BadExtraction,
    Extraction,
    Rung,
    condense_message,
    extract_history,
)
from middleware.history import (
    Budget,
    Split,
    assemble,
    context_message,
    correction,
    dropped_message,
    output_reserve,
    plan_budget,
    split_history,
)
from proxy.config import ModelEntry
from proxy.errors import ContextWindowExceeded
from proxy.pipeline import Services
from proxy.store import HistoryEntry, StoreError
from proxy.tokens import TokenCounter, count_text
from proxy.types import ChatRequest, ChatResponse, Message, Next, RequestContext

log = logging.getLogger("overspill.overflow_recovery")

DEFAULT_OUTPUT_RESERVE = 1024
MAX_MESSAGE_CHARS = 50_000
"""A tail message longer than this is condensed by the ladder even when it fits (seed 001)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What the retry will send, and why."""

    split: Split
    budget: Budget
    counts: tuple[int, ...]
    scale: float
    tail_budget: int

    def tokens(self, indices: Sequence[int]) -> int:
        """Estimated upstream tokens of some messages (scaled by the observed correction)."""
        return int(sum(self.counts[i] for i in indices) * self.scale)


@dataclass(frozen=True, slots=True)
class StandIn:
    """The message that replaces the historical part, and how it was made."""

    message: Message
    action: str
    extraction: Extraction | None


class OverflowRecovery:
    """Recovers from the first context-window overflow of a request by condensing history."""

    name: ClassVar[str] = "overflow_recovery"

    def __init__(self, services: Services) -> None:
        self.services = services
        self.counters: dict[str, TokenCounter] = {}

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Try the request; on an overflow, condense and retry exactly once."""
        if ctx.internal or ctx.model is None:
            return await call_next(request, ctx)
        try:
            return await call_next(request, ctx)
        except ContextWindowExceeded as overflow:
            retry, before, after = await self._condense(request, ctx, ctx.model, overflow)
        ctx.note("attempts", 2)
        try:
            return await call_next(retry, ctx)
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

    async def _condense(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        overflow: ContextWindowExceeded,
    ) -> tuple[ChatRequest, int, int]:
        plan = self._plan(request, entry, overflow)
        messages = list(request.messages)
        shrunk = await self._shrink_oversized(messages, plan, entry)
        if not plan.split.historical and not shrunk:
            raise overflow
        if plan.split.historical:
            stand_in = await self._stand_in(request, ctx, entry, plan)
            messages = assemble(messages, plan.split, stand_in.message)
            self._report(ctx, stand_in, plan)
        if shrunk:
            ctx.note("oversized", ",".join(shrunk))
        before = plan.tokens(range(len(request.messages)))
        after = int(self._counter(entry).count_messages(messages) * plan.scale)
        ctx.note("tokens-before", before)
        ctx.note("tokens-after", after)
        log.info(
            "overflow recovered",
            extra={"request_id": ctx.request_id, "conversation": ctx.conversation_id, **ctx.notes},
        )
        return request.with_messages(messages), before, after

    async def _shrink_oversized(
        self, messages: list[Message], plan: Plan, entry: ModelEntry
    ) -> list[str]:
        """Condense tail messages too large for the intact share (seed 001's ladder), in place."""
        tail_budget = plan.tail_budget
        others = plan.tokens(plan.split.tail)
        done = []
        for index in plan.split.tail:
            content = messages[index].get("content")
            if not isinstance(content, str):
                continue
            own = plan.tokens((index,))
            if own <= tail_budget and len(content) <= MAX_MESSAGE_CHARS:
                continue
            share = max(64, int((tail_budget - (others - own)) / plan.scale))
            condensed = await condense_message(
                content, share_tokens=share, rungs=self._rungs(entry, plan),
                focus=_latest_question(messages), model=entry.litellm_params.upstream_model,
            )  # fmt: skip
            messages[index] = {**messages[index], "content": condensed.text}
            done.append(f"{index}:{condensed.how}")
        return done

    def _rungs(self, entry: ModelEntry, plan: Plan) -> list[Rung]:
        """The extraction model (the cheaper one users name, ~4 chars/token), then the user's
        own model (~3.5 chars/token)."""
        ladder = {entry.model_name: 3.5}
        if entry.context.extraction_model and entry.context.extraction_model != entry.model_name:
            ladder = {entry.context.extraction_model: 4.0, **ladder}
        return [
            Rung(
                self.services.internal(name),
                int((self.services.window_of(name) or plan.budget.window) / plan.scale),
                chars_per_token,
            )
            for name, chars_per_token in ladder.items()
        ]

    def _plan(
        self, request: ChatRequest, entry: ModelEntry, overflow: ContextWindowExceeded
    ) -> Plan:
        counter = self._counter(entry)
        counts = tuple(counter.count_message(m) for m in request.messages)
        scale = correction(sum(counts) + 3, overflow.requested)
        window = overflow.limit or self.services.window_of(request.model) or 0
        if window <= 0:
            raise overflow
        system = sum(
            c
            for c, m in zip(counts, request.messages, strict=True)
            if m.get("role") in ("system", "developer")
        )
        reserve = output_reserve(
            request.body, entry.context.max_output_tokens or DEFAULT_OUTPUT_RESERVE
        )
        budget = plan_budget(
            window,
            output_reserve=reserve,
            safety_margin=entry.context.safety_margin,
            system_tokens=int(system * scale),
        )
        tail_budget = budget.share(entry.context.intact_share)
        split = split_history(request.messages, counts, tail_budget=int(tail_budget / scale))
        return Plan(split, budget, counts, scale, tail_budget)

    async def _stand_in(
        self, request: ChatRequest, ctx: RequestContext, entry: ModelEntry, plan: Plan
    ) -> StandIn:
        conversation = conversation_id(
            tenant=ctx.tenant,
            header=ctx.headers.get("x-conversation-id"),
            metadata=_metadata(request.body),
            messages=request.messages,
        )
        ctx.conversation_id = conversation
        store = self.services.store
        end = plan.split.historical_end
        replaced = len(plan.split.historical)
        async with store.single_flight(ctx.tenant, conversation):
            previous = self._usable(await self._cached(ctx, conversation), request, end)
            if previous is not None and previous.historical_end_index == end:
                return StandIn(context_message(previous.extraction, replaced), "reused", None)
            try:
                extraction = await self._extract(request, entry, plan, previous)
            except BadExtraction as bad:
                log.warning(
                    "extraction rejected; dropping the oldest turns instead",
                    extra={"request_id": ctx.request_id, "reason": str(bad)},
                )
                return StandIn(dropped_message(replaced), "truncated", None)
            await self._save(self._entry(request, ctx, conversation, end, extraction, plan))
        action = "extracted-incremental" if extraction.incremental else "extracted"
        return StandIn(context_message(extraction.text, replaced), action, extraction)

    async def _cached(self, ctx: RequestContext, conversation: str) -> HistoryEntry | None:
        """The stored entry, or None when there is none or the store fails (logged)."""
        try:
            return await self.services.store.get(ctx.tenant, conversation)
        except StoreError as exc:
            log.error("history store read failed; extracting without it", extra={"error": str(exc)})
            return None

    async def _save(self, entry: HistoryEntry) -> None:
        """Store an extraction; a failing store is logged and the request carries on."""
        try:
            await self.services.store.put(entry)
        except StoreError as exc:
            log.error(
                "history store write failed; extraction not cached", extra={"error": str(exc)}
            )

    def _usable(
        self, cached: HistoryEntry | None, request: ChatRequest, end: int
    ) -> HistoryEntry | None:
        """A cached extraction that summarises a prefix of this request's history, else None."""
        if cached is None:
            return None
        if cached.model_id != request.model or cached.prompt_version != PROMPT_VERSION:
            return None
        if cached.historical_end_index > end:
            return None
        if not chain_matches(
            request.messages, cached.historical_end_index, PROMPT_VERSION, cached.chain
        ):
            return None
        return cached

    async def _extract(
        self, request: ChatRequest, entry: ModelEntry, plan: Plan, previous: HistoryEntry | None
    ) -> Extraction:
        extractor = entry.context.extraction_model or request.model
        start = previous.historical_end_index if previous else 0
        historical = [request.messages[i] for i in plan.split.historical if i >= start]
        target = max(64, int(plan.budget.share(1 - entry.context.intact_share) / plan.scale))
        window = self.services.window_of(extractor) or plan.budget.window
        return await extract_history(
            historical,
            complete=self.services.internal(extractor),
            target_tokens=target,
            extractor_window=int(window / plan.scale),
            previous=previous.extraction if previous else None,
            focus=_latest_question(request.messages),
            model=entry.litellm_params.upstream_model,
        )

    def _entry(
        self, request: ChatRequest, ctx: RequestContext, conversation: str, end: int,
        extraction: Extraction, plan: Plan,
    ) -> HistoryEntry:  # fmt: skip
        return HistoryEntry(
            tenant=ctx.tenant,
            conversation_id=conversation,
            model_id=request.model,
            historical_end_index=end,
            message_count=len(request.messages),
            extraction=extraction.text,
            chain=chain(request.messages, end, PROMPT_VERSION),
            prompt_version=PROMPT_VERSION,
            tokens_before=plan.tokens(range(end)),
            tokens_after=count_text(extraction.text, request.model),
            created_at=time.time(),
        )

    def _report(self, ctx: RequestContext, stand_in: StandIn, plan: Plan) -> None:
        ctx.note("action", stand_in.action)
        ctx.note("messages-condensed", len(plan.split.historical))
        extraction = stand_in.extraction
        ctx.note("extraction-calls", extraction.calls if extraction else 0)
        if extraction is not None:
            ctx.note("extraction-tokens", extraction.prompt_tokens + extraction.completion_tokens)

    def _counter(self, entry: ModelEntry) -> TokenCounter:
        return self._counter_for(entry.litellm_params.upstream_model)

    def _counter_for(self, model: str) -> TokenCounter:
        counter = self.counters.get(model)
        if counter is None:
            counter = self.counters[model] = TokenCounter(model)
        return counter


def _metadata(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    metadata = body.get("metadata")
    return metadata if isinstance(metadata, dict) else None


def _latest_question(messages: Sequence[Message]) -> str | None:
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])[:2000]
    return None
