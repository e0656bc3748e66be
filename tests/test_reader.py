"""The reader: bytes → header, migrated entries and the problems a loader would hit (design.md §6.12).

The differential test (``test_differential.py``) checks our context against pi's; this file checks what pi does
not report: each problem kind with its line number, byte spans, in-memory migration that never touches the file,
and that no input at all makes the reader raise.
"""

from __future__ import annotations

import copy
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from compactd.core.context import build_context
from compactd.core.reader import BOM, FATAL_KINDS, Transcript, parse_transcript
from compactd.reading import read_transcript
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import messages as msgs

Json = dict[str, Any]

REAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"

# Every kind the reader may report; a new kind must be added here (and documented) on purpose.
KNOWN_KINDS = frozenset(
    {
        "no_header",
        "unreadable",
        "bom",
        "malformed_line",
        "torn_last_line",
        "long_header",
        "junk_leaf",
        "missing_id",
        "conflicting_duplicate_id",
        "dangling_parent",
        "parent_cycle",
        "first_kept_not_on_branch",
        "orphan_tool_result",
        "missing_tool_result",
        "leading_whitespace",
        "trailing_whitespace",
        "figure_overflow",
        "too_deep",
        "non_string_id",
        "message_not_object",
    }
)

# ------------------------------------------------------------------------------------------------------------
# Builders


def header(session_id: str = "sess-0001", version: int | None = 3, **extra: Any) -> Json:
    value: Json = {"type": "session"}
    if version is not None:
        value["version"] = version
    value.update({"id": session_id, "timestamp": "2025-06-01T10:00:00.000Z", "cwd": "/tmp/work"})
    value.update(extra)
    return value


