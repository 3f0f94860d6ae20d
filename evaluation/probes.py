"""Probes: a question asked after compaction, and how its answer is scored. Pure.

Each probe names the values that make an answer right (`accept`, any one of them) and the
values that make it wrong even beside a right one (`stale`: a corrected value, the option a
decision rejected, a next step already done). Matching ignores case and runs of whitespace,
and a value must stand as a whole token (``8443`` is not found in ``18443``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

ProbeKind = Literal[
    "user_fact",
    "assistant_fact",
    "tool_fact",
    "corrected_fact",
    "decision",
    "identifier",
    "next_step",
    "instruction",
]
PROBE_KINDS: tuple[ProbeKind, ...] = get_args(ProbeKind)
"""Every kind, in the order reports list them."""

VALUE_SUFFIX = " Answer with just the value."
"""Appended to a question whose answer is a value (not to an instruction's task)."""


class Asked(Protocol):
    """What the runner asks and scores: a generated probe, or an outside dataset's question
    (evaluation/locomo.py)."""

    @property
    def kind(self) -> str: ...
    @property
    def question(self) -> str: ...
    @property
    def prompt(self) -> str: ...
    def score(self, answer: str) -> bool: ...
    def present(self, text: str) -> bool: ...
    def evidence_in(self, text: str) -> bool | None: ...
    def answers(self, said: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class Probe:
    """One question about a conversation, with what makes its answer right or wrong."""

    kind: ProbeKind
    question: str
    accept: tuple[str, ...]
    stale: tuple[str, ...] = ()
    template: str = ""
    """The phrasing it was planted with (``phrasings.template_label``); empty: none named."""

    def __post_init__(self) -> None:
        if not self.accept:
            raise ValueError("a probe needs at least one accepted answer")

    @property
    def prompt(self) -> str:
        """The user message that asks it."""
        if self.kind == "instruction":
            return self.question
        return self.question + VALUE_SUFFIX

    def score(self, answer: str) -> bool:
        """Right when the answer holds an accepted value and no stale one."""
        return contains_any(answer, self.accept) and not contains_any(answer, self.stale)

    def present(self, text: str) -> bool:
        """Whether a context (what the model was shown) still holds an accepted value."""
        return contains_any(text, self.accept)

    def evidence_in(self, text: str) -> bool | None:
        """None: a generated probe marks no turns as its evidence (its value is its own)."""
        return None

    def answers(self, said: str) -> bool:
        """Whether one message (its text) answers it: it holds an accepted value."""
        return self.present(said)


def normalise(text: str) -> str:
    """Lower case, whitespace runs as one space."""
    return " ".join(text.lower().split())


def contains_any(text: str, values: tuple[str, ...]) -> bool:
    """Whether any of `values` stands in `text` as a whole token (case and spacing ignored)."""
    haystack = normalise(text)
    return any(_token(value).search(haystack) for value in values)


def _token(value: str) -> re.Pattern[str]:
    """`value` not glued to a letter or digit on either side."""
    return re.compile(rf"(?<![a-z0-9]){re.escape(normalise(value))}(?![a-z0-9])")
