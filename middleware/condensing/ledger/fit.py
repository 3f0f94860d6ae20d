"""Fit: as many records as the budget holds beside the notes, and one merged line for the rest.

No fact is dropped silently. A fact's *key terms* are the tokens it hangs on
(``terms.key_spans``). Every line that has to go is accounted for on one visible ``-
merged(N facts): `key` `key` …`` line: N counts it (and every fact an earlier merged line
held: an earlier merged line is always folded into the new one, never quoted beside it), and
its key terms are listed there unless the notes or a kept line already hold them. Only when
even the key terms do not fit does the merged line list fewer of them, and it then says how
many terms were left out. So for every fact that came in, its key terms are in the output,
or a visible count on the merged line includes it. An earlier merged line's terms rank above
a listing's rows: no row is quoted while they are left out. A file's settings each stay one
``name = value`` term there (a value listed apart from its name answers nothing).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from kernel.tokens import count_text
from middleware.condensing.cutting import cut_tail
from middleware.condensing.ledger.rank import line_cost, select_facts
from middleware.condensing.ledger.records import (
    LISTING_SCORE,
    MERGED_ROLE,
    SETTINGS,
    Fact,
    merged_fact,
)
from middleware.condensing.ledger.render import Rendered, layout
from middleware.condensing.ledger.select import SETTING, setting_pairs
from middleware.condensing.ledger.supersede import settled
from middleware.condensing.ledger.terms import key_spans, key_tokens, term_weight

__all__ = [
    "LAYOUT_TOKENS",
    "LEDGER_SHARE",
    "MERGED_SHARE",
    "fit",
    "ledger_tokens",
    "merged_line",
    "merged_terms",
    "notes_room",
]

LAYOUT_TOKENS = 24
"""Tokens the layout (headers, bullets) adds around the notes and the quoted facts."""
LEDGER_SHARE = 0.6
"""The quoted facts' share of an extraction's target, at most."""
MERGED_SHARE = 0.25
"""The most of the quoted facts' room the merged line's terms may claim from quoted lines."""
MIN_NOTES_TOKENS = 32
_LEFT_OUT_TOKENS = 16


def notes_room(target_tokens: int, ledger_tokens: int) -> int:
    """Tokens the notes may take beside a ledger of `ledger_tokens` (itself capped at
    `LEDGER_SHARE` of the target)."""
    ledger = min(ledger_tokens, int(target_tokens * LEDGER_SHARE))
    return max(MIN_NOTES_TOKENS, target_tokens - ledger - LAYOUT_TOKENS)


def ledger_tokens(facts: Sequence[Fact], model: str = "") -> int:
    """Tokens the facts cost as ledger lines."""
    return sum(line_cost(fact, model) for fact in facts)


def fit(notes: str, facts: Sequence[Fact], target_tokens: int, model: str = "") -> Rendered:
    """Notes and as many facts as fit, within target_tokens (cut with a marker if need be);
    the facts that do not fit are accounted for on one merged line (see the module doc).
    In order: supersede (``settled``), rank (``select_facts``), the merged line, render.

    Quoted lines make room for the merged line's key terms: a long line kept while key terms
    are left out is the worse trade, so the selection is redone with that room reserved.
    Only the terms of facts above `LISTING_SCORE` claim room that way (not those an earlier
    merged line carries: they have had their turn), and at most `MERGED_SHARE` of it: a
    listing's hundreds of paths and test names must not push out every quoted line, nor may
    bare terms (which a small model cannot answer from, having no
    sentence around them) take the room of the sentences; they fill what is left, and the
    merged line says how many did not fit. An earlier merged line's terms still rank above
    a listing's rows (as its score says): a row is quoted only while the merged line lists
    the terms of everything above the rows, within that same share.

    The records rendered (the merged line among them) come back with the text; when the
    text had to be cut with a marker they are still whole.
    """
    facts, live = settled(facts)
    live = [fact for fact in live if not fact.merged]  # folded, not quoted
    room = target_tokens - count_text(layout(notes, ()), model) - LAYOUT_TOKENS // 2
    above_rows = [f for f in facts if f.score > LISTING_SCORE]
    ranked = [f for f in above_rows if not f.merged]
    reserve = 0
    while True:
        budget = room - reserve
        chosen = select_facts(live, notes, budget, model) if budget > 0 else []
        used = sum(line_cost(fact, model) for fact in chosen)
        whole = merged_line(ranked, chosen, notes, None, model)
        claim = min(whole[1], int(room * MERGED_SHARE)) if whole is not None else 0
        short = used + claim - room
        if short > 0 and chosen:
            reserve += max(short, room // 10, 1)
            continue
        chosen = _rows_making_room(chosen, above_rows, notes, room - used, model)
        used = sum(line_cost(fact, model) for fact in chosen)
        fitted = merged_line(facts, chosen, notes, room - used, model)
        kept = (*chosen, fitted[0]) if fitted is not None else tuple(chosen)
        text = layout(notes, kept)
        over = count_text(text, model) - target_tokens
        if over <= 0 or not chosen:
            return Rendered(cut_tail(text, target_tokens, model), notes.strip(), kept)
        reserve += over


def _rows_making_room(
    chosen: Sequence[Fact],
    above_rows: Sequence[Fact],
    notes: str,
    free: int,
    model: str,
) -> list[Fact]:
    """The chosen lines without as many of a listing's rows (the longest, then the latest,
    first) as the merged line needs beyond the `free` tokens to list the terms of the facts
    ranked above the rows, an earlier merged line's among them (at most `MERGED_SHARE` of
    the room)."""
    rows = [i for i, fact in enumerate(chosen) if fact.score <= LISTING_SCORE]
    whole = merged_line(above_rows, chosen, notes, None, model) if rows else None
    if whole is None:
        return list(chosen)
    room = free + sum(line_cost(fact, model) for fact in chosen)
    need = min(whole[1], int(room * MERGED_SHARE)) - free
    gone: set[int] = set()
    for i in sorted(rows, key=lambda i: (-line_cost(chosen[i], model), -i)):
        if need <= 0:
            break
        gone.add(i)
        need -= line_cost(chosen[i], model)
    return [fact for i, fact in enumerate(chosen) if i not in gone]


@functools.lru_cache(maxsize=4096)
def _term_cost(span: str, model: str) -> int:
    """Tokens one key term costs on a merged line (a space and its backticks)."""
    return count_text(f" `{span}`", model)


def merged_terms(fact: Fact) -> list[tuple[str, frozenset[str]]]:
    """The terms a fact leaves on the merged line, each with the key tokens that, all held
    elsewhere, make it needless: its key spans; a setting's ``name = value`` whole (a value
    apart from its name answers nothing); a merged line's own terms as they were listed."""
    if fact.merged:
        return [(term, _parts(term)) for term in fact.terms]
    if fact.role.endswith(SETTINGS):
        pairs = setting_pairs(fact.text)
        head = fact.text[: fact.text.find(pairs[0])] if pairs else fact.text
        return [(span, _parts(span)) for span in [*key_spans(head), *pairs]]
    return [(span, _parts(span)) for span in key_spans(fact.text)]


