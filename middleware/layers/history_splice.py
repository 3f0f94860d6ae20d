"""The `history_splice` layer: a cached extraction stands in, grown ahead of the wall.

When a conversation has a cache entry valid for the request's exact prefix (same model, same
extraction prompt, the summarised messages unchanged), the request is sent as system messages
+ the extraction + the messages after it, intact. Between growths that prefix is the same bytes
turn after turn, so the upstream's prompt cache keeps serving it.

With a known window (config, litellm's model map, Ollama discovery) the layer keeps the
conversation under the wall itself, with hysteresis (shares of the prompt budget, per model):

- past `context.compact_at` (0.7), once the conversation is within `LEAD_TURNS` turn of its
  own size from `grow_at`, the extraction grows AFTER the response was sent, as a background
  job of the system (single flight per conversation through the store, across replicas; the
  entry is written whole or not at all), and the next turn splices from it;
- past `context.grow_at` (0.85) the request is not sent as it is: while a growth is running
  it goes as it is if it still fits the budget (note `growth: running`), else waits for it
  (bounded by `context.max_wait_seconds`); with none running it grows its own extraction
  first. A turn that waited is counted (`overspill_compaction_waited_turns_total`, note
  `waited`). This also covers a conversation's FIRST compaction, so a known window never
  costs a failed upstream call;
- a growth plans its intact tail so the spliced request lands near `context.compact_to` (0.5),
  and at least `context.turns_per_growth` turns of the conversation's own size below
  `grow_at`, leaving room for several turns before the next one;
- after a background growth, the new spliced prompt is sent once for one token
  (`context.warm_cache`, self-hosted models by default), so the turn after a growth finds the
  new prefix in the upstream's cache like any other turn.

Between growths the spliced prefix is the same bytes, so the number of growths is the number
of times the upstream's prompt cache loses the prefix: growing late (within a turn of
`grow_at`) and landing low (`turns_per_growth` turns below) keeps them rare: on an 80-turn
conversation at a 2,500-token window, 9 prefix changes where there were 16
(tests/proxy/test_bounded.py).

Each turn says whether its spliced prefix is the one the conversation's previous turn sent
(`prefix: kept`) or why not (`prefix: changed-growth`, `changed-first`, `changed-edited`,
`changed-other`), counted in `overspill_prefix_changes_total`; this process remembers the
last prefix of `splice_memory.PREFIXES_KEPT` conversations.

With an unknown window a cached extraction is still spliced, and overflow_recovery's fail-first
stays the way in (and the safety net either way). The upstream's reported prompt size
calibrates later estimates for the model.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from kernel import metrics
from kernel.config import ModelEntry
from kernel.records import StoreError, read_facts
from kernel.services import Services
from kernel.spending import Spend
from kernel.store import HistoryEntry
from kernel.tokens import REPLY_PRIMING_TOKENS
from kernel.types import ChatRequest, ChatResponse, Message, Next, RequestContext
from middleware.condensing.condenser import Condenser, Plan, report
from middleware.condensing.prompt import content_text
from middleware.condensing.relevance import passages, pick, quoted, with_preface
from middleware.condensing.split import Split, assemble, context_message, partition, pinned_of
from middleware.layers.hysteresis import landing_share, tail_share, turn_tokens
from middleware.layers.shadow import would
from middleware.layers.splice_memory import Quote, SpliceMemory

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
    prefix: tuple[int, int] = (0, 0)
    """Which stand-in it splices: (historical end, a hash of its text); (0, 0): none."""
    turn: int = 0
    """The conversation's largest recent turn in raw tokens, or what this request added to
    the previous one when that is more (what the next request may well add)."""

    @property
    def estimate(self) -> int:
        """The estimated upstream prompt tokens."""
        return int(self.counted * self.scale)

    def past(self, share: float) -> bool:
        """Whether the request passes `share` of the prompt budget (never, window unknown)."""
        return self.limit is not None and self.estimate > self.limit * share


def _compacts(fit: Fit, ctx: RequestContext, entry: ModelEntry) -> bool:
    """Whether background compaction starts now: past the client's own threshold (in tokens)
    when it gave one, else past `context.compact_at` and due (`_due`)."""
    if ctx.compact_threshold is not None:
        return fit.limit is not None and fit.estimate > ctx.compact_threshold
    return fit.past(entry.context.compact_at) and _due(fit, entry)


class HistorySplice:
    """Replaces the summarised prefix of a long conversation with its cached extraction."""

    name: ClassVar[str] = "history_splice"

    def __init__(self, services: Services) -> None:
        self.condenser = Condenser(services)
        self.estimator = services.estimator
        self.store = services.store
        self.warm = services.warm
        self.memory = SpliceMemory()

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Splice a valid extraction; grow it first only when the request cannot fit."""
        entry = ctx.model
        if entry is None or ctx.skip_history:
            return await call_next(request, ctx)
        if len(request.messages) < entry.context.splice_min_messages and not _agent(request):
            return await call_next(request, ctx)
        cached = await self._valid(request, ctx)
        window = await self.condenser.window(entry)
        if cached is None and window is None:
            return await call_next(request, ctx)
        fit = await self._fit(request, ctx, entry, cached, window)
        if ctx.shadow:
            await self._shadow(request, ctx, entry, fit, cached, window)
            return await call_next(request, ctx)
        grown = False
        if fit.past(entry.context.grow_at):
            fit, cached, grown = await self._make_room(request, ctx, entry, fit, cached, window)
        elif _compacts(fit, ctx, entry) and entry.context.background:
            self._grow_later(request, ctx, entry)
        if cached is None and not grown:
            return await call_next(request, ctx)  # fits whole: the client's own bytes go
        self._prefix_kept(ctx, entry, fit)
        fit = self._quote_relevant(request, ctx, entry, fit, cached)
        self._note(request, ctx, entry, fit, grown)
        response = await call_next(request.spliced(fit.messages), ctx)
        await self.estimator.observe(entry, fit.counted, response.prompt_tokens())
        return response

    async def _shadow(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        fit: Fit,
        cached: HistoryEntry | None,
        window: int | None,
    ) -> None:
        """Shadow mode: what this turn would do (no growth, no store write, no call)."""
        before = int(fit.whole * fit.scale)
        if fit.past(entry.context.grow_at) and window is not None:
            plan = await self._plan(request, ctx, entry, window, cached, fit)
            if plan is not None:
                after = (
                    plan.tokens(range(len(request.messages)))
                    - plan.tokens(plan.split.historical)
                    + plan.budget.share(1 - entry.context.intact_share)
                )
                detail = f"messages={len(plan.split.historical)} tokens={before}->{after}"
                would(ctx, self.name, "would-grow-now", detail)
                return
        if fit.past(entry.context.compact_at) and entry.context.background and _due(fit, entry):
            would(ctx, self.name, "would-grow-after", f"tokens={before}")
        elif cached is not None:
            would(ctx, self.name, "would-splice", f"tokens={before}->{fit.estimate}")

    async def _valid(self, request: ChatRequest, ctx: RequestContext) -> HistoryEntry | None:
        """The cached extraction when it is valid for this request (a miss is logged)."""
        cached = await self.condenser.cached(ctx, request)
        if cached is None:
            return None
        reason = self.condenser.miss_reason(cached, ctx, request, len(request.messages))
        if reason is not None:
            ctx.derived["splice-miss"] = reason
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
        tools = self.estimator.count_tools(entry, request.body.get("tools"))
        whole = counted = REPLY_PRIMING_TOKENS + sum(counts) + tools
        replaced = 0
        messages = request.messages
        prefix = (0, 0)
        if cached is not None:
            prefix = (cached.historical_end_index, hash(cached.extraction))
            split = split_at(request.messages, cached.historical_end_index)
            stand_in = context_message(cached.extraction, len(split.historical))
            messages = tuple(assemble(request.messages, split, stand_in))
            replaced = len(split.historical)
            kept = sum(counts[i] for i in (*split.system, *split.pinned, *split.tail))
            own = self.estimator.counter(entry).count_message(stand_in)
            counted = REPLY_PRIMING_TOKENS + kept + own + tools  # = estimator.count(...)
        limit = None
        if window is not None:
            plan = self.condenser.plan(request, entry, window=window, scale=scale, counts=counts)
            limit = plan.budget.prompt_limit
        turn = max(turn_tokens(request.messages, counts), self._added(ctx, request, entry, counts))
        return Fit(messages, counted, replaced, limit, scale, whole, prefix, turn)

    def _added(
        self, ctx: RequestContext, request: ChatRequest, entry: ModelEntry, counts: Sequence[int]
    ) -> int:
        """The raw tokens this request added to the conversation's previous one this process
        saw (0 when none): a client that sends several turns at a time grows by that much."""
        known = self.condenser.history(ctx, request).known
        if known is None or known.length >= len(counts):
            return 0
        return sum(counts[known.length :])

    async def _make_room(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        fit: Fit,
        cached: HistoryEntry | None,
        window: int | None,
    ) -> tuple[Fit, HistoryEntry | None, bool]:
        """Past `grow_at`: with a growth running, go as it is while it still fits the budget,
        else wait for it; with none, grow now (the turn waits and is counted). Returns the new
        fit, the entry it uses, and whether it grew."""
        assert window is not None
        if await self.store.flight_busy(ctx.tenant, ctx.conversation_id):
            if not fit.past(1.0):
                ctx.note("growth", "running")  # the next turn splices what it makes
                return fit, cached, False
            metrics.compaction_waited(entry.model_name, "job")
            ctx.note("waited", "job")
            await self._wait_for_flight(ctx, entry)
            cached = await self._valid(request, ctx) or cached
            fit = await self._fit(request, ctx, entry, cached, window)
            if not fit.past(entry.context.grow_at):
                return fit, cached, False
        plan = await self._plan(request, ctx, entry, window, cached, fit)
        if plan is None:
            return fit, cached, False  # nothing left to condense: overflow_recovery's turn
        if "waited" not in ctx.notes:
            metrics.compaction_waited(entry.model_name, "extraction")
            ctx.note("waited", "extraction")
        made = await self.condenser.stand_in(
            request, ctx, entry, plan, reuse_elsewhere=True, seen=cached
        )
        if made.elsewhere is not None:  # grown by another request while this one waited
            fit = await self._fit(request, ctx, entry, made.elsewhere, window)
            return fit, made.elsewhere, False
        report(ctx, made, len(plan.split.historical))
        messages = tuple(assemble(request.messages, plan.split, made.message))
        counted = self.estimator.count(entry, messages, request.body.get("tools"))
        stored = await self._valid(request, ctx)
        text = stored.extraction if stored else str(made.message.get("content"))
        prefix = (plan.split.historical_end, hash(text))
        grown = Fit(messages, counted, len(plan.split.historical), fit.limit, fit.scale,
                    fit.whole, prefix, fit.turn)  # fmt: skip
        return grown, stored, True

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
        fit: Fit,
    ) -> Plan | None:
        """The growth's plan: its tail sized so the spliced request lands near `compact_to`
        and `turns_per_growth` turns (of `fit.turn` tokens) below `grow_at`; None when it
        would condense nothing beyond what `cached` already covers."""
        scale = await self.estimator.scale(entry)
        counts = self.condenser.counts(ctx, request, entry)
        first = self.condenser.plan(request, entry, window=window, scale=scale, counts=counts)
        landing = landing_share(entry, first, fit.turn)
        share = tail_share(entry, first, cached, landing)
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
            unmasked=ctx.unmasked,
        )
        job_ctx.spend = Spend(ctx.tenant, job_ctx.notes)  # bounded like a request of its own
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
        fit = await self._fit(request, ctx, entry, cached, window)
        plan = await self._plan(request, ctx, entry, window, cached, fit)
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
                "notes": ctx.notes,
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
        await self.warm(request.spliced(fit.messages), entry, ctx.spend)

    def _quote_relevant(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        fit: Fit,
        cached: HistoryEntry | None,
    ) -> Fit:
        """The spliced request with the condensed turns that bear on its latest user message
        quoted before that message (relevance.py), in the room the splice leaves below
        `context.grow_at` (so a quote never makes the next turn grow), at most
        `context.relevant_share` of the budget; a turn holding a statement the extraction's
        ledger records as replaced by a later one is not quoted (`_replaced`). The latest
        user message is the conversation's newest, so the prefix the upstream cached from the
        last turn is kept; the rounds of an agent's loop after it send the block quoted on the
        first while it fits the budget (`Quote`), so the upstream keeps that message and the
        tool traffic after it cached too."""
        end = fit.prefix[0]
        at = _latest_user(fit.messages)
        if fit.limit is None or not end or at is None or entry.context.relevant_share <= 0:
            return fit
        share = min(entry.context.relevant_share, entry.context.grow_at)
        room = min(fit.limit * share, fit.limit * entry.context.grow_at - fit.estimate)
        room = int(room / fit.scale)
        question = content_text(fit.messages[at])
        if not question:
            return fit
        client = self.condenser.readable_messages(ctx, request)
        asked = _latest_user(client)
        key = (ctx.tenant, ctx.conversation_id)
        quote = self.memory.quote(key, fit.prefix, client, asked)
        if quote is not None and (fit.counted + quote.added) * fit.scale > fit.limit:
            quote = None  # a longer tool traffic leaves it no room: picked anew
        if quote is None:
            if room <= 0:
                return fit
            read = self.memory.condensed(key, cached, client, end)
            stop = len(client) if asked is None else max(asked, end)
            found, newest = read.found, passages(client, range(end, stop), read.stamp)
            counter = self.estimator.counter(entry)
            replaced = _replaced(cached.facts) if cached is not None else frozenset()
            later = client[end:]
            picked = pick(question, found, room, counter.count_text, replaced, later, newest)
            if not picked:
                return fit
            block = quoted(picked)
            quote = Quote(block, counter.count_text(block) + 1, len(picked))
            self.memory.keep_quote(key, fit.prefix, client, asked, quote)
        messages = list(fit.messages)
        messages[at] = with_preface(messages[at], quote.block)
        ctx.note("relevant-turns", str(quote.turns))
        ctx.derived["relevant-turns"] = quote.block
        return replace(fit, messages=tuple(messages), counted=fit.counted + quote.added)

    def _prefix_kept(self, ctx: RequestContext, entry: ModelEntry, fit: Fit) -> None:
        """Note whether the spliced prefix is the one the conversation's last turn sent, or
        why it changed (counted)."""
        last = self.memory.last_prefix((ctx.tenant, ctx.conversation_id), fit.prefix)
        if last == fit.prefix:
            ctx.note("prefix", "kept")
            return
        if "splice-miss" in ctx.derived:
            why = "edited" if "edited" in str(ctx.derived["splice-miss"]) else "other"
        elif last is None or last == (0, 0):
            why = "first"
        else:
            why = "growth" if fit.prefix[0] > last[0] else "other"
        ctx.note("prefix", f"changed-{why}")
        metrics.prefix_changed(entry.model_name, why)

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


