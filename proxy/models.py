"""`GET /v1/models`: the configured model names with their context windows and routes;
`GET /v1/models/{model}` one of them (the OpenAI SDK's `models.retrieve`), a 404 in OpenAI's
shape for a name not listed.

Each model object carries both APIs' fields, so either SDK reads it whole: OpenAI's (`id`,
`object`, `created`, `owned_by`) and Anthropic's (`type`, `display_name`, `created_at`, and
`max_input_tokens`, the window), and the list Anthropic's paging fields (`has_more`,
`first_id`, `last_id`): every model on one page, or the page Anthropic's `limit`, `after_id`
and `before_id` ask for (`page_of`).

Each model's `routes` are the API routes it serves (`/v1/chat/completions`, `/v1/completions`,
`/v1/embeddings`), by its mode (`model_info.mode`, else litellm's map's; see
kernel/model_modes.py): a model whose mode nobody knows lists every route (its upstream decides).

Each name's window is the one the layers plan with (providers/windows.py): configured, else
discovered from Ollama, else litellm's map. Deployments with `ollama.list_local_models` also
list their server's local models (`/api/tags`) with the windows they would run with.

As in LiteLLM's proxy: `router_settings.model_group_alias` names are listed unless `hidden`,
and a wildcard `model_name` (`openai/*`) is listed as itself and expanded to the chat models
litellm's map knows for its provider (`openai/gpt-4o`, ...; LiteLLM lists every mode, overspill
serves chat only).
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from kernel.config import ModelEntry
from kernel.errors import InvalidChatRequest, ModelNotFound
from kernel.model_modes import API_ROUTES
from kernel.wildcards import is_wildcard
from providers.model_info import known_providers, known_window, provider_models, routes_served
from providers.ollama import DiscoveryFailed, OllamaWindows, api_base_of
from proxy.system import System

log = logging.getLogger("overspill.models")

STARTED = int(time.time())
"""A configured model's `created`: when this process started (the same on every listing, so a
client comparing two answers sees one model)."""


async def models_body(
    system: System,
    allows: Callable[[str], bool] | None = None,
    query: Mapping[str, str] | None = None,
) -> bytes:
    """The `/v1/models` answer (OpenAI's list shape, plus `context_window` and `routes`); with
    `allows`, only the names it allows (a client key limited to some models); `query`'s
    Anthropic paging parameters choose a page (`page_of`)."""
    data, more = page_of(await listed(system, allows), query or {})
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    page = {"object": "list", "data": data, "has_more": more, "first_id": first, "last_id": last}
    return orjson.dumps(page)


DEFAULT_PAGE = 20
"""Anthropic's page size when a paging parameter is given without `limit`."""
MAX_PAGE = 1000
"""Anthropic's largest `limit`."""


def page_of(
    data: Sequence[dict[str, Any]], query: Mapping[str, str]
) -> tuple[list[dict[str, Any]], bool]:
    """The models of the page `query` asks for, and whether more follow it, by Anthropic's
    paging (`limit`, 1 to 1,000, default 20; `after_id` or `before_id`, a listed id): without
    any of them, every model on one page (OpenAI's list has no pages). InvalidChatRequest
    naming the parameter otherwise."""
    after, before, limit = query.get("after_id"), query.get("before_id"), query.get("limit")
    if after is None and before is None and limit is None:
        return list(data), False
    if after is not None and before is not None:
        raise InvalidChatRequest("give after_id or before_id, not both", param="before_id")
    size = _limit(limit)
    ids = [item["id"] for item in data]
    if before is not None:
        end = _position(ids, before, "before_id")
        start = max(0, end - size)
        return list(data[start:end]), start > 0
    start = _position(ids, after, "after_id") + 1 if after is not None else 0
    return list(data[start : start + size]), start + size < len(data)


def _limit(given: str | None) -> int:
    if given is None:
        return DEFAULT_PAGE
    if given.isascii() and given.isdigit() and 1 <= int(given) <= MAX_PAGE:
        return int(given)
    raise InvalidChatRequest(
        f"limit must be a whole number from 1 to {MAX_PAGE}, got {given[:20]!r}", param="limit"
    )


def _position(ids: Sequence[str], wanted: str, name: str) -> int:
    try:
        return ids.index(wanted)
    except ValueError:
        raise InvalidChatRequest(
            f"{name} {wanted[:100]!r} is not a model /v1/models lists for this key", param=name
        ) from None


async def model_body(
    system: System, name: str, allows: Callable[[str], bool] | None = None
) -> bytes:
    """The `/v1/models/{model}` answer: the listed model called `name` (ModelNotFound when
    none is, or the client's key may not use it), no other model's window looked up."""
    if allows is None or allows(name):
        for item in await listed(system, allows, only=name):
            return orjson.dumps(item)
    raise ModelNotFound(
        f"model {name!r} is not listed by overspill: GET /v1/models lists the models this key "
        "may use",
        param="model",
    )


async def listed(
    system: System, allows: Callable[[str], bool] | None = None, only: str | None = None
) -> list[dict[str, Any]]:
    """Every model `/v1/models` lists (those `allows` allows); with `only`, the first of them
    called that, if any, for which only that name's window is looked up (a window can take
    a call to an Ollama server)."""
    created = STARTED
    settings = system.settings
    windows: dict[str, int | None] = {}
    routes: dict[str, list[str]] = {}
    for name in settings.model_names():
        if only is not None and name != only:
            continue
        entry = None if is_wildcard(name) else system.entries.get(name)
        window = await system.windows.of(entry) if entry else None
        windows[name] = window.tokens if window else None
        routes[name] = routes_served(entry) if entry else list(API_ROUTES.values())
    for alias, item in settings.router_settings.model_group_alias.items():
        entry = system.entries.get(alias)
        if only is not None and alias != only:
            continue
        if not item.hidden and alias not in windows and entry is not None:
            window = await system.windows.of(entry)
            windows[alias] = window.tokens if window else None
            routes[alias] = routes_served(entry)
    for entry in settings.model_list:
        if is_wildcard(entry.model_name):
            for name in wildcard_models(entry):
                if only is not None and name != only:
                    continue
                windows.setdefault(name, known_window(name))
                routes.setdefault(name, routes_served(entry, name))
    data: list[dict[str, Any]] = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "overspill",
            "context_window": tokens,
            "routes": routes[name],
        }
        for name, tokens in windows.items()
    ]
    for entry in settings.model_list:
        if only is not None and data:
            break
        if entry.ollama.list_local_models and not entry.missing_env:
            data += await local_ollama_models(system.ollama, entry, only)
    if allows is not None:
        data = [item for item in data if allows(item["id"])]
    return [_both_shapes(item) for item in data[: 1 if only is not None else None]]


