"""What is appended after the model's summary (design.md §6.8), as pure functions.

The suffix carries what a summary most often loses and an agent most needs to go on: the last summarized turns
(clipped; the kept turns themselves follow the summary whole), the tool calls that failed (so they are not
blindly retried), and the files touched. Under the size cap the suffix wins over the body, because the body is
the part a model wrote and the suffix is the part that is exact.

OpenClaw also copies AGENTS.md's critical rules here (step 13) and then injects them again as its
post-compaction refresh. compactd writes them once, in the post-compaction message (:mod:`compactd.agents_md`):
pi and OpenClaw both build that ``custom_message`` into the context right beside the summary, so a second copy
would only cost the agent tokens.

Being exact, it copies transcript text as it is: the caller passes messages already redacted (the engine does,
before anything reads them), since a secret cut by a cap here would be a fragment no pattern recognises.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from compactd.core.messages import Message, blocks_of, role_of, text_of, tool_call_id, tool_calls
from compactd.defaults import KEEP_RECENT_TURNS, SUMMARY_MAX_CHARS
from compactd.summarize.gates import folded

__all__ = [
    "FILE_LIST_MAX_CHARS",
    "FILE_SECTION_MAX_CHARS",
    "RECENT_TURNS_HEADING",
    "RECENT_TURN_MAX_CHARS",
    "SPLIT_TURN_LABEL",
    "TOOL_FAILURES_HEADING",
    "TOOL_FAILURE_MAX_CHARS",
    "TOOL_FAILURE_MAX_ITEMS",
    "TRUNCATION_MARKER",
    "build_suffix",
    "cap_summary",
    "collect_tool_failures",
    "exit_code_of",
    "is_tool_failure",
    "redacted_failures",
    "render_file_lists",
    "render_tool_failures",
    "render_turn",
    "select_recent_turns",
]

# Caps from OpenClaw's compaction safeguard (design.md §6.8): enough to recognise a turn or an error, small enough
# that the suffix stays a fraction of the 16,000-character summary budget.
RECENT_TURN_MAX_CHARS = 600
TOOL_FAILURE_MAX_ITEMS = 8
TOOL_FAILURE_MAX_CHARS = 240
FILE_SECTION_MAX_CHARS = 2_000
FILE_LIST_MAX_CHARS = 900

SPLIT_TURN_LABEL = "**Turn Context (split turn):**"
# OpenClaw's "## Recent turns preserved verbatim" renders turns it removes from the context; ours are the last
# turns of the summarized span (the kept ones stay whole in the context), each clipped, and named so.
RECENT_TURNS_HEADING = "## Last summarized turns (clipped)"
TOOL_FAILURES_HEADING = "## Tool Failures"
TRUNCATION_MARKER = "\n\n[Compaction summary truncated to fit budget]"
ELLIPSIS = "…"

_SPACE = re.compile(r"\s+")
# "Command exited with code 1" (pi's bash), "exit code: 2", "exit status 127", "Process exited with code 3".
_EXIT_CODE = re.compile(r"\bexit(?:ed)?(?:\s+with)?[\s_-]*(?:code|status)\b\s*[:=]?\s*(-?\d+)", re.IGNORECASE)
# What every match of _EXIT_CODE holds ("xit" in any case; with IGNORECASE an "i" also matches "ı" and "İ"),
# found by a fast scan where the case-insensitive pattern, which starts with a word boundary, is tried at
# every position of every tool result. ``_may_hold_exit`` is the same test as a substring test of the folded
# text (``gates.folded``), which runs in C over a whole text instead of sre's character-class scan.
_EXIT_HINT = re.compile("[xX][iIıİ][tT]")
_EXIT_NEEDLE = "xit"
# ``details`` never reach a model, and the summary reaches the next one: of them only the exit code and one of
# these status words are shown, never a tool's own details text.
_FAILED_STATUSES = frozenset({"error", "failed", "failure", "timeout", "timed_out", "killed", "cancelled"})


def _collapse(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(ELLIPSIS)].rstrip() + ELLIPSIS


# --- recent turns -------------------------------------------------------------------------------------------
def select_recent_turns(messages: Sequence[Message], turns: int = KEEP_RECENT_TURNS) -> list[Message]:
    """The last turns of ``messages`` (design.md §6.8): user/assistant messages from the ``turns``-th last
    user message on; with fewer user messages, every user message plus the newest 2×``turns`` user/assistant
    messages; plus the tool results that answer a kept assistant's calls. Original order."""
    if turns <= 0:
        return []
    conversation = [i for i, m in enumerate(messages) if role_of(m) in ("user", "assistant")]
    users = [i for i in conversation if role_of(messages[i]) == "user"]
    if len(users) >= turns:
        start = users[-turns]
        kept = {i for i in conversation if i >= start}
    else:
        kept = set(users) | set(conversation[-2 * turns :])
    call_ids = {c["id"] for i in kept for c in tool_calls(messages[i])}
    for i, message in enumerate(messages):
        if role_of(message) == "toolResult" and tool_call_id(message) in call_ids:
            kept.add(i)
    return [messages[i] for i in sorted(kept)]


