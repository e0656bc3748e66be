"""The summarizer client against a real loopback OpenAI-compatible server, through the real openai SDK."""

from __future__ import annotations

import logging
import random
import socket
import traceback
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from compactd.defaults import (
    SUMMARIZER_RETRY_ATTEMPTS,
    SUMMARIZER_RETRY_BASE_SECONDS,
    SUMMARIZER_RETRY_JITTER,
    SUMMARIZER_RETRY_MAX_SECONDS,
)
from compactd.summarize.llm import (
    KINDS,
    Completion,
    LLMError,
    RetryPolicy,
    SummarizerClient,
    estimate_prompt_tokens,
    is_overflow_text,
    retry_after_seconds,
)

from tests.support.llm_server import OVERFLOW_BODIES, Reply, StubLLMServer

pytestmark = pytest.mark.anyio

KEY = "sk-test-Zq8vN3xK7wPq"


class Sleeps:
    """An injected sleep that records the back-off schedule instead of waiting it out."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await anyio.lowlevel.checkpoint()


def make_client(base_url: str, sleeps: Sleeps | None = None, **kwargs: Any) -> SummarizerClient:
    kwargs.setdefault("model", "stub-model")
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("timeout_seconds", 30.0)
    return SummarizerClient(base_url=base_url, sleep=sleeps or Sleeps(), **kwargs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- success ----------------------------------------------------------------------------------------------


async def test_success_returns_text_usage_and_finish_reason(llm_server: StubLLMServer) -> None:
    llm_server.script(Reply.completion("## Goal\nship it", prompt_tokens=123, completion_tokens=45))
    async with make_client(llm_server.base_url) as client:
        result = await client.complete("be brief", "summarize this")
    assert isinstance(result, Completion)
    assert result.text == "## Goal\nship it"
    assert (result.finish_reason, result.prompt_tokens, result.completion_tokens) == ("stop", 123, 45)
    assert result.attempts == 1 and result.latency_s > 0 and not result.truncated
    [request] = llm_server.completions
    assert request.json["model"] == "stub-model"
    assert request.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "summarize this"},
    ]
    assert request.json["temperature"] == 0
    assert "options" not in request.json


async def test_a_query_in_base_url_is_sent_on_every_call_and_never_named(llm_server: StubLLMServer) -> None:
    """Gateways that take their key as ``?api-key=``: the SDK would append the path after the query (a 404),
    so the query goes as the client's default query, and the client names the endpoint without its values."""
    llm_server.script(Reply.completion("## Goal\nok"))
    client = make_client(f"{llm_server.base_url}?api-key=Zq81secret&tenant=a")
    async with client:
        result = await client.complete("s", "u")
    assert result.text == "## Goal\nok"
    [request] = llm_server.completions
    path, _, query = request.path.partition("?")
    assert path.endswith("/v1/chat/completions")
    assert sorted(query.split("&")) == ["api-key=Zq81secret", "tenant=a"]
    assert "Zq81secret" not in repr(client) and "api-key=***" in repr(client)


async def test_default_responder_computes_answers_from_the_prompt(llm_server: StubLLMServer) -> None:
    llm_server.responder = lambda req: Reply.completion("echo: " + req.content("user").upper())
    async with make_client(llm_server.base_url) as client:
        first = await client.complete("s", "abc")
        second = await client.complete("s", "/srv/app/main.py")
    assert (first.text, second.text) == ("echo: ABC", "echo: /SRV/APP/MAIN.PY")


async def test_usage_missing_is_none(llm_server: StubLLMServer) -> None:
    llm_server.script(Reply.completion("ok", prompt_tokens=None, completion_tokens=None))
    async with make_client(llm_server.base_url) as client:
        result = await client.complete("s", "u")
    assert (result.prompt_tokens, result.completion_tokens) == (None, None)


async def test_finish_reason_length_is_reported_not_raised(llm_server: StubLLMServer) -> None:
    llm_server.script(Reply.completion("## Goal\nhalf a summ", finish_reason="length"))
    async with make_client(llm_server.base_url) as client:
        result = await client.complete("s", "u")
    assert result.truncated and result.finish_reason == "length" and result.text.endswith("summ")


