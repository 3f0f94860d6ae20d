"""Carry: the records an earlier extraction kept, read back for a growth. Pure.

A growth ranks the previous ledger's records again for the question it answers now: each is
scored anew from its text and role (``select.fact_score``, with the focus of this growth;
a line that carries a request ranks with it), lines that differ only in their numbers are a
template again, and the merged line's ``name = value`` terms are a settings line again
(``regained_settings``), so a growth that squeezed a file's settings onto the merged line
does not rank them below every quoted line for good. The records are read as they were
stored: nothing is parsed back from the rendered text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kernel.types import Message
from middleware.condensing.ledger.records import (
    LISTING_SCORE,
    REGAINED_SETTING_SCORE,
    SETTINGS,
    Fact,
    is_carried_note,
    merged_fact,
    settles,
)
from middleware.condensing.ledger.select import (
    SETTING,
    dedupe_facts,
    demote_templates,
    fact_lines,
    fact_score,
    is_focused,
    settings_lines,
    with_request,
)
from middleware.condensing.prompt import focus_words_of

__all__ = ["carried", "growth_facts", "regained_settings"]

MERGED_SCORE = LISTING_SCORE + 1
"""A merged line's rank: its terms are re-listed if it goes, above a listing's rows."""


def carried(facts: Sequence[Fact], focus: str | None = None) -> list[Fact]:
    """An earlier extraction's records as this growth ranks them: each scored anew for the
    `focus` (at least 1: it was quoted once), a request's focus counting for its line, the
    templates demoted, and the merged line's settings regained (``regained_settings``)."""
    focus_words = focus_words_of(focus)
    out: list[Fact] = []
    for fact in facts:
        if fact.merged:
            out += regained_settings(replace(fact, score=MERGED_SCORE))
            continue
        score = max(fact_score(fact.text, fact.role, focus_words), 1)
        again = replace(fact, score=score, asked="", focused=is_focused(fact.text, focus_words))
        if fact.asked and not (fact.confirmed and settles(fact)):
            again = with_request(again, fact.asked, focus_words)
        out.append(again)
    return demote_templates(out)


def regained_settings(merged: Fact) -> list[Fact]:
    """A merged line's ``name = value`` terms as ``tool settings`` lines again (each run of
    them one line), then the merged line with the rest: a file's settings that one growth
    could not quote rank as settings at the next, instead of as bare terms below every
    quoted line, which would lose them for good. The line names no file: the term listed
    before the run may be another fact's path (the file's own is left out when a kept line
    holds it), and a wrong file is worse than none."""
    runs: list[list[str]] = []
    rest: list[str] = []
    in_run = False
    for term in merged.terms:
        setting = bool(SETTING.match(term))
        if not setting:
            rest.append(term)
        elif in_run:
            runs[-1].append(term)
        else:
            runs.append([term])
        in_run = setting
    if not runs:
        return [merged]
    lines = [
        Fact(f"tool {SETTINGS}", text, REGAINED_SETTING_SCORE, rule="regained")
        for pairs in runs
        for text in settings_lines(pairs)
    ]
    count = merged.count - len(lines)
    if count <= 0 and not rest and not merged.left_out:
        return lines
    return [*lines, merged_fact(max(count, 1), tuple(rest), merged.left_out, merged.score)]


def growth_facts(
    earlier: Sequence[Fact],
    condensed: Sequence[Message],
    messages: Sequence[Message],
    focus: str | None = None,
    positions: Sequence[int] = (),
) -> list[Fact]:
    """A growth's ledger lines before selection: the `condensed` messages (those the previous
    extraction stands in for) quoted anew with the new `messages`, and of the previous
    ledger (`earlier`, ``carried``) only the note lines it carried, which no message holds;
    without `condensed`, the previous ledger carried forward, then the messages' facts.
    `positions`: each message's index in the request, the condensed ones first."""
    if condensed:
        notes = [fact for fact in earlier if is_carried_note(fact)]
        quoted = fact_lines([*condensed, *messages], focus, positions)
        return dedupe_facts([*quoted, *notes])
    return dedupe_facts([*earlier, *fact_lines(messages, focus, positions)])
