"""The layers by name, and their composition around an endpoint, outermost first (as Starlette
wraps middleware)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kernel import tracing
from kernel.config import Settings
from kernel.services import Services
from kernel.types import ChatRequest, ChatResponse, Layer, Next, RequestContext
from middleware.layers.documents import Documents
from middleware.layers.history_splice import HistorySplice
from middleware.layers.observation_masking import ObservationMasking
from middleware.layers.ollama_window import OllamaWindow
from middleware.layers.overflow_recovery import OverflowRecovery

LayerFactory = Callable[[Services], Layer]
"""Builds a layer from the services (at startup)."""


LAYERS: dict[str, LayerFactory] = {
    Documents.name: Documents,
    ObservationMasking.name: ObservationMasking,
    HistorySplice.name: HistorySplice,
    OverflowRecovery.name: OverflowRecovery,
    OllamaWindow.name: OllamaWindow,
}
"""Layer name (as written in config.yaml `middleware:`) → factory."""


class MiddlewareError(ValueError):
    """config.yaml's `middleware:` names an unknown layer or an impossible order."""


def compose(layers: Sequence[Layer], endpoint: Next) -> Next:
    """One callable: `layers[0]` sees the request first and the response last."""
    handler = endpoint
    for layer in reversed(layers):
        handler = _bind(layer, handler)
    return handler


def _bind(layer: Layer, call_next: Next) -> Next:
    tracer = tracing.tracer
    if tracer is not None:
        return _traced(layer, call_next, tracer)

    async def handle(request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        return await layer.handle(request, ctx, call_next)

    handle.__qualname__ = f"{type(layer).__name__}.handle"
    return handle


def _traced(layer: Layer, call_next: Next, tracer: tracing.Tracer) -> Next:
    """The layer inside a `layer <name>` span (tracing was on when the pipeline was built)."""
    name = f"layer {layer.name}"
    attributes: dict[str, tracing.Attribute] = {"overspill.layer": layer.name}

    async def handle(request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        with tracer.span(name, attributes):
            return await layer.handle(request, ctx, call_next)

    handle.__qualname__ = f"{type(layer).__name__}.handle"
    return handle


RECOMMENDED = (
    "documents",
    "observation_masking",
    "history_splice",
    "overflow_recovery",
    "ollama_window",
)
"""What runs when config.yaml has no `middleware:` key (`middleware: []` runs none)."""
MODEL_LAYERS = frozenset({"ollama_window"})
"""Layers about the target model, not the conversation: they run innermost, and they also wrap
overspill's own calls to a model (extraction, condensing), which skip every other layer."""


def active_layers(settings: Settings) -> tuple[str, ...]:
    """The layer names that run, outermost first: `middleware:`, else the recommended ones."""
    return RECOMMENDED if settings.middleware is None else settings.middleware


def check_layers(settings: Settings, registry: Mapping[str, LayerFactory]) -> None:
    """Raise MiddlewareError, naming the YAML path, for an unknown layer or an impossible order."""
    names = active_layers(settings)
    for index, name in enumerate(names):
        if name not in registry:
            known = ", ".join(sorted(registry)) or "none yet"
            raise MiddlewareError(f"middleware[{index}]: unknown layer {name!r} (known: {known})")
    for index, name in enumerate(names):
        outer = [n for n in names[index + 1 :] if n not in MODEL_LAYERS]
        if name in MODEL_LAYERS and outer:
            raise MiddlewareError(
                f"middleware[{index}]: {name} must come after {outer[0]}: it checks what the "
                "conversation layers send, and raises the overflow that overflow_recovery "
                "recovers from"
            )


@dataclass(frozen=True)
class Pipeline:
    """The layers built for one app: the whole pipeline and the model layers alone."""

    names: tuple[str, ...]
    handle: Next
    """Every layer around the endpoint: what a client's request goes through."""
    model: Next
    """Only the model layers around the endpoint: what overspill's own calls go through."""


def build_pipeline(
    services: Services, endpoint: Next, registry: Mapping[str, LayerFactory] = LAYERS
) -> Pipeline:
    """Build the active layers once; raises MiddlewareError naming the YAML path."""
    check_layers(services.settings, registry)
    names = active_layers(services.settings)
    layers = [registry[name](services) for name in names]
    model = [layer for name, layer in zip(names, layers, strict=True) if name in MODEL_LAYERS]
    return Pipeline(names, compose(layers, endpoint), compose(model, endpoint))
