"""What overspill's own translations of a chat request share (Anthropic's, Gemini's).

A translation writes the requests chat clients send. What it leaves to litellm is said
before translating, by its wire's `leaves` check (the road's choice, `providers/roads.py`),
never found half-way through. An OpenAI parameter the provider has no equivalent for is
refused with a 400 naming it, or dropped with `litellm_settings.drop_params`, as litellm
does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kernel.errors import InvalidChatRequest


class UnsupportedParameter(InvalidChatRequest):
    """An OpenAI parameter the provider has no equivalent for."""

    code = "unsupported_parameter"


def litellm_parameter(body: Mapping[str, Any], litellms: Collection[str]) -> str | None:
    """The first parameter (by name) that only litellm's translation writes, if any. A null
    is OpenAI's default: as if the parameter were not there, as litellm reads it."""
    left = [key for key, value in body.items() if value is not None and key in litellms]
    return min(left) if left else None


def refuses(body: Mapping[str, Any], unsupported: Collection[str], drop_params: bool) -> bool:
    """Whether the translation refuses the request for a parameter the provider lacks (a
    400 that `refuse_unsupported` writes): then nothing else decides its road."""
    return not drop_params and any(
        value is not None and key in unsupported for key, value in body.items()
    )


def refuse_unsupported(
    body: Mapping[str, Any], provider: str, *, unsupported: Collection[str], drop_params: bool
) -> None:
    """Raise `UnsupportedParameter` naming every parameter the provider lacks (unless
    `drop_params`)."""
    refused = sorted(key for key, value in body.items() if value is not None and key in unsupported)
    if refused and not drop_params:
        raise unsupported_parameters(provider, refused)


def unsupported_parameters(provider: str, refused: Sequence[str]) -> UnsupportedParameter:
    """The 400 for the parameters `refused` (sorted), which `provider` lacks."""
    return UnsupportedParameter(
        f"{provider} does not support the parameter(s) {', '.join(refused)}: remove them, or "
        "set litellm_settings.drop_params: true in overspill's config to drop them",
        param=refused[0],
    )


def unchecked(where: str) -> AssertionError:
    """What a translation meets that its `leaves` check sends to litellm before translating:
    reaching it is overspill's bug (the check and the translation disagree), not the
    client's."""
    return AssertionError(f"{where}: `leaves` should have sent this request to litellm")


def positive_count(value: object, param: str) -> int:
    """A token count: a positive number, rounded."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
        raise InvalidChatRequest(f"{param} must be a positive integer", param=param)
    return max(1, round(value))


def stop_list(value: object, param: str = "stop") -> list[str]:
    """`stop` as a list of strings."""
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise InvalidChatRequest("stop must be a string or a list of strings", param=param)
    return stops


def image_url(value: object, where: str) -> str:
    """An image_url part's URL (`{"url": ...}` or the bare string)."""
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str):
        raise InvalidChatRequest(f"{where}.image_url.url must be a string")
    return url


def data_url(url: str, where: str) -> tuple[str, str]:
    """(media type, base64 data) of a `data:<media type>;base64,<data>` URL."""
    head, comma, data = url.partition(",")
    media, _, encoding = head[5:].partition(";")
    if not url.startswith("data:") or not comma or encoding != "base64" or not media:
        raise InvalidChatRequest(
            f"{where}.image_url.url: a data URL must be data:<media type>;base64,<data>"
        )
    return media, data
