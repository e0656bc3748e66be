"""Every timestamp compactd writes or reads, in one place: each format is named after who reads it.

- :func:`js_iso`: JavaScript's ``Date.toISOString()`` (UTC, milliseconds, ``Z``), which pi and OpenClaw write in
  transcript entries and lock files and parse back;
- :func:`archive_stamp` / :func:`parse_archive_stamp`: OpenClaw's archive-name form of it, ``:`` as ``-``;
- :func:`iso_seconds`: ``status.json`` and the endpoint-speed file, to the second (humans read them);
- :func:`local_iso_ms`: the local time with its offset, for what a user reads in their own memory files;
- :func:`parse_iso`: any ISO 8601 back to epoch seconds, a naive time taken as UTC or local as its writer meant.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from compactd.patterns import lazy_pattern

__all__ = [
    "archive_stamp",
    "iso_seconds",
    "js_iso",
    "local_iso_ms",
    "parse_archive_stamp",
    "parse_iso",
]

_ARCHIVE_STAMP = lazy_pattern(r"(\d{4}-\d{2}-\d{2})T(\d{2})-(\d{2})-(\d{2})\.(\d{3})Z")


def _utc(moment: float | datetime | None) -> datetime:
    if moment is None:
        return datetime.now(UTC)
    if isinstance(moment, datetime):
        return moment.astimezone(UTC)
    return datetime.fromtimestamp(moment, UTC)


def js_iso(moment: float | datetime | None = None) -> str:
    """``2024-03-05T12:30:00.123Z`` for an epoch, a datetime (a naive one is local) or now."""
    when = _utc(moment)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def archive_stamp(moment: float) -> str:
    """OpenClaw's archive timestamp: :func:`js_iso` with ``:`` replaced by ``-`` (valid in every file name)."""
    return js_iso(moment).replace(":", "-")


def parse_archive_stamp(text: str) -> float | None:
    """The epoch seconds of the first :func:`archive_stamp` in ``text``; None when there is none."""
    match = _ARCHIVE_STAMP().search(text)
    if match is None:
        return None
    day, hours, minutes, seconds, millis = match.groups()
    try:
        return datetime.fromisoformat(f"{day}T{hours}:{minutes}:{seconds}.{millis}+00:00").timestamp()
    except ValueError:
        return None


def iso_seconds(moment: float | datetime | None = None, *, zulu: bool = False) -> str:
    """``2024-03-05T12:30:00+00:00`` (or ``...Z`` with ``zulu``), to the second, UTC."""
    text = _utc(moment).isoformat(timespec="seconds")
    return text.replace("+00:00", "Z") if zulu else text


def local_iso_ms(moment: datetime) -> str:
    """``2024-03-05T13:30:00.000+01:00``: local time (a naive datetime is local already), with the offset."""
    aware = moment if moment.tzinfo is not None else moment.astimezone()
    return aware.isoformat(timespec="milliseconds")


def parse_iso(text: object, *, naive: Literal["utc", "local"] = "utc") -> float | None:
    """Epoch seconds of an ISO 8601 string; None for anything else. A time without an offset is UTC
    (what compactd writes) or, with ``naive="local"``, local time as JavaScript's ``Date.parse`` reads it."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None and naive == "utc":
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
