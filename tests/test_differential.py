"""Invariant 1: our reader sees every transcript exactly as pi 0.73.1's own loader does.

For each transcript of a corpus (the real pi sessions in ``shared/fixtures/real``, sessions written by pi's
own ``SessionManager``, and hand-made broken files) our ``build_context`` must equal pi's
``buildSessionContext`` message for message, and ``estimate_context_tokens`` must equal pi's
``estimateContextTokens`` exactly. All pi loads run in one node process (module fixture ``corpus``).

Messages are compared after one normalisation, applied to both sides, for what JSON cannot carry from
JavaScript: integers beyond 2**53 become the double JavaScript holds, and non-finite numbers become null.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from compactd.core.context import build_context
from compactd.core.tokens import estimate_context_tokens, estimate_tokens
from compactd.reading import read_transcript

from tests.support import messages as msgs

if TYPE_CHECKING:
    from tests.support.pi import Pi

pytest_plugins = ["tests.support.pi"]

Json = dict[str, Any]
Ops = list[Json]


def _real_dir() -> Path:
    configured = os.environ.get("COMPACTD_FIXTURES")
    base = Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "fixtures"
    return base / "real" if (base / "real").is_dir() else base


REAL_DIR = _real_dir()
REAL_NAMES = sorted(p.name for p in REAL_DIR.glob("*.jsonl")) or [
    "pi-before-compaction.v1.jsonl",
    "pi-before-compaction.v3.jsonl",
    "pi-large-session.v1.jsonl",
    "pi-large-session.v3.jsonl",
]

# ------------------------------------------------------------------------------------------------------------
# Message builders

T0 = 1_750_000_000_000
_clock = iter(range(T0, T0 + 10_000_000, 1_000))


def ts() -> int:
    return next(_clock)


def iso(n: int) -> str:
    return f"2025-06-01T10:{n // 60 % 60:02d}:{n % 60:02d}.{n % 1000:03d}Z"


def usage(total: int | None = None, *, input: int = 0, output: int = 0, cache_read: int = 0) -> Json:
    value: Json = {
        "input": input,
        "output": output,
        "cacheRead": cache_read,
        "cacheWrite": 0,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }
    if total is not None:
        value["totalTokens"] = total
    return value


def user(text: str | list[Json]) -> Json:
    return msgs.user(text, ts=ts())


def user_str(text: str) -> Json:
    return {"role": "user", "content": text, "timestamp": ts()}


def assistant(
    *blocks: Json | str,
    total: int | None = 1000,
    stop: str = "stop",
    provider: str = "anthropic",
    model: str = "claude-sonnet-4-5",
    use: Json | None = None,
    **extra: Any,
) -> Json:
    return msgs.assistant(
        *blocks,
        api="anthropic-messages",
        provider=provider,
        model=model,
        usage=use if use is not None else usage(total, input=(total or 0) - 50, output=50),
        stop=stop,
        ts=ts(),
        **extra,
    )


def call(call_id: str, name: str, arguments: Json) -> Json:
    return msgs.call(call_id, name, arguments)


def tool_result(call_id: str, text: str, *, name: str = "bash", error: bool = False, **extra: Any) -> Json:
    content = [msgs.text(text), *extra.pop("more", [])]
    return msgs.tool_result(call_id, content, name=name, error=error, ts=ts(), **extra)


IMAGE = {
    "type": "image",
    "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg",
    "mimeType": "image/png",
}


def mirror() -> Json:
    """OpenClaw's delivery-mirror copy of a reply: all-zero usage, stopReason stop."""
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": "Sent to the channel."}],
        "api": "openai-responses",
        "provider": "openclaw",
        "model": "delivery-mirror",
        "usage": usage(0),
        "stopReason": "stop",
        "timestamp": ts(),
    }


def m(message: Json) -> Json:
    return {"op": "appendMessage", "message": message}


# ------------------------------------------------------------------------------------------------------------
# Sessions written by pi's own SessionManager


def scenario_tools() -> Ops:
    args = {
        "command": "ls -la /srv && cat 設定.toml",
        "timeout": 1.0,
        "huge": 1e21,
        "tiny": 1e-7,
        "neg": -0.5,
        "third": 1 / 3,
        "int_like": 3.0e2,
        "nested": {"a": [1, 2.5, {"b": None, "c": True}], "k": "値", "e": "😀"},
    }
    return [
        m(user("List the files in 📁 /srv and read 設定.toml")),
        m(
            assistant(
                {"type": "thinking", "thinking": "I should run ls… 思考中", "thinkingSignature": "sig"},
                "Running tools.",
                call("call_1", "bash", args),
                call("call_2", "read", {"path": "/srv/a.txt", "offset": 0, "limit": 2000}),
                total=1234,
                stop="toolUse",
            )
        ),
        m(
            tool_result(
                "call_1", "total 0\ndrwxr-xr-x 2 root root", details={"exitCode": 0, "stdout": "x" * 5000}
            )
        ),
        m(tool_result("call_2", "file body", name="read", more=[IMAGE])),
        m(assistant("Done: two files.", use=usage(None, input=2000, output=100, cache_read=500))),
        m(user_str("now a string content message")),
        m(assistant("totalTokens 0 falls back to the sum", use=usage(0, input=3000, output=10))),
        m(user([{"type": "text", "text": "look at this"}, IMAGE])),
        m(assistant("An image, noted.", total=4100)),
        m(user("and a trailing question that is not answered yet " * 20)),
    ]


