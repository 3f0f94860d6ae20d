"""Documents over the whole budget go as their most relevant chunks, within budget."""

from __future__ import annotations

import re
from itertools import chain
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.documents_config import DocumentsSettings
from kernel.errors import DocumentsBudgetExceeded
from kernel.tokens import count_text
from middleware.condensing.chunking import BOUNDARY_SEPARATOR, MIN_CHUNK_TOKENS, Chunk
from middleware.documents.blocks import BLOCK_HEADER, Excerpt, Placed, batch_tokens, place
from middleware.documents.excerpts import (
    CHUNK_TOKENS,
    FRAMING,
    chunk_document,
    excerpt_text,
    excerpts,
    window,
)
from middleware.documents.plan import BatchPlan, plan_batch, render_batch
from middleware.documents.relevance import bm25
from middleware.documents.request import Document

TOPICS = ["shipping takes three days", "refunds are paid within a week", "the depot is in Lyon"]


def count(text: str) -> int:
    return count_text(text) + 1


def manual(sections: int = 30, topic_of: Any = None) -> str:
    """Numbered sections, each repeating one topic, about 50 tokens a section."""
    topic_of = topic_of or (lambda i: TOPICS[i % len(TOPICS)])
    return "\n".join(f"Section {i}: " + f"{topic_of(i)}. " * 8 for i in range(sections))


def placed(text: str, index: int = 0, doc_id: str = "manual") -> Placed:
    return place(Document(index, text, doc_id), "text", "none", "raw", text, count)


def plan(
    texts: list[str], budget: int, question: str | None, context: int = 0, **rules: Any
) -> BatchPlan:
    docs = [Document(i, text, f"doc-{i}", score=1 - i / 100) for i, text in enumerate(texts)]
    settings_ = DocumentsSettings.model_validate(rules)
    return plan_batch(
        docs,
        settings_,
        budget=budget,
        context_tokens=context,
        demanded=frozenset(),
        count=count,
        question=question,
    )


def chunk(index: int, text: str) -> Chunk:
    return Chunk(f"d::chunk::{index:03d}::00000000", index, text, index * 10, index * 10 + 5, 2)


# --- the block ----------------------------------------------------------------------------------


def test_an_excerpt_joins_runs_with_boundaries_and_marks_the_gaps() -> None:
    """Consecutive chunks are joined by [CHUNK BOUNDARY]; skipped ones leave a marker."""
    excerpt = Excerpt((chunk(1, "B"), chunk(2, "C"), chunk(3, "D"), chunk(7, "H")), 9, "raw")
    assert excerpt.describe() == "2-4, 8 of 9"
    assert excerpt_text(excerpt) == (
        "B\n[CHUNK BOUNDARY]\nC\n[CHUNK BOUNDARY]\nD\n[overspill: chunks 5-7 elided]\nH"
    )
    single_gap = Excerpt((chunk(0, "A"), chunk(2, "C")), 3, "raw")
    assert excerpt_text(single_gap) == "A\n[overspill: chunk 2 elided]\nC"


def test_a_chunked_block_says_so_and_the_trace_has_ids_and_offsets() -> None:
    """`compact: chunked`, a `chunks:` line, and each chunk's id and range in the trace."""
    (found,) = plan([manual(60)], budget=600, question="Where is the depot?").placed
    block = found.render()
    assert block.startswith(f"{BLOCK_HEADER}\nid: doc-0\nlanguage: text\ncompact: chunked\n")
    assert re.search(r"\nchunks: [\d, -]+ of \d+\ntext:\n", block)
    trace = found.trace()
    assert trace["compacted"] == "chunked"
    assert trace["chunked_from"] == "raw"
    assert trace["chunks"]
    assert found.excerpt is not None
    for item, piece in zip(trace["chunks"], found.excerpt.chunks, strict=True):
        assert item == {"id": piece.id, "start_char": piece.start_char, "end_char": piece.end_char}
        assert manual(60)[piece.start_char : piece.end_char] == piece.text
        assert piece.id.startswith("doc-0::chunk::")


# --- choosing ---------------------------------------------------------------------------------


def test_the_chunks_about_the_question_are_chosen() -> None:
    """Of a long manual, the sections about refunds go when the question is about refunds."""
    text = manual(90, lambda i: TOPICS[1] if 40 <= i < 44 else TOPICS[i % 3 and 2])
    (found,) = plan([text], budget=700, question="How are refunds paid?").placed
    assert "refunds are paid" in found.text
    (other,) = plan([text], budget=700, question="Where is the depot?").placed
    assert "refunds are paid" not in other.text


