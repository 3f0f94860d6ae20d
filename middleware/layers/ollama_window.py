"""The `ollama_window` layer: Ollama's real window, a pre-flight fit, and a truncation check.

Ollama answers 200 after silently dropping the oldest messages of a prompt longer than its
`num_ctx`, so for Ollama models (`ollama_chat/` or `ollama/`) this layer:

1. resolves the window through a `WindowResolver` (providers/ollama.py implements it) and sends
   it as the `num_ctx` request param (litellm's `ollama_chat/` route puts it in `options`);
2. estimates the prompt (kernel/tokens.py) and raises `ContextWindowExceeded` BEFORE calling the
   rest of the pipeline when it exceeds `num_ctx x safety_margin - generation_buffer`;
3. compares the upstream's `usage.prompt_tokens` (Ollama's `prompt_eval_count`) with the
   estimate and reports a suspected silent truncation (header, log, counter);
4. reports what it did as `x-overspill-num-ctx*` / `x-overspill-tokens-*` headers and, with
   `ollama.report_in_body`, a `context_window_optimization` field in the JSON body.

Configure it INNERMOST, after `overflow_recovery` (`middleware: [overflow_recovery,
ollama_window]`): its pre-flight error is then the "too long" that overflow_recovery's one
strike condenses, exactly as for a provider that says so. Other models pass through untouched.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from kernel.config import ModelEntry, OllamaSettings, is_ollama
from kernel.errors import ContextWindowExceeded
from kernel.services import Services, WindowInfo
from kernel.tokens import TokenCounter
from kernel.types import ChatRequest, ChatResponse, Next, RequestContext
from middleware.documents.ranking import top_k

log = logging.getLogger("overspill.ollama_window")

TRUNCATION_RATIO = 0.7
"""A reported prompt below this share of the estimate means Ollama dropped part of it."""
TRUNCATIONS: Counter[str] = Counter()
"""Suspected silent truncations, per configured model name."""


@dataclass(frozen=True, slots=True)
class Fit:
    """The pre-flight verdict for one prompt against one num_ctx."""

    num_ctx: int
    available: int
    used: int

    @property
    def fits(self) -> bool:
        """Whether the estimated prompt fits the usable budget."""
        return self.used <= self.available


@dataclass(frozen=True, slots=True)
class Doc:
    """A retrieved document chunk, with its relevance score (higher is more relevant)."""

    id: str
    text: str
    score: float


def usable_budget(num_ctx: int, safety_margin: float, generation_buffer: int) -> int:
    """Prompt tokens allowed: `num_ctx x margin - buffer`, the buffer at most half the share."""
    share = int(num_ctx * safety_margin)
    return max(0, share - min(generation_buffer, share // 2))


def plan_fit(num_ctx: int, settings: OllamaSettings, estimate: int) -> Fit:
    """The usable budget for `num_ctx` and the estimated prompt it must hold."""
    available = usable_budget(num_ctx, settings.safety_margin, settings.generation_buffer)
    return Fit(num_ctx, available, estimate)


def looks_truncated(estimate: int, reported: int | None, ratio: float = TRUNCATION_RATIO) -> bool:
    """Whether the upstream's prompt count is clearly below the estimate (a silent cut)."""
    return reported is not None and estimate > 0 and reported < estimate * ratio


def order_for_ollama(
    documents: Sequence[Doc], available_tokens: int, avg_chunk_tokens: int = 200
) -> list[Doc]:
    """The top_k most relevant documents, most relevant LAST (Ollama cuts from the top).

    Equal scores keep their input order among the kept ones' ranking (a stable sort).
    """
    ranked = sorted(documents, key=lambda doc: doc.score, reverse=True)
    return ranked[: top_k(available_tokens, avg_chunk_tokens)][::-1]


def prompt_tokens(body: object) -> int | None:
    """`usage.prompt_tokens` of a parsed chat.completion (or chunk), when present."""
    usage = body.get("usage") if isinstance(body, dict) else None
    value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def report(window: WindowInfo, fit: Fit, reported: int | None = None) -> dict[str, Any]:
    """The `context_window_optimization` block for a response body."""
    return {
        "num_ctx": window.num_ctx,
        "num_ctx_source": window.source,
        "capped_by": window.capped_by,
        "tokens_available": fit.available,
        "tokens_used": fit.used,
        "prompt_tokens_reported": reported,
        "truncation_suspected": looks_truncated(fit.used, reported),
    }


def _source(window: WindowInfo) -> str:
    return window.source + (f"; capped-by={window.capped_by}" if window.capped_by else "")


