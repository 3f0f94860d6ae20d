"""The one place that wires: providers, the router, the store, the estimator, the windows, the
layers, and overspill's own calls, built once from validated settings.

    client ─▶ pipeline.handle ─▶ conversation layers ─▶ model layers ─▶ router ─▶ provider
    overspill's own calls (extraction, condensing) ─▶ pipeline.model ─▶ router ─▶ provider

The routes (proxy/app.py) only use a built `System`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from time import perf_counter
from typing import Any

import httpx
import orjson

from kernel import metrics, redaction, tracing
from kernel.config import ModelEntry, Settings
from kernel.errors import OverspillError
from kernel.estimator import Estimator
from kernel.jobs import Jobs
from kernel.metered_store import metered
from kernel.model_routes import WildcardRoutes
from kernel.response_chains import ResponseChains
from kernel.services import Services
from kernel.spending import OverBudget, Spend, Tally
from kernel.store import HistoryStore
from kernel.tokens import count_messages
from kernel.types import (
    ChatRequest,
    ChatResponse,
    Complete,
    Completion,
    Message,
    Next,
    Provider,
    RequestContext,
    RouteRequest,
)
from kernel.usage import UsageLedger, counted
from kernel.wildcards import is_wildcard
from middleware.pipeline import LAYERS, LayerFactory, Pipeline, build_pipeline
from providers import anthropic, gemini
from providers.deferred import DeferredProvider
from providers.model_info import self_hosted
from providers.ollama import OllamaWindows, native
from providers.openai_compat import OpenAICompatProvider
from providers.parallelism import Lanes
from providers.roads import Roads
from providers.router import Router
from providers.transport import HttpxUpstream, Upstream, upstream_client
from providers.windows import ModelWindows
from proxy import logs
from proxy.stores import open_store

log = logging.getLogger("overspill")

MAX_WILDCARD_NAMES = 1024
"""Distinct names a wildcard `model_name` keeps deployments for; the oldest is forgotten
past this (and rebuilt if asked for again), so clients cannot grow memory without bound."""


class InternalCalls:
    """overspill's own calls to a configured model: deterministic, non-stream, through the
    model layers only (so an Ollama target gets its num_ctx and pre-flight), each counted
    against its request's Spend and in the tenant's usage (kernel/usage.py)."""

    def __init__(
        self,
        entries: Mapping[str, ModelEntry],
        ledger: UsageLedger | None,
        send: Callable[[RouteRequest, RequestContext], Awaitable[ChatResponse]],
    ) -> None:
        self.entries = entries
        self.ledger = ledger
        self._send = send
        """The router's `send`: embeddings and legacy completions, which no layer changes."""
        self._pipeline: Next | None = None

    def bind(self, pipeline: Next) -> None:
        """Attach the model pipeline, once the layers are built."""
        self._pipeline = pipeline

    def __call__(self, model: str, spend: Spend | None = None) -> Complete:
        """A call to `model` (a configured name) for the request `spend` counts."""
        entry = self.entries[model]
        spend = spend or Spend("internal")

        async def complete(messages: Sequence[Message], *, max_tokens: int) -> Completion:
            request = _own_request(model, messages, max_tokens)
            pipeline, ctx = self._route("internal", entry, spend)
            if tracing.tracer is None:
                return await _measured(pipeline, request, ctx)
            return await _traced(pipeline, request, ctx, tracing.tracer)

        upstream = entry.litellm_params.upstream_model
        return counted(complete, model, upstream, spend, self.ledger)

    def probe(
        self, model: str, deployment: int, entry: ModelEntry, spend: Spend, api: str = "chat"
    ) -> Complete:
        """A health check's call to `model`'s `deployment`-th deployment (`entry`) alone, on
        `api`: a chat through the model layers as every own call, an embedding of the
        messages' text or a legacy completion of it forwarded as a client's; counted in
        `spend`'s tenant's usage, and not in the metrics of compaction's calls."""

        async def complete(messages: Sequence[Message], *, max_tokens: int) -> Completion:
            pipeline, ctx = self._route("health", entry, spend, deployment)
            if api == "chat":
                return completion_of(await pipeline(_own_request(model, messages, max_tokens), ctx))
            text = " ".join(str(message.get("content") or "") for message in messages)
            body: dict[str, Any] = {"model": model}
            if api == "embeddings":
                body["input"] = text
            else:
                body.update(prompt=text, max_tokens=max_tokens)
            request = RouteRequest(api, model, False, body, orjson.dumps(body))
            return completion_of(await self._send(request, ctx))

        upstream = entry.litellm_params.upstream_model
        return counted(complete, model, upstream, spend, self.ledger)

    def _route(
        self, kind: str, entry: ModelEntry, spend: Spend, deployment: int | None = None
    ) -> tuple[Next, RequestContext]:
        """The model pipeline and a fresh context for one own call of `kind` to `entry` (to
        the model's `deployment`-th deployment alone, when given)."""
        if self._pipeline is None:
            raise RuntimeError("overspill's own calls are used before the layers are built")
        ctx = RequestContext(
            request_id=f"{kind}-{uuid.uuid4().hex[:12]}",
            tenant="internal",
            model=entry,
            spend=spend,
            own=True,
            deployment=deployment,
        )
        return self._pipeline, ctx

    async def warm(
        self, request: ChatRequest, entry: ModelEntry, spend: Spend | None = None
    ) -> str:
        """Fill the upstream's prefix cache with `request`'s prompt (see `kernel.services.Warm`):
        the client's own parameters (tools shape the prompt too), one token, no stream."""
        setting = entry.context.warm_cache
        if not setting or (setting == "auto" and not self_hosted(entry)):
            return "skipped"
        spend = spend or Spend("internal")
        tally = Tally(
            calls=1,
            prompt_tokens=count_messages(request.messages, entry.litellm_params.upstream_model),
        )
        try:
            spend.admit(entry.model_name, tally.prompt_tokens)
        except OverBudget:
            return "skipped"
        pipeline, ctx = self._route("warm", entry, spend)
        primer = replace(request, model=entry.model_name, stream=False).with_params(
            model=entry.model_name,
            max_tokens=1,
            max_completion_tokens=None,
            stream=None,
            stream_options=None,
            n=None,
            tool_choice=None,  # a forced call cut at one token would only fail to parse
        )
        started = perf_counter()
        try:
            response = await pipeline(primer, ctx)
            done = completion_of(response)
        except OverspillError as error:
            log.warning(
                "warming the prefix cache failed: %s",
                error.message,
                extra={"request_id": ctx.request_id, "model": entry.model_name},
            )
            metrics.cache_warmed(entry.model_name, "failed", perf_counter() - started)
            tally.failed = 1
            await self._settle(spend, entry.model_name, tally)
            return "failed"
        tally.prompt_tokens = done.prompt_tokens or tally.prompt_tokens
        tally.completion_tokens = done.completion_tokens or 0
        await self._settle(spend, entry.model_name, tally)
        metrics.cache_warmed(entry.model_name, "warmed", perf_counter() - started)
        return "warmed"

    async def _settle(self, spend: Spend, model: str, tally: Tally) -> None:
        """A warm-up's cost, in its Spend, the metrics and the tenant's usage."""
        spend.settle(model, tally.prompt_tokens, tally.completion_tokens, not tally.failed)
        metrics.own_tokens(model, tally.prompt_tokens, tally.completion_tokens)
        if self.ledger is not None:
            await self.ledger.record(spend.tenant, model, tally)


