"""Secret redaction: every known format is replaced, and the identifiers a summary must keep are untouched."""

from __future__ import annotations

import pytest
from compactd.summarize.redact import redact_secrets, redact_secrets_counted, redact_url_secrets, redact_value
from hypothesis import given, settings
from hypothesis import strategies as st

# Assembled at run time so no scanner mistakes this file for a leak.
OPENAI = "sk-" + "proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv"
ANTHROPIC = "sk-" + "ant-api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnop"
GITHUB_OAUTH = "gho_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
SLACK = "xoxb-" + "123456789012-abcdefABCDEF"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GOOGLE = "AIza" + "SyA1234567890abcdefghijklmnopqrstuv"
HF = "hf_" + "abcdefghijklmnopqrstuvwxyz012345"
GITLAB = "glpat-" + "abcdefghij1234567890"
JWT = "eyJ" + "hbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7b\nq9Zk3\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        (f"export OPENAI_API_KEY={OPENAI}", OPENAI, "openai_key"),
        (f"key is {ANTHROPIC}.", ANTHROPIC, "anthropic_key"),
        (f"git clone https://{GITHUB}@github.com/a/b", GITHUB, "github_token"),
        (f"token {GITHUB_PAT}", GITHUB_PAT, "github_token"),
        (f"oauth={GITHUB_OAUTH}", GITHUB_OAUTH, "github_token"),
        (f"SLACK={SLACK}", SLACK, "slack_token"),
        (f"aws_access_key_id {AWS}", AWS, "aws_access_key"),
        (f"?key={GOOGLE}&q=1", GOOGLE, "google_api_key"),
        (f"HF token: {HF}", HF, "huggingface_token"),
        (f"PRIVATE-TOKEN: {GITLAB}", GITLAB, "gitlab_token"),
        (f"cookie: session={JWT}", JWT, "jwt"),
        (f"before\n{PEM}\nafter", PEM, "private_key"),
        ("curl -H 'Authorization: Bearer abc.def.ghi12345678' x", "abc.def.ghi12345678", "authorization"),
        ("authorization=Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "authorization"),
        ("headers: {Bearer Zm9vYmFyYmF6cXV1eDEyMzQ1}", "Zm9vYmFyYmF6cXV1eDEyMzQ1", "bearer"),
        ("postgres://admin:s3cr3t-pw@db.internal:5432/app", "s3cr3t-pw", "url_password"),
        ("DB_PASSWORD=hunter22", "hunter22", "password"),
        ('{"api_key": "abcd1234efgh"}', "abcd1234efgh", "secret"),
        ("password: correct-horse-9", "correct-horse-9", "password"),
        ("client_secret = 'q8Zr!x7'", "q8Zr!x7", "secret"),
        ("mysql --password hunter22 -u root", "hunter22", "secret"),
        ("deploy --token=abc12345", "abc12345", "secret"),
        ("GET https://h.example/v1?api-key=Zq81xYt3Kp0&page=2", "Zq81xYt3Kp0", "url_secret"),
        ("https://fn.azurewebsites.net/api/run?code=aBcD1234xyz==", "aBcD1234xyz==", "url_secret"),
        ("s3 https://b.s3.amazonaws.com/o?X-Amz-Signature=9f8e7d6c5b4a", "9f8e7d6c5b4a", "url_secret"),
        ("wss://rt.example/ws?x=1&token=qwerty123456", "qwerty123456", "url_secret"),
    ],
)
def test_secret_is_redacted(text: str, secret: str, kind: str) -> None:
    out, counts = redact_secrets_counted(text)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out
    assert counts.get(kind, 0) >= 1
    assert out == redact_secrets(text)


def test_url_user_stays_and_password_goes() -> None:
    out = redact_secrets("see postgres://admin:s3cr3t@db.internal:5432/app for details")
    assert out == "see postgres://admin:[REDACTED:url_password]@db.internal:5432/app for details"


def test_url_secrets_alone_are_redacted_by_redact_url_secrets() -> None:
    """The URL-only pass (what every log line and printed line gets) takes URL credentials and nothing else."""
    text = f"https://u:pw-9z8y7x@h.example/v1?key=Zq81xYt3Kp0&v=2 and {OPENAI} and password=hunter22"
    assert redact_url_secrets(text) == (
        f"https://u:[REDACTED:url_password]@h.example/v1?key=[REDACTED:url_secret]&v=2 and {OPENAI} and "
        "password=hunter22"
    )


