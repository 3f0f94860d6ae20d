"""The one model ladder: the extraction model, then the user's own model, then a visible cut.

Every condensing in overspill walks it, for history and documents alike (an oversized
message, a history, a document): the cheaper `context.extraction_model` when the user
names one, else straight to the user's own model, and when no model gives a usable answer,
a deterministic cut with a visible marker where text was left out.

- A rung's call that fails in a way a second try may not (5xx, timeout, connection) is
  retried once before the ladder passes to the next rung; a rate limit, a refused
  request or an overflow passes at once.
- A rung whose window cannot hold a message by its chars-per-token estimate is skipped for
  that message (the next rung is the larger window); history extraction does map-reduce
  inside each rung (middleware/condensing/extraction.py).
- Every call is one of the request's own calls (kernel/spending.py): `ladder_for` sets the
  request's bounds from its model, `extraction_room` says how much history one extraction
  may read within what is left, and a call the bounds refuse (`OverBudget`) ends the ladder
  at its cut, as a failed model would.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kernel.config import ModelEntry
from kernel.errors import ContextWindowExceeded, UpstreamError, UpstreamTimeout
from kernel.services import Services
from kernel.spending import BoundName, Bounds, OverBudget, Spend
from kernel.tokens import count_messages, count_text
from kernel.types import Complete, Completion, Message
from kernel.usage import read_budget
from middleware.condensing.budget import call_room
from middleware.condensing.cutting import cut_middle
from middleware.condensing.extraction import (
    MIN_CHUNK_TOKENS,
    WORDS_PER_TOKEN,
    BadExtraction,
    Extraction,
    cut_history,
    extract_history,
    plan_sizes,
    rejection,
)
from middleware.condensing.ledger import Previous
from middleware.condensing.prompt import clean_output, condense_prompt

log = logging.getLogger("overspill.ladder")

CHEAPEST_CHARS_PER_TOKEN = 4.0
"""Characters per token assumed for the extraction model's window (normal text)."""
MODEL_CHARS_PER_TOKEN = 3.5
"""Characters per token assumed for the user's own model: conservative, for text that
tokenizes poorly."""
How = Literal["cheapest", "model", "truncated", "unchanged"]


@dataclass(frozen=True, slots=True)
class Rung:
    """One model of the ladder: its call, the tokens a call may spend, chars per token."""

    name: str
    complete: Complete
    room: int
    """Counted tokens one call may spend on prompt and answer together."""
    chars_per_token: float
    how: Literal["cheapest", "model"]


@dataclass(frozen=True, slots=True)
class Condensed:
    """A text condensed to its share, which rung produced it, and how many calls it took."""

    text: str
    how: How
    calls: int
    bound: BoundName | None = None
    """The bound that stopped the ladder before a model could condense it."""


def is_transient(error: Exception) -> bool:
    """Whether a failed call may succeed if tried again at once (5xx, timeout, connection)."""
    if isinstance(error, UpstreamTimeout):
        return True
    status = error.upstream_status if isinstance(error, UpstreamError) else None
    return type(error) is UpstreamError and (status is None or status >= 500)


def retrying(complete: Complete, name: str) -> Complete:
    """`complete`, tried once more when its first failure is transient."""

    async def call(messages: Sequence[Message], *, max_tokens: int) -> Completion:
        try:
            return await complete(messages, max_tokens=max_tokens)
        except UpstreamError as error:
            if not is_transient(error):
                raise
            log.warning("extraction call failed; trying once more", extra={"model": name})
            return await complete(messages, max_tokens=max_tokens)

    return call


async def ladder_for(
    services: Services, entry: ModelEntry, *, scale: float, fallback_window: int, spend: Spend
) -> list[Rung]:
    """The rungs for a request to `entry`: its extraction model (when another), then itself;
    every call counted in the request's `spend`, whose bounds are `entry`'s."""
    known = await services.windows.of(entry)
    spend.limit(Bounds.of(entry, known.tokens if known else None), entry.model_name)
    await read_budget(spend, services.usage)
    names: list[tuple[str, float, Literal["cheapest", "model"]]] = []
    extractor = entry.context.extraction_model
    if extractor and extractor != entry.model_name:
        names.append((extractor, CHEAPEST_CHARS_PER_TOKEN, "cheapest"))
    names.append((entry.model_name, MODEL_CHARS_PER_TOKEN, "model"))
    rungs = []
    for name, chars_per_token, how in names:
        target = services.entry(name)
        window = await services.windows.of(target)
        room = call_room(target, window.tokens if window else fallback_window)
        complete = retrying(services.internal(name, spend), name)
        rungs.append(Rung(name, complete, int(room / scale), chars_per_token, how))
    return rungs


