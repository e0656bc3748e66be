"""Issue 22 item 2: the identifier records, the redaction and its counts are today's, byte for byte.

``tests/support/reference/`` holds ``identifiers.py`` and ``redact.py`` as they were before the multi-needle gates
(main at c791685); here the package's extraction and redaction are held equal to them on generated text rich in
identifier-like and secret-like shapes (and their near misses: needles without their secret, key words without
their separator, characters that lower-case to two or that ``re.IGNORECASE`` folds) and on the real sessions.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
from compactd.summarize import identifiers, redact, secret_rules
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.reference import identifiers as ref_identifiers
from tests.support.reference import redact as ref_redact

Msg = dict[str, Any]

_IDENTIFIER_SHAPES = [
    "https://api.example.com/v1?x=1",
    "a@b.io",
    "0196a3b2-0000-7000-8000-0000000000aa",
    "C:\\Users\\me\\a.txt",
    "db-3.internal:5432",
    "10.0.0.1",
    "fe80::1",
    "pkg@1.2.3",
    "requests==2.31.0",
    "v2.4.1",
    "^18.2.0",
    "owner/repo#12",
    "/etc/hosts",
    "src/core/",
    "main.ts:42",
    "package.json",
    ".env",
    "2026-11-30T14:05:00Z",
    "1.2.3-rc.1",
    "14:05",
    "#1234",
    "!89",
    "OPS-27203",
    "req_8f3a9c2d",
    "i-0abc1234",
    ":9443",
    "deadbeef12",
    "1234567",
    "PR 567",
    "port 5432",
    "PORT=8080",
    "import 5",
    "issue #7",
    "version 3.12.1",
    "30 Nov 2026",
    "Nov 3, 2026",
    "'/tmp/a b/c.png'",
    "-rw-r--r--",
    "word",
    "日本",
]
_SECRET_SHAPES = [
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----",
    "private key",
    "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.c2lnbmF0dXJlMTIz",
    "sk-ant-api03-abcdefghijklmnopqrstuvwx",
    "sk-proj-abc123def456ghi789jkl0",
    "sk-",
    "sk_live_abcdefghijklmnop1234",
    "rk_test_",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "gho_",
    "gh",
    "github_pat_11ABCDEFG0123456789_abcdefghij",
    "glpat-abcdefghij0123456789",
    "xoxb-123456789012-abcdef",
    "AKIAIOSFODNN7EXAMPLE",
    "asia",
    "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "hf_abcdefghijklmnopqrstuvwxyz012345",
    "Authorization: Basic dXNlcjpwYXNzd29yZA==",
    "Bearer abcdefghijklmnop1234",
    "postgres://admin:hunter2@db:5432/x",
    "https://x.io/a?api_key=abcd1234&sig=zz99",
    "--password s3cr3t!",
    "--token",
    "DB_PASSWORD=hunter2x",
    'apiKey: "abc123xyz"',
    "token=ab12cd34",
    "token: int",
    "refresh_token =",
    "client_secret = 'q1w2e3r4'",
    "credentials:",
    "credential=password",
    "passphrase",
    "Key",
    "=",
    ":",
    "=>",
    '"',
    "hunter22x",
    "$VAR",
    "İ",  # lower-cases to two characters
    "K",  # the Kelvin sign: K under IGNORECASE
    "ſ",  # the long s: s under IGNORECASE
    "[REDACTED",
    "_",
    "-",
    "?",
    "&",
]
_GAPS = ["", "", " ", "\n", "\t", "  ", "\n\n"]

_TEXTS = st.lists(
    st.tuples(st.sampled_from(_IDENTIFIER_SHAPES + _SECRET_SHAPES), st.sampled_from(_GAPS)), max_size=16
).map(lambda parts: "".join(a + b for a, b in parts))


def _records(found: list[Any]) -> list[tuple[Any, ...]]:
    """Every field of every record (the two trees' ``Identifier`` are distinct classes)."""
    return [dataclasses.astuple(i) for i in found]


@given(_TEXTS)
@example("token: ab12cd34 xx" + " " * 40 + "refresh_token=ab12cd34ef")
@example("paſſword=hunter22x İ")
@settings(max_examples=500, deadline=None)
def test_redaction_equals_the_reference(text: str) -> None:
    """The text and the counts of each kind, for the whole rule set and for the URL rules alone."""
    assert redact.redact_secrets_counted(text) == ref_redact.redact_secrets_counted(text)
    assert redact.redact_url_secrets(text) == ref_redact.redact_url_secrets(text)


@given(_TEXTS, _TEXTS)
@settings(max_examples=300, deadline=None)
def test_long_texts_are_redacted_as_the_reference(first: str, second: str) -> None:
    """A long text skips the one any-needle search and tests its needles by group and by ``in``: the same text
    and counts as the reference."""
    text = first + " " * (secret_rules._ANY_NEEDLE_MAX_CHARS + 1) + second
    assert redact.redact_secrets_counted(text) == ref_redact.redact_secrets_counted(text)


@given(_TEXTS)
@settings(max_examples=300, deadline=None)
def test_scan_equals_the_reference_with_a_shared_memo(text: str) -> None:
    """``scan_text`` of a text (and of it again with the memo it filled, and of it doubled) is the reference's."""
    memo: identifiers.WordMemo = {}
    for sample in (text, text, text + "\n" + text):
        assert list(identifiers.scan_text(sample, memo)) == list(ref_identifiers.scan_text(sample))


def _messages(specs: list[tuple[str, str, str]]) -> list[Msg]:
    read: list[Msg] = []
    for role, first, second in specs:
        if role == "bashExecution":
            read.append({"role": role, "command": first, "output": second})
        elif role == "assistant":
            read.append(
                {
                    "role": role,
                    "content": [
                        {"type": "text", "text": first},
                        {
                            "type": "toolCall",
                            "id": "c1",
                            "name": "bash",
                            "arguments": {"command": second, "path": first.strip(), "note": [first, second]},
                        },
                    ],
                }
            )
        elif role == "user":
            read.append({"role": role, "content": first + second})
        elif role == "toolResult":
            read.append(
                {
                    "role": role,
                    "toolCallId": "c1",
                    "toolName": "bash",
                    "content": [{"type": "text", "text": first + "\n" + second}],
                }
            )
        else:
            read.append(
                {"role": role, "content": [{"type": "text", "text": first}, {"type": "text", "text": second}]}
            )
    return read


def _assert_equal_to_the_reference(read: list[Msg]) -> list[Any]:
    handed_on = [redact.redact_value(m) for m in read]
    ref_handed_on = [ref_redact.redact_value(m) for m in read]
    assert handed_on == ref_handed_on
    found = identifiers.extract_identifiers(handed_on, redact.SpanText.of(read, handed_on))
    expected = ref_identifiers.extract_identifiers(ref_handed_on, ref_redact.SpanText.of(read, ref_handed_on))
    assert _records(found) == _records(expected)
    without = identifiers.extract_identifiers(handed_on)  # without the job's texts: each text redacted again
    assert _records(without) == _records(ref_identifiers.extract_identifiers(ref_handed_on))
    return found


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["user", "assistant", "toolResult", "custom", "bashExecution"]), _TEXTS, _TEXTS
        ),
        min_size=1,
        max_size=8,
    )
)
@settings(max_examples=200, deadline=None)
def test_records_and_redaction_equal_the_reference_on_generated_messages(
    specs: list[tuple[str, str, str]],
) -> None:
    """Every message redacted as the reference redacts it, and every field of every record (text, kind, count,
    first and last index, flags) the reference's, on messages of every role whose texts repeat shapes and lines
    within and across messages."""
    _assert_equal_to_the_reference(_messages(specs))


