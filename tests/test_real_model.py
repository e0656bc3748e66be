"""The summarizer client against a real model (SmolLM2-135M under llama-cpp-python's server) on 127.0.0.1.

The model's wording is not asserted (135M parameters ramble); only the protocol: an answer with text and a
finish reason, and a prompt over the window classified as a context overflow by the server's own error; and
that compaction of real-sized sessions gets a model summary within a 120 s timeout per call on this machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from compactd.summarize.llm import LLMError, SummarizerClient

from tests.support.pi import rotate_and_load
from tests.support.real_model import REAL_MODEL_ALIAS, REAL_MODEL_N_CTX

if TYPE_CHECKING:
    from tests.support.pi import Pi

pytestmark = [pytest.mark.real_model, pytest.mark.anyio]

# Four words are about four tokens: a third of the context's worth of repeats overflows it.
OVER_THE_WINDOW = "alpha beta gamma delta " * (REAL_MODEL_N_CTX // 3)


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
    # llama-cpp-python sends no usage in a stream; what it does send must be sane.
    assert result.completion_tokens is None or 0 < result.completion_tokens <= 48
    assert result.prompt_tokens is None or result.prompt_tokens > 0
    assert len(result.text) <= 48 * 16  # no more than the budget's worth of text
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
            await client.complete("Summarize.", OVER_THE_WINDOW, max_tokens=16)
    assert info.value.kind == "context_overflow"
    assert info.value.status == 400 and info.value.attempts == 1 and not info.value.preflight


async def test_the_preflight_refuses_the_same_prompt_without_a_request(real_model_url: str) -> None:
    async with client_for(real_model_url, context_tokens=REAL_MODEL_N_CTX) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("Summarize.", OVER_THE_WINDOW, max_tokens=16)
    assert info.value.kind == "context_overflow" and info.value.preflight


@pytest.mark.timeout(900)  # a 135M model on 2 CPU cores: seconds per call, minutes on a loaded machine
async def test_a_rambling_real_model_still_yields_a_summary_with_every_heading_and_identifier(
    real_model_url: str, tmp_path: Path, pi: Pi
) -> None:
    """SmolLM2 ignores the headings and invents names: the checks and repairs must still deliver."""
    from compactd.core.messages import llm_visible
    from compactd.reading import read_transcript
    from compactd.summarize.engine import CompactionEngine, EngineSettings
    from compactd.summarize.headings import REQUIRED_HEADINGS
    from compactd.summarize.identifiers import extract_identifiers, rank_identifiers

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
    rotate_and_load(path, result, transcript, tmp_path / "state")


# --- a real summary from a slow local model (issue 10 item 4) ---------------------------------------------

# What a CPU user would configure for a small local summarizer: its real window, a 2-minute call timeout and
# the default output limit (4,096), which the model would fill if it were asked for it.
REAL_TIMEOUT_SECONDS = 120


def _message(role: str, content: list[dict[str, Any]], ts: int, **extra: Any) -> dict[str, Any]:
    return {"op": "appendMessage", "message": {"role": role, "content": content, "timestamp": ts, **extra}}


def _assistant(text: str, ts: int, call: tuple[str, str, dict[str, Any]] | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if call is not None:
        content.append({"type": "toolCall", "id": call[0], "name": call[1], "arguments": call[2]})
    return _message("assistant", content, ts, api="openai-completions", provider="local", model="qwen2.5-coder", usage={"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2}, stopReason="toolUse" if call else "stop")  # fmt: skip


def work_session(
    topic: str, turns: list[tuple[str, str, str, dict[str, Any], str, str]]
) -> list[dict[str, Any]]:
    """pi ops for a working session: per turn the user's ask, the agent's note and tool call, the tool's
    output and the agent's conclusion; then two short turns that stay verbatim."""
    ops: list[dict[str, Any]] = []
    ts = 1_790_000_000_000
    for i, (ask, note, tool, args, output, conclusion) in enumerate(turns):
        call_id = f"call_{topic}_{i}"
        ops.append(_message("user", [{"type": "text", "text": ask}], ts + 10 * i))
        ops.append(_assistant(note, ts + 10 * i + 1, (call_id, tool, args)))
        ops.append(_message("toolResult", [{"type": "text", "text": output}], ts + 10 * i + 2, toolCallId=call_id, toolName=tool, isError=False))  # fmt: skip
        ops.append(_assistant(conclusion, ts + 10 * i + 3, None))
    end = ts + 10 * len(turns)
    ops.append(_message("user", [{"type": "text", "text": "Thanks. Anything else before we stop?"}], end))
    ops.append(_assistant("No, that covers it for today.", end + 1, None))
    ops.append(_message("user", [{"type": "text", "text": "Good, see you tomorrow."}], end + 2))
    ops.append(_assistant("See you tomorrow.", end + 3, None))
    return ops


def _source(module: str, n: int) -> str:
    lines = [f'"""{module}: retries for the payments client."""', "import time", ""]
    for k in range(n):
        lines += [
            f"def attempt_{k}(client, request, budget={k + 3}):",
            f"    # back off {2 ** (k % 6)} s before try {k}; PAY-{4100 + k} reported the double charge",
            "    for tries in range(budget):",
            "        response = client.post('/v2/charges', json=request, timeout=30)",
            "        if response.status_code < 500:",
            "            return response",
            f"        time.sleep({0.5 * (k + 1):.1f} * 2 ** tries)",
            "    raise RuntimeError('charge failed after retries')",
            "",
        ]
    return "\n".join(lines)


