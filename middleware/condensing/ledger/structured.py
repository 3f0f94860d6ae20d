"""Structured tool results: a JSON answer read as its values, not as one long sentence. Pure.

Most tools an agent calls answer in JSON (function calling, MCP, REST APIs): a user's
profile, a booking, a list of search hits, often on one line. Read as prose it is one
sentence the ledger clips to `select.MAX_LINE_CHARS`, keeping the first few values and losing
the rest (a payment id, a booking code, a date) however often the agent needs them later.
Read as data, each value is a ``path = value`` setting, an object or array whose compact form
fits `MAX_SETTING_CHARS` one setting (``payment_methods.gift_card_71 = {source: gift_card,
amount: 60}``), riding on the ``tool settings`` lines that name the call that returned it, as
a config file's settings do; an array of `LISTING_ITEMS` objects or more (search hits, order
lines) is a listing whose each element is one row (``flights.2: flight_number = HAT045; ...``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_JSON_CHARS", "Structured", "read_json"]

MAX_JSON_CHARS = 64_000
"""A longer answer is not parsed (the ledger reads its ends as text)."""
LISTING_ITEMS = 3
"""Objects in one array that make it a listing (as ``select.LISTING_ROWS`` lines do)."""
MAX_VALUE_CHARS = 120
"""A longer string value is cut (a description, a document): a setting is a value."""
MAX_SETTING_CHARS = 160
"""An object or array whose compact form is longer is read item by item."""


@dataclass(slots=True)
class Structured:
    """A JSON answer's settings and its listings' rows, in document order."""

    settings: list[str] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)


def read_json(text: str) -> Structured | None:
    """The settings and rows of `text` when it is a JSON object or array (else None)."""
    text = text.strip()
    if not text or text[0] not in "{[" or len(text) > MAX_JSON_CHARS:
        return None
    try:
        value = json.loads(text)
        if not isinstance(value, dict | list) or not value:
            return None
        found = Structured()
        _walk(value, "", found)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read as data
        return None
    return found if found.settings or found.rows else None


def _walk(value: Any, path: str, found: Structured) -> None:
    """`value`'s settings: itself on one setting when it is a scalar or its compact form
    fits `MAX_SETTING_CHARS`, else each of its items; an array of `LISTING_ITEMS` objects
    or more is a listing, one row per item."""
    if isinstance(value, list) and sum(isinstance(v, Mapping) for v in value) >= LISTING_ITEMS:
        for index, item in enumerate(value):
            row = Structured()
            _walk(item, "", row)
            cells = "; ".join([*row.settings, *row.rows])
            if cells:
                found.rows.append(f"{_join(path, index)}: {cells}")
        return
    if path and (not isinstance(value, Mapping | list) or not value):
        found.settings.append(f"{path} = {_compact(value)}")
        return
    if path:
        whole = _compact(value)
        if len(whole) <= MAX_SETTING_CHARS:
            found.settings.append(f"{path} = {whole}")
            return
    items = value.items() if isinstance(value, Mapping) else enumerate(value)
    for key, item in items:
        _walk(item, _join(path, key), found)


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _compact(value: Any) -> str:
    """A JSON value in a compact flow form: ``{brand: visa, last_four: 7447}``, strings
    unquoted and cut at `MAX_VALUE_CHARS`."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_compact(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_compact(v) for v in value) + "]"
    if isinstance(value, str):
        text = " ".join(value.split())
        return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"
    return json.dumps(value)
