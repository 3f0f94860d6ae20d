"""The `documents` layer: retrieved documents fitted into the budget with the conversation.

Clients send `documents: [{id?, text, score?, source?, language?}]` and optionally
`overspill: {compact: [languages]}` beside `messages`. Per request (seeds 001, 003, 004):

1. documents are ranked by score (unscored ones after, in the order sent), their language is
   detected when absent, and the first matching compaction rule decides: `always` compacts,
   `threshold` compacts when adding the raw block would pass `threshold x budget`, `demand`
   compacts when `overspill.compact` names the language; no rule, never;
2. the budget B is `documents.max_context_tokens`, capped at the model's window minus output
   reserve, safety margin and system prompt; it covers the conversation and the documents;
3. when the batch does not fit the room the conversation leaves, seed 003's top_k keeps the
   `clamp(room / avg_chunk_tokens, 2, 10)` best documents; when the kept documents alone
   exceed B the request is refused (`documents_budget_exceeded`, 400);
4. documents over `condense_share` of B are condensed one by one by an internal call focused
   on the user's latest question (seed 001's 85% rule);
5. while the conversation + batch exceed B, the existing context is compacted (earlier
   batches condensed, then history extracted), at most `max_passes` passes, stopping when a
   pass does not shrink it; whatever still does not fit drops the least relevant documents;
6. the batch is one `user` message (the divider, then one `--- DOCUMENT ---` block per
   document) inserted just before the last user message.

Why there and why `user`: retrieved text is data, not operator instructions, so it must not
get a system message's authority (and several providers accept system text only first); next
to the question it survives Ollama's top-first truncation; and every message before it keeps
its bytes, so extraction caches and provider prompt caches stay valid. Batches placed in
earlier turns of a conversation are remembered in-process and re-inserted where they were
(while the messages before them are unchanged): they are the existing context.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import orjson

from middleware.compaction import compact, detect_language
from middleware.condense import Condenser, latest_question
from middleware.extraction import Rung, condense_message
from middleware.history import SYSTEM_ROLES, assemble, output_reserve, plan_budget
from proxy.config import ModelEntry
from proxy.documents_config import ANY_LANGUAGE, DocumentsSettings, known_languages
from proxy.documents_config import normalize_language as _language
from proxy.errors import InvalidChatRequest
from proxy.pipeline import Services
from proxy.tokens import count_text
from proxy.types import ChatRequest, ChatResponse, Message, Next, RequestContext

log = logging.getLogger("overspill.documents")

BLOCK_HEADER = "--- DOCUMENT ---"
DOCUMENT_FIELDS = ("id", "text", "score", "source", "language")
MESSAGE_OVERHEAD = 8
"""Tokens of the batch message's role and framing, and rounding slack."""
OLLAMA_PREFIXES = ("ollama_chat/", "ollama/")
UNBUDGETED = 1 << 40
"""The budget when neither the model's window nor max_context_tokens is known."""
Count = Callable[[str], int]


class DocumentsBudgetExceeded(InvalidChatRequest):
    """The request's documents alone exceed the budget: the caller's limits disagree."""

    code = "documents_budget_exceeded"

    def __init__(self, documents_tokens: int, budget: int, count: int) -> None:
        super().__init__(
            f"the {count} best documents need {documents_tokens} tokens after compaction, more "
            f"than the whole context budget of {budget} tokens (documents.max_context_tokens, "
            "else the model's window minus output reserve, system prompt and safety margin). "
            "Send fewer or smaller documents, or let overspill compact them (documents.rules, "
            "overspill.compact)",
            param="documents",
        )
        self.documents_tokens = documents_tokens
        self.budget = budget

    def headers(self) -> Mapping[str, str]:
        """The two numbers that disagree."""
        return {
            "x-overspill-documents-tokens": str(self.documents_tokens),
            "x-overspill-documents-budget": str(self.budget),
        }


@dataclass(frozen=True, slots=True)
class Document:
    """One retrieved document as the client sent it (language canonical when declared)."""

    index: int
    text: str
    id: str
    score: float | None = None
    source: str | None = None
    language: str | None = None


