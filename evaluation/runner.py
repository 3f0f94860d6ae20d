"""Plays generated conversations under each condition, asks the probes, scores the answers.

A `Target` is the model under test behind overspill: `InProcess` builds nothing itself but
drives a built `System` (its real layers, store and providers); a running server is reached
through `evaluation/targets.py`. Calls run one at a time, at temperature 0.

- `short` asks the same seed's probes after its conversation without fillers (other values,
  the same kinds): what the model gets right when nothing is long, the floor under every
  other condition's figures.
- The baselines (conditions.py) transform the conversation, then each probe is asked through
  the model layers only (`Target.ask`): nothing of overspill's conversation layers touches it.
  `oracle` transforms it anew for each probe (the turns that answer that probe are kept).
- `overspill-once` sends the whole conversation once per probe as one conversation id: the
  first probe makes overspill extract (when the conversation is past `grow_at`), the others
  reuse that extraction.
- `overspill-turns` first replays the conversation as a client would, one request per point
  where the assistant answered (its scripted replies are the history, the model's answers are
  discarded), each turn's background growth run before the next turn; then the probes.
  A growth is seen as the count of replaced messages rising, so the same count works in
  process and against a running server.

A probe's own request never leaves a growth behind (in process its follow-ups are dropped),
so every probe of a condition sees the same compacted history.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from evaluation.conditions import (
    TRANSFORMS,
    ConditionName,
    Count,
    oracle,
    summary_prompt,
    text_of,
    with_summary,
)
from evaluation.conversations import Conversation, generate
from evaluation.places import OUT, stood
from evaluation.probes import Asked
from kernel.errors import ContextWindowExceeded, OverspillError
from kernel.types import Message

log = logging.getLogger("overspill.eval")

ANSWER_TOKENS = 48
"""max_tokens of every probe and replayed turn by default (the same for both, so overspill
plans them alike)."""
SUMMARY_TOKENS = 384
"""max_tokens of the naive summary's one call (at most a quarter of the window)."""


ProbeKey = tuple[int, str, str, str, str]
"""A probe's identity across runs and files (`Row.probe`)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One probe asked under one condition: a line of the results file."""

    seed: int
    seed_set: str
    condition: str
    kind: str
    question: str
    status: str
    """ok, overflow (the condition could not make it fit the window), or error."""
    answer: str | None = None
    correct: bool | None = None
    present: bool | None = None
    """Whether what the model was shown still held the right value (None: unknown)."""
    growths: int | None = None
    """Extractions grown for this conversation (the overspill conditions)."""
    condensed: int | None = None
    """Of those, the extractions that condensed the latest message holding the right value
    (the overspill conditions; 0: that message was still sent as it was)."""
    detail: str = ""
    shown: str | None = None
    """What the model was shown before the question (only when the run keeps it)."""
    templates: str = "tune"
    """The template set its conversation's phrasings came from (a row written before there
    were held-out templates reads as tune); empty for an outside dataset's conversation."""
    stood: str = ""
    """Where the right value stood in what the model was shown (`places.PLACES`: the quoted
    turns' last excerpt, earlier in them, elsewhere, nowhere); empty when unknown (a row
    written before rows said it, or a condition that could not be asked)."""
    evidence: bool | None = None
    """Whether what the model was shown held every turn an outside dataset marks as
    answering the question, whole (LoCoMo's `evidence`); None: none marked, or unknown."""
    stand_in: str = ""
    """The overspill conditions: what made the stand-in for the condensed turns
    (``extract``, or a fallback such as ``middle_cut`` when the extraction failed: then the
    row measures the fallback, not compaction); empty when unknown."""

    def as_dict(self) -> dict[str, Any]:
        """The row as a JSON object."""
        return asdict(self)

    @property
    def probe(self) -> ProbeKey:
        """Which probe it answers: its conversation (seed, template set), condition, kind and
        question; two rows with the same key are one probe asked twice."""
        return (self.seed, self.templates, self.condition, self.kind, self.question)


@dataclass(frozen=True, slots=True)
class Sent:
    """The answer to a request sent through overspill's layers."""

    text: str
    replaced: int
    """Messages an extraction stood in for (0: the conversation went whole)."""
    shown: str | None = None
    """What the model was shown, when the target can tell (in process)."""
    stand_in: str = ""
    """What made the stored stand-in for the condensed turns (`HistoryEntry.strategy`:
    ``extract``, or a fallback such as ``middle_cut`` when the extraction failed), when the
    target can tell; empty: none stored, or unknown."""