class OllamaWindow:
    """Sends Ollama the real num_ctx, refuses prompts it would cut, flags cuts that slipped."""

    name: ClassVar[str] = "ollama_window"

    def __init__(self, services: Services) -> None:
        if services.ollama is None:
            raise ValueError("the ollama_window layer needs Ollama window discovery")
        self.services = services
        self.windows = services.ollama
        self.counters: dict[str, TokenCounter] = {}

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Resolve num_ctx, pre-flight the prompt, call on, then check for truncation."""
        entry = ctx.model
        if entry is None or not is_ollama(entry.litellm_params.model):
            return await call_next(request, ctx)
        window = await self.windows.window(entry)
        fit = plan_fit(window.num_ctx, entry.ollama, self._estimate(entry, request))
        ctx.note("num-ctx", window.num_ctx)
        ctx.note("num-ctx-source", _source(window))
        ctx.note("tokens-available", fit.available)
        ctx.note("tokens-used", fit.used)
        if not fit.fits:
            raise self._overflow(entry, window, fit)
        response = await call_next(request.with_params(num_ctx=window.num_ctx), ctx)
        if response.stream is not None:
            return ChatResponse(
                stream=self._watch(response.stream, entry, fit, ctx),
                status=response.status,
                headers=response.headers,
            )
        return self._inspect(response, entry, window, fit, ctx)

    def _estimate(self, entry: ModelEntry, request: ChatRequest) -> int:
        """The prompt's size in the model's own tokens, as calibrated so far."""
        model = entry.litellm_params.upstream_model
        counter = self.counters.get(model)
        if counter is None:
            counter = self.counters[model] = TokenCounter(model)
        ratio = self.services.calibration.ratio(entry.model_name)
        return int(counter.count_messages(request.messages) * ratio)

    def _overflow(self, entry: ModelEntry, window: WindowInfo, fit: Fit) -> ContextWindowExceeded:
        """The pre-flight error; `limit` is the usable budget, the size a retry must fit."""
        settings = entry.ollama
        return ContextWindowExceeded(
            f"the prompt (about {fit.used} tokens) exceeds the {fit.available} tokens usable "
            f"with Ollama model {entry.litellm_params.upstream_model!r}: num_ctx {fit.num_ctx} "
            f"({_source(window)}) x safety margin {settings.safety_margin} - generation buffer "
            f"{settings.generation_buffer}. Ollama would silently drop the oldest messages, so "
            "overspill stopped the request before sending it",
            requested=fit.used,
            limit=fit.available,
            provider="ollama",
        )

    def _inspect(
        self,
        response: ChatResponse,
        entry: ModelEntry,
        window: WindowInfo,
        fit: Fit,
        ctx: RequestContext,
    ) -> ChatResponse:
        if response.body is None or response.status != 200:
            return response
        try:
            body = orjson.loads(response.body)
        except orjson.JSONDecodeError:
            return response
        reported = prompt_tokens(body)
        self._check(reported, entry, fit, ctx)
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
                    self._check(_stream_prompt_tokens(chunk), entry, fit, ctx)
                yield chunk
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    def _check(
        self, reported: int | None, entry: ModelEntry, fit: Fit, ctx: RequestContext
    ) -> None:
        if not looks_truncated(fit.used, reported):
            self._learn(entry, fit.used, reported)
            return
        TRUNCATIONS[entry.model_name] += 1
        message = (
            f"Ollama evaluated {reported} prompt tokens of about {fit.used} sent "
            f"(num_ctx {fit.num_ctx}): it probably dropped the oldest messages silently"
        )
        ctx.note("warning", message)
        log.warning(message, extra={"request_id": ctx.request_id, "model": entry.model_name})

    def _learn(self, entry: ModelEntry, estimate: int, reported: int | None) -> None:
        """An untruncated prompt's upstream count corrects later estimates for the model."""
        calibration = self.services.calibration
        raw = int(estimate / calibration.ratio(entry.model_name))
        calibration.observe(entry.model_name, raw, reported)


def _stream_prompt_tokens(chunk: bytes) -> int | None:
    """`usage.prompt_tokens` from SSE bytes (`data: {...}` lines), when one carries it."""
    for line in chunk.split(b"\n"):
        if line.startswith(b"data: {") and b'"usage"' in line:
            try:
                found = prompt_tokens(orjson.loads(line[6:]))
            except orjson.JSONDecodeError:
                continue
            if found is not None:
                return found
    return None
