"""What a commit writes, built without I/O: the rotated successor, the lines an append adds, the context each
must give an agent that loads the result, and the check that holds before anything reaches disk.

Rotated successor (rotate mode), in this order: the header line byte for byte; the compaction entry as a
*root*; the latest ``model_change`` / ``thinking_level_change`` / ``session_info`` from the summarized part,
its ``custom`` (extension state) and unknown entries and its labels whose target survives, chained after the
compaction; the post-compaction message; then every surviving entry in file order: the kept part of the active
branch (its first entry re-parented onto that chain) and the other branches (re-parented to their nearest
surviving ancestor; one that forked inside the summarized part hangs from the post-compaction message, so it
too sees the summary). The active leaf stays the last line. Lines whose entry did not change are copied byte
for byte; re-parented and replaced ones are serialized compactly with their keys in order, as
``JSON.stringify`` does.

An agent still holding its old leaf in memory appends onto a branch whose root is the summary, so its reloaded
context is summary, post-compaction message, kept messages, its new lines.

Append mode adds, chained from the current leaf: (pruning) a new branch from the parent of the first replaced
entry that re-appends every later branch entry with the replacements in, fresh ids, parents, first-kept and
label targets remapped (OpenClaw's way; the old entries stay as an abandoned branch); then the compaction and
the post-compaction message. Context: summary, kept messages, post-compaction message.

A branch pi 1.x wrote (``context.rules_of``) is committed as pi 1.x commits (design.md §6.14): the compaction
carries the ``systemMessage`` checkpoint (the engine puts it in); a pruning is a ``context_edit`` per result,
appended after everything else and rewriting no line; in a rotated successor the branch's system messages (the
prompt and tool loadout pi restores from the branch) form a chain *before* the compaction, out of the context
as pi keeps them, and the last line is a context edit (the pruning's, else one that changes nothing) so that
the kept turns' usage, measured before the compaction, is no longer pi's anchor.
"""

from __future__ import annotations

import io
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import Any

import orjson

from compactd.commit.notes import FULL_TEXT_PLACEHOLDER, entry_note
from compactd.core.context import (
    compaction_message,
    context_from_path,
    entry_to_message,
    is_system_message,
    rules_of,
)
from compactd.core.jsjson import stringify
from compactd.core.messages import PI_1
from compactd.core.reader import Entry, Transcript, parse_line, parse_transcript
from compactd.core.timestamps import js_iso
from compactd.datarecord import datarecord
from compactd.ids import fresh_id as fresh_id  # its home is compactd.ids; imported from here too

__all__ = ["Entry"]

# Only the most recent of these, from the summarized part, still matter (pi reads the last one on the path).
SETTINGS_TYPES = ("model_change", "thinking_level_change", "session_info")
# What the summary replaces. Every other entry type of the summarized part (custom state, labels, unknown
# types) is carried into the successor: it costs nothing in the context and extensions may rebuild from it.
SUMMARIZED_TYPES = ("message", "custom_message", "branch_summary", "compaction")
PAIRING_KINDS = frozenset({"orphan_tool_result", "missing_tool_result"})
# Problems our own lines must never introduce in a rotated successor.
STRUCTURE_KINDS = frozenset(
    {
        "no_header",
        "malformed_line",
        "torn_last_line",
        "dangling_parent",
        "parent_cycle",
        "conflicting_duplicate_id",
    }
)
# customType of the entry appended under the true leaf when a rescued late line landed after its own child.
LEAF_POINTER_TYPE = "compactd.leaf"


