"""`/v1/messages` and `/v1/messages/count_tokens` through the app, read by the official Anthropic
SDK: answers, streams, tools, errors in Anthropic's shape, keys by `x-api-key`, Claude Code's
session identity and side calls, its compaction request, context edits, and the native road
to an upstream that speaks the Messages API (Anthropic's own, or a server's)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx
import httpx2
import orjson
import pytest
import respx

from kernel.errors import ContextWindowExceeded
from kernel.store import DiskHistoryStore
from kernel.tokens import count_messages
from kernel.types import ChatRequest, ChatResponse, RequestContext
from providers.fake import ScriptedProvider, completion, json_response, sse_events, stream_response
from proxy.app import create_app
from proxy.system import System, build_system
from tests.conftest import settings_from

LOCAL = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 4096}
  - model_name: "claude-*"
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 4096}
general_settings:
  master_key: sk-master
"""
NATIVE = """
model_list:
  - model_name: claude
    litellm_params: {model: anthropic/claude-sonnet-4-5, api_key: sk-ant-upstream, api_base: "http://anthropic.test"}
    context: {window: 200000}
  - model_name: server
    litellm_params: {model: openai/smollm2, api_base: "http://llama.test/v1"}
    messages_api: native
    context: {window: 4096}
general_settings:
  master_key: sk-master
"""
TOOLS: Any = [
    {
        "name": "Read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
    }
]
ANSWER = {
    "id": "msg_up",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Paris."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 2},
}


@asynccontextmanager
async def served(
    store: DiskHistoryStore,
    config: str = LOCAL,
    providers: dict[str, Any] | None = None,
    upstream: httpx.AsyncClient | None = None,
) -> AsyncIterator[tuple[anthropic.AsyncAnthropic, httpx.AsyncClient, System]]:
    """The app over `config`: the Anthropic SDK and a plain client pointed at it."""
    system = build_system(settings_from(config), providers=providers, client=upstream, store=store)
    app = create_app(system)
    transport = httpx2.ASGITransport(app=app)
    sdk = anthropic.AsyncAnthropic(
        base_url="http://overspill.test",
        api_key="sk-master",
        http_client=httpx2.AsyncClient(transport=transport, base_url="http://overspill.test"),
        max_retries=0,
    )
    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://overspill.test"
    )
    try:
        yield sdk, http, system
    finally:
        await sdk.close()
        await http.aclose()
        await system.aclose()


def tool_call(name: str, arguments: str, call_id: str = "call_1") -> ChatResponse:
    body = completion("", prompt_tokens=30)
    message = body["choices"][0]["message"]
    message["content"] = None
    message["tool_calls"] = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    ]
    body["choices"][0]["finish_reason"] = "tool_calls"
    return ChatResponse(body=orjson.dumps(body))


async def test_a_message_is_answered(store: DiskHistoryStore) -> None:
    """messages.create gets a message whose text is the model's answer and whose usage is the
    upstream's; the model got the system prompt first."""
    provider = ScriptedProvider([json_response("Paris.", prompt_tokens=12)])
    async with served(store, providers={"local": [provider]}) as (sdk, _, _):
        message = await sdk.messages.create(
            model="local",
            max_tokens=16,
            system="Be brief.",
            messages=[{"role": "user", "content": "Capital of France?"}],
        )
    assert message.content[0].type == "text"
    assert message.content[0].text == "Paris."
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 12
    sent = provider.requests[0]
    assert [m["role"] for m in sent.messages] == ["system", "user"]
    assert sent.body["max_tokens"] == 16


async def test_a_stream_is_read_by_the_sdk(store: DiskHistoryStore) -> None:
    """messages.stream reads Anthropic's events into the streamed text."""
    provider = ScriptedProvider([stream_response(sse_events(["Pa", "ris."]))])
    async with (
        served(store, providers={"local": [provider]}) as (sdk, _, _),
        sdk.messages.stream(
            model="local", max_tokens=16, messages=[{"role": "user", "content": "Capital?"}]
        ) as stream,
    ):
        texts = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(texts) == "Paris."
    assert final.content[0].type == "text"
    assert final.content[0].text == "Paris."


