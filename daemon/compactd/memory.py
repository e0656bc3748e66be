"""The memory flush that runs before a compaction: operator hooks, and durable memories appended to a file.

Nothing here may block or break a compaction. Hooks are fire-and-forget (a failure or a timeout is a warning),
and the built-in flush turns every error, an LLM outage included, into a :class:`FlushResult` with status
``failed``. The built-in flush writes to exactly one file, ``<workspace>/memory/YYYY-MM-DD.md`` (local
date), and only ever appends to it: the workspace is the agent's home, and AGENTS.md, MEMORY.md, SOUL.md and
their kind are the agent's own (spec-openclaw §14). The confinement is enforced with directory file
descriptors and ``O_NOFOLLOW``, so a symlink swapped in after a check still cannot redirect the write; as root
the write is made as the workspace's owner (:mod:`compactd.workspace`), so their permissions apply and the file
is theirs.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import re
import signal
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
import anyio.abc
import orjson

from compactd.config import HookConfig
from compactd.summarize.llm import PROMPT_OVERHEAD_TOKENS, Completion, LLMError, estimate_prompt_tokens
from compactd.summarize.prompts import NO_REPLY, fence, is_no_reply, memory_flush_messages
from compactd.summarize.redact import redact_secrets
from compactd.summarize.serialize import (
    PART_SEPARATOR,
    SUMMARIZER_TOOL_RESULT_MAX_CHARS,
    serialize_transcript,
)
from compactd.transcript.messages import Message
from compactd.workspace import Workspace, WorkspaceChildError, run_as

logger = logging.getLogger(__name__)

__all__ = [
    "FORBIDDEN_NAMES",
    "HOOK_EVENT",
    "MEMORY_DIR_NAME",
    "FlushClient",
    "FlushResult",
    "FlushStatus",
    "HookResult",
    "HookStatus",
    "MemoryWriteRefused",
    "append_memory",
    "append_memory_as_owner",
    "before_compaction_event",
    "encode_event",
    "flush_memories",
    "flush_prompts",
    "local_date",
    "memory_file_for",
    "run_hooks",
]

HOOK_EVENT = "before_compaction"
MEMORY_DIR_NAME = "memory"
# Workspace bootstrap files the agent reads as instructions (spec §14 lists them as read-only during a flush).
# Never a write target, whatever a caller or a configuration asks; compared case-insensitively because
# case-insensitive filesystems (a mounted macOS or Windows share) alias them.
FORBIDDEN_NAMES = frozenset({"agents.md", "memory.md", "soul.md", "tools.md", "dreams.md"})
_TARGET_NAME = re.compile(r"[^./\\\x00][^/\\\x00]*\.md\Z")

# --- algorithm constants (not configurable) -----------------------------------------------------------------
# After SIGTERM a timed-out hook gets this long to exit before SIGKILL; hooks are notifications, and one that
# ignores its deadline must not hold up the compaction it announces.
HOOK_KILL_GRACE_SECONDS = 2.0
# Waiting for a killed process to be reaped; SIGKILL is immediate, so this only bounds a kernel oddity.
HOOK_REAP_SECONDS = 2.0
# How often a killed hook's process group is checked for survivors (SIGKILL takes effect within a tick).
HOOK_POLL_SECONDS = 0.01
# A hook that exited may leave a background child holding its stderr open; stop reading after this.
HOOK_STDERR_GRACE_SECONDS = 0.5
# Only the end of a hook's stderr is kept for the warning: enough to show the error, never a flood.
HOOK_STDERR_TAIL_BYTES = 2_000
# Memories are a handful of bullets; a cap keeps a rambling model from writing pages (about 4,000 chars).
FLUSH_MAX_OUTPUT_TOKENS = 1_024
# When the server still reports an overflow, the newer half of the transcript is tried, at most this often.
FLUSH_OVERFLOW_RETRIES = 2
_OMITTED_NOTE = "[... {count} earlier messages left out of this memory flush to fit the summarizer ...]"


# --- hooks --------------------------------------------------------------------------------------------------

HookStatus = Literal["ok", "failed", "timeout", "error"]


@dataclass(frozen=True, slots=True)
class HookResult:
    """One hook run: ``failed``: non-zero exit, ``timeout``: killed at its deadline, ``error``: never ran."""

    command: tuple[str, ...]
    status: HookStatus
    returncode: int | None
    duration_s: float
    stderr: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _iso(now: datetime) -> str:
    aware = now if now.tzinfo is not None else now.astimezone()
    return aware.isoformat(timespec="milliseconds")


def before_compaction_event(
    *,
    session_id: str | None,
    session_file: str | os.PathLike[str],
    tokens: int,
    context_window: int,
    flush_threshold: int,
    compact_threshold: int,
    memory_dir: str | os.PathLike[str] | None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The event every hook receives on stdin; the keys are a public interface for hook authors."""
    return {
        "event": HOOK_EVENT,
        "session_id": session_id,
        "session_file": os.fspath(session_file),
        "tokens": tokens,
        "context_window": context_window,
        "flush_threshold": flush_threshold,
        "compact_threshold": compact_threshold,
        "memory_dir": None if memory_dir is None else os.fspath(memory_dir),
        "timestamp": _iso(now if now is not None else datetime.now(UTC)),
    }


