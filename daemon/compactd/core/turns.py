"""Whether a session's active branch ends mid-turn: its agent is still working (a model call or a tool run).

Quiet is not idle: a slow model writes nothing for as long as it thinks, so a session can look idle while its
next request, made from the agent's in-memory context, is already on its way. pi's agent loop
(``pi-agent-core`` ``runLoop``) is the rule copied here:

- a user message starts a turn (the model is called);
- an assistant message whose stopReason is ``error`` or ``aborted`` ends it;
- an assistant message with tool-call blocks keeps it open: the tools run, their results are appended, and
  the model is *always* called again, whatever the stopReason says (``toolUse``, ``length``, ...);
- any other assistant message (no tool calls) ends it;
- tool results, custom and bash messages, compactions and the like change nothing.

The state is folded one message at a time (O(1) each), so the ledger keeps it incrementally. An abandoned turn
(pi killed mid-turn) stays open for ever; the caller decides when that is taken as ended (see
``planning.readiness``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from compactd.core.context import entry_to_message, js_timestamp
from compactd.core.messages import TOOL_CALL_BLOCK_TYPES, blocks_of, role_of
from compactd.core.reader import Entry
from compactd.core.timestamps import iso_seconds
from compactd.datarecord import datarecord

__all__ = ["Turn", "step", "turn_of_branch"]


@datarecord(frozen=True, slots=True)
class Turn:
    """An open turn: when it started (epoch seconds, None when no timestamp says) and how many of the last
    assistant message's tool calls have no result yet."""

    since: float | None
    pending_tools: int = 0

    def describe(self) -> str:
        """``turn in flight since <UTC time> (waiting for …)``: the reason ``status`` and ``once`` give."""
        when = ""
        if self.since is not None:
            try:
                when = " since " + iso_seconds(self.since, zulu=True)
            except (OverflowError, ValueError, OSError):  # a timestamp JavaScript takes, datetime cannot
                when = f" since {self.since:.0f} s after the epoch"
        if self.pending_tools:
            plural = "s" if self.pending_tools != 1 else ""
            waiting = f"{self.pending_tools} tool result{plural}"
        else:
            waiting = "the model's reply"
        return f"turn in flight{when} (waiting for {waiting})"


def _tool_call_count(message: dict[str, Any]) -> int:
    return sum(1 for block in blocks_of(message) if block.get("type") in TOOL_CALL_BLOCK_TYPES)


def closes_turn(message: dict[str, Any]) -> bool:
    """An assistant message after which pi's loop stops (no tool calls, or an error or abort)."""
    if role_of(message) != "assistant":
        return False
    return message.get("stopReason") in ("error", "aborted") or _tool_call_count(message) == 0


def message_time(entry: Entry, message: dict[str, Any]) -> float | None:
    """Epoch seconds of a message: its own ``timestamp`` (ms, as pi writes it), else the entry's."""
    ms = js_timestamp(message["timestamp"]) if "timestamp" in message else None
    if ms is None and "timestamp" in entry:
        ms = js_timestamp(entry["timestamp"])
    return None if ms is None else ms / 1000.0


def step(turn: Turn | None, entry: Entry, message: dict[str, Any] | None = None) -> Turn | None:
    """The turn after one more entry on the branch (``message``: its ``entry_to_message``, if known)."""
    message = entry_to_message(entry) if message is None else message
    if message is None:
        return turn
    role = role_of(message)
    if role == "user":
        return turn if turn is not None else Turn(message_time(entry, message))
    if role == "assistant":
        if closes_turn(message):
            return None
        since = turn.since if turn is not None else message_time(entry, message)
        return Turn(since, _tool_call_count(message))
    if role == "toolResult" and turn is not None and turn.pending_tools:
        return Turn(turn.since, turn.pending_tools - 1)
    return turn


def turn_of_branch(newest_first: Iterable[Entry]) -> Turn | None:
    """The open turn at the end of a branch given leaf first; reads back only to the last message that closed a
    turn (the state after it does not depend on what came before), so a cold read parses a few lines."""
    tail: list[Entry] = []
    for entry in newest_first:
        message = entry_to_message(entry)
        if message is not None and closes_turn(message):
            break
        tail.append(entry)
    turn: Turn | None = None
    for entry in reversed(tail):
        turn = step(turn, entry)
    return turn
