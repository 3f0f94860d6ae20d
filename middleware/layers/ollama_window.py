"""The `ollama_window` layer: Ollama's real window, a pre-flight fit, and a truncation check.

Ollama answers 200 after silently dropping the oldest messages of a prompt longer than its
`num_ctx`, so for Ollama models (`ollama_chat/` or `ollama/`) this layer:

1. takes the window Ollama really runs with (`Services.windows`: config, `/api/ps`, the
   Modelfile, the server default) and sends it as `num_ctx` (litellm's `ollama_chat/` route
   puts it in `options`);
2. estimates the prompt with the shared estimator and raises `ContextWindowExceeded` BEFORE
   the call when it passes the budget (middleware/condensing/budget.py: `num_ctx x
   safety_margin`, less the answer's reserve: the generation buffer, or the request's own
   `max_tokens` when larger);
3. (the deployment itself asks Ollama for `truncate: false`, providers/ollama.py `chat_fields`,
   so a prompt past `num_ctx` is an error; for Ollama versions that ignore the field) compares
   the upstream's `usage.prompt_tokens` (Ollama's `prompt_eval_count`) with the
   estimate: a suspected silent truncation is reported (header, log, metric), an uncut prompt
   teaches the estimator;
4. reports what it did as `x-overspill-num-ctx*` / `x-overspill-tokens-*` headers and, with
   `ollama.report_in_body`, a `context_window_optimization` field in the JSON body.

It is a model layer: it runs innermost (after `overflow_recovery`, whose one strike condenses
its pre-flight error exactly as a provider's "too long"), and it also wraps overspill's own
extraction and condensing calls, so Ollama never cuts the top of an extraction prompt either.
Other models pass through untouched.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from kernel import metrics
from kernel.config import ModelEntry, is_ollama
from kernel.errors import ContextWindowExceeded
from kernel.services import Services, Window
from kernel.types import ChatRequest, ChatResponse, Next, RequestContext, prompt_tokens_of
from middleware.condensing.budget import Budget, budget_for
from middleware.layers.shadow import would

log = logging.getLogger("overspill.ollama_window")

TRUNCATION_RATIO = 0.7
"""A reported prompt below this share of the estimate means Ollama dropped part of it."""


@dataclass(frozen=True, slots=True)
class Fit:
    """The pre-flight verdict for one prompt against one num_ctx."""

    num_ctx: int
    available: int
    used: int
    counted: int
    """The prompt's raw count (what the estimator learns against)."""

    @property
    def fits(self) -> bool:
        """Whether the estimated prompt fits the usable budget."""
        return self.used <= self.available


def plan_fit(budget: Budget, counted: int, scale: float) -> Fit:
    """The verdict for a prompt of `counted` raw tokens against a request's budget."""
    return Fit(budget.window, budget.prompt_limit, int(counted * scale), counted)


def looks_truncated(estimate: int, reported: int | None, ratio: float = TRUNCATION_RATIO) -> bool:
    """Whether the upstream's prompt count is clearly below the estimate (a silent cut)."""
    return reported is not None and estimate > 0 and reported < estimate * ratio


def report(window: Window, fit: Fit, reported: int | None = None) -> dict[str, Any]:
    """The `context_window_optimization` block for a response body."""
    return {
        "num_ctx": window.tokens,
        "num_ctx_source": window.source,
        "capped_by": window.capped_by,
        "tokens_available": fit.available,
        "tokens_used": fit.used,
        "prompt_tokens_reported": reported,
        "truncation_suspected": looks_truncated(fit.used, reported),
    }


def _source(window: Window) -> str:
    return window.source + (f"; capped-by={window.capped_by}" if window.capped_by else "")


