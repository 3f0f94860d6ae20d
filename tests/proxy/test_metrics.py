"""Prometheus metrics: what a request, an overflow, a splice and the store record, and /metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from kernel.config_loading import ConfigError, parse_config
from kernel.errors import UpstreamError, UpstreamTimeout
from kernel.types import RequestContext
from providers.failures import classify_failure
from providers.fake import ScriptedProvider, json_response, sse_events, stream_response
from proxy.endpoint import SseRelay
from proxy.http import parse_chat_request
from proxy.surfaces.chat import ChatSurface, ChatTurn
from tests.conftest import BASIC_CONFIG, AppClient, sample, settings_from

WINDOW_UNKNOWN = BASIC_CONFIG.replace("context: {window: 2048}", "context: {}")
"""No window known: an overflow is the way in (a known window compacts before sending)."""

USER = {"role": "user", "content": "hi"}
CHAT = {"model": "local", "messages": [USER]}
OVERFLOW_TEXT = (
    "This model's maximum context length is 2048 tokens. However, your messages resulted in "
    "5000 tokens. Please reduce the length of the messages."
)
METRICS_CONFIG = """
model_list:
  - model_name: local
    litellm_params: {{model: openai/smollm2, api_base: "http://upstream.test/v1"}}
    context: {{window: 2048}}
general_settings:
  master_key: sk-master
  metrics: {metrics}
"""


def conversation(turns: int, words: int = 60) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be helpful."}]
    for turn in range(turns):
        messages.append(
            {"role": "user", "content": f"turn {turn}: the user planned a trip " + "word " * words}
        )
        messages.append({"role": "assistant", "content": f"reply {turn} " + "word " * words})
    messages.append({"role": "user", "content": "What did we plan?"})
    return messages


class Deltas:
    """Samples before an action, to read how much it added."""

    def __init__(self, *wanted: tuple[str, dict[str, str]]) -> None:
        self.wanted = wanted
        self.before = [sample(name, **labels) for name, labels in wanted]

    def added(self) -> list[float]:
        return [
            sample(name, **labels) - before
            for (name, labels), before in zip(self.wanted, self.before, strict=True)
        ]


async def test_a_request_counts_with_its_latency_overhead_and_upstream_call(
    app_client: AppClient,
) -> None:
    """One answered request: counted by model/status/stream, timed, and its upstream call too."""
    seen = Deltas(
        ("overspill_requests_total", {"model": "local", "status": "200", "stream": "false"}),
        ("overspill_request_duration_seconds_count", {"model": "local", "stream": "false"}),
        ("overspill_overhead_seconds_count", {"model": "local", "stream": "false"}),
        ("overspill_upstream_calls_total", {"provider": "fake", "model": "local"}),
        ("overspill_upstream_duration_seconds_count", {"provider": "fake", "model": "local"}),
    )
    client = app_client({"local": [ScriptedProvider([json_response("hello")])]})
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert seen.added() == [1, 1, 1, 1, 1]
    overhead = sample("overspill_overhead_seconds_sum", model="local", stream="false")
    total = sample("overspill_request_duration_seconds_sum", model="local", stream="false")
    assert 0 < overhead <= total


async def test_errors_before_the_model_is_known_use_model_none(app_client: AppClient) -> None:
    """A request for an unknown model is counted under model="none", never the client's name."""
    seen = Deltas(
        ("overspill_requests_total", {"model": "none", "status": "404", "stream": "false"})
    )
    client = app_client({"local": [ScriptedProvider([json_response("x")])]})
    response = await client.post("/v1/chat/completions", json={**CHAT, "model": "made-up-name"})
    assert response.status_code == 404
    assert seen.added() == [1]
    assert (
        sample("overspill_requests_total", model="made-up-name", status="404", stream="false") == 0
    )


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (UpstreamTimeout("slow", provider="fake"), "timeout"),
        (UpstreamError("boom", provider="fake", upstream_status=503), "5xx"),
        (UpstreamError("refused", provider="fake"), "connection"),
        (classify_failure(status=429, message="slow down", provider="fake"), "rate_limit"),
        (classify_failure(status=400, message=OVERFLOW_TEXT, provider="openai"), "overflow"),
    ],
)
async def test_upstream_failures_are_counted_by_class(
    app_client: AppClient, error: Exception, kind: str
) -> None:
    """Each failed call adds one to its class (overflow, rate_limit, timeout, 5xx, connection)."""
    seen = Deltas(
        ("overspill_upstream_failures_total", {"provider": "fake", "model": "local", "class": kind})
    )
    settings = settings_from(BASIC_NO_LAYERS)
    client = app_client({"local": [ScriptedProvider([error])]}, settings=settings)
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code >= 400
    assert seen.added() == [1]