class PlanError(Exception):
    """The commit would not give the expected result; ``reason`` says why. Nothing was written."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --- serialization and ids ----------------------------------------------------------------------------------


def dumps_entry(entry: Mapping[str, Any]) -> bytes:
    """``JSON.stringify(entry)``: compact, keys in order, non-ASCII raw, read back by pi as it was read.

    orjson rejects lone surrogates (valid for JavaScript) and writes ``Infinity`` (from ``1e400``) as ``null``;
    such entries are written by ``stringify``, which escapes the former and writes the latter as ``1e400``.
    """
    try:
        data = orjson.dumps(entry)
    except TypeError:
        data = None
    if data is not None and (b"null" not in data or not _has_infinity(entry)):
        return data
    return stringify(dict(entry), nonfinite="1e400", js_key_order=False).encode()


def _has_infinity(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def iso_timestamp(now: float | None = None) -> str:
    return js_iso(now)


LATE_LINES = "late lines rescued after a rotation landed after newer ones"
SLIPPED_LINES = "agent lines slipped in between a commit's read and its write"


def leaf_pointer_entry(
    entry_id: str, parent_id: str, now: float | None = None, *, reason: str = LATE_LINES
) -> Entry:
    """A ``custom`` entry (no effect on the context) that makes ``parent_id``'s branch the current one."""
    return {
        "type": "custom",
        "id": entry_id,
        "parentId": parent_id,
        "timestamp": iso_timestamp(now),
        "customType": LEAF_POINTER_TYPE,
        "data": {"reason": reason},
    }


def _entry_id(entry: Mapping[str, Any]) -> str | None:
    value = entry.get("id")
    return value if isinstance(value, str) else None


def newest_tip(
    agent_entries: list[Entry], index: Mapping[str, Entry], anchor: str | None = None
) -> str | None:
    """The agent's newest line among ``agent_entries`` (file order) and ``anchor`` (the tip of the branch a
    commit planned on): the tip of the longest chain, ties to the chain holding ``anchor``, then the later line.

    Depth is counted through ``index`` up to the root, not only among ``agent_entries``: a line that forks off
    the planned branch below its tip (a writer with a stale leaf) must not win over the agent lines already on
    that branch just because they came before the region looked at. None when there is no candidate.
    """
    depth: dict[str, int] = {}

    def depth_of(entry_id: str) -> int:
        chain: list[str] = []
        seen: set[str] = set()
        current: str | None = entry_id
        while current is not None and current in index and current not in depth and current not in seen:
            chain.append(current)
            seen.add(current)
            parent = index[current].get("parentId")
            current = parent if isinstance(parent, str) else None
        base = depth.get(current, 0) if current is not None else 0
        for item in reversed(chain):
            base += 1
            depth[item] = base
        return depth.get(entry_id, 1)

    def holds_anchor(entry_id: str) -> bool:
        if anchor is None or anchor not in index:
            return False
        current: object = entry_id
        for _ in range(max(0, depth_of(entry_id) - depth_of(anchor))):
            entry = index.get(current) if isinstance(current, str) else None
            current = entry.get("parentId") if entry is not None else None
        return current == anchor

    parents = {e.get("parentId") for e in agent_entries}
    best: tuple[int, int, int, str] | None = None
    if anchor is not None and anchor in index and anchor not in parents:
        best = (depth_of(anchor), 1, -1, anchor)
    for position, entry in enumerate(agent_entries):
        entry_id = _entry_id(entry)
        if entry_id is None or entry_id in parents:
            continue
        key = (depth_of(entry_id), int(holds_anchor(entry_id)), position, entry_id)
        if best is None or key > best:
            best = key
    return None if best is None else best[3]


def leaf_to_repoint(
    agent_entries: list[Entry],
    last: Entry | None,
    index: Mapping[str, Entry] | None = None,
    anchor: str | None = None,
) -> str | None:
    """The id the leaf should point to when the file's ``last`` line does not lead to the newest agent line.

    ``agent_entries`` are the agent's lines after some point, in file order. Without ``anchor`` their depth
    counts among themselves only; with it (the tip of the branch planned on before that point) from the root
    through ``index``, the anchor competing too (see :func:`newest_tip`). None when the last line's branch
    already holds the newest line.
    """
    by_id = {i: e for e in agent_entries if (i := _entry_id(e)) is not None}
    lookup: Mapping[str, Entry] = index if index is not None else by_id
    if not by_id or last is None:
        return None
    target = newest_tip(agent_entries, lookup if anchor is not None else by_id, anchor)
    if target is None:
        return None
    current: Entry | None = last
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        if _entry_id(current) == target:
            return None
        seen.add(id(current))
        parent = current.get("parentId")
        current = lookup.get(parent) if isinstance(parent, str) else None
    return target


