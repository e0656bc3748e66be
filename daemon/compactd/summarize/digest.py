"""The model-free structured digest: a first-class summarizer, not a placeholder.

It is the summary when no endpoint is configured and the last fallback level when every model call failed.
OpenClaw's last level writes "Summary unavailable due to size limits." and the history is gone; ours fills the
five required headings from what can be extracted mechanically — assistant sentences that state a decision,
unchecked items and TODOs, the rule clauses of the user's messages, the asks the agent has not answered (and the
very last ask verbatim, with whether it was answered), ranked identifiers, tool failures with exit codes, the
files read and modified — and carries a previous summary's sections forward. Each thing is said once: a rule
repeated in every ask is one line, an answered ask is not pending. Same input, same output; always under
:data:`DIGEST_MAX_CHARS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from compactd.core.messages import (
    Message,
    is_runtime_context,
    role_of,
    text_of,
    tool_call_id,
    tool_calls,
)
from compactd.datarecord import datarecord
from compactd.summarize.augment import TOOL_FAILURES_HEADING, exit_code_of, is_tool_failure
from compactd.summarize.derived import Lookup, nothing_derived
from compactd.summarize.facts import collapse, newest_that_fit
from compactd.summarize.fileops import file_operations
from compactd.summarize.gates import folded, holds_any
from compactd.summarize.headings import (
    CONSTRAINTS,
    DECISIONS,
    EXACT_IDENTIFIERS,
    OPEN_TODOS,
    PENDING_ASKS,
    REQUIRED_HEADINGS,
    split_sections,
)
from compactd.summarize.identifiers import (
    Identifier,
    command_identifier,
    extract_identifiers,
    identifier_line,
    rank_identifiers,
)
from compactd.summarize.redact import SpanText, redact_secrets

__all__ = [
    "DIGEST_MAX_CHARS",
    "FAILURES_HEADING",
    "FILES_HEADING",
    "LAST_ASK_MAX_CHARS",
    "MAX_FAILURES",
    "Ask",
    "build_digest",
    "tool_failures",
]

# --- size limits ------------------------------------------------------------------------------------------
# The digest must leave room in the 16,000-character committed summary (design.md §6.8) for the augmentation
# (the last summarized turns, tool failures, file lists), so it keeps to half of it.
DIGEST_MAX_CHARS = 8_000
# Per-section body budgets, scaled down together when the identifiers need the room.
DECISIONS_MAX_CHARS = 1_400
TODOS_MAX_CHARS = 900
CONSTRAINTS_MAX_CHARS = 1_000
ASKS_MAX_CHARS = 1_800
FAILURES_MAX_CHARS = 800
FILES_MAX_CHARS = 800
# Ranked identifiers are budgeted first, up to this much (64 typical identifiers take about 3,200).
IDENTIFIERS_RESERVED_CHARS = 4_000
_SECTIONS_MAX_CHARS = (
    DECISIONS_MAX_CHARS
    + TODOS_MAX_CHARS
    + CONSTRAINTS_MAX_CHARS
    + ASKS_MAX_CHARS
    + FAILURES_MAX_CHARS
    + FILES_MAX_CHARS
)
# Preface, seven headings, blank lines between sections and the "...and N more" lines.
_STRUCTURE_CHARS = 400
# One extracted sentence or item; long enough for a decision with its reason.
ITEM_MAX_CHARS = 240
# A sentence shorter than this says too little to be a decision ("Done, I'll go.").
MIN_STATEMENT_CHARS = 15
# The very last user ask, verbatim: the one thing the agent must not lose (OpenClaw audits it).
LAST_ASK_MAX_CHARS = 1_200
EARLIER_ASK_MAX_CHARS = 200
ERROR_TEXT_MAX_CHARS = 120
# A carried previous summary may use at most this share of a section when new items need the room.
CARRIED_SHARE = 0.5
# OpenClaw lists at most 8 tool failures (design.md §6.8).
MAX_FAILURES = 8
FAILURE_TEXT_MAX_CHARS = 160
FAILURE_COMMAND_MAX_CHARS = 80

# The latest ask's label says how its turn ended: "- Latest ask (verbatim; answered):" or "...; aborted):".
LATEST_ASK_LABEL = "- Latest ask (verbatim"
ANSWERED = "answered"

FAILURES_HEADING = TOOL_FAILURES_HEADING  # the augmentation's, so both name the section alike
FILES_HEADING = "## Files"
# Tells the agent reading it how to take the digest; dropped when a later digest carries this one forward.
_PREFACE_START = "_Mechanical digest of "
PREFACE = (
    _PREFACE_START
    + "{count} earlier messages (no summarizer model was used): items are quoted or extracted, "
    "not interpreted._"
)

# --- patterns ---------------------------------------------------------------------------------------------
# A decision, not a plan: "Decided to keep the retry logic", "we'll go with httpx", "let's use tabs" — never
# "I'll read X first", which only announces the next tool call.
_DECISION = re.compile(
    r"\b(?:decided|decide to|decision|chose|chosen|choose to|opted|settled on|agreed (?:on|to)|"
    r"going with|go with|sticking with|stick with|switched to|switching to|"
    r"(?:let['’]s|let us|we['’]ll|we will|we['’]re going to|we are going to) "
    r"(?:use|keep|adopt|switch to|stay with|stick with|go with))\b"
    r"|决定|采用|改用|选用|选择了|确定(?:用|使用)|就用",
    re.IGNORECASE,
)
_TODO_LINE = re.compile(r"\b(?:TODO|FIXME)\b\s*[:：]?\s*(?P<rest>.+)|(?:待办|待完成)\s*[:：]\s*(?P<cn>.+)")
_NEXT_STEP = re.compile(
    r"\b(?:next step|next,? I(?:'ll| will| need)|still need|remaining|not yet|left to do|follow[- ]up)\b"
    r"|下一步|还需要|尚未|待完成",
    re.IGNORECASE,
)
_CHECKBOX = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\[(?P<mark>[ xX])\]\s+(?P<item>.+)$")
# A rule: what must or must never be done. "please" and "only" alone make an ask, not a rule, and the user
# speaking of themself ("I don't think", "I never said") states nothing the agent must follow.
_RULE = re.compile(
    r"(?<!\bI )\b(?:must|mustn['’]t|never|always|don['’]t|do not|dont|shouldn['’]t|should not|avoid|make sure|ensure|"
    r"under no circumstances|not allowed|forbidden|prohibited)\b"
    r"|必须|不要|不许|不准|不得|别再|禁止|严禁|切勿|务必|一定要|永远|总是|始终|确保|只能|只允许",
    re.IGNORECASE,
)
# Where a rule clause begins inside a sentence: after a semicolon or colon, or a coordinating "and"/"but" (the
# rule in "fix X and never touch prod" is "never touch prod"). Commas are not boundaries: they join a rule to
# its condition ("when deploying, always ...") or its list ("don't touch A, B or C").
_RULE_START = re.compile(r"[;:]\s+|[；：]|\s(?:and|but)\s|并且|而且|但是")
_RULE_END = re.compile(r"\s*[;；]")
# Words that open a restated rule without being part of it ("Also, never ...", "Please, again: don't ...").
_RULE_FILLER = re.compile(
    r"^(?:(?:also|again|and|but|so|plus|please|remember|note|btw|ok|okay)\b[,:]?\s+|(?:另外|还有|同时|再次)[，,：:])+",
    re.IGNORECASE,
)
# Gates (``gates.py``): literals of which every match of a pattern holds one, lower case for the case-insensitive
# ones (tested against a ``folded`` text). Most of a big span's messages hold none, and are not split into
# sentences at all.
_DECISION_NEEDLES = (
    *("decid", "decision", "chose", "choose to", "opted", "settled on", "agreed on", "agreed to"),
    *("go with", "going with", "stick", "switch"),
    *("let's ", "let’s ", "let us ", "we'll ", "we’ll ", "we will ", "going to "),
    *("决定", "采用", "改用", "选用", "选择了", "确定", "就用"),
)
_TODO_NEEDLES = ("TODO", "FIXME", "待办", "待完成")  # _TODO_LINE is case-sensitive
_CHECKBOX_NEEDLES = ("[ ]", "[x]", "[X]")
_NEXT_STEP_NEEDLES = (
    *("next step", "next i", "next, i", "still need", "remaining", "not yet", "left to do", "follow"),
    *("下一步", "还需要", "尚未", "待完成"),
)
_RULE_NEEDLES = (
    *("must", "never", "always", "don't", "don’t", "do not", "dont", "shouldn", "should not", "avoid"),
    *("make sure", "ensure", "under no circumstances", "not allowed", "forbidden", "prohibited"),
    *(
        "必须",
        "不要",
        "不许",
        "不准",
        "不得",
        "别再",
        "禁止",
        "严禁",
        "切勿",
        "务必",
        "一定要",
        "永远",
        "总是",
    ),
    *("始终", "确保", "只能", "只允许"),
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=[。！？；])")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_SPACES = re.compile(r"\s+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_XML_BLOCK = re.compile(
    r"<(read-files|modified-files|workspace-critical-rules)>.*?</\1>|\[Compaction summary truncated[^\]]*\]",
    re.DOTALL,
)
# How a previous summary's own headings (ours, pi's default ones, a model's inventions) map onto ours.
_DROPPED_SECTION = re.compile(
    r"tool failures?|\bfiles\b|recent turns|summarized turns|turn context|critical rules|current state"
)
_TODO_SECTION = re.compile(
    r"\btodos?\b|next steps?|in progress|\bblocked\b|open questions?|current task|remaining"
)
_RULE_SECTION = re.compile(r"constraints?|\brules?\b|preferences?")
_ASK_SECTION = re.compile(r"\bpending\b|\basks?\b|\bgoals?\b|\brequests?\b")
_PLACEHOLDER_LINES = frozenset(
    {"none", "none.", "none captured", "none captured.", "no prior history.", "n/a"}
)


@datarecord(frozen=True, slots=True)
class Failure:
    """One failed tool call or user command, as the digest lists it."""

    tool: str
    exit_code: int | None
    text: str
    command: str | None = None

    def line(self) -> str:
        what = f"{self.tool} `{self.command}`" if self.command else self.tool
        code = f" (exit {self.exit_code})" if self.exit_code is not None else " (error)"
        return f"- {what}{code}: {self.text}" if self.text else f"- {what}{code}"


# --- text helpers -----------------------------------------------------------------------------------------
def _prose_lines(text: str) -> list[str]:
    """Lines outside fenced code blocks, bullets stripped: code is not where decisions or rules are stated."""
    lines: list[str] = []
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence and line.strip():
            lines.append(_BULLET.sub("", line).strip().lstrip("#").strip())
    return [line for line in lines if line]


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in _prose_lines(text):
        out.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return out


def _long_enough(sentence: str) -> bool:
    """At least :data:`MIN_STATEMENT_CHARS`, a CJK character counting three (they carry a word each)."""
    return len(sentence) + 2 * len(_CJK.findall(sentence)) >= MIN_STATEMENT_CHARS


def _item_key(item: str) -> str:
    """Items compare equal whatever their case, spacing, leading bullet or final full stop."""
    return _SPACES.sub(" ", _BULLET.sub("", item)).strip().rstrip(".!。！").lower()


def _dedupe(items: Iterable[str]) -> list[str]:
    """First occurrence wins (see ``_item_key``)."""
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = _item_key(item)
        if key and key not in seen:
            seen.add(key)
            out.append(item)
    return out


TextOf = Callable[[Message], str]


def _text(message: Message) -> str:
    return redact_secrets(text_of(message))


# --- extraction -------------------------------------------------------------------------------------------
def message_decisions(message: Message, read: TextOf = _text) -> list[str]:
    """The decisions an assistant message states, as items (none for any other role)."""
    items: list[str] = []
    if role_of(message) != "assistant":
        return items
    text = read(message)
    if not holds_any(folded(text), _DECISION_NEEDLES):  # no sentence of it can state a decision
        return items
    for sentence in _sentences(text):
        # "Now let's build:" announces a tool call, and a question decides nothing.
        if (
            not sentence.endswith(("?", ":", "？", "："))
            and holds_any(folded(sentence), _DECISION_NEEDLES)
            and _long_enough(sentence)
            and _DECISION.search(sentence)
        ):
            items.append("- " + collapse(sentence, ITEM_MAX_CHARS))
    return items


def _decisions(
    messages: Sequence[Message], read: TextOf = _text, derived: Lookup = nothing_derived
) -> list[str]:
    items: list[str] = []
    for message in messages:
        got = derived(message)
        items.extend(message_decisions(message, read) if got is None else got.decisions)
    return _dedupe(items)


# A message's effect on the open to-dos, in order: an item set, dropped (checked off) or added if not there.
TodoOp = tuple[str, str, str]
_SET, _DROP, _ADD = "=", "-", "?"


def message_todos(message: Message, read: TextOf = _text) -> list[TodoOp]:
    """What a user's or the agent's message does to the open to-dos (see ``_todos``), as (op, key, item)."""
    ops: list[TodoOp] = []
    role = role_of(message)
    if role not in ("user", "assistant"):
        return ops
    # Which patterns can match anywhere in the text (gates): a text none of them can match adds nothing,
    # and a pattern that cannot is not tried on its lines. A list header needs a next-step phrase, so
    # without one none of the assistant's lines below is an item.
    text = read(message)
    boxes = holds_any(text, _CHECKBOX_NEEDLES)
    todo_lines = holds_any(text, _TODO_NEEDLES)
    next_steps = role == "assistant" and holds_any(folded(text), _NEXT_STEP_NEEDLES)
    if not (boxes or todo_lines or next_steps):
        return ops
    in_fence = False
    list_header = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        box = _CHECKBOX.match(line) if boxes and "[" in line else None
        if box:
            key = collapse(box.group("item"), ITEM_MAX_CHARS).lower()
            if box.group("mark") == " ":
                ops.append((_SET, key, "- [ ] " + collapse(box.group("item"), ITEM_MAX_CHARS)))
            else:
                ops.append((_DROP, key, ""))  # checked off later
            continue
        todo = _TODO_LINE.search(line) if todo_lines and holds_any(line, _TODO_NEEDLES) else None
        if todo:
            rest = todo.group("rest") or todo.group("cn") or ""
            ops.append((_ADD, rest.lower(), "- TODO: " + collapse(rest, ITEM_MAX_CHARS)))
            continue
        if not next_steps:  # a user's line, or no next-step phrase in the text (so no list header either)
            continue
        if list_header and _BULLET.match(line):
            item = "- " + collapse(_BULLET.sub("", line), ITEM_MAX_CHARS)
            ops.append((_ADD, item.lower(), item))
            continue
        list_header = False
        if not holds_any(folded(line), _NEXT_STEP_NEEDLES):  # neither a header nor a next-step sentence
            continue
        stripped = _BULLET.sub("", line).strip().strip("*#").strip()
        if _NEXT_STEP.search(stripped) and stripped.rstrip("*").endswith((":", "：")):
            list_header = True
            continue
        for sentence in _SENTENCE_END.split(stripped):
            if _NEXT_STEP.search(sentence) and len(sentence) >= 15 and not sentence.endswith((":", "：")):
                item = "- " + collapse(sentence, ITEM_MAX_CHARS)
                ops.append((_ADD, item.lower(), item))
    return ops


def _todos(messages: Sequence[Message], read: TextOf = _text, derived: Lookup = nothing_derived) -> list[str]:
    """Unchecked checkboxes (dropped when checked off later), TODO/FIXME lines, and the assistant's "next
    steps" — a sentence, or the list under a line such as "Remaining from the plan:"."""
    open_items: dict[str, str] = {}
    for message in messages:
        got = derived(message)
        for op, key, item in message_todos(message, read) if got is None else got.todos:
            if op == _SET:
                open_items[key] = item
            elif op == _DROP:
                open_items.pop(key, None)
            else:
                open_items.setdefault(key, item)
    return _dedupe(open_items.values())


