"""Closed by default: `overspill serve` refuses to run open on a network address."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from proxy.exposure import address_problem, is_loopback, open_gateway_refusal
from tests.conftest import settings_from
from tests.e2e.conftest import start_overspill
from tests.ports import free_port

MODELS = "model_list:\n  - model_name: local\n    litellm_params: {model: openai/x, api_base: http://127.0.0.1:9/v1}\n"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("LOCALHOST", True), ("0.0.0.0", False), ("::", False),
     ("10.0.0.7", False), ("overspill.internal", False), ("", False)],
)  # fmt: skip
def test_only_this_machine_is_loopback(host: str, loopback: bool) -> None:
    """Loopback addresses and localhost are this machine; anything else may be the network."""
    assert is_loopback(host) is loopback


def test_an_open_gateway_is_refused_off_loopback_only() -> None:
    """No master key and no client keys: refused on 0.0.0.0, served on loopback, and served
    anywhere with a key, with client keys, or with allow_unauthenticated."""
    open_config = settings_from(MODELS)
    refusal = open_gateway_refusal(open_config, "0.0.0.0")
    assert refusal is not None
    assert "refusing to serve on 0.0.0.0 without authentication" in refusal
    assert "master_key: os.environ/OVERSPILL_MASTER_KEY" in refusal
    assert "allow_unauthenticated: true" in refusal
    assert open_gateway_refusal(open_config, "127.0.0.1") is None
    for general in (
        "general_settings: {master_key: sk-m}\n",
        "general_settings: {client_keys: [{name: app, key: sk-app}]}\n",
        "general_settings: {allow_unauthenticated: true}\n",
    ):
        assert open_gateway_refusal(settings_from(MODELS + general), "0.0.0.0") is None


def _serve(config: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = config.parent / "serve.log"
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "proxy", "serve", "--config", str(config),
             "--host", "0.0.0.0", "--port", str(port)],
            stdout=sink, stderr=subprocess.STDOUT, cwd=config.parent, env=env,
        )  # fmt: skip


def test_serve_refuses_an_unset_master_key_on_every_address(tmp_path: Path) -> None:
    """A real `overspill serve --host 0.0.0.0` whose `master_key: os.environ/X` is unset exits
    with status 2 and says how to set a key, naming X; with X set it serves."""
    config = tmp_path / "config.yaml"
    config.write_text(
        MODELS + "general_settings:\n  master_key: os.environ/OVERSPILL_TEST_MASTER_KEY\n"
        "  store: {path: store}\nmiddleware: []\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OVERSPILL_TEST_MASTER_KEY"}
    refused = _serve(config, free_port(), env)
    assert refused.wait(timeout=60) == 2
    said = (tmp_path / "serve.log").read_text()
    assert "refusing to serve on 0.0.0.0 without authentication" in said
    assert "OVERSPILL_TEST_MASTER_KEY, which is unset" in said
    keyed = {**env, "OVERSPILL_TEST_MASTER_KEY": "sk-test-master"}
    (tmp_path / "keyed").mkdir()
    served, url, _ = start_overspill(
        config.read_text(), tmp_path / "keyed", "--host", "0.0.0.0", env=keyed
    )
    try:
        answer = httpx.get(f"{url}/v1/models")
        assert answer.status_code == 401  # closed: the key is required
    finally:
        served.terminate()
        served.wait(timeout=30)


def test_a_host_that_is_no_address_is_refused_naming_it_and_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host name that does not resolve, or cannot be one, is refused before uvicorn starts,
    naming the host and where it was set; this machine's addresses are taken."""
    assert address_problem("127.0.0.1", 4000) is None
    assert address_problem("localhost", 4000) is None
    said = address_problem("a..b", 4000)
    assert said is not None
    assert said.startswith("cannot serve on 'a..b':")

    def unknown(*args: object, **kwargs: object) -> None:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    said = address_problem("0.0.0.O", 4000)
    assert said is not None
    assert said.startswith("cannot serve on '0.0.0.O': Name or service not known;")
    assert "--host or general_settings.host" in said
