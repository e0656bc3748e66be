"""JSON5 (https://spec.json5.org, 1.0.0) in linear time and bounded depth, for OpenClaw's ``openclaw.json``.

The ``json5`` package parses with a generated PEG parser at about 60 µs a byte: a valid 1 MiB config took 115 s
(4.4 MiB: 304 s), and ``compactd run`` re-read it at every rescan; a deeply nested one raised RecursionError.
Here each token is one compiled regular expression matched at its position (strings, numbers, identifiers,
whitespace and comments in one step each), and nesting deeper than ``max_depth`` is refused before Python's
stack is. Plain JSON never gets here: :func:`compactd.sources.openclaw._discovery.read_openclaw_config` tries orjson first.

The values are JSON5's: integers (decimal or hex) as ``int``, any fraction or exponent as ``float``,
``Infinity`` and ``NaN`` as floats, the last of duplicate keys wins (as in JavaScript).
"""

from __future__ import annotations

import re
from typing import Any

MAX_DEPTH = 64

# Whitespace (JSON5's: the Unicode Zs set, BOM, line and paragraph separators) and comments, as one run.
_SKIP = re.compile(
    r"(?:[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+"
    r"|//[^\n\r\u2028\u2029]*|/\*.*?\*/)*",
    re.S,
)
_STRINGS = {
    '"': re.compile(r'"([^"\\\n\r]*(?:\\(?:\r\n|[\s\S])[^"\\\n\r]*)*)"'),
    "'": re.compile(r"'([^'\\\n\r]*(?:\\(?:\r\n|[\s\S])[^'\\\n\r]*)*)'"),
}
_NUMBER = re.compile(
    r"[+-]?(?:Infinity|NaN|0[xX][0-9a-fA-F]+|(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
)
_IDENTIFIER = re.compile(r"(?:[^\W\d]|\$|\\u[0-9a-fA-F]{4})(?:[\w$\u200c\u200d]|\\u[0-9a-fA-F]{4})*")
_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|(\r\n|[\n\r\u2028\u2029])|([\s\S]))")
_SINGLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "0": "\0"}
_LITERALS = {"null": None, "true": True, "false": False}


class JSON5Error(ValueError):
    """The text is not JSON5, or nests deeper than allowed; the message says where (line and column)."""


def loads(text: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """The value of a JSON5 document."""
    return _Parser(text, max_depth).document()


def _unescape(body: str, text: str, at: int) -> str:
    def one(match: re.Match[str]) -> str:
        hex2, hex4, continuation, char = match.groups()
        if hex2 is not None:
            return chr(int(hex2, 16))
        if hex4 is not None:
            return chr(int(hex4, 16))
        if continuation is not None:
            return ""
        if char == "0" and body[match.end() : match.end() + 1].isdigit():
            raise _error(text, at, "\\0 followed by a digit")
        if char in "123456789xu":
            raise _error(text, at, f"invalid escape \\{char}")
        return _SINGLE.get(char, char)

    out = _ESCAPE.sub(one, body)
    if any("\ud800" <= c <= "\udfff" for c in out):  # \uD83D\uDE00: UTF-16 pairs, as JavaScript reads them
        out = out.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return out


def _error(text: str, at: int, what: str) -> JSON5Error:
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    return JSON5Error(f"{what} at line {line} column {column}")


class _Parser:
    __slots__ = ("max_depth", "text")

    def __init__(self, text: str, max_depth: int) -> None:
        self.text = text
        self.max_depth = max_depth

    def document(self) -> Any:
        text = self.text
        value, pos = self.value(_SKIP.match(text, 0).end(), 0)  # type: ignore[union-attr]
        pos = _SKIP.match(text, pos).end()  # type: ignore[union-attr]
        if pos != len(text):
            raise _error(text, pos, "unexpected text after the value")
        return value

    def skip(self, pos: int) -> int:
        return _SKIP.match(self.text, pos).end()  # type: ignore[union-attr]

    def value(self, pos: int, depth: int) -> tuple[Any, int]:
        text = self.text
        char = text[pos : pos + 1]
        if char == "{":
            return self.object(pos, depth + 1)
        if char == "[":
            return self.array(pos, depth + 1)
        if char in _STRINGS and char:
            return self.string(pos)
        match = _NUMBER.match(text, pos)
        if match is not None:
            return _number(match.group()), match.end()
        match = _IDENTIFIER.match(text, pos)
        if match is not None and match.group() in _LITERALS:
            return _LITERALS[match.group()], match.end()
        raise _error(text, pos, "expected a value" if char else "unexpected end of text")

    def string(self, pos: int) -> tuple[str, int]:
        text = self.text
        match = _STRINGS[text[pos]].match(text, pos)
        if match is None:
            raise _error(text, pos, "unterminated string")
        body = match.group(1)
        return (_unescape(body, text, pos) if "\\" in body else body), match.end()

    def key(self, pos: int) -> tuple[str, int]:
        text = self.text
        if text[pos : pos + 1] in ('"', "'"):
            return self.string(pos)
        match = _IDENTIFIER.match(text, pos)
        if match is None:
            raise _error(text, pos, "expected a key")
        name = match.group()
        return (_unescape(name, text, pos) if "\\" in name else name), match.end()

    def object(self, pos: int, depth: int) -> tuple[dict[str, Any], int]:
        text = self.text
        if depth > self.max_depth:
            raise _error(text, pos, f"nested deeper than {self.max_depth}")
        out: dict[str, Any] = {}
        pos = self.skip(pos + 1)
        if text[pos : pos + 1] == "}":
            return out, pos + 1
        while True:
            key, pos = self.key(pos)
            pos = self.skip(pos)
            if text[pos : pos + 1] != ":":
                raise _error(text, pos, "expected ':'")
            out[key], pos = self.value(self.skip(pos + 1), depth)
            pos = self.skip(pos)
            char = text[pos : pos + 1]
            if char == ",":
                pos = self.skip(pos + 1)
                if text[pos : pos + 1] == "}":
                    return out, pos + 1
            elif char == "}":
                return out, pos + 1
            else:
                raise _error(text, pos, "expected ',' or '}'")

    def array(self, pos: int, depth: int) -> tuple[list[Any], int]:
        text = self.text
        if depth > self.max_depth:
            raise _error(text, pos, f"nested deeper than {self.max_depth}")
        out: list[Any] = []
        pos = self.skip(pos + 1)
        if text[pos : pos + 1] == "]":
            return out, pos + 1
        while True:
            value, pos = self.value(pos, depth)
            out.append(value)
            pos = self.skip(pos)
            char = text[pos : pos + 1]
            if char == ",":
                pos = self.skip(pos + 1)
                if text[pos : pos + 1] == "]":
                    return out, pos + 1
            elif char == "]":
                return out, pos + 1
            else:
                raise _error(text, pos, "expected ',' or ']'")


def _number(token: str) -> int | float:
    body = token.lstrip("+-")
    negative = token.startswith("-")
    if body == "Infinity":
        return float("-inf") if negative else float("inf")
    if body == "NaN":
        return float("nan")
    if body[:2] in ("0x", "0X"):
        return -int(body, 16) if negative else int(body, 16)
    if "." in body or "e" in body or "E" in body:
        return float(token)
    return int(token)
