"""The layers by name, and their composition around an endpoint, outermost first (as Starlette
wraps middleware)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kernel.config import Settings
from kernel.services import Services
from kernel.types import ChatRequest, ChatResponse, Layer, Next, RequestContext
from middleware.layers.documents import Documents
from middleware.layers.history_splice import HistorySplice
from middleware.layers.ollama_window import OllamaWindow
from middleware.layers.overflow_recovery import OverflowRecovery

LayerFactory = Callable[[Services], Layer]
"""Builds a layer from the services (at startup)."""


LAYERS: dict[str, LayerFactory] = {
    Documents.name: Documents,
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
    async def handle(request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        return await layer.handle(request, ctx, call_next)

    handle.__qualname__ = f"{type(layer).__name__}.handle"
    return handle


INNER_BEFORE_OUTER = (("overflow_recovery", "ollama_window"),)
"""Pairs (outer, inner): when both are configured, the first must come first."""


def check_layers(settings: Settings, registry: Mapping[str, LayerFactory]) -> None:
    """Raise MiddlewareError, naming the YAML path, for an unknown layer or an impossible order."""
    layers = settings.middleware
    for index, name in enumerate(layers):
        if name not in registry:
            known = ", ".join(sorted(registry)) or "none yet"
            raise MiddlewareError(f"middleware[{index}]: unknown layer {name!r} (known: {known})")
    for outer, inner in INNER_BEFORE_OUTER:
        if outer in layers and inner in layers and layers.index(inner) < layers.index(outer):
            raise MiddlewareError(
                f"middleware[{layers.index(inner)}]: {inner} must come after {outer}: it raises "
                f"the overflow that {outer} recovers from"
            )


def build_layers(services: Services, registry: Mapping[str, LayerFactory]) -> list[Layer]:
    """The layers named in `middleware:`, in order; raises MiddlewareError naming the YAML path."""
    settings = services.settings
    check_layers(settings, registry)
    layers = []
    for name in settings.middleware:
        layers.append(registry[name](services))
    return layers
