"""top_k: how many retrieved chunks the room left in a prompt can take."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from middleware.documents.ranking import MAX_TOP_K, MIN_TOP_K, top_k


@given(st.integers(-10_000, 1_000_000), st.integers(1, 10_000))
def test_top_k_is_clamped_between_2_and_10(available: int, avg: int) -> None:
    """top_k = available // avg, never below 2 nor above 10."""
    assert MIN_TOP_K <= top_k(available, avg) <= MAX_TOP_K


def test_top_k_refuses_a_non_positive_chunk_size() -> None:
    """avg_chunk_tokens must be positive."""
    with pytest.raises(ValueError, match="avg_chunk_tokens"):
        top_k(1000, 0)


def test_seed_example() -> None:
    """4932 tokens available / 200 per chunk = 24, clamped to 10."""
    assert top_k(4932, 200) == 10
