"""A session's running token figures, updated from appended entries only.

The ledger never holds transcript text: it keeps the leaf, the usage anchor, the trailing estimate and a few
counters, so per-session memory stays small however long the transcript grows. An entry that does not simply
extend the current leaf (a branch switch, a compaction, a re-flushed header) cannot be folded in from counters,
so ``apply`` says so and the caller reloads the file; that is rare and keeps the fast path exact.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from compactd.core.collector import collector_paused
from compactd.core.context import (
    UNDEFINED,
    SessionContext,
    build_context,
    compaction_message,
    context_estimate,
    entry_to_message,
    is_pi1_marker,
    js_same,
)
from compactd.core.jsjson import nesting
from compactd.core.messages import PI_0_73, PI_1, RUNTIME_CONTEXT_TYPE, is_runtime_context, role_of
from compactd.core.prune import reducible_chars
from compactd.core.reader import (
    BLOCKING_KINDS,
    FATAL_KINDS,
    MAX_DEPTH,
    Entry,
    Scan,
    Transcript,
    link_key,
    parse_line,
    parse_transcript,
)
from compactd.core.tokens import IMAGE_CHARS, ContextEstimate, estimate_tokens, js_len, usage_tokens
from compactd.core.turns import Turn, turn_of_branch
from compactd.core.turns import step as turn_step
from compactd.datarecord import datarecord
from compactd.defaults import CHARS_PER_TOKEN

__all__ = ["CapFor", "SessionLedger", "message_tokens", "tool_result_chars"]

log = logging.getLogger(__name__)

_CONTEXT_TYPES = ("message", "custom_message", "branch_summary")
# Bumped whenever the ledger's fields or what they mean change: a snapshot of another version is not trusted.
LEDGER_SNAPSHOT_VERSION = 3
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

# The per-result cap (``budget.tool_result_max_chars``) to count a ledger's reducible characters at, or None
# (not worth counting): it depends on the config, which the ledger does not know (``planning.route_cap``).
CapFor = Callable[["SessionLedger"], int | None]


@datarecord(slots=True)
class SessionLedger:
    """leaf, usage anchor, trailing estimate, model: the figures thresholds need, and nothing per entry.

    Messages before the usage anchor are not estimated at all (pi's figure does not need them), except when
    the anchor predates the context's compaction summary: then everything is estimated (``stale_total``).
    """

    session_id: str | None = None
    version: int = 3
    leaf_id: str | None = None
    anchor_tokens: int = 0
    anchor_seen: bool = False
    anchor_ts: float | None = None
    trailing_tokens: int = 0
    compaction_ts: float | None = None
    stale_total: int | None = None  # every message's estimate, kept only while the anchor is stale
    provider: str | None = None
    model: str | None = None
    entries: int = 0
    usable: bool = True
    # The last line parses only because pi trims the file's end: an append changes how pi reads it.
    reload_on_append: bool = False
    turn: Turn | None = None  # the branch ends mid-turn (see compactd.core.turns); folded like the figures
    # (cap, prune.reducible_chars of the context's tool results at that cap): the route's figure, so a due
    # session's route needs no second read. None: not known (no cap given, a reading a compaction may not be
    # built from, or a tool result appended since: its cut depends on text the ledger does not keep).
    reducible: tuple[int, int] | None = None
    # Whose rules the figures follow (``context.rules_of``): pi 1.x's projected estimate or pi 0.73's.
    rules: str = PI_0_73

    @classmethod
    def from_bytes(
        cls, data: bytes, path: str | None = None, *, cap_for: CapFor | None = None
    ) -> SessionLedger:
        """The cold read: a whole file's complete lines → its ledger, equal to ``from_transcript``'s.

        It keeps a few fields per entry instead of every parsed entry, and estimates only the messages the
        figure needs (those after the usage anchor), re-reading just their lines; see ``_cold_read``. Should
        it ever fail, the exact reader (``parse_transcript``) gives the ledger instead.
        """
        with collector_paused():  # the few small records kept are acyclic; see parse_transcript
            try:
                return _cold_read(data, cap_for)
            except Exception as exc:  # the fast path must never cost a session its figures
                log.warning("cold read failed, reading exactly instead path=%s reason=%r", path, exc)
                return cls.from_transcript(parse_transcript(data), cap_for=cap_for)

    @classmethod
    def from_transcript(
        cls, transcript: Transcript, *, cap_for: CapFor | None = None, context: SessionContext | None = None
    ) -> SessionLedger:
        """The ledger of a parsed transcript; pass ``cap_for`` only for one parsed with its checks (a
        ``check=False`` reading cannot say whether a compaction may be built from it: no ``reducible``).
        ``context``: ``build_context(transcript)`` when the caller has it already (``inspect``)."""
        ledger = cls(
            session_id=transcript.session_id,
            version=transcript.version,
            entries=transcript.count,
            usable=transcript.usable,
            leaf_id=transcript.leaf_id,
            reload_on_append=transcript.has_problem("trailing_whitespace"),  # (no nesting check)
        )
        ledger.turn = turn_of_branch(reversed(transcript.branch()))
        context = context if context is not None else build_context(transcript)
        model = context.model or {}
        ledger.provider = _str_or_none(model.get("provider"))
        ledger.model = _str_or_none(model.get("modelId"))
        ledger.rules = context.rules
        if context.rules == PI_1:
            # pi 1.x's figure is its projected estimate: an anchor older than the newest context edit or
            # compaction is not trusted, so the whole projection is estimated instead (no stale_total needed).
            estimate = context_estimate(context)
            ledger.anchor_seen = estimate.last_usage_index is not None
            ledger.anchor_tokens, ledger.trailing_tokens = estimate.usage_tokens, estimate.trailing_tokens
            if ledger.anchor_seen:
                ledger.anchor_ts = _num_or_none(
                    context.messages[estimate.last_usage_index or 0].get("timestamp")
                )
            ledger._count_reducible(transcript, context, cap_for)
            return ledger
        messages = context.visible()
        if messages and messages[0].get("role") == "compactionSummary":
            ledger.compaction_ts = _num_or_none(messages[0].get("timestamp"))
        anchor_index = None
        for index in range(len(messages) - 1, -1, -1):
            anchor = usage_tokens(messages[index])
            if anchor is not None:
                anchor_index = index
                ledger.anchor_tokens, ledger.anchor_seen = anchor, True
                ledger.anchor_ts = _num_or_none(messages[index].get("timestamp"))
                break
        start = 0 if anchor_index is None else anchor_index + 1
        ledger.trailing_tokens = sum(message_tokens(m) for m in messages[start:])
        if ledger.anchor_seen and ledger.anchor_is_stale:
            ledger.stale_total = sum(message_tokens(m) for m in messages[:start]) + ledger.trailing_tokens
        ledger._count_reducible(transcript, context, cap_for)
        return ledger

    def _count_reducible(
        self, transcript: Transcript, context: SessionContext, cap_for: CapFor | None
    ) -> None:
        # The cap first: most sessions fit (None), and then whether the reading is committable is never asked,
        # nor its lines' nesting checked (``Transcript.problems``).
        cap = cap_for(self) if cap_for is not None else None
        if cap is None or not transcript.committable:  # most sessions (they fit): no tool result is looked at
            return
        # The context's tool results: ``message_entries`` of the branch, taken from the context instead of walking
        # the branch and converting each entry to its message again (``planning.tool_result_items``).
        items = [
            (entry["id"], message)
            for entry, message in context.tool_results()
            if isinstance(entry.get("id"), str)
        ]
        self.reducible = (cap, reducible_chars(items, cap))

    def to_snapshot(self) -> tuple[Any, ...]:
        """Every field, as JSON values (non-finite floats as strings: JSON has none), for ``compactd.sources.files.resume``."""
        turn = self.turn
        return (
            LEDGER_SNAPSHOT_VERSION,
            self.session_id,
            self.version,
            self.leaf_id,
            self.anchor_tokens,
            self.anchor_seen,
            _float_out(self.anchor_ts),
            self.trailing_tokens,
            _float_out(self.compaction_ts),
            self.stale_total,
            self.provider,
            self.model,
            self.entries,
            self.usable,
            self.reload_on_append,
            None if turn is None else (_float_out(turn.since), turn.pending_tools),
            self.reducible,
            self.rules,
        )

    @classmethod
    def from_snapshot(cls, fields: Any) -> SessionLedger:
        """The ledger ``to_snapshot`` described; ValueError for anything else (another version, a wrong type)."""
        if not isinstance(fields, list | tuple) or len(fields) != 18 or fields[0] != LEDGER_SNAPSHOT_VERSION:
            raise ValueError("not a ledger snapshot of this version")
        _, session_id, version, leaf, anchor, seen, anchor_ts, trailing, compaction_ts, stale = fields[:10]
        provider, model, entries, usable, reload_on_append, turn, reducible, rules = fields[10:]
        # The common snapshot (every value already of its type, no turn nor reducible pair) without a check
        # call per field: a restart builds one ledger per unchanged session. Anything else: the checks below.
        if (
            type(version) is type(anchor) is type(trailing) is type(entries) is int
            and type(seen) is type(usable) is type(reload_on_append) is bool
            and (stale is None or type(stale) is int)
            and (anchor_ts is None or type(anchor_ts) is float)
            and (compaction_ts is None or type(compaction_ts) is float)
            and (leaf is None or type(leaf) is str)
            and (provider is None or type(provider) is str)
            and (model is None or type(model) is str)
            and (turn is None or (type(turn) is list and len(turn) == 2 and type(turn[0]) is float))
            and (turn is None or type(turn[1]) is int)
            and (reducible is None or (type(reducible) is list and len(reducible) == 2))
            and (reducible is None or type(reducible[0]) is type(reducible[1]) is int)
            and rules in (PI_0_73, PI_1)
        ):
            return cls(
                session_id,
                version,
                None if leaf is None else sys.intern(leaf),
                anchor,
                seen,
                anchor_ts,
                trailing,
                compaction_ts,
                stale,
                None if provider is None else sys.intern(provider),
                None if model is None else sys.intern(model),
                entries,
                usable,
                reload_on_append,
                None if turn is None else Turn(turn[0], turn[1]),
                None if reducible is None else (reducible[0], reducible[1]),
                rules,
            )
        if rules not in (PI_0_73, PI_1):
            raise ValueError(f"unknown rules: {rules!r}")
        reducible_value = None
        if reducible is not None:
            if not isinstance(reducible, list | tuple) or len(reducible) != 2:
                raise ValueError("reducible is not a pair")
            reducible_value = (_int_in(reducible[0]), _int_in(reducible[1]))
        turn_value = None
        if turn is not None:
            if not isinstance(turn, list | tuple) or len(turn) != 2:
                raise ValueError("turn is not a pair")
            turn_value = Turn(_float_in(turn[0]), _int_in(turn[1]))
        return cls(
            session_id=session_id,
            version=_int_in(version),
            leaf_id=_str_in(leaf),
            anchor_tokens=_int_in(anchor),
            anchor_seen=_bool_in(seen),
            anchor_ts=_float_in(anchor_ts),
            trailing_tokens=_int_in(trailing),
            compaction_ts=_float_in(compaction_ts),
            stale_total=None if stale is None else _int_in(stale),
            provider=_str_in(provider),
            model=_str_in(model),
            entries=_int_in(entries),
            usable=_bool_in(usable),
            reload_on_append=_bool_in(reload_on_append),
            turn=turn_value,
            reducible=reducible_value,
            rules=rules,
        )

    @property
    def anchor_is_stale(self) -> bool:
        """The usage figure was measured before the compaction summary that now opens the context."""
        return self.compaction_ts is not None and (
            self.anchor_ts is None or self.anchor_ts <= self.compaction_ts
        )

    def _fold_message(self, message: dict[str, Any]) -> None:
        if is_runtime_context(message):
            return
        tokens = message_tokens(message, pi1=self.rules == PI_1)
        if self.stale_total is not None:
            self.stale_total += tokens
        anchor = usage_tokens(message)
        if anchor is None:
            self.trailing_tokens += tokens
            return
        self.anchor_tokens, self.anchor_seen, self.trailing_tokens = anchor, True, 0
        self.anchor_ts = _num_or_none(message.get("timestamp"))
        if not self.anchor_is_stale:
            self.stale_total = None

    def apply(self, entries: Iterable[Entry]) -> bool:
        """Fold appended entries in; False when one of them needs a full reload instead."""
        if not self.usable or self.reload_on_append:
            return False
        for entry in entries:
            entry_id = entry.get("id")
            kind = entry.get("type")
            if kind == "session" or not isinstance(entry_id, str) or self.version < 3:
                return False
            if entry.get("parentId") != self.leaf_id or kind in ("compaction", "context_edit"):
                return False
            if is_pi1_marker(entry) and self.rules != PI_1:
                return False  # pi 1.x now writes this session: its rules apply from the start of the branch
            if self.leaf_id is None and self.entries:
                return False  # the leaf had no usable id: where this entry attaches needs the whole file
            self.entries += 1
            self.leaf_id = entry_id
            if self.reducible is not None and _changes_reducible(entry):
                self.reducible = None
            if kind == "model_change":
                self.provider = _str_or_none(entry.get("provider"))
                self.model = _str_or_none(entry.get("modelId"))
            if kind in _CONTEXT_TYPES:
                message = entry_to_message(entry)
                if message is None:
                    continue
                if role_of(message) == "system" and not self.anchor_seen:
                    return False  # the projection's system messages are replayed into one: not additive
                self.turn = turn_step(self.turn, entry, message)
                if role_of(message) == "assistant":
                    self.provider = _str_or_none(message.get("provider"))
                    self.model = _str_or_none(message.get("model"))
                self._fold_message(message)
                if self.anchor_seen and self.anchor_is_stale and self.stale_total is None:
                    return False  # a usage older than the summary after a fresh one: out-of-order clocks
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
        # ``estimate.tokens`` without building the estimate: read once per session at every start-up.
        if self.anchor_seen:
            return self.anchor_tokens + self.trailing_tokens
        return self.trailing_tokens

    @property
    def planning_tokens(self) -> int:
        """The figure thresholds are compared with: a usage anchor older than the compaction summary is stale
        (it measured the context before compaction), so everything is estimated instead; see
        ``tokens.estimate_for_planning``."""
        if self.stale_total is not None:
            return self.stale_total
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
            "provider": self.provider,
            "model": self.model,
            "entries": self.entries,
            "turn_since": self.turn.since if self.turn is not None else None,
            "turn_pending_tools": self.turn.pending_tools if self.turn is not None else None,
            "rules": self.rules,
        }


def _changes_reducible(entry: Entry) -> bool:
    """The appended entry may change the route's figure: a tool result (its cut depends on its text), or a
    line that makes the reading one no compaction is built from (``Transcript.blocking``)."""
    if entry.get("type") == "message":
        message = entry.get("message")
        if message is not None and not isinstance(message, dict):
            return True
        if isinstance(message, dict) and message.get("role") == "toolResult":
            return True
    return nesting(entry) > MAX_DEPTH


class _Rec:
    """What the cold read keeps of one entry: enough to walk the tree and to find the anchor.

    Assistant details are kept raw (``said``) and interpreted only for the one that ends up the anchor.
    """

    __slots__ = (
        "end",
        "entry_id",
        "extra",
        "kind",
        "parent",
        "pi1",
        "said",
        "speaks",
        "start",
        "texts",
        "tokens",
    )

    def __init__(self, entry: Entry, start: int, end: int, keep_texts: bool) -> None:
        self.start, self.end = start, end
        self.entry_id = entry.get("id", UNDEFINED)  # UNDEFINED: no id at all (``undefined`` for ===)
        self.parent = entry.get("parentId")
        self.kind = kind = entry.get("type")
        self.tokens: int | None = None
        self.said: tuple[Any, ...] | None = None  # an assistant's (message dict, provider, model)
        self.extra: tuple[Any, ...] | None = (
            None  # model_change (provider, model); compaction (first kept, ts)
        )
        # speaks: the entry adds a message to the context (entry_to_message) that is not runtime context
        self.speaks = False
        self.texts: list[str] | None = None  # a tool result's text blocks, while the cold read needs them
        self.pi1 = is_pi1_marker(entry)  # only pi 1.x writes this entry: the branch follows its rules
        if kind == "message":
            message = entry.get("message")
            if isinstance(message, dict):
                role = message.get("role")
                if keep_texts and role == "toolResult":
                    content = message.get("content")
                    self.texts = (
                        [
                            b["text"]
                            for b in content
                            if type(b) is dict and b.get("type") == "text" and type(b.get("text")) is str
                        ]
                        if isinstance(content, list)
                        else []
                    )
                if role == "assistant":
                    self.speaks = True
                    usage = message.get("usage")
                    # only what usage_tokens() and the model need, not the text
                    self.said = ({"role": role, "usage": usage, "stopReason": message.get("stopReason"),
                                  "timestamp": message.get("timestamp")}, message.get("provider"), message.get("model"))  # fmt: skip
                else:
                    self.speaks = not (role == "custom" and message.get("customType") == RUNTIME_CONTEXT_TYPE)
        elif kind == "custom_message":
            self.speaks = entry.get("customType") != RUNTIME_CONTEXT_TYPE
        elif kind == "branch_summary":
            self.speaks = bool(entry.get("summary"))
        elif kind == "model_change":
            self.extra = (entry.get("provider"), entry.get("modelId"))
        elif kind == "compaction":
            summary = compaction_message(entry)
            self.tokens = estimate_tokens(summary)
            self.extra = (entry.get("firstKeptEntryId", UNDEFINED), _num_or_none(summary["timestamp"]))


def _cold_read(data: bytes, cap_for: CapFor | None) -> SessionLedger:
    scan = Scan(data)
    keep = cap_for is not None
    records = [_Rec(entry, start, end, keep) for entry, start, end, _line, _pos in scan.entries()]
    scan.finish()
    null_leaf = bool(records) and records[-1].entry_id is None  # pi: a null leaf id means an empty context
    if scan.no_header or scan.header is None or scan.version < 3:
        # v1/v2 ids: migrate first
        return SessionLedger.from_transcript(parse_transcript(data, check=keep), cap_for=cap_for)
    leaf_value = records[-1].entry_id if records else None
    ledger = SessionLedger(
        session_id=scan.header.get("id"),
        version=scan.version,
        entries=len(records),
        leaf_id=leaf_value if isinstance(leaf_value, str) else None,
        reload_on_append=_trims_tail(scan.problems),
    )
    # Transcript.branch(): from the leaf (the last entry) up through parentId; a missing parent or a cycle ends it.
    index: dict[Any, _Rec] = {}
    for rec in records:
        entry_id = rec.entry_id
        key = (entry_id or None) if type(entry_id) is str else link_key(entry_id)
        if key is not None:
            index[key] = rec
    path: list[_Rec] = []
    if records and not scan.junk_leaf and not null_leaf:
        current: _Rec | None = records[-1]  # the leaf: the last entry (by_id of its own id finds itself)
        seen: set[int] = set()
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            path.append(current)
            parent = current.parent
            parent_key = (parent or None) if type(parent) is str else link_key(parent)
            current = index.get(parent_key) if parent_key is not None else None
        path.reverse()
    if any(rec.pi1 for rec in path):  # pi 1.x's projection (edits, checkpoints): the exact reader
        return SessionLedger.from_transcript(parse_transcript(data, check=keep), cap_for=cap_for)
    compaction = None
    model: tuple[Any, ...] = (None, None)
    for rec in path:
        if rec.said is not None:
            model = rec.said[1:]
        elif rec.kind == "model_change" and rec.extra is not None:
            model = rec.extra
        elif rec.kind == "compaction":
            compaction = rec
    ledger.provider, ledger.model = _str_or_none(model[0]), _str_or_none(model[1])
    ledger.turn = turn_of_branch(_entries_newest_first(data, path))
    # context_entries(): the last compaction, the kept entries before it, everything after it
    speaking: list[_Rec] = [r for r in path if r.speaks]
    if compaction is not None:
        position = next(
            i
            for i, r in enumerate(path)
            if r.kind == "compaction" and js_same(r.entry_id, compaction.entry_id)
        )
        first_kept, ledger.compaction_ts = compaction.extra or (UNDEFINED, None)
        first = next((i for i in range(position) if js_same(path[i].entry_id, first_kept)), position)
        speaking = [
            compaction,
            *(r for r in path[first:position] if r.speaks),
            *(r for r in path[position + 1 :] if r.speaks),
        ]
    anchor = None
    for i in range(len(speaking) - 1, -1, -1):
        said = speaking[i].said
        usage = usage_tokens(said[0]) if said is not None else None
        if usage is not None:
            anchor = i
            ledger.anchor_tokens, ledger.anchor_seen = usage, True
            ledger.anchor_ts = _num_or_none(said[0]["timestamp"]) if said is not None else None
            break
    start = 0 if anchor is None else anchor + 1

    def tokens(rec: _Rec) -> int:
        if rec.tokens is None:
            message = entry_to_message(_entry_at(data, rec.start, rec.end))
            rec.tokens = message_tokens(message) if message is not None else 0
        return rec.tokens

    ledger.trailing_tokens = sum(tokens(r) for r in speaking[start:])
    if ledger.anchor_seen and ledger.anchor_is_stale:
        ledger.stale_total = sum(tokens(r) for r in speaking[:start]) + ledger.trailing_tokens
    cap = cap_for(ledger) if cap_for is not None and ledger.usable else None
    if cap is not None and not _may_block(data, scan, records):
        items = [
            (r.entry_id, {"role": "toolResult", "content": [{"type": "text", "text": t} for t in r.texts]})
            for r in speaking
            if r.texts is not None and type(r.entry_id) is str
        ]
        ledger.reducible = (cap, reducible_chars(items, cap))
    return ledger


def _may_block(data: bytes, scan: Scan, records: list[_Rec]) -> bool:
    """The reading may have a problem that ``Transcript.blocking`` reports (then the route is left to a full
    read, which says why): a fatal or blocking problem, a non-string id, a message that is not an object, or a
    line with enough brackets to nest past ``MAX_DEPTH`` (only those are walked)."""
    if any(p.kind in FATAL_KINDS or p.kind in BLOCKING_KINDS for p in scan.problems):
        return True
    if scan.header is not None and nesting(scan.header) > MAX_DEPTH:
        return True
    count = data.count
    for rec in records:
        if type(rec.entry_id) is not str:
            return True
        start, end = rec.start, rec.end
        if rec.kind == "message" and not rec.speaks and rec.said is None:
            message = _entry_at(data, start, end).get("message")
            if message is not None and not isinstance(message, dict):
                return True
        # a line nests at most as deep as it has brackets: only the few with enough are parsed again
        deep = count(b"{", start, end) + count(b"[", start, end) > MAX_DEPTH
        if deep and nesting(_entry_at(data, start, end)) > MAX_DEPTH:
            return True
    return False


def _entry_at(data: bytes, start: int, end: int) -> Entry:
    """The entry the scan found at ``data[start:end]``, parsed again (its span is what pi parsed)."""
    raw = data[start:end]
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value, _ = parse_line(raw)  # lone surrogates, invalid UTF-8, Infinity, deep nesting: as JSON.parse
    return value if isinstance(value, dict) else {}


def _trims_tail(problems: Iterable[Any]) -> bool:
    return any(p.kind == "trailing_whitespace" for p in problems)


def _entries_newest_first(data: bytes, path: list[_Rec]) -> Iterable[Entry]:
    """The branch's message-bearing entries, leaf first, each line parsed again only when asked for."""
    for rec in reversed(path):
        if rec.kind in _CONTEXT_TYPES:
            value = _entry_at(data, rec.start, rec.end)
            if value:
                yield value


def message_tokens(message: dict[str, Any], *, pi1: bool = False) -> int:
    """``estimate_tokens``, with a one-pass fast path for tool results (three quarters of the bytes)."""
    if message.get("role") == "toolResult":
        return -(-tool_result_chars(message.get("content"))[0] // CHARS_PER_TOKEN)
    return estimate_tokens(message, pi1=pi1)


def tool_result_chars(content: Any) -> tuple[int, int]:
    """(characters pi's estimate counts, text characters pruning can reduce) of a toolResult, in one pass.

    The same figures as ``tokens.message_chars`` and ``prune.tool_result_text_chars`` (a string content counts
    for the estimate only, as in each of them).
    """
    if isinstance(content, str):
        return js_len(content), 0
    text = images = 0
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                kind = block.get("type")
                if kind == "text":
                    value = block.get("text")
                    if isinstance(value, str):
                        text += js_len(value)
                elif kind == "image":
                    images += 1
    return text + IMAGE_CHARS * images, text


def _num_or_none(value: Any) -> float | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer past the double range: JavaScript reads it as Infinity
        return float("inf") if value > 0 else float("-inf")


def _str_or_none(value: Any) -> str | None:
    # Interned: thousands of sessions share a handful of provider and model names.
    return sys.intern(value) if isinstance(value, str) else None


def _float_out(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "nan" if value != value else ("inf" if value > 0 else "-inf")


def _float_in(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
        return float(value)
    raise ValueError(f"not a number: {value!r}")


def _int_in(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"not an integer: {value!r}")


def _bool_in(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"not a boolean: {value!r}")


def _str_in(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return _str_or_none(value)
    raise ValueError(f"not a string: {value!r}")