async def test_leading_think_block_is_dropped(llm_server: StubLLMServer) -> None:
    llm_server.script(Reply.completion("<think>\nlet me see\n</think>\n\n## Goal\nx"))
    async with make_client(llm_server.base_url) as client:
        result = await client.complete("s", "u")
    assert result.text == "## Goal\nx"


async def test_the_deprecated_ollama_num_ctx_is_no_longer_sent_to_v1(llm_server: StubLLMServer) -> None:
    """Ollama's /v1 ignores it, and other servers may refuse an unknown ``options``."""
    async with make_client(llm_server.base_url, ollama_num_ctx=16384) as client:
        await client.complete("s", "u")
    assert "options" not in llm_server.completions[0].json


async def test_max_tokens_is_sent_and_clamped_to_the_room_left(llm_server: StubLLMServer) -> None:
    async with make_client(llm_server.base_url, context_tokens=None, max_output_tokens=777) as client:
        await client.complete("s", "u")
        await client.complete("s", "u", max_tokens=55)
    assert [r.json["max_tokens"] for r in llm_server.completions] == [777, 55]

    llm_server.requests.clear()
    user = "word " * 400
    async with make_client(llm_server.base_url, context_tokens=2048, max_output_tokens=4096) as client:
        await client.complete("sys", user)
    assert llm_server.completions[0].json["max_tokens"] == 2048 - estimate_prompt_tokens("sys", user)


async def test_preflight_refuses_a_prompt_that_cannot_fit_without_a_request(
    llm_server: StubLLMServer,
) -> None:
    async with make_client(llm_server.base_url, context_tokens=1000) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "x" * 10_000)
    assert info.value.kind == "context_overflow" and info.value.preflight
    assert llm_server.completions == []


# --- the key ----------------------------------------------------------------------------------------------


async def test_authorization_carries_the_configured_key_never_the_environment(
    llm_server: StubLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-users-real-openai-key")
    async with make_client(llm_server.base_url, api_key="sk-local") as client:
        await client.complete("s", "u")
    assert llm_server.completions[0].headers["authorization"] == "Bearer sk-local"
    with pytest.raises(ValueError, match="api_key"):
        make_client(llm_server.base_url, api_key="")


async def test_key_never_in_logs_or_errors(
    llm_server: StubLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # A server that quotes the key back (OpenAI's 401 does, partly), after a retried 500 that does too.
    llm_server.script(
        Reply.error(500, f"upstream failed for Bearer {KEY}"),
        Reply.error(401, f"Incorrect API key provided: {KEY}"),
    )
    async with make_client(llm_server.base_url) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    err = info.value
    assert llm_server.completions[0].headers["authorization"] == f"Bearer {KEY}"
    assert err.kind == "fatal" and err.status == 401 and err.attempts == 2
    rendered = "".join(traceback.format_exception(err))
    for text in (str(err), repr(err), rendered, caplog.text, repr(vars(err))):
        assert KEY not in text
    assert "Incorrect API key provided: ***" in str(err)
    assert err.__cause__ is None and err.__suppress_context__
    assert any("retrying" in r.getMessage() for r in caplog.records)  # the retry was logged, redacted


async def test_credentials_in_the_url_are_masked() -> None:
    url = f"http://admin:pw-Secret99@127.0.0.1:{free_port()}/v1"
    async with make_client(url, retry=RetryPolicy(attempts=1)) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
        check = await client.check()
    assert "pw-Secret99" not in str(info.value) and "//***@127.0.0.1" in str(info.value)
    assert "pw-Secret99" not in repr(client) + check.base_url + " ".join(check.problems)


# --- retries ----------------------------------------------------------------------------------------------


async def test_429_then_success_takes_two_attempts(llm_server: StubLLMServer) -> None:
    sleeps = Sleeps()
    llm_server.script(Reply.rate_limited(), Reply.completion("fine"))
    async with make_client(llm_server.base_url, sleeps) as client:
        result = await client.complete("s", "u")
    assert (result.text, result.attempts, len(llm_server.completions)) == ("fine", 2, 2)
    [delay] = sleeps.delays
    assert SUMMARIZER_RETRY_BASE_SECONDS * 0.8 <= delay <= SUMMARIZER_RETRY_BASE_SECONDS * 1.2


@pytest.mark.parametrize(("header", "expected"), [("0", 0.0), ("2", 2.0)])
async def test_short_retry_after_is_honoured(llm_server: StubLLMServer, header: str, expected: float) -> None:
    sleeps = Sleeps()
    llm_server.script(Reply.rate_limited(retry_after=header), Reply.completion("fine"))
    async with make_client(llm_server.base_url, sleeps) as client:
        await client.complete("s", "u")
    assert sleeps.delays == [expected]


async def test_long_retry_after_is_not_waited_out(llm_server: StubLLMServer) -> None:
    sleeps = Sleeps()
    llm_server.script(Reply.rate_limited(retry_after="3600"))
    async with make_client(llm_server.base_url, sleeps) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    assert (info.value.kind, info.value.retry_after, info.value.attempts) == ("transient", 3600.0, 1)
    assert sleeps.delays == [] and len(llm_server.completions) == 1


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503])
async def test_retryable_statuses_give_transient_after_three_attempts(
    llm_server: StubLLMServer, status: int
) -> None:
    sleeps = Sleeps()
    llm_server.script(*[Reply.error(status, "busy")] * 5)
    async with make_client(llm_server.base_url, sleeps) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    assert (info.value.kind, info.value.status, info.value.attempts) == ("transient", status, 3)
    assert len(llm_server.completions) == SUMMARIZER_RETRY_ATTEMPTS == 3
    assert len(sleeps.delays) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_4xx_are_fatal_at_once(llm_server: StubLLMServer, status: int) -> None:
    sleeps = Sleeps()
    llm_server.script(Reply.error(status, "model 'nope' not found"))
    async with make_client(llm_server.base_url, sleeps) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    assert (info.value.kind, info.value.status, info.value.attempts) == ("fatal", status, 1)
    assert "model 'nope' not found" in str(info.value)
    assert len(llm_server.completions) == 1 and sleeps.delays == []