async def test_a_tool_exchange_goes_both_ways(store: DiskHistoryStore) -> None:
    """The model's call comes back as a tool_use block; its tool_result goes to the model as
    the call's tool message."""
    provider = ScriptedProvider(
        [tool_call("Read", '{"file_path": "a.py"}'), json_response("It prints hi.")]
    )
    async with served(store, providers={"local": [provider]}) as (sdk, _, _):
        first = await sdk.messages.create(
            model="local",
            max_tokens=32,
            tools=TOOLS,
            messages=[{"role": "user", "content": "What does a.py do?"}],
        )
        [use] = [block for block in first.content if block.type == "tool_use"]
        assert (use.name, use.input, first.stop_reason) == (
            "Read",
            {"file_path": "a.py"},
            "tool_use",
        )
        history: Any = [
            {"role": "user", "content": "What does a.py do?"},
            {"role": "assistant", "content": [use.model_dump()]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": "print('hi')"}
                ],
            },
        ]
        second = await sdk.messages.create(
            model="local", max_tokens=32, tools=TOOLS, messages=history
        )
    assert second.content[0].type == "text"
    sent = provider.requests[1].messages
    assert sent[-1] == {"role": "tool", "tool_call_id": use.id, "content": "print('hi')"}
    assert sent[-2]["tool_calls"][0]["id"] == use.id


async def test_count_tokens_estimates_for_a_chat_model(store: DiskHistoryStore) -> None:
    """count_tokens answers overspill's estimate (tools included) with Anthropic's shape."""
    async with served(store, providers={"local": [ScriptedProvider([json_response("x")])]}) as (
        sdk,
        _,
        _,
    ):
        bare = await sdk.messages.count_tokens(
            model="local", messages=[{"role": "user", "content": "Hello there"}]
        )
        tooled = await sdk.messages.count_tokens(
            model="local", tools=TOOLS, messages=[{"role": "user", "content": "Hello there"}]
        )
    assert 3 < bare.input_tokens < 20
    assert tooled.input_tokens > bare.input_tokens + 10


