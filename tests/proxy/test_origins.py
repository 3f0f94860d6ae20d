"""Web pages: a page elsewhere cannot make a browser call overspill; allowed pages can."""

from __future__ import annotations

import pytest

from kernel.config_loading import ConfigError
from providers.fake import ScriptedProvider, json_response, sse_events, stream_response
from proxy.origins import Origins
from tests.conftest import AppClient, settings_from

OPEN = """
model_list:
  - model_name: local
    litellm_params: {model: openai/x, api_base: "http://upstream.test/v1"}
"""
CHAT = {"model": "local", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "local", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
EVIL = {"origin": "https://evil.example"}


@pytest.mark.parametrize(
    ("origin", "listed", "allowed"),
    [
        ("http://localhost:3000", (), True),
        ("http://127.0.0.1:5173", (), True),
        ("http://[::1]:8080", (), True),
        ("https://app.localhost", (), True),
        ("https://evil.example", (), False),
        ("http://localhost.evil.example", (), False),
        ("null", (), False),
        ("https://chat.example.com", ("https://chat.example.com",), True),
        ("https://CHAT.example.com", ("https://chat.example.com/",), True),
        ("https://chat.example.com", ("https://chat.example.com:443",), True),
        ("https://chat.example.com:8443", ("https://chat.example.com",), False),
        ("http://chat.example.com", ("https://chat.example.com",), False),
        ("https://anything.example", ("*",), True),
    ],
)
def test_which_pages_are_served(origin: str, listed: tuple[str, ...], allowed: bool) -> None:
    """This machine's pages always; others when listed, by scheme, host and port; `*` any."""
    assert Origins(listed).allows(origin) is allowed


async def test_a_page_elsewhere_is_refused_and_nothing_is_called(app_client: AppClient) -> None:
    """A keyless gateway's chat from another site's page (a text/plain POST a browser sends
    without asking) is a 403 naming the setting, and no upstream call is made."""
    provider = ScriptedProvider([json_response("spent")])
    client = app_client({"local": [provider]}, settings=settings_from(OPEN), key=None)
    headers = {**EVIL, "content-type": "text/plain"}
    refused = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("permission_error", "origin_not_allowed")
    assert "general_settings.allowed_origins" in error["message"]
    assert "access-control-allow-origin" not in refused.headers
    assert provider.requests == []


async def test_the_refusal_is_in_the_shape_of_the_api_asked(app_client: AppClient) -> None:
    """On /v1/messages the refusal is Anthropic's error shape."""
    client = app_client(
        {"local": [ScriptedProvider([json_response("x")])]}, settings=settings_from(OPEN), key=None
    )
    refused = await client.post("/v1/messages", json=MESSAGES, headers=EVIL)
    assert refused.status_code == 403
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "permission_error"


async def test_a_preflight_from_a_page_elsewhere_is_refused(app_client: AppClient) -> None:
    """The browser's preflight gets a 403 and no CORS headers, so it sends nothing."""
    client = app_client(
        {"local": [ScriptedProvider([json_response("x")])]}, settings=settings_from(OPEN), key=None
    )
    asked = {**EVIL, "access-control-request-method": "POST"}
    refused = await client.options("/v1/chat/completions", headers=asked)
    assert refused.status_code == 403
    assert "access-control-allow-origin" not in refused.headers
    assert refused.json()["error"]["code"] == "origin_not_allowed"


async def test_an_allowed_page_gets_its_preflight_and_reads_the_answer(
    app_client: AppClient,
) -> None:
    """A listed page's preflight is answered (its headers allowed), and the answer carries
    the header that lets the page read it."""
    settings = settings_from(
        OPEN + "general_settings:\n  allowed_origins: [https://chat.example.com]\n"
    )
    provider = ScriptedProvider([json_response("hello")])
    client = app_client({"local": [provider]}, settings=settings, key=None)
    page = {"origin": "https://chat.example.com"}
    preflight = await client.options(
        "/v1/chat/completions",
        headers={
            **page,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "https://chat.example.com"
    assert preflight.headers["access-control-allow-headers"] == "authorization, content-type"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "access-control-allow-credentials" not in preflight.headers
    answered = await client.post("/v1/chat/completions", json=CHAT, headers=page)
    assert answered.status_code == 200
    assert answered.headers["access-control-allow-origin"] == "https://chat.example.com"
    assert answered.json()["choices"][0]["message"]["content"] == "hello"


async def test_a_page_on_this_machine_and_a_client_without_origin_are_served(
    app_client: AppClient,
) -> None:
    """A web app in development on localhost is served as before; an SDK sends no Origin
    and gets no CORS header."""
    provider = ScriptedProvider([json_response("a"), json_response("b")])
    client = app_client({"local": [provider]}, settings=settings_from(OPEN), key=None)
    local = await client.post(
        "/v1/chat/completions", json=CHAT, headers={"origin": "http://localhost:3000"}
    )
    assert local.status_code == 200
    assert local.headers["access-control-allow-origin"] == "http://localhost:3000"
    sdk = await client.post("/v1/chat/completions", json=CHAT)
    assert sdk.status_code == 200
    assert "access-control-allow-origin" not in sdk.headers


def test_an_entry_that_is_no_origin_is_refused_at_its_yaml_path() -> None:
    """A path after the host is a config error naming general_settings.allowed_origins."""
    with pytest.raises(ConfigError) as caught:
        settings_from(
            OPEN + "general_settings:\n  allowed_origins: [https://chat.example.com/app]\n"
        )
    said = "\n".join(caught.value.problems)
    assert "general_settings.allowed_origins" in said
    assert "'https://chat.example.com/app' is not an origin" in said


async def test_an_allowed_page_reads_a_stream(app_client: AppClient) -> None:
    """A streamed answer to a page on this machine carries the header that lets it read the
    events as they come."""
    provider = ScriptedProvider([stream_response(sse_events(["Hel", "lo"]))])
    client = app_client({"local": [provider]}, settings=settings_from(OPEN), key=None)
    page = {"origin": "http://localhost:5173"}
    async with client.stream(
        "POST", "/v1/chat/completions", json={**CHAT, "stream": True}, headers=page
    ) as answer:
        body = b"".join([chunk async for chunk in answer.aiter_bytes()])
    assert answer.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert b"Hel" in body


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"model": "local", "input": "hi"}),
        ("/v1/responses/input_tokens", {"model": "local", "input": "hi"}),
        ("/v1/embeddings", {"model": "local", "input": "hi"}),
        ("/v1/completions", {"model": "local", "prompt": "hi"}),
        ("/v1/messages/count_tokens", {"model": "local", "messages": MESSAGES["messages"]}),
        ("/chat/completions", CHAT),
    ],
)
async def test_every_api_route_refuses_a_page_elsewhere(
    app_client: AppClient, path: str, body: dict[str, object]
) -> None:
    """Each API route, with or without /v1, refuses the page before it calls anything."""
    provider = ScriptedProvider([json_response("spent")])
    client = app_client({"local": [provider]}, settings=settings_from(OPEN), key=None)
    refused = await client.post(path, json=body, headers={**EVIL, "content-type": "text/plain"})
    assert refused.status_code == 403, refused.text
    assert "general_settings.allowed_origins" in refused.text
    assert provider.requests == []
