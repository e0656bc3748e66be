"""Token accounting: pi's ``estimateTokens`` per message, ``JSON.stringify`` lengths, usage anchors, planning.

Expected figures are worked out by hand from pi 0.73.1's ``dist/core/compaction/compaction.js``
(design.md §6.1): characters as JavaScript counts them (UTF-16 code units) / 4, rounded up.
``JSON.stringify(x).length`` is taken from node itself, run once for a whole table.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import struct
import subprocess
from typing import Any

import pytest
from compactd.core.tokens import (
    MAX_TOKENS,
    estimate_context_tokens,
    estimate_for_planning,
    estimate_tokens,
    js_json_len,
    js_len,
    usage_tokens,
)
from compactd.defaults import SAFETY_MARGIN

from tests.support import messages as msgs

Json = dict[str, Any]
IMAGE = {"type": "image", "data": "aGVsbG8=" * 1000, "mimeType": "image/png"}


text = msgs.text


def usage(total: int | None = None, **parts: int) -> Json:
    value: Json = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, **parts}
    if total is not None:
        value["totalTokens"] = total
    return value


def assistant(*blocks: Json, use: Json | None = None, stop: str = "stop", ts: int = 2_000) -> Json:
    return msgs.assistant(*blocks, usage=use, stop=stop, ts=ts)


# ------------------------------------------------------------------------------------------------------------
# js_len


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", 0), ("abc", 3), ("é", 1), ("中文", 2), ("😀", 2), ("a😀b", 4), ("\U0010ffff", 2), ("\ud800", 1)],
)
def test_js_len_counts_utf16_code_units(value: str, expected: int) -> None:
    assert js_len(value) == expected


# ------------------------------------------------------------------------------------------------------------
# estimate_tokens, role by role


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # user: text only, string or blocks; images are not counted
        ({"role": "user", "content": "abcd"}, 1),
        ({"role": "user", "content": "abcde"}, 2),
        ({"role": "user", "content": ""}, 0),
        ({"role": "user", "content": [text("abcde"), text("fgh")]}, 2),
        ({"role": "user", "content": [text("abc"), IMAGE, IMAGE]}, 1),
        ({"role": "user", "content": [IMAGE]}, 0),
        ({"role": "user", "content": "😀😀"}, 1),  # 4 UTF-16 units
        ({"role": "user", "content": "😀😀a"}, 2),  # 5 units
        ({"role": "user", "content": "中文中文中"}, 2),  # BMP: one unit each
        # assistant: text + thinking + tool name + JSON.stringify(arguments)
        (assistant(text("abcdefgh")), 2),
        (assistant({"type": "thinking", "thinking": "x" * 9}), 3),
        (assistant({"type": "toolCall", "id": "c", "name": "bash", "arguments": {"command": "ls"}}), 5),
        (assistant({"type": "toolCall", "id": "c", "name": "ab", "arguments": {}}), 1),
        (
            assistant(
                text("ab"),
                {"type": "thinking", "thinking": "cd"},
                {"type": "toolCall", "id": "c", "name": "e", "arguments": [1, "x"]},
            ),
            3,
        ),
        (assistant({"type": "image", "data": "xxxx"}), 0),
        # toolResult and custom: text + 4,800 per image; string content counts too
        ({"role": "toolResult", "toolCallId": "c", "content": [text("abcde")]}, 2),
        ({"role": "toolResult", "toolCallId": "c", "content": "abcde"}, 2),
        ({"role": "toolResult", "toolCallId": "c", "content": [text("a"), IMAGE]}, 1201),
        ({"role": "toolResult", "toolCallId": "c", "content": [IMAGE, IMAGE]}, 2400),
        (
            {
                "role": "toolResult",
                "toolCallId": "c",
                "content": [text("ab")],
                "details": {"diff": "x" * 999},
            },
            1,
        ),
        ({"role": "custom", "customType": "x", "content": "abcdefghi", "display": True}, 3),
        ({"role": "custom", "customType": "x", "content": [IMAGE, text("abc")], "display": False}, 1201),
        # bashExecution: command + output
        ({"role": "bashExecution", "command": "ls -la", "output": "a.txt\n", "exitCode": 0}, 3),
        ({"role": "bashExecution", "command": "", "output": ""}, 0),
        # summaries
        ({"role": "compactionSummary", "summary": "s" * 17, "tokensBefore": 5}, 5),
        ({"role": "branchSummary", "summary": "s" * 4, "fromId": "x"}, 1),
        # roles pi does not count
        ({"role": "hookMessage", "content": "abcdefgh"}, 0),
        ({"role": "system", "content": "abcdefgh"}, 0),
        ({"content": "abcdefgh"}, 0),
    ],
)
def test_estimate_tokens_per_role_as_pi(message: Json, expected: int) -> None:
    assert estimate_tokens(message) == expected


def test_estimate_tokens_rounds_up_at_every_boundary() -> None:
    for n in range(0, 41):
        assert estimate_tokens({"role": "user", "content": "x" * n}) == math.ceil(n / 4)
        assert estimate_tokens({"role": "user", "content": "😀" * n}) == math.ceil(2 * n / 4)


# ------------------------------------------------------------------------------------------------------------
# js_json_len against node's JSON.stringify


TABLE_TEXTS = [
    # numbers: JSON text → the double JavaScript holds → its shortest round-trip printing
    "0",
    "-0",
    "-0.0",
    "1",
    "-1",
    "0.1",
    "0.5",
    "1.0",
    "100.0",
    "1.5e3",
    "123456789.123",
    "3.141592653589793",
    "1e20",
    "1e21",
    "1e-6",
    "1e-7",
    "1.2345e-7",
    "5e-324",
    "1.7976931348623157e308",
    "2.2250738585072014e-308",
    "1e400",
    "-1e400",
    "123e-20",
    "0.000001",
    "0.0000001",
    "4.35",
    "0.1e1",
    "1E+2",
    # integers around and beyond 2**53, and beyond 64 bits
    "9007199254740991",
    "9007199254740992",
    "9007199254740993",
    "-9007199254740993",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "12345678901234567890123",
    "100000000000000000000",
    "1000000000000000000000",
    "99999999999999999999999",
    # literals
    "null",
    "true",
    "false",
    # strings: escapes, control characters, unicode, astral, lone surrogates
    '""',
    '"abc"',
    '"quote \\" backslash \\\\ slash /"',
    '"\\t\\n\\r\\b\\f"',
    '"\\u0000\\u0001\\u001f\\u007f"',
    '"é中文"',
    '"😀"',
    '"\\ud83d\\ude00"',
    '"\\ud800"',
    '"a\\udfffb"',
    '"\\udc00\\ud800"',
    '"\\u2028\\u2029"',
    '"<script>&amp;</script>"',
    '"\\u00e9"',
    # nesting
    "[]",
    "{}",
    "[null]",
    "[1,[2,[3,[4]]]]",
    '{"a":{"b":{"c":[1,2,{"d":null}]}}}',
    '{"command":"ls -la | grep \\"x\\"","timeout":30,"env":{"A":"é","B":[true,false,null]}}',
    '{"😀":"key","":0,"\\ud800":1,"2":"numeric key","1":"first"}',
    '[1.0,2.50,-0.0,1e21,"x"]',
    '{"a":[],"b":{},"c":[[]],"d":[{}]}',
]


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice(
            [rng.randrange(-(10**6), 10**6), rng.randrange(-(2**80), 2**80), 2**53 + rng.randrange(9)]
        )
    if kind == 2:
        double = struct.unpack("<d", rng.randbytes(8))[0]
        return double if math.isfinite(double) else rng.random() * 10 ** rng.randrange(-30, 30)
    if kind in (3, 4):
        alphabet = 'ab "\\/\n\t\x00\x1f\x7fé中😀\u2028\ud800\udc00'
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
    if kind == 5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = [_random_value(rng, 9) if rng.random() < 0.2 else "k" + str(rng.randrange(5)) for _ in range(4)]
    return {str(k): _random_value(rng, depth + 1) for k in keys[: rng.randrange(5)]}


def _node_lengths(texts: list[str]) -> list[int]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is required (the reference implementation is JavaScript)")
    script = (
        "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{"
        "const texts=JSON.parse(s);"
        "process.stdout.write(JSON.stringify(texts.map(t=>JSON.stringify(JSON.parse(t)).length)))})"
    )
    done = subprocess.run(
        [node, "-e", script], input=json.dumps(texts).encode(), capture_output=True, timeout=60, check=True
    )
    lengths: list[int] = json.loads(done.stdout)
    return lengths


def test_js_json_len_equals_node_json_stringify_length() -> None:
    rng = random.Random(20250601)
    # each value travels as JSON text, so both sides see what JSON.parse would make of a transcript line
    random_texts = [json.dumps(_random_value(rng)) for _ in range(400)]
    texts = TABLE_TEXTS + random_texts
    expected = _node_lengths(texts)
    mismatches = [
        (t, js_json_len(json.loads(t)), want)
        for t, want in zip(texts, expected, strict=True)
        if js_json_len(json.loads(t)) != want
    ]
    assert mismatches == []


# ------------------------------------------------------------------------------------------------------------
# usage_tokens: which assistant messages anchor the count


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (assistant(use=usage(1234)), 1234),
        (assistant(use=usage(0, input=10, output=5, cacheRead=100, cacheWrite=1)), 116),
        (assistant(use=usage(None, input=10, output=5)), 15),
        (assistant(use=usage(500), stop="toolUse"), 500),
        (assistant(use=usage(500), stop="length"), 500),
        (assistant(use=usage(500), stop="aborted"), None),
        (assistant(use=usage(500), stop="error"), None),
        (assistant(use=usage(0)), None),  # delivery mirror: all-zero usage never anchors (deliberate)
        (assistant(use=usage(None)), None),
        (assistant(), None),
        ({"role": "user", "content": "x", "usage": usage(99)}, None),
        ({"role": "toolResult", "content": "x", "usage": usage(99)}, None),
    ],
)
def test_usage_tokens(message: Json, expected: int | None) -> None:
    assert usage_tokens(message) == expected


def test_estimate_context_tokens_anchors_on_the_last_valid_usage() -> None:
    messages = [
        {"role": "user", "content": "x" * 40},  # 10
        assistant(text("y" * 8), use=usage(5000)),  # older anchor
        {"role": "user", "content": "x" * 40},  # 10
        assistant(text("y" * 8), use=usage(7000)),  # the anchor
        {"role": "toolResult", "content": "z" * 12},  # 3
        assistant(text("w" * 4), use=usage(9000), stop="aborted"),  # 1, never an anchor
        assistant(text("v" * 4), use=usage(0)),  # 1, delivery mirror
        {"role": "user", "content": "q" * 5},  # 2
    ]
    estimate = estimate_context_tokens(messages)
    assert (estimate.tokens, estimate.usage_tokens, estimate.trailing_tokens) == (7007, 7000, 7)
    assert estimate.last_usage_index == 3
    assert estimate.source == "usage"
    assert estimate.with_margin == math.ceil(7007 * SAFETY_MARGIN)


def test_estimate_context_tokens_without_usage_sums_every_estimate() -> None:
    messages = [
        {"role": "user", "content": "x" * 40},
        assistant(text("y" * 8), use=usage(0)),
        assistant(text("y" * 8), use=usage(800), stop="error"),
    ]
    estimate = estimate_context_tokens(messages)
    assert (estimate.tokens, estimate.usage_tokens, estimate.trailing_tokens) == (14, 0, 14)
    assert estimate.last_usage_index is None
    assert estimate.source == "estimate"
    assert estimate.with_margin == 17  # ceil(14 × 1.2): the margin is reported apart from the raw figure


# ------------------------------------------------------------------------------------------------------------
# estimate_for_planning: usage from before the compaction is stale


def _compacted(after: list[Json]) -> list[Json]:
    return [
        {
            "role": "compactionSummary",
            "summary": "s" * 400,
            "tokensBefore": 150_000,
            "timestamp": 5_000,
        },  # 100
        {"role": "user", "content": "x" * 40, "timestamp": 1_000},  # 10 (kept)
        assistant(text("y" * 80), use=usage(150_000), ts=2_000),  # 20 (kept; stale usage)
        *after,
    ]


def test_planning_ignores_usage_older_than_the_compaction_summary() -> None:
    messages = _compacted([{"role": "user", "content": "z" * 8, "timestamp": 6_000}])  # 2
    assert estimate_context_tokens(messages).tokens == 150_002  # pi's figure anchors on the stale usage
    planning = estimate_for_planning(messages)
    assert (planning.tokens, planning.usage_tokens, planning.last_usage_index) == (132, 0, None)


def test_planning_anchors_on_usage_newer_than_the_compaction_summary() -> None:
    messages = _compacted(
        [
            {"role": "user", "content": "z" * 8, "timestamp": 6_000},
            assistant(text("a" * 4), use=usage(3_000), ts=7_000),
            {"role": "user", "content": "b" * 12, "timestamp": 8_000},  # 3
        ]
    )
    planning = estimate_for_planning(messages)
    assert (planning.tokens, planning.usage_tokens, planning.trailing_tokens) == (3_003, 3_000, 3)
    assert planning.last_usage_index == 4
    assert planning == estimate_context_tokens(messages)


def test_planning_treats_usage_at_the_summary_timestamp_as_stale() -> None:
    messages = _compacted([assistant(text("a" * 4), use=usage(3_000), ts=5_000)])
    assert estimate_for_planning(messages).usage_tokens == 0


def test_planning_without_a_summary_is_the_plain_estimate() -> None:
    messages = [
        {"role": "user", "content": "x" * 40, "timestamp": 1},
        assistant(text("y"), use=usage(77), ts=2),
    ]
    assert estimate_for_planning(messages) == estimate_context_tokens(messages)


# ------------------------------------------------------------------------------------------------------------
# Figures past a count, nesting past any recursion limit (issue 9)


@pytest.mark.parametrize(
    ("figures", "expected"),
    [
        ({"totalTokens": 1e308}, MAX_TOKENS),
        ({"totalTokens": math.inf}, MAX_TOKENS),
        ({"input": 1e308, "output": 1e308}, MAX_TOKENS),  # the sum is Infinity in JavaScript too
        ({"totalTokens": 2**64 - 1}, MAX_TOKENS),
        ({"totalTokens": MAX_TOKENS}, MAX_TOKENS),
        ({"totalTokens": 123.9}, 123),  # pi keeps the fraction; we count whole tokens
        ({"input": math.inf, "output": -math.inf}, None),  # NaN never anchors
        ({"totalTokens": -5}, None),  # nor does a negative figure (pi anchors on it)
        ({"totalTokens": -1e308, "input": 7}, None),
    ],
)
def test_usage_figures_past_a_count_are_clamped_never_raised(figures: Json, expected: int | None) -> None:
    message = {"role": "assistant", "content": [], "usage": figures, "stopReason": "stop"}
    assert usage_tokens(message) == expected
    estimate = estimate_context_tokens([message, {"role": "user", "content": "four"}])
    assert estimate.tokens == (expected or 0) + 1
    assert estimate.with_margin == math.ceil(estimate.tokens * SAFETY_MARGIN)  # no OverflowError


@pytest.mark.parametrize("depth", [300, 5_000, 100_000])
def test_json_stringify_length_at_any_depth(depth: int) -> None:
    nested: Any = "\ud800"  # a lone surrogate: orjson refuses it, JSON.stringify writes \ud800
    for _ in range(depth):
        nested = [nested]
    assert js_json_len(nested) == 2 * depth + 8
    message = {
        "role": "assistant",
        "content": [{"type": "toolCall", "name": "f", "arguments": {"a": nested}}],
    }
    assert estimate_tokens(message) == -(-(1 + 2 * depth + 8 + 6) // 4)
