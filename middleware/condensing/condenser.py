"""The condensing machinery every layer shares: plan, cache, extract on the ladder, stand in.

`Condenser` turns a request plus a window into a `Plan` (what stays, what is condensed), finds a
cached extraction valid for the request's exact prefix, extracts (incrementally when it can)
under a per-conversation single flight, and stores the result. `overflow_recovery` uses it
after an upstream overflow, `history_splice` before the request is sent, and `documents` to
compact the existing context.

A history is condensed by the model's `context.strategies`, tried in order until the stand-in
fits (`extract` by default; `mask_tool_results`, `mask_observations`, `middle_cut`:
middleware/condensing/strategies.py); an extraction that fails on every rung of the ladder
(a transient failure is tried once more first) falls back to observation masking, then to a
middle cut, never to an error. Whatever a strategy made is cached the same way, with its name
(`HistoryEntry.strategy`), so the splice reuses it and the next growth starts from it.

An extraction's input is bounded (`context.max_extraction_input_tokens`, 64k by default, and
what the request may still spend on its own calls: kernel/spending.py): when the turns to
extract are larger, the newest of them within the bound are extracted and the older ones are
kept only as quoted facts, instead of an unbounded run of calls in one request; a message
larger than the bound is never sent to a model whole. When the request may not make even one
call, the history is masked or cut without a model, and the request's notes say which
(`bound`, `bound-roads`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kernel import metrics
from kernel.config import ModelEntry
from kernel.recall import History
from kernel.services import Services
from kernel.spending import OverBudget, Spend
from kernel.store import HistoryEntry, StoreError
from kernel.tokens import REPLY_PRIMING_TOKENS, count_messages
from kernel.types import ChatRequest, Message, RequestContext
from middleware.condensing.budget import Budget, budget_for
from middleware.condensing.cutting import cut_tail
from middleware.condensing.extraction import (
    MIN_CHUNK_TOKENS,
    PROMPT_VERSION,
    BadExtraction,
    Extraction,
)
from middleware.condensing.ladder import (
    Rung,
    condense_message,
    extract_on_ladder,
    extraction_room,
    ladder_for,
)
from middleware.condensing.ledger import Previous, Rendered
from middleware.condensing.prompt import map_prompt
from middleware.condensing.slots import Found, look_up
from middleware.condensing.split import (
    Split,
    context_message,
    partition,
    split_history,
    system_indices,
)
from middleware.condensing.strategies import (
    StrategyName,
    masked_history,
    middle_cut_history,
    strategy_order,
)

log = logging.getLogger("overspill.condense")


@dataclass(frozen=True, slots=True)
class Plan:
    """What a condensed request will keep, for one model and window."""

    split: Split
    budget: Budget
    counts: tuple[int, ...]
    scale: float
    tail_budget: int
    overhead: int = 0
    """Raw tokens of the request's tool definitions (a part of every prompt, like the system
    messages)."""

    def tokens(self, indices: Sequence[int]) -> int:
        """Estimated upstream tokens of some messages (scaled by the known correction)."""
        return int(sum(self.counts[i] for i in indices) * self.scale)


@dataclass(frozen=True, slots=True)
class StandIn:
    """The message that replaces the historical part, and how it was made."""

    message: Message
    action: str
    extraction: Extraction | None
    elsewhere: HistoryEntry | None = None
    """An entry another request or replica grew for this conversation while this one waited
    for its flight, reused as it is (its end may differ from the plan's: re-split for it)."""


class Condenser:
    """Plans, caches and extracts; every layer's, sharing the services' store and estimator."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.estimator = services.estimator

    async def window(self, entry: ModelEntry, stated: int | None = None) -> int | None:
        """The window to plan for: the known one, lowered to what an upstream `stated`."""
        found = await self.services.windows.of(entry)
        known = found.tokens if found else None
        if stated is None:
            return known
        return min(known, stated) if known else stated

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
        counts = counts if counts is not None else self.estimator.counts(entry, request.messages)
        if len(counts) != len(request.messages):
            raise ValueError(f"{len(counts)} counts for {len(request.messages)} messages")
        system = system_indices(request.messages, len(counts))
        overhead = self.estimator.count_tools(entry, request.body.get("tools"))
        tokens = sum(counts[i] for i in system) + overhead
        budget = budget_for(entry, window, request.body, int(tokens * scale))
        tail_budget = budget.share(intact_share or entry.context.intact_share)
        split = split_history(
            request.messages, counts, tail_budget=int(tail_budget / scale), system=system
        )
        return Plan(split, budget, counts, scale, tail_budget, overhead)

    def history(self, ctx: RequestContext, request: ChatRequest) -> History:
        """The request's messages with what its conversation's last turns derived (chains,
        counts): a turn checks and counts only what it adds (kernel/recall.py)."""
        held = ctx.derived.get("history")
        if isinstance(held, History) and held.messages is request.messages:
            return held
        made = self.services.recall.history(ctx.tenant, ctx.conversation_id, request.messages)
        ctx.derived["history"] = made
        return made

    def chained(self, ctx: RequestContext, request: ChatRequest) -> History:
        """The messages whose chain says which history an extraction stands for: the client's
        own (`RequestContext.unmasked`) when a layer sent placeholders in place of some, else
        the request's. Remembered apart from the sent ones (kernel/recall.py)."""
        client = _client_messages(ctx, request)
        if client is None:
            return self.history(ctx, request)
        held = ctx.derived.get("client-history")
        if isinstance(held, History) and held.messages is client:
            return held
        key = f"{ctx.conversation_id}\x00client"
        made = self.services.recall.history(ctx.tenant, key, client)
        ctx.derived["client-history"] = made
        return made

    @staticmethod
    def readable(ctx: RequestContext, request: ChatRequest) -> ChatRequest:
        """`request` with the client's own messages when a layer sent placeholders in place of
        some (`RequestContext.unmasked`): what an extraction reads."""
        client = _client_messages(ctx, request)
        return request if client is None else request.with_messages(client)

    @staticmethod
    def readable_messages(ctx: RequestContext, request: ChatRequest) -> Sequence[Message]:
        """`readable`'s messages, with no request built: what a quote reads."""
        client = _client_messages(ctx, request)
        return request.messages if client is None else client

    def counts(
        self, ctx: RequestContext, request: ChatRequest, entry: ModelEntry
    ) -> tuple[int, ...]:
        """Each of the request's messages' raw token count for `entry`'s model."""
        return self.history(ctx, request).counts(self.estimator.counter(entry))

    async def cached(self, ctx: RequestContext, request: ChatRequest) -> HistoryEntry | None:
        """The stored entry that applies to the whole request, else the conversation's first
        one (to say why it missed); None when there is none or the store fails (logged)."""
        found = await self.look_up(ctx, request, len(request.messages))
        return found.entry or found.first

    async def look_up(self, ctx: RequestContext, request: ChatRequest, end: int) -> Found:
        """The conversation's entry valid for `request.messages[:end]`, and its slot."""
        return await look_up(
            self.services.store, ctx, lambda e: self.miss_reason(e, ctx, request, end) is None
        )

    def miss_reason(
        self, cached: HistoryEntry, ctx: RequestContext, request: ChatRequest, end: int
    ) -> str | None:
        """Why a cached extraction does not apply to this request (None: it applies)."""
        if cached.model_id != request.model:
            return f"model changed ({cached.model_id} → {request.model})"
        if cached.prompt_version != PROMPT_VERSION:
            return f"extraction prompt changed ({cached.prompt_version} → {PROMPT_VERSION})"
        if cached.historical_end_index > end:
            return "the request is shorter than the summarised prefix"
        history = self.chained(ctx, request)
        if not history.chain_matches(cached.historical_end_index, PROMPT_VERSION, cached.chain):
            return "the summarised messages were edited or the history branched"
        return None

    async def stand_in(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        plan: Plan,
        *,
        store_fallback: bool = True,
        reuse_elsewhere: bool = False,
        seen: HistoryEntry | None = None,
    ) -> StandIn:
        """The extraction for `plan`'s historical part: reused, extended, made, or cut.

        A fallback (a strategy the model's `strategies` did not list, used because they could
        not condense the history) is stored only with `store_fallback`: a background growth
        keeps the previous entry rather than replace it with a cut. With `reuse_elsewhere`,
        an entry valid for the request other than the one the request started with (`seen`)
        was stored by someone else since, and is used as it is (`StandIn.elsewhere`): two
        replicas whose estimates differ by a few tokens plan ends a message apart, and the
        second would otherwise extract the same conversation again."""
        end = plan.split.historical_end
        replaced = len(plan.split.historical)
        whole = len(request.messages)
        async with self.services.store.single_flight(ctx.tenant, ctx.conversation_id):
            found = await self.look_up(ctx, request, end)
            previous = found.entry
            if previous is not None and previous.historical_end_index == end:
                metrics.extraction_made(entry.model_name, "reused")
                return StandIn(context_message(previous.extraction, replaced), "reused", None)
            if reuse_elsewhere:
                now = (await self.look_up(ctx, request, whole)).entry
                if now is not None and not _same_entry(now, seen):
                    metrics.extraction_made(entry.model_name, "reused")
                    stood_for = len(partition(request.messages, now.historical_end_index)[1])
                    message = context_message(now.extraction, stood_for)
                    return StandIn(message, "reused", None, elsewhere=now)
            extraction = await self._condense(request, ctx, entry, plan, previous)
            metrics.extraction_made(entry.model_name, _result(extraction))
            if extraction.cut:
                log.warning(
                    "the history was cut in the middle to fit",
                    extra={"request_id": ctx.request_id, "conversation": ctx.conversation_id},
                )
            if store_fallback or extraction.strategy in entry.context.strategies:
                await self._save(self._entry(request, ctx, entry, extraction, plan, found.slot))
        message = context_message(extraction.text, replaced, cut=extraction.cut)
        return StandIn(message, _action(extraction), extraction)

    async def shrink_oversized(
        self, messages: list[Message], plan: Plan, entry: ModelEntry, spend: Spend
    ) -> list[str]:
        """Condense, in place, tail messages larger than the intact share (on the ladder);
        `index:how` for each message that changed."""
        others = plan.tokens(plan.split.tail)
        rungs: list[Rung] | None = None
        done = []
        for index in plan.split.tail:
            content = messages[index].get("content")
            own = plan.tokens((index,))
            if not isinstance(content, str) or own <= plan.tail_budget:
                continue
            rungs = rungs or await self.rungs(entry, plan, spend)
            condensed = await condense_message(
                content,
                share_tokens=max(64, int((plan.tail_budget - (others - own)) / plan.scale)),
                rungs=rungs,
                focus=latest_question(messages),
                model=entry.litellm_params.upstream_model,
            )
            if condensed.bound is not None:
                spend.took("message:cut", condensed.bound)
            if condensed.how != "unchanged":
                messages[index] = {**messages[index], "content": condensed.text}
                done.append(f"{index}:{condensed.how}")
        return done

    def refit(
        self, messages: list[Message], index: int, entry: ModelEntry, plan: Plan, scale: float
    ) -> list[Message]:
        """The messages still within the plan's prompt limit at the ratio known now (`scale`).

        Extraction calls teach the estimator (an Ollama target's own counts), so the ratio
        may have risen since the plan; the stand-in at `index` is then cut (marked) to fit.
        """
        over = self.estimator.count(entry, messages) + plan.overhead
        over -= int(plan.budget.prompt_limit / scale)
        content = messages[index].get("content")
        if over <= 0 or not isinstance(content, str):
            return messages
        keep = max(16, self.estimator.count_text(entry, content) - over)
        cut = cut_tail(content, keep, entry.litellm_params.upstream_model)
        return [*messages[:index], {**messages[index], "content": cut}, *messages[index + 1 :]]

    async def rungs(self, entry: ModelEntry, plan: Plan, spend: Spend) -> list[Rung]:
        """The ladder for this request's model, its windows in counted tokens, its calls
        counted in the request's `spend`."""
        return await ladder_for(
            self.services, entry, scale=plan.scale, fallback_window=plan.budget.window,
            spend=spend,
        )  # fmt: skip

    async def _condense(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        plan: Plan,
        previous: HistoryEntry | None,
    ) -> Extraction:
        """The stand-in's text by the first of the model's strategies that fits (the
        fallbacks, masking then a middle cut, come last and the cut always fits). It reads the
        client's own messages where a layer sent placeholders in place of some (a masked tool
        result holds none of the facts the ledger keeps), counted anew."""
        readable = self.readable(ctx, request)
        counts = plan.counts
        if readable is not request:
            counts = self.chained(ctx, request).counts(self.estimator.counter(entry))
            request = readable
        earlier = _earlier(previous, ctx)
        previous = previous if earlier else None
        start = previous.historical_end_index if previous else 0
        historical = [request.messages[i] for i in plan.split.historical if i >= start]
        condensed = [request.messages[i] for i in plan.split.historical if i < start]
        positions = tuple(plan.split.historical)
        target = _target(plan, entry, self._framing(entry, plan))
        model = entry.litellm_params.upstream_model
        spend = ctx.spending()
        for name in strategy_order(entry.context.strategies):
            if name == "extract":
                made = await self._extract(
                    request, entry, plan, previous, earlier, target, spend, counts
                )
            elif name == "middle_cut":
                made = _middle_cut(historical, earlier, target, model, condensed, positions)
            else:
                masked = masked_history(
                    historical,
                    previous=earlier,
                    target_tokens=target,
                    replies=name == "mask_observations",
                    model=model,
                )
                made = _made(masked, name, earlier) if masked is not None else None
            if made is not None:
                if spend.bound is not None and made.strategy != "extract":
                    spend.took(f"history:{made.strategy}")
                return made
            log.info(
                "condensing strategy did not fit; trying the next",
                extra={"request_id": ctx.request_id, "strategy": name},
            )
        return _middle_cut(  # pragma: no cover - last
            historical, earlier, target, model, condensed, positions
        )

    async def _extract(
        self,
        request: ChatRequest,
        entry: ModelEntry,
        plan: Plan,
        previous: HistoryEntry | None,
        earlier: Previous | None,
        target: int,
        spend: Spend,
        counts: Sequence[int],
    ) -> Extraction | None:
        """An extraction on the ladder within what the request may still spend (growing
        `previous`, whose records `earlier` holds), or None when no rung managed or not one
        call may go (logged; the next strategy takes over). `counts`: each of the request's
        messages' tokens (the client's own where they differ from what `plan` counted)."""
        start = previous.historical_end_index if previous else 0
        historical = [request.messages[i] for i in plan.split.historical if i >= start]
        counts = [counts[i] for i in plan.split.historical if i >= start]
        rungs = await self.rungs(entry, plan, spend)
        focus = latest_question(request.messages)
        model = entry.litellm_params.upstream_model
        limit = entry.context.max_extraction_input_tokens
        usable = next((rung for rung in rungs if rung.room >= MIN_CHUNK_TOKENS), None)
        if usable is not None:
            overhead = count_messages(map_prompt("", max_words=999, earlier_notes="-"), model)
            room = extraction_room(spend, usable, target, overhead)
            if room < min(limit, sum(counts)):
                spend.held_back(spend.why_not(room + overhead + MIN_CHUNK_TOKENS) or "tokens")
            limit = min(limit, room)
        older, newer = bounded(historical, counts, limit)
        if not newer:
            log.info("no extraction: the request's own-call bound leaves no room",
                     extra={"model": entry.model_name, "bound": spend.bound})  # fmt: skip
            return None
        if older and spend.bound is not None:
            spend.took("history:extraction-bounded")
        try:
            return await extract_on_ladder(
                newer,
                rungs=rungs,
                target_tokens=target,
                previous=earlier,
                focus=focus,
                model=model,
                beyond_bound=older,
                condensed=[request.messages[i] for i in plan.split.historical if i < start],
                positions=tuple(plan.split.historical),
                fallback=False,
            )
        except OverBudget as error:
            spend.held_back(error.bound)
            log.warning("extraction stopped by the request's own-call bound; falling back",
                        extra={"bound": error.bound})  # fmt: skip
            return None
        except BadExtraction as error:
            log.warning("extraction failed; falling back", extra={"error": str(error)})
            return None

    def _framing(self, entry: ModelEntry, plan: Plan) -> int:
        """Tokens the stand-in message costs around its extraction text."""
        replaced = len(plan.split.historical)
        return self.estimator.counter(entry).count_message(context_message("", replaced, cut=True))

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
        entry: ModelEntry,
        extraction: Extraction,
        plan: Plan,
        slot: str,
    ) -> HistoryEntry:
        end = plan.split.historical_end
        return HistoryEntry(
            tenant=ctx.tenant,
            conversation_id=slot,
            model_id=request.model,
            historical_end_index=end,
            message_count=len(request.messages),
            extraction=extraction.text,
            chain=self.chained(ctx, request).chain(end, PROMPT_VERSION),
            prompt_version=PROMPT_VERSION,
            tokens_before=plan.tokens(range(end)),
            tokens_after=self.estimator.count_text(entry, extraction.text),
            created_at=time.time(),
            strategy=extraction.strategy,
            notes=extraction.notes,
            facts=Previous.stored(extraction.facts),
        )