def _is_ask(message: Message) -> bool:
    return role_of(message) == "user" and bool(text_of(message).strip())


@datarecord(frozen=True, slots=True)
class Ask:
    """One user ask and how its turn ended: ``status`` is None when a final reply answered it."""

    text: str
    status: str | None
    reply: Message | None  # the turn's last assistant message


def _outcome(reply: Message | None, read: TextOf) -> str | None:
    """Why a turn's last assistant message is not a final answer, or None when it is one."""
    if reply is None:
        return "no reply"
    stop = reply.get("stopReason")
    if stop == "error":
        error = reply.get("errorMessage")
        detail = collapse(redact_secrets(error), ERROR_TEXT_MAX_CHARS) if isinstance(error, str) else ""
        return f"the turn ended in an error: {detail}" if detail else "the turn ended in an error"
    if stop == "aborted":
        return "aborted"
    if stop == "length":
        return "the reply was cut off at its length limit"
    if stop == "toolUse" or tool_calls(reply) or not read(reply).strip():
        return "no final reply"
    return None


def _user_asks(messages: Sequence[Message], read: TextOf = _text) -> list[Ask]:
    """Every user ask, oldest first, with how its turn (up to the next ask) ended."""
    asks: list[Ask] = []
    current: str | None = None
    reply: Message | None = None
    for message in messages:
        if _is_ask(message):
            if current is not None:
                asks.append(Ask(current, _outcome(reply, read), reply))
            current, reply = read(message).strip(), None
        elif current is not None and role_of(message) == "assistant":
            reply = message
    if current is not None:
        asks.append(Ask(current, _outcome(reply, read), reply))
    return asks


