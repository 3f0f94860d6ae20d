"""Spans, when tracing is on: the protocols the layers and providers see, and the one tracer.

Tracing is off unless the operator configures OpenTelemetry with its standard `OTEL_*`
variables; then the shell (proxy/tracing.py, the only module that imports opentelemetry)
calls `use()` with a tracer, once per process, before the app is built. While it is off,
`tracer` is None and nothing here costs more than that check: the pipeline binds its layers
without span wrappers, and the router and overspill's own calls test `tracer is None` once.

    request   POST /v1/chat/completions     (proxy/endpoint.py; ended when the answer is)
      layer   layer <name>                  (middleware/pipeline.py, one per layer)
        chat <model>                        (providers/router.py, one per upstream call; the
                                             providers send its `traceparent` upstream)
      extraction <model>                    (proxy/system.py, overspill's own calls)
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Literal, Protocol

Attribute = str | bool | int | float
"""A span attribute's value."""
Kind = Literal["internal", "client"]


class Span(Protocol):
    """What overspill does with a span (an OpenTelemetry span satisfies it)."""

    def set_attribute(self, key: str, value: Attribute) -> None:
        """Record one attribute."""
        ...

    def end(self) -> None:
        """End the span (only for spans started with `request_span`)."""
        ...


class Tracer(Protocol):
    """Starts spans; proxy/tracing.py adapts OpenTelemetry's tracer to it."""

    def span(
        self, name: str, attributes: Mapping[str, Attribute], kind: Kind = "internal"
    ) -> AbstractContextManager[Span]:
        """A child of the current span, current inside the block and ended when it exits
        (an exception escaping the block is recorded on it)."""
        ...

    def request_span(
        self, name: str, attributes: Mapping[str, Attribute], headers: Mapping[str, str]
    ) -> AbstractContextManager[Span]:
        """A server span (the caller's trace continued from its `traceparent` header),
        current inside the block but NOT ended by it: whoever answers calls `end()`."""
        ...

    def failed(self, span: Span, description: str) -> None:
        """Mark the span's status as an error."""
        ...

    def headers(self) -> dict[str, str]:
        """The current span's context as propagation headers (`traceparent`, and whatever
        else `OTEL_PROPAGATORS` names), for an upstream call to carry."""
        ...


tracer: Tracer | None = None
"""The process's tracer; None while tracing is off."""


def use(found: Tracer | None) -> None:
    """Install (or, with None, remove) the process's tracer; build apps after calling it."""
    global tracer
    tracer = found
