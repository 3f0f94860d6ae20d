"""Render: the extraction's text from its notes and the ledger's records. Pure.

The records are text only here, when the prompt is built: a notes section, then the quoted
facts section of one ``- role: text`` line per record (``Fact.render``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from middleware.condensing.ledger.records import Fact
from middleware.condensing.prompt import NOTES_HEADER

__all__ = ["FACTS_HEADER", "Rendered", "layout"]

FACTS_HEADER = "Quoted facts (verbatim from earlier turns):"


@dataclass(frozen=True, slots=True)
class Rendered:
    """An extraction's text, and what it was made of: its notes and the records it quotes
    (the merged line among them), which the next growth reads back."""

    text: str
    notes: str
    facts: tuple[Fact, ...]


def layout(notes: str, facts: Sequence[Fact]) -> str:
    """The extraction text: the notes section, then the quoted facts section."""
    sections = [f"{NOTES_HEADER}\n{notes}"] if notes else []
    if facts:
        sections.append(FACTS_HEADER + "\n" + "\n".join(fact.render() for fact in facts))
    return "\n\n".join(sections)
