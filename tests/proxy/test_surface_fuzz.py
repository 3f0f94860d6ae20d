"""Generated requests on every route through the ASGI app: never a 500, never a hang, and every
refusal in the shape of the API the route speaks (OpenAI's; Anthropic's on `/v1/messages`).

One app per test, as `overspill serve` builds it (LiveApp over a config file, the default
layers, a passthrough and a litellm deployment, a disk store); the upstream is respx. Each
example is one raw ASGI request (any method, path, header bytes, body) with a deadline.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import litellm
import orjson
import pytest
import respx
from httpx import Request as UpstreamRequest
from httpx import Response as UpstreamResponse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.config_loading import load_config
from providers.fake import completion, embeddings, sse_events, text_completion
from proxy.app import create_app
from proxy.live import LiveApp, build_from
from tests.conftest import running
from tests.reliability import examples

MASTER = "sk-fuzz-master"
CONFIG = f"""
model_list:
  - model_name: local
    litellm_params: {{model: openai/smollm2, api_base: "http://upstream.test/v1"}}
    context: {{window: 2048, max_output_tokens: 64}}
  - model_name: viallm
    litellm_params: {{model: openai/other, api_base: "http://litellm.test/v1", api_key: sk-up}}
    passthrough: false
    context: {{window: 4096}}
general_settings:
  master_key: {MASTER}
  max_body_bytes: 200000
  store: {{path: store}}
"""
FUZZ = settings(
    max_examples=examples(60, 2500),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Each generated test's examples: few in `make test`, many in `make reliability`."""
DEADLINE_SECONDS = 30.0
"""Longer than any example takes on a loaded 2-core box: reaching it is a hang."""

ROUTES = [
    "/v1/chat/completions", "/chat/completions", "/v1/responses", "/responses",
    "/v1/messages", "/v1/messages/count_tokens",
    "/v1/responses/resp_1", "/v1/responses/resp_1/input_items", "/v1/models", "/models",
    "/health/liveness",
    "/health/readiness", "/overspill/conversations", "/overspill/conversations/conv-1",
    "/overspill/ollama/refresh", "/overspill/config/reload", "/metrics",
    "/v1/embeddings", "/embeddings", "/v1/completions", "/completions",
    "/v1/images/generations", "/v1/audio/transcriptions", "/v1/files", "/v1/batches",
]  # fmt: skip
ROUTE_PATHS = ROUTES[-8:-4]
"""Embeddings and legacy completions, with and without /v1."""
METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT"]

latin1 = st.binary(max_size=80).map(lambda b: bytes(c for c in b if c not in b"\r\n\0"))
token = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.!#$%&'*+^`|~", min_size=1, max_size=24)

paths = st.one_of(
    st.sampled_from(ROUTES),
    st.sampled_from(ROUTES).map(lambda p: p + "/"),
    st.sampled_from(ROUTES).flatmap(lambda p: st.text(max_size=40).map(lambda t: p + t)),
    st.builds(lambda t: "/overspill/conversations/" + t, st.text(min_size=1, max_size=200)),
    st.text(max_size=60).map(lambda t: "/" + t),
)
authorizations = st.one_of(
    st.just(f"Bearer {MASTER}".encode()),
    st.just(b"Bearer sk-wrong"),
    st.sampled_from([b"Bearer ", b"bearer", b"Basic Zm9vOmJhcg==", b""]),
    latin1,
)
header_values: dict[str, Any] = {
    "authorization": authorizations,
    "content-type": st.sampled_from([b"application/json", b"text/plain", b"", b"\xff"]) | latin1,
    "content-length": st.one_of(
        st.integers(0, 10**30).map(lambda n: str(n).encode()),
        st.sampled_from([b"-1", b"\xb2", b"\xb9\xb3", b"1e3", b" 12", b"0x10", b""]),
        latin1,
    ),
    "x-conversation-id": st.text(max_size=140).map(lambda t: t.encode("utf-8")) | latin1,
    "x-request-id": latin1,
    "x-overspill-skip-history": st.sampled_from([b"1", b"true", b"no", b"maybe"]) | latin1,
    "host": st.sampled_from([b"evil.example", b"[::1", b"a b", b"", b"\xff:99999"]) | latin1,
    "accept": st.sampled_from([b"application/openmetrics-text", b"*/*"]) | latin1,
    "traceparent": latin1,
    "x-api-key": st.just(MASTER.encode()) | latin1,
    "x-claude-code-session-id": st.text(max_size=200).map(lambda t: t.encode("utf-8")) | latin1,
    "anthropic-beta": latin1,
}
headers = st.lists(
    st.one_of(
        st.sampled_from(sorted(header_values)).flatmap(
            lambda name: header_values[name].map(lambda value: (name.encode(), value))
        ),
        st.tuples(token.map(str.encode), latin1),
    ),
    max_size=8,
)

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


