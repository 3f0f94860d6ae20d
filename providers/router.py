"""Spreads requests over a model name's deployments and fails over before the first byte.

Deployments sharing a `model_name` take turns (round robin). When one fails in a way another
may not (unreachable, timed out, rate limited, 5xx), the next is tried, each at most once per
request. Errors that another deployment would repeat (the request is invalid, the context
window is exceeded) are raised at once. Streams are primed by the providers, so a failover
never happens after content has reached the client. A call that names its deployment
(`RequestContext.deployment`: a health check's) goes to that one alone.

Names that no deployment group spells out (a wildcard `model_name` serves them) are built on
first use by the `expand` callback the shell gives, and added as a group of their own.

The requests that are not conversations (embeddings, legacy completions) go the same way,
through each deployment's `send` instead of `complete`.

Every call is measured here, for clients and overspill's own calls alike: its time to the
response head (added to the request's `upstream_seconds`), its failure class, one more call
in the request's Spend (kernel/spending.py), and while tracing is on a client span with the
upstream's token counts. overspill's own calls first wait for a slot of the deployment's
parallelism (providers/parallelism.py), outside the time the provider's timeout measures.
An overflow that states the window teaches it (`learn`), for a model whose window nobody knew.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from time import perf_counter
from typing import Protocol

import orjson

from kernel import metrics, prompt_cache, tracing
from kernel.errors import (
    ContextWindowExceeded,
    ModelNotFound,
    UpstreamError,
    UpstreamRejected,
)
from kernel.json_values import is_int
from kernel.types import (
    ChatRequest,
    ChatResponse,
    Provider,
    RequestContext,
    RouteRequest,
    forwarder,
)
from providers.parallelism import Lanes

log = logging.getLogger("overspill.router")


class Router:
    """The innermost step of the pipeline: picks a deployment and calls its provider."""

    def __init__(
        self,
        deployments: Mapping[str, Sequence[Provider]],
        expand: Callable[[str], Sequence[Provider]] | None = None,
        *,
        lanes: Lanes | None = None,
        learn: Callable[[str, int], None] | None = None,
    ) -> None:
        self.deployments = {name: tuple(group) for name, group in deployments.items()}
        self._turns = {name: itertools.count() for name in self.deployments}
        self._expand = expand
        self.lanes = lanes
        self._learn = learn
        """Called with (model name, window) when an overflow states the window."""

    def expand_with(self, expand: Callable[[str], Sequence[Provider]]) -> None:
        """Build a group on first use for names no group spells out (wildcards)."""
        self._expand = expand

    def add(self, name: str, group: Sequence[Provider]) -> None:
        """Serve `name` with `group` (an alias's target group, or a wildcard's deployments)."""
        self.deployments[name] = tuple(group)
        self._turns.setdefault(name, itertools.count())

    def drop(self, name: str) -> None:
        """Stop serving `name` (its providers belong to other groups or need no closing)."""
        self.deployments.pop(name, None)
        self._turns.pop(name, None)

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Send the request to a deployment of `request.model`."""
        return await self._spread(request.model, ctx, _Chat(request, ctx))

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        """Forward an embeddings or legacy completions request to a deployment of
        `request.model`, chosen, failed over and measured as `complete`'s are."""
        return await self._spread(request.model, ctx, _Route(request, ctx))

    async def _spread(self, model: str, ctx: RequestContext, call: _Call) -> ChatResponse:
        """`call` on a deployment of `model`, the next one on a failure another may not have."""
        group = self.deployments.get(model)
        if group is None and self._expand is not None:
            group = tuple(self._expand(model))
        if not group:
            raise ModelNotFound(f"no deployment serves model {model!r}", param="model")
        measure = self._measured if tracing.tracer is None else self._traced
        if ctx.deployment is not None:
            if not 0 <= ctx.deployment < len(group):
                raise ModelNotFound(
                    f"model {model!r} has no deployment {ctx.deployment}", param="model"
                )
            return await measure(group[ctx.deployment], model, ctx, call)
        if len(group) == 1:
            return await measure(group[0], model, ctx, call)
        turns = self._turns.get(model) or self._turns.setdefault(model, itertools.count())
        start = next(turns) % len(group)
        order = group[start:] + group[:start]
        for attempt, provider in enumerate(order, 1):
            try:
                return await measure(provider, model, ctx, call)
            except (ContextWindowExceeded, UpstreamRejected):
                raise
            except UpstreamError as exc:
                if attempt == len(order):
                    raise
                log.warning(
                    "deployment failed; trying the next",
                    extra={"model": model, "provider": provider.name, "error": str(exc)},
                )
                ctx.note("failover", attempt)
        raise AssertionError("unreachable: the loop returns or raises")

    async def _measured(
        self, provider: Provider, model: str, ctx: RequestContext, call: _Call
    ) -> ChatResponse:
        """One provider call (an own call once it has a slot), timed and counted."""
        lane = self.lanes.of(provider) if ctx.own and self.lanes is not None else None
        if lane is None:
            return await self._call(provider, model, ctx, call)
        assert self.lanes is not None
        async with lane.own_call(self.lanes):
            return await self._call(provider, model, ctx, call)

    async def _call(
        self, provider: Provider, model: str, ctx: RequestContext, call: _Call
    ) -> ChatResponse:
        """One provider call, timed into `ctx.upstream_seconds` and counted."""
        if ctx.spend is not None:
            ctx.spend.called()
        started = perf_counter()
        try:
            return await call.on(provider)
        except ContextWindowExceeded as error:
            metrics.upstream_failed(provider.name, model, error)
            if error.limit and not error.estimated and self._learn is not None:
                self._learn(model, error.limit)
            raise
        except UpstreamError as error:
            metrics.upstream_failed(provider.name, model, error)
            raise
        finally:
            seconds = perf_counter() - started
            ctx.upstream_seconds += seconds
            metrics.upstream_called(provider.name, model, seconds)

    async def _traced(
        self, provider: Provider, model: str, ctx: RequestContext, call: _Call
    ) -> ChatResponse:
        """`_measured` inside a client span: GenAI attributes, a JSON answer's token counts."""
        assert tracing.tracer is not None
        attributes: dict[str, tracing.Attribute] = {
            "gen_ai.operation.name": call.operation,
            "gen_ai.system": provider.name,
            "gen_ai.request.model": model,
            **call.attributes(),
        }
        with tracing.tracer.span(f"{call.operation} {model}", attributes, "client") as span:
            try:
                response = await self._measured(provider, model, ctx, call)
            except (UpstreamError, ContextWindowExceeded) as error:
                span.set_attribute("error.type", metrics.failure_class(error))
                raise
            for key, value in _usage(response).items():
                span.set_attribute(key, value)
            return response

    async def aclose(self) -> None:
        """Close every provider (once, though aliases share them)."""
        providers = {id(p): p for group in self.deployments.values() for p in group}
        for provider in providers.values():
            await provider.aclose()