class Target(Protocol):
    """The model under test, behind overspill."""

    async def ask(self, messages: Sequence[Message], *, max_tokens: int) -> str:
        """One call through the model layers only; the answer's text."""
        ...

    async def send(
        self, messages: Sequence[Message], conversation: str, *, play: bool, max_tokens: int
    ) -> Sent:
        """One request through every layer as `conversation`; `play`: a turn of the
        conversation (its background growth completes before the next call), else a probe
        (it leaves no growth behind)."""
        ...


@dataclass(frozen=True, slots=True)
class Setup:
    """What every conversation of a run shares."""

    budget: int
    """Prompt tokens a baseline may send (the window less the answer and a margin)."""
    summary_room: int
    """Prompt tokens the naive summary's call may send."""
    count: Count
    run: str = "eval"
    """Prefix of the conversation ids (a running server's store may hold earlier runs)."""
    answer_tokens: int = ANSWER_TOKENS
    """max_tokens of every probe and replayed turn."""
    summary_tokens: int = SUMMARY_TOKENS
    """max_tokens of the naive summary's call."""
    keep_shown: bool = False
    """Whether each row carries what the model was shown (to read why an answer missed)."""


def _ask_user(probe: Asked) -> Message:
    return {"role": "user", "content": probe.prompt}


async def run_conversation(
    target: Target,
    conversation: Conversation[Asked],
    conditions: Sequence[ConditionName],
    setup: Setup,
) -> list[Row]:
    """Every condition's rows for one conversation, in the order of `conditions`."""
    return [row async for row in each_row(target, conversation, conditions, setup)]


async def each_row(
    target: Target,
    conversation: Conversation[Asked],
    conditions: Sequence[ConditionName],
    setup: Setup,
) -> AsyncIterator[Row]:
    """Every condition's rows for one conversation, each as soon as its probe is answered (a
    run stopped part-way keeps what it asked)."""
    for condition in conditions:
        async for row in _condition(target, conversation, condition, setup):
            yield row


async def _condition(
    target: Target, conversation: Conversation[Asked], condition: ConditionName, setup: Setup
) -> AsyncIterator[Row]:
    messages = conversation.messages
    asked: AsyncIterator[Row]
    if condition == "short":  # the model's own floor: the same kinds, nothing to compact
        short = generate(conversation.seed, fillers=0, templates=conversation.templates)
        kinds = {probe.kind for probe in conversation.probes}
        short = replace(short, probes=tuple(p for p in short.probes if p.kind in kinds))
        asked = _ask_each(target, short, condition, short.messages, setup)
    elif condition in TRANSFORMS:
        shown = TRANSFORMS[condition](messages, setup.budget, setup.count)
        asked = _ask_each(target, conversation, condition, shown, setup)
    elif condition == "oracle":
        asked = _with_oracle(target, conversation, setup)
    elif condition == "summary":
        asked = _after_summary(target, conversation, setup)
    else:
        asked = _through_overspill(target, conversation, condition, setup)
    async for row in asked:
        yield row


async def _after_summary(
    target: Target, conversation: Conversation[Asked], setup: Setup
) -> AsyncIterator[Row]:
    """The probes after one naive summary of the whole conversation (made by the model)."""
    messages = conversation.messages
    prompt = summary_prompt(messages, setup.summary_room, setup.count)
    if prompt is None:
        for row in _all(conversation, "summary", "overflow", "the summary prompt cannot fit"):
            yield row
        return
    try:
        summary = await target.ask(prompt, max_tokens=setup.summary_tokens)
    except OverspillError as error:
        for row in _all(conversation, "summary", _status(error), error.message):
            yield row
        return
    shown = with_summary(messages, summary)
    async for row in _ask_each(target, conversation, "summary", shown, setup):
        yield row


async def _ask_each(
    target: Target,
    conversation: Conversation[Asked],
    condition: ConditionName,
    shown: Sequence[Message] | None,
    setup: Setup,
) -> AsyncIterator[Row]:
    """Each probe asked after `shown` (None: the condition could not fit the window), its
    text rendered once for all of them."""
    text = text_of(shown) if shown is not None else ""
    for probe in conversation.probes:
        yield await _ask(target, conversation, condition, probe, shown, text, setup)


async def _with_oracle(
    target: Target, conversation: Conversation[Asked], setup: Setup
) -> AsyncIterator[Row]:
    """Each probe asked after the turns that answer it and the newest turns that fit."""
    for probe in conversation.probes:
        shown = oracle(conversation.messages, setup.budget, setup.count, probe.answers)
        text = text_of(shown) if shown is not None else ""
        yield await _ask(target, conversation, "oracle", probe, shown, text, setup)


