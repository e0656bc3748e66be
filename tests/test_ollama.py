"""Ollama and llama.cpp's server as they really behave (issue 21): compactd learns the context a call will really
get, talks to Ollama natively with ``num_ctx`` and ``keep_alive``, never keeps an answer made from a cut prompt,
and keeps a model's load time out of its speed memory.

Against :mod:`tests.support.ollama_server` (Ollama's documented behaviour, each behaviour with its sentence of
the documentation) and the OpenAI-compatible stub serving llama.cpp's ``/props``; the engine on a real pi
session; the speed file in a real state directory.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from compactd.commands.doctor import check_summarizer
from compactd.config import Config, ConfigError
from compactd.reading import read_transcript
from compactd.summarize._server import ServerInfo, llamacpp_info, ollama_info, plan_calls
from compactd.summarize.engine import CompactionEngine, EngineResult
from compactd.summarize.llm import LLMError, SummarizerClient, estimate_prompt_tokens
from compactd.summarize.pace import SpeedMemory, endpoint_key, prompt_was_cut

from tests.support.llm_server import llamacpp_props
from tests.support.ollama_server import Model, OllamaServer, render
from tests.test_pace import settings

if TYPE_CHECKING:
    from tests.support.llm_server import StubLLMServer

KEY = "sk-test-ollama-Q8v1Zr"
MODEL = "qwen2.5:7b"
FIXTURE = Path("/work/shared/fixtures/real/pi-large-session.v3.jsonl")


async def _no_sleep(_: float) -> None:
    return None


def client_for(base_url: str, state: Path | None = None, **kw: Any) -> SummarizerClient:
    kw.setdefault("timeout_seconds", 60)
    kw.setdefault("context_tokens", 32_768)
    if state is not None:
        kw["speed_memory"] = SpeedMemory(state)
    return SummarizerClient(base_url=base_url, model=MODEL, api_key=KEY, sleep=_no_sleep, **kw)


@pytest.fixture
def ollama_server() -> Iterator[OllamaServer]:
    server = OllamaServer().start()
    try:
        yield server
    finally:
        server.stop()
    assert not server.handler_errors


@pytest.fixture
def session(tmp_path: Path) -> Path:
    if not FIXTURE.exists():
        pytest.skip(f"{FIXTURE} is not here")
    target = tmp_path / FIXTURE.name
    shutil.copyfile(FIXTURE, target)
    return target


def compact(path: Path, client: SummarizerClient) -> EngineResult:
    async def go() -> EngineResult:
        async with client:
            result = await CompactionEngine(
                settings(keep_recent_turns=3, summarizer_window=client.configured_context_tokens or 32_768),
                client,
            ).compact(read_transcript(path))
        assert result is not None
        return result

    return anyio.run(go)


def ask(client: SummarizerClient, user: str = "u", **kw: Any) -> Any:
    async def go() -> Any:
        async with client:
            return await client.complete("Summarize.", user, **kw)

    return anyio.run(go)


# --- what the servers say, parsed ----------------------------------------------------------------------------


def test_ollamas_show_and_ps_give_the_models_context_the_modelfiles_and_the_loaded_one() -> None:
    # The fields of docs/api.md's /api/show example, and /api/ps's context_length.
    show = {
        "parameters": 'num_keep                       24\nstop                           "<|eot_id|>"',
        "model_info": {"general.architecture": "llama", "llama.context_length": 8192},
    }
    info = ollama_info({"version": "0.5.1"}, show, {"models": []}, "llama3.2")
    assert (info.kind, info.version, info.model_context, info.modelfile_context) == (
        "ollama",
        "0.5.1",
        8192,
        None,
    )
    assert info.openai_context() == (4096, "Ollama's default below 24 GiB of VRAM (model not loaded)")
    show["parameters"] = "num_ctx                        16384\n" + str(show["parameters"])
    ps = {"models": [{"name": "llama3.2:latest", "context_length": 32768}]}
    info = ollama_info({"version": "0.5.1"}, show, ps, "llama3.2")
    assert (info.modelfile_context, info.loaded_context) == (16384, 32768)
    assert info.openai_context() == (8192, "the model's trained context_length (/api/show)")  # capped


def test_llamacpp_props_give_one_slots_context() -> None:
    info = llamacpp_info(llamacpp_props(16384, 4))
    assert info is not None and (info.slot_context, info.slots) == (4096, 4)
    assert info.openai_context() == (4096, "llama.cpp's /props: n_ctx per slot (4 slots)")
    unified = llamacpp_info(llamacpp_props(16384, 4, kv_unified=True))
    assert unified is not None and unified.slot_context == 16384
    assert llamacpp_info({"version": "0.6"}) is None


@pytest.mark.parametrize(
    ("info", "api", "expected"),
    [
        # Ollama, native: num_ctx = context_tokens, at most the model's; the loaded one when large enough.
        (ServerInfo("ollama", model_context=131072), "auto", ("ollama", 32768, 32768)),
        (ServerInfo("ollama", model_context=8192), "auto", ("ollama", 8192, 8192)),
        (ServerInfo("ollama", model_context=131072, loaded_context=65536), "auto", ("ollama", 32768, 65536)),
        (ServerInfo("ollama", model_context=131072, loaded_context=4096), "auto", ("ollama", 32768, 32768)),
        # Ollama through /v1: whatever the server gives a request without options.
        (ServerInfo("ollama", model_context=131072), "openai", ("openai", 4096, None)),
        (
            ServerInfo("ollama", model_context=131072, modelfile_context=65536),
            "openai",
            ("openai", 32768, None),
        ),
        (ServerInfo("llama.cpp", slot_context=8192, slots=4), "auto", ("openai", 8192, None)),
        (ServerInfo(), "auto", ("openai", 32768, None)),
        (ServerInfo(), "ollama", ("ollama", 32768, 32768)),
    ],
)
def test_the_plan_sizes_calls_to_what_the_server_gives(
    info: ServerInfo, api: str, expected: tuple[str, int, int | None]
) -> None:
    plan = plan_calls(info, api=api, configured=32768)
    assert (plan.api, plan.context, plan.num_ctx) == expected


def test_a_cut_is_a_report_well_below_the_estimate() -> None:
    assert prompt_was_cut(2049, 7000) and prompt_was_cut(4096, 11_000)
    assert not prompt_was_cut(5600, 7000)  # prose at 4.4 chars a token against the 3.5 of the estimate
    assert not prompt_was_cut(11, 200)  # too small to judge


# --- the native path ---------------------------------------------------------------------------------------


def test_on_ollama_calls_go_to_api_chat_with_num_ctx_and_keep_alive(
    ollama_server: OllamaServer, tmp_path: Path
) -> None:
    ollama_server.add(Model(MODEL, arch="qwen2", context_length=32768))
    client = client_for(ollama_server.base_url, tmp_path, keep_alive="30m")
    answer = ask(client, "x" * 40_000)
    (call,) = ollama_server.calls
    assert call.path == "/api/chat" and not call.cut
    assert call.body["options"]["num_ctx"] == 32768 and call.body["keep_alive"] == "30m"
    assert call.body["stream"] is True and call.body["options"]["num_predict"] > 0
    assert answer.prompt_tokens == call.prompt_tokens and answer.text.startswith("## Decisions")
    assert client.context_tokens == 32768 and client.pace().window == 32768
    # Ollama has no keys: the native API never gets one.
    native = [h for _, path, h in ollama_server.requests if path.startswith("/api/")]
    assert native and all("authorization" not in h for h in native)


def test_the_model_already_loaded_with_a_large_enough_context_is_not_reloaded(
    ollama_server: OllamaServer,
) -> None:
    ollama_server.add(Model(MODEL, context_length=131_072))
    ollama_server.load_seconds = 0.2
    ask(client_for(ollama_server.base_url, context_tokens=8192))
    ask(client_for(ollama_server.base_url, context_tokens=16384))  # 8192 is loaded: too small, reloaded
    ask(client_for(ollama_server.base_url, context_tokens=8192))  # 16384 is loaded: kept
    assert [(c.num_ctx, c.loaded) for c in ollama_server.calls] == [
        (8192, True),
        (16384, True),
        (16384, False),
    ]


def test_the_speed_memory_keeps_a_cold_load_out_of_the_prompt_rate(
    ollama_server: OllamaServer, tmp_path: Path
) -> None:
    ollama_server.add(Model(MODEL))
    ollama_server.load_seconds, ollama_server.prompt_tps = 1.0, 20_000.0
    prompt = "word " * 8_000  # 10,000 tokens: 0.5 s of prompt, after a 1 s load
    native = client_for(ollama_server.base_url, tmp_path / "native")
    ask(native, prompt)
    assert ollama_server.calls[-1].loaded
    assert native.speed is not None and native.speed.prompt_tps is not None
    # From the final chunk's prompt_eval_duration: the server's own 20,000 tokens/s, the load left out.
    assert native.speed.prompt_tps == pytest.approx(20_000, rel=0.05)
    # Through /v1 the time to the first token is all there is: a cold call's (the model not loaded, /api/ps
    # says) teaches no prompt rate; a warm one's does, without any load in it.
    ollama_server.expire()
    ollama_server.context_length_env = 16384  # room for the prompt on /v1 too
    v1 = client_for(ollama_server.base_url, tmp_path / "v1", api="openai", context_tokens=None)

    async def twice() -> list[Any]:
        speeds = []
        async with v1:
            for _ in range(2):
                await v1.complete("Summarize.", prompt)
                speeds.append(v1.speed)
        return speeds

    cold, warm = anyio.run(twice)
    assert [c.loaded for c in ollama_server.calls[-2:]] == [True, False]
    assert cold is None or cold.prompt_tps is None  # (the short answer is too quick to time)
    # 10,000 tokens in 0.5 s: ~20,000 tokens/s; with the 1 s load counted it would be under 7,000.
    assert warm is not None and warm.prompt_tps is not None and warm.prompt_tps > 12_000


# --- truncation: detected on every endpoint, never committed -------------------------------------------------


def test_a_cut_prompt_on_v1_is_an_overflow_and_lowers_the_context(
    ollama_server: OllamaServer, tmp_path: Path
) -> None:
    # OLLAMA_CONTEXT_LENGTH is set on the server, where no API shows it: detection assumes the default.
    ollama_server.add(Model(MODEL))
    ollama_server.context_length_env = 2048
    client = client_for(ollama_server.base_url, tmp_path, api="openai")
    user = "identifier_" + "y" * 13_000
    with pytest.raises(LLMError) as caught:
        ask(client, user, max_tokens=256)
    (call,) = ollama_server.calls
    assert call.cut and "identifier_" not in call.kept_text  # what Ollama did: the front is gone
    err = caught.value
    assert err.kind == "context_overflow" and err.cut and "cut the prompt" in err.message
    assert client.context_tokens == call.kept_tokens < 4096
    cut = SpeedMemory(tmp_path).cut(endpoint_key(client.base_url, MODEL))
    assert cut is not None and cut["reported"] == call.kept_tokens and cut["count"] == 1
    assert cut["sent"] == estimate_prompt_tokens("Summarize.", user)


def test_a_default_context_model_gets_chunks_that_fit_on_both_apis(
    ollama_server: OllamaServer, session: Path
) -> None:
    ollama_server.add(Model(MODEL, context_length=32768))
    for api in ("auto", "openai"):
        ollama_server.calls.clear()
        ollama_server.expire()
        result = compact(session, client_for(ollama_server.base_url, api=api))
        assert result.level == "llm"
        assert ollama_server.calls and not [c for c in ollama_server.calls if c.cut]
        contexts = {c.num_ctx for c in ollama_server.calls}
        assert contexts == ({32768} if api == "auto" else {4096})
        assert max(c.prompt_tokens for c in ollama_server.calls) < min(contexts)


def test_answers_from_cut_prompts_are_dropped_and_the_span_re_chunked(
    ollama_server: OllamaServer, session: Path, tmp_path: Path
) -> None:
    # /api/ps says 32768 (the agent loaded the model so); /v1 requests get OLLAMA_CONTEXT_LENGTH, 8192.
    ollama_server.add(Model(MODEL, context_length=32768))
    ollama_server.context_length_env = 8192
    ollama_server.output_tps = 20_000.0
    ask(client_for(ollama_server.base_url))
    assert ollama_server.ps()["models"][0]["context_length"] == 32768
    ollama_server.calls.clear()
    client = client_for(ollama_server.base_url, tmp_path, api="openai")
    result = compact(session, client)
    cut = [c for c in ollama_server.calls if c.cut]
    assert cut, "the scenario must make the server cut a prompt"
    assert result.level == "llm"
    for call in cut:  # never an answer made from a cut prompt: not in the summary, not in a later prompt
        marker = call.answer.split("(call ")[1].split(")")[0]
        assert marker not in result.summary
        assert not [c for c in ollama_server.calls if marker in render(c.body["messages"])]
    uncut = [c for c in ollama_server.calls if not c.cut]
    assert uncut and all(c.num_ctx == 8192 for c in uncut)
    assert client.context_tokens is not None and client.context_tokens <= 8192
    assert SpeedMemory(tmp_path).cut(endpoint_key(client.base_url, MODEL)) is not None


# --- llama.cpp's slots, and doctor ---------------------------------------------------------------------------


def test_llamacpp_slots_size_the_calls_and_doctor_says_how_to_fix_it(
    llm_server: StubLLMServer, tmp_path: Path
) -> None:
    llm_server.props = llamacpp_props(16384, 4)
    llm_server.models = [MODEL]
    client = client_for(llm_server.base_url)
    ask(client)
    assert client.plan is not None and client.plan.api == "openai" and client.context_tokens == 4096
    assert [r.path for r in llm_server.requests][:2] == ["/api/version", "/props"]
    assert llm_server.requests[1].headers["authorization"] == f"Bearer {KEY}"  # llama-server --api-key
    out = doctor(llm_server.base_url, tmp_path)
    assert "llama.cpp server b6000-stub: calls go to /v1/chat/completions with a 4,096-token context" in out
    assert "FIX" in out and "-c 131072 for its 4 slot(s)" in out


def test_doctor_on_ollama_shows_the_native_context_and_a_noted_cut(
    ollama_server: OllamaServer, tmp_path: Path
) -> None:
    ollama_server.add(Model(MODEL, context_length=131072))
    SpeedMemory(tmp_path).note_cut(endpoint_key(ollama_server.base_url, MODEL), reported=2049, sent=9000)
    out = doctor(ollama_server.base_url, tmp_path)
    assert "ollama server 0.13.5: calls go to /api/chat with a 32,768-token context" in out
    assert "options.num_ctx 32768 sent with every call" in out
    assert "ok    summarizer" in out and "FIX" not in out
    assert (
        "WARN  summarizer: the endpoint cut 1 prompt(s)" in out and "2049 prompt tokens of about 9000" in out
    )
    out = doctor(ollama_server.base_url, tmp_path, api="openai")
    assert "FIX   summarizer:" in out and "Set summarizer.api to auto" in out


def test_the_deprecated_num_ctx_is_named_by_doctor_and_caps_the_native_num_ctx(
    ollama_server: OllamaServer, tmp_path: Path
) -> None:
    ollama_server.add(Model(MODEL, context_length=131072))
    out = doctor(ollama_server.base_url, tmp_path, ollama_num_ctx=16384)
    assert "summarizer.ollama_num_ctx is deprecated" in out
    ask(client_for(ollama_server.base_url, ollama_num_ctx=16384))
    assert ollama_server.calls[-1].body["options"]["num_ctx"] == 16384


def doctor(base_url: str, state: Path, **summarizer: Any) -> str:
    config = Config.from_mapping(
        {
            "state_dir": str(state),
            "summarizer": {"base_url": base_url, "model": MODEL, "context_tokens": 32768, **summarizer},
        }
    )
    out = io.StringIO()
    check_summarizer(config, out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("value", "expected"), [("10m", "10m"), ("1h30m", "1h30m"), (-1, -1), ("0", "0"), (None, None)]
)
def test_keep_alive_takes_ollamas_durations(value: object, expected: object) -> None:
    config = Config.from_mapping({"summarizer": {"keep_alive": value}})
    assert config.summarizer.keep_alive == expected and config.summarizer.api == "auto"


@pytest.mark.parametrize(
    ("summarizer", "key"),
    [({"keep_alive": "ten minutes"}, "summarizer.keep_alive"), ({"api": "vllm"}, "summarizer.api")],
)
def test_bad_api_and_keep_alive_are_refused_with_their_key(summarizer: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"summarizer": summarizer})
    assert caught.value.key == key
