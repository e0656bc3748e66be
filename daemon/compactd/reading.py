"""A transcript file read as its agent reads it: the one read of a whole file beside the core's parser
(:func:`compactd.core.reader.parse_transcript`), which takes bytes and does no I/O."""

from __future__ import annotations

import os

from compactd.core.reader import CURRENT_VERSION, Problem, Transcript, parse_transcript

__all__ = ["read_transcript"]


def _open_nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


def read_transcript(
    path: str | os.PathLike[str], *, follow_symlinks: bool = True, lean: bool = False, checked: bool = False
) -> Transcript:
    """Read and parse a file; an unreadable file is a Transcript with an ``unreadable`` problem, not an error.

    ``follow_symlinks=False`` (the daemon's reads) refuses a file swapped for a symlink since it was found.
    ``lean``: hold only the current branch's entries as dicts (``parse_transcript``), as a compaction needs.
    ``checked``: whether a compaction may be built on it is worked out now, by the reading thread
    (``Transcript.check_now``; a lean reading would make that check on the event loop, when first asked)."""
    try:
        with open(path, "rb", opener=None if follow_symlinks else _open_nofollow) as handle:
            st = os.fstat(handle.fileno())
            data = handle.read()
    except OSError as exc:
        return Transcript(
            None, CURRENT_VERSION, [], [Problem("unreadable", None, f"{exc.strerror}: {path}")], None
        )
    transcript = parse_transcript(data, lean=lean)
    transcript.identity = (st.st_dev, st.st_ino)
    if checked:
        transcript.check_now()
    return transcript