class OllamaWindow:
    """Sends Ollama the real num_ctx, refuses prompts it would cut, flags cuts that slipped."""

    name: ClassVar[str] = "ollama_window"

    def __init__(self, services: Services) -> None:
        self.services = services
        self.estimator = services.estimator

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Resolve num_ctx, pre-flight the prompt, call on, then check for truncation."""
        entry = ctx.model
        if entry is None or not is_ollama(entry.litellm_params.model):
            return await call_next(request, ctx)
        window = await self.services.windows.of(entry)
        if window is None:  # discovery always answers for Ollama (its server default)
            return await call_next(request, ctx)
        counted = self.estimator.count(entry, request.messages, request.body.get("tools"))
        budget = budget_for(entry, window.tokens, request.body)
        fit = plan_fit(budget, counted, await self.estimator.scale(entry))
        if ctx.shadow:
            decision = "would-set-num-ctx" if fit.fits else "would-refuse"
            would(ctx, self.name, decision, f"num_ctx={window.tokens} tokens-used={fit.used}")
            return await call_next(request, ctx)
        ctx.note("num-ctx", window.tokens)
        ctx.note("num-ctx-source", _source(window))
        ctx.note("tokens-available", fit.available)
        ctx.note("tokens-used", fit.used)
        if not fit.fits:
            metrics.OLLAMA_TRUNCATIONS.labels(entry.model_name, "prevented").inc()
            raise self._overflow(entry, window, budget, fit)
        response = await call_next(request.with_params(num_ctx=window.tokens), ctx)
        if response.stream is not None:
            return ChatResponse(
                stream=self._watch(response.stream, entry, fit, ctx),
                status=response.status,
                headers=response.headers,
            )
        return await self._inspect(response, entry, window, fit, ctx)

    def _overflow(
        self, entry: ModelEntry, window: Window, budget: Budget, fit: Fit
    ) -> ContextWindowExceeded:
        """The pre-flight error: `limit` is the real window, `requested` our estimate."""
        return ContextWindowExceeded(
            f"the prompt (about {fit.used} tokens) exceeds the {fit.available} tokens usable "
            f"with Ollama model {entry.litellm_params.upstream_model!r}: num_ctx {fit.num_ctx} "
            f"({_source(window)}) x safety margin {entry.ollama.safety_margin} - "
            f"{budget.output_reserve} reserved for the answer. Ollama would silently drop the "
            "oldest messages, so overspill stopped the request before sending it",
            requested=fit.used,
            limit=fit.num_ctx,
            provider="ollama",
            estimated=True,
        )

    async def _inspect(
        self,
        response: ChatResponse,
        entry: ModelEntry,
        window: Window,
        fit: Fit,
        ctx: RequestContext,
    ) -> ChatResponse:
        if response.body is None or response.status != 200:
            return response
        try:
            body = orjson.loads(response.body)
        except orjson.JSONDecodeError:
            return response
        reported = prompt_tokens_of(body)
        await self._check(reported, entry, fit, ctx)
        if not entry.ollama.report_in_body or not isinstance(body, dict):
            return response
        body["context_window_optimization"] = report(window, fit, reported)
        return ChatResponse(
            body=orjson.dumps(body), status=response.status, headers=response.headers
        )

    async def _watch(
        self, stream: AsyncIterator[bytes], entry: ModelEntry, fit: Fit, ctx: RequestContext
    ) -> AsyncIterator[bytes]:
        """Relay a stream; an event carrying `usage` is checked (only the log sees the note)."""
        try:
            async for chunk in stream:
                if b'"usage"' in chunk:
                    await self._check(_stream_prompt_tokens(chunk), entry, fit, ctx)
                yield chunk
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    async def _check(
        self, reported: int | None, entry: ModelEntry, fit: Fit, ctx: RequestContext
    ) -> None:
        if not looks_truncated(fit.used, reported):
            await self.estimator.observe(entry, fit.counted, reported)
            return
        metrics.OLLAMA_TRUNCATIONS.labels(entry.model_name, "suspected").inc()
        message = (
            f"Ollama evaluated {reported} prompt tokens of about {fit.used} sent "
            f"(num_ctx {fit.num_ctx}): it probably dropped the oldest messages silently"
        )
        ctx.note("warning", message)
        log.warning(message, extra={"request_id": ctx.request_id, "model": entry.model_name})


def _stream_prompt_tokens(chunk: bytes) -> int | None:
    """`usage.prompt_tokens` from SSE bytes (`data: {...}` lines), when one carries it."""
    for line in chunk.split(b"\n"):
        if line.startswith(b"data: {") and b'"usage"' in line:
            try:
                found = prompt_tokens_of(orjson.loads(line[6:]))
            except orjson.JSONDecodeError:
                continue
            if found is not None:
                return found
    return None
