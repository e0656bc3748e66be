"""Helpers for the commit tests: pi sessions to commit, compaction plans, pi-side expectations, crash runs.

The plans stand in for the compaction engine's output: the cut point is a user message some turns from the end
of the current branch (never a tool result), the summary a fixed text.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from compactd.commit import CompactionEntries, atomic, commit
from compactd.commit.atomic import is_our_tmp
from compactd.core.context import entry_to_message
from compactd.core.reader import Transcript, parse_line
from compactd.reading import read_transcript

from tests.support import messages as msgs

# The test side of the commit path's seam (``compactd.commit.atomic.step_hook``): step name -> callable run at
# that step (to replace or delete the file mid-commit), and the step at which a forked child kills itself.
TEST_HOOKS: dict[str, Callable[[], None]] = {}
_crash_at: list[str | None] = [None]


def _at_step(name: str) -> None:
    if name == _crash_at[0]:
        os.kill(os.getpid(), signal.SIGKILL)
    hook = TEST_HOOKS.get(name)
    if hook is not None:
        hook()


atomic.step_hook = _at_step

POST_TYPE = "compactd.post_compaction_context"
SUMMARY = "## Decisions\n- keep going\n## Open TODOs\n- none\n## Constraints/Rules\n- none\n"
POST_TEXT = "## Red Lines\n- never push to main"
# A fixed clock for the entries' timestamps, so expected messages can be written down exactly.
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00.000Z


def iso_ms(ms: int) -> str:
    """The ISO string JavaScript's ``toISOString`` gives for epoch milliseconds ``ms``."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


# --- messages and pi sessions ------------------------------------------------------------------------------


def user(text: str, ts: int) -> dict[str, Any]:
    return msgs.user(text, ts=ts)


