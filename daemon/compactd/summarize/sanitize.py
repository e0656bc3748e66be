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
from collections.abc import Iterable

from compactd.agents_md import DEFAULT_LABEL, HEADER, LEGACY_SECTIONS
from compactd.defaults import POST_COMPACTION_SECTIONS
from compactd.display import FORMAT_CHARS, json_escape
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
# What a terminal acts on or hides: the controls above, the line and paragraph separators and the format
# characters (bidi overrides, zero-width spaces) but the two joiners, which emoji and several scripts need.
_TERMINAL_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]|(?![\u200c\u200d])[" + FORMAT_CHARS + "]"
)

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


def escape_controls(text: str) -> str:
    """``text`` with every control character but newline and tab, the line separators and the format characters
    but the joiners written as ``\\uXXXX``, for a terminal.

    The same escape is valid inside a JSON string, so JSON output stays JSON and means the same.
    """
    return _TERMINAL_CONTROL.sub(json_escape, text)


def reserved_headings(sections: Iterable[str] = POST_COMPACTION_SECTIONS) -> frozenset[str]:
    """What a model may not write as a heading: the AGENTS.md sections compactd re-injects (configured, default
    and legacy) and the headings of compactd's own blocks. The five required headings are the model's to write
    and never reserved."""
    names = {_words(n) for n in (*sections, *POST_COMPACTION_SECTIONS, *LEGACY_SECTIONS, *_OWN_HEADINGS)}
    names -= {_words(h) for h in REQUIRED_HEADINGS}
    return frozenset(n for n in names if n)


def defuse_markers(text: str, reserved: frozenset[str] | None = None) -> str:
    """Model text with every imitation of compactd's markers made inert, the words kept: marker tags lose their
    ``<`` (``&lt;summary>``), a bracketed note becomes ``[quoted: …]``, and a line that is a reserved heading
    or label (``## Red Lines``, ``**Tool Failures:**``) becomes ``[quoted heading: Red Lines]``."""
    names = reserved if reserved is not None else reserved_headings()
    text = _TAG.sub("&lt;", text)
    for pattern, words in _BRACKETS:
        text = pattern.sub(f"[quoted: {words}]", text)
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if _imitates(line, names):
            shown = line.strip().lstrip("#").strip().strip("*_").strip()
            lines[index] = QUOTED_HEADING.format(shown)
    return "\n".join(lines)


def summary_text(text: str, sections: Iterable[str] = POST_COMPACTION_SECTIONS) -> str:
    """A summarizer's answer as it may enter a summary: controls stripped, compactd's markers defused."""
    return defuse_markers(strip_controls(text), reserved_headings(sections))
