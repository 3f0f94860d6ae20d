"""The app factory uvicorn imports in each worker: config from $OVERSPILL_CONFIG."""

from __future__ import annotations

import logging
import os

from starlette.applications import Starlette

from proxy import logs
from proxy.app import create_app
from proxy.cli import CONFIG_ENV
from proxy.config import load_config


def app_from_env() -> Starlette:
    """Load and validate the config named by $OVERSPILL_CONFIG and build the app."""
    loaded = load_config(os.environ.get(CONFIG_ENV, "config.yaml"))
    logs.configure(loaded.settings.general_settings.log_level)
    app = create_app(loaded.settings)
    logging.getLogger("overspill").info(
        "ready", extra={"models": loaded.settings.model_names(), "pid": os.getpid()}
    )
    return app
