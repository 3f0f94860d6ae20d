"""The app factory uvicorn imports in each worker: config from $OVERSPILL_CONFIG."""

from __future__ import annotations

import gc
import logging
import os
from functools import partial
from typing import NoReturn

from kernel.config_loading import ConfigError, LoadedConfig, load_config
from kernel.store import StoreError
from middleware.pipeline import MiddlewareError
from providers import deferred
from proxy import logs, tracing
from proxy.app import create_app
from proxy.cli import CONFIG_ENV, EXIT_BAD_CONFIG
from proxy.exposure import HOST_ENV
from proxy.live import LiveApp, build_from

log = logging.getLogger("overspill")


def app_from_env() -> LiveApp:
    """Load and validate the config named by $OVERSPILL_CONFIG and build the app; SIGHUP or
    `POST /overspill/config/reload` reloads it (proxy/live.py).

    A worker that cannot start (with `--workers N`, the file may have changed since the
    supervisor checked it) logs the problems as one JSON line and exits with status 2;
    uvicorn's supervisor then keeps the workers it has."""
    path = os.environ.get(CONFIG_ENV, "config.yaml")
    try:
        loaded = load_config(path)
        general = loaded.settings.general_settings
        logs.configure(general.log_level, general.log_levels)
        tracing.configure()  # OTEL_* variables; before the app is built, once per worker
        served_on = os.environ.get(HOST_ENV)  # the address `serve` bound: loopback checks Host
        app = LiveApp.start(
            path, build_from(loaded, path), partial(create_app, served_on=served_on)
        )
    except ConfigError as exc:
        _refuse(path, exc.problems)
    except (StoreError, MiddlewareError) as exc:
        _refuse(path, [str(exc)])
    gc.freeze()  # startup objects (config, modules) are never garbage: stop rescanning them
    deferred.FREEZE_AFTER_IMPORT = True  # nor are the modules a first request imports (litellm)
    _ready(loaded)
    return app


def _refuse(path: str, problems: list[str]) -> NoReturn:
    logs.configure()
    log.error("cannot start: the config cannot be used",
              extra={"config": path, "problems": problems})  # fmt: skip
    raise SystemExit(EXIT_BAD_CONFIG)


def _ready(loaded: LoadedConfig) -> None:
    log.info("ready", extra={"models": loaded.settings.model_names(), "pid": os.getpid()})
