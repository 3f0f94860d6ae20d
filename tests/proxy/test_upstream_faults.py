"""The fault suite: a real misbehaving upstream socket, both provider paths, JSON and streams.

Each case sends one request with the real OpenAI SDK (no retries) through overspill's app to
`tests/faulty_upstream.py` playing one fault, on the byte passthrough (`openai/...`, OpenAI's
wire) or through litellm (`anthropic/...`, Anthropic's Messages API), and asserts what the
client sees (status, OpenAI error body, Retry-After), that the upstream was called once (no
hidden retries), and that the answer came within a generous bound of the configured timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import litellm
import openai
import pytest
import pytest_asyncio
from openai.types.chat import ChatCompletionMessageParam

from kernel.errors import UpstreamTimeout
from kernel.store import DiskHistoryStore
from proxy.app import create_app
from proxy.system import build_system
from tests.conftest import running, settings_from
from tests.faulty_upstream import RETRY_AFTER, FaultyUpstream

litellm.disable_aiohttp_transport = True

TIMEOUT = 0.5
"""general_settings.request_timeout in these tests, in seconds."""
BOUND = 5.0
"""Every case is answered within this (a functional bound, not a performance figure)."""
LIMIT = 1024 * 1024
"""general_settings.max_response_bytes in these tests (the huge answer is 20 MiB)."""
PATHS = {"passthrough": "wire", "litellm": "claude"}


@dataclass(frozen=True)
class Expect:
    """What the client sees for one fault."""

    status: int
    code: str | None = None
    """error.code; None: a successful answer."""
    type: str = "upstream_error"
    in_stream: bool = False
    """The error arrives as an SSE event after a 200 head (the stream had begun)."""
    words: str = ""
    """A phrase the error message contains."""


OK = Expect(200)
TIMED_OUT = Expect(504, "upstream_timeout", "timeout_error", words=f"within {TIMEOUT:g} s")
BAD = Expect(502, "upstream_bad_response", words="not the API's response")
FAILED = Expect(502, "upstream_error", words="failed (500): the upstream broke")
UNREACHABLE = Expect(502, "upstream_error", words="cannot reach upstream")
LIMITED = Expect(429, "rate_limit_exceeded", "rate_limit_error", words="slow down")
TOO_LARGE = Expect(502, "upstream_response_too_large", words="max_response_bytes")

JSON_CASES: dict[str, Expect] = {
    "ok": OK,
    "hang": TIMED_OUT,
    "hang-body": TIMED_OUT,
    "drip": TIMED_OUT,
    "reset": UNREACHABLE,
    "malformed": BAD,
    "html": BAD,
    "empty": BAD,
    "rate-limited": LIMITED,
    "server-error": FAILED,
    "huge": TOO_LARGE,
}
STREAM_CASES: dict[str, Expect] = {
    "ok": OK,
    "hang": TIMED_OUT,
    "hang-body": TIMED_OUT,
    "drip": TIMED_OUT,
    "slow-events": OK,
    "stall": Expect(200, "upstream_timeout", "timeout_error", in_stream=True, words="next event"),
    "trickle": Expect(200, "upstream_timeout", "timeout_error", in_stream=True, words="next event"),
    "reset": UNREACHABLE,
    "reset-mid-stream": Expect(200, "upstream_error", in_stream=True, words="broke the stream"),
    "cut-stream": Expect(200, "upstream_bad_response", in_stream=True, words="ended the stream"),
    "cut-event": Expect(200, "upstream_bad_response", in_stream=True, words="ended the stream"),
    "empty-stream": Expect(502, "upstream_bad_response", words="without sending any event"),
    "malformed": BAD,
    "html": BAD,
    "empty": BAD,
    "error-event": Expect(502, "upstream_error", words="overloaded"),
    "rate-limited": LIMITED,
    "server-error": FAILED,
    "huge": Expect(200, "upstream_response_too_large", in_stream=True, words="single stream event"),
}
AREAS = {
    "hang": "timeouts", "hang-body": "timeouts", "drip": "timeouts", "slow-events": "timeouts",
    "stall": "timeouts", "trickle": "timeouts", "rate-limited": "timeouts", "huge": "memory",
    "reset-mid-stream": "streams", "cut-stream": "streams", "cut-event": "streams",
    "error-event": "streams", "empty-stream": "streams",
}  # fmt: skip


def _cases() -> list[pytest.param]:  # type: ignore[valid-type]
    cases = []
    for path in PATHS:
        for stream, table in ((False, JSON_CASES), (True, STREAM_CASES)):
            for fault, expect in table.items():
                area = AREAS.get(fault, "upstream-bodies")
                mode = "stream" if stream else "json"
                name = f"{path}-{mode}-{fault}"
                mark = pytest.mark.reliability(area)
                cases.append(pytest.param(path, stream, fault, expect, id=name, marks=mark))
    return cases


def _config(upstream: FaultyUpstream) -> str:
    return f"""
model_list:
  - model_name: wire
    litellm_params: {{model: openai/faulty, api_base: "{upstream.base_url}/v1"}}
  - model_name: claude
    litellm_params:
      model: anthropic/claude-faulty
      api_base: "{upstream.base_url}"
      api_key: sk-fake
  - model_name: lite
    litellm_params: {{model: openai/faulty, api_base: "{upstream.base_url}/v1", api_key: sk-fake}}
    passthrough: false
general_settings:
  master_key: sk-master
  request_timeout: {TIMEOUT}
  max_response_bytes: {LIMIT}
