"""The conditions compared: what the model is shown in place of the whole conversation.

    short            the same seed's conversation without its fillers (a few turns): what
                     the model answers at all, before any length or compaction
    full             the whole conversation (the ceiling, when it fits)
    oracle           the turns that answer the probe, then the newest turns the budget
                     still takes, as they were said: what a compactor that knew the question
                     and its answer would show (the bound on every compaction at this
                     budget, a reader's own misses included)
    overspill-once   overspill's layers, the whole conversation sent once: one extraction
    overspill-turns  overspill's layers, the conversation sent turn by turn: nested growths
    summary          one model call "summarise this conversation", the summary stands in
    masking          observation masking (long tool results and replies become placeholders)
    middle-cut       the opening and the newest turns, the middle cut with a marker
    drop-oldest      the oldest messages dropped until the rest fits (the system kept), as
                     Ollama does

The transforms here are the baselines, pure over messages and a token budget; they reuse the
strategies overspill itself falls back to (middleware/condensing/strategies.py). The two
overspill conditions run the real layers and live in runner.py. A transform answers None when
it cannot make the conversation fit: that condition overflowed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, get_args

from kernel.types import Message
from middleware.condensing.prompt import render_transcript
from middleware.condensing.split import SYSTEM_ROLES, units
from middleware.condensing.strategies import mask_messages, middle_cut

ConditionName = Literal[
    "short",
    "full",
    "oracle",
    "overspill-once",
    "overspill-turns",
    "summary",
    "masking",
    "middle-cut",
    "drop-oldest",
]
CONDITIONS: tuple[ConditionName, ...] = get_args(ConditionName)
OVERSPILL_CONDITIONS: frozenset[ConditionName] = frozenset({"overspill-once", "overspill-turns"})

Count = Callable[[Sequence[Message]], int]
"""Tokens of some messages, as the budget counts them."""

SUMMARY_REQUEST = (
    "Summarise the following conversation between a user and a coding assistant, so that "
    "the assistant can continue it without seeing it again."
)
SUMMARY_LABEL = "Summary of the conversation so far:"


def _system(messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """The system messages and the rest, each in order."""
    system = [m for m in messages if m.get("role") in SYSTEM_ROLES]
    rest = [m for m in messages if m.get("role") not in SYSTEM_ROLES]
    return system, rest


def drop_oldest(messages: Sequence[Message], budget: int, count: Count) -> list[Message] | None:
    """The system messages and the newest whole units (a tool call keeps its results) that
    fit `budget`; None when not even the newest unit fits."""
    system, rest = _system(messages)
    groups = units(rest)
    for first in range(len(groups)):
        kept = [*system, *rest[groups[first][0] :]]
        if count(kept) <= budget:
            return kept
    return None


def oracle(
    messages: Sequence[Message], budget: int, count: Count, answers: Callable[[str], bool]
) -> list[Message] | None:
    """The system messages, every whole unit holding a message that `answers` the probe
    (its text), and the newest units the rest of `budget` takes, in the conversation's order;
    None when the answering units alone do not fit."""
    system, rest = _system(messages)
    groups = units(rest)
    marked = [
        any(answers(text_of([message])) for message in rest[start:end]) for start, end in groups
    ]

    def kept(newest: int) -> list[Message]:
        """The marked units and the `newest` last ones."""
        first = len(groups) - newest
        chosen = [
            message
            for index, (start, end) in enumerate(groups)
            if marked[index] or index >= first
            for message in rest[start:end]
        ]
        return [*system, *chosen]

    if count(kept(0)) > budget:
        return None
    low, high = 0, len(groups)  # count(kept(low)) fits; find the most newest units that fit
    while low < high:
        middle = (low + high + 1) // 2
        if count(kept(middle)) <= budget:
            low = middle
        else:
            high = middle - 1
    return kept(low)


def masking(messages: Sequence[Message], budget: int, count: Count) -> list[Message] | None:
    """Every long tool result and long assistant reply replaced by a placeholder naming what
    was there; None when even that does not fit."""
    masked = mask_messages(messages, replies=True)
    return masked if count(masked) <= budget else None


def cut_middle(messages: Sequence[Message], budget: int, count: Count) -> list[Message] | None:
    """The system messages, then the opening and newest whole units within the rest of the
    budget with a marker where the middle went; None when that cannot fit."""
    system, rest = _system(messages)
    counts = [count([m]) for m in rest]
    kept = middle_cut(rest, counts, budget - count(system))
    if kept is None:
        return None
    whole = [*system, *kept]
    return whole if count(whole) <= budget else None


def summary_prompt(messages: Sequence[Message], room: int, count: Count) -> list[Message] | None:
    """The one call a naive summariser makes: the transcript of the whole conversation (its
    newest part that fits `room`, when the whole does not); None when nothing fits."""
    _, rest = _system(messages)
    groups = units(rest)
    for first in range(len(groups)):
        transcript = render_transcript(rest[groups[first][0] :])
        prompt: list[Message] = [{"role": "user", "content": f"{SUMMARY_REQUEST}\n\n{transcript}"}]
        if count(prompt) <= room:
            return prompt
    return None


def with_summary(messages: Sequence[Message], summary: str) -> list[Message]:
    """The system messages, then the summary in place of everything else."""
    system, _ = _system(messages)
    return [*system, {"role": "system", "content": f"{SUMMARY_LABEL}\n{summary}"}]


def text_of(messages: Sequence[Message]) -> str:
    """What a model was shown, as one text (to tell a lost value from a missed one)."""
    return render_transcript(messages)


Transform = Callable[[Sequence[Message], int, Count], list[Message] | None]
TRANSFORMS: dict[ConditionName, Transform] = {
    "full": lambda messages, budget, count: list(messages),
    "masking": masking,
    "middle-cut": cut_middle,
    "drop-oldest": drop_oldest,
}
"""The conditions that are a pure transform of the conversation (`full` is never cut: the
upstream says whether it fits)."""
