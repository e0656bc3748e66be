"""The per-session ledger: folded incrementally from appended entries, reloaded only when it must be, and always
equal to the ledger of the same bytes read in one go.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from compactd.core.context import build_context
from compactd.core.ledger import SessionLedger
from compactd.core.messages import RUNTIME_CONTEXT_TYPE, llm_visible
from compactd.core.planning import tool_result_items
from compactd.core.prune import reducible_chars
from compactd.core.reader import MAX_DEPTH
from compactd.core.tokens import estimate_context_tokens, estimate_for_planning
from compactd.reading import read_transcript
from compactd.sources.files.tail import Change
from compactd.sources.files.tracker import SessionTracker
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.properties import ON_DISK

Json = dict[str, Any]
REAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"
T0 = 1_750_000_000_000


def iso(ms: int) -> str:
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def header(version: int = 3) -> Json:
    return {"type": "session", "version": version, "id": "sess-ledger", "timestamp": iso(T0), "cwd": "/w"}


def line(value: Json) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class Session:
    """Builds a transcript entry by entry, tracking the leaf as pi does (each entry a child of the last)."""

    def __init__(self) -> None:
        self.counter = 0
        self.leaf: str | None = None
        self.ids: list[str] = []

    def tick(self) -> int:
        self.counter += 1
        return T0 + self.counter * 1000

    def entry(self, kind: str, parent: str | None = "leaf", **fields: Any) -> Json:
        ms = self.tick()
        entry_id = f"id{self.counter:04d}"
        value = {
            "type": kind,
            "id": entry_id,
            "parentId": self.leaf if parent == "leaf" else parent,
            "timestamp": iso(ms),
            **fields,
        }
        self.leaf = entry_id
        self.ids.append(entry_id)
        return value

    def message(self, message: Json, parent: str | None = "leaf") -> Json:
        message = {**message, "timestamp": T0 + (self.counter + 1) * 1000}
        return self.entry("message", parent, message=message)

    def user(self, text: str, parent: str | None = "leaf") -> Json:
        return self.message({"role": "user", "content": [{"type": "text", "text": text}]}, parent)

    def assistant(
        self, text: str, total: int = 1000, stop: str = "stop", blocks: list[Json] | None = None
    ) -> Json:
        return self.message(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": text}, *(blocks or [])],
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": total},
                "stopReason": stop,
            }
        )

    def tool_result(self, call_id: str, text: str, details: Any = None, image: bool = False) -> Json:
        content: list[Json] = [{"type": "text", "text": text}]
        if image:
            content.append({"type": "image", "data": "aGk=", "mimeType": "image/png"})
        message: Json = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": "bash",
            "content": content,
            "isError": False,
        }
        if details is not None:
            message["details"] = details
        return self.message(message)


def write(path: Path, *values: Json | bytes) -> None:
    with open(path, "ab") as handle:
        for value in values:
            handle.write(value if isinstance(value, bytes) else line(value))


def one_go(path: Path) -> SessionLedger:
    return SessionLedger.from_transcript(read_transcript(path))


def started(tmp_path: Path) -> tuple[Path, Session, SessionTracker]:
    path = tmp_path / "s.jsonl"
    s = Session()
    write(
        path,
        header(),
        s.entry("model_change", provider="anthropic", modelId="claude-sonnet-4-5"),
        s.user("hello"),
        s.assistant("hi there", total=1200),
    )
    tracker = SessionTracker(str(path))
    assert tracker.refresh().change is Change.RELOADED
    return path, s, tracker


# ------------------------------------------------------------------------------------------------------------
# Incremental folding and reloads


def test_appends_that_extend_the_leaf_are_folded_without_a_reload(tmp_path: Path) -> None:
    path, s, tracker = started(tmp_path)
    size = path.stat().st_size
    for n in range(40):
        kind = n % 8
        if kind == 0:
            value = s.user(f"question {n} 中文 😀")
        elif kind == 1:
            call = {"type": "toolCall", "id": f"call{n}", "name": "bash", "arguments": {"command": f"ls {n}"}}
            value = s.assistant("checking", total=2000 + n, stop="toolUse", blocks=[call])
        elif kind == 2:
            value = s.tool_result(f"call{n - 1}", "out " * 50, details={"full": "x" * 500})
        elif kind == 3:
            value = s.entry("custom_message", customType="ext", content="note", display=True)
        elif kind == 4:
            value = s.entry("model_change", provider="openai", modelId=f"gpt-{n}")
        elif kind == 5:
            value = s.entry("label", targetId=s.ids[0], label=f"mark {n}")
        elif kind == 6:
            value = s.entry("thinking_level_change", thinkingLevel="high")
        else:
            value = s.entry("branch_summary", fromId=s.ids[-1], summary=f"tried {n}")
        write(path, value)
        assert tracker.refresh().change is Change.APPENDED
        assert tracker.reloads == 1
        assert tracker.ledger is not None
        assert tracker.ledger.figures() == one_go(path).figures()
    assert tracker.cursor.bytes_read == path.stat().st_size  # the file was read once, then only appends
    assert tracker.cursor.bytes_read > size


def test_branch_switch_triggers_a_reload(tmp_path: Path) -> None:
    path, s, tracker = started(tmp_path)
    write(path, s.user("first question"), s.assistant("long answer " * 50, total=5000))
    tracker.refresh()
    assert tracker.reloads == 1
    write(path, s.user("rephrased", parent=s.ids[2]))  # a sibling of "first question": a new branch
    update = tracker.refresh()
    assert update.change is Change.RELOADED
    assert tracker.reloads == 2
    assert tracker.ledger is not None
    assert tracker.ledger.figures() == one_go(path).figures()
    assert tracker.ledger.figures()["usage_tokens"] == 1200  # back to the usage of the branch point


def test_compaction_entry_triggers_a_reload(tmp_path: Path) -> None:
    path, s, tracker = started(tmp_path)
    write(path, s.user("more"), s.assistant("answer", total=180_000))
    tracker.refresh()
    kept = s.ids[-2]
    write(
        path,
        s.entry(
            "compaction",
            summary="S" * 400,
            firstKeptEntryId=kept,
            tokensBefore=180_000,
            details={"readFiles": [], "modifiedFiles": []},
            fromHook=False,
        ),
    )
    tracker.refresh()
    assert tracker.reloads == 2
    assert tracker.ledger is not None
    figures = tracker.ledger.figures()
    assert figures == one_go(path).figures()
    # summary (100) + kept user + kept assistant, estimated because the kept usage predates the summary
    messages = list(llm_visible(build_context(read_transcript(path)).messages))
    assert len(messages) == 3 and messages[0]["role"] == "compactionSummary"
    assert figures["planning_tokens"] == estimate_for_planning(messages).tokens >= 100


def test_repeated_header_triggers_a_reload(tmp_path: Path) -> None:
    path, _session, tracker = started(tmp_path)
    write(path, path.read_bytes())  # pi's duplicate flush: header and every entry again
    tracker.refresh()
    assert tracker.reloads == 2
    assert tracker.ledger is not None
    assert tracker.ledger.figures() == one_go(path).figures()


def test_ledger_matches_the_estimate_of_the_built_context(tmp_path: Path) -> None:
    path, s, tracker = started(tmp_path)
    write(path, s.user("x" * 401), s.tool_result("c", "y" * 99, image=True))
    tracker.refresh()
    transcript = read_transcript(path)
    estimate = estimate_context_tokens(build_context(transcript).messages)
    assert tracker.ledger is not None
    figures = tracker.ledger.figures()
    assert (figures["tokens"], figures["usage_tokens"], figures["trailing_tokens"]) == (
        estimate.tokens,
        estimate.usage_tokens,
        estimate.trailing_tokens,
    )
    assert figures["tokens"] == 1200 + 101 + (99 + 4800 + 3) // 4
    assert figures["tokens_source"] == "usage"
    assert (figures["provider"], figures["model"]) == ("anthropic", "claude-sonnet-4-5")


# ------------------------------------------------------------------------------------------------------------
# What is not counted


@pytest.mark.parametrize("incremental", [False, True], ids=["one-go", "appended"])
def test_runtime_context_and_tool_result_details_are_not_counted(tmp_path: Path, incremental: bool) -> None:
    path = tmp_path / "s.jsonl"
    s = Session()
    first = [header(), s.user("hello")]
    rest = [
        s.entry("custom_message", customType=RUNTIME_CONTEXT_TYPE, content="R" * 4000, display=False),
        s.message(
            {"role": "custom", "customType": RUNTIME_CONTEXT_TYPE, "content": "R" * 4000, "display": False}
        ),
        s.tool_result("c1", "t" * 40, details={"stdout": "D" * 100_000, "diff": ["D" * 5000]}),
        s.entry("custom_message", customType="visible.ext", content="v" * 8, display=True),
    ]
    write(path, *first)
    tracker = SessionTracker(str(path))
    tracker.refresh()
    if incremental:
        for value in rest:
            write(path, value)
            tracker.refresh()
        assert tracker.reloads == 1
    else:
        write(path, *rest)
        tracker.cursor.reset()
        tracker.refresh()
    assert tracker.ledger is not None
    figures = tracker.ledger.figures()
    assert figures == one_go(path).figures()
    assert figures["tokens"] == 14  # user 2 + toolResult 10 (its details uncounted) + visible custom 2
    context = build_context(read_transcript(path)).messages
    assert estimate_context_tokens(list(llm_visible(context))).tokens == 14
    assert estimate_context_tokens(context).tokens == 14 + 2 * 1000  # pi's own figure counts them


# ------------------------------------------------------------------------------------------------------------
# Planning figure after a compaction


def test_planning_tokens_after_a_compaction(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    s = Session()
    write(path, header(), s.user("u" * 40), s.assistant("a" * 80, total=170_000))
    kept = s.ids[0]
    write(path, s.entry("compaction", summary="S" * 400, firstKeptEntryId=kept, tokensBefore=170_000))
    tracker = SessionTracker(str(path))
    tracker.refresh()
    assert tracker.ledger is not None
    ledger = tracker.ledger
    messages = list(llm_visible(build_context(read_transcript(path)).messages))
    # pi's raw figure still anchors on the kept assistant's usage, measured before the compaction
    assert ledger.tokens == 170_000
    # the planning figure estimates everything instead: 100 (summary) + 10 + 20
    assert ledger.planning_tokens == 130 == estimate_for_planning(messages).tokens
    write(path, s.user("q" * 8))
    tracker.refresh()
    assert tracker.reloads == 1
    assert ledger.planning_tokens == 132
    write(path, s.assistant("b" * 4, total=9_000), s.user("c" * 12))
    tracker.refresh()
    assert tracker.reloads == 1
    messages = list(llm_visible(build_context(read_transcript(path)).messages))
    assert ledger.planning_tokens == 9_003 == estimate_for_planning(messages).tokens
    assert ledger.figures() == one_go(path).figures()


@pytest.mark.skipif(not REAL_DIR.is_dir(), reason="shared/fixtures/real is not on this machine")
@pytest.mark.parametrize("name", ["pi-before-compaction.v3.jsonl", "pi-large-session.v3.jsonl"])
def test_real_session_ledger_matches_the_context_estimate(name: str) -> None:
    transcript = read_transcript(REAL_DIR / name)
    ledger = SessionLedger.from_transcript(transcript)
    messages = list(llm_visible(build_context(transcript).messages))
    assert ledger.tokens == estimate_context_tokens(messages).tokens
    assert ledger.planning_tokens == estimate_for_planning(messages).tokens


# ------------------------------------------------------------------------------------------------------------
# Property: one read == the same bytes appended in random pieces

_TEXT = st.text(alphabet=st.sampled_from(list('ab c\n"\\é中文😀🎉\u2028')), max_size=60)
_GARBAGE = [b"{oops", b"\xff\xfe\xfd", b'{"type":"message","id":', b"not json at all", b"\xe4\xb8"]


@st.composite
def session_bytes(draw: st.DrawFn) -> bytes:
    s = Session()
    version = draw(st.sampled_from([3, 3, 3, 2, 1]))
    out: list[bytes] = [line(header(version))]
    next_parent: str | None = "leaf"
    reflushed = False
    calls: list[str] = []
    for _ in range(draw(st.integers(0, 25))):
        op = draw(
            st.sampled_from(
                [
                    "user",
                    "assistant",
                    "assistant",
                    "tool_result",
                    "custom_message",
                    "bash",
                    "model_change",
                    "thinking",
                    "label",
                    "custom",
                    "branch_summary",
                    "branch",
                    "compaction",
                    "garbage",
                    "blank",
                    "reflush",
                ]
            )
        )
        parent = next_parent
        next_parent = "leaf"
        if op == "branch":
            next_parent = draw(st.sampled_from([None, *s.ids])) if s.ids else None
            continue
        if op == "garbage":
            out.append(draw(st.sampled_from(_GARBAGE)) + b"\n")
            continue
        if op == "blank":
            out.append(draw(st.sampled_from([b"\n", b"  \n", b"\r\n"])))
            continue
        if op == "reflush":
            if not reflushed:
                out.extend(list(out))
                reflushed = True
            continue
        value: Json
        if op == "user":
            value = s.message({"role": "user", "content": draw(_TEXT)}, parent)
        elif op == "assistant":
            blocks: list[Json] = [{"type": "text", "text": draw(_TEXT)}]
            if draw(st.booleans()):
                blocks.append({"type": "thinking", "thinking": draw(_TEXT)})
            if draw(st.booleans()):
                calls.append(f"call{s.counter}")
                blocks.append(
                    {
                        "type": "toolCall",
                        "id": calls[-1],
                        "name": "bash",
                        "arguments": {"command": draw(_TEXT), "n": draw(st.integers(-9, 2**60))},
                    }
                )
            usage = draw(
                st.sampled_from(
                    [
                        {"input": 5, "output": 7, "cacheRead": 100, "cacheWrite": 0, "totalTokens": 0},
                        {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0},
                        {"totalTokens": 4321},
                        {"input": 1},
                        None,
                    ]
                )
            )
            message: Json = {
                "role": "assistant",
                "content": blocks,
                "provider": draw(st.sampled_from(["p1", "p2"])),
                "model": draw(st.sampled_from(["m1", "m2"])),
                "stopReason": draw(st.sampled_from(["stop", "toolUse", "aborted", "error"])),
            }
            if usage is not None:
                message["usage"] = usage
            value = s.message(message, parent)
        elif op == "tool_result":
            content: list[Json] = [{"type": "text", "text": draw(_TEXT)}]
            if draw(st.booleans()):
                content.append({"type": "image", "data": "aGk=", "mimeType": "image/png"})
            value = s.message(
                {
                    "role": "toolResult",
                    "toolCallId": draw(st.sampled_from([*calls, "unknown"])),
                    "toolName": "bash",
                    "content": content,
                    "isError": False,
                    "details": {"raw": draw(_TEXT)},
                },
                parent,
            )
        elif op == "custom_message":
            kind = draw(st.sampled_from([RUNTIME_CONTEXT_TYPE, "ext"]))
            if draw(st.booleans()):
                value = s.entry("custom_message", parent, customType=kind, content=draw(_TEXT), display=False)
            else:
                value = s.message(
                    {"role": "custom", "customType": kind, "content": draw(_TEXT), "display": True}, parent
                )
        elif op == "bash":
            value = s.message(
                {"role": "bashExecution", "command": draw(_TEXT), "output": draw(_TEXT), "exitCode": 0},
                parent,
            )
        elif op == "model_change":
            value = s.entry(
                "model_change", parent, provider="p3", modelId=draw(st.sampled_from(["m3", "m4"]))
            )
        elif op == "thinking":
            value = s.entry("thinking_level_change", parent, thinkingLevel="low")
        elif op == "label":
            value = s.entry("label", parent, targetId=draw(st.sampled_from([*s.ids, "x"])), label="l")
        elif op == "custom":
            value = s.entry("custom", parent, customType="state", data={"k": draw(_TEXT)})
        elif op == "branch_summary":
            value = s.entry("branch_summary", parent, fromId="root", summary=draw(_TEXT))
        else:
            first_kept = draw(st.sampled_from([*s.ids, "nowhere"]))
            value = s.entry(
                "compaction",
                parent,
                summary=draw(_TEXT),
                firstKeptEntryId=first_kept,
                tokensBefore=draw(st.integers(0, 10**6)),
            )
        out.append(line(value))
    return b"".join(out)


_runs = itertools.count()


def _check_tracker_against_one_go(
    folder: Path, data: bytes, cuts: list[int], refresh_after: list[bool], start: int
) -> None:
    path = folder / f"run{next(_runs)}.jsonl"
    path.write_bytes(data[:start])
    tracker = SessionTracker(str(path))
    tracker.refresh()
    written = start
    bounds = [c for c in cuts if c > start] + [len(data)]
    for index, end in enumerate(bounds):
        write(path, data[written:end])
        written = end
        if end < len(data) and not refresh_after[index % len(refresh_after)]:
            continue
        tracker.refresh()
        if data[:written].endswith(b"\n"):
            assert tracker.ledger is not None
            assert tracker.ledger.figures() == one_go(path).figures(), f"after {written} bytes"
    assert tracker.ledger is not None
    assert tracker.ledger.figures() == one_go(path).figures()


@pytest.mark.slow  # hypothesis-heavy, files on disk
@ON_DISK
@given(st.data())
def test_one_read_equals_random_sized_appends(tmp_path: Path, data: st.DataObject) -> None:
    blob = data.draw(session_bytes(), label="transcript")
    size = len(blob)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, size - 1)), max_size=30), label="cuts")))
    refresh_after = data.draw(st.lists(st.booleans(), min_size=1, max_size=8), label="refresh after piece")
    start = data.draw(st.integers(0, size), label="bytes present at the first refresh")
    _check_tracker_against_one_go(tmp_path, blob, cuts, refresh_after, start)


def test_pieces_split_inside_multibyte_characters(tmp_path: Path) -> None:
    s = Session()
    blob = line(header()) + b"".join(line(s.user("😀中é" * 20)) for _ in range(5))
    inside = [i for i in range(1, len(blob)) if (blob[i] & 0xC0) == 0x80]  # continuation bytes
    assert len(inside) > 100
    _check_tracker_against_one_go(tmp_path, blob, inside[::7], [True], 0)


# ------------------------------------------------------------------------------------------------------------
# Known divergences between the incremental path and a full read (bugs; see the report)


def _diverges(tmp_path: Path, first: bytes, second: bytes) -> tuple[Json, Json]:
    path = tmp_path / "s.jsonl"
    path.write_bytes(first)
    tracker = SessionTracker(str(path))
    tracker.refresh()
    write(path, second)
    tracker.refresh()
    assert tracker.ledger is not None
    return tracker.ledger.figures(), one_go(path).figures()


def test_appended_junk_leaf_matches_a_full_read(tmp_path: Path) -> None:
    s = Session()
    incremental, full = _diverges(tmp_path, line(header()) + line(s.user("hello world")), b"5\n")
    assert incremental == full


def test_appends_to_a_file_without_header_match_a_full_read(tmp_path: Path) -> None:
    s = Session()
    incremental, full = _diverges(
        tmp_path, line(s.user("first", parent=None)), line(s.user("x", parent=None))
    )
    assert incremental == full


def test_new_root_after_an_id_less_leaf_matches_a_full_read(tmp_path: Path) -> None:
    s = Session()
    no_id = {
        "type": "message",
        "parentId": None,
        "timestamp": iso(T0),
        "message": {"role": "user", "content": "abc"},
    }
    incremental, full = _diverges(
        tmp_path, line(header()) + line(s.user("hello")) + line(no_id), line(s.user("new root", parent=None))
    )
    assert incremental == full


# ------------------------------------------------------------------------------------------------------------
# The cold read (kept fields only, lazy estimates) equals the full read


@pytest.mark.skipif(not REAL_DIR.is_dir(), reason="shared/fixtures/real is not on this machine")
@pytest.mark.parametrize(
    "name", sorted(p.name for p in REAL_DIR.glob("*.jsonl")) if REAL_DIR.is_dir() else []
)
def test_cold_read_equals_the_full_read_on_real_sessions(name: str) -> None:
    data = (REAL_DIR / name).read_bytes()
    assert (
        SessionLedger.from_bytes(data).figures()
        == SessionLedger.from_transcript(read_transcript(REAL_DIR / name)).figures()
    )


@pytest.mark.slow  # hypothesis-heavy; the real-session case stays
@given(st.lists(st.integers(0, 11), min_size=1, max_size=40), st.booleans())
@settings(max_examples=300, deadline=None)
def test_cold_read_equals_the_full_read(shape: list[int], stale: bool) -> None:
    """Random trees: branches, compactions (kept before, after or nowhere), usage anchors fresh and stale,
    runtime context, labels, model changes and a junk last line."""
    from compactd.core.reader import parse_transcript

    lines = [header()]
    ids: list[str] = []
    for n, op in enumerate(shape):
        parent = ids[-1] if ids else None
        if op == 9 and ids:
            parent = ids[(n * 7) % len(ids)]  # a branch
        entry_id = f"{n:08x}"
        base = {"id": entry_id, "parentId": parent, "timestamp": f"2026-11-30T00:00:{n % 60:02d}.000Z"}
        if op in (0, 9):
            entry = {
                **base,
                "type": "message",
                "message": {"role": "user", "content": "u" * (n * 13 % 97), "timestamp": n},
            }
        elif op == 1:
            usage = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1000 + n}
            ts = 0 if stale else 10**15 + n
            entry = {**base, "type": "message", "message": {"role": "assistant", "content": [{"type": "text", "text": "a" * n}], "provider": "p", "model": f"m{n}", "usage": usage, "stopReason": "stop", "timestamp": ts}}  # fmt: skip
        elif op == 2:
            entry = {**base, "type": "message", "message": {"role": "toolResult", "toolCallId": "c", "toolName": "t", "content": [{"type": "text", "text": "r" * n}, {"type": "image", "data": "", "mimeType": "image/png"}], "details": {"x": "D" * 50}, "timestamp": n}}  # fmt: skip
        elif op == 3 and ids:
            kept = ids[(n * 3) % len(ids)] if n % 4 else "nowhere"
            entry = {
                **base,
                "type": "compaction",
                "summary": "S" * (n * 5),
                "firstKeptEntryId": kept,
                "tokensBefore": 5,
            }
        elif op == 4:
            entry = {**base, "type": "custom_message", "customType": RUNTIME_CONTEXT_TYPE if n % 2 else "x", "content": "c" * n, "display": False}  # fmt: skip
        elif op == 5:
            entry = {**base, "type": "model_change", "provider": "q", "modelId": f"z{n}"}
        elif op == 6:
            entry = {**base, "type": "branch_summary", "fromId": "root", "summary": "b" * (n % 3)}
        elif op == 7:
            entry = {**base, "type": "label", "targetId": parent, "label": "l"}
        else:
            entry = {**base, "type": "custom", "customType": "state", "data": {}}
        lines.append(entry)
        ids.append(entry_id)
    data = b"".join(line(e) for e in lines)
    if shape[-1] == 10:
        data += b"7\n"  # a junk last line: pi's context is empty
    assert (
        SessionLedger.from_bytes(data).figures()
        == SessionLedger.from_transcript(parse_transcript(data)).figures()
    )


# ------------------------------------------------------------------------------------------------------------
# Lines orjson refuses (issue 9): the cold read and the tailer read them as the exact reader does, never raise


def raw_user(s: Session, text: bytes, *, timestamp: bytes | None = None) -> bytes:
    """A user entry whose text (and message timestamp) are the given bytes, verbatim."""
    entry = s.user("TEXT")
    if timestamp is not None:
        entry["message"]["timestamp"] = "STAMP"
    out = line(entry).replace(b'"TEXT"', text)
    return out.replace(b'"STAMP"', timestamp) if timestamp is not None else out


ODD_LINES: dict[str, tuple[Callable[[Session], bytes], int]] = {
    # name -> (the line, after the usage anchor; its estimate in tokens)
    "lone_surrogate": (lambda s: raw_user(s, b'"half an emoji \\ud83d"'), 4),  # 15 UTF-16 units
    "invalid_utf8": (lambda s: raw_user(s, b'"bad \xff\xfe\xc3 bytes"'), 4),  # 3 x U+FFFD, as Node decodes
    "timestamp_1e400": (lambda s: raw_user(s, b'"stamp"', timestamp=b"1e400"), 2),
    "nested_100000": (lambda s: raw_user(s, b'"deep","x":' + b"[" * 100_000 + b"]" * 100_000), 1),
}


@pytest.mark.parametrize("name", list(ODD_LINES))
def test_cold_read_and_tail_of_lines_orjson_refuses(tmp_path: Path, name: str) -> None:
    make, tokens = ODD_LINES[name]
    path, s, tracker = started(tmp_path)
    odd = make(s)
    write(path, odd)  # after the usage anchor: the cold read parses its line again to estimate it
    cold = SessionLedger.from_bytes(path.read_bytes())
    assert cold.figures() == one_go(path).figures()
    assert cold.trailing_tokens == tokens
    tracker.refresh()
    assert tracker.ledger is not None and tracker.ledger.figures() == cold.figures()


def test_the_cold_read_falls_back_to_the_exact_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path, _s, _tracker = started(tmp_path)

    def broken(data: bytes) -> SessionLedger:
        raise ValueError("a bug in the fast path")

    monkeypatch.setattr("compactd.core.ledger._cold_read", broken)
    ledger = SessionLedger.from_bytes(path.read_bytes(), str(path))
    assert ledger.figures() == one_go(path).figures()
    assert "cold read failed" in caplog.text and str(path) in caplog.text


def test_the_tailer_reloads_when_folding_appended_lines_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, s, tracker = started(tmp_path)

    def broken(self: SessionLedger, entries: Any) -> bool:
        raise OverflowError("a bug in the fast path")

    monkeypatch.setattr(SessionLedger, "apply", broken)
    write(path, s.user("one more"))
    update = tracker.refresh()
    assert update.change is Change.RELOADED
    assert tracker.ledger is not None and tracker.ledger.figures() == one_go(path).figures()


def test_a_last_line_kept_only_by_pis_trim_is_reread_once_a_line_follows(tmp_path: Path) -> None:
    path, s, tracker = started(tmp_path)
    before = one_go(path).tokens
    write(path, line(s.user("k" * 400))[:-1] + "\u00a0".encode() + b"\n")
    tracker.refresh()
    assert tracker.ledger is not None and tracker.ledger.figures() == one_go(path).figures()
    assert tracker.ledger.tokens == before + 100  # pi trims the file's end: the line counts
    write(path, s.user("next"))  # now pi skips it, and "next" hangs from an entry pi no longer has
    tracker.refresh()
    assert tracker.ledger.figures() == one_go(path).figures()
    assert tracker.ledger.tokens == 1  # "next" alone: its parent is gone


def test_a_null_leaf_id_is_an_empty_context_in_the_cold_read_too(tmp_path: Path) -> None:
    path, s, _tracker = started(tmp_path)
    entry = s.user("leaf with a null id")
    write(path, line({**entry, "id": None}))
    assert SessionLedger.from_bytes(path.read_bytes()).figures() == one_go(path).figures()
    assert one_go(path).tokens == 0


# ------------------------------------------------------------------------------------------------------------
# The route's figure: the reducible tool-result characters, counted by the ledger so nothing is read twice


def _reducible_of_full_read(path: Path, cap: int) -> int | None:
    """``figures_of``'s count at ``cap`` (None: a reading no compaction is built from, the service's re-read
    says why)."""
    transcript = read_transcript(path)
    if not transcript.committable:
        return None
    return reducible_chars(tool_result_items(transcript), cap)


@ON_DISK
@given(st.data())
def test_ledger_reducible_equals_the_full_read_after_random_appends(
    tmp_path: Path, data: st.DataObject
) -> None:
    blob = data.draw(session_bytes(), label="transcript")
    cap = data.draw(st.sampled_from([1, 12, 40, 90, 400]), label="cap")
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(blob) - 1)), max_size=12), label="cuts")))
    path = tmp_path / f"reducible{next(_runs)}.jsonl"
    path.write_bytes(b"")
    tracker = SessionTracker(str(path), cap_for=lambda _ledger: cap)
    written = 0
    for end in [*cuts, len(blob)]:
        write(path, blob[written:end])
        written = end
        tracker.refresh()
        if not blob[:written].endswith(b"\n") or tracker.ledger is None:
            continue
        known = tracker.ledger.reducible
        if known is not None:  # None: not known (a tool result appended since), the service reads the file
            assert known == (cap, _reducible_of_full_read(path, cap)), f"after {written} bytes"
    tracker.cursor.reset()  # a cold read of the whole file always knows it, unless it may not be acted on
    tracker.refresh()
    assert tracker.ledger is not None
    expected = _reducible_of_full_read(path, cap)
    if expected is not None and tracker.ledger.usable:
        assert tracker.ledger.reducible == (cap, expected)


def test_ledger_reducible_kept_across_appends_without_tool_results(tmp_path: Path) -> None:
    path, s, tracker = started(tmp_path)
    write(path, s.tool_result("c1", "x" * 5_000 + "\nerror: the end"), s.tool_result("c2", "y\n" * 3_000))
    tracker = SessionTracker(str(path), cap_for=lambda _ledger: 1_000)
    tracker.refresh()
    expected = _reducible_of_full_read(path, 1_000)
    assert expected is not None and expected > 0
    assert tracker.ledger is not None and tracker.ledger.reducible == (1_000, expected)
    write(path, s.user("more"), s.assistant("sure", total=9_000))
    assert tracker.refresh().change is Change.APPENDED
    assert tracker.ledger.reducible == (1_000, expected)  # folded in: the count still holds
    snapshot = SessionLedger.from_snapshot(json.loads(json.dumps(tracker.ledger.to_snapshot())))
    assert snapshot.reducible == (1_000, expected)
    write(path, s.tool_result("c3", "z" * 3_000))
    assert tracker.refresh().change is Change.APPENDED
    assert tracker.ledger.reducible is None  # its cut depends on its text: the route reads the file


@pytest.mark.parametrize("keep_reading", [False, True])
@pytest.mark.parametrize("levels", [MAX_DEPTH - 5, MAX_DEPTH + 5])
def test_ledger_reducible_left_to_the_full_read_when_no_compaction_may_be_built(
    tmp_path: Path, keep_reading: bool, levels: int
) -> None:
    """Nested too deep, the reading is not committable: from the cold read and from a dry run's lean reading
    (``keep_reading``), whose nesting check is made when the ledger asks, after the cap."""
    path, s, _ = started(tmp_path)
    deep: Json = "x"
    for _ in range(levels):
        deep = [deep]
    write(path, s.tool_result("c1", "x" * 5_000), s.entry("custom", customType="state", data=deep))
    tracker = SessionTracker(str(path), cap_for=lambda _ledger: 1_000, keep_reading=keep_reading)
    tracker.refresh()
    assert read_transcript(path).committable is (levels < MAX_DEPTH)
    assert tracker.ledger is not None
    assert (tracker.ledger.reducible is None) is (levels > MAX_DEPTH)


@settings(max_examples=300, deadline=None)
@given(session_bytes(), st.sampled_from([1, 12, 40, 90, 400, 16_000]))
def test_the_ledger_counts_the_tool_results_of_the_branch(data: bytes, cap: int) -> None:
    """The ledger reads its items off the context (``SessionContext.tool_results``): the branch's tool results
    as ``message_entries`` gives them, which ``figures_of`` counts without a context."""
    from compactd.core.reader import parse_transcript

    transcript = parse_transcript(data)
    ledger = SessionLedger.from_transcript(transcript, cap_for=lambda _ledger: cap)
    if not transcript.committable:
        assert ledger.reducible is None
        return
    assert ledger.reducible == (cap, reducible_chars(tool_result_items(transcript), cap))


@settings(max_examples=200, deadline=None)
@given(session_bytes(), st.booleans())
def test_tool_result_items_off_the_context_are_the_branchs(data: bytes, strip: bool) -> None:
    """``tool_result_items`` given the context (its tool results, no role looked at again, a copy only of a
    result with details) lists what it lists from the branch, details stripped alike."""
    from compactd.core.reader import parse_transcript

    transcript = parse_transcript(data)
    from_context = tool_result_items(transcript, strip=strip, context=build_context(transcript))
    from_branch = tool_result_items(transcript, strip=strip)
    assert from_context == from_branch
    assert not strip or all("details" not in message for _, message in from_context)