def _question_back(asks: Sequence[Ask], read: TextOf = _text) -> list[str]:
    """A final reply to the latest ask that ends with a question: the agent is waiting for the user."""
    if not asks or asks[-1].status is not None or asks[-1].reply is None:
        return []
    sentences = _sentences(read(asks[-1].reply))
    if sentences and sentences[-1].endswith(("?", "？")):
        return [f"- Waiting for the user's answer to: {collapse(sentences[-1], ITEM_MAX_CHARS)}"]
    return []


def _rule_clauses(sentence: str) -> list[str]:
    """The rule clauses of one sentence: each runs from the boundary before its keyword (see ``_RULE_START``)
    to the next semicolon or the sentence's end; a keyword inside a clause already taken adds nothing."""
    starts: list[int] | None = None  # found at the first keyword: most sentences have none
    clauses: list[str] = []
    taken_to = 0
    for match in _RULE.finditer(sentence):
        if match.start() < taken_to:
            continue
        if starts is None:
            starts = [m.end() for m in _RULE_START.finditer(sentence)]
        begin = max([taken_to, *(b for b in starts if b <= match.start())])
        stop = _RULE_END.search(sentence, match.end())
        end = stop.start() if stop else len(sentence)
        clause = _RULE_FILLER.sub("", sentence[begin:end].strip())
        if clause:
            clauses.append(clause)
        taken_to = stop.end() if stop else len(sentence)
    return clauses


