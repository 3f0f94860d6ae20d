"""Structured logging: one JSON object per line on stderr, `extra=` fields included."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

# Attributes every LogRecord has; anything else came from `extra=` and is logged as a field.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    """Formats a record as a JSON line: time, level, logger, message and the extra fields."""

    _second = -1
    _stamp = ""

    def _timestamp(self, created: float, msecs: float) -> str:
        """ISO 8601 UTC; the date-time part is formatted once per second."""
        second = int(created)
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._stamp}.{int(msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        """The JSON line for one record."""
        line: dict[str, Any] = {
            "ts": self._timestamp(record.created, record.msecs),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure(level: str = "info") -> None:
    """Send overspill's logs (and uvicorn's) to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    for noisy in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
