"""Bad input at the HTTP surface: deep JSON, conversation ids, trailing slashes, a route's bug,
and the connection limits' settings. Each answer is a 4xx in the OpenAI shape, never a 500."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import respx

from kernel.config_loading import ConfigError, parse_config
from kernel.errors import ENCODE_DEPTH
from kernel.store import DiskHistoryStore, HistoryEntry
from providers.fake import completion
from proxy.limits import LIMITS_ENV, ConnectionLimits
from tests.conftest import AppClient, settings_from

UPSTREAM = "http://upstream.test/v1/chat/completions"
USER = {"role": "user", "content": "hi"}
CHAT: dict[str, Any] = {"model": "local", "messages": [USER]}
# The upstream's model name differs from the client's, so the body is always written again.
CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 2048}
general_settings:
  master_key: sk-master
"""


@pytest.fixture
def upstream() -> Iterator[respx.Route]:
    """The upstream's chat route, answering a completion."""
    with respx.mock(assert_all_called=False) as mock:
        yield mock.post(UPSTREAM).respond(200, json=completion("hello"))


def error_of(response: Any) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    payload = response.json()
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    return payload["error"]  # type: ignore[no-any-return]


def nested_bytes(depth: int) -> bytes:
    """JSON `depth` levels deep (arrays and objects alternating)."""
    opening = b"".join(b'{"a":' if level % 2 else b"[" for level in range(depth))
    closing = b"".join(b"}" if level % 2 else b"]" for level in reversed(range(depth)))
    return opening + b"1" + closing


def chat_with(field: str, depth: int) -> bytes:
    """A chat body with a value `depth` levels deep in `field`."""
    marker = b'"@@deep@@"'
    body: dict[str, Any] = {"model": "local", "messages": [USER]}
    if field == "content":
        body["messages"] = [{"role": "user", "content": [{"type": "text", "x": "@@deep@@"}]}]
    elif field == "tool_calls":
        body["messages"] = [USER, {"role": "assistant", "tool_calls": "@@deep@@"}]
    elif field == "tools":
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": "@@deep@@"}}]
    else:
        body[field] = {"x": "@@deep@@"} if field == "metadata" else "@@deep@@"
    return orjson.dumps(body).replace(marker, nested_bytes(depth))


FIELDS = ["metadata", "tools", "content", "tool_calls", "response_format", "unknown_field"]


@pytest.mark.reliability("input")
@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("depth", [ENCODE_DEPTH + 1, 300, 1000])
async def test_json_too_deep_to_forward_is_a_400(
    app_client: AppClient, upstream: respx.Route, field: str, depth: int
) -> None:
    """JSON that parses but nests deeper than overspill can write again: 400, upstream unasked."""
    client = app_client(settings=settings_from(CONFIG))
    response = await client.post("/v1/chat/completions", content=chat_with(field, depth))
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["code"] == "json_too_deep"
    assert "flatten it" in error["message"]
    assert not upstream.called


@pytest.mark.reliability("input")
@pytest.mark.parametrize("field", FIELDS)
async def test_json_deeper_than_the_parser_reads_is_a_400(
    app_client: AppClient, upstream: respx.Route, field: str
) -> None:
    """Over 1024 levels the body is refused as JSON that cannot be read."""
    client = app_client(settings=settings_from(CONFIG))
    response = await client.post("/v1/chat/completions", content=chat_with(field, 1100))
    assert response.status_code == 400
    assert "depth limit exceeded" in error_of(response)["message"]


@pytest.mark.reliability("input")
@pytest.mark.parametrize("field", FIELDS)
async def test_deep_json_within_the_limit_is_forwarded(
    app_client: AppClient, upstream: respx.Route, field: str
) -> None:
    """Nesting overspill can write again (here 200 levels) reaches the upstream intact."""
    client = app_client(settings=settings_from(CONFIG))
    response = await client.post("/v1/chat/completions", content=chat_with(field, 200))
    assert response.status_code == 200, response.text
    assert nested_bytes(200) in upstream.calls.last.request.content


