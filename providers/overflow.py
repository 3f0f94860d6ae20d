"""Context-window overflow classifier: does this upstream error mean "the prompt is too long"?

The recovery layer compacts the history and retries only when the upstream said the
conversation outgrew the model's window, so this module must recognise every provider's
wording of that and stay quiet on the look-alikes: rate limits and tokens-per-minute limits,
quotas, credits, output caps (`max_tokens`), byte-size limits, auth and unknown-model errors.

The decision is made over the lower-cased error message plus a flattened view of the body
(str, bytes, or parsed JSON; nested JSON strings such as OpenRouter's `metadata.raw` or
Ollama's wrapped llama-server error are read as text), in three steps:

1. Signals: phrases and codes that mean "context window exceeded". Every signal contains one
   of four pre-filter words (context, token, long, length), so a text with none of them costs
   four substring checks; each is gated by a literal, and its regex (if any) is searched only
   in a window around the gate. A gate holding a pre-filter word is looked for only from
   _REACH before the first such word on (the same answer, on less text), and only when its
   word occurs. Strong signals name the window itself
   (`context_length_exceeded`, "maximum context length", "prompt is too long"); weak ones are
   generic ("too many tokens", "token limit exceeded").
2. Veto by negative context: rate-limit, quota, credit and throttling wording, or HTTP
   401/402/403/404/429, vetoes every signal; output-cap and byte/character-size wording
   vetoes only weak signals. When in doubt the answer is "not an overflow".
3. Numbers: `requested` and `limit` are read only from patterns that state them (sentences,
   `X > Y`, body fields such as `n_prompt_tokens`/`n_ctx`); when the error does not say, they
   stay None. `requested` is the total the request needed (prompt plus reserved completion
   when the error states both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import compress, islice

__all__ = ["NOT_OVERFLOW", "Overflow", "detect_overflow"]


@dataclass(frozen=True, slots=True)
class Overflow:
    """Whether an upstream error is a context-window overflow, and what it says about it."""

    is_overflow: bool
    provider: str | None
    requested: int | None
    limit: int | None


NOT_OVERFLOW = Overflow(False, None, None, None)
"""The answer for anything that is not an overflow."""

_MAX_CHARS = 32_768  # per source (message, body): bounds the cost of a huge error text
_MAX_NODES = 256  # parsed-body nodes visited
_MAX_DEPTH = 8
_VETO_STATUSES = frozenset({401, 402, 403, 404, 429})
_KEYWORDS = ("context", "token", "long", "length")  # every signal's gate holds one
_BEFORE, _AFTER = 64, 256  # a rule's pattern is searched this far around its gate
_MAX_HITS = 8  # gate occurrences tried per rule
_REACH = 64  # longer than any gate: a gate holding a keyword starts at most this far before it

# (gate, pattern): the gate is a literal that must occur; the pattern (if any) must then match
# near one of the gate's first occurrences.
_Rule = tuple[str, re.Pattern[str] | None]


def _rules(*pairs: tuple[str, str | None]) -> tuple[_Rule, ...]:
    """Compile (gate, regex) pairs; a None regex means the gate alone is the rule."""
    if too_long := [gate for gate, _ in pairs if len(gate) > _REACH]:
        raise ValueError(f"gates longer than _REACH: {too_long}")
    return tuple((gate, None if rx is None else re.compile(rx)) for gate, rx in pairs)


def _by_keyword(rules: tuple[_Rule, ...]) -> dict[str, tuple[_Rule, ...]]:
    """Group rules under the first keyword their gate contains (the pre-filter's words)."""
    groups: dict[str, list[_Rule]] = {word: [] for word in _KEYWORDS}
    for rule in rules:
        groups[next(word for word in _KEYWORDS if word in rule[0])].append(rule)
    return {word: tuple(group) for word, group in groups.items()}


_STRONG = _by_keyword(
    _rules(
        ("maximum context length", None),  # OpenAI, Azure, vLLM, DeepSeek, Mistral, SGLang, ...
        ("prompt is too long", None),  # Anthropic (direct, Bedrock, Vertex), Ollama
        ("context_length_exceeded", r"context_length_exceeded(?!_)"),  # OpenAI code, not a param
        ("exceed_context_size", None),  # llama.cpp server error type
        ("context_window_exceeded", None),
        ("contextwindowexceeded", None),  # litellm's ContextWindowExceededError
        ("context_exceeded", r"\bcontext_exceeded\b"),
        ("prompt too long", r"prompt too long;? exceeded"),  # Ollama
        ("input context is too long", None),  # Gemini: 500 INTERNAL (seed 001)
        ("available context size", None),  # llama.cpp server
        ("input token count", r"input token count.{0,24}(?:exceeds the maximum|but model only)"),
        ("maximum prompt length", None),  # xAI
        (
            "longer than the",
            r"longer than the (?:model\W{0,2}s |maximum )*(?:context|model) (?:len|win|siz)",
        ),
        ("too many input tokens", None),  # Bedrock, Titan
        ("context window", r"exceeds? (?:the )?(?:model'?s )?context window|context window exc"),
        ("context limit", r"exceeds? (?:the )?context limit"),  # Anthropic input + max_tokens
        ("context size", r"exceeds? (?:the )?context size|context size has been exceeded"),
        ("context length", r"exceeds? (?:the )?(?:model'?s )?context length|greater than the c"),
        ("reached context length", None),  # LM Studio mid-generation
        ("context the overflows", None),  # LM Studio ("when context the overflows")
        ("reduce the length of the", r"reduce the length of the (?:messages|input|prompt)"),
        ("`inputs` tokens + `max_new_tokens`", None),  # TGI
        ("tokens. given:", r"`inputs` must have less than \d+ tokens\. given:"),  # TGI
        ("current length is", r"current length is \d+ while limit is"),  # Cerebras
        ("prompt tokens (", r"prompt tokens \(\d+\) exceed model maximum"),  # Bedrock Mantle
        ("model token limit", r"exceeded model token limit"),  # Kimi
        ("prompt token count of", r"prompt token count of \d+ exceeds"),  # GitHub Copilot
        ("input tokens exceed", r"input tokens exceed the configured limit"),  # OpenAI / Azure
    )
)

_WEAK = _by_keyword(
    _rules(
        ("input is too long", None),  # Bedrock, Replicate (also said of characters)
        ("too many tokens", None),  # Cohere, AI21 (also Bedrock throttling: vetoed)
        ("token limit", r"token limit (?:exceeded|reached)|exceeds? (?:the )?(?:\w+ )?token limit"),
        ("input length", r"input length \(?\d+(?: tokens)?\)? exceeds"),
        ("exceeds max length", r"prompt exceeds max length"),  # Zhipu
        ("maximum input length", r"maximum (?:allowed )?input length (?:is|of) [\d,]+ tokens"),
        ("context length exceeded", None),
    )
)

_HARD_VETO = _rules(  # rate limits, quotas, credits: veto every signal
    ("limit", r"rate[ _-]?limit|spend(?:ing)? limit"),
    ("per min", None),  # "tokens per minute", "requests per min"
    ("per day", None),
    ("tpm", r"\btpm\b"),
    ("quota", None),
    ("throttl", None),
    ("please wait", None),  # Bedrock throttling
    ("too many requests", None),
    ("credit", r"credits|credit balance"),
    ("exhausted", r"resource[ _]exhausted|resource has been exhausted"),
)
_SOFT_VETO = _rules(  # output caps, bytes and characters: veto weak signals only
    ("max_tokens", r"max_tokens is too large|max_tokens: \d"),
    ("output tokens", None),
    ("completion tokens", None),
    ("max_output_tokens", None),
    ("maxoutputtokens", None),
    ("max_completion_tokens", None),
    ("maximum tokens you requested", None),
    ("byte", r"\bbytes?\b"),
    ("mb", r"\d ?mb\b"),
    ("kb", r"\d ?kb\b"),
    ("gb", r"\d ?gb\b"),
    ("ib", r"\d ?[kmg]ib\b"),
    ("payload", None),
    ("entity too large", None),
    ("request size", None),
    ("character", r"\bcharacters?\b"),
    ("string too long", None),
)


def _num(name: str) -> str:
    """A regex group for one stated count: 2048, 1,048,576 (never more than 18 digits)."""
    return rf"(?<![\d,])(?P<{name}>\d{{1,3}}(?:,\d{{3}})+|\d{{1,18}})(?!\d)"


def _numbers(*pairs: tuple[str, str]) -> tuple[tuple[str, bool, re.Pattern[str]], ...]:
    """Compile (gate, template) pairs where <req>, <lim>, <a>, <b> stand for counts; each gate
    is marked with whether it holds a keyword (then it is looked for near the keywords)."""
    fill = re.compile(r"<(req|lim|a|b)>")
    return tuple(
        (g, any(word in g for word in _KEYWORDS), re.compile(fill.sub(lambda m: _num(m[1]), t)))
        for g, t in pairs
    )


# Most specific first; `requested` and `limit` each take the first value found.
_NUMBER_PATTERNS = _numbers(
    ("maximum context length", r"maximum context length(?: is| of|:)?\s*\(?<lim>"),
    ("requested", r"requested (?:a total of |about )?<req> tokens"),  # OpenAI, SGLang, OpenRouter
    ("resulted in", r"resulted in <req> tokens"),  # OpenAI, Azure
    (
        "is too large",
        r"is too large: <a>\. this model's maximum context length is\s+<lim> tokens"
        r" and your request has <b> input tokens",
    ),  # vLLM: max_tokens + input > window
    ("prompt is too long", r"prompt is too long: <req>,\s*model maximum context length: <lim>"),
    ("request (", r"request \(<req> tokens\) exceeds (?:the available )?context size \(<lim>"),
    ("n_prompt_tokens", r"n_prompt_tokens\W{1,6}<req>"),
    ("n_ctx", r"\bn_ctx\W{1,6}<lim>"),
    ("for a total of", r"for a total of (?:at least )?<req> tokens"),  # vLLM 0.8+
    ("your request has", r"your request has <req> input tokens"),  # vLLM
    ("context limit", r"exceed context limit: <a> *\+? *<b> *> *<lim>"),  # Anthropic
    (" maximum", r"<req> tokens > <lim> maximum"),  # Anthropic
    ("prompt tokens (", r"prompt tokens \(<req>\) exceed model maximum \(<lim>\)"),
    (
        "input token count",
        r"input token count (?:\(<req>\) )?exceeds the maximum number of"
        r" tokens allowed \(?<lim>",
    ),  # Gemini
    ("input token count", r"input token count is <req> but model only supports up to <lim>"),
    ("maximum prompt length", r"maximum prompt length is <lim> but the request contains <req>"),
    ("prompt contains", r"prompt contains <req> tokens.{0,40}?too large for model with <lim>"),
    ("cannot exceed", r"cannot exceed <lim> - received <req>"),  # Cohere
    ("current length is", r"current length is <req> while limit is <lim>"),  # Cerebras
    ("max_new_tokens", r"must be <= <lim>\. given: <a> `?inputs`? tokens and <b> `?max_new_tokens"),
    ("must have less than", r"must have less than <lim> tokens\. given: <req>"),  # TGI
    ("longer than", r"\(<req> tokens\) is longer than the model\W{0,2}s context length \(<lim>"),
    (
        "longer than",
        r"(?:length |length of )<req>\)? is longer than the maximum model length of"
        r" <lim>",
    ),  # vLLM
    ("exceed context window", r"requested tokens \(<req>\) exceed context window of <lim>"),
    (
        "input length",
        r"input length \(?<req>\)? exceeds (?:the )?(?:model'?s )?maximum "
        r"(?:allowed )?(?:context|input) length (?:of )?\(?<lim>",
    ),
    ("max input tokens", r"max input tokens: <lim>, request input token count: <req>"),  # Titan
    ("exceeds the limit of", r"prompt token count of <req> exceeds the limit of <lim>"),
    ("model token limit", r"model token limit: <lim> \(requested: <req>\)"),  # Kimi
    ("exceeds context size", r"\(<req>\) exceeds context size \(<lim>\)"),
    ("configured limit", r"configured limit of <lim> tokens"),
    (
        "maximum allowed length",
        r"input length \(<req> tokens\) exceeds the maximum allowed length"
        r" \(<lim>",
    ),  # SGLang scheduler
    ("limit for this model", r"limit for this model is <lim> tokens"),
    ("context length of", r"context length of (?:only )?<lim> tokens"),  # LM Studio
)

_GATES = tuple(gate for gate, _, _ in _NUMBER_PATTERNS)

# litellm prints "<Provider>Exception - ..." (`custom_llm_provider.capitalize()`).
_EXCEPTION_WORD = re.compile(r"\b[a-z][a-z_]*(?:exception|error)$")  # searched up to its suffix
_LITELLM_PROVIDERS = (
    "openai", "azure", "anthropic", "bedrock", "gemini", "groq", "ollama", "ollama_chat",
    "mistral", "cohere", "deepseek", "xai", "together_ai", "fireworks_ai", "openrouter",
    "perplexity", "cerebras", "hosted_vllm", "huggingface", "llamafile", "lm_studio",
    "vertex_ai", "sagemaker", "databricks", "watsonx", "replicate",
)  # fmt: skip
_EXCEPTION_PROVIDERS = {f"{name}exception": name for name in _LITELLM_PROVIDERS} | {
    "vertexaiexception": "vertex_ai",
    "vertex_ai_betaexception": "vertex_ai",
    "anthropicerror": "anthropic",
    "cohereerror": "cohere",
    "validationexception": "bedrock",  # AWS Bedrock's error shape
    "togetheraiexception": "together_ai",
    "fireworksaiexception": "fireworks_ai",
}
_MARKERS = (
    ("generativelanguage.googleapis", "gemini"),
    ("aiplatform.googleapis", "vertex_ai"),
    ("openrouter", "openrouter"),
    ("middle-out", "openrouter"),
    ("provider_name", "openrouter"),  # OpenRouter wraps upstream errors in metadata
    ("the context length currently available to the model", "ollama"),
    ("ollama", "ollama"),
    ("exceed_context_size_error", "llama.cpp"),
    ("llama.cpp", "llama.cpp"),
    ("lm studio", "lm_studio"),
    ("context the overflows", "lm_studio"),
    ("bedrock", "bedrock"),
    ("converse operation", "bedrock"),
    ("invokemodel", "bedrock"),
    ("while limit is", "cerebras"),
)
_PROBES = "_-bfv"  # characters rare in prose: a marker needing an absent one is not looked for
_MARKER_PROBES = tuple(frozenset(_PROBES).intersection(marker) for marker, _ in _MARKERS)


def detect_overflow(
    message: str, *, status: int | None = None, provider: str | None = None, body: object = None
) -> Overflow:
    """Classify an upstream error (message, HTTP status, raw body) as a context overflow."""
    text = _text_of(message, body)
    found = [(word, at) for word in _KEYWORDS if (at := text.find(word)) >= 0]  # pre-filter
    if not found or status in _VETO_STATUSES:
        return NOT_OVERFLOW
    whole = (text, 0, text)
    start = max(0, min([at for _, at in found]) - _REACH)
    near = (text, start, text[start:])  # holds every gate that holds a keyword
    strong = any(_any_holds(near, _STRONG[word]) for word, _ in found)
    if not strong and not any(_any_holds(near, _WEAK[word]) for word, _ in found):
        return NOT_OVERFLOW
    if _any_holds(whole, _HARD_VETO) or (not strong and _any_holds(whole, _SOFT_VETO)):
        return NOT_OVERFLOW
    requested, limit = _counts(whole, near)
    return Overflow(True, provider or _provider_of(text), requested, limit)


def _text_of(message: object, body: object) -> str:
    """The lower-cased text to classify: the message, then the body flattened."""
    parts = [_flatten(message)]
    if body is not None:
        parts.append(_flatten(body))
    return "\n".join(parts).lower()


def _flatten(value: object) -> str:
    """Text of a str, bytes or parsed JSON value, at most _MAX_CHARS of it; '' otherwise."""
    if isinstance(value, str):
        return value[:_MAX_CHARS]
    if isinstance(value, bytes | bytearray):
        return bytes(value[:_MAX_CHARS]).decode("utf-8", "replace")
    if isinstance(value, dict | list | tuple):
        return " ".join(_fragments(value))[:_MAX_CHARS]
    return ""


def _fragments(root: object) -> list[str]:
    """Strings and `"key": number` pairs of a parsed body, visiting a bounded number of nodes."""
    out: list[str] = []
    stack: list[tuple[str, object, int]] = [("", root, 0)]
    for _ in range(_MAX_NODES):
        if not stack:
            break
        key, value, depth = stack.pop()
        if isinstance(value, str):
            out.append(f'"{key}": {value[:_MAX_CHARS]}' if key else value[:_MAX_CHARS])
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18:
            out.append(f'"{key}": {value}')
        elif isinstance(value, dict) and depth < _MAX_DEPTH:
            items = islice(value.items(), _MAX_NODES)
            stack.extend((k if isinstance(k, str) else "", v, depth + 1) for k, v in items)
        elif isinstance(value, list | tuple) and depth < _MAX_DEPTH:
            stack.extend((key, v, depth + 1) for v in islice(value, _MAX_NODES))
    return out


# Where gates are looked for: (text, start, part), `part` being the text from `start` on.
_Part = tuple[str, int, str]


def _any_holds(where: _Part, rules: tuple[_Rule, ...]) -> bool:
    """Whether any rule's gate occurs in the part and its pattern (if any) matches near it."""
    part = where[2]
    for gate, pattern in rules:
        if gate in part and (pattern is None or _near(where, gate, part.find(gate), pattern)):
            return True
    return False


def _near(where: _Part, gate: str, at: int, pattern: re.Pattern[str]) -> re.Match[str] | None:
    """The first match of the pattern in a window around one of the gate's first occurrences
    (the first is at `at` in the part)."""
    text, start, part = where
    for _ in range(_MAX_HITS):
        if at < 0:
            return None
        pos = start + at
        if match := pattern.search(text, max(0, pos - _BEFORE), pos + len(gate) + _AFTER):
            return match
        at = part.find(gate, at + 1)
    return None


def _counts(whole: _Part, near: _Part) -> tuple[int | None, int | None]:
    """The (requested, limit) token counts the text states, each None when it does not."""
    requested: int | None = None
    limit: int | None = None
    for gate, keyed, pattern in compress(_NUMBER_PATTERNS, map(whole[0].__contains__, _GATES)):
        where = near if keyed else whole
        if (match := _near(where, gate, where[2].find(gate), pattern)) is None:
            continue
        found = match.groupdict()
        if requested is None:
            requested = _requested_of(found)
        if limit is None and found.get("lim"):
            limit = _to_int(found["lim"])
        if requested is not None and limit is not None:
            break
    return requested, limit


def _requested_of(found: dict[str, str | None]) -> int | None:
    """The requested total from one match: stated outright, or as prompt + completion parts."""
    if found.get("req"):
        return _to_int(found["req"])
    a, b = found.get("a"), found.get("b")
    return _to_int(a) + _to_int(b) if a and b else None


def _to_int(digits: str | None) -> int:
    """An integer from a matched count such as '1,048,576'."""
    return int((digits or "0").replace(",", ""))


def _provider_of(text: str) -> str | None:
    """The provider the text clearly names (litellm's exception prefix, a URL, a marker)."""
    for suffix in ("exception", "error"):
        at = text.find(suffix)
        for _ in range(_MAX_HITS):
            if at < 0:
                break
            end = at + len(suffix)
            word = _EXCEPTION_WORD.search(text, max(0, at - 24), end)
            if word and (name := _EXCEPTION_PROVIDERS.get(word[0])):
                return name
            at = text.find(suffix, end)
    have = set(filter(text.__contains__, _PROBES))
    for marker, name in compress(_MARKERS, map(have.issuperset, _MARKER_PROBES)):
        if marker in text:
            return name
    return None
