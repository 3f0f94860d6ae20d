"""Client keys: several apps share one gateway, each key its own tenant, optionally limited.

    general_settings:
      master_key: os.environ/OVERSPILL_MASTER_KEY      # admin, and may call every model
      client_keys:
        - name: support-bot                            # the tenant (LiteLLM's `key_alias`)
          key: os.environ/SUPPORT_BOT_KEY
          models: [local, "openai/*"]                  # optional: the names it may request
        - name: batch
          key: os.environ/BATCH_KEY

A key's `name` is its tenant: conversation state and log lines are under it, never the key.
`models` lists the model names a key may request, as it requests them: a configured
`model_name`, a `router_settings.model_group_alias` name (an alias is also allowed when its
target is), or a pattern with `*` (`openai/*`), as in LiteLLM's key `models`.

Checked at startup, each problem naming its YAML path: names unique and well-formed, keys unique
and never the master key, every name in `models` served by the config. A key whose
`os.environ/` variable is unset is disabled with a warning; the gateway stays closed (a config
that lists client keys never accepts an unknown key, even when all of them are disabled).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr

from kernel.wildcards import Pattern, is_wildcard

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
RESERVED_NAMES = frozenset({"anonymous", "internal"})
"""Tenants overspill uses itself: no key (an open gateway), and its own calls."""
_DERIVED_TENANT = re.compile(r"[0-9a-f]{16}")
"""The form of tenants derived from a key's hash (the master key's, an open gateway's)."""


class ClientKey(BaseModel):
    """One `general_settings.client_keys` entry."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    name: str = Field(validation_alias=AliasChoices("name", "key_alias"))
    """The tenant this key is (LiteLLM's `key_alias` is accepted for it)."""
    key: SecretStr | None = None
    """The key, as `os.environ/VAR`; when the variable is unset the key is disabled (its
    requests get 401) and a startup warning says so."""
    models: tuple[str, ...] | None = None
    """The model names (or `*` patterns, or alias names) the key may request; unset: every
    model."""
    shadow: bool = False
    """Shadow mode for this key's requests: the layers report what they would do, and the
    requests go upstream unchanged (docs/operations/budgets.md)."""
    own_token_budget: int | None = Field(default=None, ge=0)
    """Own tokens overspill may spend for this key's tenant per `usage.period`; None: the
    `general_settings.usage.tenant_budget`."""


def key_problems(keys: Sequence[ClientKey], master_key: SecretStr | None) -> list[str]:
    """Problems with the keys themselves (names, duplicates, the master key), by YAML path."""
    problems = []
    names: dict[str, int] = {}
    secrets: dict[str, int] = {}
    master = master_key.get_secret_value() if master_key else None
    for index, item in enumerate(keys):
        where = f"general_settings.client_keys[{index}]"
        if not NAME_PATTERN.fullmatch(item.name):
            problems.append(
                f"{where}.name: {item.name!r} must be 1-64 characters of A-Z a-z 0-9 . _ - "
                "starting with a letter or digit"
            )
        elif item.name in RESERVED_NAMES or _DERIVED_TENANT.fullmatch(item.name):
            problems.append(
                f"{where}.name: {item.name!r} is reserved (anonymous, internal and names of 16 "
                "hexadecimal digits are tenants overspill derives itself); choose another name"
            )
        if item.name in names:
            problems.append(
                f"{where}.name: {item.name!r} is also the name of client_keys[{names[item.name]}]"
                "; each key needs its own name (it is the key's tenant)"
            )
        names.setdefault(item.name, index)
        if item.key is None:
            continue
        secret = item.key.get_secret_value()
        if not secret.strip():
            problems.append(f"{where}.key: is empty; set a key or remove the entry")
        elif master is not None and secret == master:
            problems.append(
                f"{where}.key: is the master key; a client key must be a key of its own"
            )
        elif secret in secrets:
            problems.append(
                f"{where}.key: is also the key of client_keys[{secrets[secret]}]; "
                "each client key must be unique"
            )
        secrets.setdefault(secret, index)
        if item.models == ():
            problems.append(
                f"{where}.models: is empty, so the key could use no model; list its models "
                "or leave models out (every model)"
            )
    return problems


def model_problems(
    keys: Sequence[ClientKey], served: Iterable[str], aliases: Iterable[str]
) -> list[str]:
    """Names in a key's `models` that the config does not serve, by YAML path.

    A plain name must be a `model_name`, an alias, or a name a wildcard `model_name` serves; a
    pattern must match some configured name or be a configured pattern itself.
    """
    names = set(served) | set(aliases)
    patterns = [Pattern.of(name) for name in names if is_wildcard(name)]
    problems = []
    for index, item in enumerate(keys):
        for position, model in enumerate(item.models or ()):
            if model in names:
                continue
            if is_wildcard(model):
                own = Pattern.of(model)
                if any(own.match(name) is not None for name in names):
                    continue
            elif any(pattern.match(model) is not None for pattern in patterns):
                continue
            problems.append(
                f"general_settings.client_keys[{index}].models[{position}]: {model!r} is not a "
                f"model this config serves (configured: {', '.join(sorted(names)) or 'none'})"
            )
    return problems
