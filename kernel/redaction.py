"""Secrets kept out of everything a client or a log sees: one redactor built from the config.

    secrets_of(settings, environment)   every secret the config names (and the process's
                                        credential variables), each once
    Redactor(secrets)                   replaces them in text: whole, JSON-escaped or
                                        percent-encoded, and the partly masked forms
                                        providers echo (`sk-abc...wxyz`, `sk-proj-****wxyz`)
    redactor / install(found)           the process's redactor (a union: a reloaded config adds
                                        its secrets, a rotated-out key stays hidden)

What counts as a secret: every `SecretStr` in the settings (`api_key`, `master_key`,
`store.url`, keys of tenants), every string under a key whose name says it is one (a `key`,
`secret`, `token`, `password`, `credentials`, `authorization`, `sig`... part: `api_key`,
`aws_secret_access_key`, `vertex_credentials`, `extra_headers.api-key`, `accessToken`; not
`max_tokens` or `key_prefix`), the credentials inside any URL of the
config (`https://user:pass@host`, `?key=...`), the config's `environment_variables` with such
names, and the process environment's variables with such names (litellm reads provider keys
from there). Secrets shorter than `MIN_SECRET_CHARS` are left alone (they would blank out
ordinary words); a URL's password is hidden by its place whatever its length.

Cost: nothing on the request path. Errors (proxy/responses.py), log lines (proxy/logs.py),
admin answers and trace statuses pay one search of a compiled pattern of the secrets (a trie:
one branch per character, the longest secret wins) and three substring tests for a mask
(`***`, `...`, `…`). A request's log line with ten secrets configured: ~2-3 µs more
(bench/micro/test_redaction.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import orjson
from pydantic import BaseModel, SecretStr

MASK = "***"
MIN_SECRET_CHARS = 6
"""Shorter configured values are not searched for (`none`, `EMPTY`, `dummy` are no secrets)."""
MIN_ENV_SECRET_CHARS = 8
MIN_MASKED_CHARS = 10
"""A secret this long or longer is also found in the partly masked forms providers echo."""

_SECRET_NAME = re.compile(
    r"(?i)(?:^|[_\-.])(?:api_?key|apikey|keys?|secret|token|password|passwd|credentials?|"
    r"authorization|auth|sig|signature|cookie)(?:[_\-.]|$)"
)
_NOT_SECRET_NAME = frozenset({"key_prefix", "client_keys"})
"""Names the pattern takes for secrets that are not: `client_keys` lists tenants, whose names
and allowed models are what logs are read by (each entry's `key` is a secret by its own name)."""
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>]+")
_URL_PASSWORD = re.compile(r"://([^/\s:@\"'<>]*):([^/\s@\"'<>]+)@")
_MASKED = re.compile(r"\*{3,}|\.{3,}|\u2026")
"""A mask; searched for only after a substring test found one (the regex alone is slow)."""
_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_AUTH_SCHEMES = ("bearer ", "basic ", "token ")
_UNRESOLVED = "os.environ/"
"""A reference left unresolved (an unset variable, a block overspill does not read): no value."""
_LOOKAROUND = 256
"""How far from a mask the masked form's prefix and suffix are looked for."""


def is_secret_name(name: str) -> bool:
    """Whether a setting, header, query parameter or variable of this name holds a secret."""
    return name not in _NOT_SECRET_NAME and bool(_SECRET_NAME.search(_CAMEL.sub("_", name)))


class Redactor:
    """Replaces a fixed set of secrets (and URL passwords) in text with `***`."""

    __slots__ = ("_exact", "_masked", "secrets")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        kept = {s for s in secrets if len(s) >= MIN_SECRET_CHARS}
        self.secrets: frozenset[str] = frozenset(kept)
        forms = {form for secret in kept for form in _forms(secret)}
        self._exact = re.compile(_trie(forms)) if forms else None
        self._masked = tuple(s for s in kept if len(s) >= MIN_MASKED_CHARS)

    def __len__(self) -> int:
        """How many secrets it hides."""
        return len(self.secrets)

    def union(self, other: Redactor) -> Redactor:
        """A redactor hiding the secrets of both (self when other adds none)."""
        if other.secrets <= self.secrets:
            return self
        return Redactor(self.secrets | other.secrets)

    def redact(self, text: str) -> str:
        """`text` with every secret, URL password and echoed masked secret replaced."""
        if self._exact is not None and self._exact.search(text):  # a search is cheaper
            text = self._exact.sub(MASK, text)
        if "://" in text:
            text = _URL_PASSWORD.sub(rf"://\1:{MASK}@", text)
        if self._masked and ("***" in text or "..." in text or "\u2026" in text):
            text = self._unmask(text)
        return text

    def redact_bytes(self, data: bytes) -> bytes:
        """`redact` for UTF-8 bytes (undecodable bytes pass through as they are)."""
        text = data.decode("utf-8", "surrogateescape")
        done = self.redact(text)
        return data if done == text else done.encode("utf-8", "surrogateescape")

    def _unmask(self, text: str) -> str:
        """Replace `prefix***suffix` words whose ends are a secret's ends."""
        out: list[str] = []
        last = 0
        for found in _MASKED.finditer(text):
            start, end = found.span()
            if start < last:
                continue
            left = start
            while left > max(last, start - _LOOKAROUND) and text[left - 1] in _WORD:
                left -= 1
            right = end
            while right < min(len(text), end + _LOOKAROUND) and text[right] in _WORD:
                right += 1
            if self._echoes(text[left:start], text[end:right]):
                out.append(text[last:left])
                out.append(MASK)
                last = right
        if not out:
            return text
        out.append(text[last:])
        return "".join(out)

    def _echoes(self, prefix: str, suffix: str) -> bool:
        """Whether `prefix` + mask + `suffix` shows the two ends of one secret."""
        if not (len(prefix) >= 3 and len(suffix) >= 2) and len(suffix) < 4 and len(prefix) < 6:
            return False
        return any(
            secret.startswith(prefix)
            and secret.endswith(suffix)
            and len(prefix) + len(suffix) < len(secret)
            for secret in self._masked
        )


