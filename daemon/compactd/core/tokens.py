"""pi's token estimate, to the token (``dist/core/compaction/compaction.js`` of pi 0.73.1 and 1.6.0).

Lengths are JavaScript string lengths (UTF-16 code units), and a tool call's arguments count as the length of
``JSON.stringify(arguments)``; both are reproduced exactly, because the differential test against pi's own
``estimateContextTokens`` is the judge.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from compactd.core.jsjson import js_number, stringify
from compactd.core.messages import Message, current_system_message
from compactd.datarecord import datarecord
from compactd.defaults import CHARS_PER_TOKEN, SAFETY_MARGIN

__all__ = [
    "IMAGE_CHARS",
    "MAX_TOKENS",
    "ContextEstimate",
    "estimate_context_tokens",
    "estimate_for_planning",
    "estimate_tokens",
    "js_json_len",
    "js_len",
    "may_hold_astral",
    "message_chars",
    "projected_estimate",
    "usage_tokens",
    "usage_total",
]

# pi counts an image in a tool result or custom message (pi 1.x: in any message) as 4,800 characters.
IMAGE_CHARS = 4800
# The largest token figure we hold (Number.MAX_SAFE_INTEGER): a usage beyond it is clamped to it (and reported
# by the reader as ``figure_overflow``), so no budget arithmetic downstream can overflow.
MAX_TOKENS = 2**53 - 1


# CPython stores a string with any astral character 4 bytes per character (PEP 393); its size tells that kind
# apart without scanning, so the UTF-16 re-encode is paid only by the rare strings that can hold astral text.
_UCS4_HEADER = sys.getsizeof("\U00010000") - 2 * 4


def js_len(text: str) -> int:
    """``text.length`` in JavaScript: astral characters count twice."""
    if text.isascii() or sys.getsizeof(text) != _UCS4_HEADER + 4 * (len(text) + 1):  # may_hold_astral, inline
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def may_hold_astral(text: str) -> bool:
    """Whether ``text`` is stored 4 bytes per character: only such a string can hold an astral character (one
    that JavaScript counts twice), and CPython stores a string that way only when it does."""
    return sys.getsizeof(text) == _UCS4_HEADER + 4 * (len(text) + 1)


def js_json_len(value: Any) -> int:
    """``JSON.stringify(value).length``, at any nesting depth.

    orjson writes what JavaScript writes except for numbers (``1.0`` vs ``1``, ``1e+16`` vs digits, integers
    beyond 2**53), so its output is measured (an ASCII output's length is its byte count: no decoding) and each
    such number corrected; anything orjson refuses (lone surrogates, nesting past its limit) is measured on the
    exact ``stringify``.
    """
    try:
        encoded = orjson.dumps(value)
    except TypeError:
        return js_len(stringify(value, js_key_order=False))
    length = len(encoded) if encoded.isascii() else js_len(encoded.decode())
    return length + _number_correction(value)


def _number_correction(value: Any) -> int:
    """Recursive, but only over what orjson serialized: at most its 254 levels."""
    if isinstance(value, float):
        return _float_chars(value) - len(orjson.dumps(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return 0 if abs(value) < 2**53 else len(stringify(value)) - len(str(value))
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list):
        items = value
    else:
        return 0
    correction = 0
    for item in items:  # a loop, not a generator per container: once per tool call of every estimate
        kind = type(item)
        if kind is str or kind is bool or item is None or (kind is int and -(2**53) < item < 2**53):
            continue  # written alike by both
        correction += _number_correction(item)
    return correction


def _float_chars(value: float) -> int:
    """``js_number(value)``'s length. A finite float with a fraction, 1e-4 <= |value| < 1e16, is written by
    ``repr`` in positional notation with the same shortest digits, which is what JavaScript writes too: its
    length is ``repr``'s, without ``js_number``'s digit juggling (a few microseconds each)."""
    if 1e-4 <= abs(value) < 1e16 and not value.is_integer():
        return len(repr(value))
    return len(js_number(value))


def _text_chars(content: Any, *, images: bool) -> int:
    if isinstance(content, str):
        return len(content) if content.isascii() else js_len(content)
    chars = 0
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                text = block.get("text")
                if isinstance(text, str) and text:
                    chars += len(text) if text.isascii() else js_len(text)  # an ASCII text: no call
            elif images and kind == "image":
                chars += IMAGE_CHARS
    return chars


def message_chars(message: Message, *, pi1: bool = False) -> int:
    """The characters pi's ``estimateTokens`` counts for one message (0 for roles it does not count).

    ``pi1``: pi 1.x's rules, which count images in user messages and system messages (content, sections and
    the JSON of the tools they add). The roles are tried most frequent first (assistant, user, tool result)
    and an ASCII text is measured without ``js_len``'s call: this runs for every message ``inspect`` reports."""
    role = message.get("role")
    if role == "assistant":
        chars = 0
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" or kind == "thinking":
                text = block.get(kind)  # a text block's "text", a thinking block's "thinking"
                if isinstance(text, str):
                    chars += len(text) if text.isascii() else js_len(text)
            elif kind == "toolCall":
                name = block.get("name")
                chars += (js_len(name) if isinstance(name, str) else 0) + js_json_len(block.get("arguments"))
        return chars
    if role == "user":
        return _text_chars(message.get("content"), images=pi1)
    if role in ("toolResult", "custom"):
        return _text_chars(message.get("content"), images=True)
    if role == "system":
        return _system_chars(message) if pi1 else 0
    if role == "bashExecution":
        return sum(js_len(v) for v in (message.get("command"), message.get("output")) if isinstance(v, str))
    if role in ("branchSummary", "compactionSummary"):
        summary = message.get("summary")
        return js_len(summary) if isinstance(summary, str) else 0
    return 0


