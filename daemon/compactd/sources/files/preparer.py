"""Each appended message's share of its session's next compaction, made as the tailer reads it (issue 22).

The tailer hands the entries it read (on the event loop, where it costs a queue put) to one thread of the
daemon's own, at a lower CPU priority (the local model and the loop come first), which makes each message's
redaction verdict and identifier findings (:mod:`compactd.summarize.prepared`) and appends them to the session's
store, ``<state_dir>/prepared/<hash of the path>.jsonl``: a header line naming the format, compactd's version
and the session's path, then one line per message, keyed by its content. A compaction loads the store
(:func:`store_lines`) and merges; a message the store does not hold (read before the daemon followed the
session, edited since, dropped from a full queue) is done then, as every one is without a store.

A store is a cache: losing it, or any line of it, costs only time. It is written by this thread alone
(appends; a torn last line is skipped by the reader), never read back on the append path, and bounded by its
transcript: when the file is read in full again (after compactd's own rotation, say) and the store is more than
half the file's size, it is rewritten with only the messages the file still holds. Stores whose transcript is
gone are removed after the thread's first quiet minute and with the hourly archive retention.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from compactd import __version__
from compactd.commit.durable import write_all, write_atomic
from compactd.core.context import entry_to_message
from compactd.core.messages import Message, is_runtime_context, strip_for_llm
from compactd.reading import read_transcript

# The extraction's regexes are compiled when the thread first prepares (or a compaction loads a store): a
# daemon's start, ``once`` and the command line do not pay for them.
if TYPE_CHECKING:
    from compactd.summarize.identifiers import WordMemo

__all__ = ["PREPARED_DIR", "Preparer", "store_lines", "store_path"]

log = logging.getLogger(__name__)

PREPARED_DIR = "prepared"
# Bumped when a line's layout or what a message's share holds changes; compactd's version is checked too (an
# upgraded extractor must not merge an older one's findings).
STORE_FORMAT = 3
# Appended bytes queued and not yet prepared beyond which a batch is dropped (its messages are done at compaction
# instead): however far behind the thread is (a start after a long stop reads all that was appended meanwhile),
# the queue never holds more of the transcripts than this.
MAX_PENDING_BYTES = 64 << 20
# Words and lines whose findings the thread remembers: at most this many, and about this many bytes (lines of
# up to 512 characters are remembered too); 200,000 words took a quarter less CPU than 50,000 on the bench session
# (about 20 MB for its 120,000). Forgotten after this long without an append, so an idle daemon does not keep them.
MEMO_MAX_WORDS = 200_000
MEMO_MAX_BYTES = 48 << 20
_MEMO_ENTRY_BYTES = (
    100  # a remembered entry's own cost beyond its text: the str header, the slot, the findings
)
MEMO_IDLE_SECONDS = 300.0
# The thread's first sweep of stores whose transcript is gone waits for this long without an append.
SWEEP_AFTER_SECONDS = 60.0
# A store past this share of its transcript's size (plus the slack) is rewritten when the file is read in full.
RETAIN_SHARE = 0.5
RETAIN_SLACK_BYTES = 64 * 1024
# The thread's niceness, added to the daemon's: preparing can wait for the model and the event loop.
NICENESS = 10


def store_path(state_dir: str | os.PathLike[str], path: str) -> Path:
    digest = hashlib.blake2b(path.encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()
    return Path(state_dir) / PREPARED_DIR / f"{digest}.jsonl"


def _header(path: str) -> bytes:
    return orjson.dumps({"format": STORE_FORMAT, "version": __version__, "path": path}) + b"\n"


def _read(store: Path, limit: int = -1) -> bytes | None:
    """The store's bytes (at most ``limit``), or None; never through a symlink."""
    try:
        fd = os.open(store, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def _shown(entry: Any) -> Message | None:
    """The message an entry shows a model as a compaction's span holds it (``llm_visible``: details stripped),
    None for one it does not show."""
    message = entry_to_message(entry) if isinstance(entry, dict) else None
    if message is None or is_runtime_context(message):
        return None
    return strip_for_llm(message)


def _headed(store: Path, path: str) -> bool:
    data = _read(store, len(_header(path)))
    return data == _header(path)


def store_lines(state_dir: str | os.PathLike[str], path: str) -> Iterator[bytes]:
    """``path``'s store, a line at a time after its header (a compaction parses only its span's lines, see
    ``prepared.stored_shares``); nothing when there is none, or it is of another format, compactd version or
    path, or it cannot be read to its end (what it yielded stays valid: each line stands alone)."""
    try:
        fd = os.open(store_path(state_dir, path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    with contextlib.suppress(OSError), os.fdopen(fd, "rb") as f:
        if f.readline() != _header(path):
            return
        yield from f


class Preparer:
    """The thread and its queue. ``appended`` and ``reloaded`` are called on the event loop and only queue."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.directory = Path(state_dir) / PREPARED_DIR
        self.state_dir = state_dir
        self._queue: queue.SimpleQueue[tuple[str, str, Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pending = 0  # appended bytes queued, not yet prepared
        self._lock = threading.Lock()
        self._memo: WordMemo = {}
        self._memo_check = 10_000  # the memo's size at which its bytes are estimated next
        # Transcript path -> its store, once this thread has seen (or written) the store's header: an append to
        # it is then an open, a write and a close (no hash of the path, no header read, no mkdir).
        self._checked: dict[str, Path] = {}
        self.prepared = 0  # messages prepared and stored (for tests and the log)
        self.dropped = 0
        self.cpu_seconds = 0.0  # the threads' CPU time (each one's own clock, added up after each item)

    def start(self) -> None:
        if self._thread is None:
            self._queue = queue.SimpleQueue()  # its own: a stopped thread still finishes what it was given
            self._thread = threading.Thread(
                target=self._run, args=(self._queue,), name="compactd-prepare", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop once it has done what it was given (a line a process exit tears is skipped)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread = None

    def join(self, timeout: float | None = None) -> None:
        """Wait until everything queued so far is prepared (tests and benches)."""
        done = threading.Event()
        self._queue.put(("flush", "", done))
        done.wait(timeout)

    def appended(self, path: str, entries: list[dict[str, Any]], size: int) -> None:
        """``entries`` were appended to ``path`` (``size`` bytes of it): queued for the thread."""
        if self._thread is None or not entries:
            return
        with self._lock:
            if self._pending + size > MAX_PENDING_BYTES:
                self.dropped += len(entries)
                log.debug(
                    "session=%s %d appended entries not prepared: the queue is full", path, len(entries)
                )
                return
            self._pending += size
        self._queue.put(("append", path, (entries, size)))

    def sweep(self) -> None:
        """Remove the stores whose transcript is gone (also done after the thread's first quiet minute)."""
        if self._thread is not None:
            self._queue.put(("sweep", "", None))

    def reloaded(self, path: str, size: int) -> None:
        """``path`` was read in full (``size`` bytes): its store is rewritten if it outgrew the file."""
        if self._thread is not None:
            self._queue.put(("retain", path, size))

    # --- the thread -----------------------------------------------------------------------------------------
    def _run(self, items: queue.SimpleQueue[tuple[str, str, Any] | None]) -> None:
        with contextlib.suppress(OSError, AttributeError):  # Linux: a thread's niceness is its own
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
        clock = time.thread_time()
        swept = False  # the first sweep waits for a quiet minute: a start-up has its own work to do
        while True:
            now = time.thread_time()
            self.cpu_seconds += now - clock
            clock = now
            wait = SWEEP_AFTER_SECONDS if not swept else MEMO_IDLE_SECONDS if self._memo else None
            try:
                item = items.get(timeout=wait)
            except queue.Empty:
                if swept:
                    self._memo.clear()
                else:
                    swept = True
                    self._sweep()
                continue
            if item is None:
                return
            what, path, arg = item
            try:
                if what == "append":
                    self._append(path, arg[0])
                elif what == "retain":
                    self._retain(path, arg)
                elif what == "sweep":
                    swept = True
                    self._sweep()
                else:  # a flush: what came before it was counted at the top of the loop
                    arg.set()
            except Exception as exc:  # one session's store never stops the others'
                log.warning("session=%s prepared store not updated: %r", path, exc)
            finally:
                if what == "append":
                    with self._lock:
                        self._pending -= arg[1]

    def _lines(self, entries: Iterable[dict[str, Any]]) -> list[bytes]:
        from compactd.summarize.prepared import encode, message_key, prepare

        lines = []
        for entry in entries:
            message = _shown(entry)
            if message is None:
                continue
            key = message_key(message)
            if key is None:
                continue
            self._bound_memo()
            lines.append(encode(key, prepare(message, self._memo)))
        return lines

    def _bound_memo(self) -> None:
        """Start the memo over past ``MEMO_MAX_WORDS`` entries or (estimated from its newest 256, each time it
        has grown by 10,000) ``MEMO_MAX_BYTES``."""
        memo = self._memo
        if len(memo) > MEMO_MAX_WORDS:
            memo.clear()
        if len(memo) < self._memo_check:
            if not memo:
                self._memo_check = 10_000
            return
        self._memo_check = len(memo) + 10_000
        sample = [len(text) for text in itertools.islice(reversed(memo), 256)]
        if len(memo) * (sum(sample) / len(sample) + _MEMO_ENTRY_BYTES) > MEMO_MAX_BYTES:
            memo.clear()
            self._memo_check = 10_000

    def _append(self, path: str, entries: list[dict[str, Any]]) -> None:
        lines = self._lines(entries)
        if not lines:
            return
        known = self._checked.get(path)
        store = known if known is not None else store_path(self.state_dir, path)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(store, flags, 0o600)
        except FileNotFoundError:  # the first store, or its directory was removed
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(store, flags, 0o600)
        try:
            data = b"".join(lines)
            if os.fstat(fd).st_size == 0 or (known is None and not _headed(store, path)):
                os.ftruncate(fd, 0)  # a foreign or older store: started over
                data = _header(path) + data
            self._checked[path] = store
            write_all(fd, data)
        finally:
            os.close(fd)
        self.prepared += len(lines)

    def _retain(self, path: str, size: int) -> None:
        store = store_path(self.state_dir, path)
        try:
            stored = store.stat().st_size
        except OSError:
            return
        if stored <= size * RETAIN_SHARE + RETAIN_SLACK_BYTES:
            return
        from compactd.summarize.prepared import decode, message_key

        transcript = read_transcript(path, follow_symlinks=False)
        keys = {
            key
            for entry in transcript.entries
            if (message := _shown(entry)) is not None and (key := message_key(message)) is not None
        }
        held = kept = 0
        lines = []
        for line in store_lines(self.state_dir, path):
            got = decode(line)
            if got is None:
                continue
            held += 1
            if got[0] in keys:
                keys.discard(got[0])  # once each
                lines.append(line if line.endswith(b"\n") else line + b"\n")
                kept += 1
        write_atomic(store, _header(path) + b"".join(lines))
        log.debug("session=%s prepared store rewritten: %d of %d messages kept", path, kept, held)

    def _sweep(self) -> None:
        """Remove the stores whose transcript is gone (or that are not stores)."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            store = self.directory / name
            head = (_read(store, 1 << 16) or b"").partition(b"\n")[0]
            try:
                path = orjson.loads(head).get("path")
            except (orjson.JSONDecodeError, AttributeError):
                path = None
            if (
                not isinstance(path, str)
                or store_path(self.state_dir, path) != store
                or not os.path.exists(path)
            ):
                with contextlib.suppress(OSError):
                    os.unlink(store)
                if isinstance(path, str):
                    self._checked.pop(path, None)
