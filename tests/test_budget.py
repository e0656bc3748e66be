"""Budget and route: every constant and boundary of design.md §§6.2-6.4, each route on real transcripts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from compactd import defaults as d
from compactd.config import Config
from compactd.core.budget import (
    TRUNCATE_ONLY_SLACK_CHARS,
    Budget,
    budget_for_window,
    compute_budget,
    guard,
    min_prompt_budget,
    resolve_window,
    tool_result_cap,
    tool_result_max_chars,
)
from compactd.core.decision import choose_route, flush_due
from compactd.core.tokens import MAX_TOKENS
from hypothesis import given, settings
from hypothesis import strategies as st

ENV = {"HOME": "/home/tester"}
DEFAULTS = Config.defaults(ENV)
REAL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"


def config(data: dict[str, Any]) -> Config:
    return Config.from_mapping(data, env=ENV)


def models(*entries: tuple[str, str, int]) -> dict[str, Any]:
    providers: dict[str, Any] = {}
    for provider, model, window in entries:
        providers.setdefault(provider, {"models": {}})["models"][model] = {"context_tokens": window}
    return {"models": {"providers": providers}}


def budget(window: int, estimated: int = 0, reducible: int = 0, cfg: Config = DEFAULTS) -> Budget:
    return budget_for_window(cfg, window, "default", estimated_tokens=estimated, reducible_chars=reducible)


# --- constants ----------------------------------------------------------------------------------------------


def test_constants_are_the_seeds() -> None:
    assert (d.DEFAULT_CONTEXT_TOKENS, d.GUARD_HARD_MIN_TOKENS, d.GUARD_WARN_BELOW_TOKENS) == (
        200_000,
        16_000,
        32_000,
    )
    assert (d.RESERVE_TOKENS, d.MIN_PROMPT_BUDGET_TOKENS, d.MIN_PROMPT_BUDGET_RATIO) == (20_000, 8_000, 0.5)
    assert (d.SAFETY_MARGIN, d.CHARS_PER_TOKEN, TRUNCATE_ONLY_SLACK_CHARS) == (1.2, 4, 2_048)
    assert (d.TOOL_RESULT_CONTEXT_SHARE, d.TOOL_RESULT_MAX_CHARS) == (0.3, 16_000)
    assert d.MEMORY_FLUSH_SOFT_THRESHOLD_TOKENS == 4_000


# --- window resolution --------------------------------------------------------------------------------------

WINDOWS: list[tuple[str, dict[str, Any], str | None, str | None, int, str]] = [
    ("nothing-known", {}, "anthropic", "claude", 200_000, "default"),
    ("no-model", {}, None, None, 200_000, "default"),
    ("configured", models(("ollama", "qwen", 16_384)), "ollama", "qwen", 16_384, "models_config"),
    (
        "configured-large",
        models(("google", "gemini", 1_048_576)),
        "google",
        "gemini",
        1_048_576,
        "models_config",
    ),
    ("other-model", models(("ollama", "qwen", 16_384)), "ollama", "llama", 200_000, "default"),
    ("provider-unknown", models(("ollama", "qwen", 16_384)), None, "qwen", 16_384, "models_config"),
    (
        "cap-lowers-default",
        {"agents": {"defaults": {"context_tokens": 128_000}}},
        "a",
        "b",
        128_000,
        "agent_cap",
    ),
    (
        "cap-lowers-model",
        {**models(("x", "big", 1_000_000)), "agents": {"defaults": {"context_tokens": 500_000}}},
        "x",
        "big",
        500_000,
        "agent_cap",
    ),
    (
        "cap-never-raises",
        {**models(("ollama", "qwen", 16_384)), "agents": {"defaults": {"context_tokens": 64_000}}},
        "ollama",
        "qwen",
        16_384,
        "models_config",
    ),
    (
        "cap-above-default",
        {"agents": {"defaults": {"context_tokens": 300_000}}},
        "a",
        "b",
        200_000,
        "default",
    ),
    ("cap-equal", {"agents": {"defaults": {"context_tokens": 200_000}}}, "a", "b", 200_000, "default"),
]


@pytest.mark.parametrize(
    ("data", "provider", "model", "window", "source"), [w[1:] for w in WINDOWS], ids=[w[0] for w in WINDOWS]
)
def test_resolve_window(
    data: dict[str, Any], provider: str | None, model: str | None, window: int, source: str
) -> None:
    assert resolve_window(config(data), provider, model) == (window, source)


@pytest.mark.parametrize(
    ("window", "verdict"),
    [
        *[(0, "block"), (-5, "block"), (1, "block"), (8_192, "block"), (15_999, "block")],
        *[(16_000, "warn"), (16_384, "warn"), (31_999, "warn")],
        *[(32_000, "ok"), (32_768, "ok"), (128_000, "ok"), (200_000, "ok")],
    ],
)
def test_guard_boundaries(window: int, verdict: str) -> None:
    assert guard(window) == verdict


# --- budget arithmetic --------------------------------------------------------------------------------------

# (window, min prompt budget, effective reserve, prompt budget, flush threshold, per-result cap chars)
BUDGETS = [
    (1, 1, 0, 1, 0, 0),
    (2, 1, 1, 1, 0, 0),
    (3_000, 1_500, 1_500, 1_500, 0, 3_600),
    (10_000, 5_000, 5_000, 5_000, 1_000, 12_000),
    (15_999, 7_999, 8_000, 7_999, 3_999, 16_000),
    (16_000, 8_000, 8_000, 8_000, 4_000, 16_000),
    # design.md §6.3: a 16,384-token Ollama model: min(20,000, 16,384 − 8,000) = 8,384 reserve, prompt budget 8,000.
    (16_384, 8_000, 8_384, 8_000, 4_000, 16_000),
    (28_000, 8_000, 20_000, 8_000, 4_000, 16_000),
    (31_999, 8_000, 20_000, 11_999, 7_999, 16_000),
    (32_000, 8_000, 20_000, 12_000, 8_000, 16_000),
    (32_768, 8_000, 20_000, 12_768, 8_768, 16_000),
    (128_000, 8_000, 20_000, 108_000, 104_000, 16_000),
    (200_000, 8_000, 20_000, 180_000, 176_000, 16_000),
    (1_048_576, 8_000, 20_000, 1_028_576, 1_024_576, 16_000),
]


@pytest.mark.parametrize(
    ("window", "floor", "reserve", "prompt", "flush", "cap"), BUDGETS, ids=[str(b[0]) for b in BUDGETS]
)
def test_budget_table(window: int, floor: int, reserve: int, prompt: int, flush: int, cap: int) -> None:
    b = budget(window)
    assert min_prompt_budget(window) == b.min_prompt_budget == floor
    assert b.reserve == reserve
    assert b.reserve_tokens == d.RESERVE_TOKENS
    assert b.prompt_budget == b.compact_threshold == prompt
    assert b.flush_threshold == flush
    assert choose_route(b) == "fits" and b.guard == guard(window)
    assert tool_result_max_chars(DEFAULTS, window) == cap


def test_ollama_16k_through_the_config() -> None:
    cfg = config(models(("ollama", "qwen2.5-coder:7b", 16_384)))
    b = compute_budget(
        cfg, provider="ollama", model="qwen2.5-coder:7b", estimated_tokens=6_000, reducible_chars=0
    )
    assert (b.context_window, b.window_source, b.guard) == (16_384, "models_config", "warn")
    assert (b.reserve, b.prompt_budget, b.flush_threshold) == (8_384, 8_000, 4_000)
    assert (b.estimated_with_margin, choose_route(b)) == (7_200, "fits")
    assert flush_due(cfg, b, 0) and not b.overflow_tokens > 0


@pytest.mark.parametrize(
    ("reserve", "window", "prompt"),
    [
        *[(0, 200_000, 200_000), (0, 16_384, 16_384), (5_000, 16_384, 11_384), (100_000, 128_000, 28_000)],
        *[(100_000, 16_384, 8_000), (150_000, 200_000, 50_000), (199_000, 200_000, 8_000)],
    ],
)
def test_configured_reserve(reserve: int, window: int, prompt: int) -> None:
    cfg = config({"compaction": {"reserve_tokens": reserve}})
    assert budget(window, cfg=cfg).prompt_budget == prompt


def test_flush_threshold_never_negative_and_off_when_disabled() -> None:
    big_soft = config({"memory_flush": {"soft_threshold_tokens": 50_000}})
    assert budget(32_000, cfg=big_soft).flush_threshold == 0  # 12,000 − 50,000: never
    assert not flush_due(big_soft, budget(32_000, 100_000, cfg=big_soft), 0)
    off = config({"memory_flush": {"enabled": False}})
    assert budget(200_000, cfg=off).flush_threshold == 0
    assert not flush_due(off, budget(200_000, 170_000, cfg=off), 0)
    assert flush_due(DEFAULTS, budget(200_000, 170_000), 0)  # 204,000 ≥ 176,000


def test_tool_result_cap_follows_config() -> None:
    cfg = config({"compaction": {"tool_result_share": 0.5, "tool_result_max_chars": 250_000}})
    assert tool_result_max_chars(cfg, 200_000) == 250_000
    assert tool_result_max_chars(cfg, 100_000) == 200_000
    assert tool_result_max_chars(cfg, 16_384) == 32_768
    # ⌊window × share⌋ before × 4: 16,385 × 0.3 = 4,915.5 → 4,915 → 19,660.
    assert tool_result_max_chars(config({"compaction": {"tool_result_max_chars": 100_000}}), 16_385) == 19_660


@pytest.mark.parametrize(
    ("estimated", "with_margin"),
    [(0, 0), (1, 2), (5, 6), (10, 12), (150_000, 180_000), (150_001, 180_002), (177_657, 213_189)],
)
def test_margin_rounds_up(estimated: int, with_margin: int) -> None:
    assert budget(200_000, estimated).estimated_with_margin == with_margin


def test_negative_estimate_is_a_bug() -> None:
    with pytest.raises(ValueError, match="estimated_tokens"):
        budget(200_000, -1)


# --- routes -------------------------------------------------------------------------------------------------

# 200k window: prompt budget 180,000. (estimated, reducible, overflow tokens, threshold chars, route)
ROUTES = [
    ("empty", 0, 0, 0, 2_048, "fits"),
    ("exactly-at-budget", 150_000, 10**9, 0, 2_048, "fits"),
    ("one-over-no-tools", 150_001, 0, 2, 2_056, "compact_only"),
    ("one-over-negative", 150_001, -7, 2, 2_056, "compact_only"),
    ("one-over-one-char", 150_001, 1, 2, 2_056, "compact_then_truncate"),
    ("one-over-just-short", 150_001, 2_055, 2, 2_056, "compact_then_truncate"),
    ("one-over-just-enough", 150_001, 2_056, 2, 2_056, "truncate_tool_results_only"),
    # overflow 1,024 tokens = 4,096 chars: slack and ×1.5 agree (6,144).
    ("crossover", 150_854, 6_143, 1_025, 6_150, "compact_then_truncate"),
    ("crossover-eq", 150_854, 6_150, 1_025, 6_150, "truncate_tool_results_only"),
    # a giant overflow: ×1.5 dominates.
    ("giant-short", 200_000, 359_999, 60_000, 360_000, "compact_then_truncate"),
    ("giant-enough", 200_000, 360_000, 60_000, 360_000, "truncate_tool_results_only"),
]


@pytest.mark.parametrize(
    ("estimated", "reducible", "overflow", "threshold", "route"),
    [r[1:] for r in ROUTES],
    ids=[r[0] for r in ROUTES],
)
def test_route_boundaries(estimated: int, reducible: int, overflow: int, threshold: int, route: str) -> None:
    b = budget(200_000, estimated, reducible)
    assert b.overflow_tokens == overflow
    assert b.overflow_chars == overflow * 4
    assert b.truncate_only_threshold_chars == threshold
    assert choose_route(b) == route
    assert b.reducible_chars == reducible
    assert (b.overflow_tokens > 0) == (route != "fits")


def test_crossover_exact() -> None:
    b = budget(200_000, 150_854)
    assert b.estimated_with_margin == 181_025 and b.overflow_chars == 4_100
    assert b.truncate_only_threshold_chars == max(4_100 + 2_048, math.ceil(4_100 * 1.5)) == 6_150
    b = budget(200_000, 150_853)
    assert b.overflow_chars == 4_096 and b.truncate_only_threshold_chars == 6_144


def test_as_json_keys_are_fixed() -> None:
    b = budget(16_384, 10_000, 5_000)
    assert {**b.as_json(), "route": choose_route(b)} == {
        "context_window": 16_384,
        "window_source": "default",
        "prompt_budget": 8_000,
        "flush_threshold": 4_000,
        "compact_threshold": 8_000,
        "estimated_with_margin": 12_000,
        "route": "compact_then_truncate",
        "reducible_chars": 5_000,
        "guard": "warn",
    }
    orjson.dumps(b.as_json())


ORDER = {"compact_only": 0, "compact_then_truncate": 1, "truncate_tool_results_only": 2}


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@settings(max_examples=400, deadline=None)
@given(
    window=st.integers(1, 2_000_000),
    reserve=st.integers(0, 199_999),
    estimated=st.integers(0, 3_000_000),
    reducible=st.lists(st.integers(-10, 10_000_000), min_size=2, max_size=6),
)
def test_route_is_monotone_in_reducible_chars(
    window: int, reserve: int, estimated: int, reducible: list[int]
) -> None:
    cfg = config({"compaction": {"reserve_tokens": reserve}})
    budgets = [budget(window, estimated, r, cfg) for r in sorted(reducible)]
    routes = [choose_route(b) for b in budgets]
    if budgets[0].overflow_tokens == 0:
        assert set(routes) == {"fits"}  # reducible characters never matter when it fits
    else:
        ranks = [ORDER[r] for r in routes]
        assert ranks == sorted(ranks)
        assert all(
            b.truncate_only_threshold_chars >= b.overflow_chars + TRUNCATE_ONLY_SLACK_CHARS for b in budgets
        )


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@settings(max_examples=400, deadline=None)
@given(window=st.integers(1, 2_000_000), reserve=st.integers(0, 199_999), estimated=st.integers(0, 3_000_000))
def test_budget_invariants(window: int, reserve: int, estimated: int) -> None:
    cfg = config({"compaction": {"reserve_tokens": reserve}})
    b = budget(window, estimated, cfg=cfg)
    assert 0 <= b.reserve <= reserve
    assert b.prompt_budget >= b.min_prompt_budget  # the floor always holds ...
    assert 1 <= b.prompt_budget <= window
    assert b.reserve + b.prompt_budget == window
    assert b.flush_threshold <= b.compact_threshold
    assert (choose_route(b) == "fits") == (b.estimated_with_margin <= b.prompt_budget)
    # ... and a bigger estimate never turns an overflowing session back into one that fits.
    assert budget(window, estimated + 1, cfg=cfg).overflow_tokens >= b.overflow_tokens


# --- each route, reached by a real transcript ---------------------------------------------------------------


def _entry(n: int, parent: str | None, message: dict[str, Any]) -> dict[str, Any]:
    stamp = f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}.000Z"
    return {"type": "message", "id": f"e{n:07x}", "parentId": parent, "timestamp": stamp, "message": message}


def write_session(path: Path, turns: list[tuple[str, str]]) -> Path:
    """A pi v3 transcript; each turn: (user text, tool output or "") answered by an ollama/tiny assistant."""
    lines: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/tmp"}
    ]
    parent: str | None = None
    n = 0

    def add(message: dict[str, Any]) -> None:
        nonlocal parent, n
        n += 1
        entry = _entry(n, parent, message)
        parent = entry["id"]
        lines.append(entry)

    assistant = {"provider": "ollama", "model": "tiny", "api": "openai-completions", "stopReason": "stop"}
    for index, (user, tool_output) in enumerate(turns):
        add({"role": "user", "content": [{"type": "text", "text": user}], "timestamp": 1})
        if tool_output:
            call = {
                "type": "toolCall",
                "id": f"call{index}",
                "name": "bash",
                "arguments": {"command": "cat log"},
            }
            add({"role": "assistant", "content": [call], **assistant, "stopReason": "toolUse"})
            add(
                {
                    "role": "toolResult",
                    "toolCallId": f"call{index}",
                    "toolName": "bash",
                    "content": [{"type": "text", "text": tool_output}],
                    "isError": False,
                    "timestamp": 1,
                }
            )
        add({"role": "assistant", "content": [{"type": "text", "text": "ok"}], **assistant})
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def session_budget(path: Path, cfg: Config) -> Budget:
    """What ``compactd inspect`` computes: the reader's context and pi's estimate, the pruning planner's
    reducible characters, and the model the transcript names."""
    from compactd.core.context import build_context
    from compactd.core.prune import reducible_chars
    from compactd.core.tokens import estimate_context_tokens
    from compactd.reading import read_transcript

    transcript = read_transcript(path)
    context = build_context(transcript)
    model = context.model or {}
    window, _ = resolve_window(cfg, model.get("provider"), model.get("modelId"))
    items = [(e["id"], e["message"]) for e in transcript.branch() if e.get("type") == "message"]
    return compute_budget(
        cfg,
        provider=model.get("provider"),
        model=model.get("modelId"),
        estimated_tokens=estimate_context_tokens(context.messages).tokens,
        reducible_chars=reducible_chars(items, tool_result_max_chars(cfg, window)),
    )


LOG_LINES = "".join(f"line {i}: compiling module {i % 97}\n" for i in range(3_000))  # ~93,000 chars

# ollama/tiny has a 32,000-token window: prompt budget 12,000 tokens, per-result cap 16,000 chars.
SESSIONS = [
    ("fits", [("hello", ""), ("run the build", "built in 3s\n")], "fits"),
    ("zero-tool-results", [("x" * 30_000, ""), ("y" * 30_000, "")], "compact_only"),
    ("one-giant-result", [("run the build", LOG_LINES[:60_000])], "truncate_tool_results_only"),
    (
        "many-medium-results",
        [("z" * 36_000, "")] + [(f"step {i}", LOG_LINES[:6_000]) for i in range(4)],
        "compact_then_truncate",
    ),
]


@pytest.mark.parametrize(("turns", "route"), [s[1:] for s in SESSIONS], ids=[s[0] for s in SESSIONS])
def test_each_route_on_a_transcript(tmp_path: Path, turns: list[tuple[str, str]], route: str) -> None:
    cfg = config(models(("ollama", "tiny", 32_000)))
    b = session_budget(write_session(tmp_path / "s.jsonl", turns), cfg)
    assert (b.context_window, b.window_source, b.prompt_budget) == (32_000, "models_config", 12_000)
    assert choose_route(b) == route, b


@pytest.mark.skipif(not REAL.is_dir(), reason="real pi sessions not present")
def test_real_sessions_route_by_window() -> None:
    path = REAL / "pi-large-session.v3.jsonl"
    by_window = {
        None: "truncate_tool_results_only",  # 200k default: truncating its tool results is enough
        128_000: "compact_then_truncate",
        16_384: "compact_then_truncate",
    }
    for window, route in by_window.items():
        data = models(("anthropic", "claude-sonnet-4-5", window)) if window else {}
        b = session_budget(path, config(data))
        assert choose_route(b) == route
        assert b.window_source == ("models_config" if window else "default")
        assert b.guard == ("warn" if window == 16_384 else "ok")
    capped = session_budget(path, config({"agents": {"defaults": {"context_tokens": 128_000}}}))
    assert (capped.context_window, capped.window_source) == (128_000, "agent_cap")


@pytest.mark.parametrize("estimated", [d.DEFAULT_CONTEXT_TOKENS * 10**300, 10**400])
def test_an_estimate_past_a_count_is_clamped_not_an_overflow(estimated: int) -> None:
    b = budget(200_000, estimated=estimated)
    assert b.estimated_tokens == MAX_TOKENS and choose_route(b) == "compact_only" and b.overflow_tokens > 0


@settings(max_examples=100, deadline=None)
@given(
    window=st.integers(1, 2_000_000),
    agent_cap=st.none() | st.integers(1, 400_000),
    hard_cap=st.integers(1, 100_000),
    share=st.floats(0.01, 1.0),
    provider=st.sampled_from([None, "ollama", "other"]),
    model=st.sampled_from([None, "tiny", "other"]),
)
def test_the_tool_result_cap_kept_per_model_is_the_resolved_windows(
    window: int, agent_cap: int | None, hard_cap: int, share: float, provider: str | None, model: str | None
) -> None:
    """``tool_result_cap`` (kept with each model's window terms) is ``tool_result_max_chars`` of the window
    ``resolve_window`` gives, asked once or again."""
    data: dict[str, Any] = {
        "models": {"providers": {"ollama": {"models": {"tiny": {"context_tokens": window}}}}},
        "compaction": {"tool_result_max_chars": hard_cap, "tool_result_share": share},
    }
    if agent_cap is not None:
        data["agents"] = {"defaults": {"context_tokens": agent_cap}}
    cfg = config(data)
    expected = tool_result_max_chars(cfg, resolve_window(cfg, provider, model)[0])
    assert tool_result_cap(cfg, provider, model) == expected
    assert tool_result_cap(cfg, provider, model) == expected  # the kept one
