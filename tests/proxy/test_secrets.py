"""Secrets never reach a client, a log line, an admin answer, /metrics or a span."""

from __future__ import annotations

import io
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import litellm
import openai
import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kernel.config_loading import load_config
from kernel.store import DiskHistoryStore, HistoryEntry
from proxy.app import create_app
from proxy.live import LiveApp, build_from
from proxy.logs import JsonFormatter
from proxy.system import build_system
from tests.conftest import settings_from
from tests.ports import free_port
from tests.proxy.test_tracing import spans

__all__ = ["spans"]  # the tracing fixture, used here too

pytestmark = pytest.mark.reliability("secrets")

MASTER = "sk-master-" + secrets.token_hex(8)


def fresh_key() -> str:
    """An OpenAI-looking key no other test uses."""
    return "sk-proj-" + secrets.token_hex(24)


def fragments(key: str) -> list[str]:
    """What a leak of `key` would show: the key, and the ends a masked echo keeps."""
    return [key, key[8:16], key[-6:]]


def leaks(text: str, *keys: str) -> list[str]:
    """The fragments of `keys` found in `text`."""
    return [piece for key in keys for piece in fragments(key) if piece in text]


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """Every log line of the test, as overspill's formatter writes it."""
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    request_logger = logging.getLogger("overspill.request")
    request_level = request_logger.level
    request_logger.setLevel(logging.INFO)
    yield written
    root.removeHandler(handler)
    root.setLevel(level)
    request_logger.setLevel(request_level)


def echo_upstream(message: str, status: int = 401) -> httpx.AsyncClient:
    """An upstream that answers every call with an OpenAI error carrying `message`."""

    def answer(request: httpx.Request) -> httpx.Response:
        error = {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}
        return httpx.Response(status, json={"error": error})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


def config(key: str, api_base: str = "http://up.test/v1", model: str = "openai/gpt") -> str:
    return f"""
model_list:
  - model_name: m
    litellm_params: {{model: {model}, api_base: "{api_base}", api_key: {key}}}
general_settings: {{master_key: {MASTER}}}
"""


