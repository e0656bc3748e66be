"""Log output for the ``compactd`` process: one line per event, journald-aware, secrets scrubbed.

Only the entry point calls :func:`configure_logging` (for every command, not only ``run``), and it prints through
:class:`ScrubbedOutput`; library modules use ``logging.getLogger(__name__)``. One scrub serves both: the
configured key and the base_url's credentials (registered by :func:`protect_config_secrets`) and any URL's
password or credential-named query value, so no command's log line or printed line carries them.
Under systemd (``JOURNAL_STREAM`` naming our stderr) lines carry a ``<N>`` syslog priority prefix, which
journald strips and stores (``journalctl -p warning`` works), and no timestamp, since the journal adds its
own (design.md §7.4). Elsewhere lines start with a UTC timestamp.

Three formats (``run --log-format``): ``text`` (the line above), ``logfmt`` (``time= level= logger= msg=`` then
the event's fields) and ``json`` (one object a line). The fields come from the call itself: every ``key=%s`` in
a message's format is a field with its argument as the value, so ``log.info("committed path=%s mode=%s", ...)``
is the event "committed" with fields ``path`` and ``mode`` in every format; a field whose value is None is left
out (``reason=None`` says nothing).
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

from compactd.core.timestamps import js_iso
from compactd.display import display_name
from compactd.patterns import lazy_pattern
from compactd.summarize.secret_rules import redact_url_secrets

if TYPE_CHECKING:
    from compactd.config import Config

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "LineFormatter",
    "ScrubbedOutput",
    "add_secret",
    "add_url_secrets",
    "apply_config_level",
    "clear_secrets",
    "configure_logging",
    "event_fields",
    "protect_config_secrets",
    "scrub",
]

# Accepted by --log-level; the order is the order they are listed in error messages.
LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")

# Shorter values cannot be real API keys, and scrubbing them would shred every line ("ab" → "***").
MIN_SECRET_CHARS = 4
SECRET_MASK = "***"

LOG_FORMATS: tuple[str, ...] = ("text", "logfmt", "json")

# These libraries log at INFO what is noise unless debugging: every HTTP request to the summarizer, and every
# batch of file changes ("1 change detected", one per agent append).
_CHATTY_LOGGERS = ("httpx", "httpcore", "watchfiles")

# A printf placeholder, optionally preceded by ``key=`` (then it is a field).
_PLACEHOLDER = lazy_pattern(
    r"(?:(?<![\w.])([A-Za-z_][A-Za-z0-9_]*)=)?%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[diouxXeEfFgGcrsa%]"
)
_LITERAL_FIELD = lazy_pattern(r"(?<!\S)([A-Za-z_][A-Za-z0-9_]*)=([^\s=%]+)(?!\S)")
# The level given on the command line wins over the config's, at start and on reload.
_pinned_level = False

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
        from compactd.display import escape_controls

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


def event_fields(record: logging.LogRecord) -> tuple[str, dict[str, object]] | None:
    """(the message's prose, its fields in the order written) of a record logged with positional args: a
    ``key=%s`` takes its argument, a literal ``key=value`` word its value; with no prose left, the prose is the
    ``action``. None when the record cannot be split (a mapping, a format that does not match its args)."""
    args = record.args
    if not isinstance(args, tuple) or not isinstance(record.msg, str):
        return None
    fields: dict[str, object] = {}
    prose: list[str] = []

    def text(piece: str) -> None:
        for literal in _LITERAL_FIELD().finditer(piece):
            fields.setdefault(literal.group(1), literal.group(2))  # ``action=ready`` in the format itself
        prose.append(_LITERAL_FIELD().sub("", piece))

    index = 0
    last = 0
    fmt = record.msg
    for match in _PLACEHOLDER().finditer(fmt):
        spec = match.group(0)
        text(fmt[last : match.start()])
        last = match.end()
        if spec.endswith("%%"):
            prose.append("%")
            continue
        if "*" in spec or "%(" in spec or index >= len(args):
            return None
        value = args[index]
        index += 1
        key = match.group(1)
        placeholder = spec[len(key) + 1 :] if key else spec
        kind = placeholder[-1]
        try:
            rendered = repr(value) if kind == "r" else value if kind == "s" else placeholder % (value,)
        except (TypeError, ValueError):
            return None
        if key:
            fields[key] = value if kind in "sdi" else rendered
        else:
            prose.append(str(rendered))
    if index != len(args):
        return None
    text(fmt[last:])
    message = " ".join("".join(prose).split())
    return message or str(fields.get("action", "")), fields


def _text_message(record: logging.LogRecord) -> str:
    """The message as written, less the fields whose value is None (``reason=None`` says nothing)."""
    args = record.args
    if not isinstance(args, tuple) or not args or None not in args or not isinstance(record.msg, str):
        return record.getMessage()
    keep: list[object] = []
    pieces: list[str] = []
    last = 0
    for index, match in enumerate(_PLACEHOLDER().finditer(record.msg)):
        spec = match.group(0)
        if spec.endswith("%%") or "*" in spec or "%(" in spec or index >= len(args):
            return record.getMessage()
        value = args[index]
        if match.group(1) and value is None:
            pieces.append(record.msg[last : match.start()].rstrip(" "))
        else:
            pieces.append(record.msg[last : match.end()])
            keep.append(value)
        last = match.end()
    pieces.append(record.msg[last:])
    try:
        return "".join(pieces) % tuple(keep)
    except (TypeError, ValueError):
        return record.getMessage()


def _logfmt_value(value: object) -> str:
    text = str(value)
    if text and not any(c in text for c in ' "=\\') and display_name(text) == text:
        return text
    quoted = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + display_name(quoted) + '"'


class LineFormatter(logging.Formatter):
    """One event a line: ``text``: ``<N>LEVEL logger: msg`` for journald, else
    ``2026-11-30T12:00:00.123Z LEVEL logger: msg``; ``logfmt`` and ``json`` carry the same event as fields
    (the journald ``<N>`` prefix kept, the timestamp left to the journal).

    Tracebacks and stack info are appended to the message and the whole event is escaped onto one line, then
    scrubbed of secrets last, so a key inside an exception's text is masked too.
    """

    def __init__(self, *, journal: bool, style: str = "text") -> None:
        super().__init__()
        if style not in LOG_FORMATS:
            raise ValueError(f"invalid log format {style!r}; valid formats: {', '.join(LOG_FORMATS)}")
        self.journal = journal
        self.style = style

    def _trailer(self, record: logging.LogRecord) -> str:
        text = ""
        if record.exc_info:
            text = f"{text}\n{self.formatException(record.exc_info)}"
        elif record.exc_text:
            text = f"{text}\n{record.exc_text}"
        if record.stack_info:
            text = f"{text}\n{self.formatStack(record.stack_info)}"
        return text.lstrip("\n")

    def _structured(self, record: logging.LogRecord) -> str:
        split = event_fields(record)
        msg, fields = split if split is not None else (record.getMessage(), {})
        event: dict[str, object] = {}
        if not self.journal:
            event["time"] = js_iso(record.created)
        event.update(level=record.levelname.lower(), logger=record.name, msg=msg)
        for key, value in fields.items():
            if value is not None:
                event[key if key not in event else f"field_{key}"] = value
        trailer = self._trailer(record)
        if trailer:
            event["error"] = trailer
        if self.style == "json":
            import orjson

            body = orjson.dumps(event, default=str).decode()
        else:
            body = " ".join(f"{k}={_logfmt_value(v)}" for k, v in event.items())
        prefix = f"<{_syslog_priority(record.levelno)}>" if self.journal else ""
        return scrub(prefix + body)

    def format(self, record: logging.LogRecord) -> str:
        if self.style != "text":
            return self._structured(record)
        text = _text_message(record)
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
    level: str = "info",
    *,
    env: Mapping[str, str] | None = None,
    stream: TextIO | None = None,
    style: str = "text",
    pinned: bool = False,
) -> None:
    """Install compactd's one handler on the root logger (stderr unless ``stream`` is given), in ``style``
    (one of :data:`LOG_FORMATS`); ``pinned``: the level came from the command line, and a config reload keeps
    it (:func:`apply_config_level`)."""
    global _pinned_level
    name = level.strip().lower()
    if name not in LOG_LEVELS:
        raise ValueError(f"invalid log level {level!r}; valid levels: {', '.join(LOG_LEVELS)}")
    env = os.environ if env is None else env
    journal = _is_journal_stream(sys.stderr if stream is None else stream, env)
    handler = _CompactdHandler(_CurrentStderr() if stream is None else stream)
    handler.setFormatter(LineFormatter(journal=journal, style=style))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _CompactdHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    _pinned_level = pinned
    _set_level(name)


def apply_config_level(level: str) -> bool:
    """A reloaded config's ``log_level``, unless ``--log-level`` pinned one; True when it was applied."""
    if _pinned_level:
        return False
    name = level.strip().lower()
    if name not in LOG_LEVELS:
        return False
    _set_level(name)
    return True


def _set_level(name: str) -> None:
    root = logging.getLogger()
    levelno = logging.getLevelNamesMapping()[name.upper()]
    root.setLevel(levelno)
    for chatty in _CHATTY_LOGGERS:
        logging.getLogger(chatty).setLevel(logging.NOTSET if levelno <= logging.DEBUG else logging.WARNING)