def misplaced_leaf(entries: list[Entry]) -> str | None:
    """:func:`leaf_to_repoint` for a region holding only agent lines (rotation rescue)."""
    return leaf_to_repoint(entries, entries[-1] if entries else None)


@datarecord
class Rescue:
    """The late lines to append to a live file (bytes, each with its newline), and where the leaf must go."""

    lines: list[bytes]
    reattached: int  # lines whose parentId was changed
    tip: str | None  # the id the active branch should end at after the append


def _without_parent(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "parentId"}


def successor_anchor(transcript: Transcript) -> str | None:
    """Where a rotated successor hangs what forked inside its summarized part (see :func:`build_successor`):
    the parent of the compaction's first kept entry (the post-compaction message or the settings chain), or
    the compaction itself. None when the file does not start with a compaction."""
    # A pi 1.x successor opens with the branch's system messages, then the compaction.
    first = next((e for e in transcript.entries if not is_system_message(e)), None)
    if first is None or first.get("type") != "compaction" or not isinstance(first.get("id"), str):
        return None
    kept = transcript.by_id().get(first.get("firstKeptEntryId"))  # type: ignore[arg-type]
    parent = kept.get("parentId") if kept is not None else None
    return parent if isinstance(parent, str) else str(first["id"])


def plan_rescue(late: Iterable[bytes], live_data: bytes, live: Transcript, *, direct: bool) -> Rescue:
    """Which of ``late`` (complete lines an agent wrote to a rotated-away inode) the live file lacks, attached
    so that none dangles and each lands on the active branch. ``live`` is ``live_data`` parsed.

    ``direct``: the live file is still the successor of that rotation (plus appends), so a late line whose
    parent is in it keeps its parent (the agent's next lines, written to the live file, hang from it; the
    caller re-points the leaf afterwards). Otherwise (the file was rewritten since), and for a late line whose
    parent is gone (summarized), the line is re-parented: onto the end of the active branch, in order; or, if
    lines already in the file hang from it, above them (the successor's anchor, else as a root), so no cycle
    forms. Ids and every other field are kept. A line already present (same id, same content apart from its
    parent: a previous recovery placed it) is skipped; lines that are not entries are appended unless an
    identical one is there.
    """
    index = live.by_id()
    present = set(index)
    children = {p for e in live.entries if isinstance(p := e.get("parentId"), str)}
    anchor = successor_anchor(live) if direct else None
    tip = live.leaf_id
    ours: set[str] = set()
    out: list[bytes] = []
    reattached = 0
    raw_have: Counter[bytes] | None = None
    for raw in late:
        if not raw.strip():
            continue
        value, _ = parse_line(raw)
        entry_id = value.get("id") if isinstance(value, dict) else None
        if not isinstance(value, dict) or not isinstance(entry_id, str) or value.get("type") == "session":
            if raw_have is None:
                raw_have = Counter(line for line in live_data.split(b"\n") if line.strip())
            if raw_have[raw] > 0:
                raw_have[raw] -= 1
            else:
                out.append(raw + b"\n")
            continue
        if entry_id in present:
            existing = index.get(entry_id)
            same = existing is not None and _without_parent(existing) == _without_parent(value)
            if not (entry_id in ours or same):
                out.append(raw + b"\n")  # another line under an id already taken: kept as it is
            continue
        parent = value.get("parentId")
        keep = parent is None or (
            isinstance(parent, str) and (parent in ours or parent == tip or (direct and parent in present))
        )
        if keep:
            target = parent
            out.append(raw + b"\n")
        else:
            target = (anchor if anchor in present else None) if entry_id in children else tip
            out.append(dumps_entry({**value, "parentId": target}) + b"\n")
            reattached += 1
        present.add(entry_id)
        ours.add(entry_id)
        if tip is None or (target is not None and target == tip):
            tip = entry_id
    return Rescue(out, reattached, tip)


# --- checks on the current file -----------------------------------------------------------------------------


def current_branch(transcript: Transcript, required: Iterable[str | None]) -> list[Entry]:
    """The branch from the file's leaf, which must still hold every required id (else the plan is stale)."""
    branch = transcript.branch()
    ids = {_entry_id(e) for e in branch}
    for needed in required:
        if needed is not None and needed not in ids:
            raise PlanError("branch moved")
    return branch


