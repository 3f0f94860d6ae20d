"""Token budgets, pure: what a request to a model may spend, from the model's real window.

One rule for every layer. The window (kernel.services.Window) loses the output reserve and a
safety margin for estimate error; what is left holds the prompt, system messages included.

- Ollama deployments keep `ollama.safety_margin` of num_ctx (0.75 by default) and
  reserve for the answer at least `ollama.generation_buffer`, more when the request's own
  `max_tokens` is larger (Ollama does not check it up front: the answer would be cut short).
- Other deployments keep `context.safety_margin` of the window free (10%) and reserve the
  request's own `max_completion_tokens` / `max_tokens`, else `context.max_output_tokens`,
  else 1024 (the upstream checks prompt + max_tokens against the window).

Either way the reserve is at most half of what the margin leaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel.config import ModelEntry, is_ollama
from kernel.json_values import is_int

DEFAULT_OUTPUT_RESERVE = 1024


@dataclass(frozen=True, slots=True)
class Budget:
    """Token budget for one request to one model."""

    window: int
    output_reserve: int
    safety_margin: int
    system_tokens: int

    @property
    def prompt_limit(self) -> int:
        """Tokens the whole prompt may take, system messages included."""
        return max(0, self.window - self.output_reserve - self.safety_margin)

    @property
    def input(self) -> int:
        """Tokens available for everything but the system messages."""
        return max(0, self.prompt_limit - self.system_tokens)

    def share(self, fraction: float) -> int:
        """A share of the input budget (e.g. 0.7 for the intact tail)."""
        return int(self.input * fraction)


def requested_output(body: Mapping[str, Any]) -> int | None:
    """The request's own output cap (`max_completion_tokens`, else `max_tokens`)."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if is_int(value) and value > 0:
            return value
    return None


def budget_for(
    entry: ModelEntry, window: int, body: Mapping[str, Any], system_tokens: int = 0
) -> Budget:
    """The budget of a request (its `body`) to `entry` running with `window` tokens."""
    asked = requested_output(body)
    if is_ollama(entry.litellm_params.model):
        usable = int(window * entry.ollama.safety_margin)
        reserve = max(entry.ollama.generation_buffer, asked or 0)
        return Budget(window, min(reserve, usable // 2), window - usable, system_tokens)
    usable = window - int(window * entry.context.safety_margin)
    reserve = asked or entry.context.max_output_tokens or DEFAULT_OUTPUT_RESERVE
    return Budget(window, min(reserve, usable // 2), window - usable, system_tokens)


def call_room(entry: ModelEntry, window: int) -> int:
    """Tokens one internal call to `entry` may spend on its prompt and answer together."""
    budget = budget_for(entry, window, {"max_tokens": 1})
    return budget.prompt_limit + 1


def correction(estimated: int, reported: int | None) -> float:
    """How much the upstream's own count exceeds our estimate (never below 1, at most 2)."""
    if reported is None or estimated <= 0:
        return 1.0
    return min(2.0, max(1.0, reported / estimated))
