"""Identifiers a summary must keep, guaranteed by extraction and repair rather than hoped for from a prompt.

Summaries lose specifics: an independent count found 9.8 % of file paths, 0.2 % of commands and 1.9 % of
numbers surviving peers' compactions (peers.md §(c) 3). Here every identifier in the summarized span is
extracted, ranked, checked against the summary and — when the model dropped it — appended verbatim under
``## Exact identifiers``, with no further model call.

Extraction runs on the text a model saw (``toolResult.details`` and runtime-context messages are skipped;
thinking is skipped too, since it speculates about names that often do not exist) after secret redaction,
so a key can never become an "identifier" that the repair writes into a summary. Patterns use ASCII
classes only: Python's ``\\w`` matches CJK characters, which would glue
``修改了/src/a.ts文件`` into one path.

Decisions on ambiguous shapes (each has a test):
- A dotted quad (``10.0.0.1``, and also a four-part version such as ``1.2.3.4``) is an IP; three-part
  versions (``1.2.3``) are never extracted.
- A bare file name needs a known extension (``main.ts``, ``package.json``); ``e.g.``, ``v1.2``,
  ``obj.attr`` and ``res.json()`` are not paths (``Node.js`` is, harmlessly). Multi-segment paths accept any
  extension; a two-segment relative path without one (``and/or``, ``offset/limit``, ``text/plain``,
  ``1/2``) counts only with a directory-like head (``src/core``, ``packages/tui``), a dot-dir or ``@scope``
  head, or a trailing slash.
- ``file.ts:42`` is a path and a line number, not a host and port.
- Hex hashes need 7+ hex characters with at least one digit and one letter, so English words (``deadbeef``,
  ``accede``) and plain numbers are not hashes; plain numbers of 6+ digits are ``number``.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.defaults import IDENTIFIER_CAP
from daemon.summarize.headings import EXACT_IDENTIFIERS, SECTION_BREAK, is_heading_line
from daemon.summarize.redact import redact_secrets
from daemon.transcript.messages import Message, blocks_of, is_runtime_context, role_of, text_of, tool_calls

# --- kinds --------------------------------------------------------------------------------------------------
PATH = "path"
URL = "url"
UUID = "uuid"
HASH = "hash"
IP = "ip"
HOST_PORT = "host_port"
EMAIL = "email"
NUMBER = "number"
COMMAND = "command"
KINDS = (PATH, URL, UUID, HASH, IP, HOST_PORT, EMAIL, NUMBER, COMMAND)
# Kinds whose letters carry no meaning in their case: a summary writing a hash in capitals still kept it.
CASE_INSENSITIVE_KINDS = frozenset({HASH, UUID})

# --- algorithm constants ------------------------------------------------------------------------------------
# Commands are kept as their first line, at most this long: long enough for ``cd repo && npm test -- -t x``,
# short enough that 64 of them do not crowd the summary. A prefix of what the model quotes still matches.
COMMAND_MAX_CHARS = 160
# Anything longer is a blob (base64, minified code), not an identifier a summary should carry.
IDENTIFIER_MAX_CHARS = 300
# Tool-call argument keys that name a file (pi: ``path``; Claude-Code-style tools: ``file_path``).
PATH_ARG_KEYS = ("path", "file_path", "filePath", "filename", "file")
COMMAND_ARG_KEYS = ("command", "cmd")
_TRIVIAL_PATHS = frozenset({"", ".", "..", "./", "~", "/"})

# Ranking weights (see rank_identifiers).
RECENCY_WEIGHT = 2.0
REPETITION_WEIGHT = 1.0
REPETITION_SATURATION = 4.0  # log2(1 + count) saturates at 15 occurrences
AGENT_WEIGHT = 1.0
KIND_WEIGHT: dict[str, float] = {
    PATH: 0.5,
    COMMAND: 0.5,
    URL: 0.5,
    UUID: 0.5,
    HOST_PORT: 0.5,
    HASH: 0.4,
    EMAIL: 0.4,
    IP: 0.3,
    NUMBER: 0.0,  # long numbers in tool output are mostly timestamps and sizes
}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# --- patterns -----------------------------------------------------------------------------------------------
# Characters that may not directly precede a token for it to start there (keeps us out of the middle of
# words, paths and URLs).
_LB = r"(?<![A-Za-z0-9_.:/~@\\-])"
_TRAILING_PUNCT = ".,;:!?'\"`*>)]}，。；：！？、）」』】"

_URL = re.compile(
    r"(?<![A-Za-z0-9])(?P<scheme>(?:https?|ftp|wss?|file|ssh|git|sftp|s3|gs|postgres(?:ql)?|mysql|redis|"
    r"mongodb(?:\+srv)?|amqps?)://)(?:[^\s/@<>\"'`]+@)?(?P<rest>[^\s<>\"'`{}|\\^]+)",
    re.IGNORECASE,
)
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
_UUID = re.compile(
    r"(?<![0-9A-Za-z_-])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9A-Za-z_])"
)
_IPV4 = r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_PORT = r":(?P<port>\d{2,5})(?![\d:])"
# Extensions that make ``name.ext:NN`` a file location rather than a host and port.
_FILE_EXTENSIONS = _words(
    """
    py pyi pyx ts tsx js jsx mjs cjs mts cts json jsonl json5 md mdx rst txt yaml yml toml ini cfg conf env
    lock rs go c h cc cpp hpp cxx java kt kts scala swift m mm rb php pl lua r sh bash zsh fish ps1 bat cmd
    sql html htm css scss sass less vue svelte xml svg csv tsv log gradle properties dockerfile proto graphql
    gql tf hcl nix ex exs erl hs ml elm dart zig vim el clj cs fs vb ipynb patch diff tmpl tpl j2 mk cmake in
    out png jpg jpeg gif webp ico pdf zip gz tgz bz2 xz tar whl jar so dylib dll exe wasm bin db sqlite pem
    crt key
    """
)
# Extensions that make a lone word a file name; ``log`` and similar are left out because ``console.log`` is
# code far more often than a file.
_BARE_FILE_EXTENSIONS = _FILE_EXTENSIONS - {"log", "in", "out", "key", "bin", "env", "r", "m", "h", "c", "el"}
_HOST = r"(?:localhost|(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+(?P<tld>[A-Za-z]{2,24}))"
_HOST_PORT = re.compile(
    r"(?<![A-Za-z0-9_.:/@\\-])(?P<host>" + _HOST + r"|" + _IPV4 + r"|\[[0-9A-Fa-f:.]+\])" + _PORT,
)
_IPV4_RE = re.compile(r"(?<![A-Za-z0-9_.])" + _IPV4 + r"(?![\d.]*\d)(?!\.\d)")
_IPV6_CANDIDATE = re.compile(
    r"(?<![A-Za-z0-9_:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![A-Za-z0-9_:])"
)
_SEG = r"[A-Za-z0-9_.@+~%=-]+"
_WINDOWS_PATH = re.compile(
    r"(?<![A-Za-z0-9_])(?:[A-Za-z]:\\|\\\\[A-Za-z0-9_.$-]+\\)(?:[^\\/\s:*?\"<>|`']+\\)*[^\\/\s:*?\"<>|`']*"
)
_QUOTED_PATH = re.compile(r"(?P<q>['\"`])(?P<p>(?:~?/|[A-Za-z]:\\)[^'\"`\n]{1,300}?)(?P=q)")
_ABS_PATH = re.compile(_LB + r"(?:~|\.{1,2})?(?:/" + _SEG + r")+/?")
_REL_PATH = re.compile(_LB + _SEG + r"(?:/" + _SEG + r")+/?")
_BARE_FILE = re.compile(
    _LB + r"(?:[A-Za-z0-9_@+~-][A-Za-z0-9_.@+~-]*\.(?P<ext>[A-Za-z0-9]{1,10})|\.[A-Za-z][A-Za-z0-9_.-]{1,30})"
    r"(?![A-Za-z0-9_/(])"  # res.json( is a call, not a file
)
# Receivers that make ``name.ext`` code (``self.json``, ``req.ts``) rather than a file name.
_CODE_RECEIVERS = frozenset(
    {
        "this",
        "self",
        "res",
        "req",
        "response",
        "request",
        "ctx",
        "window",
        "document",
        "process",
        "console",
        "obj",
    }
)
_DOTFILES = _words(
    """
    .env .gitignore .gitattributes .gitmodules .dockerignore .npmrc .nvmrc .bashrc .zshrc .profile
    .editorconfig .prettierrc .eslintrc .babelrc .envrc .pre-commit-config.yaml .python-version
    .tool-versions .mcp.json
    """
)
_HEX = re.compile(r"(?<![A-Za-z0-9_\-/])(?:0x)?[0-9a-fA-F]{7,}(?![A-Za-z0-9_])")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.,\-])\d{6,}(?![A-Za-z0-9_]|[.,]\d)")

# Heads that make a two-word relative path (src/core, packages/tui) a path rather than prose.
_DIR_HEADS = _words(
    """
    src lib libs packages apps app test tests spec specs docs doc bin sbin scripts script tools cmd pkg
    internal build dist out target config configs conf etc usr var opt home tmp include examples example
    assets static public components pages api server client web www data fixtures vendor deps third_party
    crates modules plugins services node_modules migrations templates
    """
)


@dataclass(frozen=True, slots=True)
class Identifier:
    """One identifier of the span: where it was seen and how often, for ranking."""

    text: str
    kind: str
    from_user: bool  # appeared in a user message (or a command the user ran with ``!``)
    count: int  # occurrences over the span
    last_index: int  # index, in the messages given, of the last message it occurred in
    first_index: int = 0
    from_agent: bool = False  # the agent used it in its own text or tool-call arguments


@dataclass
class _Acc:
    text: str
    kind: str
    first_index: int
    last_index: int
    count: int = 0
    from_user: bool = False
    from_agent: bool = False


@dataclass
class _Collector:
    found: dict[str, _Acc] = field(default_factory=dict)

    def add(self, text: str, kind: str, index: int, *, user: bool, agent: bool) -> None:
        if not text or len(text) > IDENTIFIER_MAX_CHARS:
            return
        key = _key(text, kind)
        acc = self.found.get(key)
        if acc is None:
            acc = self.found[key] = _Acc(text, kind, index, index)
        acc.count += 1
        acc.last_index = max(acc.last_index, index)
        acc.from_user = acc.from_user or user
        acc.from_agent = acc.from_agent or agent

    def scan(self, text: str, index: int, *, user: bool, agent: bool) -> None:
        for found, kind in scan_text(text):
            self.add(found, kind, index, user=user, agent=agent)


def _key(text: str, kind: str) -> str:
    return text.lower() if kind in CASE_INSENSITIVE_KINDS else text


def _trim(token: str) -> str:
    """Drop trailing sentence punctuation, and a closing bracket that has no opening partner inside."""
    while token:
        last = token[-1]
        if last in ")]}":
            opening = {")": "(", "]": "[", "}": "{"}[last]
            if token.count(opening) >= token.count(last):
                break
        elif last not in _TRAILING_PUNCT:
            break
        token = token[:-1]
    return token


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span blanked out (spaces keep the positions and act as token boundaries)."""
    pieces: list[str] = []
    last = 0
    for start, end in spans:
        pieces += (text[last:start], " " * (end - start))
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _path_ok(path: str) -> bool:
    """Whether a slash-separated token is a path rather than prose, a fraction or a MIME type."""
    stripped = path.rstrip("/")
    absolute = stripped.startswith(("/", "~/", "./", "../"))
    segments = [s for s in stripped.split("/") if s and s not in (".", "..", "~")]
    if not segments:
        return False
    last = segments[-1]
    has_ext = (
        "." in last.strip(".") and last.rsplit(".", 1)[1].isalnum() and not last.rsplit(".", 1)[1].isdigit()
    )
    if absolute:
        return has_ext or len(segments) >= 2
    if len(segments) < 2:
        return False
    if all(s.replace(".", "").replace(",", "").isdigit() for s in segments):
        return False  # 1/2, 12/08/2024
    if has_ext or len(segments) >= 3:
        return True
    first = segments[0].lower()
    # Two words joined by a slash are prose far more often than a path (offset/limit, and/or, title/heading);
    # they count only when shaped like one: a directory-like head, a dot-dir or @scope, or a trailing slash.
    return path.endswith("/") or first in _DIR_HEADS or first[0] in ".@"