def substitute_note(entry: Entry, note: str) -> Entry:
    """``entry`` with :data:`FULL_TEXT_PLACEHOLDER` replaced by ``note`` wherever it occurs in its strings."""
    raw = dumps_entry(entry)
    token = FULL_TEXT_PLACEHOLDER.encode()
    if token not in raw:
        return entry
    escaped = json.dumps(note, ensure_ascii=True)[1:-1].encode("ascii")
    value = orjson.loads(raw.replace(token, escaped))
    return value if isinstance(value, dict) else entry


def _prepare_replacements(
    replacements: Mapping[str, Entry], note_for: Callable[[str], str] | None
) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for entry_id, entry in replacements.items():
        out[entry_id] = substitute_note(entry, note_for(entry_id)) if note_for is not None else dict(entry)
    return out


def _with_ids(
    compaction: Entry, post: Entry | None, taken: set[str], parent: str | None
) -> tuple[Entry, Entry | None]:
    """Copies with ids that collide with nothing in the file (the engine made them against a snapshot), the
    compaction the child of ``parent`` and the post-compaction message the compaction's."""
    compaction = dict(compaction)
    if not isinstance(compaction.get("id"), str) or compaction["id"] in taken:
        compaction["id"] = fresh_id(taken)
    taken.add(compaction["id"])
    compaction["parentId"] = parent
    if post is not None:
        post = dict(post)
        if not isinstance(post.get("id"), str) or post["id"] in taken:
            post["id"] = fresh_id(taken)
        taken.add(post["id"])
        post["parentId"] = compaction["id"]
    return compaction, post


def context_edits(
    replacements: Mapping[str, Entry], parent: str | None, taken: set[str], *, invalidate: Entry | None = None
) -> list[Entry]:
    """pi 1.x's way of pruning: one ``context_edit`` per replaced entry (its message's new content), chained
    from ``parent``; with none, and ``invalidate`` given, one edit of that entry that changes nothing it shows
    (pi trusts no usage recorded before a context edit: see the module docstring)."""
    edits: list[tuple[str, Any]] = [
        (entry_id, (entry.get("message") or {}).get("content")) for entry_id, entry in replacements.items()
    ]
    if not edits and invalidate is not None and isinstance(invalidate.get("id"), str):
        edits = [(invalidate["id"], _shown_content(invalidate))]
    out: list[Entry] = []
    for target, content in edits:
        entry_id = fresh_id(taken)
        taken.add(entry_id)
        out.append(
            {
                "type": "context_edit",
                "id": entry_id,
                "parentId": parent,
                "timestamp": iso_timestamp(),
                "targetId": target,
                "replacement": {"content": content},
            }
        )
        parent = entry_id
    return out


def _shown_content(entry: Entry) -> Any:
    """What a no-op edit of ``entry`` replaces its content with: the content it shows already."""
    if entry.get("type") == "message":
        return (entry.get("message") or {}).get("content")
    return entry.get("content")


def _invalidation_target(post: Entry | None, kept: list[Entry]) -> Entry | None:
    """The entry a no-op context edit names: the post-compaction message, else the first kept message pi lets
    an edit name (a user, assistant or tool-result message, or a custom message)."""
    if post is not None:
        return post
    for entry in kept:
        kind = entry.get("type")
        message = entry.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if kind == "custom_message" or (kind == "message" and role in ("user", "assistant", "toolResult")):
            return entry
    return None


def refuse_blocked(transcript: Transcript) -> None:
    """No compaction is built on a reading that may differ from the agent's (see ``Transcript.blocking``)."""
    blocking = transcript.blocking
    if blocking:
        problem = blocking[0]
        raise PlanError(f"not compacted: {problem.kind} at line {problem.line}: {problem.message}")


def _messages(entries: Iterable[Entry]) -> list[dict[str, Any]]:
    return [m for e in entries if (m := entry_to_message(e)) is not None]


def _pairing(transcript: Transcript) -> frozenset[tuple[str, str]]:
    return frozenset((p.kind, p.message) for p in transcript.problems if p.kind in PAIRING_KINDS)


# --- rotate -------------------------------------------------------------------------------------------------


