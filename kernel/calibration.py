"""How far our token estimates are from each model's own count, learned from upstream usage.

tiktoken is exact for OpenAI models and an estimate for everything else (SmolLM2 counts 10-24%
more tokens than cl100k_base for the same text). Each time a request whose size we estimated
comes back with the upstream's `usage.prompt_tokens`, the ratio is folded into a per-model
moving average, and budgets use it next time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIN_RATIO = 0.5
MAX_RATIO = 3.0
MIN_TOKENS = 256
"""Smaller prompts are ignored: the chat template's fixed tokens would dominate their ratio."""


@dataclass
class Calibration:
    """Per-model ratio of upstream-reported to estimated prompt tokens (1.0 until observed)."""

    weight: float = 0.3
    ratios: dict[str, float] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)

    def ratio(self, model: str) -> float:
        """The current correction for a model."""
        return self.ratios.get(model, 1.0)

    def observe(self, model: str, estimated: int, reported: int | None) -> None:
        """Fold one (estimate, upstream count) pair into the model's ratio."""
        if reported is None or estimated < MIN_TOKENS or reported <= 0:
            return
        observed = min(MAX_RATIO, max(MIN_RATIO, reported / estimated))
        count = self.samples.get(model, 0)
        current = self.ratios.get(model)
        self.ratios[model] = (
            observed if current is None else current + self.weight * (observed - current)
        )
        self.samples[model] = count + 1
