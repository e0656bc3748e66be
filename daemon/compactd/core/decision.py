"""The one decision (pure): a session's figures, the config and what was recorded of it → what to do now.

``run``, ``once``, ``compact``, ``inspect``, ``status`` and ``doctor`` all call :func:`decide`; nothing else
compares a figure with a threshold, tells quiet from idle, or chooses a route. :mod:`compactd.core.budget` does the
arithmetic (window, prompt budget, thresholds); this module chooses.

The figures come from the ledger (cheap, kept up to date by the tracker; the reducible tool-result characters
are not counted there) or from a full read of the transcript (:func:`compactd.core.planning.figures_of`, exact).
The ledger is enough to know whether anything is due; the route between the three compaction routes needs
the reducible characters, so a decision from the ledger says ``exact=False``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from compactd.core.budget import (
    TRUNCATE_ONLY_SLACK_CHARS,
    Budget,
    compute_budget,
    max_tokens_within,
    openclaw_2026_9_budget,
)
from compactd.datarecord import datarecord
from compactd.defaults import CHARS_PER_TOKEN, GUARD_HARD_MIN_TOKENS

if TYPE_CHECKING:
    from compactd.config import Config
    from compactd.core.ledger import SessionLedger
    from compactd.core.reader import Transcript
    from compactd.core.turns import Turn
    from compactd.state import SessionState

__all__ = [
    "ROUTES",
    "Decision",
    "Figures",
    "Recorded",
    "Route",
    "blocked_reason",
    "choose_route",
    "decide",
    "held_reason",
    "prune_target_tokens",
    "readiness",
    "route_after_summary",
    "route_needed",
]

# The one vocabulary of routes (OpenClaw's precheck names them so): every output says one of these.
Route = Literal["fits", "truncate_tool_results_only", "compact_only", "compact_then_truncate"]
ROUTES: tuple[Route, ...] = ("fits", "truncate_tool_results_only", "compact_only", "compact_then_truncate")


@datarecord(frozen=True, slots=True)
class Figures:
    """What the decision needs to know of one transcript, and nothing of its text."""

    provider: str | None
    model: str | None
    tokens: int  # the raw pi-style estimate of the context
    size: int = 0  # bytes of the file (the memory flush's ``force_bytes``)
    mtime: float = 0.0  # when the agent last wrote it (epoch seconds)
    turn: Turn | None = None  # the branch ends mid-turn
    reducible_chars: int | None = None  # None: not counted (ledger figures), the route is provisional
    # Whose thresholds apply: OpenClaw 2026.5's (pi's and JSONL OpenClaw's, from compactd's config) or, for a
    # session in an OpenClaw 2026.9 database, that version's own (design.md §6.13) on ``window``.
    thresholds: Literal["openclaw-2026.5", "openclaw-2026.9"] = "openclaw-2026.5"
    window: int | None = None
    # pi 1.x: its figure once a context edit is appended (no usage anchor then: the whole projection is
    # estimated), which is what a pruning must bring under the threshold; None for other agents.
    edited_tokens: int | None = None

    @classmethod
    def of_ledger(
        cls, ledger: SessionLedger, *, size: int, mtime: float, reducible: int | None = None
    ) -> Figures:
        """``reducible``: the ledger's count at this session's cap (``SessionLedger.reducible``), if known."""
        return cls(ledger.provider, ledger.model, ledger.planning_tokens, size, mtime, ledger.turn, reducible)


@datarecord(frozen=True, slots=True)
class Recorded:
    """What the state directory remembers of the session that changes the decision."""

    flushed_this_cycle: bool = False
    backoff_until: float | None = None  # epoch seconds; a failure (or a busy agent) holds it back till then
    # The last compaction: the file's bytes just after it, and the room it left (threshold − fill, tokens with
    # the margin). The session is not compacted again before the agent has appended that much.
    compacted_size: int | None = None
    room_tokens: int | None = None

    @classmethod
    def of_state(cls, state: SessionState) -> Recorded:
        return cls(state.flushed_this_cycle, state.backoff_until, state.compacted_size, state.room_tokens())


def held_reason(budget: Budget, recorded: Recorded, size: int) -> str | None:
    """Why a session over its threshold is not compacted yet: the last compaction left it room and the agent
    has appended less than that since (bytes / 4 counted as tokens, which can only overstate them). A file
    smaller than it was just after the compaction is another file; the hard limit (the request no longer fits
    the window) always compacts."""
    if recorded.compacted_size is None or not recorded.room_tokens or size < recorded.compacted_size:
        return None
    if budget.estimated_with_margin >= budget.context_window:
        return None
    appended = math.ceil((size - recorded.compacted_size) / CHARS_PER_TOKEN)
    if appended >= recorded.room_tokens:
        return None
    return (
        f"compacted {appended:,} tokens ago: waiting for the agent to use the {recorded.room_tokens:,} tokens "
        "of room the compaction left"
    )


@datarecord(frozen=True)
class Readiness:
    """Whether a due session may be acted on now; if not, why, and how long time alone would take."""

    ready: bool
    reason: str | None = None  # "not idle yet", or a turn's ``describe()``
    wait_seconds: float = 0.0  # until the quiet time alone makes it ready (a turn may also end sooner)
    turn_in_flight: bool = False


READY = Readiness(True)

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


def blocked_reason(transcript: Transcript) -> str | None:
    """Why a transcript is left alone whatever its figures: pi cannot load it, or a problem means compactd's
    reading may differ from pi's (no flush or compaction is made from such a reading)."""
    if not transcript.usable:
        return "unusable transcript: " + "; ".join(p.message for p in transcript.problems)
    if not transcript.committable:
        problem = transcript.blocking[0]
        return f"{problem.kind} at line {problem.line}: {problem.message}"
    return None


