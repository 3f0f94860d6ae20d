"""The agent frameworks people point at a proxy, with their default Responses API settings,
through `overspill serve` against the real local model: the OpenAI Agents SDK (its default
model name is an alias of `local` in the config), langchain-openai with
`use_responses_api=True`, and pydantic-ai's Responses model."""

from __future__ import annotations

import asyncio

import openai
import pytest
from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.models.openai_provider import OpenAIProvider as AgentsProvider
from langchain_openai import ChatOpenAI
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
from pydantic_ai.providers.openai import OpenAIProvider as PydanticProvider

from tests.e2e.conftest import MASTER_KEY, Served

pytestmark = pytest.mark.e2e


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"It is sunny in {city}."


def agents_config(client: openai.AsyncOpenAI) -> RunConfig:
    """The Agents SDK's defaults (its Responses model provider, its default model), its client
    pointed at overspill and its tracing (which would call OpenAI) off."""
    set_tracing_disabled(True)
    return RunConfig(model_provider=AgentsProvider(openai_client=client), tracing_disabled=True)


def test_the_agents_sdk_runs_an_agent(responding: Served) -> None:
    """An agent with a function tool, run and streamed with the SDK's defaults, answers."""
    agent = Agent(
        name="Assistant",
        instructions="Answer briefly.",
        tools=[get_weather],
        # the SDK takes a stream cut at max_tokens (`response.incomplete`) for a failure: room
        # for a 135M model to finish, greedy so the run is the same each time
        model_settings=ModelSettings(max_tokens=256, temperature=0),
    )

    async def run() -> tuple[object, object]:
        async with openai.AsyncOpenAI(
            base_url=responding.base_url + "/v1", api_key=MASTER_KEY, max_retries=0
        ) as client:
            config = agents_config(client)
            result = await Runner.run(agent, "What is the capital of France?", run_config=config)
            streamed = Runner.run_streamed(
                agent, "What is the capital of Spain?", run_config=config
            )
            kinds = [event.type async for event in streamed.stream_events()]
        assert "raw_response_event" in kinds
        return result.final_output, streamed.final_output

    answered, streamed = asyncio.run(run())
    assert isinstance(answered, str)
    assert answered
    assert isinstance(streamed, str)
    assert streamed
    lines = [
        line for line in responding.log_lines() if '"api":"responses"' in line.replace(" ", "")
    ]
    assert any('"model":"gpt-5.6-luna"' in line.replace(" ", "") for line in lines)


def test_langchain_with_the_responses_api(responding: Served) -> None:
    """langchain-openai's ChatOpenAI with use_responses_api answers and streams."""
    llm = ChatOpenAI(
        model="local",
        base_url=responding.base_url + "/v1",
        api_key=MASTER_KEY,  # type: ignore[arg-type]
        use_responses_api=True,
        max_retries=0,
        max_tokens=16,  # type: ignore[call-arg]
        temperature=0,
    )
    message = llm.invoke("What is the capital of France?")
    assert message.text
    assert str(message.response_metadata["id"]).startswith("resp_")
    chunks = list(llm.stream("Say hi."))
    assert "".join(chunk.text for chunk in chunks)


def test_pydantic_ai_responses_model(responding: Served) -> None:
    """pydantic-ai's OpenAIResponsesModel runs an agent to a text answer."""

    async def run() -> object:
        async with openai.AsyncOpenAI(
            base_url=responding.base_url + "/v1", api_key=MASTER_KEY, max_retries=0
        ) as client:
            model = OpenAIResponsesModel("local", provider=PydanticProvider(openai_client=client))
            agent = PydanticAgent(model, instructions="Answer briefly.")
            settings = OpenAIResponsesModelSettings(max_tokens=48)  # a 135M model can ramble
            result = await agent.run("What is the capital of France?", model_settings=settings)
            return result.output

    output = asyncio.run(run())
    assert isinstance(output, str)
    assert output
