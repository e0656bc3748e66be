"""OpenClaw 2026.9's own compaction and flush thresholds, as a :class:`compactd.budget.Budget`.

2026.9 dropped the configurable reserve and the minimum prompt budget: reserve = min(20000, ⌊window/4⌋),
compaction when the projected prompt reaches window − reserve (no safety margin), memory flush below that by
min(4000, ⌊(window − reserve)/2⌋). Expressed as a ``Budget`` so :func:`compactd.planning.decide` stays the one
place that turns figures into an action.
"""

from __future__ import annotations

from dataclasses import dataclass

from compactd.budget import Budget, guard
from compactd.defaults import CHARS_PER_TOKEN

MAX_RESERVE_TOKENS = 20_000
RESERVE_RATIO_DIVISOR = 4  # MAX_COMPACTION_RESERVE_RATIO = .25
MAX_SOFT_TOKENS = 4_000


@dataclass(frozen=True, slots=True)
class Thresholds:
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


def openclaw_budget(window: int, tokens: int, *, flush_enabled: bool) -> Budget:
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
        route="compact_only" if overflow else "fits",
    )
