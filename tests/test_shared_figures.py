"""Figures ``inspect`` computes once and shares (issue 22): the context's visible messages, listed once for its
estimate, its ledger and the report, and the rules' reason taken from the rules already known. Each must equal
the separate computation it stands for."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from compactd.commands.inspection import inspect_transcript
from compactd.core.context import (
    SessionContext,
    _context_entries,
    _projection,
    _settings,
    build_context,
    compaction_message,
    context_estimate,
    context_from_path,
    entry_to_message,
    message_entries,
    rules_of,
    rules_reason,
)
from compactd.core.ledger import SessionLedger
from compactd.core.messages import PI_1, RUNTIME_CONTEXT_TYPE, is_runtime_context, role_of
from compactd.core.tokens import estimate_for_planning, projected_estimate
from compactd.reading import read_transcript
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_cutpoint_scans import branches


@st.composite
def branches_with_notes(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A branch (``test_cutpoint_scans.branches``) with runtime-context notes put in at random places."""
    path = draw(branches())
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(path)))
        path.insert(
            at,
            {"type": "custom_message", "id": f"n{at}", "customType": RUNTIME_CONTEXT_TYPE, "content": "R"},
        )
    return path


@settings(max_examples=300, deadline=None)
@given(branches_with_notes())
def test_the_visible_messages_are_listed_once_and_are_those_that_reach_the_model(
    path: list[dict[str, Any]],
) -> None:
    context = context_from_path(path)
    visible = context.visible()
    assert visible == [m for m in context.messages if not is_runtime_context(m)]
    assert context.visible() is visible  # one list, shared by every reader of this context
    customs = [e for e in path if e.get("type") == "custom_message" or _role(e) == "custom"]
    if context.rules != PI_1 and not customs:
        assert visible is context.messages  # the one walk saw nothing to leave out: no copy, no second look
    expected = (
        projected_estimate(context.messages, context.trusted_from)
        if context.rules == PI_1
        else estimate_for_planning([m for m in context.messages if not is_runtime_context(m)])
    )
    assert context_estimate(context) == expected


def _role(entry: dict[str, Any]) -> Any:
    message = entry.get("message")
    return message.get("role") if isinstance(message, dict) else None


def test_custom_messages_that_are_not_runtime_context_stay_visible() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "custom", "customType": "note", "content": "b"},
        {"role": "custom", "customType": RUNTIME_CONTEXT_TYPE, "content": "R"},
        {"role": ["custom"], "customType": RUNTIME_CONTEXT_TYPE, "content": "not a string role"},
    ]
    context = SessionContext(messages, "off", None)
    assert context.visible() == [messages[0], messages[1], messages[3]]
    assert SessionContext(messages[:2], "off", None).visible() == messages[:2]


def test_runtime_context_written_as_a_message_entry_is_left_out_too() -> None:
    note = {"role": "custom", "customType": RUNTIME_CONTEXT_TYPE, "content": "R", "display": False}
    path: list[dict[str, Any]] = [
        {"type": "message", "id": "u", "parentId": None, "message": {"role": "user", "content": "a"}},
        {"type": "message", "id": "n", "parentId": "u", "message": note},
        {"type": "message", "id": "a", "parentId": "n", "message": {"role": "assistant", "content": []}},
    ]
    context = context_from_path(path)
    assert context.messages[1] is note
    assert context.visible() == [context.messages[0], context.messages[2]]


@settings(max_examples=300, deadline=None)
@given(branches_with_notes())
def test_a_context_gives_each_message_with_its_entry_as_a_walk_of_the_branch_does(
    path: list[dict[str, Any]],
) -> None:
    for entry in path:  # now and then a pi 1.x checkpoint on a compaction, whatever message it holds
        if entry.get("type") == "compaction" and len(entry.get("summary", "")) % 3 == 1:
            entry["systemMessage"] = {"role": "toolResult", "content": "x", "timestamp": 1}
    context = context_from_path(path)
    assert len(context.sources) == len(context.messages)
    from_context = list(context.message_entries())
    walked = list(message_entries(path))
    assert [e for e, _ in from_context] == [e for e, _ in walked]
    assert all(a is b for (a, _), (b, _) in zip(from_context, walked, strict=True))
    assert [m for _, m in from_context] == [m for _, m in walked]
    tool_results = [(e, m) for e, m in walked if role_of(m) == "toolResult"]
    assert len(context.tool_results()) == len(tool_results)
    assert all(a is c and b is d for (a, b), (c, d) in zip(context.tool_results(), tool_results, strict=True))