@dataclass
class System:
    """Everything the routes use, built once per worker."""

    settings: Settings
    pipeline: Pipeline
    router: Router
    store: HistoryStore
    ollama: OllamaWindows
    windows: ModelWindows
    entries: dict[str, ModelEntry]
    """Each model name's first deployment (what the layers plan for); aliases map to their
    target's, and names a wildcard served are added on first use."""
    internal: InternalCalls
    unavailable: dict[str, str] = field(default_factory=dict)
    """Why each unusable model name cannot be used."""
    _owned: list[Any] = field(default_factory=list)
    wildcards: WildcardRoutes | None = None
    provider_for: Callable[[ModelEntry], Provider] | None = None
    """Builds a deployment's provider (for the names wildcards serve)."""
    _expanded: dict[str, None] = field(default_factory=dict)

    def expand(self, name: str) -> ModelEntry | None:
        """The deployment serving `name` through a wildcard `model_name`, registered on first
        use; None when no pattern matches (or the config has none: no work at all)."""
        if not self.wildcards or self.provider_for is None:
            return None
        matched = self.wildcards.match(name)
        if not matched:
            return None
        ready = [entry for entry in matched if usable(entry)]
        if ready:
            self.router.add(name, [self.provider_for(entry) for entry in ready])
        else:
            self.unavailable[name] = why_unusable(matched)
        self.entries[name] = matched[0]
        self.windows.add(matched[0])
        self._expanded[name] = None
        if len(self._expanded) > MAX_WILDCARD_NAMES:
            self._forget(next(iter(self._expanded)))
        return matched[0]

    def _forget(self, name: str) -> None:
        del self._expanded[name]
        self.entries.pop(name, None)
        self.unavailable.pop(name, None)
        self.router.drop(name)
        self.windows.forget(name)

    def providers_of(self, name: str) -> Sequence[Provider]:
        """The router's callback for a name it has no group for."""
        self.expand(name)
        return self.router.deployments.get(name, ())

    jobs: Jobs = field(default_factory=Jobs)
    """Background work this system started; drained before anything is released."""
    ledger: UsageLedger | None = None
    """What overspill's own calls spent per tenant (the usage endpoint and command)."""
    services: Services | None = None
    """What the layers use (store, estimator, windows, own calls): the shell's routes that
    condense on request (`POST /v1/responses/compact`) use the same."""
    chains: ResponseChains | None = None
    """The Responses API's stored responses (and the chains this process remembers)."""

    async def aclose(self, grace: float | None = None) -> None:
        """Drain the background jobs (up to `grace` seconds, default the configured
        graceful_shutdown_seconds), then release providers, the store, and the clients."""
        if grace is None:
            grace = self.settings.general_settings.graceful_shutdown_seconds
        await self.jobs.drain(grace)
        await self.router.aclose()
        await self.store.aclose()
        for resource in self._owned:
            await resource.aclose()


