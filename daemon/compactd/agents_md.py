"""AGENTS.md sections re-injected after a compaction (design.md §6.11).

A summary keeps task progress but tends to drop the rules an agent was told at the start (design.md §7.8);
re-injecting the workspace's "Session Startup" and "Red Lines" sections puts them back in front of the agent.
Everything here is pure except ``find_agents_md``/``read_agents_md``, which read one file from the workspace
(as its owner: see :mod:`compactd.workspace`).
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from compactd.defaults import POST_COMPACTION_MAX_CHARS, POST_COMPACTION_SECTIONS

__all__ = [
    "AGENTS_MD",
    "DEFAULT_LABEL",
    "HEADER",
    "LEGACY_SECTIONS",
    "TRUNCATED_MARKER",
    "extract_sections",
    "find_agents_md",
    "post_compaction_context",
    "read_agents_md",
]

logger = logging.getLogger(__name__)

AGENTS_MD = "AGENTS.md"
# Older workspace templates named the same two sections this way; used only for the default set (as OpenClaw).
LEGACY_SECTIONS = ("Every Session", "Safety")
TRUNCATED_MARKER = "\n...[truncated]..."
DATE_PLACEHOLDER = "YYYY-MM-DD"
# An AGENTS.md larger than this is not a rules file; reading it whole would only cost memory.
AGENTS_MD_MAX_BYTES = 1024 * 1024

HEADER = "[Post-compaction context refresh]"
DEFAULT_PROSE = (
    "This session was just compacted. Treat the conversation summary above as a hint only: it does not "
    "replace your startup routine. Run your Session Startup sequence again and read the files it requires "
    "before you answer the user."
)
CUSTOM_PROSE = (
    "This session was just compacted. Treat the conversation summary above as a hint only: it does not "
    "replace the workspace instructions. Follow the sections below again, including any files they tell you "
    "to read, before you answer the user."
)
DEFAULT_LABEL = "Critical rules from AGENTS.md:"

_FENCE = "```"
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")


def _heading(line: str) -> tuple[int, str] | None:
    match = _HEADING.match(line)
    if match is None:
        return None
    text = re.sub(r"\s+#+$", "", match.group(2)).strip()  # closing hashes of an ATX heading
    return len(match.group(1)), text


def extract_sections(markdown: str, names: Sequence[str]) -> list[str]:
    """The sections named (level-2 or -3 headings, case-insensitive), heading line included, in the order of
    ``names``; each runs until a heading of the same or a higher level. Lines starting with three backticks
    toggle a code fence, inside which nothing counts as a heading. Sections are trimmed, missing ones
    skipped."""
    lines = markdown.splitlines()
    found: list[str] = []
    for name in names:
        wanted = name.strip().casefold()
        captured: list[str] | None = None
        level = 0
        in_fence = False
        for line in lines:
            if line.lstrip().startswith(_FENCE):
                in_fence = not in_fence
                if captured is not None:
                    captured.append(line)
                continue
            heading = None if in_fence else _heading(line)
            if heading is not None:
                if captured is not None and heading[0] <= level:
                    break
                if captured is None and 2 <= heading[0] <= 3 and heading[1].casefold() == wanted:
                    captured, level = [line], heading[0]
                    continue
            if captured is not None:
                captured.append(line)
        if captured is not None:
            text = "\n".join(captured).strip()
            if text:
                found.append(text)
    return found


def _is_default_set(names: Sequence[str]) -> bool:
    defaults = sorted(n.casefold() for n in POST_COMPACTION_SECTIONS)
    return sorted(n.strip().casefold() for n in names) == defaults


def select_sections(markdown: str, names: Sequence[str]) -> list[str]:
    """``extract_sections`` with the legacy names as fallback, for the default set only."""
    found = extract_sections(markdown, names)
    if not found and _is_default_set(names):
        found = extract_sections(markdown, LEGACY_SECTIONS)
    return found


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + TRUNCATED_MARKER


def _current_time(now: datetime) -> str:
    return f"{now.isoformat(timespec='seconds')} ({now:%A})"


def post_compaction_context(
    markdown: str,
    *,
    sections: Sequence[str] = POST_COMPACTION_SECTIONS,
    max_chars: int = POST_COMPACTION_MAX_CHARS,
    now: datetime,
) -> str | None:
    """The post-compaction message text, or None when sections are disabled (``[]``) or none is found.
    ``YYYY-MM-DD`` in the sections becomes ``now``'s date, as AGENTS.md templates name daily memory files."""
    if not sections:
        return None
    found = select_sections(markdown, sections)
    if not found:
        return None
    content = "\n\n".join(found).replace(DATE_PLACEHOLDER, now.strftime("%Y-%m-%d"))
    content = _cut(content, max_chars)
    if _is_default_set(sections):
        prose, label = DEFAULT_PROSE, DEFAULT_LABEL
    else:
        prose, label = CUSTOM_PROSE, f"Injected sections from AGENTS.md ({', '.join(sections)}):"
    return f"{HEADER}\n\n{prose}\n\n{label}\n\n{content}\n\nCurrent time: {_current_time(now)}"


def find_agents_md(workspace: Path, owner: int | None = None) -> Path | None:
    """The workspace's AGENTS.md as a resolved path, or None: missing, not a regular file, unreadable, a
    symlink that leads outside the workspace (a session's ``cwd`` is not trusted to point anywhere), or, when
    ``owner`` is given, a file that user does not own (someone else's rules are not the agent's)."""
    try:
        root = workspace.resolve(strict=True)
        target = (root / AGENTS_MD).resolve(strict=True)
        if not target.is_relative_to(root):
            logger.warning("ignoring %s: it resolves outside the workspace to %s", root / AGENTS_MD, target)
            return None
        info = target.stat()
        if not stat.S_ISREG(info.st_mode):
            return None
        if owner is not None and info.st_uid != owner:
            logger.warning(
                "ignoring %s: owned by uid %d, not by the workspace owner %d", target, info.st_uid, owner
            )
            return None
        return target
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop on older Pythons
        return None


def read_agents_md(
    workspace: Path, max_bytes: int = AGENTS_MD_MAX_BYTES, *, owner: int | None = None
) -> str | None:
    """The text of the workspace's AGENTS.md (see ``find_agents_md``), or None on any error."""
    path = find_agents_md(workspace, owner)
    if path is None:
        return None
    try:
        # O_NOFOLLOW: the resolved path has no symlink left; refuse one swapped in since the check.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or (owner is not None and info.st_uid != owner):
                return None
            data = handle.read(max_bytes + 1)
    except OSError:
        return None
    if len(data) > max_bytes:
        logger.warning("ignoring %s: larger than %d bytes", path, max_bytes)
        return None
    return data.decode("utf-8", errors="replace")
