"""OpenTelemetry spans: the request, each layer, each upstream and extraction call; off by default."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import httpx
import litellm
import orjson
import pytest
import respx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from kernel import tracing
from kernel.types import ChatRequest, ChatResponse
from providers.failures import classify_failure
from providers.fake import ScriptedProvider, json_response, sse_events
from providers.litellm import LitellmProvider
from providers.openai_compat import OpenAICompatProvider
from providers.translated import TranslatedProvider
from providers.transport import HttpxUpstream
from proxy import tracing as otel
from tests.conftest import BASIC_CONFIG, AppClient, settings_from
from tests.proxy.test_metrics import (
    BASIC_NO_LAYERS,
    CHAT,
    OVERFLOW_TEXT,
    WINDOW_UNKNOWN,
    conversation,
)

ROOT = "POST /v1/chat/completions"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the test, into memory (apps built inside the test are traced)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.install(provider)
    yield exporter
    tracing.use(None)
    provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_recovered_request_is_one_trace_of_layers_and_calls(
    app_client: AppClient, spans: InMemorySpanExporter
) -> None:
    """Root span → layer spans → upstream and extraction calls, one trace, with attributes."""
    overflow = classify_failure(status=400, message=OVERFLOW_TEXT, provider="openai")
    fake = ScriptedProvider([overflow, json_response("- The user planned a trip.")])
    client = app_client({"local": [fake]}, settings=settings_from(WINDOW_UNKNOWN))
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "local", "messages": conversation(12)},
        headers={"x-conversation-id": "trip"},
    )
    assert response.status_code == 200
    (root,) = named(spans, ROOT)
    assert root.kind is SpanKind.SERVER
    assert (
        attributes(root).items()
        >= {
            "http.response.status_code": 200,
            "overspill.model": "local",
            "overspill.stream": False,
            "overspill.conversation_id": "trip",
            "overspill.attempts": "2",
        }.items()
    )
    assert "overspill.tokens-before" in attributes(root)
    everything = spans.get_finished_spans()
    assert {span.context.trace_id for span in everything} == {root.context.trace_id}
    layers = [s for s in everything if s.name.startswith("layer ")]
    assert [s.name for s in layers if s.parent and s.parent.span_id == root.context.span_id] == [
        "layer documents"
    ]
    assert {s.name for s in layers} >= {
        "layer documents", "layer history_splice", "layer overflow_recovery", "layer ollama_window",
    }  # fmt: skip
    calls = named(spans, "chat local")
    assert all(s.kind is SpanKind.CLIENT for s in calls)
    assert [attributes(s).get("error.type") for s in calls].count("overflow") == 1
    extractions = named(spans, "extraction local")
    assert extractions
    assert attributes(extractions[0])["gen_ai.usage.input_tokens"] == 10
    assert attributes(extractions[0])["gen_ai.usage.output_tokens"] == 2


async def test_a_stream_span_ends_with_the_stream(
    app_client: AppClient, spans: InMemorySpanExporter
) -> None:
    """A streamed answer's root span ends after its last event, with the final status."""
    events = sse_events(["a", "b"])
    relayed: list[int] = []

    def step(request: ChatRequest) -> ChatResponse:
        async def generate() -> AsyncIterator[bytes]:
            for event in events:
                yield event
            relayed.append(time.time_ns())

        return ChatResponse(stream=generate())

    client = app_client({"local": [ScriptedProvider([step])]})
    response = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert response.content == b"".join(events)
    (root,) = named(spans, ROOT)
    assert root.end_time is not None
    assert root.end_time >= relayed[0]
    assert attributes(root)["overspill.stream"] is True
    assert attributes(root)["http.response.status_code"] == 200


async def test_the_callers_trace_is_continued(
    app_client: AppClient, spans: InMemorySpanExporter
) -> None:
    """A `traceparent` header makes the request span a child of the caller's span."""
    client = app_client({"local": [ScriptedProvider([json_response("x")])]})
    await client.post(
        "/v1/chat/completions",
        json=CHAT,
        headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
    )
    (root,) = named(spans, ROOT)
    assert root.context.trace_id == int(TRACE_ID, 16)
    assert root.parent is not None
    assert root.parent.span_id == int(PARENT_ID, 16)


async def test_an_upstream_failure_marks_the_request_span(
    app_client: AppClient, spans: InMemorySpanExporter
) -> None:
    """A 5xx answer sets the request span's status to error, with the error type."""
    failing = classify_failure(status=503, message="overloaded", provider="fake")
    settings = settings_from(BASIC_NO_LAYERS)
    client = app_client({"local": [ScriptedProvider([failing])]}, settings=settings)
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 502
    (root,) = named(spans, ROOT)
    assert root.status.status_code is StatusCode.ERROR
    assert attributes(root)["error.type"] == "upstream_error"
    (call,) = named(spans, "chat local")
    assert attributes(call)["error.type"] == "5xx"


@pytest.mark.parametrize(
    ("env", "exporters"),
    [
        ({}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, []),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
    ],
)
def test_the_standard_variables_decide_whether_tracing_is_on(
    env: dict[str, str], exporters: list[str]
) -> None:
    """On only when OTEL_TRACES_EXPORTER or an OTLP endpoint asks; OTEL_SDK_DISABLED wins."""
    assert otel.wanted_exporters(env) == exporters