def build_system(
    settings: Settings,
    *,
    registry: Mapping[str, LayerFactory] = LAYERS,
    providers: Mapping[str, Sequence[Provider]] | None = None,
    client: httpx.AsyncClient | Upstream | None = None,
    store: HistoryStore | None = None,
    ollama: OllamaWindows | None = None,
) -> System:
    """Wire a system for validated settings (tests may inject providers, clients, a store)."""
    settings = native_ollama(settings)
    redaction.install(redaction.Redactor(redaction.secrets_of(settings)))
    owned: list[Any] = []
    http = _upstream(client) if client is not None else _own(owned, _http_client(settings))
    lanes = _own(owned, Lanes())

    def provider_for(entry: ModelEntry) -> Provider:
        made = _provider(entry, settings, http)
        lanes.register(made, entry)
        return made

    if providers is None:
        groups, unavailable = build_providers(settings, provider_for)
    else:
        groups, unavailable = {k: list(v) for k, v in providers.items()}, {}
    history = metered(store or open_store(settings.general_settings.store))
    ollama = ollama or _own(owned, OllamaWindows())
    windows = ModelWindows(settings, ollama)
    router = Router(groups, lanes=lanes, learn=windows.learn)
    entries = {
        e.model_name: e for e in reversed(settings.model_list) if not is_wildcard(e.model_name)
    }
    ledger = UsageLedger(history, settings)
    internal = InternalCalls(entries, ledger, router.send)
    services = Services(
        settings, history, Estimator(history), windows, internal, entries, internal.warm,
        usage=ledger,
    )  # fmt: skip
    pipeline = build_pipeline(services, router.complete, registry)
    internal.bind(pipeline.model)
    system = System(
        settings, pipeline, router, history, ollama, windows, entries, internal, unavailable,
        owned, WildcardRoutes(settings), provider_for, ledger=ledger,
        jobs=Jobs(settings.general_settings.max_background_jobs,
                  settings.general_settings.max_waiting_jobs),
        services=services,
        chains=ResponseChains(history),
    )  # fmt: skip
    if system.wildcards:
        router.expand_with(system.providers_of)
    _add_aliases(system)
    return system


def _add_aliases(system: System) -> None:
    """`router_settings.model_group_alias`: each alias is served by its target's deployments
    (a wildcard target is expanded now); the alias wins over a same-named model, as in LiteLLM."""
    for alias, item in system.settings.router_settings.model_group_alias.items():
        target = item.model
        entry = system.entries.get(target) or system.expand(target)
        if entry is None:
            continue
        system.entries[alias] = entry
        if target in system.router.deployments:
            system.router.add(alias, system.router.deployments[target])
        else:
            system.router.drop(alias)
        if target in system.unavailable:
            system.unavailable[alias] = system.unavailable[target]
        else:
            system.unavailable.pop(alias, None)
        system._expanded.pop(target, None)  # an alias's target is never forgotten