async def test_errors_have_anthropics_shape(store: DiskHistoryStore) -> None:
    """Missing max_tokens, a result without its call, an unknown block, a bad key, an unknown
    model: each an Anthropic error body with its status and a message saying what to fix."""
    async with served(store, providers={"local": [ScriptedProvider([json_response("x")])]}) as (
        _,
        http,
        _,
    ):
        cases = [
            (
                {"model": "local", "messages": [{"role": "user", "content": "x"}]},
                {},
                400,
                "invalid_request_error",
                "max_tokens",
            ),
            (
                {
                    "model": "local",
                    "max_tokens": 5,
                    "messages": [
                        {
                            "role": "user",
                            "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}],
                        }
                    ],
                },
                {},
                400,
                "invalid_request_error",
                "toolu_9",
            ),
            (
                {
                    "model": "local",
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": [{"type": "hologram"}]}],
                },
                {},
                400,
                "invalid_request_error",
                "hologram",
            ),
            (
                {"model": "local", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
                {"x-api-key": "sk-wrong"},
                401,
                "authentication_error",
                "invalid API key",
            ),
            (
                {"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
                {},
                404,
                "not_found_error",
                "nope",
            ),
        ]
        for body, headers, status, kind, said in cases:
            response = await http.post(
                "/v1/messages", json=body, headers={"x-api-key": "sk-master", **headers}
            )
            assert response.status_code == status, response.text
            error = response.json()
            assert error["type"] == "error"
            assert error["error"]["type"] == kind
            assert said in error["error"]["message"]
            assert error["request_id"] == response.headers["x-request-id"]


async def test_the_key_goes_by_x_api_key_or_bearer(store: DiskHistoryStore) -> None:
    """The same key authenticates as `x-api-key` (Anthropic's SDK) and as a bearer token."""
    body = {"model": "local", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    async with served(store, providers={"local": [ScriptedProvider([json_response("x")])]}) as (
        _,
        http,
        _,
    ):
        by_key = await http.post("/v1/messages", json=body, headers={"x-api-key": "sk-master"})
        by_bearer = await http.post(
            "/v1/messages", json=body, headers={"authorization": "Bearer sk-master"}
        )
        missing = await http.post("/v1/messages", json=body)
    assert (by_key.status_code, by_bearer.status_code, missing.status_code) == (200, 200, 401)
    assert "x-api-key" in missing.json()["error"]["message"]


class Recording:
    """A provider that answers "ok" and records each request's context."""

    name = "recording"

    def __init__(self) -> None:
        self.contexts: list[RequestContext] = []

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.contexts.append(ctx)
        return json_response("ok")

    async def aclose(self) -> None:
        """Nothing to release."""


def turn(session: str, *texts: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A Claude Code request of `session`: its system prompt, tools, and the user's texts
    alternating with "ok" answers."""
    messages: list[dict[str, Any]] = []
    for index, text in enumerate(texts):
        if index:
            messages.append({"role": "assistant", "content": "ok"})
        messages.append({"role": "user", "content": text})
    user_id = orjson.dumps({"device_id": "d", "account_uuid": "", "session_id": session}).decode()
    body = {
        "model": "local",
        "max_tokens": 64,
        "system": "You are Claude Code.",
        "tools": TOOLS,
        "messages": messages,
        "metadata": {"user_id": user_id},
    }
    return body, {"x-api-key": "sk-master"}


async def test_a_session_is_one_conversation_and_two_sessions_are_two(
    store: DiskHistoryStore,
) -> None:
    """Turns of one Claude Code session share a conversation id (by the session header, or
    the session inside metadata.user_id); a second session that opens identically (same
    system prompt, tools and first prompt) gets another."""
    provider = Recording()
    async with served(store, providers={"local": [provider]}) as (_, http, _):
        for body, headers in (
            turn("s1", "fix it"),
            turn("s1", "fix it", "and test it"),
            turn("s2", "fix it"),
        ):
            response = await http.post("/v1/messages", json=body, headers=headers)
            assert response.status_code == 200, response.text
        body, headers = turn("ignored", "fix it")
        headers["x-claude-code-session-id"] = "s2"
        await http.post("/v1/messages", json=body, headers=headers)
    ids = [ctx.conversation_id for ctx in provider.contexts]
    assert ids[0] == ids[1] != ids[2] == ids[3]


async def test_claude_codes_model_names_reach_a_wildcard_deployment(
    store: DiskHistoryStore,
) -> None:
    """`claude-*` in model_list serves every Claude model name Claude Code asks for."""
    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(request.content))
        return httpx.Response(200, json=completion("ok"))

    async with httpx.AsyncClient() as upstream, served(store, upstream=upstream) as (sdk, _, _):
        with respx.mock() as mock:
            mock.post("http://upstream.test/v1/chat/completions").mock(side_effect=answer)
            for name in ("claude-opus-5-5", "claude-haiku-5"):
                await sdk.messages.create(
                    model=name, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
                )
    assert [body["model"] for body in seen] == ["smollm2", "smollm2"]


async def test_side_calls_skip_the_conversation(store: DiskHistoryStore) -> None:
    """A max_tokens 1 probe and a one-shot without tools are side calls (skip_history); a
    turn with tools is not."""
    provider = Recording()
    async with served(store, providers={"local": [provider]}) as (_, http, _):
        probe = {
            "model": "local",
            "max_tokens": 1,
            "messages": [{"role": "user", "content": "quota"}],
        }
        title = {
            "model": "local",
            "max_tokens": 50,
            "system": "Write a title.",
            "messages": [{"role": "user", "content": "the conversation..."}],
        }
        body, _ = turn("s", "fix it")
        for sent in (probe, title, body):
            await http.post("/v1/messages", json=sent, headers={"x-api-key": "sk-master"})
    assert [ctx.skip_history for ctx in provider.contexts] == [True, True, False]


async def test_a_system_prompt_and_tools_over_the_window_name_both_sizes(
    store: DiskHistoryStore,
) -> None:
    """An overflow nothing can fix is Anthropic's `prompt is too long: N tokens > M maximum`,
    naming the system prompt's and the tools' sizes (never cut)."""
    overflow = ContextWindowExceeded("too long", requested=9000, limit=4096, provider="x")
    provider = ScriptedProvider([overflow])
    tools = [{**TOOLS[0], "name": f"T{n}", "description": "word " * 300} for n in range(5)]
    async with served(store, providers={"local": [provider]}) as (_, http, _):
        response = await http.post(
            "/v1/messages",
            json={
                "model": "local",
                "max_tokens": 16,
                "system": "rule " * 2500,
                "tools": tools,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={"x-api-key": "sk-master"},
        )
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message.startswith("prompt is too long: 9000 tokens > 4096 maximum")
    assert "system prompt (" in message
    assert "tool definitions (" in message


def long_session(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n in range(turns):
        messages.append(
            {
                "role": "user",
                "content": f"Step {n}: the build step {n} writes module_{n}.py "
                + "and more words " * 40,
            }
        )
        messages.append({"role": "assistant", "content": f"Done with step {n}. " + "details " * 40})
    return messages


class Extracting:
    """A scripted upstream: notes for overspill's extraction calls, "ok" otherwise."""

    name = "extracting"

    def __init__(self) -> None:
        self.client_calls = 0

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        if ctx.tenant == "internal":
            return json_response("- The build writes module_0.py to module_9.py.")
        self.client_calls += 1
        return json_response("ok", prompt_tokens=count_messages(request.messages))

    async def aclose(self) -> None:
        """Nothing to release."""


async def test_a_compaction_request_is_answered_from_the_extraction(
    store: DiskHistoryStore,
) -> None:
    """Claude Code's compaction request for a long conversation is answered by overspill
    (no client call reaches the model) in the <analysis>/<summary> form, saying what the
    summary covers."""
    provider = Extracting()
    prompt = (
        "CRITICAL: Respond with TEXT ONLY.\n\nYour task is to create a detailed summary "
        "of the conversation so far, paying close attention to the user's requests."
    )
    messages: Any = [*long_session(20), {"role": "user", "content": prompt}]
    async with served(store, providers={"local": [provider]}) as (sdk, _, _):
        raw = await sdk.messages.with_raw_response.create(
            model="local",
            max_tokens=4000,
            tools=TOOLS,
            messages=messages,
        )
        message = await raw.parse()
    assert provider.client_calls == 0
    assert raw.headers["x-overspill-action"] == "summary-answered"
    text = message.content[0].text  # type: ignore[union-attr]
    assert text.startswith("<analysis>\noverspill wrote this summary itself")
    assert "<summary>" in text
    assert "module_0.py" in text
    assert "Step 19" in text  # the newest messages are quoted as they were


async def test_a_short_conversations_compaction_request_goes_to_the_model(
    store: DiskHistoryStore,
) -> None:
    """With no extraction and room to spare, the model writes the summary itself."""
    provider = Extracting()
    messages = [
        *long_session(2),
        {
            "role": "user",
            "content": "Your task is to create a detailed summary of the conversation so far.",
        },
    ]
    async with served(store, providers={"local": [provider]}) as (sdk, _, _):
        await sdk.messages.create(model="local", max_tokens=100, tools=TOOLS, messages=messages)  # type: ignore[arg-type]
    assert provider.client_calls == 1


def read_turns(n: int) -> Any:
    """A task, then `n` Read calls with a file each."""
    file = "\n".join(f"line {k}: value_{k} = compute({k})" for k in range(60))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files."}]
    for k in range(n):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": f"toolu_{k}",
                        "name": "Read",
                        "input": {"file_path": f"f{k}.py"},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": file}],
            }
        )
    return messages


async def test_clear_tool_uses_is_honoured_and_reported(store: DiskHistoryStore) -> None:
    """context_management's clear_tool_uses masks old results for a chat model; the answer's
    context_management says how many uses and tokens were cleared."""
    provider = ScriptedProvider([json_response("done")])
    edit: Any = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 500},
        "keep": {"type": "tool_uses", "value": 2},
    }
    async with served(store, providers={"local": [provider]}) as (sdk, _, _):
        message = await sdk.beta.messages.create(
            model="local",
            max_tokens=16,
            tools=TOOLS,
            messages=read_turns(6),
            context_management={"edits": [edit]},
            betas=["context-management-2025-06-27"],
        )
    assert message.context_management is not None
    [applied] = message.context_management.applied_edits
    assert applied.type == "clear_tool_uses_20250919"
    assert applied.cleared_tool_uses == 4
    assert applied.cleared_input_tokens > 1000
    sent = [m for m in provider.requests[0].messages if m["role"] == "tool"]
    assert ["overspill masked" in m["content"] for m in sent] == [True] * 4 + [False] * 2