def test_an_unknown_exporter_leaves_tracing_off(caplog: pytest.LogCaptureFixture) -> None:
    """An exporter name overspill does not know is warned about, and nothing is installed."""
    assert otel.configure({"OTEL_TRACES_EXPORTER": "zipkin"}) is None
    assert tracing.tracer is None
    assert "zipkin" in caplog.text


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver on loopback: keeps each POSTed body."""

    received: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length", "0"))
        self.received.append((self.path, self.rfile.read(size)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    """A local OTLP/HTTP endpoint; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    Collector.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_otlp_endpoint_receives_the_spans(
    app_client: AppClient, collector: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With OTEL_EXPORTER_OTLP_ENDPOINT set, the spans reach that endpoint as OTLP/HTTP."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "overspill-test")
    provider = otel.configure()
    assert provider is not None
    try:
        client = app_client({"local": [ScriptedProvider([json_response("x")])]})
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        assert provider.force_flush()
    finally:
        tracing.use(None)
        provider.shutdown()
    assert any(isinstance(p, BatchSpanProcessor) for p in _processors(provider))
    paths = {path for path, _ in Collector.received}
    assert paths == {"/v1/traces"}
    names, services = set(), set()
    for _, body in Collector.received:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            services |= {a.value.string_value for a in resource.resource.attributes
                         if a.key == "service.name"}  # fmt: skip
            for scope in resource.scope_spans:
                names |= {span.name for span in scope.spans}
    assert services == {"overspill-test"}
    assert {ROOT, "layer documents", "chat local"} <= names


def _processors(provider: TracerProvider) -> list[object]:
    return list(provider._active_span_processor._span_processors)


def test_with_tracing_off_opentelemetry_is_never_imported() -> None:
    """No OTEL_* variable: a served request loads no opentelemetry module at all (with the
    default diskcache store; redis-py imports it by itself when it is installed)."""
    script = """
import asyncio, sys, tempfile
import httpx
import litellm
from proxy import tracing
from proxy.app import create_app
from proxy.system import build_system
from kernel.store import DiskHistoryStore
from providers.fake import ScriptedProvider, json_response
from kernel.config_loading import parse_config

assert tracing.configure({}) is None
settings = parse_config(sys.argv[1], "config.yaml", {}).settings

async def main():
    store = DiskHistoryStore(tempfile.mkdtemp())
    fake = ScriptedProvider([json_response("x")])
    app = create_app(build_system(settings, providers={"local": [fake]}, store=store))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.post(
            "/v1/chat/completions", json={"model": "local", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": "Bearer sk-master"},
        )
        assert response.status_code == 200, response.text
    await store.aclose()

asyncio.run(main())
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script, BASIC_CONFIG],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


async def test_upstream_calls_carry_their_span_as_traceparent(
    app_client: AppClient, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The passthrough and litellm send the upstream-call span's `traceparent`, so the
    upstream's own spans join the client's trace; a deployment's extra_headers stay."""
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)  # else respx sees nothing
    seen: list[httpx.Headers] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json=orjson.loads(json_response("hi").body or b"{}"))

    settings = settings_from(
        "model_list:\n  - model_name: local\n    litellm_params:\n"
        "      {model: openai/m, api_base: 'http://up.test/v1', api_key: sk-up, extra_headers: {x-team: a}}\n"
    )
    http = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    passthrough = OpenAICompatProvider(settings.model_list[0], HttpxUpstream(http))
    with respx.mock:
        respx.post("http://up.test/v1/chat/completions").mock(side_effect=upstream)
        litellm_path = LitellmProvider(settings.model_list[0])
        client = app_client({"local": [passthrough]})
        await client.post(
            "/v1/chat/completions",
            json=CHAT,
            headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
        )
        client = app_client({"local": [litellm_path]})
        second = await client.post(
            "/v1/chat/completions",
            json=CHAT,
            headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
        )
    await http.aclose()
    assert second.status_code == 200, second.text
    calls = named(spans, "chat local")
    assert len(calls) == len(seen) == 2
    for call, headers in zip(calls, seen, strict=True):
        assert headers["traceparent"] == f"00-{TRACE_ID}-{call.context.span_id:016x}-01"
        assert headers["x-team"] == "a"


async def test_translated_calls_carry_their_span_as_traceparent(
    app_client: AppClient, spans: InMemorySpanExporter
) -> None:
    """The translated path (an anthropic/ model) sends the upstream-call span's `traceparent`
    beside the deployment's extra_headers."""
    seen: list[httpx.Headers] = []
    answer = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }  # fmt: skip

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json=answer)

    settings = settings_from(
        "model_list:\n  - model_name: claude\n    litellm_params:\n"
        "      {model: anthropic/claude-x, api_base: 'http://up.test', api_key: sk-up, extra_headers: {x-team: a}}\n"
    )
    http = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    translated = TranslatedProvider(settings.model_list[0], HttpxUpstream(http))
    client = app_client({"local": [translated]})
    answered = await client.post(
        "/v1/chat/completions",
        json=CHAT,
        headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
    )
    await http.aclose()
    assert answered.status_code == 200, answered.text
    (call,) = named(spans, "chat local")
    (headers,) = seen
    assert headers["traceparent"] == f"00-{TRACE_ID}-{call.context.span_id:016x}-01"
    assert headers["x-team"] == "a"