@dataclass(frozen=True, slots=True)
class Placed:
    """A document as planned: its language, the rule applied, its text and block tokens."""

    doc: Document
    language: str
    policy: str
    how: str
    text: str
    tokens_before: int
    tokens_after: int

    def trace(self) -> dict[str, Any]:
        """This document's part of the `documents_budget` event."""
        return {
            "id": self.doc.id,
            "language": self.language,
            "policy": self.policy,
            "compacted": self.how,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
        }


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """The documents to place (best first), against the budget and the conversation."""

    placed: tuple[Placed, ...]
    received: int
    budget: int
    context_tokens: int
    top_k: int | None

    @property
    def tokens(self) -> int:
        """What the batch message costs."""
        return batch_tokens(self.placed)

    @property
    def fits(self) -> bool:
        """Whether conversation + batch stay within the budget."""
        return self.context_tokens + self.tokens <= self.budget


# --- the request extension -------------------------------------------------------------------


def parse_documents(value: object) -> tuple[Document, ...]:
    """The `documents` extension, validated; raises InvalidChatRequest naming the field."""
    if not isinstance(value, list):
        raise InvalidChatRequest("'documents' must be an array of objects", param="documents")
    documents = tuple(_document(index, item) for index, item in enumerate(value))
    seen: dict[str, int] = {}
    for doc in documents:
        if doc.id in seen:
            where = f"documents[{doc.index}].id"
            raise InvalidChatRequest(
                f"{where!r} repeats the id {doc.id!r} of documents[{seen[doc.id]}]", param=where
            )
        seen[doc.id] = doc.index
    return documents


def _document(index: int, item: object) -> Document:
    where = f"documents[{index}]"
    if not isinstance(item, dict):
        raise InvalidChatRequest(f"{where!r} must be an object", param=where)
    for key in item:
        if key not in DOCUMENT_FIELDS:
            raise InvalidChatRequest(
                f"'{where}.{key}' is not a document field (fields: {', '.join(DOCUMENT_FIELDS)})",
                param=f"{where}.{key}",
            )
    text = item.get("text")
    if not isinstance(text, str) or not text.strip():
        raise InvalidChatRequest(
            f"'{where}.text' must be a non-empty string", param=f"{where}.text"
        )
    return Document(
        index=index,
        text=text,
        id=_id(where, item.get("id"), index),
        score=_score(where, item.get("score")),
        source=_optional_str(where, "source", item.get("source")),
        language=_declared_language(where, item.get("language")),
    )


def _id(where: str, value: object, index: int) -> str:
    if value is None:
        return f"doc-{index + 1}"
    if isinstance(value, bool) or not isinstance(value, str | int) or str(value).strip() == "":
        raise InvalidChatRequest(f"'{where}.id' must be a non-empty string", param=f"{where}.id")
    if "\n" in str(value):
        raise InvalidChatRequest(f"'{where}.id' must be one line", param=f"{where}.id")
    return str(value)


