"""Composes layers around an endpoint, outermost first, the way Starlette wraps middleware."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from proxy.config import Settings
from proxy.types import ChatRequest, ChatResponse, Layer, Next, RequestContext

LayerFactory = Callable[[Settings], Layer]
"""Builds a layer from the validated settings (at startup)."""


class UnknownLayer(ValueError):
    """config.yaml names a layer that does not exist."""


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


def build_layers(settings: Settings, registry: Mapping[str, LayerFactory]) -> list[Layer]:
    """The layers named in `middleware:`, in order; raises UnknownLayer naming the YAML path."""
    layers = []
    for index, name in enumerate(settings.middleware):
        factory = registry.get(name)
        if factory is None:
            known = ", ".join(sorted(registry)) or "none yet"
            raise UnknownLayer(f"middleware[{index}]: unknown layer {name!r} (known: {known})")
        layers.append(factory(settings))
    return layers
