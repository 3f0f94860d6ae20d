"""Tests for kernel.redaction: which config values are secrets, and how they are found in text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kernel.redaction import MASK, Redactor, is_secret_name, secrets_of
from tests.conftest import settings_from
from tests.reliability import examples

KEY = "sk-proj-Abc123def456ghi789jkl012mno345"
secrets_mark = pytest.mark.reliability("secrets")

CONFIG = """
model_list:
  - model_name: a
    litellm_params:
      model: openai/gpt
      api_base: "https://alice:pa55-w0rd@gw.example/v1?api-version=2024-06&key=qk-7788990011"
      api_key: os.environ/KEY
      max_tokens: 4096
      extra_headers: {Authorization: "Bearer hdr-token-123456", x-trace: visible-header}
  - model_name: b
    litellm_params:
      model: bedrock/claude
      aws_access_key_id: AKIAEXAMPLE123
      aws_secret_access_key: wJalrXUtnFEMIK7MDENGbPxRfiCY
      vertex_credentials: {private_key: "-----BEGIN KEY-----abcdefgh", client_email: x@y.z}
  - model_name: c
    litellm_params: {model: openai/gpt, api_base: "https://TOKEN0123456789@host.example/v1"}
general_settings:
  master_key: sk-master-0001
  store: {backend: redis, url: "redis://:redis-pass-99@cache.example:6379/0", key_prefix: "ovs:"}