def dumps(value: Any) -> bytes:
    """A line as pi writes it: compact JSON, UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def jsonl(*items: Json | bytes) -> bytes:
    return b"".join((item if isinstance(item, bytes) else dumps(item)) + b"\n" for item in items)


def user(text: str) -> Json:
    return msgs.user(text, ts=1_750_000_000_000)


def assistant(*blocks: Json | str, stop: str = "stop", total: int = 1000) -> Json:
    return msgs.assistant(
        *blocks,
        provider="anthropic",
        model="claude-sonnet-4-5",
        usage=msgs.usage(total, input=10, output=5),
        stop=stop,
        ts=1_750_000_001_000,
    )


def call(call_id: str, name: str = "bash", **arguments: Any) -> Json:
    return msgs.call(call_id, name, arguments)


def result(call_id: str, text: str) -> Json:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "bash",
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "timestamp": 1_750_000_002_000,
    }


def msg(entry_id: str, parent: str | None, message: Json, **extra: Any) -> Json:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2025-06-01T10:00:01.000Z",
        "message": message,
        **extra,
    }


def compaction(entry_id: str, parent: str | None, first_kept: str, summary: str = "## Goal\nship it") -> Json:
    return {
        "type": "compaction",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2025-06-01T10:05:00.000Z",
        "summary": summary,
        "firstKeptEntryId": first_kept,
        "tokensBefore": 12345,
        "details": {"readFiles": [], "modifiedFiles": []},
        "fromHook": False,
    }


def clean_session() -> list[Json]:
    """Header, a user turn, a tool call answered, a reply: a file pi writes with nothing to report."""
    return [
        header(),
        {
            "type": "model_change",
            "id": "m0",
            "parentId": None,
            "timestamp": "2025-06-01T10:00:00.100Z",
            "provider": "anthropic",
            "modelId": "claude-sonnet-4-5",
        },
        msg("u1", "m0", user("list the files")),
        msg("a1", "u1", assistant("looking", call("c1", command="ls"), stop="toolUse")),
        msg("r1", "a1", result("c1", "a.txt\nb.txt")),
        msg("a2", "r1", assistant("two files")),
    ]


def kinds(transcript: Transcript) -> list[tuple[str, int | None]]:
    return [(p.kind, p.line) for p in transcript.problems]


def write(tmp_path: Path, data: bytes, name: str = "s.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------------------------------------
# A clean file


def test_clean_file_reads_with_no_problems(tmp_path: Path) -> None:
    items = clean_session()
    t = read_transcript(write(tmp_path, jsonl(*items)))
    assert t.problems == []
    assert t.usable
    assert t.header == items[0]
    assert t.session_id == "sess-0001"
    assert t.version == 3
    assert t.entries == items[1:]
    assert t.leaf_id == "a2"
    assert [e["id"] for e in t.branch()] == ["m0", "u1", "a1", "r1", "a2"]
    assert t.lines == [2, 3, 4, 5, 6]


# ------------------------------------------------------------------------------------------------------------
# Each problem kind, with its line number


def test_no_header_first_line_is_an_entry() -> None:
    t = parse_transcript(jsonl(msg("u1", None, user("hi")), msg("u2", "u1", user("again"))))
    assert kinds(t) == [("no_header", 1)]
    assert not t.usable
    assert t.entries == [] and t.header is None and t.leaf_id is None


def test_no_header_counts_the_first_parsed_line_not_the_first_line() -> None:
    # pi skips lines JSON.parse rejects, then requires the first *parsed* value to be a header.
    t = parse_transcript(jsonl(b"not json", msg("u1", None, user("hi"))))
    assert kinds(t) == [("malformed_line", 1), ("no_header", 2)]
    skipped_then_header = parse_transcript(jsonl(b"not json", header(), msg("u1", None, user("hi"))))
    assert kinds(skipped_then_header) == [("malformed_line", 1)]
    assert skipped_then_header.usable and len(skipped_then_header.entries) == 1


@pytest.mark.parametrize(
    "bad_header",
    [
        {"type": "session", "id": 42, "version": 3},
        {"type": "sessions", "id": "x", "version": 3},
        {"id": "x", "version": 3},
    ],
    ids=["id-not-a-string", "wrong-type", "no-type"],
)
def test_no_header_when_the_header_is_not_a_session_with_a_string_id(bad_header: Json) -> None:
    t = parse_transcript(jsonl(bad_header, msg("u1", None, user("hi"))))
    assert kinds(t) == [("no_header", 1)]
    assert not t.usable


def test_empty_file_has_no_header() -> None:
    t = parse_transcript(b"")
    assert [p.kind for p in t.problems] == ["no_header"]
    assert not t.usable
    blank = parse_transcript(b"\n\n  \n")
    assert [p.kind for p in blank.problems] == ["no_header"]


def test_bom_before_header_is_reported_on_line_1_and_entries_still_load() -> None:
    body = jsonl(*clean_session())
    plain = parse_transcript(body)
    t = parse_transcript(BOM + body)
    assert kinds(t) == [("bom", 1)]
    assert t.usable  # JavaScript's trim() strips the BOM: pi loads it, `pi -c` does not list it
    assert t.entries == plain.entries
    assert t.header_span == (3, 3 + len(dumps(clean_session()[0])))


def test_malformed_middle_line_is_skipped_and_reported_with_its_line() -> None:
    items = clean_session()
    data = jsonl(*items[:3], b'{"type":"message","id":"x1",', *items[3:])
    t = parse_transcript(data)
    assert kinds(t) == [("malformed_line", 4)]
    assert [e["id"] for e in t.entries] == ["m0", "u1", "a1", "r1", "a2"]
    assert t.lines == [2, 3, 5, 6, 7]
    assert t.usable


def test_torn_last_line_that_does_not_parse() -> None:
    items = clean_session()
    torn = dumps(msg("u2", "a2", user("next")))[:-7]
    t = parse_transcript(jsonl(*items) + torn)
    assert kinds(t) == [("torn_last_line", 7)]
    assert t.leaf_id == "a2"  # the torn line is skipped, as pi skips it


def test_torn_last_line_that_parses_is_loaded_but_still_reported() -> None:
    # Complete JSON without its newline: pi loads it, but its next append would be glued onto it.
    items = clean_session()
    t = parse_transcript(jsonl(*items) + dumps(msg("u2", "a2", user("next"))))
    assert kinds(t) == [("torn_last_line", 7)]
    assert t.leaf_id == "u2"


def test_dangling_parent_is_reported_on_the_entry_line_and_cuts_the_branch() -> None:
    t = parse_transcript(
        jsonl(header(), msg("u1", None, user("a")), msg("u2", "gone", user("b")), msg("u3", "u2", user("c")))
    )
    assert kinds(t) == [("dangling_parent", 3)]
    assert [e["id"] for e in t.branch()] == ["u2", "u3"]  # the walk stops silently at the missing parent


def test_first_kept_not_on_branch_is_reported_on_the_compaction_line() -> None:
    t = parse_transcript(
        jsonl(
            header(),
            msg("u1", None, user("a")),
            msg("a1", "u1", assistant("b")),
            compaction("c1", "a1", first_kept="elsewhere"),
            msg("u2", "c1", user("c")),
        )
    )
    assert kinds(t) == [("first_kept_not_on_branch", 4)]


def test_first_kept_after_the_compaction_is_not_a_problem() -> None:
    """A rotated successor puts the compaction at the root, keeping from an entry after it: pi then emits the
    summary and everything after the compaction, so nothing is lost."""
    t = parse_transcript(
        jsonl(
            header(),
            compaction("c1", None, first_kept="u2"),
            msg("u2", "c1", user("kept")),
            msg("a2", "u2", assistant("reply")),
        )
    )
    assert t.problems == []
    assert [m["role"] for m in build_context(t).messages] == ["compactionSummary", "user", "assistant"]


def test_a_valid_compaction_is_not_reported() -> None:
    t = parse_transcript(
        jsonl(
            header(),
            msg("u1", None, user("a")),
            msg("a1", "u1", assistant("b")),
            compaction("c1", "a1", first_kept="a1"),
            msg("u2", "c1", user("c")),
        )
    )
    assert t.problems == []


def test_orphan_tool_result_is_reported_on_its_line() -> None:
    t = parse_transcript(
        jsonl(
            header(),
            msg("u1", None, user("a")),
            msg("a1", "u1", assistant("ok")),
            msg("r1", "a1", result("c-unknown", "output")),
            msg("a2", "r1", assistant("done")),
        )
    )
    assert kinds(t) == [("orphan_tool_result", 4)]


def test_tool_result_answering_a_call_on_another_branch_is_an_orphan() -> None:
    t = parse_transcript(
        jsonl(
            header(),
            msg("u1", None, user("a")),
            msg("a1", "u1", assistant(call("c1", command="ls"), stop="toolUse")),  # other branch
            msg("a2", "u1", assistant("no tools")),
            msg("r1", "a2", result("c1", "output")),
        )
    )
    assert kinds(t) == [("orphan_tool_result", 5)]


def test_missing_tool_result_is_reported_on_the_calling_assistant_line() -> None:
    t = parse_transcript(
        jsonl(
            header(),
            msg("u1", None, user("a")),
            msg("a1", "u1", assistant(call("c1", command="ls"), call("c2", command="pwd"), stop="toolUse")),
            msg("r1", "a1", result("c1", "a.txt")),
            msg("u2", "r1", user("never mind")),
        )
    )
    assert kinds(t) == [("missing_tool_result", 3)]
    assert "c2" in t.problems[0].message


def test_aborted_turn_with_tool_calls_needs_no_result() -> None:
    t = parse_transcript(
        jsonl(
            header(),
            msg("u1", None, user("a")),
            msg("a1", "u1", assistant(call("c1", command="ls"), stop="aborted")),
            msg("u2", "a1", user("retry")),
        )
    )
    assert t.problems == []


def _parse_in_thread(data: bytes) -> Transcript:
    """Parse in a daemon thread, so a hang fails this test quickly instead of stalling the whole run."""
    out: list[Transcript] = []
    worker = threading.Thread(target=lambda: out.append(parse_transcript(data)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the reader hangs on a parentId cycle"
    return out[0]


def test_parent_cycle_is_reported_and_does_not_hang() -> None:
    t = _parse_in_thread(jsonl(header(), msg("u1", "u2", user("a")), msg("u2", "u1", user("b"))))
    assert "parent_cycle" in [p.kind for p in t.problems]
    assert {e["id"] for e in t.branch()} == {"u1", "u2"}  # each entry once: the walk stops at the cycle
    build_context(t)  # context building terminates too


def test_parent_cycle_behind_the_leaf_is_reported() -> None:
    t = _parse_in_thread(
        jsonl(
            header(),
            msg("u1", "u3", user("a")),
            msg("u2", "u1", user("b")),
            msg("u3", "u2", user("c")),
            msg("leaf", "u1", user("d")),
        )
    )
    assert "parent_cycle" in [p.kind for p in t.problems]
    assert len(build_context(t).messages) == 4


def test_self_parent_leaf_is_a_parent_cycle() -> None:
    t = _parse_in_thread(jsonl(header(), msg("u1", None, user("a")), msg("u2", "u2", user("b"))))
    assert "parent_cycle" in [p.kind for p in t.problems]


def test_conflicting_duplicate_id_is_reported_on_the_second_occurrence() -> None:
    t = parse_transcript(
        jsonl(
            header(), msg("u1", None, user("a")), msg("u2", "u1", user("b")), msg("u1", None, user("other"))
        )
    )
    assert kinds(t) == [("conflicting_duplicate_id", 4)]
    assert t.by_id()["u1"]["message"]["content"][0]["text"] == "other"  # pi's index keeps the last one


def test_long_header_over_512_bytes() -> None:
    base = header(cwd="")
    pad = 512 - len(dumps(base))
    exactly = header(cwd="x" * pad)
    assert len(dumps(exactly)) == 512
    assert kinds(parse_transcript(jsonl(exactly, msg("u1", None, user("a"))))) == []
    longer = header(cwd="x" * (pad + 1))
    t = parse_transcript(jsonl(longer, msg("u1", None, user("a"))))
    assert kinds(t) == [("long_header", 1)]
    assert t.usable and len(t.entries) == 1


def test_junk_leaf_last_line_is_json_but_not_an_object() -> None:
    t = parse_transcript(jsonl(*clean_session(), b"42"))
    assert kinds(t) == [("malformed_line", 7), ("junk_leaf", None)]
    assert t.junk_leaf
    assert build_context(t).messages == []  # pi takes the number as its leaf: an empty context


def test_junk_line_followed_by_an_entry_is_only_malformed() -> None:
    items = clean_session()
    t = parse_transcript(jsonl(*items[:-1], b'"text"', items[-1]))
    assert kinds(t) == [("malformed_line", 6)]
    assert not t.junk_leaf
    assert len(build_context(t).messages) == 4


def test_problem_kinds_are_distinct_per_cause() -> None:
    """One file with every non-fatal cause once: each is reported under its own kind."""
    long_header = header(cwd="y" * 600)
    t = _parse_in_thread(
        jsonl(
            long_header,
            msg("u1", None, user("a")),
            b"{oops",
            msg("a1", "u1", assistant(call("c1", command="ls"), stop="toolUse")),
            msg("u2", "a1", user("moved on")),
            msg("r9", "u2", result("nope", "x")),
            msg("u1", None, user("different")),
            msg("d1", "gone", user("dangling")),
            compaction("k1", "d1", first_kept="zz"),
        )
        + b'{"torn":'
    )
    assert sorted(kinds(t), key=str) == sorted(
        [
            ("long_header", 1),
            ("malformed_line", 3),
            ("conflicting_duplicate_id", 7),
            ("dangling_parent", 8),
            ("first_kept_not_on_branch", 9),
            ("torn_last_line", 10),
        ],
        key=str,
    )
    # the pairing problems are on the branch that was cut off by the dangling parent: not reported
    other = parse_transcript(
        jsonl(
            header(),
            msg("u1", None, user("a")),
            msg("a1", "u1", assistant(call("c1", command="ls"), stop="toolUse")),
            msg("u2", "a1", user("moved on")),
            msg("r9", "u2", result("nope", "x")),
        )
    )
    assert kinds(other) == [("missing_tool_result", 3), ("orphan_tool_result", 5)]


# ------------------------------------------------------------------------------------------------------------
# Tolerated as pi tolerates them


def test_duplicate_identical_header_and_entries_are_accepted() -> None:
    """pi's duplicate-flush quirk re-appends the header and every entry; nothing to report."""
    items = clean_session()
    data = jsonl(*items, *items, msg("u9", "a2", user("after the re-flush")))
    t = parse_transcript(data)
    assert t.problems == []
    assert t.leaf_id == "u9"
    single = parse_transcript(jsonl(*items, msg("u9", "a2", user("after the re-flush"))))
    assert build_context(t).messages == build_context(single).messages