async def condense_message(
    text: str,
    *,
    share_tokens: int,
    rungs: Sequence[Rung],
    focus: str | None = None,
    model: str = "",
) -> Condensed:
    """One text condensed to share_tokens: each rung in turn, then its middle cut.

    A text that already fits comes back as it is (`how="unchanged"`, no call).
    """
    tokens = count_text(text, model)
    if tokens <= share_tokens:
        return Condensed(text, "unchanged", 0)
    calls = 0
    for rung in rungs:
        output = max(16, min(share_tokens, rung.room // 4))
        overhead = count_messages(condense_prompt("", max_words=9, focus=focus), model)
        if not _fits(text, rung, output, overhead):
            continue
        calls += 1
        prompt = condense_prompt(text, max_words=int(output * WORDS_PER_TOKEN), focus=focus)
        try:
            result = await rung.complete(prompt, max_tokens=output)
        except OverBudget as error:
            return Condensed(cut_middle(text, share_tokens, model), "truncated", calls, error.bound)
        except (ContextWindowExceeded, UpstreamError) as error:
            log.warning("condensing rung failed", extra={"model": rung.name, "error": str(error)})
            continue
        notes = clean_output(result.text, truncated=result.finish_reason == "length")
        if rejection(notes, tokens, model) is None:
            return Condensed(cut_middle(notes, share_tokens, model), rung.how, calls)
    return Condensed(cut_middle(text, share_tokens, model), "truncated", calls)


def extraction_room(spend: Spend, rung: Rung, target_tokens: int, overhead: int) -> int:
    """The history tokens one extraction on `rung` may read within what the request may
    still spend: one call's chunk, or as many map calls of the rung's chunk size as the calls
    and input tokens left allow with a merge call for every two of them (planning is
    generous: merges of short notes cost less). 0: not even one call may go."""
    chunk = plan_sizes(target_tokens, max(rung.room, MIN_CHUNK_TOKENS), 0, overhead).input
    per_call = chunk + overhead
    calls, tokens = spend.calls_left(), spend.tokens_left()
    if calls < 1 or tokens <= overhead:
        return 0
    maps = min(calls * 2 // 3, tokens * 2 // (3 * per_call))
    if maps <= 1:
        return min(chunk, tokens - overhead)
    return maps * chunk


def _fits(text: str, rung: Rung, output: int, overhead: int) -> bool:
    """Whether a rung's room holds the text by its chars-per-token estimate, with a margin."""
    estimate = len(text) / rung.chars_per_token
    return estimate + output + overhead + rung.room // 10 <= rung.room


async def extract_on_ladder(
    messages: Sequence[Message],
    *,
    rungs: Sequence[Rung],
    target_tokens: int,
    previous: Previous | None = None,
    focus: str | None = None,
    model: str = "",
    beyond_bound: Sequence[Message] = (),
    condensed: Sequence[Message] = (),
    positions: Sequence[int] = (),
    fallback: bool = True,
) -> Extraction:
    """Historical messages extracted by the first rung that manages, else cut (no model);
    without `fallback`, BadExtraction when no rung managed (the caller falls back).
    `condensed`: the messages `previous` stands in for, quoted anew by an extraction."""
    for rung in rungs:
        if rung.room < MIN_CHUNK_TOKENS:
            continue  # no window for even one chunk
        try:
            return await extract_history(
                messages,
                complete=rung.complete,
                target_tokens=target_tokens,
                extractor_window=rung.room,
                previous=previous,
                focus=focus,
                model=model,
                beyond_bound=beyond_bound,
                condensed=condensed,
                positions=positions,
            )
        except (BadExtraction, ContextWindowExceeded, UpstreamError) as error:
            log.warning("extraction rung failed", extra={"model": rung.name, "error": str(error)})
        except OverBudget:
            if not fallback:
                raise
            break  # no call may go: the cut, at once
    if not fallback:
        raise BadExtraction("no model of the ladder could extract the history")
    return cut_history(
        messages,
        target_tokens=target_tokens,
        previous=previous,
        focus=focus,
        model=model,
        beyond_bound=beyond_bound,
        positions=positions[len(condensed) :],
    )