def message_rules(message: Message, read: TextOf = _text) -> list[str]:
    """A user message's rule clauses, as items (none for any other role)."""
    items: list[str] = []
    if role_of(message) != "user":
        return items
    text = read(message)
    if not holds_any(folded(text), _RULE_NEEDLES):  # no rule keyword: no clause
        return items
    for sentence in _sentences(text):
        if len(sentence) > 3 * ITEM_MAX_CHARS or sentence.endswith(("?", "？")):
            continue
        if not holds_any(folded(sentence), _RULE_NEEDLES):
            continue
        items.extend("- " + collapse(c, ITEM_MAX_CHARS) for c in _rule_clauses(sentence))
    return items


def _rules(messages: Sequence[Message], read: TextOf = _text, derived: Lookup = nothing_derived) -> list[str]:
    """The user's rule clauses, each once (whatever its case or spacing): a rule restated in every ask, as in
    "fix X and never touch prod", is one line, and the ask around it is not a rule."""
    items: list[str] = []
    for message in messages:
        got = derived(message)
        items.extend(message_rules(message, read) if got is None else got.rules)
    return _dedupe(items)


def _pending(asks: Sequence[Ask]) -> tuple[list[str], list[str]]:
    """(the earlier asks the agent did not answer, oldest first; the latest ask as verbatim quoted lines,
    labelled with whether it was answered)."""
    if not asks:
        return [], []
    earlier = _dedupe(
        f"- {collapse(a.text, EARLIER_ASK_MAX_CHARS)} ({a.status})" for a in asks[:-1] if a.status is not None
    )
    latest = asks[-1].text
    if len(latest) > LAST_ASK_MAX_CHARS:
        latest = f"{latest[:LAST_ASK_MAX_CHARS]}… [{len(latest) - LAST_ASK_MAX_CHARS} more characters]"
    # Quoted, so a line of the ask that looks like a heading can never pass for one of ours.
    quoted = [
        f"{LATEST_ASK_LABEL}; {asks[-1].status or ANSWERED}):",
        *("  > " + line if line.strip() else "  >" for line in latest.splitlines()),
    ]
    return earlier, quoted


