"""Cheap literal tests that tell when a slow pattern cannot match, so that it is not tried (issue 22).

A case-insensitive pattern that starts with a word boundary or a character class is tried at every position of
a text; a substring test runs in C over the whole text at once. Each gate names literals of which every match
of its pattern holds at least one, so a text that holds none of them is skipped with nothing lost: the gate may
let through a text the pattern then rejects, never the reverse (``tests/test_summary_gates.py`` holds each
gated function to its ungated reference).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["folded", "holds_any"]


def folded(text: str) -> str:
    """``text`` lower-cased so that every case-insensitive match of a pattern's ASCII letters is found in it
    as those letters in lower case.

    With ``re.IGNORECASE`` an ``i`` also matches ``ı`` and ``İ``, an ``s`` ``ſ`` and a ``k`` the Kelvin sign;
    ``str.lower`` leaves ``ı`` and ``ſ`` as they are and makes ``İ`` an ``i`` and a combining dot above, so
    those are mapped too (only when the text is not ASCII: ``isascii`` is a flag, not a scan). A fold may join
    what the pattern keeps apart (an ``i`` with a dot of its own): a false positive, which a gate allows."""
    low = text.lower()
    if text.isascii():
        return low
    if "ı" in low:
        low = low.replace("ı", "i")
    if "ſ" in low:
        low = low.replace("ſ", "s")
    if "\u0307" in low:
        low = low.replace("\u0307", "")
    return low


def holds_any(text: str, needles: Iterable[str]) -> bool:
    """Whether ``text`` holds one of ``needles`` (each a substring test in C, iterated in C too)."""
    return any(map(text.__contains__, needles))