@pytest.mark.parametrize("server", sorted(OVERFLOW_BODIES))
async def test_each_servers_overflow_body_is_context_overflow_with_one_request(
    llm_server: StubLLMServer, server: str
) -> None:
    sleeps = Sleeps()
    llm_server.script(Reply.overflow(server), Reply.completion("must not be reached"))
    async with make_client(llm_server.base_url, sleeps) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    assert info.value.kind == "context_overflow" and not info.value.preflight
    assert len(llm_server.completions) == 1 and sleeps.delays == []


async def test_rate_limit_text_about_tokens_is_not_overflow(llm_server: StubLLMServer) -> None:
    llm_server.script(
        Reply.error(
            400, "Request too large: Limit 30000 tokens per min (TPM), requested 42000; reduce the length"
        ),
    )
    async with make_client(llm_server.base_url) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    assert info.value.kind == "fatal"


async def test_connection_refused_is_transient_after_three_attempts() -> None:
    sleeps = Sleeps()
    async with make_client(f"http://127.0.0.1:{free_port()}/v1", sleeps) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    assert (info.value.kind, info.value.attempts, info.value.status) == ("transient", 3, None)
    assert "cannot reach" in str(info.value)
    assert len(sleeps.delays) == 2


def test_retry_schedule_doubles_from_500_ms_to_a_5_s_cap_with_20_percent_jitter() -> None:
    policy = RetryPolicy(attempts=8)
    assert (policy.base_seconds, policy.max_seconds, policy.jitter) == (
        SUMMARIZER_RETRY_BASE_SECONDS,
        SUMMARIZER_RETRY_MAX_SECONDS,
        SUMMARIZER_RETRY_JITTER,
    )
    assert [policy.nominal_delay(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]

    class Extreme(random.Random):
        def __init__(self, pick: int) -> None:
            super().__init__()
            self.pick = pick

        def uniform(self, a: float, b: float) -> float:
            return (a, b)[self.pick]

    assert [policy.delay(n, Extreme(0)) for n in (1, 2, 5)] == pytest.approx([0.4, 0.8, 4.0])
    assert [policy.delay(n, Extreme(1)) for n in (1, 2, 5)] == pytest.approx([0.6, 1.2, 6.0])
    rng = random.Random(7)
    for n in range(1, 8):
        for _ in range(200):
            assert 0.8 * policy.nominal_delay(n) <= policy.delay(n, rng) <= 1.2 * policy.nominal_delay(n)


async def test_the_client_sleeps_the_computed_schedule(llm_server: StubLLMServer) -> None:
    sleeps = Sleeps()
    llm_server.script(*[Reply.error(503, "overloaded")] * 6)
    policy = RetryPolicy(attempts=6)
    async with make_client(llm_server.base_url, sleeps, retry=policy, rng=random.Random(42)) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    assert info.value.attempts == 6 and len(llm_server.completions) == 6
    expected_rng = random.Random(42)
    assert sleeps.delays == [policy.delay(n, expected_rng) for n in range(1, 6)]
    for n, delay in enumerate(sleeps.delays, start=1):
        assert abs(delay - policy.nominal_delay(n)) <= 0.2 * policy.nominal_delay(n)


# --- timeouts, cancellation, concurrency --------------------------------------------------------------------


async def test_timeout_is_not_retried(llm_server: StubLLMServer) -> None:
    sleeps = Sleeps()
    llm_server.script(Reply.hung())
    async with make_client(llm_server.base_url, sleeps, timeout_seconds=0.2) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    assert (info.value.kind, info.value.attempts) == ("timeout", 1)
    assert len(llm_server.completions) == 1 and sleeps.delays == []


async def test_cancellation_stops_a_hung_call_promptly(llm_server: StubLLMServer) -> None:
    llm_server.script(Reply.hung())
    outcome: list[object] = []
    async with make_client(llm_server.base_url, timeout_seconds=120) as client:
        with anyio.fail_after(10):  # a call that ignored the cancel would run into the 120 s read timeout
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    with anyio.CancelScope() as scope:
                        tg.start_soon(watch, scope)
                        outcome.append(await client.complete("s", "u"))
                    outcome.append(scope.cancelled_caught)

                async def watch(scope: anyio.CancelScope) -> None:
                    await anyio.to_thread.run_sync(llm_server.wait_for_requests, 1)
                    scope.cancel()

                tg.start_soon(call)
        assert outcome == [True]
        assert len(llm_server.completions) == 1
        assert client.limiter.borrowed_tokens == 0
        # The client is still usable after a cancelled call.
        llm_server.script(Reply.completion("next"))
        assert (await client.complete("s", "u")).text == "next"


async def test_concurrency_is_limited_and_the_limiter_can_be_shared(llm_server: StubLLMServer) -> None:
    llm_server.script(Reply.hung(), Reply.hung(), Reply.hung())
    shared = anyio.CapacityLimiter(1)
    results: list[str] = []
    first = make_client(llm_server.base_url, limiter=shared)
    second = make_client(llm_server.base_url, limiter=shared)
    async with first, second:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:

                async def call(client: SummarizerClient) -> None:
                    results.append((await client.complete("s", "u")).text)

                tg.start_soon(call, first)
                tg.start_soon(call, second)
                tg.start_soon(call, second)
                await anyio.to_thread.run_sync(llm_server.wait_for_requests, 1)
                while shared.statistics().tasks_waiting < 2:
                    await anyio.sleep(0)
                assert len(llm_server.completions) == 1  # two calls wait for the one token
                llm_server.release()
    assert results == ["released"] * 3 and len(llm_server.completions) == 3
    assert make_client(llm_server.base_url, max_concurrency=3).limiter.total_tokens == 3


# --- bad bodies -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "kind", "says"),
    [
        (Reply.empty(), "empty", "empty body"),
        (Reply.garbage(), "fatal", "not JSON"),
        (Reply.garbage(content_type="text/html"), "fatal", "not a chat completion"),
        (Reply(payload={"unexpected": True}), "fatal", "without choices"),
        (Reply(payload={"choices": []}), "empty", "without choices"),
        (Reply.completion(""), "empty", "no text"),
        (Reply.completion(None), "empty", "no text"),
        (Reply.completion("  \n", finish_reason="length"), "length", "output budget"),
    ],
)
async def test_empty_and_garbage_bodies_give_clear_errors(
    llm_server: StubLLMServer, reply: Reply, kind: str, says: str
) -> None:
    sleeps = Sleeps()
    llm_server.script(reply)
    async with make_client(llm_server.base_url, sleeps) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    assert info.value.kind == kind and kind in KINDS
    assert says in str(info.value) and llm_server.base_url in str(info.value)
    assert len(llm_server.completions) == 1 and sleeps.delays == []


