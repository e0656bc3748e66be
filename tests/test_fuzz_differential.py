"""Differential fuzz: mutants of real and generated sessions, judged by pi 0.73.1's own loader.

Each mutant is a session (a window of a real pi fixture, a session pi's own SessionManager wrote, or one made
here) with a few lines mutated the ways that break readers: escapes, lone surrogates, invalid UTF-8, huge,
negative and out-of-range numbers (``1e400``), nesting up to 100,000 levels, NULs, duplicate keys, truncation,
whitespace JSON does not allow, values of another type. pi loads all of them in one node process. For every
mutant pi loads:

- our context equals pi's (messages compared as in test_differential, header, thinking level, model, branch),
  and so does every per-message token estimate; the context figure equals pi's, or differs by one of the
  deliberate deviations documented in ``tokens.usage_tokens``, each named here;
- the cold read (ledger) and the tailer agree with the exact reader;
- ``compactd validate`` and ``inspect --json`` (in process for every mutant, as subprocesses for a sample)
  and ``once --dry-run`` (one subprocess over all of them) never raise, and a session with a blocking problem
  is reported (validate never says "ok") and never committed.

Seeded and bounded (``MUTANTS``): the same mutants on every run, about 30 s in all (the two corpus tests
are marked slow; CI runs them).
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import os
import random
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from compactd.commands.cli import main as cli_main
from compactd.core.context import build_context
from compactd.core.jsjson import JS_WHITESPACE, nesting, stringify
from compactd.core.ledger import SessionLedger
from compactd.core.messages import llm_visible
from compactd.core.reader import Transcript, link_key, parse_transcript
from compactd.core.tokens import (
    MAX_TOKENS,
    estimate_context_tokens,
    estimate_for_planning,
    estimate_tokens,
    usage_tokens,
)
from compactd.reading import read_transcript
from compactd.sources.files.tracker import SessionTracker

from tests.support import messages as msgs
from tests.support.cli import compactd
from tests.support.pi import clip_deep
from tests.test_differential import PI_SCENARIOS, REAL_DIR, REAL_NAMES, canon, short

# The daemon or the commit path as real processes (end to end, kills, pi itself): `pytest -m "not slow"`
# leaves them to the full run and CI.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.pi import Pi

Json = dict[str, Any]
REPO = Path(__file__).resolve().parents[1]
SEED = 20_260_921
MUTANTS = 240
# Every this many mutants one gets a line nested 100,000 levels deep (each costs about a second in all).
DEEP_EVERY = 80


# ------------------------------------------------------------------------------------------------------------
# Seeds: sessions to mutate


def real_windows() -> list[tuple[str, list[bytes]]]:
    """The real fixtures' lines (each window of them is a session: its header plus some consecutive lines)."""
    if not REAL_DIR.is_dir():
        return []
    return [(name, (REAL_DIR / name).read_bytes().split(b"\n")[:-1]) for name in REAL_NAMES]