def bounded(
    messages: Sequence[Message], counts: Sequence[int], limit: int
) -> tuple[list[Message], list[Message]]:
    """(older, newer): the newest whole messages within `limit` tokens, and those before;
    the bound never falls between a tool call and its results, and a newest message larger
    than the bound is never extracted (newer is then empty: it is only quoted from)."""
    used = 0
    start = len(messages)
    while start > 0 and used + counts[start - 1] <= limit:
        start -= 1
        used += counts[start]
    while 0 < start < len(messages) and messages[start].get("role") in ("tool", "function"):
        start += 1  # a tool call's results stay beside it (on the older side)
    return list(messages[:start]), list(messages[start:])


def _target(plan: Plan, entry: ModelEntry, framing: int) -> int:
    """The extraction's size: the historical share of the budget, in counted tokens, less
    the stand-in message's own framing and the reply's priming."""
    share = plan.budget.share(1 - entry.context.intact_share) / plan.scale
    return max(64, int(share) - framing - REPLY_PRIMING_TOKENS)


def _client_messages(ctx: RequestContext, request: ChatRequest) -> Sequence[Message] | None:
    """The client's own messages when a layer sent others in their place (same positions),
    else None."""
    client = ctx.unmasked
    return client if client is not None and len(client) == len(request.messages) else None


