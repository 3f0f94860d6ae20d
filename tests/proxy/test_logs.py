"""Log lines: overspill's fields only, per-logger levels over the global one, litellm adopted."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
import pytest

from kernel.config_loading import ConfigError
from proxy import logs
from tests.conftest import settings_from


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Put the root logger and every tuned level back as the test found them."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    logs.configure("info")
    root.handlers[:], root.level = handlers, level


def line(name: str, **extra: object) -> dict[str, object]:
    record = logging.LogRecord(name, logging.INFO, __file__, 1, "hello %s", ("you",), None)
    record.__dict__.update(extra)
    return orjson.loads(logs.JsonFormatter().format(record))  # type: ignore[no-any-return]


def test_own_loggers_log_their_extra_fields() -> None:
    """overspill's loggers carry their `extra=` fields into the line."""
    found = line("overspill.request", status=200, _private=1)
    assert isinstance(found.pop("ts"), str)  # two records' stamps may differ by a millisecond
    assert found == {
        "level": "info",
        "logger": "overspill.request",
        "msg": "hello you",
        "status": 200,
    }


def test_foreign_attributes_never_reach_the_line() -> None:
    """Attributes other libraries stamp on records (litellm's redaction marker) are dropped."""
    found = line("uvicorn.error", litellm_redacted=object(), color_message="x")
    assert set(found) == {"ts", "level", "logger", "msg"}


def test_per_logger_levels_override_the_global_one() -> None:
    """`log_levels` sets named loggers; `litellm` names LiteLLM's loggers; a reload resets."""
    logs.configure("info", {"overspill.request": "warning", "litellm": "debug"})
    assert logging.getLogger("overspill.request").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("overspill").getEffectiveLevel() == logging.INFO
    assert {logging.getLogger(n).level for n in logs.LITELLM_LOGGERS} == {logging.DEBUG}
    assert logging.getLogger("httpx").level == logging.WARNING
    logs.configure("info")
    assert logging.getLogger("overspill.request").level == logging.NOTSET
    assert logging.getLogger("LiteLLM").level == logging.WARNING


def test_litellm_loggers_lose_their_own_plain_text_handler() -> None:
    """A handler litellm's import added is removed: its records go once, as JSON, via root."""
    logging.getLogger("LiteLLM").addHandler(logging.StreamHandler())
    logs.configure("info")
    assert logging.getLogger("LiteLLM").handlers == []
    assert logging.getLogger("LiteLLM").propagate


def test_log_levels_are_validated_with_their_yaml_path() -> None:
    """A level that is not one is refused naming general_settings.log_levels.<logger>."""
    good = settings_from("model_list: [{model_name: m, litellm_params: {model: openai/m}}]\n"
                         "general_settings: {log_levels: {litellm: INFO}}")  # fmt: skip
    assert good.general_settings.log_levels == {"litellm": "info"}
    with pytest.raises(ConfigError) as caught:
        settings_from("model_list: [{model_name: m, litellm_params: {model: openai/m}}]\n"
                      "general_settings: {log_levels: {litellm: loud}}")  # fmt: skip
    (problem,) = caught.value.problems
    assert problem.startswith("general_settings.log_levels.litellm: input should be 'debug'")
