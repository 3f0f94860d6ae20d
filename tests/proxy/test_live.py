"""Live config: a reload swaps one whole System; requests keep theirs; bad files change nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kernel.config_loading import load_config
from kernel.errors import InvalidConfig
from proxy.app import create_app
from proxy.exposure import HOST_ENV
from proxy.live import LiveApp, build_from
from proxy.system import System

MODEL = (
    "  - model_name: {name}\n    litellm_params: {{model: openai/m, api_base: http://up.test/v1}}\n"
)


def config(*names: str, extra: str = "") -> str:
    models = "".join(MODEL.format(name=name) for name in names)
    return (
        f"model_list:\n{models}"
        f"general_settings: {{master_key: sk-master, store: {{path: store}}{extra}}}\n"
    )


def write(path: Path, text: str) -> None:
    path.write_text(text)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    written = tmp_path / "config.yaml"
    write(written, config("first"))
    return written


class Held:
    """A test app per System: each request records its System and waits for `gate`."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.served: list[System] = []
        self.closed_while_serving: list[bool] = []

    def make(self, system: System, reload: Callable[[], Awaitable[dict[str, Any]]]) -> ASGIApp:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            self.entered.set()
            await self.gate.wait()
            self.served.append(system)
            self.closed_while_serving.append(system.jobs.closed)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        return app


async def call(app: ASGIApp) -> None:
    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        pass

    await app({"type": "http", "method": "GET", "path": "/", "headers": []}, receive, send)


@pytest.fixture
async def held(path: Path) -> AsyncIterator[tuple[LiveApp, Held]]:
    app = Held()
    live = LiveApp.start(str(path), build_from(load_config(path), str(path)), app.make)
    yield live, app
    await live.aclose()


async def test_a_request_keeps_its_system_and_the_old_one_closes_after_it(
    held: tuple[LiveApp, Held], path: Path
) -> None:
    """A reload mid-request swaps the System; the old one closes only when the request ends."""
    live, app = held
    first = live.current.system
    in_flight = asyncio.ensure_future(call(live))
    await app.entered.wait()
    write(path, config("first", "second"))
    outcome = await live.reload()
    assert (outcome["status"], outcome["generation"], outcome["models"]) == (
        "reloaded", 2, ["first", "second"],
    )  # fmt: skip
    assert live.current.system is not first
    assert not first.jobs.closed
    app.gate.set()
    await in_flight
    await live.settle()
    assert app.served == [first]
    assert first.jobs.closed
    await call(live)
    assert app.served[-1] is live.current.system


async def test_shutdown_closes_the_system_only_after_its_last_request(
    held: tuple[LiveApp, Held],
) -> None:
    """The app's shutdown waits for a request still running before it closes the System."""
    live, app = held
    system = live.current.system
    in_flight = asyncio.ensure_future(call(live))
    await app.entered.wait()
    closing = asyncio.ensure_future(live.aclose())
    asyncio.get_running_loop().call_soon(app.gate.set)  # after the shutdown began waiting
    await closing
    await in_flight
    assert app.closed_while_serving == [False]
    assert system.jobs.closed


async def test_a_bad_file_is_refused_and_nothing_changes(
    held: tuple[LiveApp, Held], path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every YAML problem is named (and logged); the running System stays current and open."""
    live, _ = held
    first = live.current
    write(path, config("first").replace("model: openai/m, ", ""))
    with (
        caplog.at_level(logging.ERROR, logger="overspill.config"),
        pytest.raises(InvalidConfig) as refused,
    ):
        await live.reload()
    assert refused.value.error_code() == "invalid_config"
    assert "model_list[0].litellm_params.model: field required" in refused.value.message
    assert live.current is first
    assert not first.system.jobs.closed
    (record,) = caplog.records
    assert record.problems == ["model_list[0].litellm_params.model: field required"]  # type: ignore[attr-defined]
    assert "sk-master" not in caplog.text


async def test_unknown_layers_and_unusable_stores_are_refused(
    held: tuple[LiveApp, Held], path: Path, tmp_path: Path
) -> None:
    """The layers and the store are checked before the swap, not discovered by a request."""
    live, _ = held
    write(path, config("first") + "middleware: [nope]\n")
    with pytest.raises(InvalidConfig, match=r"middleware\[0\]: unknown layer 'nope'"):
        await live.reload()
    write(tmp_path / "a-file", "")
    write(path, config("first").replace("path: store", "path: a-file"))
    with pytest.raises(InvalidConfig, match=r"general_settings.store.path .* cannot be used"):
        await live.reload()
    assert live.current.number == 1


async def test_restart_only_settings_are_reported_not_ignored(
    held: tuple[LiveApp, Held], path: Path
) -> None:
    """A changed port or grace period is named as needing a restart."""
    live, _ = held
    write(path, config("first", extra=", port: 4100, graceful_shutdown_seconds: 5"))
    changes = (await live.reload())["restart_required"]
    assert [change.split(" changed")[0] for change in changes] == [
        "general_settings.port", "general_settings.graceful_shutdown_seconds",
    ]  # fmt: skip


async def test_the_reload_endpoint_needs_the_master_key_and_swaps_the_routes(path: Path) -> None:
    """POST /overspill/config/reload: 401 without the key; with it the new models are served."""
    live = LiveApp.start(str(path), build_from(load_config(path), str(path)), create_app)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=live), base_url="http://o.test")
    key = {"authorization": "Bearer sk-master"}
    async with client:
        assert (await client.post("/overspill/config/reload")).status_code == 401
        write(path, config("first", "second"))
        answer = await client.post("/overspill/config/reload", headers=key)
        assert answer.json()["models"] == ["first", "second"]
        listed = (await client.get("/v1/models", headers=key)).json()["data"]
        assert [model["id"] for model in listed] == ["first", "second"]
        write(path, "model_list: [{model_name: a}]\n")  # no litellm_params
        refused = await client.post("/overspill/config/reload", headers=key)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "invalid_config"
    await live.aclose()


async def test_a_reload_that_would_open_a_networked_gateway_is_refused(
    held: tuple[LiveApp, Held], path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served on 0.0.0.0, a new file without a master key or client keys is refused (the
    running config is kept), as `serve` would refuse to start with it."""
    live, _ = held
    first = live.current
    monkeypatch.setenv(HOST_ENV, "0.0.0.0")
    write(path, config("first").replace("master_key: sk-master, ", ""))
    with pytest.raises(InvalidConfig) as refused:
        await live.reload()
    assert "refusing to serve on 0.0.0.0 without authentication" in refused.value.message
    assert live.current is first
