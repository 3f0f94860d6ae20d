"""overspill's Prometheus metrics: every metric object, defined once for the whole process.

The layers, the providers and the shell record here; `proxy/metrics.py` serves them on
`/metrics` (and, with several workers, merges the workers' files: prometheus-client's
multiprocess mode, chosen by `PROMETHEUS_MULTIPROC_DIR` before this module is imported). The
registry is process-global, so a rebuilt `System` (a config reload) keeps counting.

    requests      overspill_requests_total{model,status,stream}
                  overspill_request_duration_seconds{model,stream}     to the end of the answer
                  overspill_overhead_seconds{model,stream}             overspill's own added time
    upstream      overspill_upstream_calls_total{provider,model}
                  overspill_upstream_failures_total{provider,model,class}
                  overspill_upstream_duration_seconds{provider,model}  to the response head
                  overspill_overflows_total{provider}                  the classifier said so
    layers        overspill_recoveries_total{model,outcome}
                  overspill_splices_total{model}, overspill_growths_total{model}
                  overspill_compaction_jobs_total{model,result}        grown in the background
                  overspill_compaction_waited_turns_total{model,why}   turns that waited
                  overspill_cache_warmups_total{model,result}          prefix cache filled
                  overspill_extractions_total{model,result}            reused, made, or cut
                  overspill_compaction_tokens{layer,stage}             before/after, estimated
    own calls     overspill_extraction_calls_total{model,outcome}      the cost of compaction
                  overspill_extraction_tokens_total{model,kind}
                  overspill_extraction_duration_seconds{model}
                  overspill_own_call_wait_seconds{model}               queued for a slot
    bounds        overspill_bounded_requests_total{model,bound}        a bound held work back
                  overspill_cheaper_roads_total{model,road}            what was done instead
                  overspill_background_jobs{state}                     running, waiting
                  overspill_background_jobs_dropped_total{reason}
    prompt cache  overspill_cached_prompt_tokens_total{model,kind}     as the upstream said
                  overspill_prompt_tokens_total{model,kind}            beside it, for a ratio
                  overspill_prefix_changes_total{model,why}            spliced prefix changed
    shadow        overspill_shadow_decisions_total{model,layer,decision}
    store         overspill_store_operations_total{op}, overspill_store_errors_total{op}
                  overspill_store_duration_seconds{op}
    Ollama        overspill_ollama_discoveries_total{model,outcome}
                  overspill_ollama_truncations_total{model,stage}      prevented or suspected

Label values are bounded: `model` is a configured model name ("none" before one is resolved),
`provider` a provider prefix, the others come from short fixed lists; never a tenant or
anything else a client chose freely (a tenant's own spending is the usage summary's:
kernel/usage.py).

The hot path (every request, every upstream call, every store operation) records into tallies:
plain Python sums and bucket counts, bound once per label set, that `flush()` moves into
prometheus-client within FLUSH_SECONDS and before every scrape. That is ~1 µs per request
where prometheus-client's own calls cost ~12 µs (bench/micro/test_metrics.py). Rare events
(overflows, recoveries, extractions...) use prometheus-client directly.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kernel.errors import (
    ContextWindowExceeded,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
)

REGISTRY = CollectorRegistry(auto_describe=True)
"""overspill's own metrics (proxy/metrics.py adds the process collectors when serving)."""

NO_MODEL = "none"
"""The `model` label of a request that failed before its model was resolved."""

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)
OVERHEAD_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)
STORE_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5)
TOKEN_BUCKETS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 1048576)


def _counter(name: str, doc: str, labels: Sequence[str]) -> Counter:
    return Counter(name, doc, labels, registry=REGISTRY)


def _histogram(name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]) -> Histogram:
    return Histogram(name, doc, labels, buckets=buckets, registry=REGISTRY)


