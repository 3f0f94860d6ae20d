"""What live config costs a request: the LiveApp dispatch (hold the current System, release it
after the last byte) against calling the same app directly.

The inner app is the smallest ASGI app (one start, one body message), so the difference is the
dispatch alone: the reference count, one extra coroutine frame, the retired check. Each round
is 1,000 requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bench.micro.conftest import Timed
from kernel.config_loading import load_config
from proxy.live import LiveApp, build_from
from proxy.system import System

SCOPE: Scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
START: Message = {"type": "http.response.start", "status": 200, "headers": []}
BODY: Message = {"type": "http.response.body", "body": b"ok"}


async def inner(scope: Scope, receive: Receive, send: Send) -> None:
    await send(START)
    await send(BODY)


async def receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def send(message: Message) -> None:
    pass


@pytest.fixture(scope="module")
def apps(
    loop: asyncio.AbstractEventLoop, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ASGIApp]]:
    folder = tmp_path_factory.mktemp("live")
    path = Path(folder) / "config.yaml"
    path.write_text(
        "model_list: [{model_name: m, litellm_params: {model: openai/m}}]\n"
        f"general_settings: {{store: {{path: '{folder / 'store'}'}}}}\n"
    )

    def make(system: System, reload: object) -> ASGIApp:
        return inner

    live = LiveApp.start(str(path), build_from(load_config(path), str(path)), make)
    yield {"direct": inner, "through LiveApp": live}
    loop.run_until_complete(live.aclose())


@pytest.mark.parametrize("app", ["direct", "through LiveApp"])
def test_dispatch(timed: Timed, apps: dict[str, ASGIApp], app: str) -> None:
    """One request through the app."""
    chosen = apps[app]
    timed("live config dispatch", lambda: chosen(SCOPE, receive, send), times=1000)
