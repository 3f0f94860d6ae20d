"""Compacting to a target, not to the wall: how much history stays intact after a growth.

Shared by `history_splice` (growths ahead of the wall) and `overflow_recovery` (the growth
after a refusal), so that either leaves the request near `context.compact_to` of the prompt
budget and the next growth comes several turns later, not on the next turn. Pure.
"""

from __future__ import annotations

from kernel.config import ModelEntry
from kernel.store import HistoryEntry
from middleware.condensing.condenser import Plan

MIN_TAIL_SHARE = 0.05
"""The intact tail never plans for less than this share of the budget (the newest turn)."""


def tail_share(entry: ModelEntry, plan: Plan, cached: HistoryEntry | None) -> float:
    """The intact tail's share of the input budget that leaves a grown request near
    `context.compact_to` of the prompt budget: what is left once the system messages and the
    extraction (its cap, or the last one when that was larger) are counted."""
    budget = plan.budget
    if budget.input <= 0:
        return MIN_TAIL_SHARE
    cap = budget.share(1 - entry.context.intact_share)
    last = int(cached.tokens_after * plan.scale) if cached is not None else 0
    extraction = max(last, cap)
    room = budget.prompt_limit * entry.context.compact_to - budget.system_tokens - extraction
    return min(entry.context.intact_share, max(MIN_TAIL_SHARE, room / budget.input))