def scenario_branches_labels() -> Ops:
    return [
        m(user("a")),
        m(assistant("A")),
        m(user("b")),
        m(assistant("B")),
        {"op": "appendLabelChange", "target": 0, "label": "start"},
        {"op": "branch", "target": 1},
        m(user("b2 on another branch")),
        m(assistant("B2", total=2222)),
        {"op": "appendLabelChange", "target": 6, "label": "alt"},
        {"op": "appendLabelChange", "target": 0},  # clears the label
        {"op": "appendSessionInfo", "name": "My session 名前"},
        {"op": "branch", "target": 3},
        m(user("back on the first branch")),
        m(assistant("OK", total=1500)),
        {"op": "appendSessionInfo", "name": "  renamed  "},
    ]


def scenario_compactions() -> Ops:
    return [
        m(user("start the refactor")),  # 0
        m(assistant("Sure.", total=5000)),  # 1
        m(user("read main.ts")),  # 2
        m(assistant(call("c1", "read", {"path": "src/main.ts"}), total=6000, stop="toolUse")),  # 3
        m(tool_result("c1", "export function main() {}\n" * 40, name="read")),  # 4
        m(assistant("It is small.", total=7000)),  # 5
        {
            "op": "appendCompaction",
            "summary": "## Goal\nRefactor main.ts\n\n## Progress\n- read it",
            "firstKeptEntryId": 2,
            "tokensBefore": 7000,
            "details": {"readFiles": ["src/main.ts"], "modifiedFiles": []},
            "fromHook": False,
        },  # 6
        m(user("continue")),  # 7
        m(assistant("Continuing.", total=3000)),  # 8
        m(user("more")),  # 9
        # keeps from the first compaction entry itself, which contributes no message
        {
            "op": "appendCompaction",
            "summary": "second summary",
            "firstKeptEntryId": 6,
            "tokensBefore": 3500,
        },  # 10
        m(user("after the second compaction")),  # 11
        m(assistant("ack", total=2500)),  # 12
        {"op": "appendCompaction", "summary": "third", "firstKeptEntryId": 11, "tokensBefore": 2600},  # 13
        m(user("after the third compaction")),  # 14
    ]


def scenario_compaction_off_branch() -> Ops:
    return [
        m(user("root question")),  # 0
        m(assistant("root answer", total=900)),  # 1
        m(user("branch A")),  # 2
        m(assistant("A answer", total=1900)),  # 3
        {"op": "branch", "target": 1},  # 4
        m(user("branch B")),  # 5
        m(assistant("B answer", total=2900)),  # 6
        {
            "op": "appendCompaction",
            "summary": "summary of B",
            "firstKeptEntryId": 2,
            "tokensBefore": 2900,
        },  # 7
        m(user("after")),  # 8
        m(assistant("after answer", total=800)),  # 9
    ]


def scenario_compaction_unknown_first_kept() -> Ops:
    return [
        m(user("q")),
        m(assistant("a", total=700)),
        {"op": "appendCompaction", "summary": "gone", "firstKeptEntryId": "deadbeef", "tokensBefore": 700},
        m(user("after")),
    ]


def scenario_custom() -> Ops:
    return [
        {
            "op": "appendCustomMessageEntry",
            "customType": "openclaw.runtime-context",
            "content": "runtime context: cwd=/srv, model=claude",
            "display": False,
        },
        m(user("hello")),
        m(assistant("hi", total=1200)),
        {"op": "appendCustomEntry", "customType": "ext.state", "data": {"x": 1, "list": [1.5, "二"]}},
        {
            "op": "appendCustomMessageEntry",
            "customType": "ext.note",
            "content": [{"type": "text", "text": "a note with an image"}, IMAGE],
            "display": True,
            "details": {"k": [1, 2]},
        },
        {"op": "appendCustomEntry", "customType": "ext.nodata"},
        {"op": "appendCustomMessageEntry", "customType": "ext.empty", "content": "", "display": False},
        m(user("go on")),
        m(assistant("going", total=1700)),
        m(
            {
                "role": "custom",
                "customType": "inline",
                "content": "inline custom",
                "display": True,
                "timestamp": ts(),
            }
        ),
        m(
            {
                "role": "bashExecution",
                "command": "ls",
                "output": "a\nb\n",
                "exitCode": 0,
                "cancelled": False,
                "truncated": False,
                "timestamp": ts(),
            }
        ),
        m(
            {
                "role": "bashExecution",
                "command": "cat secret",
                "output": "hidden",
                "exitCode": 1,
                "cancelled": False,
                "truncated": False,
                "excludeFromContext": True,
                "timestamp": ts(),
            }
        ),
        m(user("last")),
        m(assistant("done", total=1900)),
    ]