def _system_chars(message: Message) -> int:
    chars = _text_chars(message.get("content"), images=True)
    sections = message.get("sections")
    if isinstance(sections, dict):
        chars += sum(js_len(text) for text in sections.values() if isinstance(text, str))
    tools = message.get("toolsAdded")
    if _js_truthy(tools):
        chars += js_json_len(tools)
    return chars


def _js_truthy(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return bool(value)
    if isinstance(value, int | float):
        return bool(value == value and value != 0)
    return bool(value != "")


def estimate_tokens(message: Message, *, pi1: bool = False) -> int:
    """pi's ``estimateTokens``: counted characters / 4, rounded up."""
    return -(-message_chars(message, pi1=pi1) // CHARS_PER_TOKEN)


def usage_tokens(message: Message) -> int | None:
    """pi's ``calculateContextTokens`` for an assistant message that may anchor the count, else None.

    Aborted and error turns never anchor (as in pi). Deliberate differences from pi: a usage that adds up to
    zero or less (or to NaN) never anchors, so OpenClaw's delivery-mirror messages do not reset the count to
    about 0; a fraction is dropped; a figure beyond ``MAX_TOKENS`` (``1e308``, ``Infinity``) counts as
    ``MAX_TOKENS``; fields that are not numbers count 0.
    """
    if message.get("role") != "assistant" or message.get("stopReason") in ("aborted", "error"):
        return None
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return None
    total = usage_total(usage)
    if not total > 0:  # also NaN
        return None
    return MAX_TOKENS if total > MAX_TOKENS else int(total)


def usage_total(usage: Mapping[str, Any]) -> float:
    """``totalTokens || input + output + cacheRead + cacheWrite`` in doubles, as JavaScript adds them."""
    total = _num(usage.get("totalTokens"))
    if not total or total != total:
        total = (
            _num(usage.get("input"))
            + _num(usage.get("output"))
            + _num(usage.get("cacheRead"))
            + _num(usage.get("cacheWrite"))
        )
    return total


def _num(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return 0.0
    try:
        return float(value)
    except OverflowError:  # an integer beyond the double range: JavaScript reads it as Infinity
        return math.copysign(math.inf, value)


@datarecord(frozen=True, slots=True)
class ContextEstimate:
    """pi's ``estimateContextTokens`` result; ``tokens`` is the raw figure, ``with_margin`` for limits."""

    tokens: int
    usage_tokens: int
    trailing_tokens: int
    last_usage_index: int | None

    @property
    def source(self) -> str:
        return "estimate" if self.last_usage_index is None else "usage"

    @property
    def with_margin(self) -> int:
        return math.ceil(self.tokens * SAFETY_MARGIN)


def estimate_context_tokens(messages: Sequence[Message], *, pi1: bool = False) -> ContextEstimate:
    """Usage of the last anchoring assistant message plus the estimate of every message after it."""
    for index in range(len(messages) - 1, -1, -1):
        anchor = usage_tokens(messages[index])
        if anchor is not None:
            trailing = sum(estimate_tokens(m, pi1=pi1) for m in messages[index + 1 :])
            return ContextEstimate(anchor + trailing, anchor, trailing, index)
    total = sum(estimate_tokens(m, pi1=pi1) for m in messages)
    return ContextEstimate(total, 0, total, None)


def projected_estimate(messages: Sequence[Message], trusted_from: int) -> ContextEstimate:
    """pi 1.x's ``estimateProjectedContextTokens``: the usage-anchored figure while its anchor postdates every
    context edit and compaction on the branch (``trusted_from``); else the current system message (every
    system message replayed into one) plus the estimate of every other message."""
    estimate = estimate_context_tokens(messages, pi1=True)
    if estimate.last_usage_index is not None and estimate.last_usage_index >= trusted_from:
        return estimate
    system = current_system_message(list(messages))
    tokens = estimate_tokens(system, pi1=True) if system is not None else 0
    tokens += sum(estimate_tokens(m, pi1=True) for m in messages if m.get("role") != "system")
    return ContextEstimate(tokens, 0, tokens, None)


def estimate_for_planning(messages: Sequence[Message]) -> ContextEstimate:
    """``estimate_context_tokens`` without usage figures older than the context's compaction summary.

    After a compaction the kept assistant messages still carry the usage of the long context they were answered
    in; anchoring on them would report the session as full right after it was compacted and loop. pi avoids
    this in its trigger (it skips usage not newer than the latest compaction); we do the same here.
    """
    summary_ts = None
    if messages and messages[0].get("role") == "compactionSummary":
        summary_ts = messages[0].get("timestamp")
    if not isinstance(summary_ts, int | float):
        return estimate_context_tokens(messages)
    fresh = next(
        (
            i
            for i in range(len(messages) - 1, 0, -1)
            if usage_tokens(messages[i]) is not None
            and isinstance(messages[i].get("timestamp"), int | float)
            and messages[i]["timestamp"] > summary_ts
        ),
        None,
    )
    if fresh is None:
        total = sum(estimate_tokens(m) for m in messages)
        return ContextEstimate(total, 0, total, None)
    anchor = usage_tokens(messages[fresh]) or 0
    trailing = sum(estimate_tokens(m) for m in messages[fresh + 1 :])
    return ContextEstimate(anchor + trailing, anchor, trailing, fresh)
