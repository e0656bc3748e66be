"""Tool-result pruning, planned only: OpenClaw's tool-result truncation (design.md §6.5), sans IO.

Lengths are JavaScript lengths (UTF-16 code units, design.md §6.1) because the budgets and the route compare them
with OpenClaw's own figures. Internally a text holding astral characters is processed as a string of UTF-16
code units (each astral character as its two surrogates), so every cut point and count equals JavaScript's; a
cut that would split a surrogate pair moves by one unit, so a result never carries a lone surrogate.

What is cut differs from OpenClaw's recovery plan on purpose: ``plan_pruning`` frees only the tokens the
target needs, oldest results first, and has no aggregate cap, so the newest results (the text the agent is
working on) stay whole. ``reducible_chars``, the routing figure, still follows OpenClaw's plan to the character.

Deliberate differences from OpenClaw 2026.5.6 in the texts we write:
- the suffix's number is the count of original characters left out (OpenClaw measures the kept text with the
  middle marker in it, so its figure is short by the marker's length);
- when the suffix does not fit, head-and-tail texts lose characters from the end of the head, not from the end
  of the tail (OpenClaw trims the end, which is the very tail it meant to keep);
- a result cut twice is cut from its original text (a cut of a cut would state the characters removed by the
  second cut only).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import field
from functools import cached_property
from typing import Any, Protocol

from compactd.core.messages import Message, role_of
from compactd.core.tokens import js_len, may_hold_astral, message_chars
from compactd.datarecord import datarecord
from compactd.defaults import (
    CHARS_PER_TOKEN,
    TOOL_RESULT_CONTEXT_SHARE,
    TOOL_RESULT_MAX_CHARS,
    TOOL_RESULT_MIN_KEEP_CHARS,
)

__all__ = [
    "MIDDLE_MARKER",
    "PruneEdit",
    "PrunePlan",
    "ReducibleCount",
    "has_important_tail",
    "max_tool_result_chars",
    "plan_pruning",
    "reducible_chars",
    "tool_result_text_chars",
    "truncate_text",
    "truncate_tool_result",
    "truncation_suffix",
]

# Placed between head and tail (OpenClaw MIDDLE_OMISSION_MARKER), so the model knows the middle is gone.
MIDDLE_MARKER = "\n\n⚠️ [... middle content omitted — showing head and tail ...]\n\n"
# Session rewrites cut results down to nothing but the suffix if that is what the budget needs (design.md §6.5).
RECOVERY_MIN_KEEP_CHARS = 0
# hasImportantTail looks at this many trailing characters only.
IMPORTANT_TAIL_WINDOW = 2_000
# Head-and-tail split: the tail gets this share of the budget, at most TAIL_MAX_CHARS.
TAIL_SHARE = 0.3
TAIL_MAX_CHARS = 4_000
# A cut moves back to a newline when the newline lies beyond this share of the head ...
HEAD_NEWLINE_SHARE = 0.8
# ... and the tail starts after a newline found within this share of its length.
TAIL_NEWLINE_SHARE = 0.2

# An error or a summary word (design.md §6.5), as a whole word: ``\b(?:error|...|done)\b`` under re.ASCII.
_IMPORTANT_WORDS = (
    "error", "exception", "failed", "fatal", "traceback", "panic", "stack trace", "errno", "exit code",
    "total", "summary", "result", "complete", "finished", "done",
)  # fmt: skip
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")  # re.ASCII's \w
# JavaScript's String.prototype.trim set (WhiteSpace + LineTerminator); differs from str.strip()'s.
_JS_WHITESPACE = (
    "\t\n\v\f\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


# --- UTF-16 code units --------------------------------------------------------------------------------------


def _pair(match: re.Match[str]) -> str:
    code = ord(match.group()) - 0x10000
    return chr(0xD800 + (code >> 10)) + chr(0xDC00 + (code & 0x3FF))


def _to_units(text: str) -> str:
    """The text as JavaScript sees it: one Python character per UTF-16 code unit."""
    if text.isascii() or not may_hold_astral(text):  # told from how it is stored: no scan, no UTF-16 copy
        return text
    # A string stored so holds an astral character (and one that did not would come back equal).
    return _ASTRAL.sub(_pair, text)


def _from_units(units: str) -> str:
    if units.isascii():
        return units
    try:
        units.encode()  # fails exactly when a surrogate is there: several times faster than searching for one
    except UnicodeEncodeError:
        return units.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return units


def _is_high(ch: str) -> bool:
    return "\ud800" <= ch <= "\udbff"


def _is_low(ch: str) -> bool:
    return "\udc00" <= ch <= "\udfff"


def _safe_end(units: str, end: int) -> int:
    """A prefix end that does not split a surrogate pair (moved back by one when it would)."""
    if 0 < end < len(units) and _is_high(units[end - 1]) and _is_low(units[end]):
        return end - 1
    return end


def _safe_start(units: str, start: int) -> int:
    """A suffix start that does not split a surrogate pair (moved forward by one when it would)."""
    if 0 < start < len(units) and _is_high(units[start - 1]) and _is_low(units[start]):
        return start + 1
    return start


# --- single text --------------------------------------------------------------------------------------------

Suffix = Callable[[int], str]


def truncation_suffix(omitted: int, note: str | None = None) -> str:
    """OpenClaw's notice; ``note`` (where the full text is kept) goes inside the bracket, after the count."""
    # An int (every caller's count) needs no floor; no max() call either: a plan writes thousands of these.
    count = omitted if type(omitted) is int else math.floor(omitted)
    if count < 1:
        count = 1
    if note:
        return f"[... {count} more characters truncated; {note}]"
    return f"[... {count} more characters truncated]"


