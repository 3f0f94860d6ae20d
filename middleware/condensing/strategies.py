"""The cheaper strategies beside extraction: observation masking and a middle cut. Pure.

A model's `context.strategies` lists what the condenser tries, in order, until the history's
stand-in fits its budget (`extract` alone by default); `mask_observations` and `middle_cut` are
always tried after the listed ones, so a failed or non-reducing extraction falls back to them
instead of an error.

- `mask_tool_results`: each tool result longer than `MASK_MIN_TOKENS` is replaced by a short
  placeholder naming what was there, e.g. ``[tool result of read_file(path=src/a.py) masked:
  2,340 tokens]``; every other message stays as it was. An agent workload stays lean without
  a summarising call.
- `mask_observations`: the same, and assistant replies longer than `LONG_REPLY_TOKENS` become
  ``[assistant reply masked: 812 tokens; it began: "…"]`` (JetBrains' observation masking).
- `middle_cut`: whole units (an assistant `tool_calls` message with its tool results is one
  unit) are removed from the middle, the opening and the newest kept, with a visible marker
  saying how many messages and tokens went.

Masking is deterministic and depends on each message alone, so what it made of a turn never
changes in later turns (a provider's prefix cache keeps hitting). The text forms
(`masked_history`, `middle_cut_history`) carry the earlier stand-in's text forward unchanged,
in front of the new turns. `masked_history` carries its quoted facts too; `middle_cut_history`
quotes anew the messages the earlier stand-in stands in for, when it is given them, as an
extraction's growth does (``ledger.Ledger.grow``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from kernel.tokens import count_text
from kernel.types import Message
from middleware.condensing.cutting import cut_middle
from middleware.condensing.ledger import Ledger, Previous, Rendered
from middleware.condensing.prompt import content_text, render_transcript
from middleware.condensing.split import units

__all__ = [
    "FALLBACKS",
    "STRATEGIES",
    "StrategyName",
    "mask_messages",
    "masked_history",
    "middle_cut",
    "middle_cut_history",
    "strategy_order",
]

StrategyName = Literal["extract", "mask_tool_results", "mask_observations", "middle_cut"]
STRATEGIES: tuple[StrategyName, ...] = get_args(StrategyName)
FALLBACKS: tuple[StrategyName, ...] = ("mask_observations", "middle_cut")
MASK_MIN_TOKENS = 48
"""A tool result at most this long stays: its placeholder would save little."""
LONG_REPLY_TOKENS = 150
"""An assistant reply longer than this is masked by `mask_observations`."""
MARKER_TOKENS = 24
"""What a middle cut's marker costs, at most."""
MASKED_HEADER = (
    "Transcript (older tool results and long replies masked; each placeholder names what was "
    "there):"
)
CUT_HEADER = "Transcript (the middle was cut to fit; a marker says what was removed):"


def strategy_order(configured: Sequence[str]) -> list[StrategyName]:
    """The strategies to try: the configured ones in order, then the fallbacks not listed."""
    order = [name for name in STRATEGIES if name in configured]
    order.sort(key=configured.index)
    return [*order, *(name for name in FALLBACKS if name not in order)]


def _arguments(raw: Any) -> str:
    """A tool call's arguments, short: ``k=v`` pairs of its JSON object, else its text."""
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        parsed = raw
    if isinstance(parsed, Mapping):
        text = ", ".join(f"{k}={_short(v, 40)}" for k, v in parsed.items())
    else:
        text = "" if parsed is None else str(parsed)
    return _short(text, 80)


def _short(value: Any, limit: int) -> str:
    """A value's one-line text within `limit` characters (an ellipsis when cut)."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _calls(messages: Sequence[Message]) -> dict[str, str]:
    """Each tool call's id → ``name(arguments)``, from the assistant messages."""
    found: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            function = call.get("function")
            function = function if isinstance(function, Mapping) else {}
            name = function.get("name", "a tool")
            found[str(call.get("id"))] = f"{name}({_arguments(function.get('arguments'))})"
    return found


