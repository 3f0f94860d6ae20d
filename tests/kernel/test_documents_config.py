"""The `documents:` block: defaults, first-match lookup, and fail-fast validation with YAML paths."""

from __future__ import annotations

import pytest

from kernel.config_loading import ConfigError, parse_config
from kernel.documents_config import CompactionRule, DocumentsSettings, normalize_language

BASE = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
"""


def parse(documents: str) -> DocumentsSettings:
    return parse_config(BASE + "documents:\n" + documents, "config.yaml", {}).settings.documents


def problems(documents: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(documents)
    return caught.value.problems


def test_defaults() -> None:
    """Without a block: derived budget, the usual divider, no rules, 85%, 3 passes, auto order."""
    settings = parse_config(BASE, "config.yaml", {}).settings.documents
    assert settings == DocumentsSettings()
    assert settings.max_context_tokens is None
    assert settings.divider == "<<<New content"
    assert (settings.condense_share, settings.max_passes, settings.order) == (0.85, 3, "auto")
    assert settings.avg_chunk_tokens == 200


def test_a_full_block_parses_and_the_first_matching_rule_wins() -> None:
    """Rules keep their order; aliases become canonical names; `*` matches any language."""
    settings = parse(
        "  max_context_tokens: 6000\n"
        "  rules:\n"
        "    - {language: sql, policy: demand}\n"
        "    - {language: [sql, dotnet], policy: threshold, threshold: 0.4}\n"
        "    - {language: '*', policy: always}\n"
    )
    assert settings.rules[1].language == ("sql", "csharp")
    assert settings.rule_for("sql") == (0, settings.rules[0])
    assert settings.rule_for("csharp") == (1, settings.rules[1])
    assert settings.rule_for("text") == (2, settings.rules[2])
    assert DocumentsSettings().rule_for("sql") is None


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("  rules:\n    - {language: sql, policy: always}\n    - {language: sql, policy: threshold}\n",
         "documents.rules[1].threshold: required when policy is 'threshold'"),
        ("  rules: [{language: sql, policy: threshold, threshold: 0}]\n",
         "documents.rules[0].threshold: must be in (0, 1], got 0.0"),
        ("  rules: [{language: sql, policy: threshold, threshold: 1.5}]\n",
         "documents.rules[0].threshold: must be in (0, 1], got 1.5"),
        ("  rules: [{language: sql, policy: always, threshold: 0.5}]\n",
         "documents.rules[0].threshold: only allowed with policy 'threshold'"),
        ("  rules: [{language: cobol, policy: always}]\n",
         "documents.rules[0].language: unknown language 'cobol' (known: sql, csharp"),
        ("  rules: [{language: [], policy: always}]\n",
         "documents.rules[0].language: expected a language name"),
        ("  rules: [{language: [sql, 3], policy: always}]\n",
         "documents.rules[0].language: expected a language name, got 3"),
        ("  rules: [{language: sql, policy: sometimes}]\n",
         "documents.rules[0].policy: input should be 'always', 'threshold' or 'demand'"),
        ("  rules: [{language: sql}]\n", "documents.rules[0].policy: field required"),
        ("  rules: [{policy: always}]\n", "documents.rules[0].language: field required"),
        ("  rules: [{language: sql, policy: demand, inbox_key: x}]\n",
         "documents.rules[0].inbox_key: unknown setting"),
        ("  rules: {language: sql}\n", "documents.rules: input should be a list (lines starting with '- ')"),
        ("  max_context_tokens: 0\n", "documents.max_context_tokens: input should be greater than 0"),
        ("  condense_share: 1.2\n", "documents.condense_share: input should be less than or equal to 1"),
        ("  max_passes: 0\n", "documents.max_passes: input should be greater than or equal to 1"),
        ("  order: random\n", "documents.order: input should be 'auto'"),
        ("  divider: ''\n", "documents.divider: string should have at least 1 character"),
        ("  divider: \"a\\nb\"\n", "documents.divider: the divider must be one"),
        ("  avg_chunk_tokens: -1\n", "documents.avg_chunk_tokens: input should be greater than 0"),
        ("  min_top_k: 5\n  max_top_k: 3\n", "documents: min_top_k (5) must not exceed"),
        ("  compact_code: {}\n", "documents.compact_code: unknown setting"),
    ],
)  # fmt: skip
def test_every_bad_setting_fails_fast_naming_its_yaml_path(block: str, expected: str) -> None:
    """A bad rule or setting is a ConfigError whose line starts with its YAML path."""
    found = problems(block)
    assert any(line.startswith(expected) for line in found), found


def test_all_problems_are_reported_at_once() -> None:
    """Two bad rules: two lines."""
    found = problems(
        "  rules:\n    - {language: cobol, policy: always}\n    - {language: sql, policy: threshold}\n"
    )
    assert len(found) == 2


def test_language_names() -> None:
    """Canonical names and aliases, case-insensitive; unknown names are None."""
    assert normalize_language("SQL") == "sql"
    assert normalize_language("dotnet") == "csharp"
    assert normalize_language("C#") == "csharp"
    assert normalize_language("ts") == "typescript"
    assert normalize_language("cobol") is None
    assert CompactionRule.model_validate({"language": "*", "policy": "always"}).matches("text")