def tool_failures(messages: Sequence[Message], read: TextOf = _text) -> list[Failure]:
    """Failed tool results and user ``!`` commands, oldest first, one per tool call.

    A result fails when it is flagged ``isError`` or reports a non-zero exit code in its text
    ("exit code 2", "Exit code: 1", "exited with code 127"); the exit code is taken from the text when given.
    """
    commands: dict[str, str] = {}
    seen: set[str] = set()
    failures: list[Failure] = []
    for message in messages:
        role = role_of(message)
        if role == "assistant":
            for call in tool_calls(message):
                args = call.get("arguments")
                command = args.get("command") if isinstance(args, dict) else None
                if isinstance(command, str):
                    # Redacted whole, before the cut: a cut secret is a fragment no pattern recognises.
                    commands[call["id"]] = collapse(
                        command_identifier(redact_secrets(command)), FAILURE_COMMAND_MAX_CHARS
                    )
        elif role == "toolResult":
            if not is_tool_failure(message):
                continue
            text = read(message)
            code = exit_code_of(message)
            call_id = tool_call_id(message)
            if call_id is not None:
                if call_id in seen:
                    continue
                seen.add(call_id)
            tool = message.get("toolName") if isinstance(message.get("toolName"), str) else "tool"
            command = commands.get(call_id) if call_id else None
            failures.append(Failure(str(tool), code, collapse(text, FAILURE_TEXT_MAX_CHARS), command))
        elif role == "bashExecution" and is_tool_failure(message):
            code = message.get("exitCode")
            if isinstance(code, int):
                command = message.get("command") if isinstance(message.get("command"), str) else ""
                output = message.get("output") if isinstance(message.get("output"), str) else ""
                failures.append(
                    Failure(
                        "user bash",
                        code,
                        collapse(redact_secrets(str(output)), FAILURE_TEXT_MAX_CHARS),
                        collapse(command_identifier(redact_secrets(str(command))), FAILURE_COMMAND_MAX_CHARS),
                    )
                )
    return failures