async def _ask(
    target: Target,
    conversation: Conversation[Asked],
    condition: ConditionName,
    probe: Asked,
    shown: Sequence[Message] | None,
    text: str,
    setup: Setup,
) -> Row:
    """`probe` asked after `shown`, whose text is `text` (None: the condition could not fit
    the window)."""
    if shown is None:
        return _row(conversation, condition, probe, "overflow", detail="does not fit the window")
    try:
        answer = await target.ask([*shown, _ask_user(probe)], max_tokens=setup.answer_tokens)
    except OverspillError as error:
        return _row(conversation, condition, probe, _status(error), detail=error.message)
    place = stood(probe.present, text)
    return _row(
        conversation, condition, probe, "ok",
        answer=answer, correct=probe.score(answer), present=place != OUT,
        shown=text if setup.keep_shown else None, stood=place,
        evidence=probe.evidence_in(text),
    )  # fmt: skip


async def _through_overspill(
    target: Target, conversation: Conversation[Asked], condition: ConditionName, setup: Setup
) -> AsyncIterator[Row]:
    """The probes after overspill's layers saw the conversation (replayed first for turns).
    A row's growths are those seen up to its own answer, the growth it made included."""
    messages = conversation.messages
    name = f"{setup.run}-{conversation.seed}-{condition}"
    if conversation.templates != "tune":  # the same seed said otherwise: another conversation
        name += f"-{conversation.templates}"
    replaced: set[int] = set()
    if condition == "overspill-turns":
        for point in conversation.request_points():
            try:
                sent = await target.send(
                    messages[:point], name, play=True, max_tokens=setup.answer_tokens
                )
            except OverspillError as error:
                for row in _all(
                    conversation, condition, _status(error), f"turn {point}: {error.message}"
                ):
                    yield row
                return
            replaced.add(sent.replaced)
    for probe in conversation.probes:
        try:
            sent = await target.send(
                [*messages, _ask_user(probe)], name, play=False, max_tokens=setup.answer_tokens
            )
        except OverspillError as error:
            failed: OverspillError | None = error
        else:
            failed = None
            replaced.add(sent.replaced)
        grown = replaced - {0}
        counts = {"growths": len(grown), "condensed": condensed(messages, probe, grown)}
        if failed is not None:
            status, detail = _status(failed), failed.message
            yield _row(conversation, condition, probe, status, detail=detail, **counts)
            continue
        place = stood(probe.present, sent.shown) if sent.shown is not None else ""
        evidence = probe.evidence_in(sent.shown) if sent.shown is not None else None
        yield _row(
            conversation, condition, probe, "ok", answer=sent.text,
            correct=probe.score(sent.text), present=place != OUT if place else None,
            shown=sent.shown if setup.keep_shown else None, stood=place, evidence=evidence,
            stand_in=sent.stand_in, **counts,
        )  # fmt: skip


def condensed(messages: Sequence[Message], probe: Asked, grown: set[int]) -> int | None:
    """How many growths condensed the latest message holding `probe`'s right value.

    A growth is known by the messages its extraction stands in for (`Sent.replaced`): the
    first that many messages after the system messages. Each growth folds the one before
    it, so a message is condensed again by every growth that covers it. None: no message
    holds the value."""
    position, latest = 0, None
    for message in messages:
        if message.get("role") == "system":
            continue
        position += 1
        if probe.present(text_of([message])):
            latest = position
    if latest is None:
        return None
    return sum(1 for size in grown if size >= latest)


def _status(error: OverspillError) -> str:
    return "overflow" if isinstance(error, ContextWindowExceeded) else "error"


def _row(
    conversation: Conversation[Asked], condition: str, probe: Asked, status: str, **fields: Any
) -> Row:
    return Row(
        conversation.seed, conversation.seed_set, condition, probe.kind, probe.question, status,
        templates=_templates(conversation), **fields,
    )  # fmt: skip


def probe_key(conversation: Conversation[Asked], condition: str, probe: Asked) -> ProbeKey:
    """The `Row.probe` of `probe`'s row under `condition`, before it is asked."""
    return (conversation.seed, _templates(conversation), condition, probe.kind, probe.question)


def _templates(conversation: Conversation[Asked]) -> str:
    """A row's template set: none for an outside dataset's conversation."""
    return "" if conversation.source else conversation.templates


def _all(conversation: Conversation[Asked], condition: str, status: str, detail: str) -> list[Row]:
    """One unanswered row per probe."""
    return [_row(conversation, condition, p, status, detail=detail) for p in conversation.probes]