def _suffix_factory(note: str | None) -> Suffix:
    """The suffix of each count, in code units, each written once: a plan or a count asks the same ones over and
    over (the one-digit suffix for every minimum kept, each result's count for its budget and its fit)."""
    made: dict[int, str] = {}
    convert = note is not None and not note.isascii()  # else already in code units: no conversion

    def suffix(omitted: int) -> str:
        text = made.get(omitted)
        if text is None:
            text = truncation_suffix(omitted, note)
            made[omitted] = text = _to_units(text) if convert else text
        return text

    return suffix


def _effective_min_keep(max_chars: int, min_keep: int, suffix: Suffix) -> int:
    if min_keep <= 0:  # the recovery cuts' minimum: no suffix to build
        return 0
    # max(0, min(min_keep, max(0, room))), without the three calls: every cut asks it.
    room = max_chars - len(suffix(1))
    return 0 if room <= 0 else min_keep if min_keep < room else room


def has_important_tail(text: str) -> bool:
    """Whether the last 2,000 characters hold an error, a closing ``}`` or a summary line (design.md §6.5)."""
    return _important_tail(_to_units(text))


def _important_tail(units: str) -> bool:
    tail = units[-IMPORTANT_TAIL_WINDOW:].lower()
    return tail.rstrip(_JS_WHITESPACE).endswith("}") or _has_important_word(tail)


def _has_important_word(tail: str) -> bool:
    """Whether ``tail`` holds one of ``_IMPORTANT_WORDS`` as a whole word (what ``\\b(?:error|...)\\b`` finds):
    a ``str.find`` of each word, a scan in C, instead of the pattern's attempt at every position of the
    tail (ten times slower on tool output, which the route's count and a plan check for every cut)."""
    end = len(tail)
    find = tail.find
    for word in _IMPORTANT_WORDS:
        at = find(word)
        while at >= 0:
            after = at + len(word)
            starts = at == 0 or tail[at - 1] not in _WORD_CHARS
            if starts and (after == end or tail[after] not in _WORD_CHARS):
                return True
            at = find(word, at + 1)
    return False


def truncate_text(
    text: str, max_chars: int, min_keep: int = TOOL_RESULT_MIN_KEEP_CHARS, *, note: str | None = None
) -> str:
    """``truncateToolResultText``: at most ``max_chars`` long, suffix included; never longer than ``text``.

    Keeps head and tail around the middle marker when the tail is important and the budget allows it, else the
    head; cuts at a newline when one is close. The suffix counts the original characters left out and carries
    ``note`` when given.
    """
    return _truncate(text, max_chars, min_keep, note, compat=False)


