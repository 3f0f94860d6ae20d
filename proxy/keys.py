"""Who is calling: a presented key → its tenant, whether it is admin, which models it may use.

One `Keyring` per loaded config (a reload builds a new one with the new System, so a new key
works and a removed one is refused from the first request after the swap).

Lookup is one sha256 of the presented key and one dict lookup, whatever the number of keys:
the dict maps each configured key's digest to its `Caller`. Comparing digests instead of keys
is what keeps the lookup safe against timing: how long the dict takes depends on the digest of
what the client sent, and learning how a digest compares to a stored one tells nothing about
the key behind it (finding a key for a digest is sha256's preimage problem). Keys are never
kept in a form that is logged: log lines and metrics name the tenant.

A gateway is closed as soon as the config has a master key or lists client keys (even when all
of them are disabled by unset variables); only an open gateway (neither) takes any key, each
its own tenant derived from the key's hash, as before client keys existed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kernel.client_keys import ClientKey
from kernel.config import GeneralSettings, Settings
from kernel.errors import AdminDisabled, AdminOnly, AuthError, ModelNotAllowed
from kernel.wildcards import Pattern, is_wildcard
from proxy.http import bearer_token, tenant_of

MISSING_KEY = (
    "missing API key: send it as 'Authorization: Bearer <key>' (the OpenAI SDK's api_key) or "
    "'x-api-key: <key>' (the Anthropic SDK's)"
)


@dataclass(frozen=True, slots=True)
class ModelAccess:
    """The model names a client key may request."""

    listed: tuple[str, ...]
    exact: frozenset[str]
    patterns: tuple[Pattern, ...]

    @classmethod
    def of(cls, models: Sequence[str], aliases: Mapping[str, str]) -> ModelAccess:
        """The access `models` gives; an alias is allowed when its target is."""
        patterns = tuple(Pattern.of(name) for name in models if is_wildcard(name))
        exact = {name for name in models if not is_wildcard(name)}
        probe = cls(tuple(models), frozenset(exact), patterns)
        exact |= {alias for alias, target in aliases.items() if probe.allows(target)}
        return cls(tuple(models), frozenset(exact), patterns)

    def allows(self, model: str) -> bool:
        """Whether the key may request `model`."""
        return model in self.exact or any(p.match(model) is not None for p in self.patterns)


@dataclass(frozen=True, slots=True)
class Caller:
    """The tenant a request runs as, and what it may do."""

    tenant: str
    admin: bool = False
    access: ModelAccess | None = None
    """None: every model."""
    shadow: bool = False
    """The key's requests run in shadow mode (`client_keys[].shadow`)."""

    def allows(self, model: str) -> bool:
        """Whether this caller may request `model`."""
        return self.access is None or self.access.allows(model)

    def check_model(self, model: str) -> None:
        """Raise ModelNotAllowed when the caller's key is limited to other models."""
        if self.access is not None and not self.access.allows(model):
            raise ModelNotAllowed(
                f"this API key (tenant {self.tenant!r}) may not use model {model!r}; its models "
                f"are {', '.join(self.access.listed)} (general_settings.client_keys[].models)",
                param="model",
            )


class Keyring:
    """The keys of one config: the master key (admin) and the client keys (tenants)."""

    def __init__(
        self,
        master_key: str | None,
        client_keys: Sequence[ClientKey] = (),
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        self.master_key = master_key
        self.closed = master_key is not None or bool(client_keys)
        self.by_digest: dict[bytes, Caller] = {}
        for item in client_keys:
            if item.key is None:  # disabled: its variable is unset
                continue
            access = ModelAccess.of(item.models, aliases or {}) if item.models else None
            caller = Caller(item.name, False, access, item.shadow)
            self.by_digest[_digest(item.key.get_secret_value())] = caller
        if master_key is not None:
            self.by_digest[_digest(master_key)] = Caller(tenant_of(master_key), admin=True)

    @classmethod
    def of(cls, settings: Settings) -> Keyring:
        """The keyring of a validated config."""
        general: GeneralSettings = settings.general_settings
        master = general.master_key.get_secret_value() if general.master_key else None
        aliases = {a: item.model for a, item in settings.router_settings.model_group_alias.items()}
        return cls(master, general.client_keys, aliases)

    def caller(self, authorization: str | None, api_key: str | None = None) -> Caller:
        """The caller an `Authorization: Bearer` header names, else an `x-api-key` header
        (Anthropic's clients send their key so); raises AuthError when they name none."""
        token = bearer_token(authorization) or (api_key.strip() or None if api_key else None)
        if not self.closed:
            return Caller(tenant_of(token))
        if token is None:
            raise AuthError(MISSING_KEY)
        found = self.by_digest.get(_digest(token))
        if found is None:
            raise AuthError("invalid API key")
        return found

    def caller_of(self, headers: Mapping[str, str]) -> Caller:
        """The caller a request's headers name (`caller` of its `Authorization` and
        `x-api-key`): what every API route, the model listing too, reads its key from."""
        return self.caller(headers.get("authorization"), headers.get("x-api-key"))

    def require_admin(self, authorization: str | None) -> None:
        """Admin endpoints: the master key only (403 for a client key, 401 for no key)."""
        if self.master_key is None:
            raise AdminDisabled(
                "admin endpoints are disabled: set general_settings.master_key to use them"
            )
        token = bearer_token(authorization)
        found = self.by_digest.get(_digest(token)) if token is not None else None
        if found is None:
            raise AuthError("admin endpoints need the master key as 'Authorization: Bearer <key>'")
        if not found.admin:
            raise AdminOnly(
                f"admin endpoints need the master key; this is the client key of tenant "
                f"{found.tenant!r}"
            )


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()