def test_unknown_types_and_fields_round_trip_unchanged() -> None:
    odd_header = header(futureFlag={"nested": [1, 2.5, None]}, branchedFrom="/old.jsonl")
    odd_message = msg(
        "u1",
        None,
        {**user("hi"), "idempotencyKey": "k-1", "provenance": {"source": "telegram"}},
        extraTopLevel=True,
    )
    unknown = {
        "type": "future_entry_type",
        "id": "f1",
        "parentId": "u1",
        "timestamp": "2025-06-01T10:00:02.000Z",
        "payload": {"ü": "ñ", "list": [{"deep": True}]},
    }
    items = [odd_header, odd_message, unknown]
    t = parse_transcript(jsonl(*items))
    assert t.problems == []
    assert t.header == odd_header
    assert t.entries == [odd_message, unknown]
    assert t.leaf_id == "f1"  # an unknown entry is still the leaf, as in pi
    assert build_context(t).messages == [odd_message["message"]]


def test_several_roots_and_orphans_load() -> None:
    t = parse_transcript(
        jsonl(header(), msg("u1", None, user("a")), msg("u2", None, user("b")), msg("u3", "u2", user("c")))
    )
    assert t.problems == []
    assert [e["id"] for e in t.branch()] == ["u2", "u3"]
    assert [e["id"] for e in t.branch("u1")] == ["u1"]


