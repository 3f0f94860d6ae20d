"""Two runs of the same probes, probe by probe: what a change moved, and whether it is more
than the reader's noise. Pure.

A small reader's answer turns on the exact prompt: a change to what is shown beside a
question (the quoted turns, the ledger's rendering) flips answers both ways, so two runs are
compared on the probes both asked, by how many each answers right that the other does not
(won and lost), never by their totals alone. The sign test says how likely a split at least
that lopsided is if the change made no difference (each flip as likely one way as the other):
6 won against 9 lost is p = 0.61, noise; 12 against 2 is p = 0.013.

Rows pair by seed, template set, condition, kind and question, so a run split over several
files pairs as one, and the conditions one run has and the other has not are left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from evaluation.locomo import SOURCE
from evaluation.places import LAST
from evaluation.runner import Row

FLIPS_LISTED = 40
"""At most this many flipped probes are listed per condition (the counts are all of them)."""
ANSWER_CHARS = 60
"""An answer is shown cut to this many characters in a flipped probe's line."""


@dataclass(frozen=True, slots=True)
class Flip:
    """A probe right in one run and wrong in the other."""

    before: Row
    after: Row


@dataclass(frozen=True, slots=True)
class Moved:
    """One condition's probes asked in both runs: what each run had, what flipped."""

    condition: str
    asked: int
    in_view: tuple[int, int]
    """Probes whose answer was in what the model was shown (before, after)."""
    right: tuple[int, int]
    won: tuple[Flip, ...]
    lost: tuple[Flip, ...]
    last: tuple[int, int] | None = None
    """Probes whose answer stood in the quoted turns' last excerpt (before, after); None
    when a run's rows do not say where (written before rows said it)."""

    @property
    def p(self) -> float:
        """The two-sided sign test of `won` against `lost`."""
        return sign_test(len(self.won), len(self.lost))


def sign_test(won: int, lost: int) -> float:
    """The two-sided exact sign test's p for `won` flips one way and `lost` the other (1.0
    for none): the chance of a split at least this uneven if either way were as likely."""
    flips = won + lost
    if flips == 0:
        return 1.0
    tail = sum(math.comb(flips, k) for k in range(min(won, lost) + 1)) / (1 << flips)
    return min(1.0, 2 * tail)


def compare(before: Sequence[Row], after: Sequence[Row]) -> list[Moved]:
    """Per condition both runs asked, in `after`'s order: the probes answered in both (status
    ok), with their counts and flips."""
    earlier = {row.probe: row for row in before if row.status == "ok"}
    pairs: dict[str, list[tuple[Row, Row]]] = {}
    for row in after:
        old = earlier.get(row.probe)
        if row.status == "ok" and old is not None:
            pairs.setdefault(row.condition, []).append((old, row))
    return [_moved(condition, found) for condition, found in pairs.items()]


def _moved(condition: str, pairs: Sequence[tuple[Row, Row]]) -> Moved:
    return Moved(
        condition,
        len(pairs),
        (sum(bool(b.present) for b, _ in pairs), sum(bool(a.present) for _, a in pairs)),
        (sum(bool(b.correct) for b, _ in pairs), sum(bool(a.correct) for _, a in pairs)),
        tuple(Flip(b, a) for b, a in pairs if a.correct and not b.correct),
        tuple(Flip(b, a) for b, a in pairs if b.correct and not a.correct),
        _last(pairs),
    )


def _last(pairs: Sequence[tuple[Row, Row]]) -> tuple[int, int] | None:
    """How many answers stood in the last excerpt in each run; None unless every row says
    where its answer stood."""
    if not all(b.stood and a.stood for b, a in pairs):
        return None
    return (sum(b.stood == LAST for b, _ in pairs), sum(a.stood == LAST for _, a in pairs))


def render(moved: Sequence[Moved]) -> str:
    """The comparison as printed: a line of counts per condition, then its flipped probes."""
    if not moved:
        return "against: no probe answered in both runs (the same conditions and seeds?)"
    lines = ["against the earlier run, on the probes both answered:"]
    for one in moved:
        (view_before, view_after), (right_before, right_after) = one.in_view, one.right
        last = "" if one.last is None else f", in the last excerpt {one.last[0]} -> {one.last[1]}"
        lines.append(
            f"{one.condition}: {one.asked} probes; answer in view {view_before} -> "
            f"{view_after}{last}, right {right_before} -> {right_after}; won {len(one.won)}, "
            f"lost {len(one.lost)} (sign test p = {one.p:.2f})"
        )
        flips = [("won ", f) for f in one.won] + [("lost", f) for f in one.lost]
        lines += (_flip_line(label, flip) for label, flip in flips[:FLIPS_LISTED])
        if len(flips) > FLIPS_LISTED:
            lines.append(f"  … and {len(flips) - FLIPS_LISTED} more")
    return "\n".join(lines)


def _flip_line(label: str, flip: Flip) -> str:
    row, before = flip.after, flip.before
    stood = ""
    if before.stood and row.stood:
        moved = before.stood if before.stood == row.stood else f"{before.stood} -> {row.stood}"
        stood = f" [{moved}]"
    return (
        f"  {label} {_conversation(row)} {row.kind}: {row.question} | "
        f"{_cut(before.answer)} -> {_cut(row.answer)}{stood}"
    )


def _conversation(row: Row) -> str:
    """``seed 7``, or ``conv-41`` for a LoCoMo dialogue (its number stands as the seed)."""
    return f"conv-{row.seed}" if row.seed_set == SOURCE else f"seed {row.seed}"


def _cut(answer: str | None) -> str:
    text = " ".join((answer or "").split())
    return text if len(text) <= ANSWER_CHARS else text[: ANSWER_CHARS - 1] + "…"
