"""How a name from outside (a session file, an OpenClaw key, a path, a reason quoting one) is shown: on one line,
with nothing a terminal or a line-based reader would act on.

A session file may be called ``"a\\ncompactd_compactions_total{route=\\"x\\"} 999.jsonl"`` or hold an ESC
sequence or a bidi override (U+202E); printed raw, it forges a line of ``status``, ``once``, ``doctor``, a log
or the metrics file, or reorders what a person reads. :func:`display_name` is applied where such text meets an
output: every line a command prints, every log line, every metrics label value. Pure.
"""

from __future__ import annotations

import re

__all__ = ["FORMAT_CHARS", "display_name", "escape_controls", "json_escape"]

# A character class (for re) of Unicode's format characters (category Cf, Unicode 14): invisible, yet they
# reorder text (U+202A-202E, U+2066-2069), hide inside words (U+200B, U+2060, U+FEFF) or tag it. A test checks
# it against unicodedata.
FORMAT_CHARS = (
    r"\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    r"\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    r"\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
# Controls (C0, DEL, C1), the two line and paragraph separators, format characters and lone surrogates.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029" + FORMAT_CHARS + r"\ud800-\udfff]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def json_escape(match: re.Match[str]) -> str:
    """The matched character as JSON writes it: ``\\uXXXX``, a surrogate pair past U+FFFF (so an escaped
    ``--json`` output is still JSON, and means the same)."""
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _escape(match: re.Match[str]) -> str:
    return _SHORT.get(match.group()) or json_escape(match)


def display_name(text: str) -> str:
    """``text`` on one line: newline, CR and tab as ``\\n``, ``\\r``, ``\\t``; every other control, format
    character, line separator and lone surrogate as JSON's ``\\uXXXX``. A name without them comes back
    unchanged."""
    return _UNSAFE.sub(_escape, text)


# What a terminal acts on or hides: C0 and C1 controls, the line and paragraph separators and the format
# characters (bidi overrides, zero-width spaces) but the two joiners, which emoji and several scripts need.
_TERMINAL_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]|(?![\u200c\u200d])[" + FORMAT_CHARS + "]"
)


def escape_controls(text: str) -> str:
    """``text`` with every control character but newline and tab, the line separators and the format characters
    but the joiners written as ``\\uXXXX``, for a terminal.

    The same escape is valid inside a JSON string, so JSON output stays JSON and means the same.
    """
    return _TERMINAL_CONTROL.sub(json_escape, text)