# --- classification tables --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
        "request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it",
        "input (600 tokens) is larger than the max context size (512 tokens)",
        "the prompt is longer than the context length currently available to the model",
        "the input length exceeds the context length",
        "'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum context length",
        "prompt is too long: 210000 tokens > 200000 maximum",
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096",
        "上下文过长",
        '{"error":{"code":400,"type":"exceed_context_size_error","n_ctx":4096}}',
    ],
)
def test_overflow_texts(text: str) -> None:
    assert is_overflow_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "Rate limit reached for gpt-4 on tokens per min (TPM): Limit 30000, Requested 42000",
        "Too many requests: context length queue full",
        "model 'llama3' not found, try pulling it first",
        "invalid temperature",
        "You exceeded your current quota",
    ],
)
def test_not_overflow_texts(text: str) -> None:
    assert not is_overflow_text(text)


def test_retry_after_parsing() -> None:
    assert retry_after_seconds({"Retry-After": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "-5"}) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_seconds({}) is None


def test_prompt_estimate_is_conservative_for_ascii_and_cjk() -> None:
    assert estimate_prompt_tokens("", "a" * 350) >= 100
    assert estimate_prompt_tokens("", "字" * 100) >= 100


# --- models and doctor ------------------------------------------------------------------------------------


async def test_list_models_and_check(llm_server: StubLLMServer) -> None:
    llm_server.models = ["stub-model", "other"]
    async with make_client(llm_server.base_url) as client:
        assert await client.list_models() == ["stub-model", "other"]
        check = await client.check()
    assert check.ok and check.reachable and check.model_present and check.server == "openai-compatible"
    assert llm_server.requests[0].headers["authorization"] == f"Bearer {KEY}"