def _own_request(model: str, messages: Sequence[Message], max_tokens: int) -> ChatRequest:
    """One of overspill's own chat calls: deterministic, not streamed."""
    body: dict[str, Any] = {
        "model": model,
        "messages": list(messages),
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    return ChatRequest(model, tuple(messages), False, body)


async def _measured(pipeline: Next, request: ChatRequest, ctx: RequestContext) -> Completion:
    """One of overspill's own calls, counted with its time and the upstream's token counts."""
    started = perf_counter()
    try:
        done = completion_of(await pipeline(request, ctx))
    except OverspillError as error:
        metrics.extraction_call(
            request.model, metrics.failure_class(error), perf_counter() - started, None, None
        )
        raise
    seconds = perf_counter() - started
    metrics.extraction_call(
        request.model, "ok", seconds, done.prompt_tokens, done.completion_tokens
    )
    return done


async def _traced(
    pipeline: Next, request: ChatRequest, ctx: RequestContext, tracer: tracing.Tracer
) -> Completion:
    """`_measured` inside an `extraction <model>` span with its tokens in and out."""
    attributes: dict[str, tracing.Attribute] = {
        "overspill.model": request.model,
        "overspill.messages": len(request.messages),
        "gen_ai.request.max_tokens": int(request.body.get("max_tokens") or 0),
    }
    with tracer.span(f"extraction {request.model}", attributes) as span:
        done = await _measured(pipeline, request, ctx)
        if done.prompt_tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", done.prompt_tokens)
        if done.completion_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", done.completion_tokens)
        return done


def completion_of(response: ChatResponse) -> Completion:
    """The text and usage of a non-stream chat.completion."""
    payload = response.json()
    choice = (payload.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content = message.get("content")
    usage = payload.get("usage") or {}
    return Completion(
        text=content if isinstance(content, str) else "",
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        finish_reason=choice.get("finish_reason"),
    )


def build_providers(
    settings: Settings, make: Callable[[ModelEntry], Provider]
) -> tuple[dict[str, list[Provider]], dict[str, str]]:
    """A provider per usable deployment (`make` builds one), and why each unusable model
    cannot be used."""
    groups: dict[str, list[Provider]] = {}
    unusable: dict[str, list[ModelEntry]] = {}
    for entry in settings.model_list:
        if is_wildcard(entry.model_name):
            continue  # served per requested name (System.expand)
        if usable(entry):
            groups.setdefault(entry.model_name, []).append(make(entry))
        else:
            unusable.setdefault(entry.model_name, []).append(entry)
    unavailable = {
        name: why_unusable(entries) for name, entries in unusable.items() if name not in groups
    }
    return groups, unavailable


def usable(entry: ModelEntry) -> bool:
    """Whether a deployment can be called: every variable it names set, its api_base a URL."""
    return not entry.missing_env and not entry.litellm_params.api_base_problem


def why_unusable(entries: Sequence[ModelEntry]) -> str:
    """Why none of one model name's deployments (`entries`, none `usable`) can serve it:
    the variables they name that are unset, else the first one's api_base problem."""
    if unset := sorted({var for entry in entries for var in entry.missing_env}):
        return "environment variable(s) unset: " + ", ".join(unset)
    return next(problem for entry in entries if (problem := entry.litellm_params.api_base_problem))


OWN_TRANSLATIONS: tuple[tuple[Callable[[ModelEntry], bool], type[Roads]], ...] = (
    (anthropic.serves, anthropic.AnthropicProvider),
    (gemini.serves, gemini.GeminiProvider),
)
"""The deployments overspill translates itself (`serves`), and the provider for each."""


def _provider(entry: ModelEntry, settings: Settings, client: Upstream) -> Provider:
    timeout = settings.general_settings.request_timeout
    limit = settings.general_settings.max_response_bytes
    if entry.uses_passthrough():
        return OpenAICompatProvider(
            entry, client, request_timeout=timeout, max_response_bytes=limit
        )

    def build() -> Provider:
        from providers.translated import build_provider  # imported by now, off the event loop

        logs.adopt_litellm_loggers()
        return build_provider(
            entry,
            client,
            drop_params=settings.drop_params,
            request_timeout=timeout,
            max_response_bytes=limit,
        )

    # litellm's import costs seconds and over 100 MB: paid on the model's first request only
    deferred = DeferredProvider(entry.litellm_params.provider, "providers.translated", build)
    # Anthropic's and Gemini's APIs: each request's road chosen by providers.roads.choose
    own = next((made for serves, made in OWN_TRANSLATIONS if serves(entry)), None)
    if own is not None:
        return own(
            entry,
            client,
            deferred,
            drop_params=settings.drop_params,
            request_timeout=timeout,
            max_response_bytes=limit,
        )
    return deferred


def native_ollama(settings: Settings) -> Settings:
    """`ollama/NAME` deployments go through Ollama's native route (`ollama_chat/`), warned once."""
    entries = [native(entry) for entry in settings.model_list]
    changed = [i for i, e in enumerate(entries) if e is not settings.model_list[i]]
    for index in changed:
        log.warning(
            "model_list[%d] (%s): ollama/ routes lose num_ctx; using ollama_chat/ instead",
            index,
            entries[index].model_name,
        )
    return settings.model_copy(update={"model_list": tuple(entries)}) if changed else settings


def _http_client(settings: Settings) -> Upstream:
    general = settings.general_settings
    return upstream_client(
        general.upstream_client, general.request_timeout, general.connect_timeout
    )


def _upstream(client: httpx.AsyncClient | Upstream) -> Upstream:
    """A client a caller gave (tests give an httpx client with a mock transport)."""
    return HttpxUpstream(client) if isinstance(client, httpx.AsyncClient) else client


def _own(owned: list[Any], resource: Any) -> Any:
    owned.append(resource)
    return resource