@datarecord
class Plan:
    """Bytes to write and what loading the result must give."""

    data: bytes
    leaf_id: str | None
    expected: list[dict[str, Any]]
    thinking_level: str
    allowed_pairing: frozenset[tuple[str, str]]
    session_id: str | None
    new_ids: list[str]
    summarized: int = 0
    kept: int = 0
    reserialized: int = 0
    # The planned transcript's entries by id: the check shares those its result holds unchanged (see verify).
    reuse: Mapping[str, Entry] | None = field(default=None, repr=False)


def build_successor(
    data: bytes,
    transcript: Transcript,
    compaction: Entry | None,
    post: Entry | None,
    replacements: Mapping[str, Entry],
    *,
    snapshot_leaf_id: str | None = None,
    note_for: Callable[[str], str] | None = None,
) -> Plan:
    """The rotated successor of ``data`` (complete lines, parsed as ``transcript``); see the module docstring.

    Without a compaction this is a pruning-only rewrite: the same entries with the replacements in.
    """
    header = transcript.header
    if header is None or transcript.header_span is None:
        raise PlanError("no session header")
    refuse_blocked(transcript)
    first_kept = compaction.get("firstKeptEntryId") if compaction is not None else None
    if compaction is not None and not isinstance(first_kept, str):
        raise PlanError("compaction has no firstKeptEntryId")
    branch = current_branch(transcript, [first_kept, snapshot_leaf_id])
    # Entries are named by their index in the file here, not by object: a lean reading (see
    # ``Transcript``) holds only the branch's entries as dicts and parses another line only to rewrite it.
    branch_at = transcript.branch_indices()
    original = context_from_path(branch)
    pi1 = original.rules == PI_1
    index = transcript.id_index()
    positions = {_entry_id(e): i for i, e in enumerate(branch)}
    cut = positions[first_kept] if first_kept is not None else 0
    summarized = branch[:cut]
    kept = branch[cut:]
    summarized_at = set(branch_at[:cut])
    # pi 1.x: a pruned result's original stays in the file (an edit rewrites nothing), so the note names it.
    fix_replacements = _prepare_replacements(replacements, entry_note if pi1 else note_for)
    edit_replacements: dict[str, Entry] = {}
    moved: list[Entry] = []  # pi 1.x: the branch's system messages, chained before the compaction
    moved_at: set[int] = set()
    if pi1:
        edit_replacements, fix_replacements = fix_replacements, {}
        if compaction is not None:
            if branch and is_system_message(branch[-1]):
                raise PlanError("the branch ends with a system message: a request is being prepared")
            moved = [e for e in branch if is_system_message(e)]
            moved_at = {at for at, e in zip(branch_at, branch, strict=True) if is_system_message(e)}

    taken = set(index)
    new_compaction: Entry | None = None
    new_post: Entry | None = None
    if compaction is not None:
        new_compaction, new_post = _with_ids(compaction, post, taken, None)

    # The chain that follows the compaction: what of the summarized part is state, not conversation.
    latest = {e.get("type"): e for e in summarized if e.get("type") in SETTINGS_TYPES}
    chain_candidates = [
        (at, e)
        for at, e in zip(branch_at, summarized, strict=False)
        if (e.get("type") in SETTINGS_TYPES and latest.get(e.get("type")) is e)
        or (e.get("type") not in SETTINGS_TYPES and e.get("type") not in SUMMARIZED_TYPES)
    ]

    def id_of(at: int) -> str | None:
        value = transcript.id_at(at)
        return value if isinstance(value, str) else None

    def canonical(at: int) -> bool:
        entry_id = id_of(at)
        return entry_id is None or index.get(entry_id) == at

    rest = [
        at
        for at in range(transcript.count)
        if at not in summarized_at and at not in moved_at and canonical(at)
    ]
    present = {id_of(at) for at in rest if transcript.type_at(at) != "label"}
    present |= {_entry_id(e) for _, e in chain_candidates if e.get("type") != "label"}
    if new_compaction is not None:
        present.add(new_compaction["id"])
    present.discard(None)

    kept_at = set(branch_at[cut:])
    # Labels survive when their target does (a label may target a label: decide in file order). A label on
    # the kept branch stays whatever it targets: an agent may hold its id as its leaf.
    candidates = set(rest) | {at for at, _ in chain_candidates}
    dropped: set[int] = set()
    for at in range(transcript.count):
        if transcript.type_at(at) != "label" or at not in candidates:
            continue
        target = transcript.entry(at).get("targetId")  # a list or an object: no target, and unhashable
        if at in kept_at or (isinstance(target, str) and target in present):
            present.add(id_of(at))
        else:
            dropped.add(at)

    chain = [e for at, e in chain_candidates if at not in dropped]
    rest = [at for at in rest if at not in dropped]
    surviving = set(rest)

    anchor: str | None = None
    chain_parent: dict[int, str | None] = {}
    moved_out: list[Entry] = []
    for entry in moved:
        moved_out.append({**entry, "parentId": anchor})
        anchor = _entry_id(entry)
    if new_compaction is not None:
        new_compaction["parentId"] = anchor
        anchor = new_compaction["id"]
        for entry in chain:
            chain_parent[id(entry)] = anchor
            anchor = _entry_id(entry) or anchor
        if new_post is not None:
            new_post["parentId"] = anchor
            anchor = new_post["id"]

    def resolve(parent: object) -> str | None:
        """Nearest surviving ancestor of ``parent`` (the anchor for one in the summarized part)."""
        seen: set[str] = set()
        while isinstance(parent, str) and parent not in seen:
            seen.add(parent)
            target = index.get(parent)
            if target is None:
                return None
            if target in summarized_at:
                return anchor
            if target in surviving:
                return parent
            parent = transcript.parent_at(target)
        return None

    spans = transcript.spans
    reserialize_all = transcript.version < 3
    # One buffer, not a list of lines: orjson's result keeps its ~4 KB working buffer, so holding one per
    # re-parented entry (every orphan) cost ~20x the file; each is copied in here and freed at once. A BytesIO
    # hands its buffer over as the result's bytes (``getvalue`` shares it), where a bytearray was copied once
    # more at the commit's peak.
    out_data = io.BytesIO()
    write = out_data.write

    def emit(line: bytes) -> None:
        write(line)
        write(b"\n")

    if reserialize_all:
        emit(dumps_entry({**header, "version": 3}))
    else:
        start, end = transcript.header_span
        emit(data[start:end])
    reserialized = 0
    for entry in moved_out:
        emit(dumps_entry(entry))
        reserialized += 1
    chain_out: list[Entry] = []
    if new_compaction is not None:
        emit(dumps_entry(new_compaction))
        for entry in chain:
            new = dict(entry)
            new["parentId"] = chain_parent[id(entry)]
            emit(dumps_entry(new))
            chain_out.append(new)
            reserialized += 1
        if new_post is not None:
            emit(dumps_entry(new_post))
    first_kept_at = branch_at[cut] if kept and compaction is not None else None
    kept_out: dict[int, Entry] = {}
    view = memoryview(data)
    for at in rest:
        entry_id = id_of(at)
        parent = anchor if at == first_kept_at else resolve(transcript.parent_at(at))
        replacement = fix_replacements.get(entry_id) if entry_id is not None else None
        if replacement is None and parent == transcript.parent_at(at) and not reserialize_all:
            start, end = spans[at]
            write(view[start:end])
            write(b"\n")
            if at in kept_at:
                kept_out[at] = transcript.entry(at)
            continue
        out = dict(replacement) if replacement is not None else dict(transcript.entry(at))
        out["id"] = entry_id if entry_id is not None else out.get("id")
        out["parentId"] = parent
        emit(dumps_entry(out))
        reserialized += 1
        if at in kept_at:
            kept_out[at] = out
    del view

    new_kept = [kept_out[at] for at in branch_at[cut:] if at in kept_out]
    leaf_id = _entry_id(branch[-1])
    edits: list[Entry] = []
    if pi1 and (new_compaction is not None or edit_replacements):
        target = _invalidation_target(new_post, new_kept) if new_compaction is not None else None
        edits = context_edits(edit_replacements, leaf_id, taken, invalidate=target)
        for entry in edits:
            emit(dumps_entry(entry))
        leaf_id = _entry_id(edits[-1]) if edits else leaf_id
    if pi1:
        opening = [new_compaction, *chain_out, new_post] if new_compaction is not None else []
        planned = [*moved_out, *(e for e in opening if e is not None), *new_kept, *edits]
        expected = context_from_path(planned, PI_1).messages
    elif new_compaction is not None:
        expected = [compaction_message(new_compaction)]
        if new_post is not None:
            expected.extend(_messages([new_post]))
        expected.extend(_messages(new_kept))
    else:
        expected = context_from_path(new_kept).messages
    new_ids = [i for i in (_entry_id(new_compaction or {}), _entry_id(new_post or {})) if i is not None]
    new_ids += [i for e in edits if (i := _entry_id(e)) is not None]
    return Plan(
        data=out_data.getvalue(),
        leaf_id=leaf_id,
        expected=expected,
        thinking_level=original.thinking_level,
        allowed_pairing=_pairing(transcript),
        session_id=transcript.session_id,
        reuse=transcript.retained_by_id(),
        new_ids=new_ids,
        summarized=len(summarized),
        kept=len(new_kept),
        reserialized=reserialized,
    )