def _truncate(text: str, max_chars: int, min_keep: int, note: str | None, *, compat: bool) -> str:
    """``compat`` reproduces OpenClaw to the character (its count, end trim, split pairs) for its figures."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    if js_len(text) <= max_chars:
        return text
    return _from_units(_cut_units(_to_units(text), max_chars, min_keep, _suffix_factory(note), compat=compat))


def _cut_units(units: str, max_chars: int, min_keep: int, suffix: Suffix, *, compat: bool) -> str:
    """``_truncate`` on a text already in code units, the result in code units (its length is its JS length)."""
    if len(units) <= max_chars:
        return units
    if not compat:
        return _text_cut(units, max_chars, min_keep, suffix).text()
    head_end, tail_start = _cut_points(units, max_chars, min_keep, suffix, compat=True)
    head = units[:head_end]
    tail = units[tail_start:] if tail_start is not None else ""
    marker = MIDDLE_MARKER if tail_start is not None else ""
    return _bounded_openclaw(head + marker + tail, len(units), max_chars, suffix)


def _text_cut(units: str, max_chars: int, min_keep: int, suffix: Suffix) -> _TextCut:
    """Our cut of a text longer than ``max_chars`` (in code units), as positions: no text built yet."""
    head_end, tail_start = _cut_points(units, max_chars, min_keep, suffix, compat=False)
    return _bounded(units, head_end, tail_start, max_chars, suffix)


class _TextCut:
    """A cut text as what it keeps of the original's code units: its length is known before the text is built,
    so a plan that only counts (a dry run's route) never builds it, and one that does builds the last cut only.
    """

    __slots__ = ("head_end", "marker", "suffix", "tail_start", "units")

    def __init__(self, units: str, head_end: int, tail_start: int, marker: str, suffix: str) -> None:
        self.units = units
        self.head_end = head_end  # the head is ``units[:head_end]``
        self.tail_start = tail_start  # the tail is ``units[tail_start:]`` (empty: ``len(units)``)
        self.marker = marker
        self.suffix = suffix

    def __len__(self) -> int:
        return self.head_end + len(self.marker) + len(self.units) - self.tail_start + len(self.suffix)

    def text(self) -> str:
        """The cut text, in code units."""
        return self.units[: self.head_end] + self.marker + self.units[self.tail_start :] + self.suffix


def _cut_len(units: _Units, max_chars: int, min_keep: int, suffix: Suffix) -> int:
    """The length of ``_cut_units(..., compat=True)``, without building it (the routing figure needs no text)."""
    length = len(units)
    if length <= max_chars:
        return length
    head_end, tail_start = _cut_points(units, max_chars, min_keep, suffix, compat=True)
    kept = head_end if tail_start is None else head_end + len(MIDDLE_MARKER) + length - tail_start
    return _openclaw_fit(kept, length, max_chars, suffix)[1]


class _Units(Protocol):
    """What a cut reads of a text in code units: a ``str``, or a ``_PendingCut``."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: slice, /) -> str: ...
    def rfind(self, sub: str, start: int, end: int, /) -> int: ...
    def find(self, sub: str, start: int, /) -> int: ...


class _PendingCut:
    """OpenClaw's cut of a text, built only if a second cut reads past the part it shares with the original.

    The routing figure cuts each result twice (to the cap, then to the aggregate budget, mostly down to the
    bare suffix): the second cut of a short budget reads only the first few characters, which are the
    original's, so the first cut's text is never built.
    """

    __slots__ = ("_built", "_cut", "_length", "_original", "_shared")

    def __init__(self, units: str, max_chars: int, min_keep: int, suffix: Suffix) -> None:
        head_end, tail_start = _cut_points(units, max_chars, min_keep, suffix, compat=True)
        kept = head_end if tail_start is None else head_end + len(MIDDLE_MARKER) + len(units) - tail_start
        keep, self._length = _openclaw_fit(kept, len(units), max_chars, suffix)
        self._original = units
        self._shared = min(keep, head_end, self._length)  # the cut starts with this much of the original
        self._cut = (max_chars, min_keep, suffix)
        self._built: str | None = None

    def text(self) -> str:
        if self._built is None:
            max_chars, min_keep, suffix = self._cut
            self._built = _cut_units(self._original, max_chars, min_keep, suffix, compat=True)
        return self._built

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: slice, /) -> str:
        return self.text()[index]

    def rfind(self, sub: str, start: int, end: int, /) -> int:
        if start >= 0 and end <= self._shared:
            return self._original.rfind(sub, start, end)
        return self.text().rfind(sub, start, end)

    def find(self, sub: str, start: int, /) -> int:
        return self.text().find(sub, start)


def _cut_points(
    units: _Units, max_chars: int, min_keep: int, suffix: Suffix, *, compat: bool
) -> tuple[int, int | None]:
    """Where a text longer than ``max_chars`` is cut: the head's end and the tail's start (None: head only).

    ``compat`` (OpenClaw's cut) takes the positions as they fall, even inside a surrogate pair; ours moves
    them off a pair, which needs the text itself (a ``str``).
    """
    length = len(units)
    eff_min_keep = _effective_min_keep(max_chars, min_keep, suffix)
    omitted = length - max_chars  # the characters past the budget (the suffix counts at least 1)
    budget = max_chars - len(suffix(omitted if omitted > 1 else 1))
    if budget < eff_min_keep:
        budget = eff_min_keep

    head_end: int
    tail_start: int | None = None
    if budget > eff_min_keep * 2:
        tail_budget = min(math.floor(budget * TAIL_SHARE), TAIL_MAX_CHARS)
        head_budget = budget - tail_budget - len(MIDDLE_MARKER)
        # The tail is searched only when a head-and-tail cut could follow (most second cuts are too short).
        if head_budget > eff_min_keep and _important_tail(units[-IMPORTANT_TAIL_WINDOW:]):
            head_end = head_budget
            newline = units.rfind("\n", 0, head_budget + 1)
            if newline > head_budget * HEAD_NEWLINE_SHARE:
                head_end = newline
            tail_start = length - tail_budget
            newline = units.find("\n", tail_start)
            if newline != -1 and newline < tail_start + tail_budget * TAIL_NEWLINE_SHARE:
                tail_start = newline + 1
    if tail_start is None:
        head_end = budget
        newline = units.rfind("\n", 0, budget + 1)
        if newline > budget * HEAD_NEWLINE_SHARE:
            head_end = newline
    if compat:
        return head_end, tail_start
    assert isinstance(units, str)
    return _safe_end(units, head_end), None if tail_start is None else _safe_start(units, tail_start)


