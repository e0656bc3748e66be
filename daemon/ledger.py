"""A session's running token figures, updated from appended entries only.

The ledger never holds transcript text: it keeps the leaf, the usage anchor, the trailing estimate and a few
counters, so per-session memory stays small however long the transcript grows. An entry that does not simply
extend the current leaf (a branch switch, a compaction, a re-flushed header) cannot be folded in from counters,
so ``apply`` says so and the caller reloads the file; that is rare and keeps the fast path exact.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from daemon.prune import tool_result_text_chars
from daemon.tokens import ContextEstimate, estimate_tokens, usage_tokens
from daemon.transcript.context import SessionContext, build_context, entry_to_message
from daemon.transcript.messages import is_runtime_context, role_of, strip_for_llm
from daemon.transcript.reader import Entry, Transcript

_CONTEXT_TYPES = frozenset({"message", "custom_message", "branch_summary"})


@dataclass(slots=True)
class SessionLedger:
    session_id: str | None = None
    version: int = 3
    leaf_id: str | None = None
    anchor_tokens: int = 0
    anchor_seen: bool = False
    trailing_tokens: int = 0
    messages: int = 0
    tool_result_chars: int = 0
    by_role: dict[str, int] = field(default_factory=dict)
    provider: str | None = None
    model: str | None = None
    entries: int = 0
    compaction_ts: float | None = None
    anchor_ts: float | None = None
    problems: int = 0
    usable: bool = True

    @classmethod
    def from_transcript(cls, transcript: Transcript) -> SessionLedger:
        ledger = cls(
            session_id=transcript.session_id,
            version=transcript.version,
            entries=len(transcript.entries),
            problems=len(transcript.problems),
            usable=transcript.usable,
        )
        context = build_context(transcript)
        ledger._fold_context(context)
        ledger.leaf_id = transcript.leaf_id
        return ledger

    def _fold_context(self, context: SessionContext) -> None:
        model = context.model or {}
        self.provider = _str_or_none(model.get("provider"))
        self.model = _str_or_none(model.get("modelId"))
        for message in context.messages:
            self._fold_message(message)

    def _fold_message(self, message: dict[str, Any]) -> None:
        if is_runtime_context(message):
            return
        message = strip_for_llm(message)
        tokens = estimate_tokens(message)
        role = role_of(message)
        if role == "compactionSummary":
            self.compaction_ts = _num_or_none(message.get("timestamp"))
        self.messages += 1
        self.by_role[role] = self.by_role.get(role, 0) + tokens
        if role == "toolResult":
            self.tool_result_chars += tool_result_text_chars(message)
        anchor = usage_tokens(message)
        if anchor is not None:
            self.anchor_tokens, self.anchor_seen, self.trailing_tokens = anchor, True, 0
            self.anchor_ts = _num_or_none(message.get("timestamp"))
        else:
            self.trailing_tokens += tokens

    def apply(self, entries: Iterable[Entry]) -> bool:
        """Fold appended entries in; False when one of them needs a full reload instead."""
        if not self.usable:
            return False
        for entry in entries:
            entry_id = entry.get("id")
            kind = entry.get("type")
            if kind == "session" or not isinstance(entry_id, str) or self.version < 3:
                return False
            if entry.get("parentId") != self.leaf_id or kind == "compaction":
                return False
            if self.leaf_id is None and self.entries:
                return False  # the leaf had no usable id: where this entry attaches needs the whole file
            self.entries += 1
            self.leaf_id = entry_id
            if kind == "model_change":
                self.provider = _str_or_none(entry.get("provider"))
                self.model = _str_or_none(entry.get("modelId"))
            if kind in _CONTEXT_TYPES:
                message = entry_to_message(entry)
                if message is None:
                    continue
                if role_of(message) == "assistant":
                    self.provider = _str_or_none(message.get("provider"))
                    self.model = _str_or_none(message.get("model"))
                self._fold_message(message)
        return True

    @property
    def estimate(self) -> ContextEstimate:
        if self.anchor_seen:
            return ContextEstimate(
                self.anchor_tokens + self.trailing_tokens, self.anchor_tokens, self.trailing_tokens, 0
            )
        return ContextEstimate(self.trailing_tokens, 0, self.trailing_tokens, None)

    @property
    def tokens(self) -> int:
        return self.estimate.tokens

    @property
    def planning_tokens(self) -> int:
        """The figure thresholds are compared with: a usage anchor older than the compaction summary is stale
        (it measured the context before compaction), so everything is estimated instead; see
        ``tokens.estimate_for_planning``."""
        stale = self.compaction_ts is not None and (
            self.anchor_ts is None or self.anchor_ts <= self.compaction_ts
        )
        if self.anchor_seen and stale:
            return sum(self.by_role.values())
        return self.tokens

    def figures(self) -> dict[str, Any]:
        """The comparable state: two ledgers of the same bytes have equal figures."""
        return {
            "session_id": self.session_id,
            "leaf_id": self.leaf_id,
            "tokens": self.tokens,
            "usage_tokens": self.anchor_tokens if self.anchor_seen else 0,
            "trailing_tokens": self.trailing_tokens,
            "tokens_source": "usage" if self.anchor_seen else "estimate",
            "planning_tokens": self.planning_tokens,
            "messages": self.messages,
            "by_role": dict(sorted(self.by_role.items())),
            "tool_result_chars": self.tool_result_chars,
            "provider": self.provider,
            "model": self.model,
            "entries": self.entries,
        }


def _num_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
