"""The pruning plan measures each cut before building it (a dry run's route never builds one; a commit builds the
last cut of each result only): every text, message and figure must be the reference's
(``tests/support/reference/prune.py``, the code before), for any text, message and need."""

from __future__ import annotations

from typing import Any

from compactd.core import prune
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.reference import prune as reference

# Pieces that reach every branch of a cut: newlines (where a cut moves), an important tail, astral characters and
# lone surrogates (cut points moved off a pair), other BMP text, long runs (budgets of thousands).
PIECES = st.sampled_from(
    [
        "a",
        "b ",
        "\n",
        "é",
        "日本",
        "😀",
        "\ud800",
        "\udc00",
        " error",
        "}",
        "done",
        "x" * 700,
        "\n" * 3,
        "q" * 5000,
    ]
)
TEXTS = st.lists(st.tuples(PIECES, st.integers(1, 30)), max_size=8).map(
    lambda runs: "".join(p * n for p, n in runs)
)
NOTES = st.sampled_from([None, "full text in s.jsonl.bak", "vollständig in ä 😀", prune.truncation_suffix(3)])
BLOCKS = st.lists(
    st.one_of(
        TEXTS.map(lambda t: {"type": "text", "text": t}),
        st.just({"type": "image", "data": "x" * 40, "mimeType": "image/png"}),
        st.just({"type": "text", "text": 7}),
    ),
    min_size=1,
    max_size=4,
)


def message(content: Any) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": "c",
        "toolName": "read",
        "content": content,
        "details": {"n": 1},
    }


@given(text=TEXTS, max_chars=st.integers(1, 9_000), min_keep=st.integers(0, 3_000), note=NOTES)
@settings(max_examples=300, deadline=None)
def test_a_text_cut_is_the_reference(text: str, max_chars: int, min_keep: int, note: str | None) -> None:
    assert prune.truncate_text(text, max_chars, min_keep, note=note) == reference.truncate_text(
        text, max_chars, min_keep, note=note
    )


