"""config.yaml's schema: the frozen, validated settings every floor reads.

One pydantic model per block of the file (`Settings` at the top, a `ModelEntry` per
`model_list` entry with its `LitellmParams`, `ContextSettings` and `OllamaSettings`,
`GeneralSettings` with its `StoreSettings`, ...), each field's bounds and the validators that
check settings against each other. A field's docstring is its documentation: the configuration
reference page is generated from these models (docs/hooks.py).

Reading the file is `kernel/config_loading.py`'s; making LiteLLM's format fit this schema is
`kernel/config_litellm.py`'s.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from kernel.client_keys import ClientKey
from kernel.documents_config import DocumentsSettings
from kernel.json_values import is_number
from kernel.model_modes import mode_problem
from kernel.records import RETAINED
from kernel.wildcards import is_wildcard

# `general_settings.log_level` as LiteLLM reads it (`WARN`, `critical`, `fatal`) → overspill's.
LOG_LEVEL_NAMES: Mapping[str, str] = {
    "debug": "debug",
    "info": "info",
    "warning": "warning",
    "warn": "warning",
    "error": "error",
    "critical": "error",
    "fatal": "error",
}
# litellm_params keys the fast OpenAI-wire path understands; any other makes a model use litellm.
PASSTHROUGH_PARAMS = frozenset(
    {
        "model",
        "api_base",
        "api_key",
        "timeout",
        "stream_timeout",
        "organization",
        "extra_headers",
        "max_retries",
        "rpm",
        "tpm",
        "max_parallel_requests",
    }
)
# Providers whose upstream speaks OpenAI's wire format (eligible for the byte passthrough).
OPENAI_WIRE_PROVIDERS = frozenset(
    {"openai", "hosted_vllm", "custom_openai", "llamafile", "lm_studio"}
)


DEFAULT_TIMEOUT = 600.0
"""general_settings.request_timeout's default, in seconds."""
DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""general_settings.max_response_bytes's default: 16 MiB, the same as max_body_bytes. Far above
a chat answer (a 32k-token answer is ~150 KB of JSON; with top-5 logprobs ~13 MB), while one
misbehaving upstream can no longer make overspill buffer an unbounded body per request."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LitellmParams(BaseModel):
    """A deployment's litellm parameters; unknown keys are passed to litellm as they are."""

    model_config = ConfigDict(frozen=True, extra="allow")

    model: str = Field(min_length=1)
    """`provider/model` as litellm names it (`openai/gpt-4o`, `anthropic/claude-sonnet-4-5`,
    `ollama_chat/llama3.2`); a bare name is an OpenAI model. The provider decides the road:
    the byte passthrough for OpenAI's wire, overspill's own translation, or litellm."""
    api_base: str | None = None
    """The upstream's base URL (`http://127.0.0.1:8081/v1`); unset: the provider's own."""
    api_key: SecretStr | None = None
    """The upstream's key, as `os.environ/VAR` (never written in the file). Never logged,
    never forwarded anywhere but to this upstream."""
    api_version: str | None = None
    """The provider's API version (Azure's `2024-06-01`), passed to litellm."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds a call to this deployment may take; overrides
    `general_settings.request_timeout`."""
    stream_timeout: float | None = Field(default=None, gt=0)
    """For streams: seconds to the first event and between two events; else `timeout`."""
    max_parallel_requests: int | None = Field(default=None, gt=0)
    """How many calls the deployment serves at once (LiteLLM's setting): overspill's own calls
    queue behind it. None: learned (llama-server's slots), else a default
    (docs/operations/budgets.md)."""

    @property
    def provider(self) -> str:
        """The litellm provider prefix (`openai/gpt-4o` → `openai`; bare names → `openai`)."""
        head, sep, _ = self.model.partition("/")
        return head if sep else "openai"

    @property
    def upstream_model(self) -> str:
        """The model name the upstream knows (without the provider prefix)."""
        head, sep, rest = self.model.partition("/")
        return rest if sep else head

    def extras(self) -> dict[str, Any]:
        """The extra litellm params (anything not declared above)."""
        return dict(self.__pydantic_extra__ or {})

    @property
    def api_base_problem(self) -> str | None:
        """Why `api_base` cannot be called (it is no http(s) URL with a host: "not a url",
        `localhost:11434` without its scheme, a placeholder copied from documentation), or
        None. Said without the value, which may come from a variable or hold a password."""
        if self.api_base is None:
            return None
        parts = urlsplit(self.api_base)
        if parts.scheme in ("http", "https") and parts.hostname:
            return None
        return (
            "litellm_params.api_base is not an http(s) URL with a host "
            "(write it as http://host:port/v1)"
        )


