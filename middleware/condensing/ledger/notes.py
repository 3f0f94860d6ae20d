"""The model's notes judged against the ledger, and the earlier note lines they lost. Pure.

The quoted user statements judge the model's notes: a note line that states a subject the
user stated, without the user's latest value, is a guess and is dropped
(``drop_contradicted``). A note line that copies what the ledger quotes (its lines, a
listing's rows) is dropped too (``drop_copied``): the ledger ranks that line with the rest.

An earlier note line the new notes lost comes back as a ``- notes:`` line (``carried_notes``),
ranked below what anyone stated; one that copies a listing's row (the model copied search hits
into its notes) is a ``- notes listing:`` line and ranks as the listing's rows do
(``copied_rows_demoted``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from middleware.condensing.ledger.records import (
    LISTING,
    LISTING_SCORE,
    NOTES,
    NOTES_SCORE,
    Fact,
)
from middleware.condensing.ledger.supersede import Line, contradicts, settled
from middleware.condensing.ledger.terms import key_spans, key_tokens, sentences

__all__ = [
    "CARRIED_NOTE_SCORE",
    "carried_notes",
    "copied_rows_demoted",
    "drop_contradicted",
    "drop_copied",
]

CARRIED_NOTE_SCORE = NOTES_SCORE
"""An earlier note line carried into the ledger is a model's paraphrase: it ranks below what
anyone stated (a small model's notes are often a guess; the quoted lines are the words)."""
_HIT_ROW = re.compile(r"^[\w./-]+\.\w{1,6}:\d+:")
"""A search hit's ``path:line:`` start."""
_LOOSE_PARTS = re.compile(r"\w+")
_ROLE_PREFIX = re.compile(r"^(?:user|assistant|tool|system)(?:\([\w.-]*\))?:\s*", re.IGNORECASE)
"""A transcript's ``role:`` (``tool(search_code):``) at the start of a copied line."""


def drop_contradicted(notes: str, facts: Sequence[Fact]) -> str:
    """The notes without a line that states a subject the user stated, without the user's
    (latest) value: a small model asked to take notes with the user's question in view
    writes guesses for it ("our project code is called ledger" beside the user's "our
    project code is PRJ-5499"), and a reader believes the notes first. The quoted line
    stays; a note that agrees with it stays too."""
    _, live = settled(facts)
    statements = [
        Line(fact.role, fact.text, key_spans(fact.text)) for fact in live if fact.role == "user"
    ]
    if not statements:
        return notes
    kept = [line for line in notes.splitlines() if not contradicts(line, statements)]
    return "\n".join(kept)


def drop_copied(notes: str, facts: Sequence[Fact]) -> str:
    """The notes without a line copied from what the ledger quotes: each of its sentences a
    quoted line, a request or a confirmation (its role, bullets, backticks, case and spacing
    aside), or a listing row's shape or a search hit. The ledger ranks those lines against
    everything else said, and a copy in the notes only takes its room: a small model fills
    its notes with the last request, test results and search hits, and the confirmation of
    a decision then has no room left. A sentence the ledger does not quote stays a note."""
    quoted = {_plain(text) for fact in facts for text in (fact.text, fact.asked, fact.confirmed)}
    quoted.discard("")
    shapes = {_loose_shape(fact.text) for fact in facts if fact.role.endswith(LISTING)}
    kept = []
    for line in notes.splitlines():
        body = _ROLE_PREFIX.sub("", line.strip().lstrip("-*• ").strip())
        parts = sentences(body)
        copied = bool(parts) and all(_plain(part) in quoted for part in parts)
        if not copied and not (body and _copies_row(body, shapes)):
            kept.append(line)
    return "\n".join(kept)


def _plain(line: str) -> str:
    """A line as compared for a copy: bullets, backticks, case and spacing aside."""
    return " ".join(line.strip().lstrip("-*• ").strip("`").casefold().split())


def carried_notes(earlier: str, notes: str) -> list[Fact]:
    """The earlier note lines whose key terms the new notes no longer all hold, as ledger
    lines (``- notes: …``): what the model merged away or a cut removed comes back quoted."""
    held = key_tokens(notes)
    carried = []
    for raw in earlier.splitlines():
        line = raw.strip().lstrip("-*• ").strip()
        keys = key_tokens(line)
        if line and not line.startswith("[") and keys and not keys <= held:
            carried.append(Fact(NOTES, line, CARRIED_NOTE_SCORE, rule=NOTES))
    return carried


def copied_rows_demoted(facts: Sequence[Fact]) -> list[Fact]:
    """The facts with each carried note line that copies a listing's row (the shape of a
    row the ledger quotes, spacing and backticks aside, or a search hit's ``path:line:``)
    as a ``notes listing`` line scored `LISTING_SCORE`, which it stays at later growths: the
    model's copy of search hits holds no more than the hits and must not take the room of
    a file's settings."""
    shapes = {_loose_shape(fact.text) for fact in facts if fact.role.endswith(LISTING)}
    return [
        replace(fact, role=f"{NOTES} {LISTING}", score=LISTING_SCORE, rule=LISTING)
        if fact.role == NOTES and _copies_row(fact.text, shapes)
        else fact
        for fact in facts
    ]


def _copies_row(line: str, shapes: set[str]) -> bool:
    """Whether a note line has a listing row's shape or a search hit's start."""
    return bool(_HIT_ROW.match(line.strip().strip("`"))) or _loose_shape(line) in shapes


def _loose_shape(line: str) -> str:
    """A line's shape with each run of letters, digits and underscores masked, its spacing
    and surrounding backticks aside (``a/a/a.a:a: a(a, a)``)."""
    return _LOOSE_PARTS.sub("a", " ".join(line.strip().strip("`").split()))