BASIC_NO_LAYERS = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 2048}
general_settings:
  master_key: sk-master
middleware: []
"""


async def test_a_failure_mid_stream_is_an_upstream_failure(app_client: AppClient) -> None:
    """A stream that breaks after its first event counts a failure and a 502 request."""
    seen = Deltas(
        ("overspill_upstream_failures_total",
         {"provider": "fake", "model": "local", "class": "connection"}),
        ("overspill_requests_total", {"model": "local", "status": "502", "stream": "true"}),
        ("overspill_overhead_seconds_count", {"model": "local", "stream": "true"}),
    )  # fmt: skip
    failing = stream_response(sse_events(["a"])[:-1], error=UpstreamError("reset", provider="fake"))
    client = app_client({"local": [ScriptedProvider([failing])]})
    await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert seen.added() == [1, 1, 1]


async def test_an_overflow_recovered_then_spliced_is_counted_at_each_step(
    app_client: AppClient,
) -> None:
    """Overflow → extraction → recovered retry; the next turn splices; each step is counted."""
    seen = Deltas(
        ("overspill_overflows_total", {"provider": "openai"}),
        ("overspill_recoveries_total", {"model": "local", "outcome": "recovered"}),
        ("overspill_extractions_total", {"model": "local", "result": "extracted"}),
        ("overspill_compaction_tokens_count", {"layer": "overflow_recovery", "stage": "before"}),
        ("overspill_splices_total", {"model": "local"}),
        ("overspill_compaction_tokens_count", {"layer": "history_splice", "stage": "after"}),
        ("overspill_store_operations_total", {"op": "put"}),
    )
    calls = Deltas(
        ("overspill_extraction_calls_total", {"model": "local", "outcome": "ok"}),
        ("overspill_extraction_tokens_total", {"model": "local", "kind": "prompt"}),
        ("overspill_extraction_duration_seconds_count", {"model": "local"}),
    )
    overflow = classify_failure(status=400, message=OVERFLOW_TEXT, provider="openai")
    fake = ScriptedProvider([overflow, json_response("- The user planned a trip.")])
    client = app_client({"local": [fake]}, settings=settings_from(WINDOW_UNKNOWN))
    headers = {"x-conversation-id": "trip"}
    messages = conversation(12)
    first = await client.post(
        "/v1/chat/completions", json={"model": "local", "messages": messages}, headers=headers
    )
    assert first.status_code == 200, first.text
    assert first.headers["x-overspill-attempts"] == "2"
    later = [*messages, {"role": "assistant", "content": "A trip."}, USER]
    second = await client.post(
        "/v1/chat/completions", json={"model": "local", "messages": later}, headers=headers
    )
    assert second.headers["x-overspill-action"].startswith("spliced")
    assert seen.added() == [1, 1, 1, 1, 1, 1, 1]
    made, tokens, timed = calls.added()
    assert made >= 1
    assert timed == made
    assert tokens >= 10 * made  # the fake reports 10 prompt tokens per call


async def test_metrics_route_serves_the_text_format(app_client: AppClient) -> None:
    """GET /metrics answers Prometheus text with overspill's and the process's metrics."""
    client = app_client({"local": [ScriptedProvider([json_response("hello")])]}, key=None)
    await client.post("/v1/chat/completions", json=CHAT, headers=_key())
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    assert 'overspill_requests_total{model="local",status="200",stream="false"}' in text
    assert "# TYPE overspill_overhead_seconds histogram" in text
    assert "process_cpu_seconds_total" in text


async def test_metrics_route_speaks_openmetrics_when_asked(app_client: AppClient) -> None:
    """A scraper asking for OpenMetrics gets it (ending with # EOF)."""
    client = app_client({"local": [ScriptedProvider([json_response("x")])]})
    response = await client.get(
        "/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")


async def test_metrics_can_require_the_master_key(app_client: AppClient) -> None:
    """With require_master_key a scrape without the key is refused; with it, served."""
    settings = settings_from(METRICS_CONFIG.format(metrics="{require_master_key: true}"))
    client = app_client({"local": [ScriptedProvider([json_response("x")])]}, settings=settings)
    assert (await client.get("/metrics", headers={"authorization": ""})).status_code == 401
    assert (await client.get("/metrics")).status_code == 200


async def test_metrics_route_can_be_turned_off(app_client: AppClient) -> None:
    """`metrics: {enabled: false}` answers /metrics with a 404."""
    settings = settings_from(METRICS_CONFIG.format(metrics="{enabled: false}"))
    client = app_client({"local": [ScriptedProvider([json_response("x")])]}, settings=settings)
    response = await client.get("/metrics")
    assert response.status_code == 404
    assert "general_settings.metrics.enabled" in response.json()["error"]["message"]


def test_requiring_the_master_key_without_one_is_a_config_error() -> None:
    """require_master_key with no master_key fails validation, naming the setting."""
    text = METRICS_CONFIG.format(metrics="{require_master_key: true}").replace(
        "  master_key: sk-master\n", ""
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "config.yaml", {})
    assert "metrics.require_master_key" in caught.value.problems[0]


def test_a_misspelt_metrics_setting_names_its_yaml_path() -> None:
    """An unknown key under general_settings.metrics is an error with its YAML path."""
    with pytest.raises(ConfigError) as caught:
        parse_config(METRICS_CONFIG.format(metrics="{enable: true}"), "config.yaml", {})
    assert caught.value.problems == [
        "general_settings.metrics.enable: unknown setting (check the spelling)"
    ]


def _key() -> dict[str, str]:
    return {"authorization": "Bearer sk-master"}


async def test_counts_survive_a_rebuilt_system(app_client: AppClient) -> None:
    """The registry belongs to the process: a second System (a reload) keeps counting."""
    seen = Deltas(
        ("overspill_requests_total", {"model": "local", "status": "200", "stream": "false"})
    )
    for _ in range(2):  # each app_client call builds a new System and app
        client = app_client({"local": [ScriptedProvider([json_response("x")])]})
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert seen.added() == [2]
    scrape = (await client.get("/metrics")).text
    assert 'overspill_requests_total{model="local",status="200",stream="false"}' in scrape


async def test_a_stream_the_client_left_before_its_head_is_closed_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A relay closed before it started still closes the upstream's stream and ends the
    request once: counted and logged as 499."""
    closed: list[bool] = []

    async def upstream() -> AsyncIterator[bytes]:
        try:
            yield b"data: {}\n\n"
        finally:
            closed.append(True)

    stream = upstream()
    await anext(stream)  # primed, as providers hand streams over
    ctx = RequestContext("rid-left", "tenant")
    ctx.model = settings_from(METRICS_CONFIG.format(metrics="{}")).model_list[0]
    chat = parse_chat_request(orjson.dumps({**CHAT, "stream": True}))
    counted = Deltas(
        ("overspill_requests_total", {"model": "local", "status": "499", "stream": "true"})
    )
    with caplog.at_level(logging.INFO, logger="overspill.request"):
        await SseRelay(stream, ctx, ChatSurface(), ChatTurn(chat), time.perf_counter()).aclose()
    assert closed == [True]
    assert counted.added() == [1]
    lines = [r for r in caplog.records if getattr(r, "request_id", None) == "rid-left"]
    assert [getattr(r, "status", None) for r in lines] == [499]
