"""What the layers may use, built once at startup by the shell."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kernel.calibration import Calibration
from kernel.config import ModelEntry, Settings
from kernel.store import HistoryStore
from kernel.types import Complete


class WindowInfo(Protocol):
    """A resolved Ollama window: the num_ctx to send, its source, and what capped it."""

    @property
    def num_ctx(self) -> int:
        """The context length to send as `num_ctx`."""
        ...

    @property
    def source(self) -> str:
        """Where it came from: `num_ctx`, `config`, `ps`, `modelfile` or `default`."""
        ...

    @property
    def capped_by(self) -> str | None:
        """`trained` or `max_num_ctx` when a cap lowered it."""
        ...


class WindowResolver(Protocol):
    """Finds an Ollama deployment's window; must not raise when discovery fails."""

    async def window(self, entry: ModelEntry) -> WindowInfo:
        """The window to run `entry` with."""
        ...


@dataclass(frozen=True)
class Services:
    """What layers may use, built once at startup."""

    settings: Settings
    internal: Callable[[str], Complete]
    """An internal call to a configured model name, skipping the layers."""
    window_of: Callable[[str], int | None]
    """A configured model name's context window (config, else litellm's map)."""
    store: HistoryStore
    ollama: WindowResolver | None = None
    """Ollama window discovery (providers/ollama.py implements it)."""
    calibration: Calibration = field(default_factory=Calibration)
    """Per-model token-estimate correction, shared by the layers."""
