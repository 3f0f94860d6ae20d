"""Documents larger than the whole budget, sent as their most relevant chunks.

When the kept documents alone exceed the budget, each is cut by the token-window
chunker into chunks small enough to go alone: at most 900 tokens with 100 of overlap, smaller
when the budget is small (a chunk's block fits `target`, the share documents may take before
they are condensed), never under the chunker's floor. Every chunk is scored by BM25 against
the user's latest question; the best go first (ties, and no question at all: the document's
rank, then chunk order), each with its neighbours (±1), while the batch stays within `limit`
(the room the conversation leaves); the single best chunk always goes.

A document whose chunks all go is sent whole, as it was placed. Otherwise its block says
`compact: chunked` and `chunks: 2-4, 9 of 14`, consecutive chunks are joined by the chunker's
`[CHUNK BOUNDARY]`, and `[overspill: chunks 5-8 elided]` stands between runs. Only when not
one chunk of any document fits the whole budget is the request refused. Same input, same
output: chunk ids are the chunker's deterministic ids and the scores are plain arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from kernel.errors import DocumentsBudgetExceeded
from middleware.condensing.chunking import (
    BOUNDARY_SEPARATOR,
    MIN_CHUNK_TOKENS,
    Chunk,
    chunk_text,
    expand_neighbors,
)
from middleware.documents.blocks import (
    DIVIDER_TOKENS,
    MESSAGE_OVERHEAD,
    Count,
    Excerpt,
    Placed,
    batch_tokens,
    render_block,
)
from middleware.documents.relevance import bm25

CHUNK_TOKENS = 900
OVERLAP_TOKENS = 100
"""The chunker's window and overlap (900 and 100 tokens): the upper bound; smaller windows
keep the same ratio."""
NEIGHBOURS = 1
FRAMING = MESSAGE_OVERHEAD + DIVIDER_TOKENS


@dataclass(frozen=True, slots=True)
class Chunked:
    """A kept document cut into chunks, with what its block costs: without text, and with
    each chunk alone."""

    placed: Placed
    chunks: tuple[Chunk, ...]
    header: int
    alone: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One chunk in the running: its relevance, its document's rank, its index."""

    score: float
    rank: int
    index: int


def excerpts(
    kept: Sequence[Placed],
    question: str | None,
    *,
    budget: int,
    target: int,
    limit: int,
    count: Count,
) -> tuple[Placed, ...]:
    """The most relevant chunks of the kept documents within `limit` (the best always);
    DocumentsBudgetExceeded when not one chunk fits the budget."""
    chunked = [c for p in kept if (c := chunk_document(p, budget, target, count)) is not None]
    if not chunked:
        raise DocumentsBudgetExceeded(batch_tokens(kept), budget, len(kept))
    picks = choose(chunked, ranked(chunked, question), limit, count)
    return fitted(chunked, picks, limit, count)


def window(tokens: int) -> tuple[int, int]:
    """The chunk size and overlap for blocks of at most `tokens` text tokens."""
    size = max(MIN_CHUNK_TOKENS, min(CHUNK_TOKENS, tokens))
    return size, size * OVERLAP_TOKENS // CHUNK_TOKENS


def chunk_document(placed: Placed, budget: int, target: int, count: Count) -> Chunked | None:
    """The document cut so that each chunk's block fits `target` (the budget at the floor);
    None when not even a floor-sized chunk fits the budget."""
    size, _ = window(target - FRAMING - _header_tokens(placed, 1000, count))
    while True:
        chunked = _cut(placed, size, count)
        worst = FRAMING + max(chunked.alone, default=0)
        if worst <= target or (size == MIN_CHUNK_TOKENS and worst <= budget):
            return chunked if chunked.chunks else None
        if size == MIN_CHUNK_TOKENS:
            return None
        size = max(MIN_CHUNK_TOKENS, min(size - 1, size - (worst - target)))


def _cut(placed: Placed, size: int, count: Count) -> Chunked:
    """The document in windows of `size` tokens, each chunk's block counted alone."""
    size, overlap = window(size)
    chunks = tuple(
        chunk_text(
            placed.doc.id, placed.text, chunk_tokens=size, overlap_tokens=overlap,
            single_chunk_max=size,
        )
    )  # fmt: skip
    header = _header_tokens(placed, len(chunks), count)
    if len(chunks) <= 1:
        return Chunked(placed, chunks, header, (placed.tokens_after,) * len(chunks))
    alone = tuple(_block_tokens(placed, chunks, (c,), count) for c in chunks)
    return Chunked(placed, chunks, header, alone)


def _header_tokens(placed: Placed, total: int, count: Count) -> int:
    """An excerpt block's cost without its text, its `chunks:` line as long as it gets."""
    widest = Excerpt((Chunk("-", max(0, total - 1), "", 0, 0, 0),), max(1, total), placed.how)
    return count(render_block(placed.doc, placed.language, "", "chunked", widest)) + 1


def ranked(chunked: Sequence[Chunked], question: str | None) -> list[Candidate]:
    """Every chunk, most relevant first: by BM25 score, then document rank, then order."""
    pairs = [(rank, chunk) for rank, c in enumerate(chunked) for chunk in c.chunks]
    scores = bm25(question, [chunk.text for _, chunk in pairs])
    found = [
        Candidate(s, rank, chunk.index) for s, (rank, chunk) in zip(scores, pairs, strict=True)
    ]
    return sorted(found, key=lambda c: (-c.score, c.rank, c.index))


