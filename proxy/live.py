"""The running config: one `System` at a time, swapped whole on reload.

    request ─▶ LiveApp ─▶ the current generation's app (its System, its routes) ─▶ ...

A reload (SIGHUP, or `POST /overspill/config/reload`) builds and checks a complete new
System first: the file, its layers, its store (opened and pinged), its providers. Only then
is the one `current` reference swapped. A request holds the generation it started with until
its last byte (a stream until its end), so it keeps the config it started with; a retired
generation's System is closed once its last request is over. A reload that fails logs why
and changes nothing.

With `--workers N`, each worker is a LiveApp of its own. SIGHUP goes to uvicorn's supervisor,
which replaces the workers one by one (a new one must start, config and all, before an old
one is stopped gracefully); the endpoint checks the file in the worker that answers, then
asks the supervisor to do the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from kernel.config import Settings
from kernel.config_loading import ConfigError, LoadedConfig, load_config
from kernel.errors import InvalidConfig
from kernel.store import StoreError
from middleware.pipeline import LAYERS, MiddlewareError, active_layers, check_layers
from proxy import logs
from proxy.cli import WORKERS_ENV
from proxy.exposure import HOST_ENV, open_gateway_refusal
from proxy.metrics import worker_started, worker_stopped
from proxy.stores import open_store
from proxy.system import System, build_system

log = logging.getLogger("overspill.config")

RESTART_ONLY = (
    "host",
    "port",
    "graceful_shutdown_seconds",
    "max_header_bytes",
    "client_header_timeout",
    "client_body_timeout",
    "keep_alive_timeout",
)
"""general_settings a running process cannot change: they take effect on the next start."""
_CLOSE_WAIT_SECONDS = 5.0
"""At shutdown, how long requests that uvicorn cancelled get to unwind before the close."""

AppFactory = Callable[[System, Callable[[], Awaitable[dict[str, Any]]]], ASGIApp]
"""Builds the routes over a System, given the reload action (proxy.app.create_app)."""


def build_from(loaded: LoadedConfig, path: str) -> System:
    """A System for validated settings: the store opened (a relative path is relative to the
    config file), providers and layers built. Raises StoreError or MiddlewareError."""
    os.environ.update(loaded.environment)  # LiteLLM's environment_variables: litellm reads them
    general = loaded.settings.general_settings
    store = open_store(general.store, base_dir=os.path.dirname(os.path.abspath(path)))
    try:
        return build_system(loaded.settings, store=store)
    except BaseException:
        _close_soon(store)
        raise


def _close_soon(resource: Any) -> None:
    with contextlib.suppress(RuntimeError):
        asyncio.get_running_loop().create_task(resource.aclose())


@dataclass(eq=False, slots=True)
class Generation:
    """One loaded config: its System, the app over it, and the requests still using it."""

    system: System
    app: ASGIApp
    number: int
    users: int = 0
    retired: bool = False
    closing: bool = False


@dataclass
class LiveApp:
    """The ASGI app uvicorn runs: each request goes to the current generation's app."""

    path: str
    current: Generation
    make_app: AppFactory
    workers: int = 1
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _unclosed: set[Generation] = field(default_factory=set)
    _closing: set[asyncio.Task[None]] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _drained: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def start(cls, path: str, system: System, make_app: AppFactory) -> LiveApp:
        """The first generation over an already built System."""
        workers = int(os.environ.get(WORKERS_ENV, "1") or 1)
        placeholder = Generation(system, _no_app, 1)
        live = cls(path, placeholder, make_app, workers)
        placeholder.app = make_app(system, live.reload)
        return live

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve with the current generation, held until the response's last byte."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        generation = self.current
        generation.users += 1
        try:
            await generation.app(scope, receive, send)
        finally:
            generation.users -= 1
            if generation.retired and not generation.users:
                self._close(generation)

    async def reload(self) -> dict[str, Any]:
        """Re-read the config file and swap it in; raises InvalidConfig (the old one is kept).

        With several workers, the file is checked here and uvicorn's supervisor is asked to
        replace the workers (each reads it again)."""
        async with self._lock:
            loaded, system = await self._build()
            if self.workers > 1:
                await system.aclose(0)
                os.kill(os.getppid(), signal.SIGHUP)
                log.info("config checked; the workers are being replaced",
                         extra={"config": self.path, "workers": self.workers})  # fmt: skip
                return self._outcome(loaded, "restarting_workers")
            old = self.current
            new = Generation(system, _no_app, old.number + 1)
            new.app = self.make_app(system, self.reload)
            self.current = new
            self._retire(old)
            general = loaded.settings.general_settings
            logs.configure(general.log_level, general.log_levels)
            outcome = self._outcome(loaded, "reloaded", old.system.settings)
            for warning in loaded.warnings:
                log.warning(warning, extra={"config": self.path})
            for change in outcome["restart_required"]:
                log.warning(change, extra={"config": self.path})
            log.info("config reloaded", extra={"config": self.path, "generation": new.number,
                     "models": outcome["models"], "layers": outcome["layers"]})  # fmt: skip
            return outcome

    async def _build(self) -> tuple[LoadedConfig, System]:
        """Load, check and build a complete System from the file, or raise InvalidConfig."""
        try:
            loaded = await asyncio.to_thread(load_config, self.path)
            check_layers(loaded.settings, LAYERS)
            host = os.environ.get(HOST_ENV, "127.0.0.1")
            refusal = open_gateway_refusal(loaded.settings, host, loaded.warnings)
            if refusal:
                raise self._refused([refusal])
            system = build_from(loaded, self.path)
        except ConfigError as exc:
            raise self._refused(exc.problems) from None
        except (MiddlewareError, StoreError) as exc:
            raise self._refused([str(exc)]) from None
        except InvalidConfig:
            raise  # refused already (an open gateway on a network address)
        except Exception as exc:  # a provider that cannot be built; its text may hold secrets
            log.exception("config reload: building the new system failed")
            raise self._refused(
                [f"building the new system failed ({type(exc).__name__})"]
            ) from None
        try:
            await system.store.ping()
        except StoreError as exc:
            await system.aclose(0)
            raise self._refused([str(exc)]) from None
        except BaseException:  # cancelled (shutdown during a reload): never leak the new one
            _close_soon(system)
            raise
        return loaded, system

    def _refused(self, problems: list[str]) -> InvalidConfig:
        log.error("config reload refused; the running config is kept",
                  extra={"config": self.path, "problems": problems})  # fmt: skip
        listed = "; ".join(problems)
        return InvalidConfig(f"{self.path} cannot be used, the running config is kept: {listed}")

    def _outcome(
        self, loaded: LoadedConfig, status: str, old: Settings | None = None
    ) -> dict[str, Any]:
        settings = loaded.settings
        return {
            "status": status,
            "config": self.path,
            "generation": self.current.number,
            "models": settings.model_names(),
            "layers": list(active_layers(settings)),
            "restart_required": restart_required(old, settings) if old else [],
            "warnings": loaded.warnings,
        }

    def _retire(self, generation: Generation) -> None:
        if generation.retired:
            return
        generation.retired = True
        if generation.users:
            self._unclosed.add(generation)
            self._drained.clear()
        else:
            self._close(generation)

    def _close(self, generation: Generation) -> None:
        """Close a retired generation's System (its last request is over), once."""
        if generation.closing:
            return
        generation.closing = True
        self._unclosed.discard(generation)
        if not self._unclosed:
            self._drained.set()
        task = asyncio.get_running_loop().create_task(generation.system.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _on_sighup(self) -> None:
        task = asyncio.get_running_loop().create_task(self._reload_logged())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reload_logged(self) -> None:
        with contextlib.suppress(InvalidConfig):  # already logged, with its problems
            await self.reload()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """Startup: take SIGHUP. Shutdown (after uvicorn let requests finish for the grace
        period): close every System once its requests are over, background jobs drained."""
        loop = asyncio.get_running_loop()
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                worker_started()
                with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                    loop.add_signal_handler(signal.SIGHUP, self._on_sighup)  # main thread only
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                    loop.remove_signal_handler(signal.SIGHUP)
                await self.aclose()
                worker_stopped()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def settle(self) -> None:
        """Wait until the retired Systems whose requests are over are closed."""
        await asyncio.gather(*self._closing, return_exceptions=True)

    async def aclose(self) -> None:
        """Retire the current generation and wait until every System is closed."""
        for task in list(self._tasks):
            task.cancel()
        self._retire(self.current)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drained.wait(), _CLOSE_WAIT_SECONDS)
        for generation in list(self._unclosed):  # requests that never unwound: close anyway
            self._close(generation)
        await self.settle()


def restart_required(old: Settings, new: Settings) -> list[str]:
    """The restart-only settings a reload changed, each said as such."""
    before, after = old.general_settings, new.general_settings
    return [
        f"general_settings.{name} changed ({getattr(before, name)!r} -> "
        f"{getattr(after, name)!r}): takes effect on restart; the running value is kept"
        for name in RESTART_ONLY
        if getattr(before, name) != getattr(after, name)
    ]


async def _no_app(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("a generation is used before its app is built")
