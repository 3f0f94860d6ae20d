"""Budgets: one rule for every layer, from the model's real window (Ollama's and others')."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from middleware.condensing.budget import (
    budget_for,
    call_room,
    correction,
    requested_output,
)
from tests.conftest import settings_from

CONFIG = """
model_list:
  - model_name: remote
    litellm_params: {model: openai/gpt-4o-mini}
    context: {max_output_tokens: 256}
  - model_name: plain
    litellm_params: {model: openai/other}
  - model_name: llama
    litellm_params: {model: ollama_chat/llama3.2}
"""
REMOTE, PLAIN, LLAMA = settings_from(CONFIG).model_list


def test_budget_is_the_window_minus_reserve_margin_and_system() -> None:
    """input = window - output reserve - safety margin (10%) - system prompt."""
    budget = budget_for(REMOTE, 2048, {}, system_tokens=100)
    assert (budget.output_reserve, budget.safety_margin, budget.input) == (256, 204, 1488)
    assert budget.prompt_limit == 1588
    assert budget.share(0.7) == 1041


def test_output_reserve_never_takes_more_than_half_of_what_the_margin_leaves() -> None:
    """A huge max_tokens cannot leave the conversation no room at all."""
    assert budget_for(REMOTE, 1000, {"max_tokens": 5000}).output_reserve == 450


def test_output_reserve_prefers_the_requests_own_cap() -> None:
    """max_completion_tokens, then max_tokens, then the configured default, then 1024."""
    assert (
        budget_for(REMOTE, 8192, {"max_completion_tokens": 50, "max_tokens": 80}).output_reserve
        == 50
    )
    assert budget_for(REMOTE, 8192, {"max_tokens": 80}).output_reserve == 80
    assert budget_for(REMOTE, 8192, {"max_tokens": True}).output_reserve == 256
    assert budget_for(PLAIN, 8192, {}).output_reserve == 1024
    assert requested_output({"max_tokens": 0}) is None


def test_ollama_keeps_a_quarter_and_its_generation_buffer() -> None:
    """Ollama: num_ctx x 0.75, less the 512-token generation buffer."""
    budget = budget_for(LLAMA, 4096, {})
    assert budget.prompt_limit == 3072 - 512
    assert budget.safety_margin == 1024


def test_seed_003_numbers() -> None:
    """Ollama: 8192 x 0.75 - 512 = 5632 usable; 2048 leaves 1024."""
    assert budget_for(LLAMA, 8192, {}).prompt_limit == 5632
    assert budget_for(LLAMA, 2048, {}).prompt_limit == 1024


def test_ollama_reserves_a_larger_max_tokens_than_its_buffer() -> None:
    """A request asking for more than the generation buffer gets that room, not less."""
    assert budget_for(LLAMA, 8192, {"max_tokens": 2000}).prompt_limit == 6144 - 2000
    assert budget_for(LLAMA, 8192, {"max_tokens": 100}).prompt_limit == 6144 - 512


def test_a_calls_room_holds_prompt_and_answer() -> None:
    """An internal call's room is what its prompt and answer may spend together."""
    assert call_room(LLAMA, 4096) == 3072 - 512 + 1
    assert call_room(PLAIN, 1000) == 900


@given(window=st.integers(64, 1_000_000), asked=st.integers(1, 2_000_000))
def test_budgets_never_go_negative_or_past_the_window(window: int, asked: int) -> None:
    """Whatever the window and max_tokens, 0 <= prompt_limit and reserve + margin <= window."""
    for entry in (REMOTE, PLAIN, LLAMA):
        budget = budget_for(entry, window, {"max_tokens": asked})
        assert budget.prompt_limit >= 0
        assert budget.output_reserve + budget.safety_margin <= window


def test_correction_only_ever_grows_estimates() -> None:
    """The upstream's count raises a short estimate, never lowers it, at most doubles it."""
    assert correction(1000, 1200) == 1.2
    assert correction(1000, 800) == 1.0
    assert correction(1000, None) == 1.0
    assert correction(1000, 9000) == 2.0
