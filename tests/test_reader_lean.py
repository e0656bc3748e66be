"""A lean reading (``parse_transcript(..., lean=True)``) is the same reading as the full one.

It keeps only the current branch's entries as dicts (issue 22 item 3: 100,000 orphans cost their bytes, not
1.1 KB of dicts each), so everything else it says (problems in order, branch, leaf, links, every entry when
asked) must equal what the full reading says, and a successor built on it must be byte for byte the one built
on the full reading. Generated transcripts: forks, orphans under missing parents, repeated ids with the same
or other content, ids that are not strings, labels, junk and malformed lines, deep nesting, cycles.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from compactd.commit.successor import PlanError, build_successor, verify
from compactd.core.reader import MAX_DEPTH, Problem, Transcript, parse_transcript
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.scans import OpeningScans
from tests.test_differential import REAL_DIR, REAL_NAMES

HEADER = {
    "type": "session",
    "version": 3,
    "id": "s-lean",
    "timestamp": "2026-01-01T00:00:00.000Z",
    "cwd": "/x",
}


def _message(entry_id: Any, parent: Any, role: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1},
    }


def generated(seed: int, size: int, *, blocking: bool = True) -> bytes:
    """A transcript of ``size`` lines drawn from every shape a lean reading must read as the full one does
    (``blocking=False``: none of those that forbid a compaction)."""
    rng = random.Random(seed)
    lines: list[bytes] = [orjson.dumps(HEADER)]
    ids: list[str] = []
    for n in range(size):
        roll = rng.random()
        parent: Any = ids[-1] if ids else None
        if roll < 0.15 and ids:
            parent = rng.choice(ids)  # a fork
        elif roll < 0.25:
            parent = f"gone{n}"  # an orphan
        elif roll < 0.28 and blocking:
            parent = rng.choice([None, "", 5, True, ["x"], {"a": 1}])
        entry_id: Any = f"e{n}"
        if roll > 0.95 and ids:
            entry_id = rng.choice(ids)  # a repeated id, same or other content
        elif 0.93 < roll <= 0.95 and blocking:
            entry_id = rng.choice([None, 7, True, "", ["l"]])
        kind = rng.random()
        if kind < 0.05 and ids:
            entry: dict[str, Any] = {
                "type": "label",
                "id": entry_id,
                "parentId": parent,
                "targetId": rng.choice(ids),
            }
        elif kind < 0.08:
            entry = {
                "type": "model_change",
                "id": entry_id,
                "parentId": parent,
                "provider": "p",
                "modelId": "m",
            }
        elif kind < 0.10 and blocking:
            entry = {"type": "message", "id": entry_id, "parentId": parent, "message": "not an object"}
        elif kind < 0.11 and blocking:
            deep: Any = "x"
            for _ in range(MAX_DEPTH + 2):
                deep = [deep]
            entry = {"type": "custom", "id": entry_id, "parentId": parent, "data": deep}
        else:
            role = rng.choice(["user", "assistant"])
            entry = _message(entry_id, parent, role, f"text {n} " * rng.randint(1, 5))
        if isinstance(entry_id, str) and entry_id in ids and rng.random() < 0.5:
            # the same line again, byte for byte
            lines.append(
                lines[1 + ids.index(entry_id)]
                if 1 + ids.index(entry_id) < len(lines)
                else orjson.dumps(entry)
            )
        else:
            lines.append(orjson.dumps(entry))
        if isinstance(entry_id, str):
            ids.append(entry_id)
        extra = rng.random()
        if extra < 0.02:
            lines.append(b"{not json")
        elif extra < 0.03:
            lines.append(b"[1, 2]")  # JSON, not an object
        elif extra < 0.04:
            lines.append(b"")
    if rng.random() < 0.2 and blocking:
        lines.append(b"42")  # a junk leaf
    end = b"\n" if rng.random() < 0.9 else b""
    return b"\n".join(lines) + end


def signature(t: Transcript) -> tuple[Any, ...]:
    return (
        t.header,
        t.version,
        [p.as_json() for p in t.problems],
        t.leaf_id,
        list(t.lines),
        list(t.spans),
        t.header_span,
        t.header_line,
        t.size,
        t.junk_leaf,
        t.complete,
        t.edge,
        t.null_leaf,
        t.branch(),
        t.branch_indices(),
        t.has_cycle(),
        t.leaf(),
        t.count,
        [t.id_at(i) for i in range(t.count)],
        [t.parent_at(i) for i in range(t.count)],
        [t.type_at(i) for i in range(t.count)],
        t.id_index(),
        [t.entry(i) for i in range(t.count)],
        t.committable,
    )


def assert_same_reading(data: bytes) -> Transcript:
    full = parse_transcript(data)
    lean = parse_transcript(data, lean=True)
    assert signature(lean) == signature(full)
    branch = lean.branch()
    entries = lean.entries  # every entry, parsed now: the branch's are the very objects the branch holds
    assert not lean.lean
    assert entries == full.entries
    assert all(entries[i] is e for i, e in zip(lean.branch_indices(), branch, strict=True))
    assert signature(lean) == signature(full)
    # Reusing a planned reading's entries (a commit's check) changes nothing either.
    reuse = full.by_id()
    assert signature(parse_transcript(data, reuse=reuse, lean=True)) == signature(
        parse_transcript(data, reuse=reuse)
    )
    return lean


@pytest.mark.parametrize("seed", range(40))
def test_a_lean_reading_is_the_full_reading(seed: int) -> None:
    assert_same_reading(generated(seed, 10 + seed * 5))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(1, 60))
def test_a_lean_reading_is_the_full_reading_generated(seed: int, size: int) -> None:
    assert_same_reading(generated(seed, size))


@pytest.mark.parametrize("name", REAL_NAMES)
def test_a_lean_reading_of_a_real_session_is_the_full_reading(name: str) -> None:
    path = REAL_DIR / name
    if not path.exists():
        pytest.skip("real fixtures not present")
    assert_same_reading(path.read_bytes())


def test_an_older_version_is_read_in_full() -> None:
    data = (
        orjson.dumps({**HEADER, "version": 2})
        + b"\n"
        + orjson.dumps(_message("a", None, "user", "hi"))
        + b"\n"
    )
    lean = parse_transcript(data, lean=True)
    assert not lean.lean and signature(lean) == signature(parse_transcript(data))


def test_orphans_are_held_as_bytes_not_dicts() -> None:
    lines = [orjson.dumps(HEADER)]
    lines += [orjson.dumps(_message(f"o{n}", f"gone{n}", "user", "x")) for n in range(200)]
    lines += [
        orjson.dumps(_message("b0", None, "user", "q")),
        orjson.dumps(_message("b1", "b0", "assistant", "a")),
    ]
    data = b"\n".join(lines) + b"\n"
    lean = assert_same_reading(data)
    again = parse_transcript(data, lean=True)
    assert again.lean and set(again.retained_by_id()) == {"b0", "b1"}
    assert again.file_bytes() is data  # the orphans are most of the file: its own bytes, no copy
    assert again.get("o7") == _message("o7", "gone7", "user", "x")
    assert lean.count == 202


def _compaction(first_kept: str) -> dict[str, Any]:
    return {
        "type": "compaction",
        "id": "c-new",
        "parentId": None,
        "timestamp": "2026-01-02T00:00:00.000Z",
        "summary": "s",
        "firstKeptEntryId": first_kept,
        "tokensBefore": 1,
    }


@pytest.mark.parametrize("seed", range(60))
def test_a_successor_built_on_a_lean_reading_is_byte_identical(seed: int) -> None:
    """The successor (bytes, expected context, leaf) of a lean reading is the full reading's, whatever the
    cut, with and without a pruning's replacement; the check loads it the same way."""
    rng = random.Random(seed)
    data = generated(seed, 20 + seed, blocking=False)
    data = data[: data.rfind(b"\n") + 1]
    full = parse_transcript(data)
    branch = full.branch()
    ids = [e["id"] for e in branch if isinstance(e.get("id"), str)]
    if not full.committable or len(ids) < 2:
        pytest.skip("nothing to compact on this one")
    first_kept = rng.choice(ids[1:])
    replacements: dict[str, Any] = {}
    target = rng.choice(ids)
    if rng.random() < 0.5:
        entry = full.by_id()[target]
        replacements[target] = {**entry, "message": {"role": "user", "content": "pruned", "timestamp": 2}}
    plans = []
    for lean in (False, True):
        transcript = parse_transcript(data, lean=lean)
        try:
            plans.append(build_successor(data, transcript, _compaction(first_kept), None, replacements))
        except PlanError as exc:
            plans.append(exc.reason)  # type: ignore[arg-type]
    a, b = plans
    if isinstance(a, str):
        assert a == b
        return
    assert not isinstance(b, str)
    assert (a.data, a.leaf_id, a.expected, a.thinking_level, a.allowed_pairing, a.new_ids) == (
        b.data,
        b.leaf_id,
        b.expected,
        b.thinking_level,
        b.allowed_pairing,
        b.new_ids,
    )
    assert (a.summarized, a.kept, a.reserialized) == (b.summarized, b.kept, b.reserialized)
    outcomes = []
    for plan in (a, b):
        try:
            outcomes.append(signature(verify(plan.data, plan, strict_structure=False)))
        except PlanError as exc:
            outcomes.append((exc.reason,))
    assert outcomes[0] == outcomes[1]


