"""Compacting to a target, not to the wall: how much history stays intact after a growth.

Shared by `history_splice` (growths ahead of the wall) and `overflow_recovery` (the growth
after a refusal), so that either leaves the request near `context.compact_to` of the prompt
budget and the next growth comes several turns later, not on the next turn. Pure.

A growth ahead of the wall also leaves room for `context.turns_per_growth` turns of the
conversation's own size (`landing_share`): it lands at least that many turns below
`grow_at`, so the spliced prefix (which changes at every growth, and with it the upstream's
prompt cache) stays the same bytes for that many turns, even in a window where `compact_to`
alone would leave room for two or three.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernel.config import ModelEntry
from kernel.store import HistoryEntry
from kernel.types import Message
from middleware.condensing.condenser import Plan

MIN_TAIL_SHARE = 0.05
"""The intact tail never plans for less than this share of the budget (the newest turn)."""
RECENT_MESSAGES = 24
"""How many of the newest messages the size of a turn is measured on (a few turns)."""


def tail_share(
    entry: ModelEntry, plan: Plan, cached: HistoryEntry | None, landing: float | None = None
) -> float:
    """The intact tail's share of the input budget that leaves a grown request near
    `landing` of the prompt budget (`context.compact_to` unless given): what is left once the
    system messages and the extraction (its cap, or the last one when that was larger) are
    counted."""
    budget = plan.budget
    if budget.input <= 0:
        return MIN_TAIL_SHARE
    cap = budget.share(1 - entry.context.intact_share)
    last = int(cached.tokens_after * plan.scale) if cached is not None else 0
    extraction = max(last, cap)
    target = entry.context.compact_to if landing is None else landing
    room = budget.prompt_limit * target - budget.system_tokens - extraction
    return min(entry.context.intact_share, max(MIN_TAIL_SHARE, room / budget.input))


def turn_tokens(messages: Sequence[Message], counts: Sequence[int]) -> int:
    """The size of the conversation's largest recent turn (a user message and what followed
    it, tool calls included), in raw tokens: what the next turn may well add."""
    largest = current = 0
    for i in range(max(0, len(messages) - RECENT_MESSAGES), len(messages)):
        if messages[i].get("role") == "user":
            largest, current = max(largest, current), 0
        current += counts[i]
    return max(largest, current)


def landing_share(entry: ModelEntry, plan: Plan, turn: int) -> float:
    """Where a growth lands, as a share of the prompt budget: `compact_to`, or lower when
    that leaves room for fewer than `turns_per_growth` turns of `turn` raw tokens before
    `grow_at` (a function of the conversation, not of how far it is: growing the same
    messages twice plans the same growth)."""
    limit = plan.budget.prompt_limit
    if limit <= 0:
        return entry.context.compact_to
    room = entry.context.turns_per_growth * turn * plan.scale / limit
    return max(0.0, min(entry.context.compact_to, entry.context.grow_at - room))
