"""The real OpenAI SDK, through `overspill serve`, against the real local model: by the byte
passthrough, and (the tests taking `road`) by litellm's translation sent by overspill."""

from __future__ import annotations

from typing import Any, cast

import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam

from cli.main import main
from tests.e2e.conftest import MASTER_KEY, WINDOW, Served

pytestmark = pytest.mark.e2e

QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France?"}
]
TOO_LONG: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "tell me about apples " * 700}
]


@pytest.fixture(params=["passthrough", "litellm"])
def road(request: pytest.FixtureRequest) -> Served:
    """The same model by each road: `overspill` (byte passthrough), `litellm_road`."""
    name = "overspill" if request.param == "passthrough" else "litellm_road"
    served: Served = request.getfixturevalue(name)
    return served


def test_json_chat(road: Served) -> None:
    """A plain chat completion comes back in OpenAI's shape with usage and a request id."""
    raw = road.client().chat.completions.with_raw_response.create(
        model="local",
        messages=QUESTION,
        max_tokens=8,
        temperature=0,
    )
    completion = raw.parse()
    assert raw.headers["x-request-id"]
    assert completion.object == "chat.completion"
    assert isinstance(completion.choices[0].message.content, str)
    assert completion.usage is not None
    assert 0 < completion.usage.prompt_tokens < 100
    assert 0 < completion.usage.completion_tokens <= 8


def test_streamed_chat_with_usage(road: Served) -> None:
    """A streamed chat yields chunks, then a usage chunk, then ends cleanly."""
    stream = road.client().chat.completions.create(
        model="local", messages=QUESTION, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens <= 8


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_larger_than_the_window(road: Served, stream: bool) -> None:
    """A prompt over the window is 400 context_length_exceeded with the sizes, streamed or not."""
    with pytest.raises(openai.BadRequestError) as caught:
        road.client().chat.completions.create(
            model="local",
            messages=TOO_LONG,
            max_tokens=8,
            stream=stream,
        )
    error = caught.value
    assert error.status_code == 400
    assert error.code == "context_length_exceeded"
    assert "exceeds the available context size" in error.message
    assert error.response.headers["x-overspill-window"] == str(WINDOW)
    assert int(error.response.headers["x-overspill-requested-tokens"]) > WINDOW
    overflow_logs = [
        orjson.loads(line) for line in road.log_lines() if "context window overflow" in line
    ]
    assert overflow_logs[-1]["limit"] == WINDOW


def test_models_lists_local_with_its_window(overspill: Served) -> None:
    """The SDK's models.list shows the configured model, its context window and its routes
    (every route: its mode is not configured, the upstream decides); models.retrieve the same
    model, and a NotFoundError for a name not configured."""
    (model,) = overspill.client().models.list().data
    one = overspill.client().models.retrieve("local")
    assert (one.id, one.model_extra) == (model.id, model.model_extra)
    with pytest.raises(openai.NotFoundError):
        overspill.client().models.retrieve("gpt-nothing")
    assert model.id == "local"
    assert model.model_extra is not None
    assert model.model_extra["context_window"] == WINDOW
    assert model.model_extra["routes"] == [
        "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/completions",
        "/v1/embeddings",
    ]  # fmt: skip


def test_health_asks_the_real_model(overspill: Served) -> None:
    """`GET /health` calls the real llama-server behind `local` and finds it healthy."""
    answer = overspill.health()
    assert answer.status_code == 200
    (healthy,) = answer.json()["healthy_endpoints"]
    assert (healthy["model_name"], healthy["api_base"]) == ("local", overspill.upstream)
    assert answer.json()["unhealthy_count"] == 0


def test_the_health_command_reads_the_real_model_healthy(
    overspill: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """`overspill health` against the running server prints `local` healthy and exits 0."""
    assert main(["health", "--url", overspill.base_url, "--key", MASTER_KEY]) == 0
    (line, counts) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"healthy    local (openai/smollm2-135m at {overspill.upstream}): ")
    assert counts == "1 healthy, 0 unhealthy, 0 unchecked"


def test_wrong_key_is_401(overspill: Served) -> None:
    """A wrong key is refused before any upstream call."""
    with pytest.raises(openai.AuthenticationError) as caught:
        overspill.client(key="sk-wrong").chat.completions.create(model="local", messages=QUESTION)
    assert caught.value.code == "invalid_api_key"


def test_unknown_model_is_404(overspill: Served) -> None:
    """An unknown model is 404 model_not_found naming what is configured."""
    with pytest.raises(openai.NotFoundError) as caught:
        overspill.client().chat.completions.create(model="gpt-9", messages=QUESTION)
    assert caught.value.code == "model_not_found"
    assert "available models: local" in caught.value.message


def test_bad_input_is_400_naming_the_field(overspill: Served) -> None:
    """An ill-typed message and a smuggled api_base are 400s naming the field."""
    client = overspill.client()
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="local", messages=[cast(Any, {"role": "robot", "content": "x"})]
        )
    assert "messages[0].role" in caught.value.message
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="local",
            messages=QUESTION,
            extra_body={"api_base": "http://attacker.test"},
        )
    assert caught.value.code == "forbidden_parameter"


def test_body_over_the_limit_is_413(overspill: Served) -> None:
    """A body over general_settings.max_body_bytes is 413."""
    huge: list[ChatCompletionMessageParam] = [{"role": "user", "content": "x" * 250_000}]
    with pytest.raises(openai.APIStatusError) as caught:
        overspill.client().chat.completions.create(model="local", messages=huge)
    assert caught.value.status_code == 413