def _agent(request: ChatRequest) -> bool:
    """Whether the conversation holds tool results (an agent's: few messages can be large)."""
    return any(message.get("role") == "tool" for message in request.messages)


LEAD_TURNS = 1
"""A background growth starts when this many more turns would reach `grow_at`: late enough
that few turns pile up behind the growth's intact tail before its prefix is spliced (each
one shortens the next prefix's life by a turn), early enough that it is usually done by then
(it runs after the response, while the user reads); a turn that comes first goes with the
prefix it has while that fits the budget, and waits only when it does not."""


def _due(fit: Fit, entry: ModelEntry) -> bool:
    """Whether a background growth should start now (past `compact_at`, checked before):
    the conversation is within `LEAD_TURNS` turns of `grow_at`."""
    if fit.limit is None:
        return True
    ahead = (fit.counted + LEAD_TURNS * fit.turn) * fit.scale
    return ahead > fit.limit * entry.context.grow_at


def split_at(messages: tuple[Message, ...], end: int) -> Split:
    """The split a cached entry made: system messages and the summarised rest before `end`."""
    system, historical = partition(messages, end)
    return Split(system, historical, tuple(range(end, len(messages))), pinned_of(messages, end))


def _latest_user(messages: Sequence[Message]) -> int | None:
    """Where the newest user message is, when nothing but tool traffic follows it (a later
    assistant reply means the client is not asking anything new)."""
    for index in range(len(messages) - 1, -1, -1):
        role = messages[index].get("role")
        if role == "user":
            return index
        if role == "system" or (role == "assistant" and not messages[index].get("tool_calls")):
            return None
    return None


@functools.lru_cache(maxsize=64)
def _replaced(facts: str) -> frozenset[str]:
    """The statements an extraction's ledger records as replaced by later ones
    (``supersedes``), read from its stored records; none when they do not validate (the next
    growth logs that and starts over). Cached by the records' text: a conversation's entry
    comes back with every turn, and only a growth changes it (64 entries of at most ~20 KB
    of records: the busiest conversations', about a megabyte)."""
    try:
        return frozenset(fact.supersedes for fact in read_facts(facts) if fact.supersedes)
    except StoreError:
        return frozenset()