def _url(m: re.Match[str]) -> tuple[str, str] | None:
    rest = _trim(m.group("rest"))
    return (m.group("scheme") + rest, URL) if rest and "[REDACTED" not in rest else None


def _windows_path(m: re.Match[str]) -> tuple[str, str] | None:
    token = _trim(m.group(0))
    return (token, PATH) if token.count("\\") >= 2 or "." in token.rsplit("\\", 1)[-1] else None


def _host_port(m: re.Match[str]) -> tuple[str, str] | None:
    tld = m.group("tld")
    if tld and tld.lower() in _FILE_EXTENSIONS:
        return None  # main.ts:42 is a file location
    return (m.group(0), HOST_PORT) if 0 < int(m.group("port")) < 65536 else None


def _ipv6(m: re.Match[str]) -> tuple[str, str] | None:
    token = m.group(0)
    if not any(c.isdigit() for c in token):
        return None
    try:
        ipaddress.IPv6Address(token)
    except ValueError:
        return None
    return token, IP


def _slash_path(m: re.Match[str]) -> tuple[str, str] | None:
    token = _trim(m.group(0))
    return (token, PATH) if _path_ok(token) else None


def _bare_file(m: re.Match[str]) -> tuple[str, str] | None:
    token = _trim(m.group(0))
    ext = m.group("ext")
    if token.split(".", 1)[0] in _CODE_RECEIVERS:
        return None
    if ext is not None:
        return (token, PATH) if ext.lower() in _BARE_FILE_EXTENSIONS and token.endswith(ext) else None
    return (token, PATH) if token in _DOTFILES else None