def _real_dir() -> Path:
    configured = os.environ.get("COMPACTD_FIXTURES")
    base = Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "fixtures"
    return base / "real" if (base / "real").is_dir() else base


def _real() -> list[str]:
    return sorted(p.name for p in _real_dir().glob("*.jsonl")) if _real_dir().is_dir() else []


@pytest.mark.parametrize("name", _real() or ["(no real fixtures)"])
def test_records_and_redaction_equal_the_reference_on_real_sessions(name: str) -> None:
    """The real sessions (read where they are, never copied here): the redacted messages and the records."""
    path = _real_dir() / name
    if not path.is_file():
        pytest.skip(f"{path} not present")
    from compactd.core.context import build_context
    from compactd.core.messages import llm_visible
    from compactd.reading import read_transcript

    read = list(llm_visible(build_context(read_transcript(path)).messages))
    assert _assert_equal_to_the_reference(read)  # the real sessions are full of identifiers


_IDENTIFIER_FIELDS = st.tuples(
    st.sampled_from(["a.py", "b.py", "A.PY", "deadbee1", "/srv/x", "port 80"]),  # few: ties in text
    st.sampled_from(identifiers.KINDS),
    st.booleans(),
    st.integers(1, 40),
    st.integers(-1, 30),
    st.integers(0, 30),
    st.booleans(),
    st.booleans(),
)


@given(st.lists(_IDENTIFIER_FIELDS, max_size=120), st.integers(0, 80), st.integers(0, 60))
@settings(max_examples=300, deadline=None)
def test_ranking_equals_the_reference_ranking(
    fields: list[tuple[Any, ...]], cap: int, written_max: int
) -> None:
    """Ranking orders only what it keeps (and skips a group the cap leaves no room for): the same identifiers in
    the same order as sorting every group whole, ties, carried (index -1) and empty groups included."""
    ours = [identifiers.Identifier(*f) for f in fields]
    theirs = [ref_identifiers.Identifier(*f) for f in fields]
    got = identifiers.rank_identifiers(ours, cap=cap, written_max=written_max)
    expected = ref_identifiers.rank_identifiers(theirs, cap=cap, written_max=written_max)
    assert _records(got) == _records(expected)
