"""Token counting of chat histories (gpt-4o's encoding): uncached, through a fresh
TokenCounter, through a warm one, and a warm one with one new message.

Histories are built from the docstrings of standard-library modules (English technical prose,
~400 characters a message): deterministic and offline.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from kernel.tokens import TokenCounter, count_messages, encoding_for

MODEL = "gpt-4o"
Message = dict[str, Any]
_MODULES = ("json", "inspect", "pathlib", "asyncio", "collections", "functools", "argparse")


def _docstrings() -> list[str]:
    docs: list[str] = []
    for name in _MODULES:
        for _, member in inspect.getmembers(importlib.import_module(name)):
            doc = inspect.getdoc(member) if callable(member) else None
            if doc and len(doc) > 80:
                docs.append(doc)
    return list(dict.fromkeys(docs))


def history(size: int) -> list[Message]:
    """A system prompt plus `size - 1` alternating, distinct user/assistant turns."""
    docs = _docstrings()
    turns = [
        {"role": "user" if i % 2 else "assistant", "content": f"{i}: {docs[i % len(docs)]}"}
        for i in range(1, size)
    ]
    return [{"role": "system", "content": "You are a helpful assistant."}, *turns]


def ways(messages: list[Message]) -> dict[str, Callable[[], int]]:
    warm = TokenCounter(MODEL)
    warm.count_messages(messages)
    turn = itertools.count()

    def grown() -> int:
        new = {"role": "user", "content": f"Question {next(turn)} about the above?"}
        return warm.count_messages([*messages, new])

    return {
        "cold": lambda: count_messages(messages, MODEL),
        "cold, fresh counter": lambda: TokenCounter(MODEL).count_messages(messages),
        "warm": lambda: warm.count_messages(messages),
        "warm + one message": grown,
    }


@pytest.mark.parametrize("way", ["cold", "cold, fresh counter", "warm", "warm + one message"])
@pytest.mark.parametrize("size", [200, 2000])
def test_count(benchmark: BenchmarkFixture, size: int, way: str) -> None:
    """One history's tokens counted."""
    encoding_for(MODEL)  # the encoding's load stays out of the figures
    benchmark.group = f"tokens: {size} messages"
    benchmark(ways(history(size))[way])