def _hex(m: re.Match[str]) -> tuple[str, str] | None:
    token = m.group(0)
    digits = token[2:] if token[:2].lower() == "0x" else token
    return (token, HASH) if any(c.isdigit() for c in digits) and any(c.isalpha() for c in digits) else None


def _plain(kind: str) -> Callable[[re.Match[str]], tuple[str, str] | None]:
    return lambda m: (m.group(0), kind)


# Stages in priority order: (pattern, needles, accept, mask even when rejected). A stage runs only when one
# of its needles occurs in the text; each accepted match is blanked out before the next stage, so the host in
# a URL or the hash in a path is not found a second time. A rejected URL is blanked too (its parts are not
# identifiers of their own).
_STAGES: tuple[
    tuple[re.Pattern[str], tuple[str, ...], Callable[[re.Match[str]], tuple[str, str] | None], bool], ...
] = (
    (_URL, ("://",), _url, True),
    (_EMAIL, ("@",), _plain(EMAIL), False),
    (_UUID, ("-",), _plain(UUID), False),
    (_WINDOWS_PATH, ("\\",), _windows_path, False),
    (_HOST_PORT, (":",), _host_port, False),
    (_IPV4_RE, (".",), _plain(IP), False),
    (_IPV6_CANDIDATE, ("::", ":"), _ipv6, False),
    (_ABS_PATH, ("/",), _slash_path, False),
    (_REL_PATH, ("/",), _slash_path, False),
    (_BARE_FILE, (".",), _bare_file, False),
    (_HEX, (), _hex, False),
    (_NUMBER, (), _plain(NUMBER), False),
)