# --- append -------------------------------------------------------------------------------------------------


def build_append(
    transcript: Transcript,
    compaction: Entry | None,
    post: Entry | None,
    replacements: Mapping[str, Entry],
    *,
    snapshot_leaf_id: str | None = None,
    leaf_id: str | None = None,
    taken: set[str] | None = None,
    note_for: Callable[[str], str] | None = None,
) -> Plan:
    """The lines append mode adds after the current leaf (or ``leaf_id``); see the module docstring."""
    if transcript.header is None:
        raise PlanError("no session header")
    refuse_blocked(transcript)
    if transcript.version < 3:
        raise PlanError("append needs a version 3 transcript (pi rewrites older files on open)")
    first_kept = compaction.get("firstKeptEntryId") if compaction is not None else None
    if compaction is not None and not isinstance(first_kept, str):
        raise PlanError("compaction has no firstKeptEntryId")
    branch = transcript.branch(leaf_id) if leaf_id is not None else transcript.branch()
    ids = [_entry_id(e) for e in branch]
    for needed in (first_kept, snapshot_leaf_id):
        if needed is not None and needed not in ids:
            raise PlanError("branch moved")
    cut = ids.index(first_kept) if first_kept is not None else 0
    used = set(transcript.by_id()) if taken is None else set(taken)
    fix = _prepare_replacements(replacements, note_for)
    replaced_at = [i for i, entry_id in enumerate(ids) if entry_id in fix and i >= cut]
    if compaction is None and not replaced_at:
        raise PlanError("nothing to prune on the current branch")
    if rules_of(branch) == PI_1:
        return _build_append_pi1(transcript, branch, cut, compaction, post, fix, replaced_at, used)

    out: list[Entry] = []
    parent = ids[-1] if ids else None
    id_map: dict[str, str] = {}
    new_path = list(branch)
    if replaced_at:
        start = replaced_at[0]
        parent_value = branch[start].get("parentId")
        parent = parent_value if isinstance(parent_value, str) else None
        new_path = branch[:start]
        for entry in branch[start:]:
            entry_id = _entry_id(entry)
            new = dict(fix[entry_id]) if entry_id in fix else dict(entry)
            new_id = fresh_id(used)
            used.add(new_id)
            if entry_id is not None:
                id_map[entry_id] = new_id
            new["id"] = new_id
            new["parentId"] = parent
            for key in ("firstKeptEntryId", "targetId", "fromId"):
                value = new.get(key)
                if isinstance(value, str) and value in id_map:
                    new[key] = id_map[value]
            out.append(new)
            new_path.append(new)
            parent = new_id
    # The branch the agent's context is built from after our lines, with the replacements in, for the check.
    replaced_branch = [
        fix.get(i, e) if i is not None and pos >= cut else e
        for pos, (i, e) in enumerate(zip(ids, branch, strict=True))
    ]
    new_compaction: Entry | None = None
    new_post: Entry | None = None
    if compaction is not None:
        new_compaction, new_post = _with_ids(compaction, post, used, parent)
        if isinstance(first_kept, str) and first_kept in id_map:
            new_compaction["firstKeptEntryId"] = id_map[first_kept]
        out.extend(e for e in (new_compaction, new_post) if e is not None)
        parent = out[-1]["id"]
        expected = [compaction_message(new_compaction), *_messages(replaced_branch[cut:])]
        if new_post is not None:
            expected.extend(_messages([new_post]))
    else:
        expected = context_from_path(replaced_branch).messages
    original = context_from_path(branch)
    return Plan(
        data=b"".join(dumps_entry(e) + b"\n" for e in out),
        leaf_id=parent,
        expected=expected,
        thinking_level=original.thinking_level,
        allowed_pairing=_pairing(transcript),
        session_id=transcript.session_id,
        reuse=transcript.by_id(),
        new_ids=[i for e in out if (i := _entry_id(e)) is not None],
        summarized=cut,
        kept=len(branch) - cut,
        reserialized=len(out),
    )