def _trie(words: Iterable[str]) -> str:
    """One pattern matching any of `words`, the longest where several match: the words as a
    trie, so the engine follows one branch per character instead of trying every word at
    every position (what makes the search cost nearly nothing per secret)."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here

    def render(node: dict[str, Any]) -> str:
        out: list[str] = []
        while True:
            chars = sorted(char for char in node if char)
            ends = "" in node
            if not chars:
                return "".join(out)
            if len(chars) == 1 and not ends:  # a chain: no group needed
                out.append(re.escape(chars[0]))
                node = node[chars[0]]
                continue
            branches = "|".join(re.escape(char) + render(node[char]) for char in chars)
            out.append(f"(?:{branches})?" if ends else f"(?:{branches})")  # greedy: longest
            return "".join(out)

    return render(root)


def _forms(secret: str) -> set[str]:
    """The spellings a secret takes in text: itself, JSON-escaped, percent-encoded."""
    forms = {secret, orjson.dumps(secret).decode()[1:-1], quote(secret, safe="")}
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def secrets_of(
    settings: BaseModel,
    environment: Mapping[str, str] | None = None,
    process_env: Mapping[str, str] | None = None,
) -> set[str]:
    """Every secret named by validated settings, the config's `environment_variables`, and
    the credential variables of the process environment (default: os.environ)."""
    found: set[str] = set()
    _collect(settings, secret=False, found=found)
    for name, value in (environment or {}).items():
        if is_secret_name(name):
            found.update(_credential_parts(value))
        found.update(_url_credentials(value))
    process = os.environ if process_env is None else process_env
    found.update(
        value
        for name, value in process.items()
        if is_secret_name(name) and len(value) >= MIN_ENV_SECRET_CHARS
    )
    return {secret for secret in found if secret and not secret.startswith(_UNRESOLVED)}


def _collect(value: Any, *, secret: bool, found: set[str]) -> None:
    """Walk settings: SecretStr values, strings under secret names, URL credentials."""
    if isinstance(value, SecretStr):
        raw = value.get_secret_value()
        if _URL.fullmatch(raw.strip()):  # a URL held as a secret: its credentials are
            found.update(_url_credentials(raw))
        else:
            found.update(_credential_parts(raw))
    elif isinstance(value, str):
        if secret:
            found.update(_credential_parts(value))
        found.update(_url_credentials(value))
    elif isinstance(value, BaseModel):
        for name, item in _fields(value):
            _collect(item, secret=secret or is_secret_name(name), found=found)
    elif isinstance(value, Mapping):
        for name, item in value.items():
            _collect(item, secret=secret or is_secret_name(str(name)), found=found)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _collect(item, secret=secret, found=found)


def _fields(model: BaseModel) -> Iterator[tuple[str, Any]]:
    for name in type(model).model_fields:
        yield name, getattr(model, name)
    yield from (model.__pydantic_extra__ or {}).items()


def _credential_parts(value: str) -> Iterator[str]:
    """A secret value, and its credential after an auth scheme (`Bearer xyz` → `xyz`)."""
    yield value
    lowered = value.lower()
    for scheme in _AUTH_SCHEMES:
        if lowered.startswith(scheme):
            yield value[len(scheme) :].strip()


def _url_credentials(text: str) -> Iterator[str]:
    """The credentials inside the URLs of `text`: the userinfo's password (its user when it
    has none: `https://TOKEN@host`) and secret-named query parameters, raw and decoded."""
    if "://" not in text:
        return
    for match in _URL.finditer(text):
        try:
            parts = urlsplit(match.group(0))
            username, password = parts.username, parts.password
        except ValueError:
            continue
        if password:
            yield from (password, unquote(password))
        elif username:
            yield from (username, unquote(username))
        for name, item in parse_qsl(parts.query, keep_blank_values=False):
            if is_secret_name(name):
                yield from (item, quote(item, safe=""))


redactor = Redactor()
"""The process's redactor: every secret of every config loaded (see `install`)."""


def install(found: Redactor) -> Redactor:
    """Add a config's secrets to the process's redactor (logs and error bodies use it)."""
    global redactor
    redactor = redactor.union(found)
    return redactor


def redact(text: str) -> str:
    """`text` through the process's redactor."""
    return redactor.redact(text)
