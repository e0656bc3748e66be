"""The one edge that talks to a model: any OpenAI-compatible chat endpoint (OpenAI, vLLM, llama.cpp, Ollama).

A facade over three modules, kept so that ``from compactd.summarize.llm import ...`` goes on working:
:mod:`compactd.summarize.outcomes` (what a call ends in, error classification, the retry policy: pure, and
what the engine and the flush import), :mod:`compactd.summarize._client` (the bounded streaming client) and
:mod:`compactd.summarize._probe` (the endpoint check of ``doctor``). Importing this module loads openai;
import :mod:`compactd.summarize.outcomes` where no client is built.
"""

from __future__ import annotations

from compactd.summarize._client import (
    CONNECT_TIMEOUT_SECONDS,
    DEFAULT_TEMPERATURE,
    MAX_QUOTED_CHARS,
    MIN_OUTPUT_TOKENS,
    POOL_TIMEOUT_SECONDS,
    WRITE_TIMEOUT_SECONDS,
    Sleep,
    SummarizerClient,
)
from compactd.summarize._probe import PROBE_DEADLINE_SECONDS
from compactd.summarize._stream import (
    ANSWER_CHARS_PER_TOKEN,
    BODY_BYTES_PER_TOKEN,
    MIN_ANSWER_CHARS,
    MIN_BODY_BYTES,
    OTHER_BODY_MAX_BYTES,
    BodyTooLarge,
    answer_limits,
)
from compactd.summarize.outcomes import (
    KINDS,
    RETRY_AFTER_MAX_SECONDS,
    Completion,
    EndpointCheck,
    Kind,
    LLMError,
    RetryPolicy,
    classify,
    is_overflow_text,
    retry_after_seconds,
)
from compactd.summarize.pace import (
    PROMPT_ASCII_CHARS_PER_TOKEN,
    PROMPT_OVERHEAD_TOKENS,
    estimate_prompt_tokens,
)

__all__ = [
    "ANSWER_CHARS_PER_TOKEN",
    "BODY_BYTES_PER_TOKEN",
    "CONNECT_TIMEOUT_SECONDS",
    "DEFAULT_TEMPERATURE",
    "KINDS",
    "MAX_QUOTED_CHARS",
    "MIN_ANSWER_CHARS",
    "MIN_BODY_BYTES",
    "MIN_OUTPUT_TOKENS",
    "OTHER_BODY_MAX_BYTES",
    "POOL_TIMEOUT_SECONDS",
    "PROBE_DEADLINE_SECONDS",
    "PROMPT_ASCII_CHARS_PER_TOKEN",
    "PROMPT_OVERHEAD_TOKENS",
    "RETRY_AFTER_MAX_SECONDS",
    "WRITE_TIMEOUT_SECONDS",
    "BodyTooLarge",
    "Completion",
    "EndpointCheck",
    "Kind",
    "LLMError",
    "RetryPolicy",
    "Sleep",
    "SummarizerClient",
    "answer_limits",
    "classify",
    "estimate_prompt_tokens",
    "is_overflow_text",
    "retry_after_seconds",
]