def _bounded(units: str, head_end: int, tail_start: int | None, max_chars: int, suffix: Suffix) -> _TextCut:
    """Append the suffix, shrinking the head (then the tail from its start) until the whole fits.

    Head and tail are positions in ``units``: a head shrinks to a shorter prefix, a tail to a shorter suffix,
    so each test of a pair and each count reads the original (no text is built until the cut is wanted)."""
    length = len(units)
    marker = MIDDLE_MARKER if tail_start is not None else ""
    tail_start = length if tail_start is None else tail_start
    while True:
        omitted = tail_start - head_end  # the characters left out between head and tail (at least 1 counted)
        text = suffix(omitted if omitted > 1 else 1)
        size = head_end + len(marker) + length - tail_start + len(text)
        if size <= max_chars:
            return _TextCut(units, head_end, tail_start, marker, text)
        overflow = size - max_chars
        if head_end:
            end = _safe_end(units, max(0, head_end - overflow))
            head_end = end if end < head_end else head_end - 1
        elif tail_start < length:
            start = _safe_start(units, tail_start + min(length - tail_start, overflow)) - tail_start
            tail_start += start if start > 0 else 1
        elif marker:
            marker = ""
        else:
            return _TextCut(units, 0, length, "", text[: _safe_end(text, max_chars)])


def _bounded_openclaw(kept: str, length: int, max_chars: int, suffix: Suffix) -> str:
    """OpenClaw's ``appendBoundedTruncationSuffix``: counts the marker as kept and trims the end."""
    keep, total = _openclaw_fit(len(kept), length, max_chars, suffix)
    final = kept[:keep] + suffix(max(1, length - keep))
    return final[:total]


def _openclaw_fit(kept: int, length: int, max_chars: int, suffix: Suffix) -> tuple[int, int]:
    """``appendBoundedTruncationSuffix`` on lengths: (characters of the kept text left, length of the result)."""
    while True:
        omitted = length - kept  # the suffix counts at least 1 (no max() call: once per cut of the count)
        final = kept + len(suffix(omitted if omitted > 1 else 1))
        if final <= max_chars:
            return kept, final
        if not kept:
            return 0, max_chars
        kept = max(0, kept - (final - max_chars))


# --- one tool result ----------------------------------------------------------------------------------------


def max_tool_result_chars(
    context_window: int, hard_cap: int = TOOL_RESULT_MAX_CHARS, share: float = TOOL_RESULT_CONTEXT_SHARE
) -> int:
    """The per-result cap: min(⌊window × share⌋ × 4, hard cap) characters, a hard cap below 1 being 1 (design.md §6.5).

    The one definition of the cap that pruning and routing use (``budget.tool_result_max_chars`` passes the
    configured share and hard cap). pi's 2,000-character cut of each result in the summarizer's input
    (``serialize.SUMMARIZER_TOOL_RESULT_MAX_CHARS``) is another limit: what a summarizer reads, not what stays.
    """
    share_chars = math.floor(context_window * share) * CHARS_PER_TOKEN
    return min(share_chars, max(1, hard_cap))


def _is_text_block(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)


def _text_blocks(message: Message) -> Iterable[dict[str, Any]]:
    content = message.get("content")
    return (b for b in content if _is_text_block(b)) if isinstance(content, list) else ()


def tool_result_text_chars(message: Message) -> int:
    """Characters of a toolResult's text blocks (``getToolResultTextLength``); 0 for any other message."""
    if role_of(message) != "toolResult":
        return 0
    return sum(js_len(block["text"]) for block in _text_blocks(message))


def truncate_tool_result(
    message: Message, max_chars: int, min_keep: int = TOOL_RESULT_MIN_KEEP_CHARS, *, note: str | None = None
) -> Message:
    """``truncateToolResultMessage``: the text blocks share ``max_chars`` in proportion to their length.

    Returns a new dict when something is cut (images, other blocks and every other field kept), else the
    message itself; the input is never mutated. Each block keeps at least the minimum plus the suffix, so a
    result with many blocks can stay above ``max_chars``, as in OpenClaw.
    """
    return _truncate_message(message, max_chars, min_keep, note, compat=False)