# ------------------------------------------------------------------------------------------------------------
# Migration in memory


def v1_items() -> list[Json]:
    """A v1 file: no version, no ids; the compaction keeps from file index 3 (header = index 0)."""
    return [
        header(version=None, provider="anthropic", modelId="claude-sonnet-4-5", thinkingLevel="off"),
        {"type": "message", "timestamp": "2025-06-01T10:00:01.000Z", "message": user("first")},
        {"type": "message", "timestamp": "2025-06-01T10:00:02.000Z", "message": assistant("one")},
        {"type": "message", "timestamp": "2025-06-01T10:00:03.000Z", "message": user("second")},
        {"type": "message", "timestamp": "2025-06-01T10:00:04.000Z", "message": assistant("two")},
        {
            "type": "compaction",
            "timestamp": "2025-06-01T10:00:05.000Z",
            "summary": "earlier work",
            "firstKeptEntryIndex": 3,
            "tokensBefore": 500,
        },
        {"type": "message", "timestamp": "2025-06-01T10:00:06.000Z", "message": user("third")},
    ]


def test_v1_migration_is_deterministic_and_never_rewrites_the_file(tmp_path: Path) -> None:
    data = jsonl(*v1_items())
    path = write(tmp_path, data)
    os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    before = os.stat(path)
    first = read_transcript(path)
    second = read_transcript(path)
    after = os.stat(path)
    assert path.read_bytes() == data
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (
        before.st_mtime_ns,
        before.st_size,
        before.st_ino,
    )
    assert first.version == 1  # the version of the file, before migration
    assert first.problems == []
    ids = [e["id"] for e in first.entries]
    assert ids == [e["id"] for e in second.entries]
    assert len(set(ids)) == len(ids)
    assert all(isinstance(i, str) and i for i in ids)
    assert [e["parentId"] for e in first.entries] == [None, *ids[:-1]]
    assert first.leaf_id == ids[-1]


def test_v1_first_kept_entry_index_becomes_first_kept_entry_id() -> None:
    t = parse_transcript(jsonl(*v1_items()))
    comp = t.entries[4]
    assert comp["type"] == "compaction"
    assert "firstKeptEntryIndex" not in comp
    assert comp["firstKeptEntryId"] == t.entries[2]["id"]  # file index 3 = the third entry after the header
    texts = [
        m.get("content", [{}])[0].get("text") if m["role"] != "compactionSummary" else m["summary"]
        for m in build_context(t).messages
    ]
    assert texts == ["earlier work", "second", "two", "third"]