# --- previous summary -------------------------------------------------------------------------------------
def _section_for(heading: str) -> str | None:
    """Which of our headings a previous summary's section goes under; None drops it (recomputed or stale)."""
    if heading in REQUIRED_HEADINGS:
        return heading
    name = heading.lstrip("#").strip().lower()
    if _DROPPED_SECTION.search(name):
        return None
    if "identifier" in name:
        return EXACT_IDENTIFIERS
    if _TODO_SECTION.search(name):
        return OPEN_TODOS
    if _RULE_SECTION.search(name):
        return CONSTRAINTS
    if _ASK_SECTION.search(name):
        return PENDING_ASKS
    return DECISIONS


_LATEST_ASK_LINE = re.compile(r"^\s*- Latest ask \(verbatim(?:; (?P<status>[^)]*))?\):\s*$")


def _unquote_latest_ask(body: Sequence[str]) -> list[str]:
    """A previous digest's latest ask as one line, with how its turn ended; dropped when it was answered,
    since a pending list carries only what is still open."""
    out: list[str] = []
    lines = list(body)
    n = 0
    while n < len(lines):
        label = _LATEST_ASK_LINE.match(lines[n])
        if label is None:
            out.append(lines[n])
            n += 1
            continue
        n += 1
        quoted: list[str] = []
        while n < len(lines) and lines[n].lstrip().startswith(">"):
            quoted.append(lines[n].lstrip()[1:].strip())
            n += 1
        status = label.group("status")
        if status != ANSWERED and any(quoted):
            ask = collapse(" ".join(quoted), EARLIER_ASK_MAX_CHARS)
            out.append(f"- {ask} ({status})" if status else f"- {ask}")
    return out