# Every identifier kind holds one of these characters, and none holds whitespace: words without them (most
# prose and code) are dropped before the patterns run, which halves the scanning time on real sessions.
_CANDIDATE_CHAR = re.compile(r"[0-9/\\.:@]")


def candidate_text(text: str) -> str:
    """The whitespace-separated words of ``text`` that could hold an identifier, joined by spaces."""
    return " ".join([word for word in text.split() if _CANDIDATE_CHAR.search(word)])


def _quoted_paths(text: str) -> tuple[list[str], str]:
    """Quoted absolute paths holding spaces (a pasted ``'/tmp/Screenshot 2025-11-21 at 01.48.00.png'``), and
    the text with them blanked out; they must be found before the text is split into words."""
    found: list[str] = []
    spans: list[tuple[int, int]] = []
    for m in _QUOTED_PATH.finditer(text):
        path = m.group("p")
        if " " in path and "  " not in path and path == path.strip():
            parts = [p for p in re.split(r"[/\\]", path) if p]
            if len(parts) >= 2 and all(len(p) <= 120 for p in parts):
                found.append(path)
                spans.append(m.span())
    return found, _masked(text, spans) if spans else text


def scan_text(text: str) -> Iterator[tuple[str, str]]:
    """(identifier, kind) pairs in ``text``, stage by stage (see ``_STAGES``)."""
    if " /" in text or "'/" in text or '"/' in text or ":\\" in text:
        quoted, text = _quoted_paths(text)
        for path in quoted:
            yield path, PATH
    text = candidate_text(text)
    for pattern, needles, accept, mask_rejected in _STAGES:
        if not text:
            return
        if needles and not any(n in text for n in needles):
            continue
        spans: list[tuple[int, int]] = []
        for m in pattern.finditer(text):
            found = accept(m)
            if found is not None:
                yield found
            if found is not None or mask_rejected:
                spans.append(m.span())
        if spans:
            text = _masked(text, spans)


