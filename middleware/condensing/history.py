"""Pure planning for condensing a conversation: the token budget and the split of its messages.

The budget comes from the model's real window, minus the output reserve, a safety margin and
the system prompt. The split keeps every system message verbatim, keeps the newest messages
that fit the intact share of the budget (always the last user message and what follows it, and
never an assistant `tool_calls` message apart from its tool results), and hands the older rest
to extraction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SYSTEM_ROLES = frozenset({"system", "developer"})
CONTEXT_LABEL = "[overspill: condensed history]"


@dataclass(frozen=True, slots=True)
class Budget:
    """Token budget for one request to one model."""

    window: int
    output_reserve: int
    safety_margin: int
    system_tokens: int

    @property
    def input(self) -> int:
        """Tokens available for everything but the system prompt."""
        return max(0, self.window - self.output_reserve - self.safety_margin - self.system_tokens)

    def share(self, fraction: float) -> int:
        """A share of the input budget (e.g. 0.7 for the intact tail)."""
        return int(self.input * fraction)


def plan_budget(
    window: int,
    *,
    output_reserve: int,
    safety_margin: float,
    system_tokens: int,
) -> Budget:
    """The budget for a window; `safety_margin` is a fraction of the window (0.1 = 10%)."""
    reserve = min(output_reserve, window // 2)
    return Budget(window, reserve, int(window * safety_margin), system_tokens)


def output_reserve(body: Mapping[str, Any], default: int) -> int:
    """The request's own output cap (max_completion_tokens / max_tokens), else the default."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def correction(estimated: int, reported: int | None) -> float:
    """How much the upstream's own count exceeds our estimate (never below 1, at most 2)."""
    if reported is None or estimated <= 0:
        return 1.0
    return min(2.0, max(1.0, reported / estimated))


@dataclass(frozen=True, slots=True)
class Split:
    """Which messages stay verbatim, which are condensed, which stay intact at the end."""

    system: tuple[int, ...]
    historical: tuple[int, ...]
    tail: tuple[int, ...]

    @property
    def historical_end(self) -> int:
        """Index of the first tail message: messages before it are system or historical."""
        return self.tail[0] if self.tail else 0


def units(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Messages grouped so that an assistant `tool_calls` message keeps its tool results.

    Each unit is a half-open index range [start, end).
    """
    groups: list[tuple[int, int]] = []
    index = 0
    while index < len(messages):
        end = index + 1
        if messages[index].get("role") == "assistant" and messages[index].get("tool_calls"):
            while end < len(messages) and messages[end].get("role") in ("tool", "function"):
                end += 1
        groups.append((index, end))
        index = end
    return groups


def last_user_index(messages: Sequence[Mapping[str, Any]]) -> int:
    """Index of the newest user message (or of the last message when there is none)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return len(messages) - 1


def split_history(
    messages: Sequence[Mapping[str, Any]], counts: Sequence[int], *, tail_budget: int
) -> Split:
    """Keep the newest units within `tail_budget` tokens; older non-system ones are historical."""
    required = last_user_index(messages)
    start = len(messages)
    used = 0
    for unit_start, unit_end in reversed(units(messages)):
        cost = sum(counts[i] for i in range(unit_start, unit_end) if not _is_system(messages[i]))
        if unit_end <= required and used + cost > tail_budget:
            break
        used += cost
        start = unit_start
    start = _after_leading_systems(messages, start)
    system = tuple(i for i in range(start) if _is_system(messages[i]))
    historical = tuple(i for i in range(start) if not _is_system(messages[i]))
    return Split(system, historical, tuple(range(start, len(messages))))


def _after_leading_systems(messages: Sequence[Mapping[str, Any]], start: int) -> int:
    """A tail that would start inside the leading system block starts after it instead."""
    leading = 0
    while leading < len(messages) and _is_system(messages[leading]):
        leading += 1
    return max(start, leading) if leading < len(messages) else start


def _is_system(message: Mapping[str, Any]) -> bool:
    return message.get("role") in SYSTEM_ROLES


def context_message(extraction: str, replaced: int) -> dict[str, str]:
    """The one labelled message that stands in for the condensed turns."""
    return {
        "role": "system",
        "content": (
            f"{CONTEXT_LABEL} The {replaced} earliest messages of this conversation were "
            "condensed by overspill to fit the model's context window. Treat these notes as "
            f"what was said in them:\n\n{extraction}"
        ),
    }


def dropped_message(dropped: int) -> dict[str, str]:
    """The visible marker that stands in for turns dropped without a summary."""
    return {
        "role": "system",
        "content": (
            f"[overspill: {dropped} earlier messages of this conversation were dropped to fit "
            "the model's context window; no summary of them could be made]"
        ),
    }


def assemble(
    messages: Sequence[Mapping[str, Any]], split: Split, stand_in: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """System messages, then the stand-in for the historical part, then the intact tail."""
    return [
        *(messages[i] for i in split.system),
        stand_in,
        *(messages[i] for i in split.tail),
    ]