def scenario_branch_summary() -> Ops:
    return [
        m(user("q1")),  # 0
        m(assistant("a1", total=500)),  # 1
        m(user("explore something")),  # 2
        m(assistant("explored", total=900)),  # 3
        {
            "op": "branchWithSummary",
            "target": 1,
            "summary": "We explored X and found Y.",
            "details": {"readFiles": []},
            "fromHook": False,
        },  # 4
        m(user("q2")),  # 5
        m(assistant("a2", total=700)),  # 6
        {"op": "branchWithSummary", "target": 6, "summary": ""},  # 7: an empty summary gives no message
        m(user("q3")),  # 8
        m(assistant("a3", total=800)),  # 9
        {"op": "branchWithSummary", "target": None, "summary": "from the root"},  # 10: a new root
        m(user("q4")),  # 11
        m(assistant("a4", total=600)),  # 12
    ]


def scenario_model_thinking() -> Ops:
    return [
        {"op": "appendModelChange", "provider": "openai", "modelId": "gpt-5"},
        {"op": "appendThinkingLevelChange", "thinkingLevel": "high"},
        m(user("q")),
        m(assistant("a", provider="openai", model="gpt-5.1-codex", total=1000)),
        {"op": "appendThinkingLevelChange", "thinkingLevel": "minimal"},
        {"op": "appendModelChange", "provider": "anthropic", "modelId": "claude-opus-4-5"},
        m(user("q2")),
        m(assistant("a2", provider="anthropic", model="claude-opus-4-5", total=2000)),
        {"op": "appendModelChange", "provider": "google", "modelId": "gemini-2.5-pro"},
        {"op": "appendThinkingLevelChange", "thinkingLevel": "medium"},
    ]


def scenario_aborted_error() -> Ops:
    return [
        m(user("q")),
        m(assistant("a", total=1000)),
        m(user("long task")),
        m(assistant(total=None, stop="aborted", use=usage(None), errorMessage="Request was aborted")),
        m(user("again")),
        m(assistant("partial", stop="error", use=usage(None), errorMessage="529 overloaded")),
        m(user("retry")),
        m(assistant("long answer " * 50, stop="length", total=8000)),
        m(user("tools please")),
        {
            "op": "appendMessage",
            "message": {**assistant(call("t1", "bash", {"command": "make"})), "stopReason": "toolUse"},
        },
        m(tool_result("t1", "make: *** [all] Error 2", error=True)),
        m({k: v for k, v in assistant("no usage field at all").items() if k != "usage"}),
        m(user("and?")),
    ]


def scenario_unicode() -> Ops:
    return [
        m(user("こんにちは世界 🌍🚀 e\u0301 \U0001f600 مرحبا \u2028\u2029 tab\tnul\x00 del\x7f")),
        m(
            assistant(
                "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 👨‍👩‍👧 漢字かなカナ",
                call(
                    "u1",
                    "write",
                    {"path": "/tmp/😀.txt", "text": "𝕏", "lone": "\ud800", "pair": "\ud83d\ude00"},
                ),
                total=3000,
                stop="toolUse",
            )
        ),
        m(tool_result("u1", "結果 \U0001f4a9 lone low \udc00 end", name="write")),
        m(user("lone high at the end \ud83d")),
        m(assistant("\U0001f600" * 100, total=3500)),
    ]


def scenario_mirror_after_usage() -> Ops:
    return [
        m(user("write me a long essay " * 200)),
        m(assistant("Here it is." * 100, total=5000)),
        m(user("send it to the channel")),
        m(mirror()),
        m(user("thanks")),
    ]


def scenario_mirror_only() -> Ops:
    return [
        m(user("question " * 100)),
        m(mirror()),
        m(user("follow-up")),
    ]


PI_SCENARIOS: dict[str, Callable[[], Ops]] = {
    "pi_tools": scenario_tools,
    "pi_branches_labels": scenario_branches_labels,
    "pi_compactions": scenario_compactions,
    "pi_compaction_off_branch": scenario_compaction_off_branch,
    "pi_compaction_unknown_first_kept": scenario_compaction_unknown_first_kept,
    "pi_custom": scenario_custom,
    "pi_branch_summary": scenario_branch_summary,
    "pi_model_thinking": scenario_model_thinking,
    "pi_aborted_error": scenario_aborted_error,
    "pi_unicode": scenario_unicode,
    "pi_mirror_after_usage": scenario_mirror_after_usage,
    "pi_mirror_only": scenario_mirror_only,
}
MIRROR_CASES = {"pi_mirror_after_usage": 1, "pi_mirror_only": None}  # case -> index of the real anchor


