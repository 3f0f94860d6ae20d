"""Embeddings and legacy completions through `overspill serve` against the real local model,
called by the real OpenAI SDK: `local` (chat and completions) and `local-embed` (a second
llama-server with --embeddings), as `make run` serves them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from tests.e2e.conftest import MASTER_KEY, WINDOW, Served, serve

pytestmark = pytest.mark.e2e


def routes_config(chat: str, embed: str) -> str:
    """config.yaml's two local models, before the session's two real llama-servers."""
    return f"""
model_list:
  - model_name: local
    litellm_params: {{model: openai/smollm2-135m, api_base: {chat}, timeout: 300}}
    model_info: {{mode: chat}}
    context: {{window: {WINDOW}}}
  - model_name: local-embed
    litellm_params: {{model: openai/smollm2-135m-embed, api_base: {embed}, timeout: 300}}
    model_info: {{mode: embedding}}
general_settings:
  master_key: {MASTER_KEY}
  max_body_bytes: 200000
  store: {{path: store}}
"""


@pytest.fixture(scope="module")
def routing(
    llama_server: str, llama_embed_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """overspill serve (default layers) before the chat and the embeddings llama-servers."""
    config = routes_config(llama_server, llama_embed_server)
    yield from serve(config, tmp_path_factory.mktemp("routes"), llama_server)


def test_embeddings_come_back_as_the_sdk_reads_them(routing: Served) -> None:
    """embeddings.create: one vector per input, the same whether the SDK asked for base64
    (its default, decoded by the SDK) or floats: the bytes went through unchanged."""
    client = routing.client()
    texts = ["The capital of France is Paris.", "Apples are red."]
    default = client.embeddings.create(model="local-embed", input=texts)
    floats = client.embeddings.create(model="local-embed", input=texts, encoding_format="float")
    assert [item.index for item in default.data] == [0, 1]
    assert len(default.data[0].embedding) == len(default.data[1].embedding) > 100
    for decoded, plain in zip(default.data, floats.data, strict=True):
        assert decoded.embedding == pytest.approx(plain.embedding, abs=1e-6)
    assert default.data[0].embedding != default.data[1].embedding
    assert default.usage.prompt_tokens > 0


def test_token_ids_are_embedded_too(routing: Served) -> None:
    """An input of token ids (what tiktoken-based clients send) is answered, one vector."""
    answer = routing.client().embeddings.create(model="local-embed", input=[[1, 2, 3, 4]])
    assert len(answer.data) == 1
    assert answer.data[0].embedding


def test_a_completion(routing: Served) -> None:
    """completions.create answers with text, a finish reason and usage."""
    raw = routing.client().completions.with_raw_response.create(
        model="local", prompt="The capital of France is", max_tokens=6, temperature=0
    )
    completion = raw.parse()
    assert raw.headers["x-request-id"]
    assert completion.object == "text_completion"
    assert isinstance(completion.choices[0].text, str)
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert 0 < completion.usage.prompt_tokens < 20


def test_a_completion_stream(routing: Served) -> None:
    """A streamed completion arrives piece by piece and ends as the SDK expects."""
    stream = routing.client().completions.create(
        model="local", prompt="Once upon a time", max_tokens=8, temperature=0, stream=True
    )
    pieces = [chunk.choices[0].text for chunk in stream if chunk.choices]
    assert len(pieces) >= 2
    assert "".join(pieces).strip()


def test_an_over_long_prompt_is_context_length_exceeded(routing: Served) -> None:
    """A prompt over the window is a 400 context_length_exceeded naming `prompt`, with the
    prompt's and the window's sizes."""
    with pytest.raises(openai.BadRequestError) as raised:
        routing.client().completions.create(
            model="local", prompt="tell me about apples " * 700, max_tokens=4
        )
    error = raised.value
    assert error.status_code == 400
    assert error.code == "context_length_exceeded"
    assert error.param == "prompt"
    requested = int(error.response.headers["x-overspill-requested-tokens"])
    assert requested > WINDOW
    assert error.response.headers["x-overspill-window"] == str(WINDOW)


def test_the_chat_model_sends_embeddings_to_the_embedding_model(routing: Served) -> None:
    """`local` (mode chat) asked for embeddings is a 400 that names local-embed."""
    with pytest.raises(openai.BadRequestError) as raised:
        routing.client().embeddings.create(model="local", input="hi")
    assert raised.value.code == "route_not_served"
    assert "Models that serve it: local-embed" in str(raised.value.message)


def test_models_say_which_routes_each_serves(routing: Served) -> None:
    """/v1/models lists each model's routes beside its window."""
    listed = routing.client().models.list()
    routes = {model.id: model.model_extra["routes"] for model in listed.data if model.model_extra}
    assert routes == {
        "local": ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/completions"],
        "local-embed": ["/v1/embeddings"],
    }


def test_each_request_is_one_log_line_naming_its_api(routing: Served) -> None:
    """The request log says which API each request spoke, with its model and status."""
    client = routing.client()
    embedded = client.embeddings.with_raw_response.create(model="local-embed", input="log me")
    completed = client.completions.with_raw_response.create(
        model="local", prompt="Hi", max_tokens=1
    )
    lines = [json.loads(line) for line in routing.log_lines() if line.startswith("{")]
    logged = {line.get("request_id"): line for line in lines}
    for raw, api, model in (
        (embedded, "embeddings", "local-embed"),
        (completed, "completions", "local"),
    ):
        line = logged[raw.headers["x-request-id"]]
        assert (line["api"], line["model"], line["status"]) == (api, model, 200)
