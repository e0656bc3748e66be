"""Identifiers a summary must keep, guaranteed by extraction and repair rather than hoped for from a prompt.

Summaries lose specifics: an independent count found 9.8 % of file paths, 0.2 % of commands and 1.9 % of
numbers surviving peers' compactions (design.md §7.8). Here every identifier in the summarized span is
extracted, ranked, checked against the summary and — when the model dropped it — appended verbatim under
``## Exact identifiers``, with no further model call.

Extraction runs on the text a model saw (``toolResult.details`` and runtime-context messages are skipped;
thinking is skipped too, since it speculates about names that often do not exist) after secret redaction,
so a key can never become an "identifier" that the repair writes into a summary. Patterns use ASCII
classes only: Python's ``\\w`` matches CJK characters, which would glue
``修改了/src/a.ts文件`` into one path.

The kinds are those the seeds and OpenClaw's structured prompt name: paths and file names, URLs, UUIDs,
hashes, IPs, host:port, hostnames, ports, e-mails, long numbers, commands, ticket keys (``OPS-27203``),
issue and pull-request references (``#1234``, ``PR 567``, ``!89``, ``owner/repo#12``), prefixed ids
(``req_8f3a9c2d``, ``cus_…``), dates and times, and versions written as versions (``v2.4.1``,
``pkg@1.2.3``, ``==1.2.3``, ``1.2.3-rc.1``). What the user or the agent wrote is always kept; the cap is cut
from the rest, tool output first (``rank_identifiers``).

Decisions on ambiguous shapes (each has a test):
- A dotted quad (``10.0.0.1``, and also a four-part version such as ``1.2.3.4``) is an IP; a bare
  three-part number (``1.2.3``) is never extracted, a version is one written as a version: ``v1.2``,
  ``pkg@1.2.3``, ``requests==2.31.0``, ``^18.2.0``, ``1.2.3-rc.1``, ``version 3.12.1``. ``v2`` is a word.
- A bare ``#N`` or ``!N`` needs two digits ("#1 priority" is a rank); with ``PR``/``MR``/``issue`` or a
  repository in front, one is enough. ``#`` with six or eight digits is a colour (``#808080``).
- A ticket key is upper case with two letters or more (``OPS-27203``, ``K8S-12``); standards and models
  (``UTF-8``, ``SHA-256``, ``ISO-8601``, ``GPT-4``) are not tickets. ``GH-12`` is an issue.
- A prefixed id is one lower-case prefix, an underscore and a generated-looking tail of 8+ characters
  (digits mixed with letters, or mixed case, or all digits); key and token prefixes (``sk_``, ``whsec_``,
  ``ghp_``, anything with "key", "token", "secret" …) are refused even when redaction let one through.
- A hostname without a scheme needs a known TLD (``api.example.com``, ``db-3.internal``); TLDs that are
  also attribute names (``.app``, ``.dev``, ``.local``, ``.info``) need a third label or a digit or dash in
  the first (``self.app`` and ``logger.info`` are code, ``main.rs`` a file).
- A port is kept as ``port N`` from ``port 5432``, ``PORT=5432``, ``端口 5432`` or a lone ``:5432``, and a
  summary keeps it when the number is there.
- Dates need a valid month and day; times a valid hour (``3:16`` is a time, ``16:9`` and ``x[1:10]`` not).
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

import bisect
import heapq
import ipaddress
import itertools
import math
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from compactd.core.messages import Message, is_runtime_context, role_of, tool_calls
from compactd.datarecord import datarecord
from compactd.defaults import IDENTIFIER_CAP
from compactd.summarize.headings import EXACT_IDENTIFIERS, SECTION_BREAK, is_heading_line, split_sections
from compactd.summarize.redact import SpanText, redact_secrets

__all__ = [
    "COMMAND_MAX_CHARS",
    "IP",
    "KINDS",
    "PATH",
    "PORT",
    "URL",
    "UUID",
    "WRITTEN_MAX",
    "Findings",
    "FindingsMerge",
    "Identifier",
    "IdentifierReport",
    "WordMemo",
    "candidate_text",
    "carried_identifiers",
    "command_identifier",
    "ensure_identifiers",
    "extract_identifiers",
    "findings_valid",
    "identifier_line",
    "identifier_score",
    "in_summary",
    "merge_findings",
    "message_findings",
    "missing_identifiers",
    "rank_identifiers",
    "scan_text",
    "with_carried",
]

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
TICKET = "ticket"  # OPS-27203, CVE-2024-12345
ISSUE = "issue"  # #1234, PR 567, PR #567, !89, GH-12, owner/repo#12
PREFIXED_ID = "prefixed_id"  # req_8f3a9c2d, cus_NffrFeUfNV2Hib, i-0abc1234
HOSTNAME = "hostname"  # db-3.internal, api.example.com (no scheme, no port)
PORT = "port"  # port 5432, PORT=8080, 端口 5432, :9443 (kept as "port N")
DATE = "date"  # 2026-11-30, 2026-11-30T14:05:00Z, 30 Nov 2026, Nov 30, 2026, 2026年11月30日
TIME = "time"  # 14:05, 14:05:00
VERSION = "version"  # v2.4.1, pkg@1.2.3, requests==2.31.0, 1.2.3-rc.1, version 3.12.1
KINDS = (
    PATH,
    URL,
    UUID,
    HASH,
    IP,
    HOST_PORT,
    EMAIL,
    NUMBER,
    COMMAND,
    TICKET,
    ISSUE,
    PREFIXED_ID,
    HOSTNAME,
    PORT,
    DATE,
    TIME,
    VERSION,
)
# Kinds whose letters carry no meaning in their case: a summary writing a hash in capitals still kept it.
CASE_INSENSITIVE_KINDS = frozenset({HASH, UUID, HOSTNAME})

# A word's findings: (stage index, identifier, kind), see ``scan_text``.
WordMemo = dict[str, tuple[tuple[int, str, str], ...]]
# Words remembered per span before the memo starts over (about 20 MB): a span has far fewer distinct words.
WORD_MEMO_MAX = 200_000

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

# Identifiers the user or the agent wrote are all kept, up to this many: three times the most found in a
# summarized span of the real sessions (79 of 1,682), and about 8,000 characters, half the committed summary;
# past it the list would squeeze out the rest of the summary.
WRITTEN_MAX = 256

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
    TICKET: 0.5,
    ISSUE: 0.5,
    PREFIXED_ID: 0.5,
    HOSTNAME: 0.4,
    PORT: 0.3,
    VERSION: 0.3,
    DATE: 0.1,  # tool output is full of log timestamps
    TIME: 0.0,
}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# --- patterns -----------------------------------------------------------------------------------------------
# Characters that may not directly precede a token for it to start there (keeps us out of the middle of
# words, paths and URLs).
_LB = r"(?<![A-Za-z0-9_.:/~@\\-])"
_TRAILING_PUNCT = ".,;:!?'\"`*>)]}，。；：！？、）」』】"

# Full-width CJK punctuation ends a URL: "见https://x/y。然后" must not take "。然后" along.
_URL = re.compile(
    r"(?<![A-Za-z0-9])(?P<scheme>(?:https?|ftp|wss?|file|ssh|git|sftp|s3|gs|postgres(?:ql)?|mysql|redis|"
    r"mongodb(?:\+srv)?|amqps?)://)(?:[^\s/@<>\"'`]+@)?(?P<rest>[^\s<>\"'`{}|\\^，。；：！？、（）「」『』【】]+)",
    re.IGNORECASE,
)
# The e-mail and UUID patterns start with a character set, then look behind (see _after, below).
_EMAIL = re.compile(
    r"[A-Za-z0-9._%+-](?<![A-Za-z0-9._%+-].)[A-Za-z0-9._%+-]*+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
_UUID = re.compile(
    r"[0-9a-fA-F](?<![0-9A-Za-z_-].)[0-9a-fA-F]{7}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"(?![0-9A-Za-z_])"
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
    crt key docx xlsx pptx odt ods odp rtf epub mp3 mp4 wav flac mov mkv avi webm heic tiff bmp parquet avro
    npy npz pkl onnx safetensors gguf ckpt pth h5 iso dmg apk deb rpm msi bak sqlite3 p12 pfx csr
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


# --- the kinds the seeds name besides paths and hashes: keys, references, ids, hosts, ports, dates, versions --
# Each of these patterns starts by consuming one character of a set (or one literal per branch) and only then
# looks behind at the character before it: a pattern that starts with a set lets the regex engine skip ahead
# in C, one that starts with a lookbehind is tried at every position (about 10x slower on real text).
def _after(first: str, not_before: str) -> str:
    """``first`` (one character or a class) not preceded by a character of the class body ``not_before``."""
    return first + r"(?<![" + not_before + r"].)"


def _branches(words_and_tails: Iterable[tuple[str, str]], not_before: str) -> str:
    """Literal words, each followed by its tail and not preceded by a character of ``not_before``, as one
    alternation whose branches all start with a literal."""
    return (
        "(?:"
        + "|".join(_after(re.escape(w[0]), not_before) + re.escape(w[1:]) + t for w, t in words_and_tails)
        + ")"
    )


def _keywords(words: Iterable[str], not_before: str, tail: str = "") -> str:
    return _branches(((w, tail) for w in words), not_before)


# Ticket keys: an upper-case project key with two letters at least, a dash and a number. Keys that name
# standards, encodings and models (UTF-8, SHA-256, ISO-8601, GPT-4, COVID-19) are not tickets; CVE ids are.
_TICKET = re.compile(
    _after(r"(?P<t>[A-Z])", r"A-Za-z0-9_.\\-")
    + r"(?:(?<=C)VE-\d{4}-\d{4,7}|(?P<key>[A-Z0-9]{1,9})-[1-9]\d{0,6})(?![0-9A-Za-z_]|[-.]\d)"
)
_NOT_TICKET_KEYS = _words(
    """
    UTF UCS SHA MD ISO IEC IEEE AES DES RSA DSA ECDSA ED EC HMAC PBKDF CRC BASE GPT COVID SARS HTTP HTTPS TLS
    SSL IPV DDR LPDDR GDDR USB PCIE WPA LTE MPEG MP ANSI ASCII POSIX CP WIN WINDOWS LATIN KOI GB EUC ARM ARMV
    RFC TOP FY
    """
)
_ISSUE_KEYS = frozenset({"GH", "PR", "MR"})  # GH-12 is a GitHub issue, not a project's ticket
# Issue and pull-request references without a space ("PR 567" and "MR !89" are phrases, below). A bare "#1"
# is a rank far more often than an issue ("#1 priority"), so a bare reference needs two digits.
_ISSUE = re.compile(
    "(?:"
    + _after("#", r"A-Za-z0-9_&#/\\")
    + r"\d{2,7}|"
    + _after("!", r"A-Za-z0-9_!)\]")
    + r"\d{2,7}|"  # GitLab merge requests: !89
    + _after("P", "A-Za-z0-9_")
    + r"R[#!]?\d{1,7}|"  # PR#567
    + _after("M", "A-Za-z0-9_")
    + r"R[#!]?\d{1,7})(?![0-9A-Za-z_])"
)
_ISSUE_IN_REPO = re.compile(  # owner/repo#12
    _after("[A-Za-z0-9]", r"A-Za-z0-9_./\\-") + r"[A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+#\d{1,7}(?![0-9A-Za-z_])"
)
# "#808080" is a colour: six or eight digits after a bare "#" are left alone.
_COLOUR_DIGITS = frozenset({6, 8})
# Prefixed ids (Stripe's cus_…, req_…, Anthropic's toolu_…, msg_…): one lower-case prefix, one underscore and
# a random-looking tail. Snake-case names (load_config2, test_function12) have a word tail and are skipped.
_PREFIXED = re.compile(
    "(?P<prefix>"
    + _after("[a-z]", r"A-Za-z0-9_.\\/-")
    + r"[a-z0-9]{1,11})_(?P<tail>[A-Za-z0-9]{8,64})(?![A-Za-z0-9_-])"
)
_AWS_PREFIXES = (
    "i",
    "ami",
    "vol",
    "snap",
    "sg",
    "subnet",
    "vpc",
    "vpce",
    "eni",
    "igw",
    "nat",
    "rtb",
    "acl",
    "tgw",
    "lt",
    "pcx",
)
_AWS_NEEDLES = tuple(p + "-" for p in _AWS_PREFIXES)
_AWS_ID = re.compile(  # i-0abc1234def567890, vol-…, sg-…
    _keywords(_AWS_PREFIXES, r"A-Za-z0-9_.\\/-") + r"-(?:[0-9a-f]{17}|[0-9a-f]{8})(?![A-Za-z0-9_-])"
)
# Prefixes of keys and tokens. redact.py replaces the known formats before extraction; these are refused even
# when a shorter or unknown variant got through, so a secret is never "guaranteed" into a summary.
_SECRET_PREFIXES = _words(
    """
    sk rk pk whsec ghp gho ghu ghs ghr github hf npm pypi shpat shpss shpca shppa dop doo dor glpat xoxb xoxp
    xoxa xoxr xoxs sess key keys apikey api token tok secret pat auth bearer pwd pass passwd password private
    access refresh session cred creds credential credentials sig signature otp
    """
)
_SECRETISH = re.compile(r"key|secret|token|pass|auth|cred|sess", re.IGNORECASE)
# Hostnames without a scheme or port need a top-level domain from these lists: "self.app", "logger.info" and
# "main.rs" are code and files. TLDs that are common attribute names need a third label or a label with a
# digit or dash ("api.myapp.dev", "db-3.local").
_STRONG_TLDS = _words(
    """
    com net org edu gov io ai co uk de fr jp cn nl eu ca au ch se kr tw hk sg nz ru br
    internal intranet lan localdomain corp arpa onion
    """
)
_WEAK_TLDS = _words(
    "dev app cloud local test example invalid localhost info xyz tech site online me svc cluster"
)
# One possessive run of host characters, cut into labels by _hostname: far faster than a pattern of labels.
_HOSTNAME = re.compile(
    _after("[A-Za-z0-9]", r"A-Za-z0-9_.@/\\:-") + r"[A-Za-z0-9-]*+\.[A-Za-z0-9.-]*+(?![_@(])"
)
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
# ":9443" alone; ports named as ports ("port 5432", "PORT=8080", "端口 5432") are phrases (below).
_COLON_PORT = re.compile(
    _after(":", r"A-Za-z0-9_.:/\\\])(\[\"'`-") + r"(?P<port>\d{2,5})(?![0-9A-Za-z_:]|\.\d)"
)
# Shapes that start with a digit, in one pattern (one pass over the digits of the text): dates (2026-11-30,
# 2026-11-30T14:05:00Z, 2026/11/30, 11/30/2026, 30.11.2026, 2026年11月30日), versions with a pre-release or
# build part (1.2.3-rc.1, 1.0.0+build.5; a bare "1.2.3" stays unextracted) and times (14:05, 14:05:00, 2:05pm).
# Their numbers are checked by _digit_led.
_DIGIT_LED = re.compile(
    _after(r"\d", r"A-Za-z0-9_.:/\\@-")
    + r"(?:(?P<date>(?:\d{3}-\d\d-\d\d(?:T\d\d:\d\d(?::\d\d(?:[.,]\d{1,9})?)?(?:Z|[+-]\d\d(?::?\d\d)?)?)?"
    r"|\d{3}/\d\d?/\d\d?|\d?[/.]\d\d?[/.]\d{4})(?![0-9A-Za-z_]|[.:/-]\d)|(?:\d{3}年\d\d?|\d?)月\d\d?[日号])"
    r"|(?P<semver>\d*\.\d+\.\d+(?:-(?=[0-9A-Za-z.]*[A-Za-z])[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*"
    r"(?:\+[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?|\+[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)(?![0-9A-Za-z_@]|\.\d))"
    r"|(?P<time>\d?:[0-5]\d(?::[0-5]\d(?:\.\d{1,6})?)?(?:[AaPp][Mm])?(?![0-9A-Za-z_:]|\.\d)))"
)
# Versions written as versions (and see _DIGIT_LED).
_NOT_BEFORE_VERSION = r"A-Za-z0-9_.\\/@-"
_SEMVER_TAIL = (
    r"(?:-(?=[0-9A-Za-z.]*[A-Za-z])[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?(?:\+[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?"
)
_VERSION_END = r"(?![0-9A-Za-z_@]|\.\d)"
_VERSION_V = re.compile(  # v2.4.1, v1.2, v3.0.0-beta.2
    _after("[vV]", _NOT_BEFORE_VERSION) + r"\d+(?:\.\d+){1,3}" + _SEMVER_TAIL + _VERSION_END
)
_VERSION_NAMED = re.compile(
    _after("[@A-Za-z0-9]", _NOT_BEFORE_VERSION) + r"(?:"
    # pkg@1.2.3, @scope/pkg@^4.5, react@18
    r"(?:(?<=@)[a-z0-9][a-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*|(?<!@)[A-Za-z0-9._-]*)@[\^~]?\d+(?:\.(?:\d+|x|\*)){0,3}"
    + _SEMVER_TAIL
    # requests==2.31.0, numpy>=1.26.4, django[argon2]~=5.0
    + r"|(?<!@)[A-Za-z0-9._-]+(?:\[[A-Za-z0-9_,.-]+\])?(?:===|==|~=|>=|<=|!=)\d+(?:\.(?:\d+|\*))+"
    r"(?:(?:a|b|rc|dev|post|alpha|beta)\d*)?)" + _VERSION_END
)
_VERSION_OPERATOR = re.compile(  # ==1.2.3, ^18.2.0 and ~1.4.2 in a package.json
    "(?:"
    + _after("=", r"A-Za-z0-9_.\\/@=<>!~-")
    + r"==?\d+(?:\.\d+)+|"
    + _after(r"[\^~]", _NOT_BEFORE_VERSION)
    + r"\d+\.\d+\.\d+"
    + _SEMVER_TAIL
    + ")"
    + _VERSION_END
)
# Phrases hold spaces, so they are found in the raw text, before it is cut into candidate words.
_MONTH = _keywords(
    [
        "January",
        "February",
        "March",
        "April",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
        "Jan",
        "Feb",
        "Mar",
        "Apr",
        "May",
        "Jun",
        "Jul",
        "Aug",
        "Sept",
        "Sep",
        "Oct",
        "Nov",
        "Dec",
    ],
    "A-Za-z0-9",
)
_PHRASE_DATE_DMY = re.compile(  # 30 Nov 2026, 1 December 2026
    _after(r"\d", "A-Za-z0-9") + r"\d?[ \t]+" + _MONTH + r"\.?,?[ \t]+(?:19|20)\d\d(?![0-9A-Za-z])"
)
_PHRASE_DATE_MDY = re.compile(  # Nov 30, 2026, November 30th 2026
    _MONTH + r"\.?[ \t]+\d\d?(?:st|nd|rd|th)?,?[ \t]+(?:19|20)\d\d(?![0-9A-Za-z])"
)
_PHRASE_ISSUE = re.compile(  # PR 567, PR #568, MR !89, pull request 12, issue #7 (never "issue 3")
    _branches(
        [
            *((w, r"[ \t]+[#!]?\d{1,7}") for w in ("PRs", "PR", "MRs", "MR", "Pull request", "pull request")),
            *((w, r"[ \t]+[#!]?\d{1,7}") for w in ("Merge request", "merge request")),
            *((w, r"[ \t]+#\d{1,7}") for w in ("Issue", "issue", "Bug", "bug", "Ticket", "ticket")),
        ],
        "A-Za-z0-9_",
    )
    + r"(?![0-9A-Za-z_])"
)
_PHRASE_PORT = re.compile(  # port 5432, PORT=8080, DB_PORT: 5432, 端口 5432
    _keywords(["ports", "port", "Ports", "Port", "PORTS", "PORT", "端口"], "A-Za-z")
    + r"[ \t]*[:=#：]?[ \t]*(?P<port>\d{2,5})(?![0-9A-Za-z_]|\.\d)"
)
_PHRASE_VERSION = re.compile(  # version 3.12.1, Version: 2.0, 版本 1.4.2
    _keywords(["version", "Version", "VERSION", "版本号", "版本"], "A-Za-z")
    + r"[ \t]*[:=：]?[ \t]*v?(?P<v>\d+(?:\.\d+){1,3}(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?)(?![0-9A-Za-z_]|\.\d)"
)


@datarecord(frozen=True, slots=True)
class Identifier:
    """One identifier of the span: where it was seen and how often, for ranking."""

    text: str
    kind: str
    from_user: bool  # appeared in a user message (or a command the user ran with ``!``)
    count: int  # occurrences over the span
    last_index: int  # index, in the messages given, of the last message it occurred in
    first_index: int = 0
    from_agent: bool = False  # the agent used it in its own text or tool-call arguments
    agent_wrote: bool = False  # in the agent's own text (not only in its tool-call arguments)

    @property
    def written(self) -> bool:
        """The user or the agent wrote it: always kept (see ``rank_identifiers``)."""
        return self.from_user or self.agent_wrote


# A finding's flags: who used it (see ``Identifier``).
USER, AGENT, WROTE = 1, 2, 4
_KIND_CODE = {kind: number << 3 for number, kind in enumerate(KINDS)}
# By code: whether its kind's key is the lower case (``CASE_INSENSITIVE_KINDS``).
_LOWERED = tuple(KINDS[code >> 3] in CASE_INSENSITIVE_KINDS for code in range(len(KINDS) << 3))
# A message's findings, flat (few objects: they are stored, loaded and merged by the hundred thousand): for each,
# its identifier, ``code`` (the kind's index in ``KINDS`` times 8, plus its flags) and its occurrences, in the
# order extraction meets them. They depend on that message alone (not on where it stands in a span): they can be
# made once, when the message is read, kept, and merged into a span's records at compaction (``merge_findings``).
Findings = list[str | int]


def _scan_into(out: Findings, text: str, flags: int, memo: WordMemo) -> None:
    """The findings of one text. A text's occurrences of a finding are one finding with their count: the records
    are those of one occurrence at a time (counts add up, flags and the index are the same), and the first
    occurrence of each still comes first, so the kind and spelling a key keeps are the ones it first had."""
    if len(memo) > WORD_MEMO_MAX:
        memo.clear()
    codes = _KIND_CODE
    for (ident, kind), times in Counter(_scan(text, memo)).items():
        if ident and len(ident) <= IDENTIFIER_MAX_CHARS:
            out += (ident, codes[kind] | flags, times)


def _add(out: Findings, text: str, kind: str, flags: int) -> None:
    if text and len(text) <= IDENTIFIER_MAX_CHARS:
        out += (text, _KIND_CODE[kind] | flags, 1)


def findings_valid(findings: Any) -> bool:
    """Whether a value (a stored one) is findings as :func:`message_findings` makes them: in C-level passes (a
    store holds hundreds of thousands): the join fails on any identifier that is not text, the sums on any code or
    count that is not a number, and a float makes a float sum. ``true`` and ``false`` pass as 1 and 0, which they
    equal everywhere the merge uses them (it counts with ``int``)."""
    if type(findings) is not list or len(findings) % 3:
        return False
    codes = findings[1::3]
    try:
        "".join(findings[0::3])
        if type(sum(codes)) is not int or type(sum(findings[2::3])) is not int:
            return False
    except TypeError:
        return False
    return not codes or (min(codes) >= 0 and max(codes) < len(KINDS) << 3)


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


def _ticket(m: re.Match[str]) -> tuple[str, str] | None:
    if m.group("key") is None:
        return m.group(0), TICKET  # CVE-2024-12345
    key = m.group("t") + m.group("key")
    if key.rstrip("0123456789") in _NOT_TICKET_KEYS or sum(c.isalpha() for c in key) < 2:
        return None
    return m.group(0), ISSUE if key in _ISSUE_KEYS else TICKET


def _issue(m: re.Match[str]) -> tuple[str, str] | None:
    token = m.group(0)
    if token[0] == "#" and len(token) - 1 in _COLOUR_DIGITS:
        return None
    return token, ISSUE


def _random_tail(tail: str) -> bool:
    """Whether an id's tail looks generated (``8f3a9c2d``, ``NffrFeUfNV2Hib``) rather than a word and a number."""
    if not any(c.isdigit() for c in tail):
        return False
    if tail.isdigit():
        return True
    switches = sum(a.isdigit() != b.isdigit() for a, b in itertools.pairwise(tail))
    mixed_case = any(c.isupper() for c in tail) and any(c.islower() for c in tail)
    return switches >= 2 or mixed_case