def _carried(previous_summary: str | None) -> dict[str, list[str]]:
    """A previous summary's lines, as list items, grouped under our headings."""
    carried: dict[str, list[str]] = {h: [] for h in REQUIRED_HEADINGS}
    if not previous_summary or not previous_summary.strip():
        return carried
    cleaned = _XML_BLOCK.sub("", redact_secrets(previous_summary))
    preamble, sections = split_sections(cleaned)
    for heading, body in [(DECISIONS, preamble), *sections]:
        target = _section_for(heading)
        if target is None:
            continue
        if target == PENDING_ASKS:
            body = _unquote_latest_ask(body)
        for line in body:
            stripped = line.strip()
            if (
                not stripped
                or _FENCE.match(stripped)
                or stripped.lower() in _PLACEHOLDER_LINES
                or stripped.startswith(_PREFACE_START)
                or re.fullmatch(r"\|?[\s:|-]+\|?", stripped)  # table rule
            ):
                continue
            if target == EXACT_IDENTIFIERS:
                carried[target].append(stripped if stripped.startswith("- ") else "- " + stripped)
                continue
            box = _CHECKBOX.match(stripped)
            item = stripped if box else "- " + _BULLET.sub("", stripped).lstrip("#").strip()
            if item.strip("- ").lower() not in _PLACEHOLDER_LINES:
                carried[target].append(collapse(item, ITEM_MAX_CHARS))
    return {h: _dedupe(items) for h, items in carried.items()}