"""


def _config_secrets() -> set[str]:
    settings = settings_from(CONFIG, {"KEY": KEY})
    return secrets_of(settings, {"ANTHROPIC_API_KEY": "ant-key-0123456789"}, {"HOME": "/root"})


@secrets_mark
def test_every_kind_of_configured_secret_is_collected() -> None:
    """Keys, master key, URL passwords and query keys, AWS/Vertex values, auth headers, env."""
    found = _config_secrets()
    expected = {
        KEY, "sk-master-0001", "pa55-w0rd", "qk-7788990011", "hdr-token-123456",
        "AKIAEXAMPLE123", "wJalrXUtnFEMIK7MDENGbPxRfiCY", "-----BEGIN KEY-----abcdefgh",
        "redis-pass-99", "TOKEN0123456789", "ant-key-0123456789",
    }  # fmt: skip
    assert expected <= found


@secrets_mark
def test_plain_settings_are_not_secrets() -> None:
    """Model names, hosts, token limits, key prefixes and ordinary headers stay visible."""
    found = _config_secrets()
    for shown in ("openai/gpt", "gw.example", "4096", "ovs:", "visible-header", "2024-06"):
        assert shown not in found
    assert not any("cache.example" in secret for secret in found)


@secrets_mark
def test_a_tenants_name_and_models_are_not_secrets_its_key_is() -> None:
    """Under `client_keys` only each key is a secret: the tenant's name (what its log lines
    are read by) and the model names it may use stay visible."""
    settings = settings_from(
        "model_list:\n  - model_name: local-model\n    litellm_params: {model: openai/gpt}\n"
        "general_settings:\n  client_keys:\n"
        "    - {name: support-bot, key: sk-support-0123456789, models: [local-model]}\n"
    )
    found = secrets_of(settings, {}, {})
    assert found == {"sk-support-0123456789"}
    shown = Redactor(found).redact("tenant support-bot, model local-model, sk-support-0123456789")
    assert shown == f"tenant support-bot, model local-model, {MASK}"


@secrets_mark
def test_process_environment_credentials_are_secrets() -> None:
    """Variables named like credentials (litellm reads them) are secrets; short ones are not."""
    env = {"OPENAI_API_KEY": "sk-env-0123456789", "AWS_SESSION_TOKEN": "tok", "LANG": "C.UTF-8"}
    found = secrets_of(settings_from(), {}, env)
    assert "sk-env-0123456789" in found
    assert "tok" not in found
    assert "C.UTF-8" not in found


@secrets_mark
@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True), ("aws_secret_access_key", True), ("vertex_credentials", True),
        ("Authorization", True), ("x-api-key", True), ("sig", True), ("master_key", True),
        ("max_tokens", False), ("key_prefix", False), ("model", False), ("api_base", False),
    ],
)  # fmt: skip
def test_secret_names(name: str, secret: bool) -> None:
    """A value is secret by its name: keys, secrets, tokens, credentials, auth headers."""
    assert is_secret_name(name) is secret


@secrets_mark
@pytest.mark.parametrize(
    "echo",
    [
        f"Incorrect API key provided: {KEY}.",
        f"Incorrect API key provided: {KEY[:8]}{'*' * 40}{KEY[-4:]}. You can find your key",
        f"Incorrect API key provided: {KEY[:6]}...{KEY[-4:]}.",
        f"Incorrect API key provided: {KEY[:6]}\u2026{KEY[-4:]}.",
        f"Authentication Fails, Your api key: ****{KEY[-4:]} is invalid",
        f"key {KEY[:10]}***",
        '{"message": "bad key \\"' + KEY + '\\""}',
    ],
)
def test_a_secret_is_hidden_whole_escaped_encoded_or_masked(echo: str) -> None:
    """The secret, its JSON-escaped or percent-encoded form and the masked echoes disappear."""
    shown = Redactor([KEY]).redact(echo)
    assert MASK in shown
    assert KEY[-4:] not in shown
    assert KEY[:10] not in shown


@secrets_mark
def test_a_percent_encoded_secret_is_hidden() -> None:
    """A secret with URL-special characters is found in its percent-encoded form too."""
    shown = Redactor(["wJal/rXU+tnF=EMI"]).redact("GET /v1?sig=wJal%2FrXU%2BtnF%3DEMI")
    assert shown == "GET /v1?sig=***"


@secrets_mark
def test_url_passwords_are_hidden_by_place_whatever_their_length() -> None:
    """`scheme://user:pass@` loses its password even when the password is not configured."""
    shown = Redactor().redact("cannot reach http://bob:pw@10.0.0.1:8000/v1: refused")
    assert shown == "cannot reach http://bob:***@10.0.0.1:8000/v1: refused"


@secrets_mark
def test_the_longest_secret_wins_and_short_values_are_ignored() -> None:
    """A secret that contains another is hidden whole; values under 6 chars are no secrets."""
    redactor = Redactor(["abcdef", "abcdef-ghijkl", "EMPTY"])
    assert redactor.redact("x abcdef-ghijkl y abcdef EMPTY") == "x *** y *** EMPTY"
    assert len(redactor) == 2


@secrets_mark
def test_unrelated_masks_and_ellipses_are_left_alone() -> None:
    """Masked words whose ends are not a secret's ends, and ordinary ellipses, stay."""
    text = "waiting... sk-other****zz99 and ***** then abc...xyz"
    assert Redactor([KEY]).redact(text) == text


@secrets_mark
def test_union_keeps_both_configs_secrets() -> None:
    """A reload adds its secrets; the old ones stay hidden (a rotated-out key too)."""
    merged = Redactor(["old-key-123456"]).union(Redactor(["new-key-123456"]))
    assert merged.redact("old-key-123456 new-key-123456") == "*** ***"


@secrets_mark
@hypothesis_settings(max_examples=examples(50, 1000))
@given(
    secret=st.text(st.characters(codec="utf-8", exclude_characters="*"), min_size=6),
    before=st.text(),
    after=st.text(),
)
def test_any_secret_anywhere_is_hidden(secret: str, before: str, after: str) -> None:
    """Whatever a secret's characters and surroundings, it is gone after redaction."""
    assert secret not in Redactor([secret]).redact(before + secret + after)


@secrets_mark
def test_bytes_are_redacted_and_undecodable_bytes_kept() -> None:
    """Bytes bodies go through the same redactor; bytes that are not UTF-8 pass unchanged."""
    redactor = Redactor([KEY])
    assert redactor.redact_bytes(KEY.encode() + b"\xff") == b"***\xff"
    assert redactor.redact_bytes(b"plain \xff") == b"plain \xff"