def choose_route(budget: Budget) -> Route:
    """OpenClaw's route for this budget: fits, or truncation alone when the reducible tool-result characters
    free the overflow with its slack, else a compaction (then truncation when there is something to cut)."""
    if budget.overflow_tokens <= 0:
        return "fits"
    if budget.reducible_chars <= 0:
        return "compact_only"
    if budget.reducible_chars >= budget.truncate_only_threshold_chars:
        return "truncate_tool_results_only"
    return "compact_then_truncate"


def flush_due(config: Config, budget: Budget, size: int) -> bool:
    """The memory flush is due: past its threshold (OpenClaw flushes at projected ≥ threshold), or the file
    has reached ``force_bytes``. Whether it was already done this cycle is the caller's record."""
    flush = config.memory_flush
    over = budget.flush_threshold > 0 and budget.estimated_with_margin >= budget.flush_threshold
    return flush.enabled and (over or 0 < flush.force_bytes <= size)


def readiness(config: Config, *, turn: Turn | None, quiet_seconds: float, force: bool = False) -> Readiness:
    """The one rule for "may compactd touch this session now", used by :func:`decide` and by the check just
    before a commit: quiet for ``idle_seconds``, and not mid-turn, unless the turn looks abandoned (nothing
    written for ``abandoned_turn_seconds``: a live turn writes at every step). ``force`` skips both.

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


@datarecord(frozen=True, slots=True)
class Decision:
    """What compactd does to one session now, and why (or why not)."""

    budget: Budget
    route: Route
    exact: (
        bool  # the route is the one a compaction takes (reducible characters counted, or they cannot matter)
    )
    skip: str | None  # left alone whatever its size (and why)
    flush: bool  # a memory flush is due and not yet done this cycle
    ready: bool  # it may be acted on now (idle, not mid-turn, not backing off)
    wait: str | None = None  # why not now, when it is due
    wait_seconds: float = 0.0  # until time alone makes it ready
    turn_in_flight: bool = False
    held: str | None = None  # over its threshold, but the last compaction's room is not used up yet

    @property
    def compact(self) -> bool:
        """The session overflows its prompt budget and is not skipped or held: a route other than ``fits``
        is due."""
        return self.skip is None and self.held is None and self.route != "fits"

    @property
    def due(self) -> bool:
        """Something is to be done: a compaction or a memory flush."""
        return self.compact or (self.skip is None and self.flush)

    @property
    def job_route(self) -> Route:
        """The route a compaction asked for by name runs: the decided one, ``compact_only`` for one that fits."""
        return "compact_only" if self.route == "fits" else self.route

    @property
    def action(self) -> str:
        """The word ``once`` prints for it: ``skipped``, the route, or ``flush`` (a flush alone is due)."""
        if self.skip is not None:
            return "skipped"
        if self.route == "fits" and self.flush:
            return "flush"
        return self.route

    @property
    def next_action(self) -> str | None:
        """What ``status`` shows as next: the route (or ``flush``), ``busy: <turn>`` while mid-turn."""
        if not self.due:
            return None
        if self.turn_in_flight:
            return f"busy: {self.wait}"
        return self.action

    @property
    def reason(self) -> str:
        if self.skip is not None:
            return self.skip
        if self.held is not None and self.route != "fits":
            return self.held
        if self.compact:
            return f"{self.budget.estimated_with_margin} > {self.budget.compact_threshold} tokens"
        return "within budget"

    def as_json(self) -> dict[str, Any]:
        """The budget's figures and the route, as ``compactd inspect --json`` prints them."""
        return {**self.budget.as_json(), "route": self.route}

    def figures(self) -> dict[str, Any]:
        """The budget numbers every output shows with it."""
        return {"tokens": self.budget.estimated_with_margin, "threshold": self.budget.compact_threshold}


