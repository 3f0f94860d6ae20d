"""BM25 relevance of passages to the user's question: words, weights, determinism."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from middleware.documents.relevance import bm25, terms


def test_words_are_folded_and_identifiers_split() -> None:
    """Case-folded words; camelCase and snake_case split; a plural `s` folded; any script."""
    assert terms("QueryAsync order_total HTTPServer Orders status Größe 東京") == [
        "query", "async", "order", "total", "http", "server", "order", "statu", "grösse", "東京",
    ]  # fmt: skip


def test_the_passage_with_the_questions_words_scores_highest() -> None:
    """The refund question finds the refund passage; a shared small word counts for less."""
    passages = [
        "The order ships from the warehouse in Lyon.",
        "A refund for the order is paid within a week.",
        "The order is invoiced by email.",
    ]
    scores = bm25("When is my refund paid?", passages)
    assert scores[1] > scores[2] > scores[0] == 0.0


def test_rarer_words_weigh_more() -> None:
    """A word in one passage of three outweighs a word in two of them."""
    scores = bm25("lyon order", ["order lyon", "order", "order email"])
    only_order = bm25("order", ["order lyon", "order", "order email"])
    assert scores[0] > scores[1]
    assert scores[0] - only_order[0] > only_order[0]


def test_no_question_or_no_words_scores_nothing() -> None:
    """Without a question (or one without words) every passage scores 0."""
    assert bm25(None, ["a b", "c"]) == [0.0, 0.0]
    assert bm25("?!", ["a b", "c"]) == [0.0, 0.0]
    assert bm25("a", []) == []


@given(st.text(max_size=60), st.lists(st.text(max_size=120), max_size=8))
def test_scores_are_deterministic_and_never_negative(question: str, passages: list[str]) -> None:
    """The same question and passages give the same scores, all at least 0."""
    scores = bm25(question, passages)
    assert scores == bm25(question, passages)
    assert len(scores) == len(passages)
    assert all(score >= 0 for score in scores)
