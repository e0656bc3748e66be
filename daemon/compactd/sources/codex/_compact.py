"""One Codex session's compaction: read the rollout once, summarize with compactd's engine, append one
``compacted`` line under Codex's writer lock (design.md §6.16). The rollout is never rewritten: every byte
Codex wrote stays, and the appended item is what ``codex resume`` rebuilds the history from."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import orjson

from compactd.core.reader import Transcript, parse_transcript
from compactd.datarecord import datarecord
from compactd.sources.codex._bridge import Bridged, compacted_line, kept_items, to_transcript_bytes
from compactd.sources.codex._files import ThreadBusy, read_whole, thread_id_of, thread_lock
from compactd.sources.codex._rollout import RolloutFigures, history_of, parse_rollout_line
from compactd.summarize.engine import CompactionEngine, EngineResult

__all__ = ["CodexReading", "Planned", "append_compacted", "plan_compaction", "read_rollout"]

log = logging.getLogger(__name__)


@datarecord(slots=True)
class CodexReading:
    """One whole reading of a rollout: its bytes' length, the figures, the history and the pi view of it."""

    path: str
    size: int
    ends_with_newline: bool
    figures: RolloutFigures
    history: list[dict[str, Any]]
    refusal: str | None
    bridged: Bridged
    transcript: Transcript


def read_rollout(path: str) -> CodexReading:
    data = read_whole(path)
    lines = [
        parsed for raw in data.split(b"\n") if raw.strip() and (parsed := parse_rollout_line(raw)) is not None
    ]
    figures = RolloutFigures()
    for line in lines:
        figures.apply(line)
    history, refusal = history_of(lines)
    if figures.unwritable and not _writable(history):
        # neither bridged nor written back into a compacted line: orjson raises on such an item
        refusal = refusal or "an item nested deeper than compactd writes JSON (254 levels)"
        history = []
    started = next(
        (str(line.get("timestamp")) for line in lines if isinstance(line.get("timestamp"), str)),
        "1970-01-01T00:00:00.000Z",
    )
    try:
        bridged = to_transcript_bytes(
            history,
            session_id=figures.session_id or thread_id_of(path) or "codex",
            cwd=figures.cwd,
            model=figures.model,
            started=started,
        )
    except ValueError:  # a timestamp Codex never writes
        bridged = to_transcript_bytes(
            history,
            session_id=figures.session_id or "codex",
            cwd=figures.cwd,
            model=figures.model,
            started="1970-01-01T00:00:00.000Z",
        )
    return CodexReading(
        path=path,
        size=len(data),
        ends_with_newline=data.endswith(b"\n") or not data,
        figures=figures,
        history=history,
        refusal=refusal,
        bridged=bridged,
        transcript=parse_transcript(bridged.data, check=False),
    )


def _writable(history: list[dict[str, Any]]) -> bool:
    try:
        orjson.dumps(history)
    except TypeError:
        return False
    return True


@datarecord(slots=True)
class Planned:
    """A Codex compaction planned: the engine's result, the line to append and how many items stay verbatim."""

    result: EngineResult
    line: bytes
    kept: int  # Codex items kept verbatim after the summary


async def plan_compaction(
    reading: CodexReading, engine: CompactionEngine, *, workspace: Path | None
) -> Planned | None:
    """The engine on the reading; None when there is nothing before the cut to summarize."""
    result = await engine.compact(reading.transcript, workspace=workspace)
    if result is None:
        return None
    first = reading.bridged.index_of.get(result.first_kept_entry_id)
    if first is None:
        return None
    kept = kept_items(reading.history, first)
    summary = result.summary
    if result.post_message is not None and isinstance(result.post_message.get("content"), str):
        summary = summary + "\n\n" + result.post_message["content"]  # the re-injected AGENTS.md sections
    line = compacted_line(
        summary, kept, ordinal=reading.figures.next_ordinal if reading.figures.lines else None
    )
    return Planned(result, line, len(kept))


def append_compacted(home: str, reading: CodexReading, line: bytes) -> int:
    """Append ``line`` to the rollout read in ``reading`` while holding Codex's writer lock; the file must be
    exactly as read (same size, whole last line), else nothing is written. Returns the new size."""
    thread = reading.figures.session_id or thread_id_of(reading.path)
    if thread is None:
        raise ThreadBusy("the rollout names no thread id")
    if reading.path.endswith(".zst"):
        raise ThreadBusy("a compressed rollout is read, never written")
    with thread_lock(home, thread):
        fd = os.open(reading.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size != reading.size or not reading.ends_with_newline:
                raise ThreadBusy(f"the rollout changed since it was read ({reading.size} → {size} bytes)")
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(f"short append: {written} of {len(line)} bytes")
            os.fsync(fd)
            return size + written
        finally:
            os.close(fd)