def _non_text_note(message: Message) -> str:
    counts: Counter[str] = Counter()
    for block in blocks_of(message):
        kind = block.get("type")
        if isinstance(kind, str) and kind not in ("text", "thinking", "toolCall", "toolUse", "functionCall"):
            counts[kind] += 1
    if not counts:
        return ""
    return "[non-text content: " + ", ".join(f"{k} x{n}" for k, n in counts.items()) + "]"


def render_turn(message: Message) -> str | None:
    """One ``- User:`` / ``- Assistant:`` / ``- Tool result (name):`` line, or None for nothing to show."""
    role = role_of(message)
    if role == "user":
        label = "User"
    elif role == "assistant":
        label = "Assistant"
    elif role == "toolResult":
        name = message.get("toolName")
        label = f"Tool result ({name if isinstance(name, str) and name else 'tool'})"
    elif role == "bashExecution":
        label = "User ran"
    else:
        return None
    parts = [_collapse(text_of(message))]
    names = [str(c.get("name") or "tool") for c in tool_calls(message)]
    if names:
        parts.append("[tool calls: " + ", ".join(names) + "]")
    parts.append(_non_text_note(message))
    body = " ".join(p for p in parts if p)
    if not body:
        return None
    return f"- {label}: {_cap(body, RECENT_TURN_MAX_CHARS)}"


def render_recent_turns(recent_turns: Sequence[Message]) -> str:
    lines = [line for line in map(render_turn, recent_turns) if line]
    return "\n".join([RECENT_TURNS_HEADING, *lines]) if lines else ""


# --- tool failures ------------------------------------------------------------------------------------------
def _details(message: Message) -> dict[str, Any]:
    details = message.get("details")
    return details if isinstance(details, dict) else {}


