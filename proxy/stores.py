"""The store backend a config names, opened: diskcache on one host, Redis for replicas."""

from __future__ import annotations

import os
from pathlib import Path

from kernel.config import StoreSettings
from kernel.store import DiskHistoryStore, HistoryStore, StoreError


def open_store(settings: StoreSettings, *, base_dir: str | None = None) -> HistoryStore:
    """Build the configured backend; a relative path is relative to `base_dir` (or the cwd)."""
    if settings.backend == "redis":
        # redis-py is imported only when used: it takes ~0.1 s, and imports opentelemetry
        # whenever that is installed, traced or not
        from kernel.store_redis import open_redis_store

        return open_redis_store(settings)
    if settings.backend != "diskcache":
        raise StoreError(f"general_settings.store.backend: unknown backend {settings.backend!r}")
    path = Path(settings.path).expanduser()
    if not path.is_absolute():
        path = Path(base_dir if base_dir is not None else os.getcwd()) / path
    try:
        path.mkdir(parents=True, exist_ok=True)
        return DiskHistoryStore(
            path,
            ttl_seconds=settings.ttl_seconds,
            ttl_by_kind=settings.ttl_seconds_by_kind,
            size_limit_bytes=settings.size_limit_bytes,
        )
    except ValueError as exc:
        raise StoreError(f"general_settings.store: {exc}") from exc
    except (OSError, StoreError) as exc:
        raise StoreError(f"general_settings.store.path ({path}) cannot be used: {exc}") from exc