def test_v1_index_counts_skipped_duplicate_headers_like_pi() -> None:
    """firstKeptEntryIndex indexes pi's parsed array, in which a repeated header also takes a slot."""
    items = v1_items()
    items.insert(2, items[0])  # a repeated header at file index 2: index 3 is now the assistant "one"
    t = parse_transcript(jsonl(*items))
    comp = next(e for e in t.entries if e["type"] == "compaction")
    target = next(e for e in t.entries if e["id"] == comp["firstKeptEntryId"])
    assert target["message"]["content"][0]["text"] == "one"


def test_scan_numbers_lines_and_pi_positions_past_blank_malformed_and_junk_lines() -> None:
    """Each entry's line number and index in pi's parsed array (``JSON.parse``'s successes, header at 0: a
    blank or malformed line takes no slot, a junk value or repeated header does), and ``line_no`` and
    ``junk_leaf`` once the walk stops, also when its consumer stops early."""
    from compactd.core.reader import Scan

    head = json.dumps({"type": "session", "id": "s", "version": 3}).encode()
    entry = json.dumps({"type": "message", "id": "a"}).encode()
    lines = [b"", b"{oops", head, b"  ", entry, b"[1]", b"{bad", head, entry, b"7", b"\t", entry, b"{torn"]
    data = b"\n".join(lines)
    scan = Scan(data)
    found = [(line, position) for _, _, _, line, position in scan.entries()]
    assert found == [(5, 1), (9, 4), (12, 6)]  # parsed: 3 (header), 5, 6, 8, 9, 10, 12
    assert (scan.line_no, scan.junk_leaf) == (13, False)
    assert [(p.kind, p.line) for p in scan.problems] == [
        ("malformed_line", 2),
        ("malformed_line", 6),
        ("malformed_line", 7),
        ("malformed_line", 10),
        ("torn_last_line", 13),
    ]
    junk = Scan(b"\n".join(lines[:-3]))
    assert [line for *_, line, _ in junk.entries()] == [5, 9]
    assert (junk.line_no, junk.junk_leaf) == (10, True)
    early = Scan(data)
    for _ in early.entries():
        break  # the walk is closed as it is dropped
    assert early.line_no == 5


def test_v2_hook_message_becomes_custom_and_v3_is_left_alone() -> None:
    hook = {"role": "hookMessage", "customType": "ext", "content": "note", "display": True, "timestamp": 1}
    v2 = parse_transcript(jsonl(header(version=2), msg("h1", None, copy.deepcopy(hook))))
    assert v2.version == 2
    assert v2.entries[0]["message"]["role"] == "custom"
    assert v2.entries[0]["id"] == "h1"  # v2 ids are kept
    v3 = parse_transcript(jsonl(header(version=3), msg("h1", None, copy.deepcopy(hook))))
    assert v3.entries[0]["message"]["role"] == "hookMessage"


def test_v1_entries_are_migrated_through_v2_as_well() -> None:
    hook = {"role": "hookMessage", "customType": "ext", "content": "note", "display": True, "timestamp": 1}
    t = parse_transcript(jsonl(header(version=None), {"type": "message", "message": hook}))
    assert t.entries[0]["message"]["role"] == "custom"


@pytest.mark.skipif(not REAL_DIR.is_dir(), reason="shared/fixtures/real is not on this machine")
@pytest.mark.parametrize("name", ["pi-large-session", "pi-before-compaction"])
def test_real_v1_file_reads_like_pis_own_v3_rewrite_of_it(name: str) -> None:
    v1 = read_transcript(REAL_DIR / f"{name}.v1.jsonl")
    v3 = read_transcript(REAL_DIR / f"{name}.v3.jsonl")
    assert (v1.version, v3.version) == (1, 3)
    assert len(v1.entries) == len(v3.entries)
    assert build_context(v1).messages == build_context(v3).messages
    position_v1 = {e["id"]: i for i, e in enumerate(v1.entries)}
    position_v3 = {e["id"]: i for i, e in enumerate(v3.entries)}
    for e1, e3 in zip(v1.entries, v3.entries, strict=True):
        if e3.get("type") == "compaction":
            assert position_v1[e1["firstKeptEntryId"]] == position_v3[e3["firstKeptEntryId"]]


# ------------------------------------------------------------------------------------------------------------
# Spans and line numbers