def _truncate_message(
    message: Message, max_chars: int, min_keep: int, note: str | None, *, compat: bool
) -> Message:
    cut = _message_cut(message, max_chars, min_keep, note, compat=compat)
    return message if cut is None else cut.build()


class _MessageCut:
    """``truncateToolResultMessage``'s cut of a message, block by block: its text characters and the blocks it
    changes are known before any text is built (:meth:`build`), so a plan builds only the cuts it keeps."""

    __slots__ = ("chars", "cuts", "original")

    def __init__(self, original: Message, cuts: list[tuple[int, _TextCut | str]], chars: int) -> None:
        self.original = original
        # Each changed text block: its index in the content, its cut (positions, or OpenClaw's built in code units).
        self.cuts = cuts
        self.chars = chars  # the text blocks' characters once cut

    def build(self) -> Message:
        """The cut message: a new dict (images, other blocks and every other field kept)."""
        content = list(self.original["content"])
        for index, cut in self.cuts:
            units = cut if isinstance(cut, str) else cut.text()
            content[index] = {**content[index], "text": _from_units(units)}
        return {**self.original, "content": content}


def _message_cut(
    message: Message,
    max_chars: int,
    min_keep: int,
    note: str | None,
    *,
    compat: bool,
    texts: list[_Text] | None = None,
    suffix: Suffix | None = None,
) -> _MessageCut | None:
    """The cut of a message's text blocks, sharing ``max_chars`` in proportion to their lengths; None when it
    has nothing to cut. ``texts``: a tool result's ``_text_units``, when the caller has them (a plan cuts each
    result up to three times). ``suffix``: ``_suffix_factory(note)``, when the caller has it."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    content = message.get("content")
    if not isinstance(content, list):
        return None
    if texts is None:
        if role_of(message) != "toolResult":
            return None  # no text characters to count: nothing over ``max_chars``
        texts = _text_units(content)
    lengths = [texts[0][2]] if len(texts) == 1 else [length for _, _, length in texts]  # most: one text
    total = sum(lengths)
    if total <= max_chars:
        return None
    suffix = suffix or _suffix_factory(note)
    if len(texts) == 1:
        # One text block (most results), over the budget: ``_block_budgets`` gives it all of it, and the
        # effective minimum, which the cut works out again from ``min_keep`` (``_cut_points``; the effective
        # minimum of the effective minimum is itself): passed as is, without the shares' arithmetic.
        index, units, _ = texts[0]
        one = (
            _cut_units(units, max_chars, min_keep, suffix, compat=True)
            if compat
            else _text_cut(units, max_chars, min_keep, suffix)
        )
        return _MessageCut(message, [(index, one)], len(one))
    cuts: list[tuple[int, _TextCut | str]] = []
    chars = 0
    for (index, units, length), (budget, keep) in zip(
        texts, _block_budgets(lengths, total, max_chars, suffix, min_keep), strict=True
    ):
        if length <= budget:
            chars += length
            continue
        cut = (
            _cut_units(units, budget, keep, suffix, compat=True)
            if compat
            else _text_cut(units, budget, keep, suffix)
        )
        chars += len(cut)
        cuts.append((index, cut))
    return _MessageCut(message, cuts, chars)


_Text = tuple[int, str, int]  # a text block: its index in the content, its text in code units, their count


def _text_units(content: list[Any]) -> list[_Text]:
    """The text blocks of a message's content, each in code units (``_to_units``) with its JS length."""
    texts: list[_Text] = []
    for index, block in enumerate(content):
        if _is_text_block(block):
            units = _to_units(block["text"])
            texts.append((index, units, len(units)))
    return texts


# --- the plan -----------------------------------------------------------------------------------------------


@datarecord(frozen=True)
class PruneEdit:
    """One toolResult entry whose text is cut; ``new_message`` derives from the message the plan was given.

    ``chars_after`` and ``tokens_saved`` are the figures as committed, i.e. with the note that replaces the
    placeholder in the suffix (see ``plan_pruning``'s ``committed_note_chars``). ``planned`` is the new message
    or what builds it, on first use: a plan read for its figures only (a dry run's route) builds no text.
    """

    entry_id: str
    planned: Message | Callable[[], Message] = field(repr=False)
    chars_before: int
    chars_after: int
    tokens_saved: int = 0

    @property
    def saved(self) -> int:
        return self.chars_before - self.chars_after

    @cached_property
    def new_message(self) -> Message:
        planned = self.planned
        return planned() if callable(planned) else planned


@datarecord(frozen=True, slots=True, rare=True)
class PrunePlan:
    """Which entries change and how, and what that frees of the tokens asked for (pi's estimate)."""

    edits: tuple[PruneEdit, ...]
    need_tokens: int
    tokens_saved: int

    def __bool__(self) -> bool:
        return bool(self.edits)

    @property
    def chars_saved(self) -> int:
        return sum(edit.saved for edit in self.edits)

    @property
    def short_tokens(self) -> int:
        """What pruning could not free (0 when the need is met)."""
        return max(0, self.need_tokens - self.tokens_saved)


