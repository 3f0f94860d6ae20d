"""The documents planner, pure: budgeting, compaction rules, top_k, order, and rendering.

A plan ranks the documents, compacts each by the first rule matching its language, keeps
seed 003's top_k best when the batch does not fit the room the conversation leaves, and
refuses documents that alone exceed the budget. The batch is one `user` message (the divider,
then one `--- DOCUMENT ---` block per document) inserted just before the last user message.

Why there and why `user`: retrieved text is data, not operator instructions, so it must not
get a system message's authority (and several providers accept system text only first); next
to the question it survives Ollama's top-first truncation; and every message before it keeps
its bytes, so extraction caches and provider prompt caches stay valid. Batches placed in
earlier turns (the existing context) are `batches`' concern.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kernel.config import is_ollama
from kernel.documents_config import ANY_LANGUAGE, DocumentsSettings
from kernel.errors import DocumentsBudgetExceeded
from middleware.documents.compaction import compact
from middleware.documents.language import detect_language
from middleware.documents.ranking import top_k
from middleware.documents.request import Document

BLOCK_HEADER = "--- DOCUMENT ---"
MESSAGE_OVERHEAD = 8
"""Tokens of the batch message's role and framing, and rounding slack."""
Count = Callable[[str], int]


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
    k = top_k(room, settings.avg_chunk_tokens, settings.min_top_k, settings.max_top_k)
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
        return is_ollama(litellm_model)
    return settings.order == "most_relevant_last"


def render_batch(placed: Sequence[Placed], divider: str) -> str:
    """The batch message's text: the divider once, then one block per document."""
    blocks = (render_block(p.doc, p.language, p.text, p.how) for p in placed)
    return "\n\n".join([divider, *blocks])
