"""A session's token budget: window, prompt budget and thresholds (design.md §§6.2-6.4).

Pure arithmetic over the configuration and two figures from the ledger: the raw pi-style token estimate and
the tool-result characters pruning could remove. It reproduces OpenClaw's precheck figures exactly, float
rounding included; choosing the route from them is :func:`compactd.core.decision.choose_route`'s.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from compactd.core.prune import max_tool_result_chars
from compactd.core.tokens import MAX_TOKENS
from compactd.datarecord import datarecord
from compactd.defaults import (
    CHARS_PER_TOKEN,
    DEFAULT_CONTEXT_TOKENS,
    GUARD_HARD_MIN_TOKENS,
    GUARD_WARN_BELOW_TOKENS,
    MIN_PROMPT_BUDGET_RATIO,
    MIN_PROMPT_BUDGET_TOKENS,
    SAFETY_MARGIN,
)

if TYPE_CHECKING:
    from compactd.config import Config

__all__ = [
    "Budget",
    "budget_for_window",
    "compute_budget",
    "guard",
    "max_tokens_within",
    "min_prompt_budget",
    "openclaw_2026_9_budget",
    "resolve_window",
    "target_tokens",
    "thresholds",
    "tool_result_cap",
    "tool_result_max_chars",
]

Guard = Literal["ok", "warn", "block"]
WindowSource = Literal["models_config", "agent_cap", "default"]

# Truncation alone must free the overflow plus this slack (design.md §6.4): a route that only just fits would
# overflow again on the next reply.
TRUNCATE_ONLY_SLACK_CHARS = 2_048
# ... and at least this multiple of the overflow, since a truncated result keeps a marker and a suffix.
TRUNCATE_ONLY_OVERFLOW_FACTOR = 1.5


def resolve_window(config: Config, provider: str | None, model: str | None) -> tuple[int, WindowSource]:
    """The context window of a session and where it came from.

    The model's configured window, else the built-in default; ``agents.defaults.context_tokens`` then caps
    it (it can only lower the window, never raise it).
    """
    window = config.models.window_for(provider, model)
    source: WindowSource = "models_config"
    if window is None:
        window, source = DEFAULT_CONTEXT_TOKENS, "default"
    cap = config.agents.defaults.context_tokens
    if cap is not None and cap < window:
        return cap, "agent_cap"
    return window, source


def guard(window: int) -> Guard:
    """``block`` below the hard minimum (session skipped), ``warn`` below the warning size, else ``ok``."""
    if window < GUARD_HARD_MIN_TOKENS:
        return "block"
    if window < GUARD_WARN_BELOW_TOKENS:
        return "warn"
    return "ok"


def min_prompt_budget(window: int) -> int:
    """Tokens the prompt always keeps: min(8,000, max(1, ⌊window × 0.5⌋)) (design.md §6.3)."""
    return min(MIN_PROMPT_BUDGET_TOKENS, max(1, math.floor(window * MIN_PROMPT_BUDGET_RATIO)))


def max_tokens_within(threshold: int) -> int:
    """The largest raw estimate whose figure with the safety margin (⌈tokens × 1.2⌉) is at most ``threshold``."""
    tokens = max(0, math.floor(threshold / SAFETY_MARGIN))
    while math.ceil((tokens + 1) * SAFETY_MARGIN) <= threshold:
        tokens += 1
    while tokens > 0 and math.ceil(tokens * SAFETY_MARGIN) > threshold:
        tokens -= 1
    return tokens


def tool_result_max_chars(config: Config, window: int) -> int:
    """The most characters one tool result may keep: min(⌊window × share⌋ × 4, hard cap) (design.md §6.5)."""
    c = config.compaction
    return max_tool_result_chars(window, c.tool_result_max_chars, c.tool_result_share)


@datarecord(frozen=True, slots=True)
class Budget:
    """One session's budget; :mod:`compactd.core.decision` compares ``estimated_with_margin`` with its thresholds."""

    context_window: int
    window_source: WindowSource
    guard: Guard
    reserve_tokens: int  # as configured
    reserve: int  # effective: never leaves less than min_prompt_budget for the prompt
    min_prompt_budget: int
    prompt_budget: int
    flush_threshold: int  # 0 = never (memory flush disabled, or no room before the compaction threshold)
    compact_threshold: int
    estimated_tokens: int  # the raw pi-style estimate
    estimated_with_margin: int
    overflow_tokens: int
    overflow_chars: int
    truncate_only_threshold_chars: int
    reducible_chars: int

    def as_json(self) -> dict[str, Any]:
        """The figures ``compactd inspect --json`` prints (these key names are fixed; the route is added by
        the decision)."""
        return {
            "context_window": self.context_window,
            "window_source": self.window_source,
            "prompt_budget": self.prompt_budget,
            "flush_threshold": self.flush_threshold,
            "compact_threshold": self.compact_threshold,
            "estimated_with_margin": self.estimated_with_margin,
            "reducible_chars": self.reducible_chars,
            "guard": self.guard,
        }