def _build_append_pi1(
    transcript: Transcript,
    branch: list[Entry],
    cut: int,
    compaction: Entry | None,
    post: Entry | None,
    fix: Mapping[str, Entry],
    replaced_at: list[int],
    used: set[str],
) -> Plan:
    """pi 1.x's append: the compaction (with its checkpoint) and the post-compaction message after the leaf,
    then a ``context_edit`` per pruned result; no line is re-appended and none rewritten."""
    out: list[Entry] = []
    parent = _entry_id(branch[-1]) if branch else None
    if compaction is not None:
        out.extend(e for e in _with_ids(compaction, post, used, parent) if e is not None)
        parent = out[-1]["id"]
    replaced = {i: fix[i] for pos in replaced_at if (i := _entry_id(branch[pos])) is not None}
    out.extend(context_edits(replaced, parent, used))
    original = context_from_path(branch)
    return Plan(
        data=b"".join(dumps_entry(e) + b"\n" for e in out),
        leaf_id=_entry_id(out[-1]) if out else parent,
        expected=context_from_path([*branch, *out], PI_1).messages,
        thinking_level=original.thinking_level,
        allowed_pairing=_pairing(transcript),
        session_id=transcript.session_id,
        reuse=transcript.by_id(),
        new_ids=[i for e in out if (i := _entry_id(e)) is not None],
        summarized=cut,
        kept=len(branch) - cut,
        reserialized=len(out),
    )


