"""How long a long-conversation request takes when Redis stalls, and when Redis is dead.

Usage: ``python -m bench.store_stall [--requests 3]``

Starts a private redis-server (needs ``redis-server`` on PATH), builds overspill over it with
the default store settings (``open_redis_store``) and a scripted upstream that overflows once,
then answers (the extraction, then the condensed retry), and times ``--requests`` such
requests in a row: with Redis answering, with Redis stopped (SIGSTOP: connections are accepted,
nothing is answered), and with Redis killed. Figures are seconds per request, and the ratio of
the stalled and dead figures to the healthy one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

import httpx

from kernel.config_loading import parse_config
from kernel.store_redis import open_redis_store
from providers.failures import classify_failure
from providers.fake import ScriptedProvider, Step, json_response
from proxy.app import create_app
from proxy.system import build_system
from tests.ports import free_port

OVERFLOW = (
    "This model's maximum context length is 2048 tokens. However, your messages resulted in "
    "5000 tokens. Please reduce the length of the messages."
)
CONFIG = """
model_list:
  - model_name: local
    litellm_params: {{model: openai/m, api_base: "http://upstream.invalid/v1"}}
    context: {{window: 2048}}
general_settings:
  store: {{backend: redis, url: "{url}"}}
"""


def conversation(turns: int = 12) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be helpful."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"turn {turn}: a trip " + "word " * 60})
        messages.append({"role": "assistant", "content": f"reply {turn} " + "word " * 60})
    messages.append({"role": "user", "content": "What did we plan?"})
    return messages


async def timed(url: str, requests: int, fault: str, server: subprocess.Popen[bytes]) -> float:
    """Seconds per request, each a new conversation, with the fault applied first."""
    settings = parse_config(CONFIG.format(url=url), "bench.yaml", {}).settings
    overflow = classify_failure(status=400, message=OVERFLOW, provider="openai")
    steps: list[Step] = [overflow, json_response("- a trip."), json_response("a trip.")]
    system = build_system(
        settings,
        providers={"local": [ScriptedProvider(steps * requests)]},
        store=open_redis_store(settings.general_settings.store),
    )
    transport = httpx.ASGITransport(app=create_app(system))
    if fault == "stalled":
        server.send_signal(signal.SIGSTOP)
    elif fault == "dead":
        server.kill()
    started = time.perf_counter()
    async with httpx.AsyncClient(transport=transport, base_url="http://o.test") as client:
        for n in range(requests):
            answer = await client.post(
                "/v1/chat/completions",
                json={"model": "local", "messages": conversation()},
                headers={"x-conversation-id": f"{fault}-{n}"},
                timeout=600,
            )
            assert answer.status_code == 200, answer.text
    seconds = (time.perf_counter() - started) / requests
    if fault == "stalled":
        server.send_signal(signal.SIGCONT)
    await system.aclose(0)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3)
    args = parser.parse_args()
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH (make redis installs it)")
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        server = subprocess.Popen(
            [*command, "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
            figures = {
                fault: asyncio.run(timed(url, args.requests, fault, server))
                for fault in ("healthy", "stalled", "dead")
            }
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGCONT)
                server.kill()
            server.wait()
    healthy = figures["healthy"]
    print(f"redis-server {os.path.basename(binary)}, {args.requests} requests each")
    for fault, seconds in figures.items():
        print(f"{fault:<8} {seconds:8.3f} s/request   x{seconds / healthy:8.1f}")


if __name__ == "__main__":
    main()
