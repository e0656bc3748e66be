"""Append mode: pi's own way of committing a compaction (and OpenClaw's way of committing a pruning).

Our lines go in one ``O_APPEND`` write, chained from the current leaf, then ``fsync``. Then we check where
they landed: if an agent's line got in between our read and our write, our compaction hangs from the old leaf
and the agent's line is not on its branch; a corrected plan (fresh ids) is appended from the agent's newest
line, so the last line of the file leads to a branch holding every agent line. When no correction can be
chained, or the writer races every one, a leaf pointer to that line does it instead. An agent that appends
*after* our lines from its in-memory leaf bypasses our compaction: that is append mode's known limit (rotate
mode does not have it).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping

from compactd.commit.atomic import (
    Abandon,
    FileSnapshot,
    Written,
    crash_point,
    open_snapshot,
    os_reason,
    pread_all,
)
from compactd.commit.notes import entry_note
from compactd.commit.request import CommitRequest
from compactd.commit.successor import (
    SLIPPED_LINES,
    Entry,
    PlanError,
    build_append,
    dumps_entry,
    fresh_id,
    leaf_pointer_entry,
    leaf_to_repoint,
    newest_tip,
    verify,
)
from compactd.core.reader import parse_line, parse_transcript

__all__ = ["append_commit"]

log = logging.getLogger(__name__)

# A writer that keeps slipping lines between our read and our write gets this many corrections; then the leaf
# is pointed at the agent's newest line instead (our compaction bypassed), in at most this many more tries.
MAX_CORRECTIONS = 8
MAX_POINTERS = 8
# A torn last line in a file being written is usually a write in progress: wait this long for it to complete.
TORN_WAIT_SECONDS = 1.0
TORN_POLL_SECONDS = 0.01


def _complete_snapshot(path: str) -> FileSnapshot:
    """A snapshot ending with a complete line (waiting out a line being written); Abandon if it never does."""
    deadline = time.monotonic() + TORN_WAIT_SECONDS
    while True:
        snap = open_snapshot(path)
        if not snap.torn:
            return snap
        snap.close()
        if time.monotonic() >= deadline:
            raise Abandon("torn last line: a writer may be in the middle of a line")
        time.sleep(TORN_POLL_SECONDS)


def _append_once(fd: int, data: bytes, before: os.stat_result) -> int:
    """One ``O_APPEND`` write of ``data``; returns the offset it landed at.

    A short write (the disk filled mid-line) would leave a torn line that swallows the agent's next append: we
    remove our own partial bytes if nothing was appended after them (restoring the mtime ``before`` had),
    else seal them with a newline.
    """
    try:
        written = os.write(fd, data)
    except OSError as exc:
        raise Abandon(os_reason(exc)) from None
    end = os.lseek(fd, 0, os.SEEK_CUR)
    landed = end - written
    if written == len(data):
        return landed
    try:
        if os.fstat(fd).st_size == end:
            os.ftruncate(fd, landed)  # only our own partial bytes are removed
            os.utime(fd, ns=(before.st_atime_ns, before.st_mtime_ns))
        else:
            os.write(fd, b"\n")
    except OSError as exc:
        log.error("cannot undo a short append: %s", os_reason(exc))
    raise Abandon(f"short write ({written} of {len(data)} bytes): the disk may be full")


def append_commit(request: CommitRequest) -> Written:
    path, journal = request.path, request.journal
    snap = _complete_snapshot(path)
    try:
        transcript = request.transcript(snap)

        def note(entry_id: str) -> str:
            return entry_note(entry_id)

        plan = build_append(
            transcript, *request.entries, snapshot_leaf_id=request.snapshot_leaf_id, note_for=note
        )
        loaded = verify(snap.data + plan.data, plan, strict_structure=False)
        tx = journal.intent(
            "append", path, dev=snap.st.st_dev, inode=snap.st.st_ino, size=snap.cut, ids=plan.new_ids
        )
        with request.abandoning(tx):
            crash_point("append_after_intent")
            outcome = _write(
                request,
                snap,
                plan.data,
                plan.new_ids,
                plan.leaf_id,
                tx,
                note,
                [i for e in transcript.branch() if isinstance(i := e.get("id"), str)],
            )
        journal.try_done(tx, "committed", corrections=outcome.corrections)
        crash_point("append_after_done")
        if outcome.corrections == 0 and outcome.bytes_after == snap.cut + len(plan.data):
            outcome.successor, outcome.inode = loaded, snap.st.st_ino
        return outcome
    finally:
        snap.close()


def _write(
    request: CommitRequest,
    snap: FileSnapshot,
    data: bytes,
    new_ids: list[str],
    leaf_id: str | None,
    tx: str,
    note: Callable[[str], str],
    branch_ids: list[str],
) -> Written:
    path = request.path
    compaction, post, replacements = request.entries
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Abandon("file deleted mid-commit") from None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (snap.st.st_dev, snap.st.st_ino):
            raise Abandon("file replaced mid-commit")
        landed = _append_once(fd, data, st)
        crash_point("append_after_write")
        os.fsync(fd)
        crash_point("append_after_fsync")
        if os.pread(fd, len(data), landed) != data:
            log.error("append verification: our bytes are not where the kernel put them path=%s", path)
        base = snap.cut
        ours = set(new_ids)
        corrections = pointers = 0
        pointer: str | None = None
        while landed != base:
            # An agent's line got in between: chain a corrected plan from its newest line. When that is not
            # possible (or the writer kept racing us), point the leaf at that line instead: pi loads the branch
            # of the file's last line, and our last write must not cut the agent's lines off it.
            correction = None
            if pointers == 0 and corrections < MAX_CORRECTIONS:
                if replacements:
                    correction = _full_correction(
                        fd, base, ours, compaction, post, replacements, note, branch_ids
                    )
                else:
                    correction = _quick_correction(fd, base, ours, compaction, post, branch_ids)
            if correction is not None:
                corrections += 1
                what = "a corrected compaction"
            elif pointers < MAX_POINTERS:
                correction = _leaf_pointer(fd, base, ours, branch_ids)
                if correction is None:
                    break
                pointers += 1
                pointer = correction[2]
                what = "a leaf pointer to the agent's newest line (our compaction is bypassed)"
            else:
                log.error(
                    "append: the writer kept slipping lines in; gave up after %d corrections and %d leaf "
                    "pointers: the last line may not lead to the agent's newest line path=%s",
                    corrections,
                    pointers,
                    path,
                )
                break
            plan_data, plan_ids, plan_leaf, base = correction
            request.journal.progress(tx, ids=plan_ids)
            ours.update(plan_ids)
            crash_point("append_before_correction")
            landed = _append_once(fd, plan_data, st)
            os.fsync(fd)
            crash_point("append_after_correction")
            leaf_id = plan_leaf
            log.warning("append: an agent line got in between; appended %s path=%s", what, path)
        if corrections == 0 and pointers == 0:
            # pi -c must not think this session was just used.
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    return Written(leaf_id=leaf_id, bytes_after=size, corrections=corrections, leaf_pointer=pointer)


Correction = tuple[bytes, list[str], str | None, int]


def _region(fd: int, base: int) -> tuple[list[Entry], int]:
    """The entries in the complete lines after ``base``, and the end of those lines."""
    size = os.fstat(fd).st_size
    chunk = pread_all(fd, base, size - base)
    end = chunk.rfind(b"\n") + 1
    entries: list[Entry] = []
    for raw in chunk[:end].split(b"\n"):
        if raw.strip():
            value, _ = parse_line(raw)
            if isinstance(value, dict):
                entries.append(value)
    return entries, base + end


def _branch_index(branch_ids: list[str]) -> dict[str, Entry]:
    """Stub entries (id and parent) for the branch planned on, so depths count from the root."""
    return {
        entry_id: {"id": entry_id, "parentId": branch_ids[n - 1] if n else None}
        for n, entry_id in enumerate(branch_ids)
    }


def _join(entry: Entry, agent: Mapping[str, Entry]) -> tuple[object, list[str]]:
    """Where ``entry``'s chain of agent lines joins the rest of the tree, and that chain (newest first)."""
    chain: list[str] = []
    current: Entry | None = entry
    join: object = None
    while current is not None:
        chain.append(str(current["id"]))
        join = current.get("parentId")
        current = agent.get(join) if isinstance(join, str) and join not in chain else None
    return join, chain


