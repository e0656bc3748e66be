"""The pure part of a commit: successor and append plans on random session trees, and their checks."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from compactd.commit.notes import FULL_TEXT_PLACEHOLDER
from compactd.commit.successor import (
    PlanError,
    build_append,
    build_successor,
    dumps_entry,
    leaf_to_repoint,
    substitute_note,
    verify,
)
from compactd.core.context import build_context, entry_to_message
from compactd.core.reader import parse_line, parse_transcript
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HEADER = b'{"type":"session","version":3,"id":"5f0c2a9e-1b7d-4c3e-9a41-2d6b8e7f0c11","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}'

Op = tuple[str, int]


def _msg(role: str, text: str, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}
    base.update(extra)
    return base


def build_file(ops: list[Op]) -> bytes:
    """A session from random operations, written like pi writes it (each entry a child of the leaf)."""
    entries: list[dict[str, Any]] = []
    leaf: str | None = None
    counter = 0

    def add(kind: str, **fields: Any) -> None:
        nonlocal leaf, counter
        counter += 1
        entry = {
            "type": kind,
            "id": f"{counter:08x}",
            "parentId": leaf,
            "timestamp": "2026-01-01T00:00:00.000Z",
        }
        entry.update(fields)
        entries.append(entry)
        leaf = entry["id"]

    for op, arg in ops:
        if op == "turn":
            add("message", message=_msg("user", f"question {counter} ✓ 日本"))
            if arg % 2:
                call = f"call_{counter}"
                add(
                    "message",
                    message={
                        "role": "assistant",
                        "content": [
                            {"type": "toolCall", "id": call, "name": "read", "arguments": {"p": arg}}
                        ],
                        "stopReason": "toolUse",
                        "timestamp": 2,
                    },
                )
                add(
                    "message",
                    message=_msg("toolResult", "x" * arg, toolCallId=call, toolName="read", isError=False),
                )
            add("message", message={**_msg("assistant", f"answer {counter}"), "stopReason": "stop"})
        elif op == "model":
            add("model_change", provider="p", modelId=f"m{arg}")
        elif op == "thinking":
            add("thinking_level_change", thinkingLevel=["off", "low", "high"][arg % 3])
        elif op == "label" and entries:
            add("label", targetId=entries[arg % len(entries)]["id"], label=f"l{arg}")
        elif op == "custom":
            add("custom", customType="ext", data={"n": arg})
        elif op == "info":
            add("session_info", name=f"name {arg}")
        elif op == "note":
            add("custom_message", customType="note", content=f"note {arg}", display=False)
        elif op == "branch" and entries:
            target = entries[arg % len(entries)]
            leaf = target["id"]
        elif op == "root":
            leaf = None
    # End on the main line: a final turn so the leaf is a message.
    add("message", message=_msg("user", "final question"))
    add("message", message={**_msg("assistant", "final answer"), "stopReason": "stop"})
    return (
        HEADER
        + b"\n"
        + b"".join(json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for e in entries)
    )


ops_strategy = st.lists(
    st.tuples(
        st.sampled_from(
            ["turn", "turn", "turn", "model", "thinking", "label", "custom", "info", "note", "branch", "root"]
        ),
        st.integers(0, 40),
    ),
    min_size=3,
    max_size=40,
)


def compaction_for(first_kept: str) -> dict[str, Any]:
    return {
        "type": "compaction",
        "id": "c0c0c0c0",
        "parentId": None,
        "timestamp": "2026-01-02T00:00:00.000Z",
        "summary": "## Decisions\n- s",
        "firstKeptEntryId": first_kept,
        "tokensBefore": 10,
        "details": {"readFiles": [], "modifiedFiles": []},
        "fromHook": False,
    }


POST = {
    "type": "custom_message",
    "id": "b0b0b0b0",
    "parentId": None,
    "timestamp": "2026-01-02T00:00:00.001Z",
    "customType": "compactd.post_compaction_context",
    "content": "rules",
    "display": False,
}


def user_cuts(data: bytes) -> list[str]:
    transcript = parse_transcript(data)
    return [e["id"] for e in transcript.branch() if e["type"] == "message" and e["message"]["role"] == "user"]


@pytest.mark.slow  # hypothesis-heavy; the append plan's property stays
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy, pick=st.integers(0, 1000), with_post=st.booleans())
def test_successor_of_any_tree_passes_its_check_and_keeps_what_it_must(
    ops: list[Op], pick: int, with_post: bool
) -> None:
    data = build_file(ops)
    original = parse_transcript(data)
    cuts = user_cuts(data)
    first_kept = cuts[pick % len(cuts)]
    plan = build_successor(data, original, compaction_for(first_kept), POST if with_post else None, {})
    loaded = verify(plan.data, plan, strict_structure=True)

    lines = plan.data.split(b"\n")
    assert lines[0] == HEADER and lines[-1] == b""
    assert loaded.leaf_id == original.leaf_id  # the active leaf is the last line
    original_lines = set(data.split(b"\n"))
    branch = original.branch()
    ids = [e["id"] for e in branch]
    summarized = set(ids[: ids.index(first_kept)])
    by_id = loaded.by_id()
    for entry in original.entries:
        if entry["id"] in summarized:
            continue
        if entry["type"] == "label" and entry["targetId"] not in by_id and entry["id"] not in ids:
            continue  # a label of a removed entry, off the kept branch: dropped
        assert entry["id"] in by_id, entry
        survivor = by_id[entry["id"]]
        assert {k: v for k, v in survivor.items() if k != "parentId"} == {
            k: v for k, v in entry.items() if k != "parentId"
        }
    # Lines are copied byte for byte unless the entry was re-parented (or is ours).
    for raw, entry in zip(lines[1:-1], loaded.entries, strict=True):
        original_entry = original.by_id().get(entry["id"])
        if original_entry is not None and original_entry.get("parentId") == entry.get("parentId"):
            assert raw in original_lines
    # No entry points nowhere, and the compaction is a root.
    assert all(e.get("parentId") is None or e["parentId"] in by_id for e in loaded.entries)
    assert loaded.entries[0]["type"] == "compaction" and loaded.entries[0]["parentId"] is None
    # The thinking level and the kept messages are those the agent had.
    before = build_context(original)
    after = build_context(loaded)
    assert after.thinking_level == before.thinking_level
    kept = [m for e in branch[ids.index(first_kept) :] if (m := entry_to_message(e)) is not None]
    head = [after.messages[0]] + ([entry_to_message(POST)] if with_post else [])
    assert after.messages[0]["role"] == "compactionSummary"
    assert after.messages == head + kept

    # A second rotation of the successor works too.
    cuts2 = user_cuts(plan.data)
    second = build_successor(plan.data, loaded, compaction_for(cuts2[-1]) | {"id": "c1c1c1c1"}, None, {})
    verify(second.data, second, strict_structure=True)


@settings(max_examples=100, deadline=None)
@given(ops=ops_strategy, pick=st.integers(0, 1000), prune=st.booleans())
def test_append_plan_of_any_tree_passes_its_check(ops: list[Op], pick: int, prune: bool) -> None:
    data = build_file(ops)
    original = parse_transcript(data)
    cuts = user_cuts(data)
    first_kept = cuts[pick % len(cuts)]
    replacements: dict[str, dict[str, Any]] = {}
    if prune:
        branch = original.branch()
        ids = [e["id"] for e in branch]
        for entry in branch[ids.index(first_kept) :]:
            if entry["type"] == "message" and entry["message"]["role"] == "toolResult":
                replacements[entry["id"]] = {**entry, "message": {**entry["message"], "content": []}}
    plan = build_append(original, compaction_for(first_kept), POST, replacements)
    loaded = verify(data + plan.data, plan, strict_structure=False)
    assert loaded.leaf_id == plan.leaf_id
    assert (data + plan.data).startswith(data)
    messages = build_context(loaded).messages
    assert messages[0]["role"] == "compactionSummary" and messages[-1]["customType"] == POST["customType"]


def test_plans_refuse_a_cut_point_that_is_not_on_the_branch() -> None:
    data = build_file([("turn", 1), ("turn", 2), ("branch", 0), ("turn", 3)])
    transcript = parse_transcript(data)
    off_branch = next(
        e["id"] for e in transcript.entries if e["id"] not in {x["id"] for x in transcript.branch()}
    )
    for build in (
        lambda: build_successor(data, transcript, compaction_for(off_branch), None, {}),
        lambda: build_append(transcript, compaction_for(off_branch), None, {}),
    ):
        with pytest.raises(PlanError, match="branch moved"):
            build()


def test_a_cut_that_splits_a_tool_call_from_its_result_is_refused() -> None:
    data = build_file([("turn", 1), ("turn", 3), ("turn", 2)])
    transcript = parse_transcript(data)
    result_id = next(
        e["id"] for e in transcript.entries if e["type"] == "message" and e["message"]["role"] == "toolResult"
    )
    plan = build_successor(data, transcript, compaction_for(result_id), None, {})
    with pytest.raises(PlanError, match="orphan_tool_result"):
        verify(plan.data, plan, strict_structure=True)


def test_a_kept_older_compaction_would_win_so_the_check_refuses() -> None:
    """If the kept part held an older compaction, pi would use that one, not ours: the check catches it."""
    data = build_file([("turn", 2), ("turn", 2), ("turn", 2)])
    transcript = parse_transcript(data)
    users = user_cuts(data)
    older = compaction_for(users[1]) | {"id": "0ld0ld00", "parentId": transcript.leaf_id}
    data += json.dumps(older, separators=(",", ":")).encode() + b"\n"
    data += (
        json.dumps(
            {
                "type": "message",
                "id": "ffff0001",
                "parentId": "0ld0ld00",
                "timestamp": "t",
                "message": _msg("user", "q"),
            }
        ).encode()
        + b"\n"
    )
    transcript = parse_transcript(data)
    plan = build_successor(data, transcript, compaction_for(users[0]), None, {})
    with pytest.raises(PlanError, match="context differs"):
        verify(plan.data, plan, strict_structure=True)


def test_leaf_to_repoint() -> None:
    a = {"id": "a", "parentId": "L"}
    b = {"id": "b", "parentId": "a"}
    c = {"id": "c", "parentId": "b"}
    assert leaf_to_repoint([a, b, c], c) is None
    assert leaf_to_repoint([a, c, b], b) == "c"  # b was rescued after its child c
    pointer = {"id": "p", "parentId": "a"}
    assert leaf_to_repoint([a, b], pointer, {"a": a, "b": b, "p": pointer}) == "b"
    assert leaf_to_repoint([], None) is None


def test_dumps_entry_is_json_stringify() -> None:
    entry = {"b": 1, "a": "日本 ✓ \u2028", "n": None, "f": 1.5, "nested": {"z": [1, 2], "y": True}}
    assert dumps_entry(entry) == json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode()
    lone = {"text": "bad \udc80 surrogate"}
    raw = dumps_entry(lone)
    assert json.loads(raw) == lone
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)  # orjson cannot even read it back; JavaScript and our reader can


def test_substitute_note() -> None:
    entry = {"message": {"content": [{"type": "text", "text": f"cut [{FULL_TEXT_PLACEHOLDER}]"}]}}
    out = substitute_note(entry, 'full text in s.jsonl.bak.2026 "quoted"')
    assert out["message"]["content"][0]["text"] == 'cut [full text in s.jsonl.bak.2026 "quoted"]'
    assert substitute_note({"x": 1}, "n") == {"x": 1}


def test_dumps_entry_writes_infinity_back_as_pi_read_it() -> None:
    entry = {"t": math.inf, "n": [-math.inf, None], "s": "null"}
    assert dumps_entry(entry) == b'{"t":1e400,"n":[-1e400,null],"s":"null"}'
    assert parse_line(dumps_entry(entry))[0] == entry


def test_a_reparented_entry_keeps_an_infinite_timestamp() -> None:
    data = build_file([("turn", 0), ("turn", 0), ("turn", 0)])
    first_kept = user_cuts(data)[-1]
    marker = f'"id":"{first_kept}"'.encode()
    line = next(x for x in data.split(b"\n") if marker in x)
    data = data.replace(line, line.replace(b'"timestamp":1}', b'"timestamp":1e400}'))
    plan = build_successor(data, parse_transcript(data), compaction_for(first_kept), None, {})
    verify(plan.data, plan, strict_structure=True)  # the context, Infinity included, is unchanged
    assert b'"timestamp":1e400}' in plan.data


ODD_ENTRIES: dict[str, Callable[[bytes], bytes]] = {
    "too_deep": lambda line: line.replace(b'"data":{"n":1}', b'"data":' + b"[" * 300 + b"]" * 300),
    "non_string_id": lambda line: re.sub(rb'"id":"[0-9a-f]{8}"', b'"id":7', line),
    "message_not_object": lambda line: line.replace(b'"type":"custom"', b'"type":"message"').replace(
        b'"data":{"n":1}', b'"message":"text"'
    ),
}


@pytest.mark.parametrize("kind", list(ODD_ENTRIES))
def test_plans_refuse_a_transcript_whose_reading_may_differ_from_pis(kind: str) -> None:
    data = build_file([("turn", 0), ("custom", 1), ("turn", 0), ("turn", 0)])
    line = next(x for x in data.split(b"\n") if b'"type":"custom"' in x)
    data = data.replace(line, ODD_ENTRIES[kind](line))
    transcript = parse_transcript(data)
    first_kept = transcript.branch()[-2]["id"]  # the final question
    for build in (
        lambda: build_successor(data, transcript, compaction_for(first_kept), None, {}),
        lambda: build_append(transcript, compaction_for(first_kept), None, {}),
    ):
        with pytest.raises(PlanError, match=f"not compacted: {kind} at line 4"):
            build()


def _orphans_then_branch(orphans: int) -> bytes:
    """A header, ``orphans`` entries whose parent is gone, then a six-message branch b0000000..b0000005."""
    lines = [HEADER]
    for n in range(orphans):
        orphan = {"type": "message", "id": f"o{n:07x}", "parentId": f"gone{n:07x}"}
        lines.append(
            orjson.dumps({**orphan, "timestamp": "2026-01-01T00:00:00.000Z", "message": _msg("user", "x")})
        )
    parent = None
    for n in range(6):
        role = "user" if n % 2 == 0 else "assistant"
        entry = {
            "type": "message",
            "id": f"b{n:07x}",
            "parentId": parent,
            "timestamp": "2026-01-01T00:00:00.000Z",
        }
        lines.append(orjson.dumps({**entry, "message": _msg(role, f"turn {n}")}))
        parent = entry["id"]
    return b"\n".join(lines) + b"\n"


def test_rewriting_many_orphans_holds_no_per_line_copies() -> None:
    """Every orphan is re-serialized (its parent is gone); the successor's bytes are built in one buffer, so
    its working memory stays a few times the file (a list of orjson results held ~4 KB per line: ~25x)."""
    import tracemalloc

    data = _orphans_then_branch(5_000)
    transcript = parse_transcript(data)
    tracemalloc.start()
    try:
        plan = build_successor(data, transcript, compaction_for("b0000004"), None, {})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert plan.reserialized >= 5_000
    assert verify(plan.data, plan, strict_structure=True).leaf_id == "b0000005"
    assert peak < 8 * len(data), (peak, len(data))


def test_the_check_of_a_successor_shares_the_planned_entries() -> None:
    """The successor ``verify`` loads holds the planned transcript's branch entries (or, for one the successor
    re-parents, their values) instead of a second parsed copy of each, and the lines off its branch (every
    orphan, a root in the successor) as bytes, not dicts."""
    data = _orphans_then_branch(50)
    transcript = parse_transcript(data)
    planned = transcript.by_id()
    plan = build_successor(data, transcript, compaction_for("b0000004"), None, {})
    loaded = verify(plan.data, plan, strict_structure=True)
    orphans = [i for i in range(loaded.count) if str(loaded.id_at(i)).startswith("o")]
    assert len(orphans) == 50 and all(loaded.parent_at(i) is None for i in orphans)
    held = loaded.retained_by_id()
    assert loaded.lean and not any(entry_id.startswith("o") for entry_id in held)
    assert held["b0000005"] is planned["b0000005"]  # unchanged: the entry itself
    assert held["b0000004"] is not planned["b0000004"]  # re-parented under the compaction
    assert held["b0000004"]["parentId"] != planned["b0000004"]["parentId"]
    assert held["b0000004"]["message"] is planned["b0000004"]["message"]
    # Asked for, the orphans are there as parsed, equal to the planned ones but for their parent.
    assert [{**e, "parentId": "x"} for e in loaded.entries if e["id"].startswith("o")] == [
        {**e, "parentId": "x"} for e in transcript.entries if e["id"].startswith("o")
    ]