def _parts(term: str) -> frozenset[str]:
    """What must be held elsewhere for a merged term to be needless: a setting's name and
    value both, else the term itself."""
    return (SETTING.match(term) and key_tokens(term)) or frozenset({term.lower()})


def merged_line(
    facts: Sequence[Fact],
    chosen: Sequence[Fact],
    notes: str,
    budget: int | None,
    model: str = "",
) -> tuple[Fact, int] | None:
    """The one line accounting for the facts not chosen, and its estimated cost: how many,
    and their key terms that neither the notes nor a chosen line hold. When not all fit in
    `budget` tokens the terms of the best-scored facts stay, the most identifying first, and
    a count says how many were left out. None when every fact was chosen."""
    kept = {(fact.role, fact.text) for fact in chosen}  # a line kept without its confirmation
    dropped = [fact for fact in facts if (fact.role, fact.text) not in kept]
    if not dropped:
        return None
    held = key_tokens(notes).union(*(key_tokens(fact.text) for fact in chosen))
    ranked = sorted(range(len(dropped)), key=lambda i: (-dropped[i].score, i))
    spans: dict[str, tuple[int, int, int, str]] = {}
    for i in ranked:  # best-scored first: a term shared by two facts ranks with the better
        for order, (span, parts) in enumerate(merged_terms(dropped[i])):
            key = span.lower()
            if not parts <= held and key not in spans:
                spans[key] = (-dropped[i].score, -term_weight(span), i * 1000 + order, span)
    terms = sorted(spans.values())
    count = sum(fact.count for fact in dropped)
    base = count_text(f"- {MERGED_ROLE.format(count)}: ", model) + 1
    keep, cost = 0, base
    for term in terms:
        more = _term_cost(term[3], model)
        if budget is not None and cost + more + _LEFT_OUT_TOKENS > budget:
            break
        keep, cost = keep + 1, cost + more
    listed = tuple(term[3] for term in sorted(terms[:keep], key=lambda term: term[2]))
    if keep < len(terms):
        cost += _LEFT_OUT_TOKENS
    return merged_fact(count, listed, len(terms) - keep), cost
