"""The summarizer client against a real model (SmolLM2-135M under llama-cpp-python's server) on 127.0.0.1.

The model's wording is not asserted (135M parameters ramble); only the protocol: an answer with text and a
finish reason, and a prompt over the window classified as a context overflow by the server's own error.
"""

from __future__ import annotations

import pytest

from daemon.summarize.llm import LLMError, SummarizerClient
from tests.support.real_model import REAL_MODEL_ALIAS, REAL_MODEL_N_CTX

pytestmark = [pytest.mark.real_model, pytest.mark.anyio]


def client_for(url: str, context_tokens: int | None) -> SummarizerClient:
    return SummarizerClient(
        base_url=url,
        model=REAL_MODEL_ALIAS,
        api_key="sk-local",
        timeout_seconds=120,
        seed=1,
        context_tokens=context_tokens,
    )


async def test_a_tiny_prompt_gets_an_answer(real_model_url: str) -> None:
    async with client_for(real_model_url, context_tokens=REAL_MODEL_N_CTX) as client:
        models = await client.list_models()
        result = await client.complete(
            "You summarize conversations in one sentence.",
            "User: please fix the bug in /srv/app/main.py\nAssistant: fixed it by adding a null check.",
            max_tokens=48,
        )
    assert models  # the server lists the model it serves
    assert result.text.strip()
    assert result.finish_reason in {"stop", "length"}
    assert result.completion_tokens is not None and 0 < result.completion_tokens <= 48
    assert result.prompt_tokens is not None and result.prompt_tokens > 0
    assert result.attempts == 1


async def test_the_same_prompt_gives_the_same_answer(real_model_url: str) -> None:
    async with client_for(real_model_url, context_tokens=None) as client:
        first = await client.complete("Answer briefly.", "Name three colours.", max_tokens=24)
        second = await client.complete("Answer briefly.", "Name three colours.", max_tokens=24)
    assert first.text == second.text  # temperature 0 and a fixed seed


async def test_an_over_long_prompt_is_a_context_overflow(real_model_url: str) -> None:
    # No client-side preflight: the server itself must refuse, and its error must classify as overflow.
    async with client_for(real_model_url, context_tokens=None) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("Summarize.", "alpha beta gamma delta " * 1500, max_tokens=16)
    assert info.value.kind == "context_overflow"
    assert info.value.status == 400 and info.value.attempts == 1 and not info.value.preflight


async def test_the_preflight_refuses_the_same_prompt_without_a_request(real_model_url: str) -> None:
    async with client_for(real_model_url, context_tokens=REAL_MODEL_N_CTX) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("Summarize.", "alpha beta gamma delta " * 1500, max_tokens=16)
    assert info.value.kind == "context_overflow" and info.value.preflight