async def test_the_compaction_edit_begins_the_answer_with_a_compaction_block(
    store: DiskHistoryStore,
) -> None:
    """Past the compaction edit's trigger the answer begins with a compaction block covering
    the conversation; with pause_after_compaction it is the whole answer."""
    provider = Extracting()
    edit: Any = {
        "type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 50000},
    }
    big = LOCAL.replace("context: {window: 4096}", "context: {window: 200000}")
    messages: Any = long_session(400)
    async with served(store, big, providers={"local": [provider]}) as (sdk, _, _):
        message = await sdk.beta.messages.create(
            model="local",
            max_tokens=16,
            messages=messages,
            context_management={"edits": [edit]},
            betas=["compact-2026-01-12"],
        )
        paused = await sdk.beta.messages.create(
            model="local",
            max_tokens=16,
            messages=messages,
            context_management={"edits": [edit | {"pause_after_compaction": True}]},
            betas=["compact-2026-01-12"],
        )
    assert message.content[0].type == "compaction"
    assert "overspill wrote this summary" in (message.content[0].content or "")
    assert message.content[1].type == "text"
    assert [block.type for block in paused.content] == ["compaction"]
    assert paused.stop_reason == "compaction"
    assert provider.client_calls == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_the_native_road_sends_the_clients_bytes_to_anthropic(
    store: DiskHistoryStore, stream: bool
) -> None:
    """An Anthropic deployment gets the client's own bytes (the model renamed) with its
    anthropic-version and anthropic-beta and the deployment's key; the answer's bytes come
    back as Anthropic wrote them."""
    sent: list[httpx.Request] = []
    events = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Paris."}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if stream:
            return httpx.Response(
                200, content=events, headers={"content-type": "text/event-stream"}
            )
        return httpx.Response(200, json=ANSWER)

    body = {
        "model": "claude",
        "max_tokens": 16,
        "stream": stream,
        "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Capital of France?"}],
        "thinking": {"type": "adaptive"},
    }
    async with (
        httpx.AsyncClient() as upstream,
        served(store, NATIVE, upstream=upstream) as (_, http, _),
    ):
        with respx.mock(assert_all_called=True) as mock:
            mock.post("http://anthropic.test/v1/messages").mock(side_effect=answer)
            response = await http.post(
                "/v1/messages",
                json=body,
                headers={
                    "x-api-key": "sk-master",
                    "anthropic-version": "2023-06-01",
                    "anthropic-beta": "interleaved-thinking-2025-05-14",
                },
            )
    assert response.status_code == 200
    assert response.content == (events if stream else orjson.dumps(ANSWER))
    upstream_body = orjson.loads(sent[0].content)
    assert upstream_body == {**body, "model": "claude-sonnet-4-5"}
    assert sent[0].headers["x-api-key"] == "sk-ant-upstream"
    assert sent[0].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