middleware: []
"""


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Shared]:
    """One upstream and one overspill app for the module (each case sets the fault)."""
    async with FaultyUpstream(drip_seconds=0.2) as server:
        # litellm's first call in a process loads lazily (seconds): not the upstream's time
        await litellm.acompletion(
            model="anthropic/claude-faulty", api_base=server.base_url, api_key="sk-fake",
            messages=[{"role": "user", "content": "hi"}], max_tokens=5, timeout=30,
        )  # fmt: skip
        store = DiskHistoryStore(tmp_path_factory.mktemp("store"))
        app = create_app(build_system(settings_from(_config(server)), store=store))
        async with running(app):
            http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
            sdk = openai.AsyncOpenAI(
                base_url="http://overspill.test/v1", api_key="sk-master", http_client=http,
                max_retries=0,
            )  # fmt: skip
            yield Shared(server, sdk, store)
            await sdk.close()
        await store.aclose()


@dataclass
class Shared:
    """The module's upstream, the SDK client in front of overspill, overspill's store."""

    upstream: FaultyUpstream
    client: openai.AsyncOpenAI
    store: DiskHistoryStore


@pytest.fixture
def upstream(shared: Shared) -> FaultyUpstream:
    """The upstream, its record of connections cleared for this case."""
    shared.upstream.connections.clear()
    shared.upstream.fault = "ok"
    return shared.upstream


@pytest.fixture
def client(shared: Shared, upstream: FaultyUpstream) -> openai.AsyncOpenAI:
    """The OpenAI SDK (no retries) talking to overspill's app, itself pointed at the upstream."""
    return shared.client


@dataclass
class Seen:
    """What the client got."""

    status: int
    text: str = ""
    error: dict[str, object] | None = None
    headers: httpx.Headers | None = None


async def _ask(client: openai.AsyncOpenAI, model: str, stream: bool) -> Seen:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    try:
        if not stream:
            answer = await client.chat.completions.create(
                model=model, messages=messages, max_tokens=20
            )
            return Seen(200, answer.choices[0].message.content or "")
        chunks = await client.chat.completions.create(
            model=model, messages=messages, max_tokens=20, stream=True
        )
        text = ""
        try:
            async for chunk in chunks:
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
        except openai.APIError as exc:  # an error event after the head
            body = exc.body if isinstance(exc.body, dict) else {"unparsed": exc.body}
            return Seen(200, text, body)
        return Seen(200, text)
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {"unparsed": exc.body}
        return Seen(exc.status_code, "", body, exc.response.headers)


@pytest.mark.parametrize(("path", "stream", "fault", "expect"), _cases())
async def test_fault(
    client: openai.AsyncOpenAI,
    upstream: FaultyUpstream,
    path: str,
    stream: bool,
    fault: str,
    expect: Expect,
) -> None:
    """Each upstream fault gets its status and OpenAI error, once, within the time bound."""
    upstream.fault = fault
    started = time.monotonic()
    seen = await _ask(client, PATHS[path], stream)
    elapsed = time.monotonic() - started
    assert seen.status == expect.status, seen
    if expect.code is None:
        assert seen.error is None, seen
        assert seen.text == "Hello there"
    else:
        assert seen.error is not None, seen
        assert seen.error["code"] == expect.code, seen
        assert seen.error["type"] == expect.type, seen
        message = seen.error["message"]
        assert isinstance(message, str), seen
        assert expect.words in message, seen
        assert len(message) < 1000, "the message never carries a raw body"
        if expect.in_stream:
            assert seen.text.startswith("Hel"), seen  # what came before the fault arrived
    if expect.status == 429:
        assert seen.headers is not None
        assert seen.headers.get("retry-after") == RETRY_AFTER
    assert upstream.calls == 1, "no hidden retries"
    assert elapsed < BOUND, f"answered after {elapsed:.1f} s"
    if fault == "huge":  # overspill hung up: the upstream could not write it all
        conn = upstream.connections[0]
        await asyncio.wait_for(conn.done.wait(), BOUND)
        assert conn.peer_closed, conn
        assert conn.written < conn.planned, conn


@pytest.mark.reliability("streams")
@pytest.mark.parametrize("fault", ["ok", "empty-stream", "cut-stream"])
async def test_litellms_own_openai_path_streams_like_the_fast_path(
    client: openai.AsyncOpenAI, upstream: FaultyUpstream, fault: str
) -> None:
    """An OpenAI-wire model with `passthrough: false` (litellm.acompletion): a stream that
    ends before any event is an error, as on the fast path, never an empty success."""
    upstream.fault = fault
    seen = await _ask(client, "lite", stream=True)
    expect = STREAM_CASES[fault]
    assert seen.status == expect.status, seen
    if expect.code is None:
        assert seen.error is None, seen
        assert seen.text == "Hello there"
    else:
        assert seen.error is not None, seen
        assert seen.error["code"] == expect.code, seen
        assert expect.words in str(seen.error["message"]), seen
    assert upstream.calls == 1, "no hidden retries"


@pytest.mark.reliability("timeouts")
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("fault", ["hang", "drip"])
async def test_overspills_own_calls_keep_the_same_deadline(
    upstream: FaultyUpstream, shared: Shared, path: str, fault: str
) -> None:
    """An extraction call to a hanging or dripping upstream times out like a client's call."""
    upstream.fault = fault
    system = build_system(settings_from(_config(upstream)), store=shared.store)
    complete = system.internal(PATHS[path])
    started = time.monotonic()
    try:
        with pytest.raises(UpstreamTimeout, match=f"within {TIMEOUT:g} s"):
            await complete([{"role": "user", "content": "summarize"}], max_tokens=20)
    finally:
        await system.aclose()
    assert time.monotonic() - started < BOUND
    chat = [c for c in upstream.connections if c.path != "/props"]  # the slots probe: its own
    assert len(chat) == 1
