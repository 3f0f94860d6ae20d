"""Token counting with tiktoken, offline: cl100k_base or o200k_base by model family.

Encodings load from the files litellm ships (``litellm/litellm_core_utils/tokenizers/``),
found with ``importlib.util.find_spec`` so litellm itself is never imported here. When
``TIKTOKEN_CACHE_DIR`` is unset it is pointed at that directory (a process-wide setting)
before the first ``tiktoken.get_encoding`` call; when it is set it is respected.

Message accounting follows OpenAI's published recipe (cookbook "How to count tokens with
tiktoken"): 3 tokens per message, the tokens of every counted field's value, 1 more for
``name``, and 3 for priming the reply. For OpenAI chat models that matches the
``usage.prompt_tokens`` the API reports: the cookbook's example counts 129 with cl100k_base
(gpt-4) and 124 with o200k_base (gpt-4o), its published API figures (checked in tests).
Tool definitions (``tools=``) add tokens this module does not count. ``litellm.token_counter``
reports ~0.08% more on long histories: it tokenizes text in 1,024-character slices.

For other models the count is an estimate (another tokenizer, another chat template).
Measured on standard-library docstrings (35k cl100k tokens of English prose) against
tokenizers rebuilt from GGUF vocabularies, their content tokens per cl100k token:
Llama-3 1.000, Qwen2 1.003, SmolLM2 1.10 (5%-95% of messages: 1.02-1.22), and 1.06 for the
legacy Claude tokenizer litellm ships. A 200-message prompt rendered with each model's
template: Llama-3 +1.0%, Qwen2 +1.2%, SmolLM2 +10% over ``count_messages``. Very short
messages differ most, by template overhead (100 one-line turns: Llama-3 +14%, SmolLM2 +24%),
so budgets for non-OpenAI models need a margin, largest for small-vocabulary models.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson
import tiktoken

__all__ = [
    "IMAGE_TOKENS_HIGH",
    "IMAGE_TOKENS_LOW",
    "TokenCounter",
    "TokenizerUnavailable",
    "count_message",
    "count_messages",
    "count_text",
    "encoding_for",
    "encoding_name_for",
    "load_encoding",
    "resolve_cache_dir",
]

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3
# Images are not tokenized; OpenAI bills them by tiles. A fixed figure keeps counting offline
# and cheap: 85 for ``detail: "low"``, 765 otherwise (85 + 4 tiles x 170, a 1024x1024 image at
# high detail). Larger high-detail images cost more upstream (up to 1105 for 2048x768).
IMAGE_TOKENS_LOW = 85
IMAGE_TOKENS_HIGH = 765

# tiktoken's cache file names (sha1 of the download URL) for the encodings we use.
ENCODING_FILES = {
    "cl100k_base": "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
    "o200k_base": "fb374d419588a4632f3f557e76b4b70aebbca790",
}
_O200K_PREFIXES = (
    "gpt-4o",
    "gpt-4.1",
    "gpt-4.5",
    "gpt-5",
    "o1",
    "o3",
    "o4",
    "chatgpt-4o",
    "omni",
)


class TokenizerUnavailable(RuntimeError):
    """The tiktoken encoding files cannot be found or loaded offline."""


def encoding_name_for(model: str) -> str:
    """Return the tiktoken encoding name for a model id, ignoring any provider prefix."""
    name = model.rsplit("/", 1)[-1].lower().removeprefix("ft:")
    return "o200k_base" if name.startswith(_O200K_PREFIXES) else "cl100k_base"


def _bundled_tokenizer_dir() -> Path | None:
    """Return litellm's bundled tokenizer directory, found without importing litellm."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "litellm_core_utils" / "tokenizers"
        if candidate.is_dir():
            return candidate
    return None


def resolve_cache_dir(environ: Mapping[str, str], bundled: Path | None) -> str:
    """Return the tiktoken cache directory: TIKTOKEN_CACHE_DIR if set, else the bundled one."""
    if "TIKTOKEN_CACHE_DIR" in environ:
        return environ["TIKTOKEN_CACHE_DIR"]
    if bundled is None:
        raise TokenizerUnavailable(
            "no tiktoken encodings available offline: set TIKTOKEN_CACHE_DIR to a directory "
            "holding the cl100k_base/o200k_base cache files, or install litellm (which ships "
            "them in litellm/litellm_core_utils/tokenizers/)"
        )
    return str(bundled)


@lru_cache(maxsize=4)
def load_encoding(name: str) -> tiktoken.Encoding:
    """Return a (cached) tiktoken encoding by name, loaded offline (see the module docstring)."""
    cache_dir = resolve_cache_dir(os.environ, _bundled_tokenizer_dir())
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", cache_dir)
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:
        expected = Path(cache_dir) / ENCODING_FILES.get(name, "?")
        raise TokenizerUnavailable(
            f"cannot load tiktoken encoding {name!r} from TIKTOKEN_CACHE_DIR={cache_dir!r} "
            f"(expected file {expected}; this machine may be offline): {exc}"
        ) from exc


