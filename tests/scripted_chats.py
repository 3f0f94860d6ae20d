"""Long conversations that splice and grow, and a scripted upstream that serves them.

    turn(conversation, index)   the messages of one turn: a user message carrying a fact and
                                the conversation's tag, and the scripted assistant reply
    history(conversation, n)    the first n turns as a client resends them (system + turns)
    ScriptedChats               an OpenAI-wire upstream (aiohttp, on a loopback port): answers
                                a turn at once and overspill's extraction calls after
                                `extraction_seconds`, refuses a prompt past `window` tokens as
                                a context overflow, and records every extraction call
    model_list(upstream)        the config's models for it: `local`, and its `extractor`
    running() / serve()         the upstream on a thread of the caller's / on the caller's loop
    python -m tests.scripted_chats --port N   the same upstream in a process of its own

Tokens are counted as characters / 4 (and reported as the usage, so overspill's calibration
learns that ratio). Which conversation an extraction call is for, and which of its turns it
reads, is read from the tags and days in its prompt; `stats` holds what was recorded: requests,
extraction calls, overflows, and per conversation each call's (start, end, turns) (unix time,
to compare with logs). With an extraction model whose window holds the whole history (one call
per extraction, no map-reduce), two calls of one conversation that overlap in time are two
extractions at once. The `window` is enforced on the conversation's own requests only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

EXTRACTOR = "You take notes on conversations"
"""How overspill's extraction prompt starts (middleware/condensing/prompt.py)."""
_TAG = re.compile(r"\[chat (\S+?)\]")
_DAY = re.compile(r"\] Day (\d+):")
SYSTEM = "You are a careful assistant for a logistics team. Keep every number you are told."


def tag(conversation: str) -> str:
    """The tag every user message of a conversation carries."""
    return f"[chat {conversation}]"


def turn(conversation: str, index: int) -> list[dict[str, str]]:
    """Turn `index` of a conversation: a user message with a fact, and the assistant's reply."""
    code = f"K-{(index * 7919) % 10000:04d}-{index}"
    user = (
        f"{tag(conversation)} Day {index}: the crate for bay {index} holds part {code}; it "
        f"ships from dock {index % 9} on Tuesday and weighs {40 + index % 30} kilograms. "
        "Please keep this for the manifest we will assemble at the end of the week."
    )
    reply = f"Noted: bay {index} holds part {code}, dock {index % 9}, {40 + index % 30} kg."
    return [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]


def history(conversation: str, turns: int) -> list[dict[str, str]]:
    """What a client sends at turn `turns`: the system prompt, the earlier turns, and the new
    user message (the reply to it is the upstream's)."""
    messages = [{"role": "system", "content": SYSTEM}]
    for index in range(turns):
        messages += turn(conversation, index)
    return [*messages, turn(conversation, turns)[0]]