def _prefixed(m: re.Match[str]) -> tuple[str, str] | None:
    prefix = m.group("prefix")
    if prefix in _SECRET_PREFIXES or _SECRETISH.search(prefix) or not _random_tail(m.group("tail")):
        return None
    return m.group(0), PREFIXED_ID


def _hostname(m: re.Match[str]) -> tuple[str, str] | None:
    token = m.group(0).rstrip(".")  # a sentence may end right after it
    labels = token.split(".")
    tld = labels[-1]
    if len(labels) < 2 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        return None
    if tld in _FILE_EXTENSIONS or labels[0] in _CODE_RECEIVERS or not (tld.isalpha() and tld.islower()):
        return None
    if tld in _STRONG_TLDS:
        return token, HOSTNAME
    if tld in _WEAK_TLDS and (len(labels) >= 3 or any(c.isdigit() or c == "-" for c in labels[0])):
        return token, HOSTNAME
    return None


def _port(number: str) -> tuple[str, str] | None:
    """A port is kept as ``port N`` whatever way it was written; see ``in_summary``."""
    return (f"port {int(number)}", PORT) if 0 < int(number) < 65536 else None


def _colon_port(m: re.Match[str]) -> tuple[str, str] | None:
    return _port(m.group("port"))


def _valid_date(year: int | None, month: int, day: int) -> bool:
    return 1 <= month <= 12 and 1 <= day <= 31 and (year is None or 1900 <= year <= 2199)


