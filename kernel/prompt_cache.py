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

import re

from kernel import metrics
from kernel.types import ChatRequest, RequestContext

TAIL_BYTES = 1024
"""How much of an answer's end (or a stream's last events) `usage` is looked for in."""
_USAGE = b'"usage"'
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_CACHED = re.compile(rb'"cached_tokens"\s*:\s*(\d+)')


def reported(data: bytes) -> tuple[int, int] | None:
    """(prompt tokens, cached prompt tokens) of the last `usage` object in `data`; None when
    it has none (the cached count is 0 when the upstream did not say)."""
    at = data.rfind(_USAGE)
    if at < 0:
        return None
    prompt = _PROMPT.search(data, at)
    if prompt is None:
        return None
    cached = _CACHED.search(data, at)
    return int(prompt[1]), int(cached[1]) if cached else 0


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
