"""The plan step (pure): a session's figures plus the config → what compactd should do to it now.

The ledger is enough to know that nothing is due; the entries of the branch are loaded only when something is,
and then the exact budget (with the reducible tool-result characters) decides the route.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Literal

from compactd.budget import Budget, compute_budget, resolve_window, tool_result_max_chars
from compactd.config import Config
from compactd.defaults import GUARD_HARD_MIN_TOKENS
from compactd.prune import PrunePlan, plan_pruning, reducible_chars
from compactd.tokens import estimate_for_planning
from compactd.transcript.context import build_context, context_entries, entry_to_message
from compactd.transcript.messages import llm_visible, role_of, strip_for_llm
from compactd.transcript.reader import Transcript
from compactd.turns import Turn

Action = Literal["none", "flush", "prune", "compact", "compact_then_prune", "skip"]


@dataclass(frozen=True)
class Decision:
    action: Action
    flush: bool
    budget: Budget | None
    reason: str


def tool_result_items(transcript: Transcript) -> list[tuple[str, dict[str, Any]]]:
    """(entry id, message) of every tool result in the current context, oldest first."""
    items: list[tuple[str, dict[str, Any]]] = []
    for entry in context_entries(transcript.branch()):
        message = entry_to_message(entry)
        entry_id = entry.get("id")
        if message is not None and role_of(message) == "toolResult" and isinstance(entry_id, str):
            items.append((entry_id, strip_for_llm(message)))
    return items


def budget_for(config: Config, transcript: Transcript) -> Budget:
    """The exact budget of a loaded transcript (what ``inspect`` prints and ``decide`` acts on)."""
    context = build_context(transcript)
    model = context.model or {}
    provider = model.get("provider") if isinstance(model.get("provider"), str) else None
    model_id = model.get("modelId") if isinstance(model.get("modelId"), str) else None
    estimate = estimate_for_planning(list(llm_visible(context.messages)))
    window, _ = resolve_window(config, provider, model_id)
    reducible = reducible_chars(tool_result_items(transcript), tool_result_max_chars(config, window))
    return compute_budget(
        config, provider=provider, model=model_id, estimated_tokens=estimate.tokens, reducible_chars=reducible
    )


def quick_budget(config: Config, *, provider: str | None, model: str | None, tokens: int) -> Budget:
    """A budget from ledger figures alone (reducible characters unknown): enough to tell that nothing is due."""
    return compute_budget(config, provider=provider, model=model, estimated_tokens=tokens, reducible_chars=0)


_WINDOW_SOURCES = {
    "models_config": "the model's models.providers.*.context_tokens",
    "agent_cap": "agents.defaults.context_tokens",
    "default": "the built-in default window",
}


def skip_reason(budget: Budget) -> str | None:
    """Why compactd leaves a session with this budget alone whatever its size, or None.

    OpenClaw refuses to run a model whose window is under the hard minimum; compacting for it would only
    hide a misconfigured window, so the session is reported as skipped instead (never as ``fits``).
    """
    if budget.guard == "block":
        return (
            f"context window {budget.context_window:,} tokens is below the hard minimum of "
            f"{GUARD_HARD_MIN_TOKENS:,} (set by {_WINDOW_SOURCES[budget.window_source]})"
        )
    return None


@dataclass(frozen=True)
class Readiness:
    """Whether a due session may be acted on now; if not, why, and how long time alone would take."""

    ready: bool
    reason: str | None = None  # "not idle yet", or a turn's ``describe()``
    wait_seconds: float = 0.0  # until the quiet time alone makes it ready (a turn may also end sooner)
    turn_in_flight: bool = False


READY = Readiness(True)


def readiness(config: Config, *, turn: Turn | None, quiet_seconds: float, force: bool = False) -> Readiness:
    """The one rule for "may compactd touch this session now", used by ``run``, ``once``, ``compact`` and the
    check just before a commit: quiet for ``idle_seconds``, and not mid-turn, unless the turn looks abandoned
    (nothing written for ``abandoned_turn_seconds``: a live turn writes at every step). ``force`` skips both.

    Quiet is not idle: a model slower than ``idle_seconds`` leaves a turn's file quiet while its next request,
    built from the agent's memory, is on its way; compacting then saves that request nothing and its tool
    result lands on the fresh summary, pushing the session straight back over its threshold.
    """
    if force:
        return READY
    sessions = config.sessions
    if turn is not None and quiet_seconds < sessions.abandoned_turn_seconds:
        wait = max(sessions.abandoned_turn_seconds, sessions.idle_seconds) - quiet_seconds
        return Readiness(False, turn.describe(), wait, turn_in_flight=True)
    if quiet_seconds < sessions.idle_seconds:
        return Readiness(False, "not idle yet", sessions.idle_seconds - quiet_seconds)
    return READY


def decide(config: Config, budget: Budget, *, transcript_bytes: int, flushed_this_cycle: bool) -> Decision:
    """Nothing, a memory flush, a pruning, a compaction, or both, for a session with this budget."""
    skipped = skip_reason(budget)
    if skipped is not None:
        return Decision("skip", False, budget, skipped)
    flush_cfg = config.memory_flush
    wants_flush = flush_cfg.enabled and (
        budget.over_flush_threshold
        or (flush_cfg.force_bytes > 0 and transcript_bytes >= flush_cfg.force_bytes)
    )
    flush = wants_flush and not flushed_this_cycle
    route = budget.route
    if route == "fits":
        return Decision("flush" if flush else "none", flush, budget, "within budget")
    action: Action = {
        "truncate_tool_results_only": "prune",
        "compact_only": "compact",
        "compact_then_truncate": "compact_then_prune",
    }[route]  # type: ignore[assignment]
    return Decision(
        action, flush, budget, f"{budget.estimated_with_margin} > {budget.compact_threshold} tokens"
    )


def prune_plan(
    config: Config,
    transcript: Transcript,
    budget: Budget,
    need_tokens: int,
    *,
    only: Collection[str] | None = None,
    note: str | None = None,
    committed_note_chars: Callable[[str], int] | None = None,
) -> PrunePlan:
    """The tool-result cuts that free ``need_tokens`` from this session's context, oldest first.

    ``only`` restricts the plan to those entries (after a compaction: what remains, the kept turns).
    """
    items = tool_result_items(transcript)
    if only is not None:
        items = [(entry_id, message) for entry_id, message in items if entry_id in only]
    return plan_pruning(
        items,
        tool_result_max_chars(config, budget.context_window),
        need_tokens,
        min_keep=config.compaction.tool_result_min_keep_chars,
        note_for=(lambda _id: note) if note else None,
        committed_note_chars=committed_note_chars,
    )
