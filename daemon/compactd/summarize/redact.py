"""Secrets out of everything that leaves the process (summarizer prompts, output) or lands in a summary.

A transcript routinely holds keys the agent read from ``.env`` files or echoed in a ``curl``; a summary would
copy them into every later prompt, and an external summarizer would receive them. Each secret is replaced by
``[REDACTED:<kind>]``. The patterns are deliberately specific (known token prefixes, explicit assignments to
secret-named keys) so that the identifiers a summary must keep — UUIDs, git hashes, paths, plain URLs — are
never touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from compactd.core.messages import Message, role_of, text_of

__all__ = ["SpanText", "redact_secrets", "redact_secrets_counted", "redact_url_secrets", "redact_value"]

Replacer = Callable[[re.Match[str]], str]

# Values of secret-named assignments that are references or placeholders, not secrets.
_PLACEHOLDER = re.compile(
    r"""^(?:
        \$.*                          # $VAR, ${VAR}, $(cmd)
      | <[^>]*>                       # <your-key>
      | \{\{.*\}\}                    # {{ template }}
      | %\(?\w+\)?s?                  # %(name)s
      | \*+ | x+ | X+ | \.\.\.+ | …   # masked
      | .*(?:\.\.\.|…)                # an example cut short: sk-ant-...
      | null | none | nil | true | false | undefined | changeme | redacted
      | (?:os|process|env|self|this|config|cfg|settings|args|options|opts|ctx)\b.*   # code references
      | [A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+   # dotted identifier: obj.attr
      | [A-Za-z_][A-Za-z0-9_.]*\(.*   # function call
      | [~.]{0,2}/.*                  # a path to a key file is not the key
      | \[REDACTED.*
    )$""",
    re.IGNORECASE | re.VERBOSE,
)
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


def _keep_prefix(kind: str, group: str = "prefix") -> Replacer:
    return lambda m: f"{m.group(group)}[REDACTED:{kind}]"


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
    if _PLACEHOLDER.match(cred):
        return m.group(0)  # --api-key <key> in a usage text
    return f"{m.group('prefix')}[REDACTED:secret]"


def _url_query(m: re.Match[str]) -> str:
    if _PLACEHOLDER.match(m.group("cred")):
        return m.group(0)  # ?api-key=$KEY in a usage text
    return f"{m.group('prefix')}[REDACTED:url_secret]"


def _assignment(m: re.Match[str]) -> str:
    value = m.group("value")
    quote = value[0] if value[:1] in ("'", '"') else ""
    bare = value[1:-1] if quote and value.endswith(quote) and len(value) >= 2 else value
    if len(bare) < _MIN_SECRET_VALUE_CHARS or _PLACEHOLDER.match(bare):
        return m.group(0)
    sep = m.group("sep")
    if not quote and (":" in sep or " " in sep) and not _looks_secret(bare):
        # "Token: expired" is prose and "apiKey = await f()" is code; "token: ab12cd" and "TOKEN=abc" are not
        return m.group(0)
    key = m.group("key").strip("\"'").lower()
    kind = "password" if "pass" in key else "secret"
    return f"{m.group('key')}{m.group('sep')}{quote}[REDACTED:{kind}]{quote}"


@dataclass(frozen=True, slots=True)
class _Rule:
    """One secret format.

    ``needles`` (lower case): the rule runs only when one occurs in the text. ``pattern`` starts with a
    literal wherever possible, because the regex engine then skips ahead with a fast substring search instead
    of trying a lookbehind at every position (about 50× faster here); the word boundary the lookbehind would
    have checked is ``not_after``: characters that may not precede the match.
    """

    needles: tuple[str, ...]
    pattern: re.Pattern[str]
    replace: Replacer
    not_after: str = ""
    # For a case-insensitive pattern with no literal prefix: the same pattern, case-sensitive, run over the
    # lower-cased text to find candidates (10× faster than IGNORECASE here); each is then re-matched on the
    # original text at the same position.
    folded: re.Pattern[str] | None = None
    # For ``folded``: patterns of which every match of ``folded`` holds one (each starts with a literal, which
    # the regex engine finds by a substring search); a lower-cased text with none of them has no candidate.
    folded_gates: tuple[re.Pattern[str], ...] = ()

    def apply(self, m: re.Match[str]) -> str:
        start = m.start()
        if self.not_after and start and _in_class(m.string[start - 1], self.not_after):
            return m.group(0)
        return self.replace(m)


def _in_class(char: str, spec: str) -> bool:
    """``spec`` is "alnum" plus literal extra characters: "alnum_-" means [A-Za-z0-9_-]."""
    return (char.isascii() and char.isalnum()) or (
        char in spec[5:] if spec.startswith("alnum") else char in spec
    )


# Secrets a URL carries: scheme://user:password@host (the user name stays, it is an identifier) and a query
# parameter named like a credential (?api-key=, &token=, X-Amz-Signature=, Azure's ?code=, Google's ?key=).
_URL_RULES: tuple[_Rule, ...] = (
    _Rule(
        ("://",),
        re.compile(r"(?P<prefix>://[^\s:/@\[\]]+:)(?P<cred>(?!\[REDACTED)[^\s/@]+)(?=@)"),
        _keep_prefix("url_password"),
    ),
    _Rule(
        ("?", "&"),
        re.compile(
            r"(?P<prefix>[?&](?:"
            r"(?:[A-Za-z0-9_.~-]*[_.-])?(?:key|apikey|token|secret|signature|password|passwd|credentials?)"
            r"|sig|code|auth|pwd|pass)=)"
            r"(?P<cred>(?!\[REDACTED)[^&#\s\"'<>`]{4,})",
            re.IGNORECASE,
        ),
        _url_query,
    ),
)


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
    *_URL_RULES,
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


def _any_needle(rules: tuple[_Rule, ...]) -> re.Pattern[str]:
    """One pass that finds whether any rule's needle occurs: a text without one needs no rule at all (most
    strings of a message: roles, tool names, prose without a key word), which costs one search instead of a
    check per rule and needle."""
    needles = sorted({n for rule in rules for n in rule.needles}, key=len, reverse=True)
    return re.compile("|".join(re.escape(n) for n in needles))


_ANY_NEEDLE = _any_needle(_RULES)
_ANY_URL_NEEDLE = _any_needle(_URL_RULES)


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


def _redact(text: str, rules: tuple[_Rule, ...], any_needle: re.Pattern[str]) -> tuple[str, dict[str, int]]:
    counts: dict[str, int] = {}
    if not text:
        return text, counts
    lowered = text.lower()
    # Every rule below would be skipped. The one search for any needle saves the per-rule tests' Python steps on
    # a short text; on a long one it costs more than they do (an alternation of 28 needles tried at most
    # characters, about 50 ns a character, where each ``in`` below is a pass at about 1 ns).
    if len(text) <= _ANY_NEEDLE_MAX_CHARS and any_needle.search(lowered) is None:
        return text, counts
    source = text
    aligned = len(lowered) == len(text)
    groups, group_of, prefixed = _groups_of(rules)
    seen: dict[int, bool] = {}  # per group: whether one of its needles occurs
    for rule, group, finder in zip(rules, group_of, prefixed, strict=True):
        if group is not None:
            present = seen.get(group)
            if present is None:
                present = seen[group] = groups[group].search(lowered) is not None
            if not present:
                continue
        # A gated rule's gates each hold one of its needles: when the lower-cased text lines up with the
        # text, a text without a needle has no gate's match (nor has any redaction of it: each ends in "]"),
        # and each gate's word is looked for anyway.
        if not (rule.folded_gates and aligned) and not (
            finder.search(lowered) is not None if finder else any(map(lowered.__contains__, rule.needles))
        ):
            continue

        def counting(m: re.Match[str], rule: _Rule = rule) -> str:
            out = rule.apply(m)
            if out != m.group(0):
                marker = out.find("[REDACTED:")
                kind = out[marker + 10 : out.index("]", marker)]
                counts[kind] = counts.get(kind, 0) + 1
            return out

        # The text lower-cased already serves while no rule has changed it.
        text = _substitute(rule, text, counting, lowered if text is source else None)
    return text, counts


_ANY_NEEDLE_MAX_CHARS = 256


# Needles that end in one of these characters are looked for together, per group of rules: one pass that
# stops only at that character and looks behind it for each of them, instead of one pass of the whole text per
# needle (``in``). The token formats' needles (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_, k_live_, k_test_, hf_;
# sk-, sk-ant-, glpat-) are in almost no text, and a text that holds a common one ("token", "--", "key") paid
# a pass for each of them.
_GROUP_ENDS = ("_", "-")
_Groups = tuple[tuple[re.Pattern[str], ...], tuple[int | None, ...], tuple[re.Pattern[str] | None, ...]]
_GROUPS: dict[int, tuple[tuple[_Rule, ...], _Groups]] = {}


def _groups_of(rules: tuple[_Rule, ...]) -> _Groups:
    """For ``rules``: a pattern per group of two rules or more whose needles all end in the same one of
    ``_GROUP_ENDS`` (``--`` apart: it is in most command output), which finds whether any of their needles
    occurs; each rule's group (None: its needles are only tested alone); and for a rule not in a group, the
    pattern of its needles when they share a prefix (``_prefixed``). Made once per rules tuple."""
    got = _GROUPS.get(id(rules))
    if got is not None and got[0] is rules:
        return got[1]
    patterns: list[re.Pattern[str]] = []
    group_of: list[int | None] = [None] * len(rules)
    for end in _GROUP_ENDS:
        members = [
            i
            for i, rule in enumerate(rules)
            if rule.needles and all(n.endswith(end) and n != end * 2 for n in rule.needles)
        ]
        if len(members) < 2:
            continue
        needles = sorted({n for i in members for n in rules[i].needles})
        behind = "|".join("(?<=" + re.escape(n) + ")" for n in needles)
        for i in members:
            group_of[i] = len(patterns)
        patterns.append(re.compile(re.escape(end) + "(?:" + behind + ")"))
    prefixed = tuple(
        _prefixed(rule.needles) if group is None else None
        for rule, group in zip(rules, group_of, strict=True)
    )
    made = (tuple(patterns), tuple(group_of), prefixed)
    _GROUPS[id(rules)] = (rules, made)
    return made


def _prefixed(needles: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern that finds whether any of ``needles`` occurs, for three or more that share a prefix of two
    characters or more (``--password``, ``--token``, ...): the regex engine looks for the prefix by a substring
    search and tries the rests only where it is, one pass instead of one per needle."""
    if len(needles) < 3:
        return None
    prefix = needles[0]
    for needle in needles[1:]:
        while not needle.startswith(prefix):
            prefix = prefix[:-1]
    if len(prefix) < 2:
        return None
    rests = sorted((n[len(prefix) :] for n in needles), key=len, reverse=True)
    return re.compile(re.escape(prefix) + "(?:" + "|".join(map(re.escape, rests)) + ")")


def _substitute(rule: _Rule, text: str, replace: Replacer, lowered: str | None = None) -> str:
    if rule.folded is None:
        return rule.pattern.sub(replace, text)
    if lowered is None:
        lowered = text.lower()
    if len(lowered) != len(text):  # a character lower-cases to two: positions would not line up
        return rule.pattern.sub(replace, text)
    if rule.folded_gates:
        candidates: Iterable[re.Match[str]] = _gated(rule.folded, rule.folded_gates, lowered)
    else:
        candidates = rule.folded.finditer(lowered)
    pieces: list[str] = []
    last = 0
    for candidate in candidates:
        real = rule.pattern.match(text, candidate.start())
        if real is None or real.start() < last:
            continue
        pieces += (text[last : real.start()], replace(real))
        last = real.end()
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def _gate_word(gate: re.Pattern[str]) -> str:
    """The letters a gate starts with, but one a quantifier makes optional (``credentials?``): its key word,
    which every match holds."""
    word = _GATE_WORDS.get(gate)
    if word is None:
        word = _GATE_WORDS[gate] = _LETTERS.match(gate.pattern).group(1)  # type: ignore[union-attr]
    return word


_LETTERS = re.compile(r"([a-z]*?)(?:[a-z][?*{]|(?![a-z]))")
_GATE_WORDS: dict[re.Pattern[str], str] = {}


# How far before a gate's match a match of a gated pattern may start: the longest part of a key name before the
# word a gate starts with is 8 characters ("refresh_" of "refresh_token"); the rest is room to spare.
_GATE_REACH = 16


def _gated(
    pattern: re.Pattern[str], gates: tuple[re.Pattern[str], ...], lowered: str
) -> Iterator[re.Match[str]]:
    """``pattern.finditer(lowered)``, tried only just before the gates' matches. Every match of ``pattern`` holds
    a gate's match, which starts at most ``_GATE_REACH`` characters after it (its key's last word and the
    separator); the pattern starts with a dozen key names, so the regex engine tried it at every p, s, a, c, r,
    b and t of a text with any gate's match. Here it is tried at each position up to a gate's match, leftmost
    first, and after a match the search goes on from its end, as ``finditer``'s does: the same matches."""
    match = pattern.match
    hits = sorted(
        m.start()
        for gate in gates
        if _gate_word(gate) in lowered  # a pass of ``in`` is about twice as fast as the gate's search
        for m in gate.finditer(lowered)
    )
    tried = 0  # every position before this one was tried, or lies inside a match
    for hit in hits:
        at = max(tried, hit - _GATE_REACH)
        while at <= hit:
            found = match(lowered, at)
            if found is None:
                at += 1
            else:
                yield found
                at = found.end()
        tried = max(tried, at)


def redact_secrets(text: str) -> str:
    """``text`` with every recognised secret replaced by ``[REDACTED:<kind>]``."""
    return redact_secrets_counted(text)[0]


def redact_url_secrets(text: str) -> str:
    """Only the credentials URLs carry (userinfo password, credential-named query values): cheap enough for
    every log line and every line a command prints, and it cannot touch anything else in them."""
    return _redact(text, _URL_RULES, _ANY_URL_NEEDLE)[0]


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
