"""The `documents` layer: retrieved documents fitted into the budget with the conversation.

Clients send `documents: [{id?, text, score?, source?, language?}]` and optionally
`overspill: {compact: [languages]}` beside `messages`. Per request:

1. documents are ranked by score (unscored ones after, in the order sent), their language is
   detected when absent, and the first matching compaction rule decides: `always` compacts,
   `threshold` compacts when adding the raw block would pass `threshold x budget`, `demand`
   compacts when `overspill.compact` names the language; no rule, never;
2. the budget B is `documents.max_context_tokens`, capped at the model's window minus output
   reserve, safety margin and system prompt; it covers the conversation and the documents;
3. when the batch does not fit the room the conversation leaves, top_k keeps the
   `clamp(room / avg_chunk_tokens, 2, 10)` best documents; when the kept documents alone
   exceed B they are chunked and their chunks most relevant to the question go,
   with their neighbours while they fit; only when not one chunk fits B is the request
   refused (`documents_budget_exceeded`, 400);
4. documents over `condense_share` of B are condensed one by one by an internal call focused
   on the user's latest question (by default past 85% of B);
5. while the conversation + batch exceed B, the existing context is compacted (earlier
   batches condensed, then history extracted), at most `max_passes` passes, stopping when a
   pass does not shrink it; whatever still does not fit drops the least relevant documents;
6. the batch is one `user` message (the divider, then one `--- DOCUMENT ---` block per
   document) inserted just before the last user message.

Every model call here is one of the request's own calls, against the same bound as the
history's (kernel/spending.py): when condensing the documents by model would pass what the
request may still spend, they go as their chunks most relevant to the question instead
(`documents:excerpts`), and an earlier batch is cut in the middle (`documents:cut`).

With neither the model's window nor `max_context_tokens` known, the documents go as they are,
and an overflow that states the window (which the router then remembers for the model) makes
this layer place them again within it: overflow_recovery lets that first overflow through
(`RequestContext.outer_replaces`) rather than condense a history full of documents.

Where the batch goes and why: `middleware/documents/plan.py`; chunks: `excerpts.py`; the
request extension: `request.py`; earlier batches (kept in the store): `batches.py`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from kernel import metrics
from kernel.config import ModelEntry
from kernel.errors import ContextWindowExceeded, DocumentsBudgetExceeded
from kernel.records import DocumentBatches, StoreError
from kernel.services import Services
from kernel.spending import BoundName, Spend
from kernel.tokens import count_messages
from kernel.types import ChatRequest, ChatResponse, Message, Next, RequestContext
from middleware.condensing.budget import DEFAULT_OUTPUT_RESERVE, budget_for, requested_output
from middleware.condensing.condenser import Condenser, latest_question
from middleware.condensing.cutting import cut_middle
from middleware.condensing.ladder import Rung, condense_message, ladder_for
from middleware.condensing.prompt import condense_prompt
from middleware.condensing.split import SYSTEM_ROLES, assemble
from middleware.documents.batches import (
    Batch,
    insert_before_last_user,
    new_batch,
    still_valid,
    weave,
)
from middleware.documents.excerpts import excerpts
from middleware.documents.plan import (
    BatchPlan,
    Count,
    arrange,
    drop_to_fit,
    most_relevant_last,
    place,
    plan_batch,
    render_batch,
)
from middleware.documents.request import Document, parse_compact, parse_documents
from middleware.layers.shadow import would

log = logging.getLogger("overspill.documents")

UNBUDGETED = 1 << 40
"""The budget when neither the model's window nor max_context_tokens is known."""


@dataclass(slots=True)
class _Turn:
    """One request's working state: its messages (earlier batches woven in) and the plan."""

    request: ChatRequest
    entry: ModelEntry
    messages: list[Any]
    batches: list[Batch]
    plan: BatchPlan
    window: int
    slack: int
    """How much smaller B is than the window's own budget (max_context_tokens)."""
    scale: float
    steps: list[str]
    passes: int = 0


