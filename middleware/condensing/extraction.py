"""The extraction engine: condense old conversation turns into a dense, fact-keeping text.

``extract_history`` renders the historical messages as a transcript and grows a fact ledger
(fact-bearing sentences quoted verbatim as records, pure and deterministic: ``ledger.Ledger``).
The extractor model writes structured notes: in one call when the input fits its window,
else by map-reduce. Every answer that is empty or a refusal/error text, and final notes not
shorter than what they summarise (transcript + earlier notes), raise ``BadExtraction``. Note
lines naming numbers or identifiers the input never had are dropped, and so are lines that
state a subject the user stated without the user's value (a guess, ``drop_contradicted``) or
copy a line the ledger quotes (``drop_copied``: the ledger ranks it); then notes
and ledger are assembled within ``target_tokens`` (the ledger's verbatim lines may make a
tiny history's extraction as long as the history: the layer's budget, not the input's size,
bounds it).
Incremental extraction feeds the previous notes to the model and only the new turns, so the
model's work per growth stays bounded. The ledger costs no model: when the request still holds
the messages the previous extraction stands in for (``condensed``: the client resends its
whole history, and the splice only reuses an extraction whose messages are unchanged), every
growth quotes all of them anew and ranks them with the new turns' lines, so a line that one
growth short of room dropped comes back at the next growth with room; without them the
previous ledger's records (``Previous``: stored with the extraction) are carried forward. The
extraction comes back with its notes and the records it quotes, which its stored entry keeps
for the next growth. Earlier notes are never dropped: they go
into the one call or, when earlier notes and new turns no longer fit one call, into the merge
as its first partial; and an earlier note line whose key terms the new notes no longer hold
(the model merged it away, or the notes were cut to budget) is carried into the ledger as a
``- notes: …`` line, where the ledger's own rule (nothing silently dropped) takes over.

Map-reduce: the transcript is cut with ``chunk_text`` into windows sized
from the extractor's window (window - output - prompt overhead - safety margin). A map call
that overflows halves only that chunk's budget (floor 320 tokens, then ``BadExtraction``).
Partial notes merge in passes of consecutive groups (``plan_merge_groups``); a merge that
overflows is retried alone as two smaller groups and lowers the merge budget of later passes
(nothing already done is recomputed); a pass that does not reduce the total tokens ends the
merging, and the joined result is cut to budget with a visible marker.

The only I/O is through the injected ``Complete`` calls; every decision is a pure function.
The ledger's work (quoting a long history, ranking it) runs in a worker thread, so a growth
of a long conversation does not hold the event loop that serves every other request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kernel.errors import ContextWindowExceeded
from kernel.tokens import count_messages, count_text
from kernel.types import Complete, Completion, Message
from middleware.condensing.chunking import Chunk, chunk_text
from middleware.condensing.cutting import cut_tail
from middleware.condensing.ledger import Fact, Ledger, Previous, notes_room
from middleware.condensing.prompt import (
    PROMPT_VERSION,
    clean_output,
    looks_refused,
    map_prompt,
    merge_prompt,
    render_transcript,
)
from middleware.condensing.strategies import middle_cut_history

__all__ = [
    "PROMPT_VERSION",
    "BadExtraction",
    "Extraction",
    "Sizes",
    "cut_history",
    "extract_history",
    "plan_merge_groups",
    "plan_sizes",
    "rejection",
]

MIN_CHUNK_TOKENS = 320
MAX_MERGE_PASSES = 8
MAP_CONCURRENCY = 4
WORDS_PER_TOKEN = 0.7
_T = TypeVar("_T")


class BadExtraction(Exception):
    """An extraction was rejected (the message says why); never cache it. Internal: the
    ladder passes to its next rung, and no client ever sees this error."""


@dataclass(frozen=True, slots=True)
class Extraction:
    """A condensed history, ready for one labelled context message, and what it cost."""

    text: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    incremental: bool
    cut: bool = False
    """No model wrote it: the transcript cut in the middle, and the quoted facts."""
    bounded: int = 0
    """Older messages past the extraction bound: only their quoted facts are in it."""
    strategy: str = "extract"
    """What made it: `extract` (a model), `mask_tool_results`, `mask_observations` or
    `middle_cut` (middleware/condensing/strategies.py)."""
    notes: str = ""
    """Its notes section, as the next growth reads it."""
    facts: tuple[Fact, ...] = ()
    """The ledger's records its text quotes, as the next growth reads them."""


@dataclass(frozen=True, slots=True)
class Sizes:
    """Token sizes of one extraction: the notes, each call's output, each call's content."""

    notes: int
    output: int
    input: int


