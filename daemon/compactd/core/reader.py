"""Bytes → entries, as leniently as pi's own loader (``loadEntriesFromFile`` + ``migrateSessionEntries``).

pi skips every line ``JSON.parse`` rejects and requires the first parsed value to be a session header; it
migrates v1/v2 entries in memory. We do the same, never rewrite the file, and additionally report each problem a
loader would hit (with its line number) instead of staying silent about it.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import field
from typing import Any

import orjson

from compactd.core.collector import collector_paused
from compactd.core.jsjson import is_js_blank, js_to_number, js_trim_bounds, nesting
from compactd.core.jsjson import loads as js_loads
from compactd.core.messages import TOOL_CALL_BLOCK_TYPES, tool_call_id
from compactd.core.tokens import MAX_TOKENS, usage_total
from compactd.datarecord import datarecord

__all__ = [
    "BLOCKING_KINDS",
    "BOM",
    "FATAL_KINDS",
    "MAX_DEPTH",
    "Entry",
    "Scan",
    "Transcript",
    "link_key",
    "opening_bytes",
    "parse_line",
    "parse_transcript",
    "same_reading",
    "validate",
]

Entry = dict[str, Any]
CURRENT_VERSION = 3
BOM = b"\xef\xbb\xbf"
# pi's ``isValidSessionFile`` (used by ``pi -c``) parses only the first 512 bytes.
HEADER_VISIBLE_BYTES = 512
# The bytes just before the end of the last complete line kept with a reading, so that a commit can tell the file
# it opens is still the one this reading was made from (with its identity and size) without parsing it again.
EDGE_BYTES = 4096
# The deepest nesting (objects and arrays, the entry itself counting 1) compactd writes back or sends on:
# orjson serializes at most 254 levels, and a request body wraps a message in a few more.
MAX_DEPTH = 200

# Problem kinds that make the file unusable for an agent (pi would wipe it on open).
FATAL_KINDS = frozenset({"no_header", "unreadable"})
# Problem kinds that forbid building a compaction on our reading: pi keeps a line we cannot carry faithfully.
BLOCKING_KINDS = frozenset({"too_deep", "non_string_id", "message_not_object", "context_edit_invalid"})
# The kinds a lean reading's problems owed add (``_Owed``): the branch's (``_branch_problems``), the nesting's.
_OWED_KINDS = frozenset(
    {
        "first_kept_not_on_branch",
        "context_edit_invalid",
        "context_edit_target_missing",
        "orphan_tool_result",
        "missing_tool_result",
        "figure_overflow",
        "too_deep",
    }
)

_TRUE_KEY = ("bool", True)
_ABSENT: Any = object()
_UNLINKED: Any = object()


def link_key(value: Any) -> Hashable | None:
    """The key pi's ``byId`` Map files an id under and finds a ``parentId`` by; None where pi finds nothing.

    pi looks a parent up only when ``parentId`` is truthy, by SameValueZero: a string, a number (``5`` and
    ``5.0`` are one key, ``"5"`` another) or ``true``; an object or array is never equal to any other.
    """
    if isinstance(value, str):
        return value or None
    if value is True:
        return _TRUE_KEY
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        return ("number", number) if number else None
    return None


@datarecord(frozen=True, slots=True)
class Problem:
    """Something a transcript holds that pi's loader or compactd's commit has to work around (``kind``), where."""

    kind: str
    line: int | None
    message: str

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "line": self.line, "message": self.message}


def parse_line(line: bytes) -> tuple[Any, str | None]:
    """One line as ``JSON.parse`` would take it: (value, None), or (None, reason) when pi would skip it.

    orjson is strict where JavaScript is lenient in ways all handled here: invalid UTF-8 (Node decodes the
    whole file to U+FFFD first), lone surrogate escapes (valid JavaScript strings), numbers beyond the double
    range (``Infinity``) and nesting deeper than orjson's 1,024 levels (V8 has no limit).
    """
    try:
        return orjson.loads(line), None
    except orjson.JSONDecodeError as exc:
        first_error = str(exc)
    try:
        return js_loads(line.decode("utf-8", "replace")), None
    except ValueError:
        return None, first_error


# The type code of the arrays of offsets and line numbers: unsigned, whose append converts an int directly; a
# signed one's parses it as an argument (``PyArg_Parse``), 200 instructions more, three times per entry.
_OFFSETS = "Q"


class Spans(Sequence[tuple[int, int]]):
    """(start, end) byte spans in one flat ``array(_OFFSETS)``: 16 bytes per entry instead of a tuple and two ints
    (about 110), for a lean reading of a file with many entries."""

    __slots__ = ("_flat",)

    def __init__(self, flat: array[int] | None = None) -> None:
        self._flat = flat if flat is not None else array(_OFFSETS)

    def append(self, span: tuple[int, int]) -> None:
        self._flat.extend(span)

    def __len__(self) -> int:
        return len(self._flat) // 2

    def __getitem__(self, index: int) -> tuple[int, int]:  # type: ignore[override]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._flat[2 * index], self._flat[2 * index + 1]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        flat = iter(self._flat)
        return zip(flat, flat, strict=True)


class _Lean:
    """What a lean reading keeps of its entries (see ``parse_transcript``): every entry's links, the branch's
    entries (and the last one) parsed, and the other lines as bytes, parsed again only when asked for."""

    __slots__ = ("ids", "kept", "null_leaf", "parents", "raw", "raw_spans", "types")

    def __init__(self) -> None:
        self.ids: list[Any] = []
        self.parents: list[Any] = []
        self.types: list[Any] = []
        self.kept: dict[int, Entry] = {}
        self.raw: bytes = b""
        self.raw_spans: Sequence[tuple[int, int]] = ()
        self.null_leaf = False

    def parse(self, index: int) -> Entry:
        """The entry at ``index``, parsed from its line (a new dict each time, unless it is kept)."""
        kept = self.kept.get(index)
        if kept is not None:
            return kept
        start, end = self.raw_spans[index]
        value, _ = parse_line(self.raw[start:end])
        return value  # type: ignore[no-any-return]


class _Owed:
    """What a lean reading's ``problems`` lack until they are first read (``Transcript.problems``), in
    ``validate``'s order: the branch's (``_branch_problems``: its tool calls' pairing, usage figures,
    compactions and context edits, a walk of every entry) then the lines' nesting (``_depth_problems_owed``: a
    scan of every byte, ``opening_bytes``). A dry run reads neither for most sessions (those that fit) and only
    ``blocking`` for the others: the branch's walk, once made for each of its readings, was 4 % of its work.

    It holds the bytes read until the nesting is checked, and the branch's line numbers when they are the
    transcript's own (a chain read whole); the branch is the transcript's (``_branch``: entries are never
    changed once parsed), so nothing else is kept alive meanwhile."""

    __slots__ = ("data", "depth", "edits", "lines")

    def __init__(self, data: bytes, lines: Sequence[int] | None, edits: bool) -> None:
        self.data: bytes | None = data
        self.depth: list[Problem] | None = None
        self.lines = lines
        self.edits = edits  # some entry is a context edit: ``blocking`` looks at the branch's

    def branch_lines(self, transcript: Transcript) -> Sequence[int]:
        """The line number of each entry of the branch, root first."""
        if self.lines is None:
            lines, at = transcript.lines, transcript._branch_at
            assert at is not None
            self.lines = [lines[i] for i in at]
        return self.lines

    def too_deep(self, transcript: Transcript) -> list[Problem]:
        """The nesting problems, worked out once (``blocking`` may ask before ``problems``)."""
        if self.depth is None:
            assert self.data is not None
            self.depth = _depth_problems_owed(transcript, self.data)
            self.data = None
        return self.depth


@datarecord
class Transcript:
    """A parsed transcript: header, migrated entries in file order, and what a loader would stumble on.

    A lean reading (``parse_transcript(..., lean=True)``) holds parsed dicts only for the current branch:
    ``entries`` (every entry as a dict) then parses the others on first use and keeps them, so a caller that
    needs only the branch, the links (``id_at``, ``parent_at``, ``type_at``, ``id_index``) or one entry
    (``entry``, ``get``) never holds them all.

    Its ``problems`` are complete whenever they are read: a lean reading works out its branch's and its lines'
    nesting then, the first time (``_owed``), and ``_problems`` alone may lack those."""

    header: Entry | None
    version: int
    _entries: list[Entry] | None
    _problems: list[Problem]
    leaf_id: str | None
    # 1-based line number and (start, end) byte span of each entry, parallel to ``entries``.
    lines: Sequence[int] = field(default_factory=list)
    spans: Sequence[tuple[int, int]] = field(default_factory=list)
    header_span: tuple[int, int] | None = None
    header_line: int | None = None
    size: int = 0
    # The last parsed line is JSON but not an object: pi takes it as the leaf and builds an empty context.
    junk_leaf: bool = False
    # Bytes of complete lines, and the last EDGE_BYTES of them; (st_dev, st_ino) of the file read, if a file.
    complete: int = 0
    edge: bytes = field(default=b"", repr=False)
    identity: tuple[int, int] | None = None
    _by_id: dict[str, Entry] | None = field(default=None, repr=False)
    _links: dict[Hashable, Entry] | None = field(default=None, repr=False)
    # The current branch and whether its walk ended at a cycle: computed once, as the indexes above.
    _branch: tuple[list[Entry], bool] | None = field(default=None, repr=False)
    _lean: _Lean | None = field(default=None, repr=False)
    _id_index: dict[str, int] | None = field(default=None, repr=False)
    _branch_at: list[int] | None = field(default=None, repr=False)
    # A lean reading's problems not worked out yet (see ``_Owed``): most sessions' problems are never read.
    _owed: _Owed | None = field(default=None, repr=False, compare=False)

    @property
    def problems(self) -> list[Problem]:
        """What a loader would stumble on, in ``validate``'s order; other code appends its own after them."""
        owed = self._owed
        if owed is not None:
            self._problems.extend(_branch_problems(self._owed_branch(), owed.branch_lines(self)))
            self._problems.extend(owed.too_deep(self))
            self._owed = None
        return self._problems

    def has_problem(self, kind: str) -> bool:
        """Whether ``problems`` holds one of ``kind``: told without the problems owed (``_owed``) for any kind
        but those they add."""
        return any(p.kind == kind for p in (self.problems if kind in _OWED_KINDS else self._problems))

    @property
    def entries(self) -> list[Entry]:
        """Every entry, in file order (a lean reading parses the lines off its branch now, once)."""
        if self._entries is None:
            lean = self._lean
            assert lean is not None
            with collector_paused():
                self._entries = [lean.parse(i) for i in range(len(lean.ids))]
            self._lean = None
        return self._entries

    @property
    def lean(self) -> bool:
        """Entries off the branch are not held as dicts (yet)."""
        return self._lean is not None

    @property
    def count(self) -> int:
        """How many entries (as ``len(entries)``, without parsing a lean reading's)."""
        return len(self._lean.ids) if self._lean is not None else len(self.entries)

    def entry(self, index: int) -> Entry:
        """The entry at ``index``: from a lean reading, parsed from its line unless it is on the branch (a new
        dict each call then: compare entries by index, not identity)."""
        return self._lean.parse(index) if self._lean is not None else self.entries[index]

    def id_at(self, index: int) -> Any:
        """The entry's ``id`` (None when it has none)."""
        return self._lean.ids[index] if self._lean is not None else self.entries[index].get("id")

    def parent_at(self, index: int) -> Any:
        return self._lean.parents[index] if self._lean is not None else self.entries[index].get("parentId")

    def type_at(self, index: int) -> Any:
        return self._lean.types[index] if self._lean is not None else self.entries[index].get("type")

    def id_index(self) -> dict[str, int]:
        """String id → index of its last occurrence (the entry ``by_id`` maps it to)."""
        if self._id_index is None:
            if self._lean is not None:
                ids = self._lean.ids
                self._id_index = {v: i for i, v in enumerate(ids) if isinstance(v, str)}
            else:
                self._id_index = {
                    v: i for i, e in enumerate(self.entries) if isinstance(v := e.get("id"), str)
                }
        return self._id_index

    def get(self, entry_id: str) -> Entry | None:
        """``by_id().get(entry_id)`` without parsing every entry of a lean reading."""
        if self._lean is None:
            return self.by_id().get(entry_id)
        index = self.id_index().get(entry_id)
        return None if index is None else self._lean.parse(index)

    def file_bytes(self) -> bytes | None:
        """The bytes this reading was parsed from, when a lean reading holds them whole (its lines off the
        branch are most of the file), else None."""
        lean = self._lean
        return lean.raw if lean is not None and len(lean.raw) == self.size else None

    def retained_by_id(self) -> Mapping[str, Entry]:
        """The entries held as dicts by id: all of them (``by_id``), or a lean reading's branch."""
        if self._lean is None:
            return self.by_id()
        ids = self._lean.ids
        return {ids[i]: e for i, e in self._lean.kept.items() if isinstance(ids[i], str)}

    @property
    def usable(self) -> bool:
        return not any(p.kind in FATAL_KINDS for p in self._problems)  # the nesting check adds none

    @property
    def blocking(self) -> list[Problem]:
        """Why compactd must not build a compaction on this reading (empty: it may): ``problems`` of those kinds,
        in their order. Told without the branch's problems owed (``_owed``): of those only the context edits'
        replacements block, looked at alone."""
        found = [p for p in self._problems if p.kind in FATAL_KINDS or p.kind in BLOCKING_KINDS]
        owed = self._owed
        if owed is None:
            return found
        if owed.edits:
            branch = self._owed_branch()
            for entry, line in zip(branch, owed.branch_lines(self), strict=True):
                if entry.get("type") == "context_edit":
                    invalid = _edit_invalid(entry, line)
                    if invalid is not None:
                        found.append(invalid)
        found.extend(owed.too_deep(self))
        return found

    def check_now(self) -> None:
        """Make the costly check ``blocking`` owes (a lean reading's nesting, a scan of every byte) now, in the
        caller's thread: a job reads in a worker thread, and this keeps that scan off the event loop."""
        if self._owed is not None:
            self._owed.too_deep(self)

    @property
    def committable(self) -> bool:
        return not self.blocking

    @property
    def session_id(self) -> str | None:
        value = (self.header or {}).get("id")
        return value if isinstance(value, str) else None

    def by_id(self) -> dict[str, Entry]:
        """Id → entry; a repeated id maps to its last occurrence, as in pi's index."""
        if self._by_id is None:
            self._by_id = {e["id"]: e for e in self.entries if isinstance(e.get("id"), str)}
        return self._by_id

    def links(self) -> dict[Hashable, Entry]:
        """``by_id`` as pi's ``byId`` Map keys it (numbers and ``true`` too; see ``link_key``)."""
        if self._links is None:
            links: dict[Hashable, Entry] = {}
            for entry in self.entries:
                key = link_key(entry.get("id"))
                if key is not None:
                    links[key] = entry
            self._links = links
        return self._links

    @property
    def null_leaf(self) -> bool:
        """The last entry's id is ``null``: pi's leaf is then "before the first entry", an empty context."""
        if self._lean is not None:
            return self._lean.null_leaf
        return bool(self.entries) and "id" in self.entries[-1] and self.entries[-1]["id"] is None

    def leaf(self, leaf_id: str | None = None) -> Entry | None:
        if leaf_id is None and (self.junk_leaf or self.null_leaf):
            return None
        if leaf_id is None and self._lean is not None:
            branch = self.branch()
            return branch[-1] if branch else None
        target = leaf_id if leaf_id is not None else self.leaf_id
        entry = self.by_id().get(target) if target is not None else None
        if entry is None and self.entries:
            entry = self.entries[-1]  # pi falls back to the last entry when the leaf has no usable id
        return entry

    def branch(self, leaf_id: str | None = None) -> list[Entry]:
        """Root → leaf path, stopping silently at a missing parent (like pi) and at a cycle (pi would hang).

        The current branch (no ``leaf_id``) is walked once per transcript: validation, the context, the ledger
        and the budget all start from it. Callers get a copy, so one caller's edit never reaches another.
        """
        if leaf_id is None:
            if self._branch is None:
                path = self._walk(None)
                self._branch = (path, self._ends_at_cycle(path))
            return list(self._branch[0])
        return self._walk(leaf_id)

    def branch_indices(self) -> list[int]:
        """The index in ``entries`` of each entry of the current branch (``branch()``), root first."""
        if self._branch_at is None:
            at = {id(e): i for i, e in enumerate(self.entries)}
            self._branch_at = [at[id(e)] for e in self.branch()]
        return list(self._branch_at)

    def has_cycle(self) -> bool:
        """The current branch's parent links loop back on themselves (pi would hang on load)."""
        if self._branch is None:
            self.branch()
        assert self._branch is not None
        return self._branch[1]

    def _ends_at_cycle(self, path: list[Entry]) -> bool:
        # The walk stops at a missing parent or at an entry already on the path: a root whose parent still
        # resolves was reached twice.
        if not path:
            return False
        key = link_key(path[0].get("parentId"))
        return key is not None and key in self.links()

    def _owed_branch(self) -> list[Entry]:
        assert self._branch is not None  # a lean reading's, set as it is read
        return self._branch[0]

    def _walk(self, leaf_id: str | None) -> list[Entry]:
        index = self.links()
        path: list[Entry] = []
        seen: set[int] = set()
        current = self.leaf(leaf_id)
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            path.append(current)
            key = link_key(current.get("parentId"))
            current = index.get(key) if key is not None else None
        path.reverse()
        return path