@lru_cache(maxsize=256)
def encoding_for(model: str) -> tiktoken.Encoding:
    """Return the (cached) tiktoken encoding for a model id."""
    return load_encoding(encoding_name_for(model))


def count_text(text: str, model: str = "") -> int:
    """Count the tokens of plain text; special-token strings count as ordinary text."""
    return len(encoding_for(model).encode_ordinary(text))


def _count_content(encoding: tiktoken.Encoding, content: object) -> int:
    """Count a message's content: a string, None, or a list of text / image parts."""
    if isinstance(content, str):
        return len(encoding.encode_ordinary(content))
    if not isinstance(content, list):
        return 0
    total = 0
    for part in content:
        if isinstance(part, str):
            total += len(encoding.encode_ordinary(part))
        elif isinstance(part, Mapping):
            total += _count_part(encoding, part)
    return total


def _count_part(encoding: tiktoken.Encoding, part: Mapping[str, Any]) -> int:
    """Count one content part; unknown part types count nothing."""
    kind = part.get("type")
    if kind in ("text", "refusal"):
        text = part.get(kind)
        return len(encoding.encode_ordinary(text)) if isinstance(text, str) else 0
    if kind == "image_url":
        image = part.get("image_url")
        detail = image.get("detail") if isinstance(image, Mapping) else None
        return IMAGE_TOKENS_LOW if detail == "low" else IMAGE_TOKENS_HIGH
    return 0


def _count_function(encoding: tiktoken.Encoding, function: object) -> int:
    """Count a function call's name and JSON arguments."""
    if not isinstance(function, Mapping):
        return 0
    total = 0
    for key in ("name", "arguments"):
        value = function.get(key)
        if isinstance(value, str):
            total += len(encoding.encode_ordinary(value))
    return total


def _count_message(encoding: tiktoken.Encoding, message: Mapping[str, Any]) -> int:
    """Count one message with a given encoding (see the module docstring for the recipe)."""
    total = TOKENS_PER_MESSAGE + _count_content(encoding, message.get("content"))
    for key in ("role", "name", "tool_call_id"):
        value = message.get(key)
        if isinstance(value, str):
            total += len(encoding.encode_ordinary(value))
    if isinstance(message.get("name"), str):
        total += TOKENS_PER_NAME
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        for call in tool_calls:
            if isinstance(call, Mapping):
                total += _count_function(encoding, call.get("function"))
    return total + _count_function(encoding, message.get("function_call"))


def count_message(message: Mapping[str, Any], model: str = "") -> int:
    """Count one chat message: 3 + role + content + name (+1) + tool calls + tool_call_id."""
    return _count_message(encoding_for(model), message)


def count_messages(messages: Sequence[Mapping[str, Any]], model: str = "") -> int:
    """Count a chat prompt: every message plus the 3 tokens that prime the reply."""
    encoding = encoding_for(model)
    return REPLY_PRIMING_TOKENS + sum(_count_message(encoding, m) for m in messages)


def _message_key(message: Mapping[str, Any]) -> bytes | None:
    """Return a stable digest of a message, or None when it is not JSON-serialisable."""
    try:
        data = orjson.dumps(message, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    return hashlib.blake2b(data, digest_size=16).digest()


MAX_ENTRIES = 32_768
"""Message counts a TokenCounter keeps by default (see its docstring)."""


class TokenCounter:
    """Counts messages for one model, remembering each message's count in a bounded LRU.

    A long conversation is resent whole on every turn; with the cache only new messages are
    tokenized. Keys are a 128-bit digest of the message's canonical JSON, so equal messages
    share an entry. Safe to share between threads.

    An entry costs ~150 bytes, so the default bound (32,768 messages: a few hundred long
    conversations' worth, beside what kernel/recall.py keeps per conversation) holds ~5 MB
    when full; 100,000 held ~15 MB, which a busy process reached only after minutes of load
    and then read as growth.
    """

    def __init__(self, model: str = "", max_entries: int = MAX_ENTRIES) -> None:
        """Create a counter for ``model`` holding at most ``max_entries`` message counts."""
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.model = model
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._encoding = encoding_for(model)
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Return how many message counts are cached."""
        return len(self._cache)

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Count one message, from the cache when this exact message was seen before."""
        key = _message_key(message)
        if key is None:
            return _count_message(self._encoding, message)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return cached
        count = _count_message(self._encoding, message)
        with self._lock:
            self.misses += 1
            self._cache[key] = count
            if len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return count

    def count_text(self, text: str) -> int:
        """Count plain text with this counter's encoding (texts are not cached)."""
        return len(self._encoding.encode_ordinary(text))

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Count a chat prompt like :func:`count_messages`, using the cache."""
        return REPLY_PRIMING_TOKENS + sum(self.count_message(m) for m in messages)