async def test_check_reports_a_missing_model(llm_server: StubLLMServer) -> None:
    llm_server.models = ["llama3.2:latest"]
    async with make_client(llm_server.base_url, model="qwen3") as client:
        check = await client.check()
    assert check.reachable and check.model_present is False and not check.ok
    assert "qwen3" in check.problems[0] and "llama3.2:latest" in check.problems[0]


async def test_check_reports_an_unreachable_endpoint() -> None:
    async with make_client(f"http://127.0.0.1:{free_port()}/v1") as client:
        check = await client.check()
    assert not check.reachable and not check.ok and "cannot reach" in check.problems[0]


async def test_check_flags_ollamas_small_context(llm_server: StubLLMServer) -> None:
    llm_server.models = ["llama3.2:latest"]
    llm_server.ollama = {"show": {"parameters": "stop <|eot_id|>\nnum_ctx                        4096"}}
    async with make_client(
        llm_server.base_url, model="llama3.2", context_tokens=32_768, api="openai"
    ) as client:
        check = await client.check()
    assert check.server == "ollama" and check.model_present and check.server_context_tokens == 4096
    assert check.api == "openai" and check.context_tokens == 4096
    assert not check.ok and "OLLAMA_CONTEXT_LENGTH=32768" in check.problems[0]
    show = [r for r in llm_server.requests if r.path == "/api/show"]
    assert show[0].json == {"model": "llama3.2"} and "authorization" not in show[0].headers


async def test_check_reads_ollamas_loaded_context_and_accepts_a_large_one(llm_server: StubLLMServer) -> None:
    llm_server.models = ["qwen3:8b"]
    llm_server.ollama = {
        "show": {"parameters": ""},
        "ps": {"models": [{"name": "qwen3:8b", "context_length": 65536}]},
    }
    async with make_client(llm_server.base_url, model="qwen3:8b", context_tokens=32_768) as client:
        check = await client.check()
    assert check.ok and check.server == "ollama" and check.server_context_tokens == 65536


