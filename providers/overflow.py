"""Context-window overflow classifier: does this upstream error mean "the prompt is too long"?

The recovery layer compacts the history and retries only when the upstream said the
conversation outgrew the model's window, so this module must recognise every server's
wording of that, including servers it has never seen, and stay quiet on the look-alikes:
rate limits and tokens-per-minute limits, quotas, credits, output caps (`max_tokens`), batch
sizes, byte/image/character limits, timeouts and 5xx texts.

It reads one text: the lower-cased error message plus a flattened view of the body (str,
bytes or parsed JSON; nested JSON strings such as OpenRouter's `metadata.raw` are read as
text). The rules below are tables, one row per rule, each with a docstring-like `why` that
names where the wording comes from; a reader should be able to check a verdict by eye.

1. Status veto: 401, 402, 403, 404 and 429 are never an overflow.
2. Signals. Most are built from three small vocabularies rather than exact phrases, so an
   unseen server's sentence is caught as long as it says what outgrew what:
   SUBJECT (prompt, input, request, messages, tokens ...), EXCEEDS (exceeds, too long,
   longer than, ...) and WINDOW (context length/window/size/limit, maximum model/prompt/input
   length, token limit, ...). A STRONG signal names the window (or an error code that does);
   a WEAK one says only that something token-ish is too long ("too many tokens",
   "input is too long", "N tokens > M").
3. Vetoes. A HARD veto (rate, quota, credit, billing, throttling wording) beats every
   signal; a SOFT veto (output cap, batch size, bytes, images, characters) beats only weak
   signals, because several real overflows mention `max_tokens` while naming the window.
   When in doubt the answer is "not an overflow".
4. Numbers. `requested` and `limit` are read only where the text states them: a comparison
   ("N > M", "a + b > M"), a count after a request word ("requested N", "input (N tokens)")
   and a count after a window word ("context length is M"). When the text does not say, they
   stay None. `requested` is the total the request needed (prompt plus reserved completion
   when the error states both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import compress, islice
from typing import NamedTuple

from kernel.json_values import is_int

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

_MAX_CHARS = 8_192  # per source (message, body): bounds the cost of a huge error text (~50 ms)
_MAX_NODES = 256  # parsed-body nodes visited
_MAX_DEPTH = 8
_VETO_STATUSES = frozenset({401, 402, 403, 404, 429})
# Every signal holds one of these; a text with none of them is answered at once.
_KEYWORDS = ("context", "token", "long", "length", "exceed", "large")


class Rule(NamedTuple):
    """One row of a table: a pattern searched in the lower-cased text, and why it is there."""

    name: str
    pattern: re.Pattern[str]
    why: str


def _rule(name: str, regex: str, why: str) -> Rule:
    """A table row; in its regex <SUBJECT>, <EXCEEDS>, <WINDOW> and <N> stand for the
    vocabularies below, and <req>, <lim>, <a>, <b> for counts captured under those names."""
    return Rule(name, re.compile(_PLACEHOLDER.sub(_expand, regex)), why)


def _expand(placeholder: re.Match[str]) -> str:
    """The regex a placeholder stands for."""
    name = placeholder[1]
    if name in _VOCABULARY:
        return _VOCABULARY[name]
    return f"(?P<{name}>{_VOCABULARY['N']})"


_PLACEHOLDER = re.compile(r"<(SUBJECT|EXCEEDS|WINDOW|N|req|lim|a|b)>")


# --- vocabularies -----------------------------------------------------------------------------

_VOCABULARY = {
    # What outgrows the window.
    "SUBJECT": r"\b(?:prompt|input|request|messages?|conversation|context|tokens?)\b",
    # How servers say "is bigger than".
    "EXCEEDS": (
        r"(?:exceed(?:s|ed|ing)?|too (?:long|large|big)|(?:longer|larger|greater|more) than"
        r"|overflow(?:s|ed)?|beyond)(?!\w)"
    ),
    # How servers name the window (never a bare "maximum length" or "maximum allowed size":
    # strings, payloads and images have those too).
    "WINDOW": (
        r"(?:context[ _-]?(?:length|window|size|limit)s?"
        r"|max(?:imum)?[ _](?:allowed[ _])?(?:(?:model|prompt|input|message|context|total)[ _/])+"
        r"(?:length|window|size|tokens)|max(?:imum)? allowed (?:length|tokens)"
        r"|model(?:'s)? (?:token limit|max(?:imum)?(?: length)?)\b|token limit"
        r"|maximum number of tokens)"
    ),
    # A stated count: 2048, 1,048,576, 524300.0 (never part of a word, a version or an id).
    "N": r"(?<![\w.,/-])(?:\d{1,3}(?:,\d{3})+|\d{1,18})(?:\.0+)?(?![\w.,]?\d)(?!\w)",
}

# --- signals ----------------------------------------------------------------------------------

_STRONG = (
    _rule(
        "window error code",
        r"(?<![a-z])[a-z_]*(?:context|prompt|input)_[a-z_]*?(?:exceeded|too_long|too_large)(?!\w)"
        r"|(?<![a-z])too_many_(?:input_)?tokens(?!\w)|exceed_context_size|contextwindowexceeded",
        "An error code that names the window: OpenAI, Azure, Groq, Cerebras, DeepSeek "
        "`context_length_exceeded`; llama.cpp server `exceed_context_size_error` "
        "(tools/server); litellm's ContextWindowExceededError; vmlx `prompt_too_long`; any "
        "code of that shape (`model_context_window_exceeded`, `input_too_long`, "
        "`too_many_tokens`), but not a parameter named after one "
        "(`context_length_exceeded_behavior`).",
    ),
    _rule(
        "subject exceeds the window",
        r"<SUBJECT>[^.;\n]{0,120}?<EXCEEDS>[^.;\n]{0,80}?<WINDOW>",
        "The general sentence: 'The input (N tokens) is longer than the model's context "
        "length' (SGLang tokenizer_manager.py), 'request (N tokens) exceeds the available "
        "context size' (llama.cpp server), 'the prompt is longer than the context length "
        "currently available' (Ollama llm/llama_server.go), 'The decoder prompt (length N) is "
        "longer than the maximum model length' (vLLM processor.py), 'Input length (N tokens) "
        "exceeds the maximum allowed length' (SGLang managers/utils.py), 'Your request "
        "exceeded model token limit' (Moonshot), 'input length and `max_tokens` exceed context "
        "limit' (Anthropic), 'Total tokens of image and text exceed max message tokens' "
        "(Volcengine Ark), 'exceeds the maximum number of tokens allowed' (Gemini).",
    ),
    _rule(
        "window exceeded",
        r"<WINDOW>[^.;\n]{0,40}?(?:<EXCEEDS>|reached\b)|context overflow"
        r"|reached (?:the )?<WINDOW>|context (?:the )?overflows",
        "The window as the subject: 'context length exceeded', 'Context size has been "
        "exceeded' (llama.cpp), 'context window exceeds limit' (MiniMax), 'Reached context "
        "length of N tokens ... mid-generation context overflow' and 'Trying to keep the "
        "first N tokens when context the overflows' (LM Studio).",
    ),
    _rule(
        "window stated, then the request",
        r"<WINDOW>[^\n]{0,60}?<N>[^\n]{0,80}?"
        r"\b(?:however|but|while|whereas|and your request|request contains|which is not enough)\b",
        "The limit first, then what the request needed: 'This model's maximum context length "
        "is M tokens. However, you requested N' (OpenAI, vLLM serving_engine.py, DeepSeek, "
        "Groq, OpenRouter 'This endpoint's ...'), 'maximum prompt length is M but the request "
        "contains N' (xAI), 'The maximum context length of X is M. However, answering your "
        "request will take N' (SambaNova), 'context length of only M tokens, which is not "
        "enough' (LM Studio).",
    ),
    _rule(
        "counted subject, then the limit",
        r"<SUBJECT>[^.;\n]{0,40}?<N>(?: tokens?)?[^.;\n]{0,20}?\b(?:but|while|whereas)\b"
        r"[^.;\n]{0,60}?(?:<WINDOW>|supports? (?:up to|at most)|\blimit is)",
        "The count first, then the limit: 'Prompt has N tokens, but the configured context "
        "size is M', 'Prompt is N tokens but the model context window is M' (RKLLM), 'the "
        "input token count is N but model only supports up to M' (Vertex AI), 'Current length "
        "is N while limit is M' (Cerebras).",
    ),
    _rule(
        "advice to shorten the prompt",
        r"reduce the (?:length|number of tokens) (?:of|in) the (?:input|prompt|messages?)"
        r"|\b(?:use|using|provide) a shorter (?:input|prompt)|shorten(?:ing)? the (?:prompt|input)",
        "The fix the server suggests: 'Please reduce the length of the messages or "
        "completion' (OpenAI, Groq, Cerebras), 'Use a shorter input' (SGLang), 'shorten the "
        "prompt' (Ollama), 'Try using a shorter prompt' (Cohere). Rate limits that say 'reduce "
        "the prompt length' are caught by the hard vetoes first.",
    ),
    _rule(
        "inputs bounded by a token count",
        r"\binputs?\b\W{0,3}(?:tokens? \+ [^.\n]{0,40}?)?must (?:have|be)"
        r" (?:less than|fewer than|<=)",
        "A validation bound on the prompt itself: '`inputs` must have less than M tokens', "
        "'`inputs` tokens + `max_new_tokens` must be <= M' (TGI router/src/validation.rs, "
        "also Together).",
    ),
)

_WEAK = (
    _rule(
        "too many tokens",
        r"\btoo many (?:input )?tokens\b",
        "Cohere 'too many tokens: ...', Bedrock Titan 'Too many input tokens'; also Bedrock "
        "throttling ('Too many tokens, please wait'), which the hard vetoes catch.",
    ),
    _rule(
        "prompt is too long",
        r"\b(?:prompt|input|message|conversation)s?(?: context| size)? (?:is )?"
        r"(?:too (?:long|large)\b|exceeds? (?:the )?max(?:imum)? length)",
        "'prompt is too long: N tokens > M maximum' (Anthropic, also via Bedrock and Vertex), "
        "'Input is too long for requested model' (Bedrock), 'Prompt too long' (z.ai, oMLX), "
        "'The input context is too long' (Gemini 500), 'Prompt exceeds max length' (Zhipu); "
        "also said of characters and of llama.cpp's physical batch, which the soft vetoes "
        "catch.",
    ),
    _rule(
        "token count over a maximum",
        r"<N> tokens? ?> ?<N>|\btokens? (?:limit )?(?:exceed(?:s|ed)?|reached)\b"
        r"|\btoken limit\b|\btoken count\b[^.;\n]{0,30}?\bexceeds?\b",
        "Bare comparisons and token limits: 'N tokens > M maximum' (Anthropic), 'Token limit "
        "exceeded', 'Requested tokens exceed ...', 'prompt token count of N exceeds the limit of "
        "M' (GitHub Copilot).",
    ),
    _rule(
        "range of input length",
        r"range of (?:input|prompt) length",
        "DashScope/Qwen: 'Range of input length should be [1, M]' "
        "(InternalError.Algo.InvalidParameter), both native and OpenAI-compatible.",
    ),
)

# --- vetoes -----------------------------------------------------------------------------------

_HARD_VETOES = (
    _rule(
        "rate limit",
        r"rate[ _-]?limit|\bper[ _](?:min(?:ute)?|hour|day|second)\b|\b[tr]p[mds]\b"
        r"|too many requests|please wait|throttl|high traffic",
        "Rate and throughput limits: OpenAI/Groq 'tokens per min (TPM): Limit N, Requested M' "
        "(Groq sends it as 413), Moonshot 'organization TPM rate limit', Bedrock "
        "ThrottlingException 'Too many tokens, please wait', Cerebras 'Tokens per minute "
        "limit exceeded', Vertex '..._per_minute_per_base_model'.",
    ),
    _rule(
        "quota or credit",
        r"quota|credits?\b|billing|balance|spend(?:ing)? limit|can only afford"
        r"|resource[ _]exhausted|resource has been exhausted|suspended|overdue",
        "Money and allowances: quotas (Gemini, Vertex, DashScope), credits (OpenRouter 'can "
        "only afford', xAI, Together), balance (DeepSeek 402), suspended accounts (Moonshot, "
        "Fireworks), Volcengine 'AccountOverdueError'.",
    ),
)

_SOFT_VETOES = (
    _rule(
        "output cap",
        r"max_tokens|max_completion_tokens|max_new_tokens|max_output_tokens|maxoutputtokens"
        r"|output tokens|completion tokens|maximum tokens you requested",
        "The reply's cap, not the prompt: 'max_tokens is too large' (OpenAI), 'max_tokens: N > "
        "M, which is the maximum allowed number of output tokens' (Anthropic), 'The maximum "
        "tokens you requested exceeds the model limit' (Bedrock), 'maxOutputTokens value of N' "
        "(Vertex).",
    ),
    _rule(
        "batch or item count",
        r"\bbatch\b|batch size|\bitems\b|\btexts\b|array too long|\bper request\b",
        "How many inputs, not how long: llama.cpp 'increase the physical batch size', "
        "DashScope 'batch size is invalid', Cohere 'total number of texts', OpenAI 'array too "
        "long', 'max N tokens per request' (embeddings).",
    ),
    _rule(
        "bytes, images or characters",
        r"\bbytes?\b|\d ?[kmg]i?b\b|payload|entity too large|request size|\bimages?\b"
        r"|\bpixels?\b|\bcharacters?\b|\bchars\b|string too long",
        "Sizes that are not tokens: 'Request payload size exceeds the limit: N bytes' (Gemini), "
        "'image exceeds 5 MB maximum' (Bedrock), 'string too long' (OpenAI).",
    ),
)

# --- numbers ----------------------------------------------------------------------------------

# Each pattern names its counts: <req> requested, <lim> limit, <a> + <b> the parts of a total.
_NUMBER_FORMS = tuple(
    _rule(name, regex, why)
    for name, regex, why in (
        (
            "sum over the limit",
            r"<a> *\+? *(?:[a-z_`]+ )?<b> *> *<lim>",
            "'input length and `max_tokens` exceed context limit: a + b > M' (Anthropic; the '+' "
            "is sometimes lost when the text is re-printed; 'input tokens a + max_tokens b > M').",
        ),
        (
            "parts against the limit",
            r"must be <= <lim>\. given: <a> `?inputs`? tokens and <b> `?max_new_tokens",
            "'`inputs` tokens + `max_new_tokens` must be <= M. Given: a `inputs` tokens and b "
            "`max_new_tokens`' (TGI validation.rs).",
        ),
        (
            "output part first",
            r"is too large: <b>\. [^\n]{0,80}?maximum context length is\s+<lim> tokens and your"
            r" request has <a> input tokens",
            "vLLM: ''max_tokens' ... is too large: b. This model's maximum context length is M "
            "tokens and your request has a input tokens'.",
        ),
        (
            "comparison",
            r"<req>(?: tokens?)? ?> ?<lim>",
            "'prompt is too long: N tokens > M maximum' (Anthropic).",
        ),
        (
            "stated total",
            r"(?:a total of|for a total of)(?: at least)? <req>",
            "'You requested a total of N tokens' (SGLang), 'for a total of at least N tokens' "
            "(vLLM).",
        ),
        (
            "count after a request word",
            r"(?:requested(?: about|:)?|resulted in|will take|contains(?: at least)?|request has"
            r"|prompt has|prompt is|given:|received|current length is|count is"
            r"|token count of|input token count:)\s+<req>",
            "'you requested (about) N tokens' (OpenAI, OpenRouter), 'resulted in N' (OpenAI), "
            "'answering your request will take N' (SambaNova), 'the request contains N' (xAI), "
            "'your request has N input tokens' (vLLM), 'Given: N' (TGI), 'Current length is N' "
            "(Cerebras), 'input token count is N' (Vertex), '(requested: N)' (Moonshot), 'received "
            "N' (Cohere), 'request input token count: N' (Titan).",
        ),
        (
            "count in brackets after the subject",
            r"(?:prompt|input|request|messages|conversation|tokens|count|length)\s*"
            r"\((?:length )?<req>(?: tokens)?\)",
            "'The input (N tokens)' (SGLang), 'request (N tokens)' (llama.cpp), 'decoder prompt "
            "(length N)' (vLLM), 'Input length (N)' (OpenAI-compatible), 'input token count (N)' "
            "(Gemini), 'Requested tokens (N)' (llama-cpp-python), 'Number of tokens (N)'.",
        ),
        (
            "count after a length or size",
            r"(?:(?:input|prompt) length (?:of )?|too long: |prompt contains "
            r"|n_prompt_tokens\W{1,6})<req>",
            "'Prompt length of N' (vLLM), 'Input length N exceeds' (Poolside via OpenRouter), "
            "'The prompt is too long: N' (Fireworks), 'Prompt contains N tokens' (Mistral), "
            "`n_prompt_tokens` (llama.cpp body).",
        ),
        (
            "first count after the subject",
            r"\b(?:request|prompt|input)\b[^.\n\d]{0,30}?<req> (?:input |prompt )?tokens",
            "Any other 'request ... N (input) tokens', e.g. 'the request resolved to N input "
            "tokens'.",
        ),
        (
            "limit after the window",
            r"<WINDOW>(?:(?!exceed|\bby\b|code)[^\n]){0,40}?<lim>",
            "'maximum context length is M', 'context size (M tokens)', 'context window of M', "
            "'maximum allowed length (M tokens)', 'model token limit: M', 'maximum number of "
            "tokens allowed (M)', 'context length of only M'. Not 'context window exceeds limit "
            "(2013)' (MiniMax) nor '(status code: 400)', where the number is a code, nor "
            "'exceeded max context length by N tokens' (Ollama), where it is the excess.",
        ),
        (
            "limit before the window",
            r"<lim> (?:tokens? )?<WINDOW>",
            "'too large for model with M maximum context length' (Mistral).",
        ),
        (
            "limit after a limit word",
            r"(?:while limit is|limit(?: for this model)? is|supports up to|less than|must be <="
            r"|cannot exceed|limit of"
            r"|\bn_ctx\W{1,6}|should be \[1,)\s*<lim>",
            "'while limit is M' (Cerebras), 'model only supports up to M' (Vertex), 'must have "
            "less than M tokens' (TGI), 'cannot exceed M' (Cohere), 'exceeds the limit of M' "
            "(Copilot), `n_ctx` (llama.cpp body), 'should be [1, M]' (DashScope).",
        ),
    )
)


def detect_overflow(
    message: str, *, status: int | None = None, provider: str | None = None, body: object = None
) -> Overflow:
    """Classify an upstream error (message, HTTP status, raw body) as a context overflow."""
    text = _text_of(message, body)
    if status in _VETO_STATUSES or not any(word in text for word in _KEYWORDS):
        return NOT_OVERFLOW
    strong = _first(_STRONG, text)
    if strong is None and _first(_WEAK, text) is None:
        return NOT_OVERFLOW
    if _first(_HARD_VETOES, text) or (strong is None and _first(_SOFT_VETOES, text)):
        return NOT_OVERFLOW
    requested, limit = _counts(text)
    return Overflow(True, provider or _provider_of(text), requested, limit)


def _first(rules: tuple[Rule, ...], text: str) -> Rule | None:
    """The first rule of a table whose pattern occurs in the text."""
    return next((rule for rule in rules if rule.pattern.search(text)), None)


def _counts(text: str) -> tuple[int | None, int | None]:
    """The (requested, limit) token counts the text states, each None when it does not.

    The forms are tried in table order; `requested` and `limit` each keep the first value
    found, and a limit is never the very count taken as requested."""
    requested: int | None = None
    limit: int | None = None
    taken: tuple[int, int] | None = None
    for form in _NUMBER_FORMS:
        if (match := form.pattern.search(text)) is None:
            continue
        found = match.groupdict()
        if requested is None and (value := _requested_of(found)) is not None:
            requested = value
            taken = match.span("req") if found.get("req") else None
        if limit is None and found.get("lim") and taken != match.span("lim"):
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
    """An integer from a matched count such as '1,048,576' or '524300.0'."""
    return int((digits or "0").split(".")[0].replace(",", ""))


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
        elif is_int(value) and abs(value) < 10**18:
            out.append(f'"{key}": {value}')
        elif isinstance(value, dict) and depth < _MAX_DEPTH:
            items = islice(value.items(), _MAX_NODES)
            stack.extend((k if isinstance(k, str) else "", v, depth + 1) for k, v in items)
        elif isinstance(value, list | tuple) and depth < _MAX_DEPTH:
            stack.extend((key, v, depth + 1) for v in islice(value, _MAX_NODES))
    return out


# --- provider ---------------------------------------------------------------------------------

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


def _provider_of(text: str) -> str | None:
    """The provider the text clearly names (litellm's exception prefix, a URL, a marker)."""
    for suffix in ("exception", "error"):
        at = text.find(suffix)
        for _ in range(8):
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