REQUESTS = _counter(
    "overspill_requests", "Requests answered on every API route, by model, status and streaming.",
    ["model", "status", "stream"],
)  # fmt: skip
REQUEST_SECONDS = _histogram(
    "overspill_request_duration_seconds",
    "Time from a request's arrival to the end of its answer (streams: the last event).",
    ["model", "stream"], LATENCY_BUCKETS,
)  # fmt: skip
OVERHEAD_SECONDS = _histogram(
    "overspill_overhead_seconds",
    "overspill's own added time until the response head: the request's time less its waits "
    "on the upstream (extraction calls included, since overspill chose to make them).",
    ["model", "stream"], OVERHEAD_BUCKETS,
)  # fmt: skip
UPSTREAM_CALLS = _counter(
    "overspill_upstream_calls", "Calls to an upstream deployment (clients' and overspill's own).",
    ["provider", "model"],
)  # fmt: skip
UPSTREAM_FAILURES = _counter(
    "overspill_upstream_failures",
    "Upstream calls that failed, by class: overflow, rate_limit, timeout, 5xx, 4xx, "
    "connection, other (including mid-stream failures).",
    ["provider", "model", "class"],
)  # fmt: skip
UPSTREAM_SECONDS = _histogram(
    "overspill_upstream_duration_seconds",
    "Time an upstream call took until its response head (a stream's first event).",
    ["provider", "model"], LATENCY_BUCKETS,
)  # fmt: skip
OVERFLOWS = _counter(
    "overspill_overflows", "Context-window overflows the classifier recognised, by provider.",
    ["provider"],
)  # fmt: skip
RECOVERIES = _counter(
    "overspill_recoveries",
    "overflow_recovery's one strike: recovered (the condensed retry answered), failed (it "
    "overflowed again), impossible (nothing to condense), error (the retry failed otherwise).",
    ["model", "outcome"],
)  # fmt: skip
SPLICES = _counter(
    "overspill_splices", "Requests sent with a cached extraction standing in for older turns.",
    ["model"],
)  # fmt: skip
GROWTHS = _counter(
    "overspill_growths", "Splices that grew their extraction first (past context.grow_at).",
    ["model"],
)  # fmt: skip
MASKED_RESULTS = _counter(
    "overspill_masked_tool_results",
    "Old tool results masked in what a request sent upstream (observation_masking): by the "
    "policy that chose them, overspill's own (`default`) or the client's (`client`).",
    ["model", "policy"],
)  # fmt: skip
RECALLS = _counter(
    "overspill_recalls",
    "Masked tool results the model brought back by calling overspill's recall tool: found, or "
    "missing (an id no placeholder of the conversation names).",
    ["model", "result"],
)  # fmt: skip
COMPACTION_JOBS = _counter(
    "overspill_compaction_jobs",
    "Background growths started after a response (past context.compact_at): done, busy "
    "(another holder had the conversation), unneeded, cut (no model could condense it: "
    "nothing stored), failed, or cancelled (shutdown).",
    ["model", "result"],
)  # fmt: skip
CACHE_WARMUPS = _counter(
    "overspill_cache_warmups",
    "Prompts sent for one token after a background growth, so the upstream's prefix cache "
    "holds the new spliced prefix before the next turn: warmed or failed.",
    ["model", "result"],
)  # fmt: skip
CACHE_WARMUP_SECONDS = _histogram(
    "overspill_cache_warmup_duration_seconds",
    "How long one cache warm-up took (upstream time spent between turns).",
    ["model"], LATENCY_BUCKETS,
)  # fmt: skip
WAITED_TURNS = _counter(
    "overspill_compaction_waited_turns",
    "Turns that could not fit without a grown extraction and waited for one: for a running "
    "background job (job) or for their own (extraction).",
    ["model", "why"],
)  # fmt: skip
EXTRACTIONS = _counter(
    "overspill_extractions",
    "Stand-ins for a history: reused (cached), extracted, incremental, masked (observation "
    "masking), masked-tool-results, or cut (the middle was cut with a marker).",
    ["model", "result"],
)  # fmt: skip
COMPACTION_TOKENS = _histogram(
    "overspill_compaction_tokens",
    "Estimated prompt tokens before and after a layer condensed a request.",
    ["layer", "stage"], TOKEN_BUCKETS,
)  # fmt: skip
EXTRACTION_CALLS = _counter(
    "overspill_extraction_calls",
    "overspill's own model calls (extraction, condensing), by model and outcome.",
    ["model", "outcome"],
)  # fmt: skip
EXTRACTION_TOKENS = _counter(
    "overspill_extraction_tokens",
    "Tokens overspill's own calls spent, as the upstream reported them (prompt, completion).",
    ["model", "kind"],
)  # fmt: skip
EXTRACTION_SECONDS = _histogram(
    "overspill_extraction_duration_seconds", "Time one of overspill's own calls took.",
    ["model"], LATENCY_BUCKETS,
)  # fmt: skip
OWN_CALL_WAIT_SECONDS = _histogram(
    "overspill_own_call_wait_seconds",
    "Time one of overspill's own calls waited for a slot of its deployment's parallelism "
    "(litellm_params.max_parallel_requests, llama-server's slots) before it was sent.",
    ["model"], LATENCY_BUCKETS,
)  # fmt: skip
BOUNDED = _counter(
    "overspill_bounded_requests",
    "Requests whose own work a bound held back: calls or tokens (the request's bound) or "
    "tenant-budget (the tenant's own tokens per period).",
    ["model", "bound"],
)  # fmt: skip
ROADS = _counter(
    "overspill_cheaper_roads",
    "Cheaper roads taken instead of model work because of a bound (history:masked, "
    "history:middle_cut, documents:excerpts, documents:cut, ...).",
    ["model", "road"],
)  # fmt: skip
BACKGROUND_JOBS = Gauge(
    "overspill_background_jobs",
    "Background growths running or waiting for a turn (general_settings.max_background_jobs).",
    ["state"], registry=REGISTRY, multiprocess_mode="livesum",
)  # fmt: skip
BACKGROUND_DROPPED = _counter(
    "overspill_background_jobs_dropped",
    "Background growths that never ran: queue_full (past max_waiting_jobs), replaced (a newer "
    "turn of the same conversation took its place), closing (the system shut down).",
    ["reason"],
)  # fmt: skip
CACHED_PROMPT_TOKENS = _counter(
    "overspill_cached_prompt_tokens",
    "Prompt tokens the upstream served from its prompt cache, as it reported them "
    "(usage.prompt_tokens_details.cached_tokens), by the kind of request overspill sent.",
    ["model", "kind"],
)  # fmt: skip
PROMPT_TOKENS = _counter(
    "overspill_prompt_tokens",
    "Prompt tokens of the same answers (usage.prompt_tokens), for the cached share.",
    ["model", "kind"],
)  # fmt: skip
PREFIX_CHANGES = _counter(
    "overspill_prefix_changes",
    "Turns whose spliced prefix differed from the conversation's previous turn (a prompt-cache "
    "miss): growth (a grown extraction), first (the first splice), edited (the client changed "
    "the summarised history), other (a new model or prompt version, an expired entry).",
    ["model", "why"],
)  # fmt: skip
SHADOW = _counter(
    "overspill_shadow_decisions",
    "What a layer would have done in shadow mode (the request went upstream unchanged).",
    ["model", "layer", "decision"],
)  # fmt: skip
STORE_OPERATIONS = _counter(
    "overspill_store_operations", "History store operations, by operation.", ["op"]
)
STORE_ERRORS = _counter(
    "overspill_store_errors", "History store operations that failed (StoreError).", ["op"]
)
STORE_SECONDS = _histogram(
    "overspill_store_duration_seconds", "Time a history store operation took.",
    ["op"], STORE_BUCKETS,
)  # fmt: skip
OLLAMA_DISCOVERIES = _counter(
    "overspill_ollama_discoveries",
    "Times an Ollama server was asked for a model's window (cache misses), by outcome.",
    ["model", "outcome"],
)  # fmt: skip
OLLAMA_TRUNCATIONS = _counter(
    "overspill_ollama_truncations",
    "Ollama truncations caught: prevented (the pre-flight refused a prompt Ollama would cut) "
    "or suspected (Ollama counted far fewer prompt tokens than were sent).",
    ["model", "stage"],
)  # fmt: skip