def command_identifier(command: str) -> str:
    """A command as it is guaranteed in a summary: its first non-empty line, capped."""
    for line in command.strip().splitlines():
        if line.strip():
            return line.strip()[:COMMAND_MAX_CHARS].rstrip()
    return ""


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _scan_tool_call(block: dict[str, Any], index: int, out: _Collector) -> None:
    args = block.get("arguments")
    if not isinstance(args, dict):
        out.scan(redact_secrets("\n".join(_strings(args))), index, user=False, agent=True)
        return
    for key in COMMAND_ARG_KEYS:
        value = args.get(key)
        if isinstance(value, str):
            out.add(command_identifier(redact_secrets(value)), COMMAND, index, user=False, agent=True)
    for key in PATH_ARG_KEYS:
        value = args.get(key)
        if isinstance(value, str) and "\n" not in value:
            path = _trim(redact_secrets(value.strip()))
            if path not in _TRIVIAL_PATHS and "[REDACTED" not in path:
                out.add(path, PATH, index, user=False, agent=True)
    rest = [s for k, v in args.items() if k not in PATH_ARG_KEYS for s in _strings(v)]
    out.scan(redact_secrets("\n".join(rest)), index, user=False, agent=True)


def extract_identifiers(messages: Sequence[Message]) -> list[Identifier]:
    """Every identifier of the span, in order of first appearance; ``last_index`` indexes ``messages``."""
    out = _Collector()
    for index, message in enumerate(messages):
        if is_runtime_context(message):
            continue
        role = role_of(message)
        if role == "user":
            out.scan(redact_secrets(text_of(message)), index, user=True, agent=False)
        elif role == "assistant":
            out.scan(redact_secrets(text_of(message)), index, user=False, agent=True)
            for block in tool_calls(message):
                _scan_tool_call(block, index, out)
        elif role == "toolResult":
            text = "\n".join(
                b["text"]
                for b in blocks_of(message)
                if b.get("type") == "text" and isinstance(b.get("text"), str)
            )
            out.scan(redact_secrets(text), index, user=False, agent=False)
        elif role == "bashExecution":
            if message.get("excludeFromContext"):
                continue
            command = message.get("command")
            if isinstance(command, str):
                # The user typed it (``!cmd``): it counts as theirs.
                out.add(command_identifier(redact_secrets(command)), COMMAND, index, user=True, agent=False)
                out.scan(redact_secrets(command), index, user=True, agent=False)
            output = message.get("output")
            if isinstance(output, str):
                out.scan(redact_secrets(output), index, user=False, agent=False)
        elif role in ("custom", "compactionSummary", "branchSummary"):
            out.scan(redact_secrets(text_of(message)), index, user=False, agent=False)
    return [
        Identifier(a.text, a.kind, a.from_user, a.count, a.last_index, a.first_index, a.from_agent)
        for a in sorted(out.found.values(), key=lambda a: (a.first_index, a.text))
    ]


# --- ranking ------------------------------------------------------------------------------------------------
def identifier_score(ident: Identifier, span_length: int) -> float:
    """Higher is more worth keeping.

    score = 2.0 × recency + 1.0 × repetition + 1.0 × (agent used it) + kind weight, where
    recency = (last_index + 1) / span_length (1.0 for the newest message) and
    repetition = min(log2(1 + count), 4) / 4 (saturating at 15 occurrences). The agent's own use (its text or
    tool-call arguments) marks what the work is about, as opposed to what merely scrolled past in tool output.
    """
    recency = (ident.last_index + 1) / max(1, span_length)
    repetition = min(math.log2(1 + ident.count), REPETITION_SATURATION) / REPETITION_SATURATION
    agent = 1.0 if ident.from_agent else 0.0
    return (
        RECENCY_WEIGHT * recency
        + REPETITION_WEIGHT * repetition
        + AGENT_WEIGHT * agent
        + KIND_WEIGHT.get(ident.kind, 0.0)
    )