def _mostly_branch(seed: int) -> bytes:
    """A long branch with a few lines off it (orphans, a fork, a label on a forked entry): the lean reading
    keeps a copy of just those lines, not the file's bytes."""
    rng = random.Random(seed)
    lines = [orjson.dumps(HEADER)]
    ids: list[str] = []
    for n in range(80):
        parent = ids[-1] if ids else None
        roll = rng.random()
        if roll < 0.05:
            lines.append(orjson.dumps(_message(f"o{n}", f"gone{n}", "user", "orphan")))
        elif roll < 0.08 and ids:
            fork = f"f{n}"
            lines.append(orjson.dumps(_message(fork, rng.choice(ids), "user", "fork")))
            lines.append(orjson.dumps({"type": "label", "id": f"l{n}", "parentId": fork, "targetId": fork}))
        entry_id = f"e{n}"
        lines.append(
            orjson.dumps(_message(entry_id, parent, rng.choice(["user", "assistant"]), f"turn {n} " * 20))
        )
        ids.append(entry_id)
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize("seed", range(20))
def test_a_few_lines_off_the_branch_are_kept_as_a_copy(seed: int) -> None:
    data = _mostly_branch(seed)
    lean = parse_transcript(data, lean=True)
    off = [i for i in range(lean.count) if not str(lean.id_at(i)).startswith("e")]
    if not off:
        pytest.skip("nothing off the branch in this one")
    assert lean.lean and lean.file_bytes() is None
    assert [lean.entry(i) for i in off] == [parse_transcript(data).entries[i] for i in off]
    assert_same_reading(data)
    ids = [e["id"] for e in parse_transcript(data).branch()]
    plans = [
        build_successor(data, parse_transcript(data, lean=lean_), _compaction(ids[len(ids) // 2]), None, {})
        for lean_ in (False, True)
    ]
    assert plans[0].data == plans[1].data and plans[0].expected == plans[1].expected


def _brackets_per_line(data: bytes) -> list[int]:
    return [line.count(b"{") + line.count(b"[") for line in data.split(b"\n")]


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_bracket_heavy_lines_are_those_with_more_than_max_depth_opening_bytes(bom: bytes) -> None:
    """The lean reading walks only these lines for ``too_deep``: exactly the lines two counts per line found
    (a line's brackets inside strings count too: a superset of the deep ones is enough), numbered as ``Scan``
    numbers them, a BOM and blank lines included."""
    from compactd.core.reader import bracket_heavy_lines

    lines = [
        orjson.dumps(HEADER),
        b"[" * MAX_DEPTH + b"]" * MAX_DEPTH,  # exactly the limit: not heavy
        b"",
        b"{" * (MAX_DEPTH // 2) + b"[" * (MAX_DEPTH // 2 + 1),  # one more, of both kinds: heavy
        orjson.dumps({"text": "{" * (MAX_DEPTH + 1)}),  # only in a string: still heavy (never missed)
        b"x" * 5000,
        b"{" * (MAX_DEPTH + 5),  # an unterminated last line
    ]
    data = bom + b"\n".join(lines)
    expected = {n for n, c in enumerate(_brackets_per_line(data), 1) if c > MAX_DEPTH}
    assert bracket_heavy_lines(data) == expected == {4, 5, 7}
    assert bracket_heavy_lines(data + b"\n") == expected
    assert bracket_heavy_lines(b"") == frozenset()
    assert bracket_heavy_lines(orjson.dumps(HEADER) + b"\n") == frozenset()


def test_a_deep_line_is_found_among_heavy_ones_and_not_elsewhere() -> None:
    """``too_deep`` from the lean reading names the deep line, not the merely bracket-heavy ones around it."""
    deep: Any = "x"
    for _ in range(MAX_DEPTH + 3):
        deep = [deep]
    heavy_shallow = {"text": "[" * (MAX_DEPTH * 2)}
    rows = [
        HEADER,
        _message("a", None, "user", "hi"),
        {"type": "custom", "id": "b", "parentId": "a", "data": heavy_shallow},
        {"type": "custom", "id": "c", "parentId": "b", "data": deep},
        _message("d", "c", "user", "again"),
    ]
    data = b"\n".join(orjson.dumps(r) for r in rows) + b"\n"
    lean = parse_transcript(data, lean=True)
    assert lean.lean
    assert [(p.kind, p.line) for p in lean.problems] == [("too_deep", 4)]
    assert lean.problems == parse_transcript(data).problems


def test_deep_lines_that_are_no_entry_are_not_looked_up_as_entries() -> None:
    """A bracket-heavy line that is no entry (a value that is not an object, a malformed line) is
    passed over, as the full reading's check passes it: only the entries' lines are looked up (bisected)."""
    deep = _deep()
    lines = [
        orjson.dumps(HEADER),
        orjson.dumps(deep),  # JSON, not an object: skipped as junk
        b"[" * (MAX_DEPTH + 5),  # malformed
        b"",
        orjson.dumps(_message("a", None, "user", "hi")),
        orjson.dumps({"type": "custom", "id": "b", "parentId": "a", "data": deep}),
        orjson.dumps(deep),
        b"{" * (MAX_DEPTH + 1),
        orjson.dumps(_message("c", "b", "user", "again")),
    ]
    data = b"\n".join(lines) + b"\n"
    lean = parse_transcript(data, lean=True)
    assert lean.lean
    assert [(p.kind, p.line) for p in lean.problems if p.kind == "too_deep"] == [("too_deep", 6)]
    assert lean.problems == parse_transcript(data).problems


def _deep(levels: int = MAX_DEPTH + 3) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


def _deep_rows(where: str) -> list[dict[str, Any]]:
    """A session with one value nested too deep ``where``: the header, the first entry, the middle of the
    branch, an orphan off it, the last entry; and a bracket-heavy shallow line always."""
    rows: list[dict[str, Any]] = [
        {**HEADER, "extra": _deep()} if where == "header" else HEADER,
        _message("a", None, "user", "hi"),
        {"type": "custom", "id": "b", "parentId": "a", "data": {"text": "[" * (MAX_DEPTH * 2)}},
        _message("c", "b", "assistant", "yes"),
        {"type": "custom", "id": "o", "parentId": "gone", "data": "orphan"},
        _message("d", "c", "user", "again"),
    ]
    at = {"first": 1, "middle": 3, "orphan": 4, "last": 5}.get(where)
    if at is not None:
        rows[at] = {**rows[at], "deep": _deep()}
    return rows


@pytest.mark.parametrize("where", ["header", "first", "middle", "orphan", "last", "nowhere"])
@pytest.mark.parametrize("asked", ["problems", "blocking", "committable", "too_deep", "reason", "entries"])
def test_a_lean_reading_checks_its_nesting_when_its_problems_are_first_read(
    monkeypatch: pytest.MonkeyPatch, where: str, asked: str
) -> None:
    """Not before (what a session that fits is asked never needs it: no scan of its bytes), and whichever way
    its problems are first observed, they are the full reading's: ``too_deep`` in the same order and place,
    other code's appended after them."""
    from compactd.core.decision import blocked_reason

    data = b"\n".join(orjson.dumps(r) for r in _deep_rows(where)) + b"\n"
    full = parse_transcript(data)
    deep = [p.line for p in full.problems if p.kind == "too_deep"]
    assert deep == ({"header": [1], "first": [2], "middle": [4], "orphan": [5], "last": [6]}.get(where) or [])
    calls = OpeningScans(monkeypatch).sizes
    lean = parse_transcript(data, lean=True)
    assert lean.lean and [e["id"] for e in lean.branch()] == [e["id"] for e in full.branch()]
    assert lean.usable and not lean.has_problem("trailing_whitespace") and lean.has_problem("dangling_parent")
    assert calls == []
    if asked == "entries":
        assert lean.entries == full.entries and not lean.lean and calls == []  # (the lines' values dropped)
    observed = {
        "problems": lambda: lean.problems,
        "blocking": lambda: lean.blocking,
        "committable": lambda: lean.committable,
        "too_deep": lambda: lean.has_problem("too_deep"),
        "reason": lambda: blocked_reason(lean),
        "entries": lambda: lean.problems,
    }[asked]()
    expected = {
        "problems": full.problems,
        "blocking": full.blocking,
        "committable": full.committable,
        "too_deep": bool(deep),
        "reason": blocked_reason(full),
        "entries": full.problems,
    }[asked]
    assert observed == expected and calls == [len(data)]
    lean.problems.append(Problem("other", None, "appended by its reader"))
    assert lean.problems == [*full.problems, Problem("other", None, "appended by its reader")]
    assert lean.committable == full.committable == (not deep) and calls == [len(data)]  # checked once


def chain(seed: int, size: int) -> bytes:
    """A straight chain (every entry the child of the one before: the lean reading's shortcut, no walk), with
    at most one twist drawn from those that end the shortcut or must not be taken for one: the first entry's
    parent naming a later one (a cycle), the last one forking, an id repeated or empty or not a string (or
    ``5`` then ``5.0``, one link key), a line repeated byte for byte, a junk leaf, a null leaf, a parent that
    is a number where the chain's ids are numbers."""
    rng = random.Random(seed)
    numeric = rng.random() < 0.2
    ids: list[Any] = [(n + 1 if numeric else f"c{n}") for n in range(size)]
    parents: list[Any] = [None, *ids[:-1]]
    twist = rng.choice(
        ["none", "cycle", "fork", "repeat", "empty", "not_str", "same_line", "junk", "null_leaf", "float"]
    )
    at = rng.randrange(size)
    if twist == "cycle":
        parents[0] = ids[at]
    elif twist == "fork" and size > 2:
        parents[-1] = ids[rng.randrange(size - 2)]
    elif twist == "repeat" and at > 0:
        ids[at] = ids[rng.randrange(at)]
    elif twist == "empty":
        ids[at] = ""
    elif twist == "not_str":
        ids[at] = rng.choice([None, True, ["l"]])
    elif twist == "null_leaf":
        ids[-1] = None
    elif twist == "float" and numeric and at > 0:
        parents[at] = float(parents[at]) if parents[at] is not None else None
    rows = [
        orjson.dumps(_message(i, p, rng.choice(["user", "assistant"]), f"t{n}"))
        for n, (i, p) in enumerate(zip(ids, parents, strict=True))
    ]
    if twist == "same_line" and at > 0:
        rows.insert(at, rows[at - 1])
    if twist == "junk":
        rows.append(b"42")
    return b"\n".join([orjson.dumps(HEADER), *rows]) + b"\n"


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 12))
def test_a_straight_chain_read_lean_is_the_full_reading(seed: int, size: int) -> None:
    """The shortcut for a chain read whole (``_parse_lean``'s ``chain``) gives the walk's branch, cycle and
    problems, and is not taken where the chain is broken."""
    assert_same_reading(chain(seed, size))


def with_branch_problems(seed: int, size: int, *, blocking: bool = True) -> bytes:
    """A transcript whose branch may hold every kind ``_branch_problems`` reports: tool calls answered, answered
    twice, never answered, results with no call, errored turns; usage figures within and beyond what we count;
    compactions keeping from an entry on the branch or not; context edits valid, invalid, naming no entry on the
    branch. With forks and orphans, and (``blocking``) a line nested too deep, an id or a message that block."""
    rng = random.Random(seed)
    lines: list[bytes] = [orjson.dumps(HEADER)]
    ids: list[str] = []
    calls: list[str] = []
    for n in range(size):
        roll = rng.random()
        parent: Any = ids[-1] if ids else None
        if roll < 0.1 and ids:
            parent = rng.choice(ids)  # a fork
        elif roll < 0.15:
            parent = f"gone{n}"  # an orphan
        entry_id: Any = f"e{n}"
        if roll > 0.97 and blocking:
            entry_id = rng.choice([7, None])
        stamp = "2026-01-01T00:00:00.000Z"
        kind = rng.random()
        target = rng.choice([*ids[-5:], "nowhere"]) if ids else "nowhere"
        if kind < 0.06:
            entry: dict[str, Any] = {
                "type": "compaction",
                "id": entry_id,
                "parentId": parent,
                "timestamp": stamp,
                "summary": "s",
                "firstKeptEntryId": target,
                "tokensBefore": 1,
            }
        elif kind < 0.14:
            entry = {"type": "context_edit", "id": entry_id, "parentId": parent, "targetId": target}
            replacement = rng.choice(
                [
                    None,
                    {"content": "x"},
                    {"content": [{"type": "text", "text": "x"}]},
                    {"content": 5},
                    "bad",
                    0,
                ]
            )
            if replacement != 0:
                entry["replacement"] = replacement  # (0: none at all)
        elif kind < 0.40:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": "calling"}]
            for _ in range(rng.randint(0, 2)):
                calls.append(f"call{len(calls)}")
                blocks.append({"type": rng.choice(["toolCall", "toolUse"]), "id": calls[-1], "name": "bash"})
            usage = rng.choice(
                [
                    {"totalTokens": 10},
                    {"totalTokens": 2**60},
                    {"totalTokens": 1e300},
                    {"totalTokens": -1.5},
                    {"input": 2**52, "output": 2**52, "cacheRead": 0, "cacheWrite": 0},
                    {"input": 3, "output": 4, "totalTokens": 0},
                    "none",
                ]
            )
            message: Any = {
                "role": "assistant",
                "content": blocks,
                "stopReason": rng.choice(["toolUse", "toolUse", "stop", "error", "aborted"]),
                "usage": usage,
                "timestamp": 1,
            }
            entry = {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": stamp,
                "message": message,
            }
        elif kind < 0.70:
            call = rng.choice(calls[-3:]) if calls and rng.random() < 0.85 else rng.choice(["nocall", None])
            message = {
                "role": "toolResult",
                "toolCallId": call,
                "content": [],
                "isError": False,
                "timestamp": 1,
            }
            entry = {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": stamp,
                "message": message,
            }
        elif kind < 0.73 and blocking:
            entry = {"type": "custom", "id": entry_id, "parentId": parent, "data": _deep()}
        elif kind < 0.75 and blocking:
            entry = {"type": "message", "id": entry_id, "parentId": parent, "message": ["not", "an object"]}
        else:
            entry = _message(entry_id, parent, "user", f"turn {n}")
        lines.append(orjson.dumps(entry))
        if isinstance(entry_id, str):
            ids.append(entry_id)
    return b"\n".join(lines) + b"\n"


def _blocking_of(problems: list[Problem]) -> list[Problem]:
    from compactd.core.reader import BLOCKING_KINDS, FATAL_KINDS

    return [p for p in problems if p.kind in FATAL_KINDS or p.kind in BLOCKING_KINDS]


def test_the_generator_reaches_every_kind_of_branch_problem_and_they_are_owed() -> None:
    """Every kind the branch's walk reports comes up in ``with_branch_problems``, and is one of those a lean
    reading owes (``_OWED_KINDS``: ``has_problem`` of such a kind works them out first)."""
    from compactd.core.reader import _OWED_KINDS, _branch_problems

    kinds: set[str] = set()
    for seed in range(40):
        full = parse_transcript(with_branch_problems(seed, 60))
        branch = full.branch()
        kinds |= {p.kind for p in _branch_problems(branch, [full.lines[i] for i in full.branch_indices()])}
    assert kinds == _OWED_KINDS - {"too_deep"}


@pytest.mark.parametrize("seed", range(40))
def test_a_lean_reading_with_branch_problems_is_the_full_reading(seed: int) -> None:
    assert_same_reading(with_branch_problems(seed, 10 + seed * 3))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(1, 60), st.booleans())
def test_a_lean_reading_with_branch_problems_is_the_full_reading_generated(
    seed: int, size: int, blocking: bool
) -> None:
    assert_same_reading(with_branch_problems(seed, size, blocking=blocking))


_ASKED = [
    "problems",
    "blocking",
    "committable",
    "usable",
    "reason",
    *(
        f"has_{kind}"
        for kind in (
            "too_deep",
            "context_edit_invalid",
            "context_edit_target_missing",
            "orphan_tool_result",
            "missing_tool_result",
            "figure_overflow",
            "first_kept_not_on_branch",
            "dangling_parent",
            "trailing_whitespace",
        )
    ),
]


def _ask(transcript: Transcript, name: str) -> Any:
    """One of the ways a reading's problems are observed (``_ASKED``)."""
    from compactd.core.decision import blocked_reason

    if name.startswith("has_"):
        return transcript.has_problem(name.removeprefix("has_"))
    if name == "reason":
        return blocked_reason(transcript)
    if name == "problems":
        return list(transcript.problems)
    return getattr(transcript, name)  # blocking, committable, usable


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.integers(1, 40),
    st.booleans(),
    st.permutations(_ASKED),
    st.integers(0, len(_ASKED)),
)
def test_a_lean_readings_problems_are_the_full_readings_whatever_is_read_first(
    seed: int, size: int, blocking: bool, order: list[str], asked: int
) -> None:
    """Whichever of its accessors is read first (and whatever follows), a lean reading answers what the full
    reading (every problem worked out as it is parsed) answers; ``blocking`` is ``problems`` filtered, in their
    order, before and after ``problems`` is read; what other code appends comes after the branch's and the
    nesting's problems."""
    data = with_branch_problems(seed, size, blocking=blocking)
    full = parse_transcript(data)
    lean = parse_transcript(data, lean=True)
    for name in order[:asked]:
        assert _ask(lean, name) == _ask(full, name), name
    assert lean.blocking == _blocking_of(lean.problems) == full.blocking == _blocking_of(full.problems)
    assert lean.problems == full.problems
    appended = Problem("other", None, "appended by its reader")
    lean.problems.append(appended)
    full.problems.append(appended)
    assert lean.problems == full.problems and lean.problems[-1] is appended
    assert lean.blocking == full.blocking and lean.committable == full.committable


