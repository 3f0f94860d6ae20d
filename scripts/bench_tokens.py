"""Time token counting of chat histories: uncached, and through a warm TokenCounter.

Usage: ``python scripts/bench_tokens.py [--model gpt-4o] [--compare-litellm]``

Histories are built from the docstrings of standard-library modules (English technical prose,
~400 characters a message), so runs are deterministic and offline. Figures are microseconds,
the best of several runs. ``--compare-litellm`` also checks that ``count_messages`` agrees
with ``litellm.token_counter`` on the same histories (it imports litellm, which is slow).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import time
from collections.abc import Callable
from typing import Any

from kernel.tokens import TokenCounter, count_messages, encoding_for

Message = dict[str, Any]
_MODULES = ("json", "inspect", "pathlib", "asyncio", "collections", "functools", "argparse")


def _docstrings() -> list[str]:
    """Return distinct docstrings of some stdlib functions and classes."""
    docs: list[str] = []
    for name in _MODULES:
        for _, member in inspect.getmembers(importlib.import_module(name)):
            doc = inspect.getdoc(member) if callable(member) else None
            if doc and len(doc) > 80:
                docs.append(doc)
    return list(dict.fromkeys(docs))


def history(size: int, docs: list[str]) -> list[Message]:
    """Return a system prompt plus ``size - 1`` alternating, distinct user/assistant turns."""
    turns = [
        {"role": "user" if i % 2 else "assistant", "content": f"{i}: {docs[i % len(docs)]}"}
        for i in range(1, size)
    ]
    return [{"role": "system", "content": "You are a helpful assistant."}, *turns]


def best_us(run: Callable[[], object], repeat: int = 5) -> float:
    """Return the fastest of ``repeat`` runs in microseconds."""
    timings = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        run()
        timings.append(time.perf_counter_ns() - start)
    return min(timings) / 1000


def bench(messages: list[Message], model: str) -> dict[str, float]:
    """Time one history: uncached, warm cache, and warm cache plus one new message."""
    warm = TokenCounter(model)
    warm.count_messages(messages)
    turn = iter(range(1_000_000))

    def grown() -> int:
        """Count the history plus a message the cache has not seen yet."""
        new = {"role": "user", "content": f"Question {next(turn)} about the above?"}
        return warm.count_messages([*messages, new])

    return {
        "cold": best_us(lambda: count_messages(messages, model)),
        "cold_counter": best_us(lambda: TokenCounter(model).count_messages(messages)),
        "warm": best_us(lambda: warm.count_messages(messages)),
        "warm_plus_one": best_us(grown),
    }


def compare_litellm(histories: dict[int, list[Message]], model: str) -> None:
    """Print count_messages next to litellm.token_counter for each history."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    for size, messages in histories.items():
        ours = count_messages(messages, model)
        theirs = litellm.token_counter(model=model, messages=messages)
        print(f"{size:>5} messages  ours={ours}  litellm={theirs}  diff={ours - theirs:+d}")


def main() -> None:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-4o")
    parser.add_argument("--compare-litellm", action="store_true")
    args = parser.parse_args()
    encoding_for(args.model)  # load the encoding outside the timings
    docs = _docstrings()
    histories = {size: history(size, docs) for size in (200, 2_000)}
    print(f"model={args.model} encoding={encoding_for(args.model).name}  (µs, best of 5)")
    print(
        f"{'messages':>8} {'tokens':>8} {'cold':>10} {'cold+LRU':>10} {'warm':>10} {'warm+1':>10}"
    )
    for size, messages in histories.items():
        t = bench(messages, args.model)
        tokens = count_messages(messages, args.model)
        print(
            f"{size:>8} {tokens:>8} {t['cold']:>10.0f} {t['cold_counter']:>10.0f}"
            f" {t['warm']:>10.0f} {t['warm_plus_one']:>10.0f}"
        )
    if args.compare_litellm:
        compare_litellm(histories, args.model)


if __name__ == "__main__":
    main()