@datarecord(slots=True)
class _Result:
    """A tool result being planned: its original, its current cut and that cut's committed figures."""

    entry_id: str
    original: Message
    note: str | None
    note_growth: int  # committed note length minus planned note length, per suffix written
    other_chars: int  # what pi counts besides the text blocks (images)
    chars_before: int
    tokens_before: int
    texts: list[_Text]  # its text blocks (``_text_units``), read once for all its cuts
    suffix: Suffix  # ``_suffix_factory(note)``, shared by the plan's results of one note
    # What each of the plan's three passes cuts it towards at least: the cap, ``min_keep`` and nothing, each
    # with the longest suffix a cut of it can carry (``_suffix_chars``).
    floors: tuple[int, int, int]
    planned: _MessageCut | None  # the cut kept so far (None: whole); its text is built for the edit only
    chars: int  # planned text characters
    # The committed estimate of ``chars``: ⌈(other_chars + chars + growth) / 4⌉, kept with them (a plan reads it
    # two or three times per cut).
    tokens: int
    growth: int = 0  # what the committed notes add to ``chars``

    def cut(self, max_chars: int, min_keep: int) -> None:
        """Cut the original (never a previous cut: the suffix must count every character left out)."""
        texts = self.texts
        cut: _MessageCut | None
        if len(texts) == 1:
            # Most results: ``_message_cut``'s one-text cut (a text over the budget is cut to all of it), without
            # the checks and the lengths this result's reading settled.
            if self.chars_before <= max_chars:
                return
            index, units, _ = texts[0]
            one = _text_cut(units, max_chars, min_keep, self.suffix)
            cut = _MessageCut(self.original, [(index, one)], len(one))
        else:
            cut = _message_cut(
                self.original, max_chars, min_keep, self.note, compat=False, texts=texts, suffix=self.suffix
            )
        if cut is None or cut.chars >= self.chars:
            return
        chars = cut.chars
        growth = len(cut.cuts) * self.note_growth  # a suffix in each text block cut
        tokens = -(-(self.other_chars + chars + growth) // CHARS_PER_TOKEN)
        if tokens >= self.tokens:
            return  # fewer characters, not fewer tokens: not worth an edit
        self.planned, self.chars, self.growth, self.tokens = cut, chars, growth, tokens


def _suffix_chars(chars_before: int, note: str | None) -> int:
    """The longest suffix a cut of a text this long can carry."""
    return js_len(truncation_suffix(chars_before, note))


def plan_pruning(
    items: Sequence[tuple[str, Message]],
    max_chars: int,
    need_tokens: int,
    *,
    min_keep: int = TOOL_RESULT_MIN_KEEP_CHARS,
    note_for: Callable[[str], str | None] | None = None,
    committed_note_chars: Callable[[str], int] | None = None,
) -> PrunePlan:
    """Free ``need_tokens`` from the tool results among ``(entry_id, message)`` pairs, in branch order, and no more.

    The items are what stays in the context (after a compaction: the kept turns only). Three passes, each
    visiting the results oldest first and stopping as soon as the need is met, so the newest results, the
    ones the agent is working with, are the last to give:

    1. a result that alone exceeds the per-result cap ``max_chars`` is cut towards it;
    2. any result is cut towards ``min_keep`` characters;
    3. only when that is still not enough, towards its bare suffix (OpenClaw's recovery minimum, 0).

    Each cut is OpenClaw's (head and tail when the tail matters, cut at a newline). A result is never cut
    further than the remaining need asks, so with ``need_tokens`` 0 nothing changes. ``note_for(entry_id)``
    names where the full text stays (it goes in the suffix); ``committed_note_chars(entry_id)`` is that note's
    length once committed (the commit replaces a placeholder), so the token figures are the committed ones.
    Unlike OpenClaw's recovery plan there is no aggregate cap: results that fit the target are left whole.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    results: list[_Result] = []
    suffixes: dict[str | None, Suffix] = {}
    for entry_id, message in items:
        if role_of(message) != "toolResult":
            continue
        content = message.get("content")
        texts = _text_units(content) if isinstance(content, list) else []
        # ``tool_result_text_chars``; most results are one text (no generator)
        chars = texts[0][2] if len(texts) == 1 else sum(length for _, _, length in texts)
        other = message_chars(message) - chars
        tokens = -(-(other + chars) // CHARS_PER_TOKEN)
        note = note_for(entry_id) if note_for else None
        growth = committed_note_chars(entry_id) - js_len(note) if committed_note_chars and note else 0
        suffix = suffixes.get(note) or suffixes.setdefault(note, _suffix_factory(note))
        longest = _suffix_chars(chars, note)
        floors = (max_chars if max_chars > longest else longest, min_keep + longest, longest)
        results.append(
            _Result(entry_id, message, note, growth, other, chars, tokens, texts, suffix, floors, None, chars, tokens)
        )  # fmt: skip

    saved = sum(r.tokens_before - r.tokens for r in results)  # kept up to date as cuts are made: no rescan

    for number, keep in enumerate((min_keep, min_keep, RECOVERY_MIN_KEEP_CHARS)):
        for result in results:
            left = need_tokens - saved
            if left <= 0:
                break
            floor = result.floors[number]
            if result.chars <= floor:
                continue
            # The most text this result may keep so that its committed estimate drops by ``left`` tokens.
            tokens = result.tokens
            allowed = (tokens - left) * CHARS_PER_TOKEN - result.other_chars - result.note_growth
            result.cut(max(floor, allowed, 1), keep)
            saved += tokens - result.tokens
    edits = tuple(
        PruneEdit(r.entry_id, r.planned.build, r.chars_before, r.chars + r.growth, r.tokens_before - r.tokens)
        for r in results
        if r.planned is not None
    )
    return PrunePlan(edits, max(0, need_tokens), sum(e.tokens_saved for e in edits))


# --- OpenClaw's routing figure ------------------------------------------------------------------------------


def reducible_chars(items: Sequence[tuple[str, Message]], max_chars: int) -> int:
    """OpenClaw's ``maxReducibleChars`` to the character: what its recovery rewrite (minimum 0) removes.

    ``buildToolResultReplacementPlan``: (a) every result over the cap is cut to it, then (b) all results
    together must fit the same budget, the newest cut first (larger first on ties). The route compares this
    with OpenClaw's thresholds, so it follows OpenClaw's own cuts; our plan is ``plan_pruning``, which takes
    only what the target needs, oldest first, and has no aggregate cap.

    Only lengths matter here, so the texts stay in code units from start to end (each converted once, never
    back, never re-measured) and no message is rebuilt: ``inspect`` and every decision pay for this figure.
    """
    count = ReducibleCount(max_chars)
    add = count.add
    for _, message in items:
        add(message)
    return count.total()


class ReducibleCount:
    """``reducible_chars`` fed one message at a time, oldest first, then totalled once: a caller that walks
    the context's tool results anyway (``inspect``'s report, which measures each of them) reads each one
    here while its blocks are at hand, instead of a second walk of every result in memory (200 MB session:
    the two walks are about 40 ms)."""

    __slots__ = ("_before", "_current", "_floor", "_lazy", "_pending", "_suffix", "_total", "max_chars")

    def __init__(self, max_chars: int) -> None:
        if max_chars < 1:
            raise ValueError(f"max_chars must be at least 1, got {max_chars}")
        self.max_chars = max_chars
        self._suffix = _suffix_factory(None)
        # OpenClaw's floor assumes a one-digit count and then slices its own suffix apart.
        self._floor = len(self._suffix(1))
        self._before = 0  # every result's text characters, before any cut
        self._current: list[tuple[list[_Units], int | None]] = []
        # One-text results over the cap whose first cut is not made yet (its length: None in ``current``).
        # Such a cut is longer than the floor (the cap is), so a result the aggregate pass cuts down to the
        # floor counts the floor whatever its first cut, and ``remaining`` loses that length again: most of a
        # long session's results are never cut twice, nor their important tails looked for.
        self._pending: dict[int, str] = {}  # index in ``current`` -> the one text
        self._lazy = self.max_chars > self._floor
        self._total: int | None = None

    def add(self, message: Message) -> None:
        """Count one message of the context (anything but a tool result counts nothing)."""
        # role_of's "" for a role that is not a string: not a tool result either
        if message.get("role") != "toolResult":
            return
        # Most results are one text block: read without a generator and two calls (``_text_blocks``,
        # ``js_len``); an ASCII text is its own code units. Anything else: the general reading.
        content = message.get("content")
        block = content[0] if type(content) is list and len(content) == 1 else None
        text = block.get("text") if type(block) is dict and block.get("type") == "text" else None
        if type(text) is str:
            units = text if text.isascii() else _to_units(text)
            chars = len(units)
            self._before += chars
            if chars <= self.max_chars:
                self._current.append(([units], chars))
                return
            texts = [units]
        else:
            texts = [_to_units(block["text"]) for block in _text_blocks(message)]
            chars = sum(map(len, texts))
            self._before += chars
        blocks: list[_Units] = list(texts)
        first: int | None = chars
        max_chars = self.max_chars
        if chars > max_chars:
            if self._lazy and len(texts) == 1:
                self._pending[len(self._current)] = texts[0]
                first = None
            else:
                blocks = _first_cut(texts, chars, max_chars, self._suffix)
                first = sum(map(len, blocks))
        self._current.append((blocks, first))

    def total(self) -> int:
        """The characters the rewrite removes from every result added (nothing may be added after)."""
        if self._total is None:
            self._total = self._count()
        return self._total

    def _count(self) -> int:
        max_chars, suffix, floor_chars = self.max_chars, self._suffix, self._floor
        current, pending = self._current, self._pending

        def settle() -> int:
            """Make every pending first cut; the sum of their lengths (what ``remaining`` did not count yet)."""
            added = 0
            for i, units in pending.items():
                cut = _first_cut([units], len(units), max_chars, suffix)
                length = sum(map(len, cut))
                current[i] = (cut, length)
                added += length
            pending.clear()
            return added

        live = [i for i, (_, first) in enumerate(current) if first is None or first > 0]
        # What remains to cut is ``known`` plus the pending lengths, each of them at least 1 (over the floor).
        known = sum(length for i in live if (length := current[i][1]) is not None)
        if known + len(pending) <= max_chars:
            known += settle()
        if len(live) >= 2 and known + len(pending) > max_chars:
            known -= max_chars
            for i in sorted(live, reverse=True):  # the newest first (indices are unique: no tie to break)
                if known + len(pending) <= 0 and pending:
                    known += settle()
                if known + len(pending) <= 0:
                    break
                blocks, length = current[i]
                if length is None:
                    # What remains, ``known`` and at least 1 for each pending length, is past 0 here: with this
                    # result's own first cut it covers all of that cut down to the floor. Cut to the floor, and
                    # its first length leaves what remains again: it is never needed.
                    del pending[i]
                    known += floor_chars
                    current[i] = (blocks, floor_chars)
                    continue
                reducible = max(0, length - floor_chars)
                if reducible <= 0:
                    continue
                if pending and known + len(pending) < reducible:
                    known += settle()
                target = max(floor_chars, length - min(reducible, known + len(pending)))
                cut_chars = _cut_blocks_len(blocks, length, target, suffix, floor_chars)
                if length - cut_chars <= 0:
                    continue
                known -= length - cut_chars
                current[i] = (blocks, cut_chars)
        settle()
        return self._before - sum(length for _, length in current if length is not None)


def _first_cut(texts: list[str], chars: int, max_chars: int, suffix: Suffix) -> list[_Units]:
    """A result's texts (``chars`` long in all) after the cut of each to its share of ``max_chars``."""
    if len(texts) == 1:  # most results (every pending one): its share is all of it, its minimum none
        units = texts[0]
        return [
            _PendingCut(units, max_chars, RECOVERY_MIN_KEEP_CHARS, suffix)
            if len(units) > max_chars
            else units
        ]
    return [
        _PendingCut(units, budget, keep, suffix) if len(units) > budget else units
        for units, (budget, keep) in zip(
            texts, _block_budgets(map(len, texts), chars, max_chars, suffix), strict=True
        )
    ]


