"""CPU cost per call of the byte passthrough provider itself, against another version of it.

The provider (`providers/openai_compat.py`) talks to an in-memory httpx transport answering the
same bytes as `scripts/bench_overhead.py`'s upstream: a small JSON answer, a 20-event stream
and a large 200 KB JSON answer. `--baseline FILE` loads another version of the module (e.g.
`git show REV:providers/openai_compat.py > /tmp/old.py`), so the two are measured alike in
interleaved rounds; the ratio is what to read.

    .venv/bin/python scripts/bench_passthrough.py --baseline /tmp/old.py [--calls 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import httpx
import orjson

import providers.openai_compat
from kernel.config import parse_config
from kernel.types import ChatRequest, RequestContext
from providers.fake import completion, sse_events
from proxy.http import parse_chat_request

SMALL = orjson.dumps(completion("Hello there, how can I help you today?"))
LARGE = orjson.dumps(completion("lorem ipsum " * 17000))
EVENTS = b"".join(sse_events([f"token{i} " for i in range(20)]))
CONFIG = """
model_list:
  - model_name: m
    litellm_params: {model: openai/m, api_base: "http://mock.test/v1"}
"""


class _Body(httpx.AsyncByteStream):
    """A body sent as one chunk, as a socket read would give it (not pre-read like bytes)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


def _answer(request: httpx.Request) -> httpx.Response:
    body = orjson.loads(request.content)
    if body.get("stream"):
        ctype, data = "text/event-stream", EVENTS
    else:
        ctype, data = "application/json", LARGE if body.get("large") else SMALL
    headers = {"content-type": ctype, "content-length": str(len(data))}
    return httpx.Response(200, stream=_Body(data), headers=headers)


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline_openai_compat", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _calls(provider: Any, request: ChatRequest, calls: int) -> float:
    ctx = RequestContext("bench", "bench")
    start = time.process_time()
    for _ in range(calls):
        response = await provider.complete(request, ctx)
        if response.stream is not None:
            async for _chunk in response.stream:
                pass
    return (time.process_time() - start) * 1e6 / calls


async def main(baseline: str | None, calls: int, rounds: int) -> None:
    entry = parse_config(CONFIG, "bench.yaml", {}).settings.model_list[0]
    modules = {"current": providers.openai_compat}
    if baseline:
        modules = {"baseline": _load(baseline), **modules}
    base = b'{"model":"m","messages":[{"role":"user","content":"hi"}]'
    requests = {
        "json small": parse_chat_request(base + b"}"),
        "sse small": parse_chat_request(base + b',"stream":true}'),
        "json large": parse_chat_request(base + b',"large":true}'),
    }
    async with httpx.AsyncClient(transport=httpx.MockTransport(_answer)) as client:
        built = {name: m.OpenAICompatProvider(entry, client) for name, m in modules.items()}
        print(f"{'scenario':<12}" + "".join(f"{name + ' µs':>14}" for name in built) + "   ratio")
        for scenario, request in requests.items():
            figures: dict[str, list[float]] = {name: [] for name in built}
            for provider in built.values():
                await _calls(provider, request, 100)
            for _ in range(rounds):
                for name, provider in built.items():
                    figures[name].append(await _calls(provider, request, calls))
            medians = {name: statistics.median(values) for name, values in figures.items()}
            line = f"{scenario:<12}" + "".join(f"{value:>14.1f}" for value in medians.values())
            if baseline:
                line += f"{medians['current'] / medians['baseline']:>8.2f}"
            print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="another version of providers/openai_compat.py")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.baseline, args.calls, args.rounds))
