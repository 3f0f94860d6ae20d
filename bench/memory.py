"""Memory and startup of real `overspill serve` processes: idle RSS, time to ready, growth.

Three configs, each served by `python -m proxy serve` (one worker) in turn:

- `openai`: only OpenAI-wire models (the byte passthrough);
- `litellm`: the same plus an `anthropic/...` model (overspill translates it; litellm is
  imported only by a request that needs its translation: the last first request, with
  `response_format`, shows what that import costs);
- `gemini`: the OpenAI-wire models plus a `gemini/...` model (the same, for Gemini's API);
- `gemini-litellm`: the same deployment with a litellm setting overspill's Gemini path does
  not apply (`top_k` in its litellm_params), so every request goes through
  `litellm.acompletion`, as every `gemini/` request did before: the comparison.

The upstream is the scripted server of the fault suite (`tests/faulty_upstream.py`), run in a
child process so its memory is not counted: it answers OpenAI's wire on
`/v1/chat/completions`, Anthropic's on `/v1/messages` and Gemini's on
`/v1beta/models/M:generateContent` (and `:streamGenerateContent`). No key is needed.

Printed for each config: the time from process start to the first 200 on
`/health/readiness`, the RSS and USS (private memory) after a few idle seconds, the first
chat request's latency on each model (the litellm model's first request may pay for an
import) and the RSS after it. With `--load-minutes N`, a mixed load follows (JSON and SSE,
small and ~200 KB bodies, long conversations that go through history_splice and the
overflow recovery, and the litellm model when configured), and the RSS after its first
minute is compared with the RSS at its end, each split into the heap (`RssAnon`) and mapped
files (`RssFile`: the code, and the store's SQLite file, which diskcache memory-maps, so a
store that fills with conversations shows there). Figures only: the machine may be busy, so read
ratios within one run.

    .venv/bin/python -m bench.memory [--configs openai,gemini] [--load-minutes 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import sys
import tempfile
import time
from asyncio.subprocess import PIPE
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]

MIB = 1024 * 1024
IDLE_SECONDS = 3.0
WINDOW = 4096

_WIRE_MODELS = """
model_list:
  - model_name: wire
    litellm_params: {{model: openai/mock, api_base: "{base}/v1", api_key: none}}
    context: {{window: {window}}}
  - model_name: wire-large
    litellm_params: {{model: openai/mock-large, api_base: "{base}/v1", api_key: none}}
"""
_LITELLM_MODEL = """  - model_name: claude
    litellm_params:
      model: anthropic/claude-3-5-sonnet-20241022
      api_base: "{base}"
      api_key: none
"""
_GEMINI_MODEL = """  - model_name: gem
    litellm_params:
      model: gemini/gemini-2.5-flash
      api_base: "{base}/v1beta"
      api_key: none
"""
_SETTINGS = """general_settings:
  store: {{path: "{store}"}}
  max_body_bytes: 4000000