@pytest.mark.parametrize("with_bom", [False, True], ids=["plain", "bom"])
def test_spans_point_at_the_exact_bytes_of_each_line(with_bom: bool) -> None:
    items = clean_session()
    raw = [dumps(i) for i in items]
    raw[2] = raw[2] + b"\r"  # CRLF line: JSON.parse takes the \r as whitespace
    raw[3] = dumps(
        msg("a1", "u1", assistant("héllo wörld 中文 😀", call("c1", command="ls"), stop="toolUse"))
    )
    data = (
        (BOM if with_bom else b"")
        + raw[0]
        + b"\n\n"
        + b"\n".join(raw[1:3])
        + b"\n   \n"
        + b"\n".join(raw[3:])
    )
    t = parse_transcript(data)
    assert [p.kind for p in t.problems] == (["bom", "torn_last_line"] if with_bom else ["torn_last_line"])
    assert t.header_span is not None
    assert data[slice(*t.header_span)] == raw[0]
    assert [data[s:e] for s, e in t.spans] == raw[1:]
    assert t.lines == [3, 4, 6, 7, 8]
    assert [json.loads(data[s:e]) for s, e in t.spans] == t.entries
    assert t.size == len(data)


# ------------------------------------------------------------------------------------------------------------
# Never raises


def _check_shape(t: Transcript) -> None:
    assert len(t.entries) == len(t.lines) == len(t.spans)
    assert all(isinstance(e, dict) for e in t.entries)
    assert {p.kind for p in t.problems} <= KNOWN_KINDS
    assert t.usable == (not any(p.kind in FATAL_KINDS for p in t.problems))
    assert t.lines == sorted(t.lines)
    build_context(t)


@pytest.mark.slow  # hypothesis-heavy or runs pi: left to the full run
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_parse_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    _check_shape(parse_transcript(data))


@pytest.mark.slow  # hypothesis-heavy or runs pi: left to the full run
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_parse_never_raises_on_arbitrary_bytes_after_a_header(data: bytes) -> None:
    t = parse_transcript(jsonl(header()) + data)
    _check_shape(t)
    assert t.header is not None


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    # lone surrogates (valid in JavaScript strings)
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
)
_JSONISH = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
_ENTRY_KEYS = st.sampled_from(
    [
        "type",
        "id",
        "parentId",
        "message",
        "role",
        "content",
        "firstKeptEntryId",
        "summary",
        "toolCallId",
        "stopReason",
        "usage",
        "version",
    ]
)
_ENTRYISH = st.dictionaries(
    _ENTRY_KEYS,
    st.one_of(
        _JSONISH,
        st.sampled_from(
            [
                "message",
                "compaction",
                "session",
                "a",
                "b",
                "c",
                "toolResult",
                "assistant",
                "user",
                "custom_message",
                "branch_summary",
            ]
        ),
    ),
    max_size=8,
)


def _encode(value: Any, mode: int) -> bytes:
    if mode == 0:
        return json.dumps(value).encode()  # surrogates escaped as \udxxx: valid JSON
    # raw lone surrogates: invalid UTF-8 on disk (Node decodes it as U+FFFD)
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


_LINE = st.one_of(
    st.tuples(_ENTRYISH, st.integers(0, 1)).map(lambda p: _encode(p[0], p[1])),
    st.tuples(_JSONISH, st.integers(0, 1)).map(lambda p: _encode(p[0], p[1])),
    st.integers(min_value=20, max_value=400).map(lambda n: b'{"type":"message","n":' + b"9" * n + b"}"),
    st.binary(max_size=30),
    st.sampled_from([b"", b"   ", b"\r", b"NaN", b"Infinity", b"[1,]", b"\xff\xfe", b"\xef\xbb\xbf{}"]),
)


@pytest.mark.slow  # hypothesis-heavy or runs pi: left to the full run
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_LINE, max_size=12),
    st.booleans(),
    st.sampled_from([3, 2, None]),
)
def test_parse_never_raises_on_json_ish_lines(
    lines: list[bytes], trailing_newline: bool, version: int | None
) -> None:
    data = b"\n".join([dumps(header(version=version)), *lines]) + (b"\n" if trailing_newline else b"")
    t = parse_transcript(data)
    _check_shape(t)
    assert t.usable
    # every entry's span still holds its line's bytes (migration edits the dict, never the spans)
    for (start, end), line_no in zip(t.spans, t.lines, strict=True):
        assert data[start:end] == data.split(b"\n")[line_no - 1]


@pytest.mark.parametrize(
    "entry",
    [b'{"id":[]}', b'{"type":"compaction","id":"c","parentId":null,"firstKeptEntryId":{}}'],
    ids=["list-id-leaf", "dict-first-kept"],
)
def test_parse_never_raises_on_unhashable_ids(entry: bytes) -> None:
    _check_shape(parse_transcript(jsonl(header()) + entry + b"\n"))


def test_parse_never_raises_on_very_long_integers() -> None:
    for digits in (20, 400, 4_300, 5_000, 100_000):
        _check_shape(parse_transcript(jsonl(header()) + b"9" * digits + b"\n"))


def test_parse_never_raises_on_deeply_nested_lines() -> None:
    for opening, closing in ((b"[", b"]"), (b'{"a":', b"}")):
        line = opening * 5_000 + b"1" + closing * 5_000
        _check_shape(parse_transcript(jsonl(header(), msg("u1", None, user("a"))) + line + b"\n"))


def test_entry_with_an_enormous_integer_is_loaded_like_pi() -> None:
    entry = dumps(msg("u2", "u1", user("b")))[:-1] + b',"n":' + b"1" * 5_000 + b"}"
    t = parse_transcript(jsonl(header(), msg("u1", None, user("a")), entry))
    assert t.problems == []
    assert t.leaf_id == "u2"


