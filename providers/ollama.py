"""Ollama window discovery: the context window a model really runs with, cached per server.

Ollama reports three different numbers and runs with a fourth unless told otherwise:
`POST /api/show` has the TRAINED maximum (`model_info["<arch>.context_length"]`) and, only
when the Modelfile sets one, `num_ctx` in its `parameters` text; `GET /api/ps` has the
`context_length` a LOADED model runs with; an unloaded model without a Modelfile `num_ctx`
runs at the server default (4096 on CPU-only machines). The window chosen here is, in order:
`ollama.num_ctx` (an explicit override), the configured window (`context.window`), `/api/ps`,
the Modelfile, `ollama.server_default`; always capped by the trained maximum and by
`ollama.max_num_ctx`.

Discovery never fails a request: an unreachable server yields the configured or default window
(logged once per server and model until it answers again). Parsing is pure and separate from
the I/O; answers are cached per (api_base, model) for `ollama.window_ttl_seconds` on an
injected clock, and `refresh()` drops them on demand.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from kernel import metrics
from kernel.config import ModelEntry
from kernel.json_values import is_int

log = logging.getLogger("overspill.ollama")

DEFAULT_API_BASE = "http://127.0.0.1:11434"
DISCOVERY_TIMEOUT_SECONDS = 2.0
FAILURE_TTL_SECONDS = 30.0
"""An unreachable server is asked again after this long (or the model's TTL, if shorter)."""
PREFIXES = ("ollama_chat/", "ollama/")

ParamValue = int | float | str
Parameters = dict[str, ParamValue | list[ParamValue]]


class DiscoveryFailed(Exception):
    """An Ollama server could not be asked (unreachable, or it answered with an error)."""


@dataclass(frozen=True, slots=True)
class Discovery:
    """What one Ollama server said about one model (None: it did not say)."""

    loaded: int | None = None
    modelfile: int | None = None
    trained: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Window:
    """The num_ctx to send, where it came from, and what capped it."""

    num_ctx: int
    source: str
    """`num_ctx` (ollama.num_ctx), `config`, `ps`, `modelfile` or `default`."""
    capped_by: str | None = None
    """`trained` or `max_num_ctx` when a cap lowered the chosen value."""
    trained: int | None = None


@dataclass(frozen=True, slots=True)
class LocalModel:
    """One model of `GET /api/tags`."""

    name: str
    family: str | None = None
    parameter_size: str | None = None
    quantization: str | None = None


def native(entry: ModelEntry) -> ModelEntry:
    """The entry with `ollama/NAME` rewritten to `ollama_chat/NAME` (the same entry otherwise).

    litellm's `ollama/` route flattens the chat into `/api/generate`; `ollama_chat/` uses the
    native `/api/chat`, whose `options.num_ctx` this module relies on.
    """
    params = entry.litellm_params
    if not params.model.startswith("ollama/"):
        return entry
    model = "ollama_chat/" + params.model.removeprefix("ollama/")
    return entry.model_copy(update={"litellm_params": params.model_copy(update={"model": model})})


def chat_fields(entry: ModelEntry) -> dict[str, Any]:
    """Top-level `/api/chat` fields for a deployment, beside the `options` litellm fills.

    litellm's `ollama_chat/` route puts every parameter into `options`; `truncate` lives at the
    top level, where only litellm's `extra_body` reaches (merged into the request body as is).
    A deployment's own `litellm_params.extra_body` is kept; `ollama.truncate` wins over it.
    """
    configured = entry.litellm_params.extras().get("extra_body")
    fields = dict(configured) if isinstance(configured, dict) else {}
    fields["truncate"] = entry.ollama.truncate
    return fields


def api_base_of(entry: ModelEntry) -> str:
    """The server's root URL (`api_base` without a trailing `/`, `/api/chat` or `/v1`)."""
    base = (entry.litellm_params.api_base or DEFAULT_API_BASE).rstrip("/")
    for suffix in ("/api/chat", "/api/generate", "/v1"):
        base = base.removesuffix(suffix)
    return base.rstrip("/")


def tag(name: str) -> str:
    """A model name with its tag (`smollm2` → `smollm2:latest`), as Ollama lists it."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _value(text: str) -> ParamValue:
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def parse_parameters(text: str | list[str] | None) -> Parameters:
    """Ollama's `parameters` blob (`"num_ctx 4096\\nstop \\"<|im_end|>\\""`) as a dict.

    Numbers become int or float, quotes are removed, a repeated key (`stop`) becomes a list.
    Older servers sent a list of `"key value"` lines; that is accepted too.
    """
    lines = text if isinstance(text, list) else (text or "").splitlines()
    found: Parameters = {}
    for line in lines:
        key, _, rest = str(line).strip().partition(" ")
        if not key or not rest.strip():
            continue
        value = _value(rest.strip())
        previous = found.get(key)
        if previous is None:
            found[key] = value
        elif isinstance(previous, list):
            previous.append(value)
        else:
            found[key] = [previous, value]
    return found


def _positive(value: object) -> int | None:
    if is_int(value) and value > 0:
        return value
    return None


def trained_context(model_info: Mapping[str, Any] | None) -> int | None:
    """The trained maximum: `model_info["<general.architecture>.context_length"]`."""
    if not model_info:
        return None
    arch = model_info.get("general.architecture")
    if isinstance(arch, str):
        return _positive(model_info.get(f"{arch}.context_length"))
    lengths = [v for k, v in model_info.items() if k.endswith(".context_length")]
    return _positive(lengths[0]) if len(lengths) == 1 else None


def modelfile_num_ctx(show: Mapping[str, Any]) -> int | None:
    """The Modelfile's `num_ctx` from an `/api/show` answer, when it sets one."""
    return _positive(parse_parameters(show.get("parameters")).get("num_ctx"))


def loaded_context(ps: Mapping[str, Any], model: str) -> int | None:
    """The `context_length` a model runs with, from an `/api/ps` answer (None: not loaded)."""
    wanted = tag(model)
    for item in ps.get("models") or ():
        if isinstance(item, Mapping) and wanted in (
            tag(str(item.get(k))) for k in ("name", "model")
        ):
            return _positive(item.get("context_length"))
    return None


def choose_window(entry: ModelEntry, found: Discovery) -> Window:
    """The window for an entry, given what its server said (see the module docstring)."""
    settings = entry.ollama
    candidates = (
        ("num_ctx", settings.num_ctx),
        ("config", entry.context_window()),
        ("ps", found.loaded),
        ("modelfile", found.modelfile),
        ("default", settings.server_default),
    )
    source, value = next((name, v) for name, v in candidates if v is not None)
    capped_by = None
    for cap_name, cap in (("trained", found.trained), ("max_num_ctx", settings.max_num_ctx)):
        if cap is not None and cap < value:
            value, capped_by = cap, cap_name
    return Window(value, source, capped_by, found.trained)


def parse_tags(body: Mapping[str, Any]) -> list[LocalModel]:
    """The models of a `GET /api/tags` answer."""
    models = []
    for item in body.get("models") or ():
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            continue
        details = item.get("details")
        info = details if isinstance(details, Mapping) else {}
        models.append(
            LocalModel(
                item["name"],
                info.get("family"),
                info.get("parameter_size"),
                info.get("quantization_level"),
            )
        )
    return models


class OllamaWindows:
    """Resolves and caches Ollama models' windows; implements the layer's WindowResolver."""

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = DISCOVERY_TIMEOUT_SECONDS,
    ) -> None:
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._owns_client = client is None
        self._timeout = timeout
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, Discovery]] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._warned: set[tuple[str, str]] = set()

    async def window(self, entry: ModelEntry) -> Window:
        """The window to run `entry` with; never raises because discovery failed."""
        need_ps = entry.ollama.num_ctx is None and entry.context_window() is None
        found = await self.discover(
            api_base_of(entry),
            entry.litellm_params.upstream_model,
            ttl=entry.ollama.window_ttl_seconds,
            with_ps=need_ps,
        )
        return choose_window(entry, found)

    async def discover(
        self, api_base: str, model: str, *, ttl: float = 3600.0, with_ps: bool = True
    ) -> Discovery:
        """What the server says about a model, from the cache while it is fresh."""
        key = (api_base, model)
        cached = self._fresh(key)
        if cached is not None:
            return cached
        async with self._locks.setdefault(key, asyncio.Lock()):
            cached = self._fresh(key)
            if cached is not None:
                return cached
            found = await self._ask(api_base, model, with_ps)
            outcome = "ok" if found.error is None else "failed"
            metrics.OLLAMA_DISCOVERIES.labels(model, outcome).inc()
            lifetime = ttl if found.error is None else min(ttl, FAILURE_TTL_SECONDS)
            self._cache[key] = (self._clock() + lifetime, found)
            self._log_outcome(key, found)
            return found

    def refresh(self, api_base: str | None = None, model: str | None = None) -> int:
        """Forget cached answers (all, one server's, or one model's); how many were dropped."""
        keys = [
            key
            for key in self._cache
            if (api_base is None or key[0] == api_base.rstrip("/"))
            and (model is None or key[1] == model)
        ]
        for key in keys:
            del self._cache[key]
        return len(keys)

    async def local_models(self, api_base: str) -> list[LocalModel]:
        """The server's local models (`GET /api/tags`); raises DiscoveryFailed."""
        return parse_tags(await self._json("GET", f"{api_base.rstrip('/')}/api/tags"))

    async def aclose(self) -> None:
        """Close the HTTP client when this resolver created it."""
        if self._owns_client:
            await self._client.aclose()

    def _fresh(self, key: tuple[str, str]) -> Discovery | None:
        entry = self._cache.get(key)
        if entry is None or entry[0] <= self._clock():
            return None
        return entry[1]

    async def _ask(self, api_base: str, model: str, with_ps: bool) -> Discovery:
        errors: list[str] = []
        show: Mapping[str, Any] = {}
        ps: Mapping[str, Any] = {}
        try:
            show = await self._json("POST", f"{api_base}/api/show", {"model": model})
        except DiscoveryFailed as exc:
            errors.append(str(exc))
        if with_ps:
            try:
                ps = await self._json("GET", f"{api_base}/api/ps")
            except DiscoveryFailed as exc:
                errors.append(str(exc))
        return Discovery(
            loaded=loaded_context(ps, model),
            modelfile=modelfile_num_ctx(show),
            trained=trained_context(_mapping(show.get("model_info"))),
            error="; ".join(errors) or None,
        )

    async def _json(self, method: str, url: str, body: object = None) -> Mapping[str, Any]:
        try:
            response = await self._client.request(method, url, json=body, timeout=self._timeout)
        except httpx.HTTPError as exc:
            raise DiscoveryFailed(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise DiscoveryFailed(
                f"{method} {url}: HTTP {response.status_code} {response.text[:200]}"
            )
        try:
            data = response.json()
        except ValueError as exc:
            raise DiscoveryFailed(f"{method} {url}: not JSON") from exc
        if not isinstance(data, Mapping):
            raise DiscoveryFailed(f"{method} {url}: expected a JSON object")
        return data

    def _log_outcome(self, key: tuple[str, str], found: Discovery) -> None:
        if found.error is None:
            self._warned.discard(key)
        elif key not in self._warned:
            self._warned.add(key)
            log.warning(
                "Ollama window discovery failed; using the configured or default window",
                extra={"api_base": key[0], "model": key[1], "error": found.error},
            )


def _mapping(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None
