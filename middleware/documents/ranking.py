"""top_k: how many retrieved chunks the room left in a prompt can take."""

from __future__ import annotations

MIN_TOP_K, MAX_TOP_K = 2, 10
"""The default clamp: at least 2, at most 10."""


def top_k(
    available_tokens: int, avg_chunk_tokens: int, low: int = MIN_TOP_K, high: int = MAX_TOP_K
) -> int:
    """`clamp(available // avg_chunk_tokens, low, high)`; no room at all still keeps `low`."""
    if avg_chunk_tokens <= 0:
        raise ValueError(f"avg_chunk_tokens must be positive, got {avg_chunk_tokens}")
    return max(low, min(high, max(0, available_tokens) // avg_chunk_tokens))
