"""A 200-turn Responses chain with tool calls among its turns, against a scripted model at a small
window, beside the same conversation sent whole through chat completions: no upstream call
fails, compaction keeps the conversation going, and the two APIs send the model the same
prompts turn for turn, so they score the same."""

from __future__ import annotations

import re
from typing import Any

import httpx
import openai
import orjson

from kernel.conversation import canonical
from kernel.errors import ContextWindowExceeded
from kernel.store import DiskHistoryStore
from kernel.tokens import count_messages
from kernel.types import ChatRequest, ChatResponse, Message, RequestContext
from providers.fake import completion
from proxy.app import create_app
from proxy.system import System, build_system
from tests.conftest import settings_from

WINDOW = 1500
CONFIG = f"""
model_list:
  - model_name: local
    litellm_params: {{model: openai/small, api_base: "http://upstream.test/v1"}}
    context: {{window: {WINDOW}, max_output_tokens: 32}}
general_settings:
  master_key: sk-master
  client_keys:
    - {{name: responses, key: sk-responses}}
    - {{name: chat, key: sk-chat}}
"""
TURNS = 200
NEEDLE = "The vault code is ZX-4471."
TOOL = {
    "type": "function",
    "name": "lookup",
    "description": "Look a word up",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
}


def user_line(turn: int) -> str:
    """What the user says at `turn` (the needle early on, a tool request every 9th turn)."""
    if turn == 3:
        return f"Remember this: {NEEDLE}"
    if turn % 9 == 0:
        return f"Please look up the word number {turn} with the tool."
    return f"Turn {turn}: the weather report for district {turn % 17} is mild and dry today."


class ScriptedModel:
    """A deterministic model with a real window: refuses prompts over it, answers a tool
    request with a call, an extraction prompt with notes that keep the needle, else an
    acknowledgement. Records every prompt it was sent."""

    name = "scripted"

    def __init__(self) -> None:
        self.prompts: list[tuple[Message, ...]] = []
        self.refused = 0

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        tokens = count_messages(request.messages)
        if tokens > WINDOW:
            self.refused += 1
            raise ContextWindowExceeded("too long", requested=tokens, limit=WINDOW, provider="x")
        if ctx.tenant == "internal":
            text = " ".join(str(m.get("content")) for m in request.messages)
            kept = NEEDLE if "ZX-4471" in text else "Weather reports were given."
            return _json(completion(f"- {kept}", prompt_tokens=tokens))
        self.prompts.append(request.messages)
        last = request.messages[-1]
        words = re.findall(r"word number (\d+)", str(last.get("content")))
        if last.get("role") == "user" and words:
            return _json(_call(words[0], tokens))
        return _json(completion(f"Noted {len(request.messages)}.", prompt_tokens=tokens))

    async def aclose(self) -> None:
        """Nothing to release."""


def _call(word: str, tokens: int) -> dict[str, Any]:
    body = completion("", prompt_tokens=tokens)
    message = body["choices"][0]["message"]
    message["content"] = None
    arguments = orjson.dumps({"word": word}).decode()
    message["tool_calls"] = [
        {
            "id": f"call_{word}",
            "type": "function",
            "function": {"name": "lookup", "arguments": arguments},
        }
    ]
    body["choices"][0]["finish_reason"] = "tool_calls"
    return body


def _json(body: dict[str, Any]) -> ChatResponse:
    return ChatResponse(body=orjson.dumps(body))


async def responses_run(system: System, http: httpx.AsyncClient) -> list[str]:
    """The chain, turn by turn by previous_response_id; the headers' actions."""
    client = openai.AsyncOpenAI(
        base_url="http://overspill.test/v1", api_key="sk-responses", http_client=http
    )
    actions: list[str] = []
    previous: str | None = None

    async def send(items: Any) -> Any:
        raw = await client.responses.with_raw_response.create(
            model="local",
            input=items,
            previous_response_id=previous,
            tools=[TOOL],  # type: ignore[list-item]
        )
        actions.append(raw.headers.get("x-overspill-action", "sent"))
        await system.jobs.drain(30)
        return raw.parse()

    for turn in range(TURNS):
        made = await send([{"role": "user", "content": user_line(turn)}])
        previous = made.id
        calls = [item for item in made.output if item.type == "function_call"]
        if calls:  # the tool's answer goes back at once, as an agent sends it
            outputs = [
                {"type": "function_call_output", "call_id": call.call_id, "output": "a bird"}
                for call in calls
            ]
            previous = (await send(outputs)).id
    return actions


async def chat_run(system: System, http: httpx.AsyncClient) -> list[str]:
    """The same conversation sent whole each time through chat completions, as a chat client
    keeps it: its own turns, the model's answers, the tool's results. (Plain HTTP: the SDK's
    request transformation of a 200-turn history costs seconds a call.)"""
    tools = [{"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}]
    headers = {"authorization": "Bearer sk-chat"}
    history: list[dict[str, Any]] = []
    actions: list[str] = []

    async def send() -> dict[str, Any]:
        body = {"model": "local", "messages": history, "tools": tools}
        response = await http.post("/v1/chat/completions", json=body, headers=headers)
        assert response.status_code == 200, response.text
        actions.append(response.headers.get("x-overspill-action", "sent"))
        await system.jobs.drain(30)
        message: dict[str, Any] = response.json()["choices"][0]["message"]
        history.append(message)
        return message

    for turn in range(TURNS):
        history.append({"role": "user", "content": user_line(turn)})
        message = await send()
        for call in message.get("tool_calls") or ():
            history.append({"role": "tool", "tool_call_id": call["id"], "content": "a bird"})
        if message.get("tool_calls"):
            await send()
    return actions


def same_prompts(ones: list[tuple[Message, ...]], others: list[tuple[Message, ...]]) -> bool:
    """Whether two runs sent the same prompts, message for message (in the canonical form the
    conversation chain hashes: a null or empty field is the same as an absent one)."""
    return [[canonical(m) for m in prompt] for prompt in ones] == [
        [canonical(m) for m in prompt] for prompt in others
    ]


async def test_a_long_chain_matches_the_same_conversation_sent_whole(
    store: DiskHistoryStore,
) -> None:
    """200 turns each way: 0 refused upstream calls, compaction seen, the needle still in the
    last prompt, and the same prompts turn for turn on both APIs."""
    model = ScriptedModel()
    system = build_system(settings_from(CONFIG), providers={"local": [model]}, store=store)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(system)), base_url="http://overspill.test"
    ) as http:
        chained = await responses_run(system, http)
        by_responses = list(model.prompts)
        model.prompts.clear()
        whole = await chat_run(system, http)
        by_chat = list(model.prompts)
    assert model.refused == 0
    assert any(action.startswith("spliced") for action in chained), chained
    assert len(by_responses) == len(by_chat) > TURNS
    assert same_prompts(by_responses, by_chat)
    assert chained == whole
    assert NEEDLE in str(by_responses[-1])