@dataclass(frozen=True, slots=True)
class Pick:
    """One step of the choice: a candidate chunk and the indices it added to its document."""

    rank: int
    index: int
    added: frozenset[int]

    def alone(self) -> Pick:
        """The same candidate without its neighbours."""
        return Pick(self.rank, self.index, frozenset({self.index}))


def choose(
    chunked: Sequence[Chunked], order: Sequence[Candidate], limit: int, count: Count
) -> list[Pick]:
    """Best first, each chunk with its neighbours (else alone) while the estimate stays
    within `limit`; the first (best) chunk goes even alone over it."""
    joint, gap = count(BOUNDARY_SEPARATOR), count(_gap_marker(999, 999))
    chosen: list[frozenset[int]] = [frozenset() for _ in chunked]
    picks: list[Pick] = []
    used = FRAMING
    for candidate in order:
        have, doc = chosen[candidate.rank], chunked[candidate.rank]
        for option in _options(candidate.index, have, len(doc.chunks)):
            delta = estimate(doc, have | option, joint, gap) - estimate(doc, have, joint, gap)
            if used + delta <= limit or (not picks and option == {candidate.index}):
                chosen[candidate.rank] = have | option
                picks.append(Pick(candidate.rank, candidate.index, option))
                used += delta
                break
    return picks


def _options(index: int, have: frozenset[int], total: int) -> list[frozenset[int]]:
    """What a candidate may add: its neighbourhood, else itself; nothing already there."""
    near = frozenset(range(max(0, index - NEIGHBOURS), min(total, index + NEIGHBOURS + 1)))
    options = [near - have, frozenset({index}) - have]
    return [o for i, o in enumerate(options) if o and o not in options[:i]]


def estimate(doc: Chunked, indices: frozenset[int], joint: int, gap: int) -> int:
    """What the document's block costs with these chunks, before it is rendered."""
    if not indices:
        return 0
    if len(indices) == len(doc.chunks):
        return doc.placed.tokens_after
    runs = sum(1 for i in indices if i - 1 not in indices)
    texts = sum(doc.alone[i] - doc.header for i in indices)
    return doc.header + texts + joint * (len(indices) - runs) + gap * (runs - 1)


def fitted(
    chunked: Sequence[Chunked], picks: Sequence[Pick], limit: int, count: Count
) -> tuple[Placed, ...]:
    """The picks rendered and counted exactly, the last ones given back while over `limit`
    (down to the best chunk alone, which the chunk size made fit the budget)."""
    steps = list(picks)
    blocks: dict[tuple[int, frozenset[int]], Placed] = {}
    while True:
        placed = _render(chunked, steps, count, blocks)
        if batch_tokens(placed) <= limit or steps == [steps[0].alone()]:
            return placed
        steps = steps[:-1] if len(steps) > 1 else [steps[0].alone()]


def _render(
    chunked: Sequence[Chunked],
    steps: Sequence[Pick],
    count: Count,
    blocks: dict[tuple[int, frozenset[int]], Placed],
) -> tuple[Placed, ...]:
    """One block per document that has chunks, in the order of their first pick (each
    rendering remembered in `blocks`)."""
    chosen: dict[int, frozenset[int]] = {}
    for step in steps:
        chosen[step.rank] = chosen.get(step.rank, frozenset()) | step.added
    for key in chosen.items():
        if key not in blocks:
            blocks[key] = _placed(chunked[key[0]], key[1], count)
    return tuple(blocks[key] for key in chosen.items())


def _placed(doc: Chunked, indices: frozenset[int], count: Count) -> Placed:
    """The document whole when every chunk is chosen, else its excerpt."""
    if len(indices) == len(doc.chunks):
        return doc.placed
    chunks = tuple(doc.chunks[i] for i in sorted(indices))
    tokens = _block_tokens(doc.placed, doc.chunks, chunks, count)
    excerpt = Excerpt(chunks, len(doc.chunks), doc.placed.how)
    return replace(
        doc.placed, how="chunked", text=excerpt_text(excerpt), tokens_after=tokens, excerpt=excerpt
    )


def _block_tokens(
    placed: Placed, every: Sequence[Chunk], chunks: Sequence[Chunk], count: Count
) -> int:
    excerpt = Excerpt(tuple(chunks), len(every), placed.how)
    block = render_block(placed.doc, placed.language, excerpt_text(excerpt), "chunked", excerpt)
    return count(block) + 1


def excerpt_text(excerpt: Excerpt) -> str:
    """Runs of consecutive chunks, each expanded over its own chunks and so joined by
    `[CHUNK BOUNDARY]`, with a marker for the chunks left out between runs."""
    runs = excerpt.runs()
    parts = [expand_neighbors(runs[0], runs[0][0].index, radius=len(runs[0]))]
    for before, run in pairwise(runs):
        parts.append(_gap_marker(before[-1].index + 2, run[0].index))
        parts.append(expand_neighbors(run, run[0].index, radius=len(run)))
    return "\n".join(parts)


def _gap_marker(first: int, last: int) -> str:
    """Chunks `first`..`last` (counted from 1) left out between two runs."""
    which = f"chunk {first}" if first == last else f"chunks {first}-{last}"
    return f"[overspill: {which} elided]"
