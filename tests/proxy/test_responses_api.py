"""`/v1/responses` through the app, read by the official OpenAI SDK: answers, chains, streams,
stored responses per tenant, errors, and the native road for an upstream that speaks the API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import orjson
import pytest
import respx

from kernel.errors import ContextWindowExceeded, UpstreamError
from kernel.store import DiskHistoryStore
from kernel.types import ChatRequest, ChatResponse, RequestContext
from providers.fake import ScriptedProvider, completion, json_response, sse_events, stream_response
from proxy.app import create_app
from proxy.surfaces.responses import ResponsesNative
from proxy.surfaces.responses_wire import check_input, to_messages
from proxy.system import build_system
from tests.conftest import AppClient, settings_from

TENANTS = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 2048}
general_settings:
  master_key: sk-master
  client_keys:
    - {name: alice, key: sk-alice}
    - {name: bob, key: sk-bob}
"""
NATIVE = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    responses_api: native
    context: {window: 2048}
general_settings:
  master_key: sk-master
"""


def sdk(client: httpx.AsyncClient, key: str = "sk-master") -> openai.AsyncOpenAI:
    """The official SDK over the in-process app (no retries)."""
    return openai.AsyncOpenAI(
        base_url="http://overspill.test/v1", api_key=key, http_client=client, max_retries=0
    )


def tool_call(name: str, arguments: str, call_id: str = "call_1") -> ChatResponse:
    """A chat answer that calls one function."""
    body = completion("")
    message = body["choices"][0]["message"]
    message["content"] = None
    message["tool_calls"] = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    ]
    body["choices"][0]["finish_reason"] = "tool_calls"
    return ChatResponse(body=orjson.dumps(body))


async def test_a_string_input_is_answered_as_a_response_object(app_client: AppClient) -> None:
    """The SDK gets a completed response whose output_text is the model's answer."""
    provider = ScriptedProvider([json_response("Paris.", prompt_tokens=12)])
    client = sdk(app_client({"local": [provider]}))
    response = await client.responses.create(
        model="local", input="Capital of France?", instructions="Be brief."
    )
    assert response.status == "completed"
    assert response.output_text == "Paris."
    assert response.usage is not None
    assert response.usage.input_tokens == 12
    sent = provider.requests[0]
    assert [m["role"] for m in sent.messages] == ["system", "user"]
    assert sent.messages[1]["content"] == "Capital of France?"


async def test_previous_response_id_continues_the_conversation(app_client: AppClient) -> None:
    """The second turn's model sees the first turn's input and answer before the new input."""
    provider = ScriptedProvider([json_response("Paris."), json_response("About 2 million.")])
    client = sdk(app_client({"local": [provider]}))
    first = await client.responses.create(model="local", input="Capital of France?")
    second = await client.responses.create(
        model="local", input="How many people live there?", previous_response_id=first.id
    )
    assert second.output_text == "About 2 million."
    assert second.previous_response_id == first.id
    sent = provider.requests[1].messages
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "How many people live there?"),
    ]


class Recording:
    """A provider that answers "ok" and records each request's conversation id."""

    name = "recording"

    def __init__(self) -> None:
        self.ids: list[str] = []

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.ids.append(ctx.conversation_id)
        return json_response("ok")

    async def aclose(self) -> None:
        """Nothing to release."""


async def test_a_chain_is_the_same_conversation_as_chat_completions(
    app_client: AppClient,
) -> None:
    """A chain keeps one conversation id, the one chat completions derive for its messages."""
    provider = Recording()
    http = app_client({"local": [provider]})
    client = sdk(http)
    first = await client.responses.create(model="local", input="Hello there")
    await client.responses.create(model="local", input="Again", previous_response_id=first.id)
    history = [
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "Again"},
    ]
    chat = await http.post("/v1/chat/completions", json={"model": "local", "messages": history})
    assert chat.status_code == 200
    assert provider.ids[0] == provider.ids[1] == provider.ids[2]


