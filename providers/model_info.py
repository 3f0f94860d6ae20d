"""Context windows from litellm's bundled model map, read as data (litellm is not imported).

litellm ships `model_prices_and_context_window_backup.json`; reading it directly gives every
known model's `max_input_tokens` without paying for litellm's import on the fast path.
"""

from __future__ import annotations

import functools
import importlib.util
import ipaddress
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import orjson

from kernel.config import ModelEntry

_MAP_FILE = "model_prices_and_context_window_backup.json"


class Known(NamedTuple):
    """What overspill reads of one model in the map (the whole entry is ~1 KB of prices)."""

    window: int | None
    """`max_input_tokens`, else `max_tokens`."""
    priced: bool
    """It has an `input_cost_per_token` above zero: a paid API, never a self-hosted server."""
    provider: str | None
    """`litellm_provider`."""
    chat: bool
    """`mode: chat`."""
    max_output: int | None
    """`max_output_tokens`, else `max_tokens`: what litellm sends as an Anthropic request's
    `max_tokens` when the client sets none."""
    system_messages: bool
    """`supports_system_messages: true`: litellm sends system messages as the model's own
    system instruction (Gemini's `system_instruction`), else as user text."""


@functools.cache
def _model_map() -> dict[str, Known]:
    """The map, reduced to the fields read here (half the memory of the parsed file)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / _MAP_FILE
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {name: _known(info) for name, info in data.items() if isinstance(info, dict)}


def _known(info: dict[str, Any]) -> Known:
    window = info.get("max_input_tokens") or info.get("max_tokens")
    cost = info.get("input_cost_per_token")
    provider = info.get("litellm_provider")
    return Known(
        window=window if isinstance(window, int) and window > 0 else None,
        priced=isinstance(cost, int | float) and cost > 0,
        provider=str(provider) if provider is not None else None,
        chat=info.get("mode") == "chat",
        max_output=_positive(info.get("max_output_tokens") or info.get("max_tokens")),
        system_messages=info.get("supports_system_messages") is True,
    )


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def _entries(model: str) -> list[Known]:
    """The map's entries for a litellm model string: as written, then without its provider
    (`anthropic/claude-...` → `claude-...`)."""
    table = _model_map()
    _, _, bare = model.partition("/")
    return [table[key] for key in (model, bare) if key and key in table]


def known_window(model: str) -> int | None:
    """litellm's `max_input_tokens` for a litellm model string (`anthropic/claude-...`)."""
    return next((info.window for info in _entries(model) if info.window is not None), None)


def known_max_output(model: str) -> int | None:
    """litellm's `max_output_tokens` for a litellm model string (its `get_max_tokens`)."""
    return next((info.max_output for info in _entries(model) if info.max_output), None)


def known_system_messages(model: str) -> bool:
    """Whether litellm's map says the model takes system messages (unknown: it does not)."""
    found = _entries(model)
    return bool(found) and found[0].system_messages


def context_window(entry: ModelEntry) -> int | None:
    """The window to use: config first, then litellm's map; None when nobody knows."""
    return entry.context_window() or known_window(entry.litellm_params.model)


@functools.cache
def provider_models(provider: str) -> tuple[str, ...]:
    """The chat models litellm's map knows for a provider (`openai` → `gpt-4o`, ...), as its
    keys spell them; what a wildcard `model_name` lists on `/v1/models`."""
    return tuple(
        name for name, info in _model_map().items() if info.provider == provider and info.chat
    )


@functools.cache
def known_providers() -> frozenset[str]:
    """Every provider litellm's map names."""
    return frozenset(info.provider for info in _model_map().values() if info.provider is not None)


SELF_HOSTED_PROVIDERS = ("ollama", "ollama_chat", "hosted_vllm", "vllm", "llamafile", "lm_studio")
"""litellm providers that are always a server the user runs."""

PRIVATE_SUFFIXES = (".localhost", ".local", ".internal", ".svc.cluster.local")
"""Host names that resolve only inside a machine or a private network."""


def self_hosted(entry: ModelEntry) -> bool:
    """Whether a deployment is a server the user runs (an extra prompt read costs only its idle
    time): a self-hosted provider, or an `api_base` on this machine, a private network, or a
    bare service name (`http://llama:8080`). A priced model in litellm's map never is."""
    params = entry.litellm_params
    found = _entries(params.model)
    if found and found[0].priced:
        return False
    if params.provider in SELF_HOSTED_PROVIDERS:
        return True
    host = urlsplit(params.api_base or "").hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        # no `.` in the name: `localhost`, a docker compose or Kubernetes service name
        return bool(host) and ("." not in host or host.endswith(PRIVATE_SUFFIXES))
    return address.is_private or address.is_loopback
