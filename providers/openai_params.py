"""OpenAI's chat completion parameters, by name: what a provider maps, drops or refuses.

Kept apart from `providers/litellm.py` so that a path that never imports litellm (the
Anthropic wire, `providers/anthropic.py`) decides the same way which fields are OpenAI's.
"""

from __future__ import annotations

OPENAI_CHAT_PARAMS = frozenset(
    {
        "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
        "max_completion_tokens", "max_tokens", "metadata", "modalities", "n",
        "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
        "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier",
        "stop", "store", "stream_options", "temperature", "tool_choice", "tools",
        "top_logprobs", "top_p", "user", "verbosity", "web_search_options", "thinking",
    }
)  # fmt: skip
