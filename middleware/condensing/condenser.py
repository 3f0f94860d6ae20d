"""The condensing machinery both history layers share: plan, cache, extract, stand in.

`Condenser` turns a request plus a window into a `Plan` (what stays, what is condensed), finds a
cached extraction valid for the request's exact prefix, extracts (incrementally when it can)
under a per-conversation single flight, and stores the result. `overflow_recovery` uses it
after an upstream overflow; `history_splice` uses it before the request is sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from kernel.config import ModelEntry
from kernel.conversation import chain, chain_matches, conversation_id
from kernel.services import Services
from kernel.store import HistoryEntry, StoreError
from kernel.tokens import TokenCounter, count_text
from kernel.types import ChatRequest, ChatResponse, Message, RequestContext
from middleware.condensing.extraction import (
    PROMPT_VERSION,
    BadExtraction,
    Extraction,
    Rung,
    condense_message,
    extract_history,
)
from middleware.condensing.history import (
    SYSTEM_ROLES,
    Budget,
    Split,
    context_message,
    dropped_message,
    output_reserve,
    plan_budget,
    split_history,
)

log = logging.getLogger("overspill.condense")

DEFAULT_OUTPUT_RESERVE = 1024
MAX_MESSAGE_CHARS = 50_000
"""A tail message longer than this is condensed by the ladder even when it fits (seed 001)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What a condensed request will keep, for one model and window."""

    split: Split
    budget: Budget
    counts: tuple[int, ...]
    scale: float
    tail_budget: int

    def tokens(self, indices: Sequence[int]) -> int:
        """Estimated upstream tokens of some messages (scaled by the known correction)."""
        return int(sum(self.counts[i] for i in indices) * self.scale)


@dataclass(frozen=True, slots=True)
class StandIn:
    """The message that replaces the historical part, and how it was made."""

    message: Message
    action: str
    extraction: Extraction | None


class Condenser:
    """Plans, caches and extracts; one per layer, sharing the services' store and calibration."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.counters: dict[str, TokenCounter] = {}

    def counter(self, entry: ModelEntry) -> TokenCounter:
        """The per-message token counter for a deployment's model (counts are cached)."""
        model = entry.litellm_params.upstream_model
        counter = self.counters.get(model)
        if counter is None:
            counter = self.counters[model] = TokenCounter(model)
        return counter

    def estimate(self, entry: ModelEntry, messages: Sequence[Message]) -> int:
        """Estimated upstream prompt tokens of messages (calibrated)."""
        raw = self.counter(entry).count_messages(messages)
        return int(raw * self.services.calibration.ratio(entry.model_name))

    def counts(self, entry: ModelEntry, messages: Sequence[Message]) -> tuple[int, ...]:
        """Each message's token count (cached across requests)."""
        count = self.counter(entry).count_message
        return tuple(count(m) for m in messages)

    def plan(
        self,
        request: ChatRequest,
        entry: ModelEntry,
        *,
        window: int,
        scale: float,
        counts: tuple[int, ...] | None = None,
        intact_share: float | None = None,
    ) -> Plan:
        """Budget from the window; split the messages for it (`intact_share`: the tail's share
        of the budget, `context.intact_share` unless given)."""
        counts = counts if counts is not None else self.counts(entry, request.messages)
        system = sum(c for c, m in zip(counts, request.messages, strict=True) if _is_system(m))
        default = entry.context.max_output_tokens or DEFAULT_OUTPUT_RESERVE
        budget = plan_budget(
            window,
            output_reserve=output_reserve(request.body, default),
            safety_margin=entry.context.safety_margin,
            system_tokens=int(system * scale),
        )
        tail_budget = budget.share(intact_share or entry.context.intact_share)
        split = split_history(request.messages, counts, tail_budget=int(tail_budget / scale))
        return Plan(split, budget, counts, scale, tail_budget)

    def conversation(self, request: ChatRequest, ctx: RequestContext) -> str:
        """The conversation id (header, metadata, or derived), remembered in the context."""
        if ctx.conversation_id is None:
            ctx.conversation_id = conversation_id(
                tenant=ctx.tenant,
                header=ctx.headers.get("x-conversation-id"),
                metadata=_metadata(request.body),
                messages=request.messages,
            )
        return ctx.conversation_id

    async def cached(self, ctx: RequestContext, conversation: str) -> HistoryEntry | None:
        """The stored entry, or None when there is none or the store fails (logged)."""
        try:
            return await self.services.store.get(ctx.tenant, conversation)
        except StoreError as exc:
            log.error("history store read failed; going on without it", extra={"error": str(exc)})
            return None

    def miss_reason(self, cached: HistoryEntry, request: ChatRequest, end: int) -> str | None:
        """Why a cached extraction does not apply to this request (None: it applies)."""
        if cached.model_id != request.model:
            return f"model changed ({cached.model_id} → {request.model})"
        if cached.prompt_version != PROMPT_VERSION:
            return f"extraction prompt changed ({cached.prompt_version} → {PROMPT_VERSION})"
        if cached.historical_end_index > end:
            return "the request is shorter than the summarised prefix"
        if not chain_matches(
            request.messages, cached.historical_end_index, PROMPT_VERSION, cached.chain
        ):
            return "the summarised messages were edited or the history branched"
        return None

    async def stand_in(
        self, request: ChatRequest, ctx: RequestContext, entry: ModelEntry, plan: Plan
    ) -> StandIn:
        """The extraction for `plan`'s historical part: reused, extended, or made, and cached."""
        conversation = self.conversation(request, ctx)
        store = self.services.store
        end = plan.split.historical_end
        replaced = len(plan.split.historical)
        async with store.single_flight(ctx.tenant, conversation):
            cached = await self.cached(ctx, conversation)
            previous = cached if cached and not self.miss_reason(cached, request, end) else None
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
            await self._save(self._entry(request, ctx, end, extraction, plan))
        action = "extracted-incremental" if extraction.incremental else "extracted"
        return StandIn(context_message(extraction.text, replaced), action, extraction)

    async def shrink_oversized(
        self, messages: list[Message], plan: Plan, entry: ModelEntry
    ) -> list[str]:
        """Condense tail messages too large for the intact share (seed 001's ladder), in place."""
        others = plan.tokens(plan.split.tail)
        done = []
        for index in plan.split.tail:
            content = messages[index].get("content")
            if not isinstance(content, str):
                continue
            own = plan.tokens((index,))
            if own <= plan.tail_budget and len(content) <= MAX_MESSAGE_CHARS:
                continue
            share = max(64, int((plan.tail_budget - (others - own)) / plan.scale))
            condensed = await condense_message(
                content,
                share_tokens=share,
                rungs=self._rungs(entry, plan),
                focus=latest_question(messages),
                model=entry.litellm_params.upstream_model,
            )
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
            focus=latest_question(request.messages),
            model=entry.litellm_params.upstream_model,
        )

    async def _save(self, entry: HistoryEntry) -> None:
        """Store an extraction; a failing store is logged and the request carries on."""
        try:
            await self.services.store.put(entry)
        except StoreError as exc:
            log.error(
                "history store write failed; extraction not cached", extra={"error": str(exc)}
            )

    def _entry(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        end: int,
        extraction: Extraction,
        plan: Plan,
    ) -> HistoryEntry:
        return HistoryEntry(
            tenant=ctx.tenant,
            conversation_id=self.conversation(request, ctx),
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


def report(ctx: RequestContext, stand_in: StandIn, replaced: int) -> None:
    """What a layer did, as notes (x-overspill-* headers and the request's log line)."""
    ctx.note("action", stand_in.action)
    ctx.note("messages-condensed", replaced)
    extraction = stand_in.extraction
    ctx.note("extraction-calls", extraction.calls if extraction else 0)
    if extraction is not None:
        ctx.note("extraction-tokens", extraction.prompt_tokens + extraction.completion_tokens)


def prompt_tokens(response: ChatResponse) -> int | None:
    """`usage.prompt_tokens` of a JSON answer (None for streams and answers without usage)."""
    if response.body is None:
        return None
    try:
        usage = orjson.loads(response.body).get("usage") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return None
    value = usage.get("prompt_tokens")
    return value if isinstance(value, int) else None


def latest_question(messages: Sequence[Message]) -> str | None:
    """The newest user message's text (the focus for extraction), when it is plain text."""
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])[:2000]
    return None


def _metadata(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    metadata = body.get("metadata")
    return metadata if isinstance(metadata, dict) else None


def _is_system(message: Message) -> bool:
    return message.get("role") in SYSTEM_ROLES