async def test_function_calls_round_trip(app_client: AppClient) -> None:
    """A tool call is a function_call item; its output comes back as the tool's message."""
    provider = ScriptedProvider(
        [tool_call("get_weather", '{"city":"Paris"}'), json_response("Sunny.")]
    )
    client = sdk(app_client({"local": [provider]}))
    tools: Any = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    first = await client.responses.create(model="local", input="Weather in Paris?", tools=tools)
    call = first.output[-1]
    assert call.type == "function_call"
    assert call.name == "get_weather"
    assert call.arguments == '{"city":"Paris"}'
    second = await client.responses.create(
        model="local",
        previous_response_id=first.id,
        tools=tools,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "22C, sunny"}],
    )
    assert second.output_text == "Sunny."
    sent = provider.requests[1]
    assert sent.body["tools"][0]["function"]["name"] == "get_weather"
    roles = [m["role"] for m in sent.messages]
    assert roles == ["user", "assistant", "tool"]
    assert sent.messages[1]["tool_calls"][0]["id"] == call.call_id
    assert sent.messages[2]["tool_call_id"] == call.call_id


async def test_a_stream_has_the_events_the_sdk_expects(app_client: AppClient) -> None:
    """The SDK's stream helper assembles the text; the response is stored by its end."""
    provider = ScriptedProvider([stream_response(sse_events(["Par", "is."]))])
    client = sdk(app_client({"local": [provider]}))
    kinds: list[str] = []
    async with client.responses.stream(model="local", input="Capital of France?") as stream:
        async for event in stream:
            kinds.append(event.type)
        final = await stream.get_final_response()
    assert final.output_text == "Paris."
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    stored = await client.responses.retrieve(final.id)
    assert stored.output_text == "Paris."


async def test_a_stream_that_breaks_ends_with_response_failed(app_client: AppClient) -> None:
    """An upstream failure after the first event is response.failed then an error event."""
    broken = stream_response(sse_events(["Par"])[:-1], UpstreamError("upstream went away"))
    client = app_client({"local": [ScriptedProvider([broken])]})
    async with client.stream(
        "POST", "/v1/responses", json={"model": "local", "input": "hi", "stream": True}
    ) as response:
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    events = [orjson.loads(line[6:]) for line in body.splitlines() if line.startswith(b"data: ")]
    assert [e["type"] for e in events][-2:] == ["response.failed", "error"]
    numbers = [e["sequence_number"] for e in events]
    assert numbers == list(range(len(events)))
    assert "upstream went away" in events[-1]["message"]


def keyed_client(provider: ScriptedProvider, store: DiskHistoryStore) -> httpx.AsyncClient:
    """A client of an app whose config gives each tenant its own key (`TENANTS`)."""
    app = create_app(
        build_system(settings_from(TENANTS), providers={"local": [provider]}, store=store)
    )
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://overspill.test"
    )


async def test_stored_responses_belong_to_their_key(store: DiskHistoryStore) -> None:
    """Another key can neither read, continue, list nor delete a response: each is a 404."""
    provider = ScriptedProvider([json_response("secret")])
    http = keyed_client(provider, store)
    alice, bob = sdk(http, "sk-alice"), sdk(http, "sk-bob")
    made = await alice.responses.create(model="local", input="my password is hunter2")
    assert (await alice.responses.retrieve(made.id)).output_text == "secret"
    with pytest.raises(openai.NotFoundError) as read:
        await bob.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        await bob.responses.create(model="local", input="go on", previous_response_id=made.id)
    with pytest.raises(openai.NotFoundError):
        await bob.responses.input_items.list(made.id)
    with pytest.raises(openai.NotFoundError):
        await bob.responses.delete(made.id)
    assert "hunter2" not in str(read.value.body)
    assert read.value.body["code"] == "response_not_found"  # type: ignore[index]
    listed = await alice.responses.input_items.list(made.id)
    assert [item.type for item in listed.data] == ["message"]
    await alice.responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        await alice.responses.retrieve(made.id)
    await http.aclose()