"""
CONFIGS = {  # the same, but for one litellm-path model
    "openai": _WIRE_MODELS + _SETTINGS,
    "litellm": _WIRE_MODELS + _LITELLM_MODEL + _SETTINGS,
    "gemini": _WIRE_MODELS + _GEMINI_MODEL + _SETTINGS,
    "gemini-litellm": _WIRE_MODELS + _GEMINI_MODEL + "      top_k: 40\n" + _SETTINGS,
}
TRANSLATED_MODELS = {"litellm": "claude", "gemini": "gem", "gemini-litellm": "gem"}
"""The model of each config that overspill translates (litellm for what it cannot)."""


def memory(pid: int) -> tuple[int, int]:
    """(RSS, USS) of a process in bytes, from /proc (USS: its private pages)."""
    rss = uss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                uss += int(line.split()[1]) * 1024
    return rss, uss


def resident(pid: int) -> dict[str, int]:
    """The RSS by kind, in bytes: `anon` (the heap: objects, buffers), `file` (mapped files:
    code, and the store's SQLite file, which diskcache maps) and `shmem`."""
    kinds = {"RssAnon:": "anon", "RssFile:": "file", "RssShmem:": "shmem"}
    found = dict.fromkeys(kinds.values(), 0)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name = line.split(":", 1)[0] + ":"
        if name in kinds:
            found[kinds[name]] = int(line.split()[1]) * 1024
    return found


async def upstream() -> None:
    """The child: the scripted upstream, its port on stdout, until stdin closes."""
    from tests.faulty_upstream import FaultyUpstream

    async with FaultyUpstream(fault="ok") as server:
        print(server.port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def message(role: str, text: str) -> dict[str, str]:
    """One chat message."""
    return {"role": role, "content": text}


def turns(count: int, conversation: int) -> list[dict[str, str]]:
    """A conversation of `count` user/assistant pairs, ~120 tokens each, and a last question."""
    messages = [message("system", "You are a careful assistant.")]
    for turn in range(count):
        fact = f"conversation {conversation} turn {turn}: code ZX-{conversation * 1000 + turn}"
        messages.append(message("user", f"Please remember {fact}. " + "details " * 40))
        messages.append(message("assistant", f"Noted {fact}. " + "reply " * 40))
    messages.append(message("user", "Which codes did I give you?"))
    return messages


class Load:
    """The mixed load: one request shape after another, per concurrent client."""

    def __init__(self, translated: str | None) -> None:
        self.translated = translated
        self.statuses: Counter[str] = Counter()
        self.headers: Counter[str] = Counter()
        self.conversations = itertools.count()
        self.big = "lorem ipsum dolor sit amet " * 7500  # ~200 KB

    def shapes(self) -> list[str]:
        """The request shapes, in the order each client cycles through them."""
        names = ["json", "sse", "large-json", "large-sse", "long", "json", "sse"]
        if self.translated:
            names += ["translated-json", "translated-sse"]
        return names

    def body(self, shape: str, grow: list[int]) -> dict[str, Any]:
        """The request body for a shape (`long`: the client's conversation, one turn longer)."""
        if shape == "long":
            grow[1] += 1
            if grow[1] > 60:  # a new conversation now and then: new entries in the store
                grow[0], grow[1] = next(self.conversations), 1
            return {
                "model": "wire",
                "messages": turns(grow[1], grow[0]),
                "metadata": {"conversation_id": f"bench-{os.getpid()}-{grow[0]}"},
            }
        stream = shape.endswith("sse")
        model = self.translated if shape.startswith("translated") else "wire-large"
        text = self.big if shape.startswith("large") else "Hello, how are you?"
        return {"model": model, "messages": [message("user", text)], "stream": stream}

    async def client(self, url: str, until: float) -> None:
        """One client sending the shapes in turn until the deadline."""
        grow = [next(self.conversations), 0]
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            for shape in itertools.cycle(self.shapes()):
                if time.monotonic() >= until:
                    return
                body = self.body(shape, grow)
                async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    async for _ in response.aiter_raw():
                        pass
                self.statuses[f"{shape} {response.status_code}"] += 1
                for name in response.headers:
                    if name.startswith("x-overspill"):
                        self.headers[name] += 1


async def wait_ready(url: str, process: asyncio.subprocess.Process, started: float) -> float:
    """Seconds from `started` to the first 200 on /health/readiness."""
    async with httpx.AsyncClient(base_url=url, timeout=5) as client:
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"overspill exited with {process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/health/readiness")).status_code == 200:
                    return time.monotonic() - started
            await asyncio.sleep(0.01)


JSON_MODE = {"response_format": {"type": "json_object"}}
"""What only litellm's translation writes: the request that imports litellm."""


async def first_call(url: str, model: str, extra: dict[str, Any]) -> tuple[int, float]:
    """(status, seconds) of one small chat request."""
    body = {"model": model, "messages": [message("user", "hi")], **extra}
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        start = time.monotonic()
        response = await client.post("/v1/chat/completions", json=body)
        return response.status_code, time.monotonic() - start