# ------------------------------------------------------------------------------------------------------------
# Files pi re-opens: its duplicate-flush quirk repeats the header (and entries) it loaded


def header(session_id: str, version: int | None = 3, **extra: Any) -> Json:
    value: Json = {
        "type": "session",
        "id": session_id,
        "timestamp": "2025-06-01T10:00:00.000Z",
        "cwd": "/work/p",
    }
    if version is not None:
        value["version"] = version
    value.update(extra)
    return value


def jsonl(*values: Json | bytes) -> bytes:
    """One JSON line per value (bytes are inserted verbatim, newline added)."""
    out = []
    for value in values:
        out.append(value if isinstance(value, bytes) else json.dumps(value, ensure_ascii=False).encode())
    return b"\n".join(out) + b"\n"


def msg_entry(entry_id: str | None, parent: str | None, message: Json, n: int = 1, **extra: Any) -> Json:
    entry: Json = {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": iso(n),
        "message": message,
    }
    if entry_id is None:
        del entry["id"]
    entry.update(extra)
    return entry


REOPENED: dict[str, tuple[bytes, Ops]] = {
    # A header-only file (as OpenClaw pre-creates it): the first assistant flush appends the header again.
    "pi_duplicate_header": (
        jsonl(header("dup-header-1")),
        [
            m(user("first")),
            m(assistant("reply", total=600)),
            m(user("second")),
            m(assistant("r2", total=800)),
        ],
    ),
    # A header + user file: pi re-appends the header and the user entry, identical, before its own entries.
    "pi_duplicate_entries": (
        jsonl(header("dup-entries-1"), msg_entry("u0000001", None, user("pre-created question"))),
        [m(user("another question")), m(assistant("both answered", total=900))],
    ),
}


# ------------------------------------------------------------------------------------------------------------
# Hand-made files, with the problems our reader must report: (kind, 1-based line or None)

H = header("hand-1")


def chain(count: int, prefix: str = "e", parent: str | None = None, start: int = 1) -> list[Json]:
    """``count`` alternating user/assistant entries, ids ``<prefix>0000001``..., chained from ``parent``."""
    entries = []
    for i in range(start, start + count):
        message = user(f"user turn {i}") if i % 2 else assistant(f"assistant turn {i}", total=100 * i)
        entry_id = f"{prefix}{i:07d}"
        entries.append(msg_entry(entry_id, parent, message, i))
        parent = entry_id
    return entries