# --- fitting ----------------------------------------------------------------------------------------------
def _cost(lines: Iterable[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def _oldest(items: Sequence[str], budget: int) -> list[str]:
    picked: list[str] = []
    used = 0
    for item in items:
        if used + len(item) + 1 > budget:
            break
        picked.append(item)
        used += len(item) + 1
    return picked


def _fit(carried: Sequence[str], new: Sequence[str], budget: int) -> list[str]:
    """Carried lines first (they are older), then new ones; when both do not fit, the carried part keeps its
    head within :data:`CARRIED_SHARE` of the budget and the new part keeps its newest items. A new item
    already carried is not repeated."""
    known = {_item_key(item) for item in carried}
    new = [item for item in new if _item_key(item) not in known]
    if _cost(carried) + _cost(new) <= budget:
        return [*carried, *new]
    carried_budget = min(_cost(carried), max(int(budget * CARRIED_SHARE), budget - _cost(new)))
    kept_carried = _oldest(carried, carried_budget)
    return [*kept_carried, *newest_that_fit(new, budget - _cost(kept_carried))]


def _fit_asks(carried: Sequence[str], earlier: Sequence[str], budget: int) -> list[str]:
    """``_fit`` for unanswered asks, which are never dropped silently: those that do not fit are counted."""
    fitted = _fit(carried, earlier, budget)
    known = {_item_key(item) for item in carried}
    new = [item for item in earlier if _item_key(item) not in known]
    if all(item in fitted for item in new):
        return fitted
    fitted = _fit(carried, earlier, max(0, budget - 48))  # 48: room for the count line
    dropped = sum(1 for item in new if item not in fitted)
    return [f"- ...and {dropped} earlier unanswered asks", *fitted]


def _section(heading: str, lines: Sequence[str], empty: str = "- None.") -> list[str]:
    return [heading, *(lines or [empty])]


# --- the digest -------------------------------------------------------------------------------------------
def build_digest(
    messages: Sequence[Message],
    *,
    previous_summary: str | None = None,
    identifiers: Sequence[Identifier] | None = None,
    previous_details: dict[str, Any] | None = None,
    include_failures: bool = True,
    include_files: bool = True,
    texts: SpanText | None = None,
    derived: Lookup = nothing_derived,
) -> str:
    """The five headings filled from ``messages`` (and a previous summary), deterministic and capped.

    ``texts``: the job's redacted message texts, shared with the identifier extraction (redacted once);
    ``derived``: what preparing the messages took from them.

    ``identifiers`` is the ranked list the engine guarantees (computed here when None). The extra sections
    (tool failures, files) come after the five required ones; turn them off when the augmentation appends its
    own.
    """
    span = [m for m in messages if not is_runtime_context(m)]
    carried = _carried(previous_summary)
    read = texts if texts is not None else SpanText()
    decisions = _decisions(span, read, derived)
    if not span and not carried[DECISIONS]:
        decisions = ["- No prior history."]
    asks = _user_asks(span, read)
    todos = _dedupe([*_todos(span, read, derived), *_question_back(asks, read)])
    constraints = _rules(span, read, derived)
    earlier, latest = _pending(asks)

    # The identifiers are what peers lose most (design.md §7.8), so they are budgeted first: the ranked ones
    # get up to IDENTIFIERS_RESERVED_CHARS, and the other sections shrink in proportion to leave that room.
    ranked = (
        list(identifiers) if identifiers is not None else rank_identifiers(extract_identifiers(span, read))
    )
    id_lines = _dedupe([*(identifier_line(i.text) for i in ranked), *carried[EXACT_IDENTIFIERS]])
    reserve = min(_cost(identifier_line(i.text) for i in ranked), IDENTIFIERS_RESERVED_CHARS)
    room = DIGEST_MAX_CHARS - reserve - _STRUCTURE_CHARS
    scale = min(1.0, max(0.0, room / _SECTIONS_MAX_CHARS))

    def budget(cap: int) -> int:
        return int(cap * scale)

    blocks: list[list[str]] = []
    if span:
        blocks.append([PREFACE.format(count=len(span)), ""])
    blocks.append(_section(DECISIONS, _fit(carried[DECISIONS], decisions, budget(DECISIONS_MAX_CHARS))))
    blocks.append(_section(OPEN_TODOS, _fit(carried[OPEN_TODOS], todos, budget(TODOS_MAX_CHARS))))
    blocks.append(
        _section(CONSTRAINTS, _fit(carried[CONSTRAINTS], constraints, budget(CONSTRAINTS_MAX_CHARS)))
    )
    asks_budget = max(0, budget(ASKS_MAX_CHARS) - _cost(latest))  # the latest ask itself is never dropped
    blocks.append(_section(PENDING_ASKS, [*_fit_asks(carried[PENDING_ASKS], earlier, asks_budget), *latest]))

    extra: list[list[str]] = []
    if include_failures:
        failures = tool_failures(span, read)
        if failures:
            lines = [f.line() for f in failures[-MAX_FAILURES:]]
            if len(failures) > MAX_FAILURES:
                lines.insert(0, f"- ...and {len(failures) - MAX_FAILURES} earlier failures")
            extra.append([FAILURES_HEADING, *newest_that_fit(lines, budget(FAILURES_MAX_CHARS))])
    if include_files:
        ops = file_operations(span, previous_details)
        half = budget(FILES_MAX_CHARS) // 2
        file_lines = _file_lines("Modified", ops.modified, half) + _file_lines("Read", ops.read, half)
        if file_lines:
            extra.append([FILES_HEADING, *file_lines])

    fixed = sum(_cost(b) + 1 for b in (*blocks, *extra)) + len(EXACT_IDENTIFIERS) + 2
    id_budget = max(0, DIGEST_MAX_CHARS - fixed - 40)  # 40: room for the "...and N more" line
    kept = _oldest(id_lines, id_budget)
    if len(kept) < len(id_lines):
        kept.append(f"- ...and {len(id_lines) - len(kept)} more")
    blocks.append(_section(EXACT_IDENTIFIERS, kept, "- None captured."))

    text = "\n\n".join("\n".join(b).rstrip("\n") for b in (*blocks, *extra)) + "\n"
    return text if len(text) <= DIGEST_MAX_CHARS else _hard_cap(text)


def _file_lines(label: str, paths: Sequence[str], budget: int) -> list[str]:
    if not paths:
        return []
    shown: list[str] = []
    used = len(label) + 12
    for path in paths:
        if used + len(path) + 4 > budget:
            break
        shown.append(f"`{path}`")
        used += len(path) + 4
    more = f" ...and {len(paths) - len(shown)} more" if len(shown) < len(paths) else ""
    return [f"- {label} ({len(paths)}): {', '.join(shown)}{more}"]


def _hard_cap(text: str) -> str:
    """Last resort (the budgets should make it unreachable): cut whole lines from the end of the extra
    sections, never a required heading."""
    lines = text.splitlines()
    keep = {n for n, line in enumerate(lines) if line.strip() in REQUIRED_HEADINGS}
    while len("\n".join(lines)) + 1 > DIGEST_MAX_CHARS:
        victim = next((n for n in range(len(lines) - 1, -1, -1) if n not in keep), None)
        if victim is None:
            break
        del lines[victim]
        keep = {n - (1 if n > victim else 0) for n in keep}
    return "\n".join(lines) + "\n"