def tokens(messages: list[dict[str, Any]]) -> int:
    """The upstream's count: characters / 4, plus 4 per message."""
    return sum(len(str(m.get("content") or "")) // 4 + 4 for m in messages)


@dataclass
class Stats:
    """What the upstream has seen."""

    requests: int = 0
    extractions: int = 0
    overflows: int = 0
    calls: dict[str, list[tuple[float, float, list[int]]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def overlapping(self) -> dict[str, list[tuple[float, float, list[int]]]]:
        """The conversations two extraction calls of which ran at the same time: each with
        the pairs of calls that overlap."""
        found: dict[str, list[tuple[float, float, list[int]]]] = {}
        for conversation, spans in self.calls.items():
            for first, second in itertools.pairwise(sorted(spans)):
                if second[0] < first[1]:
                    found.setdefault(conversation, []).extend([first, second])
        return found


class ScriptedChats:
    """The scripted upstream's behaviour (see the module's docstring)."""

    def __init__(self, window: int = 2048, extraction_seconds: float = 0.1) -> None:
        self.window = window
        self.extraction_seconds = extraction_seconds
        self.stats = Stats()

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", self.complete)
        return app

    async def complete(self, request: web.Request) -> web.Response:
        """One chat completion (JSON; `stream` is answered as JSON too, which overspill's
        own calls never ask for)."""
        body = orjson.loads(await request.read())
        messages: list[dict[str, Any]] = body.get("messages", [])
        self.stats.requests += 1
        counted = tokens(messages)
        extraction = bool(messages) and EXTRACTOR in str(messages[0].get("content"))
        if not extraction and counted + int(body.get("max_tokens") or 0) > self.window:
            self.stats.overflows += 1
            return web.json_response(
                {"error": {"type": "invalid_request_error", "code": "context_length_exceeded",
                           "message": f"This model's maximum context length is {self.window} "
                                      f"tokens. However, your messages resulted in {counted} "
                                      "tokens. Please reduce the length of the messages."}},
                status=400,
            )  # fmt: skip
        text = await self._extract(messages) if extraction else "Understood; noted."
        return web.json_response({
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": counted, "completion_tokens": len(text) // 4,
                      "total_tokens": counted + len(text) // 4},
        })  # fmt: skip

    async def _extract(self, messages: list[dict[str, Any]]) -> str:
        """Notes on the conversation in the prompt (its first facts, in its own words), after
        `extraction_seconds`; the call is recorded for every conversation it names."""
        prompt = "\n".join(str(m.get("content") or "") for m in messages)
        conversations = set(_TAG.findall(prompt))
        started = time.time()
        self.stats.extractions += 1
        await asyncio.sleep(self.extraction_seconds)
        days = sorted({int(day) for day in _DAY.findall(prompt)})
        for conversation in conversations:
            self.stats.calls[conversation].append((started, time.time(), days))
        facts = re.findall(r"the crate for bay (\d+) holds part (\S+);", prompt)[:6]
        lines = [f"- The crate for bay {bay} holds part {part}" for bay, part in facts]
        return "\n".join(lines or ["- The user listed crates for the manifest."])


def model_list(upstream: str, window: int = 2048) -> str:
    """The `model_list:` of a config whose model `local` is this upstream (its window known),
    extracted by `extractor`: the same upstream, with a window that holds the whole history,
    so that one extraction is one call."""
    return f"""model_list:
  - model_name: local
    litellm_params: {{model: openai/scripted, api_base: "{upstream}", api_key: none}}
    context: {{window: {window}, extraction_model: extractor}}
  - model_name: extractor
    litellm_params: {{model: openai/extractor, api_base: "{upstream}", api_key: none}}
    context: {{window: 65536}}
"""


async def serve(scripted: ScriptedChats, port: int = 0) -> tuple[web.AppRunner, int]:
    """Start serving on a loopback port (0: a free one): the runner and the port."""
    runner = web.AppRunner(scripted.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


@contextlib.contextmanager
def running(
    window: int = 2048, extraction_seconds: float = 0.1
) -> Iterator[tuple[str, ScriptedChats]]:
    """The scripted upstream on a free loopback port, on a thread of its own: its /v1 URL."""
    scripted = ScriptedChats(window, extraction_seconds)
    loop = asyncio.new_event_loop()
    started: list[tuple[web.AppRunner, int]] = []
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        started.append(loop.run_until_complete(serve(scripted)))
        ready.set()
        loop.run_forever()
        loop.run_until_complete(started[0][0].cleanup())
        loop.close()

    thread = threading.Thread(target=run, name="scripted-chats", daemon=True)
    thread.start()
    ready.wait(timeout=30)
    try:
        yield f"http://127.0.0.1:{started[0][1]}/v1", scripted
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


def main() -> None:
    """Serve the scripted upstream until killed; prints `listening <port>` once bound."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--window", type=int, default=2048)
    parser.add_argument("--extraction-seconds", type=float, default=0.1)
    args = parser.parse_args()
    scripted = ScriptedChats(args.window, args.extraction_seconds)

    async def forever() -> None:
        _, port = await serve(scripted, args.port)
        print(f"listening {port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(forever())


if __name__ == "__main__":
    main()
