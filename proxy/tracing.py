"""OpenTelemetry traces, off unless the operator's standard `OTEL_*` variables ask for them.

Tracing is on when `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`), or when it is
unset and `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; never
when `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Everything else is the SDK's own
reading of the standard variables: the OTLP endpoint, headers and protocol
(`OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf`, the default, or `grpc`), the sampler
(`OTEL_TRACES_SAMPLER`), the batch processor (`OTEL_BSP_*`), the resource
(`OTEL_SERVICE_NAME`, default `overspill`; `OTEL_RESOURCE_ATTRIBUTES`) and the propagators
(`OTEL_PROPAGATORS`) that continue a client's `traceparent`.

Secrets: spans record exceptions and error statuses through the process's redactor
(kernel/redaction.py), never the SDK's own `record_exception` (it would export the raw text
of an upstream error that echoed a key).

This is the only module that imports opentelemetry, and only inside `configure()` when tracing
is on: with tracing off, no opentelemetry module is ever loaded. It needs the `otel` extra
(`pip install 'overspill[otel]'`); asked for without it, tracing stays off with a warning.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from kernel import redaction, tracing
from kernel.tracing import Attribute, Kind, Span

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer as OtelTracerType

log = logging.getLogger("overspill")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
DEFAULT_SERVICE = "overspill"


def wanted_exporters(env: Mapping[str, str]) -> list[str]:
    """The exporters the standard variables ask for (none: tracing stays off)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not named:
        return ["otlp"] if any(env.get(v) for v in ENDPOINT_VARIABLES) else []
    names = [name.strip() for name in named.split(",") if name.strip()]
    return [] if "none" in names else names


def configure(env: Mapping[str, str] | None = None) -> TracerProvider | None:
    """Install the process's tracer from `env` (default: os.environ); None when off.

    Call it once per worker process, before the app is built (uvicorn's workers each build
    their own; a batch processor's thread does not survive a fork).
    """
    env = os.environ if env is None else env
    names = wanted_exporters(env)
    if not names:
        return None
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_* variables ask for traces but opentelemetry is not installed: "
            "pip install 'overspill[otel]'; tracing stays off"
        )
        return None
    exporters = [e for e in (_exporter(name, env) for name in names) if e is not None]
    if not exporters:
        return None
    provider = TracerProvider(resource=_resource())
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    install(provider)
    log.info("tracing on", extra={"exporters": names})
    return provider


def install(provider: TracerProvider) -> None:
    """Trace with `provider` from now on (tests give one with an in-memory exporter)."""
    tracing.use(OtelTracer(provider.get_tracer("overspill")))


def _exporter(name: str, env: Mapping[str, str]) -> SpanExporter | None:
    """The span exporter an `OTEL_TRACES_EXPORTER` name stands for (None: unknown, warned)."""
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        log.warning("OTEL_TRACES_EXPORTER: unknown exporter %r ignored (otlp, console)", name)
        return None
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            grpc: SpanExporter = OTLPSpanExporter()
            return grpc
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        http: SpanExporter = HttpExporter()
        return http
    except ImportError:
        log.warning(
            "the OTLP exporter (%s) is not installed: pip install 'overspill[otel]'", protocol
        )
        return None


def _resource() -> Resource:
    """The SDK's resource from the environment, named `overspill` unless it says otherwise."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    found = Resource.create()
    named = str(found.attributes.get(SERVICE_NAME, ""))
    if not named or named.startswith("unknown_service"):
        found = found.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    return found


class OtelTracer:
    """kernel.tracing's Tracer over an OpenTelemetry tracer."""

    def __init__(self, tracer: OtelTracerType) -> None:
        from opentelemetry import propagate, trace

        self._tracer = tracer
        self._propagate = propagate
        self._kinds = {"internal": trace.SpanKind.INTERNAL, "client": trace.SpanKind.CLIENT}
        self._server = trace.SpanKind.SERVER
        self._error = trace.StatusCode.ERROR
        self._status = trace.Status

    def span(
        self, name: str, attributes: Mapping[str, Attribute], kind: Kind = "internal"
    ) -> AbstractContextManager[Span]:
        """A child of the current span, ended when the block exits."""
        return self._redacted(
            self._tracer.start_as_current_span(
                name,
                kind=self._kinds[kind],
                attributes=dict(attributes),
                record_exception=False,
                set_status_on_exception=False,
            )
        )

    @contextmanager
    def _redacted(self, started: AbstractContextManager[Span]) -> Iterator[Span]:
        """The span; an exception leaving it is recorded and set as its status, redacted."""
        with started as span:
            try:
                yield span
            except Exception as exc:
                self._record(span, exc)
                raise

    @contextmanager
    def request_span(
        self, name: str, attributes: Mapping[str, Attribute], headers: Mapping[str, str]
    ) -> Iterator[Span]:
        """A server span continuing the caller's trace, current in the block, not ended."""
        parent = self._propagate.extract(headers)
        with self._tracer.start_as_current_span(
            name,
            context=parent,
            kind=self._server,
            attributes=dict(attributes),
            end_on_exit=False,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except Exception as exc:
                self._record(span, exc)
                raise

    def headers(self) -> dict[str, str]:
        """The current context through the configured propagators (W3C traceparent...)."""
        carrier: dict[str, str] = {}
        self._propagate.inject(carrier)
        return carrier

    def failed(self, span: Span, description: str) -> None:
        """Mark the span's status as an error."""
        set_status = getattr(span, "set_status", None)
        if set_status is not None:
            set_status(self._status(self._error, redaction.redact(description)))

    def _record(self, span: Span, exc: Exception) -> None:
        """What the SDK's record_exception keeps, each text through the redactor."""
        add_event = getattr(span, "add_event", None)
        message = redaction.redact(str(exc))
        if add_event is not None:
            kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
            add_event("exception", {"exception.type": kind, "exception.message": message})
        self.failed(span, f"{type(exc).__name__}: {message}")