def encode_event(event: Mapping[str, Any]) -> bytes:
    """A hook's stdin: one line of JSON, newline-terminated (``jq``, ``read`` and ``json.load`` all cope)."""
    return orjson.dumps(dict(event)) + b"\n"


def _describe(command: Sequence[str]) -> str:
    return redact_secrets(" ".join(command))


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _feed(process: anyio.abc.Process, data: bytes) -> None:
    stdin = process.stdin
    if stdin is None:
        return
    try:
        await stdin.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass  # the hook exited or closed stdin without reading it: its business
    finally:
        with contextlib.suppress(anyio.BrokenResourceError, OSError):
            await stdin.aclose()


async def _drain(process: anyio.abc.Process, tail: bytearray, done: anyio.Event) -> None:
    try:
        if process.stderr is not None:
            async for chunk in process.stderr:
                tail.extend(chunk)
                del tail[:-HOOK_STDERR_TAIL_BYTES]
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    finally:
        done.set()


async def _reap(process: anyio.abc.Process) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(HOOK_REAP_SECONDS):
        await process.wait()


def _group_running(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies do not count: an orphan's reaper may be slow,
    or absent in a container, and a zombie holds nothing). False where ``/proc`` cannot be read."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return False
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def _stop(process: anyio.abc.Process, *, graceful: bool) -> None:
    """End the hook's whole process group (a ``sh -c`` hook's children too): TERM, grace, KILL, and wait
    (bounded) until none of it runs, so nothing of a timed-out hook outlives :func:`run_hooks`."""
    with anyio.CancelScope(shield=True):
        if graceful:
            _signal_group(process.pid, signal.SIGTERM)
            with anyio.move_on_after(HOOK_KILL_GRACE_SECONDS):
                await process.wait()
        # Always: children of a hook that exited on TERM may still run in its group.
        _signal_group(process.pid, signal.SIGKILL)
        await _reap(process)
        with anyio.move_on_after(HOOK_REAP_SECONDS):
            while _group_running(process.pid):
                await anyio.sleep(HOOK_POLL_SECONDS)


async def _run_hook(hook: HookConfig, payload: bytes, cwd: str | None) -> HookResult:
    command = tuple(hook.command)
    started = time.monotonic()
    try:
        # Shielded: a cancellation landing while the child starts would leave it running, unknown to us.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,  # a hook's output is not ours to interpret
                stderr=subprocess.PIPE,
                cwd=cwd,
                start_new_session=True,  # its own process group, so a timeout ends its children too
            )
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return HookResult(command, "error", None, time.monotonic() - started, error=f"cannot start: {reason}")
    tail = bytearray()
    drained = anyio.Event()
    timed_out = False
    try:
        with anyio.move_on_after(hook.timeout_seconds) as deadline:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_feed, process, payload)
                tg.start_soon(_drain, process, tail, drained)
                await process.wait()
                with anyio.move_on_after(HOOK_STDERR_GRACE_SECONDS):
                    await drained.wait()
                tg.cancel_scope.cancel()
        timed_out = deadline.cancelled_caught and process.returncode is None
        if timed_out:
            await _stop(process, graceful=True)
    except BaseException:
        await _stop(process, graceful=False)  # cancelled (shutdown): no grace period
        raise
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(HOOK_REAP_SECONDS):
            await process.aclose()
    duration = time.monotonic() - started
    stderr = tail.decode("utf-8", "replace").strip()
    if timed_out:
        error = f"timed out after {hook.timeout_seconds:g} s and was killed"
        return HookResult(command, "timeout", process.returncode, duration, stderr, error)
    code = process.returncode
    if code == 0:
        return HookResult(command, "ok", code, duration, stderr)
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
    return HookResult(command, "failed", code, duration, stderr, how)


