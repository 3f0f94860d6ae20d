"""How far our token estimates are from each model's own count, learned from upstream usage.

tiktoken is exact for OpenAI models and an estimate for everything else (SmolLM2 counts 10-24%
more tokens than cl100k_base for the same text). Each time a request whose size we estimated
comes back with the upstream's `usage.prompt_tokens`, the ratio is one sample; a model's
correction is the moving average of its recent samples (oldest first, each moving the average
`WEIGHT` of the way). Samples live in the store, so every replica computes the same ratio.
Pure functions: the estimator does the I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_RATIO = 0.5
MAX_RATIO = 3.0
MIN_TOKENS = 256
"""Smaller prompts teach nothing: the chat template's fixed tokens would dominate their ratio."""
WEIGHT = 0.3
"""How far one new sample moves the average."""
TOLERANCE = 0.01
"""A sample this close (relative) to the current correction would move it by at most a third
of that: it is not recorded, so a model whose count is steady costs no store write a request."""


def sample(estimated: int, reported: int | None) -> float | None:
    """One observation's ratio (bounded), or None when it teaches nothing."""
    if reported is None or estimated < MIN_TOKENS or reported <= 0:
        return None
    return min(MAX_RATIO, max(MIN_RATIO, reported / estimated))


def teaches(found: float, current: float) -> bool:
    """Whether a sample differs enough from the current correction to be recorded."""
    return abs(found - current) > TOLERANCE * current


def ratio(newest_first: Sequence[float], weight: float = WEIGHT) -> float:
    """The correction from a model's samples, newest first (1.0 until one is observed)."""
    if not newest_first:
        return 1.0
    average = newest_first[-1]
    for observed in reversed(newest_first[:-1]):
        average += weight * (observed - average)
    return average