async def test_stored_responses_read_the_key_as_they_were_made(store: DiskHistoryStore) -> None:
    """A response made with the key in x-api-key is read, listed and deleted with it too."""
    provider = ScriptedProvider([json_response("kept")])
    http = keyed_client(provider, store)
    key = {"x-api-key": "sk-alice"}
    made = await http.post("/v1/responses", json={"model": "local", "input": "hi"}, headers=key)
    assert made.status_code == 200, made.text
    response_id = made.json()["id"]
    read = await http.get(f"/v1/responses/{response_id}", headers=key)
    assert read.status_code == 200, read.text
    assert read.json()["output"][0]["content"][0]["text"] == "kept"
    items = await http.get(f"/v1/responses/{response_id}/input_items", headers=key)
    assert [item["type"] for item in items.json()["data"]] == ["message"]
    other = await http.get(f"/v1/responses/{response_id}", headers={"x-api-key": "sk-bob"})
    assert other.status_code == 404
    gone = await http.delete(f"/v1/responses/{response_id}", headers=key)
    assert gone.json()["deleted"] is True
    assert (await http.get(f"/v1/responses/{response_id}", headers=key)).status_code == 404
    await http.aclose()


async def test_store_false_keeps_nothing(app_client: AppClient) -> None:
    """A response made with store: false cannot be read or continued."""
    client = sdk(app_client({"local": [ScriptedProvider([json_response("x")])]}))
    made = await client.responses.create(model="local", input="hi", store=False)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.create(model="local", input="more", previous_response_id=made.id)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "local"}, "input"),
        ({"model": "local", "input": [{"type": "bogus"}]}, "input[0].type"),
        ({"model": "local", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"model": "local", "input": "x", "background": True}, "background"),
        ({"model": "local", "input": "x", "truncation": "sometimes"}, "truncation"),
        ({"model": "local", "input": "x", "store": "yes"}, "store"),
        ({"model": "local", "input": "x", "temperature": 5}, "temperature"),
        ({"model": "local", "input": "x", "top_p": 1.5}, "top_p"),
        ({"model": "local", "input": "x", "api_base": "http://evil"}, "api_base"),
        (
            {"model": "local", "input": "x", "context_management": [{"type": "x"}]},
            "context_management[0]",
        ),
    ],
)
async def test_bad_requests_are_400_naming_the_field(
    app_client: AppClient, body: dict[str, Any], param: str
) -> None:
    """Each malformed request is a 400 in OpenAI's error shape whose param names the field."""
    provider = ScriptedProvider([json_response("x")])
    client = app_client({"local": [provider]})
    response = await client.post("/v1/responses", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert provider.requests == []


async def test_an_unknown_previous_response_is_404(app_client: AppClient) -> None:
    """A previous_response_id that never existed is a 404 naming the parameter."""
    client = app_client({"local": [ScriptedProvider([json_response("x")])]})
    response = await client.post(
        "/v1/responses", json={"model": "local", "input": "x", "previous_response_id": "resp_nope"}
    )
    assert response.status_code == 404
    assert response.json()["error"]["param"] == "previous_response_id"


async def test_an_overflow_overspill_cannot_avoid_is_context_length_exceeded(
    app_client: AppClient,
) -> None:
    """The model's overflow, when nothing can be condensed, is a 400 context_length_exceeded."""
    overflow = ContextWindowExceeded("too long", requested=3000, limit=2048, provider="openai")
    client = app_client({"local": [ScriptedProvider([overflow])]})
    response = await client.post("/v1/responses", json={"model": "local", "input": "x"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_native_upstream_gets_the_clients_bytes(store: DiskHistoryStore) -> None:
    """With responses_api: native, an unchanged request goes to /responses as the client's
    bytes, and the upstream's answer comes back as its bytes, stored for the chain."""
    answer = {
        "id": "resp_up1",
        "object": "response",
        "created_at": 1,
        "model": "smollm2",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Paris.", "annotations": []}],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    sent: list[bytes] = []
    async with httpx.AsyncClient() as upstream:
        app = create_app(build_system(settings_from(NATIVE), client=upstream, store=store))
        http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://overspill.test"
        )
        with respx.mock(assert_all_called=False) as mock:

            def respond(request: httpx.Request) -> httpx.Response:
                sent.append(request.content)
                return httpx.Response(200, content=orjson.dumps(answer))

            mock.post("http://upstream.test/v1/responses").mock(side_effect=respond)
            raw = b'{"model":"local","input":"Capital of France?","store":true}'
            first = await http.post(
                "/v1/responses",
                content=raw,
                headers={"authorization": "Bearer sk-master", "content-type": "application/json"},
            )
            assert first.status_code == 200
            assert first.content == orjson.dumps(answer)
            assert orjson.loads(sent[0]) == {
                "model": "smollm2",
                "input": "Capital of France?",
                "store": True,
            }
            await http.post(
                "/v1/responses",
                json={"model": "local", "input": "And Spain?", "previous_response_id": "resp_up1"},
                headers={"authorization": "Bearer sk-master"},
            )
        expanded = orjson.loads(sent[1])
        assert "previous_response_id" not in expanded
        assert [item.get("type") for item in expanded["input"]] == [
            "message",
            "message",
            "reasoning",
            "message",
        ]
        assert expanded["input"][2]["encrypted_content"] == "opaque"
        await http.aclose()


async def stream_of(events: list[bytes]) -> AsyncIterator[bytes]:
    """An async iterator over prepared events."""
    for event in events:
        yield event


def test_a_spliced_native_request_keeps_the_tails_own_items() -> None:
    """When a layer stood an extraction in for the older turns, a native request carries the
    stand-in as an item, then the untouched turns as the client's items, reasoning included."""
    items = check_input(
        [
            {"role": "user", "content": "old question"},
            {"role": "assistant", "content": "old answer"},
            {"role": "user", "content": "second question"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
            {"role": "user", "content": "new question"},
        ]
    )
    origins: list[int] = []
    messages = tuple(to_messages(items, None, origins=origins))
    body = {"model": "local", "input": list(items)}
    chat_body = {"model": "local"}
    native = ResponsesNative(body, None, items, messages, tuple(origins), chat_body)
    whole = ChatRequest("local", messages, False, chat_body, native=native)
    stand_in = {"role": "system", "content": "[condensed] the old turns"}
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "user",
    ]
    spliced = whole.spliced([stand_in, *messages[3:]])  # the call and its output stay together
    sent = orjson.loads(native.body_for(spliced, "up") or b"")
    assert sent["model"] == "up"
    assert sent["input"][0] == {"type": "message", "role": "system", "content": stand_in["content"]}
    assert sent["input"][1:] == [dict(item) for item in items[3:]]  # the reasoning item first
    assert native.body_for(whole.with_params(max_tokens=1), "up") is None


async def test_tools_only_openai_runs_go_native_and_are_refused_otherwise(
    store: DiskHistoryStore,
) -> None:
    """A web_search tool and a web_search_call item reach a deployment that serves the
    Responses API as the client sent them; a model reached through chat completions refuses
    them with a 400 naming the tool."""
    answer = {
        "id": "resp_up2",
        "object": "response",
        "created_at": 1,
        "model": "smollm2",
        "status": "completed",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    body = {
        "model": "local",
        "tools": [{"type": "web_search"}],
        "tool_choice": {"type": "web_search"},
        "input": [
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}},
            {"role": "user", "content": "What did you find?"},
        ],
    }
    sent: list[bytes] = []
    async with httpx.AsyncClient() as upstream:
        native = create_app(build_system(settings_from(NATIVE), client=upstream, store=store))
        http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=native), base_url="http://overspill.test"
        )
        with respx.mock(assert_all_called=False) as mock:

            def respond(request: httpx.Request) -> httpx.Response:
                sent.append(request.content)
                return httpx.Response(200, content=orjson.dumps(answer))

            mock.post("http://upstream.test/v1/responses").mock(side_effect=respond)
            made = await http.post(
                "/v1/responses", json=body, headers={"authorization": "Bearer sk-master"}
            )
        assert made.status_code == 200, made.text
        forwarded = orjson.loads(sent[0])
        assert forwarded["tools"] == body["tools"]
        assert forwarded["input"][0]["type"] == "web_search_call"
        await http.aclose()
    provider = ScriptedProvider([json_response("x")])
    app = create_app(build_system(settings_from(), providers={"local": [provider]}, store=store))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://overspill.test"
    ) as other:
        refused = await other.post(
            "/v1/responses", json=body, headers={"authorization": "Bearer sk-master"}
        )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] in ("unsupported_tool", "unsupported_item")
    assert provider.requests == []