OLLAMA_PREFIXES = ("ollama_chat/", "ollama/")


def is_ollama(model: str) -> bool:
    """Whether a litellm model string names an Ollama deployment."""
    return model.startswith(OLLAMA_PREFIXES)


CondensingStrategy = Literal["extract", "mask_tool_results", "mask_observations", "middle_cut"]


class ContextSettings(_Frozen):
    """overspill's per-model block: what the model's window really is, and when its history is
    condensed. The shares are of the prompt budget (the window less the output reserve and the
    safety margin) and must satisfy `compact_to < compact_at <= grow_at`."""

    window: int | None = Field(default=None, gt=0)
    """The model's real context window in tokens; unset: LiteLLM's
    `model_info.max_input_tokens`, Ollama's discovered window, else litellm's model map. With
    no window known, the first overflow is the way in (`overflow_recovery`)."""
    max_output_tokens: int | None = Field(default=None, gt=0)
    """Tokens reserved for the answer when a request sets no `max_tokens` (default 1024)."""
    extraction_model: str | None = None
    """The `model_name` that condenses this model's history (a cheaper one); unset: the model
    itself. Must be a configured `model_name`."""
    safety_margin: float = Field(default=0.1, ge=0, lt=0.5)
    """Share of the window kept free for the token estimate's error."""
    intact_share: float = Field(default=0.7, gt=0, lt=1)
    """Share of the budget the newest turns may keep verbatim when history is condensed."""
    relevant_share: float = Field(default=0.25, ge=0, lt=1)
    """Share of the prompt budget that turns of the condensed history bearing on the latest
    user message may take beside a spliced history, quoted verbatim before that message
    (middleware/condensing/relevance.py); 0: never. Only room the spliced request leaves
    below `grow_at`: a growth lands at `compact_to`, so 0.25 of the 0.35 between them."""
    splice_min_messages: int = Field(default=20, ge=1)
    """`history_splice` acts only on conversations at least this many messages long."""
    grow_at: float = Field(default=0.85, gt=0, le=1)
    """Past this share a turn cannot be sent without a grown extraction, and waits for one."""
    max_extraction_input_tokens: int = Field(default=64_000, ge=320)
    """One extraction reads at most this much history; older turns past it are kept only as
    quoted facts (`x-overspill-extraction-bounded` says how many)."""
    max_own_calls: int = Field(default=16, ge=0)
    """overspill's own upstream calls (extraction, condensing, warm-ups) one client request
    may cause; past it the cheaper roads that need no model are taken
    (docs/operations/budgets.md)."""
    max_own_input_tokens: int | None = Field(default=None, ge=0)
    """The input tokens those calls may send together, documents and history alike;
    None: four times the model's window (8,192 tokens while the window is unknown)."""
    shadow: bool = False
    """Shadow mode: every layer decides and reports (headers, log, metrics) what it would
    do, and the request goes upstream unchanged; no own call is made."""
    turns_per_growth: int = Field(default=8, ge=1)
    """A growth leaves room for this many turns (of the conversation's own average size)
    before the spliced prefix must change again, when the budget allows it."""
    # condensing strategies (middleware/condensing/strategies.py)
    strategies: tuple[CondensingStrategy, ...] = Field(default=("extract",), min_length=1)
    """What condenses a history, tried in order until it fits: `extract` (a model writes
    notes), `mask_tool_results`, `mask_observations` (tool results and long replies),
    `middle_cut`. Masking, then a middle cut, always follow as fallbacks."""

    @field_validator("strategies")
    @classmethod
    def _distinct_strategies(
        cls, value: tuple[CondensingStrategy, ...]
    ) -> tuple[CondensingStrategy, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"each strategy may be listed once, got {list(value)}")
        return value

    # Observation masking (middleware/layers/observation_masking.py):
    mask_at: float = Field(default=0.5, gt=0, le=1)
    """Past this share of the prompt budget, old tool results are masked (a placeholder the
    model can undo by calling overspill's recall tool) before any history is condensed."""
    mask_keep: int = Field(default=3, ge=0)
    """The newest tool uses whose results are never masked."""
    # Compaction ahead of the wall (hysteresis), as shares of the prompt budget:
    compact_at: float = Field(default=0.7, gt=0, le=1)
    """Past this share, the extraction grows in the background after the response is sent,
    once the conversation is within one turn (of its own size) of `grow_at`."""
    compact_to: float = Field(default=0.5, gt=0, lt=1)
    """A growth leaves the spliced request at about this share (the intact tail shrinks)."""
    background: bool = True
    """Grow in the background after the response; false: grow inline (past `grow_at`)."""
    max_wait_seconds: float = Field(default=60, ge=0)
    """How long a turn that cannot fit waits for a running background growth."""
    warm_cache: bool | Literal["auto"] = "auto"
    """After a background growth, send the new spliced prompt once for one token, so the
    upstream's prefix cache already holds it when the next turn comes. `auto`: only for a
    self-hosted model (Ollama, vLLM, llama.cpp, ...: an `api_base` on this machine or a private
    network), where the extra prompt read costs nothing but idle time; never for a priced API."""

    @model_validator(mode="after")
    def _hysteresis_ordered(self) -> ContextSettings:
        if not self.compact_to < self.compact_at <= self.grow_at:
            raise ValueError(
                "compaction shares must satisfy compact_to < compact_at <= grow_at, got "
                f"compact_to={self.compact_to}, compact_at={self.compact_at}, "
                f"grow_at={self.grow_at}"
            )
        return self