def mask_messages(messages: Sequence[Message], *, replies: bool, model: str = "") -> list[Message]:
    """The messages with long tool results (and, with `replies`, long assistant replies)
    replaced by a placeholder naming what was there; tool calls and ids are kept."""
    calls = _calls(messages)
    out: list[Message] = []
    for message in messages:
        role = message.get("role")
        text = content_text(message) if role in ("tool", "function") else None
        if text is not None and (tokens := count_text(text, model)) > MASK_MIN_TOKENS:
            call = calls.get(str(message.get("tool_call_id")), str(message.get("name") or "a tool"))
            placeholder = f"[tool result of {call} masked: {tokens:,} tokens]"
            out.append({**message, "content": placeholder})
            continue
        content = message.get("content")
        if replies and role == "assistant" and isinstance(content, str):
            tokens = count_text(content, model)
            if tokens > LONG_REPLY_TOKENS:
                began = _short(" ".join(content.split()[:12]), 90)
                placeholder = f'[assistant reply masked: {tokens:,} tokens; it began: "{began}"]'
                out.append({**message, "content": placeholder})
                continue
        out.append(message)
    return out


def middle_cut(
    messages: Sequence[Message], counts: Sequence[int], budget: int
) -> list[Message] | None:
    """The opening and newest whole units within `budget` tokens, one marker message where
    the middle was removed (how many messages, how many tokens); the messages as they are
    when they fit; None when not even the first and last unit fit beside the marker."""
    if sum(counts) <= budget:
        return list(messages)
    groups = units(messages)
    cost = [sum(counts[i] for i in range(start, end)) for start, end in groups]
    room = budget - MARKER_TOKENS
    head, tail = 0, len(groups)
    used = 0
    take_head = True
    while head < tail:
        index = head if take_head else tail - 1
        if used + cost[index] > room:
            other = tail - 1 if take_head else head
            if head < tail - 1 and used + cost[other] <= room:
                take_head = not take_head
                continue
            break
        used += cost[index]
        head, tail = (head + 1, tail) if take_head else (head, tail - 1)
        take_head = not take_head
    if head == 0 or tail == len(groups) or head >= tail:
        return None
    first, last = groups[head][0], groups[tail - 1][1]
    removed = last - first
    tokens = sum(counts[first:last])
    marker = {
        "role": "system",
        "content": f"[… overspill removed {removed} messages ({tokens:,} tokens) here …]",
    }
    return [*messages[:first], marker, *messages[last:]]


def masked_history(
    messages: Sequence[Message],
    *,
    previous: Previous | None,
    target_tokens: int,
    replies: bool,
    model: str = "",
) -> Rendered | None:
    """The earlier stand-in's notes, then the masked transcript of the new turns, then the
    earlier quoted facts (``Ledger.carry``); None when it does not fit `target_tokens`."""
    ledger = Ledger.carry(previous)
    masked = render_transcript(mask_messages(messages, replies=replies, model=model))
    notes = "\n\n".join(part for part in (ledger.earlier, f"{MASKED_HEADER}\n{masked}") if part)
    made = ledger.as_is(notes)
    return made if count_text(made.text, model) <= target_tokens else None


def middle_cut_history(
    messages: Sequence[Message],
    *,
    previous: Previous | None,
    target_tokens: int,
    model: str = "",
    condensed: Sequence[Message] = (),
    positions: Sequence[int] = (),
) -> Rendered:
    """The earlier stand-in's notes and the new turns cut in the middle by whole units, beside
    the fact ledger (``Ledger.grow``: with `condensed`, the messages `previous` stands in
    for, quoted anew; `positions`: the request's index of each of them and of `messages`),
    within `target_tokens`; cut by tokens, marked, when whole units cannot do it."""
    ledger = Ledger.grow(previous, condensed, messages, positions=positions)
    earlier = ledger.earlier
    notes_tokens = ledger.notes_room(target_tokens, model)
    room = notes_tokens - count_text(earlier, model) - count_text(CUT_HEADER, model) - 4
    counts = [count_text(render_transcript([m]), model) + 2 for m in messages]
    kept = middle_cut(messages, counts, room) if room > 0 else None
    if kept is None:
        whole = "\n\n".join(p for p in (earlier, render_transcript(messages)) if p)
        notes = f"{CUT_HEADER}\n{cut_middle(whole, notes_tokens, model)}"
    else:
        transcript = "\n\n".join(_line(m) for m in kept)
        notes = "\n\n".join(p for p in (earlier, f"{CUT_HEADER}\n{transcript}") if p)
    return ledger.render(notes, target_tokens, model)


def _line(message: Message) -> str:
    """One message of a cut transcript (a marker as it is)."""
    text = content_text(message)
    if message.get("role") == "system" and text.startswith("[… overspill removed"):
        return text
    return render_transcript([message])
