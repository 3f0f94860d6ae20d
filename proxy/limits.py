"""What a client connection may cost: header bytes, and how long a request may take to arrive.

    connect ─▶ idle ≤ keep_alive_timeout ─▶ first byte ─▶ line + headers ≤ client_header_timeout
            ─▶ body ≤ client_body_timeout ─▶ response ─▶ idle ≤ keep_alive_timeout ─▶ ...

The numbers come from `general_settings` (read at startup). `overspill serve` hands them to
its workers in one environment variable (the workers are separate processes that read the
environment, as they read the config path); the server's protocol (proxy/connection.py)
enforces them. The body's size bound stays `max_body_bytes`, enforced while the chat endpoint
reads (proxy/endpoint.py). Nothing here knows which server runs: the wiring is in connection.py.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import orjson

from kernel.config import GeneralSettings

LIMITS_ENV = "OVERSPILL_CONNECTION_LIMITS"
"""The limits `serve` gives its workers, as JSON."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds on one client connection (the defaults are GeneralSettings' defaults)."""

    max_header_bytes: int = 64 * 1024
    header_seconds: float = 10.0
    body_seconds: float = 60.0
    keep_alive_seconds: int = 5

    @classmethod
    def of(cls, general: GeneralSettings) -> ConnectionLimits:
        """The limits `general_settings` sets."""
        return cls(
            max_header_bytes=general.max_header_bytes,
            header_seconds=general.client_header_timeout,
            body_seconds=general.client_body_timeout,
            keep_alive_seconds=general.keep_alive_timeout,
        )

    def export(self) -> None:
        """Put the limits where the workers read them (before the server starts)."""
        os.environ[LIMITS_ENV] = orjson.dumps(asdict(self)).decode()

    @classmethod
    def exported(cls) -> ConnectionLimits:
        """The limits `export` put in the environment; the defaults when there are none."""
        text = os.environ.get(LIMITS_ENV)
        return cls(**orjson.loads(text)) if text else cls()
