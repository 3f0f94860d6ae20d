"""CPU per request of a `gemini/` deployment: overspill's own translation vs litellm.acompletion.

Both providers are called in this process, one request at a time, against the same Gemini
mock (`scripts/mock_gemini.py`, a child process, so its CPU is not counted): JSON answers and
SSE streams of `--chunks` events, a system message and a user turn. Rounds interleave the two
paths so machine noise hits both alike; the figure to read is the ratio (litellm / own) of
this process's CPU time per request, median over the rounds.

    .venv/bin/python scripts/bench_gemini_path.py [--requests 300] [--rounds 5] [--chunks 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from kernel.types import ChatRequest, Provider, RequestContext  # noqa: E402
from providers.gemini import GeminiProvider  # noqa: E402
from providers.litellm import LitellmProvider  # noqa: E402
from providers.transport import upstream_client  # noqa: E402
from proxy.http import parse_chat_request  # noqa: E402
from tests.conftest import settings_from  # noqa: E402

CTX = RequestContext("bench", "bench")


def start_mock(chunks: int) -> tuple[subprocess.Popen[bytes], str]:
    """The mock on a free port, and its base URL once it listens."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "mock_gemini.py"), "--port", "0",
         "--chunks", str(chunks)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    return process, line.split(" on ", 1)[1].split()[0]


def request(stream: bool) -> ChatRequest:
    messages = [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "What is the capital of France? " * 20},
    ]
    return parse_chat_request(
        orjson.dumps({"model": "gem", "messages": messages, "stream": stream, "max_tokens": 50})
    )


async def calls(provider: Provider, stream: bool, count: int) -> float:
    """CPU seconds of this process for `count` requests, answers read whole."""
    chat = request(stream)
    start = time.process_time()
    for _ in range(count):
        response = await provider.complete(chat, CTX)
        if response.stream is not None:
            async for _chunk in response.stream:
                pass
    return time.process_time() - start


async def main(requests: int, rounds: int, chunks: int) -> None:
    process, base = start_mock(chunks)
    try:
        config = (
            "model_list:\n  - model_name: gem\n    litellm_params:\n"
            f"      {{model: gemini/gemini-2.5-flash, api_base: '{base}/v1beta', api_key: k}}\n"
        )
        entry = settings_from(config).model_list[0]
        litellms = LitellmProvider(entry)
        client = upstream_client("aiohttp", 60, 5)
        paths: dict[str, Callable[[], Provider]] = {
            "own": lambda: GeminiProvider(entry, client, litellms),
            "litellm": lambda: litellms,
        }
        built = {name: make() for name, make in paths.items()}
        for stream in (False, True):  # warm-up: imports, pools
            for provider in built.values():
                await calls(provider, stream, 20)
        for stream in (False, True):
            per: dict[str, list[float]] = {name: [] for name in built}
            for _ in range(rounds):
                for name, provider in built.items():
                    per[name].append(await calls(provider, stream, requests) / requests * 1000)
            own, theirs = statistics.median(per["own"]), statistics.median(per["litellm"])
            kind = f"SSE ({chunks} events)" if stream else "JSON"
            print(
                f"{kind:<16} CPU ms/request: own {own:7.3f}   litellm.acompletion "
                f"{theirs:7.3f}   ratio litellm/own {theirs / own:6.2f}x"
            )
        await client.aclose()
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="per round and path")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=20, help="events per streamed answer")
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds, args.chunks))