class Documents:
    """Fits the request's `documents` into the budget with the conversation (module doc)."""

    name: ClassVar[str] = "documents"

    def __init__(self, services: Services) -> None:
        self.services = services
        self.settings = services.settings.documents
        self.estimator = services.estimator
        self.condenser = Condenser(services)
        self.store = services.store

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Place the documents (planned, compacted, condensed as needed) and call on."""
        if "documents" not in request.extensions or ctx.model is None:
            return await call_next(request, ctx)
        documents = parse_documents(request.extensions["documents"])
        options = request.extensions.get("overspill") or {}
        demanded = parse_compact(options.get("compact") if isinstance(options, dict) else None)
        extensions = {k: v for k, v in request.extensions.items() if k != "documents"}
        request = dataclasses.replace(request, extensions=extensions)
        earlier = still_valid(await self._earlier(ctx), request.messages)
        if not documents:  # `documents: []`: earlier batches stay where they were
            return await call_next(request.with_messages(weave(request.messages, earlier)), ctx)
        if ctx.shadow:
            return await call_next(await self._shadow(request, ctx, earlier, documents), ctx)
        turn = await self._plan(request, ctx, earlier, documents, demanded)
        if turn.window != UNBUDGETED:
            await self._fit(turn, ctx)
            return await call_next(await self._finish(turn, ctx), ctx)
        ctx.outer_replaces = self.name  # no window: sent whole, placed again on an overflow
        try:
            return await call_next(await self._finish(turn, ctx), ctx)
        except ContextWindowExceeded as overflow:
            ctx.outer_replaces = None
            if not overflow.limit or overflow.estimated:
                raise
            log.info("documents placed again within the window the upstream stated",
                     extra={"request_id": ctx.request_id, "window": overflow.limit})  # fmt: skip
            turn = await self._plan(request, ctx, earlier, documents, demanded,
                                    stated=overflow.limit)  # fmt: skip
            turn.steps.insert(0, f"replaced={overflow.limit}")
        await self._fit(turn, ctx)
        return await call_next(await self._finish(turn, ctx), ctx)

    async def _shadow(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        earlier: list[Batch],
        documents: Sequence[Document],
    ) -> ChatRequest:
        """Shadow mode: report the plan; send every document whole, in the order sent, as one
        plain batch (nothing ranked, compacted, condensed or stored)."""
        try:
            turn = await self._plan(request, ctx, earlier, documents, frozenset())
        except DocumentsBudgetExceeded as refused:
            would(ctx, self.name, "would-refuse", refused.message[:200])
        else:
            plan, steps = turn.plan, list(turn.steps)
            if plan.tokens > self.settings.condense_share * plan.budget:
                steps.append(f"condense={len(plan.placed)}")
            if not plan.fits:
                steps.append("compact-context")
            detail = f"{len(plan.placed)}/{plan.received} {'+'.join(steps) or 'raw'}"
            would(ctx, self.name, "would-append", f"{detail} tokens={plan.tokens}")
        plain = [place(doc, doc.language or "text", "none", "raw", doc.text, _uncounted)
                 for doc in documents]  # fmt: skip
        batch = new_batch(request.messages, render_batch(plain, self.settings.divider))
        woven = weave(request.messages, earlier)
        return request.with_messages(insert_before_last_user(woven, batch.message))

    async def _earlier(self, ctx: RequestContext) -> tuple[Batch, ...]:
        """The conversation's earlier batches from the store (none when it fails: logged)."""
        try:
            found = await self.store.get_batches(ctx.tenant, ctx.conversation_id)
        except StoreError as exc:
            log.error("documents: store read failed; no earlier batches", extra={"error": str(exc)})
            return ()
        return found.batches if found else ()

    async def _remember(self, ctx: RequestContext, batches: Sequence[Batch]) -> None:
        """Store the conversation's batches for its later turns (a failure is logged)."""
        record = DocumentBatches(
            tenant=ctx.tenant,
            conversation_id=ctx.conversation_id,
            batches=tuple(batches),
            created_at=time.time(),
        )
        try:
            await self.store.put_batches(record)
        except StoreError as exc:
            log.error("documents: store write failed; batches not kept", extra={"error": str(exc)})

    async def _plan(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        batches: list[Batch],
        documents: Sequence[Document],
        demanded: frozenset[str],
        stated: int | None = None,
    ) -> _Turn:
        """Weave in earlier batches, size the budget, plan the batch (may raise the 400);
        `stated`: the window an upstream's overflow stated."""
        entry = ctx.model
        assert entry is not None
        messages = weave(request.messages, batches)
        scale = await self.estimator.scale(entry)
        budget, window, derived = await self._budget(request, entry, messages, scale, stated)
        plan = plan_batch(
            documents,
            self.settings,
            budget=budget,
            context_tokens=self._context_tokens(entry, messages, scale),
            demanded=demanded,
            count=self._counter(entry, scale, ctx),
            question=latest_question(request.messages),
        )
        steps = [f"top_k={plan.top_k}"] if plan.top_k else []
        if any(p.how == "chunked" for p in plan.placed):
            steps.append("chunked")
        return _Turn(
            request, entry, messages, batches, plan, window, derived - budget, scale, steps
        )

    async def _budget(
        self,
        request: ChatRequest,
        entry: ModelEntry,
        messages: Sequence[Message],
        scale: float,
        stated: int | None = None,
    ) -> tuple[int, int, int]:
        """B (conversation + documents), the window, and the window's own budget (for an
        Ollama target, `num_ctx x 0.75 - reserve`: see condensing/budget.py)."""
        counts = self.estimator.counts(entry, messages)
        system = int(sum(c for c, m in zip(counts, messages, strict=True) if _is_system(m)) * scale)
        configured = self.settings.max_context_tokens
        known = await self.condenser.window(entry, stated)
        if known is None and configured is None:
            return UNBUDGETED, UNBUDGETED, UNBUDGETED
        reserve = requested_output(request.body) or DEFAULT_OUTPUT_RESERVE
        window = known or (configured or 0) + reserve + system
        derived = budget_for(entry, window, request.body, system).input
        return (min(configured, derived) if configured else derived), window, derived

    def _context_tokens(self, entry: ModelEntry, messages: Sequence[Message], scale: float) -> int:
        """The conversation's estimated tokens, without system messages (calibrated)."""
        counts = self.estimator.counts(entry, messages)
        raw = 3 + sum(c for c, m in zip(counts, messages, strict=True) if not _is_system(m))
        return int(raw * scale)

    async def _fit(self, turn: _Turn, ctx: RequestContext) -> None:
        """Condense documents past `condense_share` of the budget, then compact the existing
        context, then drop what still does not fit."""
        plan = turn.plan
        if plan.tokens > self.settings.condense_share * plan.budget:
            turn.plan, how = await self._condense_documents(turn, ctx)
            turn.steps.append(how)
        while not turn.plan.fits and turn.passes < self.settings.max_passes:
            before = turn.plan.context_tokens
            await self._compact_context(turn, ctx)
            turn.passes += 1
            turn.plan = replace(
                turn.plan,
                context_tokens=self._context_tokens(turn.entry, turn.messages, turn.scale),
            )
            if turn.plan.context_tokens >= before:
                break
        if turn.passes:
            turn.steps.append(f"context_compacted={turn.passes}")
        if not turn.plan.fits:
            kept = drop_to_fit(turn.plan)
            turn.steps.append(f"dropped={len(turn.plan.placed) - len(kept.placed)}")
            turn.plan = kept

    async def _condense_documents(self, turn: _Turn, ctx: RequestContext) -> tuple[BatchPlan, str]:
        """Each document condensed to its share by an internal call focused on the question;
        their chunks most relevant to it instead when those calls would pass what the request
        may still spend (`excerpted`). Returns the plan and the step's name."""
        plan = turn.plan
        room = plan.budget - plan.context_tokens
        target = min(int(self.settings.condense_share * plan.budget), max(room, plan.budget // 2))
        spend = ctx.spending()
        rungs = await self._rungs(turn, spend)
        focus = latest_question(turn.request.messages)
        model = turn.entry.litellm_params.upstream_model
        count = self._counter(turn.entry, turn.scale, ctx)
        refused = self._unaffordable(plan, target, spend, focus, model)
        if refused is not None:
            spend.took("documents:excerpts", refused)
            chosen = excerpts(
                plan.placed, focus, budget=plan.budget, target=target, limit=target, count=count
            )
            return replace(plan, placed=chosen), "excerpted"
        placed = []
        for p in plan.placed:
            share = max(32, p.tokens_after * target // max(1, plan.tokens))
            done = await condense_message(
                p.text, share_tokens=share, rungs=rungs, focus=focus, model=model
            )
            if done.bound is not None:
                spend.took("documents:cut", done.bound)
            condensed = place(p.doc, p.language, p.policy, "condensed", done.text, count)
            placed.append(replace(condensed, tokens_before=p.tokens_before))
        return replace(plan, placed=tuple(placed)), "condensed"

    def _unaffordable(
        self, plan: BatchPlan, target: int, spend: Spend, focus: str | None, model: str
    ) -> BoundName | None:
        """Which bound condensing every document over its share would pass (one call each,
        its text and the prompt around it), or None when the request may spend that."""
        overhead = count_messages(condense_prompt("", max_words=9, focus=focus), model)
        calls = tokens = 0
        for p in plan.placed:
            if p.tokens_after > max(32, p.tokens_after * target // max(1, plan.tokens)):
                calls += 1
                tokens += p.tokens_after + overhead
        if calls > spend.calls_left():
            return "calls"
        return spend.why_not(tokens) if calls else None

    async def _compact_context(self, turn: _Turn, ctx: RequestContext) -> None:
        """One pass: earlier batches condensed if any are raw, else the history extracted."""
        raw = [b for b in turn.batches if not b.condensed]
        if raw:
            spend = ctx.spending()
            turn.batches = [await self._condense_batch(turn, b, spend) if not b.condensed else b
                            for b in turn.batches]  # fmt: skip
            turn.messages = weave(turn.request.messages, turn.batches)
            return
        room_window = max(256, turn.window - turn.plan.tokens - turn.slack)
        request = turn.request.with_messages(turn.messages)
        plan = self.condenser.plan(request, turn.entry, window=room_window, scale=turn.scale)
        if not plan.split.historical:
            return
        stand_in = await self.condenser.stand_in(request, ctx, turn.entry, plan)
        turn.messages = assemble(turn.messages, plan.split, stand_in.message)

    async def _condense_batch(self, turn: _Turn, batch: Batch, spend: Spend) -> Batch:
        """An earlier batch condensed to half its size, focused on the latest question (cut
        in the middle, no model, when the request may not spend the call)."""
        text = str(batch.message.get("content", ""))
        model = turn.entry.litellm_params.upstream_model
        share = max(32, self.estimator.count_text(turn.entry, text) // 2)
        refused = spend.why_not(self.estimator.count_text(turn.entry, text))
        if refused is not None:
            spend.took("documents:cut", refused)
            done_text = cut_middle(text, share, model)
        else:
            done = await condense_message(
                text,
                share_tokens=share,
                rungs=await self._rungs(turn, spend),
                focus=latest_question(turn.request.messages),
                model=model,
            )
            if done.bound is not None:
                spend.took("documents:cut", done.bound)
            done_text = done.text
        content = f"{self.settings.divider}\n[overspill: earlier documents, condensed]\n{done_text}"
        message = {"role": "user", "content": content}
        return batch.model_copy(update={"message": message, "condensed": True})

    async def _rungs(self, turn: _Turn, spend: Spend) -> list[Rung]:
        """The shared ladder: the extraction model, then the user's own model."""
        return await ladder_for(
            self.services, turn.entry, scale=turn.scale, fallback_window=turn.window,
            spend=spend,
        )  # fmt: skip

    def _counter(self, entry: ModelEntry, scale: float, ctx: RequestContext | None = None) -> Count:
        """A text's estimated tokens for this model (calibrated, rounded up); with `ctx`,
        each text is tokenized once per request (a plan counts a document several times,
        and a request with megabytes of them spent seconds counting them again)."""
        raw: dict[str, int] = {}
        if ctx is not None:
            found = ctx.derived.setdefault("documents-counts", raw)
            raw = found if isinstance(found, dict) else raw

        def count(text: str) -> int:
            known = raw.get(text)
            if known is None:
                known = raw[text] = self.estimator.count_text(entry, text)
            return int(known * scale) + 1

        return count

    async def _finish(self, turn: _Turn, ctx: RequestContext) -> ChatRequest:
        """Render and insert the batch, remember it, and report: one event, some headers."""
        plan = turn.plan
        ordered = arrange(
            plan.placed, most_relevant_last(self.settings, turn.entry.litellm_params.model)
        )
        request = turn.request
        batches = list(turn.batches)
        if ordered:
            batch = new_batch(request.messages, render_batch(ordered, self.settings.divider))
            batches.append(batch)
            turn.messages = insert_before_last_user(turn.messages, batch.message)
        await self._remember(ctx, batches)
        decision = "+".join(["appended", *turn.steps])
        self._report(turn, ctx, decision)
        return request.with_messages(turn.messages)

    def _report(self, turn: _Turn, ctx: RequestContext, decision: str) -> None:
        plan = turn.plan
        ctx.note("documents", f"{len(plan.placed)}/{plan.received}")
        ctx.note("documents-decision", decision)
        ctx.note("documents-tokens", plan.tokens)
        ctx.note("documents-budget", plan.budget)
        compacted = [p for p in plan.placed if p.how != "raw"]
        ctx.note("documents-compacted", len(compacted))
        if compacted:
            metrics.compaction(
                self.name,
                sum(p.tokens_before for p in compacted),
                sum(p.tokens_after for p in compacted),
            )
        log.info(
            "documents_budget",
            extra={
                "request_id": ctx.request_id,
                "conversation": ctx.conversation_id,
                "model": turn.request.model,
                "decision": decision,
                "budget": plan.budget,
                "context_tokens": plan.context_tokens,
                "documents_tokens": plan.tokens,
                "passes": turn.passes,
                "top_k": plan.top_k,
                "documents": [p.trace() for p in plan.placed],
            },
        )


def _uncounted(text: str) -> int:
    """No count (shadow mode's plain batch is never budgeted)."""
    return 0


def _is_system(message: Message) -> bool:
    return message.get("role") in SYSTEM_ROLES
