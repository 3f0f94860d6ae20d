"""What the upstream's prompt cache served, as the upstream reported it, by model and kind.

An OpenAI-wire answer's `usage` says how many prompt tokens it read (`prompt_tokens`) and how
many of them its cache served (`prompt_tokens_details.cached_tokens`). overspill counts both
per model and per the kind of request it sent (`kind_of`), so an operator sees what a splice
keeps in the cache and what a growth costs it (with `overspill_prefix_changes_total`):

    whole        the client's conversation as it was sent (nothing needed doing)
    spliced      a cached extraction stood in for the older turns (history_splice)
    documents    documents were placed into the conversation
    recovered    the retry after an overflow
    own          overspill's own calls (extraction, condensing, warm-ups)

Read from a JSON answer's last bytes (`usage` is at its end) or a stream's last events, by
searching bytes, never parsing the answer: a request that needs no help pays microseconds.
A request whose upstream reported cached tokens notes `prompt-cached` (header and log line).
"""

from __future__ import annotations

from kernel import metrics
from kernel.types import ChatRequest, RequestContext

_USAGE = b'"usage"'
_PROMPT = b'"prompt_tokens"'
_CACHED = b'"cached_tokens"'


def reported(data: bytes) -> tuple[int, int] | None:
    """(prompt tokens, cached prompt tokens) of the last `usage` object in `data`; None when
    it has none (the cached count is 0 when the upstream did not say)."""
    at = data.rfind(_USAGE)
    if at < 0:
        return None
    prompt = _number_after(data, _PROMPT, at)
    if prompt is None:
        return None
    return prompt, _number_after(data, _CACHED, at) or 0


def _number_after(data: bytes, key: bytes, start: int) -> int | None:
    """The integer value of `key` after `start` (`"key": 123`), else None."""
    at = data.find(key, start)
    if at < 0:
        return None
    at = data.find(b":", at + len(key))
    if at < 0:
        return None
    at += 1
    while at < len(data) and data[at] in b" \t\r\n":
        at += 1
    end = at
    while end < len(data) and 48 <= data[end] <= 57:
        end += 1
    return int(data[at:end]) if end > at else None


def kind_of(ctx: RequestContext, request: ChatRequest) -> str:
    """The kind of request overspill sent (see the module docstring)."""
    if ctx.own:
        return "own"
    if request.spliced_from is not None:
        return "spliced"
    if "documents" in ctx.notes:
        return "documents"
    if "attempts" in ctx.notes:
        return "recovered"
    return "whole"


def seen(ctx: RequestContext, request: ChatRequest, data: bytes) -> None:
    """Count what an answer (or a stream's last events) reported of the prompt cache."""
    found = reported(data)
    if found is None:
        return
    prompt, cached = found
    metrics.prompt_cache(request.model, kind_of(ctx, request), prompt, cached)
    if cached:
        ctx.notes["prompt-cached"] = str(cached)