class OllamaSettings(_Frozen):
    """Per-model settings for Ollama deployments (`ollama_chat/` or `ollama/` models)."""

    num_ctx: int | None = Field(default=None, gt=0)
    """Force this `num_ctx`; unset: the discovered window is sent (`/api/ps`, the Modelfile,
    the server default, capped by the trained maximum)."""
    max_num_ctx: int | None = Field(default=None, gt=0)
    """Cap the discovered window (a larger `num_ctx` costs the server memory)."""
    server_default: int = Field(default=4096, gt=0)
    """The window the Ollama server runs with when neither `/api/ps` nor the Modelfile says."""
    safety_margin: float = Field(default=0.75, gt=0, le=1)
    """Pre-flight: a prompt must fit `num_ctx x safety_margin - generation_buffer` tokens."""
    generation_buffer: int = Field(default=512, ge=0)
    """Tokens kept for the answer at least (more when the request's `max_tokens` is larger)."""
    window_ttl_seconds: float = Field(default=3600, gt=0)
    """How long a discovered window is cached per server and model
    (`POST /overspill/ollama/refresh` forgets them at once)."""
    list_local_models: bool = False
    """Also list the server's local models (`/api/tags`) in `/v1/models`."""
    report_in_body: bool = False
    """Add a `context_window_optimization` block (the window, its source, the tokens used) to
    JSON answers, beside the `x-overspill-*` headers that always say it."""
    truncate: bool = False
    """Ollama's own `truncate` flag on `/api/chat`. False (overspill's default, Ollama's is true)
    makes a prompt over `num_ctx` an error overspill detects and condenses, instead of a 200
    answer to a prompt whose oldest messages Ollama dropped without a word."""


