"""JSON as JavaScript reads and writes it: ``JSON.parse`` for the lines orjson refuses, ``JSON.stringify``.

orjson is the fast path everywhere; it is stricter than JavaScript in three ways that matter to a reader that
must keep every line pi keeps: lone surrogate escapes (valid JavaScript strings), numbers beyond the double
range (``1e400`` is ``Infinity``) and nesting beyond 1,024 levels (V8 parses any depth). ``loads`` takes those
lines exactly as ``JSON.parse`` does, without a depth limit. ``stringify`` is ``JSON.stringify`` of a parsed
value, also without a depth limit, for measuring (pi counts a tool call's arguments as its length) and for
writing a value back with the meaning JavaScript read from it.
"""

from __future__ import annotations

import json
import json.decoder
import math
import re
from collections.abc import Callable
from typing import Any

from compactd.patterns import lazy_pattern

__all__ = [
    "JS_WHITESPACE",
    "is_js_blank",
    "js_number",
    "js_to_number",
    "js_trim_bounds",
    "loads",
    "nesting",
    "stringify",
]

# Integers orjson keeps exact (64-bit); beyond them it gives the double, as JavaScript always does.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
# JavaScript's WhiteSpace and LineTerminator: what String.prototype.trim() strips (pi trims the whole file).
JS_WHITESPACE = (
    "\t\n\v\f\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_JS_WS_BYTES = b"|".join(re.escape(c.encode()) for c in JS_WHITESPACE)
_JS_BLANK = re.compile(rb"(?:" + _JS_WS_BYTES + rb")*")
_ASCII_WS = frozenset(b"\t\n\v\f\r ")
_MULTIBYTE_WS = tuple(c.encode() for c in JS_WHITESPACE if ord(c) > 0x7F)

_WS = lazy_pattern(r"[ \t\n\r]*")
_NUMBER = lazy_pattern(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LONE_SURROGATE = lazy_pattern("[\ud800-\udfff]")
# The json module's string scanner (C): escapes and surrogate pairs as JavaScript reads them (untyped).
_scanstring: Callable[[str, int, bool], tuple[str, int]] = getattr(json.decoder, "scanstring")  # noqa: B009


def js_int(text: str) -> int | float:
    """An integer literal as orjson gives it: exact within 64 bits, else the double (``inf`` past range)."""
    if len(text) <= 19:
        return int(text)
    if len(text) <= 21:
        value = int(text)
        if _INT_MIN <= value <= _INT_MAX:
            return value
    return float(text)


def _rejects_constant(name: str) -> Any:
    raise ValueError(f"JSON.parse rejects {name}")


def loads(text: str) -> Any:
    """``JSON.parse(text)``; raises ValueError where JavaScript throws."""
    try:
        return json.loads(text, parse_constant=_rejects_constant, parse_int=js_int)
    except RecursionError:  # deeper than Python's stack: V8 has no such limit
        return _parse_iteratively(text)


def _skip_ws(text: str, pos: int) -> int:
    match = _WS().match(text, pos)
    return match.end() if match else pos


def _fail(text: str, pos: int, what: str) -> ValueError:
    return ValueError(f"{what} at char {pos}" if pos < len(text) else f"{what} at the end")


def _parse_iteratively(text: str) -> Any:
    """The JSON grammar with an explicit stack instead of recursion; same values as ``json.loads`` above."""
    stack: list[list[Any] | dict[str, Any]] = []
    keys: list[str] = []  # the pending key of each object on the stack (lists push a placeholder)
    size = len(text)
    pos = _skip_ws(text, 0)
    while True:
        # a value starts at pos
        char = text[pos] if pos < size else ""
        value: Any
        if char == "[" or char == "{":
            pos = _skip_ws(text, pos + 1)
            if char == "[":
                if text.startswith("]", pos):
                    value, pos = [], pos + 1
                else:
                    stack.append([])
                    keys.append("")
                    continue
            elif text.startswith("}", pos):
                value, pos = {}, pos + 1
            else:
                stack.append({})
                key, pos = _key(text, pos)
                keys.append(key)
                continue
        elif char == '"':
            value, pos = _scanstring(text, pos + 1, True)
        elif text.startswith("true", pos):
            value, pos = True, pos + 4
        elif text.startswith("false", pos):
            value, pos = False, pos + 5
        elif text.startswith("null", pos):
            value, pos = None, pos + 4
        else:
            number = _NUMBER().match(text, pos)
            if number is None:
                raise _fail(text, pos, "unexpected character")
            literal = number.group()
            value = float(literal) if number.group(1) or number.group(2) else js_int(literal)
            pos = number.end()
        # a value ended at pos: hand it to its container, closing every container that ends here
        while True:
            pos = _skip_ws(text, pos)
            if not stack:
                if pos != size:
                    raise _fail(text, pos, "extra data")
                return value
            top = stack[-1]
            if isinstance(top, list):
                top.append(value)
            else:  # a repeated key keeps its first place and takes the last value, as in JavaScript
                top[keys[-1]] = value
            char = text[pos] if pos < size else ""
            if char == ",":
                pos = _skip_ws(text, pos + 1)
                if isinstance(top, dict):
                    keys[-1], pos = _key(text, pos)
                break
            if char != ("]" if isinstance(top, list) else "}"):
                raise _fail(text, pos, "expected ',' or a closing bracket")
            value = stack.pop()
            keys.pop()
            pos += 1


def _key(text: str, pos: int) -> tuple[str, int]:
    """An object key and its colon; returns the key and where its value starts."""
    if not text.startswith('"', pos):
        raise _fail(text, pos, "expected a property name")
    key, pos = _scanstring(text, pos + 1, True)
    pos = _skip_ws(text, pos)
    if not text.startswith(":", pos):
        raise _fail(text, pos, "expected ':'")
    return key, _skip_ws(text, pos + 1)


def js_trim_bounds(data: bytes, start: int, end: int) -> tuple[int, int]:
    """``(start, end)`` moved past the JavaScript whitespace at both ends of ``data[start:end]``.

    Byte-wise, which is exact: every such character's UTF-8 form starts with a lead byte, so no invalid
    sequence around it (Node decodes those to U+FFFD, not whitespace) can swallow it.
    """
    match = _JS_BLANK.match(data, start, end)
    begin = match.end() if match else start
    while end > begin:
        if data[end - 1] in _ASCII_WS:
            end -= 1
            continue
        for encoded in _MULTIBYTE_WS:
            if data.endswith(encoded, begin, end):
                end -= len(encoded)
                break
        else:
            break
    return begin, end


def is_js_blank(line: bytes) -> bool:
    """A line pi skips as blank: nothing but JavaScript whitespace (``line.trim()`` is empty)."""
    return _JS_BLANK.fullmatch(line) is not None


# --- JSON.stringify ---------------------------------------------------------------------------------------


def js_number(value: float) -> str:
    """ECMAScript Number::toString; ``null`` for a non-finite number, as ``JSON.stringify`` writes it."""
    if value != value or value in (math.inf, -math.inf):
        return "null"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    point = (
        len(int_part.lstrip("0")) if int_part.strip("0") else -(len(frac_part) - len(frac_part.lstrip("0")))
    )
    point += int(exp_text or 0)
    digits = digits.rstrip("0") or "0"
    k, n = len(digits), point
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    exp = n - 1
    exp_str = f"e{'+' if exp >= 0 else '-'}{abs(exp)}"
    if k == 1:
        return sign + digits + exp_str
    return sign + digits[0] + "." + digits[1:] + exp_str


def js_string(text: str) -> str:
    """``JSON.stringify(text)``: the json module's escapes (V8's too), lone surrogates as ``\\udxxx``."""
    quoted = json.dumps(text, ensure_ascii=False)
    if _LONE_SURROGATE().search(quoted) is None:
        return quoted
    return _LONE_SURROGATE().sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _scalar(value: Any, nonfinite: str) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return js_string(value)
    if isinstance(value, int):
        if abs(value) < 2**53:
            return str(value)
        try:
            value = float(value)  # JavaScript holds the double
        except OverflowError:
            value = math.copysign(math.inf, value)
    if isinstance(value, float):
        if math.isfinite(value):
            return js_number(value)
        if value != value or nonfinite == "null":
            return "null"
        return nonfinite if value > 0 else "-" + nonfinite
    return "null"


class _Raw(str):
    """Punctuation on the work stack (told apart from string values by type)."""


_OPEN_LIST, _CLOSE_LIST, _OPEN_DICT, _CLOSE_DICT = _Raw("["), _Raw("]"), _Raw("{"), _Raw("}")
_INDEX_KEY = lazy_pattern(r"0|[1-9][0-9]{0,9}")


def _js_key_order(obj: dict[str, Any]) -> list[str]:
    """Own-property order: array-index keys ascending first, then the others in insertion order."""
    keys = list(obj)
    index = [k for k in keys if _INDEX_KEY().fullmatch(k) and int(k) < 2**32 - 1]
    if not index:
        return keys
    taken = set(index)
    return sorted(index, key=int) + [k for k in keys if k not in taken]


def stringify(value: Any, *, nonfinite: str = "null", js_key_order: bool = True) -> str:
    """``JSON.stringify(value)`` of a parsed JSON value, compact, at any depth (an explicit stack).

    ``nonfinite="1e400"`` writes ±Infinity as a literal JavaScript reads back as ±Infinity (where
    ``JSON.stringify`` would write ``null``), so a line written back keeps the meaning pi read from it.
    ``js_key_order=False`` keeps the insertion order (the order of the line it came from).
    """
    parts: list[str] = []
    work: list[Any] = [value]
    pop, push, out = work.pop, work.append, parts.append
    while work:
        item = pop()
        kind = type(item)
        if kind is _Raw:
            out(item)
        elif kind is dict:
            out("{")
            push(_CLOSE_DICT)
            keys = _js_key_order(item) if js_key_order else list(item)
            for i in range(len(keys) - 1, -1, -1):
                key = keys[i]
                push(item[key])
                push(_Raw(("," if i else "") + js_string(key) + ":"))
        elif kind is list:
            out("[")
            push(_CLOSE_LIST)
            for i in range(len(item) - 1, -1, -1):
                push(item[i])
                if i:
                    push(_Raw(","))
        else:
            out(_scalar(item, nonfinite))
    return "".join(parts)


def nesting(value: Any) -> int:
    """How deeply arrays and objects nest in ``value`` (a scalar is 0, ``[]`` is 1), without recursion."""
    if type(value) is not dict and type(value) is not list:
        return 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    deepest = 1
    while stack:
        item, depth = pop()
        if depth > deepest:
            deepest = depth
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is dict or kind is list:
                push((child, depth + 1))
    return deepest


_JS_DECIMAL = lazy_pattern(r"[+-]?(?:Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")
_JS_RADIX = {"0x": 16, "0X": 16, "0o": 8, "0O": 8, "0b": 2, "0B": 2}


def js_to_number(value: Any) -> float:
    """JavaScript's ``Number(value)`` for a parsed JSON value (what ``<`` and ``>=`` compare): NaN for what is
    not a number, as for an object; an array by its ``String()``."""
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        if len(value) > 1:
            return math.nan
        item = value[0] if value else ""
        return js_to_number("" if item is None else item if isinstance(item, str) else stringify(item))
    if not isinstance(value, str):
        return math.nan
    text = value.strip(JS_WHITESPACE)
    if not text:
        return 0.0
    base = _JS_RADIX.get(text[:2])
    if base is not None:
        try:
            return float(int(text[2:], base)) if text[2:].isalnum() else math.nan
        except ValueError:
            return math.nan
    if not _JS_DECIMAL().fullmatch(text):
        return math.nan
    return float(text.replace("Infinity", "inf"))
