"""The summarizer client against a real model (SmolLM2-135M under llama-cpp-python's server) on 127.0.0.1.

The model's wording is not asserted (135M parameters ramble); only the protocol: an answer with text and a
finish reason, and a prompt over the window classified as a context overflow by the server's own error.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from daemon.summarize.llm import LLMError, SummarizerClient
from tests.support.real_model import REAL_MODEL_ALIAS, REAL_MODEL_N_CTX

if TYPE_CHECKING:
    from tests.support.pi import Pi

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


@pytest.mark.timeout(900)  # a 135M model on 2 CPU cores: seconds per call, minutes on a loaded machine
async def test_a_rambling_real_model_still_yields_a_summary_with_every_heading_and_identifier(
    real_model_url: str, tmp_path: Path, pi: Pi
) -> None:
    """SmolLM2 ignores the headings and invents names: the checks and repairs must still deliver."""
    from daemon.commit.commit import CompactionEntries, commit
    from daemon.job import snapshot_size
    from daemon.summarize.engine import CompactionEngine, EngineSettings
    from daemon.summarize.headings import REQUIRED_HEADINGS
    from daemon.summarize.identifiers import extract_identifiers, rank_identifiers
    from daemon.transcript.messages import llm_visible
    from daemon.transcript.reader import read_transcript

    ops: list[dict[str, Any]] = []
    asks = [
        "Check /srv/api/handlers.py on host 10.2.0.8:8080 please.",
        "The failing commit is 9bd41e0c and the issue is https://git.example.org/api/issues/77",
        "Now write the fix to /srv/api/handlers.py.",
        "Thanks. Run the tests.",
    ]
    for i, ask in enumerate(asks):
        ops.append(
            {
                "op": "appendMessage",
                "message": {
                    "role": "user",
                    "content": [{"type": "text", "text": ask}],
                    "timestamp": 1_790_000_000_000 + i,
                },
            }
        )
        ops.append({"op": "appendMessage", "message": {"role": "assistant", "content": [{"type": "text", "text": f"Step {i} done."}], "api": "x", "provider": "p", "model": "m", "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2}, "stopReason": "stop", "timestamp": 1_790_000_000_500 + i}})  # fmt: skip
    path = Path(pi.write(tmp_path, ops)["path"])
    transcript = read_transcript(path)
    settings = EngineSettings(
        keep_recent_turns=1,
        keep_recent_tokens=20_000,
        summarizer_window=REAL_MODEL_N_CTX,
        max_output_tokens=256,
    )
    async with client_for(real_model_url, context_tokens=REAL_MODEL_N_CTX) as client:
        engine = CompactionEngine(settings, client)
        result = await engine.compact(transcript)
    assert result is not None and result.level in {"llm", "llm_partial"} and result.calls >= 1
    lines = {line.strip() for line in result.summary.splitlines()}
    assert all(h in lines for h in REQUIRED_HEADINGS)
    ranked = rank_identifiers(extract_identifiers(list(llm_visible(result.plan.to_summarize))), cap=64)
    assert ranked and all(i.text.lower() in result.summary.lower() for i in ranked)
    committed = commit(
        path,
        CompactionEntries(
            result.compaction, result.post_message, snapshot_size(transcript), transcript.leaf_id or ""
        ),
        mode="rotate",
        state_dir=tmp_path / "state",
        idle_seconds=0,
        force=True,
    )
    assert committed.committed, committed.reason
    loaded = pi.load(path)
    assert loaded["messages"][0]["role"] == "compactionSummary"
    assert loaded["messages"][0]["summary"] == result.summary
