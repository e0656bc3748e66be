"""What a pruned tool result's text points to: the placeholder a pruning plan writes, and the note the commit
puts in its place, where the full text still is (the archive in rotate mode, the original entry in append mode).

Apart from the commit's modules: a plan (a dry run, ``inspect``) counts the notes' length without importing the
rewrite protocol and the successor's builder (about 4 ms).
"""

from __future__ import annotations

__all__ = ["ARCHIVE_INFIX", "FULL_TEXT_PLACEHOLDER", "archive_note", "entry_note"]

# A rotated-out transcript is named ``<name>.bak.<UTC ts>``: a name that does not end in ``.jsonl``.
ARCHIVE_INFIX = ".bak."
# A pruned tool result may carry this token; the commit replaces it with where the full text still is (the
# archive in rotate mode, the original entry id in append mode), which only the commit knows.
FULL_TEXT_PLACEHOLDER = "{compactd:full-text}"


def archive_note(archive_name: str) -> str:
    """The placeholder's text in rotate mode: the archive keeps the full text."""
    return f"full text in {archive_name}"


def entry_note(entry_id: str) -> str:
    """The placeholder's text in append mode: the original entry stays in the file, on an abandoned branch."""
    return f"full text in entry {entry_id}"