def hand_files() -> dict[str, tuple[bytes, list[tuple[str, int | None]]]]:
    files: dict[str, tuple[bytes, list[tuple[str, int | None]]]] = {}
    c = chain(6)

    files["bad_malformed_middle"] = (
        jsonl(H, *c[:3], b'{"type":"message","id":"broken', *c[3:]),
        [("malformed_line", 5)],
    )
    files["bad_torn_last_line"] = (
        jsonl(H, *c)[:-1] + b'\n{"type":"message","id":"torn0001","par',
        [("torn_last_line", 8)],
    )
    files["bad_no_final_newline"] = (jsonl(H, *c)[:-1], [("torn_last_line", 7)])
    dangling = chain(6)
    dangling[3]["parentId"] = "ffffffff"
    files["bad_dangling_parent"] = (jsonl(H, *dangling), [("dangling_parent", 5)])
    files["bad_several_roots"] = (jsonl(H, *chain(3, "a"), *chain(4, "b")), [])
    orphans = chain(2, "o", parent="gone0000")
    files["bad_orphans_in_middle"] = (
        jsonl(H, *c[:3], *orphans, *chain(3, "e", c[2]["id"], 4)),
        [("dangling_parent", 5)],
    )

    unknown = chain(4)
    unknown.insert(2, {"type": "future_widget", "id": "w0000001", "parentId": "e0000002", "widget": {"a": 1}})
    unknown[3]["parentId"] = "w0000001"
    unknown[1]["message"]["futureField"] = {"nested": [1, 2]}
    unknown[1]["entryLevelExtra"] = "kept"
    unknown.append(
        msg_entry("s0000001", "e0000004", {"role": "system_note", "text": "unknown role", "timestamp": 9})
    )
    unknown.append(msg_entry("s0000002", "s0000001", user("after the unknown role")))
    files["bad_unknown_types_and_fields"] = (jsonl(H, *unknown), [])

    files["bad_duplicate_entries"] = (jsonl(H, c[0], c[0], c[1], H, c[2], c[2], c[3], H), [])
    conflicting = [*c[:4], {**c[3], "message": assistant("the later copy wins", total=4444)}]
    files["bad_conflicting_duplicate_id"] = (jsonl(H, *conflicting), [("conflicting_duplicate_id", 6)])
    files["bad_forward_parent"] = (jsonl(H, c[1], c[0], c[2]), [])
    files["bad_crlf"] = (jsonl(H, *c).replace(b"\n", b"\r\n"), [])
    files["bad_blank_lines"] = (b"\n  \n" + jsonl(H, c[0], b"", b"   \t", c[1], b"", c[2]), [])
    files["bad_garbage_first_line"] = (jsonl(b"garbage{", H, *c[:3]), [("malformed_line", 1)])
    files["bad_non_object_lines"] = (jsonl(H, c[0], b"123", b"[1, 2]", b'"text"', b"true", c[1], c[2]), [])
    files["bad_non_object_last_line"] = (jsonl(H, *c[:3], b"[]"), [])
    no_id_leaf = [*c[:3], msg_entry(None, "e0000003", user("leaf without an id"))]
    files["bad_leaf_without_id"] = (jsonl(H, *no_id_leaf), [])
    label_leaf = [
        *c[:3],
        {"type": "label", "id": "l0000001", "parentId": "e0000003", "targetId": "e0000001", "label": "x"},
    ]
    files["bad_label_leaf"] = (jsonl(H, *label_leaf), [])

    pairing = [
        msg_entry("p0000001", None, user("run two tools")),
        msg_entry(
            "p0000002",
            "p0000001",
            assistant(call("k1", "bash", {"c": 1}), call("k2", "bash", {"c": 2}), stop="toolUse"),
        ),
        msg_entry("p0000003", "p0000002", tool_result("k1", "one")),
        msg_entry("p0000004", "p0000003", user("k2 never answered")),
        msg_entry("p0000005", "p0000004", tool_result("zz", "orphan result")),
        msg_entry("p0000006", "p0000005", assistant("ok", total=900)),
    ]
    files["bad_tool_pairing"] = (jsonl(H, *pairing), [("missing_tool_result", 3), ("orphan_tool_result", 6)])

    # Lone surrogate escapes are valid JSON for JavaScript; raw invalid UTF-8 decodes to U+FFFD in Node.
    surrogates = jsonl(H, c[0]) + (
        b'{"type":"message","id":"x0000001","parentId":"e0000001","timestamp":"2025-06-01T10:00:02.000Z",'
        b'"message":{"role":"user","content":[{"type":"text","text":"lone \\ud83d and \\udc00 here"}],'
        b'"timestamp":5}}\n'
    )
    files["bad_lone_surrogates"] = (surrogates, [])
    invalid_utf8 = jsonl(H, c[0]) + (
        b'{"type":"message","id":"x0000002","parentId":"e0000001","timestamp":"2025-06-01T10:00:02.000Z",'
        b'"message":{"role":"user","content":[{"type":"text",'
        b'"text":"bad \xff \xe3\x81 \xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80 end"}],"timestamp":5}}\n'
    )
    files["bad_invalid_utf8"] = (invalid_utf8, [])
    numbers = jsonl(H, c[0]) + (
        b'{"type":"message","id":"n0000001","parentId":"e0000001","timestamp":"2025-06-01T10:00:02.000Z",'
        b'"message":{"role":"assistant","content":[{"type":"toolCall","id":"n1","name":"calc","arguments":'
        b'{"big":123456789012345678901234567890,"u64":12345678901234567891,"safe":9007199254740993,'
        b'"inf":1e400,"neg0":-0.0,"exp":1E+2,"small":5e-324,"f":1.10}}],'
        b'"api":"x","provider":"p","model":"m","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,'
        b'"totalTokens":2},"stopReason":"toolUse","timestamp":6}}\n'
    )
    files["bad_exotic_numbers"] = (numbers, [])

    stamps = [
        c[0],
        {
            "type": "custom_message",
            "id": "t0000001",
            "parentId": "e0000001",
            "customType": "x",
            "content": "bad",
            "display": True,
            "timestamp": "not a date",
        },
        {
            "type": "custom_message",
            "id": "t0000002",
            "parentId": "t0000001",
            "customType": "x",
            "content": "null",
            "display": True,
            "timestamp": None,
        },
        {
            "type": "custom_message",
            "id": "t0000003",
            "parentId": "t0000002",
            "customType": "x",
            "content": "none",
            "display": True,
        },
        {
            "type": "branch_summary",
            "id": "t0000004",
            "parentId": "t0000003",
            "fromId": "e0000001",
            "summary": "n",
            "timestamp": 1700000000000,
        },
        {
            "type": "custom_message",
            "id": "t0000005",
            "parentId": "t0000004",
            "customType": "x",
            "content": "offset",
            "timestamp": "2025-01-02T03:04:05+02:00",
        },
        {
            "type": "custom_message",
            "id": "t0000006",
            "parentId": "t0000005",
            "customType": "x",
            "content": "date",
            "timestamp": "2025-01-02",
        },
        {
            "type": "custom_message",
            "id": "t0000007",
            "parentId": "t0000006",
            "customType": "x",
            "content": "micro",
            "timestamp": "2025-01-02T03:04:05.123456Z",
        },
        {
            "type": "custom_message",
            "id": "t0000008",
            "parentId": "t0000007",
            "customType": "x",
            "content": "ms9999",
            "timestamp": "2025-01-02T03:04:05.9999Z",
        },
        {
            "type": "compaction",
            "id": "t0000009",
            "parentId": "t0000008",
            "summary": "s",
            "firstKeptEntryId": "t0000001",
            "tokensBefore": 10,
            "timestamp": "2025-01-02T03:04:05.5Z",
        },
    ]
    files["bad_timestamps"] = (jsonl(H, *stamps), [])

    v1_header = header("hand-v1", version=None)
    v1: list[Json] = [
        {"type": "message", "timestamp": iso(1), "message": user("v1 question")},
        {"type": "thinking_level_change", "timestamp": iso(2), "thinkingLevel": "high"},
        {"type": "message", "timestamp": iso(3), "message": assistant("v1 answer", total=1500)},
        {"type": "message", "timestamp": iso(4), "message": user("second")},
        {"type": "message", "timestamp": iso(5), "message": assistant("second answer", total=2500)},
        {
            "type": "compaction",
            "timestamp": iso(6),
            "summary": "v1 summary",
            "firstKeptEntryIndex": 4,
            "tokensBefore": 2500,
        },
        {"type": "message", "timestamp": iso(7), "message": user("after v1 compaction")},
    ]
    files["v1_compaction_index"] = (jsonl(v1_header, *v1), [])
    # A malformed line shifts nothing in pi: firstKeptEntryIndex counts parsed entries only.
    files["v1_with_malformed_line"] = (jsonl(v1_header, v1[0], b"{oops", *v1[1:]), [("malformed_line", 3)])
    v1_to_header = [*v1[:5], {**v1[5], "firstKeptEntryIndex": 0}, v1[6]]
    files["v1_first_kept_is_header"] = (jsonl(v1_header, *v1_to_header), [])
    v2 = [
        msg_entry("v2000001", None, user("v2 question")),
        msg_entry(
            "v2000002",
            "v2000001",
            {
                "role": "hookMessage",
                "customType": "hook",
                "content": "from a hook",
                "display": True,
                "timestamp": 3,
            },
        ),
        msg_entry("v2000003", "v2000002", assistant("v2 answer", total=1100)),
    ]
    files["v2_hook_message"] = (jsonl(header("hand-v2", version=2), *v2), [])
    return files