FLUSH_SECONDS = 1.0
"""How long a count may wait in a tally before it reaches prometheus-client (and, with several
workers, the shared files). A scrape of this process flushes at once."""


class Tally:
    """A counter child's increments, summed in plain Python until `flush()`.

    prometheus-client's own `inc()` costs ~1 µs (a lock, checks, and with several workers an
    mmap write); a tally's costs ~0.05 µs. Record from the event loop's thread only.
    """

    __slots__ = ("child", "n")

    def __init__(self, child: Counter) -> None:
        self.child = child
        self.n = 0.0
        _TALLIES.append(self)

    def add(self, amount: float = 1.0) -> None:
        """Count `amount` more."""
        self.n += amount
        if not _state.scheduled:
            _schedule()

    def flush(self) -> None:
        """Move the pending sum into the counter."""
        if self.n:
            pending, self.n = self.n, 0.0
            self.child.inc(pending)


class HistogramTally:
    """A histogram child's observations, bucketed in plain Python until `flush()`."""

    __slots__ = ("bounds", "child", "counts", "total")

    def __init__(self, child: Histogram) -> None:
        self.child = child
        self.bounds = tuple(child._upper_bounds)  # the last one is +Inf
        self.counts = [0] * len(self.bounds)
        self.total = 0.0
        _TALLIES.append(self)

    def observe(self, value: float) -> None:
        """Observe one value (into the first bucket whose bound is >= it, as prometheus does)."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        if not _state.scheduled:
            _schedule()

    def flush(self) -> None:
        """Move the pending observations into the histogram's buckets and sum."""
        counts = self.counts
        if not any(counts):
            return
        self.counts, total, self.total = [0] * len(self.bounds), self.total, 0.0
        self.child._sum.inc(total)
        for bucket, count in zip(self.child._buckets, counts, strict=True):
            if count:
                bucket.inc(count)