def _block_budgets(
    lengths: Iterable[int],
    total: int,
    max_chars: int,
    suffix: Suffix,
    min_keep: int = RECOVERY_MIN_KEEP_CHARS,
) -> Iterator[tuple[int, int]]:
    """OpenClaw's ``truncateToolResultMessage``: each text block's budget and minimum kept, given the blocks'
    lengths (``total`` in all); the recovery cuts' minimum unless ``min_keep`` is given."""
    eff_min_keep = _effective_min_keep(max_chars, min_keep, suffix)
    for length in lengths:
        proportional = math.floor(max_chars * (length / total))
        floor_chars = eff_min_keep + len(suffix(max(1, length - proportional)))
        yield max(1, min(max_chars, max(floor_chars, proportional))), eff_min_keep


def _cut_blocks_len(
    blocks: Sequence[_Units], total: int, max_chars: int, suffix: Suffix, floor_chars: int
) -> int:
    """The length of a result's text blocks once OpenClaw's recovery cuts them, without building them.
    ``floor_chars``: ``len(suffix(1))``, known to the caller (not written again for each of 8,000 results)."""
    if total <= max_chars:
        return total
    if len(blocks) == 1 and max_chars == floor_chars:
        # One text cut to the bare one-digit suffix (the aggregate pass's floor): no character of it fits
        # beside the longer suffix its count needs, so the bounded cut is that length, not walked.
        return max_chars
    if len(blocks) == 1:  # its share is all of it, its minimum none (``_block_budgets``), without the shares
        return _cut_len(blocks[0], max_chars, RECOVERY_MIN_KEEP_CHARS, suffix)
    budgets = _block_budgets(map(len, blocks), total, max_chars, suffix)
    return sum(_cut_len(u, budget, keep, suffix) for u, (budget, keep) in zip(blocks, budgets, strict=True))
