"""Context windows and modes from litellm's bundled model map, read as data (litellm is not
imported).

litellm ships `model_prices_and_context_window_backup.json`; reading it directly gives every
known model's `max_input_tokens` and `mode` without paying for litellm's import on the fast
path. A deployment's mode (what kind of model it is) is its configured `model_info.mode`, else
the map's, as LiteLLM merges them; it decides which of overspill's routes the model serves
(kernel/model_modes.py).
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
from kernel.model_modes import API_ROUTES, CONVERSATION_APIS, MODE_APIS, apis_of

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
    mode: str | None
    """`mode`: `chat`, `embedding`, `completion`, ... (None when the map gives none)."""


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
        mode=mode if isinstance(mode := info.get("mode"), str) and mode in MODE_APIS else None,
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


def known_mode(model: str) -> str | None:
    """litellm's `mode` for a litellm model string (`openai/text-embedding-3-small`)."""
    return next((info.mode for info in _entries(model) if info.mode is not None), None)


def mode_of(entry: ModelEntry, model: str | None = None) -> str | None:
    """A deployment's mode: `model_info.mode` as configured, else litellm's map's for its
    model (or for `model`, a name a wildcard deployment serves)."""
    return entry.mode or known_mode(model or entry.litellm_params.model)


PROVIDER_LACKS: dict[str, frozenset[str]] = {"anthropic": frozenset({"embeddings"})}
"""APIs a provider's own API does not have, whatever its model (Anthropic has no embeddings)."""

_ALL_APIS = frozenset(API_ROUTES) | CONVERSATION_APIS


def apis_served(entry: ModelEntry, model: str | None = None) -> frozenset[str] | None:
    """The APIs a deployment serves (its mode's, less what its provider lacks); None when
    nothing is known against any (the upstream decides). `model`: as for `mode_of`."""
    apis = apis_of(mode_of(entry, model))
    lacks = PROVIDER_LACKS.get(entry.litellm_params.provider)
    if lacks is None:
        return apis
    return (_ALL_APIS if apis is None else apis) - lacks


def routes_served(entry: ModelEntry, model: str | None = None) -> list[str]:
    """The routes a deployment serves, as `/v1/models` lists them. `model`: as for `mode_of`."""
    apis = apis_served(entry, model)
    return [route for api, route in API_ROUTES.items() if apis is None or api in apis]


def route_refusal(entry: ModelEntry, api: str, name: str | None = None) -> str | None:
    """Why the deployment cannot serve `api` (the model called `name` by the client), naming
    the routes it does serve; None when it can, or when nobody knows it cannot."""
    apis = apis_served(entry)
    if apis is None or api in apis or api not in _ALL_APIS:
        return None
    route = API_ROUTES.get(api, api)
    provider = entry.litellm_params.provider
    if api in PROVIDER_LACKS.get(provider, ()):
        why = f"{provider}'s API has no {route}"
    elif entry.mode is not None:
        why = f"its model_info.mode is {entry.mode}"
    else:
        why = f"litellm's model map gives it mode {mode_of(entry)} (model_info.mode overrides)"
    routes = routes_served(entry)
    serves = ", ".join(routes) if routes else "none of overspill's routes"
    return f"model {name or entry.model_name!r} cannot serve {route}: {why}; it serves {serves}"


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
