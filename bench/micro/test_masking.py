"""What observation masking costs an agent's request past `mask_at`, per request.

An agent's conversation of N tool uses (a file read and a shell command in turn, each result
~1,200 characters of code), sent whole at every request: the observation_masking layer counts
its messages (remembered per conversation), finds the calls, renders a placeholder for every
old result and counts it, sets the batches, and sends the masked conversation with the recall
tool to a no-op upstream. Each measured request follows the same conversation's previous one
(untimed), freshly parsed, as in a real process. A request below `mask_at` never reaches any
of it (the layer returns before counting when no message is a tool result, and after the
estimate otherwise).

Read the ratio between the two sizes (ten times the results): linear is about ten.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from bench.micro.conftest import Timed
from kernel.config_loading import parse_config
from kernel.store import DiskHistoryStore
from kernel.types import ChatRequest, ChatResponse, RequestContext
from middleware.layers.observation_masking import ObservationMasking
from providers.fake import completion
from tests.conftest import make_services

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 8192, max_output_tokens: 256}
"""
FILE = "\n".join(f"line {n}: value_{n} = compute({n})" for n in range(40))
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]


def agent(uses: int) -> bytes:
    """A task, then `uses` tool calls (a read and a command in turn), each with its result."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Read the files and fix the bug."},
    ]
    for n in range(uses):
        name = "read_file" if n % 2 else "bash"
        call = {"id": f"call_{n}", "type": "function",
                "function": {"name": name, "arguments": f'{{"path": "src/f{n}.py"}}'}}  # fmt: skip
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        result = FILE.replace("line", f"f{n}")
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": result})
    return orjson.dumps(messages)


class Requests:
    """One agent conversation's requests through one layer."""

    def __init__(self, store: DiskHistoryStore, uses: int) -> None:
        settings = parse_config(CONFIG, "bench.yaml", {}).settings
        self.entry = settings.model_list[0]
        self.layer = ObservationMasking(make_services(settings, store, _no_calls, {"local": 8192}))
        self.whole = agent(uses)
        self.uses = uses

    async def previous(self) -> None:
        """The conversation's previous request (untimed): one tool use fewer."""
        await self.send(self.uses - 1)

    async def measured(self) -> None:
        notes = await self.send(self.uses)
        assert int(notes["tool-results-masked"]) > self.uses // 2, notes

    async def send(self, uses: int) -> Any:
        messages = orjson.loads(self.whole)[: 2 + 2 * uses]  # parsed afresh, as every request is
        body = {"model": "local", "messages": messages, "tools": TOOLS}
        request = ChatRequest("local", tuple(messages), False, body)
        ctx = RequestContext("r", "t", model=self.entry, conversation_hint=f"agent-{self.uses}")
        await self.layer.handle(request, ctx, _upstream)
        return ctx.notes


async def _upstream(request: ChatRequest, ctx: RequestContext) -> ChatResponse:
    return ChatResponse(body=orjson.dumps(completion("ok")))


def _no_calls(model: str) -> Any:
    raise AssertionError("masking makes no model call")


@pytest.mark.parametrize("uses", [50, 500])
def test_request(
    timed: Timed, loop: asyncio.AbstractEventLoop, store: DiskHistoryStore, uses: int
) -> None:
    """One masked request of an agent's conversation, after its previous one."""
    requests = Requests(store, uses)
    loop.run_until_complete(requests.previous())
    timed.rounds("masking: an agent's request", requests.measured, setup=requests.previous)