def assistant(text: str, ts: int, calls: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    return msgs.assistant(
        *([text] if text else []),
        *calls,
        api="anthropic-messages",
        provider="anthropic",
        model="claude-sonnet-4-5",
        usage=msgs.usage(950, input=900, output=50, cost=True),
        stop="toolUse" if calls else "stop",
        ts=ts,
    )


def tool_call(call_id: str, path: str) -> dict[str, Any]:
    return msgs.call(call_id, "read", {"path": path})


def tool_result(call_id: str, text: str, ts: int) -> dict[str, Any]:
    return msgs.tool_result(call_id, text, name="read", ts=ts)


def session_ops(turns: int = 8, *, side_branch: bool = True, result_chars: int = 600) -> list[dict[str, Any]]:
    """A pi session: model and thinking level, ``turns`` tool-using turns, a label, extension state, a session
    name, and (optionally) an abandoned side branch that forks off turn 1."""
    ops: list[dict[str, Any]] = [
        {"op": "appendModelChange", "provider": "anthropic", "modelId": "claude-sonnet-4-5"},
        {"op": "appendThinkingLevelChange", "thinkingLevel": "medium"},
    ]
    ts = BASE_MS
    fork_target: int | None = None
    for turn in range(turns):
        call_id = f"call_{turn}"
        ops.append({"op": "appendMessage", "message": user(f"turn {turn}: read src/file{turn}.py", ts)})
        user_op = len(ops) - 1
        ops.append(
            {
                "op": "appendMessage",
                "message": assistant("", ts + 1, [tool_call(call_id, f"src/file{turn}.py")]),
            }
        )
        body = (f"line {turn}: " + "x" * 60 + "\n") * max(1, result_chars // 70)
        ops.append({"op": "appendMessage", "message": tool_result(call_id, body, ts + 2)})
        ops.append({"op": "appendMessage", "message": assistant(f"file{turn} read", ts + 3)})
        if turn == 0:
            ops.append({"op": "appendLabelChange", "target": user_op, "label": "start"})
            ops.append({"op": "appendCustomEntry", "customType": "test-ext", "data": {"counter": 1}})
            ops.append({"op": "appendSessionInfo", "name": "commit test session"})
        if turn == 1:
            fork_target = len(ops) - 1
        ts += 10_000
    if side_branch and fork_target is not None:
        main_leaf = len(ops) - 1
        ops.append({"op": "branch", "target": fork_target})
        ops.append({"op": "appendMessage", "message": user("side question", ts)})
        ops.append({"op": "appendMessage", "message": assistant("side answer", ts + 1)})
        ops.append({"op": "branch", "target": main_leaf})
        ts += 10_000
        ops.append({"op": "appendMessage", "message": user("last turn after the side trip", ts)})
        ops.append({"op": "appendMessage", "message": assistant("all done", ts + 1)})
    return ops


# --- plans -------------------------------------------------------------------------------------------------


def cut_point(transcript: Transcript, keep_turns: int = 3) -> str:
    """The id of the user message ``keep_turns`` turns from the end of the current branch."""
    users = [
        e
        for e in transcript.branch()
        if e.get("type") == "message" and (e.get("message") or {}).get("role") == "user"
    ]
    return str(users[-min(keep_turns, len(users))]["id"])


def make_entries(
    path: str | os.PathLike[str],
    *,
    keep_turns: int = 3,
    first_kept: str | None = None,
    summary: str = SUMMARY,
    post: bool = True,
    replacements: dict[str, dict[str, Any]] | None = None,
    stamp_ms: int = BASE_MS + 86_400_000,
) -> CompactionEntries:
    """The entries the engine would produce for ``path`` as it is now."""
    data = Path(path).read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    from compactd.core.reader import parse_transcript

    transcript = parse_transcript(complete)
    kept = first_kept if first_kept is not None else cut_point(transcript, keep_turns)
    compaction = {
        "type": "compaction",
        "id": secrets.token_hex(4),
        "parentId": None,
        "timestamp": iso_ms(stamp_ms),
        "summary": summary,
        "firstKeptEntryId": kept,
        "tokensBefore": 123_456,
        "details": {"readFiles": ["src/file0.py"], "modifiedFiles": []},
        "fromHook": False,
    }
    post_message = (
        {
            "type": "custom_message",
            "id": secrets.token_hex(4),
            "parentId": None,
            "timestamp": iso_ms(stamp_ms + 1),
            "customType": POST_TYPE,
            "content": POST_TEXT,
            "display": False,
        }
        if post
        else None
    )
    assert transcript.leaf_id is not None
    return CompactionEntries(compaction, post_message, len(complete), transcript.leaf_id, replacements or {})


def summary_message(entries: CompactionEntries) -> dict[str, Any]:
    """What pi's buildSessionContext makes of our compaction entry (stamp from ``iso_ms``)."""
    c = entries.compaction
    return {
        "role": "compactionSummary",
        "summary": c["summary"],
        "tokensBefore": c["tokensBefore"],
        "timestamp": _ms(c["timestamp"]),
    }


def post_message(entries: CompactionEntries) -> dict[str, Any]:
    p = entries.post_message
    assert p is not None
    return {
        "role": "custom",
        "customType": p["customType"],
        "content": p["content"],
        "display": p["display"],
        "timestamp": _ms(p["timestamp"]),
    }


def _ms(iso: str) -> int:
    when = datetime.strptime(iso[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return int(when.timestamp()) * 1000 + int(iso[20:23])


def kept_messages(path: str | os.PathLike[str], first_kept: str) -> list[dict[str, Any]]:
    """The messages of the current branch from ``first_kept`` on (JSON round-tripped, like pi's output)."""
    transcript = read_transcript(path)
    branch = transcript.branch()
    ids = [e.get("id") for e in branch]
    out = [m for e in branch[ids.index(first_kept) :] if (m := entry_to_message(e)) is not None]
    result: list[dict[str, Any]] = json.loads(json.dumps(out))
    return result


def expected_after(
    path: str | os.PathLike[str], entries: CompactionEntries, mode: str
) -> list[dict[str, Any]]:
    """pi's context after the commit: summary, then post and kept (rotate) or kept and post (append)."""
    kept = kept_messages(path, entries.compaction["firstKeptEntryId"])
    post = [post_message(entries)] if entries.post_message is not None else []
    if mode == "rotate":
        return [summary_message(entries), *post, *kept]
    return [summary_message(entries), *kept, *post]


def unpaired(messages: Sequence[dict[str, Any]]) -> list[str]:
    """Tool calls without a later result and results without an earlier call, in a context."""
    open_calls: dict[str, int] = {}
    problems: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            for block in message.get("content") or []:
                if isinstance(block, dict) and block.get("type") == "toolCall":
                    open_calls[str(block.get("id"))] = index
        elif role == "toolResult":
            call = str(message.get("toolCallId"))
            if call not in open_calls:
                problems.append(f"result {call} at {index} has no call")
            open_calls.pop(call, None)
    problems.extend(f"call {call} at {index} has no result" for call, index in open_calls.items())
    return problems


# --- files -------------------------------------------------------------------------------------------------


def file_lines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for raw in Path(path).read_bytes().split(b"\n"):
        if raw.strip():
            value, _ = parse_line(raw)
            if isinstance(value, dict):
                out.append(value)
    return out


def archives_of(path: str | os.PathLike[str]) -> list[Path]:
    p = Path(path)
    return sorted(x for x in p.parent.iterdir() if x.name.startswith(p.name + ".bak."))


def temp_files(directory: str | os.PathLike[str]) -> list[Path]:
    return sorted(x for x in Path(directory).iterdir() if is_our_tmp(x.name))


def seq_of(entry: dict[str, Any]) -> int | None:
    """The number in an appender's ``"seq N"`` message, or None."""
    message = entry.get("message")
    if entry.get("type") != "message" or not isinstance(message, dict):
        return None
    content = message.get("content")
    text = (
        content[0].get("text")
        if isinstance(content, list) and content and isinstance(content[0], dict)
        else None
    )
    if isinstance(text, str) and text.startswith("seq "):
        try:
            return int(text[4:])
        except ValueError:
            return None
    return None


# --- an appender thread (a pi-like writer inside a crash child) ---------------------------------------------


class ThreadAppender:
    """Appends numbered ``message`` entries by path, one open(O_APPEND)/write/close per line, as pi does,
    chained from the file's leaf at start. Runs in a thread of the committing process (the crash child)."""

    def __init__(self, path: str, leaf_id: str | None, pause_every: int = 5, pause_s: float = 0.001) -> None:
        self.path = path
        self.parent = leaf_id
        self.pause_every = pause_every
        self.pause_s = pause_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            entry_id = secrets.token_hex(4)
            entry = {
                "type": "message",
                "id": entry_id,
                "parentId": self.parent,
                "timestamp": iso_ms(BASE_MS + seq),
                "message": user(f"seq {seq}", BASE_MS + seq),
            }
            line = json.dumps(entry, separators=(",", ":")).encode() + b"\n"
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
            self.parent = entry_id
            seq += 1
            if seq % self.pause_every == 0:
                time.sleep(self.pause_s)

    def __enter__(self) -> ThreadAppender:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def fork() -> int:
    """``os.fork`` without Python 3.12's warning about forking a process that has threads (the pi harness
    keeps reader threads): the child only commits and exits, it never touches their locks."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


@dataclass
class CrashRun:
    path: Path
    state_dir: Path
    mode: str
    point: str | None  # the crash point, or None for a random kill from the parent
    kill_after: float | None
    exit_status: int


def run_child_commit(
    path: Path,
    entries: CompactionEntries,
    *,
    mode: str,
    state_dir: Path,
    point: str | None,
    kill_after: float | None,
    with_writer: bool,
    grace_seconds: float = 0.25,
    keep_count: int = 5,
    hooks: dict[str, Callable[[], None]] | None = None,
) -> CrashRun:
    """Fork a child that commits (killing itself at the step ``point``) while a thread appends; the parent kills
    it with SIGKILL after ``kill_after`` seconds when given. Returns how the child ended."""
    leaf = entries.snapshot_leaf_id
    pid = fork()
    if pid == 0:  # pragma: no cover - the child
        code = 4
        try:
            TEST_HOOKS.update(hooks or {})
            _crash_at[0] = point
            if with_writer:
                with ThreadAppender(str(path), leaf):
                    result = commit(
                        path,
                        entries,
                        mode=mode,  # type: ignore[arg-type]
                        state_dir=state_dir,
                        idle_seconds=0,
                        force=True,
                        grace_seconds=grace_seconds,
                        archive_keep_count=keep_count,
                    )
            else:
                result = commit(
                    path,
                    entries,
                    mode=mode,  # type: ignore[arg-type]
                    state_dir=state_dir,
                    idle_seconds=0,
                    force=True,
                    grace_seconds=grace_seconds,
                    archive_keep_count=keep_count,
                )
            code = 0 if result.committed else 3
        finally:
            os._exit(code)
    if kill_after is not None:
        time.sleep(kill_after)  # the random moment of the kill is what is being tested
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return CrashRun(path, state_dir, mode, point, kill_after, status)


def iter_union_entries(path: Path) -> Iterator[dict[str, Any]]:
    """Every entry in the live file and in all its archives."""
    if path.exists():
        yield from file_lines(path)
    for archive in archives_of(path):
        yield from file_lines(archive)