@datarecord(frozen=True, slots=True, rare=True)
class _WindowTerms:
    """The parts of a budget that depend on the window and the configuration alone, not on the session."""

    window: int
    source: WindowSource
    guard: Guard
    reserve_tokens: int
    reserve: int
    min_prompt_budget: int
    prompt_budget: int
    flush_threshold: int
    tool_result_cap: int  # ``tool_result_max_chars`` of the window (as resolved, before the floor of 1)

    @classmethod
    def of(
        cls,
        config: Config,
        window: int,
        source: WindowSource,
        provider: str | None = None,
        model: str | None = None,
    ) -> _WindowTerms:
        cap = tool_result_max_chars(config, window)
        window = max(1, math.floor(window))
        reserve_tokens = config.compaction.reserve_tokens
        pi = config.pi.settings
        if pi is not None:  # pi's own reserveTokens, where the user set it (design.md §6.14)
            reserve_tokens = pi.for_model(provider, model)[0] or reserve_tokens
        floor_prompt = min_prompt_budget(window)
        reserve = min(reserve_tokens, max(0, window - floor_prompt))
        prompt_budget = max(1, window - reserve)
        flush = config.memory_flush
        flush_threshold = max(0, prompt_budget - flush.soft_threshold_tokens) if flush.enabled else 0
        return cls(
            window,
            source,
            guard(window),
            reserve_tokens,
            reserve,
            floor_prompt,
            prompt_budget,
            flush_threshold,
            cap,
        )


# The window terms of each (provider, model) under one configuration: a restart decides 10,000 sessions that
# name a handful of models, and the lookup (``ModelsConfig.window_for``) is the costly part. Config is frozen,
# so the terms are keyed on the config object itself; a reload brings a new object and a new table.
_terms_cache: tuple[Config, dict[tuple[str | None, str | None], _WindowTerms]] | None = None


def _terms_for(config: Config, provider: str | None, model: str | None) -> _WindowTerms:
    global _terms_cache
    cache = _terms_cache
    if cache is None or cache[0] is not config:
        cache = _terms_cache = (config, {})
    table = cache[1]
    terms = table.get((provider, model))
    if terms is None:
        window, source = resolve_window(config, provider, model)
        terms = table[(provider, model)] = _WindowTerms.of(config, window, source, provider, model)
    return terms


def tool_result_cap(config: Config, provider: str | None, model: str | None) -> int:
    """The per-result cap of a session with this provider and model (its window's share, at most the cap), from
    the window terms kept per model: every decision and count asks it, and resolving the window is the cost."""
    return _terms_for(config, provider, model).tool_result_cap


def budget_for_window(
    config: Config,
    window: int,
    window_source: WindowSource,
    *,
    estimated_tokens: int,
    reducible_chars: int,
) -> Budget:
    """The budget for a known window: OpenClaw's ``shouldPreemptivelyCompactBeforePrompt`` (design.md §6.4)."""
    return _budget(
        _WindowTerms.of(config, window, window_source),
        estimated_tokens=estimated_tokens,
        reducible_chars=reducible_chars,
    )


