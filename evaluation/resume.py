"""Going on with a run that stopped part-way: what its results file already answered. Pure.

A LoCoMo dialogue read whole takes minutes a question on a small local model, and a run of
hours loses a probe to one call that times out, or all that is left to a stopped machine.
`overspill eval --resume` keeps the rows the results file holds answered (status ok) and
asks only the probes they lack, each as a new run would ask it. Where the probes of one
conversation share a step made again on every run, the lacking ones cannot be asked alone
beside the kept ones, so the conversation is played again under that condition and its kept
rows are dropped (`replayed`):

- ``summary``: the model writes the summary anew, and the probes are read beside it;
- ``overspill-turns``: the conversation's turns are replayed one request at a time;
- ``short``: the generator's short conversation is played whole (a few calls);
- an overspill condition whose extraction is not kept from run to run (no ``--store``, or a
  running server's store under ``--url``): the probes' answers stand beside an extraction
  the next run makes again, and a model's extractions differ from run to run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from evaluation.conditions import OVERSPILL_CONDITIONS, ConditionName
from evaluation.conversations import Conversation
from evaluation.probes import Asked
from evaluation.runner import ProbeKey, Row, probe_key

MADE_AGAIN: frozenset[ConditionName] = frozenset({"short", "summary", "overspill-turns"})
"""Conditions whose probes are read beside a step every run makes again."""


Unit = tuple[Conversation[Asked], ConditionName]
"""A conversation and the condition its probes are asked under."""
UnitKey = tuple[int, str, str]
"""Which conversation (seed, template set) under which condition: a `ProbeKey`'s first three."""


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a resumed run keeps and what it still asks."""

    kept: tuple[Row, ...]
    """The earlier rows that stay, in their order."""
    to_play: tuple[Unit, ...]
    """Each conversation with only the probes still to ask, and the condition to ask them
    under, in the run's order (a unit with nothing left to ask is not here)."""


def replayed(condition: ConditionName, extraction_kept: bool) -> bool:
    """Whether a lacking probe under `condition` is asked by playing its whole conversation
    again (the condition's kept rows dropped): `MADE_AGAIN`, or an overspill condition when
    the extraction is not kept between runs."""
    return condition in MADE_AGAIN or (condition in OVERSPILL_CONDITIONS and not extraction_kept)


def resume(
    earlier: Sequence[Row],
    playing: Sequence[Conversation[Asked]],
    conditions: Sequence[ConditionName],
    *,
    extraction_kept: bool,
) -> Resumed:
    """The rows of `earlier` to keep and the probes still to ask, for a run of `playing`
    under `conditions`. Of the conversations and conditions this run plays, the answered
    rows stay (all of them dropped where the conversation is played again); the others'
    rows stay as they are."""
    answered = {row.probe for row in earlier if row.status == "ok"}
    planned: set[UnitKey] = set()
    again: set[UnitKey] = set()
    to_play: list[Unit] = []
    for conversation in playing:
        for condition in conditions:
            keys = [probe_key(conversation, condition, probe) for probe in conversation.probes]
            if not keys:
                continue
            planned.add(_unit_key(keys[0]))
            lacking = tuple(
                probe for probe, key in zip(conversation.probes, keys, strict=True)
                if key not in answered
            )  # fmt: skip
            if not lacking:
                continue
            if replayed(condition, extraction_kept):
                again.add(_unit_key(keys[0]))
                to_play.append((conversation, condition))
            else:
                to_play.append((replace(conversation, probes=lacking), condition))
    kept = tuple(
        row
        for row in earlier
        if (unit := _unit_key(row.probe)) not in again
        and (row.status == "ok" or unit not in planned)
    )
    return Resumed(kept, tuple(to_play))


def _unit_key(key: ProbeKey) -> UnitKey:
    return key[0], key[1], key[2]
