"""Settings of the `documents` layer: the global budget, the divider, and compaction rules.

Rules are tried in order and the first whose `language` names a document's language wins.
Validation is fail-fast at startup: a bad rule names its YAML path
(`documents.rules[1].threshold: ...`) through the config loader's error reporting
(`kernel/config_loading.py`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

LANGUAGES = ("sql", "csharp", "python", "javascript", "typescript", "text")
"""The languages overspill detects and compacts."""

ALIASES = {
    "dotnet": "csharp",
    "c#": "csharp",
    "cs": "csharp",
    ".net": "csharp",
    "py": "python",
    "js": "javascript",
    "jsx": "javascript",
    "ts": "typescript",
    "tsx": "typescript",
    "plain": "text",
    "plaintext": "text",
    "txt": "text",
}
"""Other names accepted for the languages (`dotnet`, `c#`, `py`, ...)."""

ANY_LANGUAGE = "*"


def normalize_language(name: str) -> str | None:
    """The canonical language for a name or alias (case-insensitive), None when unknown."""
    key = name.strip().lower()
    if key in LANGUAGES:
        return key
    return ALIASES.get(key)


def known_languages() -> str:
    """The accepted language names, for error messages."""
    return ", ".join([*LANGUAGES, *sorted(ALIASES)])


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CompactionRule(_Frozen):
    """When to compact documents of some languages: always, past a threshold, or on demand."""

    language: tuple[str, ...]
    """A language, a list of them, or `*` for any: `sql`, `csharp`, `python`, `javascript`,
    `typescript`, `text`, or an alias (`dotnet`, `c#`, `py`, `js`, `ts`, ...)."""
    policy: Literal["always", "threshold", "demand"]
    """`always` compact; `threshold`: when the documents pass `threshold` of the budget;
    `demand`: when the request asks (`overspill: {compact: [sql]}`)."""
    threshold: float | None = Field(default=None, validate_default=True)
    """With `policy: threshold` only (required there): a share of the budget in (0, 1]."""

    @field_validator("language", mode="before")
    @classmethod
    def _languages(cls, value: object) -> tuple[str, ...]:
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list | tuple) or not names:
            raise ValueError("expected a language name, a list of them, or '*'")
        out: list[str] = []
        for name in names:
            if not isinstance(name, str):
                raise ValueError(f"expected a language name, got {name!r}")
            canonical = ANY_LANGUAGE if name.strip() == ANY_LANGUAGE else normalize_language(name)
            if canonical is None:
                raise ValueError(f"unknown language {name!r} (known: {known_languages()}, *)")
            out.append(canonical)
        return tuple(dict.fromkeys(out))

    @field_validator("threshold")
    @classmethod
    def _threshold_iff_threshold_policy(
        cls, value: float | None, info: ValidationInfo
    ) -> float | None:
        policy = info.data.get("policy")
        if policy == "threshold":
            if value is None:
                raise ValueError(
                    "required when policy is 'threshold' (a share of the budget in (0, 1])"
                )
            if not 0 < value <= 1:
                raise ValueError(f"must be in (0, 1], got {value}")
        elif value is not None and policy is not None:
            raise ValueError(f"only allowed with policy 'threshold', not {policy!r}")
        return value

    def matches(self, language: str) -> bool:
        """Whether this rule applies to a (canonical) language."""
        return ANY_LANGUAGE in self.language or language in self.language


class DocumentsSettings(_Frozen):
    """The `documents:` block of config.yaml."""

    max_context_tokens: int | None = Field(default=None, gt=0)
    """Global budget for conversation + documents; default: the model's window minus output
    reserve, system prompt and safety margin. A larger value is capped at that."""
    divider: str = Field(default="<<<New content", min_length=1)
    """One line placed once before each new batch of documents."""
    rules: tuple[CompactionRule, ...] = ()
    """Compaction rules; the first whose `language` matches a document's wins (none: a
    document is never compacted)."""
    condense_share: float = Field(default=0.85, gt=0, le=1)
    """Documents above this share of the budget are condensed one by one by a model."""
    max_passes: int = Field(default=3, ge=1, le=10)
    """Loop guard: at most this many passes compacting the existing context."""
    order: Literal["auto", "most_relevant_first", "most_relevant_last"] = "auto"
    """`auto`: most relevant last for Ollama models (nearest the question), first otherwise."""
    avg_chunk_tokens: int = Field(default=200, gt=0)
    """The average chunk size that turns the room left into a number of documents (top_k)."""
    min_top_k: int = Field(default=2, ge=1)
    """At least this many documents are kept when the room left is tight."""
    max_top_k: int = Field(default=10, ge=1)
    """At most this many documents are kept when the batch does not fit."""

    @field_validator("divider")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value or not value.strip():
            raise ValueError("the divider must be one non-blank line")
        return value

    @model_validator(mode="after")
    def _top_k_range(self) -> DocumentsSettings:
        if self.min_top_k > self.max_top_k:
            raise ValueError(
                f"min_top_k ({self.min_top_k}) must not exceed max_top_k ({self.max_top_k})"
            )
        return self

    def rule_for(self, language: str) -> tuple[int, CompactionRule] | None:
        """The first rule matching a language, with its index (None: never compacted)."""
        for index, rule in enumerate(self.rules):
            if rule.matches(language):
                return index, rule
        return None
