"""What one client request makes overspill spend upstream, and the bound on it.

    Spend               one per client request (RequestContext.spend), shared by every own
    │                   call it causes: extraction, condensing, cache warm-ups
    ├── bounds          the calls and input tokens its own calls may take (`Bounds.of`)
    ├── tenant_left     the tenant's own-token budget left this period (None: no budget)
    ├── own[model]      calls (failed ones too), prompt and completion tokens, by model
    ├── upstream_calls  every upstream call the request caused, its own attempts included
    └── roads           the cheaper roads taken because a bound was reached

The layers plan within what is left (`calls_left`, `tokens_left`) before they start work, so a
bound changes the plan (a smaller extraction, excerpts instead of condensed documents, masking
or a middle cut) instead of cutting a half-done one short; `admit` is the hard stop every own
call passes through (`Services.internal`, filled by the shell), raising `OverBudget`, which
the layers treat as "no model may help": they take the cheaper road and say so (`took`).

Everything recorded here is also written at once into the request's notes (the
`x-overspill-*` headers and the request's one log line, on every API surface):

    spent-calls          own calls attempted (failed ones included)
    spent-failed         of those, the ones that failed (only when some did)
    spent-tokens-in      their input tokens: as the upstream reported them (usage, or the
                         count an overflow error stated), else overspill's estimate
    spent-tokens-out     their output tokens (usage, else the answer counted)
    spent-by-model       `model calls=N in=N out=N` per model, comma-separated
    upstream-calls       every upstream call the request caused (written from the second on)
    bound                which bound held work back: calls, tokens or tenant-budget
    bound-roads          what was done instead: `history:masked`, `documents:excerpts`, ...

A request that needed no help has a Spend and writes no note: the hot path pays one small
object and an integer increment per upstream call.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Literal

from kernel import metrics
from kernel.config import ModelEntry

BoundName = Literal["calls", "tokens", "tenant-budget"]

DEFAULT_OWN_CALLS = 16
"""`context.max_own_calls`'s default: own upstream calls one client request may cause."""
DEFAULT_OWN_WINDOWS = 4
"""`context.max_own_input_tokens` defaults to this many windows of the model."""
UNKNOWN_WINDOW = 8192
"""The window the default token bound assumes until the model's real one is known."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one client request's own calls may take together."""

    calls: int
    input_tokens: int

    @classmethod
    def of(cls, entry: ModelEntry, window: int | None) -> Bounds:
        """A model's bounds: `context.max_own_calls` and `context.max_own_input_tokens`
        (default: `DEFAULT_OWN_WINDOWS` times the window)."""
        context = entry.context
        tokens = context.max_own_input_tokens
        if tokens is None:
            tokens = DEFAULT_OWN_WINDOWS * (window or UNKNOWN_WINDOW)
        return cls(context.max_own_calls, tokens)


@dataclass(slots=True)
class Tally:
    """One model's own calls in one request (or one period, summed)."""

    calls: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: Tally) -> None:
        """Add another tally's counts to this one."""
        self.calls += other.calls
        self.failed += other.failed
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One tenant's own calls to one model on one UTC day (`YYYY-MM-DD`), as stored."""

    tenant: str
    day: str
    model: str
    tally: Tally


class OverBudget(Exception):
    """An own call refused before it was sent: the request's bound or the tenant's budget
    is spent. Internal: the layers take a cheaper road; no client ever sees it."""

    def __init__(self, bound: BoundName, message: str) -> None:
        super().__init__(message)
        self.bound: BoundName = bound


