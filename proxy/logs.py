"""Structured logging: one JSON object per line on stderr.

Fields passed with `extra=` are logged only for overspill's own loggers (`overspill` and its
children): other libraries stamp their own attributes on records (litellm's redaction filter
adds a `litellm_redacted` marker object to uvicorn's), and those never reach the line.

Every line, whoever logged it (overspill, litellm, uvicorn, a traceback), passes the process's
redactor (kernel/redaction.py) last: no configured secret reaches the log.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

import orjson

from kernel import redaction

OWN_LOGGER = "overspill"
LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
"""What `litellm` names in `general_settings.log_levels`."""
_UVICORN_LOGGERS = ("uvicorn", "uvicorn.error")
_ACCESS_LOGGER = "uvicorn.access"
"""Off: a chat request's one line is overspill's (`overspill.request`), not a second one."""
_QUIET = (*LITELLM_LOGGERS, "httpx", "httpcore")
"""Libraries that log every call at INFO: warnings only, unless `log_levels` says otherwise."""

# Attributes every LogRecord has; anything else came from `extra=` (or from a foreign filter).
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}
_tuned: dict[str, str] = {}
"""The loggers whose level the last `configure` set, and to what (reset by the next one)."""


class JsonFormatter(logging.Formatter):
    """Formats a record as a JSON line: time, level, logger, message and overspill's fields."""

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
        if _is_own(record.name):
            for key, value in record.__dict__.items():
                if key not in _STANDARD and not key.startswith("_"):
                    line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return redaction.redactor.redact(orjson.dumps(line, default=str).decode())


def _is_own(name: str) -> bool:
    return name == OWN_LOGGER or name.startswith("overspill.")


def configure(level: str = "info", levels: Mapping[str, str] | None = None) -> None:
    """Send every log (overspill's, uvicorn's, litellm's) to stderr as JSON lines, at `level`
    with per-logger `levels` over it. Safe to call again (a reload, or after litellm's import
    gave its loggers their own plain-text handler)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in (*_UVICORN_LOGGERS, *LITELLM_LOGGERS):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger(_ACCESS_LOGGER).handlers[:] = []
    logging.getLogger(_ACCESS_LOGGER).propagate = False
    wanted = {name: "warning" for name in _QUIET}
    for name, named_level in (levels or {}).items():
        for target in LITELLM_LOGGERS if name == "litellm" else (name,):
            wanted[target] = named_level
    for name in _tuned.keys() - wanted.keys():
        logging.getLogger(name).setLevel(logging.NOTSET)
    for name, named_level in wanted.items():
        logging.getLogger(name).setLevel(named_level.upper())
    _tuned.clear()
    _tuned.update(wanted)


def adopt_litellm_loggers() -> None:
    """After litellm's import (a litellm-path model's first request): its loggers lose the
    plain-text handler it gave them and log as JSON lines through the root again, and the
    levels it set on other loggers (httpx) are the config's again."""
    for name in LITELLM_LOGGERS:
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    for name, named_level in _tuned.items():
        logging.getLogger(name).setLevel(named_level.upper())
