"""`GET /v1/models`: the configured model names with their context windows.

Each name's window is the one the layers plan with (providers/windows.py): configured, else
discovered from Ollama, else litellm's map. Deployments with `ollama.list_local_models` also
list their server's local models (`/api/tags`) with the windows they would run with.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from kernel.config import ModelEntry
from providers.ollama import DiscoveryFailed, OllamaWindows, api_base_of
from proxy.system import System

log = logging.getLogger("overspill.models")


async def models_body(system: System) -> bytes:
    """The `/v1/models` answer (OpenAI's list shape, plus `context_window`)."""
    created = int(time.time())
    data = []
    for name in system.settings.model_names():
        window = await system.windows.of(system.entries[name])
        data.append(
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "overspill",
                "context_window": window.tokens if window else None,
            }
        )
    for entry in system.settings.model_list:
        if entry.ollama.list_local_models and not entry.missing_env:
            data += await local_ollama_models(system.ollama, entry)
    return orjson.dumps({"object": "list", "data": data})


async def local_ollama_models(ollama: OllamaWindows, entry: ModelEntry) -> list[dict[str, Any]]:
    """An Ollama server's local models (`/api/tags`) with their windows, for /v1/models."""
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
        params = entry.litellm_params.model_copy(update={"model": f"ollama_chat/{model.name}"})
        window = await ollama.window(entry.model_copy(update={"litellm_params": params}))
        listed.append(
            {
                "id": model.name,
                "object": "model",
                "created": 0,
                "owned_by": "ollama",
                "context_window": window.num_ctx,
                "context_window_source": window.source,
                "configured": False,
                "server": entry.model_name,
            }
        )
    return listed