def test_unreadable_path_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    missing = read_transcript(tmp_path / "nope.jsonl")
    assert [p.kind for p in missing.problems] == ["unreadable"]
    assert not missing.usable
    directory = read_transcript(tmp_path)
    assert [p.kind for p in directory.problems] == ["unreadable"]


# ------------------------------------------------------------------------------------------------------------
# Lines pi keeps that a stricter reader lost (issue 9). What pi does with each is checked against pi itself in
# test_fuzz_differential.py (INSTANCES); here, what our reader reports about them.


def with_raw(entry: Json, placeholder: str, raw: bytes) -> bytes:
    """The entry's line with the JSON string ``placeholder`` replaced by bytes no encoder writes."""
    line = dumps(entry)
    assert line.count(json.dumps(placeholder).encode()) == 1
    return line.replace(json.dumps(placeholder).encode(), raw)


@pytest.mark.parametrize("depth", [300, 1_100, 100_000])
def test_a_deeply_nested_line_is_kept_reported_and_never_committed(depth: int) -> None:
    nested = b"[" * depth + b"]" * depth
    deep = with_raw(msg("u2", "u1", user("b"), x="NESTED"), "NESTED", nested)
    t = parse_transcript(jsonl(header(), msg("u1", None, user("a")), deep, msg("u3", "u2", user("c"))))
    assert [e["id"] for e in t.branch()] == ["u1", "u2", "u3"]  # the history behind it is not cut off
    assert [m["content"][0]["text"] for m in build_context(t).messages] == ["a", "b", "c"]
    assert kinds(t) == [("too_deep", 3)]
    assert t.usable and not t.committable


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (b'{"totalTokens":1e308}', "1e+308"),
        (b'{"totalTokens":1e400}', "inf"),
        (b'{"input":1e308,"output":1e308,"cacheRead":0,"cacheWrite":0}', "inf"),
        (b'{"totalTokens":1' + b"0" * 400 + b"}", "inf"),
        (b'{"input":1e400,"output":-1e400,"cacheRead":0,"cacheWrite":0}', "nan"),
    ],
    ids=["1e308", "1e400", "sum-overflows", "400-digits", "inf-minus-inf"],
)
def test_a_usage_beyond_what_we_count_is_reported(usage: bytes, expected: str) -> None:
    reply = with_raw(msg("a1", "u1", {**assistant("hi"), "usage": "USAGE"}), "USAGE", usage)
    t = parse_transcript(jsonl(header(), msg("u1", None, user("q")), reply))
    assert [(p.kind, p.line) for p in t.problems] == [("figure_overflow", 3)]
    assert expected in t.problems[0].message
    assert t.committable  # the figure is clamped; the reading itself is pi's


def test_number_and_true_ids_link_entries_as_in_pi_and_block_commits() -> None:
    entries = [msg(5, None, user("one")), msg("a2", 5.0, user("two")), msg(True, "a2", user("three"))]
    entries.append(msg("a4", True, user("four")))
    t = parse_transcript(jsonl(header(), *entries))
    assert [m["content"][0]["text"] for m in build_context(t).messages] == ["one", "two", "three", "four"]
    assert kinds(t) == [("non_string_id", 2), ("non_string_id", 4)]
    assert not t.committable


def test_a_null_leaf_id_gives_the_empty_context_pi_gives() -> None:
    t = parse_transcript(jsonl(header(), msg("a1", None, user("one")), msg(None, "a1", user("two"))))
    assert t.branch() == [] and build_context(t).messages == []


def test_a_message_that_is_not_an_object_is_reported_and_never_committed() -> None:
    t = parse_transcript(jsonl(header(), msg("u1", None, user("a")), msg("u2", "u1", "just text")))  # type: ignore[arg-type]
    assert kinds(t) == [("message_not_object", 3)]
    assert t.usable and not t.committable


def test_whitespace_pi_trims_off_the_file_does_not_cost_the_first_or_last_line() -> None:
    last = dumps(msg("u2", "u1", user("b")))
    data = b"\xc2\xa0\x0b" + jsonl(header(), msg("u1", None, user("a"))) + last + "\u3000\u2028".encode()
    t = parse_transcript(data + b"\n")
    assert [e["id"] for e in t.branch()] == ["u1", "u2"]
    assert kinds(t) == [("leading_whitespace", 1), ("trailing_whitespace", 3)]
    assert t.header_span is not None and data[slice(*t.header_span)] == dumps(header())
    assert data[slice(*t.spans[-1])] == last  # a rotation copies the line pi parsed, without the whitespace
    # Once a line follows it, pi no longer trims it off: the line is skipped, as in pi.
    t = parse_transcript(data + b"\n" + jsonl(msg("u3", "u2", user("c"))))
    assert [e["id"] for e in t.entries] == ["u1", "u3"]
    assert ("malformed_line", 3) in kinds(t)


def test_a_line_of_javascript_whitespace_is_blank_as_in_pi() -> None:
    t = parse_transcript(jsonl(header(), msg("u1", None, user("a")), "\u00a0\u3000".encode(), b"\x0c"))
    assert t.problems == []


