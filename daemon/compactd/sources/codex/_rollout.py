"""A Codex rollout read as Codex reads it (design.md §6.16): pure functions over parsed lines, no IO.

A rollout line is ``{timestamp, [ordinal,] type, payload}``. Two readings matter to compactd:

- the *figures*, kept incrementally from appended lines (:class:`RolloutFigures`): the session's id, cwd and
  model, Codex's own context figure (the newest ``event_msg``/``token_count``'s ``last_token_usage.total_tokens``,
  which is ``TokenUsage::tokens_in_context_window``) and window (``model_context_window``), whether a turn is
  open (``task_started`` without its ``task_complete``/``turn_aborted``), and the next ordinal;
- the *history* Codex rebuilds on resume (:func:`history_of`): ``response_item`` payloads in order, the newest
  ``compacted`` item's ``replacement_history`` replacing everything before it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import field
from typing import Any

import orjson

from compactd.core.jsjson import stringify
from compactd.datarecord import datarecord

__all__ = ["CONTEXT_PREFIXES", "RolloutFigures", "history_of", "is_context_message", "parse_rollout_line"]

Json = dict[str, Any]

# User-role messages Codex writes for itself (environment, instructions, skills): re-injected on every resume
# after the replacement history, so they are neither summarized nor kept.
CONTEXT_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "<skills_instructions>",
    "<permissions instructions>",
    "<collaboration_mode>",
    "<turn_aborted>",
    "# AGENTS.md instructions",
)


def parse_rollout_line(raw: bytes) -> Json | None:
    """One line as a dict with a string ``type`` and a dict ``payload``, or None (blank, torn or foreign)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        return None
    if not isinstance(value.get("payload"), dict):
        return None
    return value


def _text_of(item: Json) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts)


def is_context_message(item: Json) -> bool:
    """A ``developer`` message, or a user message Codex wrote itself (its context, not the user's words)."""
    if item.get("type") != "message":
        return False
    role = item.get("role")
    if role in ("developer", "system"):
        return True
    return role == "user" and _text_of(item).lstrip().startswith(CONTEXT_PREFIXES)


@datarecord(slots=True)
class RolloutFigures:
    """What the follower keeps of a rollout: figures only, never the text."""

    session_id: str | None = None
    cwd: str | None = None
    model: str | None = None
    provider: str | None = None
    cli_version: str | None = None
    tokens: int | None = None  # Codex's own figure: the last request's total tokens
    window: int | None = None  # model_context_window from the same event
    estimated_after: int = 0  # tokens estimated for what came after a compaction with no usage since
    history_bytes: int = 0  # JSON bytes of the history Codex would rebuild now (replacement + later items)
    overhead: int = 0  # what Codex's last figure held beyond its history's estimate (instructions, tools)
    turn_open: str | None = None  # the id of a turn started and not ended
    next_ordinal: int = 0
    lines: int = 0
    compactions: int = 0  # compacted items seen (Codex's own and compactd's)
    unwritable: int = 0  # items nested past what orjson writes (it reads deeper): measured by ``stringify``
    problems: list[str] = field(default_factory=list)

    @property
    def figure(self) -> int | None:
        """The context figure compactd decides on: Codex's own; after a compaction, until Codex reports usage
        again, the estimate of the history it rebuilds (⌈JSON bytes / 4⌉) plus the overhead its last figure
        showed beyond the history's estimate (its instructions and tools, which the rollout does not hold)."""
        if self.tokens is None:
            return self.overhead + self.estimated_after if self.estimated_after else None
        return self.tokens

    def apply(self, line: Json) -> None:
        """Take one parsed line into account."""
        self.lines += 1
        ordinal = line.get("ordinal")
        if isinstance(ordinal, int) and not isinstance(ordinal, bool):
            self.next_ordinal = max(self.next_ordinal, ordinal + 1)
        kind, payload = line["type"], line["payload"]
        if kind == "session_meta":
            self._meta(payload)
        elif kind == "turn_context":
            if isinstance(payload.get("model"), str):
                self.model = payload["model"]
        elif kind == "event_msg":
            self._event(payload)
        elif kind == "compacted":
            self.compactions += 1
            replacement = payload.get("replacement_history")
            items = replacement if isinstance(replacement, list) else []
            message = payload.get("message")
            self.tokens = None
            self.history_bytes = sum(self._json_size(i) for i in items if isinstance(i, dict))
            if not items and isinstance(message, str):
                self.history_bytes = len(message.encode())
            self.estimated_after = math.ceil(self.history_bytes / 4)
        elif kind == "response_item":
            size = self._json_size(payload)
            self.history_bytes += size
            if self.tokens is None and self.estimated_after:
                self.estimated_after = math.ceil(self.history_bytes / 4)

    def _json_size(self, value: Any) -> int:
        """The bytes of ``value``'s compact JSON. orjson reads 1,024 levels of nesting but writes only 254: past
        that, the exact ``stringify`` (its numbers are JavaScript's, a few bytes off; only such items pay)."""
        try:
            return len(orjson.dumps(value))
        except TypeError:
            self.unwritable += 1
            return len(stringify(value, js_key_order=False).encode("utf-8", "surrogatepass"))

    def _meta(self, payload: Json) -> None:
        for key in ("id", "session_id"):
            if isinstance(payload.get(key), str) and self.session_id is None:
                self.session_id = payload[key]
        if isinstance(payload.get("cwd"), str):
            self.cwd = payload["cwd"]
        if isinstance(payload.get("model_provider"), str):
            self.provider = payload["model_provider"]
        if isinstance(payload.get("cli_version"), str):
            self.cli_version = payload["cli_version"]

    def _event(self, payload: Json) -> None:
        kind = payload.get("type")
        if kind == "token_count":
            info = payload.get("info")
            last = info.get("last_token_usage") if isinstance(info, dict) else None
            total = last.get("total_tokens") if isinstance(last, dict) else None
            if isinstance(total, int) and not isinstance(total, bool) and total > 0:
                self.tokens, self.estimated_after = total, 0
                self.overhead = max(0, total - math.ceil(self.history_bytes / 4))
            window = info.get("model_context_window") if isinstance(info, dict) else None
            if isinstance(window, int) and not isinstance(window, bool) and window > 0:
                self.window = window
        elif kind == "task_started":
            turn = payload.get("turn_id")
            self.turn_open = turn if isinstance(turn, str) else "?"
            window = payload.get("model_context_window")
            if isinstance(window, int) and not isinstance(window, bool) and window > 0:
                self.window = window
        elif kind in ("task_complete", "turn_aborted"):
            self.turn_open = None


def history_of(lines: Sequence[Json]) -> tuple[list[Json], str | None]:
    """The history Codex rebuilds from these lines on resume (``rollout_reconstruction.rs``): response items
    in order, the newest ``compacted.replacement_history`` standing for everything before it. The second value
    says why compactd must not compact from this reading (a rollback it does not replay), else None."""
    history: list[Json] = []
    for line in lines:
        kind, payload = line["type"], line["payload"]
        if kind == "response_item":
            history.append(payload)
        elif kind == "compacted":
            replacement = payload.get("replacement_history")
            if isinstance(replacement, list):
                history = [i for i in replacement if isinstance(i, dict)]
            else:
                return history, "a compacted item without replacement_history (a legacy rollout)"
        elif kind == "event_msg" and payload.get("type") == "thread_rolled_back":
            return history, "the rollout holds a thread rollback"
    return history, None