def _both_shapes(item: dict[str, Any]) -> dict[str, Any]:
    """A model object with Anthropic's fields beside OpenAI's (`context_window` as
    `max_input_tokens`, when known)."""
    made = datetime.datetime.fromtimestamp(item["created"], datetime.UTC)
    anthropic = {
        "type": "model",
        "display_name": item["id"],
        "created_at": made.isoformat().replace("+00:00", "Z"),
    }
    if item.get("context_window") is not None:
        anthropic["max_input_tokens"] = item["context_window"]
    return {**item, **anthropic}


async def local_ollama_models(
    ollama: OllamaWindows, entry: ModelEntry, only: str | None = None
) -> list[dict[str, Any]]:
    """An Ollama server's local models (`/api/tags`) with their windows, for /v1/models; with
    `only`, just the one called that (no other's window asked for)."""
    base = api_base_of(entry)
    try:
        local = await ollama.local_models(base)
    except DiscoveryFailed as exc:
        log.warning(
            "cannot list Ollama's local models", extra={"api_base": base, "error": str(exc)}
        )
        return []
    listed = []
    for model in local:
        if only is not None and model.name != only:
            continue
        params = entry.litellm_params.model_copy(update={"model": f"ollama_chat/{model.name}"})
        one = entry.model_copy(update={"litellm_params": params})
        window = await ollama.window(one)
        listed.append(
            {
                "id": model.name,
                "object": "model",
                "created": 0,
                "owned_by": "ollama",
                "context_window": window.num_ctx,
                "context_window_source": window.source,
                "routes": routes_served(one),
                "configured": False,
                "server": entry.model_name,
            }
        )
    return listed


def wildcard_models(entry: ModelEntry) -> list[str]:
    """The names a wildcard entry lists: litellm's known chat models for its provider, named
    the way the pattern serves them (LiteLLM's `get_known_models_from_wildcard`)."""
    model = entry.litellm_params.model
    expand = entry.model_name
    if expand == "*" and "*" in model and "/" in model:
        expand = model
    prefix, sep, suffix = expand.partition("/")
    if not sep:
        return []
    models = list(provider_models(model.partition("/")[0] if "/" in model else prefix))
    if suffix != "*":
        start = suffix.replace("*", "")
        narrowed = [name for name in models if name.startswith(start)]
        models = narrowed or [f"{start}{name}" for name in models]
    named = []
    for name in models:
        if not name.startswith(prefix):
            leading, slash, rest = name.partition("/")
            name = (
                f"{prefix}/{rest}" if slash and leading in known_providers() else f"{prefix}/{name}"
            )
        named.append(name)
    return named