def _date(token: str) -> bool:
    numbers = [int(n) for n in re.findall(r"\d+", token)]
    if "月" in token:  # [2026年]11月30日
        return _valid_date(numbers[0] if len(numbers) == 3 else None, numbers[-2], numbers[-1])
    if token[4:5] in ("-", "/"):  # 2026-11-30[T14:05:00Z], 2026/11/30
        return _valid_date(*numbers[:3]) and numbers[3:4] < [24] and all(n < 60 for n in numbers[4:6])
    first, second, year = numbers  # 11/30/2026 or 30.11.2026: one of the first two is the month
    return _valid_date(year, min(first, second), max(first, second))


def _digit_led(m: re.Match[str]) -> tuple[str, str] | None:
    token = m.group(0)
    if m.group("date") is not None:
        return (token, DATE) if _date(token) else None
    if m.group("semver") is not None:
        return token, VERSION
    if (
        m.string[m.start() - 1 : m.start()] == "["
        and m.string[m.end() : m.end() + 1] == "]"
        and token.count(":") == 1
    ):
        return None  # a slice, x[1:10], not a time
    return (token, TIME) if int(token.split(":", 1)[0]) < 24 else None


def _phrase_date(m: re.Match[str]) -> tuple[str, str] | None:
    day = int(re.findall(r"\d+", m.group(0))[0])  # the day comes before the year in both orders
    return (m.group(0), DATE) if 1 <= day <= 31 else None


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
    # Before paths: @scope/pkg@1.2.3 is a version and owner/repo#12 a reference.
    (_VERSION_NAMED, ("@", "==", "~=", ">=", "<=", "!="), _plain(VERSION), False),
    (_VERSION_V, (".",), _plain(VERSION), False),
    (_VERSION_OPERATOR, ("==", "^", "~"), _plain(VERSION), False),
    (_ISSUE_IN_REPO, ("#",), _plain(ISSUE), False),
    (_ABS_PATH, ("/",), _slash_path, False),
    (_REL_PATH, ("/",), _slash_path, False),
    (_HOSTNAME, (".",), _hostname, False),
    (_BARE_FILE, (".",), _bare_file, False),
    (_DIGIT_LED, ("-", "/", ".", "月", ":", "+"), _digit_led, False),  # after files: 2026-11-30.tar.gz is one
    (_ISSUE, ("#", "!", "PR", "MR"), _issue, False),
    (_TICKET, ("-",), _ticket, False),
    (_PREFIXED, ("_",), _prefixed, False),
    (_AWS_ID, _AWS_NEEDLES, _plain(PREFIXED_ID), False),
    (_COLON_PORT, (":",), _colon_port, False),
    (_HEX, (), _hex, False),
    (_NUMBER, (), _plain(NUMBER), False),
)


