"""``lazy_pattern``: the pattern ``re.compile`` makes, compiled at the first call and only once."""

from __future__ import annotations

import re
from typing import Any

import pytest
from compactd.patterns import lazy_pattern


@pytest.mark.parametrize(
    ("source", "flags", "text"),
    [(r"(?P<word>[a-z]+)-\d+", re.IGNORECASE, "x ABC-12 y"), (rb"\x00[\x01-\x7f]+", 0, b"\xff\x00ab")],
)
def test_a_lazy_pattern_is_compiled_at_its_first_call_and_only_then(
    source: Any, flags: int, text: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[Any, int]] = []
    compile_ = re.compile

    def counting(pattern: Any, flags: int = 0) -> re.Pattern[Any]:
        made.append((pattern, flags))
        return compile_(pattern, flags)

    monkeypatch.setattr(re, "compile", counting)
    pattern = lazy_pattern(source, flags)
    assert made == []  # nothing compiled where it is defined

    first = pattern()
    assert made == [(source, flags)]
    assert pattern() is first and made == [(source, flags)]  # the same object, compiled once
    expected = compile_(source, flags)
    assert (first.pattern, first.flags) == (expected.pattern, expected.flags)
    assert first.search(text).group(0) == expected.search(text).group(0)  # type: ignore[union-attr]