def exit_code_of(message: Message) -> int | None:
    """Exit code from ``details.exitCode`` (OpenClaw's exec), ``exitCode`` (bash messages), else the text."""
    for value in (_details(message).get("exitCode"), message.get("exitCode")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    text = text_of(message)
    if _EXIT_NEEDLE not in folded(text):  # no "exit" in any case: the full pattern cannot match
        return None
    matches = _EXIT_CODE.findall(text)
    return int(matches[-1]) if matches else None


def status_of(message: Message) -> str | None:
    status = _details(message).get("status")
    return status if isinstance(status, str) and status.strip() else None


def is_tool_failure(message: Message) -> bool:
    """The one test of a failed call, for the augmentation and the digest alike: a tool result flagged
    ``isError``, or whose details report a failing status, or whose exit code (details, else its text: "exit
    code 2", "Command exited with code 1") is non-zero; or a user ``!`` command (``bashExecution``, not
    excluded from the context) that exited non-zero."""
    role = role_of(message)
    if role == "bashExecution":
        code = message.get("exitCode")
        failed = isinstance(code, int) and not isinstance(code, bool) and code != 0
        return failed and not message.get("excludeFromContext")
    if role != "toolResult":
        return False
    if message.get("isError") is True:
        return True
    status = status_of(message)
    if status is not None and status.strip().lower() in _FAILED_STATUSES:
        return True
    code = exit_code_of(message)
    return code is not None and code != 0


def first_per_call(messages: Iterable[Message]) -> list[Message]:
    """``messages`` in order, keeping the first of each ``toolCallId`` (one failure per call, OpenClaw's dedup)."""
    kept: list[Message] = []
    seen: set[str] = set()
    for message in messages:
        call_id = tool_call_id(message)
        if call_id is not None:
            if call_id in seen:
                continue
            seen.add(call_id)
        kept.append(message)
    return kept


def collect_tool_failures(
    messages: Sequence[Message], failed_as_read: Callable[[Message], bool | None] | None = None
) -> list[Message]:
    """Failed tool results in order, the first per ``toolCallId``. Pass the messages *with* their
    ``details``: status and exit code live there. Tool results only (design.md §6.8): a user's own command
    is not a tool call the agent might retry.

    ``failed_as_read``: ``is_tool_failure`` of a message without its details, when known (a prepared message's,
    whose text was read once): it is the message's own answer unless its details hold a status or an exit
    code."""
    return first_per_call(m for m in messages if role_of(m) == "toolResult" and _failed(m, failed_as_read))


def _failed(message: Message, failed_as_read: Callable[[Message], bool | None] | None) -> bool:
    if failed_as_read is not None and not _decided_by_details(message):
        known = failed_as_read(message)
        if known is not None:
            return bool(known)
    return is_tool_failure(message)


def _decided_by_details(message: Message) -> bool:
    """Whether a tool result's details hold what ``is_tool_failure`` reads there: a status, or an exit code."""
    details = _details(message)
    status, code = details.get("status"), details.get("exitCode")
    return (isinstance(status, str) and bool(status.strip())) or (
        isinstance(code, int) and not isinstance(code, bool)
    )


def redacted_failures(failures: Sequence[Message], redact: Callable[[Any], Any]) -> list[Message]:
    """``failures`` (one per call) as ``render_tool_failures`` reads them, redacted: those it lists in full; of
    the rest, which it only counts, their role and call id (link keys, which redaction never rewrites). A span's
    failures can be many and large (details and all), and only the first few are shown."""
    return [
        redact(m) if i < TOOL_FAILURE_MAX_ITEMS else {k: m[k] for k in _COUNTED_KEYS if k in m}
        for i, m in enumerate(failures)
    ]


_COUNTED_KEYS = ("role", "toolCallId", "toolUseId")


def render_tool_failure(message: Message) -> str:
    name = message.get("toolName")
    tool = name if isinstance(name, str) and name else "tool"
    meta = []
    status = status_of(message)
    if status is not None and status.strip().lower() in _FAILED_STATUSES:
        meta.append(f"status={status.strip().lower()}")
    code = exit_code_of(message)
    if code is not None:
        meta.append(f"exitCode={code}")
    text = _collapse(text_of(message)) or "failed (no output)"
    head = f"- {tool} ({' '.join(meta)})" if meta else f"- {tool}"
    return f"{head}: {_cap(text, TOOL_FAILURE_MAX_CHARS)}"


def render_tool_failures(tool_failures: Sequence[Message]) -> str:
    unique = first_per_call(tool_failures)
    if not unique:
        return ""
    lines = [TOOL_FAILURES_HEADING, *(render_tool_failure(m) for m in unique[:TOOL_FAILURE_MAX_ITEMS])]
    if len(unique) > TOOL_FAILURE_MAX_ITEMS:
        lines.append(f"- ...and {len(unique) - TOOL_FAILURE_MAX_ITEMS} more")
    return "\n".join(lines)


# --- file lists ---------------------------------------------------------------------------------------------
def _file_list(paths: Sequence[str], limit: int = FILE_LIST_MAX_CHARS) -> str:
    """Newline-separated paths within ``limit`` characters, the rest counted as "...and N more"."""
    kept: list[str] = []
    used = 0
    for index, path in enumerate(paths):
        rest = len(paths) - index - 1
        cost = len(path) + (1 if kept else 0)
        marker = len(f"\n...and {rest} more") if rest else 0
        if used + cost + marker > limit:
            break
        kept.append(path)
        used += cost
    dropped = len(paths) - len(kept)
    if dropped:
        kept.append(f"...and {dropped} more")
    return "\n".join(kept)


def render_file_lists(read_files: Sequence[str], modified_files: Sequence[str]) -> str:
    """pi's ``<read-files>`` / ``<modified-files>`` blocks: read excludes modified, both sorted and unique."""
    modified = sorted({p for p in modified_files if p})
    read = sorted({p for p in read_files if p} - set(modified))
    blocks = []
    if read:
        blocks.append(f"<read-files>\n{_file_list(read)}\n</read-files>")
    if modified:
        blocks.append(f"<modified-files>\n{_file_list(modified)}\n</modified-files>")
    section = "\n\n".join(blocks)
    # Two lists of at most 900 characters plus their tags always fit; the cap is kept as a guarantee.
    return section[:FILE_SECTION_MAX_CHARS]


# --- assembly -----------------------------------------------------------------------------------------------
def build_suffix(
    *,
    recent_turns: Sequence[Message],
    tool_failures: Sequence[Message],
    read_files: Sequence[str],
    modified_files: Sequence[str],
    split_turn_summary: str | None = None,
) -> str:
    """Everything appended after the body, in spec order (without the critical rules: see the module
    docstring); empty parts left out."""
    parts: list[str] = []
    if split_turn_summary and split_turn_summary.strip():
        parts.append(f"---\n\n{SPLIT_TURN_LABEL}\n\n{split_turn_summary.strip()}")
    parts.append(render_recent_turns(recent_turns))
    parts.append(render_tool_failures(tool_failures))
    parts.append(render_file_lists(read_files, modified_files))
    return "".join("\n\n" + p for p in parts if p)


def cap_summary(body: str, suffix: str, max_chars: int = SUMMARY_MAX_CHARS) -> str:
    """Body + suffix within ``max_chars``: the suffix is kept whole and the body cut with a marker; a suffix
    that alone reaches the cap keeps its last ``max_chars`` characters."""
    if len(body) + len(suffix) <= max_chars:
        return body + suffix
    if len(suffix) >= max_chars:
        return suffix[-max_chars:]
    keep = max(0, max_chars - len(suffix) - len(TRUNCATION_MARKER))
    return (body[:keep] + TRUNCATION_MARKER + suffix)[-max_chars:]