# Each stage's needles as one pattern: one C-level search per word and stage, not a generator over them.
_STAGE_NEEDLE: tuple[re.Pattern[str] | None, ...] = tuple(
    re.compile("|".join(map(re.escape, needles))) if needles else None for _, needles, _, _ in _STAGES
)

# Every identifier kind holds one of these characters, and none holds whitespace: words without them (most
# prose and code) are dropped before the patterns run, which halves the scanning time on real sessions.
_CANDIDATE_CHAR = re.compile(r"[0-9/\\.:@]")
# The words of a text that hold one of them, found in C: ``[w for w in text.split() if _CANDIDATE_CHAR.search(w)]``
# without a Python step (or a memo look-up) per word of prose. ``\s`` is what str.split() splits on.
_CANDIDATE_WORD = re.compile(r"(?<!\S)[^\s0-9/\\.:@]*+[0-9/\\.:@]\S*")


def _needle_chars(needle: str) -> frozenset[str]:
    """Characters every text holding ``needle`` holds: its symbols (``i-`` → ``-``), or its letters when it
    has none (``PR``). Few distinct sets keep the plans few."""
    symbols = frozenset(c for c in needle if not c.isascii() or not c.isalpha())
    return symbols or frozenset(needle)


# The stages without needles (hashes, numbers) need six hex digits in a row (7+ hex, 6+ digits): a word
# without them is marked by this pseudo-character's absence from its plan's key.
_HEX_RUN = re.compile(r"[0-9a-fA-F]{6}")
_HEXISH = "\0"
_HEXISH_KEY = frozenset(_HEXISH)


