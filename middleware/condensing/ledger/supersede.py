"""Supersede: which stated values a later statement replaced, and which lines only echo. Pure.

A user who corrects a value ("Correction: the upload limit is 380 MB, not 550 MB", "the
on-call engineer this week is now Tomasz Novak") leaves two statements of one subject in the
history. Quoted side by side, a small model picks either; the ledger keeps only the current
one. A statement's *subjects* are, for each value it states (a key term), the words of the
clause that leads to it, up to its verb "is"/"are" when it has one: "the maximum upload
size" for "the maximum upload size is 380 MB". A later user statement replaces an earlier
one when

- both are the user's, the later one is no question,
- they share a subject with a different value,
- the later one reads as a correction (a word such as correction, actually, update, now,
  instead, changed, no longer, not; or it names the earlier value), and
- every other value of the earlier one is in the later one (nothing else is lost).

Two statements of one subject without such a word ("The timeout is 30s." then "The timeout
is 60s for writes.") are both kept: the ledger cannot tell a correction from a second fact.

An *echo* is a line that is not the user's or a tool's and whose values all appear in earlier
user or tool lines (an assistant's "Noted: next we run X"): it adds nothing, and when its
values are all replaced ones it would bring a stale value back, so it goes with them.

Lines come in as (role, text, key spans), in conversation order (``settle``); ``settled``
applies it to the ledger's records: a replaced one goes, its correction names it
(``Fact.supersedes``), an echo ranks with a listing's rows.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace

from middleware.condensing.ledger.records import LISTING_SCORE, Fact
from middleware.condensing.ledger.terms import key_spans

__all__ = ["Line", "Settled", "contradicts", "settle", "settled", "stated_subject", "subjects"]

_CLAUSE_BREAK = re.compile(r"[,;:()\[\]!?]|\s[-\u2013\u2014]\s|\.\s")
_VERB = re.compile(r"\b(?:is|are|was|were|will be|becomes)\b", re.IGNORECASE)
_CORRECTION = re.compile(
    r"\b(?:correction|corrected|correcting|actually|update|updated|instead|changed?|now|"
    r"no longer|not|rather|mistake|wrong)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z]{3,}")
_FILLER = frozenset(
    {"the", "and", "now", "our", "its", "still", "also", "actually", "really", "just", "then"}
)


@dataclass(frozen=True, slots=True)
class Line:
    """One ledger line: who said it, its text, its key terms."""

    role: str
    text: str
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Settled:
    """Indices of the lines a later statement replaced, and of the lines that only echo."""

    replaced: frozenset[int]
    echoes: frozenset[int]
    corrections: tuple[tuple[int, int], ...] = ()
    """(replaced, by): each statement a later one replaced, and that later one."""


def subjects(text: str, keys: Sequence[str]) -> list[tuple[frozenset[str], str]]:
    """(subject words, value) for each key term of `text`: the words of the clause before
    the value, cut at its verb (``is``) when it has one; empty subjects are left out."""
    found = []
    lowered = text.lower()
    for key in keys:
        at = lowered.find(key.lower())
        if at < 0:
            continue
        clause = _CLAUSE_BREAK.split(text[:at])[-1]
        verb = _VERB.search(clause)
        if verb is not None:
            clause = clause[: verb.start()]
        words = frozenset(_WORD.findall(clause.lower())) - _FILLER
        if words:
            found.append((words, key.lower()))
    return found


def _who(role: str) -> str:
    return role.split("(")[0].split(" ")[0]


def _replaced_value(later: Line, earlier: Line) -> str | None:
    """The value of the user's `earlier` statement that the user's `later` one corrects
    (lower-cased), or None when it corrects none."""
    if later.text.rstrip().endswith("?"):
        return None
    later_keys = {key.lower() for key in later.keys}
    named_old = bool({key.lower() for key in earlier.keys} & later_keys)
    if not (named_old or _CORRECTION.search(later.text)):
        return None
    new = subjects(later.text, later.keys)
    for words, old in subjects(earlier.text, earlier.keys):
        if any(words == words2 and old != value for words2, value in new):
            rest = {key.lower() for key in earlier.keys} - {old}
            if rest <= later_keys:
                return old
    return None


def settle(lines: Sequence[Line]) -> Settled:
    """Which lines later statements replaced, and which only echo earlier ones.

    A later line can replace an earlier one only when it names one of its values or reads as
    a correction (`_replaced_value`), so each earlier line is checked against those later
    lines alone, in order: linear in the lines for a history that corrects little, where
    checking every pair took minutes on a long document (1,800 lines: 1.7 million pairs)."""
    users = [i for i, line in enumerate(lines) if _who(line.role) == "user" and line.keys]
    naming: dict[str, list[int]] = {}
    for i in users:
        for key in {key.lower() for key in lines[i].keys}:
            naming.setdefault(key, []).append(i)
    corrective = [j for j in users if _CORRECTION.search(lines[j].text)]
    replaced: set[int] = set()
    corrections: list[tuple[int, int]] = []
    stale: set[str] = set()
    for i in users:
        later = set(corrective[bisect_right(corrective, i) :])
        for key in {key.lower() for key in lines[i].keys}:
            named = naming[key]
            later.update(named[bisect_right(named, i) :])
        for j in sorted(later):
            old = _replaced_value(lines[j], lines[i])
            if old is not None:
                replaced.add(i)
                corrections.append((i, j))
                stale.add(old)
                break
    stated: set[str] = set()
    echoes: set[int] = set()
    for i, line in enumerate(lines):
        keys = {key.lower() for key in line.keys}
        who = _who(line.role)
        if who in ("user", "tool"):
            stated |= keys
        elif keys and who == "assistant" and keys <= stated:
            echoes.add(i)
            if keys <= stale:
                replaced.add(i)
    return Settled(frozenset(replaced), frozenset(echoes - replaced), tuple(corrections))


def stated_subject(text: str) -> frozenset[str]:
    """The subject a sentence states something of: the words of the clause before its first
    verb ``is``/``are`` (``the main database`` in "The main database is called X"); empty
    when it has no such verb."""
    verb = _VERB.search(text)
    if verb is None or text.rstrip().endswith("?"):
        return frozenset()
    clause = _CLAUSE_BREAK.split(text[: verb.start()])[-1]
    return frozenset(_WORD.findall(clause.lower())) - _FILLER


def contradicts(note: str, statements: Sequence[Line]) -> bool:
    """Whether a note line states a subject one of the user's `statements` states, without
    that statement's value: a small model's guess ("The main database is called PostgreSQL"
    beside the user's "The main database is called heron_signal")."""
    subject = stated_subject(note)
    if not subject:
        return False
    lowered = note.lower()
    for line in statements:
        if _who(line.role) != "user" or line.text.rstrip().endswith("?"):
            continue
        for words, value in subjects(line.text, line.keys):
            if words == subject and value not in lowered:
                return True
    return False


def settled(facts: Sequence[Fact]) -> tuple[list[Fact], list[Fact]]:
    """(all, live): the facts with echoes scored `LISTING_SCORE` and each correction naming
    the statement it replaced (``Fact.supersedes``), and those of them no later statement
    replaced: a replaced line is never quoted beside its correction, and is counted on the
    merged line like any line not quoted."""
    lines = [Line(fact.role, fact.text, key_spans(fact.text)) for fact in facts]
    found = settle(lines)
    replaces = {later: facts[earlier].text for earlier, later in reversed(found.corrections)}
    every = [
        replace(fact, score=min(fact.score, LISTING_SCORE), rule="echo")
        if i in found.echoes
        else replace(fact, supersedes=replaces[i])
        if i in replaces
        else fact
        for i, fact in enumerate(facts)
    ]
    return every, [fact for i, fact in enumerate(every) if i not in found.replaced]