def test_redact_value_redacts_every_string_but_the_links_between_entries() -> None:
    message = {
        "role": "assistant",
        "id": OPENAI,  # an id is never rewritten: two redacted ids would collide
        "content": [
            {"type": "toolCall", "id": "call_1", "arguments": {"cmd": [f"export K={OPENAI}"], "n": 3}}
        ],
        "toolCallId": OPENAI,
    }
    out = redact_value(message)
    assert out["content"][0]["arguments"] == {"cmd": ["export K=[REDACTED:openai_key]"], "n": 3}
    assert out["id"] == out["toolCallId"] == OPENAI and out["content"][0]["id"] == "call_1"
    assert message["content"][0]["arguments"]["cmd"] == [f"export K={OPENAI}"]  # a copy: the input is kept


def test_key_names_and_surroundings_are_kept() -> None:
    out = redact_secrets("export DB_PASSWORD=hunter22 # local only")
    assert out == "export DB_PASSWORD=[REDACTED:password] # local only"
    assert redact_secrets('{"api_key": "abcd1234efgh", "model": "x"}') == (
        '{"api_key": "[REDACTED:secret]", "model": "x"}'
    )


def test_unterminated_private_key_is_redacted_to_the_end() -> None:
    """A tool result cut mid-key must not leak the part that was kept."""
    out = redact_secrets("cat id_rsa\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA")
    assert out == "cat id_rsa\n[REDACTED:private_key]"


@pytest.mark.parametrize(
    "text",
    [
        "commit 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b",
        "session 123e4567-e89b-12d3-a456-426614174000",
        "/home/user/.ssh/config and src/secret_store.py",
        "https://github.com/openclaw/openclaw/issues/8525",
        "postgres://db.internal:5432/app",
        "max_tokens: 4096, token_count=5, input_tokens=1200",
        "PWD=/home/u/proj OLDPWD=/tmp",
        "api_key = os.environ['OPENAI_API_KEY']",
        "password = getpass()",
        "secret: ${SECRET}",
        "token=self.token",
        "apiKey = await getApiKeyForModel(model)",
        "export ANTHROPIC_API_KEY=sk-ant-...",
        "  --api-key <key>     API key (defaults to env vars)",
        "Token: expired",
        "Password: must be at least 8 characters",
        "The password is stored in the keychain.",
        "a task-runner-for-risk-assessment-2024 and the disk-usage-report",
        "Authorization: required for every call",
        "process.env.ANTHROPIC_API_KEY = undefined`",
        "credentials: ~/.aws/credentials",
        "https://example.com/search?q=keys&page=2&author=jane&error_code=E1234",
        "https://api.example/v1?api-key=${API_KEY}",
        "",
    ],
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets_counted(text)[1] == {}


def test_counts_by_kind() -> None:
    text = f"{OPENAI} {OPENAI} password=hunter22 {AWS}"
    out, counts = redact_secrets_counted(text)
    assert counts == {"openai_key": 2, "password": 1, "aws_access_key": 1}
    assert out.count("[REDACTED:") == 4


def test_non_ascii_text_around_secrets() -> None:
    """Case folding that changes length (İ) must not misplace the replacement."""
    out = redact_secrets("İstanbul: password=hunter22 ok")
    assert out == "İstanbul: password=[REDACTED:password] ok"
    assert redact_secrets(f"密钥是 {OPENAI}，请勿外传") == "密钥是 [REDACTED:openai_key]，请勿外传"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_redaction_is_idempotent(text: str) -> None:
    once = redact_secrets(text)
    assert redact_secrets(once) == once


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120))
def test_embedded_secret_never_survives(noise: str) -> None:
    out = redact_secrets(f"{noise} {OPENAI} {noise}")
    assert OPENAI not in out


# One secret of each rule, and fragments of the rules' needles and keys, embedded in noise.
_SECRET_SAMPLES = [
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----",
    "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.c2lnbmF0dXJlMTIz",
    "sk-ant-api03-abcdefghijklmnopqrstuvwx",
    "sk-proj-abc123def456ghi789jkl0",
    "sk_live_abcdefghijklmnop1234",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github_pat_11ABCDEFG0123456789_abcdefghij",
    "glpat-abcdefghij0123456789",
    "xoxb-123456789012-abcdef",
    "AKIAIOSFODNN7EXAMPLE",
    "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "hf_abcdefghijklmnopqrstuvwxyz012345",
    "Authorization: Basic dXNlcjpwYXNzd29yZA==",
    "Bearer abcdefghijklmnop1234",
    "postgres://admin:hunter2@db:5432/x",
    "https://x.io/a?api_key=abcd1234&sig=zz99",
    "--password s3cr3t!",
    "DB_PASSWORD=hunter2x",
    'apiKey: "abc123xyz"',
    "token=ab12cd34",
    "client_secret = 'q1w2e3r4'",
]
_NOISE = ["", " ", "\n", "x", "KEY", "Pass", "-", "_", "?", "&", "=", ":", "//", "é", "日本", "[REDACTED"]