def _quick_correction(
    fd: int,
    base: int,
    ours: set[str],
    compaction: Entry | None,
    post: Entry | None,
    branch_ids: list[str],
) -> Correction | None:
    """A compaction and post message chained from the agent's newest line, from the new lines alone.

    Parsing only what was appended keeps each round short, so a writer that pauses at all lets it land.
    ``branch_ids`` (the branch we planned on) is extended in place with the agent's chain.
    """
    if compaction is None:
        return None
    entries, end = _region(fd, base)
    agent = {i: e for e in entries if isinstance(i := e.get("id"), str) and i not in ours}
    if not agent:
        return None
    first_kept = compaction.get("firstKeptEntryId")
    position = {entry_id: n for n, entry_id in enumerate(branch_ids)}
    # Only chains that join our branch at or after the cut point compete; a stub index of the branch lets
    # their depth count from the root (see newest_tip).
    parents = {e.get("parentId") for e in agent.values()}
    joining: list[Entry] = []
    for tip_id, entry in agent.items():
        if tip_id in parents:
            continue
        join, chain = _join(entry, agent)
        if join in position and first_kept in position and position[first_kept] <= position[join]:
            joining.extend(agent[i] for i in reversed(chain))
    if not joining:
        log.warning("append: an agent line joined the tree away from our cut point; not correcting")
        return None
    index = _branch_index(branch_ids)
    index.update(agent)
    tip = newest_tip(joining, index, anchor=branch_ids[-1] if branch_ids else None)
    if tip is None or tip not in agent:
        # Every agent line forks off below the tip we planned on, with a shorter chain: our lines already
        # hang from the agent's newest line.
        log.warning("append: an agent line forked off our branch below its leaf; kept the longer branch")
        return None
    newest = agent[tip]
    join, chain = _join(newest, agent)
    assert isinstance(join, str)
    del branch_ids[branch_ids.index(join) + 1 :]
    branch_ids.extend(reversed(chain))
    taken = set(branch_ids) | ours | set(agent)
    new_compaction = dict(compaction)
    new_compaction["id"] = fresh_id(taken)
    taken.add(new_compaction["id"])
    new_compaction["parentId"] = newest["id"]
    lines = [new_compaction]
    leaf: str = new_compaction["id"]
    if post is not None:
        new_post = dict(post)
        new_post["id"] = fresh_id(taken)
        new_post["parentId"] = leaf
        lines.append(new_post)
        leaf = new_post["id"]
    return b"".join(dumps_entry(e) + b"\n" for e in lines), [str(e["id"]) for e in lines], leaf, end


