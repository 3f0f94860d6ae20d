"""Rank: which of the ledger's records a budget keeps, the lowest-ranked going first. Pure.

Under budget pressure ledger lines go in this order: lines whose key tokens the notes or
other lines already hold, then the lowest-ranked (the assistant's before the user's and
tools'), then the longest. A user's line's confirmation ranks apart and goes with its line;
a decision's is one unit with its line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from kernel.tokens import count_text
from middleware.condensing.ledger.records import (
    CONFIRMATION_SCORE,
    FOCUS_BONUS,
    Fact,
    settles,
)
from middleware.condensing.ledger.terms import key_tokens

__all__ = ["MAX_SELECT_EXACT", "confirmation_score", "line_cost", "select_facts"]

MAX_SELECT_EXACT = 300
"""A longer ledger is first cut to its best lines, twice the budget's worth (``_candidates``)."""


def line_cost(fact: Fact, model: str = "") -> int:
    """Tokens a ledger line costs, its newline included."""
    return count_text(fact.render(), model) + 1


def select_facts(facts: Sequence[Fact], notes: str, budget: int, model: str = "") -> list[Fact]:
    """The facts that fit the budget, in order; drops the lowest-scored first, and among
    those the covered ones, then the long ones.

    A fact is covered when each of its key tokens appears in the notes or in another kept
    fact (not a merged line: a term listed there is no fact quoted, and the line may lose
    it). Score comes before cover: a user's line covered by a listing's row would otherwise
    go first, and the row with it at a later growth. Among equals the longer line goes first
    (it frees the most room for one fact lost), then the later one (earlier facts have
    survived more passes: keep the cache stable). A line's confirmation (``Fact.confirmed``)
    ranks apart, at ``confirmation_score``, and goes with its line; a decision's (``settles``)
    is one unit with its line, kept or dropped together.
    """
    facts = _candidates(facts, budget, model)
    apart = [bool(fact.confirmed) and not settles(fact) for fact in facts]
    bare = [replace(f, confirmed="") if alone else f for f, alone in zip(facts, apart, strict=True)]
    costs = [line_cost(fact, model) for fact in bare]
    keys = [frozenset() if f.merged else key_tokens(f.text) for f in facts]
    scores = [fact.score for fact in facts]
    line_of = list(range(len(facts)))  # the line a unit belongs to: itself, or a confirmation's
    for i, fact in enumerate(facts):
        if apart[i]:  # a unit of its own, ranked apart, gone with its line
            line_of.append(i)
            costs.append(count_text(fact.confirmation(), model) + 1)
            keys.append(frozenset())
            scores.append(min(fact.score, confirmation_score(fact)))
    note_keys = key_tokens(notes)
    held: Counter[str] = Counter(k for ks in keys for k in ks)
    keep = set(range(len(costs)))
    total = sum(costs)
    while total > budget and keep:

        def rank(i: int) -> tuple[int, bool, int, int]:
            covered = bool(keys[i]) and all(k in note_keys or held[k] > 1 for k in keys[i])
            return (scores[i], not covered, -costs[i], -line_of[i])

        victim = min(keep, key=rank)
        for unit in [u for u in keep if u == victim or line_of[u] == victim]:
            keep.remove(unit)
            held.subtract(keys[unit])
            total -= costs[unit]
    confirmed = {line_of[u] for u in keep if u >= len(facts)}
    return [facts[i] if i in confirmed else bare[i] for i in sorted(keep) if i < len(facts)]


def confirmation_score(fact: Fact) -> int:
    """The rank of a line's confirmation: `CONFIRMATION_SCORE`, `FOCUS_BONUS` higher when the
    line is about the question (a small model answering it needs the confirmation most); the
    line's own when the line takes a decision (``settles``: one unit with it)."""
    if settles(fact):
        return fact.score
    return CONFIRMATION_SCORE + (FOCUS_BONUS if fact.focused else 0)


def _candidates(facts: Sequence[Fact], budget: int, model: str) -> Sequence[Fact]:
    """A long ledger's best lines, twice the budget's worth, in order (bounds select's cost)."""
    if len(facts) <= MAX_SELECT_EXACT:
        return facts
    costs = [line_cost(fact, model) for fact in facts]
    order = sorted(range(len(facts)), key=lambda i: (-facts[i].score, costs[i], i))
    chosen: list[int] = []
    total = 0
    for i in order:
        if total + costs[i] > 2 * budget or len(chosen) >= MAX_SELECT_EXACT:
            break
        chosen.append(i)
        total += costs[i]
    return [facts[i] for i in sorted(chosen)]