def payments_session() -> list[dict[str, Any]]:
    turns = []
    for i in range(9):
        path = f"/srv/payments/retry_{i}.py"
        turns.append(
            (
                f"Ticket PAY-{4100 + i}: customers were charged twice. Read {path} and tell me where the retry "
                f"can repeat a charge that already went through on host pay-{i}.internal:8443.",
                f"I will read {path} first.",
                "read",
                {"path": path},
                _source(f"retry_{i}", 6),
                f"{path} retries POST /v2/charges on any 5xx without an idempotency key, so a charge that "
                f"timed out on pay-{i}.internal:8443 can be made twice. Fix: send Idempotency-Key per request.",
            )
        )
    turns.append(
        (
            "Add the Idempotency-Key header in /srv/payments/retry_0.py and run the tests with pytest -q.",
            "Editing the file, then running the tests.",
            "bash",
            {"command": "cd /srv/payments && pytest -q tests/test_retry.py"},
            "\n".join(f"tests/test_retry.py::test_attempt_{k} PASSED" for k in range(40))
            + "\n40 passed in 3.1s",
            "All 40 tests pass with the header in place; commit 9bd41e0c carries the change.",
        )
    )
    return work_session("pay", turns)


def migration_session() -> list[dict[str, Any]]:
    turns = []
    for i in range(8):
        host = f"db-{i}.staging.example.org"
        log = "\n".join(
            f"{40 + i:02d}:{k:02d}:07 migrate[{1200 + k}]: table orders_{k} copied, {1000 * (k + 1)} rows, "
            f"checksum {abs(hash((i, k))) % 16**8:08x} ok"
            for k in range(30)
        )
        turns.append(
            (
                f"OPS-2720{i}: migrate {host} from PostgreSQL 14 to 16.4 and check the row counts. "
                f"The runbook is https://wiki.example.org/ops/pg16-migration#step-{i}.",
                f"Running the migration on {host}.",
                "bash",
                {"command": f"ssh {host} sudo /opt/migrate/run.sh --to 16.4"},
                log,
                f"{host} is on 16.4; all 30 orders tables copied with matching checksums. Next host after "
                "the replication lag on 10.20.0.5:5432 is below 1 s.",
            )
        )
    return work_session("ops", turns)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 2 shared cores: minutes per session, and other helpers' tests beside it
async def test_a_slow_small_model_gives_a_model_summary_within_a_120_s_timeout_per_call(
    real_model_url: str, tmp_path: Path, pi: Pi
) -> None:
    """Two sessions written by pi's SessionManager, compacted and committed as the daemon does, by a config
    with a 120 s timeout and the default 4,096 output tokens: each call is sized to its input and, once the
    first call has measured the model, to the speed remembered in the state dir. The result is the model's
    summary (``llm``, or ``llm_partial`` when a deadline kept what was written), never the digest."""
    import time

    import yaml
    from compactd.config import load_config
    from compactd.core.tokens import estimate_tokens
    from compactd.sources.files.job import compact_file
    from compactd.summarize.headings import REQUIRED_HEADINGS
    from compactd.summarize.pace import SpeedMemory, endpoint_key
    from compactd.summarize.settings import make_client

    state = tmp_path / "state"
    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "state_dir": str(state),
                "sessions": {"roots": [str(tmp_path / "sessions")]},
                "compaction": {"keep_recent_turns": 2},
                "summarizer": {
                    "base_url": real_model_url,
                    "model": REAL_MODEL_ALIAS,
                    "context_tokens": REAL_MODEL_N_CTX,
                    "timeout_seconds": REAL_TIMEOUT_SECONDS,
                },
            }
        )
    )
    config = load_config(config_path)
    assert config.summarizer.max_output_tokens == 4_096  # the default the model would write to the end
    speeds = SpeedMemory(state)
    key = endpoint_key(real_model_url, REAL_MODEL_ALIAS)
    report = []
    for name, ops in (("payments", payments_session()), ("migration", migration_session())):
        path = Path(pi.write(tmp_path / "sessions" / name, ops)["path"])
        known = speeds.get(key)
        client = make_client(config)
        started = time.monotonic()
        try:
            result = await compact_file(str(path), config, client=client, force=True)
        finally:
            await client.close()
        elapsed = time.monotonic() - started
        engine = result.engine
        assert engine is not None and result.committed, result.reason
        measured = speeds.get(key)
        span = sum(estimate_tokens(m) for m in engine.plan.to_summarize)
        report.append(
            f"{name}: level {engine.level}, {engine.calls} call(s) "
            f"({engine.quality.get('deadline_partials', 0)} cut off by the deadline), {elapsed:.1f} s for "
            f"{span:,} tokens summarized; speed known before: {known.describe() if known else 'none'}; "
            f"after: {measured.describe() if measured else 'none'}"
        )
        print(f"\nreal model (timeout {REAL_TIMEOUT_SECONDS} s per call): {report[-1]}")
        assert engine.level in {"llm", "llm_partial"}, report[-1]
        assert measured is not None and measured.prompt_tps and measured.output_tps  # remembered for the next
        lines = {line.strip() for line in engine.summary.splitlines()}
        assert all(h in lines for h in REQUIRED_HEADINGS)
        assert engine.identifiers.in_summary == engine.identifiers.total > 0
        loaded = pi.load(path)
        assert loaded["messages"][0]["role"] == "compactionSummary"
        assert loaded["messages"][0]["summary"] == engine.summary
    print("\n" + "\n".join(report))
