"""The five section headings every committed summary carries (seed; design.md §6.8).

They are exact lines, in this order: the quality check, the identifier repair, the digest and the prompts all
match them character for character, so they are defined here once.
"""

from __future__ import annotations

import re

__all__ = [
    "CONSTRAINTS",
    "CURRENT_STATE",
    "DECISIONS",
    "EXACT_IDENTIFIERS",
    "OPEN_TODOS",
    "PENDING_ASKS",
    "REQUIRED_HEADINGS",
    "SECTION_BREAK",
    "is_heading_line",
    "split_sections",
]

DECISIONS = "## Decisions"
OPEN_TODOS = "## Open TODOs"
CONSTRAINTS = "## Constraints/Rules"
PENDING_ASKS = "## Pending user asks"
EXACT_IDENTIFIERS = "## Exact identifiers"
# Not one of the five: compactd computes it (``facts.py``) and adds it to every summary it commits.
CURRENT_STATE = "## Current state"

REQUIRED_HEADINGS: tuple[str, ...] = (DECISIONS, OPEN_TODOS, CONSTRAINTS, PENDING_ASKS, EXACT_IDENTIFIERS)

# A markdown heading of level 1 or 2 ends a section; level 3+ stays inside it (pi's "### Done" under
# "## Progress").
SECTION_BREAK = re.compile(r"^#{1,2}\s")


def is_heading_line(line: str, heading: str) -> bool:
    """A heading counts only as a whole line; surrounding spaces are forgiven, anything else is not."""
    return line.strip() == heading


def split_sections(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(lines before the first heading, [(heading line stripped, body lines), ...]) in document order.

    Lines inside fenced code blocks never start a section, so a quoted ``## x`` in code stays body text.
    """
    preamble: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    in_fence = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
        elif not in_fence and SECTION_BREAK.match(stripped):
            sections.append((stripped, []))
            continue
        (sections[-1][1] if sections else preamble).append(line)
    return preamble, sections
