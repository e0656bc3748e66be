"""Log output for the ``compactd`` process: one line per event, journald-aware, secrets scrubbed.

Only the entry point calls :func:`configure_logging` (for every command, not only ``run``), and it prints through
:class:`ScrubbedOutput`; library modules use ``logging.getLogger(__name__)``. One scrub serves both: the
configured key and the base_url's credentials (registered by :func:`protect_config_secrets`) and any URL's
password or credential-named query value, so no command's log line or printed line carries them.
Under systemd (``JOURNAL_STREAM`` naming our stderr) lines carry a ``<N>`` syslog priority prefix, which
journald strips and stores (``journalctl -p warning`` works), and no timestamp, since the journal adds its
own (design.md §7.4). Elsewhere lines start with a UTC timestamp.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO
from urllib.parse import unquote_plus, urlsplit

from compactd.display import display_name
from compactd.summarize.redact import redact_url_secrets
from compactd.timestamps import js_iso

if TYPE_CHECKING:
    from compactd.config import Config

__all__ = [
    "LOG_LEVELS",
    "LineFormatter",
    "ScrubbedOutput",
    "add_secret",
    "add_url_secrets",
    "clear_secrets",
    "configure_logging",
    "protect_config_secrets",
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


def add_url_secrets(url: str) -> None:
    """Register what a configured URL carries that may be a credential: its userinfo and every query value.

    Every query value, not only those named like keys: an endpoint's ``?code=`` or ``?sig=`` is as secret as
    ``?api-key=``, and masking a harmless one costs nothing.
    """
    try:
        parts = urlsplit(url)
        userinfo = (parts.username, parts.password)
    except ValueError:
        return
    values = [raw.partition("=")[2] for raw in parts.query.split("&")] + [v for v in userinfo if v]
    for value in values:  # as written in the config, and decoded as a server (or an error message) has it
        add_secret(value)
        add_secret(unquote_plus(value))


def protect_config_secrets(config: Config) -> None:
    """Register the summarizer's key and its base_url's credentials; every command calls it on loading."""
    from compactd.config import ConfigError

    s = config.summarizer
    if s.base_url:
        add_url_secrets(s.base_url)
    try:
        key = s.api_key()
    except ConfigError:
        return  # unreadable key file: the command that needs the key reports it
    if key:
        add_secret(key)


def clear_secrets() -> None:
    global _secret_pattern
    with _secrets_lock:
        _secrets.clear()
        _secret_pattern = None


def scrub(text: str) -> str:
    """``text`` with every registered secret replaced by ``***`` and any URL's credentials redacted."""
    pattern = _secret_pattern
    if pattern is not None:
        text = pattern.sub(SECRET_MASK, text)
    return redact_url_secrets(text)


class ScrubbedOutput:
    """A text stream that scrubs what it is given before writing it on: the ``out`` every command prints to.

    Scrubbing is per write; every line a command prints is written whole, so no secret straddles two writes.
    Control characters but newline and tab are then written as ``\\u00XX``: summaries, paths and problem
    messages come from transcripts and models, and an ESC in them must not reach a terminal as a command (the
    escape is valid JSON too, so ``--json`` output keeps its meaning).
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        from compactd.summarize.sanitize import escape_controls

        self.stream.write(escape_controls(scrub(text)))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


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
        # journald splits on "\n", "\r" makes a terminal overwrite the line, an ESC or a bidi override in a
        # session's name would act on it: the whole event is one line of visible characters.
        body = f"{record.levelname} {record.name}: {display_name(text)}"
        if self.journal:
            line = f"<{_syslog_priority(record.levelno)}>{body}"
        else:
            line = f"{js_iso(record.created)} {body}"
        return scrub(line)


class _CompactdHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler we installed, so a second configure_logging replaces it and leaves others alone."""


class _CurrentStderr:
    """Whatever ``sys.stderr`` is when a line is written: ``main()`` may run in a process (a test) that swaps
    it, and a handler must never keep writing to a stream that was closed since."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


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
    journal = _is_journal_stream(sys.stderr if stream is None else stream, env)
    handler = _CompactdHandler(_CurrentStderr() if stream is None else stream)
    handler.setFormatter(LineFormatter(journal=journal))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _CompactdHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    levelno = logging.getLevelNamesMapping()[name.upper()]
    root.setLevel(levelno)
    for chatty in _CHATTY_LOGGERS:
        logging.getLogger(chatty).setLevel(logging.NOTSET if levelno <= logging.DEBUG else logging.WARNING)