@settings(max_examples=300, deadline=None)
@given(branches_with_notes())
def test_the_rules_reason_from_known_rules_is_the_one_counted(path: list[dict[str, Any]]) -> None:
    assert rules_reason(path, rules_of(path)) == rules_reason(path)


def reference_context(path: list[dict[str, Any]]) -> SessionContext:
    """``context_from_path`` as it was before its one walk: the rules, the settings, then the messages."""
    if rules_of(path) == PI_1:
        return _projection(path)
    thinking_level, model, compaction = _settings(path)
    messages: list[dict[str, Any]] = []
    sources: list[dict[str, Any]] = []
    for entry in _context_entries(path, compaction):
        message = compaction_message(entry) if entry is compaction else entry_to_message(entry)
        if message is not None:
            messages.append(message)
            sources.append(entry)
    return SessionContext(messages, thinking_level, model, sources=sources)


_SETTINGS_AND_MARKERS = st.sampled_from(
    [
        {"type": "thinking_level_change", "thinkingLevel": "high"},
        {"type": "thinking_level_change", "thinkingLevel": 7},
        {"type": "model_change", "provider": "q", "modelId": "n"},
        {"type": "message", "message": {"role": "assistant", "content": [], "provider": "r", "model": "o"}},
        {"type": "message", "message": "not an object"},
        {"type": "label", "targetId": "e0", "label": "x"},
        {"type": "context_edit", "targetId": "e1", "replacement": None},
        {"type": "usage", "input": 1},
        {"type": "compaction", "summary": "s", "firstKeptEntryId": "e0", "systemMessage": {"role": "system"}},
    ]
)


@settings(max_examples=400, deadline=None)
@given(branches_with_notes(), st.lists(st.tuples(st.integers(0, 40), _SETTINGS_AND_MARKERS), max_size=4))
def test_the_context_built_in_one_walk_is_the_one_built_from_the_rules_and_settings(
    path: list[dict[str, Any]], extra: list[tuple[int, dict[str, Any]]]
) -> None:
    for n, (at, entry) in enumerate(extra):  # settings, pi 1.x markers and odd entries anywhere, now and then
        path.insert(min(at, len(path)), {"id": f"x{n}", **entry})
    context = context_from_path(path)
    expected = reference_context(path)
    assert context == expected
    assert len(context.sources) == len(expected.sources)
    assert all(a is b for a, b in zip(context.sources, expected.sources, strict=True))


def test_a_context_is_not_compared_or_shown_by_its_memo() -> None:
    context = context_from_path([])
    fresh = context_from_path([])
    context.visible()
    assert context == fresh
    assert "_visible" not in repr(context)
    assert SessionContext([], "off", None).visible() == []


def _pi1_session(tmp_path: Path) -> Path:
    """A pi 1.x session (its system message first) with a runtime-context note: the reason counts entries."""
    lines = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2025-06-01T10:00:00.000Z", "cwd": "/w"},
        {
            "type": "message",
            "id": "s1",
            "parentId": None,
            "timestamp": "2025-06-01T10:00:00.000Z",
            "message": {"role": "system", "content": "be brief", "timestamp": 1},
        },
        {
            "type": "message",
            "id": "u1",
            "parentId": "s1",
            "timestamp": "2025-06-01T10:00:01.000Z",
            "message": {"role": "user", "content": "hello", "timestamp": 2},
        },
        {
            "type": "custom_message",
            "id": "x1",
            "parentId": "u1",
            "timestamp": "2025-06-01T10:00:02.000Z",
            "customType": RUNTIME_CONTEXT_TYPE,
            "content": "R" * 80,
            "display": False,
        },
    ]
    path = tmp_path / "pi1.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in lines))
    return path


def test_the_report_says_the_rules_and_counts_what_a_fresh_reading_does(tmp_path: Path) -> None:
    path = _pi1_session(tmp_path)
    transcript = read_transcript(path, lean=True)
    context = build_context(transcript)
    report = inspect_transcript(os.fspath(path), transcript, context=context)
    fresh = read_transcript(path)
    assert report["rules"] == "pi 1.x: " + rules_reason(fresh.branch())[1]
    assert "1 system messages" in report["rules"]
    assert report["context_messages"] == len(
        [m for m in build_context(fresh).messages if not is_runtime_context(m)]
    )
    ledger = SessionLedger.from_transcript(fresh)  # its own context, its own list of visible messages
    assert report["context_tokens"] == ledger.tokens
    assert report["trailing_tokens"] == ledger.trailing_tokens