async def test_compact_returns_a_window_overspill_reads_back(app_client: AppClient) -> None:
    """POST /v1/responses/compact condenses the older turns into one compaction item before
    the newest turns; sent back as input, it reaches the model as the condensed history."""

    def answer(request: ChatRequest) -> ChatResponse:
        first = str(request.messages[0].get("content"))
        if "condense" in first.lower() or "notes" in first.lower():
            return json_response("- The user's vault code is 4471.")
        return json_response("ok")

    provider = ScriptedProvider([answer])
    client = app_client({"local": [provider]})
    items: list[dict[str, Any]] = []
    for turn in range(40):
        fact = "the vault code is 4471" if turn == 2 else f"nothing happened on day {turn}"
        items.append({"role": "user", "content": f"Day {turn}: {fact}. " + "More words. " * 12})
        items.append({"role": "assistant", "content": f"Noted day {turn}."})
    items.append({"role": "user", "content": "What is the vault code?"})
    compacted = await client.post(
        "/v1/responses/compact",
        json={"model": "local", "input": items, "instructions": "Be brief."},
    )
    assert compacted.status_code == 200, compacted.text
    made = compacted.json()
    assert made["object"] == "response.compaction"
    kinds = [item["type"] for item in made["output"]]
    assert kinds.count("compaction") == 1
    assert kinds[0] == "compaction"
    assert 1 < len(made["output"]) < len(items)
    assert made["output"][-1]["content"] == "What is the vault code?"
    assert made["usage"]["output_tokens"] < made["usage"]["input_tokens"]
    provider.requests.clear()
    again = await client.post(
        "/v1/responses",
        json={"model": "local", "input": made["output"], "instructions": "Be brief."},
    )
    assert again.status_code == 200, again.text
    sent = provider.requests[-1].messages
    assert [m["role"] for m in sent[:2]] == ["system", "system"]
    assert "4471" in str(sent[1]["content"])
    assert len(sent) == len(made["output"]) + 1