def _stage_plan(chars: frozenset[str]) -> tuple[int, ...]:
    """The stages a word holding ``chars`` (of ``_NEEDLE_CHARS``, and ``_HEXISH``) can match: those one of
    whose needles' characters (``_needle_chars``) it holds, and those without needles when it has a run of
    hex digits. A needle (and the run) is a necessary condition of its stage's pattern, and masking only
    blanks characters out, so a stage left out would have found nothing and masked nothing: the plan only
    saves time, and finds what the needle test of ``_scan_stages`` does."""
    return tuple(
        stage
        for stage, (_, needles, _, _) in enumerate(_STAGES)
        if (_HEXISH in chars if not needles else any(_needle_chars(n) <= chars for n in needles))
    )


# The characters the stages' needles are tested by; a word's plan depends only on which of them it holds.
_NEEDLE_CHARS = frozenset(c for _, needles, _, _ in _STAGES for n in needles for c in _needle_chars(n))
_PLANS: dict[frozenset[str], tuple[int, ...]] = {}


# What every match of a stage holds, tested on the new words of a message before the stage's pass over them: its
# needles, or a stricter pattern where the needle is in most texts (":" and "." are) and the stage's pattern is
# tried at every position (it starts with a lookbehind): a port's two digits after a colon, four numbers joined
# by dots, a UUID's first group, six hex digits in a row for hashes and long numbers (which have no needle).
_BATCH_GATE: tuple[re.Pattern[str], ...] = tuple(
    {
        _UUID: re.compile(r"[0-9a-fA-F]{8}-"),
        _HOST_PORT: re.compile(r":\d\d"),
        _IPV4_RE: re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d"),
        _HEX: _HEX_RUN,
        _NUMBER: _HEX_RUN,
    }.get(pattern)
    or needle
    or _HEX_RUN
    for (pattern, _, _, _), needle in zip(_STAGES, _STAGE_NEEDLE, strict=True)
)


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


def _phrase_port(m: re.Match[str]) -> tuple[str, str] | None:
    return _port(m.group("port"))


# Shapes that hold a space ("PR 567", "port 5432", "30 Nov 2026", "version 3.12.1"): (pattern, needles,
# accept), run on the raw text before it is cut into candidate words. Needles are matched case-sensitively.
_MONTH_NEEDLES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_PHRASES: tuple[
    tuple[re.Pattern[str], tuple[str, ...], Callable[[re.Match[str]], tuple[str, str] | None]], ...
] = (
    (_PHRASE_ISSUE, ("PR", "MR", "equest", "ssue", "ug", "icket"), _plain(ISSUE)),
    (_PHRASE_PORT, ("port", "Port", "PORT", "端口"), _phrase_port),
    (_PHRASE_VERSION, ("ersion", "ERSION", "版本"), lambda m: (m.group("v"), VERSION)),
    (_PHRASE_DATE_DMY, _MONTH_NEEDLES, _phrase_date),
    (_PHRASE_DATE_MDY, _MONTH_NEEDLES, _phrase_date),
)


# Gates: each phrase pattern runs only on a text that holds one of its gates, a (needle, pattern) pair whose
# pattern every match of the phrase holds (its keyword's tail, the separator and the digit after it). A needle
# is a substring test (``in``, one fast scan) and its pattern starts with a literal, which the regex engine
# finds without trying every position; the phrase patterns themselves start with common letters (p, v, i, …)
# or digits and are tried at each, so a text that merely says "import" or "debug" no longer pays for them.
# The gate is a necessary condition, never a sufficient one: what runs after it is the phrase pattern itself.
_YEAR = r"(?:19|20)\d\d(?![0-9A-Za-z])"
_ISSUE_GATES = (
    ("PR", re.compile(r"PRs?[ \t]+[#!]?\d")),  # PR 567, PRs #5
    ("MR", re.compile(r"MRs?[ \t]+[#!]?\d")),
    ("request", re.compile(r"request[ \t]+[#!]?\d")),  # pull request 12, merge request !8
    (" #", re.compile(r" #\d")),  # issue #7, bug #12, ticket #3: the whitespace run ends before "#"
    ("\t#", re.compile(r"\t#\d")),
)
_PORT_GATES = (  # the keyword's first letter preceded by no letter: "import 12" and "report 5" do not open it
    ("ort", re.compile(r"ort(?<=[pP]ort)(?<![A-Za-z][pP]ort)[sS]?[ \t]*[:=#：]?[ \t]*\d\d")),  # port, Ports
    ("ORT", re.compile(r"ORT(?<=PORT)(?<![A-Za-z]PORT)S?[ \t]*[:=#：]?[ \t]*\d\d")),
    ("端口", re.compile(r"端口[ \t]*[:=#：]?[ \t]*\d\d")),
)
_VERSION_GATES = (
    ("ersion", re.compile(r"ersion[ \t]*[:=：]?[ \t]*v?\d+\.\d")),
    ("ERSION", re.compile(r"ERSION[ \t]*[:=：]?[ \t]*v?\d+\.\d")),
    ("版本", re.compile(r"版本号?[ \t]*[:=：]?[ \t]*v?\d+\.\d")),
)
# Both date phrases end in a year after a space or a tab (30 Nov 2026, Nov 30, 2026), and hold a month name
# followed by the year or by a day and the year: the years are looked for first (literals), the month names
# (capitals, common in code) only in a text that has one.
_DATE_GATES = tuple(
    (sep + century, re.compile(re.escape(sep + century) + r"\d\d(?![0-9A-Za-z])"))
    for sep in (" ", "\t")
    for century in ("19", "20")
)
_MONTH_THEN_YEAR = re.compile(
    _MONTH + r"\.?,?[ \t]+(?:" + _YEAR + r"|\d\d?(?:st|nd|rd|th)?,?[ \t]+" + _YEAR + ")"
)
_Gates = tuple[tuple[tuple[str, re.Pattern[str]], ...], re.Pattern[str] | None]
# Per phrase pattern: (gates, one of which must be in the text, and a pattern that must be there as well).
_PHRASE_GATES: tuple[_Gates, ...] = (
    (_ISSUE_GATES, None),
    (_PORT_GATES, None),
    (_VERSION_GATES, None),
    (_DATE_GATES, _MONTH_THEN_YEAR),
    (_DATE_GATES, _MONTH_THEN_YEAR),
)


