"""The quality guard: does a summary have its headings, its identifiers and the user's latest ask?

Checks follow design.md §6.8; the heading repair and the fallback summary are deterministic, so a
model that ignores the structure (small local models do) still yields a summary with every required section.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import field

from compactd.datarecord import datarecord
from compactd.summarize.headings import REQUIRED_HEADINGS

__all__ = [
    "NO_PRIOR_HISTORY",
    "QualityReport",
    "ask_keywords",
    "better",
    "check_summary",
    "fallback_summary",
    "has_headings_in_order",
    "heading_lines",
    "missing_identifiers",
    "repair_headings",
    "score",
]

NONE_TEXT = "None."
NO_PRIOR_HISTORY = "No prior history."
NONE_CAPTURED = "None captured."

# At most this many keywords of the latest ask are compared (design.md §6.8): the head of a long ask states
# the request; its tail is usually pasted detail the summary need not repeat.
ASK_KEYWORDS_MAX = 12
# With at least this many keywords, two must appear in the summary; with fewer, one is enough.
ASK_KEYWORDS_FOR_TWO_MATCHES = 3
# How many missing identifiers a reason names; the retry prompt repeats them, so keep it short.
REASON_IDENTIFIERS_SHOWN = 5

# Small English stopword list: function words and request boilerplate that any summary contains by chance.
_STOPWORD_TEXT = """
    a about above after again all also am an and any are as at be because been before being below between both
    but by can could did do does doing done don down during each either else ever every few for from further
    get got had has have having he her here hers him his how i if in into is isn it its itself just let like
    make me might more most must my no nor not now of off on once only or other our ours out over own please
    put same shall she should so some such than thank thanks that the their theirs them then there these they
    this those through to too under until up us use very via want was we were what when where which while who
    whom why will with would yes yet you your yours ok okay hey hi hello maybe really sure
    """
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

# CJK scripts are written without spaces: a "word" there is a run of characters, compared as bigrams so a
# Chinese or Japanese ask can be found in a summary that rephrases around its key terms.
_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:[-_.][^\W_{_CJK}]+)*")
_CJK_RUN = re.compile(rf"[{_CJK}]+")
_HEX = re.compile(r"[0-9A-Fa-f]+(?:-[0-9A-Fa-f]+)*")


@datarecord(frozen=True, slots=True)
class QualityReport:
    """Outcome of the checks; ``checks`` holds only the checks that ran (name → passed)."""

    ok: bool
    reasons: list[str]
    checks: dict[str, bool]
    missing_identifiers: list[str] = field(default_factory=list)


# --- checks -------------------------------------------------------------------------------------------------
def heading_lines(summary: str) -> set[str]:
    """Required headings that appear as an exact line once surrounding whitespace is trimmed."""
    wanted = set(REQUIRED_HEADINGS)
    return {line.strip() for line in summary.splitlines() if line.strip() in wanted}


def identifier_present(identifier: str, summary: str, *, summary_folded: str | None = None) -> bool:
    """Literal containment; hex ids (hashes, UUIDs) compare case-insensitively, as models re-case them."""
    if identifier in summary:
        return True
    if _HEX.fullmatch(identifier):
        folded = summary_folded if summary_folded is not None else summary.casefold()
        return identifier.casefold() in folded
    return False


def missing_identifiers(summary: str, identifiers: Sequence[str]) -> list[str]:
    folded = summary.casefold()
    seen: set[str] = set()
    missing: list[str] = []
    for ident in identifiers:
        if ident and ident not in seen:
            seen.add(ident)
            if not identifier_present(ident, summary, summary_folded=folded):
                missing.append(ident)
    return missing


def _normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def ask_keywords(ask: str) -> list[str]:
    """Keywords of the user's ask: NFKC lower-case tokens without stopwords or 1-char tokens, CJK runs as
    character bigrams; unique, in order, at most ``ASK_KEYWORDS_MAX``."""
    keywords: list[str] = []
    seen: set[str] = set()
    for match in _TOKEN.finditer(_normalize(ask)):  # one at a time: an ask may be megabytes, a few are needed
        token = match.group()
        # A CJK run becomes its bigrams; a one-character run stays whole and is then dropped as too short.
        pieces = (
            [token[i : i + 2] for i in range(len(token) - 1)]
            if len(token) > 1 and _CJK_RUN.fullmatch(token)
            else [token]
        )
        for piece in pieces:
            if len(piece) < 2 or piece in STOPWORDS or piece in seen:
                continue
            seen.add(piece)
            keywords.append(piece)
            if len(keywords) >= ASK_KEYWORDS_MAX:
                return keywords
    return keywords


def ask_reflected(summary: str, ask: str) -> bool:
    keywords = ask_keywords(ask)
    if not keywords:
        return True
    text = _normalize(summary)
    needed = 2 if len(keywords) >= ASK_KEYWORDS_FOR_TWO_MATCHES else 1
    return sum(1 for k in keywords if k in text) >= needed


def _identifier_reason(missing: Sequence[str]) -> str:
    shown = ", ".join(missing[:REASON_IDENTIFIERS_SHOWN])
    more = len(missing) - REASON_IDENTIFIERS_SHOWN
    return f"missing_identifiers:{shown}" + (f" (+{more} more)" if more > 0 else "")


def check_summary(
    summary: str,
    *,
    latest_ask: str | None,
    identifiers: Sequence[str] | None,
    policy: str = "strict",
) -> QualityReport:
    """Audit a summary body (without the augmentation suffix) the way the quality guard does."""
    checks: dict[str, bool] = {}
    reasons: list[str] = []
    present = heading_lines(summary)
    for heading in REQUIRED_HEADINGS:
        ok = heading in present
        checks[f"section:{heading}"] = ok
        if not ok:
            reasons.append(f"missing_section:{heading}")
    missing: list[str] = []
    if policy == "strict" and identifiers:
        missing = missing_identifiers(summary, identifiers)
        checks["identifiers"] = not missing
        if missing:
            reasons.append(_identifier_reason(missing))
    if latest_ask is not None and latest_ask.strip():
        reflected = ask_reflected(summary, latest_ask)
        checks["latest_user_ask"] = reflected
        if not reflected:
            reasons.append("latest_user_ask_not_reflected")
    return QualityReport(ok=not reasons, reasons=reasons, checks=checks, missing_identifiers=missing)


def score(report: QualityReport) -> int:
    """Failed checks; lower is better."""
    return sum(1 for passed in report.checks.values() if not passed)


def better(a: QualityReport, b: QualityReport) -> QualityReport:
    """The better of two attempts, ``b`` being the later one: it wins ties, since it saw the reasons."""
    return a if score(a) < score(b) else b


# --- repair -------------------------------------------------------------------------------------------------
def _heading_key(text: str) -> str:
    """A heading's words, for recognising near-misses such as ``### decisions``, ``**Open TODOs:**``."""
    text = text.strip().strip("#*_ \t").rstrip(":").strip("*_ \t")
    return re.sub(r"\s*/\s*", "/", re.sub(r"\s+", " ", text)).casefold()


