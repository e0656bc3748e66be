"""Files the summarized span read and modified, as pi records them (design.md §6.12).

pi collects the ``path`` argument of ``read``/``write``/``edit`` tool calls, lists read-only files and
modified files (edited ∪ written) sorted, and carries the previous compaction's lists forward unless an
extension (``fromHook``) made that compaction, whose ``details`` may mean something else. We do the same, so a
compaction we write carries the same ``details`` pi's own would, and a session compacted many times still
knows every file it touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from compactd.core.messages import TOOL_CALL_BLOCK_TYPES, Message, blocks_of, role_of
from compactd.datarecord import datarecord

__all__ = ["FileOps", "file_operations"]

# pi's tool names, and the Claude-Code-style names other harnesses log (compared case-insensitively).
READ_TOOLS = frozenset({"read", "read_file"})
WRITE_TOOLS = frozenset({"write", "write_file"})
EDIT_TOOLS = frozenset({"edit", "edit_file", "multiedit", "multi_edit", "str_replace_based_edit_tool"})
PATH_KEYS = ("path", "file_path")


@datarecord(frozen=True, slots=True)
class FileOps:
    """The files the summarized span read and modified, as pi's compaction details list them."""

    read: list[str]  # read and never modified, sorted
    modified: list[str]  # edited or written, sorted

    def details(self) -> dict[str, list[str]]:
        """The compaction entry's ``details`` (pi's ``CompactionDetails``)."""
        return {"readFiles": list(self.read), "modifiedFiles": list(self.modified)}


def _call_path(arguments: Any) -> str | None:
    if not isinstance(arguments, dict):
        return None
    for key in PATH_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _previous_lists(previous: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """``readFiles``/``modifiedFiles`` from a previous compaction entry or its bare ``details``.

    Given an entry (it has ``details`` or ``type: compaction``), its ``fromHook`` decides; a bare details
    dict is trusted unless it carries a truthy ``fromHook`` itself.
    """
    if not isinstance(previous, dict) or previous.get("fromHook"):
        return [], []
    details = (
        previous.get("details")
        if ("details" in previous or previous.get("type") == "compaction")
        else previous
    )
    if not isinstance(details, dict):
        return [], []

    def strings(key: str) -> list[str]:
        value = details.get(key)
        return [v for v in value if isinstance(v, str) and v] if isinstance(value, list) else []

    return strings("readFiles"), strings("modifiedFiles")


def file_operations(messages: Iterable[Message], previous_details: dict[str, Any] | None = None) -> FileOps:
    """Read-only and modified files of ``messages``, cumulative with the previous compaction's lists.

    As in pi, the previous read files join the read set and the previous modified files the edited set, so a
    file read before and edited now is listed as modified only.
    """
    read_prev, modified_prev = _previous_lists(previous_details)
    read: set[str] = set(read_prev)
    modified: set[str] = set(modified_prev)
    for message in messages:
        if role_of(message) != "assistant":
            continue
        for block in blocks_of(message):
            if block.get("type") not in TOOL_CALL_BLOCK_TYPES:
                continue
            name = block.get("name")
            path = _call_path(block.get("arguments"))
            if not isinstance(name, str) or path is None:
                continue
            lowered = name.lower()
            if lowered in READ_TOOLS:
                read.add(path)
            elif lowered in WRITE_TOOLS or lowered in EDIT_TOOLS:
                modified.add(path)
    return FileOps(read=sorted(read - modified, key=_js_order), modified=sorted(modified, key=_js_order))


def _js_order(text: str) -> bytes:
    """JavaScript's default sort compares UTF-16 code units; UTF-16-BE bytes compare the same way."""
    return text.encode("utf-16-be", "surrogatepass")