def _score(where: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidChatRequest(f"'{where}.score' must be a finite number", param=f"{where}.score")
    return float(value)


def _optional_str(where: str, key: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or "\n" in value:
        raise InvalidChatRequest(
            f"'{where}.{key}' must be a one-line string", param=f"{where}.{key}"
        )
    return value


def _declared_language(where: str, value: object) -> str | None:
    name = _optional_str(where, "language", value)
    if name is None:
        return None
    canonical = _language(name)
    if canonical is None:
        raise InvalidChatRequest(
            f"'{where}.language' {name!r} is unknown (known: {known_languages()})",
            param=f"{where}.language",
        )
    return canonical


def parse_compact(value: object) -> frozenset[str]:
    """`overspill.compact`: languages compacted on demand (`true` or `"*"`: every language)."""
    if value is None or value is False:
        return frozenset()
    if value is True or value == ANY_LANGUAGE:
        return frozenset({ANY_LANGUAGE})
    if not isinstance(value, list):
        raise InvalidChatRequest(
            "'overspill.compact' must be an array of language names, or true",
            param="overspill.compact",
        )
    names: set[str] = set()
    for index, name in enumerate(value):
        canonical = ANY_LANGUAGE if name == ANY_LANGUAGE else None
        if isinstance(name, str) and canonical is None:
            canonical = _language(name)
        if canonical is None:
            where = f"overspill.compact[{index}]"
            raise InvalidChatRequest(
                f"{where!r} must be a language name (known: {known_languages()}, *)", param=where
            )
        names.add(canonical)
    return frozenset(names)


# --- the pure planner ------------------------------------------------------------------------


def rank(documents: Sequence[Document]) -> list[Document]:
    """Most relevant first: by score, descending; unscored after, in the order sent."""
    return sorted(documents, key=lambda d: (d.score is None, -(d.score or 0.0), d.index))


def render_block(doc: Document, language: str, text: str, how: str) -> str:
    """One deterministic `--- DOCUMENT ---` block."""
    lines = [BLOCK_HEADER, f"id: {doc.id}"]
    if doc.source is not None:
        lines.append(f"source: {doc.source}")
    compacted = "false" if how == "raw" else "true" if how == "compacted" else how
    lines += [f"language: {language}", f"compact: {compacted}", "text:", text]
    return "\n".join(lines)


def place(doc: Document, language: str, policy: str, how: str, text: str, count: Count) -> Placed:
    """A planned document, its block counted raw and as placed."""
    before = count(render_block(doc, language, doc.text, "raw")) + 1
    after = before if how == "raw" else count(render_block(doc, language, text, how)) + 1
    return Placed(doc, language, policy, how, text, before, after)


def batch_tokens(placed: Sequence[Placed], divider_tokens: int = 4) -> int:
    """The batch message's cost (blocks + divider + framing); 0 for no documents."""
    if not placed:
        return 0
    return MESSAGE_OVERHEAD + divider_tokens + sum(p.tokens_after for p in placed)


def apply_rules(
    ranked: Sequence[Document],
    settings: DocumentsSettings,
    *,
    budget: int,
    context_tokens: int,
    demanded: frozenset[str],
    count: Count,
) -> list[Placed]:
    """Each document compacted or not by the first rule matching its language (best first)."""
    used = context_tokens + MESSAGE_OVERHEAD
    out: list[Placed] = []
    for doc in ranked:
        language = doc.language or detect_language(doc.text, doc.source)
        found = settings.rule_for(language)
        policy = found[1].policy if found else "none"
        raw = place(doc, language, policy, "raw", doc.text, count)
        wanted = policy == "always" or (
            policy == "demand" and bool(demanded & {language, ANY_LANGUAGE})
        )
        if found and policy == "threshold":
            wanted = used + raw.tokens_after > (found[1].threshold or 1.0) * budget
        chosen = raw
        if wanted:
            text = compact(doc.text, language)
            placed = place(doc, language, policy, "compacted", text, count)
            chosen = (
                placed if placed.tokens_after < raw.tokens_after else replace(raw, how="compacted")
            )
        out.append(chosen)
        used += chosen.tokens_after
    return out


def top_k(room: int, settings: DocumentsSettings) -> int:
    """Seed 003: `clamp(room / avg_chunk_tokens, min_top_k, max_top_k)`."""
    share = max(0, room) // settings.avg_chunk_tokens
    return max(settings.min_top_k, min(settings.max_top_k, share))


def plan_batch(
    documents: Sequence[Document],
    settings: DocumentsSettings,
    *,
    budget: int,
    context_tokens: int,
    demanded: frozenset[str],
    count: Count,
) -> BatchPlan:
    """Rank, compact by rules, clamp to top_k when tight; refuse documents that alone exceed
    the budget (DocumentsBudgetExceeded)."""
    placed = apply_rules(
        rank(documents),
        settings,
        budget=budget,
        context_tokens=context_tokens,
        demanded=demanded,
        count=count,
    )
    room = budget - context_tokens
    k = top_k(room, settings)
    clamp = k if batch_tokens(placed) > room and len(placed) > k else None
    kept = tuple(placed[:clamp] if clamp else placed)
    if batch_tokens(kept) > budget:
        raise DocumentsBudgetExceeded(batch_tokens(kept), budget, len(kept))
    return BatchPlan(kept, len(documents), budget, context_tokens, clamp)


def drop_to_fit(plan: BatchPlan) -> BatchPlan:
    """The best documents (a prefix of the ranking) that fit beside the conversation."""
    kept = list(plan.placed)
    while kept and plan.context_tokens + batch_tokens(kept) > plan.budget:
        kept.pop()
    return replace(plan, placed=tuple(kept))


def arrange(placed: Sequence[Placed], most_relevant_last: bool) -> list[Placed]:
    """The batch in prompt order: best first, or best last (for Ollama, which cuts the top)."""
    return list(reversed(placed)) if most_relevant_last else list(placed)


def most_relevant_last(settings: DocumentsSettings, litellm_model: str) -> bool:
    """`auto`: last for Ollama targets (`ollama_chat/`, `ollama/`), first otherwise."""
    if settings.order == "auto":
        return litellm_model.startswith(OLLAMA_PREFIXES)
    return settings.order == "most_relevant_last"


def render_batch(placed: Sequence[Placed], divider: str) -> str:
    """The batch message's text: the divider once, then one block per document."""
    blocks = (render_block(p.doc, p.language, p.text, p.how) for p in placed)
    return "\n\n".join([divider, *blocks])


# --- earlier batches: the existing context ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch placed before client message `position`, valid while the prefix is unchanged."""

    position: int
    prefix: bytes
    message: Mapping[str, Any]
    condensed: bool = False


def prefix_digest(messages: Sequence[Mapping[str, Any]], end: int) -> bytes:
    """A digest of `messages[:end]`."""
    data = orjson.dumps(list(messages[:end]), option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(data, digest_size=16).digest()


def still_valid(batches: Sequence[Batch], messages: Sequence[Mapping[str, Any]]) -> list[Batch]:
    """Earlier turns' batches whose preceding messages are unchanged (a retried or edited
    turn's batch is not)."""
    current = _last_user(messages)
    return [
        b
        for b in batches
        if b.position < current and b.prefix == prefix_digest(messages, b.position)
    ]


def weave(messages: Sequence[Mapping[str, Any]], batches: Sequence[Batch]) -> list[Any]:
    """The client's messages with each batch inserted before its position."""
    out: list[Any] = []
    for index, message in enumerate(messages):
        out += [b.message for b in batches if b.position == index]
        out.append(message)
    return out


def _last_user(messages: Sequence[Mapping[str, Any]]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return len(messages)


class BatchMemory:
    """Placed batches per (tenant, conversation), least recently used forgotten first."""

    def __init__(self, max_conversations: int) -> None:
        self.max = max_conversations
        self._batches: OrderedDict[tuple[str, str], tuple[Batch, ...]] = OrderedDict()

    def get(self, key: tuple[str, str]) -> tuple[Batch, ...]:
        """The batches remembered for a conversation."""
        found = self._batches.get(key, ())
        if found:
            self._batches.move_to_end(key)
        return found

    def put(self, key: tuple[str, str], batches: Sequence[Batch]) -> None:
        """Remember a conversation's batches (nothing when the memory is disabled)."""
        if self.max <= 0:
            return
        self._batches[key] = tuple(batches)
        self._batches.move_to_end(key)
        while len(self._batches) > self.max:
            self._batches.popitem(last=False)


def new_batch(messages: Sequence[Mapping[str, Any]], text: str) -> Batch:
    """The batch for this turn: before the client's last user message."""
    position = min(_last_user(messages), len(messages))
    message = {"role": "user", "content": text}
    return Batch(position, prefix_digest(messages, position), message)


# --- the layer -------------------------------------------------------------------------------


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
        self.settings = settings_of(services.settings)
        self.condenser = Condenser(services)
        self.memory = BatchMemory(self.settings.memory_conversations)

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Place the documents (planned, compacted, condensed as needed) and call on."""
        if "documents" not in request.extensions or ctx.internal or ctx.model is None:
            return await call_next(request, ctx)
        documents = parse_documents(request.extensions["documents"])
        options = request.extensions.get("overspill") or {}
        demanded = parse_compact(options.get("compact") if isinstance(options, dict) else None)
        extensions = {k: v for k, v in request.extensions.items() if k != "documents"}
        request = dataclasses.replace(request, extensions=extensions)
        if not documents:
            return await call_next(request, ctx)
        turn = self._plan(request, ctx, ctx.model, documents, demanded)
        await self._fit(turn, ctx)
        return await call_next(self._finish(turn, ctx), ctx)

    def _plan(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        documents: Sequence[Document],
        demanded: frozenset[str],
    ) -> _Turn:
        """Weave in earlier batches, size the budget, plan the batch (may raise the 400)."""
        key = (ctx.tenant, self.condenser.conversation(request, ctx))
        batches = still_valid(self.memory.get(key), request.messages)
        messages = weave(request.messages, batches)
        scale = self.services.calibration.ratio(entry.model_name)
        budget, window, derived = self._budget(request, entry, messages, scale)
        model = entry.litellm_params.upstream_model
        plan = plan_batch(
            documents,
            self.settings,
            budget=budget,
            context_tokens=self._context_tokens(entry, messages),
            demanded=demanded,
            count=lambda text: int(count_text(text, model) * scale) + 1,
        )
        steps = [f"top_k={plan.top_k}"] if plan.top_k else []
        return _Turn(
            request, entry, messages, batches, plan, window, derived - budget, scale, steps
        )

    def _budget(
        self, request: ChatRequest, entry: ModelEntry, messages: Sequence[Message], scale: float
    ) -> tuple[int, int, int]:
        """B (conversation + documents), the window, and the window's own budget."""
        counter = self.condenser.counter(entry)
        system = int(sum(counter.count_message(m) for m in messages if _is_system(m)) * scale)
        reserve = output_reserve(request.body, entry.context.max_output_tokens or 1024)
        configured = self.settings.max_context_tokens
        known = self.services.window_of(request.model)
        if known is None and configured is None:
            return UNBUDGETED, UNBUDGETED, UNBUDGETED
        window = known or (configured or 0) + reserve + system
        derived = plan_budget(
            window,
            output_reserve=reserve,
            safety_margin=entry.context.safety_margin,
            system_tokens=system,
        ).input
        return (min(configured, derived) if configured else derived), window, derived

    def _context_tokens(self, entry: ModelEntry, messages: Sequence[Message]) -> int:
        """The conversation's estimated tokens, without system messages (calibrated)."""
        counter = self.condenser.counter(entry)
        raw = 3 + sum(counter.count_message(m) for m in messages if not _is_system(m))
        return int(raw * self.services.calibration.ratio(entry.model_name))

    async def _fit(self, turn: _Turn, ctx: RequestContext) -> None:
        """Seed 001's 85% rule, then compact the existing context, then drop what still
        does not fit."""
        plan = turn.plan
        if plan.tokens > self.settings.condense_share * plan.budget:
            turn.plan = await self._condense_documents(turn)
            turn.steps.append("condensed")
        while not turn.plan.fits and turn.passes < self.settings.max_passes:
            before = turn.plan.context_tokens
            await self._compact_context(turn, ctx)
            turn.passes += 1
            turn.plan = replace(
                turn.plan, context_tokens=self._context_tokens(turn.entry, turn.messages)
            )
            if turn.plan.context_tokens >= before:
                break
        if turn.passes:
            turn.steps.append(f"context_compacted={turn.passes}")
        if not turn.plan.fits:
            kept = drop_to_fit(turn.plan)
            turn.steps.append(f"dropped={len(turn.plan.placed) - len(kept.placed)}")
            turn.plan = kept

    async def _condense_documents(self, turn: _Turn) -> BatchPlan:
        """Each document condensed to its share by an internal call focused on the question."""
        plan = turn.plan
        room = plan.budget - plan.context_tokens
        target = min(int(self.settings.condense_share * plan.budget), max(room, plan.budget // 2))
        rungs = self._rungs(turn)
        focus = latest_question(turn.request.messages)
        model = turn.entry.litellm_params.upstream_model
        count = self._count(turn)
        placed = []
        for p in plan.placed:
            share = max(32, p.tokens_after * target // max(1, plan.tokens))
            done = await condense_message(
                p.text, share_tokens=share, rungs=rungs, focus=focus, model=model
            )
            condensed = place(p.doc, p.language, p.policy, "condensed", done.text, count)
            placed.append(replace(condensed, tokens_before=p.tokens_before))
        return replace(plan, placed=tuple(placed))

    async def _compact_context(self, turn: _Turn, ctx: RequestContext) -> None:
        """One pass: earlier batches condensed if any are raw, else the history extracted."""
        raw = [b for b in turn.batches if not b.condensed]
        if raw:
            turn.batches = [await self._condense_batch(turn, b) if not b.condensed else b
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

    async def _condense_batch(self, turn: _Turn, batch: Batch) -> Batch:
        """An earlier batch condensed to half its size, focused on the latest question."""
        text = str(batch.message.get("content", ""))
        model = turn.entry.litellm_params.upstream_model
        done = await condense_message(
            text,
            share_tokens=max(32, count_text(text, model) // 2),
            rungs=self._rungs(turn),
            focus=latest_question(turn.request.messages),
            model=model,
        )
        content = f"{self.settings.divider}\n[overspill: earlier documents, condensed]\n{done.text}"
        return replace(batch, message={"role": "user", "content": content}, condensed=True)

    def _rungs(self, turn: _Turn) -> list[Rung]:
        """The extraction model (~4 chars/token), then the user's model (~3.5)."""
        entry = turn.entry
        ladder = {entry.model_name: 3.5}
        extractor = entry.context.extraction_model
        if extractor and extractor != entry.model_name:
            ladder = {extractor: 4.0, **ladder}
        return [
            Rung(
                self.services.internal(name),
                int((self.services.window_of(name) or turn.window) / turn.scale),
                chars,
            )
            for name, chars in ladder.items()
        ]

    def _count(self, turn: _Turn) -> Count:
        model = turn.entry.litellm_params.upstream_model
        return lambda text: int(count_text(text, model) * turn.scale) + 1

    def _finish(self, turn: _Turn, ctx: RequestContext) -> ChatRequest:
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
            turn.messages = _insert_before_last_user(turn.messages, batch.message)
        key = (ctx.tenant, ctx.conversation_id or "")
        self.memory.put(key, batches)
        decision = "+".join(["appended", *turn.steps])
        self._report(turn, ctx, decision)
        return request.with_messages(turn.messages)

    def _report(self, turn: _Turn, ctx: RequestContext, decision: str) -> None:
        plan = turn.plan
        ctx.note("documents", f"{len(plan.placed)}/{plan.received}")
        ctx.note("documents-decision", decision)
        ctx.note("documents-tokens", plan.tokens)
        ctx.note("documents-budget", plan.budget)
        ctx.note("documents-compacted", sum(p.how != "raw" for p in plan.placed))
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


def settings_of(settings: object) -> DocumentsSettings:
    """The `documents:` block of the validated config (defaults when absent)."""
    found = getattr(settings, "documents", None)
    if isinstance(found, DocumentsSettings):
        return found
    return DocumentsSettings.model_validate(found or {})


def _insert_before_last_user(messages: Sequence[Any], message: Message) -> list[Any]:
    index = _last_user(messages)
    return [*messages[:index], message, *messages[index:]]


def _is_system(message: Message) -> bool:
    return message.get("role") in SYSTEM_ROLES