@pytest.mark.parametrize("asked", ["blocking", "committable", "reason", "usable", "has_trailing_whitespace"])
def test_the_branch_problems_are_worked_out_only_when_problems_are_read(
    monkeypatch: pytest.MonkeyPatch, asked: str
) -> None:
    """What a decision asks (``blocking`` and what depends on it, ``usable``, ``has_problem`` of a kind the
    parse finds) never walks the branch for its problems; ``problems`` does, once, and then says what the
    full reading says."""
    from compactd.core import reader

    walks: list[int] = []
    branch_problems = reader._branch_problems

    def counting(branch: list[Any], lines: Any) -> list[Problem]:
        walks.append(len(branch))
        return branch_problems(branch, lines)

    monkeypatch.setattr(reader, "_branch_problems", counting)
    for seed in range(30):
        data = with_branch_problems(seed, 40)
        lean = parse_transcript(data, lean=True)
        observed = _ask(lean, asked)
        assert walks == []
        full = parse_transcript(data)  # (its validate walks the branch)
        assert observed == _ask(full, asked)
        walks.clear()
        assert lean.problems == full.problems and len(walks) == 1
        assert lean.problems == full.problems and lean.blocking == full.blocking and len(walks) == 1
        walks.clear()


@pytest.mark.parametrize("on_branch", [True, False])
def test_an_invalid_context_edit_blocks_a_lean_reading_before_its_problems_are_read(on_branch: bool) -> None:
    rows: list[dict[str, Any]] = [
        HEADER,
        _message("a", None, "user", "hi"),
        {"type": "context_edit", "id": "x", "parentId": "a" if on_branch else "gone", "targetId": "a"},
        {"type": "context_edit", "id": "b", "parentId": "a", "targetId": "a", "replacement": {"content": 5}},
        {"type": "context_edit", "id": "c", "parentId": "b", "targetId": "nowhere", "replacement": None},
        {**_message("d", "c", "user", "deep"), "deep": _deep()},
    ]
    rows[3]["parentId"] = "x" if on_branch else "a"
    rows[2]["replacement"] = "bad"
    data = b"\n".join(orjson.dumps(r) for r in rows) + b"\n"
    full = parse_transcript(data)
    lean = parse_transcript(data, lean=True)
    edits = [3, 4] if on_branch else [4]
    assert [(p.kind, p.line) for p in lean.blocking] == [
        *(("context_edit_invalid", line) for line in edits),
        ("too_deep", 6),
    ]
    assert lean.blocking == full.blocking and lean.problems == full.problems