@given(
    content=BLOCKS | st.just("not a list"),
    max_chars=st.integers(1, 9_000),
    min_keep=st.integers(0, 3_000),
    note=NOTES,
    compat=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_a_message_cut_is_the_reference(
    content: Any, max_chars: int, min_keep: int, note: str | None, compat: bool
) -> None:
    msg = message(content)
    ours = prune._truncate_message(msg, max_chars, min_keep, note, compat=compat)
    theirs = reference._truncate_message(msg, max_chars, min_keep, note, compat=compat)
    assert ours == theirs
    assert (ours is msg) == (theirs is msg)
    cut = prune._message_cut(msg, max_chars, min_keep, note, compat=compat)
    if cut is not None:  # the figures known before the text is built are the built text's
        assert cut.chars == prune.tool_result_text_chars(ours)
        assert len(cut.cuts) == sum(
            1 for a, b in zip(content, ours["content"], strict=True) if isinstance(a, dict) and a is not b
        )


@given(
    contents=st.lists(BLOCKS, max_size=7),
    max_chars=st.integers(1, 9_000),
    need=st.integers(0, 12_000),
    min_keep=st.sampled_from([0, 1, 500, 2_000]),
    note=NOTES,
    committed=st.sampled_from([None, 0, 17, 60]),
)
@settings(max_examples=300, deadline=None)
def test_a_plan_is_the_reference(
    contents: list[Any], max_chars: int, need: int, min_keep: int, note: str | None, committed: int | None
) -> None:
    items: list[tuple[str, dict[str, Any]]] = []
    for i, content in enumerate(contents):
        items.append((f"e{i}", message(content)))
        if i % 3 == 1:
            items.append((f"u{i}", {"role": "user", "content": "u" * 900}))
    kwargs: dict[str, Any] = {
        "min_keep": min_keep,
        "note_for": (lambda _id: note) if note else None,
        "committed_note_chars": (lambda _id: committed) if committed is not None else None,
    }
    ours = prune.plan_pruning(items, max_chars, need, **kwargs)
    theirs = reference.plan_pruning(items, max_chars, need, **kwargs)
    assert (ours.need_tokens, ours.tokens_saved, ours.chars_saved, bool(ours)) == (
        theirs.need_tokens,
        theirs.tokens_saved,
        theirs.chars_saved,
        bool(theirs),
    )
    assert [(e.entry_id, e.chars_before, e.chars_after, e.tokens_saved) for e in ours.edits] == [
        (e.entry_id, e.chars_before, e.chars_after, e.tokens_saved) for e in theirs.edits
    ]
    assert [e.new_message for e in ours.edits] == [e.new_message for e in theirs.edits]


@given(
    text=TEXTS,
    cut=st.tuples(st.floats(0, 1), st.floats(0, 1), st.booleans()),
    max_chars=st.integers(1, 400),
    note=NOTES,
)
@settings(max_examples=400, deadline=None)
def test_fitting_the_suffix_is_the_reference(
    text: str, cut: tuple[float, float, bool], max_chars: int, note: str | None
) -> None:
    """The suffix fitted to any head and tail (the head shrunk to nothing, then the tail, then the marker
    dropped, each off a surrogate pair), as positions: the reference's text, built from the same positions."""
    units = prune._to_units(text)
    head_end = int(len(units) * cut[0])
    tail_start = head_end + int((len(units) - head_end) * cut[1]) if cut[2] else None
    suffix = prune._suffix_factory(note)
    head = units[:head_end]
    tail = units[tail_start:] if tail_start is not None else ""
    marker = prune.MIDDLE_MARKER if tail_start is not None else ""
    expected = reference._bounded(head, marker, tail, len(units), max_chars, suffix)
    fitted = prune._bounded(units, head_end, tail_start, max_chars, suffix)
    assert fitted.text() == expected
    assert len(fitted) == len(expected)


def test_small_budgets_shrink_the_head_as_the_reference() -> None:
    """Budgets just over the marker: a suffix whose count needs a digit more than planned shrinks the head, down
    to nothing (cuts that random texts seldom reach)."""
    tails = ["error", "😀" * 40 + " done", "\n" * 30 + "}", "a\n" * 60 + "total"]
    for body in ("x" * 9_990, "é\n" * 600, "😀" * 120):
        for tail in tails:
            text = body + tail
            for max_chars in range(1, 260):
                for note in (None, "n", "full text in s.jsonl.bak"):
                    expected = reference.truncate_text(text, max_chars, 0, note=note)
                    assert prune.truncate_text(text, max_chars, 0, note=note) == expected, (max_chars, note)


def test_a_bare_suffix_cut_short_is_the_reference() -> None:
    """Nothing of the text fits: the suffix itself is cut, never inside a surrogate pair of its note."""
    units = prune._to_units("😀" * 50)
    for note in (None, "vollständig in ä 😀", "😀😀"):
        suffix = prune._suffix_factory(note)
        for max_chars in range(1, 90):
            expected = reference._bounded("", "", "", len(units), max_chars, suffix)
            assert prune._bounded(units, 0, None, max_chars, suffix).text() == expected, (note, max_chars)


@given(counts=st.lists(st.integers(-3, 10**7), max_size=30), note=NOTES)
@settings(max_examples=200, deadline=None)
def test_a_suffix_written_once_is_the_reference(counts: list[int], note: str | None) -> None:
    """The suffixes a plan shares (each count's written once) are the ones written for each call."""
    suffix, theirs = prune._suffix_factory(note), reference._suffix_factory(note)
    for count in counts + counts:
        assert suffix(count) == theirs(count)


@given(
    count=st.integers(-3, 10**12) | st.floats(-5.0, 1e15, allow_nan=False) | st.booleans(),
    note=NOTES | st.just(""),
)
@settings(max_examples=300, deadline=None)
def test_a_suffix_is_the_references(count: float, note: str | None) -> None:
    """``truncation_suffix`` (no floor nor max() call for an int count) writes the reference's notice for any
    count: ints, floats (floored), booleans, and counts under 1."""
    assert prune.truncation_suffix(count, note) == reference.truncation_suffix(count, note)


@given(text=TEXTS | st.text())
@settings(max_examples=300, deadline=None)
def test_code_units_are_the_references(text: str) -> None:
    """A text's code units (``_to_units``, which asks how the string is stored instead of measuring it) are
    the reference's, and ``may_hold_astral`` says exactly when JavaScript counts more units than characters."""
    from compactd.core.tokens import js_len, may_hold_astral

    assert prune._to_units(text) == reference._to_units(text)
    assert may_hold_astral(text) is (js_len(text) != len(text))
    assert may_hold_astral(text) is any(ord(c) > 0xFFFF for c in text)