async def run_hooks(
    hooks: Sequence[HookConfig], event: Mapping[str, Any], *, cwd: str | os.PathLike[str] | None = None
) -> list[HookResult]:
    """Run every hook concurrently with ``event`` as JSON on stdin; results in the order of ``hooks``.

    Never raises for a hook's sake (only cancellation propagates, after the hooks are killed): a failure,
    a timeout or a command that cannot start is logged as a warning and returned.
    """
    if not hooks:
        return []
    payload = encode_event(event)
    where = None if cwd is None else os.fspath(cwd)
    results: list[HookResult | None] = [None] * len(hooks)

    async def one(index: int, hook: HookConfig) -> None:
        try:
            results[index] = await _run_hook(hook, payload, where)
        except Exception as exc:  # a bug or an odd OS error in one hook must not take the others down
            results[index] = HookResult(tuple(hook.command), "error", None, 0.0, error=repr(exc))

    async with anyio.create_task_group() as tg:
        for index, hook in enumerate(hooks):
            tg.start_soon(one, index, hook)
    done = [r for r in results if r is not None]
    session = event.get("session_id")
    for result in done:
        if result.ok:
            logger.info(
                "hook done: session=%s command=%r duration=%.2fs",
                session,
                _describe(result.command),
                result.duration_s,
            )
        else:
            detail = f" stderr={redact_secrets(result.stderr[-500:])!r}" if result.stderr else ""
            logger.warning(
                "hook %s: session=%s command=%r %s%s",
                result.status,
                session,
                _describe(result.command),
                result.error,
                detail,
            )
    return done


# --- the memory file ----------------------------------------------------------------------------------------


class MemoryWriteRefused(Exception):
    """A memory write that would leave ``<workspace>/memory/<date>.md``; nothing was written."""


def local_date(now: datetime) -> str:
    """``YYYY-MM-DD`` in the machine's local time zone (a naive ``now`` is taken as local already)."""
    return now.astimezone().strftime("%Y-%m-%d")


def memory_file_for(workspace: Path, now: datetime) -> Path:
    """``<workspace>/memory/YYYY-MM-DD.md`` for the local date of ``now``."""
    return Path(workspace) / MEMORY_DIR_NAME / f"{local_date(now)}.md"


def _check_name(name: str) -> None:
    if name.casefold() in FORBIDDEN_NAMES:
        raise MemoryWriteRefused(f"refusing to write {name}: workspace bootstrap files are never touched")
    if not _TARGET_NAME.match(name):
        raise MemoryWriteRefused(f"refusing to write {name!r}: memory files are visible .md files")


def _target_name(workspace: Path, real_workspace: Path, target: Path) -> str:
    """The file name of ``target``, which must lie directly in the workspace's ``memory/`` directory."""
    if not target.is_absolute():
        target = workspace / target
    lexical = Path(os.path.normpath(target))
    relative: tuple[str, ...] | None = None
    for base in (Path(os.path.normpath(workspace.absolute())), real_workspace):
        if lexical.is_relative_to(base):
            relative = lexical.relative_to(base).parts
            break
    if relative is None:
        raise MemoryWriteRefused(f"refusing to write {target}: it is outside the workspace {real_workspace}")
    for part in relative:
        _check_forbidden(part, target)
    if len(relative) != 2 or relative[0] != MEMORY_DIR_NAME:
        raise MemoryWriteRefused(
            f"refusing to write {target}: memory writes are confined to {real_workspace / MEMORY_DIR_NAME}/"
        )
    _check_name(relative[1])
    return relative[1]


def _check_forbidden(part: str, target: Path) -> None:
    if part.casefold() in FORBIDDEN_NAMES:
        raise MemoryWriteRefused(f"refusing to write {target}: workspace bootstrap files are never touched")


def _open_dir(name: str, dir_fd: int, shown: Path) -> int:
    """Open a directory entry without following a symlink, with the reason as a refusal."""
    info = os.lstat(name, dir_fd=dir_fd)  # FileNotFoundError: the caller creates it
    if stat.S_ISLNK(info.st_mode):
        raise MemoryWriteRefused(f"refusing to write into {shown}: it is a symlink")
    if not stat.S_ISDIR(info.st_mode):
        raise MemoryWriteRefused(f"refusing to write into {shown}: it is not a directory")
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a symlink after the check
            raise MemoryWriteRefused(f"refusing to write into {shown}: it is a symlink") from None
        raise


