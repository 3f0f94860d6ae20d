"""Shared fixtures: offline settings for litellm and an in-process app client."""

from __future__ import annotations

import asyncio
import contextlib
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path

import httpx
import pytest
from hypothesis import settings as hypothesis_settings
from starlette.types import ASGIApp, Message

from kernel.config import ModelEntry, Settings
from kernel.config_loading import parse_config
from kernel.estimator import Estimator
from kernel.metrics import REGISTRY, flush
from kernel.services import Services, Window, Windows
from kernel.spending import Spend
from kernel.store import DiskHistoryStore, HistoryStore
from kernel.types import Complete, Provider
from kernel.usage import counted
from middleware.pipeline import LAYERS, LayerFactory
from proxy.app import create_app
from proxy.system import build_system
from tests.redis_ha import own_cluster, own_sentinel, redis_cluster, redis_sentinel  # noqa: F401
from tests.redis_server import own_redis, redis_url  # noqa: F401 - fixtures for every test

pytest_plugins = ["tests.reliability"]


# Shared 2-core machines: no per-example deadline. In CI, the same examples every run.
hypothesis_settings.register_profile("dev", deadline=None)
hypothesis_settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
hypothesis_settings.load_profile("ci" if os.environ.get("CI") else "dev")

BASIC_CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 2048}
  - model_name: other
    litellm_params: {model: openai/other, api_base: "http://other.test/v1", api_key: sk-up}
general_settings:
  master_key: sk-master
"""


def settings_from(text: str = BASIC_CONFIG, env: Mapping[str, str] | None = None) -> Settings:
    """Validated settings from YAML text."""
    return parse_config(text, "config.yaml", env or {}).settings


AppClient = Callable[..., httpx.AsyncClient]


def sample(name: str, **labels: str) -> float:
    """A sample's value in overspill's process-global registry (0 when never recorded)."""
    flush()
    return REGISTRY.get_sample_value(name, labels) or 0.0


class StaticWindows:
    """Windows from a table of model name → tokens (what config would say), for unit tests."""

    def __init__(self, tokens: Mapping[str, int], source: str = "config") -> None:
        self.tokens = dict(tokens)
        self.source = source
        self.asked = 0

    async def of(self, entry: ModelEntry) -> Window | None:
        """The table's window for the entry's model name."""
        self.asked += 1
        found = self.tokens.get(entry.model_name)
        return Window(found, self.source) if found else None


def make_services(
    settings: Settings,
    store: HistoryStore,
    internal: Callable[[str], Complete],
    windows: Mapping[str, int] | Windows,
) -> Services:
    """Services for layer tests: a real store and estimator, given calls and windows; each
    call is counted against its request's Spend as the shell counts overspill's own calls."""
    table = StaticWindows(windows) if isinstance(windows, Mapping) else windows

    def own(model: str, spend: Spend | None = None) -> Complete:
        return counted(internal(model), model, model, spend or Spend("internal"))

    return Services(settings, store, Estimator(store), table, own)


@pytest.fixture
def no_aiohttp() -> Iterator[None]:
    """litellm's aiohttp transport bypasses respx; `litellm.acompletion` uses httpx here."""
    import litellm  # only the modules that use this fixture pay for the import

    previous = litellm.disable_aiohttp_transport
    litellm.disable_aiohttp_transport = True
    yield
    litellm.disable_aiohttp_transport = previous


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[DiskHistoryStore]:
    """A history store in a temporary directory."""
    history = DiskHistoryStore(tmp_path / "store")
    yield history
    await history.aclose()


@pytest.fixture
async def app_client(store: DiskHistoryStore) -> AsyncIterator[AppClient]:
    """Builds an in-process client for an app with injected providers/layers."""
    clients: list[httpx.AsyncClient] = []
    upstream = httpx.AsyncClient()  # httpx: respx answers for the upstream in these tests

    def make(
        providers: Mapping[str, Sequence[Provider]] | None = None,
        *,
        settings: Settings | None = None,
        registry: Mapping[str, LayerFactory] | None = None,
        key: str | None = "sk-master",
        served_on: str | None = None,
    ) -> httpx.AsyncClient:
        app = create_app(
            build_system(
                settings or settings_from(),
                providers=providers,
                registry=registry or LAYERS,
                client=upstream,
                store=store,
            ),
            served_on=served_on,
        )
        headers = {"authorization": f"Bearer {key}"} if key else {}
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://overspill.test",
            headers=headers,
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()
    await upstream.aclose()


@contextlib.asynccontextmanager
async def running(app: ASGIApp) -> AsyncIterator[None]:
    """The app between its ASGI lifespan startup and shutdown, as uvicorn runs it."""
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}

    async def serve() -> None:
        await app(scope, inbox.get, outbox.put)

    task = asyncio.create_task(serve())
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await task