def plan_sizes(target_tokens: int, window: int, ledger_tokens: int, overhead: int) -> Sizes:
    """Size the notes, the calls' output and the calls' content from target and window."""
    notes = notes_room(target_tokens, ledger_tokens)
    output = max(16, min(notes, window // 4))
    margin = window // 10 + 16
    return Sizes(notes, output, max(MIN_CHUNK_TOKENS, window - output - overhead - margin))


def plan_merge_groups(sizes: Sequence[int], budget: int) -> list[tuple[int, ...]]:
    """Group consecutive partials whose sizes fit the budget together (a too-big one alone)."""
    groups: list[tuple[int, ...]] = []
    current: list[int] = []
    total = 0
    for index, size in enumerate(sizes):
        if current and total + size > budget:
            groups.append(tuple(current))
            current, total = [], 0
        current.append(index)
        total += size
    if current:
        groups.append(tuple(current))
    return groups


def rejection(text: str, input_tokens: int | None = None, model: str = "") -> str | None:
    """Why an extraction is unusable (empty, refusal or error, not shorter), or None."""
    if not text.strip():
        return "empty"
    if looks_refused(text):
        return f"a refusal or error text ({text[:60]!r})"
    if input_tokens is not None:
        tokens = count_text(text, model)
        if tokens >= input_tokens:
            return f"not shorter than its input ({tokens} >= {input_tokens} tokens)"
    return None


async def _bounded(coros: Sequence[Coroutine[Any, Any, _T]], limit: int) -> list[_T]:
    """Run coroutines at most `limit` at a time; on a failure cancel the rest and re-raise."""
    semaphore = asyncio.Semaphore(limit)

    async def one(coro: Coroutine[Any, Any, _T]) -> _T:
        async with semaphore:
            return await coro

    tasks = [asyncio.ensure_future(one(coro)) for coro in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


@dataclass(slots=True)
class _Run:
    """One extraction's calls: counts them and their tokens, holds the shrinking merge budget."""

    complete: Complete
    model: str
    focus: str | None
    budget: Sizes
    merge_budget: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def count(self, text: str) -> int:
        """Tokens of a text for this run's model."""
        return count_text(text, self.model)

    def _tally(self, prompt: Sequence[Message], result: Completion) -> None:
        """Add a call's token counts (upstream-reported, else estimated)."""
        reported = result.prompt_tokens
        self.prompt_tokens += (
            reported if reported is not None else count_messages(prompt, self.model)
        )
        done = result.completion_tokens
        self.completion_tokens += done if done is not None else self.count(result.text)

    async def ask(self, prompt: Sequence[Message], *, partial: bool = False) -> str:
        """One call's cleaned notes; BadExtraction for a refusal or error, or empty notes.

        A chunk's partial notes may be empty (a stretch of small talk has nothing to keep).
        """
        self.calls += 1
        result = await self.complete(prompt, max_tokens=self.budget.output)
        self._tally(prompt, result)
        text = clean_output(result.text, truncated=result.finish_reason == "length")
        reason = rejection(text) if text or not partial else None
        if reason is not None:
            raise BadExtraction(f"the extractor's answer was {reason}")
        return text

    def _words(self) -> int:
        """The word limit stated in prompts."""
        return max(16, int(self.budget.output * WORDS_PER_TOKEN))

    async def notes(self, transcript: str, earlier: str) -> str:
        """Notes on the transcript and earlier notes: one call if it fits, else map-reduce."""
        size = self.budget.input
        tokens = self.count(transcript)
        if tokens + self.count(earlier) <= size:
            prompt = map_prompt(
                transcript, max_words=self._words(), earlier_notes=earlier, focus=self.focus
            )
            try:
                return await self.ask(prompt)
            except ContextWindowExceeded:  # the estimate fell short of the extractor's count
                size = max(MIN_CHUNK_TOKENS, tokens // 2)
        maps = [self.map_chunk(c.text, size) for c in _chunks(transcript, size)]
        chunks = await _bounded(maps, MAP_CONCURRENCY)
        partials = [earlier] if earlier else []
        partials += [p for chunk in chunks for p in chunk]
        return await self.reduce(partials) if partials else ""

    async def map_chunk(self, text: str, budget: int) -> list[str]:
        """Notes on one chunk; on overflow, notes on its halves (floor MIN_CHUNK_TOKENS)."""
        try:
            prompt = map_prompt(text, max_words=self._words(), focus=self.focus)
            return [notes] if (notes := await self.ask(prompt, partial=True)) else []
        except ContextWindowExceeded as exc:
            size = min(budget, self.count(text))
            if size <= MIN_CHUNK_TOKENS:
                raise BadExtraction(
                    f"a {size}-token chunk overflows the extractor's window (floor "
                    f"{MIN_CHUNK_TOKENS} tokens)"
                ) from exc
            half = max(MIN_CHUNK_TOKENS, size // 2)
            out: list[str] = []
            for chunk in _chunks(text, half):
                out += await self.map_chunk(chunk.text, half)
            return out

    async def reduce(self, partials: list[str]) -> str:
        """Merge partial notes in passes until one remains or a pass stops reducing."""
        self.merge_budget = self.budget.input
        for _ in range(MAX_MERGE_PASSES):
            sizes = [self.count(p) for p in partials]
            groups = plan_merge_groups(sizes, self.merge_budget)
            if len(groups) == len(partials):
                break  # nothing fits together: merging cannot progress
            merged: list[str] = []
            for group in groups:
                merged += await self.merge([partials[i] for i in group])
            if sum(self.count(p) for p in merged) >= sum(sizes):
                break  # the non-reducing guard: keep the smaller pass
            partials = merged
        return "\n".join(partials)

    async def merge(self, parts: list[str]) -> list[str]:
        """Merge one group; on overflow merge its halves alone and shrink later groups."""
        if len(parts) == 1:
            return parts
        try:
            return [await self.ask(merge_prompt(parts, max_words=self._words(), focus=self.focus))]
        except ContextWindowExceeded:
            tokens = sum(self.count(p) for p in parts)
            self.merge_budget = min(self.merge_budget, tokens - 1)
            mid = len(parts) // 2
            return await self.merge(parts[:mid]) + await self.merge(parts[mid:])


def _chunks(text: str, budget: int) -> list[Chunk]:
    """The text in windows of `budget` tokens with a small overlap."""
    return chunk_text(
        "history",
        text,
        chunk_tokens=budget,
        overlap_tokens=min(64, budget // 8),
        single_chunk_max=budget,
    )


def _check_sizes(target_tokens: int, window: int) -> None:
    """Raise ValueError for budgets no extraction can meet."""
    if target_tokens < 1:
        raise ValueError(f"target_tokens must be at least 1, got {target_tokens}")
    if window < MIN_CHUNK_TOKENS:
        raise ValueError(f"extractor_window must be at least {MIN_CHUNK_TOKENS}, got {window}")


async def extract_history(
    messages: Sequence[Message],
    *,
    complete: Complete,
    target_tokens: int,
    extractor_window: int,
    previous: Previous | None = None,
    focus: str | None = None,
    model: str = "",
    beyond_bound: Sequence[Message] = (),
    condensed: Sequence[Message] = (),
    positions: Sequence[int] = (),
) -> Extraction:
    """Condense historical messages (after a previous extraction) into at most target_tokens;
    `beyond_bound`: older messages past the extraction bound, kept only as quoted facts;
    `condensed`: the messages `previous` stands in for, quoted anew (see the module doc);
    `positions`: the request's index of each of `condensed`, `beyond_bound`, `messages`."""
    _check_sizes(target_tokens, extractor_window)
    if not messages:
        if not previous:
            raise BadExtraction("no messages to extract")
        text = cut_tail(previous.text, target_tokens, model)
        return Extraction(text, 0, 0, 0, True, notes=previous.notes, facts=previous.facts)
    ledger, ledger_tokens = await asyncio.to_thread(
        _grown, previous, condensed, [*beyond_bound, *messages], focus, model, positions
    )
    transcript = render_transcript(messages)
    overhead = count_messages(map_prompt("", max_words=999, earlier_notes="-", focus=focus), model)
    sizes = plan_sizes(target_tokens, extractor_window, ledger_tokens, overhead)
    run = _Run(complete, model, focus, sizes)
    earlier = ledger.earlier
    notes = await run.notes(transcript, earlier)
    reason = rejection(notes, run.count(transcript) + run.count(earlier), model)
    if reason is not None:
        raise BadExtraction(f"the extractor's notes were {reason}")
    made = await asyncio.to_thread(
        ledger.extraction,
        notes,
        source=f"{previous.text if previous else ''}\n{transcript}",
        focus=focus,
        lead=_bound_note(beyond_bound),
        notes_tokens=run.budget.notes,
        target_tokens=target_tokens,
        model=model,
    )
    return Extraction(
        made.text,
        run.calls,
        run.prompt_tokens,
        run.completion_tokens,
        bool(previous),
        bounded=len(beyond_bound),
        notes=made.notes,
        facts=made.facts,
    )


def cut_history(
    messages: Sequence[Message],
    *,
    target_tokens: int,
    previous: Previous | None = None,
    focus: str | None = None,
    model: str = "",
    beyond_bound: Sequence[Message] = (),
    positions: Sequence[int] = (),
) -> Extraction:
    """The last rung, without a model: the earlier notes and the transcript cut in the middle
    (whole units where it can, a visible marker where), beside the fact ledger, within
    target_tokens; `positions`: the request's index of each of `beyond_bound`, `messages`."""
    everything = [*beyond_bound, *messages]
    made = middle_cut_history(
        everything,
        previous=previous,
        target_tokens=target_tokens,
        model=model,
        positions=positions,
    )
    return Extraction(
        made.text,
        0,
        0,
        0,
        bool(previous),
        cut=True,
        strategy="middle_cut",
        notes=made.notes,
        facts=made.facts,
    )


def _grown(
    previous: Previous | None,
    condensed: Sequence[Message],
    messages: Sequence[Message],
    focus: str | None,
    model: str,
    positions: Sequence[int],
) -> tuple[Ledger, int]:
    """A growth's ledger (``Ledger.grow``) and its size in tokens."""
    ledger = Ledger.grow(previous, condensed, messages, focus, positions)
    return ledger, ledger.tokens(model)


def _bound_note(beyond_bound: Sequence[Message]) -> str:
    """The notes' first line when older messages were past the extraction bound."""
    if not beyond_bound:
        return ""
    return (
        f"[overspill: the {len(beyond_bound)} oldest of these messages were past the "
        "extraction bound; only facts quoted from them are kept]\n"
    )