_HEADING_KEYS = {_heading_key(h): h for h in REQUIRED_HEADINGS}
# A near-miss heading is a short line: longer lines are prose that happens to start with a heading's word.
_NEAR_MISS_MAX_CHARS = 40


def _as_heading(line: str, present: set[str]) -> str | None:
    """The required heading this line stands for: exact (trimmed), or a near-miss for a heading that is not
    present exactly (only its first such line, so repeated prose lines stay prose)."""
    stripped = line.strip()
    if stripped in _HEADING_KEYS.values():
        return stripped
    if len(stripped) > _NEAR_MISS_MAX_CHARS or not stripped:
        return None
    heading = _HEADING_KEYS.get(_heading_key(stripped))
    if heading is None or heading in present:
        return None
    looks_like_heading = stripped.startswith("#") or stripped.startswith("**") or stripped.endswith(":")
    return heading if looks_like_heading else None


def _trim_blank(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def repair_headings(summary: str) -> str:
    """Add every missing required heading, with "None." under it, without dropping or reordering anything
    the model wrote. Unheaded leading text goes under ``## Decisions``. Idempotent."""
    lines = summary.splitlines()
    exact = heading_lines(summary)
    preamble: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    seen: set[str] = set(exact)
    for line in lines:
        heading = _as_heading(line, seen)
        if heading is not None:
            seen.add(heading)
            blocks.append((heading, []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            preamble.append(line)
    preamble = _trim_blank(preamble)
    present = {h for h, _ in blocks}
    if present == set(REQUIRED_HEADINGS) and not preamble and present == exact:
        return summary

    order = {h: i for i, h in enumerate(REQUIRED_HEADINGS)}
    decisions = REQUIRED_HEADINGS[0]
    if preamble:
        if decisions in present:
            first = next(i for i, (h, _) in enumerate(blocks) if h == decisions)
            blocks[first] = (decisions, [*preamble, "", *_trim_blank(blocks[first][1])])
        else:
            blocks.insert(0, (decisions, preamble))
            present.add(decisions)
    for heading in REQUIRED_HEADINGS:
        if heading in present:
            continue
        rank = order[heading]
        after = [i for i, (h, _) in enumerate(blocks) if order[h] < rank]
        # After the block of the closest earlier heading (the last such block wins when headings repeat).
        best = max(after, key=lambda i: (order[blocks[i][0]], i)) if after else -1
        blocks.insert(best + 1, (heading, [NONE_TEXT]))
        present.add(heading)

    rendered = []
    for heading, body in blocks:
        body = _trim_blank(body)
        rendered.append(heading + ("\n" + "\n".join(body) if body else ""))
    return "\n\n".join(rendered)


def has_headings_in_order(summary: str) -> bool:
    """Every required heading as an exact line, first occurrences in the required order."""
    positions: list[int] = []
    stripped = [line.strip() for line in summary.splitlines()]
    for heading in REQUIRED_HEADINGS:
        if heading not in stripped:
            return False
        positions.append(stripped.index(heading))
    return positions == sorted(positions)


def fallback_summary(previous_summary: str | None) -> str:
    """The summary when there is nothing real to summarize (design.md §6.8): reuse a previous structured summary,
    else the five headings with the previous summary (or "No prior history.") under Decisions."""
    previous = (previous_summary or "").strip()
    if previous and has_headings_in_order(previous):
        return previous
    bodies = [previous or NO_PRIOR_HISTORY, NONE_TEXT, NONE_TEXT, NONE_TEXT, NONE_CAPTURED]
    return "\n\n".join(f"{h}\n{b}" for h, b in zip(REQUIRED_HEADINGS, bodies, strict=True))