HAND_FILES = hand_files()

ALL_CASES = [
    *(pytest.param(f"real:{name}", id=f"real:{name}") for name in REAL_NAMES),
    *PI_SCENARIOS,
    *REOPENED,
    *HAND_FILES,
]
ESTIMATE_CASES = [c for c in ALL_CASES if not (isinstance(c, str) and c in MIRROR_CASES)]
PROBLEM_CASES = [(name, kind, line) for name, (_, expected) in HAND_FILES.items() for kind, line in expected]
PROBLEM_CASES += [("pi_compaction_off_branch", "first_kept_not_on_branch", None)]
PROBLEM_CASES += [("pi_compaction_unknown_first_kept", "first_kept_not_on_branch", None)]
CLEAN_CASES = [
    "pi_tools",
    "pi_branches_labels",
    "pi_compactions",
    "pi_custom",
    "pi_model_thinking",
    "pi_unicode",
]


# ------------------------------------------------------------------------------------------------------------
# The corpus, loaded by pi once


@pytest.fixture(scope="module")
def corpus(pi: Pi, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Json]]:
    root = tmp_path_factory.mktemp("differential")
    paths: dict[str, Path] = {}
    for name, (data, _) in HAND_FILES.items():
        paths[name] = root / "hand" / f"{name}.jsonl"
        paths[name].parent.mkdir(exist_ok=True)
        paths[name].write_bytes(data)

    names: list[str] = []
    specs: list[Json] = []
    for name, make in PI_SCENARIOS.items():
        names.append(name)
        specs.append({"dir": root / "pi" / name, "ops": make()})
    for name, (pre, ops) in REOPENED.items():
        folder = root / "pi" / name
        folder.mkdir(parents=True)
        (folder / "session.jsonl").write_bytes(pre)
        names.append(name)
        specs.append({"dir": folder, "open": folder / "session.jsonl", "ops": ops})
    for name, written in zip(names, pi.write_many(specs), strict=True):
        assert written["exists"], name
        paths[name] = Path(written["path"])

    if REAL_DIR.is_dir():
        for name in REAL_NAMES:
            paths[f"real:{name}"] = REAL_DIR / name

    # The files of the wipe/resume tests below ride along: one node process loads everything.
    for name, (data, *_) in EDGE_FILES.items():
        paths[f"edge:{name}"] = root / "edge" / f"{name}.jsonl"
        paths[f"edge:{name}"].parent.mkdir(exist_ok=True)
        paths[f"edge:{name}"].write_bytes(data)

    loaded = pi.load_many(list(paths.values()))
    return {name: (path, result) for (name, path), result in zip(paths.items(), loaded, strict=True)}


