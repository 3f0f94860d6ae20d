"""Tenants: client keys, each its own tenant, seen through the OpenAI SDK against the app."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from kernel.config_loading import load_config
from kernel.errors import ContextWindowExceeded
from kernel.store import DiskHistoryStore
from kernel.tokens import count_messages
from kernel.types import ChatRequest, ChatResponse, RequestContext
from providers.fake import json_response
from proxy.app import create_app
from proxy.keys import Keyring
from proxy.live import LiveApp, build_from
from proxy.system import build_system
from tests.conftest import settings_from

pytestmark = pytest.mark.reliability("tenants")

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 2048, max_output_tokens: 128}
  - model_name: other
    litellm_params: {model: openai/other, api_base: "http://other.test/v1"}
router_settings:
  model_group_alias: {fast: local}
general_settings:
  master_key: sk-master
  client_keys:
    - {name: app-a, key: sk-app-a-secret}
    - {name: app-b, key: sk-app-b-secret, models: [local]}
    - {name: app-c, key: os.environ/APP_C_KEY}
"""
SUMMARY_OF = "Notes on "


class Upstream:
    """A model: overflows past `fits` messages; an extraction call gets notes naming the
    topics it read and its own number (so a cross-tenant use would show)."""

    name = "upstream"

    def __init__(self, fits: int = 24) -> None:
        self.fits = fits
        self.seen: list[tuple[str, ChatRequest]] = []
        self.extractions = 0

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.seen.append((ctx.tenant, request))
        text = " ".join(str(m.get("content")) for m in request.messages)
        if ctx.tenant == "internal":
            topics = [t for t in ("alpha", "beta") if f"about {t}" in text]
            self.extractions += 1
            return json_response(f"{SUMMARY_OF}{' and '.join(topics)} #{self.extractions}")
        if len(request.messages) > self.fits:
            raise ContextWindowExceeded("maximum context length is 2048 tokens", limit=2048)
        return json_response("ok", prompt_tokens=count_messages(request.messages))

    async def aclose(self) -> None:
        """Nothing to release."""


Sdk = Callable[[str], openai.AsyncOpenAI]


@pytest.fixture
async def sdk(store: DiskHistoryStore) -> AsyncIterator[tuple[Sdk, Upstream]]:
    """OpenAI SDK clients (one per key) on one app over the tenants config."""
    upstream = Upstream()
    settings = settings_from(CONFIG, env={})
    app = create_app(
        build_system(settings, providers={"local": [upstream], "other": [upstream]}, store=store)
    )
    clients: list[openai.AsyncOpenAI] = []

    def make(key: str) -> openai.AsyncOpenAI:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
        client = openai.AsyncOpenAI(
            base_url="http://overspill.test/v1", api_key=key, max_retries=0, http_client=http
        )
        clients.append(client)
        return client

    yield make, upstream
    for client in clients:
        await client.close()


def conversation(topic: str, turns: int = 14) -> list[Any]:
    """A conversation about `topic`, long enough to overflow the 2048-token window."""
    messages: list[Any] = [{"role": "system", "content": "You are the support assistant."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"q{turn} about {topic} " + "word " * 60})
        messages.append({"role": "assistant", "content": f"reply {turn} " + "word " * 60})
    messages.append({"role": "user", "content": f"and now, about {topic}?"})
    return messages


async def ask(client: openai.AsyncOpenAI, messages: list[Any], conversation_id: str) -> str:
    """One chat call under an explicit conversation id; the action overspill took."""
    raw = await client.chat.completions.with_raw_response.create(
        model="local", messages=messages, extra_headers={"x-conversation-id": conversation_id}
    )
    return str(raw.headers.get("x-overspill-action", "sent"))


async def test_each_client_key_is_its_own_tenant_and_logs_name_not_key(
    sdk: tuple[Sdk, Upstream], caplog: pytest.LogCaptureFixture
) -> None:
    """A client key runs as the tenant it names; the log line names it, never the key."""
    make, upstream = sdk
    with caplog.at_level(logging.INFO, logger="overspill.request"):
        for key in ("sk-app-a-secret", "sk-app-b-secret", "sk-master"):
            reply = await make(key).chat.completions.create(
                model="local", messages=[{"role": "user", "content": "hi"}]
            )
            assert reply.choices[0].message.content == "ok"
    tenants = [record.__dict__["tenant"] for record in caplog.records]
    assert tenants == ["app-a", "app-b", Keyring("sk-master").caller("Bearer sk-master").tenant]
    assert [tenant for tenant, _ in upstream.seen] == tenants
    logged = " ".join(f"{record.getMessage()} {record.__dict__}" for record in caplog.records)
    assert "sk-app-a-secret" not in logged
    assert "sk-app-b-secret" not in logged
    assert "sk-master" not in logged


async def test_unknown_and_missing_keys_are_refused(sdk: tuple[Sdk, Upstream]) -> None:
    """A key the config does not list, or none, is a 401 the SDK shows as AuthenticationError."""
    make, upstream = sdk
    for key in ("sk-wrong", "sk-app-a-secretx", " "):
        with pytest.raises(openai.AuthenticationError) as refused:
            await make(key).chat.completions.create(
                model="local", messages=[{"role": "user", "content": "hi"}]
            )
        assert refused.value.code == "invalid_api_key"
    assert upstream.seen == []