@dataclass(slots=True)
class Spend:
    """One client request's spending (see the module docstring)."""

    tenant: str
    notes: MutableMapping[str, str] = field(default_factory=dict)
    """Where the spending is written as it happens (the request's notes)."""
    bounds: Bounds | None = None
    """None until the first layer that may spend sets them (`limit`); unbounded until then."""
    tenant_left: int | None = None
    """The tenant's own tokens left this period when its budget was read (None: no budget)."""
    tenant_checked: bool = False
    """Whether the tenant's budget was read (once, before the request's first own call)."""
    own: dict[str, Tally] = field(default_factory=dict)
    upstream_calls: int = 0
    bound: BoundName | None = None
    roads: list[str] = field(default_factory=list)
    model: str = metrics.NO_MODEL
    """The model whose bounds hold (the `model` label of the bound's metrics)."""

    def limit(self, bounds: Bounds, model: str) -> None:
        """Set the request's bounds (the first layer's hold for the whole request)."""
        if self.bounds is None:
            self.bounds = bounds
            self.model = model

    @property
    def calls(self) -> int:
        """Own calls attempted so far."""
        return sum(tally.calls for tally in self.own.values())

    @property
    def prompt_tokens(self) -> int:
        """Own input tokens so far."""
        return sum(tally.prompt_tokens for tally in self.own.values())

    @property
    def completion_tokens(self) -> int:
        """Own output tokens so far."""
        return sum(tally.completion_tokens for tally in self.own.values())

    def calls_left(self) -> int:
        """Own calls the request may still make."""
        if self.bounds is None:
            return 1 << 30
        return max(0, self.bounds.calls - self.calls)

    def tokens_left(self) -> int:
        """Own input tokens the request may still send (its bound, and the tenant's budget)."""
        left = 1 << 50
        if self.bounds is not None:
            left = self.bounds.input_tokens - self.prompt_tokens
        if self.tenant_left is not None:
            used = self.prompt_tokens + self.completion_tokens
            left = min(left, self.tenant_left - used)
        return max(0, left)

    def why_not(self, estimate: int) -> BoundName | None:
        """Which bound a call sending `estimate` input tokens would pass (None: it may go)."""
        if self.calls_left() < 1:
            return "calls"
        if self.tenant_left is not None:
            used = self.prompt_tokens + self.completion_tokens
            if used + estimate > self.tenant_left:
                return "tenant-budget"
        if self.bounds is not None and self.prompt_tokens + estimate > self.bounds.input_tokens:
            return "tokens"
        return None

    def admit(self, model: str, estimate: int) -> None:
        """Let one own call go (counted from now on), or raise OverBudget."""
        refused = self.why_not(estimate)
        if refused is not None:
            self.held_back(refused)
            raise OverBudget(refused, self._refusal(refused, model, estimate))
        self.own.setdefault(model, Tally()).calls += 1
        self._write()

    def settle(self, model: str, prompt_tokens: int, completion_tokens: int, ok: bool) -> None:
        """Record what an admitted call cost (a failed one's input too)."""
        tally = self.own.setdefault(model, Tally())
        tally.prompt_tokens += prompt_tokens
        tally.completion_tokens += completion_tokens
        if not ok:
            tally.failed += 1
        self._write()

    def called(self) -> None:
        """One more upstream call (the client's own attempts too: the router counts)."""
        self.upstream_calls += 1
        if self.upstream_calls > 1:
            self.notes["upstream-calls"] = str(self.upstream_calls)

    def held_back(self, bound: BoundName) -> None:
        """A bound changed what overspill does for this request (the first one is noted)."""
        if self.bound is None:
            self.bound = bound
            self.notes["bound"] = bound
            metrics.bounded(self.model, bound)

    def took(self, road: str, bound: BoundName | None = None) -> None:
        """A cheaper road taken instead of model work (`history:masked`, ...)."""
        if bound is not None:
            self.held_back(bound)
        if road not in self.roads:
            self.roads.append(road)
            self.notes["bound-roads"] = ",".join(self.roads)
            metrics.road_taken(self.model, road)

    def _refusal(self, bound: BoundName, model: str, estimate: int) -> str:
        if bound == "calls":
            return f"own call to {model} refused: this request's {self.calls} own calls reached"
        return (
            f"own call to {model} refused: its ~{estimate} input tokens would pass the "
            f"{'tenant' if bound == 'tenant-budget' else 'request'}'s own-token bound"
        )

    def _write(self) -> None:
        notes = self.notes
        notes["spent-calls"] = str(self.calls)
        failed = sum(tally.failed for tally in self.own.values())
        if failed:
            notes["spent-failed"] = str(failed)
        notes["spent-tokens-in"] = str(self.prompt_tokens)
        notes["spent-tokens-out"] = str(self.completion_tokens)
        notes["spent-by-model"] = ", ".join(
            f"{model} calls={t.calls} in={t.prompt_tokens} out={t.completion_tokens}"
            for model, t in self.own.items()
        )