def case(corpus: dict[str, tuple[Path, Json]], name: str) -> tuple[Path, Json]:
    if name.startswith("real:") and not REAL_DIR.is_dir():
        pytest.skip(f"{REAL_DIR} does not exist")
    path, theirs = corpus[name]
    assert "error" not in theirs, theirs.get("error")
    assert not theirs["wiped"], f"pi wiped {name}"
    return path, theirs


# ------------------------------------------------------------------------------------------------------------
# Comparison helpers

MAX_SAFE_INTEGER = 2**53


def canon(value: Any) -> Any:
    """What survives JavaScript: big integers as doubles, non-finite numbers as null (JSON.stringify)."""
    if isinstance(value, dict):
        return {k: canon(v) for k, v in value.items()}
    if isinstance(value, list):
        return [canon(v) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def short(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def assert_same_messages(ours: list[Json], theirs: list[Json]) -> None:
    a, b = canon(ours), canon(theirs)
    if a == b:
        return
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            keys = sorted(k for k in {*x, *y} if x.get(k, ...) != y.get(k, ...))
            pytest.fail(f"message {index} differs in {keys}:\n  ours: {short(x)}\n  pi:   {short(y)}")
    longer, who = (a, "ours") if len(a) > len(b) else (b, "pi")
    pytest.fail(
        f"ours has {len(a)} messages, pi has {len(b)}; "
        f"first extra ({who}): {short(longer[min(len(a), len(b))])}"
    )


# ------------------------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("name", ALL_CASES)
def test_context_matches_pi(corpus: dict[str, tuple[Path, Json]], name: str) -> None:
    path, theirs = case(corpus, name)
    transcript = read_transcript(path)
    context = build_context(transcript)
    assert_same_messages(context.messages, theirs["messages"])
    assert context.thinking_level == theirs["thinking_level"]
    assert canon(context.model) == canon(theirs["model"])
    if theirs["leaf_id"] is None:
        # The last line has no id (or is no object): buildSessionContext falls back to the last parsed value
        # while getBranch() gives []; the messages above are what counts.
        return
    branch = transcript.branch()
    assert len(branch) == len(theirs["branch_ids"])
    if transcript.version >= 2:  # pi gives v1 entries random ids when it migrates them
        assert transcript.leaf_id == theirs["leaf_id"]
        assert [e.get("id") for e in branch] == theirs["branch_ids"]


@pytest.mark.parametrize("name", ESTIMATE_CASES)
def test_estimate_matches_pi(corpus: dict[str, tuple[Path, Json]], name: str) -> None:
    path, theirs = case(corpus, name)
    messages = build_context(read_transcript(path)).messages
    assert [estimate_tokens(message) for message in messages] == theirs["message_tokens"]
    ours = estimate_context_tokens(messages)
    expected = theirs["estimate"]
    assert (ours.tokens, ours.usage_tokens, ours.trailing_tokens, ours.last_usage_index) == (
        expected["tokens"],
        expected["usageTokens"],
        expected["trailingTokens"],
        expected["lastUsageIndex"],
    )


@pytest.mark.parametrize("name", list(MIRROR_CASES))
def test_zero_usage_never_anchors_while_pi_anchors_on_it(
    corpus: dict[str, tuple[Path, Json]], name: str
) -> None:
    """The one deliberate difference: OpenClaw's delivery-mirror (all-zero usage) is never our anchor."""
    path, theirs = case(corpus, name)
    messages = build_context(read_transcript(path)).messages
    assert_same_messages(messages, theirs["messages"])
    mirror_index = next(
        i for i, msg in enumerate(theirs["messages"]) if msg.get("model") == "delivery-mirror"
    )
    per_message = theirs["message_tokens"]

    # pi anchors on the mirror and counts its zero usage.
    after_mirror = sum(per_message[mirror_index + 1 :])
    assert theirs["estimate"] == {
        "tokens": after_mirror,
        "usageTokens": 0,
        "trailingTokens": after_mirror,
        "lastUsageIndex": mirror_index,
    }

    # We anchor on the last real usage before it (or estimate everything when there is none).
    anchor = MIRROR_CASES[name]
    ours = estimate_context_tokens(messages)
    expected: tuple[int, int, int, int | None]
    if anchor is None:
        expected = (sum(per_message), 0, sum(per_message), None)
    else:
        anchor_usage = theirs["messages"][anchor]["usage"]["totalTokens"]
        trailing = sum(per_message[anchor + 1 :])
        expected = (anchor_usage + trailing, anchor_usage, trailing, anchor)
    assert (ours.tokens, ours.usage_tokens, ours.trailing_tokens, ours.last_usage_index) == expected
    assert ours.tokens > theirs["estimate"]["tokens"]


@pytest.mark.parametrize(("name", "kind", "line"), PROBLEM_CASES)
def test_reader_reports_the_problem(
    corpus: dict[str, tuple[Path, Json]], name: str, kind: str, line: int | None
) -> None:
    path, _ = case(corpus, name)
    found = [(p.kind, p.line) for p in read_transcript(path).problems]
    if line is None:
        assert kind in {k for k, _ in found}, found
    else:
        assert (kind, line) in found, found


@pytest.mark.parametrize("name", CLEAN_CASES)
def test_clean_pi_sessions_have_no_problems(corpus: dict[str, tuple[Path, Json]], name: str) -> None:
    path, _ = case(corpus, name)
    assert read_transcript(path).problems == []


# ------------------------------------------------------------------------------------------------------------
# Files pi wipes, resumes or refuses: what pi does, and what our reader reports

V3 = jsonl(H, *chain(4))
V1_BODY = [
    {"type": "message", "timestamp": iso(1), "message": user("v1 q")},
    {"type": "message", "timestamp": iso(2), "message": assistant("v1 a", total=900)},
]
BOM = b"\xef\xbb\xbf"

# name -> (bytes, pi wipes it, pi rewrites it, `pi -c` would resume it, problem kinds our reader must report)
EDGE_FILES: dict[str, tuple[bytes, bool, bool, bool, set[str]]] = {
    "headerless": (jsonl(*chain(4)), True, True, False, {"no_header"}),
    "empty": (b"", True, True, False, {"no_header"}),
    "blank_lines_only": (b"\n \n\t\n", True, True, False, {"no_header"}),
    "header_id_not_a_string": (jsonl({**H, "id": 5}, *chain(2)), True, True, False, {"no_header"}),
    "header_not_first": (jsonl(chain(1)[0], H, *chain(2, start=2)), True, True, False, {"no_header"}),
    "bom_headerless": (BOM + jsonl(*chain(2)), True, True, False, {"no_header"}),
    # JavaScript's String.prototype.trim() strips U+FEFF: pi loads a BOM file intact and leaves its bytes
    # alone, but `pi -c` parses the raw first line, fails, and never resumes it.
    "bom_v3": (BOM + V3, False, False, False, {"bom"}),
    # The v1 migration rewrites the file, dropping the BOM.
    "bom_v1": (BOM + jsonl(header("bom-v1", version=None), *V1_BODY), False, True, False, {"bom"}),
    # The first *parsed* line must be the header: garbage before it is skipped; `pi -c` will not resume it.
    "garbage_before_header": (b"}{\n" + V3, False, False, False, {"malformed_line"}),
    "blank_line_before_header": (b"\n" + V3, False, False, False, set()),
    # isValidSessionFile reads only 512 bytes of the header line.
    "long_header": (jsonl({**H, "cwd": "/" + "x" * 600}, *chain(2)), False, False, False, {"long_header"}),
    "plain_v3": (V3, False, False, True, set()),
    # JSON null as a line: pi's SessionManager.open throws (TypeError in _buildIndex); the file is unusable.
    "null_line": (
        jsonl(H, *chain(2), b"null", *chain(2, start=3, parent="e0000002")),
        False,
        False,
        True,
        set(),
    ),
}


@pytest.fixture(scope="module")
def edge_results(corpus: dict[str, tuple[Path, Json]]) -> dict[str, tuple[Path, Json]]:
    return {name: corpus[f"edge:{name}"] for name in EDGE_FILES}


@pytest.mark.parametrize("name", list(EDGE_FILES))
def test_wipe_and_resume_behaviour(edge_results: dict[str, tuple[Path, Json]], name: str) -> None:
    _, wiped, rewritten, resumable, kinds = EDGE_FILES[name]
    path, theirs = edge_results[name]
    if name == "null_line":
        assert "TypeError: Cannot read properties of null" in theirs["error"]
        assert any(p.line == 4 for p in read_transcript(path).problems)
        return
    assert "error" not in theirs, theirs.get("error")
    assert (theirs["wiped"], theirs["rewritten"], theirs["resumable"]) == (wiped, rewritten, resumable)
    transcript = read_transcript(path)
    found = {p.kind for p in transcript.problems}
    assert kinds <= found, found
    assert ("no_header" in found) == wiped
    if wiped:
        assert theirs["messages"] == [] and theirs["entry_count"] == 0
    else:
        assert_same_messages(build_context(transcript).messages, theirs["messages"])


def test_bom_file_loads_like_the_same_file_without_it(edge_results: dict[str, tuple[Path, Json]]) -> None:
    _, with_bom = edge_results["bom_v3"]
    _, plain = edge_results["plain_v3"]
    assert with_bom["messages"] == plain["messages"] and with_bom["branch_ids"] == plain["branch_ids"]
