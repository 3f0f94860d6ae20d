"""DNS rebinding: on loopback, a request addressed to a name not this machine's is refused."""

from __future__ import annotations

import socket

import pytest

from kernel.config_loading import ConfigError
from providers.fake import ScriptedProvider, json_response
from proxy.hosts import Hosts, host_name
from tests.conftest import AppClient, settings_from
from tests.proxy.test_origins import CHAT, MESSAGES, OPEN

REBOUND = {"host": "evil.example:4000"}


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:4000", "127.0.0.1"),
        ("[::1]:4000", "::1"),
        ("[::1]", "::1"),
        ("Evil.Example.:4000", "evil.example"),
        ("localhost", "localhost"),
        ("", ""),
    ],
)
def test_the_name_a_host_header_carries(header: str, name: str) -> None:
    """Port, brackets, case and a final dot are not part of the name."""
    assert host_name(header) == name


@pytest.mark.parametrize(
    ("header", "listed", "allowed"),
    [
        ("127.0.0.1:4000", (), True),
        ("[::1]:4000", (), True),
        ("192.168.1.20:4000", (), True),
        ("localhost:4000", (), True),
        ("LOCALHOST.", (), True),
        ("app.localhost:4000", (), True),
        ("printer.local", (), True),
        ("gateway.internal", (), True),
        ("", (), True),
        ("evil.example:4000", (), False),
        ("localhost.evil.example", (), False),
        ("127.0.0.1.evil.example", (), False),
        ("gateway.example.com", ("gateway.example.com",), True),
        ("GATEWAY.example.com:443", ("gateway.example.com",), True),
        ("other.example.com", ("gateway.example.com",), False),
        ("example.com", (".example.com",), True),
        ("a.b.example.com", (".example.com",), True),
        ("badexample.com", (".example.com",), False),
        ("anything.example", ("*",), True),
    ],
)
def test_which_names_are_served_on_loopback(
    header: str, listed: tuple[str, ...], allowed: bool
) -> None:
    """This machine's names and any address always; other names when listed; `*` any."""
    assert Hosts(listed, served_on="127.0.0.1").allows(header) is allowed


def test_the_machines_own_name_is_served() -> None:
    """The name this machine calls itself reaches it, in any case."""
    assert Hosts((), served_on="localhost").allows(socket.gethostname().upper() + ":4000")


@pytest.mark.parametrize("served_on", ["0.0.0.0", "192.168.1.20", "gateway.example.com", None])
def test_nothing_is_checked_off_loopback(served_on: str | None) -> None:
    """Served on a network address (where a key is needed) or not served, any name passes."""
    assert Hosts((), served_on=served_on).allows("evil.example")


async def test_a_rebound_page_reads_nothing(app_client: AppClient) -> None:
    """A keyless gateway on loopback answers a request addressed to another site's name
    with a 403 naming the setting, on a GET route a page could read as its own origin."""
    client = app_client(
        {"local": []}, settings=settings_from(OPEN), key=None, served_on="127.0.0.1"
    )
    refused = await client.get("/v1/models", headers=REBOUND)
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("permission_error", "host_not_allowed")
    assert "'evil.example'" in error["message"]
    assert "general_settings.allowed_hosts" in error["message"]
    assert refused.headers["x-request-id"]
    for path in ("/health/readiness", "/metrics", "/"):
        assert (await client.get(path, headers=REBOUND)).status_code == 403, path
    served = await client.get("/v1/models", headers={"host": "127.0.0.1:4000"})
    assert served.status_code == 200
    assert served.json()["data"][0]["id"] == "local"


async def test_nothing_is_called_for_a_rebound_post(app_client: AppClient) -> None:
    """A POST addressed to another name is refused before any model call, in the shape of
    the API it asked: OpenAI's on chat, Anthropic's on messages."""
    provider = ScriptedProvider([json_response("spent")])
    client = app_client(
        {"local": [provider]}, settings=settings_from(OPEN), key=None, served_on="::1"
    )
    chat = await client.post("/v1/chat/completions", json=CHAT, headers=REBOUND)
    assert chat.status_code == 403
    assert chat.json()["error"]["code"] == "host_not_allowed"
    anthropic = await client.post("/v1/messages", json=MESSAGES, headers=REBOUND)
    assert anthropic.status_code == 403
    assert anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "permission_error"
    assert "general_settings.allowed_hosts" in anthropic.json()["error"]["message"]
    assert provider.requests == []


async def test_a_listed_name_is_served(app_client: AppClient) -> None:
    """A name a reverse proxy on this machine forwards is served once listed."""
    settings = settings_from(OPEN + "general_settings:\n  allowed_hosts: [llm.example.com]\n")
    provider = ScriptedProvider([json_response("hello")])
    client = app_client({"local": [provider]}, settings=settings, key=None, served_on="127.0.0.1")
    answered = await client.post(
        "/v1/chat/completions", json=CHAT, headers={"host": "llm.example.com"}
    )
    assert answered.status_code == 200
    assert answered.json()["choices"][0]["message"]["content"] == "hello"


@pytest.mark.parametrize("entry", ["https://llm.example.com", "llm.example.com:443", "a/b", "*.x"])
def test_an_entry_that_is_no_host_name_is_refused_at_its_yaml_path(entry: str) -> None:
    """A scheme, port, path or glob is a config error naming general_settings.allowed_hosts."""
    with pytest.raises(ConfigError) as caught:
        settings_from(OPEN + f"general_settings:\n  allowed_hosts: ['{entry}']\n")
    said = "\n".join(caught.value.problems)
    assert "general_settings.allowed_hosts" in said
    assert "is not a host name" in said