def _gate_open(text: str, gates: _Gates) -> bool:
    """Whether ``text`` holds what every match of the gated phrase holds (see ``_ISSUE_GATES``)."""
    alternatives, also = gates
    return any(needle in text and gate.search(text) is not None for needle, gate in alternatives) and (
        also is None or also.search(text) is not None
    )


def _phrases(text: str) -> tuple[list[tuple[int, int, str, str]], str]:
    """The phrase-shaped identifiers of ``text`` with their phrase pattern (its index) and start: (index, start,
    identifier, kind), pattern by pattern and in text order within each; and the text with them blanked out."""
    found: list[tuple[int, int, str, str]] = []
    spans: list[tuple[int, int]] = []
    present: dict[int, bool] = {}  # the two date patterns share their gates: looked for once
    for order, ((pattern, _, accept), gates) in enumerate(zip(_PHRASES, _PHRASE_GATES, strict=True)):
        seen = present.get(id(gates[0]))
        if seen is None:
            seen = present[id(gates[0])] = _gate_open(text, gates)
        if not seen:
            continue
        for m in pattern.finditer(text):
            got = accept(m)
            if got is not None:
                found.append((order, m.start(), got[0], got[1]))
                spans.append(m.span())
    if not spans:
        return found, text
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return found, _masked(text, merged)


def scan_text(text: str, memo: WordMemo | None = None) -> Iterator[tuple[str, str]]:
    """(identifier, kind) pairs in ``text``: quoted paths and phrases first, then stage by stage (``_STAGES``).

    The stages run on the distinct words (``memo``: a word's findings, reused for every later occurrence; the
    words met for the first time scanned together, see ``_scan_words``), which finds what one pass of each
    stage over :func:`candidate_text` would, in the same order: no stage's match holds whitespace or a
    needle-less word, and every lookaround treats a word's edge as it treats the space there. Phrases and
    candidate words are found line by line in the same way (``_scan_lines``): a line seen before is one look-up.
    """
    return iter(_scan(text, memo))


def _scan(text: str, memo: WordMemo | None) -> list[tuple[str, str]]:
    """``scan_text`` as a list."""
    found, text = _head(text)
    words = memo if memo is not None else {}
    entries: list[tuple[int, str, str]] = []
    for lines in _line_slices(text):
        # Each line's findings from the memo, in C; the lines met for the first time are scanned together (in
        # any order: no finding spans lines, and a line's findings do not depend on its neighbours).
        tail = lines[-1]
        if tail[-1] not in _LINE_ENDS:  # the text's last line: no line end to keep it apart from a word
            if len(tail) > _LINE_MEMO_MAX_CHARS:
                lines.pop()
            else:
                lines[-1] = tail + "\n"  # no identifier holds one: the findings are the same
                tail = ""
        else:
            tail = ""
        new = list(set(lines).difference(words))
        if new:
            words.update(
                (line, got or ())
                for line, got in zip(new, _scan_lines(new, words), strict=True)
                if got is not None or len(line) <= _BARE_LINE_MEMO_MAX_CHARS
            )
        entries.extend(itertools.chain.from_iterable(filter(None, map(words.get, lines))))
        for line in new:
            if len(line) > _LINE_MEMO_MAX_CHARS:  # not kept: a memo of long lines would hold much of the text
                words.pop(line, None)
        if tail:
            entries.extend(_scan_lines([tail], words)[0] or ())
    # Stable: each phrase pattern's findings, then stage by stage, in text order within each (a line's entries
    # are its phrases' in pattern order, then its words' in text order), as one pass of each over the text.
    entries.sort(key=_STAGE_OF)
    found += map(_FOUND_OF, entries)
    return found


def _head(text: str) -> tuple[list[tuple[str, str]], str]:
    """The quoted paths of ``text``, and the text with them blanked out. Their gate is a whole text's (a quoted
    path it lets through in one line may be in a text that holds the gate's characters in another)."""
    # A quote or a backslash first: a character absent from the text is one ``memchr``, much faster than the pass a
    # two-character needle takes (half the gate's time over a session's text).
    if (
        " /" in text
        or ("'" in text and "'/" in text)
        or ('"' in text and '"/' in text)
        or ("\\" in text and ":\\" in text)
    ):
        quoted, text = _quoted_paths(text)
        return [(path, PATH) for path in quoted], text
    return [], text


_STAGE_OF = operator.itemgetter(0)
_FOUND_OF = operator.itemgetter(1, 2)
# The entries of a line sort before its stages' findings: phrase pattern i is ``_PHRASE_ORDER + i`` (< 0).
_PHRASE_ORDER = -len(_PHRASES)

# Texts longer than this are split a slice at a time: str.split() of 19 MB of prose is 2.5 million strings at
# once (160 MB), where the loop above needs one word at a time.
_SPLIT_SLICE_CHARS = 1 << 20
_SPACE = re.compile(r"\s")  # what str.split() splits on (str.isspace)
# ``_CANDIDATE_WORD`` without its lookbehind: a candidate word after a whitespace character, and the text's
# first word. A pattern that starts with a lookbehind is tried at every position; this one only where the
# text has whitespace (a quarter less time over a session's text).
_CANDIDATE_AFTER_SPACE = re.compile(r"\s([^\s0-9/\\.:@]*+[0-9/\\.:@]\S*+)")
_CANDIDATE_FIRST = re.compile(r"[^\s0-9/\\.:@]*+[0-9/\\.:@]\S*+")
# What ``str.splitlines`` ends a line at: every one of them is whitespace, which no identifier holds.
_LINE_ENDS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
# Lines longer than this are scanned each time they occur, not kept in the memo; and a line with neither a
# candidate word nor a phrase (prose, mostly: it rarely repeats) longer than the second. Kept lines cost memory
# at the compaction's peak (at 50 MB: 16 MB with every line kept, 9 MB with these limits).
_LINE_MEMO_MAX_CHARS = 512
_BARE_LINE_MEMO_MAX_CHARS = 64


def _line_slices(text: str) -> Iterator[list[str]]:
    """The lines of ``text`` (``splitlines``), each with its line end, which also keeps it apart from every word
    in the memo (a word has no whitespace), found a slice of about ``_SPLIT_SLICE_CHARS`` at a time, each cut
    after a newline."""
    start, size = 0, len(text)
    while start < size:
        cut = text.find("\n", min(size, start + _SPLIT_SLICE_CHARS))
        end = size if cut < 0 else cut + 1
        yield (text[start:end] if start or end < size else text).splitlines(keepends=True)
        start = end