def rank_identifiers(ids: Iterable[Identifier], cap: int = IDENTIFIER_CAP) -> list[Identifier]:
    """Those the user wrote first (all of them, whatever the cap), then the best-scoring others up to ``cap``.

    Within each group the order is score descending, then most recent, then text, so the result is
    deterministic. The result exceeds ``cap`` only when the user alone wrote more than ``cap`` identifiers.
    """
    items = list(ids)
    span = max((i.last_index for i in items), default=-1) + 1

    def order(i: Identifier) -> tuple[float, int, str]:
        return (-identifier_score(i, span), -i.last_index, i.text)

    user = sorted((i for i in items if i.from_user), key=order)
    others = sorted((i for i in items if not i.from_user), key=order)
    return user + others[: max(0, cap - len(user))]


# --- checking and repair ------------------------------------------------------------------------------------
def in_summary(ident: Identifier, summary: str, folded: str | None = None) -> bool:
    """Exact substring, except hashes and UUIDs, which match whatever their case."""
    if ident.kind in CASE_INSENSITIVE_KINDS:
        return ident.text.lower() in (folded if folded is not None else summary.lower())
    return ident.text in summary


def missing_identifiers(summary: str, ranked: Sequence[Identifier]) -> list[Identifier]:
    """The ranked identifiers the summary does not contain, in rank order."""
    folded = summary.lower()
    return [i for i in ranked if not in_summary(i, summary, folded)]


@dataclass(frozen=True, slots=True)
class IdentifierReport:
    """Retention before and after the deterministic repair (the figures ``compact --json`` prints)."""

    total: int
    kept_by_model: int
    in_summary: int
    missing_before: list[Identifier]

    @property
    def retention_before(self) -> float:
        return self.kept_by_model / self.total if self.total else 1.0

    @property
    def retention_after(self) -> float:
        return self.in_summary / self.total if self.total else 1.0


def identifier_line(text: str) -> str:
    """A markdown list item holding ``text`` verbatim as inline code (longer fence if it holds backticks)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest or text.startswith("`") or text.endswith("`") else ""
    return f"- {fence}{pad}{text}{pad}{fence}"


# Placeholder bodies a model (or OpenClaw's fallback) writes under an empty heading; replaced by the repair.
_PLACEHOLDERS = frozenset(
    {"none", "none.", "none captured", "none captured.", "n/a", "-", "- none", "- none."}
)


def ensure_identifiers(summary: str, ranked: Sequence[Identifier]) -> tuple[str, IdentifierReport]:
    """Append every ranked identifier the summary lacks under ``## Exact identifiers``, in rank order.

    The heading is created at the end when absent; missing lines go at the end of its section (before the
    next level-1/2 heading). A placeholder such as "None." that is the section's only content is replaced.
    Idempotent: a repaired summary has nothing missing, so a second call returns it unchanged.
    """
    missing = missing_identifiers(summary, ranked)
    total = len(ranked)
    if not missing:
        return summary, IdentifierReport(total, total, total, [])
    new_lines = [identifier_line(i.text) for i in missing]
    lines = summary.splitlines()
    heading_at = next((n for n, line in enumerate(lines) if is_heading_line(line, EXACT_IDENTIFIERS)), None)
    if heading_at is None:
        body = summary.rstrip("\n")
        repaired = (body + "\n\n" if body else "") + EXACT_IDENTIFIERS + "\n" + "\n".join(new_lines) + "\n"
    else:
        end = next(
            (n for n in range(heading_at + 1, len(lines)) if SECTION_BREAK.match(lines[n].strip())),
            len(lines),
        )
        section = lines[heading_at + 1 : end]
        content = [line for line in section if line.strip()]
        if content and all(line.strip().lower() in _PLACEHOLDERS for line in content):
            section = []
        while section and not section[-1].strip():
            section.pop()
        tail = lines[end:]
        rebuilt = [*lines[: heading_at + 1], *section, *new_lines]
        if tail:
            rebuilt += ["", *tail]
        repaired = "\n".join(rebuilt) + ("\n" if summary.endswith("\n") or not tail else "")
    still = missing_identifiers(repaired, ranked)
    return repaired, IdentifierReport(total, total - len(missing), total - len(still), missing)
