"""The token estimate's fast paths (issue 22, fifth round) against the code they replace
(``tests/support/reference/tokens.py``): ``JSON.stringify`` lengths measured without decoding an ASCII output and
with floats measured by ``repr`` where it is JavaScript's text, and per-message counts that measure an ASCII text
without a call. Every figure must be the reference's, for any value and any message."""

from __future__ import annotations

import math
from typing import Any

import pytest
from compactd.core.jsjson import js_number
from compactd.core.tokens import _float_chars, js_json_len, message_chars
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.reference import tokens as reference

# Texts that exercise every measuring path: ASCII, other BMP text, astral characters, lone surrogates.
texts = st.text(
    st.sampled_from('ab "\\/\n\t\x00\x1fé中😀\U0001f600\u2028\ud800\udc00'), max_size=12
) | st.text(max_size=8)
# Numbers on every side of the format boundaries: integral floats, 1e-7..1e21, the 2**53 limit, past 64 bits.
numbers = (
    st.floats()
    | st.sampled_from(
        [1.0, -0.0, 1e-4, 1e-5, 1e-6, 1e-7, 1e15, 1e16, 1e21, 0.5e-4, 9.999999999999998e15, 1e16 + 2]
    )
    | st.integers()
    | st.integers(min_value=2**53 - 3, max_value=2**53 + 3)
    | st.integers(min_value=2**63 - 2, max_value=2**64 + 2).map(lambda n: n * (-1) ** (n % 2))
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=1500, deadline=None)
@given(st.floats())
@example(1e-4)
@example(math.nextafter(1e-4, 0))
@example(math.nextafter(1e16, 0) + 0.5)
@example(1e16)
@example(0.1)
@example(-123.456)
def test_a_float_is_measured_as_javascript_writes_it(value: float) -> None:
    assert _float_chars(value) == len(js_number(value))


@settings(max_examples=800, deadline=None)
@given(json_values)
@example({"a": [1.0, 2.5, 1e16, 1e-6, 2**53, 2**70, "é😀"]})
@example("\ud800")
def test_json_stringify_length_is_the_reference_one(value: Any) -> None:
    assert js_json_len(value) == reference.js_json_len(value)


blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts | st.integers() | st.none()}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": texts | st.none()}),
    st.fixed_dictionaries({"type": st.just("thinking"), "text": texts}),  # the wrong key: counts nothing
    st.fixed_dictionaries({"type": st.just("text"), "thinking": texts}),
    st.fixed_dictionaries(
        {"type": st.just("toolCall"), "name": texts | st.integers(), "arguments": json_values}
    ),
    st.fixed_dictionaries({"type": st.just("image"), "data": texts}),
    st.fixed_dictionaries({"type": st.sampled_from(["other", 1, None]), "text": texts}),
    texts,
    st.none(),
)
roles = st.sampled_from(
    [
        "assistant",
        "user",
        "toolResult",
        "custom",
        "system",
        "bashExecution",
        "branchSummary",
        "compactionSummary",
    ]
) | st.sampled_from([None, 3, "", "Assistant"])
messages = st.fixed_dictionaries(
    {"role": roles, "content": texts | st.lists(blocks, max_size=5) | st.none()},
    optional={
        "command": texts | st.integers(),
        "output": texts,
        "summary": texts | st.none(),
        "sections": st.dictionaries(texts, texts | st.none(), max_size=3),
        "toolsAdded": st.lists(json_values, max_size=3) | st.sampled_from([0, "", None, False, 1]),
    },
)


@settings(max_examples=1500, deadline=None)
@given(messages, st.booleans())
def test_a_message_counts_the_reference_characters(message: dict[str, Any], pi1: bool) -> None:
    assert message_chars(message, pi1=pi1) == reference.message_chars(message, pi1=pi1)


@pytest.mark.parametrize(
    "message",
    [
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "ab😀"}, {"type": "text", "text": "é"}],
        },
        {
            "role": "assistant",
            "content": [{"type": "toolCall", "name": "n", "arguments": {"x": 1.0, "y": "中"}}],
        },
        {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image", "data": ""}]},
        {"role": "toolResult", "content": "😀😀"},
        {"role": "custom", "content": [{"type": "image"}, {"type": "text", "text": ""}]},
    ],
)
def test_the_fast_paths_are_taken_by_everyday_messages(message: dict[str, Any]) -> None:
    for pi1 in (False, True):
        assert message_chars(message, pi1=pi1) == reference.message_chars(message, pi1=pi1)