def test_without_a_question_the_first_chunks_of_the_best_document_go() -> None:
    """No question: document rank, then chunk order."""
    texts = [manual(60), manual(60, lambda i: "another topic entirely")]
    found = plan(texts, budget=700, question=None).placed
    assert [p.doc.id for p in found] == ["doc-0"]
    assert found[0].excerpt is not None
    assert found[0].excerpt.chunks[0].index == 0


def test_a_best_chunk_comes_with_its_neighbours_when_they_fit() -> None:
    """With room for three chunks, the best one goes with the one before and after it."""
    text = manual(200, lambda i: TOPICS[1] if i == 100 else TOPICS[0])
    (found,) = plan([text], budget=3400, question="refunds paid").placed
    assert found.excerpt is not None
    indices = [c.index for c in found.excerpt.chunks]
    best = next(c.index for c in found.excerpt.chunks if "refunds" in c.text)
    assert {best - 1, best, best + 1} <= set(indices)
    assert found.text.count("[CHUNK BOUNDARY]") >= 2


def test_the_best_chunk_goes_even_when_the_conversation_leaves_no_room() -> None:
    """Room below one chunk (or none at all): the single best chunk still goes, within B."""
    for context in (900, 1200, 5000):
        result = plan([manual(60)], budget=1000, question="depot", context=context)
        (found,) = result.placed
        assert found.excerpt is not None
        assert len(found.excerpt.chunks) == 1
        assert result.tokens <= 1000


def test_a_small_document_among_chunked_ones_goes_whole() -> None:
    """A document smaller than a chunk is one chunk: when it is chosen it goes as it was."""
    small = "The depot in Lyon opens at 8."
    found = plan([manual(60), small], budget=800, question="When does the depot in Lyon open?")
    by_id = {p.doc.id: p for p in found.placed}
    assert by_id["doc-1"].how == "raw"
    assert by_id["doc-1"].text == small
    assert by_id["doc-1"].excerpt is None


def test_compacted_documents_are_chunked_as_compacted() -> None:
    """A rule compacts first; the chunks are of the compacted text, and the trace says so."""
    code = "".join(
        f"-- note {i}\nSELECT id, total FROM orders WHERE id = {i} ORDER BY total;\n"
        for i in range(200)
    )
    result = plan(
        [code], budget=600, question="order 7", rules=[{"language": "sql", "policy": "always"}]
    )
    (found,) = result.placed
    assert found.how == "chunked"
    assert found.trace()["chunked_from"] == "compacted"
    assert "-- note" not in found.text


def test_a_budget_too_small_for_one_chunk_is_refused() -> None:
    """Only when not one chunk fits the whole budget is it DocumentsBudgetExceeded."""
    with pytest.raises(DocumentsBudgetExceeded) as caught:
        plan([manual(60)], budget=30, question=None)
    assert caught.value.budget == 30


def test_refusal_is_a_threshold_on_the_budget() -> None:
    """Budgets below some size are refused and every budget above it is planned."""
    outcomes = []
    for budget in range(30, 90):
        try:
            result = plan([manual(20)], budget=budget, question="depot")
        except DocumentsBudgetExceeded:
            outcomes.append(False)
        else:
            assert result.tokens <= budget
            outcomes.append(True)
    assert outcomes == sorted(outcomes)
    assert outcomes[0] is False
    assert outcomes[-1] is True


def test_chunks_are_seed_002_windows_at_most() -> None:
    """The chunker's 900/100 for a large budget; smaller at the same ratio, never under the floor."""
    assert window(10_000) == (CHUNK_TOKENS, 100)
    assert window(450) == (450, 50)
    assert window(3) == (MIN_CHUNK_TOKENS, 1)
    big = chunk_document(placed(manual(200)), 100_000, 85_000, count)
    assert big is not None
    assert max(c.token_count for c in big.chunks) <= CHUNK_TOKENS
    small = chunk_document(placed(manual(200)), 300, 255, count)
    assert small is not None
    assert all(FRAMING + tokens <= 255 for tokens in small.alone)


# --- properties -------------------------------------------------------------------------------

