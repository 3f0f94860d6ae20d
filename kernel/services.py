"""What the layers may use, built once at startup by the shell (proxy/system.py).

Services
├── settings    the validated config
├── store       conversation state: extractions, document batches, calibration samples
├── estimator   the one token estimator (counts, calibrated estimates, learning)
├── windows     each deployment's real context window (config, Ollama discovery, litellm)
├── recall      what the conversations' last turns derived (chains, token counts)
├── usage       the tenants' own-token usage and budgets (kernel/usage.py)
├── internal    overspill's own call to a configured model (extraction, condensing): it
│               skips the conversation layers and goes through the model layers, counted
│               against the request's Spend (kernel/spending.py) and the tenant's usage
└── warm        the same route, to fill an upstream's prefix cache after a growth
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kernel.config import ModelEntry, Settings
from kernel.estimator import Estimator
from kernel.recall import Recall
from kernel.spending import Spend
from kernel.store import HistoryStore
from kernel.types import ChatRequest, Complete
from kernel.usage import UsageLedger


@dataclass(frozen=True, slots=True)
class Window:
    """A deployment's context window in tokens, and where overspill learned it."""

    tokens: int
    source: str
    """`config`, `litellm` (its model map), or for Ollama `num_ctx`, `ps`, `modelfile`,
    `default`."""
    capped_by: str | None = None
    """`trained` or `max_num_ctx` when a cap lowered the chosen value (Ollama)."""


class Windows(Protocol):
    """Finds deployments' windows (providers/windows.py implements it)."""

    async def of(self, entry: ModelEntry) -> Window | None:
        """The window `entry` runs with; None when nobody knows. Never raises."""
        ...


class Internal(Protocol):
    """overspill's own calls to a configured model (proxy/system.py implements it)."""

    def __call__(self, model: str, spend: Spend | None = None) -> Complete:
        """A call to `model` (a configured name) for the request `spend` counts; each call is
        admitted against its bounds first (`OverBudget` when it may not go)."""
        ...


class Warm(Protocol):
    """Fills an upstream's prefix cache ahead of a conversation's next turn (proxy/system.py)."""

    async def __call__(
        self, request: ChatRequest, entry: ModelEntry, spend: Spend | None = None
    ) -> str:
        """Send `request` (a conversation as its next turn will start) to `entry`'s model for
        one token, through the model layers, counted in `spend`. Returns `warmed`, `skipped`
        (`context.warm_cache` off, or `auto` and the model is not self-hosted, or the bound is
        spent) or `failed` (logged). Never raises."""
        ...


@dataclass(frozen=True)
class Services:
    """What layers may use, built once at startup."""

    settings: Settings
    store: HistoryStore
    estimator: Estimator
    windows: Windows
    internal: Internal
    """overspill's own call to a configured model name (see the module docstring)."""
    served: Mapping[str, ModelEntry] = field(default_factory=dict)
    """Names served beyond `model_list`'s spelled-out ones: aliases, and names a wildcard
    `model_name` serves (added on first use)."""
    warm: Warm | None = None
    """None: nothing fills upstream caches (layer tests that do not need it)."""
    recall: Recall = field(default_factory=Recall)
    """What each conversation's last turns derived, so a turn checks and counts only what it
    adds (one per system, shared by its layers; bounded)."""
    usage: UsageLedger | None = None
    """The tenants' own-token budgets (read before a request plans own work); None: none."""

    def entry(self, name: str) -> ModelEntry:
        """The first deployment of a model name the proxy serves."""
        found = self.settings.deployments(name)
        return found[0] if found else self.served[name]