class _State:
    scheduled = False


_state = _State()
_TALLIES: list[Tally | HistogramTally] = []


def _schedule() -> None:
    """Flush within FLUSH_SECONDS (at once when no event loop runs here)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        flush()
        return
    _state.scheduled = True
    loop.call_later(FLUSH_SECONDS, flush)


def flush() -> None:
    """Move every tally's pending counts into prometheus-client (before a scrape, at exit)."""
    _state.scheduled = False
    for tally in _TALLIES:
        tally.flush()


def _text(value: object) -> str:
    """A label value as Prometheus shows it (`true`/`false` for flags)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(slots=True)
class _RequestMeters:
    """One (model, stream)'s request metrics, bound once."""

    model: str
    stream: bool
    seconds: HistogramTally
    overhead: HistogramTally
    statuses: dict[int, Tally]

    def status(self, status: int) -> Tally:
        """The request counter of a status (made on its first use)."""
        found = self.statuses.get(status)
        if found is None:
            child = REQUESTS.labels(self.model, str(status), _text(self.stream))
            found = self.statuses[status] = Tally(child)
        return found


@dataclass(slots=True)
class _UpstreamMeters:
    """One (provider, model)'s upstream call metrics, bound once."""

    calls: Tally
    seconds: HistogramTally


_requests: dict[tuple[str, bool], _RequestMeters] = {}
_upstreams: dict[tuple[str, str], _UpstreamMeters] = {}


def _request_meters(model: str, stream: bool) -> _RequestMeters:
    found = _requests.get((model, stream))
    if found is None:
        flag = _text(stream)
        found = _requests[(model, stream)] = _RequestMeters(
            model,
            stream,
            HistogramTally(REQUEST_SECONDS.labels(model, flag)),
            HistogramTally(OVERHEAD_SECONDS.labels(model, flag)),
            {},
        )
    return found


def request_done(model: str, stream: bool, status: int, seconds: float) -> None:
    """A request answered (or failed) after `seconds`."""
    meters = _requests.get((model, stream)) or _request_meters(model, stream)
    (meters.statuses.get(status) or meters.status(status)).add()
    meters.seconds.observe(seconds)


def request_head(model: str, stream: bool, overhead: float) -> None:
    """A request's response head left after `overhead` seconds of overspill's own time."""
    meters = _requests.get((model, stream)) or _request_meters(model, stream)
    meters.overhead.observe(overhead)


def upstream_called(provider: str, model: str, seconds: float) -> None:
    """An upstream call returned (or failed) after `seconds`."""
    meters = _upstreams.get((provider, model))
    if meters is None:
        meters = _upstreams[(provider, model)] = _UpstreamMeters(
            Tally(UPSTREAM_CALLS.labels(provider, model)),
            HistogramTally(UPSTREAM_SECONDS.labels(provider, model)),
        )
    meters.calls.add()
    meters.seconds.observe(seconds)


def upstream_failed(provider: str, model: str, error: BaseException) -> None:
    """An upstream call failed (before its first byte or mid-stream)."""
    UPSTREAM_FAILURES.labels(provider, model, failure_class(error)).inc()


def failure_class(error: BaseException) -> str:
    """overflow, rate_limit, timeout, 5xx, 4xx, connection, or other."""
    if isinstance(error, ContextWindowExceeded):
        return "overflow"
    if isinstance(error, UpstreamRateLimited):
        return "rate_limit"
    if isinstance(error, UpstreamTimeout):
        return "timeout"
    if isinstance(error, UpstreamRejected):
        return "4xx"
    if isinstance(error, UpstreamError):
        status = error.upstream_status
        if status is None:
            return "connection"
        if status >= 500:
            return "5xx"
        if status >= 400:
            return "4xx"
    return "other"


def splice_done(model: str, grown: bool, before: int, after: int) -> None:
    """history_splice sent a cached extraction (grown first when `grown`)."""
    SPLICES.labels(model).inc()
    if grown:
        GROWTHS.labels(model).inc()
    compaction("history_splice", before, after)


def tool_results_masked(model: str, policy: str, count: int, before: int, after: int) -> None:
    """observation_masking masked `count` tool results, the prompt `before` → `after` tokens."""
    MASKED_RESULTS.labels(model, policy).inc(count)
    compaction("observation_masking", before, after)