async def test_client_keys_without_master_key_keep_the_gateway_closed(
    store: DiskHistoryStore,
) -> None:
    """Client keys whose variables are all unset disable themselves; no key gets in."""
    settings = settings_from(
        "model_list: [{model_name: local, litellm_params: {model: openai/m}}]\n"
        "general_settings: {client_keys: [{name: app, key: os.environ/UNSET_KEY}]}\n",
        env={},
    )
    app = create_app(build_system(settings, store=store))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://o.test"
    ) as client:
        for headers in ({}, {"authorization": "Bearer anything"}):
            assert (await client.get("/v1/models", headers=headers)).status_code == 401


async def test_a_limited_key_gets_403_for_other_models_and_lists_only_its_own(
    sdk: tuple[Sdk, Upstream],
) -> None:
    """A key limited to some models: another model is a 403 PermissionDeniedError naming the
    key's models, an alias of its model is allowed, and /v1/models lists only those."""
    make, upstream = sdk
    limited = make("sk-app-b-secret")
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await limited.chat.completions.create(
            model="other", messages=[{"role": "user", "content": "hi"}]
        )
    assert refused.value.code == "model_not_allowed"
    assert refused.value.param == "model"
    assert "may not use model 'other'; its models are local" in str(refused.value)
    assert upstream.seen == []
    await limited.chat.completions.create(model="fast", messages=[{"role": "user", "content": "x"}])
    assert [model.id async for model in limited.models.list()] == ["local", "fast"]
    everything = [model.id async for model in make("sk-app-a-secret").models.list()]
    assert everything == ["local", "other", "fast"]


async def test_admin_endpoints_answer_a_client_key_with_403(sdk: tuple[Sdk, Upstream]) -> None:
    """/overspill/* takes the master key only: a client key is refused as a permission error."""
    make, _ = sdk
    client = make("sk-app-a-secret")
    for method, path in (
        ("get", "/overspill/conversations"),
        ("delete", "/overspill/conversations"),
        ("get", "/overspill/conversations/conv-1"),
        ("post", "/overspill/ollama/refresh"),
    ):
        with pytest.raises(openai.PermissionDeniedError) as refused:
            await getattr(client, method)(f"http://overspill.test{path}", cast_to=httpx.Response)
        assert refused.value.code == "admin_only"
        assert "tenant 'app-a'" in str(refused.value)
    admin = make("sk-master")
    listing = await admin.get(
        "http://overspill.test/overspill/conversations", cast_to=httpx.Response
    )
    assert listing.json() == {"object": "list", "data": []}


async def test_tenants_never_share_a_conversation_even_with_the_same_id(
    sdk: tuple[Sdk, Upstream], store: DiskHistoryStore
) -> None:
    """Two tenants with one X-Conversation-Id: each compacts into its own entry (before the
    known window refuses), splices only its own, and neither can read, overwrite or evict the
    other's."""
    make, upstream = sdk
    alpha, beta = make("sk-app-a-secret"), make("sk-app-b-secret")
    talk_a = conversation("alpha")
    assert await ask(alpha, talk_a, "conv-1") == "spliced+extracted"
    kept = await store.get("app-a", "conv-1")
    assert kept is not None
    assert kept.extraction.startswith("Notes:\n" + SUMMARY_OF + "alpha")
    # the same id and even the same messages from another tenant find nothing of app-a's
    assert await ask(beta, talk_a, "conv-1") == "spliced+extracted"
    assert await ask(beta, conversation("beta"), "conv-1") == "spliced+extracted"
    mine = await store.get("app-b", "conv-1")
    assert mine is not None
    assert mine.extraction.startswith("Notes:\n" + SUMMARY_OF + "beta")
    assert await store.get("app-a", "conv-1") == kept
    # app-a's next turn is spliced from its own extraction, untouched by app-b's turns
    talk_a += [{"role": "assistant", "content": "fine"}, {"role": "user", "content": "more?"}]
    assert (await ask(alpha, talk_a, "conv-1")).startswith("spliced")
    marker = kept.extraction.split("\n")[1]  # "Notes on alpha #1": app-a's own extraction
    for tenant, request in upstream.seen:
        text = " ".join(str(m.get("content")) for m in request.messages)
        if tenant == "app-a":
            assert "beta" not in text
        if tenant == "app-b":
            assert marker not in text


MODEL = (
    "  - model_name: local\n    litellm_params: {model: openai/m, api_base: http://up.test/v1}\n"
)


def keys_config(*keys: tuple[str, str]) -> str:
    listed = ", ".join(f"{{name: {name}, key: {key}}}" for name, key in keys)
    return (
        f"model_list:\n{MODEL}general_settings:\n  master_key: sk-master\n"
        f"  store: {{path: store}}\n  client_keys: [{listed}]\n"
    )


async def test_a_reload_enables_new_keys_and_refuses_removed_ones(tmp_path: Path) -> None:
    """After a reload, a new key works at once and a removed one is refused (401)."""
    path = tmp_path / "config.yaml"
    path.write_text(keys_config(("app-a", "sk-old-key")))
    live = LiveApp.start(str(path), build_from(load_config(path, env={}), str(path)), create_app)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=live), base_url="http://o.test")

    async def status(key: str) -> int:
        answer = await client.get("/v1/models", headers={"authorization": f"Bearer {key}"})
        return answer.status_code

    async with client:
        assert (await status("sk-old-key"), await status("sk-new-key")) == (200, 401)
        path.write_text(keys_config(("app-a", "sk-new-key"), ("app-b", "sk-b-key")))
        master = {"authorization": "Bearer sk-master"}
        assert (await client.post("/overspill/config/reload", headers=master)).status_code == 200
        assert (await status("sk-old-key"), await status("sk-new-key")) == (401, 200)
        assert await status("sk-b-key") == 200
    await live.aclose()
