"""Summarizer calls sized to their input and to the endpoint's measured speed, and what a call cut off by its
deadline leaves (issue 10 item 4): the engine and the client against the stub server on 127.0.0.1, through
the real openai client, on sessions written by pi's ``SessionManager``; the speed file in a real state dir.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from compactd.reading import read_transcript
from compactd.summarize.engine import CompactionEngine, EngineResult, EngineSettings
from compactd.summarize.headings import REQUIRED_HEADINGS
from compactd.summarize.llm import SummarizerClient, estimate_prompt_tokens
from compactd.summarize.pace import (
    CHUNK_OUTPUT_RATIO,
    MAX_RISE,
    MERGE_OUTPUT_RATIO,
    MIN_PACED_OUTPUT_TOKENS,
    OUTPUT_FLOOR_TOKENS,
    PACE_SHARE,
    SPEED_FILE,
    Pace,
    Sample,
    Speed,
    SpeedMemory,
    endpoint_key,
    observe,
    output_budget,
)
from compactd.summarize.prompts import RETRY_INSTRUCTION

from tests.support.llm_server import Reply, chunk_payload, sse_event
from tests.support.pi import rotate_and_load

if TYPE_CHECKING:
    from tests.support.llm_server import RecordedRequest, StubLLMServer
    from tests.support.pi import Pi

KEY = "sk-test-pace-7Hq2Lw9x"
MERGE = "<partial-summary part="
# Its words are in no identifier of the session, so only a summary that says it reflects it.
LATEST_ASK = "Now deploy the billing service to staging and watch the canary error rate."
GOOD_PREFIX = "\n".join(
    [
        "## Decisions",
        "- The billing service is deployed to staging first, with the canary error rate watched.",
        "- Retries in /srv/payments/client.py use exponential back-off.",
        "## Open TODOs",
        "- Deploy billing to staging; watch the canary error rate for an hour.",
    ]
)
OFF_TOPIC_PREFIX = "\n".join(
    ["## Decisions", "- Lunch is at noon on Thursdays and the office plants need water every week."]
)


# --- sessions written by pi --------------------------------------------------------------------------------


def _user(text: str, ts: int) -> dict[str, Any]:
    return {"op": "appendMessage", "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}}  # fmt: skip


def _assistant(text: str, ts: int, call: tuple[str, str, dict[str, Any]] | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if call is not None:
        content.append({"type": "toolCall", "id": call[0], "name": call[1], "arguments": call[2]})
    message = {"role": "assistant", "content": content, "api": "openai-completions", "provider": "p", "model": "m", "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2}, "stopReason": "toolUse" if call else "stop", "timestamp": ts}  # fmt: skip
    return {"op": "appendMessage", "message": message}


def _result(call_id: str, text: str, ts: int) -> dict[str, Any]:
    message = {"role": "toolResult", "toolCallId": call_id, "toolName": "read", "content": [{"type": "text", "text": text}], "isError": False, "timestamp": ts}  # fmt: skip
    return {"op": "appendMessage", "message": message}


def coding_session(pi: Pi, folder: Path, *, turns: int, result_chars: int) -> Path:
    """A pi session of ``turns`` read-and-explain turns, each reading a file of ``result_chars``, then the
    latest ask of the summarized span and its answer, then a short turn that is kept."""
    ops: list[dict[str, Any]] = []
    ts = 1_790_000_000_000
    for i in range(turns):
        path = f"/srv/payments/module_{i:02d}.py"
        ops.append(_user(f"Read {path} and tell me how ticket PAY-{4100 + i} is handled.", ts + 10 * i))
        ops.append(_assistant(f"Reading {path}.", ts + 10 * i + 1, (f"call_{i}", "read", {"path": path})))
        body = "".join(f"def step_{i}_{n}(x):\n    return x * {n}  # retry budget\n" for n in range(10_000))
        ops.append(_result(f"call_{i}", body[:result_chars], ts + 10 * i + 2))
        ops.append(_assistant(f"{path} retries PAY-{4100 + i} with back-off.", ts + 10 * i + 3))
    ops.append(_user(LATEST_ASK, ts + 10 * turns))
    ops.append(_assistant("Deploying billing to staging now.", ts + 10 * turns + 1))
    ops.append(_user("Thanks, keep an eye on it.", ts + 10 * turns + 2))
    ops.append(_assistant("Will do.", ts + 10 * turns + 3))
    return Path(pi.write(folder, ops)["path"])


# --- the stub's answers ------------------------------------------------------------------------------------


def streamed(
    pieces: Iterable[str],
    *,
    first_delay: float = 0.0,
    interval: float = 0.0,
    usage: dict[str, int] | None = None,
    timings: dict[str, float] | None = None,
    done: bool = True,
) -> Reply:
    """An answer streamed as llama.cpp streams it: ``first_delay`` of prompt processing, then one content
    delta per piece every ``interval`` seconds; with ``done`` a finish chunk, the usage and llama.cpp's
    ``timings``; without, pieces for as long as the client listens (``pieces`` may be endless)."""

    def generate(_streaming: bool) -> tuple[str, Iterator[bytes]]:
        events: Iterator[bytes] = (sse_event(chunk_payload({"content": p})) for p in pieces)
        if done:
            final: dict[str, Any] = {**chunk_payload({}, finish_reason="stop")}
            if usage is not None:
                final["usage"] = usage
            if timings is not None:
                final["timings"] = timings
            events = itertools.chain(events, [sse_event(final) + b"data: [DONE]\n\n"])
        return "text/event-stream", events

    return Reply(generate=generate, delay=first_delay, interval=interval)


def with_timings(text: str, request: RecordedRequest, *, prompt_tps: float, output_tps: float) -> Reply:
    """A whole answer at once, with llama.cpp's ``timings`` saying the server ran at these speeds."""
    prompt_n = estimate_prompt_tokens(request.content("system"), request.content("user"))
    predicted_n = max(2, len(text) // 4)
    timings = {
        "prompt_n": prompt_n,
        "prompt_ms": 1000 * prompt_n / prompt_tps,
        "predicted_n": predicted_n,
        "predicted_ms": 1000 * predicted_n / output_tps,
    }
    return streamed([text[i : i + 16] for i in range(0, len(text), 16)], timings=timings)


def summary_for(request: RecordedRequest) -> str:
    """A well-formed summary that names the latest ask when the prompt holds it (a merge's partials do)."""
    asked = LATEST_ASK in request.content("user") or MERGE in request.content("user")
    return "\n".join(
        [
            *REQUIRED_HEADINGS[:3],
            REQUIRED_HEADINGS[3],
            f"- {LATEST_ASK}" if asked else "- Explain the retry handling.",
            REQUIRED_HEADINGS[4],
            "- /srv/payments",
        ]
    )


# --- helpers ---------------------------------------------------------------------------------------------


async def _no_sleep(_: float) -> None:
    return None


def client_for(server: StubLLMServer, state: Path | None = None, **kw: Any) -> SummarizerClient:
    kw.setdefault("timeout_seconds", 10)
    kw.setdefault("context_tokens", None)
    if state is not None:
        kw["speed_memory"] = SpeedMemory(state)
    return SummarizerClient(base_url=server.base_url, model="stub-model", api_key=KEY, sleep=_no_sleep, **kw)


def settings(**overrides: Any) -> EngineSettings:
    base: dict[str, Any] = {
        "keep_recent_turns": 1,
        "keep_recent_tokens": 20_000,
        "summarizer_window": 32_768,
        "max_output_tokens": 4_096,
    }
    base.update(overrides)
    return EngineSettings(**base)


def compact(path: Path, client: SummarizerClient, **overrides: Any) -> EngineResult:
    async def go() -> EngineResult:
        async with client:
            result = await CompactionEngine(settings(**overrides), client).compact(read_transcript(path))
        assert result is not None
        return result

    return anyio.run(go)


def max_tokens(request: RecordedRequest) -> int:
    value = request.json["max_tokens"]
    assert isinstance(value, int)
    return value


def tokens_of(text: str) -> int:
    return -(-len(text) // 4)


# --- the output budget follows the input -----------------------------------------------------------------


def test_each_call_asks_for_an_output_budget_sized_to_its_input(
    llm_server: StubLLMServer, pi: Pi, tmp_path: Path
) -> None:
    """A small chunk asks for the floor, a large one for a fifth of itself, a merge for most of its partials;
    none for the configured 4,096 a small model would write to the end."""
    llm_server.responder = summary_for
    small = compact(coding_session(pi, tmp_path / "small", turns=2, result_chars=600), client_for(llm_server))
    large = compact(
        coding_session(pi, tmp_path / "large", turns=10, result_chars=4_000), client_for(llm_server)
    )
    assert small.level == large.level == "llm" and small.calls == large.calls == 1
    [small_call, large_call] = llm_server.completions
    assert max_tokens(small_call) == OUTPUT_FLOOR_TOKENS
    conversation = large_call.content("user").split("<conversation>", 1)[1].split("</conversation>", 1)[0]
    assert max_tokens(large_call) == pytest.approx(CHUNK_OUTPUT_RATIO * tokens_of(conversation), rel=0.05)
    assert OUTPUT_FLOOR_TOKENS < max_tokens(large_call) < 4_096

    # A span beyond the window's chunk: parts summarized, then merged; the merge's budget is its partials'.
    partial = "\n".join(["## Decisions", *(f"- module {n} retries with back-off" for n in range(120))])
    llm_server.responder = lambda r: summary_for(r) if MERGE in r.content("user") else partial
    first = len(llm_server.completions)
    merged = compact(
        coding_session(pi, tmp_path / "merged", turns=24, result_chars=4_000),
        client_for(llm_server),
        summarizer_window=16_384,
    )
    calls = llm_server.completions[first:]
    assert merged.level == "llm" and len(calls) >= 3
    *chunks, merge = calls
    assert all(MERGE not in c.content("user") for c in chunks)
    partials = merge.content("user").count(MERGE)
    assert partials >= 2
    assert max_tokens(merge) == pytest.approx(MERGE_OUTPUT_RATIO * partials * tokens_of(partial), rel=0.05)
    assert all(OUTPUT_FLOOR_TOKENS <= max_tokens(c) < 4_096 for c in chunks)


def test_a_small_window_is_not_one_call_per_tool_call(
    llm_server: StubLLMServer, pi: Pi, tmp_path: Path
) -> None:
    """The seed's fixed 4,096-token overhead leaves nothing of an 8k window; the real overhead leaves room."""
    llm_server.responder = summary_for
    path = coding_session(pi, tmp_path / "s", turns=12, result_chars=400)
    result = compact(path, client_for(llm_server), summarizer_window=8_192)
    assert result.level == "llm" and result.calls == 1
    [call] = llm_server.completions
    assert all(f"module_{i:02d}.py" in call.content("user") for i in range(12))


def test_a_quality_retry_redoes_only_the_call_its_reasons_go_to(
    llm_server: StubLLMServer, pi: Pi, tmp_path: Path
) -> None:
    """Chunks before the last are not summarized twice: at temperature 0 they would come out the same."""
    llm_server.responder = lambda r: "The assistant read some files about payments."  # no headings
    path = coding_session(pi, tmp_path / "s", turns=10, result_chars=4_000)
    result = compact(path, client_for(llm_server), summarizer_window=16_384)
    calls = llm_server.completions
    marker = RETRY_INSTRUCTION.split("{", 1)[0].strip()[:40]
    retried = [c for c in calls if marker in c.content("user")]
    assert len(retried) == 1 and calls[-1] is retried[0]
    assert len(calls) >= 3 and result.calls == len(calls)
    users = [c.content("user") for c in calls]
    assert len(set(users)) == len(users)  # no prompt sent twice


# --- the speed is measured, remembered and used ------------------------------------------------------------


def test_the_speed_is_measured_from_the_stream_and_written_atomically(
    llm_server: StubLLMServer, tmp_path: Path
) -> None:
    """Time to the first token is the prompt's; the deltas after it are the output's (llama-cpp-python sends
    no usage in a stream: the prompt estimate and the deltas are counted)."""
    state = tmp_path / "state"
    prompt = "word " * 2_000
    llm_server.script(
        streamed(["## Decisions\n", *(f"- step {n}\n" for n in range(40))], first_delay=0.5, interval=0.01)
    )

    async def go() -> Speed | None:
        async with client_for(llm_server, state) as client:
            await client.complete("Summarize.", prompt, max_tokens=600)
            return client.speed

    speed = anyio.run(go)
    assert speed is not None and speed.prompt_tps is not None and speed.output_tps is not None
    estimate = estimate_prompt_tokens("Summarize.", prompt)
    assert estimate / 5 < speed.prompt_tps <= estimate / 0.5  # at least the 0.5 s of "prompt processing"
    assert 10 < speed.output_tps <= 40 / 0.39  # 40 more deltas, at least 10 ms apart
    path = state / SPEED_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p for p in os.listdir(state) if p.endswith(".tmp")]
    doc = json.loads(path.read_text())
    entry = doc["endpoints"][f"{llm_server.base_url} stub-model"]
    assert entry["prompt_tps"] == pytest.approx(speed.prompt_tps, abs=0.01)
    assert entry["output_tps"] == pytest.approx(speed.output_tps, abs=0.01)
    assert KEY not in path.read_text()


def test_the_speed_file_is_read_back_and_sizes_the_next_calls(
    llm_server: StubLLMServer, pi: Pi, tmp_path: Path
) -> None:
    """At 180 prompt and 22 output tokens/s (llama.cpp's timings), every call of a later compaction — by a new
    client reading the file — fits 0.8 of its timeout: smaller chunks, lower max_tokens."""
    state = tmp_path / "state"
    speeds = {"prompt_tps": 180.0, "output_tps": 22.0}
    llm_server.responder = lambda r: with_timings(summary_for(r), r, **speeds)

    async def measure() -> None:
        async with client_for(llm_server, state, timeout_seconds=120) as client:
            await client.complete("Summarize.", "word " * 3_000, max_tokens=600)

    anyio.run(measure)
    stored = SpeedMemory(state).get(endpoint_key(llm_server.base_url, "stub-model"))
    assert stored is not None and (stored.prompt_tps, stored.output_tps) == pytest.approx((180.0, 22.0))

    path = coding_session(pi, tmp_path / "s", turns=16, result_chars=4_000)
    first = len(llm_server.completions)
    unpaced = compact(path, client_for(llm_server, timeout_seconds=120))  # no speed known: one call
    [alone] = llm_server.completions[first:]
    prompt = estimate_prompt_tokens(alone.content("system"), alone.content("user"))
    assert unpaced.calls == 1 and prompt / 180 + max_tokens(alone) / 22 > PACE_SHARE * 120

    client = client_for(llm_server, state, timeout_seconds=120)
    assert client.speed == stored
    first = len(llm_server.completions)
    result = compact(path, client)
    calls = llm_server.completions[first:]
    assert result.level == "llm" and len(calls) >= 2
    for call in calls:
        prompt = estimate_prompt_tokens(call.content("system"), call.content("user"))
        planned = prompt / 180 + max_tokens(call) / 22
        assert planned <= PACE_SHARE * 120, (prompt, max_tokens(call))
    conversation = "".join(c.content("user") for c in calls)
    assert all(f"module_{i:02d}.py" in conversation for i in range(16))  # nothing left out


# --- the deadline hits mid-answer --------------------------------------------------------------------------


def _endless(prefix: str, *, interval: float = 0.05) -> Reply:
    """The prefix's lines, then a sentence that never ends: a delta every ``interval`` seconds."""
    lines = [line + "\n" for line in prefix.splitlines()]
    return streamed(
        itertools.chain(lines, ["- and then the model kept"], itertools.repeat(" writing")),
        interval=interval,
        done=False,
    )


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@pytest.mark.timeout(60)
def test_a_good_prefix_cut_off_by_the_deadline_is_committed_as_llm_partial(
    llm_server: StubLLMServer, pi: Pi, tmp_path: Path
) -> None:

    llm_server.responder = lambda r: _endless(GOOD_PREFIX)
    path = coding_session(pi, tmp_path / "s", turns=3, result_chars=600)
    transcript = read_transcript(path)
    result = compact(path, client_for(llm_server, timeout_seconds=2))
    assert result.level == "llm_partial" and len(llm_server.completions) == 1
    assert all(line in result.summary for line in GOOD_PREFIX.splitlines())
    assert "kept writing" not in result.summary and "the model kept" not in result.summary
    lines = {line.strip() for line in result.summary.splitlines()}
    assert all(h in lines for h in REQUIRED_HEADINGS)
    assert "PAY-4100" in result.summary and "/srv/payments/module_02.py" in result.summary  # appended
    assert result.quality["deadline_partials"] == 1 and result.quality["ok"]
    rotate_and_load(path, result, transcript, tmp_path / "state")


@pytest.mark.slow  # waits out a deadline
@pytest.mark.timeout(60)
def test_a_chunk_cut_off_by_the_first_deadline_is_folded_on_and_the_next_calls_are_sized_to_fit(
    llm_server: StubLLMServer, pi: Pi, tmp_path: Path
) -> None:
    """The first call to an endpoint is sized by its input alone; when it overruns, what it wrote is the
    running summary, its timing sizes the next calls, and the result is the model's (``llm_partial``)."""
    answers = iter([_endless(GOOD_PREFIX, interval=0.01)])
    llm_server.responder = lambda r: next(answers, None) or summary_for(r)
    path = coding_session(pi, tmp_path / "s", turns=10, result_chars=4_000)
    client = client_for(llm_server, timeout_seconds=3)
    result = compact(path, client, summarizer_window=16_384)
    first, *later = llm_server.completions
    assert result.level == "llm_partial" and result.quality["deadline_partials"] == 1 and later
    assert "- Retries in /srv/payments/client.py use exponential back-off." in later[0].content("user")
    speed = client.speed
    assert speed is not None and speed.output_tps is not None
    assert max_tokens(first) >= OUTPUT_FLOOR_TOKENS
    for call in later:  # each asks for no more than the measured speed lets it write in time
        room = Pace(3, speed).output_room(
            estimate_prompt_tokens(call.content("system"), call.content("user"))
        )
        assert room is not None and max_tokens(call) <= max(room, MIN_PACED_OUTPUT_TOKENS)


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@pytest.mark.timeout(60)
def test_a_bad_prefix_cut_off_by_the_deadline_gives_the_digest_and_still_teaches_the_speed(
    llm_server: StubLLMServer, pi: Pi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Text that misses the latest ask is no summary of this session; what the cut-off call measured is
    remembered all the same, so the next call is sized by it."""
    state = tmp_path / "state"
    llm_server.responder = lambda r: _endless(OFF_TOPIC_PREFIX)
    path = coding_session(pi, tmp_path / "s", turns=3, result_chars=600)
    client = client_for(llm_server, state, timeout_seconds=2)
    with caplog.at_level(logging.WARNING, logger="compactd.summarize"):
        result = compact(path, client)
    assert result.level == "digest" and len(llm_server.completions) == 1
    assert "Lunch is at noon" not in result.summary
    assert any(
        "cut off at the deadline fails the checks after repair (latest_user_ask_not_reflected)" in r.message
        for r in caplog.records
    )
    stored = SpeedMemory(state).get(endpoint_key(llm_server.base_url, "stub-model"))
    assert stored is not None and stored.output_tps is not None and stored.output_tps < 40
    room = Pace(2, stored).output_room(100)
    assert room is not None and room < OUTPUT_FLOOR_TOKENS  # the next call asks for less than the floor

    # Headings alone say nothing: not kept either.
    llm_server.responder = lambda r: _endless("## Decisions\n## Open TODOs\n## Pending user asks")
    assert compact(path, client_for(llm_server, timeout_seconds=1.5)).level == "digest"


# --- the arithmetic ----------------------------------------------------------------------------------------


def test_output_budget_is_clamped_between_the_floor_and_the_cap() -> None:
    assert output_budget(100, 0, ratio=0.2, cap=4_096) == OUTPUT_FLOOR_TOKENS
    assert output_budget(10_000, 0, ratio=0.2, cap=4_096) == 2_000
    assert output_budget(10_000, 1_500, ratio=0.2, cap=4_096) == 3_500  # a carried summary is rewritten
    assert output_budget(100_000, 0, ratio=0.2, cap=4_096) == 4_096
    assert output_budget(100, 0, ratio=0.2, cap=256) == 256  # a cap under the floor wins


def test_samples_are_smoothed_a_fast_outlier_is_bounded_and_a_silent_deadline_is_an_upper_bound() -> None:
    first = observe(None, Sample(1_000, 5.0, 100, 5.0))
    assert first is not None and (first.prompt_tps, first.output_tps) == (200.0, 20.0)
    cached = observe(first, Sample(1_000, 0.1, 100, 5.0))  # a cached prompt: 10,000 tok/s
    assert cached is not None and cached.prompt_tps == 200.0 * MAX_RISE
    slower = observe(first, Sample(1_000, 10.0, 100, 10.0))
    assert slower is not None and (slower.prompt_tps, slower.output_tps) == (150.0, 15.0)
    silent = observe(first, Sample(6_000, 120.0, prompt_bound=True))  # no token in 120 s
    assert silent is not None and silent.prompt_tps == 50.0 and silent.output_tps == 20.0
    assert observe(first, Sample(10, 0.001, 3, 0.001)) is first  # too small to measure anything


def test_a_pace_fits_calls_into_its_share_of_the_timeout() -> None:
    pace = Pace(120, Speed(180.0, 22.0))
    assert pace.budget_seconds == PACE_SHARE * 120
    assert pace.fits(9_000, 512) and not pace.fits(9_000, 4_096)
    room = pace.output_room(9_000)
    assert room is not None and pace.fits(9_000, room) and not pace.fits(9_000, room + 1)
    n = pace.largest_fitting(100_000, lambda fresh: (fresh, 512))
    assert pace.fits(n, 512) and not pace.fits(n + 1, 512)
    assert Pace(120).output_room(9_000) is None and Pace(120).fits(10**9, 10**9)  # nothing measured


def test_the_speed_file_survives_garbage_and_names_no_credentials(tmp_path: Path) -> None:
    memory = SpeedMemory(tmp_path)
    (tmp_path / SPEED_FILE).write_text("{not json")
    assert memory.all() == {}
    key = endpoint_key("http://user:hunter2@127.0.0.1:8080/v1/?api-key=sk-secret", "m")
    assert key == "http://127.0.0.1:8080/v1 m"
    memory.put(key, Speed(100.0, 10.0, 1, "2026-01-01T00:00:00Z"))
    text = (tmp_path / SPEED_FILE).read_text()
    assert "hunter2" not in text and "sk-secret" not in text
    assert memory.get(key) == Speed(100.0, 10.0, 1, "2026-01-01T00:00:00Z")
    doc = json.loads(text)
    doc["endpoints"]["other"] = {"prompt_tps": "fast", "output_tps": -3}
    (tmp_path / SPEED_FILE).write_text(json.dumps(doc))
    assert set(memory.all()) == {key}  # a nonsense entry is ignored, the good one kept


# --- doctor ------------------------------------------------------------------------------------------------


def test_doctor_says_what_speed_was_measured_and_what_call_it_implies(
    llm_server: StubLLMServer, tmp_path: Path
) -> None:
    import io

    import yaml
    from compactd.commands.doctor import run_doctor

    def doctor() -> tuple[int, str]:
        out = io.StringIO()
        code = run_doctor(str(config), out)
        return code, out.getvalue()

    state, sessions = tmp_path / "state", tmp_path / "sessions"
    sessions.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "state_dir": str(state),
                "sessions": {"roots": [str(sessions)]},
                "summarizer": {
                    "base_url": llm_server.base_url,
                    "model": "stub-model",
                    "timeout_seconds": 120,
                    "context_tokens": 32_768,
                },
            }
        )
    )
    code, before = doctor()
    assert code == 0, before
    assert "summarizer speed: not measured yet" in before

    key = endpoint_key(llm_server.base_url, "stub-model")
    SpeedMemory(state).put(key, Speed(180.0, 22.0, 3, "2026-05-01T10:00:00Z"))
    code, measured = doctor()
    assert code == 0, measured
    [line] = [x for x in measured.splitlines() if "summarizer speed" in x]
    assert "measured 180 prompt tok/s, 22.0 output tok/s" in line
    assert "a 120 s call fits ~" in line and "the timeout, not the 32,768-token window, is the limit" in line
    prompt = int(line.split("fits ~", 1)[1].split(" prompt", 1)[0].replace(",", ""))
    output = int(line.split("tokens + ", 1)[1].split(" output", 1)[0].replace(",", ""))
    assert Pace(120, Speed(180.0, 22.0)).fits(prompt, output)
    assert not Pace(120, Speed(180.0, 22.0)).fits(prompt + 200, output)

    SpeedMemory(state).put(key, Speed(20.0, 2.0, 4, "2026-05-02T10:00:00Z"))
    code, slow = doctor()
    assert code == 1
    assert "cannot fit even the instructions" in slow and "1 thing(s) to fix" in slow
    assert "raise summarizer.timeout_seconds to at least" in slow
