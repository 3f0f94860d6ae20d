"""The ledger's one entry point: a growth's records, then the extraction they render into.

The stages run in this order, each a small pure function of its own module:

1. carry (``carry.carried``): the records the previous extraction kept, read back as
   records and ranked for this growth's question;
2. select (``select.fact_lines``): the fact-bearing sentences of the messages, quoted;
3. judge the notes (``notes``): the model's note lines that copy a quoted line or guess
   against the user's statement go, the earlier note lines the new notes lost come back;
4. supersede (``supersede.settled``): a statement a later one corrected goes, an echo
   ranks last;
5. rank (``rank.select_facts``) and fit (``fit.fit``): what the budget holds, the rest
   counted on one merged line;
6. render (``render.layout``): the text, with the records it quotes.

The condenser's strategies call `Ledger` alone: ``Ledger.grow`` for a growth's records,
then ``Ledger.extraction`` (beside a model's notes) or ``Ledger.render`` (beside a cut
transcript) or ``Ledger.as_is`` (beside a masked one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernel.records import HistoryEntry, stored_facts
from kernel.types import Message
from middleware.condensing.cutting import cut_tail
from middleware.condensing.ledger.carry import carried, growth_facts
from middleware.condensing.ledger.fit import fit, ledger_tokens, notes_room
from middleware.condensing.ledger.notes import (
    carried_notes,
    copied_rows_demoted,
    drop_contradicted,
    drop_copied,
)
from middleware.condensing.ledger.records import Fact, from_stored, to_stored
from middleware.condensing.ledger.render import Rendered, layout
from middleware.condensing.prompt import drop_unsupported

__all__ = ["Ledger", "Previous"]


@dataclass(frozen=True, slots=True)
class Previous:
    """An earlier stand-in a growth starts from: its text, its notes and the records its
    ledger kept (as stored with it)."""

    text: str
    notes: str = ""
    facts: tuple[Fact, ...] = ()

    @classmethod
    def of(cls, entry: HistoryEntry) -> Previous:
        """What a stored extraction holds: its text, its notes, its records (decoded here;
        StoreError when they do not validate)."""
        return cls(entry.extraction, entry.notes, tuple(map(from_stored, entry.records())))

    @staticmethod
    def stored(facts: Sequence[Fact]) -> str:
        """The records as an extraction's entry stores them (``Previous.of`` reads them)."""
        return stored_facts(map(to_stored, facts))


@dataclass(frozen=True, slots=True)
class Ledger:
    """One growth's ledger before selection: its records and the earlier notes."""

    earlier: str
    """The previous extraction's notes (empty for a first extraction)."""
    facts: tuple[Fact, ...]

    @classmethod
    def grow(
        cls,
        previous: Previous | None,
        condensed: Sequence[Message] = (),
        messages: Sequence[Message] = (),
        focus: str | None = None,
        positions: Sequence[int] = (),
    ) -> Ledger:
        """The records of a growth: the previous ones carried, then the new `messages`
        quoted; with `condensed` (the messages `previous` stands in for, still in the
        request) those are quoted anew and only the previous carried note lines kept
        (``carry.growth_facts``). `positions`: the request's index of each message, the
        condensed ones first (each record names its message by it)."""
        earlier = carried(previous.facts, focus) if previous else []
        facts = growth_facts(earlier, condensed, messages, focus, positions)
        return cls(previous.notes if previous else "", tuple(facts))

    @classmethod
    def carry(cls, previous: Previous | None) -> Ledger:
        """The previous records as they are carried forward, with no new message."""
        facts = carried(previous.facts) if previous else []
        return cls(previous.notes if previous else "", tuple(facts))

    def tokens(self, model: str = "") -> int:
        """Tokens the records cost as ledger lines, all of them."""
        return ledger_tokens(self.facts, model)

    def notes_room(self, target_tokens: int, model: str = "") -> int:
        """Tokens notes may take beside this ledger within `target_tokens`."""
        return notes_room(target_tokens, self.tokens(model))

    def extraction(
        self,
        notes: str,
        *,
        source: str,
        focus: str | None,
        lead: str,
        notes_tokens: int,
        target_tokens: int,
        model: str = "",
    ) -> Rendered:
        """The extraction: the model's notes without what the ledger judges a copy, a guess
        or an invention (nothing `source` holds), after `lead`, cut to `notes_tokens`,
        beside the ledger with the earlier note lines the new notes lost, within
        `target_tokens`."""
        notes = drop_copied(notes, self.facts)
        notes = drop_contradicted(drop_unsupported(notes, source, focus), self.facts)
        notes = cut_tail(lead + notes, notes_tokens, model)
        facts = copied_rows_demoted([*self.facts, *carried_notes(self.earlier, notes)])
        return fit(notes, facts, target_tokens, model)

    def render(self, notes: str, target_tokens: int, model: str = "") -> Rendered:
        """The `notes` (which hold the earlier ones themselves) beside as much of the ledger
        as fits `target_tokens`."""
        return fit(notes, self.facts, target_tokens, model)

    def as_is(self, notes: str) -> Rendered:
        """The `notes` beside every record, unranked (a masked transcript's stand-in)."""
        return Rendered(layout(notes, self.facts), notes.strip(), self.facts)