def sdk(app: object) -> openai.AsyncOpenAI:
    """The real OpenAI SDK, talking to the app in process."""
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    client = httpx.AsyncClient(transport=transport, base_url="http://overspill.test")
    return openai.AsyncOpenAI(
        base_url="http://overspill.test/v1", api_key=MASTER, max_retries=0, http_client=client
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[DiskHistoryStore]:
    history = DiskHistoryStore(tmp_path / "store")
    yield history
    await history.aclose()


async def ask(app: object) -> openai.APIStatusError:
    """The error the SDK raises for one chat request."""
    async with sdk(app) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    return caught.value


@pytest.mark.parametrize(
    "echo",
    [
        lambda key: f"Incorrect API key provided: {key}.",
        lambda key: f"Incorrect API key provided: {key[:8]}{'*' * 40}{key[-4:]}. See docs.",
        lambda key: f"Incorrect API key provided: {key[:6]}...{key[-4:]}.",
    ],
    ids=["whole", "stars", "dots"],
)
async def test_an_upstream_echo_of_overspills_key_reaches_neither_client_nor_log(
    echo: object, store: DiskHistoryStore, log_lines: io.StringIO
) -> None:
    """OpenAI's 'Incorrect API key provided: sk-...' loses the key in the answer and the log."""
    key = fresh_key()
    assert callable(echo)
    system = build_system(settings_from(config(key)), client=echo_upstream(echo(key)), store=store)
    error = await ask(create_app(system))
    body = orjson.dumps(error.body).decode()
    assert "Incorrect API key provided: ***" in body
    assert not leaks(body, key, MASTER)
    assert "Incorrect API key provided: ***" in log_lines.getvalue()
    assert not leaks(log_lines.getvalue(), key, MASTER)


async def test_credentials_in_api_base_never_show_in_connection_errors(
    store: DiskHistoryStore, log_lines: io.StringIO
) -> None:
    """A refused connection to `https://user:pass@host/v1?key=...` names the host, not the pass."""
    password, query_key = "pa55-" + secrets.token_hex(6), "qk-" + secrets.token_hex(8)
    api_base = f"http://alice:{password}@127.0.0.1:{free_port()}/v1?key={query_key}"
    system = build_system(settings_from(config(fresh_key(), api_base)), store=store)
    try:
        error = await ask(create_app(system))
    finally:
        await system.aclose(0)
    body = orjson.dumps(error.body).decode()
    assert error.status_code == 502
    assert "127.0.0.1" in body
    for shown in (body, log_lines.getvalue()):
        assert password not in shown
        assert query_key not in shown


async def test_litellm_connection_errors_lose_api_base_credentials(
    store: DiskHistoryStore, log_lines: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The litellm path too: a refused call's error text keeps no password or key."""
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    password, key = "pa55-" + secrets.token_hex(6), fresh_key()
    api_base = f"http://bob:{password}@127.0.0.1:{free_port()}"
    text = config(key, api_base, model="anthropic/claude-x")
    system = build_system(settings_from(text), store=store)
    try:
        error = await ask(create_app(system))
    finally:
        await system.aclose(0)
    body = orjson.dumps(error.body).decode()
    assert error.status_code >= 500
    for shown in (body, log_lines.getvalue()):
        assert password not in shown
        assert not leaks(shown, key, MASTER)


async def test_admin_answers_and_metrics_show_no_secret(store: DiskHistoryStore) -> None:
    """A secret inside a cached extraction is masked in /overspill answers; /metrics has none."""
    key = fresh_key()
    system = build_system(settings_from(config(key)), client=echo_upstream(key), store=store)
    entry = HistoryEntry(
        tenant="t", conversation_id="c", model_id="m", historical_end_index=1, message_count=2,
        extraction=f"the user pasted {key} and {MASTER}", chain="x", prompt_version="v",
        tokens_before=1, tokens_after=1, created_at=0.0,
    )  # fmt: skip
    await store.put(entry)
    app = create_app(system)
    await ask(app)
    headers = {"authorization": f"Bearer {MASTER}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://o.test") as client:
        detail = await client.get("/overspill/conversations/c?tenant=t", headers=headers)
        scraped = await client.get("/metrics")
    assert detail.status_code == 200
    assert "the user pasted *** and ***" in detail.text
    assert not leaks(detail.text, key, MASTER)
    assert not leaks(scraped.text, key, MASTER)


async def test_spans_record_errors_without_secrets(
    store: DiskHistoryStore, spans: InMemorySpanExporter
) -> None:
    """A failed upstream call's span status and exception event are redacted."""
    key = fresh_key()
    echo = f"Incorrect API key provided: {key}"
    system = build_system(settings_from(config(key)), client=echo_upstream(echo, 500), store=store)
    await ask(create_app(system))
    finished = spans.get_finished_spans()
    described = [span.status.description or "" for span in finished]
    events = [str(dict(event.attributes or {})) for span in finished for event in span.events]
    assert any("Incorrect API key provided: ***" in text for text in described + events)
    assert not leaks(" ".join(described + events), key, MASTER)


async def test_a_reloaded_configs_new_key_is_redacted_and_the_old_one_stays_hidden(
    tmp_path: Path,
) -> None:
    """After a reload the new config's key is hidden too; the rotated-out key stays hidden."""
    old, new = fresh_key(), fresh_key()
    path = tmp_path / "config.yaml"
    path.write_text(config(old, f"http://127.0.0.1:{free_port()}/v1"))
    live = LiveApp.start(str(path), build_from(load_config(path), str(path)), create_app)
    path.write_text(config(new, f"http://u:{new}@127.0.0.1:{free_port()}/v1"))
    headers = {"authorization": f"Bearer {MASTER}"}
    transport = httpx.ASGITransport(app=live)
    async with httpx.AsyncClient(transport=transport, base_url="http://o.test") as client:
        assert (await client.post("/overspill/config/reload", headers=headers)).status_code == 200
        error = await ask(live)
    await live.aclose()
    record = logging.makeLogRecord({"name": "overspill", "msg": "rotated %s and %s"})
    record.args = (old, new)
    line = JsonFormatter().format(record)
    assert "rotated *** and ***" in line
    assert not leaks(orjson.dumps(error.body).decode(), old, new, MASTER)