async def test_input_tokens_are_counted_with_the_chain_and_no_model_call(
    app_client: AppClient,
) -> None:
    """The SDK's `responses.input_tokens.count` gets OpenAI's object: the same count for a
    turn sent whole and for it sent after its stored chain, larger with a tool; no model is
    asked; a chain not found is the same 404 as for /v1/responses."""
    provider = ScriptedProvider([json_response("Paris.")])
    client = sdk(app_client({"local": [provider]}))
    first = await client.responses.create(model="local", input="Capital of France?")
    provider.requests.clear()
    chained = await client.responses.input_tokens.count(
        model="local", previous_response_id=first.id, input="And of Spain?"
    )
    whole = await client.responses.input_tokens.count(
        model="local",
        input=[
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Spain?"},
        ],
    )
    assert chained.object == "response.input_tokens"
    assert chained.input_tokens == whole.input_tokens > 0
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    with_tool = await client.responses.input_tokens.count(
        model="local",
        input="And of Spain?",
        tools=[tool],  # type: ignore[list-item]
    )
    alone = await client.responses.input_tokens.count(model="local", input="And of Spain?")
    assert with_tool.input_tokens > alone.input_tokens
    assert provider.requests == []
    with pytest.raises(openai.NotFoundError):
        await client.responses.input_tokens.count(
            model="local", previous_response_id="resp_nope", input="x"
        )