async def test_a_server_speaking_the_messages_api_counts_and_answers_natively(
    store: DiskHistoryStore,
) -> None:
    """`messages_api: native` sends /v1/messages to the server's own route and count_tokens
    to its own count."""
    paths: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if request.url.path.endswith("count_tokens"):
            return httpx.Response(200, json={"input_tokens": 77})
        return httpx.Response(200, json=ANSWER)

    async with (
        httpx.AsyncClient() as upstream,
        served(store, NATIVE, upstream=upstream) as (sdk, _, _),
    ):
        with respx.mock(assert_all_called=False) as mock:
            mock.post(url__startswith="http://llama.test/v1/messages").mock(side_effect=answer)
            message = await sdk.messages.create(
                model="server", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
            counted = await sdk.messages.count_tokens(
                model="server", messages=[{"role": "user", "content": "hi"}]
            )
    assert message.content[0].text == "Paris."  # type: ignore[union-attr]
    assert counted.input_tokens == 77
    assert paths == ["/v1/messages", "/v1/messages/count_tokens"]


async def test_a_masked_request_still_goes_to_anthropic_in_its_wire(
    store: DiskHistoryStore,
) -> None:
    """When the layers changed the conversation (here: the client's clear_tool_uses, which
    Anthropic applies itself, is not applied twice) the client's bytes still go."""
    sent: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json=ANSWER)

    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 100}}
    body = {
        "model": "claude",
        "max_tokens": 16,
        "tools": TOOLS,
        "messages": read_turns(6),
        "context_management": {"edits": [edit]},
    }
    async with (
        httpx.AsyncClient() as upstream,
        served(store, NATIVE, upstream=upstream) as (_, http, _),
    ):
        with respx.mock() as mock:
            mock.post("http://anthropic.test/v1/messages").mock(side_effect=answer)
            response = await http.post(
                "/v1/messages", json=body, headers={"x-api-key": "sk-master"}
            )
    assert response.status_code == 200
    assert orjson.loads(sent[0]) == {**body, "model": "claude-sonnet-4-5"}
    assert "context_management" not in response.json()  # Anthropic's own answer, as it is


