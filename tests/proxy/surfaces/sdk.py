"""The OpenAI Python SDK's own types, as the judges of what the Responses translation writes."""

from __future__ import annotations

from typing import Any

import orjson
from openai.types.responses import Response, ResponseInputItem, ResponseStreamEvent
from pydantic import TypeAdapter

EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
INPUT_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseInputItem)


def valid_response(response: dict[str, Any]) -> Response:
    """The response object as the SDK reads it (raises when the SDK's model refuses it)."""
    return Response.model_validate(orjson.loads(orjson.dumps(response)))


def events_of(data: bytes) -> list[dict[str, Any]]:
    """Every event of a Responses SSE stream, each checked: `event:` names the data's type, the
    SDK's ResponseStreamEvent reads it, and sequence numbers count 0, 1, 2, ..."""
    events = []
    for block in data.split(b"\n\n")[:-1]:
        name, payload = block.split(b"\n")
        event = orjson.loads(payload.removeprefix(b"data: "))
        assert name == b"event: " + event["type"].encode()
        EVENT.validate_python(event)
        events.append(event)
    assert data.endswith(b"\n\n")
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    return events


def without_ids(response: dict[str, Any]) -> dict[str, Any]:
    """The response with its output items' random ids left out (to compare two answers)."""
    output = [{k: v for k, v in item.items() if k != "id"} for item in response["output"]]
    return {**response, "output": output}
