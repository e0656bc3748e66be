"""What the agent knew, as it stands now: each fact with what it belongs to, corrections applied, each task's
latest state, and the latest result of each command (issue 18; design.md §6.15).

A bare list of identifiers keeps the ports but not whose port each is, the old value beside the new one, and
no task's state. This module keeps the *statements* instead: the user's and the agent's sentences that carry a
specific token (a path, a number, a name such as ``billing-api`` or ``@okafor``), verbatim, so a value stays
beside its subject. A later statement retires an earlier one when it

- corrects it: it says it is a correction (``correction``, ``not``, ``instead``, ``old``, ...) and restates
  every token of the earlier one, plus the new value ("must be 200, not 100");
- restates it with a new value: the same sentence with other numbers ("set pool_size to 12" → "to 16");
  the new statement is shown with the value it replaces;
- updates a status: both state where something stands (queued, in progress, blocked, verifying, done, ...)
  and are about the same first token (``TASK-12``, ``billing-api``): the latest is the task's line, with the
  states it went through and its first statement (usually its title) marked as earlier.

The result of a command is the output of its latest run when that output is short (a test verdict, a count, a
probe); long output is a file or a log, listed elsewhere or summarized by its last line.

Everything here is pure and deterministic. The section it renders is carried by the next compaction (parsed
back by :func:`carried_state`), so a chain of compactions keeps, corrects and updates the same lines, and the
engine adds it to every summary, model-written or not, so that no model can drop it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field
from itertools import islice

from compactd.core.messages import Message, role_of, text_of, tool_call_id, tool_calls
from compactd.datarecord import datarecord
from compactd.summarize.augment import is_tool_failure  # failures are listed by the augmentation
from compactd.summarize.derived import Lookup, Result, nothing_derived
from compactd.summarize.gates import folded, holds_any
from compactd.summarize.headings import CURRENT_STATE, SECTION_BREAK, split_sections

__all__ = [
    "FACTS_HEADING",
    "RESULTS_HEADING",
    "STATE_MAX_CHARS",
    "STATE_SHARE_OF_TARGET",
    "TASKS_HEADING",
    "WorkingState",
    "carried_state",
    "collapse",
    "merge_state",
    "newest_that_fit",
    "working_state",
]

TASKS_HEADING = "### Tasks and statuses (the latest statement of each, its earlier states after it)"
FACTS_HEADING = "### Facts (corrections applied: superseded values removed)"
RESULTS_HEADING = "### Latest result of each command"

# The section's share of the 16,000-character summary (design.md §6.8): the statements are what an agent
# needs most after the latest ask, so they get more room than any other section.
STATE_MAX_CHARS = 6_000
# ... and at most this share of what a compaction leaves the session (``compaction.target_fill`` of its
# threshold), so that on a small window the section does not eat the room the agent is left to work in.
STATE_SHARE_OF_TARGET = 0.2
TASKS_MAX_CHARS = 2_400
RESULTS_MAX_CHARS = 1_800
STATEMENT_MAX_CHARS = 300
FIRST_STATEMENT_MAX_CHARS = 120
RESULT_MAX_CHARS = 300
# Output of at most this many lines and characters is a result; longer output is content (a file, a log).
SHORT_OUTPUT_LINES = 4
SHORT_OUTPUT_CHARS = 400
COMMAND_MAX_CHARS = 100
# Statements kept per pool (tasks, facts) while folding: the section shows a few dozen.
POOL_MAX = 400
# Between a task's earlier states and its first statement (which usually names the task) on its line.
FIRST_SEPARATOR = " — first said: "

_SPACES = re.compile(r"\s+")
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(?:\[[ xX]\]\s+)?")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=[。！？])")
_SENTENCE_MARKS = (
    ".!?。！？"  # a line holding none of them is one sentence (the split's lookbehinds need one)
)
# A token that names or measures something: it holds a digit, a path or a handle, joins words with ``_``,
# ``-`` or ``.``, or is camelCase. Plain words are not.
_WORD = re.compile(r"(?:~?/|\./|[@#$])?[\w][\w.:/@+#-]*")
_SPECIFIC = re.compile(r"\d|[/_@#:]|\w[-.]\w|[a-z][A-Z]")
# Its branches apart, for a whole text: a pattern that starts with a character class is scanned for in C, where
# the alternation is tried at every position; the middle branch only where a "-" or "." occurs.
_SPECIFIC_CHAR = re.compile(r"[\d/_@#:]")
_SPECIFIC_JOIN = re.compile(r"\w[-.]\w")
_SPECIFIC_CAMEL = re.compile(r"[a-z][A-Z]")
_DIGIT_RUN = re.compile(r"\d[\d.:_-]*")
_PLAIN_WORD = re.compile(r"(?<![\w/.@-])[A-Za-z]{2,}(?![\w/@-])")
# A statement has at least this many plain words: fewer is a list item, a table cell, a bare path.
MIN_PLAIN_WORDS = 2
# A sentence that continues the previous one: a label and what it names, no subject of its own.
_CONTINUATION = re.compile(
    r"(?:next(?: action| step)?s?|then|blockers?|blocked (?:on|by)|waiting (?:on|for)|eta|owner)\s*[:：]"
    r"|(?:blocked|waiting) (?:on|by|for)\b",
    re.IGNORECASE,
)
# Words too common to tie a correction to what it corrects.
_COMMON_WORDS = frozenset(
    re.findall(
        r"\w+",
        "that this with from have must should will would been were what when where which there their them "
        "they then than into only also just need needs make made sure said sorry wrong earlier correction "
        "actually instead rather moved changed superseded replaces",
    )
)
# A sentence that only announces the agent's next step is not a fact.
_ANNOUNCE = re.compile(
    r"^(?:let me|let['’]s|i['’]ll|i will|i['’]m going to|i am going to|now,? (?:i|let)|next,? i|"
    r"reading|checking|looking|running|opening|searching|trying|on it)\b",
    re.IGNORECASE,
)
# Where something stands. "in progress" and the like are phrases; a status is the sentence's, not a word's
# inside a token (``done_at``).
_STATUS = re.compile(
    r"(?<![\w-])(?:queued|todo|to do|pending|not started|in[ -]progress|started|underway|under way|"
    r"blocked|on hold|waiting|verifying|in review|under review|testing|done|finished|completed?|"
    r"merged|shipped|deployed|fixed|resolved|cancell?ed|abandoned|dropped)(?![\w-])",
    re.IGNORECASE,
)
# What every match of _STATUS holds, lower case (for a ``gates.folded`` text): most sentences hold none, and the
# case-insensitive pattern with its lookbehind is tried at every position.
_STATUS_NEEDLES = (
    *("queued", "todo", "to do", "pending", "started", "progress", "underway", "under way", "blocked"),
    *("on hold", "waiting", "verifying", "review", "testing", "done", "finished", "complete", "merged"),
    *("shipped", "deployed", "fixed", "resolved", "cancel", "abandoned", "dropped"),
)
# States after which nothing more is expected of a task.
_FINISHED = frozenset(
    {"done", "finished", "complete", "completed", "merged", "shipped", "deployed", "fixed", "resolved"}
    | {"cancelled", "canceled", "abandoned", "dropped"}
)
# A statement that says it corrects something.
_CORRECTION = re.compile(
    r"(?<![\w-])(?:correction|corrected|correcting|actually|sorry|wrong|mistake|mistaken|instead|rather|"
    r"not|no longer|moved|changed|superseded|replaces?|old|outdated|stale|was|were)(?![\w-])|^no\b",
    re.IGNORECASE,
)
_EARLIER = re.compile(r"^(?P<text>.*?) \(earlier: (?P<was>.*)\)$")
_RESULT_LINE = re.compile(r"^`(?P<target>[^`]*)` → (?P<output>.*)$")
# Commands whose output is a file's text: content, not a result (the files are listed elsewhere).
_FILE_DUMP = re.compile(r"^\s*(?:cat|sed|head|tail|less|more|bat|nl|awk|jq|yq|xxd|od)\b")
# What compactd's pruning and serialization leave in a cut tool result (``prune.py``, ``serialize.py``): the
# text around it is a head and a tail, not a short output.
_CUT_MARKER = re.compile(
    r"\[\.\.\. \d+ more characters truncated[^\]]*\]|⚠️ \[\.\.\. middle content omitted[^\]]*\]"
)
READ_TOOLS = frozenset({"read", "read_file", "view"})


def collapse(text: str, cap: int) -> str:
    """``text`` on one line, its whitespace runs single spaces, cut to ``cap`` characters (the digest's items
    and the current state's statements alike).

    Only as much of ``text`` is collapsed as the cut keeps: substituting every run of a megabytes-long line (a
    previous summary's) builds a list of millions of pieces first. A prefix whose collapsed form is longer than
    ``cap`` agrees with the whole text's on its first ``cap - 1`` characters."""
    size = max(4 * cap, 1024)
    while True:
        flat = _SPACES.sub(" ", text[:size]).strip()
        if size >= len(text):
            return flat if len(flat) <= cap else flat[: cap - 1].rstrip() + "…"
        if len(flat) > cap:
            return flat[: cap - 1].rstrip() + "…"
        size *= 4


def _has_specific(text: str) -> bool:
    """``_SPECIFIC.search(text) is not None``: for an ASCII text by substring searches over its characters'
    classes (``_CLASSES``), else each branch on its own (see ``_SPECIFIC_CHAR``)."""
    if text.isascii():
        classes = text.encode().translate(_CLASSES)
        if b"1" in classes:
            return True
        return (b"." in classes and any(map(classes.__contains__, _JOINS))) or b"aA" in classes
    return (
        _SPECIFIC_CHAR.search(text) is not None
        or (("-" in text or "." in text) and _SPECIFIC_JOIN.search(text) is not None)
        or _SPECIFIC_CAMEL.search(text) is not None
    )


def _ascii_classes() -> bytes:
    """A ``bytes.translate`` table for ASCII text: what ``_SPECIFIC`` tells apart. A digit and ``/_@#:`` are
    ``1`` (each alone is a match), a lower-case letter ``a``, an upper-case one ``A`` (``\\w`` of ASCII is
    those and the digits and ``_``), ``-`` and ``.`` are ``.``, anything else a space."""
    table = bytearray(b" " * 256)
    for char in b"0123456789/_@#:":
        table[char] = ord("1")
    for char in range(ord("a"), ord("z") + 1):
        table[char] = ord("a")
    for char in range(ord("A"), ord("Z") + 1):
        table[char] = ord("A")
    table[ord("-")] = table[ord(".")] = ord(".")
    return bytes(table)


_CLASSES = _ascii_classes()
# ``\w[-.]\w`` once no digit or ``_`` is in the text: its word characters are letters.
_JOINS = (b"a.a", b"a.A", b"A.a", b"A.A")


def _specific_tokens(text: str) -> list[str]:
    """The specific tokens of a text in order, lower-cased, without trailing punctuation. A text with no
    character any of them needs has none (most prose: checked once, not word by word)."""
    if not _has_specific(text):
        return []
    out: list[str] = []
    for word in _WORD.findall(text):
        token = word.rstrip(".:-#")
        if token and _SPECIFIC.search(token):
            out.append(token.lower())
    return out


def tokens_of(text: str) -> frozenset[str]:
    """The specific tokens of a text (see ``_SPECIFIC``)."""
    return frozenset(_specific_tokens(text))


def _skeleton(text: str) -> str:
    """The sentence with its numbers taken out: two statements of one skeleton say the same with other values."""
    return _DIGIT_RUN.sub("#", _SPACES.sub(" ", text).strip().rstrip(".").lower())


def _steps(states: Sequence[str]) -> str:
    """States in order, "a → b → c", a state repeated at once said once."""
    flat = [s for part in states for s in part.split(" → ") if s]
    return " → ".join(s for n, s in enumerate(flat) if n == 0 or flat[n - 1] != s)


@datarecord(slots=True, eq=False)  # compared by identity: two sayings of one sentence are two statements
class Statement:
    """One sentence that carries a specific token, and what a later one made of it."""

    text: str
    tokens: frozenset[str]
    subject: str | None
    status: str | None
    # What the comparisons with later statements read, computed once (a span holds thousands of statements).
    names: frozenset[str]  # the tokens that are not numbers
    cue: bool  # it says it corrects something
    skeleton: str
    words: frozenset[str]
    earlier: list[str] = field(default_factory=list)  # a task's earlier states ("a → b"), its first statement
    replaced: list[str] = field(default_factory=list)  # values this statement restates with a new one

    @classmethod
    def of(cls, text: str) -> Statement | None:
        """The statement of a sentence, or None when it holds no specific token."""
        found = _specific_tokens(text)
        if not found:
            return None
        status = _STATUS.search(text) if holds_any(folded(text), _STATUS_NEEDLES) else None
        tokens = frozenset(found)
        return cls(
            text,
            tokens,
            found[0],
            status.group(0).lower() if status else None,
            frozenset(t for t in tokens if not _is_number(t)),
            _CORRECTION.search(text) is not None,
            _skeleton(text),
            frozenset(_words(text)),
        )

    def line(self) -> str:
        text = self.text
        if self.replaced:
            text = f"{text.rstrip('.')} (replaces earlier {', '.join(self.replaced)})"
        if self.earlier:
            text = f"{text.rstrip('.')} (earlier: {FIRST_SEPARATOR.join(self.earlier)})"
        return "- " + text


@datarecord
class WorkingState:
    """Tasks, facts and command results, oldest first within each; rendered as one section."""

    tasks: list[Statement] = field(default_factory=list)
    facts: list[Statement] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)  # command → its latest short output, in run order

    def render(self, max_chars: int = STATE_MAX_CHARS) -> str:
        """The ``## Current state`` section (empty string when there is nothing to say), within ``max_chars``:
        tasks and results first within their own budgets, then the newest facts that fit."""
        # Open work first: a task that is done matters less than one still moving, when not all fit.
        share = min(1.0, max_chars / STATE_MAX_CHARS)  # a smaller section shrinks its parts alike
        finished = _FINISHED.__contains__
        tasks = [
            t.line()
            for t in _fitting(self.tasks, int(TASKS_MAX_CHARS * share), last=lambda t: finished(t.status))
        ]
        results = newest_that_fit(
            [f"- `{c}` → {o}" for c, o in self.results.items()], int(RESULTS_MAX_CHARS * share)
        )
        used = len(CURRENT_STATE) + len(TASKS_HEADING) + len(FACTS_HEADING) + len(RESULTS_HEADING) + 16
        used += sum(len(x) + 1 for x in (*tasks, *results))
        facts = newest_that_fit([f.line() for f in self.facts], max(0, max_chars - used))
        if not (tasks or facts or results):
            return ""
        parts = [CURRENT_STATE]
        for heading, lines in ((TASKS_HEADING, tasks), (FACTS_HEADING, facts), (RESULTS_HEADING, results)):
            if lines:
                parts.append("\n".join([heading, *lines]))
        return "\n\n".join(parts)


def _fitting(
    items: Sequence[Statement], budget: int, *, last: Callable[[Statement], bool]
) -> list[Statement]:
    """The ``items`` that fit in ``budget``, newest first except that those for which ``last`` holds come
    after the others; in their own order."""
    chosen: set[int] = set()
    used = 0
    for n in sorted(reversed(range(len(items))), key=lambda n: last(items[n])):
        cost = len(items[n].line()) + 1
        if used + cost <= budget:
            chosen.add(n)
            used += cost
    return [item for n, item in enumerate(items) if n in chosen]


def newest_that_fit(lines: Sequence[str], budget: int) -> list[str]:
    """The newest lines that fit in ``budget`` characters (each with its newline), in their original order."""
    picked: list[str] = []
    used = 0
    for line in reversed(lines):
        if used + len(line) + 1 > budget:
            break
        picked.append(line)
        used += len(line) + 1
    return picked[::-1]


# --- statements ---------------------------------------------------------------------------------------------
def _lines(text: str) -> Iterable[str]:
    """Prose lines, bullets stripped: not code, headings, tables or quotes."""
    in_fence = False
    for raw in text.splitlines():
        if _FENCE.match(raw):
            in_fence = not in_fence
            continue
        if in_fence or raw.lstrip().startswith(("#", "|", ">")):
            continue
        line = _BULLET.sub("", raw).strip()
        if line:
            yield line


def _is_statement(sentence: str) -> bool:
    """A sentence that states something: not a question, not the announcement of a next step or of a list
    (it ends with a colon), not pasted data, and with some words besides its tokens."""
    if sentence.endswith(("?", "？", ":", "：")) or sentence.startswith(("{", "[", "<")):
        return False
    if _ANNOUNCE.match(sentence):
        return False
    # Counted up to the least that makes a statement, not over a whole long sentence.
    return next(islice(_PLAIN_WORD.finditer(sentence), MIN_PLAIN_WORDS - 1, None), None) is not None


def message_statements(message: Message, read: Callable[[Message], str] = text_of) -> list[Statement]:
    """One message's statements (a user's or the agent's; none for any other role): its sentences that carry
    a specific token, in order. A sentence that only continues the one before it ("Next action: x.sh.",
    "Blocked on SEC-2.") is part of it, so a task keeps its next action and its blocker."""
    out: list[Statement] = []
    if role_of(message) not in ("user", "assistant"):
        return out
    text = read(message)
    # Every part below is a piece of the text, or pieces joined by a space (which no branch of ``_SPECIFIC``
    # matches across): a text without a specific token has no statement.
    if not _has_specific(text):
        return out
    for line in _lines(text):
        parts: list[str] = []
        sentences = _SENTENCE_END.split(line) if holds_any(line, _SENTENCE_MARKS) else (line,)
        for sentence in sentences:
            sentence = sentence.strip()
            if parts and _CONTINUATION.match(sentence):
                parts[-1] = f"{parts[-1]} {sentence}"
            elif sentence:
                parts.append(sentence)
        for part in parts:
            # A part without a specific token has none once collapsed (collapsing only turns whitespace
            # runs into spaces and cuts): no statement, and nothing to collapse.
            if not _is_statement(part) or not _has_specific(part):
                continue
            statement = Statement.of(collapse(part, STATEMENT_MAX_CHARS))
            if statement is not None and not all(map(_is_small_number, statement.tokens)):
                out.append(statement)
    return out


def statements(
    messages: Sequence[Message], read: Callable[[Message], str] = text_of, derived: Lookup = nothing_derived
) -> list[Statement]:
    """The user's and the agent's statements (``message_statements``), in order; a message prepared as it was
    read gives its statements' texts, each made a statement again (a new one: statements are told apart by
    identity)."""
    out: list[Statement] = []
    for message in messages:
        got = derived(message)
        if got is None:
            out.extend(message_statements(message, read))
        else:
            out.extend(s for s in map(Statement.of, got.statements) if s is not None)
    return out


def _is_small_number(token: str) -> bool:
    """A number of one or two digits ("question 3", "step 2"): alone it makes no sentence a fact."""
    return token.isdigit() and len(token) <= 2


def _is_number(token: str) -> bool:
    return _DIGIT_RUN.fullmatch(token) is not None


def _words(text: str) -> set[str]:
    return {w.lower() for w in _PLAIN_WORD.findall(text) if len(w) >= 4} - _COMMON_WORDS


def _corrects(new: Statement, old: Statement) -> bool:
    """``new`` says it corrects, and is about what ``old`` is about with other values: it restates every
    token of ``old`` and adds some ("must be 200, not 100"), or it keeps every name of ``old``, drops only
    numbers, and shares with it two names or a name and a word ("port")."""
    if not new.cue:
        return False
    if old.tokens < new.tokens:
        return True
    if not old.names or not old.names <= new.tokens or old.tokens <= new.tokens:
        return False
    if not all(map(_is_number, old.tokens - new.tokens)):
        return False
    return len(old.names) >= 2 or bool(old.words & new.words)


def _restates(new: Statement, old: Statement) -> bool:
    """The same sentence about the same names, with other numbers ("set pool_size to 12" → "to 16")."""
    if new.skeleton != old.skeleton or new.tokens == old.tokens or new.names != old.names:
        return False
    return bool(old.names)


def _supersedes(new: Statement, old: Statement) -> bool:
    """Whether ``new``, said later, makes ``old`` history (see the module docstring)."""
    if new.text == old.text:
        return True
    if new.status and old.status and new.subject is not None and new.subject == old.subject:
        return True
    return _corrects(new, old) or _restates(new, old)


class _Pools:
    """The live statements of a state, indexed by token: every rule needs a shared token, so a new statement
    is compared only with those that share one. Each pool keeps its newest :data:`POOL_MAX` (the section shows
    far fewer), so a span of any size costs about its number of statements."""

    def __init__(self, state: WorkingState) -> None:
        self.state = state
        self.index: dict[str, list[Statement]] = {}
        self.order: dict[int, int] = {}  # id → sequence number, for the live statements
        self.count = 0
        for statement in [*state.tasks, *state.facts]:
            self._register(statement)

    def _register(self, statement: Statement) -> None:
        self.count += 1
        self.order[id(statement)] = self.count
        for token in statement.tokens:
            bucket = self.index.setdefault(token, [])
            bucket.append(statement)
            if len(bucket) > 2 * POOL_MAX:  # drop the retired from a busy token's list
                bucket[:] = [s for s in bucket if id(s) in self.order]

    def _retire(self, statement: Statement) -> None:
        self.order.pop(id(statement), None)
        for pool in (self.state.tasks, self.state.facts):
            if statement in pool:
                pool.remove(statement)
                return

    def candidates(self, new: Statement) -> list[Statement]:
        """The live statements sharing a token with ``new``, oldest first."""
        found = {id(s): s for t in new.tokens for s in self.index.get(t, ()) if id(s) in self.order}
        return sorted(found.values(), key=lambda s: self.order[id(s)])

    def add(self, new: Statement) -> None:
        for old in self.candidates(new):
            if not _supersedes(new, old):
                continue
            self._retire(old)
            if new.text == old.text:
                new.earlier, new.replaced = old.earlier, old.replaced
            elif new.status and old.status and new.subject == old.subject:
                states = [*old.earlier[:1], old.status] if old.earlier else [old.status]
                first = old.earlier[1] if len(old.earlier) > 1 else old.text
                new.earlier = [_steps(states), collapse(first, FIRST_STATEMENT_MAX_CHARS)]
            else:  # a correction or a restatement: say which values it replaces, unless it does
                gone = [t for t in sorted(old.tokens - new.tokens) if _is_number(t)]
                said = [t for t in gone if t not in new.text.lower()]
                new.replaced = list(dict.fromkeys([*old.replaced, *said]))
        pool = self.state.tasks if new.status else self.state.facts
        pool.append(new)
        self._register(new)
        if len(pool) > POOL_MAX:
            self._retire(pool[0])


def _fold(state: WorkingState, incoming: Iterable[Statement]) -> None:
    """Add statements in order: each retires what it supersedes, a task's line keeps its history."""
    pools = _Pools(state)
    for new in incoming:
        pools.add(new)


# --- command results ----------------------------------------------------------------------------------------
def _target(call: dict[str, object]) -> tuple[str, bool]:
    """(what the call ran, whether its output is a file's text)."""
    name = str(call.get("name") or "tool")
    args = call.get("arguments")
    if isinstance(args, dict):
        command = args.get("command") or args.get("cmd")
        if isinstance(command, str) and command.strip():
            return collapse(command, COMMAND_MAX_CHARS).replace("`", "'"), bool(_FILE_DUMP.match(command))
        path = args.get("path") or args.get("file_path")
        if isinstance(path, str) and path:
            return collapse(f"{name} {path}", COMMAND_MAX_CHARS).replace("`", "'"), name.lower() in READ_TOOLS
    return name.replace("`", "'"), False


def _output(text: str, dump: bool) -> str | None:
    """What a command's result shows: a short output whole, a long one by its last line (None for a long
    file dump). Only the end of a long output is split into lines."""
    stripped = text.strip()
    # Both markers hold "[... ": one pass finds that most outputs hold neither.
    cut = (
        "[... " in stripped
        and ("truncated" in stripped or "omitted" in stripped)
        and _CUT_MARKER.search(stripped) is not None
    )
    if len(stripped) <= 2 * SHORT_OUTPUT_CHARS and not cut:
        lines = [line.strip() for line in stripped.splitlines() if line.strip()]
        if len(lines) <= SHORT_OUTPUT_LINES and sum(map(len, lines)) <= SHORT_OUTPUT_CHARS:
            return " | ".join(lines)  # a short file (an env file) is a result too
    if dump:
        return None
    end = stripped[-4_096:]
    if cut:  # else no marker is in the text, nor in its end
        end = _CUT_MARKER.sub("\n", end)
    last = next((line for line in map(str.strip, reversed(end.splitlines())) if line), None)
    if last is None:
        return None
    count = stripped.count("\n") + 1
    return f"(last of {count} lines) {last}"


def result_of(message: Message) -> Result:
    """A tool result's part in the command results, whatever command it answers: its output as
    ``_output`` shows a command's (not a file dump's), whether a file dump's is the same, and whether it
    failed."""
    text = text_of(message)
    output = _output(text, False)
    return output, output == _output(text, True), is_tool_failure(message)


def _results(messages: Sequence[Message], derived: Lookup = nothing_derived) -> dict[str, str]:
    calls: dict[str, tuple[str, bool]] = {}
    results: dict[str, str] = {}
    for message in messages:
        role = role_of(message)
        if role == "assistant":
            for call in tool_calls(message):
                calls[call["id"]] = _target(call)
            continue
        call_id = tool_call_id(message) if role == "toolResult" else None
        if call_id is None or call_id not in calls:
            continue
        target, dump = calls[call_id]
        got = derived(message)
        known = got.result if got is not None else None
        if known is None:
            output = _output(text_of(message), dump)
            if not output or is_tool_failure(message):
                continue
        else:
            output = known[0] if not dump or known[1] else None
            if not output or known[2]:
                continue
        results.pop(target, None)  # re-inserted: the dict's order is the order of the latest runs
        results[target] = collapse(output, RESULT_MAX_CHARS)
    return results


# --- carrying and merging -----------------------------------------------------------------------------------
def carried_state(previous_summary: str | None) -> WorkingState:
    """The ``## Current state`` section of a previous summary, parsed back, so the next compaction continues
    it: corrections and updates made since apply to it, and what nothing changed stays."""
    state = WorkingState()
    if not previous_summary:
        return state
    _, sections = split_sections(previous_summary)
    body = next((lines for heading, lines in sections if heading == CURRENT_STATE), None)
    if body is None:
        return state
    part = ""
    for raw in body:
        line = raw.strip()
        if line.startswith("###"):
            part = line
            continue
        if not line.startswith("- "):
            continue
        item = line[2:]
        if part == RESULTS_HEADING:
            result = _RESULT_LINE.match(item)
            if result:
                state.results[result.group("target")] = result.group("output")
            continue
        earlier = _EARLIER.match(item)
        text, was = (earlier.group("text"), earlier.group("was")) if earlier else (item, None)
        replaced = re.match(r"^(?P<text>.*?) \(replaces earlier (?P<values>[^)]*)\)$", text)
        statement = Statement.of(replaced.group("text") if replaced else text)
        if statement is None:
            continue
        if replaced:
            statement.replaced = replaced.group("values").split(", ")
        if was:
            statement.earlier = was.split(FIRST_SEPARATOR, 1)
        (state.tasks if part == TASKS_HEADING and statement.status else state.facts).append(statement)
    return state


def working_state(
    messages: Sequence[Message],
    previous_summary: str | None = None,
    read: Callable[[Message], str] = text_of,
    derived: Lookup = nothing_derived,
) -> WorkingState:
    """The state after ``messages``, continuing a previous summary's (``derived``: what the messages' preparing
    took from them)."""
    state = carried_state(previous_summary)
    _fold(state, statements(messages, read, derived))
    for target, output in _results(messages, derived).items():
        state.results.pop(target, None)
        state.results[target] = output
    return state


def merge_state(summary: str, section: str) -> str:
    """``summary`` with the state ``section`` in it: a section of that name the summary already has (a model's
    own, or a carried copy) is replaced, since the computed one holds everything the span and the previous
    summary said, corrections applied; else it is added at the end."""
    if not section:
        return summary
    lines = summary.rstrip("\n").splitlines()
    start = next((n for n, line in enumerate(lines) if line.strip() == CURRENT_STATE), None)
    if start is None:
        return "\n".join(lines).rstrip() + "\n\n" + section + "\n"
    end = next((n for n in range(start + 1, len(lines)) if SECTION_BREAK.match(lines[n].strip())), len(lines))
    rest = lines[end:]
    return "\n".join([*lines[:start], section, *(["", *rest] if rest else [])]).rstrip() + "\n"
