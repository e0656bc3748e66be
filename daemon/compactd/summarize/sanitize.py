"""Model text is data: no control characters, and nothing that passes for the markers compactd writes itself.

A summary is read by an agent that trusts compactd's own structure: pi's ``<summary>`` wrapper, the
post-compaction refresh message, the AGENTS.md sections re-injected after a compaction ("## Red Lines"), the
suffix compactd appends (recent turns, tool failures, file lists, ``<workspace-critical-rules>``). A model
prompted by hostile transcript text could imitate any of them, and a raw ESC or NUL from it would reach files
and terminals. Everything here is pure; :func:`summary_text` is applied once to each summarizer answer, and
:func:`escape_controls` to everything the CLI prints.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from functools import lru_cache

from compactd.agents_md import DEFAULT_LABEL, HEADER, LEGACY_SECTIONS
from compactd.defaults import POST_COMPACTION_SECTIONS
from compactd.display import FORMAT_CHARS, escape_controls
from compactd.summarize.augment import (
    RECENT_TURNS_HEADING,
    SPLIT_TURN_LABEL,
    TOOL_FAILURES_HEADING,
    TRUNCATION_MARKER,
)
from compactd.summarize.headings import REQUIRED_HEADINGS
from compactd.summarize.prompts import FENCE_TAGS

__all__ = [
    "MARKER_TAGS",
    "defuse_markers",
    "escape_controls",
    "reserved_headings",
    "strip_controls",
    "summary_text",
]

# C0 controls but tab and newline, DEL and C1 (CSI U+009B is an escape in 8-bit terminals); lone surrogates
# cannot be written as UTF-8 at all (orjson refuses them), so a model's half emoji would fail the commit.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]|[\ud800-\udfff]")

# Tags compactd or pi wrap trusted text in: pi's ``<summary>`` around the whole summary, the suffix's blocks,
# and the prompt fences a summary is later sent inside (as ``<previous-summary>``).
MARKER_TAGS: tuple[str, ...] = (
    "summary",
    "workspace-critical-rules",
    "read-files",
    "modified-files",
    *FENCE_TAGS,
)
_TAG = re.compile(r"<(?=\s*/?\s*(?:" + "|".join(map(re.escape, MARKER_TAGS)) + r")\b)", re.IGNORECASE)
# Bracketed notes compactd writes; a model's copy becomes "[quoted: …]".
_BRACKET_MARKERS: tuple[str, ...] = (HEADER, TRUNCATION_MARKER.strip())
# Headings and labels of compactd's own blocks, matched as a whole line whatever the markup (#, **, colon).
_OWN_HEADINGS: tuple[str, ...] = (
    RECENT_TURNS_HEADING,
    TOOL_FAILURES_HEADING,
    SPLIT_TURN_LABEL,
    DEFAULT_LABEL,
    HEADER,
)
# Labels that open the re-injected AGENTS.md text; a line starting with one imitates it whatever follows.
_OWN_LABELS: tuple[str, ...] = (DEFAULT_LABEL, "Injected sections from AGENTS.md")
QUOTED_HEADING = "[quoted heading: {}]"


def _words(text: str) -> str:
    """A heading's words without its markup, case-folded: ``## Red Lines:`` and ``**red lines**`` agree."""
    text = re.sub(r"[#*_`\[\]:]+", " ", text)
    return " ".join(text.split()).casefold()


def _phrase(marker: str) -> re.Pattern[str]:
    words = marker.strip("[]").split()
    return re.compile(r"\[\s*" + r"\s+".join(map(re.escape, words)) + r"\s*\]", re.IGNORECASE)


_BRACKETS = tuple((_phrase(m), m.strip("[]")) for m in _BRACKET_MARKERS)
_LABEL_WORDS = tuple(_words(label) for label in _OWN_LABELS)
# Longer lines are prose that happens to start with a section's words, not a heading.
_HEADING_MAX_CHARS = 120


def _imitates(line: str, names: frozenset[str]) -> bool:
    """A whole line that is a reserved name (any markup), or a markdown heading that starts with one."""
    stripped = line.strip()
    if not stripped or len(stripped) > _HEADING_MAX_CHARS:
        return False
    words = _words(stripped)
    if words in names:
        return True
    if any(words.startswith(label) for label in _LABEL_WORDS):
        return True
    return stripped.startswith("#") and any(words.startswith(n + " ") for n in names)