def _earlier(previous: HistoryEntry | None, ctx: RequestContext) -> Previous | None:
    """What a growth starts from: the stored extraction with its ledger's records, or None
    when there is none or its records do not validate (a corrupt record, logged: the growth
    condenses the whole history as on a miss, and the entry it stores replaces that one)."""
    if previous is None:
        return None
    try:
        return Previous.of(previous)
    except StoreError as exc:
        log.warning(
            "corrupt ledger records in the cached extraction; growing from the start",
            extra={"request_id": ctx.request_id, "conversation": ctx.conversation_id,
                   "error": str(exc)},
        )  # fmt: skip
        return None


def _same_entry(entry: HistoryEntry, other: HistoryEntry | None) -> bool:
    """Whether two reads found the same stored extraction."""
    return other is not None and (entry.historical_end_index, entry.extraction) == (
        other.historical_end_index,
        other.extraction,
    )


def _made(made: Rendered, strategy: StrategyName, earlier: Previous | None) -> Extraction:
    """A model-free strategy's text as an extraction (no calls)."""
    return Extraction(
        made.text,
        0,
        0,
        0,
        earlier is not None,
        strategy=strategy,
        notes=made.notes,
        facts=made.facts,
    )


def _middle_cut(
    messages: Sequence[Message],
    earlier: Previous | None,
    target: int,
    model: str,
    condensed: Sequence[Message],
    positions: Sequence[int],
) -> Extraction:
    """The history cut in the middle (whole units, marked), beside its quoted facts (those
    of the `condensed` messages, which `earlier` stands in for, quoted anew)."""
    made = middle_cut_history(
        messages,
        previous=earlier,
        target_tokens=target,
        model=model,
        condensed=condensed,
        positions=positions,
    )
    return replace(_made(made, "middle_cut", earlier), cut=True)


