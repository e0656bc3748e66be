"""Before-compaction hooks: operator commands told, as JSON on stdin, that a session is about to be compacted.

Fire-and-forget: a hook that fails or overstays its timeout is a warning, never a reason not to compact. A
timed-out hook's whole process group is stopped (SIGTERM, then SIGKILL), so no grandchild outlives it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import anyio
import anyio.abc
import orjson

from compactd.config import HookConfig
from compactd.core.timestamps import local_iso_ms
from compactd.datarecord import datarecord
from compactd.summarize.redact import redact_secrets

logger = logging.getLogger("compactd.memory")

HOOK_EVENT = "before_compaction"

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


# --- hooks --------------------------------------------------------------------------------------------------

HookStatus = Literal["ok", "failed", "timeout", "error"]


@datarecord(frozen=True, slots=True)
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
        "timestamp": local_iso_ms(now if now is not None else datetime.now(UTC)),
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