def _scan_lines(lines: list[str], words: WordMemo) -> list[tuple[tuple[int, str, str], ...] | None]:
    """The entries of each of ``lines`` (each with at most one line end, its last character): its phrases'
    (``_PHRASE_ORDER`` + the pattern's index, identifier, kind), pattern by pattern, then its candidate words'
    findings in text order. The phrases are looked for in all the lines at once (their gates are one pass over
    the lot), and the words new to ``words`` scanned together and put there."""
    joined = "".join(lines)
    starts = list(itertools.accumulate(map(len, lines), initial=0))
    phrases, masked = _phrases(joined)
    per_line: dict[int, list[tuple[int, str, str]]] = {}
    for order, start, ident, kind in phrases:
        per_line.setdefault(bisect.bisect_right(starts, start) - 1, []).append(
            (_PHRASE_ORDER + order, ident, kind)
        )
    if masked is joined:
        texts: Iterable[str] = lines
    else:
        texts = [masked[a:b] for a, b in itertools.pairwise(starts)]
    candidates = [
        _candidates(line, 0, len(line))
        if len(line) <= _SPLIT_SLICE_CHARS
        else list(itertools.chain.from_iterable(_candidate_slices(line)))
        for line in texts
    ]
    new = list(set(itertools.chain.from_iterable(candidates)).difference(words))
    if new:
        words.update(zip(new, _scan_words(new), strict=True))
    get = words.get
    out: list[tuple[tuple[int, str, str], ...] | None] = []
    for index, found in enumerate(candidates):
        head = per_line.get(index)
        if not found and not head:
            out.append(None)
            continue
        staged = tuple(itertools.chain.from_iterable(filter(None, map(get, found))))
        out.append((*head, *staged) if head else staged)
    return out


def _candidates(text: str, start: int, end: int) -> list[str]:
    """``_CANDIDATE_WORD.findall(text, start, end)`` where ``start`` is 0 or just after a whitespace."""
    if start:
        return _CANDIDATE_AFTER_SPACE.findall(text, start - 1, end)
    first = _CANDIDATE_FIRST.match(text, 0, end)
    words: list[str] = _CANDIDATE_AFTER_SPACE.findall(text, 0, end)
    if first is not None:
        words.insert(0, first.group())
    return words


def _candidate_slices(text: str) -> Iterator[list[str]]:
    """The words of ``text`` that could hold an identifier (see ``candidate_text``), found a slice of about
    ``_SPLIT_SLICE_CHARS`` at a time, each cut at a whitespace."""
    start, size = 0, len(text)
    while start < size:
        space = _SPACE.search(text, min(size, start + _SPLIT_SLICE_CHARS))
        end = space.start() if space is not None else size
        yield _candidates(text, start, end)
        start = end + 1


def _scan_words(words: Sequence[str]) -> list[tuple[tuple[int, str, str], ...]]:
    """``_scan_word`` of each of ``words`` (none holding whitespace), by one pass of each stage over them all,
    joined by spaces: no stage's match holds whitespace and every lookaround sees a space as it sees a word's
    edge, so a word's findings do not depend on its neighbours; each stage's pattern then runs in C over the
    lot instead of being started once per word and stage (the per-word plans cost about 26 µs a word)."""
    if len(words) == 1:
        return [_scan_word(words[0])]
    text = " ".join(words)
    starts = list(itertools.accumulate((len(w) + 1 for w in words[:-1]), initial=0))
    found: list[list[tuple[int, str, str]]] = [[] for _ in words]
    for stage, ((pattern, _, accept, mask_rejected), gate) in enumerate(
        zip(_STAGES, _BATCH_GATE, strict=True)
    ):
        if gate.search(text) is None:
            continue
        spans: list[tuple[int, int]] = []
        for m in pattern.finditer(text):
            got = accept(m)
            if got is not None:
                found[bisect.bisect_right(starts, m.start()) - 1].append((stage, got[0], got[1]))
            if got is not None or mask_rejected:
                spans.append(m.span())
        if spans:
            text = _masked(text, spans)
    return [tuple(f) for f in found]


def _stage_of(item: tuple[int, str, str]) -> int:
    return item[0]


def _scan_word(word: str) -> tuple[tuple[int, str, str], ...]:
    """What ``_scan_stages(word)`` finds in one candidate word, running only the stages its characters allow
    (a handful of the 23, chosen by one set intersection instead of a needle search per stage)."""
    chars = frozenset(word) & _NEEDLE_CHARS
    if _HEX_RUN.search(word) is not None:
        chars |= _HEXISH_KEY
    plan = _PLANS.get(chars)
    if plan is None:
        plan = _PLANS[chars] = _stage_plan(chars)
    found: list[tuple[int, str, str]] = []
    text = word
    for stage in plan:
        pattern, _, accept, mask_rejected = _STAGES[stage]
        spans: list[tuple[int, int]] = []
        for m in pattern.finditer(text):
            got = accept(m)
            if got is not None:
                found.append((stage, got[0], got[1]))
            if got is not None or mask_rejected:
                spans.append(m.span())
        if spans:
            text = _masked(text, spans)
    return tuple(found)


def _scan_stages(text: str) -> Iterator[tuple[int, str, str]]:
    """(stage index, identifier, kind) in ``text``, stage by stage; each match is masked for later stages."""
    for stage, ((pattern, _, accept, mask_rejected), needle) in enumerate(
        zip(_STAGES, _STAGE_NEEDLE, strict=True)
    ):
        if not text:
            return
        if needle is not None and needle.search(text) is None:
            continue
        spans: list[tuple[int, int]] = []
        for m in pattern.finditer(text):
            found = accept(m)
            if found is not None:
                yield stage, found[0], found[1]
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


def _scan_tool_call(block: dict[str, Any], out: Findings, memo: WordMemo) -> None:
    args = block.get("arguments")
    if not isinstance(args, dict):
        _scan_into(out, redact_secrets("\n".join(_strings(args))), AGENT, memo)
        return
    for key in COMMAND_ARG_KEYS:
        value = args.get(key)
        if isinstance(value, str):
            _add(out, command_identifier(redact_secrets(value)), COMMAND, AGENT)
    for key in PATH_ARG_KEYS:
        value = args.get(key)
        if isinstance(value, str) and "\n" not in value:
            path = _trim(redact_secrets(value.strip()))
            if path not in _TRIVIAL_PATHS and "[REDACTED" not in path:
                _add(out, path, PATH, AGENT)
    rest = [s for k, v in args.items() if k not in PATH_ARG_KEYS for s in _strings(v)]
    _scan_into(out, redact_secrets("\n".join(rest)), AGENT, memo)


def message_findings(message: Message, read: Callable[[Message], str], memo: WordMemo) -> Findings:
    """One message's findings, in the order extraction meets them. ``read``: the message's redacted joined text
    (a job's :class:`SpanText`); ``memo``: words already scanned (any span's: a word's findings are its own)."""
    out: Findings = []
    if is_runtime_context(message):
        return out
    role = role_of(message)
    if role == "user":
        _scan_into(out, read(message), USER, memo)
    elif role == "assistant":
        _scan_into(out, read(message), AGENT | WROTE, memo)
        for block in tool_calls(message):
            _scan_tool_call(block, out, memo)
    elif role == "toolResult":
        _scan_into(out, read(message), 0, memo)  # text_of: its text blocks, joined
    elif role == "bashExecution":
        if message.get("excludeFromContext"):
            return out
        command = message.get("command")
        if isinstance(command, str):
            # The user typed it (``!cmd``): it counts as theirs.
            _add(out, command_identifier(redact_secrets(command)), COMMAND, USER)
            _scan_into(out, redact_secrets(command), USER, memo)
        output = message.get("output")
        if isinstance(output, str):
            _scan_into(out, redact_secrets(output), 0, memo)
    elif role in ("custom", "compactionSummary", "branchSummary"):
        _scan_into(out, read(message), 0, memo)
    return out


# An accumulator's first index, then its text, then where its finding stood in that message's findings (two
# keys can share a text: one lowered for its kind, one not).
_FIRST_THEN_TEXT = operator.itemgetter(2, 0, 6)