async def one_config(
    name: str, base: str, minutes: float, clients: int, fallback: bool = True
) -> None:
    """Start overspill with one config, measure it, stop it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        store = Path(tmp) / "store"
        path.write_text(CONFIGS[name].format(base=base, store=store, window=WINDOW))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        command = [sys.executable, "-m", "proxy", "serve", "--config", str(path)]
        log = (Path(tmp) / "overspill.log").open("wb")
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *command, "--port", str(port), cwd=ROOT, env=env, stdout=log, stderr=log
        )
        try:
            ready = await wait_ready(url, process, started)
            await asyncio.sleep(IDLE_SECONDS)
            rss, uss = memory(process.pid)
            print(f"{name:<14} ready {ready:6.2f} s   idle RSS {rss / MIB:6.1f} MiB"
                  f"   USS {uss / MIB:6.1f} MiB")  # fmt: skip
            asks: list[tuple[str, str, dict[str, Any]]] = [("wire", "wire", {})]
            model = TRANSLATED_MODELS.get(name)
            if model is not None:
                asks.append((model, model, {}))
                if fallback:
                    asks.append((f"{model}+json", model, JSON_MODE))
            for label, model, extra in asks:
                status, seconds = await first_call(url, model, extra)
                second = await first_call(url, model, extra)
                print(f"{'':<14} first request to {label:<11} {status} in {seconds:6.3f} s"
                      f" (second {second[1]:6.3f} s)")  # fmt: skip
                rss, uss = memory(process.pid)
                print(f"{'':<14} after it   RSS {rss / MIB:6.1f} MiB   USS {uss / MIB:6.1f} MiB")
            if minutes > 0:
                await load(name, url, process.pid, minutes, clients)
        finally:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
            log.close()


async def load(name: str, url: str, pid: int, minutes: float, clients: int) -> None:
    """The mixed load for `minutes`; RSS after its first minute against RSS at its end."""
    work = Load(TRANSLATED_MODELS.get(name))
    start = time.monotonic()
    until = start + minutes * 60
    tasks = [asyncio.create_task(work.client(url, until)) for _ in range(clients)]
    first_minute = None
    samples: list[int] = []
    while not all(task.done() for task in tasks):
        await asyncio.sleep(1)
        elapsed = time.monotonic() - start
        if first_minute is None and elapsed >= min(60.0, minutes * 60):
            first_minute = memory(pid)[0]
            first_kinds = resident(pid)
        if elapsed >= 60 * (len(samples) + 1):
            samples.append(memory(pid)[0])
    await asyncio.gather(*tasks)
    end = memory(pid)[0]
    end_kinds = resident(pid)
    assert first_minute is not None
    requests = sum(work.statuses.values())
    print(f"{'':<14} load {minutes:g} min, {clients} clients, {requests} requests: "
          f"RSS after 1 min {first_minute / MIB:6.1f} MiB, at the end {end / MIB:6.1f} MiB, "
          f"ratio {end / first_minute:5.3f}")  # fmt: skip
    print(f"{'':<14} of which after 1 min / at the end (MiB): " + ", ".join(
        f"{kind} {first_kinds[kind] / MIB:.1f} / {end_kinds[kind] / MIB:.1f}" for kind in end_kinds
    ))  # fmt: skip
    print(f"{'':<14} RSS each minute (MiB): "
          + " ".join(f"{value / MIB:.0f}" for value in samples))  # fmt: skip
    print(f"{'':<14} answers: " + ", ".join(f"{k}: {v}" for k, v in sorted(work.statuses.items())))
    if work.headers:
        print(f"{'':<14} overspill headers: "
              + ", ".join(f"{k}: {v}" for k, v in sorted(work.headers.items())))  # fmt: skip


async def main(configs: list[str], minutes: float, clients: int, fallback: bool) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.memory", "--serve-upstream", stdin=PIPE, stdout=PIPE, cwd=ROOT
    )
    assert child.stdout is not None
    assert child.stdin is not None
    base = f"http://127.0.0.1:{int(await child.stdout.readline())}"
    try:
        for name in configs:
            await one_config(name, base, minutes, clients, fallback)
    finally:
        child.stdin.close()
        await child.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--configs",
        default="openai,litellm,gemini,gemini-litellm",
        help="openai, litellm, gemini, gemini-litellm (any of)",
    )
    parser.add_argument("--load-minutes", type=float, default=0.0)
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients under load")
    parser.add_argument(
        "--no-fallback",
        action="store_true",
        help="no response_format request (litellm stays unimported under load)",
    )
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        asyncio.run(upstream())
    else:
        configs = args.configs.split(",")
        asyncio.run(main(configs, args.load_minutes, args.clients, not args.no_fallback))