def window(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    size = rng.randint(3, 24)
    start = 1 if rng.random() < 0.4 else rng.randrange(1, max(2, len(lines) - size))
    return [lines[0], *lines[start : start + size]]


def made_session(rng: random.Random) -> list[bytes]:
    """A session written here: every entry type pi knows, tool calls and results, branches, a compaction."""
    ids: list[str] = []
    clock = 1_750_000_000_000 + rng.randrange(10**9)

    def entry(kind: str, parent: str | bool | None = True, **fields: Any) -> Json:
        nonlocal clock
        clock += rng.randrange(1, 5000)
        entry_id = f"{rng.getrandbits(32):08x}"
        parent_id = (ids[-1] if ids else None) if parent is True else parent
        ids.append(entry_id)
        stamp = f"2025-06-01T10:{clock // 60000 % 60:02d}:{clock // 1000 % 60:02d}.{clock % 1000:03d}Z"
        return {"type": kind, "id": entry_id, "parentId": parent_id, "timestamp": stamp, **fields}

    def text() -> str:
        words = [
            "ls",
            "résumé",
            "漢字",
            "😀",
            "path/to/file.ts",
            "\t",
            'quote"d',
            "back\\slash",
            "\u2028",
            "x" * 40,
        ]
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))

    def usage() -> Json:
        parts = {k: rng.randrange(0, 5000) for k in ("input", "output", "cacheRead", "cacheWrite")}
        total = {"totalTokens": sum(parts.values())} if rng.random() < 0.7 else {}
        return {**parts, **total, "cost": {"input": 0.001, "output": 0.002, "total": 0.003}}

    header = {
        "type": "session",
        "version": 3,
        "id": f"made-{rng.randrange(10**6):06d}",
        "timestamp": "2025-06-01T10:00:00.000Z",
        "cwd": "/work/p",
    }
    out: list[Json] = [header]
    for turn in range(rng.randint(2, 7)):
        out.append(
            entry(
                "message",
                message={"role": "user", "content": [{"type": "text", "text": text()}], "timestamp": clock},
            )
        )
        call_id = f"call_{turn}"
        blocks: list[Json] = [
            {"type": "thinking", "thinking": text(), "thinkingSignature": "sig"},
            {"type": "text", "text": text()},
        ]
        tools = rng.random() < 0.6
        if tools:
            arguments = {
                "command": text(),
                "timeout": rng.choice([30, 1.5, 1e21, -0.0]),
                "opts": {"a": [1, None]},
            }
            blocks.append({"type": "toolCall", "id": call_id, "name": "bash", "arguments": arguments})
        out.append(
            entry(
                "message",
                message={
                    "role": "assistant",
                    "content": blocks,
                    "api": "anthropic-messages",
                    "provider": "anthropic",
                    "model": "claude-sonnet-4-5",
                    "usage": usage(),
                    "stopReason": "toolUse" if tools else "stop",
                    "timestamp": clock,
                },
            )
        )
        if tools:
            content: list[Json] = [{"type": "text", "text": text() * rng.randint(1, 20)}]
            if rng.random() < 0.2:
                content.append({"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"})
            out.append(
                entry(
                    "message",
                    message={
                        "role": "toolResult",
                        "toolCallId": call_id,
                        "toolName": "bash",
                        "content": content,
                        "isError": False,
                        "details": {"exitCode": 0},
                        "timestamp": clock,
                    },
                )
            )
        roll = rng.random()
        if roll < 0.15:
            out.append(
                entry(
                    "custom_message",
                    customType=rng.choice(["ext.note", "openclaw.runtime-context"]),
                    content=text(),
                    display=False,
                )
            )
        elif roll < 0.25:
            out.append(entry("model_change", provider="openai", modelId="gpt-5"))
        elif roll < 0.32:
            out.append(entry("thinking_level_change", thinkingLevel=rng.choice(["high", "off"])))
        elif roll < 0.42 and len(ids) > 3:
            out.append(
                entry(
                    "compaction",
                    summary=text(),
                    firstKeptEntryId=rng.choice(ids[1:-1]),
                    tokensBefore=rng.randrange(10**5),
                )
            )
        elif roll < 0.5 and len(ids) > 2:
            out.append(entry("branch_summary", parent=rng.choice(ids[:-1]), summary=text(), fromId=ids[-1]))
        elif roll < 0.55:
            out.append(
                entry(
                    "message",
                    message={
                        "role": "bashExecution",
                        "command": "ls",
                        "output": text(),
                        "exitCode": 0,
                        "timestamp": clock,
                    },
                )
            )
    return [json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode() for v in out]


# ------------------------------------------------------------------------------------------------------------
# Mutations: a line is parsed, a node of it changed, and the line written again; Raw and Dup carry the bytes
# no JSON encoder writes (1e400, invalid UTF-8, a repeated key, 100,000 levels of nesting).


@dataclass
class Raw:
    data: bytes


@dataclass
class Dup:
    items: list[tuple[str, Any]]