def strip_controls(text: str) -> str:
    """``text`` without control characters (tab and newline kept; CRLF and CR become newlines)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)


def reserved_headings(sections: Iterable[str] = POST_COMPACTION_SECTIONS) -> frozenset[str]:
    """What a model may not write as a heading: the AGENTS.md sections compactd re-injects (configured, default
    and legacy) and the headings of compactd's own blocks. The five required headings are the model's to write
    and never reserved."""
    every = (*sections, *POST_COMPACTION_SECTIONS, *LEGACY_SECTIONS, *_OWN_HEADINGS)
    names = {_words(_folded(n)[0]) for n in every}
    names -= {_words(h) for h in REQUIRED_HEADINGS}
    return frozenset(n for n in names if n)


_FORMAT = re.compile("[" + FORMAT_CHARS + "]")
_MINUS = "\u2212"


@lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    """What a non-ASCII character reads as: format characters nothing, compatibility forms their plain
    character (NFKC: fullwidth ``［`` is ``[``, a no-break space a space), every dash and hyphen ``-`` (NFKC
    leaves U+2011, the no-break hyphen, as U+2010)."""
    if _FORMAT.match(char):
        return ""
    return "".join(
        "-" if c == _MINUS or unicodedata.category(c) == "Pd" else c
        for c in unicodedata.normalize("NFKC", char)
    )


def _folded(text: str) -> tuple[str, list[int] | None]:
    """``text`` as a reader sees it (:func:`_fold_char`), and for each of its characters the index of the
    original character it comes from (None: ASCII text, folded as it is)."""
    if text.isascii():
        return text, None
    parts: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        folded = char if char < "\x80" else _fold_char(char)
        parts.append(folded)
        origin.extend([index] * len(folded))
    return "".join(parts), origin


def _sub_folded(pattern: re.Pattern[str], text: str, replace: Callable[[re.Match[str]], str]) -> str:
    """``pattern.sub`` matched on the folded text, replacing the original characters each match comes from:
    ``<\u200b/summary>`` and ``［Post-compaction context refresh］`` are the markers they read as."""
    folded, origin = _folded(text)
    if origin is None:
        return pattern.sub(replace, text)
    pieces: list[str] = []
    done = 0
    for m in pattern.finditer(folded):
        if m.end() == m.start():
            continue
        start, end = origin[m.start()], origin[m.end() - 1] + 1
        if start < done:
            continue  # two matches from one original character: the first replaced it
        pieces += [text[done:start], replace(m)]
        done = end
    return "".join(pieces) + text[done:]


def _constant(replacement: str) -> Callable[[re.Match[str]], str]:
    return lambda _m: replacement


def defuse_markers(text: str, reserved: frozenset[str] | None = None) -> str:
    """Model text with every imitation of compactd's markers made inert, the words kept: marker tags lose their
    ``<`` (``&lt;summary>``), a bracketed note becomes ``[quoted: …]``, and a line that is a reserved heading
    or label (``## Red Lines``, ``**Tool Failures:**``) becomes ``[quoted heading: Red Lines]``.

    Matched as a reader sees the text (:func:`_fold_char`): a zero-width space, a no-break hyphen or fullwidth
    brackets hide nothing."""
    names = reserved if reserved is not None else reserved_headings()
    text = _sub_folded(_TAG, text, _constant("&lt;"))
    for pattern, words in _BRACKETS:
        text = _sub_folded(pattern, text, _constant(f"[quoted: {words}]"))
    lines = text.split("\n")
    for index, line in enumerate(lines):
        folded = _folded(line)[0]
        if _imitates(folded, names):
            shown = folded.strip().lstrip("#").strip().strip("*_").strip()
            lines[index] = QUOTED_HEADING.format(shown)
    return "\n".join(lines)


def summary_text(text: str, sections: Iterable[str] = POST_COMPACTION_SECTIONS) -> str:
    """A summarizer's answer as it may enter a summary: controls stripped, compactd's markers defused."""
    return defuse_markers(strip_controls(text), reserved_headings(sections))