@given(st.lists(st.sampled_from(_SECRET_SAMPLES + _NOISE), max_size=12))
@settings(max_examples=300, deadline=None)
def test_the_needle_prefilter_never_skips_a_secret(parts: list[str]) -> None:
    """A text is returned untouched when no rule's needle occurs in it; with the pre-filter made to pass
    everything (each rule then checks its own needles), the result and the counts are the same."""
    import re

    from compactd.summarize import redact, secret_rules

    text = "".join(parts)
    everything = re.compile("")
    assert redact._redact(text, redact._RULES, redact._ANY_NEEDLE) == redact._redact(
        text, redact._RULES, everything
    )
    url_rules = secret_rules.url_rules()
    assert secret_rules._redact(text, url_rules, secret_rules._any_url_needle()) == secret_rules._redact(
        text, url_rules, everything
    )
    for secret in _SECRET_SAMPLES:
        assert redact_secrets(secret) != secret  # each sample is one the rules redact


def test_a_text_without_the_url_needles_is_returned_before_the_url_rules_are_made() -> None:
    """``redact_url_secrets`` returns a text that holds none of ``_URL_NEEDLES`` as it is: they are the URL
    rules' needles, none a letter (so the lower-cased text, which the rules' tests read, holds none either)."""
    from compactd.summarize import secret_rules

    needles = {n for rule in secret_rules.url_rules() for n in rule.needles}
    assert needles == set(secret_rules._URL_NEEDLES)
    assert not any(c.isalpha() for n in needles for c in n)
    assert redact_url_secrets("see https://user:hunter22@example.com/x?token=abcdef") == (
        "see https://user:[REDACTED:url_password]@example.com/x?token=[REDACTED:url_secret]"
    )


def test_redact_value_copies_only_what_holds_a_secret() -> None:
    """A span's messages are redacted as values: one without a secret is returned itself (no copy of the
    span), one with a secret is a new value whose clean parts are shared, and the original is unchanged."""
    clean_block = {"type": "text", "text": "nothing to hide here: src/app.py"}
    secret_block = {"type": "text", "text": "export OPENAI_API_KEY=sk-proj-abc123def456ghi789jkl0"}
    clean = {"role": "user", "content": [clean_block], "timestamp": 1}
    dirty = {"role": "user", "content": [clean_block, secret_block], "timestamp": 2}
    before = repr(dirty)
    assert redact_value(clean) is clean
    out = redact_value(dirty)
    assert out is not dirty and out["content"][1] is not secret_block
    assert "sk-proj" not in repr(out) and "[REDACTED:" in out["content"][1]["text"]
    assert out["content"][0] is clean_block
    assert repr(dirty) == before


_ASSIGNMENT_PARTS = [
    "password",
    "PassPhrase",
    "passwd",
    "api_key",
    "Secret",
    "TOKEN",
    "credentials",
    "credential",
    "key",
    '"',
    "'",
    " ",
    "\t",
    "\n",
    ":",
    "=",
    ":=",
    "=>",
    "hunter22x",
    "ab12cd34",
    "$VAR",
    "İ",  # lower-cases to two characters: the case-insensitive path
    "K",  # the Kelvin sign: K under IGNORECASE
    "ſ",  # the long s: s under IGNORECASE, not in lower()
]


@given(st.lists(st.sampled_from(_ASSIGNMENT_PARTS + _SECRET_SAMPLES + _NOISE), max_size=14))
@settings(max_examples=400, deadline=None)
def test_the_assignment_gates_never_change_a_result(parts: list[str]) -> None:
    """The assignment rule runs its candidate search only where a key word meets a ":" or "="
    (``folded_gates``); without the gates (the rule as it was) the result and the counts are the same."""
    import dataclasses

    from compactd.summarize import redact

    text = "".join(parts)
    ungated = tuple(dataclasses.replace(rule, folded_gates=()) for rule in redact._RULES)
    assert redact._redact(text, redact._RULES, redact._ANY_NEEDLE) == redact._redact(
        text, ungated, redact._ANY_NEEDLE
    )