def _budget(terms: _WindowTerms, *, estimated_tokens: int, reducible_chars: int) -> Budget:
    if estimated_tokens < 0:
        raise ValueError(f"estimated_tokens must be >= 0, got {estimated_tokens}")
    # A figure past what we count (the reader reports it as figure_overflow) is clamped, never an
    # OverflowError in the float arithmetic below.
    estimated_tokens = min(estimated_tokens, MAX_TOKENS)
    prompt_budget = terms.prompt_budget
    with_margin = math.ceil(
        estimated_tokens * SAFETY_MARGIN
    )  # as compactd.core.tokens.ContextEstimate.with_margin
    overflow_tokens = max(0, with_margin - prompt_budget)
    overflow_chars = overflow_tokens * CHARS_PER_TOKEN
    threshold_chars = max(
        overflow_chars + TRUNCATE_ONLY_SLACK_CHARS, math.ceil(overflow_chars * TRUNCATE_ONLY_OVERFLOW_FACTOR)
    )
    return Budget(
        context_window=terms.window,
        window_source=terms.source,
        guard=terms.guard,
        reserve_tokens=terms.reserve_tokens,
        reserve=terms.reserve,
        min_prompt_budget=terms.min_prompt_budget,
        prompt_budget=prompt_budget,
        flush_threshold=terms.flush_threshold,
        compact_threshold=prompt_budget,
        estimated_tokens=estimated_tokens,
        estimated_with_margin=with_margin,
        overflow_tokens=overflow_tokens,
        overflow_chars=overflow_chars,
        truncate_only_threshold_chars=threshold_chars,
        reducible_chars=reducible_chars,
    )


def compute_budget(
    config: Config,
    *,
    provider: str | None,
    model: str | None,
    estimated_tokens: int,
    reducible_chars: int,
) -> Budget:
    """The budget of a session whose transcript names ``provider``/``model`` (either may be unknown)."""
    terms = _terms_for(config, provider, model)
    return _budget(terms, estimated_tokens=estimated_tokens, reducible_chars=reducible_chars)


# OpenClaw 2026.9 (design.md §6.13): no configurable reserve, no minimum prompt budget.
MAX_RESERVE_TOKENS = 20_000
RESERVE_RATIO_DIVISOR = 4  # MAX_COMPACTION_RESERVE_RATIO = .25
MAX_SOFT_TOKENS = 4_000


@datarecord(frozen=True, slots=True, rare=True)
class Thresholds:
    """OpenClaw 2026.9's figures for one window (design.md §6.13)."""

    window: int
    reserve: int
    compact_at: int
    flush_at: int


def thresholds(window: int) -> Thresholds:
    """The three figures OpenClaw 2026.9 derives from a context window."""
    window = max(1, int(window))
    reserve = min(MAX_RESERVE_TOKENS, window // RESERVE_RATIO_DIVISOR)
    compact_at = window - reserve
    soft = min(MAX_SOFT_TOKENS, compact_at // 2)
    return Thresholds(window, reserve, compact_at, compact_at - soft)


def openclaw_2026_9_budget(window: int, tokens: int, *, flush_enabled: bool) -> Budget:
    """The budget of a 2026.9 session holding ``tokens``: over its compaction threshold at ≥ ``compact_at``.

    The gateway does the compaction (its summarizer, its cut point), so the route is ``compact_only``: nothing
    here prunes or estimates reducible characters.
    """
    t = thresholds(window)
    tokens = max(0, int(tokens))
    overflow = max(0, tokens - t.compact_at + 1)  # ≥ threshold compacts; Budget's overflow is "> budget"
    return Budget(
        context_window=t.window,
        window_source="models_config",
        guard=guard(t.window),
        reserve_tokens=t.reserve,
        reserve=t.reserve,
        min_prompt_budget=0,
        prompt_budget=t.compact_at - 1,
        flush_threshold=t.flush_at if flush_enabled else 0,
        compact_threshold=t.compact_at,
        estimated_tokens=tokens,
        estimated_with_margin=tokens,
        overflow_tokens=overflow,
        overflow_chars=overflow * CHARS_PER_TOKEN,
        truncate_only_threshold_chars=0,
        reducible_chars=0,
    )


def target_tokens(config: Config, threshold: int) -> int:
    """The raw estimate a compaction leaves a session at, at most: ``compaction.target_fill`` of its threshold
    with the safety margin, so that the agent has the rest to work with before the next compaction."""
    return max_tokens_within(math.floor(threshold * config.compaction.target_fill))
