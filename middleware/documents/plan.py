"""The documents planner, pure: budgeting, compaction rules, top_k, order, and rendering.

A plan ranks the documents, compacts each by the first rule matching its language, and keeps
the top_k best when the batch does not fit the room the conversation leaves. Kept
documents that alone exceed the budget are sent as their chunks most relevant to the user's
latest question (`excerpts`), within the room the conversation leaves and under the share at
which the layer would condense them; only when not one chunk fits the budget is the request
refused. The batch is one `user` message (the divider, then one `--- DOCUMENT ---` block per
document) inserted just before the last user message.

Why there and why `user`: retrieved text is data, not operator instructions, so it must not
get a system message's authority (and several providers accept system text only first); next
to the question it survives Ollama's top-first truncation; and every message before it keeps
its bytes, so extraction caches and provider prompt caches stay valid. Batches placed in
earlier turns (the existing context) are `batches`' concern.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kernel.config import is_ollama
from kernel.documents_config import ANY_LANGUAGE, DocumentsSettings
from middleware.documents.blocks import MESSAGE_OVERHEAD, Count, Placed, batch_tokens, place
from middleware.documents.compaction import compact
from middleware.documents.excerpts import excerpts
from middleware.documents.language import detect_language
from middleware.documents.ranking import top_k
from middleware.documents.request import Document

__all__ = [
    "BatchPlan",
    "Count",
    "Placed",
    "apply_rules",
    "arrange",
    "batch_tokens",
    "drop_to_fit",
    "most_relevant_last",
    "place",
    "plan_batch",
    "rank",
    "render_batch",
]


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
    question: str | None,
) -> BatchPlan:
    """Rank, compact by rules, clamp to top_k when tight; documents that alone exceed the
    budget go as their chunks most relevant to `question` (DocumentsBudgetExceeded when not
    one chunk fits)."""
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
        share = int(settings.condense_share * budget)
        kept = excerpts(
            kept, question, budget=budget, target=share, limit=min(room, share), count=count
        )
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
    return "\n\n".join([divider, *(p.render() for p in placed)])