async def test_count_tokens_asks_anthropic(store: DiskHistoryStore) -> None:
    """An Anthropic deployment's count is Anthropic's own (the client's body, renamed)."""
    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(request.content))
        return httpx.Response(200, json={"input_tokens": 1234})

    async with (
        httpx.AsyncClient() as upstream,
        served(store, NATIVE, upstream=upstream) as (sdk, _, _),
    ):
        with respx.mock() as mock:
            mock.post("http://anthropic.test/v1/messages/count_tokens").mock(side_effect=answer)
            counted = await sdk.messages.count_tokens(
                model="claude", messages=[{"role": "user", "content": "hi"}]
            )
    assert counted.input_tokens == 1234
    assert seen == [{"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}]


async def test_a_spliced_request_to_anthropic_keeps_the_clients_blocks(
    store: DiskHistoryStore,
) -> None:
    """When a layer replaces the conversation's older part, the Anthropic body is written
    again: the stand-in as user text after the system prompt, every kept message as the
    client's own blocks (thinking signature and cache markers included)."""
    from proxy.surfaces.messages import MessagesSurface

    body: dict[str, Any] = {
        "model": "claude",
        "max_tokens": 16,
        "system": "S",
        "messages": [
            {"role": "user", "content": "old"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "sig"},
                    {"type": "text", "text": "old answer", "cache_control": {"type": "ephemeral"}},
                ],
            },
            {"role": "user", "content": "new"},
        ],
    }
    system = build_system(settings_from(NATIVE), providers={"claude": [Recording()]}, store=store)
    turn, _ = await MessagesSurface().open(
        orjson.dumps(body), {}, RequestContext(request_id="r", tenant="t"), system
    )
    messages = turn.chat.messages
    stand_in = {"role": "system", "content": "[overspill: condensed history] old stuff"}
    spliced = turn.chat.spliced([messages[0], stand_in, *messages[2:]])
    native = turn.chat.native
    assert native is not None
    rendered = orjson.loads(native.body_for(spliced, "claude-sonnet-4-5") or b"")
    assert rendered["system"] == [{"type": "text", "text": "S"}]
    assert rendered["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "[overspill: condensed history] old stuff"}],
        },
        body["messages"][1],
        {"role": "user", "content": [{"type": "text", "text": "new"}]},
    ]
    await system.aclose()


async def test_a_messages_path_not_served_answers_in_anthropics_shape(
    store: DiskHistoryStore,
) -> None:
    """Message batches (not served) are a 404 and `GET /v1/messages` a 405, each in
    Anthropic's error shape, so the SDK raises its own error with overspill's message."""
    async with served(store) as (sdk, http, _system):
        with pytest.raises(anthropic.NotFoundError) as caught:
            await sdk.messages.batches.create(requests=[])
        wrong = await http.get("/v1/messages", headers={"x-api-key": "sk-master"})
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert "no route POST /v1/messages/batches" in body["error"]["message"]
    assert wrong.status_code == 405
    assert wrong.json()["type"] == "error"
    assert wrong.json()["error"]["type"] == "invalid_request_error"
