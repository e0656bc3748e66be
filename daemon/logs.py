"""Log output for the ``compactd`` process: one line per event, journald-aware, secrets scrubbed.

Only the entry point calls :func:`configure_logging`; library modules use ``logging.getLogger(__name__)``.
Under systemd (``JOURNAL_STREAM`` naming our stderr) lines carry a ``<N>`` syslog priority prefix, which
journald strips and stores (``journalctl -p warning`` works), and no timestamp, since the journal adds its
own (engineering.md §3.4). Elsewhere lines start with a UTC timestamp.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from typing import TextIO

__all__ = [
    "LOG_LEVELS",
    "LineFormatter",
    "add_secret",
    "clear_secrets",
    "configure_logging",
    "scrub",
]

# Accepted by --log-level; the order is the order they are listed in error messages.
LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")

# Shorter values cannot be real API keys, and scrubbing them would shred every line ("ab" → "***").
MIN_SECRET_CHARS = 4
SECRET_MASK = "***"

# These libraries log every HTTP request at INFO; one line per summarizer call is noise unless debugging.
_CHATTY_LOGGERS = ("httpx", "httpcore")

_secrets: set[str] = set()
_secret_pattern: re.Pattern[str] | None = None
_secrets_lock = threading.Lock()


def add_secret(value: str) -> None:
    """Register a string (an API key, a token) that must never appear in log output."""
    global _secret_pattern
    if len(value) < MIN_SECRET_CHARS:
        return
    with _secrets_lock:
        _secrets.add(value)
        # Longest first, so a secret containing another is masked whole.
        ordered = sorted(_secrets, key=len, reverse=True)
        _secret_pattern = re.compile("|".join(re.escape(s) for s in ordered))


def clear_secrets() -> None:
    global _secret_pattern
    with _secrets_lock:
        _secrets.clear()
        _secret_pattern = None


def scrub(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    pattern = _secret_pattern
    return text if pattern is None else pattern.sub(SECRET_MASK, text)


def _syslog_priority(levelno: int) -> int:
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


def _one_line(text: str) -> str:
    # journald splits on "\n"; "\r" would make a terminal overwrite the line.
    return text.replace("\r", "\\r").replace("\n", "\\n")


class LineFormatter(logging.Formatter):
    """``<N>LEVEL logger: msg`` for journald, else ``2026-11-30T12:00:00.123Z LEVEL logger: msg``.

    Tracebacks and stack info are appended to the message and the whole event is escaped onto one line, then
    scrubbed of secrets last, so a key inside an exception's text is masked too.
    """

    def __init__(self, *, journal: bool) -> None:
        super().__init__()
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info:
            # Not cached on the record: another handler may format it differently.
            text = f"{text}\n{self.formatException(record.exc_info)}"
        elif record.exc_text:
            text = f"{text}\n{record.exc_text}"
        if record.stack_info:
            text = f"{text}\n{self.formatStack(record.stack_info)}"
        body = f"{record.levelname} {record.name}: {_one_line(text)}"
        if self.journal:
            line = f"<{_syslog_priority(record.levelno)}>{body}"
        else:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            line = f"{stamp}.{int(record.msecs):03d}Z {body}"
        return scrub(line)


class _CompactdHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler we installed, so a second configure_logging replaces it and leaves others alone."""


def _is_journal_stream(stream: TextIO, env: Mapping[str, str]) -> bool:
    """True when ``JOURNAL_STREAM`` describes ``stream`` (systemd.exec: compare device and inode).

    A child started from a unit inherits the variable with its stderr redirected elsewhere; it must then log
    timestamps. A stream without a descriptor cannot be checked, so the variable is trusted.
    """
    value = env.get("JOURNAL_STREAM", "")
    if not value:
        return False
    try:
        dev_text, ino_text = value.split(":", 1)
        dev, ino = int(dev_text), int(ino_text)
    except ValueError:
        return False
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return True
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def configure_logging(
    level: str = "info", *, env: Mapping[str, str] | None = None, stream: TextIO | None = None
) -> None:
    """Install compactd's one handler on the root logger (stderr unless ``stream`` is given)."""
    name = level.strip().lower()
    if name not in LOG_LEVELS:
        raise ValueError(f"invalid log level {level!r}; valid levels: {', '.join(LOG_LEVELS)}")
    env = os.environ if env is None else env
    out: TextIO = sys.stderr if stream is None else stream
    handler = _CompactdHandler(out)
    handler.setFormatter(LineFormatter(journal=_is_journal_stream(out, env)))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _CompactdHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    levelno = logging.getLevelNamesMapping()[name.upper()]
    root.setLevel(levelno)
    for chatty in _CHATTY_LOGGERS:
        logging.getLogger(chatty).setLevel(logging.NOTSET if levelno <= logging.DEBUG else logging.WARNING)