# --- bounds: one deadline per call, a cap on the answer, clean text (issue 9 item 5) -----------------------

FIFTY_MB = 50 * 1024 * 1024


async def test_the_answer_is_streamed_and_its_deltas_accumulated(llm_server: StubLLMServer) -> None:
    text = "## Goal\n" + "a long answer in many small deltas " * 20
    llm_server.script(
        Reply.completion(text, prompt_tokens=321, completion_tokens=54),
        Reply.completion("a server that ignores stream", stream=False),
    )
    async with make_client(llm_server.base_url) as client:
        streamed = await client.complete("s", "u")
        plain = await client.complete("s", "u")
    request = llm_server.completions[0]
    assert request.json["stream"] is True and request.json["stream_options"] == {"include_usage": True}
    assert streamed.text == text.strip() and streamed.finish_reason == "stop"
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (321, 54)  # from the final usage chunk
    assert plain.text == "a server that ignores stream"


@pytest.mark.timeout(60)  # the bound: without a deadline on the whole answer this call never ends
@pytest.mark.parametrize(
    "stream", [pytest.param(None, id="events"), pytest.param(False, id="json", marks=pytest.mark.slow)]
)
async def test_a_trickling_server_is_cut_off_at_the_deadline(
    llm_server: StubLLMServer, stream: bool | None
) -> None:
    sleeps = Sleeps()
    llm_server.script(Reply.trickling("the first words", interval=0.5, stream=stream))
    async with make_client(llm_server.base_url, sleeps, timeout_seconds=2) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
        gone = await anyio.to_thread.run_sync(llm_server.wait_for_client_gone)
    err = info.value
    assert (err.kind, err.attempts) == ("timeout", 1) and sleeps.delays == []
    assert gone.client_gone.is_set() and not gone.finished  # the server saw the client hang up
    if stream is None:
        assert err.partial_text == "the first words"  # what arrived in time is kept on the error
    assert len(llm_server.completions) == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (Reply.huge(FIFTY_MB), "too_large"),
        (Reply.huge(FIFTY_MB, one_event=True), "too_large"),
        (Reply.huge(FIFTY_MB, stream=False), "too_large"),
        (Reply.huge(FIFTY_MB, stream=False, status=500), "too_large"),
    ],
    ids=["many-events", "one-event", "json", "error-body"],
)
async def test_a_huge_answer_is_cut_off_at_the_cap(
    llm_server: StubLLMServer, reply: Reply, kind: str
) -> None:
    import tracemalloc

    sleeps = Sleeps()
    llm_server.script(reply, reply, reply)
    tracemalloc.start()
    try:
        async with make_client(llm_server.base_url, sleeps, max_output_tokens=4096) as client:
            with pytest.raises(LLMError) as info:
                await client.complete("s", "u")
            gone = await anyio.to_thread.run_sync(llm_server.wait_for_client_gone)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = info.value
    assert err.kind == kind and err.attempts == 1 and sleeps.delays == []  # never asked for again
    assert gone.sent < FIFTY_MB and not gone.finished
    assert peak < 32 * 1024 * 1024, f"{peak / 2**20:.0f} MiB held for a 50 MiB answer"
    assert len(err.partial_text) <= 16 * 4096  # what was kept is within the cap


async def test_control_characters_are_stripped_from_the_answer(llm_server: StubLLMServer) -> None:
    llm_server.script(Reply.completion("## Goal\r\nred \x1b[31mALERT\x1b[0m\x00 done\x07\tok\x9b2J"))
    async with make_client(llm_server.base_url) as client:
        result = await client.complete("s", "u")
    assert result.text == "## Goal\nred [31mALERT[0m done\tok2J"


async def test_an_error_event_in_the_stream_is_classified(llm_server: StubLLMServer) -> None:
    events = (
        b'data: {"choices":[{"index":0,"delta":{"content":"part"}}]}\n\n'
        b'data: {"error":{"message":"request (9000 tokens) exceeds the available context size (8192 tokens)"}}\n\n'
    )
    llm_server.script(Reply(body=events, content_type="text/event-stream"))
    async with make_client(llm_server.base_url) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("s", "u")
    assert info.value.kind == "context_overflow" and info.value.partial_text == "part"