@pytest.mark.reliability("input")
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("has space", "contains other characters"),
        ("x" * 129, "129 characters long"),
        ("", "0 characters long"),
        ("é", "contains other characters"),
        ("a/b", "contains other characters"),
    ],
)
@pytest.mark.parametrize("where", ["header", "metadata"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_malformed_conversation_id_is_refused_on_the_first_request(
    app_client: AppClient,
    upstream: respx.Route,
    value: str,
    problem: str,
    where: str,
    stream: bool,
) -> None:
    """A one-message conversation with a bad id is a 400 naming the field and the rule."""
    client = app_client(settings=settings_from(CONFIG))
    body: dict[str, Any] = {**CHAT, "stream": stream}
    headers: dict[bytes, bytes] = {}
    if where == "header":
        headers[b"x-conversation-id"] = value.encode("utf-8")
    else:
        body["metadata"] = {"conversation_id": value}
    response = await client.post("/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 400
    error = error_of(response)
    param = "X-Conversation-Id" if where == "header" else "metadata.conversation_id"
    assert error["param"] == param
    assert "1-128 characters of A-Z a-z 0-9 . _ : -" in error["message"]
    assert problem in error["message"]
    assert not upstream.called


@pytest.mark.reliability("input")
@pytest.mark.parametrize("value", [12, None, ["a"], {"a": 1}, True])
async def test_a_conversation_id_that_is_not_a_string_is_refused(
    app_client: AppClient, upstream: respx.Route, value: Any
) -> None:
    """`metadata.conversation_id` must be a string (null counts as absent)."""
    client = app_client(settings=settings_from(CONFIG))
    body = {**CHAT, "metadata": {"conversation_id": value}}
    response = await client.post("/v1/chat/completions", json=body)
    if value is None:
        assert response.status_code == 200
        return
    assert response.status_code == 400
    assert error_of(response)["param"] == "metadata.conversation_id"


@pytest.mark.reliability("input")
async def test_the_longest_well_formed_conversation_id_is_used(
    app_client: AppClient, upstream: respx.Route
) -> None:
    """128 characters from the allowed set are a valid id (not forwarded upstream)."""
    client = app_client(settings=settings_from(CONFIG))
    given = "aZ0._:-" * 18 + "ab"
    body = {**CHAT, "metadata": {"conversation_id": given, "team": "blue"}}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    forwarded = orjson.loads(upstream.calls.last.request.content)
    assert forwarded["metadata"] == {"team": "blue"}


@pytest.mark.reliability("input")
@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/chat/completions/"), ("POST", "/chat/completions/"), ("GET", "/v1/models/")],
)
async def test_a_trailing_slash_is_a_404_naming_the_route_without_a_redirect(
    app_client: AppClient, upstream: respx.Route, method: str, path: str
) -> None:
    """Never a redirect built from the client's Host: a 404 that says which route was meant."""
    client = app_client(settings=settings_from(CONFIG))
    response = await client.request(
        method, path, json=CHAT, headers={"host": "evil.example"}, follow_redirects=False
    )
    assert response.status_code == 404
    assert "location" not in response.headers
    error = error_of(response)
    assert error["message"].endswith(f"drop the trailing slash ({path.rstrip('/')})")
    assert not upstream.called


class BrokenStore(DiskHistoryStore):
    """A store whose listing fails with a bug (not a StoreError)."""

    async def entries(self, tenant: str | None = None) -> list[HistoryEntry]:
        raise RuntimeError("bug in the store")


@pytest.mark.reliability("input")
async def test_a_bug_in_any_route_is_a_json_500_with_the_request_id(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Outside the chat endpoint too, an unexpected exception is answered in the OpenAI shape."""
    import httpx

    from proxy.app import create_app
    from proxy.system import build_system

    store = BrokenStore(tmp_path / "store")
    app = create_app(build_system(settings_from(CONFIG), store=store))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://o.test") as client:
        with caplog.at_level(logging.ERROR):
            response = await client.get(
                "/overspill/conversations", headers={"authorization": "Bearer sk-master"}
            )
    await store.aclose()
    assert response.status_code == 500
    error = error_of(response)
    assert error["type"] == "internal_error"
    assert response.headers["x-request-id"] in error["message"]


@pytest.mark.reliability("input")
@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("max_header_bytes", 100),
        ("client_header_timeout", 0),
        ("client_body_timeout", -1),
        ("keep_alive_timeout", 0),
    ],
)
def test_connection_limits_are_validated_by_their_yaml_path(setting: str, value: Any) -> None:
    """A limit that cannot work stops startup, naming general_settings.<setting>."""
    text = f"model_list: []\ngeneral_settings:\n  {setting}: {value}\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "config.yaml", {})
    assert any(f"general_settings.{setting}" in p for p in caught.value.problems)


def test_the_limits_reach_the_workers_through_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What `serve` exports is what each worker's protocol reads; nothing exported: defaults."""
    monkeypatch.setenv(LIMITS_ENV, "")  # restored (unset) when the test ends
    assert ConnectionLimits.exported() == ConnectionLimits()
    text = "model_list: []\ngeneral_settings: {max_header_bytes: 2048, client_body_timeout: 7}\n"
    general = parse_config(text, "config.yaml", {}).settings.general_settings
    ConnectionLimits.of(general).export()
    assert ConnectionLimits.exported() == ConnectionLimits(2048, 10.0, 7.0, 5)


@pytest.mark.reliability("input")
@pytest.mark.parametrize("declared", [b"\xb2", b"\xb9\xb3", b"-5", b"1e9", b"abc"])
async def test_a_content_length_that_is_not_ascii_digits_is_no_500(
    app_client: AppClient, upstream: respx.Route, declared: bytes
) -> None:
    """A Content-Length Python's isdigit() takes for digits ("²") is not read as a length."""
    client = app_client(settings=settings_from(CONFIG))
    raw = orjson.dumps(CHAT)
    headers = [(b"content-length", declared)]  # bytes: sent as they are
    response = await client.post("/v1/chat/completions", content=raw, headers=headers)
    assert response.status_code == 200


LITELLM_CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/other, api_base: "http://litellm.test/v1", api_key: sk-up}
    passthrough: false
general_settings:
  master_key: sk-master
middleware: []
"""


@pytest.fixture
def litellm_upstream() -> Iterator[respx.Route]:
    """The litellm deployment's upstream, with litellm on httpx so respx sees it."""
    import litellm

    previous = litellm.disable_aiohttp_transport
    litellm.disable_aiohttp_transport = True
    with respx.mock(assert_all_called=False) as mock:
        yield mock.post("http://litellm.test/v1/chat/completions").respond(
            200, json=completion("hello")
        )
    litellm.disable_aiohttp_transport = previous


@pytest.mark.reliability("input")
@pytest.mark.parametrize("field", ["metadata", "unknown_field"])
async def test_json_too_deep_for_a_litellm_deployment_is_a_400_not_a_502(
    app_client: AppClient, litellm_upstream: respx.Route, field: str
) -> None:
    """Through litellm too, nesting overspill cannot write again is the client's 400."""
    client = app_client(settings=settings_from(LITELLM_CONFIG))
    response = await client.post("/v1/chat/completions", content=chat_with(field, 300))
    assert response.status_code == 400, response.text
    assert error_of(response)["code"] == "json_too_deep"
    assert not litellm_upstream.called
    fine = await client.post("/v1/chat/completions", content=chat_with(field, 200))
    assert fine.status_code == 200