def _check_owner(fd: int, owner: int | None, shown: Path) -> None:
    """Refuse a workspace, ``memory/`` or memory file another user owns: writing there would put this
    session's memories into that user's files (a header ``cwd`` is only a claim)."""
    if owner is None:
        return
    uid = os.fstat(fd).st_uid
    if uid != owner:
        raise MemoryWriteRefused(f"refusing to write into {shown}: owned by uid {uid}, not by uid {owner}")


def _separator(fd: int, size: int) -> bytes:
    """What goes before a new block so that it starts after exactly one blank line."""
    if size == 0:
        return b""
    end = os.pread(fd, 2, max(0, size - 2))
    if end.endswith(b"\n\n") or (size == 1 and end == b"\n"):
        return b""
    return b"\n" if end.endswith(b"\n") else b"\n\n"


def _header(now: datetime, session_id: str | None) -> str:
    """An HTML comment (invisible when rendered) saying who appended the block and when."""
    parts = [f"compactd memory flush {_iso(now)}"]
    if session_id:
        clean = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._:-]", "_", session_id))[:128].strip("-")
        parts.append(f"session {clean}")
    return f"<!-- {' '.join(parts)} -->"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def append_memory(
    workspace: Path,
    text: str,
    *,
    now: datetime,
    session_id: str | None = None,
    target: Path | None = None,
    owner: int | None = None,
) -> Path | None:
    """Append ``text`` as one block to ``<workspace>/memory/YYYY-MM-DD.md``; None when ``text`` is blank.

    The file is opened ``O_APPEND|O_CREAT`` (never truncated), the block is a header comment plus the text,
    separated from earlier content by a blank line, and it is fsynced. ``memory/`` is created with the
    workspace's permissions when missing. Raises :class:`MemoryWriteRefused` when the write would leave that
    one file (a symlinked ``memory/`` or target, a path outside ``memory/``, a bootstrap file name, a hard
    link, something that is not a regular file, or, when ``owner`` is given, a workspace, ``memory/`` or
    memory file that user does not own); OSError for a failed write.
    """
    body = text.strip("\n").rstrip()
    if not body.strip():
        return None
    workspace = Path(workspace)
    try:
        real_workspace = workspace.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise MemoryWriteRefused(f"refusing to write: workspace {workspace} does not exist ({exc})") from None
    if not real_workspace.is_dir():
        raise MemoryWriteRefused(f"refusing to write: workspace {workspace} is not a directory")
    wanted = target if target is not None else memory_file_for(workspace, now)
    name = _target_name(workspace, real_workspace, Path(wanted))
    memory_dir = real_workspace / MEMORY_DIR_NAME
    path = memory_dir / name

    ws_fd = os.open(real_workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    mem_fd = fd = -1
    try:
        _check_owner(ws_fd, owner, real_workspace)
        try:
            mem_fd = _open_dir(MEMORY_DIR_NAME, ws_fd, memory_dir)
        except FileNotFoundError:
            mode = stat.S_IMODE(os.fstat(ws_fd).st_mode) or 0o755
            try:
                os.mkdir(MEMORY_DIR_NAME, mode, dir_fd=ws_fd)
                os.fsync(ws_fd)
            except FileExistsError:
                pass  # created meanwhile; checked like any other below
            mem_fd = _open_dir(MEMORY_DIR_NAME, ws_fd, memory_dir)
        _check_owner(mem_fd, owner, memory_dir)
        try:
            existing = os.lstat(name, dir_fd=mem_fd)
        except FileNotFoundError:
            existing = None
        if existing is not None and stat.S_ISLNK(existing.st_mode):
            raise MemoryWriteRefused(f"refusing to write {path}: it is a symlink")
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise MemoryWriteRefused(f"refusing to write {path}: it is not a regular file")
        file_mode = stat.S_IMODE(os.fstat(mem_fd).st_mode) & 0o666 or 0o644
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, file_mode, dir_fd=mem_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise MemoryWriteRefused(f"refusing to write {path}: it is a symlink") from None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MemoryWriteRefused(f"refusing to write {path}: it is not a regular file")
        _check_owner(fd, owner, path)
        if info.st_nlink > 1:
            # A hard link could alias a bootstrap file; appending would edit it behind its name.
            raise MemoryWriteRefused(f"refusing to write {path}: it has {info.st_nlink} hard links")
        block = f"{_header(now, session_id)}\n{body}\n".encode()
        _write_all(fd, _separator(fd, info.st_size) + block)
        os.fsync(fd)
        if existing is None:
            os.fsync(mem_fd)  # the new directory entry
    finally:
        for descriptor in (fd, mem_fd, ws_fd):
            if descriptor >= 0:
                os.close(descriptor)
    return path


def append_memory_as_owner(
    workspace: Workspace, text: str, *, now: datetime, session_id: str | None = None
) -> Path | None:
    """:func:`append_memory` done as the workspace's owner (see :mod:`compactd.workspace`): a forked child
    with that user's identity when compactd is root, so the file is the user's and their permissions apply.
    Raises what ``append_memory`` raises; a child that fails otherwise is an OSError."""

    def job() -> dict[str, Any]:
        try:
            path = append_memory(workspace.path, text, now=now, session_id=session_id, owner=workspace.owner)
        except MemoryWriteRefused as exc:
            return {"refused": str(exc)}
        except OSError as exc:
            return {"errno": exc.errno or 0, "strerror": exc.strerror or str(exc)}
        return {"path": None if path is None else str(path)}

    try:
        reply = run_as(workspace.identity, job)
    except WorkspaceChildError as exc:
        raise OSError(errno.EIO, f"writing as the workspace owner failed: {exc}") from None
    if not isinstance(reply, dict):
        raise OSError(errno.EIO, "writing as the workspace owner failed: no answer")
    if "refused" in reply:
        raise MemoryWriteRefused(str(reply["refused"]))
    if "errno" in reply:
        raise OSError(int(reply["errno"]), str(reply["strerror"]))
    path = reply.get("path")
    return Path(path) if isinstance(path, str) else None


# --- the built-in flush -------------------------------------------------------------------------------------

FlushStatus = Literal["written", "no_reply", "failed", "skipped"]


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What the flush did; ``latency_s`` is the summarizer call's (for metrics), None without a call."""

    status: FlushStatus
    path: Path | None = None
    chars: int = 0
    error: str | None = None
    latency_s: float | None = None


class FlushClient(Protocol):
    """What the flush needs of :class:`compactd.summarize.llm.SummarizerClient`."""

    async def complete(self, system: str, user: str, *, max_tokens: int | None = None) -> Completion: ...


def flush_prompts(
    transcript_text: str, date: str, *, prompt: str | None = None, system_prompt: str | None = None
) -> tuple[str, str]:
    """(system, user) of the flush: the built-in prompts, or the operator's (``YYYY-MM-DD`` filled in, the
    NO_REPLY rule added when missing, as OpenClaw does) with the transcript fenced as data either way."""
    system, user = memory_flush_messages(transcript_text, date)
    if system_prompt and system_prompt.strip():
        system = system_prompt.strip().replace("YYYY-MM-DD", date)
    if prompt and prompt.strip():
        instructions = prompt.strip().replace("YYYY-MM-DD", date)
        if NO_REPLY not in instructions:
            instructions += f"\nIf nothing is worth keeping, answer exactly {NO_REPLY} and nothing else."
        user = "\n\n".join(
            [f"Pre-compaction memory flush for {date}.", fence("conversation", transcript_text), instructions]
        )
    return system, user


def _part_tokens(part: str) -> int:
    return estimate_prompt_tokens("", part) - PROMPT_OVERHEAD_TOKENS + 1


def _fit(parts: list[str], budget_tokens: int | None) -> tuple[list[str], int]:
    """The newest parts whose estimate fits ``budget_tokens``, and how many older parts were left out."""
    if budget_tokens is None:
        return parts, 0
    kept: list[str] = []
    used = 0
    for part in reversed(parts):
        cost = _part_tokens(part)
        if kept and used + cost > budget_tokens:
            break
        kept.append(part)
        used += cost
    kept.reverse()
    return kept, len(parts) - len(kept)


def _with_note(parts: list[str], omitted: int) -> str:
    body = PART_SEPARATOR.join(parts)
    return f"{_OMITTED_NOTE.format(count=omitted)}{PART_SEPARATOR}{body}" if omitted else body


def _transcript_budget(
    client: FlushClient, date: str, prompt: str | None, system_prompt: str | None
) -> int | None:
    context = getattr(client, "context_tokens", None)
    if not isinstance(context, int) or context <= 0:
        return None
    system, user = flush_prompts(_OMITTED_NOTE, date, prompt=prompt, system_prompt=system_prompt)
    return max(0, context - FLUSH_MAX_OUTPUT_TOKENS - estimate_prompt_tokens(system, user))


def _complete_lines(text: str) -> str:
    """A cut answer without its unfinished last line (half a bullet is worse than none)."""
    head, newline, _ = text.rpartition("\n")
    return head if newline and head.strip() else text


async def flush_memories(
    client: FlushClient | None,
    messages: Sequence[Message],
    *,
    workspace: Path | Workspace,
    session_id: str | None,
    now: datetime,
    tool_result_max_chars: int = SUMMARIZER_TOOL_RESULT_MAX_CHARS,
    redact: bool = True,
    prompt: str | None = None,
    system_prompt: str | None = None,
) -> FlushResult:
    """One summarizer call over the span about to be compacted; its answer appended to today's memory file.

    Never raises (except cancellation): a model outage, a refusal or a failed write is logged and returned as
    ``failed``, because the compaction that follows must not wait on memories. Without a client: ``skipped``.
    The span is serialized without ``toolResult.details`` or runtime-context messages and with secrets
    redacted (as is the answer before it is appended); when it does not fit the summarizer's window, its newest
    messages are sent. The answer is written as the workspace's owner (a plain path is a workspace the caller
    vouches for, written as ourselves).
    """
    if client is None:
        return FlushResult("skipped", error="no summarizer configured")
    try:
        text = serialize_transcript(messages, tool_result_max_chars=tool_result_max_chars, redact=redact)
    except Exception as exc:
        logger.warning("memory flush failed: session=%s cannot serialize the span: %r", session_id, exc)
        return FlushResult("failed", error=f"cannot serialize the span: {exc!r}")
    if not text.strip():
        return FlushResult("skipped", error="nothing to flush")
    date = local_date(now)
    parts = text.split(PART_SEPARATOR)
    budget = _transcript_budget(client, date, prompt, system_prompt)
    kept, omitted = _fit(parts, budget)
    started = time.monotonic()
    completion: Completion | None = None
    for attempt in range(FLUSH_OVERFLOW_RETRIES + 1):
        system, user = flush_prompts(
            _with_note(kept, omitted), date, prompt=prompt, system_prompt=system_prompt
        )
        try:
            completion = await client.complete(system, user, max_tokens=FLUSH_MAX_OUTPUT_TOKENS)
            break
        except LLMError as exc:
            if exc.kind == "context_overflow" and attempt < FLUSH_OVERFLOW_RETRIES and len(kept) > 1:
                dropped = math.ceil(len(kept) / 2)
                kept, omitted = kept[dropped:], omitted + dropped
                logger.info(
                    "memory flush: session=%s overflow; retrying with %d messages", session_id, len(kept)
                )
                continue
            logger.warning(
                "memory flush failed: session=%s summarizer %s: %s", session_id, exc.kind, exc.message
            )
            return FlushResult(
                "failed", error=f"{exc.kind}: {exc.message}", latency_s=time.monotonic() - started
            )
        except Exception as exc:
            logger.warning("memory flush failed: session=%s summarizer call: %r", session_id, exc)
            return FlushResult("failed", error=repr(exc), latency_s=time.monotonic() - started)
    if completion is None:  # pragma: no cover - the loop always breaks or returns
        return FlushResult("failed", error="no answer")
    latency = completion.latency_s
    answer = completion.text.strip()
    if completion.truncated:
        answer = _complete_lines(answer).rstrip()
    if not answer or is_no_reply(answer):
        logger.info("memory flush: session=%s nothing to store (NO_REPLY)", session_id)
        return FlushResult("no_reply", latency_s=latency)
    if redact:  # the memory file's one way in: whatever the model wrote, no secret is stored
        answer = redact_secrets(answer)
    where = workspace if isinstance(workspace, Workspace) else Workspace.trusted(workspace)
    try:
        path = await anyio.to_thread.run_sync(
            lambda: append_memory_as_owner(where, answer, now=now, session_id=session_id)
        )
    except (MemoryWriteRefused, OSError) as exc:
        logger.warning("memory flush failed: session=%s cannot append: %s", session_id, exc)
        return FlushResult("failed", error=str(exc), latency_s=latency)
    if path is None:
        return FlushResult("no_reply", latency_s=latency)
    logger.info("memory flush: session=%s appended %d chars to %s", session_id, len(answer), path)
    return FlushResult("written", path=path, chars=len(answer), latency_s=latency)