class ModelEntry(_Frozen):
    """One `model_list` entry: a deployment of a model name. Other keys are warned about and
    ignored."""

    model_config = ConfigDict(frozen=True, extra="allow")

    model_name: str = Field(min_length=1)
    """What clients send as `model`. Entries sharing a name take turns and fail over before
    the first byte; a name with `*` (`openai/*`) serves every name it matches."""
    litellm_params: LitellmParams
    """Where and how to reach the deployment (LiteLLM's block)."""
    model_info: dict[str, Any] = Field(default_factory=dict)
    """LiteLLM's block; overspill reads `max_input_tokens` (else `max_tokens`) as the window,
    `mode`, and for `GET /health` `health_check_timeout` (seconds) and, on a wildcard entry,
    `health_check_model` (a name it serves, checked in its stead)."""
    context: ContextSettings = Field(default_factory=ContextSettings)
    """overspill's per-model block: the window and when history is condensed."""
    ollama: OllamaSettings = Field(default_factory=OllamaSettings)
    """Settings of Ollama deployments (ignored for others)."""
    passthrough: bool | None = None
    """Force (true) or forbid (false) the byte passthrough; unset: an OpenAI-wire provider
    (`openai/`, `hosted_vllm/`, `custom_openai/`, `llamafile/`, `lm_studio/`) with only
    connection settings takes it."""
    responses_api: Literal["auto", "native", "translate"] = "auto"
    """How a `/v1/responses` request reaches a byte-passthrough deployment: `native` sends it
    to the upstream's own Responses API (its bytes while no layer changed it), `translate`
    through chat completions; `auto` is native for OpenAI's own API only (a self-hosted
    OpenAI-compatible server may not serve it). Other deployments always translate."""
    messages_api: Literal["auto", "native", "translate"] = "auto"
    """How a `/v1/messages` request reaches the deployment: `native` sends it to the upstream's
    own Messages API (its bytes while no layer changed it; llama.cpp's server and vLLM serve
    one), `translate` through chat completions; `auto` is native for Anthropic's own API only
    (an `anthropic/` deployment overspill translates itself) and translates for the rest."""
    missing_env: SkipJsonSchema[tuple[str, ...]] = ()
    """Set by the loader, never read from the file: the unset `os.environ/` variables this
    entry names (its requests get 503 naming them)."""

    @field_validator("model_info")
    @classmethod
    def _what_overspill_reads(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = mode_problem(value.get("mode"))
        if problem is not None:
            raise ValueError(f"mode {problem}")
        seconds = value.get("health_check_timeout")
        if seconds is not None and not (is_number(seconds) and seconds > 0):
            raise ValueError(
                f"health_check_timeout must be a number of seconds above 0, got {seconds!r}"
            )
        model = value.get("health_check_model")
        if model is not None and not (isinstance(model, str) and model.strip()):
            raise ValueError(f"health_check_model must be a model name, got {model!r}")
        return value

    @property
    def mode(self) -> str | None:
        """LiteLLM's `model_info.mode` as configured (`chat`, `embedding`, ...), else None."""
        mode = self.model_info.get("mode")
        return mode if isinstance(mode, str) else None

    def speaks_messages(self) -> bool:
        """Whether a byte-passthrough deployment sends `/v1/messages` requests to the
        upstream's own Messages API (`messages_api: native`)."""
        return self.messages_api == "native" and self.uses_passthrough()

    def speaks_responses(self) -> bool:
        """Whether `/v1/responses` requests go to the upstream's own Responses API."""
        if self.responses_api != "auto":
            return self.responses_api == "native" and self.uses_passthrough()
        base = (self.litellm_params.api_base or "https://api.openai.com").rstrip("/")
        official = base in ("https://api.openai.com", "https://api.openai.com/v1")
        return official and self.litellm_params.provider == "openai" and self.uses_passthrough()

    def uses_passthrough(self) -> bool:
        """Whether this deployment goes through the byte passthrough instead of litellm."""
        if self.passthrough is not None:
            return self.passthrough
        params = self.litellm_params
        keys = set(params.model_fields_set) | set(params.extras())
        return params.provider in OPENAI_WIRE_PROVIDERS and keys <= PASSTHROUGH_PARAMS

    def context_window(self) -> int | None:
        """The configured window: `context.window`, else LiteLLM's `model_info.max_input_tokens`."""
        if self.context.window is not None:
            return self.context.window
        value = self.model_info.get("max_input_tokens") or self.model_info.get("max_tokens")
        return value if isinstance(value, int) and value > 0 else None


class StoreSettings(_Frozen):
    """Where conversation state lives: diskcache (one host) or Redis (shared by replicas)."""

    backend: Literal["diskcache", "redis"] = "diskcache"
    """`diskcache` (an sqlite directory on one host; `--workers N` share it) or `redis`
    (several replicas)."""
    path: str = "var/store"
    """diskcache: the directory, relative to the config file."""
    url: SecretStr | None = None
    """redis: required, as `os.environ/REDIS_URL` (`redis://:password@host:6379/0`)."""
    key_prefix: str = Field(default="overspill:", min_length=1)
    """redis: every key starts with it (several deployments can share one Redis)."""
    ttl_seconds: float = Field(default=7 * 24 * 3600, gt=0)
    """An entry expires this long after it was written (7 days)."""
    size_limit_bytes: int = Field(default=1 << 30, ge=16 << 20)
    """diskcache: the least recently stored entries are evicted past this size (1 GiB). redis:
    bounds the number of entries instead, at one per 32 KiB, unless `max_entries` is set."""
    max_entries: int | None = Field(default=None, gt=0)
    """redis: the most entries kept (the oldest are evicted); unset: from `size_limit_bytes`."""
    lock_ttl_seconds: float = Field(default=120, gt=0)
    """redis: a single-flight lock lasts this long unless its holder renews it (every third of
    it, while it works), so a crashed holder blocks the others at most this long."""
    lock_wait_seconds: float = Field(default=60, ge=0)
    """redis: a waiter past this long proceeds without the lock (at worst two replicas extract
    one conversation)."""
    timeout_seconds: float = Field(default=1.0, gt=0)
    """Redis: the most one store call may take (connect, send, answer); past it the call
    fails and the request goes on without the store."""
    retry_after_seconds: float = Field(default=5.0, ge=0)
    """Redis: after a call failed for want of a connection or an answer, calls fail at once
    for this long (no request waits on a dead store), then the next call tries again."""
    ttl_seconds_by_kind: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    """Per kind of record (extractions, documents, responses, calibration): its TTL over
    ttl_seconds. Responses (the links of `previous_response_id` chains) are kept 30 days
    unless set here, as OpenAI keeps them."""
    lock_replicas: int | None = Field(default=None, ge=0)
    """Redis: replicas that must hold a single-flight lock (WAIT) before its holder goes on;
    default 1 with redis+cluster:// or redis+sentinel://, 0 with one Redis."""

    @field_validator("ttl_seconds_by_kind")
    @classmethod
    def _known_kinds(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(RETAINED))
        if unknown:
            raise ValueError(f"unknown kind {', '.join(unknown)}; kinds: {', '.join(RETAINED)}")
        return value

    @model_validator(mode="after")
    def _redis_needs_url(self) -> StoreSettings:
        if self.backend == "redis" and self.url is None:
            raise ValueError("url is required when backend is redis (url: os.environ/REDIS_URL)")
        return self


class UsageSettings(_Frozen):
    """`general_settings.usage`: overspill's own tokens, counted per tenant and optionally
    capped per period (docs/operations/budgets.md)."""

    period: Literal["day", "month"] = "day"
    """The budget's period, in UTC: a calendar day or a calendar month."""
    tenant_budget: int | None = Field(default=None, ge=0)
    """Own tokens (input and output) each tenant may cause per period; None: no budget.
    A client key's `own_token_budget` overrides it for that key's tenant."""
    keep_days: int = Field(default=400, ge=1)
    """How long the per-day usage counts are kept in the store."""


class MetricsSettings(_Frozen):
    """`general_settings.metrics`: the Prometheus `/metrics` route."""

    enabled: bool = True
    """Serve `/metrics` (off: the route answers 404; counting goes on, it costs ~µs)."""
    require_master_key: bool = False
    """Scrapers must send `Authorization: Bearer <master_key>`."""


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


LoggerLevel = Annotated[
    Literal["debug", "info", "warning", "error", "critical"], BeforeValidator(_lower)
]
"""A logging level, in any case (`DEBUG` or `debug`)."""


def origin_problem(entry: str) -> str | None:
    """Why `entry` of `allowed_origins` is not an origin a browser sends (`*`, or a scheme
    and host with an optional port, `https://chat.example.com`, and nothing after them but a
    slash), or None."""
    if entry == "*":
        return None
    parts = urlsplit(entry)
    plain = not (parts.query or parts.fragment or parts.username)
    if parts.scheme and parts.hostname and parts.path in ("", "/") and plain:
        try:
            parts.port  # noqa: B018 - raises on a port that is not one
        except ValueError:
            pass
        else:
            return None
    return (
        f"{entry!r} is not an origin: write the scheme, host and port a browser shows for the "
        "page, with nothing after them (https://chat.example.com, http://localhost:3000), "
        "or '*' for any page"
    )


_HOST_NAME = re.compile(
    r"\.?(?:[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?\.)*[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?\.?"
)


def host_problem(entry: str) -> str | None:
    """Why `entry` of `allowed_hosts` is not a name a request's `Host` carries (`*`, a name
    such as `overspill.example.com`, or `.example.com` for it and every name under it), or
    None. An address needs no entry: any is served."""
    if entry == "*" or _HOST_NAME.fullmatch(entry.lower()):
        return None
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(entry.strip("[]"))
        return None
    return (
        f"{entry!r} is not a host name: write the name clients put in the URL, without scheme, "
        "port or path (overspill.example.com), '.example.com' for that name and every name "
        "under it, or '*' for any"
    )


class GeneralSettings(_Frozen):
    """Server-wide settings. LiteLLM's other keys here (`database_url`, `alerting`, ...) are
    warned about by name and ignored."""

    model_config = ConfigDict(frozen=True, extra="allow")

    master_key: SecretStr | None = None
    """The operator's key (`os.environ/VAR`): the admin endpoints and every model. Unset and no
    `client_keys`: no key is required."""
    client_keys: tuple[ClientKey, ...] = ()
    """Keys of the apps that share the gateway, each its own tenant (kernel/client_keys.py)."""
    host: str = "127.0.0.1"
    """The address to listen on (`0.0.0.0` in a container). Read at startup only."""
    port: int = Field(default=4000, ge=1, le=65535)
    """The port to listen on. Read at startup only."""
    max_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """The largest request body (16 MiB); more is a 413, refused before the body is read when
    its `Content-Length` says so."""
    request_timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    """Seconds an upstream call may take, unless the model sets `litellm_params.timeout`
    (`stream_timeout` for streams): a JSON answer whole (connect, send, wait, read); a stream's
    wait for its head and first event, and each gap between two events after it (a stream that
    keeps sending events is never cut). No retries hide inside it."""
    connect_timeout: float = Field(default=10.0, gt=0)
    """Seconds to open a connection to an upstream."""
    upstream_client: Literal["aiohttp", "httpx"] = "aiohttp"
    """The HTTP client of the OpenAI-wire fast path: aiohttp (the lighter per request) or httpx
    (SOCKS proxies; a smaller peak memory under many large concurrent answers)."""
    max_response_bytes: int = Field(default=DEFAULT_MAX_RESPONSE_BYTES, gt=0)
    """The largest upstream answer overspill reads: a JSON answer whole, a stream's each event.
    Reading stops at the limit (502 upstream_response_too_large); nothing beyond it is buffered."""
    store: StoreSettings = Field(default_factory=StoreSettings)
    """Where conversation state lives."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """The level of every logger (any case; `warn`, `critical`, `fatal` are read as LiteLLM
    reads them)."""
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    """The Prometheus `/metrics` route."""
    log_levels: dict[Annotated[str, Field(min_length=1)], LoggerLevel] = Field(default_factory=dict)
    """Per-logger levels over `log_level`, e.g. `{overspill.request: warning, litellm: info}`;
    `litellm` stands for LiteLLM's own loggers."""
    graceful_shutdown_seconds: int = Field(default=30, ge=0)
    """On SIGTERM, how long in-flight requests and streams (then background jobs) may run
    before they are cancelled. Read at startup only."""
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    """The request line and headers of one request together; more is a 431. Startup only."""
    client_header_timeout: float = Field(default=10.0, gt=0)
    """Seconds a client has to send a request's line and headers, from its first byte; a
    slower one gets a 408 and the connection is closed. Startup only."""
    client_body_timeout: float = Field(default=60.0, gt=0)
    """Seconds a client has to send a request's body once its headers are in; else a 408
    (the time overspill itself takes to read is not counted). Startup only."""
    keep_alive_timeout: int = Field(default=5, ge=1)
    """Seconds an idle connection (a new one, or one between requests) stays open without a
    request's first byte; then it is closed. Startup only."""
    allow_unauthenticated: bool = False
    """Serve on an address other than loopback with neither a master key nor client keys
    (anyone who can reach it may spend its upstream keys). False: `serve` refuses to start."""
    allowed_origins: tuple[str, ...] = ()
    """The web pages (origins, `https://chat.example.com`) whose scripts may call overspill
    from a browser, besides pages served from this machine (`http://localhost:3000`); `*`
    for any. A request a page elsewhere sends (its `Origin` header) is a 403: a site the user
    visits could otherwise spend a keyless gateway's upstream keys through their browser.
    Clients that are not browsers send no `Origin` and are never affected."""
    allowed_hosts: tuple[str, ...] = ()
    """On a gateway served on loopback, the names a request may be addressed to (its `Host`)
    besides this machine's (an IP address, `localhost` and `*.localhost`, a name without a
    dot, `*.local`, `*.internal`): `.example.com` for a domain and its subdomains, `*` for any.
    Another name is a 403: it is how a web page whose name was re-resolved to 127.0.0.1 (DNS
    rebinding) reaches overspill. List the name a reverse proxy on this machine forwards
    (Caddy and Traefik by default). Not checked on other addresses, where keys guard."""
    usage: UsageSettings = Field(default_factory=UsageSettings)
    """What overspill's own calls may spend per tenant and period (docs/operations/budgets.md)."""
    max_background_jobs: int = Field(default=4, ge=1)
    """Background growths that run at once per worker; more wait in a queue."""
    max_waiting_jobs: int = Field(default=256, ge=0)
    """Background growths that may wait; past it the oldest waiting one is dropped (its
    conversation grows on a later turn). Waiting and dropped jobs are counted in metrics."""

    @model_validator(mode="after")
    def _metrics_key_exists(self) -> GeneralSettings:
        if self.metrics.require_master_key and self.master_key is None:
            raise ValueError(
                "metrics.require_master_key is true but there is no master_key: set "
                "general_settings.master_key, or require_master_key: false"
            )
        return self

    @field_validator("allowed_origins", "allowed_hosts")
    @classmethod
    def _entries_are_what_browsers_send(
        cls, value: tuple[str, ...], info: ValidationInfo
    ) -> tuple[str, ...]:
        """Each origin is `*` or a scheme, host and port, as a browser's `Origin` header says;
        each host `*`, a host name, or `.` and a domain."""
        problem_of = origin_problem if info.field_name == "allowed_origins" else host_problem
        for entry in value:
            if problem := problem_of(entry):
                raise ValueError(problem)
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _any_case(cls, value: Any) -> Any:
        """LiteLLM configs write `DEBUG`, `WARN`; the level is the same."""
        return LOG_LEVEL_NAMES.get(value.lower(), value) if isinstance(value, str) else value


class ModelAlias(_Frozen):
    """One `router_settings.model_group_alias` entry: requests for the alias go to `model`."""

    model: str = Field(min_length=1)
    """The `model_name` the alias's requests go to."""
    hidden: bool = False
    """Left out of `/v1/models` (LiteLLM's `{model: ..., hidden: true}` form)."""


class RouterSettings(_Frozen):
    """The part of LiteLLM's `router_settings` overspill honours (the rest is warned about)."""

    model_group_alias: dict[str, ModelAlias] = Field(default_factory=dict)
    """`alias: model_name`, or `alias: {model: model_name, hidden: true}`: requests for the
    alias go to the target's deployments."""


class Settings(_Frozen):
    """The whole validated config. Other top-level keys (LiteLLM's `guardrails`,
    `mcp_servers`, ...) are warned about by name and ignored; `include:` and
    `environment_variables:` are read before validation, as LiteLLM reads them."""

    model_config = ConfigDict(frozen=True, extra="allow")

    model_list: tuple[ModelEntry, ...] = ()
    """Empty is allowed (LiteLLM's proxy starts without models too); it is warned about."""
    general_settings: GeneralSettings = Field(default_factory=GeneralSettings)
    """Server-wide settings: keys, limits, timeouts, the store, logs, metrics."""
    router_settings: RouterSettings = Field(default_factory=RouterSettings)
    """LiteLLM's block; only `model_group_alias` is honoured (other keys are warned about)."""
    middleware: tuple[str, ...] | None = None
    """Layer names, outermost first, from `documents`, `observation_masking`,
    `history_splice`, `overflow_recovery`, `ollama_window` (a model layer: after the others).
    No key: all five; `[]`: none."""
    litellm_settings: dict[str, Any] = Field(default_factory=dict)
    """LiteLLM's block; only `drop_params` is honoured (an OpenAI parameter the provider has
    no equivalent for is dropped instead of refused). Other keys are warned about."""
    documents: DocumentsSettings = Field(default_factory=DocumentsSettings)
    """The `documents` layer: retrieved documents fitted into one budget."""

    @field_validator("middleware")
    @classmethod
    def _unique_layers(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        dupes = sorted({name for name in value if value.count(name) > 1})
        if dupes:
            raise ValueError(f"each layer may appear once; repeated: {', '.join(dupes)}")
        return value

    @model_validator(mode="after")
    def _extraction_models_exist(self) -> Settings:
        names = {entry.model_name for entry in self.model_list}
        for index, entry in enumerate(self.model_list):
            wanted = entry.context.extraction_model
            if wanted is not None and wanted not in names:
                raise ValueError(
                    f"model_list[{index}].context.extraction_model: {wanted!r} is not a "
                    f"configured model_name (configured: {', '.join(sorted(names))})"
                )
        return self

    def model_names(self) -> list[str]:
        """The configured model names, in file order, without repeats."""
        return list(dict.fromkeys(entry.model_name for entry in self.model_list))

    def deployments(self, name: str) -> list[ModelEntry]:
        """Every entry serving `name`."""
        return [entry for entry in self.model_list if entry.model_name == name]

    def wildcard_names(self) -> list[str]:
        """The `model_name`s that are patterns (`openai/*`), in file order, without repeats."""
        return [name for name in self.model_names() if is_wildcard(name)]

    @property
    def drop_params(self) -> bool:
        """LiteLLM's `litellm_settings.drop_params`."""
        return bool(self.litellm_settings.get("drop_params", False))