words = st.sampled_from(["order", "refund", "depot", "Lyon", "week", "paid", "ship", "the", "é"])
questions = st.none() | st.lists(words, max_size=5).map(" ".join)


@st.composite
def section(draw: st.DrawFn) -> list[str]:
    """Some words, repeated to a size."""
    base = draw(st.lists(words, min_size=1, max_size=6))
    size = draw(st.integers(1, 3000))
    return (base * (size // len(base) + 1))[:size]


texts = st.lists(section(), min_size=1, max_size=6).map(lambda parts: " ".join(chain(*parts)))


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[str], int, int, str | None]:
    docs = draw(st.lists(texts, min_size=1, max_size=4))
    budget = draw(st.integers(20, 1500) | st.integers(1500, 6000))
    context = draw(st.integers(0, budget) | st.integers(0, 2 * budget))
    return docs, budget, context, draw(questions)


def best_chunk(kept: list[Placed], budget: int, target: int, question: str | None) -> str | None:
    """The best chunk's id, found from the cut by BM25 and the stated tie-breaks."""
    cut = [c for p in kept if (c := chunk_document(p, budget, target, count)) is not None]
    pieces = [(rank, piece) for rank, c in enumerate(cut) for piece in c.chunks]
    if not pieces:
        return None
    scores = bm25(question, [piece.text for _, piece in pieces])
    best = min(range(len(pieces)), key=lambda i: (-scores[i], pieces[i][0], pieces[i][1].index))
    return pieces[best][1].id


def run(
    docs: list[str], budget: int, context: int, question: str | None
) -> tuple[tuple[Placed, ...] | None, list[Placed], int, int]:
    kept = [placed(text, i, f"doc-{i}") for i, text in enumerate(docs)]
    target = int(0.85 * budget)
    limit = min(budget - context, target)
    try:
        found = excerpts(kept, question, budget=budget, target=target, limit=limit, count=count)
    except DocumentsBudgetExceeded:
        return None, kept, target, limit
    return found, kept, target, limit


@settings(max_examples=60, deadline=None)
@given(cases())
def test_never_over_budget_and_within_the_room_beyond_the_best_chunk(
    case: tuple[list[str], int, int, str | None],
) -> None:
    """Never over B, over the room only for the best chunk alone, and counted honestly."""
    docs, budget, context, question = case
    found, _, _, limit = run(docs, budget, context, question)
    if found is None:
        return
    assert batch_tokens(found) <= budget
    pieces = [p.excerpt.chunks if p.excerpt else (None,) for p in found]
    if batch_tokens(found) > limit:
        assert len(found) == 1
        assert len(pieces[0]) == 1
    assert count_text(render_batch(found, "<<<New content")) + 4 <= batch_tokens(found)


@settings(max_examples=60, deadline=None)
@given(cases())
def test_the_best_chunk_is_always_in(case: tuple[list[str], int, int, str | None]) -> None:
    """When anything is sent, the best-scoring chunk is (in an excerpt or its whole document)."""
    docs, budget, context, question = case
    found, kept, target, _ = run(docs, budget, context, question)
    best = best_chunk(kept, budget, target, question)
    if found is None:
        assert best is None
        return
    sent = {c.id for p in found if p.excerpt for c in p.excerpt.chunks}
    whole = {p.doc.id for p in found if p.excerpt is None}
    assert best is not None
    assert best in sent or best.split("::")[0] in whole


@settings(max_examples=60, deadline=None)
@given(cases())
def test_neighbours_are_never_duplicated(case: tuple[list[str], int, int, str | None]) -> None:
    """Each chunk goes once, in order; runs are joined by one boundary per joint."""
    docs, budget, context, question = case
    found, _, _, _ = run(docs, budget, context, question)
    for p in found or ():
        if p.excerpt is None:
            continue
        indices = [c.index for c in p.excerpt.chunks]
        assert indices == sorted(set(indices))
        joints = len(indices) - len(p.excerpt.runs())
        assert p.text.count(BOUNDARY_SEPARATOR) == joints
    assert len({p.doc.id for p in found or ()}) == len(found or ())


@settings(max_examples=30, deadline=None)
@given(cases())
def test_excerpts_are_deterministic(case: tuple[list[str], int, int, str | None]) -> None:
    """The same documents, budget and question give the same blocks."""
    docs, budget, context, question = case
    first, _, _, _ = run(docs, budget, context, question)
    again, _, _, _ = run(docs, budget, context, question)
    assert first == again
