"""Tests for kernel.tokens: encoding choice, offline loading, OpenAI's message accounting."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import tokens
from kernel.tokens import (
    IMAGE_TOKENS_HIGH,
    IMAGE_TOKENS_LOW,
    TokenCounter,
    TokenizerUnavailable,
    count_message,
    count_messages,
    count_text,
    encoding_for,
    encoding_name_for,
    resolve_cache_dir,
)

# OpenAI cookbook "How to count tokens with tiktoken": the API reported 129 prompt tokens for
# these messages on gpt-3.5-turbo / gpt-4 (cl100k_base) and 124 on gpt-4o (o200k_base).
COOKBOOK_MESSAGES: list[dict[str, str]] = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate "
        "jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
        "for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client "
        "deliverable.",
    },
]


def _no_download(blobpath: str) -> bytes:
    """Stand in for tiktoken's downloader: fail as an offline machine would."""
    raise OSError(f"network disabled in tests: {blobpath}")


@pytest.fixture
def fresh_tiktoken(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Forget every loaded encoding and forbid downloads, so loading really reads files."""
    monkeypatch.setattr(tiktoken.load, "read_file", _no_download)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    tokens.load_encoding.cache_clear()
    tokens.encoding_for.cache_clear()
    yield
    tokens.load_encoding.cache_clear()
    tokens.encoding_for.cache_clear()


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("openai/gpt-4.1-nano", "o200k_base"),
        ("azure/gpt-4.5-preview", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("o1-mini", "o200k_base"),
        ("o3", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("omni-moderation-latest", "o200k_base"),
        ("ft:gpt-4o-mini:org::abc", "o200k_base"),
        ("GPT-4O", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("ollama/llama3", "cl100k_base"),
        ("anthropic/claude-3-5-sonnet", "cl100k_base"),
        ("", "cl100k_base"),
    ],
)
def test_encoding_name_follows_model_family(model: str, expected: str) -> None:
    """o200k_base for the gpt-4o/4.1/4.5/5 and o-series families, cl100k_base otherwise."""
    assert encoding_name_for(model) == expected


def test_encoding_for_is_cached_per_model() -> None:
    """The same Encoding object comes back for a model and for models sharing an encoding."""
    assert encoding_for("gpt-4o") is encoding_for("gpt-4o")
    assert encoding_for("gpt-4o") is encoding_for("o3-mini")
    assert encoding_for("gpt-4").name == "cl100k_base"
    assert encoding_for("gpt-4o").name == "o200k_base"


def test_encodings_load_offline_from_litellm_files(
    fresh_tiktoken: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With TIKTOKEN_CACHE_DIR unset, both encodings load from litellm's bundled files."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "restored-after-test")
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    imported_before = "litellm" in sys.modules
    assert count_text("hello world", "gpt-4") == 2
    assert count_text("hello world", "gpt-4o") == 2
    cache_dir = Path(os.environ["TIKTOKEN_CACHE_DIR"])
    assert cache_dir.parts[-3:] == ("litellm", "litellm_core_utils", "tokenizers")
    assert ("litellm" in sys.modules) == imported_before


def test_missing_encoding_file_raises_clear_error(
    fresh_tiktoken: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A cache directory without the files gives TokenizerUnavailable naming the directory."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(TokenizerUnavailable, match="TIKTOKEN_CACHE_DIR=") as info:
        encoding_for("gpt-4")
    assert str(tmp_path) in str(info.value)


def test_cache_dir_prefers_environment() -> None:
    """An explicit TIKTOKEN_CACHE_DIR wins over the bundled directory."""
    assert resolve_cache_dir({"TIKTOKEN_CACHE_DIR": "/x"}, Path("/bundled")) == "/x"
    assert resolve_cache_dir({}, Path("/bundled")) == "/bundled"


def test_cache_dir_missing_everywhere_raises() -> None:
    """Without the variable and without litellm's files the error says what to set."""
    with pytest.raises(TokenizerUnavailable, match="set TIKTOKEN_CACHE_DIR"):
        resolve_cache_dir({}, None)


def test_count_text_treats_special_tokens_as_text() -> None:
    """Text that spells a special token is counted as ordinary text, not rejected."""
    assert count_text("<|endoftext|>") > 1
    assert count_text("") == 0


@pytest.mark.parametrize(("model", "expected"), [("gpt-4", 129), ("gpt-4o", 124)])
def test_cookbook_example_matches_openai_reported_usage(model: str, expected: int) -> None:
    """The cookbook's messages count exactly what OpenAI's API reported for them."""
    assert count_messages(COOKBOOK_MESSAGES, model) == expected


def test_message_counts_overhead_role_and_content() -> None:
    """A message costs 3 + role tokens + content tokens."""
    message = {"role": "user", "content": "hello world"}
    assert count_message(message) == 3 + 1 + 2


def test_name_adds_its_tokens_plus_one() -> None:
    """A name costs its tokens plus one."""
    base = {"role": "user", "content": "hi"}
    assert count_message({**base, "name": "bob"}) == count_message(base) + count_text("bob") + 1


def test_none_content_counts_only_overhead() -> None:
    """content None (an assistant turn with only tool calls) adds nothing."""
    assert count_message({"role": "assistant", "content": None}) == 3 + 1


def test_content_parts_count_text_and_fixed_image_cost() -> None:
    """Text parts count their text; images cost 85 at low detail and 765 otherwise."""
    low = {"type": "image_url", "image_url": {"url": "data:,", "detail": "low"}}
    high = {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
    message: dict[str, Any] = {
        "role": "user",
        "content": [{"type": "text", "text": "hello world"}, low, high, {"type": "audio"}],
    }
    assert count_message(message) == 3 + 1 + 2 + IMAGE_TOKENS_LOW + IMAGE_TOKENS_HIGH


def test_tool_calls_and_tool_call_id_are_counted() -> None:
    """Tool call names and arguments, and a tool result's tool_call_id, are counted."""
    call = {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"a":1}'}}
    assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
    expected = 3 + count_text("assistant") + count_text("get") + count_text('{"a":1}')
    assert count_message(assistant) == expected
    result = {"role": "tool", "tool_call_id": "call_abc", "content": "42"}
    assert count_message(result) == 3 + count_text("tool") + count_text("call_abc") + 1


def test_unknown_fields_are_ignored() -> None:
    """Fields outside the recipe (cache_control, metadata...) do not change the count."""
    base = {"role": "user", "content": "hi"}
    assert count_message({**base, "cache_control": {"type": "ephemeral"}, "x": "y"}) == (
        count_message(base)
    )


def test_count_messages_adds_reply_priming() -> None:
    """A prompt costs the sum of its messages plus 3; an empty prompt costs 3."""
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert count_messages(messages) == sum(count_message(m) for m in messages) + 3
    assert count_messages([]) == 3


_roles = st.sampled_from(["system", "user", "assistant", "tool"])
_parts = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=40)),
        st.just({"type": "image_url", "image_url": {"url": "u", "detail": "low"}}),
    ),
    max_size=3,
)
_messages = st.lists(
    st.fixed_dictionaries(
        {"role": _roles, "content": st.one_of(st.none(), st.text(max_size=80), _parts)},
        optional={"name": st.text(min_size=1, max_size=10)},
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(messages=_messages)
def test_counter_agrees_with_uncached_count(messages: list[dict[str, Any]]) -> None:
    """TokenCounter gives the same totals as count_messages, cold and warm."""
    counter = TokenCounter("gpt-4o")
    expected = count_messages(messages, "gpt-4o")
    assert counter.count_messages(messages) == expected
    assert counter.count_messages(messages) == expected


def test_counter_reuses_counts_for_a_growing_history() -> None:
    """Resending a history with one new message tokenizes only the new one."""
    counter = TokenCounter()
    history = [{"role": "user", "content": f"message {i}"} for i in range(10)]
    counter.count_messages(history)
    assert (counter.hits, counter.misses) == (0, 10)
    counter.count_messages([*history, {"role": "assistant", "content": "new"}])
    assert (counter.hits, counter.misses) == (10, 11)


def test_counter_key_ignores_field_order() -> None:
    """Equal messages with fields in another order share one cache entry."""
    counter = TokenCounter()
    counter.count_message({"role": "user", "content": "hi"})
    counter.count_message({"content": "hi", "role": "user"})
    assert (len(counter), counter.hits) == (1, 1)


def test_counter_cache_is_bounded_lru() -> None:
    """The cache holds at most max_entries, evicting the least recently used."""
    counter = TokenCounter(max_entries=2)
    a, b, c = ({"role": "user", "content": x} for x in "abc")
    counter.count_message(a)
    counter.count_message(b)
    counter.count_message(a)
    counter.count_message(c)
    assert len(counter) == 2
    counter.count_message(a)
    counter.count_message(b)
    assert (counter.hits, counter.misses) == (2, 4)


def test_counter_counts_unserialisable_messages_without_caching() -> None:
    """A message orjson cannot serialise is still counted, just not cached."""
    counter = TokenCounter()
    message = {"role": "user", "content": "hi", "extra": object()}
    assert counter.count_message(message) == count_message(message)
    assert len(counter) == 0


def test_counter_rejects_empty_cache() -> None:
    """max_entries below 1 is refused."""
    with pytest.raises(ValueError, match="max_entries must be at least 1"):
        TokenCounter(max_entries=0)