def recalled(model: str, result: str) -> None:
    """The model called overspill's recall tool: found or missing."""
    RECALLS.labels(model, result).inc()


def compaction_job(model: str, result: str) -> None:
    """A background growth ended: done, busy, unneeded, cut, failed or cancelled."""
    COMPACTION_JOBS.labels(model, result).inc()


def cache_warmed(model: str, result: str, seconds: float) -> None:
    """A cache warm-up after a growth ended: warmed or failed, after `seconds`."""
    CACHE_WARMUPS.labels(model, result).inc()
    CACHE_WARMUP_SECONDS.labels(model).observe(seconds)


def compaction_waited(model: str, why: str) -> None:
    """A turn waited for an extraction (`why`: job or extraction)."""
    WAITED_TURNS.labels(model, why).inc()


def recovery_done(model: str, outcome: str) -> None:
    """overflow_recovery's one strike ended: recovered, failed, impossible or error."""
    RECOVERIES.labels(model, outcome).inc()


def compaction(layer: str, before: int, after: int) -> None:
    """A layer condensed a request from `before` to `after` estimated tokens."""
    COMPACTION_TOKENS.labels(layer, "before").observe(before)
    COMPACTION_TOKENS.labels(layer, "after").observe(after)


def extraction_made(model: str, result: str) -> None:
    """A stand-in for a history: reused, extracted, incremental, masked, masked-tool-results
    or cut (the strategy that made it)."""
    EXTRACTIONS.labels(model, result).inc()


def extraction_call(
    model: str,
    outcome: str,
    seconds: float,
    prompt_tokens: int | None,
    completion_tokens: int | None,
) -> None:
    """One of overspill's own calls ended (`outcome`: ok or a failure class)."""
    EXTRACTION_CALLS.labels(model, outcome).inc()
    EXTRACTION_SECONDS.labels(model).observe(seconds)
    if prompt_tokens:
        EXTRACTION_TOKENS.labels(model, "prompt").inc(prompt_tokens)
    if completion_tokens:
        EXTRACTION_TOKENS.labels(model, "completion").inc(completion_tokens)


def own_call_waited(model: str, seconds: float) -> None:
    """An own call got a slot of its deployment after `seconds`."""
    OWN_CALL_WAIT_SECONDS.labels(model).observe(seconds)


def own_tokens(model: str, prompt_tokens: int, completion_tokens: int) -> None:
    """Tokens an own call other than an extraction (a cache warm-up) spent."""
    if prompt_tokens:
        EXTRACTION_TOKENS.labels(model, "prompt").inc(prompt_tokens)
    if completion_tokens:
        EXTRACTION_TOKENS.labels(model, "completion").inc(completion_tokens)


def bounded(model: str, bound: str) -> None:
    """A request's own work was held back by `bound` (once per request)."""
    BOUNDED.labels(model, bound).inc()


def road_taken(model: str, road: str) -> None:
    """A cheaper road was taken instead of model work (`history:masked`, ...)."""
    ROADS.labels(model, road).inc()


def background_jobs(*, running: int = 0, waiting: int = 0) -> None:
    """Background growths started or ended (`running`), queued or taken off (`waiting`)."""
    if running:
        BACKGROUND_JOBS.labels("running").inc(running)
    if waiting:
        BACKGROUND_JOBS.labels("waiting").inc(waiting)


def background_job_dropped(reason: str) -> None:
    """A waiting background growth never ran: queue_full, replaced or closing."""
    BACKGROUND_DROPPED.labels(reason).inc()


_prompt_caches: dict[tuple[str, str], tuple[Tally, Tally]] = {}


def prompt_cache(model: str, kind: str, prompt_tokens: int, cached_tokens: int) -> None:
    """An answer's prompt tokens and how many of them the upstream's cache served (tallied:
    every answer that reports usage passes here)."""
    found = _prompt_caches.get((model, kind))
    if found is None:
        found = _prompt_caches[(model, kind)] = (
            Tally(PROMPT_TOKENS.labels(model, kind)),
            Tally(CACHED_PROMPT_TOKENS.labels(model, kind)),
        )
    found[0].add(prompt_tokens)
    if cached_tokens:
        found[1].add(cached_tokens)


def prefix_changed(model: str, why: str) -> None:
    """A turn's spliced prefix differs from its conversation's previous turn's."""
    PREFIX_CHANGES.labels(model, why).inc()


def shadow_decision(model: str, layer: str, decision: str) -> None:
    """In shadow mode, `layer` would have done `decision`."""
    SHADOW.labels(model, layer, decision).inc()
