"""A deployment's parallelism: configured, asked of llama-server, or a default by kind."""

from __future__ import annotations

import asyncio

import pytest

from kernel.config import ModelEntry
from providers.parallelism import HOSTED_SLOTS, SELF_HOSTED_SLOTS, Lane, Lanes, total_slots
from tests.conftest import settings_from
from tests.windowed_upstream import WindowedUpstream


def entry(params: str) -> ModelEntry:
    settings = settings_from(f"model_list:\n  - model_name: m\n    litellm_params: {params}\n")
    return settings.model_list[0]


@pytest.mark.parametrize(
    ("params", "slots", "source"),
    [
        ("{model: openai/x, api_base: 'http://10.0.0.5:8080/v1', max_parallel_requests: 6}",
         6, "config"),
        ("{model: ollama_chat/llama3.2}", SELF_HOSTED_SLOTS, "ollama-default"),
        ("{model: openai/gpt-4o}", HOSTED_SLOTS, "hosted-default"),
        ("{model: openai/x, api_base: 'http://127.0.0.1:8080/v1'}", SELF_HOSTED_SLOTS,
         "self-hosted-default"),
    ],
)  # fmt: skip
def test_what_config_and_kind_say(params: str, slots: int, source: str) -> None:
    """LiteLLM's max_parallel_requests wins; else Ollama and other self-hosted servers take one
    call at a time until they say otherwise, a hosted API a few."""
    assert Lanes().known_slots(entry(params)) == (slots, source)


def test_max_parallel_requests_keeps_the_fast_path() -> None:
    """The setting is overspill's (LiteLLM's router's): it neither leaves the byte passthrough
    nor is sent to litellm as a parameter."""
    found = entry("{model: openai/x, api_base: 'http://h/v1', max_parallel_requests: 2}")
    assert found.uses_passthrough()
    assert "max_parallel_requests" not in found.litellm_params.extras()


@pytest.mark.parametrize(
    ("body", "slots"),
    [(b'{"total_slots": 4, "n_ctx": 2048}', 4), (b'{"total_slots": 0}', None),
     (b'{"total_slots": true}', None), (b'{"total_slots": "2"}', None), (b"[]", None),
     (b"<html>", None)],
)  # fmt: skip
def test_total_slots_is_read_only_when_it_is_a_positive_count(
    body: bytes, slots: int | None
) -> None:
    """Only a positive integer `total_slots` counts."""
    assert total_slots(body) == slots


class Deployment:
    """Stands for a provider object the shell built (the lanes' key)."""


async def used_lane(lanes: Lanes, upstream: WindowedUpstream) -> Lane:
    """A new deployment's lane on `upstream`, after its first own call and the probe."""
    provider = Deployment()
    lanes.register(provider, entry(f"{{model: openai/x, api_base: '{upstream.base_url}'}}"))
    lane = lanes.of(provider)
    assert lane is not None
    async with lane.own_call(lanes):
        assert lane.slots == 1  # one at a time while the server is asked
    await asyncio.gather(*lanes._probes)
    return lane


async def test_a_llama_server_is_asked_for_its_slots_once_in_the_background() -> None:
    """The first own call to a self-hosted server queues at one slot while `/props` is asked;
    the lane then takes the server's count, and the server is asked once."""
    async with WindowedUpstream(total_slots=3) as upstream:
        lanes = Lanes()
        lane = await used_lane(lanes, upstream)
        assert (lane.slots, lane.source) == (3, "props")
        other = await used_lane(lanes, upstream)
        assert other.slots == 3
        assert upstream.props_asked == 1
        await lanes.aclose()


async def test_a_server_that_does_not_say_keeps_one_slot() -> None:
    """No `/props` (not llama-server): one own call at a time."""
    async with WindowedUpstream() as upstream:
        lanes = Lanes()
        lane = await used_lane(lanes, upstream)
        assert (lane.slots, lane.source) == (1, "self-hosted-default")
        await lanes.aclose()