async def test_a_stream_that_ends_without_an_event_is_asked_again_without_streaming(
    llm_server: StubLLMServer,
) -> None:
    """llama-cpp-python answers a streamed prompt over its context with a 200 and an empty body; without
    streaming it says why, and the overflow is split instead of failing as an empty answer."""

    def answer(request: Any) -> Reply:
        if request.streaming:
            return Reply(body=b"", content_type="text/event-stream")
        return Reply.overflow("llama_cpp_python")

    llm_server.responder = answer
    async with make_client(llm_server.base_url) as client:
        with pytest.raises(LLMError) as info:
            await client.complete("Summarize.", "alpha " * 100, max_tokens=16)
    assert info.value.kind == "context_overflow" and info.value.status == 400
    first, second = llm_server.completions
    assert first.streaming and not second.streaming and "stream_options" not in second.json


# --- the pure part ------------------------------------------------------------------------------------------

_SDK_ROOTS = ("openai", "pydantic", "httpx", "httpx2")
# What was loaded, printed as the process ends: at its exit handlers, or when it ends at once (``os._exit``, as
# ``cli.run_as_process`` ends a dry run), whichever comes.
_PROBE = """
import atexit, os, runpy, sys
ROOTS = {roots!r}
def report():
    print("LOADED=" + ",".join(sorted(m for m in sys.modules if m.split(".")[0] in ROOTS)), file=sys.stderr)
atexit.register(report)
_exit = os._exit
def exit_now(code):
    report()
    sys.stderr.flush()
    _exit(code)
os._exit = exit_now
sys.argv = ["compactd", *sys.argv[1:]]
runpy.run_module("compactd", run_name="__main__")
"""


@pytest.mark.parametrize(
    "dry_run",
    [pytest.param(True, id="once-dry-run"), pytest.param(False, id="once-digest", marks=pytest.mark.slow)],
)
def test_no_summarizer_never_loads_the_sdk(tmp_path: Any, dry_run: bool) -> None:
    """With no summarizer configured, ``once`` (dry run, or a real model-free compaction with its flush
    check) loads neither openai nor pydantic nor httpx: the engine and the flush need only the pure part. A dry
    run writes no state, so it does not load prometheus_client (only the metrics file needs it) either."""
    import subprocess
    import sys
    from pathlib import Path

    from bench.corpus import session_bytes

    sessions = tmp_path / "sessions"
    sessions.mkdir()
    # A generated coding session (the real fixtures are not on every machine), well over a 20,000-token window.
    (sessions / "a.jsonl").write_bytes(session_bytes(600_000, seed=17)[0])
    config = tmp_path / "compactd.yaml"
    config.write_text(
        f"sessions: {{roots: [{sessions}], idle_seconds: 0}}\n"
        "agents: {defaults: {context_tokens: 20000}}\n"
        f"state_dir: {tmp_path / 'state'}\n"
    )
    args = ["once", "--config", str(config), *(["--dry-run"] if dry_run else [])]
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _PROBE.format(roots=(*_SDK_ROOTS, *(["prometheus_client"] if dry_run else []))),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    assert "a.jsonl" in done.stdout  # the session was over its threshold: the decision (and the work) ran
    loaded = [line for line in done.stderr.splitlines() if line.startswith("LOADED=")]
    assert loaded == ["LOADED="], done.stderr[-2000:]


def test_classify_without_the_sdk_loaded() -> None:
    """The pure module classifies our own errors and a bad JSON body without importing the SDK."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from compactd.summarize.outcomes import LLMError, classify, is_overflow_text\n"
        "assert classify(LLMError('timeout', 'x')) == 'timeout'\n"
        "assert classify(json.JSONDecodeError('x', '', 0)) == 'empty'\n"
        "assert is_overflow_text('This model maximum context length is 8192 tokens')\n"
        "assert not any(m.split('.')[0] in ('openai', 'httpx2', 'pydantic') for m in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.dumps(done.stdout) == '""'
