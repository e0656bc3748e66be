"""The common shape of a configuration file, read without PyYAML: the same document, positions and duplicate keys.

PyYAML's import is about 15 ms of CPU (its reader compiles a regex over all of Unicode), paid by every command
given a configuration file (``once --dry-run`` and ``inspect`` are compared with a bare read of the same
transcripts, interpreter start included). A configuration file is nearly
always nested ``key: value`` lines: this reads that shape, and only it, as PyYAML reads it (YAML 1.1 as PyYAML
resolves it: ``yes`` is true, ``~`` null, ``1.5`` a float), the positions its nodes would carry included. Anything
else (an anchor, a tag, a block scalar, a quoted string with an escape, a key that is not a plain word, an
octal or ``1e3``, a tab, a character outside printable ASCII, a line this does not recognise) gives None:
PyYAML then reads the file, errors and all. ``tests/test_config_plain.py`` holds the two readers to the same
results.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Marks", "read_plain"]

KeyPath = tuple[str | int, ...]
Marks = dict[tuple[str | int, ...], tuple[int, int]]
# (document, every key path's line and column and its key's under ("key", *path), duplicate keys' paths and
# positions in document order): what ``_load._parse_yaml`` makes of PyYAML's nodes.
Read = tuple[Any, Marks, list[tuple[KeyPath, int, int]]]

_BOOLS = {
    **dict.fromkeys(("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_NULLS = frozenset(("~", "null", "Null", "NULL"))
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_DIGITS = frozenset("0123456789")
_KEY_CHARS = _LETTERS | _DIGITS | frozenset("_-.")
# A plain scalar's first character when it is a string whatever follows (no resolver of PyYAML's starts there)
# or one of the words above; and its other characters, in a block and in a flow sequence.
_FIRST = _LETTERS | frozenset("_/~")
_BLOCK_CHARS = _LETTERS | _DIGITS | frozenset(" ._/~*:+@,()=-")
_FLOW_CHARS = _LETTERS | _DIGITS | frozenset(" ._/~*+@()=-")
# Deeper than any configuration: PyYAML reads it (and says when it is too deep, as it always has).
_MAX_DEPTH = 16


class _Other(Exception):
    """Not the shape read here: PyYAML reads the file."""


def read_plain(text: str) -> Read | None:
    """The document, as :func:`_load._parse_yaml` reads it with PyYAML, or None when it is not of the shape read
    here (then PyYAML must read it)."""
    if not text.isascii():
        return None
    rows: list[tuple[int, int, str]] = []  # (line, indent, the rest without trailing spaces), 0-based
    for number, line in enumerate(text.split("\n")):
        if not line.isprintable():  # a tab, a carriage return, a control character
            return None
        body = line.lstrip(" ")
        if body and body[0] != "#":
            rows.append((number, len(line) - len(body), body.rstrip(" ")))
    reader = _Reader(rows)
    if not rows:
        return None, reader.marks, reader.duplicates
    try:
        if rows[0][1] != 0:
            raise _Other
        data, end = reader.mapping(0, 0, ())
        if end != len(rows):
            raise _Other
    except _Other:
        return None
    return data, reader.marks, reader.duplicates


class _Reader:
    def __init__(self, rows: list[tuple[int, int, str]]) -> None:
        self.rows = rows
        self.marks: Marks = {}
        self.duplicates: list[tuple[KeyPath, int, int]] = []

    def mapping(self, index: int, indent: int, path: KeyPath) -> tuple[dict[str, Any], int]:
        """The block mapping whose keys are at ``indent`` from row ``index``; and the row after it."""
        rows = self.rows
        if len(path) > _MAX_DEPTH:
            raise _Other
        result: dict[str, Any] = {}
        while index < len(rows):
            line, at, body = rows[index]
            if at < indent:
                break
            if at > indent:
                raise _Other
            colon = body.find(":")
            key = body[:colon]
            if colon <= 0 or key[0] not in _FIRST or key[0] in "/~" or not _KEY_CHARS.issuperset(key):
                raise _Other
            if key in _BOOLS or key in _NULLS:
                raise _Other
            sub = (*path, key)
            if key in result:
                self.duplicates.append((sub, line + 1, at + 1))
            self.marks[("key", *sub)] = (line + 1, at + 1)
            rest = body[colon + 1 :]
            if rest and rest[0] != " ":
                raise _Other  # "key:value" is one plain scalar
            value = rest.lstrip(" ")
            index += 1
            if value and value[0] != "#":
                column = at + colon + 1 + len(rest) - len(value)
                self.marks[sub] = (line + 1, column + 1)
                result[key] = self.inline(value, line, column, sub)
                if index < len(rows) and rows[index][1] > at:
                    raise _Other  # a scalar continued on the next line, or an error
                continue
            # Nothing after the colon: a nested block, or null (PyYAML's empty scalar, just after the colon).
            following = rows[index] if index < len(rows) else None
            if following is not None and _is_entry(following[2]) and following[1] >= at:
                self.marks[sub] = (following[0] + 1, following[1] + 1)
                result[key], index = self.sequence(index, following[1], sub)
            elif following is not None and following[1] > at:
                self.marks[sub] = (following[0] + 1, following[1] + 1)
                result[key], index = self.mapping(index, following[1], sub)
            else:
                self.marks[sub] = (line + 1, at + colon + 2)
                result[key] = None
        return result, index

    def sequence(self, index: int, indent: int, path: KeyPath) -> tuple[list[Any], int]:
        """The block sequence of ``- scalar`` entries at ``indent`` from row ``index``; and the row after it."""
        rows = self.rows
        items: list[Any] = []
        while index < len(rows):
            line, at, body = rows[index]
            if at < indent or (at == indent and not _is_entry(body)):
                break
            if at > indent or len(body) < 3:
                raise _Other
            value = body[2:].lstrip(" ")
            if not value or value[0] in "#[{":
                raise _Other
            column = at + len(body) - len(value)
            sub = (*path, len(items))
            self.marks[sub] = (line + 1, column + 1)
            items.append(self.inline(value, line, column, sub))
            index += 1
            if index < len(rows) and rows[index][1] > at:
                raise _Other
        return items, index

    def inline(self, text: str, line: int, column: int, path: KeyPath) -> Any:
        """A value that starts on its key's line (or its ``-``'s) at ``column`` and ends with the line."""
        first = text[0]
        if first in "\"'":
            value, end = _quoted(text, 0)
            _comment_only(text[end:])
            return value
        if first == "{":
            end = 1 + len(text[1:]) - len(text[1:].lstrip(" "))
            if text[end : end + 1] != "}":
                raise _Other
            _comment_only(text[end + 1 :])
            return {}
        if first == "[":
            return self.flow(text, line, column, path)
        cut = text.find(" #")
        scalar = text if cut < 0 else text[:cut].rstrip(" ")
        if not _BLOCK_CHARS.issuperset(scalar) or ": " in scalar or scalar.endswith(":"):
            raise _Other
        return _resolve(scalar)

    def flow(self, text: str, line: int, column: int, path: KeyPath) -> list[Any]:
        """``[item, item]`` on one line: quoted strings and plain scalars."""
        items: list[Any] = []
        at = _skip(text, 1)
        if text[at : at + 1] == "]":
            _comment_only(text[at + 1 :])
            return items
        while True:
            self.marks[(*path, len(items))] = (line + 1, column + at + 1)
            if text[at : at + 1] in ("'", '"'):
                value, at = _quoted(text, at)
            else:
                end = at
                while end < len(text) and text[end] not in ",]":
                    end += 1
                scalar = text[at:end].rstrip(" ")
                if not scalar or not _FLOW_CHARS.issuperset(scalar):
                    raise _Other
                value, at = _resolve(scalar), end
            items.append(value)
            at = _skip(text, at)
            if text[at : at + 1] == "]":
                _comment_only(text[at + 1 :])
                return items
            if text[at : at + 1] != ",":
                raise _Other
            at = _skip(text, at + 1)
            if text[at : at + 1] in ("]", ""):
                raise _Other  # a trailing comma, or the sequence goes on past the line


def _is_entry(body: str) -> bool:
    return body == "-" or body.startswith("- ")


def _skip(text: str, at: int) -> int:
    while text[at : at + 1] == " ":
        at += 1
    return at


def _quoted(text: str, at: int) -> tuple[str, int]:
    """A quoted string at ``at`` without escapes (no backslash, no doubled quote); and where it ends."""
    quote = text[at]
    end = text.find(quote, at + 1)
    if end < 0 or "\\" in text[at + 1 : end] or text[end + 1 : end + 2] == quote:
        raise _Other
    return text[at + 1 : end], end + 1


def _comment_only(rest: str) -> None:
    """What follows a value on its line: nothing, or spaces then a comment."""
    if rest and not (rest[0] == " " and rest.lstrip(" ")[:1] in ("", "#")):
        raise _Other


def _resolve(scalar: str) -> Any:
    """A plain scalar as PyYAML resolves and constructs it, for the forms read here."""
    first = scalar[0]
    if first in _FIRST:
        if scalar in _NULLS:
            return None
        return _BOOLS.get(scalar, scalar)
    sign, digits = (-1, scalar[1:]) if first == "-" else (1, scalar)
    whole, dot, fraction = digits.partition(".")
    if not whole or not _DIGITS.issuperset(whole):
        raise _Other
    if dot:
        if not fraction or not _DIGITS.issuperset(fraction):
            raise _Other
        return sign * float(digits)
    if len(whole) > 1 and whole[0] == "0":
        raise _Other  # YAML 1.1 reads it as octal
    return sign * int(whole)