DEEP = re.compile(rb'"@@deep:(\d+)@@"')
"""Where `encode` writes nesting deeper than orjson writes (it reads up to 1024 levels)."""


def nested(depth: int) -> bytes:
    """JSON `depth` arrays/objects deep, alternating."""
    opening = b"".join(b'{"a":' if level % 2 else b"[" for level in range(depth))
    closing = b"".join(b"}" if level % 2 else b"]" for level in reversed(range(depth)))
    return opening + b'"x"' + closing


def encode(value: Any) -> bytes:
    """JSON bytes of a generated body, each `deep` placeholder replaced by its nesting."""
    return DEEP.sub(lambda found: nested(int(found.group(1))), orjson.dumps(value))


deep = st.integers(1, 1100).map(lambda depth: f"@@deep:{depth}@@")
good_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system"]), "content": st.text(max_size=200)}
)
odd_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "robot"])},
    optional={
        "content": st.text(max_size=200) | json_values | deep,
        "name": json_values,
        "tool_calls": json_values | deep,
        "tool_call_id": json_values,
    },
)
messages = st.one_of(
    st.lists(good_message, min_size=1, max_size=30),  # valid: the request reaches the layers
    st.lists(st.one_of(good_message, odd_message, json_values), max_size=30),
)
models = st.sampled_from(["local", "viallm"])
chat_fields: dict[str, Any] = {
    "stream": st.booleans() | json_values,
    "metadata": st.dictionaries(
        st.sampled_from(["conversation_id", "team", "api_base"]), json_values | deep
    )
    | json_values,
    "tools": deep | json_values,
    "overspill": st.fixed_dictionaries({}, optional={"skip_history": json_values}) | json_values,
    "documents": st.lists(
        st.fixed_dictionaries({}, optional={"id": json_values, "text": st.text(max_size=200)})
        | json_values,
        max_size=5,
    )
    | json_values,
    "max_tokens": json_values,
    "extra_body": json_values,
    "api_base": st.just("http://evil.example"),
    "response_format": deep,
}
chat_bodies = st.fixed_dictionaries(
    {
        "model": st.one_of(models, models, st.sampled_from(["nope", ""]), json_values),
        "messages": messages,
    },
    optional=chat_fields,
).map(encode)
item_types = st.sampled_from(
    ["message", "function_call", "function_call_output", "reasoning", "compaction",
     "item_reference", "web_search_call", "bogus"]
)  # fmt: skip
response_items = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "developer", "robot"])},
        optional={"content": st.text(max_size=100) | json_values | deep, "type": item_types},
    ),
    st.fixed_dictionaries(
        {"type": item_types},
        optional={
            "role": json_values,
            "content": json_values | deep,
            "call_id": st.sampled_from(["call_1", "call_2"]) | json_values,
            "name": json_values,
            "arguments": json_values,
            "output": json_values | deep,
            "encrypted_content": json_values,
            "summary": json_values,
        },
    ),
    json_values,
)
response_fields: dict[str, Any] = {
    "instructions": json_values,
    "tools": deep
    | json_values
    | st.lists(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["function", "web_search", "file_search", "custom"])},
            optional={"name": json_values, "parameters": json_values, "strict": json_values},
        ),
        max_size=3,
    ),
    "tool_choice": json_values,
    "text": json_values,
    "reasoning": json_values,
    "previous_response_id": st.sampled_from(["resp_nope", ""]) | json_values,
    "store": json_values,
    "stream": st.booleans() | json_values,
    "truncation": st.sampled_from(["auto", "disabled"]) | json_values,
    "context_management": json_values,
    "max_output_tokens": json_values,
    "parallel_tool_calls": json_values,
    "metadata": json_values,
    "background": json_values,
    "api_base": st.just("http://evil.example"),
}
response_bodies = st.fixed_dictionaries(
    {
        "model": st.one_of(models, models, st.sampled_from(["nope", ""]), json_values),
        "input": st.text(max_size=200) | st.lists(response_items, max_size=12) | json_values,
    },
    optional=response_fields,
).map(encode)
block_types = st.sampled_from(
    ["text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking",
     "compaction", "server_tool_use", "tool_reference", "search_result", "hologram"]
)  # fmt: skip
anthropic_blocks = st.one_of(
    st.fixed_dictionaries(
        {"type": block_types},
        optional={
            "text": json_values,
            "id": st.sampled_from(["toolu_1", "toolu_2"]) | json_values,
            "tool_use_id": st.sampled_from(["toolu_1", "toolu_2", "toolu_x"]) | json_values,
            "name": json_values,
            "input": json_values | deep,
            "content": json_values | deep | st.text(max_size=100),
            "is_error": json_values,
            "thinking": json_values,
            "signature": json_values,
            "source": st.fixed_dictionaries(
                {"type": st.sampled_from(["base64", "url", "text", "file", "content"])},
                optional={"media_type": json_values, "data": json_values, "url": json_values},
            )
            | json_values,
            "cache_control": json_values,
            "tool_name": json_values,
        },
    ),
    json_values,
)
anthropic_messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "robot"])},
        optional={"content": st.text(max_size=100) | st.lists(anthropic_blocks, max_size=4)
                  | json_values | deep},
    )
    | json_values,
    max_size=10,
)  # fmt: skip
messages_fields: dict[str, Any] = {
    "max_tokens": st.integers(-2, 5000) | json_values,
    "system": st.text(max_size=100) | st.lists(anthropic_blocks, max_size=3) | json_values,
    "tools": deep
    | json_values
    | st.lists(
        st.fixed_dictionaries(
            {"name": json_values | st.just("Read")},
            optional={"input_schema": json_values, "type": json_values, "defer_loading": json_values},
        ),
        max_size=3,
    ),
    "tool_choice": json_values,
    "stop_sequences": json_values,
    "temperature": json_values,
    "top_k": json_values,
    "metadata": json_values,
    "thinking": json_values,
    "stream": st.booleans() | json_values,
    "context_management": json_values
    | st.fixed_dictionaries({"edits": st.lists(json_values | st.fixed_dictionaries(
        {"type": st.sampled_from(["clear_tool_uses_20250919", "clear_thinking_20251015",
                                  "compact_20260112", "other"])},
        optional={"trigger": json_values, "keep": json_values, "clear_at_least": json_values,
                  "exclude_tools": json_values, "clear_tool_inputs": json_values,
                  "pause_after_compaction": json_values}), max_size=3)}),
    "output_format": json_values,
    "mcp_servers": json_values,
    "api_base": st.just("http://evil.example"),
}  # fmt: skip
messages_bodies = st.fixed_dictionaries(
    {
        "model": st.one_of(models, models, st.sampled_from(["nope", ""]), json_values),
        "messages": anthropic_messages,
    },
    optional=messages_fields,
).map(encode)
token_ids = st.integers(-5, 2**64 - 1)
texts = st.one_of(
    st.text(max_size=100),
    st.lists(st.text(max_size=40), max_size=6),
    st.lists(token_ids, max_size=8),
    st.lists(st.lists(token_ids, max_size=5), max_size=4),
    st.lists(st.text(max_size=10) | token_ids | json_values, max_size=4),
    json_values,
    deep,
)
route_fields: dict[str, Any] = {
    "encoding_format": st.sampled_from(["float", "base64", "hex"]) | json_values,
    "dimensions": st.integers(-1, 2**64 - 1) | json_values,
    "user": json_values,
    "max_tokens": st.integers(-1, 2**64 - 1) | json_values,
    "stream": st.booleans() | json_values,
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": json_values})
    | json_values,
    "suffix": json_values,
    "echo": json_values,
    "logprobs": json_values,
    "n": json_values,
    "stop": st.lists(st.text(max_size=5), max_size=3) | json_values,
    "temperature": json_values,
    "logit_bias": json_values | deep,
    "seed": json_values,
    "extra_body": json_values,
    "metadata": json_values | deep,
    "api_base": st.just("http://evil.example"),
    "num_retries": st.just(3),
}
route_bodies = st.one_of(
    st.fixed_dictionaries(
        {"model": st.one_of(models, models, st.sampled_from(["nope", ""]), json_values)},
        optional={"input": texts, "prompt": texts, **route_fields},
    ),
    st.fixed_dictionaries({"model": models, "input": texts}, optional=route_fields),
    st.fixed_dictionaries({"model": models, "prompt": texts}, optional=route_fields),
).map(encode)
bodies = st.one_of(
    chat_bodies,
    response_bodies,
    messages_bodies,
    route_bodies,
    chat_bodies.map(lambda raw: raw[: len(raw) // 2]),
    json_values.map(orjson.dumps),
    st.binary(max_size=300),
    st.integers(255, 1100).map(lambda n: b'{"model":"local","metadata":' + b"[" * n + b"]" * n),
    st.just(b""),
)


def answer(request: UpstreamRequest) -> UpstreamResponse:
    """The upstream: a completion (chat, legacy text) or embeddings, as its route answers; an
    SSE stream when asked for one."""
    try:
        streamed = bool(orjson.loads(request.content).get("stream"))
    except (orjson.JSONDecodeError, AttributeError):
        streamed = False
    route = request.url.path.rpartition("/")[2]
    if route == "embeddings":
        return UpstreamResponse(200, json=embeddings([[0.5, -1.0]]))
    if streamed:
        events = b"".join(sse_events(["one ", "two"]))
        return UpstreamResponse(200, content=events, headers={"content-type": "text/event-stream"})
    if route == "completions" and request.url.path.endswith("/v1/completions"):
        return UpstreamResponse(200, json=text_completion("hello"))
    return UpstreamResponse(200, json=completion("hello", prompt_tokens=12))


class Surface:
    """The app as served, and one event loop to drive it across examples."""

    def __init__(self, directory: Path) -> None:
        path = directory / "config.yaml"
        path.write_text(CONFIG)
        self.runner = asyncio.Runner()
        self.app = self.runner.run(self._start(str(path)))
        self.lifespan = running(self.app)
        self.runner.run(self.lifespan.__aenter__())

    @staticmethod
    async def _start(path: str) -> LiveApp:
        return LiveApp.start(path, build_from(load_config(path), path), create_app)

    def close(self) -> None:
        self.runner.run(self.lifespan.__aexit__(None, None, None))
        self.runner.close()

    def call(self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> Any:
        """One request; its response messages, or a failure if it does not end in time."""
        return self.runner.run(
            asyncio.wait_for(self._call(method, path, headers, body), DEADLINE_SECONDS)
        )

    async def _call(
        self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client stays until the response is over
            raise AssertionError("unreachable")

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode("utf-8", "surrogateescape"),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 4000),
            "state": {},
        }
        await self.app(scope, receive, send)
        return sent


@pytest.fixture(scope="module")
def surface() -> Iterator[Surface]:
    """One served app for the module's examples; litellm through httpx so respx sees it."""
    previous = litellm.disable_aiohttp_transport
    litellm.disable_aiohttp_transport = True
    with tempfile.TemporaryDirectory() as directory, respx.mock(assert_all_called=False) as mock:
        for host in ("upstream.test", "litellm.test"):
            for route in ("chat/completions", "embeddings", "completions"):
                mock.post(f"http://{host}/v1/{route}").mock(side_effect=answer)
        made = Surface(Path(directory))
        try:
            yield made
        finally:
            made.close()
            litellm.disable_aiohttp_transport = previous


def check(messages: list[dict[str, Any]], method: str, path: str = "") -> int:
    """One complete response, below 500, and an error in the route's API shape when it is a
    refusal (Anthropic's on the Messages routes, OpenAI's elsewhere)."""
    starts = [m for m in messages if m["type"] == "http.response.start"]
    assert len(starts) == 1, messages[:3]
    status = starts[0]["status"]
    assert b"location" not in dict(starts[0]["headers"]), "a redirect"
    bodies = [m for m in messages if m["type"] == "http.response.body"]
    assert bodies, "no body"
    assert not bodies[-1].get("more_body", False), "the response never ended"
    body = b"".join(m.get("body", b"") for m in bodies)
    assert 100 <= status < 600, status
    assert status != 500, body[:500]
    if status >= 400:
        head = dict(starts[0]["headers"])
        assert head[b"content-type"] == b"application/json"
        parsed = orjson.loads(body)
        error = parsed["error"]
        if path == "/v1/messages" or path.startswith("/v1/messages/"):  # its 404s, 405s too
            assert parsed["type"] == "error"
            assert set(error) == {"type", "message"}
        else:
            assert set(error) == {"message", "type", "param", "code"}
        assert error["message"]
        # The upstream always answers 200: a 5xx can only be litellm refusing, on its side, a
        # value it does not support (it raises those as connection errors: a 502).
        assert status < 500 or error["code"] == "upstream_error", (status, body[:500])
    return int(status)


@pytest.mark.reliability("fuzz")
@FUZZ
@given(
    method=st.sampled_from(METHODS) | token.map(str.upper), path=paths, headers=headers, body=bodies
)
def test_any_request_on_any_route_is_answered_below_500(
    surface: Surface, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    """Any method, path, headers and body: one complete answer, never a 500, errors as JSON."""
    check(surface.call(method, path, headers, body), method, path)


@pytest.mark.reliability("fuzz")
@FUZZ
@given(body=chat_bodies, headers=headers, route=st.sampled_from(ROUTES[:2]))
def test_generated_chat_requests_are_answered_below_500(
    surface: Surface, body: bytes, headers: list[tuple[bytes, bytes]], route: str
) -> None:
    """Chat bodies with every field generated (deep, ill-typed, forbidden), with the right key."""
    authorised = [(b"authorization", f"Bearer {MASTER}".encode()), *headers]
    check(surface.call("POST", route, authorised, body), "POST")


@pytest.mark.reliability("fuzz")
@FUZZ
@given(body=response_bodies, headers=headers, route=st.sampled_from(ROUTES[2:4]))
def test_generated_responses_requests_are_answered_below_500(
    surface: Surface, body: bytes, headers: list[tuple[bytes, bytes]], route: str
) -> None:
    """Responses API bodies with every field generated (items, tools, chains), with the key."""
    authorised = [(b"authorization", f"Bearer {MASTER}".encode()), *headers]
    check(surface.call("POST", route, authorised, body), "POST")


@pytest.mark.reliability("fuzz")
@settings(
    max_examples=examples(60, 2500),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(body=messages_bodies, headers=headers, route=st.sampled_from(ROUTES[4:6]))
def test_generated_messages_requests_are_answered_below_500(
    surface: Surface, body: bytes, headers: list[tuple[bytes, bytes]], route: str
) -> None:
    """Anthropic Messages bodies with every field generated (blocks, tools, edits), keyed by
    x-api-key: Anthropic-shaped errors, never a 500."""
    authorised = [(b"x-api-key", MASTER.encode()), *headers]
    check(surface.call("POST", route, authorised, body), "POST", route)


@FUZZ
@given(body=route_bodies, headers=headers, route=st.sampled_from(ROUTE_PATHS))
def test_generated_embeddings_and_completions_are_answered_below_500(
    surface: Surface, body: bytes, headers: list[tuple[bytes, bytes]], route: str
) -> None:
    """Embeddings and completions bodies with every field generated (texts, token ids, deep,
    ill-typed, forbidden, litellm settings), on both roads, with the right key."""
    authorised = [(b"authorization", f"Bearer {MASTER}".encode()), *headers]
    check(surface.call("POST", route, authorised, body), "POST")


def test_the_fuzzed_app_is_the_served_one() -> None:
    """The fuzzing config loads and keeps a passthrough and a litellm deployment."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "config.yaml")
        Path(path).write_text(CONFIG)
        settings_ = load_config(path).settings
        kinds = {entry.model_name: entry.uses_passthrough() for entry in settings_.model_list}
        assert kinds == {"local": True, "viallm": False}