class FindingsMerge:
    """A span's records made from its messages' findings added in any order, each at its message's position.

    The records are those of adding them in order: a key keeps the spelling, kind and index of its finding at the
    lowest position (the first of them in that message's order, and where it stood among that message's
    findings), its last index is the highest, its count the sum and its flags all its findings' or-ed together. So a compaction merges stored findings as it reads the
    store, in the store's order, and the messages the store lacks after (issue 22). Inlined: a 50 MB session
    has about 350,000 findings."""

    __slots__ = ("_accs", "added")

    def __init__(self) -> None:
        # key -> [text, code, first index, last index, count, codes or-ed, place in the first's findings]
        self._accs: dict[str, list[Any]] = {}
        self.added: set[int] = set()  # the positions whose findings are in

    def add(self, findings: Sequence[str | int], index: int) -> None:
        accs, lowered = self._accs, _LOWERED
        get = accs.get
        self.added.add(index)
        it: Iterator[Any] = iter(findings)
        for place, (ident, code, times) in enumerate(zip(it, it, it)):  # noqa: B905 (one iterator, in threes)
            key = ident.lower() if lowered[code] else ident
            acc = get(key)
            if acc is None:
                accs[key] = [ident, code, index, index, times, code, place]
                continue
            if index < acc[2]:
                acc[0], acc[1], acc[2], acc[6] = ident, code, index, place
            elif index > acc[3]:
                acc[3] = index
            acc[4] += times
            acc[5] |= code

    def records(self) -> list[Identifier]:
        """In order of first appearance (ties: by text)."""
        return [
            Identifier(
                text,
                KINDS[code >> 3],
                bool(seen & USER),
                int(count),
                last,
                first,
                bool(seen & AGENT),
                bool(seen & WROTE),
            )
            for text, code, first, last, count, seen, _ in sorted(self._accs.values(), key=_FIRST_THEN_TEXT)
        ]


def merge_findings(per_message: Iterable[Sequence[str | int]]) -> list[Identifier]:
    """The span's records from its messages' findings, in order (``last_index``: a message's position in the
    iterable)."""
    merged = FindingsMerge()
    for index, findings in enumerate(per_message):
        merged.add(findings, index)
    return merged.records()


def extract_identifiers(
    messages: Sequence[Message], texts: SpanText | None = None, merged: FindingsMerge | None = None
) -> list[Identifier]:
    """Every identifier of the span, in order of first appearance; ``last_index`` indexes ``messages``.

    ``texts``: the job's redacted message texts (one redaction per message, shared with the digest);
    ``merged``: findings made earlier of some of the messages, merged at their positions (``merged.added``);
    the others' are made here (see ``compactd.summarize.prepared``)."""
    read = texts if texts is not None else SpanText()
    memo: WordMemo = {}  # one span's words repeat: each is scanned once
    merge = merged if merged is not None else FindingsMerge()
    done = set(merge.added)
    for index, message in enumerate(messages):
        if index not in done:
            merge.add(message_findings(message, read, memo), index)
    return merge.records()


_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`) ?(.+?) ?(?<!`)\1(?!`)")


def carried_identifiers(previous_summary: str | None) -> list[Identifier]:
    """The identifiers a previous summary guaranteed (the code spans of its ``## Exact identifiers``), to be
    guaranteed again: without them a model that drops identifiers loses, at the second compaction, all that
    the first one kept. They count as written, rank below everything in the span (``last_index`` -1) and
    are bounded by ``WRITTEN_MAX`` with the rest.
    """
    if not previous_summary or EXACT_IDENTIFIERS not in previous_summary:
        return []
    out: dict[str, Identifier] = {}
    for heading, body in split_sections(redact_secrets(previous_summary))[1]:
        if heading != EXACT_IDENTIFIERS:
            continue
        for line in body:
            for m in _CODE_SPAN.finditer(line):
                text = m.group(2).strip()
                if not text or len(text) > IDENTIFIER_MAX_CHARS or "[REDACTED" in text:
                    continue
                kind = next((k for t, k in scan_text(text) if t == text), None)
                if kind is None and " " in text and line.strip() == identifier_line(text):
                    kind = COMMAND  # a command the repair listed; prose in backticks is not carried
                key = _key(text, kind) if kind else ""
                if kind is not None and key not in out:
                    out[key] = Identifier(text, kind, False, 1, -1, -1, from_agent=True, agent_wrote=True)
    return list(out.values())


def with_carried(ids: Sequence[Identifier], previous_summary: str | None) -> list[Identifier]:
    """``ids`` and the previous summary's identifiers that are not among them."""
    carried = carried_identifiers(previous_summary)
    if not carried:  # the first compaction, most often: no need to know what ``ids`` hold
        return list(ids)
    seen = {_key(i.text, i.kind) for i in ids} | {i.text for i in ids}
    return [*ids, *(c for c in carried if _key(c.text, c.kind) not in seen and c.text not in seen)]


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


def rank_identifiers(
    ids: Iterable[Identifier], cap: int = IDENTIFIER_CAP, written_max: int = WRITTEN_MAX
) -> list[Identifier]:
    """Those the user or the agent wrote (all of them, up to ``written_max``), then others up to ``cap`` in
    all: first the ones in the agent's tool-call arguments, then those seen only in tool output.

    The cap is cut from what nobody wrote, tool output first, so a ``git log`` in a tool result cannot crowd
    out what the user and the agent said; the result exceeds ``cap`` only when they wrote more than ``cap``.
    Within each group the order is score descending, then most recent, then text (deterministic).
    """
    items = list(ids)
    span = max((i.last_index for i in items), default=-1) + 1

    def order(i: Identifier) -> tuple[float, int, str]:
        return (-identifier_score(i, span), -i.last_index, i.text)

    # ``heapq.nsmallest(n, it, key)`` is ``sorted(it, key)[:n]`` (ties included): only what is kept is ordered,
    # and a group the cap leaves no room for is not even scored (a span's 20,000 mostly seen only in output).
    written = heapq.nsmallest(max(0, written_max), (i for i in items if i.written), key=order)
    room = max(0, cap - len(written))
    used = (
        heapq.nsmallest(room, (i for i in items if not i.written and i.from_agent), key=order) if room else []
    )
    room -= len(used)
    seen = (
        heapq.nsmallest(room, (i for i in items if not i.written and not i.from_agent), key=order)
        if room
        else []
    )
    return written + used + seen


# --- checking and repair ------------------------------------------------------------------------------------
def in_summary(ident: Identifier, summary: str, folded: str | None = None) -> bool:
    """Exact substring, except hashes, UUIDs and hostnames, which match whatever their case, and ports,
    which are kept when their number is there ("port 5432" is kept by "Postgres on 5432")."""
    if ident.kind == PORT:
        number = ident.text.rsplit(" ", 1)[-1]
        return re.search(r"(?<![0-9])" + number + r"(?![0-9])", summary) is not None
    if ident.kind in CASE_INSENSITIVE_KINDS:
        return ident.text.lower() in (folded if folded is not None else summary.lower())
    return ident.text in summary


def missing_identifiers(summary: str, ranked: Sequence[Identifier]) -> list[Identifier]:
    """The ranked identifiers the summary does not contain, in rank order."""
    folded = summary.lower()
    return [i for i in ranked if not in_summary(i, summary, folded)]


@datarecord(frozen=True, slots=True)
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
