"""Each deployment's real context window: configured, discovered, or from litellm's map.

For an Ollama deployment the window is the one Ollama really runs with (providers/ollama.py:
`ollama.num_ctx`, the configured window, `/api/ps`, the Modelfile, the server default, capped
by the trained maximum). For every other deployment it is `context.window` (or LiteLLM's
`model_info.max_input_tokens`), else litellm's model map; when several deployments share a
model name, the smallest of their known windows, since any of them may serve a request.

A window the upstream states in an overflow error (`learn`, called by the router) is used from
then on when it is smaller than what was known, or nothing was: a model nobody knew the window
of costs one refused call per process, not one per request.
"""

from __future__ import annotations

from kernel.config import ModelEntry, Settings, is_ollama
from kernel.services import Window
from providers.model_info import context_window
from providers.ollama import OllamaWindows


class ModelWindows:
    """Implements the layers' `Windows` over config, Ollama discovery and litellm's map."""

    def __init__(self, settings: Settings, ollama: OllamaWindows) -> None:
        self.ollama = ollama
        self._static: dict[str, Window] = _static_windows(settings)
        self._learned: dict[str, Window] = {}
        self._ollama_names = {
            e.model_name for e in settings.model_list if is_ollama(e.litellm_params.model)
        }

    def learn(self, name: str, tokens: int) -> None:
        """An upstream said model `name`'s window is `tokens` (an overflow's numbers)."""
        if name in self._ollama_names:
            return  # the window is the num_ctx overspill sends
        known = self._learned.get(name) or self._static.get(name)
        if known is None or tokens < known.tokens:
            self._learned[name] = Window(tokens, "overflow")

    def add(self, entry: ModelEntry) -> None:
        """Learn the window of a deployment built after startup (a name a wildcard serves)."""
        if is_ollama(entry.litellm_params.model):
            return
        tokens = context_window(entry)
        if tokens is not None:
            source = "config" if entry.context_window() is not None else "litellm"
            self._static[entry.model_name] = Window(tokens, source)

    def forget(self, name: str) -> None:
        """Drop a name `add` (or an overflow) taught."""
        self._static.pop(name, None)
        self._learned.pop(name, None)

    async def of(self, entry: ModelEntry) -> Window | None:
        """The window `entry` runs with; None when nobody knows. Never raises."""
        if is_ollama(entry.litellm_params.model):
            found = await self.ollama.window(entry)
            return Window(found.num_ctx, found.source, found.capped_by)
        return self._learned.get(entry.model_name) or self._static.get(entry.model_name)


def _static_windows(settings: Settings) -> dict[str, Window]:
    """Each model name's known window over its non-Ollama deployments (the smallest)."""
    found: dict[str, Window] = {}
    for entry in settings.model_list:
        if is_ollama(entry.litellm_params.model):
            continue
        tokens = context_window(entry)
        if tokens is None:
            continue
        source = "config" if entry.context_window() is not None else "litellm"
        known = found.get(entry.model_name)
        if known is None or tokens < known.tokens:
            found[entry.model_name] = Window(tokens, source)
    return found
