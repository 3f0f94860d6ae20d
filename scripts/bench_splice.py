"""The splice decision's CPU cost, and what the splice saves on a long real conversation.

    .venv/bin/python scripts/bench_splice.py                      # decision cost, diskcache
    .venv/bin/python scripts/bench_splice.py --redis redis://127.0.0.1:6379/0
    .venv/bin/python scripts/bench_splice.py --e2e --turns 100    # real local model, ~15 min

Decision cost: a conversation of N messages (~500 characters each) whose first N-10 are
cached, sent through the history_splice layer to a no-op upstream: conversation id, store read,
hash-chain check, token estimate, assembly. The target is <= 2 ms CPU for 200 messages.

End to end: the same scripted conversation (canned assistant turns, `max_tokens: 1`) through
`overspill serve` in front of the real llama-server (2048-token window), once with
`[overflow_recovery]` and once with `[history_splice, overflow_recovery]`; prints upstream calls,
failed calls and prompt tokens the upstream processed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernel.config import parse_config
from kernel.conversation import chain
from kernel.store import DiskHistoryStore, HistoryEntry, HistoryStore
from kernel.types import ChatRequest, ChatResponse, Complete, RequestContext
from middleware.condensing.extraction import PROMPT_VERSION
from middleware.layers.history_splice import HistorySplice
from providers.fake import completion
from tests.conftest import make_services

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 1000000}
"""
ANSWER = ChatResponse(body=orjson.dumps(completion("ok", prompt_tokens=900)))


def conversation(size: int) -> list[dict[str, Any]]:
    """A system prompt and `size - 1` alternating turns of ~500 characters."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for i in range(size - 1):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i}: " + " ".join(f"word{(i * 7 + j) % 97}" for j in range(70))
        messages.append({"role": role, "content": text})
    return messages


def no_calls(name: str) -> Complete:
    """Splice decisions make no model calls."""
    raise AssertionError(f"unexpected internal call to {name}")


async def upstream(request: ChatRequest, ctx: RequestContext) -> ChatResponse:
    return ANSWER


async def decision_cost(store: HistoryStore, size: int, repeats: int) -> float:
    """Median CPU microseconds for one splice decision over an N-message conversation."""
    settings = parse_config(CONFIG, "bench.yaml", {}).settings
    layer = HistorySplice(make_services(settings, store, no_calls, {"local": 1_000_000}))
    messages = conversation(size)
    end = size - 10
    await store.put(
        HistoryEntry(
            tenant="t",
            conversation_id=f"bench-{size}",
            model_id="local",
            historical_end_index=end,
            message_count=end,
            extraction="Notes:\n- " + "fact " * 100,
            chain=chain(messages, end, PROMPT_VERSION),
            prompt_version=PROMPT_VERSION,
            tokens_before=size * 120,
            tokens_after=110,
            created_at=time.time(),
        )
    )
    body = {"model": "local", "messages": messages}
    request = ChatRequest("local", tuple(messages), False, body)
    samples = []
    for attempt in range(repeats + 3):
        ctx = RequestContext(
            "r", "t", model=settings.model_list[0], conversation_hint=f"bench-{size}"
        )
        start = time.process_time()
        await layer.handle(request, ctx, upstream)
        if attempt >= 3:
            samples.append((time.process_time() - start) * 1e6)
        assert ctx.notes["action"] == "spliced", ctx.notes
    return statistics.median(samples)


async def decisions(redis_url: str | None, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, HistoryStore] = {"diskcache": DiskHistoryStore(tmp)}
        if redis_url:
            from kernel.store_redis import RedisHistoryStore

            stores["redis"] = RedisHistoryStore(redis_url)
        print(f"{'messages':>9}" + "".join(f"{name + ' µs':>15}" for name in stores))
        for size in (20, 200, 2000):
            row = [await decision_cost(store, size, repeats) for store in stores.values()]
            print(f"{size:>9}" + "".join(f"{value:>15.0f}" for value in row))
        for store in stores.values():
            await store.aclose()


def end_to_end(turns: int) -> None:
    """Upstream calls and tokens for a long conversation, without and with the splice."""
    from tests.e2e.conftest import local_config, running_llama_server, serve

    with tempfile.TemporaryDirectory() as tmp, running_llama_server(Path(tmp)) as upstream_url:
        layer_sets = ("[overflow_recovery]", "[history_splice, overflow_recovery]")
        for index, layers in enumerate(layer_sets):
            workdir = Path(tmp) / f"overspill-{index}"
            workdir.mkdir()
            config = local_config(upstream_url, layers)
            with contextlib.contextmanager(serve)(config, workdir, upstream_url) as served:
                _converse(served, turns, layers)


def _converse(served: Any, turns: int, layers: str) -> None:
    client = served.client()
    messages: list[Any] = [{"role": "system", "content": "You are a helpful assistant."}]
    calls = failed = prompt_tokens = 0
    started = time.monotonic()
    for turn in range(turns):
        messages.append(
            {
                "role": "user",
                "content": f"Turn {turn}: hull, engines, radio fine. Code K-{turn:03d}.",
            }
        )
        raw = client.chat.completions.with_raw_response.create(
            model="local", messages=messages, max_tokens=1, temperature=0,
            extra_headers={"X-Conversation-Id": "bench-" + layers.strip("[]").replace(", ", "-")},
        )  # fmt: skip
        completion_ = raw.parse()
        attempts = int(raw.headers.get("x-overspill-attempts", "1"))
        calls += attempts + int(raw.headers.get("x-overspill-extraction-calls", "0"))
        failed += attempts - 1
        prompt_tokens += completion_.usage.prompt_tokens if completion_.usage else 0
        messages.append(
            {
                "role": "assistant",
                "content": f"Noted for turn {turn}: hull, engines, radio fine; code K-{turn:03d}.",
            }
        )
    print(
        f"{layers:<38} turns={turns} upstream calls={calls} failed (overflow) calls={failed} "
        f"prompt tokens processed={prompt_tokens} wall={time.monotonic() - started:.0f}s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", help="also measure the Redis backend at this URL")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--e2e", action="store_true", help="run the real-model comparison")
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(decisions(args.redis, args.repeats))
    if args.e2e:
        end_to_end(args.turns)


if __name__ == "__main__":
    main()