def decide(
    config: Config,
    figures: Figures,
    recorded: Recorded | None = None,
    *,
    now: float,
    force: bool = False,
) -> Decision:
    """The decision for a session with these figures: its route, whether a flush is due, whether it may be
    acted on now and why not. ``force`` skips the idle and mid-turn rule (never a back-off)."""
    recorded = recorded or Recorded()
    if figures.thresholds == "openclaw-2026.9" and figures.window is not None:
        budget = openclaw_2026_9_budget(
            figures.window, figures.tokens, flush_enabled=config.memory_flush.enabled
        )
    else:
        budget = compute_budget(
            config,
            provider=figures.provider,
            model=figures.model,
            estimated_tokens=figures.tokens,
            reducible_chars=figures.reducible_chars or 0,
        )
    route = choose_route(budget)
    if route == "truncate_tool_results_only" and (figures.edited_tokens or 0) > figures.tokens:
        # pi 1.x measures a pruned session without its usage anchor: truncation alone must suffice for that.
        route = choose_route(
            compute_budget(
                config,
                provider=figures.provider,
                model=figures.model,
                estimated_tokens=figures.edited_tokens or 0,
                reducible_chars=figures.reducible_chars or 0,
            )
        )
    skip = skip_reason(budget)
    flush = skip is None and not recorded.flushed_this_cycle and flush_due(config, budget, figures.size)
    verdict = readiness(config, turn=figures.turn, quiet_seconds=now - figures.mtime, force=force)
    backoff = max(0.0, recorded.backoff_until - now) if recorded.backoff_until is not None else 0.0
    wait = verdict.reason if not verdict.ready else ("backing off" if backoff > 0 else None)
    return Decision(
        budget=budget,
        route=route,
        exact=figures.reducible_chars is not None or route == "fits" or skip is not None,
        skip=skip,
        flush=flush,
        ready=verdict.ready and backoff <= 0,
        wait=wait,
        wait_seconds=max(backoff, verdict.wait_seconds),
        turn_in_flight=verdict.turn_in_flight,
        held=held_reason(budget, recorded, figures.size) if route != "fits" else None,
    )


def route_needed(config: Config, ledger: SessionLedger) -> bool:
    """Whether :func:`decide` on the ledger's figures (no reducible characters counted) leaves the route
    provisional (``not exact``): the session overflows its budget and is not skipped. Only the budget is
    worked out, not the whole decision: the tracker asks this of every session it reads
    (``planning.route_cap``), and the refresh's decision follows."""
    budget = compute_budget(
        config,
        provider=ledger.provider,
        model=ledger.model,
        estimated_tokens=ledger.planning_tokens,
        reducible_chars=0,
    )
    return choose_route(budget) != "fits" and skip_reason(budget) is None


def prune_target_tokens(budget: Budget, route: Route) -> int:
    """The raw estimate pruning brings the session down to (pi's estimate, before the safety margin).

    After a summary: the threshold itself, so the kept turns lose no more than the summary left over. Pruning
    alone: the threshold less OpenClaw's route slack (2,048 characters), since the route was chosen on the
    promise of that headroom and a session pruned to the very threshold is due again after the next reply.
    """
    threshold = budget.compact_threshold
    if route == "truncate_tool_results_only":
        threshold -= math.ceil(TRUNCATE_ONLY_SLACK_CHARS / CHARS_PER_TOKEN)
    return max_tokens_within(max(0, threshold))


def route_after_summary(route: Route, need_tokens: int) -> Route:
    """The route a compaction ends with: ``compact_then_truncate`` whose summary alone freed enough (nothing
    more to prune from the kept turns) is ``compact_only``."""
    if route == "compact_then_truncate" and need_tokens <= 0:
        return "compact_only"
    return route
