"""Which messages stay verbatim, which are condensed, and how the condensed request reads.

The split keeps every system message verbatim, keeps the newest messages that fit the intact
share of the budget (always the last user message and what follows it, and never an assistant
`tool_calls` message apart from its tool results), and hands the older rest to extraction.
The stand-in is one labelled system message in place of the condensed turns. Pure functions.

An agent's turn is one user message and then its tool calls and results, often more of them
than the window holds: the tool exchanges after the last user message may be condensed too
(the newest one always stays). The last user message is then condensed with them and also
sent verbatim after the stand-in (`Split.pinned`): the model still reads its task as asked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from itertools import chain, islice
from operator import methodcaller
from typing import Any

SYSTEM_ROLES = frozenset({"system", "developer"})
CONTEXT_LABEL = "[overspill: condensed history]"
_RESULT_ROLES = frozenset({"tool", "function"})
_ROLE = methodcaller("get", "role")


@dataclass(frozen=True, slots=True)
class Split:
    """Which messages stay verbatim, which are condensed, which stay intact at the end."""

    system: tuple[int, ...]
    historical: tuple[int, ...]
    tail: tuple[int, ...]
    pinned: tuple[int, ...] = ()
    """The last user message, when it is among the historical ones (the tool exchanges after it
    did not fit): sent again verbatim after the stand-in."""

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
        if _calls_tools(messages[index]):
            while end < len(messages) and messages[end].get("role") in _RESULT_ROLES:
                end += 1
        groups.append((index, end))
        index = end
    return groups


def units_from_end(messages: Sequence[Mapping[str, Any]]) -> Iterator[tuple[int, int]]:
    """`units(messages)` newest first, reading the messages only as far back as it is asked
    to go (a split keeps a short tail of a long history)."""
    end = len(messages)
    while end > 0:
        first = end - 1
        while first >= 0 and messages[first].get("role") in _RESULT_ROLES:
            first -= 1
        if first == end - 1 or (first >= 0 and _calls_tools(messages[first])):
            yield (first, end)  # one message, or a call with its results
            end = first
            continue
        for index in range(end - 1, first, -1):  # results without their call: one unit each
            yield (index, index + 1)
        end = first + 1


def system_indices(messages: Sequence[Mapping[str, Any]], end: int) -> tuple[int, ...]:
    """The indices before `end` of system (and developer) messages (a few, among many: found
    by `list.index` over the roles, not by a step per message)."""
    roles = list(map(_ROLE, islice(messages, end)))
    found: list[int] = []
    for role in SYSTEM_ROLES:
        at = -1
        with suppress(ValueError):
            while True:
                at = roles.index(role, at + 1)
                found.append(at)
    return tuple(sorted(found))


def partition(
    messages: Sequence[Mapping[str, Any]], end: int, system: Sequence[int] | None = None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(system, historical): the indices before `end` of system messages and of the rest
    (`system`: every system message's index, when the caller already has them)."""
    if system is None:
        system = system_indices(messages, end)
    else:
        system = tuple(i for i in system if i < end)
    bounds = (-1, *system, end)
    historical = tuple(chain.from_iterable(map(range, [a + 1 for a in bounds], bounds[1:])))
    return system, historical


def last_user_index(messages: Sequence[Mapping[str, Any]]) -> int:
    """Index of the newest user message (or of the last message when there is none)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return len(messages) - 1


def split_history(
    messages: Sequence[Mapping[str, Any]],
    counts: Sequence[int],
    *,
    tail_budget: int,
    system: Sequence[int] | None = None,
) -> Split:
    """Keep the newest units within `tail_budget` tokens; older non-system ones are historical
    (`system`: the system messages' indices, when the caller already has them)."""
    required = last_user_index(messages)
    start = len(messages)
    used = 0
    newest = True  # no turn (other than system messages) is in the tail yet
    for unit_start, unit_end in units_from_end(messages):
        cost = sum(counts[i] for i in range(unit_start, unit_end) if not _is_system(messages[i]))
        over = used + cost > tail_budget
        exchange = not newest and _calls_tools(messages[unit_start])
        if over and (unit_end <= required or exchange):
            break  # an older turn, or an agent's older tool exchange after the last user turn
        used += cost
        start = unit_start
        newest = newest and all(_is_system(messages[i]) for i in range(unit_start, unit_end))
    start = _after_leading_systems(messages, start)
    kept, historical = partition(messages, start, system)
    return Split(kept, historical, tuple(range(start, len(messages))), pinned_of(messages, start))


def pinned_of(messages: Sequence[Mapping[str, Any]], end: int) -> tuple[int, ...]:
    """The last user message when it lies before `end` (the tail's start) with no user message
    after it: an agent's task, condensed with its older tool exchanges and sent again."""
    last = last_user_index(messages)
    if last < end and messages[last].get("role") == "user":
        return (last,)
    return ()


def _after_leading_systems(messages: Sequence[Mapping[str, Any]], start: int) -> int:
    """A tail that would start inside the leading system block starts after it instead."""
    leading = 0
    while leading < len(messages) and _is_system(messages[leading]):
        leading += 1
    return max(start, leading) if leading < len(messages) else start


def _calls_tools(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "assistant" and bool(message.get("tool_calls"))


def _is_system(message: Mapping[str, Any]) -> bool:
    return message.get("role") in SYSTEM_ROLES


def context_message(extraction: str, replaced: int, *, cut: bool = False) -> dict[str, str]:
    """The one labelled message that stands in for the condensed turns (`cut`: no model could
    condense them, so the text is their head and tail with a visible omission, and facts)."""
    if cut:
        intro = (
            f"No model could condense the {replaced} earliest messages of this conversation, "
            "so overspill kept their beginning and end (the middle is cut, marked) and facts "
            "quoted from them, to fit the model's context window:"
        )
    else:
        intro = (
            f"The {replaced} earliest messages of this conversation were condensed by overspill "
            "to fit the model's context window. Treat these notes as what was said in them:"
        )
    return {"role": "system", "content": f"{CONTEXT_LABEL} {intro}\n\n{extraction}"}


def assemble(
    messages: Sequence[Mapping[str, Any]], split: Split, stand_in: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """System messages, then the stand-in for the historical part (and the pinned last user
    message), then the intact tail."""
    return [
        *(messages[i] for i in split.system),
        stand_in,
        *(messages[i] for i in split.pinned),
        *(messages[i] for i in split.tail),
    ]