def dump(value: Any, *, ascii_only: bool = False, spaced: bool = False) -> bytes:
    sep, colon = (b" , ", b" :\t") if spaced else (b",", b":")
    if isinstance(value, Raw):
        return value.data
    if isinstance(value, Dup | dict):
        items = value.items if isinstance(value, Dup) else list(value.items())
        inner = sep.join(
            dump(k, ascii_only=ascii_only) + colon + dump(v, ascii_only=ascii_only, spaced=spaced)
            for k, v in items
        )
        return b"{" + inner + b"}"
    if isinstance(value, list):
        return b"[" + sep.join(dump(v, ascii_only=ascii_only, spaced=spaced) for v in value) + b"]"
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def slots(value: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every node below ``value``."""
    found: list[tuple[Any, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        keys = list(item) if isinstance(item, dict) else range(len(item)) if isinstance(item, list) else []
        for key in keys:
            found.append((item, key))
            stack.append(item[key])
    return found


NUMBERS = [
    b"1e400",
    b"-1e400",
    b"1e308",
    b"-1e308",
    b"1.7976931348623157e308",
    b"5e-324",
    b"-0",
    b"-0.0",
    b"0",
    b"-1",
    b"-123456",
    b"1.5",
    b"0.1",
    b"1e21",
    b"9007199254740993",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"1" + b"0" * 400,
    b"-" + b"9" * 30,
    b"1E+2",
    b"2.5e-7",
    b"1234.5678",
]
INVALID_UTF8 = [
    b"\xff",
    b"\xfe\xfe",
    b"\xc3",
    b"\xe2\x82",
    b"\xf0\x9f\x98",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\x80\x80",
]
JS_ONLY_WHITESPACE = [b"\xc2\xa0", b"\xe2\x80\xa8", b"\x0b", b"\x0c", b"\xef\xbb\xbf", b"\xe3\x80\x80"]
OTHER_VALUES: list[Any] = [None, True, False, 0, 5, -3, "", "x", "e0000001", [], {}, [1], {"a": 1}, 2.5]
USAGE_KEYS = ["totalTokens", "input", "output", "cacheRead", "cacheWrite"]


def deep(depth: int, rng: random.Random) -> Raw:
    opening, closing = rng.choice([(b"[", b"]"), (b'{"a":', b"}"), (b'[{"k":', b"}]")])
    count = depth if len(opening) < 6 else depth // 2
    return Raw(opening * count + rng.choice([b"1", b'"x\\ud83d"', b"null", b"1e400"]) + closing * count)


def strings(tree: Any) -> list[tuple[Any, Any]]:
    return [(c, k) for c, k in slots(tree) if isinstance(c[k], str)]


def mutate_tree(rng: random.Random, op: str, tree: Any, depth: int) -> Any:
    """Change one node of ``tree`` (in place where possible); returns the new root."""
    nodes = slots(tree)
    texts = strings(tree)
    if op == "escape" and texts:
        c, k = rng.choice(texts)
        c[k] = Raw(
            b'"'
            + "".join(
                f"\\u{ord(ch):04x}" if rng.random() < 0.5 and ord(ch) < 0x10000 else json.dumps(ch)[1:-1]
                for ch in c[k]
            ).encode()
            + b'"'
        )
    elif op in ("lone_surrogate", "raw_surrogate") and texts:
        c, k = rng.choice(texts)
        pos = rng.randint(0, len(c[k]))
        lone = chr(rng.choice([0xD83D, 0xDE00, 0xD800, 0xDFFF, 0xDBFF]))
        value = c[k][:pos] + lone + c[k][pos:]
        c[k] = Raw(dump(value, ascii_only=op == "lone_surrogate"))
    elif op == "invalid_utf8" and texts:
        c, k = rng.choice(texts)
        encoded = json.dumps(c[k], ensure_ascii=False).encode("utf-8", "surrogatepass")
        pos = rng.randint(1, len(encoded) - 1)
        c[k] = Raw(encoded[:pos] + rng.choice(INVALID_UTF8) + encoded[pos:])
    elif op == "nul" and texts:
        c, k = rng.choice(texts)
        pos = rng.randint(0, len(c[k]))
        c[k] = c[k][:pos] + "\x00" + c[k][pos:]  # written as \u0000: valid JSON
    elif op == "number" and nodes:
        numeric = [(c, k) for c, k in nodes if isinstance(c[k], int | float) and not isinstance(c[k], bool)]
        c, k = rng.choice(numeric or nodes)
        c[k] = Raw(rng.choice(NUMBERS))
    elif op == "usage":
        usage = next((c[k] for c, k in nodes if k == "usage" and isinstance(c[k], dict)), None)
        if usage is None:
            return mutate_tree(rng, "number", tree, depth)
        usage[rng.choice(USAGE_KEYS)] = Raw(rng.choice(NUMBERS))
    elif op == "deep":
        containers = [tree, *(c[k] for c, k in nodes if isinstance(c[k], dict | list))]
        arguments = [c[k] for c, k in nodes if k == "arguments" and isinstance(c[k], dict)]
        target = rng.choice(arguments) if arguments and rng.random() < 0.5 else rng.choice(containers)
        nested = deep(depth, rng)
        if isinstance(target, dict):
            target[f"deep{depth}"] = nested
        else:
            target.append(nested)
    elif op == "duplicate_key":
        objects = [tree, *(c[k] for c, k in nodes if isinstance(c[k], dict))]
        objects = [o for o in objects if isinstance(o, dict) and o]
        if objects:
            obj = rng.choice(objects)
            key = rng.choice(list(obj))
            items = list(obj.items())
            other = rng.choice(OTHER_VALUES + [v for _, v in items])
            items.insert(rng.randint(0, len(items)), (key, copy.deepcopy(other)))
            return replace(tree, obj, Dup(items))
    elif op == "type_swap" and nodes:
        keyed = [
            (c, k)
            for c, k in nodes
            if k
            in (
                "id",
                "parentId",
                "type",
                "role",
                "message",
                "content",
                "usage",
                "stopReason",
                "arguments",
                "text",
                "timestamp",
                "firstKeptEntryId",
                "summary",
                "provider",
                "model",
            )
        ]
        c, k = rng.choice(keyed if keyed and rng.random() < 0.8 else nodes)
        c[k] = copy.deepcopy(rng.choice(OTHER_VALUES))
    elif op == "delete_key":
        keyed = [(c, k) for c, k in nodes if isinstance(c, dict)]
        if keyed:
            c, k = rng.choice(keyed)
            del c[k]
    return tree


def replace(tree: Any, old: Any, new: Any) -> Any:
    if tree is old:
        return new
    for c, k in slots(tree):
        if c[k] is old:
            c[k] = new
    return tree


TREE_OPS = [
    "escape",
    "lone_surrogate",
    "raw_surrogate",
    "invalid_utf8",
    "nul",
    "number",
    "usage",
    "deep",
    "duplicate_key",
    "type_swap",
    "delete_key",
]
BYTE_OPS = ["truncate", "js_whitespace", "raw_nul", "raw_invalid", "insert_line", "spaced"]


def mutate_line(rng: random.Random, op: str, line: bytes, depth: int) -> list[bytes]:
    """The line(s) that replace ``line``."""
    if op == "truncate":
        return [line[: rng.randrange(1, max(2, len(line)))]]
    if op == "js_whitespace":
        pad = rng.choice(JS_ONLY_WHITESPACE)
        return [pad + line if rng.random() < 0.5 else line + pad]
    if op == "raw_nul":
        pos = rng.randrange(len(line) + 1)
        return [line[:pos] + b"\x00" + line[pos:]]
    if op == "raw_invalid":
        pos = rng.randrange(len(line) + 1)
        return [line[:pos] + rng.choice(INVALID_UTF8) + line[pos:]]
    if op == "insert_line":
        extra = rng.choice(
            [
                b"",
                b"   ",
                b"\xc2\xa0",
                b"\xe2\x80\xa8",
                b"123",
                b"[]",
                b'"str"',
                b"{",
                b"}{",
                b"\x00",
                b'{"type":"session","id":"again"}',
            ]
        )
        return [line, extra] if rng.random() < 0.5 else [extra, line]
    try:
        tree = json.loads(line)
    except (ValueError, RecursionError):
        return [line]  # an earlier mutation broke it (or nested it too deeply to edit): leave it
    if op == "spaced":
        return [dump(tree, spaced=True)]
    tree = mutate_tree(rng, op, tree, depth)
    return [dump(tree, ascii_only=rng.random() < 0.3)]


@dataclass
class Mutant:
    name: str
    data: bytes
    ops: list[str]
    path: Path = field(default=Path())


def make_mutants(
    rng: random.Random, reals: list[tuple[str, list[bytes]]], written: list[tuple[str, bytes]]
) -> list[Mutant]:
    mutants: list[Mutant] = []
    attempts = 0
    while len(mutants) < MUTANTS:
        attempts += 1
        roll = rng.random()
        if reals and roll < 0.45:
            name, lines = rng.choice(reals)
            seed_name, lines = f"real:{name}", window(rng, lines)
        elif written and roll < 0.7:
            seed_name, data = rng.choice(written)
            lines = data.split(b"\n")[:-1]
        else:
            seed_name, lines = "made", made_session(rng)
        ops: list[str] = []
        forced_deep = len(mutants) % DEEP_EVERY == DEEP_EVERY // 2
        for _ in range(1 if forced_deep else rng.choice([1, 1, 1, 2, 3])):
            op = "deep" if forced_deep else rng.choice(TREE_OPS + BYTE_OPS)
            depth = 100_000 if forced_deep else rng.choice([150, 300, 1_100, 2_500])
            # the first and the last line are where pi's whole-file trim() and torn lines matter; the last
            # usage is the one pi's figure rests on
            index = rng.choice([0, len(lines) - 1]) if rng.random() < 0.3 else rng.randrange(len(lines))
            if op == "usage" and rng.random() < 0.6:
                index = max((i for i, line in enumerate(lines) if b'"usage"' in line), default=index)
            lines[index : index + 1] = mutate_line(rng, op, lines[index], depth)
            ops.append(op if op != "deep" else f"deep{depth}")
        data = b"\n".join(lines) + (b"\n" if rng.random() < 0.9 else b"")
        transcript = parse_transcript(data)
        if any(p.kind == "parent_cycle" for p in transcript.problems):
            continue  # pi loops forever on a parentId cycle (a known pi limitation)
        mutants.append(Mutant(f"{len(mutants):03d}-{seed_name}", data, ops))
    assert attempts < 2 * MUTANTS
    return mutants


# ------------------------------------------------------------------------------------------------------------
# The corpus: every mutant written to one sessions directory and loaded by pi once


@dataclass
class Corpus:
    root: Path
    sessions: Path
    mutants: list[Mutant]
    theirs: list[Json]


@pytest.fixture(scope="module")
def corpus(pi: Pi, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    root = tmp_path_factory.mktemp("fuzz")
    specs = [{"dir": root / "pi" / name, "ops": make()} for name, make in PI_SCENARIOS.items()]
    written = [
        (f"pi:{name}", Path(r["path"]).read_bytes())
        for name, r in zip(PI_SCENARIOS, pi.write_many(specs), strict=True)
    ]
    mutants = make_mutants(random.Random(SEED), real_windows(), written)
    sessions = root / "sessions"
    sessions.mkdir()
    for mutant in mutants:
        mutant.path = sessions / f"{mutant.name.replace(':', '_')}.jsonl"
        mutant.path.write_bytes(mutant.data)
    theirs = pi.load_many([m.path for m in mutants])
    return Corpus(root, sessions, mutants, theirs)


# ------------------------------------------------------------------------------------------------------------
# Comparison with pi


def comparable(value: Any) -> Any:
    """Our message (or header) as test_differential compares it, deep parts clipped as load.mjs clips pi's."""
    return canon(clip_deep(value, stringify, nesting))


def without_none(model: Any) -> Any:
    """``{provider, modelId}`` with undefined (JSON drops it) and null told apart by neither side's reader."""
    return {k: v for k, v in model.items() if v is not None} if isinstance(model, dict) else model


def figure_deviation(ours: list[Json], theirs_messages: list[Any], theirs: Json, problems: set[str]) -> str:
    """ "exact" when our context figure is pi's, else the name of the documented deviation that explains it."""
    estimate = theirs.get("estimate")
    if estimate is None:
        return "pi's estimate throws"
    per_message = theirs["message_tokens"]
    figures = [estimate["tokens"], estimate["usageTokens"], estimate["trailingTokens"], *per_message]
    ours_estimate = estimate_context_tokens(ours)
    if not all(isinstance(f, int | float) and not isinstance(f, bool) for f in figures):
        # NaN, Infinity or a string (pi concatenates a string usage field): not a count. Ours still is one.
        if ours_estimate.usage_tokens == MAX_TOKENS:
            assert "figure_overflow" in problems
        return "pi's figure is not a number"
    got = (ours_estimate.tokens, ours_estimate.usage_tokens, ours_estimate.trailing_tokens)
    expected = (estimate["tokens"], estimate["usageTokens"], estimate["trailingTokens"])
    index = estimate["lastUsageIndex"]
    if got == expected and ours_estimate.last_usage_index == index:
        return "exact"
    assert index is not None, "pi estimated every message, so must we"
    if usage_tokens(theirs_messages[index]) is None:
        return "pi anchors on a usage that is not a positive count"  # zero (delivery mirror), negative, NaN
    assert ours_estimate.last_usage_index == index
    pi_usage = estimate["usageTokens"]
    if pi_usage > MAX_TOKENS:
        assert ours_estimate.usage_tokens == MAX_TOKENS and "figure_overflow" in problems
        return "usage clamped"
    if pi_usage != int(pi_usage):
        assert ours_estimate.usage_tokens == int(pi_usage)
        return "fraction dropped"
    pytest.fail(f"figures differ: ours {got} at {ours_estimate.last_usage_index}, pi {expected} at {index}")


def kind(op: str) -> str:
    return "deep" if op.startswith("deep") else op


@dataclass
class Tally:
    accepted: int = 0
    rejected: int = 0
    figures: Counter[str] = field(default_factory=Counter)
    ops: Counter[str] = field(default_factory=Counter)
    blocked: int = 0


def compare_with_pi(mutant: Mutant, transcript: Transcript, theirs: Json, tally: Tally) -> None:
    problems = {p.kind for p in transcript.problems}
    context = build_context(transcript)  # never raises: pi or not
    if "error" in theirs:
        tally.rejected += 1
        return
    tally.accepted += 1
    tally.ops.update(kind(op) for op in mutant.ops)
    if theirs["wiped"]:
        assert "no_header" in problems and context.messages == []
        return
    assert "no_header" not in problems
    theirs_messages = theirs["messages"]
    if "message_not_object" in problems:  # pi keeps a non-object message as is; we cannot: reported, blocked
        theirs_messages = [m for m in theirs_messages if isinstance(m, dict)]
        per_message = [
            t
            for m, t in zip(theirs["messages"], theirs.get("message_tokens") or [], strict=False)
            if isinstance(m, dict)
        ]
        theirs = {**theirs, "estimate": None, "message_tokens": per_message}
    ours = [comparable(m) for m in context.messages]
    assert ours == canon(theirs_messages), "context differs"  # pi's side is clipped by load.mjs
    if transcript.version >= 3:  # pi migrates older headers (and rewrites its copy)
        assert comparable(transcript.header) == canon(theirs["header"])
    assert context.thinking_level == theirs.get("thinking_level")
    assert without_none(canon(context.model)) == without_none(canon(theirs["model"]))
    if transcript.version >= 2 and link_key(theirs["leaf_id"]) is not None:
        assert canon([e.get("id") for e in transcript.branch()]) == canon(theirs["branch_ids"])
    for message, tokens in zip(context.messages, theirs.get("message_tokens") or [], strict=False):
        if isinstance(tokens, int):  # null: pi's own estimate is NaN for this message
            assert estimate_tokens(message) == tokens, short(message)
    tally.figures[figure_deviation(context.messages, theirs_messages, theirs, problems)] += 1


def check_fast_paths(mutant: Mutant, tmp: Path) -> None:
    """The cold read and the tailer (appends in three pieces) give the exact reader's figures."""
    complete = mutant.data[: mutant.data.rfind(b"\n") + 1]
    transcript = parse_transcript(complete)
    exact = SessionLedger.from_transcript(transcript)
    cold = SessionLedger.from_bytes(complete)
    assert cold.figures() == exact.figures()
    if transcript.usable:
        visible = list(llm_visible(build_context(transcript).messages))
        assert exact.tokens == estimate_context_tokens(visible).tokens
        assert exact.planning_tokens == estimate_for_planning(visible).tokens
    assert 0 <= cold.tokens <= 2 * MAX_TOKENS
    path = tmp / mutant.path.name
    cuts = sorted({0, len(mutant.data) // 3, 2 * len(mutant.data) // 3, len(mutant.data)})
    path.write_bytes(b"")
    tracker = SessionTracker(str(path))
    for start, end in itertools.pairwise(cuts):
        with open(path, "ab") as handle:
            handle.write(mutant.data[start:end])
        tracker.refresh()
    if complete.strip():
        assert tracker.ledger is not None
        assert tracker.ledger.figures() == cold.figures()


def run_cli(*args: str) -> tuple[int, str]:
    """``compactd ARGS`` in this process (the subprocess runs are a sample, below): its exit code and output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(list(args))
    return code, out.getvalue()


def check_cli(mutant: Mutant, transcript: Transcript) -> None:
    code, text = run_cli("validate", str(mutant.path))
    assert code == (0 if not transcript.problems else 2 if not transcript.usable else 1), text
    assert ("ok: loads" in text) == (code == 0)
    code, text = run_cli("inspect", str(mutant.path), "--json")
    assert code == 0
    report = json.loads(text)
    assert report["context_tokens"] == SessionLedger.from_transcript(transcript).tokens
    assert {p["kind"] for p in report["problems"]} == {p.kind for p in transcript.problems}
    if transcript.usable:
        assert report["route"] in (
            "fits",
            "truncate_tool_results_only",
            "compact_only",
            "compact_then_truncate",
        )


def check_never_committed(mutant: Mutant) -> None:
    """A session whose reading may differ from pi's is refused by ``compact`` (forced, for real)."""
    before = mutant.path.read_bytes()
    code, text = run_cli("compact", str(mutant.path), "--force", "--json")
    result = json.loads(text)
    assert code == 1 and result["committed"] is False and "not compacted" in result["reason"], text
    assert mutant.path.read_bytes() == before
    assert [
        p.name for p in mutant.path.parent.iterdir() if p.name.startswith(mutant.path.name + ".bak")
    ] == []


# ------------------------------------------------------------------------------------------------------------
# The tests


@pytest.fixture
def cli_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """No config file, a fresh state directory: for the in-process commands and the subprocesses alike."""
    root = tmp_path_factory.mktemp("cli")
    env = {"STATE_DIRECTORY": str(root / "state"), "XDG_CONFIG_HOME": str(root / "no-config")}
    for key in ("COMPACTD_CONFIG", "NOTIFY_SOCKET"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.mark.slow
def test_every_mutant_pi_loads_reads_as_pi_reads_it(
    corpus: Corpus, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    tally = Tally()
    failures: list[str] = []
    for mutant, theirs in zip(corpus.mutants, corpus.theirs, strict=True):
        try:
            transcript = read_transcript(mutant.path)
            compare_with_pi(mutant, transcript, theirs, tally)
            check_fast_paths(mutant, tmp_path)
            check_cli(mutant, transcript)
            if transcript.usable and not transcript.committable:
                tally.blocked += 1
                check_never_committed(mutant)
        except Exception as exc:  # every mutant is checked; the report lists each one that failed
            failures.append(f"{mutant.name} ({', '.join(mutant.ops)}): {exc!r}"[:1500])
    assert not failures, f"{len(failures)} mutants failed:\n" + "\n".join(failures[:12])
    # The corpus stays what it claims to be: mostly accepted by pi, every kind of mutation among them, most
    # figures exact and a blocked (never committed) session or more.
    assert tally.accepted >= 0.75 * len(corpus.mutants), tally
    missing = set(TREE_OPS + BYTE_OPS) - set(tally.ops)
    assert not missing, (missing, tally)
    assert tally.figures["exact"] >= 0.6 * tally.accepted, tally
    assert tally.blocked >= 3, tally


def sample(corpus: Corpus) -> list[Mutant]:
    """One mutant of each kind of mutation (the first that pi loads, and the 100,000-level one)."""
    chosen: dict[str, Mutant] = {}
    for mutant, theirs in zip(corpus.mutants, corpus.theirs, strict=True):
        for op in mutant.ops:
            key = op if op == "deep100000" else kind(op)
            if "error" not in theirs and key not in chosen:
                chosen[key] = mutant
    return sorted({m.name: m for m in chosen.values()}.values(), key=lambda m: m.name)


@pytest.mark.slow
def test_the_real_cli_never_raises_on_the_mutants(corpus: Corpus, cli_env: dict[str, str]) -> None:
    for mutant in sample(corpus):
        for args in (("validate", str(mutant.path)), ("inspect", str(mutant.path), "--json")):
            done = compactd(*args, env=cli_env)
            assert "Traceback" not in done.stderr, (mutant.name, args, done.stderr)
            assert done.returncode in (0, 1, 2) and done.stdout, (mutant.name, args, done.stderr)
    done = compactd("once", "--dry-run", "--json", "--sessions", str(corpus.sessions), env=cli_env)
    assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert {row["path"] for row in rows} == {str(m.path) for m in corpus.mutants}
    blocked = {str(m.path) for m in corpus.mutants if not read_transcript(m.path).committable}
    for row in rows:
        assert row["committed"] is False
        if row["path"] in blocked:
            assert row["action"] in ("fits", "skipped"), row
    done = compactd("once", "--dry-run", "--sessions", str(corpus.sessions), env=cli_env)
    assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr[-3000:]
    assert all(m.path.read_bytes() == m.data for m in corpus.mutants)  # a dry run changes nothing


# ------------------------------------------------------------------------------------------------------------
# The instances the issue observed, and those found while fixing them as classes: pi is the spec of each


def _line(value: Json) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _entry(entry_id: Any, parent: Any, message: Any, **extra: Any) -> Json:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2025-06-01T10:00:00.000Z",
        "message": message,
        **extra,
    }


def _user(text: str) -> Json:
    return msgs.user(text, ts=1_750_000_000_000)


def _assistant(usage: Json | None = None, **extra: Any) -> Json:
    return msgs.assistant(
        "ok",
        provider="anthropic",
        model="claude-sonnet-4-5",
        usage=usage or msgs.usage(100, input=90, output=10),
        ts=1_750_000_001_000,
        **extra,
    )


HEADER = _line(
    {
        "type": "session",
        "version": 3,
        "id": "instance-1",
        "timestamp": "2025-06-01T10:00:00.000Z",
        "cwd": "/work/p",
    }
)
START = [HEADER, _line(_entry("u1", None, _user("question"))), _line(_entry("a1", "u1", _assistant()))]


def _raw(value: Json, placeholder: str, raw: bytes) -> bytes:
    return _line(value).replace(json.dumps(placeholder).encode(), raw)


def _session(*lines: bytes) -> bytes:
    return b"\n".join([*START, *lines]) + b"\n"


DEEP_100000 = b"[" * 100_000 + b"]" * 100_000
CALL = {"type": "toolCall", "id": "t", "name": "f", "arguments": {"a": "N"}}
STAMPED = {"type": "custom_message", "id": "c2", "parentId": "a1", "customType": "x", "content": "y"}
INSTANCES: dict[str, bytes] = {
    "lone_surrogate": _session(_raw(_entry("u2", "a1", _user("X")), "X", b'"half an emoji \\ud83d"')),
    "invalid_utf8": _session(_raw(_entry("u2", "a1", _user("X")), "X", b'"bad \xff\xfe\xc3\xed\xa0\x80"')),
    "timestamp_1e400": _session(_raw(_entry("u2", "a1", {**_user("x"), "timestamp": "T"}), "T", b"1e400")),
    "entry_timestamp_1e400": _session(_raw({**STAMPED, "timestamp": "T"}, "T", b"1e400")),
    "usage_1e308": _session(
        _line(_entry("u2", "a1", _user("x"))),
        _raw(_entry("a2", "u2", _assistant({"input": "U", "output": 1})), "U", b"1e308"),
    ),
    "usage_sum_overflows": _session(
        _raw(_entry("a2", "a1", _assistant({"input": "U", "output": "U"})), "U", b"1e308")
    ),
    "usage_400_digits": _session(_raw(_entry("a2", "a1", _assistant({"totalTokens": "U"})), "U", b"9" * 400)),
    "nested_100000": _session(
        _raw(_entry("u2", "a1", _user("deep"), x="N"), "N", DEEP_100000),
        _line(_entry("u3", "u2", _user("after"))),
    ),
    "tool_arguments_nested_1000": _session(
        _raw(_entry("a2", "a1", _assistant(content=[CALL])), "N", b'{"k":' * 1000 + b"1" + b"}" * 1000)
    ),
    "number_ids": _session(_line(_entry(7, "a1", _user("x"))), _line(_entry("u3", 7.0, _user("y")))),
    "null_leaf_id": _session(_line(_entry(None, "a1", _user("x")))),
    "message_not_object": _session(
        _line(_entry("u2", "a1", "just text")), _line(_entry("u3", "u2", _user("y")))
    ),
    # Over its budget, so due: `once` must skip it (no flush, no compaction), not act on it.
    "nested_and_due": _session(
        _raw(_entry("u2", "a1", _user("deep"), x="N"), "N", b"[" * 300 + b"]" * 300),
        _line(_entry("a2", "u2", _assistant({"totalTokens": 500_000}))),
    ),
    # pi migrates by `(header.version ?? 1) < 2` and `< 3`: a branch (u2 beside a1) read as a tree or as v1's line.
    **{
        f"header_version_{name}": b"\n".join(
            [
                HEADER.replace(b'"version":3', b'"version":' + raw),
                *START[1:],
                _line(_entry("u2", "u1", _user("b"))),
            ]
        )
        + b"\n"
        for name, raw in {
            "1e400": b"1e400",
            "1e308": b"1e308",
            "2.5": b"2.5",
            "string_3": b'"3"',
            "string_x": b'"x"',
            "true": b"true",
            "null": b"null",
            "empty_array": b"[]",
        }.items()
    },
    "trimmed_ends": b"\xc2\xa0\x0b"
    + _session(_line(_entry("u2", "a1", _user("last"))))[:-1]
    + "\u3000".encode(),
}


def test_the_observed_instances_read_as_pi_reads_them(
    pi: Pi, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    mutants = [Mutant(name, data, [name], sessions / f"{name}.jsonl") for name, data in INSTANCES.items()]
    for mutant in mutants:
        mutant.path.write_bytes(mutant.data)
    tally = Tally()
    for mutant, theirs in zip(mutants, pi.load_many([m.path for m in mutants]), strict=True):
        assert "error" not in theirs, (mutant.name, theirs)
        transcript = read_transcript(mutant.path)
        compare_with_pi(mutant, transcript, theirs, tally)
        check_fast_paths(mutant, tmp_path)
        check_cli(mutant, transcript)
        if not transcript.committable:
            check_never_committed(mutant)
    assert tally.accepted == len(INSTANCES)
    blocked = {m.name for m in mutants if not read_transcript(m.path).committable}
    assert blocked == {
        "nested_100000",
        "nested_and_due",
        "tool_arguments_nested_1000",
        "number_ids",
        "message_not_object",
    }
    overflow = {
        m.name for m in mutants if "figure_overflow" in {p.kind for p in read_transcript(m.path).problems}
    }
    assert overflow == {"usage_1e308", "usage_sum_overflows", "usage_400_digits"}
    # The real command, as the issue ran it: nothing stops `once`, and validate calls none of these "ok"
    # except the ones pi loads with nothing to report.
    due = sessions / "nested_and_due.jsonl"
    os.utime(due, (1_700_000_000, 1_700_000_000))  # idle for long: `once` acts on it now
    done = compactd("once", "--json", "--sessions", str(sessions), env=cli_env)
    assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr[-3000:]
    rows = {row["path"]: row for row in json.loads(done.stdout)}
    assert set(rows) == {str(m.path) for m in mutants}
    assert rows[str(due)]["action"] == "skipped" and "too_deep" in rows[str(due)]["reason"], rows[str(due)]
    assert due.read_bytes() == INSTANCES["nested_and_due"]
    for mutant in mutants:
        done = compactd("validate", str(mutant.path), env=cli_env)
        assert "Traceback" not in done.stderr, done.stderr
        ok = mutant.name.startswith("header_version_") or mutant.name in {
            "lone_surrogate",
            "invalid_utf8",
            "timestamp_1e400",
            "entry_timestamp_1e400",
        }
        assert done.returncode == (0 if ok else 1), (mutant.name, done.stdout)


def test_javascript_whitespace_is_what_v8_trims(pi: Pi) -> None:
    """The characters pi's ``content.trim()`` strips, asked of node itself."""
    script = 'let o=[];for(let i=0;i<0x10000;i++){if((String.fromCharCode(i)+"x").trim()==="x")o.push(i)}'
    done = subprocess.run(
        ["node", "-e", script + ";console.log(JSON.stringify(o))"], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == [ord(c) for c in JS_WHITESPACE]