# --- the check ----------------------------------------------------------------------------------------------


def verify(candidate: bytes, plan: Plan, *, strict_structure: bool) -> Transcript:
    """Load ``candidate`` with our reader (pi's loader, reproduced) and require the plan's context.

    ``strict_structure``: the candidate is entirely ours (a successor), so it must parse without any problem a
    loader would stumble on; an append candidate keeps whatever the agent's earlier lines had.
    """
    # One copy of each kept entry, not two; the lines off the branch stay bytes (``lean``).
    loaded = parse_transcript(candidate, reuse=plan.reuse, lean=True)
    if not loaded.usable or loaded.session_id != plan.session_id:
        raise PlanError("check failed: the result has no valid session header")
    if strict_structure:
        bad = [p for p in loaded.problems if p.kind in STRUCTURE_KINDS]
        if bad:
            raise PlanError(f"check failed: {bad[0].kind} at line {bad[0].line}: {bad[0].message}")
    if loaded.leaf_id != plan.leaf_id:
        raise PlanError(f"check failed: leaf is {loaded.leaf_id!r}, expected {plan.leaf_id!r}")
    context = context_from_path(loaded.branch())
    if context.messages != plan.expected:
        at = next(
            (i for i, (a, b) in enumerate(zip(context.messages, plan.expected, strict=False)) if a != b),
            min(len(context.messages), len(plan.expected)),
        )
        raise PlanError(
            f"check failed: context differs at message {at} "
            f"({len(context.messages)} messages, expected {len(plan.expected)})"
        )
    if context.thinking_level != plan.thinking_level:
        raise PlanError("check failed: thinking level changed")
    new_problems = _pairing(loaded) - plan.allowed_pairing
    if new_problems:
        kind, message = sorted(new_problems)[0]
        raise PlanError(f"check failed: {kind}: {message}")
    return loaded
