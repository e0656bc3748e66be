"""Secrets out of everything that leaves the process (summarizer prompts, output) or lands in a summary.

A transcript routinely holds keys the agent read from ``.env`` files or echoed in a ``curl``; a summary would
copy them into every later prompt, and an external summarizer would receive them. Each secret is replaced by
``[REDACTED:<kind>]``. The patterns are deliberately specific (known token prefixes, explicit assignments to
secret-named keys) so that the identifiers a summary must keep — UUIDs, git hashes, paths, plain URLs — are
never touched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from compactd.core.messages import Message, role_of, text_of
from compactd.summarize.secret_rules import (
    Replacer,
    _any_needle,
    _keep_prefix,
    _redact,
    _Rule,
    placeholder,
    redact_url_secrets,
    url_rules,
)

__all__ = ["SpanText", "redact_secrets", "redact_secrets_counted", "redact_url_secrets", "redact_value"]

# Secret assignments shorter than this are kept: "token=5" or "pwd: -" carry nothing worth stealing, and a
# real password of fewer characters is rare enough to accept.
_MIN_SECRET_VALUE_CHARS = 4
# Unquoted alphabetic values after a colon are prose unless this long ("Password: expired" keeps its word).
_LONG_BARE_SECRET_CHARS = 12

_SECRET_KEY = (
    r"(?:password|passwd|passphrase|secret|api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key"
    r"|client[_-]?secret|access[_-]?token|auth[_-]?token|refresh[_-]?token|bearer[_-]?token|session[_-]?token"
    r"|token|credentials?)"
)


_ASSIGNMENT = (
    r"(?P<key>" + _SECRET_KEY + r"[\"']?)"
    r"(?P<sep>\s*(?::|=|:=|=>)\s*)"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`,;&)}\]]+)"
)


def _whole(kind: str) -> Replacer:
    return lambda m: f"[REDACTED:{kind}]"


def _looks_secret(value: str) -> bool:
    """A bare word is taken as a secret only when it has a digit or a symbol, or is long."""
    return len(value) >= _LONG_BARE_SECRET_CHARS or not value.isalpha()


def _authorization(m: re.Match[str]) -> str:
    if not m.group("scheme") and not _looks_secret(m.group("cred")):
        return m.group(0)  # "Authorization: required" is prose
    return f"{m.group('prefix')}[REDACTED:authorization]"


def _cli_secret(m: re.Match[str]) -> str:
    cred = m.group("cred").strip("\"'")
    if placeholder().match(cred):
        return m.group(0)  # --api-key <key> in a usage text
    return f"{m.group('prefix')}[REDACTED:secret]"


def _assignment(m: re.Match[str]) -> str:
    value = m.group("value")
    quote = value[0] if value[:1] in ("'", '"') else ""
    bare = value[1:-1] if quote and value.endswith(quote) and len(value) >= 2 else value
    if len(bare) < _MIN_SECRET_VALUE_CHARS or placeholder().match(bare):
        return m.group(0)
    sep = m.group("sep")
    if not quote and (":" in sep or " " in sep) and not _looks_secret(bare):
        # "Token: expired" is prose and "apiKey = await f()" is code; "token: ab12cd" and "TOKEN=abc" are not
        return m.group(0)
    key = m.group("key").strip("\"'").lower()
    kind = "password" if "pass" in key else "secret"
    return f"{m.group('key')}{m.group('sep')}{quote}[REDACTED:{kind}]{quote}"


# Order matters: whole blocks first, then token formats whose prefix names the kind, then the generic
# assignment rule (which skips values already redacted).
_RULES: tuple[_Rule, ...] = (
    _Rule(
        ("private key",),
        re.compile(
            r"-----BEGIN (?P<label>[A-Z0-9 ]*?)PRIVATE KEY( BLOCK)?-----"
            # an unterminated (cut) block is redacted to the end of the text
            r"(?:.*?-----END (?P=label)PRIVATE KEY( BLOCK)?-----|.*\Z)",
            re.DOTALL,
        ),
        _whole("private_key"),
    ),
    _Rule(
        ("eyj",),
        re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        _whole("jwt"),
        "alnum_-",
    ),
    _Rule(("sk-ant-",), re.compile(r"sk-ant-[A-Za-z0-9_-]{20,}"), _whole("anthropic_key"), "alnum_-"),
    # At least one digit: real keys are random base62, while "sk-" prose or CSS class names are not.
    _Rule(
        ("sk-",), re.compile(r"sk-(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{20,}"), _whole("openai_key"), "alnum_-"
    ),
    _Rule(
        ("k_live_", "k_test_"),
        re.compile(r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
        _whole("stripe_key"),
        "alnum_",
    ),
    _Rule(
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}"),
        _whole("github_token"),
        "alnum_",
    ),
    _Rule(("github_pat_",), re.compile(r"github_pat_[A-Za-z0-9_]{22,}"), _whole("github_token"), "alnum_"),
    _Rule(("glpat-",), re.compile(r"glpat-[A-Za-z0-9_-]{20,}"), _whole("gitlab_token"), "alnum_-"),
    _Rule(("xox",), re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}"), _whole("slack_token"), "alnum_-"),
    _Rule(
        ("akia", "asia"),
        re.compile(r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
        _whole("aws_access_key"),
        "alnum",
    ),
    _Rule(("aiza",), re.compile(r"AIza[0-9A-Za-z_-]{35}"), _whole("google_api_key"), "alnum_-"),
    _Rule(("hf_",), re.compile(r"hf_[A-Za-z0-9]{30,}"), _whole("huggingface_token"), "alnum_"),
    _Rule(
        ("authorization",),
        re.compile(
            r"(?P<prefix>Authorization\s*[:=]\s*[\"']?(?P<scheme>(?:Bearer|Basic|Token|Bot|Digest)\s+)?)"
            r"(?P<cred>(?!\[REDACTED)[A-Za-z0-9._~+/=:-]{8,})",
            re.IGNORECASE,
        ),
        _authorization,
        "alnum_",
    ),
    _Rule(
        ("bearer",),
        re.compile(r"(?P<prefix>Bearer\s+)(?P<cred>(?!\[REDACTED)[A-Za-z0-9._~+/=-]{16,})"),
        _keep_prefix("bearer"),
        "alnum_",
    ),
    *url_rules(),
    _Rule(
        # Not "--", which is in most command output ("-rw-r--r--", "--verbose"): the whole option's name.
        tuple(
            "--" + name
            for name in ("password", "passwd", "token", "api-key", "apikey", "secret", "client-secret")
        ),
        re.compile(
            r"(?P<prefix>--(?:password|passwd|token|api-key|apikey|secret|client-secret)\s+)"
            r"(?P<cred>(?!-)(?!\[REDACTED)[^\s\"']{4,}|\"[^\"\n]{4,}\"|'[^'\n]{4,}')"
        ),
        _cli_secret,
        "alnum_-",
    ),
    # The match starts at the keyword (DB_PASSWORD matches at PASSWORD); the prefix stays untouched.
    _Rule(
        ("pass", "secret", "key", "token", "credential"),
        re.compile(_ASSIGNMENT, re.IGNORECASE),
        _assignment,
        "alnum",
        re.compile(_ASSIGNMENT),
        # Every secret key name ends in one of these words, and its separator holds ":" or "=": most texts
        # that say "key" or "token" assign nothing, and the assignment pattern is tried at every letter that
        # can start a key name (p, s, a, c, r, b, t).
        tuple(
            re.compile(word + r"[\"']?\s*[:=]")
            for word in ("key", "token", "secret", "pass(?:word|wd|phrase)", "credentials?")
        ),
    ),
)


_ANY_NEEDLE = _any_needle(_RULES)


def redact_secrets_counted(text: str) -> tuple[str, dict[str, int]]:
    """The redacted text and how many secrets of each kind were replaced (for logs and metrics)."""
    if len(text) <= _CLEAN_MAX_CHARS and text in _CLEAN:
        return text, {}
    out, counts = _redact(text, _RULES, _ANY_NEEDLE)
    if out is text and len(text) <= _CLEAN_MAX_CHARS:
        if len(_CLEAN) >= _CLEAN_MAX:
            _CLEAN.clear()
        _CLEAN.add(text)
    return out, counts


# Short strings that the rules leave as they are: a message's roles, block types, tool, model and provider
# names, stop reasons repeat in every message (64,000 short strings of 2,500 distinct ones at 50 MB), and each
# was lower-cased and searched again.
_CLEAN_MAX_CHARS = 32
_CLEAN_MAX = 4096
_CLEAN: set[str] = set()


def redact_secrets(text: str) -> str:
    """``text`` with every recognised secret replaced by ``[REDACTED:<kind>]``."""
    return redact_secrets_counted(text)[0]


# Keys whose values link entries and tool calls: never rewritten, or two redacted ids could collide.
_LINK_KEYS = frozenset({"id", "parentId", "toolCallId"})


def redact_value(value: Any) -> Any:
    """A JSON value (a message, its content blocks, tool-call arguments) with every string redacted, so whatever
    later renders, caps or cuts it can never cut a secret into a fragment no pattern recognises.

    Copy on write: a list or dict with nothing redacted in it is returned itself, not copied (a whole span's
    copy was as large as its part of the parsed transcript); one holding a secret is a new value, and the
    given one is never changed."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, list):
        items = [redact_value(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, dict):
        fields = {k: v if k in _LINK_KEYS else redact_value(v) for k, v in value.items()}
        return value if all(fields[k] is v for k, v in value.items()) else fields
    return value


def _one_text(message: Message) -> bool:
    """Whether ``text_of(message)`` is one string of the message as it is (or empty), not a join: then the
    redacted copy's text is that string redacted, and need not be redacted a second time."""
    role = role_of(message)
    if role == "bashExecution":
        return False
    if role in ("compactionSummary", "branchSummary"):
        return True
    content = message.get("content")
    if not isinstance(content, list):
        return True  # a string content is one text block, anything else none
    texts = 0
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            texts += 1
            if texts > 1:
                return False
    return True


class SpanText:
    """Each message's joined text (``text_of``), redacted once for one job and read by every consumer (the
    identifier extraction, the digest's sections) instead of each re-joining and re-redacting it.

    The join is redacted, not its blocks one by one: an assignment split across two text blocks is a secret
    only once they are joined. Built with :meth:`of`, a text is taken from the message as read and filed under
    the message the engine handed on (``redact_value`` of it: its redacted copy, or itself); any other message
    is read as it is. Where that text is one string, not a join, it is the handed-on copy's string, redacted
    already. Texts are made on first read and kept, except a tool result's (the bulk of a span, read once).
    Keyed by identity, the messages are held so that no id is reused while the value lives."""

    def __init__(self) -> None:
        self._source: dict[int, tuple[Message, Message]] = {}
        self._texts: dict[int, tuple[Message, str]] = {}

    @classmethod
    def of(cls, read: Sequence[Message], handed_on: Sequence[Message]) -> SpanText:
        """``handed_on[i]`` must be ``redact_value(read[i])``: a one-string text is taken from it as it is."""
        texts = cls()
        texts._source = {id(m): (m, source) for source, m in zip(read, handed_on, strict=True)}
        return texts

    def __call__(self, message: Message) -> str:
        key = id(message)
        got = self._texts.get(key)
        if got is not None and got[0] is message:
            return got[1]
        pair = self._source.get(key)
        if pair is None or pair[0] is not message:
            text = redact_secrets(text_of(message))
        elif _one_text(pair[1]) and role_of(message) == role_of(pair[1]):
            # The join is the one string redact_value already redacted: its text is the redacted text.
            text = text_of(message)
        else:
            text = redact_secrets(text_of(pair[1]))
        if role_of(message) != "toolResult":
            self._texts[key] = (message, text)
        return text
