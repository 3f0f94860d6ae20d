"""CPU per request of a `gemini/` deployment: overspill's own translation against
litellm.acompletion, both against the same Gemini mock (tests/mocks/gemini.py, a child
process, so its CPU is not counted): a JSON answer, and an SSE stream of 20 events. A round is
20 requests; litellm's row over overspill's is the ratio.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bench.micro.conftest import Timed
from kernel.types import ChatRequest, Provider, RequestContext
from proxy.http import parse_chat_request
from tests.conftest import settings_from

ROOT = Path(__file__).resolve().parents[2]
CTX = RequestContext("bench", "bench")


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    """The Gemini mock on a free port: its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.mocks.gemini", "--port", "0"],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    yield line.split(" on ", 1)[1].split()[0]
    process.terminate()
    process.wait()
    process.stdout.close()


@pytest.fixture(scope="module")
def providers(loop: asyncio.AbstractEventLoop, mock: str) -> Iterator[dict[str, Provider]]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from providers.gemini import GeminiProvider
    from providers.litellm import LitellmProvider
    from providers.transport import upstream_client

    config = (
        "model_list:\n  - model_name: gem\n    litellm_params:\n"
        f"      {{model: gemini/gemini-2.5-flash, api_base: '{mock}/v1beta', api_key: k}}\n"
    )
    entry = settings_from(config).model_list[0]
    litellms = LitellmProvider(entry)
    client = upstream_client("aiohttp", 60, 5)
    yield {
        "own translation": GeminiProvider(entry, client, litellms),
        "litellm.acompletion": litellms,
    }
    loop.run_until_complete(client.aclose())


def request(stream: bool) -> ChatRequest:
    messages = [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "What is the capital of France? " * 20},
    ]
    body = {"model": "gem", "messages": messages, "stream": stream, "max_tokens": 50}
    return parse_chat_request(orjson.dumps(body))


async def _call(provider: Provider, chat: ChatRequest) -> None:
    response = await provider.complete(chat, CTX)
    if response.stream is not None:
        async for _chunk in response.stream:
            pass


@pytest.mark.parametrize("path", ["own translation", "litellm.acompletion"])
@pytest.mark.parametrize("answer", ["json", "sse"])
def test_request(timed: Timed, providers: dict[str, Provider], answer: str, path: str) -> None:
    """One request to the mock, the answer read whole."""
    chat = request(answer == "sse")
    provider = providers[path]
    timed(f"gemini path: {answer}", lambda: _call(provider, chat), times=20)
