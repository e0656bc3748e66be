"""The redaction machinery (a rule, and running rules over a text) and the rules for the credentials URLs carry.

Everything a printed line or a log line needs (:func:`redact_url_secrets`, applied to each of them): the
transcript rules of :mod:`compactd.summarize.redact` are built on this, and only a command that reads a
transcript for a summary compiles them (about 8 ms of regular expressions a command that prints a table need
not pay).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator

from compactd.datarecord import datarecord
from compactd.patterns import lazy_pattern

__all__ = ["redact_url_secrets", "url_rules"]

Replacer = Callable[[re.Match[str]], str]

# Values of secret-named assignments that are references or placeholders, not secrets.
_PLACEHOLDER = r"""^(?:
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
    )$"""


# ``_PLACEHOLDER`` compiled on first use (about 2 ms): few printed or logged lines hold a value it is asked
# about.
placeholder = lazy_pattern(_PLACEHOLDER, re.IGNORECASE | re.VERBOSE)


def _keep_prefix(kind: str, group: str = "prefix") -> Replacer:
    return lambda m: f"{m.group(group)}[REDACTED:{kind}]"


def _url_query(m: re.Match[str]) -> str:
    if placeholder().match(m.group("cred")):
        return m.group(0)  # ?api-key=$KEY in a usage text
    return f"{m.group('prefix')}[REDACTED:url_secret]"


@datarecord(frozen=True, slots=True, rare=True)
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


# The URL rules' needles (``tests/test_redact.py`` holds them to the rules'): a text that holds none is
# returned by :func:`redact_url_secrets` before the rules are made. Few printed or logged lines hold one
# (none of ``once --dry-run``'s), and the rules' two patterns are about 4M instructions to compile.
_URL_NEEDLES = ("://", "?", "&")


@functools.cache
def url_rules() -> tuple[_Rule, ...]:
    """Secrets a URL carries: scheme://user:password@host (the user name stays, it is an identifier) and a
    query parameter named like a credential (?api-key=, &token=, X-Amz-Signature=, Azure's ?code=, Google's
    ?key=). Made on first use."""
    return (
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


def _any_needle(rules: tuple[_Rule, ...]) -> re.Pattern[str]:
    """One pass that finds whether any rule's needle occurs: a text without one needs no rule at all (most
    strings of a message: roles, tool names, prose without a key word), which costs one search instead of a
    check per rule and needle."""
    needles = sorted({n for rule in rules for n in rule.needles}, key=len, reverse=True)
    return re.compile("|".join(re.escape(n) for n in needles))


@functools.cache
def _any_url_needle() -> re.Pattern[str]:
    return _any_needle(url_rules())


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
        word = _GATE_WORDS[gate] = _LETTERS().match(gate.pattern).group(1)  # type: ignore[union-attr]
    return word


_LETTERS = lazy_pattern(r"([a-z]*?)(?:[a-z][?*{]|(?![a-z]))")
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


def redact_url_secrets(text: str) -> str:
    """Only the credentials URLs carry (userinfo password, credential-named query values): cheap enough for
    every log line and every line a command prints, and it cannot touch anything else in them."""
    # The needles hold no letter: a text without one has none lower-cased either, and no rule would run.
    if not any(map(text.__contains__, _URL_NEEDLES)):
        return text
    return _redact(text, url_rules(), _any_url_needle())[0]
