"""The plan step (pure): a loaded transcript → its exact figures for :func:`compactd.core.decision.decide`, and the
tool-result cuts a pruning makes.

The ledger is enough to know that nothing is due; the entries of the branch are loaded only when something is,
and then these figures (with the reducible tool-result characters) decide the route.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from compactd.core.budget import Budget, tool_result_cap, tool_result_max_chars
from compactd.core.context import SessionContext, build_context, context_estimate, message_entries
from compactd.core.decision import Figures, route_needed
from compactd.core.messages import PI_1, role_of, strip_for_llm
from compactd.core.prune import PrunePlan, plan_pruning, reducible_chars
from compactd.core.reader import Transcript
from compactd.core.tokens import projected_estimate
from compactd.core.turns import turn_of_branch

if TYPE_CHECKING:
    from compactd.config import Config
    from compactd.core.ledger import SessionLedger

__all__ = ["context_cap", "figures_of", "prune_plan", "route_cap", "tool_result_cap", "tool_result_items"]


def tool_result_items(
    transcript: Transcript,
    *,
    strip: bool = True,
    rules: str | None = None,
    context: SessionContext | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """(entry id, message) of every tool result in the current context, oldest first; ``strip=False`` leaves
    ``details`` in (no copy of each message) for a caller that reads lengths only and sends nothing on.
    ``rules``: the branch's (``rules_of``), when the caller knows them already. ``context``:
    ``build_context(transcript)``, when the caller has it: its messages are taken with their entries instead of
    walking the branch again."""
    items: list[tuple[str, dict[str, Any]]] = []
    if context is not None:  # its tool results: no role to look at again, and only one with details is copied
        for entry, message in context.tool_results():
            entry_id = entry.get("id")
            if isinstance(entry_id, str):
                stripped = strip and "details" in message  # strip_for_llm's copy, only where it makes one
                items.append((entry_id, strip_for_llm(message) if stripped else message))
        return items
    for entry, message in message_entries(transcript.branch(), rules):
        entry_id = entry.get("id")
        if role_of(message) == "toolResult" and isinstance(entry_id, str):
            items.append((entry_id, strip_for_llm(message) if strip else message))
    return items


def figures_of(
    config: Config,
    transcript: Transcript,
    *,
    mtime: float = 0.0,
    context: SessionContext | None = None,
    counted: tuple[int, int] | None = None,
) -> Figures:
    """The exact figures of a loaded transcript, reducible tool-result characters counted (what ``inspect``
    prints and a compaction acts on); ``mtime`` is when the file was last written, for the idle rule.
    ``context``: ``build_context(transcript)`` when the caller has it already (``inspect``). ``counted``: the
    (cap, reducible characters) of this very reading's ledger (``SessionLedger.reducible``) or of the context's
    tool results counted by the caller (``inspect``: ``context_cap``, ``prune.ReducibleCount``), taken when the
    cap is this session's instead of counting them again."""
    context = context if context is not None else build_context(transcript)
    provider, model_id = _model_of(context)
    estimate = context_estimate(context)
    edited = None
    if context.rules == PI_1:  # the figure pi computes once a context edit follows every usage anchor
        edited = projected_estimate(context.messages, len(context.messages) + 1).tokens
    cap = tool_result_cap(config, provider, model_id)
    if counted is not None and counted[0] == cap:
        reducible = counted[1]
    else:
        reducible = reducible_chars(tool_result_items(transcript, strip=False, context=context), cap)
    return Figures(
        provider=provider,
        model=model_id,
        tokens=estimate.tokens,
        size=transcript.size,
        mtime=mtime,
        turn=turn_of_branch(reversed(transcript.branch())),
        reducible_chars=reducible,
        edited_tokens=edited,
    )


def _model_of(context: SessionContext) -> tuple[str | None, str | None]:
    model = context.model or {}
    provider = model.get("provider") if isinstance(model.get("provider"), str) else None
    model_id = model.get("modelId") if isinstance(model.get("modelId"), str) else None
    return provider, model_id


def context_cap(config: Config, context: SessionContext) -> int:
    """The per-result cap ``figures_of`` counts this context's reducible characters at: a caller that counts
    them itself (``inspect``, with ``prune.ReducibleCount``) passes them on as ``counted``."""
    return tool_result_cap(config, *_model_of(context))


def prune_plan(
    config: Config,
    transcript: Transcript,
    budget: Budget,
    need_tokens: int,
    *,
    only: Collection[str] | None = None,
    note: str | None = None,
    committed_note_chars: Callable[[str], int] | None = None,
    context: SessionContext | None = None,
) -> PrunePlan:
    """The tool-result cuts that free ``need_tokens`` from this session's context, oldest first.

    ``only`` restricts the plan to those entries (after a compaction: what remains, the kept turns).
    ``context``: ``build_context(transcript)``, when the caller has it (its tool results, no walk of the branch).
    """
    items = tool_result_items(transcript, context=context)
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


def route_cap(config: Config) -> Callable[[SessionLedger], int | None]:
    """What the ledger counts the route's reducible characters at (``SessionLedger.reducible``), so that a due
    session's route needs no second read: its cap, or None when its ledger figures need no route (it fits
    or is skipped), which spares the count for most sessions."""

    def cap(ledger: SessionLedger) -> int | None:
        if not route_needed(config, ledger):
            return None
        return tool_result_cap(config, ledger.provider, ledger.model)

    return cap
