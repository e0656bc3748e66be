"""``inspect`` counts the routing figure's tool results in its report's pass over the context
(``prune.ReducibleCount``, issue 22's fifth round): the count must be ``reducible_chars`` of
``planning.tool_result_items``, which ``figures_of`` counts otherwise, and the report must not change."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from compactd.commands.inspection import inspect_transcript
from compactd.config import load_config
from compactd.core.context import context_from_path
from compactd.core.planning import context_cap, figures_of, tool_result_items
from compactd.core.prune import ReducibleCount, reducible_chars
from compactd.core.reader import parse_transcript
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_shared_figures import branches_with_notes

_HEADER = b'{"type":"session","version":3,"id":"s","timestamp":"2025-06-01T10:00:00.000Z","cwd":"/tmp"}\n'
_TEXTS = st.sampled_from(["", "a", "é" * 40, "😀" * 30, "x" * 700, "line\n" * 90 + "error}", "b" * 5_000])


@st.composite
def tool_heavy_branches(draw: st.DrawFn) -> list[dict[str, Any]]:
    """``branches_with_notes`` with longer tool results (one text or several, an image, a string content),
    now and then one whose entry id is not a string, and a compaction whose pi 1.x checkpoint is a tool result."""
    path = draw(branches_with_notes())
    for entry in path:
        message = entry.get("message")
        if isinstance(message, dict) and message.get("role") == "toolResult":
            blocks: list[Any] = [
                {"type": "text", "text": t} for t in draw(st.lists(_TEXTS, min_size=1, max_size=3))
            ]
            if draw(st.booleans()):
                blocks.append({"type": "image", "data": "", "mimeType": "image/png"})
            message["content"] = draw(st.sampled_from([blocks, blocks[:1], "a string content"]))
            if draw(st.integers(0, 5)) == 0:
                entry["id"] = draw(st.sampled_from([None, 7, ["e"]]))
        elif entry.get("type") == "compaction" and draw(st.booleans()):
            entry["systemMessage"] = {"role": "toolResult", "content": [{"type": "text", "text": "c" * 900}]}
    return path


@settings(max_examples=300, deadline=None)
@given(tool_heavy_branches(), st.sampled_from([1, 34, 40, 300, 2_000, 16_000]))
def test_the_count_made_in_the_reports_pass_is_the_routing_figure(
    path: list[dict[str, Any]], cap: int
) -> None:
    transcript = parse_transcript(_HEADER)
    context = context_from_path(path)
    count = ReducibleCount(cap)
    report = inspect_transcript("x.jsonl", transcript, context=context, reducible=count)
    expected = reducible_chars(tool_result_items(transcript, strip=False, context=context), cap)
    assert count.total() == expected
    assert count.total() == expected  # totalled once, the same figure again
    assert report == inspect_transcript("x.jsonl", transcript, context=context)


def test_a_count_refuses_a_cap_below_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ReducibleCount(0)


def test_inspect_passes_the_count_on_to_the_figures(tmp_path: Path) -> None:
    """The command's sequence: the cap is the one ``figures_of`` counts at, so the count is taken, and the
    figures are those counted afresh."""
    lines: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": "s", "timestamp": "2025-06-01T10:00:00.000Z", "cwd": "/tmp"}
    ]
    parent = None
    for n in range(12):
        message: dict[str, Any] = (
            {
                "role": "toolResult",
                "toolCallId": f"c{n}",
                "content": [{"type": "text", "text": "é" * 9_000 * n}],
            }
            if n % 2
            else {
                "role": "assistant",
                "content": [{"type": "text", "text": "ok"}],
                "model": "m",
                "provider": "p",
            }
        )
        lines.append(
            {"type": "message", "id": f"e{n}", "parentId": parent, "timestamp": n, "message": message}
        )
        parent = f"e{n}"
    (tmp_path / "sessions").mkdir()
    path = tmp_path / "sessions" / "s.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in lines))
    config_path = tmp_path / "config.yaml"
    config_path.write_text(
        f"sessions:\n  roots: [{json.dumps(os.fspath(tmp_path / 'sessions'))}]\nstate_dir: {tmp_path / 'state'}\n"
    )
    config = load_config(config_path)
    transcript = parse_transcript(path.read_bytes())
    context = context_from_path(transcript.branch())
    cap = context_cap(config, context)
    count = ReducibleCount(cap)
    inspect_transcript(os.fspath(path), transcript, context=context, reducible=count)
    assert count.total() > 0
    counted = figures_of(config, transcript, context=context, counted=(cap, count.total()))
    assert counted == figures_of(config, transcript, context=context)
    assert counted.reducible_chars == count.total()


@settings(max_examples=200, deadline=None)
@given(tool_heavy_branches())
def test_a_contexts_tool_results_are_listed_once(path: list[dict[str, Any]]) -> None:
    """``SessionContext.tool_results`` (the ledger's count and each pruning plan read it): the branch's tool
    results as ``message_entries`` gives them, the same list each time it is asked."""
    from compactd.core.context import message_entries

    context = context_from_path(path)
    listed = context.tool_results()
    assert listed == [
        (entry, message)
        for entry, message in message_entries(path, context.rules)
        if message.get("role") == "toolResult"
    ]
    assert context.tool_results() is listed