def parse_transcript(
    data: bytes,
    *,
    check: bool = True,
    reuse: Mapping[str, Entry] | None = None,
    lean: bool = False,
) -> Transcript:
    """Parse a whole file's bytes. Never raises on any input (see ``_parse``).

    ``reuse``: entries already parsed (the planned transcript, when a commit checks its result): a parsed
    entry (or field of it) equal to that of its id there is replaced by that one as it is read, so the check
    of a successor does not hold a second copy of every kept entry (entries are never changed once parsed).

    ``lean`` (a version 3 file, checked): keep as dicts only the current branch's entries and the last one;
    of the others keep their links and their lines' bytes (see ``Transcript``). A compaction needs nothing
    more, and 100,000 entries off the branch (about 1.1 KB each as dicts) then cost their bytes and links.
    The reading is the same: the same problems in the same order, the same branch, the same ``entries``.

    The cyclic garbage collector is paused meanwhile: parsed entries are acyclic dicts, and letting it scan
    every one of them again at each allocation threshold costs more than the parsing itself on large files.
    """
    with collector_paused():
        if lean and check:
            transcript = _parse_lean(data, reuse)
            if transcript is not None:
                return transcript
        return _parse(data, check=check, reuse=reuse)


class Scan:
    """One pass over a file's lines as pi's loader takes them: entries are yielded, everything else recorded.

    Shared by ``parse_transcript`` (which keeps the entries) and the ledger's cold read (which keeps only a few
    fields of each), so both see exactly the same lines.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.problems: list[Problem] = []
        self.start = 0
        if data.startswith(BOM):
            # JavaScript's trim() strips a leading BOM, so pi still loads the file, but ``pi -c`` (which parses
            # the raw first line) no longer sees it as a session.
            self.problems.append(Problem("bom", 1, "UTF-8 BOM before the header: `pi -c` will not list it"))
            self.start = len(BOM)
        # pi trims the whole file (String.prototype.trim) before splitting it: the first line may start and
        # the last may end with whitespace JSON itself does not allow (U+00A0, U+2028, \v, ...).
        self.lead, self.trail = js_trim_bounds(data, self.start, len(data))
        self.header: Entry | None = None
        self.header_span: tuple[int, int] | None = None
        self.header_line: int | None = None
        self.junk_leaf = False
        self.no_header = False
        self.line_no = 0

    def entries(self) -> Iterator[tuple[Entry, int, int, int, int]]:
        """(entry, start, end, line number, index in pi's parsed array) for every entry line.

        ``line_no`` and ``junk_leaf`` are counted in locals and written back when the walk stops (or before a
        rare path reads them): two attribute writes per line fewer; nothing reads them meanwhile."""
        data, problems, loads = self.data, self.problems, orjson.loads
        line_no, junk_leaf = self.line_no, self.junk_leaf
        # One more than the lines that parse to nothing (blank, malformed): a line's index in pi's parsed array
        # (the header at 0) is its number less this, told without a count of its own per line.
        unparsed = 1
        # Each line as a memoryview slice (no copy of the file: orjson parses it in place), walked here rather
        # than by a generator of its own: one generator switch less per line.
        view, find, size, pos = memoryview(data), data.find, len(data), self.start
        try:
            while pos < size:
                begin, nl = pos, find(b"\n", pos)
                end = pos = size if nl < 0 else nl
                pos += 1
                raw = view[begin:end]
                line_no += 1
                try:
                    value: Any = loads(raw)
                except orjson.JSONDecodeError:
                    line = bytes(raw)
                    if not line.strip() or is_js_blank(line):
                        unparsed += 1
                        continue
                    value, reason = parse_line(line)
                    if reason is not None and (begin < self.lead or end > self.trail):
                        self.line_no = line_no
                        value, reason, begin, end = self._trimmed(value, reason, begin, end)
                    if reason is not None:
                        unparsed += 1
                        if end == len(data):
                            problems.append(
                                Problem(
                                    "torn_last_line",
                                    line_no,
                                    f"unterminated last line does not parse: {reason}",
                                )
                            )
                        else:
                            problems.append(Problem("malformed_line", line_no, f"skipped: {reason}"))
                        continue
                if self.header is None:
                    if not (
                        isinstance(value, dict)
                        and value.get("type") == "session"
                        and isinstance(value.get("id"), str)
                    ):
                        problems.append(
                            Problem(
                                "no_header",
                                line_no,
                                "first parsed line is not a session header; pi would wipe the file",
                            )
                        )
                        self.no_header = True
                        return
                    self.header, self.header_span, self.header_line = value, (begin, end), line_no
                    if begin - self.start + HEADER_VISIBLE_BYTES < end:
                        problems.append(
                            Problem(
                                "long_header",
                                line_no,
                                "header line exceeds 512 bytes: `pi -c` will not list it",
                            )
                        )
                    continue
                if not isinstance(value, dict):
                    problems.append(
                        Problem("malformed_line", line_no, "skipped: line is JSON but not an object")
                    )
                    junk_leaf = True
                    continue
                if value.get("type") == "session":
                    continue  # pi's duplicate-flush quirk repeats the header; loaders ignore the repeat
                junk_leaf = False
                yield value, begin, end, line_no, line_no - unparsed
        finally:
            self.line_no, self.junk_leaf = line_no, junk_leaf

    def _trimmed(self, value: Any, reason: str, begin: int, end: int) -> tuple[Any, str | None, int, int]:
        """The first or last line as pi sees it, without the file's leading or trailing whitespace."""
        start, stop = max(begin, self.lead), min(end, self.trail)
        if start >= stop:
            return value, reason, begin, end
        trimmed, trimmed_reason = parse_line(self.data[start:stop])
        if trimmed_reason is not None:
            return value, reason, begin, end
        if start > begin:
            self.problems.append(
                Problem(
                    "leading_whitespace",
                    self.line_no,
                    "the first line starts with whitespace JSON does not allow: `pi -c` will not list it",
                )
            )
        if stop < end:
            self.problems.append(
                Problem(
                    "trailing_whitespace",
                    self.line_no,
                    "the last line parses only because pi trims the file's end: pi skips it once a line "
                    "is appended",
                )
            )
        return trimmed, None, start, stop

    def finish(self) -> None:
        data = self.data
        if data and not data.endswith(b"\n") and not any(p.kind == "torn_last_line" for p in self.problems):
            self.problems.append(
                Problem(
                    "torn_last_line",
                    self.line_no,
                    "file does not end with a newline: the next append would be swallowed",
                )
            )
        if self.header is None and not self.no_header:
            self.problems.append(
                Problem("no_header", None, "empty file: no session header; pi would wipe it")
            )

    @property
    def version(self) -> int:
        """The version pi migrates the file from: ``header.version ?? 1``, compared as JavaScript compares it
        (``< 2``, ``< 3``): a string, a fraction, a huge number or NaN each say what pi makes of them."""
        version = (self.header or {}).get("version")
        if version is None:
            return 1
        if isinstance(version, int) and not isinstance(version, bool):
            return version
        number = js_to_number(version)
        if math.isnan(number) or number >= CURRENT_VERSION:
            return CURRENT_VERSION  # no comparison holds for NaN: pi migrates nothing
        return 1 if number < 2 else 2


def _parse(data: bytes, *, check: bool = True, reuse: Mapping[str, Entry] | None = None) -> Transcript:
    scan = Scan(data)
    entries: list[Entry] = []
    lines: list[int] = []
    spans: list[tuple[int, int]] = []
    positions: list[int] = []  # index of each entry in pi's parsed array (v1 firstKeptEntryIndex uses it)
    shared: set[str] = set()
    for value, begin, end, line_no, position in scan.entries():
        if (
            reuse and isinstance(value, dict) and scan.version >= CURRENT_VERSION
        ):  # (older: migrated in place)
            key = value.get("id")
            if isinstance(key, str) and key not in shared:
                known = reuse.get(key)
                if known is not None:
                    shared.add(key)  # once: a repeated id's lines stay distinct objects
                    value = _shared(value, known)
        entries.append(value)
        positions.append(position)
        lines.append(line_no)
        spans.append((begin, end))
    scan.finish()
    problems, header, header_span, junk_leaf = scan.problems, scan.header, scan.header_span, scan.junk_leaf
    if scan.no_header:
        return Transcript(None, CURRENT_VERSION, [], problems, None, size=len(data))
    if header is None:
        return Transcript(None, CURRENT_VERSION, [], problems, None, size=len(data))
    version = scan.version
    if version < 2:
        _migrate_v1(header, entries, positions)
    if version < 3:
        for entry in entries:
            message = entry.get("message")
            if (
                entry.get("type") == "message"
                and isinstance(message, dict)
                and message.get("role") == "hookMessage"
            ):
                message["role"] = "custom"
    leaf = entries[-1].get("id") if entries else None
    complete = data.rfind(b"\n") + 1
    transcript = Transcript(
        header=header,
        version=version,
        _entries=entries,
        _problems=problems,
        leaf_id=leaf if isinstance(leaf, str) else None,
        lines=lines,
        spans=spans,
        header_span=header_span,
        header_line=scan.header_line,
        size=len(data),
        junk_leaf=junk_leaf,
        complete=complete,
        edge=data[max(0, complete - EDGE_BYTES) : complete],
    )
    if junk_leaf:
        transcript.problems.append(
            Problem(
                "junk_leaf",
                None,
                "the last parsed line is not an object: pi takes it as the leaf, empty context",
            )
        )
    if check:
        transcript.problems.extend(validate(transcript, data))
    return transcript


# A lean reading keeps the lines off its branch as the file's own bytes when they are at least this share of
# them (no copy), else as a copy of just those lines.
_RAW_SHARE = 0.5


def _parse_lean(data: bytes, reuse: Mapping[str, Entry] | None) -> Transcript | None:
    """``_parse`` and ``validate`` in one pass that keeps only the branch's entries as dicts; None for a file
    pi migrates (older than version 3: every entry changes), which ``_parse`` reads.

    An entry is kept while it is read when it continues the chain kept so far (its parent is the last kept
    entry): the branch of an ordinary session, read once. Whatever else the branch holds (a fork's entries, a
    root under a missing parent) is parsed again from its line after the walk; kept entries off the branch
    are dropped then. Every per-entry check of ``validate`` runs on the parsed line as it is read, but the
    nesting's; it and the branch's are made when the transcript's problems are first read (``_Owed``).
    """
    scan = Scan(data)
    lean = _Lean()
    ids, parents, types, kept = lean.ids, lean.parents, lean.types, lean.kept
    lines: array[int] = array(_OFFSETS)
    spans = Spans()
    links: dict[Hashable, int] = {}
    early: list[tuple[int, Problem]] = []  # validate's problems of each entry but dangling parents
    interned: dict[Any, Any] = {}
    last_kept: Hashable = _UNLINKED  # the link key of the last entry kept (none: nothing equals this)
    empty_id: int | None = None
    # The loop runs once per line: bound methods, and a string id's link key (itself) without a call.
    add_id, add_parent, add_type, add_line = ids.append, parents.append, types.append, lines.append
    add_span = spans._flat.append
    for value, begin, end, line_no, _ in scan.entries():
        if not ids and scan.version < CURRENT_VERSION:
            return None
        index = len(ids)
        entry_id = value.get("id")
        parent = value.get("parentId")
        kind = value.get("type")
        if type(kind) is str:
            kind = interned.setdefault(kind, kind)
        add_id(entry_id)
        add_parent(parent)
        add_type(kind)
        add_line(line_no)
        add_span(begin)
        add_span(end)
        if kind == "message":
            message = value.get("message")
            if type(message) is not dict and message is not None:  # parsed: a dict is never a subclass
                early.append((index, _message_not_object(message, line_no)))
        if type(entry_id) is str:
            key: Hashable | None
            if entry_id:
                key, earlier = entry_id, links.get(entry_id)
            else:  # "" is an id ``validate`` compares, though it links nothing
                key, earlier, empty_id = None, empty_id, index
            if earlier is not None and _differs_from(lean, data, spans, earlier, value, begin, end):
                early.append(
                    (
                        index,
                        Problem(
                            "conflicting_duplicate_id", line_no, f"id {entry_id!r} repeats with other content"
                        ),
                    )
                )
        else:
            key = link_key(entry_id)
            early.append((index, _id_problem(entry_id, line_no)))
        # ``link_key(parent) == last_kept``: a parent equal to a link key is that key (a string is its own; no
        # parsed value equals a tuple or ``_UNLINKED``), any other's key is worked out.
        if index == 0 or parent == last_kept or (type(parent) is not str and link_key(parent) == last_kept):
            kept[index] = value
            last_kept = key if key is not None else _UNLINKED
        if key is not None:
            links[key] = index
    scan.finish()
    problems, header = scan.problems, scan.header
    if scan.no_header or header is None:
        return Transcript(None, CURRENT_VERSION, [], problems, None, size=len(data))
    if scan.version < CURRENT_VERSION:
        return None
    n = len(ids)
    junk_leaf = scan.junk_leaf
    # Every entry kept as it was read, each under a link key filed for it alone: each continued the one
    # before it (that is how it was kept), so the walk from the last goes back through every entry to the
    # first, where it ends (the first's parent, if filed, is an entry already seen: the cycle below).
    chain = len(kept) == n == len(links)
    if n:
        last = kept.get(n - 1)
        if last is None:
            last = kept[n - 1] = _reparse(data, spans, n - 1)
        lean.null_leaf = "id" in last and last["id"] is None
    leaf = ids[-1] if n else None
    # The branch, walked as ``Transcript._walk`` walks it, by index.
    path: list[int] = []
    if chain and not junk_leaf and not lean.null_leaf:
        path = list(range(n))
    elif n and not junk_leaf and not lean.null_leaf:
        seen: set[int] = set()
        current: int | None = n - 1
        while current is not None and current not in seen:
            seen.add(current)
            path.append(current)
            parent = parents[current]
            parent_key = (parent or None) if type(parent) is str else link_key(parent)  # a string: itself
            current = links.get(parent_key) if parent_key is not None else None
        path.reverse()
    cycle = bool(path) and (root_key := link_key(parents[path[0]])) is not None and root_key in links
    shared = reuse is not None and bool(reuse)
    if not (chain and path):  # else every entry is on the branch and kept: nothing to drop or parse again
        on_branch = set(path)
        on_branch.add(n - 1)
        for index in [i for i in kept if i not in on_branch]:
            del kept[index]
        for index in path:
            if index not in kept:
                kept[index] = _reparse(data, spans, index)
    if shared:
        for index in path:
            if isinstance(key := ids[index], str):
                assert reuse is not None
                known = reuse.get(key)
                if known is not None:
                    kept[index] = _shared(kept[index], known)
    # The other lines' bytes: the file's own when they are most of it, else a copy of just them.
    off = [] if len(kept) == n else [i for i in range(n) if i not in kept]
    off_bytes = sum(spans[i][1] - spans[i][0] for i in off)
    if off_bytes >= _RAW_SHARE * len(data):
        lean.raw, lean.raw_spans = data, spans
    elif off:
        raw = bytearray()
        raw_spans = Spans(array(_OFFSETS, bytes(16 * n)))
        flat = raw_spans._flat
        view = memoryview(data)
        for i in off:
            start, end = spans[i]
            flat[2 * i] = len(raw)
            raw.extend(view[start:end])
            flat[2 * i + 1] = len(raw)
        lean.raw, lean.raw_spans = bytes(raw), raw_spans
    complete = data.rfind(b"\n") + 1
    transcript = Transcript(
        header=header,
        version=scan.version,
        _entries=None,
        _problems=problems,
        leaf_id=leaf if isinstance(leaf, str) else None,
        lines=lines,
        spans=spans,
        header_span=scan.header_span,
        header_line=scan.header_line,
        size=len(data),
        junk_leaf=junk_leaf,
        complete=complete,
        edge=data[max(0, complete - EDGE_BYTES) : complete],
        _lean=lean,
        _owed=_Owed(data, lines if chain and path else None, "context_edit" in types),
    )
    branch = list(kept.values()) if chain and path else [kept[i] for i in path]
    transcript._branch = (branch, cycle)
    transcript._branch_at = path
    if junk_leaf:
        problems.append(
            Problem(
                "junk_leaf",
                None,
                "the last parsed line is not an object: pi takes it as the leaf, empty context",
            )
        )
    # validate's problems, in its order: each entry's, the cycle; the branch's and the nesting are owed (``_Owed``).
    if early or not _all_found(parents, links):
        at = 0
        for index in range(n):
            while at < len(early) and early[at][0] == index:
                problems.append(early[at][1])
                at += 1
            parent = parents[index]
            if parent is not None and isinstance(ids[index], str) and link_key(parent) not in links:
                problems.append(_dangling(parent, lines[index]))
    if cycle:
        problems.append(Problem("parent_cycle", None, "parentId links form a cycle; pi would hang on load"))
    return transcript


def _depth_problems_owed(transcript: Transcript, data: bytes) -> list[Problem]:
    """A lean reading's nesting problems (``validate``'s last), from the bytes it was read from: the header's,
    then each entry line's in file order. Only a line with more than ``MAX_DEPTH`` opening bytes is walked
    (``bracket_heavy_lines``; a tool result holding JSON often has that many), as its entry: the branch's as
    kept (entries are never changed once parsed), another parsed again from its line."""
    problems: list[Problem] = []
    header_span = transcript.header_span
    if (
        header_span is not None
        and data.count(b"{", *header_span) + data.count(b"[", *header_span) > MAX_DEPTH
    ):
        depth = nesting(transcript.header)
        if depth > MAX_DEPTH:
            problems.append(_too_deep(transcript.header_line, depth))
    lines = transcript.lines  # ascending: each heavy line's entry (if it is one) found by bisection
    for line_no in sorted(bracket_heavy_lines(data)):  # in file order
        index = bisect_left(lines, line_no)
        if index < len(lines) and lines[index] == line_no:
            depth = nesting(transcript.entry(index))
            if depth > MAX_DEPTH:
                problems.append(_too_deep(line_no, depth))
    return problems


def _all_found(parents: list[Any], links: Mapping[Hashable, int]) -> bool:
    """Whether every parent is None or an id filed in ``links`` as it is (a non-empty string: its own link key),
    told by one C-level set difference: then no entry has a dangling parent, and the walk of every entry that
    would look for one (42,000 link keys) is not needed. Any other parent (a number, ``true``, ``""``, a list)
    is left to that walk."""
    try:
        missing = set(parents).difference(links)
    except TypeError:  # an unhashable parent (a list, an object)
        return False
    return not missing or missing == {None}


# Every byte but those that open a level of nesting and the newline, for ``opening_bytes``.
_NOT_OPENING = bytes(b for b in range(256) if b not in b"{[\n")


def opening_bytes(data: bytes) -> bytes:
    """Only ``data``'s bytes ``{``, ``[`` and newlines, in one C pass (a leading BOM holds none of them). The
    result is allocated at ``data``'s size but only the kept bytes are written, so the untouched pages never
    become resident. Its newlines are ``data``'s: a file's lines count there in a fraction of its bytes."""
    return data.translate(None, _NOT_OPENING)


def bracket_heavy_lines(data: bytes) -> frozenset[int]:
    """The 1-based numbers of the lines (as ``Scan`` counts them) holding more than ``MAX_DEPTH`` bytes ``{``
    or ``[``: only those can nest deeper (each level opens with one, and JSON has no escaped form of either
    outside a string), so only their values need a walk.

    Told from ``opening_bytes(data)`` instead of two counts per line: about half the time."""
    kept = opening_bytes(data)
    if len(kept) - kept.count(b"\n") <= MAX_DEPTH:
        return frozenset()
    return frozenset(number for number, line in enumerate(kept.split(b"\n"), 1) if len(line) > MAX_DEPTH)


def _reparse(data: bytes, spans: Sequence[tuple[int, int]], index: int) -> Entry:
    start, end = spans[index]
    value, _ = parse_line(data[start:end])
    return value  # type: ignore[no-any-return]


def _differs_from(
    lean: _Lean, data: bytes, spans: Spans, earlier: int, value: Entry, begin: int, end: int
) -> bool:
    """Whether the entry at ``earlier`` differs from ``value`` (read from ``data[begin:end]``): the same bytes
    are the same entry; else both compared as parsed."""
    start, stop = spans[earlier]
    if data[start:stop] == data[begin:end]:
        return False
    known = lean.kept.get(earlier)
    return _differ(known if known is not None else _reparse(data, spans, earlier), value)


def _message_not_object(message: Any, line: int | None) -> Problem:
    return Problem(
        "message_not_object",
        line,
        f"message is {_js_type(message)}, not an object: pi puts it in the context as is, we "
        "cannot; this session is never compacted",
    )


def _id_problem(entry_id: Any, line: int | None) -> Problem:
    if link_key(entry_id) is not None:
        return Problem(
            "non_string_id",
            line,
            f"id {entry_id!r} is not a string: pi links entries by it, compactd only writes "
            "string ids; this session is never compacted",
        )
    return Problem("missing_id", line, "entry has no string id; it cannot be anyone's parent")


def _dangling(parent: Any, line: int | None) -> Problem:
    return Problem("dangling_parent", line, f"parentId {parent!r} points nowhere: the branch is cut here")


def _too_deep(line: int | None, depth: int) -> Problem:
    return Problem(
        "too_deep",
        line,
        f"nested {depth} levels deep: pi loads it, compactd carries at most {MAX_DEPTH} levels; "
        "this session is never compacted",
    )


def _shared(parsed: Entry, known: Entry) -> Entry:
    """``known`` if ``parsed`` equals it, else ``parsed`` holding ``known``'s equal values (a successor changes
    a kept entry's ``parentId`` at most, not its message)."""
    if parsed == known:
        return known
    for name, value in parsed.items():
        old = known.get(name)
        if old is not None and old is not value and old == value:
            parsed[name] = old
    return parsed


def _migrate_v1(header: Entry, entries: list[Entry], positions: list[int]) -> None:
    """pi's v1 → v2 migration, with ids derived from the session id and position instead of random ones.

    Deterministic ids make two reads of the same v1 file agree, which pi (random ids) does not need because it
    rewrites the file right away; we never rewrite on read.
    """
    import hashlib  # here: only a v1 session needs it, and it is 2 ms to load (OpenSSL)

    seed = str(header.get("id", ""))
    used: set[str] = set()
    # firstKeptEntryIndex indexes pi's parsed array, header included at 0: every parsed line counts.
    by_index: dict[int, Entry] = {}
    previous: str | None = None
    for position, entry in zip(positions, entries, strict=True):
        by_index[position] = entry
        counter = 0
        while True:
            digest = hashlib.blake2s(f"{seed}:{position}:{counter}".encode(), digest_size=4).hexdigest()
            if digest not in used:
                break
            counter += 1
        used.add(digest)
        entry["id"] = digest
        entry["parentId"] = previous
        previous = digest
    for entry in entries:
        if entry.get("type") == "compaction" and "firstKeptEntryIndex" in entry:
            index = entry.pop("firstKeptEntryIndex")
            target = by_index.get(index) if isinstance(index, int) else None
            if target is not None:
                entry["firstKeptEntryId"] = target["id"]


def validate(transcript: Transcript, data: bytes | None = None) -> list[Problem]:
    """Structural problems a loader would hit: dangling parents, cycles, unpaired tool calls on the branch.

    ``data``: the bytes the transcript was parsed from, so the depth check walks only lines with enough
    brackets to nest too deep."""
    problems: list[Problem] = []
    index = transcript.links()
    seen_ids: dict[str, Entry] = {}
    for entry, line in zip(transcript.entries, transcript.lines, strict=False):
        entry_id = entry.get("id")
        message = entry.get("message")
        if entry.get("type") == "message" and message is not None and not isinstance(message, dict):
            problems.append(_message_not_object(message, line))
        if not isinstance(entry_id, str):
            problems.append(_id_problem(entry_id, line))
            continue
        earlier = seen_ids.get(entry_id)
        if earlier is not None and _differ(earlier, entry):
            problems.append(
                Problem("conflicting_duplicate_id", line, f"id {entry_id!r} repeats with other content")
            )
        seen_ids[entry_id] = entry
        parent = entry.get("parentId")
        if parent is not None and link_key(parent) not in index:
            problems.append(_dangling(parent, line))
    branch = transcript.branch()
    if transcript.has_cycle():
        problems.append(Problem("parent_cycle", None, "parentId links form a cycle; pi would hang on load"))
    line_of = {id(e): ln for e, ln in zip(transcript.entries, transcript.lines, strict=False)}
    problems.extend(_branch_problems(branch, [line_of.get(id(e)) for e in branch]))
    problems.extend(_depth_problems(transcript, data))
    return problems


def _js_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else "an array"


def _differ(a: Entry, b: Entry) -> bool:
    """``a != b``, and True for entries too deep to compare (Python compares recursively)."""
    try:
        return a != b
    except RecursionError:
        return True


def _depth_problems(transcript: Transcript, data: bytes | None = None) -> list[Problem]:
    """Lines nested deeper than ``MAX_DEPTH``: pi keeps them, we read them, but must not write them back.

    With ``data``, a line is walked only if it holds more than ``MAX_DEPTH`` bracket bytes: each level of
    nesting opens with a literal ``{`` or ``[`` (JSON has no escaped form of one outside a string), so a line
    with fewer cannot nest deeper (two C counts instead of a walk of every value)."""
    problems: list[Problem] = []
    spanned = data is not None and len(transcript.spans) == len(transcript.entries)
    spans: list[tuple[int, int] | None] = (
        list(transcript.spans) if spanned else [None] * len(transcript.entries)
    )
    lines = [
        (transcript.header, transcript.header_line, transcript.header_span if spanned else None),
        *zip(transcript.entries, transcript.lines, spans, strict=False),
    ]
    count = data.count if data is not None else None
    for value, line, span in lines:
        if count is not None and span is not None:
            start, end = span
            if count(b"{", start, end) + count(b"[", start, end) <= MAX_DEPTH:
                continue
        depth = nesting(value)
        if depth > MAX_DEPTH:
            problems.append(_too_deep(line, depth))
    return problems


def _branch_problems(branch: list[Entry], lines: Sequence[int | None]) -> list[Problem]:
    """The branch's problems in one pass, listed by kind in this order: a compaction keeping from an entry off
    the branch, pi 1.x's context edits (design.md §6.14), tool calls and results that do not pair, usage
    figures beyond what we count. ``lines``: each entry's line number, in the branch's order. The branch's ids
    are collected only for the compactions and context edits that name one (most branches have neither)."""
    ids: set[str] | None = None

    def on_branch(value: Any) -> bool:
        nonlocal ids
        if ids is None:
            ids = {e["id"] for e in branch if isinstance(e.get("id"), str)}
        return isinstance(value, str) and value in ids

    first_kept_problems: list[Problem] = []
    edit_problems: list[Problem] = []
    pairing_problems: list[Problem] = []
    overflow_problems: list[Problem] = []
    open_calls: dict[str, int | None] = {}
    answered: set[str] = set()
    pending_since: int | None = None
    for entry, line in zip(branch, lines, strict=True):
        kind = entry.get("type")
        if kind == "compaction":
            # A kept entry after the compaction (our rotation puts the compaction at the root) is fine: pi then
            # keeps nothing from before it and emits everything after it. Pointing nowhere loses the kept span.
            first_kept = entry.get("firstKeptEntryId")
            if not on_branch(first_kept):
                first_kept_problems.append(
                    Problem(
                        "first_kept_not_on_branch",
                        line,
                        f"compaction keeps from {first_kept!r}, which is not on the branch: nothing before it "
                        "is kept",
                    )
                )
            continue
        if kind == "context_edit":
            # One whose replacement pi cannot apply makes pi throw when it builds the context (never
            # compacted); one naming an entry not on the branch changes nothing.
            invalid = _edit_invalid(entry, line)
            if invalid is not None:
                edit_problems.append(invalid)
            target = entry.get("targetId")
            if not on_branch(target):
                edit_problems.append(
                    Problem(
                        "context_edit_target_missing",
                        line,
                        f"context edit names {target!r}, which is not on the branch: it changes nothing",
                    )
                )
            continue
        if kind != "message":
            continue
        message = entry.get("message")
        if not isinstance(message, dict):
            continue
        role = message.get("role")  # ``role_of`` without the call: only compared with strings below
        if role == "toolResult":
            call_id = tool_call_id(message)
            if call_id is None or (call_id not in open_calls and call_id not in answered):
                pairing_problems.append(
                    Problem(
                        "orphan_tool_result",
                        line,
                        f"toolResult {call_id!r} has no earlier toolCall on the branch",
                    )
                )
            elif call_id in open_calls:
                open_calls.pop(call_id)
                answered.add(call_id)
            continue
        if open_calls and pending_since is not None:
            for call_id, call_line in open_calls.items():
                pairing_problems.append(
                    Problem(
                        "missing_tool_result",
                        call_line,
                        f"toolCall {call_id!r} has no result before the turn moved on",
                    )
                )
            open_calls.clear()
        if role != "assistant" or message.get("stopReason") in ("error", "aborted"):
            continue
        content = message.get("content")
        if isinstance(content, list):  # ``tool_calls`` inlined (a string content holds none): once per turn
            for block in content:
                if (
                    isinstance(block, dict)
                    and block.get("type") in TOOL_CALL_BLOCK_TYPES
                    and isinstance(call_id := block.get("id"), str)
                ):
                    open_calls[call_id] = line
        pending_since = line if open_calls else None
        # Usage figures beyond what we count (``usage_tokens`` clamps them): pi's own figure is not a count.
        usage = message.get("usage")
        if not isinstance(usage, dict):
            continue
        stated = usage.get("totalTokens")
        if type(stated) is int and 0 < stated <= MAX_TOKENS:
            continue  # what ``usage_total`` returns then, exactly (a double holds it): within the count
        if stated is None or (stated == 0 and type(stated) is int):  # then usage_total adds up the parts
            parts = (
                usage.get("input", 0),
                usage.get("output", 0),
                usage.get("cacheRead", 0),
                usage.get("cacheWrite", 0),
            )
            if (
                type(parts[0]) is type(parts[1]) is type(parts[2]) is type(parts[3]) is int
                and min(parts) >= 0
                and sum(parts) <= MAX_TOKENS
            ):
                continue  # whole, not negative, MAX_TOKENS at most in all: every partial sum exact in doubles
        total = usage_total(usage)
        if total > MAX_TOKENS or total != total:
            counted = f"counted as {MAX_TOKENS}" if total > MAX_TOKENS else "not counted"
            overflow_problems.append(
                Problem(
                    "figure_overflow",
                    line,
                    f"assistant usage adds up to {total!r}, beyond {MAX_TOKENS}: {counted}",
                )
            )
    return first_kept_problems + edit_problems + pairing_problems + overflow_problems


def _edit_invalid(entry: Entry, line: int | None) -> Problem | None:
    """``context_edit_invalid`` for a context edit (``entry``) whose replacement pi cannot apply."""
    replacement = entry.get("replacement", _ABSENT)
    content = replacement.get("content") if isinstance(replacement, dict) else None
    if replacement is not None and not isinstance(content, str | list):
        return Problem(
            "context_edit_invalid",
            line,
            "context edit's replacement is neither null nor {content: string or array}: pi 1.x "
            "throws when it builds this branch's context; this session is never compacted",
        )
    return None


def same_reading(transcript: Transcript | None, data: bytes, identity: tuple[int, int]) -> bool:
    """Whether ``data`` (a file's complete lines, from the inode ``identity``) is what ``transcript`` was parsed
    from: the same inode, the same size with nothing torn after it, and the same bytes at the cut.

    pi only ever appends to a transcript or replaces it (a new inode); an in-place rewrite that kept the size
    and the last 4 KB would fool this, and nothing writes one.
    """
    return (
        transcript is not None
        and transcript.identity == identity
        and transcript.size == transcript.complete == len(data)
        and data[len(data) - len(transcript.edge) :] == transcript.edge
    )