_RESULTS = {"mask_tool_results": "masked-tool-results", "mask_observations": "masked"}


def _result(extraction: Extraction) -> str:
    """The extraction's `result` label: cut, masked, masked-tool-results, incremental or
    extracted."""
    if extraction.cut:
        return "cut"
    if extraction.strategy in _RESULTS:
        return _RESULTS[extraction.strategy]
    return "incremental" if extraction.incremental else "extracted"


def _action(extraction: Extraction) -> str:
    """The `action` note for a stand-in that was made now."""
    if extraction.cut:
        return "truncated"
    if extraction.strategy != "extract":
        return "masked"
    return "extracted-incremental" if extraction.incremental else "extracted"


def report(ctx: RequestContext, stand_in: StandIn, replaced: int) -> None:
    """What a layer did, as notes (x-overspill-* headers and the request's log line)."""
    ctx.note("action", stand_in.action)
    ctx.note("messages-condensed", replaced)
    extraction = stand_in.extraction
    if extraction is not None:
        ctx.note("strategy", extraction.strategy)
    ctx.note("extraction-calls", extraction.calls if extraction else 0)
    if extraction is not None:
        ctx.note("extraction-tokens", extraction.prompt_tokens + extraction.completion_tokens)
        if extraction.bounded:
            ctx.note("extraction-bounded", extraction.bounded)


def latest_question(messages: Sequence[Message]) -> str | None:
    """The newest user message's text (the focus for extraction), when it is plain text."""
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])[:2000]
    return None