class _Call(Protocol):
    """One request as the router sends it to whichever deployment it picks."""

    operation: str
    """The GenAI operation name of its span: `chat`, `embeddings`, `text_completion`."""

    def on(self, provider: Provider) -> Awaitable[ChatResponse]:
        """The provider's answer to the request."""
        ...

    def attributes(self) -> dict[str, tracing.Attribute]:
        """The span attributes particular to the request."""
        ...


class _Chat:
    """A conversation: the provider's `complete`."""

    __slots__ = ("ctx", "request")
    operation = "chat"

    def __init__(self, request: ChatRequest, ctx: RequestContext) -> None:
        self.request = request
        self.ctx = ctx

    async def on(self, provider: Provider) -> ChatResponse:
        response = await provider.complete(self.request, self.ctx)
        if response.body is not None:  # a stream's usage is counted by its provider at its end
            prompt_cache.seen(self.ctx, self.request, response.body[-prompt_cache.TAIL_BYTES :])
        return response

    def attributes(self) -> dict[str, tracing.Attribute]:
        return {"overspill.stream": self.request.stream,
                "overspill.messages": len(self.request.messages)}  # fmt: skip


_OPERATIONS = {"embeddings": "embeddings", "completions": "text_completion"}


class _Route:
    """An embeddings or completions request: the provider's `send`, when it has one."""

    __slots__ = ("ctx", "operation", "request")

    def __init__(self, request: RouteRequest, ctx: RequestContext) -> None:
        self.request = request
        self.ctx = ctx
        self.operation = _OPERATIONS.get(request.route, request.route)

    def on(self, provider: Provider) -> Awaitable[ChatResponse]:
        return forwarder(provider, self.request).send(self.request, self.ctx)

    def attributes(self) -> dict[str, tracing.Attribute]:
        return {"overspill.stream": self.request.stream}


def _usage(response: ChatResponse) -> dict[str, int]:
    """The GenAI usage attributes of a JSON answer (none for streams)."""
    if response.body is None:
        return {}
    try:
        usage = orjson.loads(response.body).get("usage")
    except (orjson.JSONDecodeError, AttributeError):
        return {}
    if not isinstance(usage, dict):
        return {}
    found = {
        "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
    }
    return {k: v for k, v in found.items() if is_int(v)}
