"""Resident memory while an upstream sends 20 MiB answers: refused at the bound vs accepted.

overspill's app (in process, driven through httpx's ASGI transport) talks to the scripted
upstream of the fault suite, run in a child process so that its own buffers are not counted;
it answers every request with a 20 MiB body (JSON, or one 20 MiB SSE event). Printed: the
process's RSS growth at its peak during the requests and what stays after them, for
`max_response_bytes` at its default (16 MiB: refused while reading) and above the body
(64 MiB: read whole, as before the bound existed; the in-process client's copy of the
answer is counted too). What stays is mostly the allocator keeping freed memory for reuse:
it does not grow with more requests.

    .venv/bin/python -m bench.huge_answer [--requests 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
from asyncio.subprocess import PIPE
from pathlib import Path

import httpx

from kernel.config_loading import parse_config
from kernel.store import DiskHistoryStore
from proxy.app import create_app
from proxy.system import build_system
from tests.faulty_upstream import FaultyUpstream

MIB = 1024 * 1024


def rss() -> int:
    """This process's resident set size, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def serve() -> None:
    """The child: the huge-answer upstream, its port on stdout, until stdin closes."""
    async with FaultyUpstream(fault="huge", huge_bytes=20 * MIB) as upstream:
        print(upstream.port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def measure(
    base_url: str, limit: int, stream: bool, requests: int, store_dir: str
) -> tuple[int, int, int]:
    """(status of the last answer, peak RSS growth, RSS growth left after the requests)."""
    config = f"""
model_list:
  - model_name: wire
    litellm_params: {{model: openai/faulty, api_base: "{base_url}/v1"}}
general_settings: {{max_response_bytes: {limit}, request_timeout: 60}}
middleware: []
"""
    settings = parse_config(config, "rss.yaml", {}).settings
    store = DiskHistoryStore(store_dir)
    system = build_system(settings, store=store)
    app = create_app(system)
    gc.collect()
    before = peak = rss()
    status = 0
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://o.test") as client:
        body = {"model": "wire", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(requests):
            async with client.stream(
                "POST", "/v1/chat/completions", json={**body, "stream": stream}
            ) as response:
                status = response.status_code
                async for _chunk in response.aiter_raw():
                    peak = max(peak, rss())
            peak = max(peak, rss())
    await system.aclose()
    await store.aclose()
    gc.collect()
    return status, peak - before, rss() - before


async def main(requests: int) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.huge_answer", "--serve", stdin=PIPE, stdout=PIPE
    )
    assert child.stdout is not None
    assert child.stdin is not None
    port = int(await child.stdout.readline())
    base_url = f"http://127.0.0.1:{port}"
    print(f"{'max_response_bytes':<20}{'mode':<8}{'status':>8}{'peak MiB':>10}{'left MiB':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for limit in (16 * MIB, 64 * MIB):
            for stream in (False, True):
                status, peak, left = await measure(base_url, limit, stream, requests, tmp)
                mode = "stream" if stream else "json"
                print(f"{limit // MIB:>4} MiB{'':<12}{mode:<8}{status:>8}"
                      f"{peak / MIB:>10.1f}{left / MIB:>10.1f}")  # fmt: skip
    child.stdin.close()
    await child.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    asyncio.run(serve() if args.serve else main(args.requests))