def _leaf_pointer(fd: int, base: int, ours: set[str], branch_ids: list[str]) -> Correction | None:
    """A leaf pointer to the agent's newest line after ``base`` when the file's last line does not lead to it.

    The newest line is recovery's (see :func:`leaf_to_repoint`): the tip of the longest chain from the root,
    ties to the branch we last chained from (``branch_ids``, which is set in place to the branch pointed at).
    """
    entries, end = _region(fd, base)
    agent = [e for e in entries if isinstance(i := e.get("id"), str) and i not in ours]
    index = _branch_index(branch_ids)
    index.update((i, e) for e in entries if isinstance(i := e.get("id"), str))
    anchor = branch_ids[-1] if branch_ids else None
    target = leaf_to_repoint(agent, entries[-1] if entries else None, index, anchor)
    if target is None:
        return None
    chain: list[str] = []
    current: object = target
    while isinstance(current, str) and current in index and current not in chain:
        chain.append(current)
        current = index[current].get("parentId")
    branch_ids[:] = reversed(chain)
    entry = leaf_pointer_entry(fresh_id(set(index) | ours), target, reason=SLIPPED_LINES)
    return dumps_entry(entry) + b"\n", [str(entry["id"])], str(entry["id"]), end


def _full_correction(
    fd: int,
    base: int,
    ours: set[str],
    compaction: Entry | None,
    post: Entry | None,
    replacements: Mapping[str, Entry],
    note: Callable[[str], str],
    branch_ids: list[str],
) -> Correction | None:
    """A whole new plan (pruning branch included) from the agent's newest line, re-reading the file.

    ``branch_ids`` (the branch we planned on) is replaced in place by the branch of the agent's newest line.
    """
    current = pread_all(fd, 0, os.fstat(fd).st_size)
    current = current[: current.rfind(b"\n") + 1]
    transcript = parse_transcript(current)
    agent = [
        e
        for e, (begin, _) in zip(transcript.entries, transcript.spans, strict=True)
        if begin >= base and e.get("id") not in ours and isinstance(e.get("id"), str)
    ]
    if not agent:
        return None
    anchor = branch_ids[-1] if branch_ids else None
    tip = newest_tip(agent, transcript.by_id(), anchor=anchor)
    if tip is None or tip == anchor:
        log.warning("append: an agent line forked off our branch below its leaf; kept the longer branch")
        return None
    try:
        plan = build_append(
            transcript,
            compaction,
            post,
            replacements,
            leaf_id=tip,
            taken=set(transcript.by_id()) | ours,
            note_for=note,
        )
    except PlanError as exc:
        log.warning("append: cannot correct after an agent line got in between: %s", exc.reason)
        return None
    branch_ids[:] = [i for e in transcript.branch(tip) if isinstance(i := e.get("id"), str)]
    return plan.data, plan.new_ids, plan.leaf_id, len(current)
