"""Tool call / result pairing repair: OpenClaw's ``repairToolUseResultPairing`` (design.md §6.9), pure.

Strict providers reject a request whose tool results do not directly follow the assistant turn that called
them, and compaction or pruning can leave exactly that. The steps are the spec's; where we differ, it is so
that a second repair of a repaired list changes nothing (idempotence, the same list object back):
- "unchanged" is decided by comparing the output with the input message by message, so a reorder is never
  thrown away and a no-op ``moved`` flag never forces a copy;
- a call id repeated inside one assistant turn is one call; a call whose id was answered earlier in the list
  gets no synthetic result (OpenClaw makes one and then drops it as a duplicate);
- a synthetic result takes its timestamp from the assistant turn (no clock) and its ``toolName`` normalized.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from compactd.core.messages import Message, blocks_of, is_error_turn, role_of, tool_call_id
from compactd.datarecord import datarecord

__all__ = ["SYNTHETIC_RESULT_TEXT", "RepairReport", "repair_tool_pairing"]

ErroredPolicy = Literal["preserve", "drop"]

SYNTHETIC_RESULT_TEXT = (
    "[compactd] missing tool result in session history; "
    "inserted synthetic error result for transcript repair."
)
_CALL_BLOCK_TYPES = ("toolCall", "toolUse", "functionCall")
_UNKNOWN_TOOL = "unknown"


@datarecord(frozen=True, slots=True)
class RepairReport:
    """Counts of what the repair did; ``moved`` counts real results placed at a new position in their turn."""

    added: int = 0
    dropped_duplicates: int = 0
    dropped_orphans: int = 0
    moved: int = 0
    dropped_errored: int = 0
    synthetic_ids: tuple[str, ...] = ()


@datarecord(frozen=True, slots=True)
class RepairResult:
    """``messages`` is the input object itself when nothing changed (``changed`` False)."""

    messages: Sequence[Message]
    report: RepairReport
    changed: bool


def _calls(message: Message) -> list[tuple[str, str | None]]:
    """(id, name) of each tool call with a non-empty id, first occurrence of an id only."""
    if not isinstance(message.get("content"), list):
        return []
    calls: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for block in blocks_of(message):
        call_id = block.get("id")
        if (
            block.get("type") in _CALL_BLOCK_TYPES
            and isinstance(call_id, str)
            and call_id
            and call_id not in seen
        ):
            seen.add(call_id)
            name = block.get("name")
            calls.append((call_id, name if isinstance(name, str) else None))
    return calls


def _clean_name(value: Any) -> str | None:
    return (value.strip() or None) if isinstance(value, str) else None


def _with_tool_name(result: Message, call_name: str | None) -> Message:
    """``normalizeToolResultName``: trim the name; a blank one takes the call's name, else ``unknown``."""
    raw = result.get("toolName")
    name = _clean_name(raw)
    if name is not None:
        return result if raw == name else {**result, "toolName": name}
    fallback = _clean_name(call_name)
    if fallback is not None:
        return {**result, "toolName": fallback}
    if isinstance(raw, str):
        return {**result, "toolName": _UNKNOWN_TOOL}
    return result


def synthetic_result(call_id: str, call_name: str | None, assistant: Message, text: str) -> Message:
    """The isError result that stands in for a call whose result is missing."""
    timestamp = assistant.get("timestamp")
    if not isinstance(timestamp, int | float) or isinstance(timestamp, bool):
        timestamp = 0
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": _clean_name(call_name) or _UNKNOWN_TOOL,
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "timestamp": timestamp,
    }


def repair_tool_pairing(
    messages: Sequence[Message],
    *,
    errored_policy: ErroredPolicy = "preserve",
    synthetic_text: str = SYNTHETIC_RESULT_TEXT,
) -> RepairResult:
    """Every tool call directly followed by its one result, in call order; never mutates ``messages``.

    1. A toolResult outside an assistant turn's span is an orphan and is dropped.
    2. An assistant turn with calls owns the messages up to the next assistant: its results are collected (the
       first per id wins; ids answered earlier are duplicates), other results dropped, the rest kept after.
    3. An errored or aborted turn keeps its real results (``preserve``) or goes with them (``drop``).
    4. Otherwise each call is followed by its result, or by a synthetic isError result when none exists.
    """
    out: list[Message] = []
    seen: set[str] = set()
    synthetic: list[str] = []
    dropped_duplicates = dropped_orphans = moved = dropped_errored = 0

    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        role = role_of(message)
        if role != "assistant":
            if role == "toolResult":
                dropped_orphans += 1
            else:
                out.append(message)
            i += 1
            continue

        calls = _calls(message)
        if not calls:
            out.append(message)
            i += 1
            continue

        names = dict(calls)
        found: dict[str, Message] = {}
        span_order: list[str | int] = []  # original order of the survivors: result ids, remainder indexes
        remainder: list[Message] = []
        j = i + 1
        while j < n and role_of(messages[j]) != "assistant":
            nxt = messages[j]
            j += 1
            if role_of(nxt) != "toolResult":
                span_order.append(len(remainder))
                remainder.append(nxt)
                continue
            result_id = tool_call_id(nxt)
            if result_id is None or result_id not in names:
                dropped_orphans += 1
            elif result_id in seen or result_id in found:
                dropped_duplicates += 1
            else:
                found[result_id] = _with_tool_name(nxt, names[result_id])
                span_order.append(result_id)

        errored = is_error_turn(message)
        if errored and errored_policy == "drop":
            dropped_errored += 1 + len(found)
        else:
            out.append(message)
            placed: list[str | int] = []
            for call_id, name in calls:
                if call_id in found:
                    out.append(found[call_id])
                    seen.add(call_id)
                    placed.append(call_id)
                elif not errored and call_id not in seen:
                    out.append(synthetic_result(call_id, name, message, synthetic_text))
                    seen.add(call_id)
                    synthetic.append(call_id)
            placed.extend(range(len(remainder)))
            original = [key for key in span_order if isinstance(key, int) or key in found]
            moved += sum(1 for a, b in zip(original, placed, strict=True) if isinstance(a, str) and a != b)
        out.extend(remainder)
        i = j

    report = RepairReport(
        len(synthetic), dropped_duplicates, dropped_orphans, moved, dropped_errored, tuple(synthetic)
    )
    if len(out) == n and all(a is b for a, b in zip(out, messages, strict=True)):
        return RepairResult(messages, report, changed=False)
    return RepairResult(out, report, changed=True)