_JSON_PIECES = st.sampled_from(
    ["[", "]", "{", "}", ",", ":", " ", "\t", "\n", '"a"', '"\\ud83d"', '"\\u00e9\\n"', '"x', "1", "-0",
     "1.5e3", "1e400", "01", "1.", "true", "false", "null", "nul", "NaN", "\ufeff", '"\x01"', "\u00a0"]
)  # fmt: skip


@pytest.mark.slow  # hypothesis-heavy or runs pi: left to the full run
@settings(max_examples=400, deadline=None)
@given(st.lists(_JSON_PIECES, max_size=16).map("".join) | st.text(max_size=30))
def test_the_iterative_parser_accepts_and_builds_exactly_what_the_json_module_does(text: str) -> None:
    """Lines nested past Python's stack go to ``_parse_iteratively``; it must be ``json.loads`` otherwise."""
    from compactd.core.jsjson import _parse_iteratively, loads

    try:
        expected: Any = loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            _parse_iteratively(text)
        return
    assert _parse_iteratively(text) == expected
    assert json.dumps(_parse_iteratively(text)) == json.dumps(expected)  # same key order, types, -0.0


def test_reuse_shares_equal_entries_once_and_never_those_of_an_older_version() -> None:
    def data(version: int, ids: list[str]) -> bytes:
        header = {"type": "session", "version": version, "id": "s", "timestamp": "2026-01-01T00:00:00.000Z"}
        rows = [header] + [
            {"type": "custom", "id": i, "parentId": None, "timestamp": "2026-01-01T00:00:00.000Z"}
            for i in ids
        ]
        return b"".join(json.dumps(r).encode() + b"\n" for r in rows)

    v3 = data(3, ["a", "b", "a"])
    known = parse_transcript(v3)
    again = parse_transcript(v3, reuse=known.by_id())
    assert again.entries == known.entries
    assert again.entries[1] is known.by_id()["b"]
    first, last = (e for e in again.entries if e["id"] == "a")
    assert first is known.by_id()["a"] and last is not first  # shared once: a repeated id's lines stay two
    v2 = data(2, ["a", "b"])
    older = parse_transcript(v2)
    assert not any(
        x is y for x, y in zip(parse_transcript(v2, reuse=older.by_id()).entries, older.entries, strict=True)
    )


@pytest.mark.parametrize(
    ("usage", "reported"),
    [
        (b'{"totalTokens":9007199254740991}', False),  # MAX_TOKENS itself: counted as it is
        (b'{"totalTokens":9007199254740992}', True),  # one past it
        (b'{"totalTokens":18446744073709551615}', True),  # past it by far, still an integer
        (b'{"totalTokens":1}', False),
        (b'{"totalTokens":0,"input":9007199254740992}', True),  # 0 falls back to the parts
        (b'{"totalTokens":-5,"input":3}', False),  # a negative total is what it is (no fallback, no overflow)
        (b'{"totalTokens":true,"input":9007199254740992}', True),  # a boolean is no number: the parts count
        (b'{"totalTokens":9007199254740992.0}', True),
        # No total (or 0): whole parts, none negative, within the count in all need no doubles either
        (b'{"input":1,"output":2,"cacheRead":3,"cacheWrite":4}', False),
        (b'{"totalTokens":0,"input":9007199254740990,"output":1}', False),  # MAX_TOKENS exactly
        (b'{"totalTokens":0,"input":9007199254740990,"output":2}', True),
        (b'{"input":4503599627370496,"output":4503599627370496}', True),  # 2**53 in all
        (b'{"totalTokens":null,"input":9007199254740992,"output":-1}', False),  # a negative part: in doubles
        (b'{"input":9007199254740995,"output":-4}', True),  # 2**53+3 is 2**53+4 as a double; 2**53-1 exact
        (b'{"input":-9007199254740993,"output":18014398509481985}', True),
        (b'{"input":1.5,"output":9007199254740990}', True),  # a fraction: added in doubles
        (b'{"input":true,"output":9007199254740991}', False),  # a boolean part counts nothing
        (b'{"input":"9007199254740992"}', False),  # a string part counts nothing
        (b'{"input":1e400}', True),  # infinity
        (b'{"input":9007199254740991,"output":9007199254740991,"cacheRead":-9007199254740991}', False),
        (b'{"totalTokens":0.0,"input":9007199254740992}', True),
    ],
)
def test_a_stated_integer_total_within_the_count_needs_no_sum(usage: bytes, reported: bool) -> None:
    """The branch check takes an integer ``totalTokens`` from 1 to ``MAX_TOKENS`` as within the count without
    adding the parts; anything else is added up as ``usage_total`` does, and reported past the count."""
    reply = with_raw(msg("a1", "u1", {**assistant("hi"), "usage": "USAGE"}), "USAGE", usage)
    data = jsonl(header(), msg("u1", None, user("q")), reply)
    for lean in (False, True):
        t = parse_transcript(data, lean=lean)
        assert [(p.kind, p.line) for p in t.problems] == ([("figure_overflow", 3)] if reported else [])
