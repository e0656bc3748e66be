"""A model-free score of what an agent can read off pi's context after a compaction (issue 18).

The context is cut into *units* (a line, or a sentence of a long line). An answer counts only when one unit
holds its value with every term of its subject (the port with its service, the state with its task), and no
unit with the subject presents a superseded value as current (the old value without a "was / not /
superseded / corrected / old / →" marker beside it). A transcript dumped whole fails the second rule wherever
a value was corrected or a task moved on, and its size fails the budget: the fill (tokens of the context ÷
compactd's compaction threshold) is reported with every score, and a context over the threshold scores 0 %.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from compactd.core.tokens import estimate_context_tokens

from bench.quality.sessions import CATEGORIES, PHASES, Answer

# Words that mark a value as past: beside one, a superseded value is history, not a current claim.
_MARKER = re.compile(
    r"(?<![\w])(?:was|were|previously|earlier|formerly|superseded|corrected|correction|replaced|instead of|"
    r"not|no longer|old|stale|outdated)(?![\w])|→|->",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_STEM = re.compile(r"[a-z]+")


@cache
def _token(term: str) -> re.Pattern[str]:
    """``term`` as a whole token: ``192`` in ``10.0.192.3`` or ``/a/b`` inside ``/a/b/c`` does not count."""
    if _STEM.fullmatch(term):  # a stem (``depend``, ``report``): any word starting with it
        return re.compile(r"(?<![\w])" + re.escape(term), re.IGNORECASE)
    return re.compile(r"(?<![\w.:/@-])" + re.escape(term) + r"(?![\w/@-]|[.:]\w)", re.IGNORECASE)


def _texts(message: dict[str, Any]) -> Iterable[str]:
    if message.get("role") == "compactionSummary":
        yield str(message.get("summary", ""))
        return
    content = message.get("content")
    if isinstance(content, str):
        yield content
        return
    for block in content or []:
        if block.get("type") == "text":
            yield str(block.get("text", ""))
        elif block.get("type") == "toolCall":
            yield json.dumps(block.get("arguments"), ensure_ascii=False)


def units(messages: Sequence[dict[str, Any]]) -> list[str]:
    """Every line of every text a model reads, long lines cut into sentences."""
    out: list[str] = []
    for message in messages:
        for text in _texts(message):
            for line in text.splitlines():
                out.extend(s for s in _SENTENCE.split(line) if s.strip())
    return out


def answered(answer: Answer, pieces: Sequence[str]) -> bool:
    """The value stands with its subject somewhere, and nowhere is a superseded value presented as current."""
    about = [u for u in pieces if all(_token(term).search(u) for term in answer.subject)]
    if not any(_token(answer.value).search(u) for u in about):
        return False
    return not any(_token(old).search(u) and not _MARKER.search(u) for u in about for old in answer.stale)


@dataclass
class Score:
    """Answers found per category, and the context's size against compactd's threshold."""

    found: dict[str, int]
    total: dict[str, int]
    tokens: int
    threshold: int
    missed: list[Answer] = field(default_factory=list)

    @property
    def fill(self) -> float:
        return self.tokens / self.threshold

    @property
    def over_budget(self) -> bool:
        """A context past the threshold is no summary (a dump): it would be compacted again at once."""
        return self.tokens > self.threshold

    def percent(self, category: str, *, raw: bool = False) -> float | None:
        """Share of the category's answers found (0 over the budget unless ``raw``); None without answers."""
        if not self.total.get(category):
            return None
        if self.over_budget and not raw:
            return 0.0
        return 100.0 * self.found.get(category, 0) / self.total[category]

    def by_phase(self, answers: Sequence[Answer]) -> dict[str, list[int]]:
        """[found, total] per phase of history where the answer was last stated (early, middle, late)."""
        missed = {id(a) for a in self.missed}
        figures = {phase: [0, 0] for phase in PHASES}
        for answer in answers:
            figures[answer.phase][1] += 1
            figures[answer.phase][0] += id(answer) not in missed and not self.over_budget
        return figures

    def as_dict(self) -> dict[str, Any]:
        return {
            "percent": {c: self.percent(c) for c in CATEGORIES},
            "raw_percent": {c: self.percent(c, raw=True) for c in CATEGORIES},
            "found": dict(self.found),
            "total": dict(self.total),
            "tokens": self.tokens,
            "threshold": self.threshold,
            "fill": round(self.fill, 3),
            "over_budget": self.over_budget,
        }


def context_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """pi's estimate of the context (chars / 4 past the last usage), as compactd compares it."""
    return estimate_context_tokens(list(messages)).tokens


def score(messages: Sequence[dict[str, Any]], answers: Sequence[Answer], threshold: int) -> Score:
    """Score pi's context (``build_context(...).messages`` or pi's own loader) against the answer key."""
    pieces = units(messages)
    found = dict.fromkeys(CATEGORIES, 0)
    total = dict.fromkeys(CATEGORIES, 0)
    missed: list[Answer] = []
    for answer in answers:
        total[answer.category] += 1
        if answered(answer, pieces):
            found[answer.category] += 1
        else:
            missed.append(answer)
    return Score(found, total, context_tokens(messages), threshold, missed)


def notes(answers: Sequence[Answer]) -> str:
    """The ideal summary: one line per answer, value beside subject, superseded values marked as such."""
    lines = []
    for a in answers:
        was = f" (was {', '.join(a.stale)})" if a.stale else ""
        lines.append(f"- {' '.join(a.subject)}: {a.value}{was}")
    return "\n".join(lines)
