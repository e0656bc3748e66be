"""Identifiers: extracted from the whole span, ranked, checked and repaired into a summary, no model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.summarize.headings import EXACT_IDENTIFIERS, REQUIRED_HEADINGS
from daemon.summarize.identifiers import (
    COMMAND_MAX_CHARS,
    Identifier,
    ensure_identifiers,
    extract_identifiers,
    identifier_line,
    identifier_score,
    missing_identifiers,
    rank_identifiers,
    scan_text,
)

Msg = dict[str, Any]


def user(text: str) -> Msg:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def assistant(text: str = "", *calls: Msg) -> Msg:
    content: list[Msg] = [{"type": "text", "text": text}] if text else []
    return {"role": "assistant", "content": [*content, *calls], "stopReason": "stop", "timestamp": 2}


def call(name: str, call_id: str = "c1", **arguments: Any) -> Msg:
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}


def result(text: str, call_id: str = "c1", **extra: Any) -> Msg:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "bash",
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "timestamp": 3,
        **extra,
    }


def found(text: str) -> set[tuple[str, str]]:
    return set(scan_text(text))


def ident(text: str, kind: str = "path", *, user: bool = False, count: int = 1, last: int = 0) -> Identifier:
    return Identifier(text, kind, user, count, last)


# --- extraction: each kind ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        (
            "edit /home/user/project/src/agents/compaction.ts now",
            "/home/user/project/src/agents/compaction.ts",
            "path",
        ),
        ("see src/controllers/UserController.ts.", "src/controllers/UserController.ts", "path"),
        ("open ./scripts/run", "./scripts/run", "path"),
        ("up ../lib/util.py", "../lib/util.py", "path"),
        ("in ~/.pi/agent/settings.json", "~/.pi/agent/settings.json", "path"),
        ("the dir src/core is new", "src/core", "path"),
        ("check package.json and", "package.json", "path"),
        ("edit .gitignore too", ".gitignore", "path"),
        ("run C:\\Users\\me\\proj\\main.py please", "C:\\Users\\me\\proj\\main.py", "path"),
        ("share \\\\server\\share\\docs\\a.txt", "\\\\server\\share\\docs\\a.txt", "path"),
        (
            "open '/tmp/shots/Screenshot 2025-11-21 at 01.48.00.png' now",
            "/tmp/shots/Screenshot 2025-11-21 at 01.48.00.png",
            "path",
        ),
        (
            "(see https://github.com/openclaw/openclaw/issues/8525).",
            "https://github.com/openclaw/openclaw/issues/8525",
            "url",
        ),
        ("[docs](https://en.wikipedia.org/wiki/Foo_(bar))", "https://en.wikipedia.org/wiki/Foo_(bar)", "url"),
        ("id 123e4567-e89b-12d3-a456-426614174000,", "123e4567-e89b-12d3-a456-426614174000", "uuid"),
        ("commit 1a2b3c4 fixed it", "1a2b3c4", "hash"),
        ("sha 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B", "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B", "hash"),
        ("addr 0xdeadbeef1", "0xdeadbeef1", "hash"),
        ("ping 192.168.1.10.", "192.168.1.10", "ip"),
        ("v6 fe80::1 and", "fe80::1", "ip"),
        ("v6 2001:db8::8a2e:370:7334", "2001:db8::8a2e:370:7334", "ip"),
        ("serve on localhost:8080", "localhost:8080", "host_port"),
        ("db at db.internal:5432", "db.internal:5432", "host_port"),
        ("redis 10.0.0.5:6379", "10.0.0.5:6379", "host_port"),
        ("v6 [::1]:8443 ok", "[::1]:8443", "host_port"),
        ("mail ops@example.com.", "ops@example.com", "email"),
        ("order 1234567 shipped", "1234567", "number"),
        ("the 4-part version 1.2.3.4 reads as an IP", "1.2.3.4", "ip"),
    ],
)
def test_each_kind_is_extracted(text: str, expected: str, kind: str) -> None:
    assert (expected, kind) in found(text)


@pytest.mark.parametrize(
    "text",
    [
        "hello world, this is ordinary prose with no identifiers at all",
        "and/or input/output offset/limit title/heading text/plain",
        "1/2 of 12/08/2024",
        "e.g. i.e. etc.",
        "deadbeef facade accede",  # hex letters only: words
        "version 1.2.3 and v1.2.3.4",  # three-part versions and v-prefixed ones are not IPs
        "at 12:34:56 on 2025-12-08T23:22:54.411Z",
        "console.log(x); res.json(); self.json",
        "12345 and 99",  # fewer than 6 digits
        "std::vector and foo::bar",
        "w/o n/a CI/CD",
        "/usr and / and //",  # single-segment absolute path without extension
    ],
)
def test_false_positives_are_not_extracted(text: str) -> None:
    assert found(text) == set()


def test_file_location_is_a_path_not_a_host() -> None:
    assert found("error at src/main.ts:42:5 and main.ts:7") == {("src/main.ts", "path"), ("main.ts", "path")}


def test_nothing_is_found_twice_inside_a_larger_identifier() -> None:
    """The host in a URL, the hash in a path or UUID, the path in a URL: one identifier each."""
    assert found("https://example.com:8443/repo/commit/1a2b3c4d5e") == {
        ("https://example.com:8443/repo/commit/1a2b3c4d5e", "url")
    }
    assert found("src/abc1234f/x.ts") == {("src/abc1234f/x.ts", "path")}


def test_cjk_text_around_identifiers() -> None:
    """Lines from the seed documents: CJK characters glued to identifiers must not become part of them."""
    seed = (
        "如果摘要把文件路径 /home/user/project/src/agents/compaction.ts 缩写成了”compaction 相关文件”，"
        "比如把 file: src/controllers/UserController.ts 概括成”修改了一个控制器文件”。"
        "修改了/srv/app/main.py文件，提交abc1234f了，访问http://localhost:3000/api。"
    )
    assert found(seed) == {
        ("/home/user/project/src/agents/compaction.ts", "path"),
        ("src/controllers/UserController.ts", "path"),
        ("/srv/app/main.py", "path"),
        ("abc1234f", "hash"),
        ("http://localhost:3000/api", "url"),
    }


def test_url_credentials_never_become_part_of_an_identifier() -> None:
    ids = extract_identifiers([user("connect to postgres://admin:s3cr3t@db.internal:5432/app")])
    assert [(i.text, i.kind) for i in ids] == [("postgres://db.internal:5432/app", "url")]


def test_secrets_are_never_extracted() -> None:
    key = "sk-" + "proj-" + "1a2b3c4d5e6f7a8b9c0d1e2f"
    aws = "AKIA" + "1234567890ABCDEF"
    ids = extract_identifiers([user(f"key {key} and {aws}"), result(f"TOKEN=1a2b3c4d5e6f7a8b9c0d\n{key}")])
    texts = " ".join(i.text for i in ids)
    assert "1a2b3c4d" not in texts
    assert "sk-" not in texts
    assert "AKIA" not in texts


def test_sources_flags_counts_and_last_index() -> None:
    messages = [
        user("please fix /srv/app/main.py"),
        assistant("Looking at /srv/app/main.py", call("read", path="/srv/app/util.py")),
        result("imports /srv/app/helpers.py"),
        assistant("", call("bash", "c2", command="cd /srv/app && pytest -x\necho done")),
        result("ok", "c2"),
    ]
    by_text = {i.text: i for i in extract_identifiers(messages)}
    main = by_text["/srv/app/main.py"]
    assert (main.from_user, main.from_agent, main.count, main.first_index, main.last_index) == (
        True,
        True,
        2,
        0,
        1,
    )
    util = by_text["/srv/app/util.py"]
    assert (util.from_user, util.from_agent, util.last_index) == (False, True, 1)
    helpers = by_text["/srv/app/helpers.py"]
    assert (helpers.from_user, helpers.from_agent, helpers.last_index) == (False, False, 2)
    command = by_text["cd /srv/app && pytest -x"]  # first line only
    assert (command.kind, command.last_index) == ("command", 3)


def test_commands_are_capped_and_user_bash_counts_as_user() -> None:
    long = "grep -rn " + "x" * 400
    messages = [
        assistant("", call("bash", command=long)),
        {"role": "bashExecution", "command": "git log -1", "output": "commit 9f86d08188", "exitCode": 0},
        {"role": "bashExecution", "command": "cat .env", "output": "", "excludeFromContext": True},
    ]
    by_text = {i.text: i for i in extract_identifiers(messages)}
    assert long[:COMMAND_MAX_CHARS] in by_text
    assert by_text["git log -1"].from_user
    assert not by_text["9f86d08188"].from_user  # the output is not the user's words
    assert "cat .env" not in by_text


def test_trivial_path_arguments_are_skipped() -> None:
    messages = [
        assistant("", call("read", path="."), call("ls", "c2", path="/"), call("read", "c3", file_path="src"))
    ]
    assert [(i.text, i.kind) for i in extract_identifiers(messages)] == [("src", "path")]


def test_details_and_runtime_context_are_never_scanned() -> None:
    messages = [
        result("plain", details={"path": "/hidden/in/details.ts", "diff": "abc1234def"}),
        {"role": "custom", "customType": "openclaw.runtime-context", "content": "/hidden/runtime.ts"},
        {"role": "compactionSummary", "summary": "kept /from/summary.ts", "tokensBefore": 1},
    ]
    assert [i.text for i in extract_identifiers(messages)] == ["/from/summary.ts"]


def test_hex_duplicates_merge_case_insensitively() -> None:
    ids = extract_identifiers([user("commit ABC1234F"), assistant("yes abc1234f")])
    assert [(i.text, i.count, i.from_user, i.last_index) for i in ids] == [("ABC1234F", 2, True, 1)]


# --- ranking ------------------------------------------------------------------------------------------------
def test_user_written_first_then_by_score() -> None:
    ids = [
        ident("/old/once.ts", last=0),
        ident("/new/once.ts", last=9),
        ident("/old/often.ts", count=15, last=1),
        ident("/user/said.ts", user=True, last=0),
    ]
    assert [i.text for i in rank_identifiers(ids)] == [
        "/user/said.ts",
        "/new/once.ts",
        "/old/often.ts",
        "/old/once.ts",
    ]


def test_score_rewards_recency_repetition_agent_use_and_kind() -> None:
    base = ident("/a.ts", last=5)
    assert identifier_score(ident("/a.ts", last=9), 10) > identifier_score(base, 10)
    assert identifier_score(ident("/a.ts", count=8, last=5), 10) > identifier_score(base, 10)
    agent = Identifier("/a.ts", "path", False, 1, 5, from_agent=True)
    assert identifier_score(agent, 10) > identifier_score(base, 10)
    assert identifier_score(ident("123456", "number", last=5), 10) < identifier_score(base, 10)


def test_cap_never_drops_a_user_identifier() -> None:
    users = [ident(f"/u/{n}.ts", user=True, last=n) for n in range(100)]
    others = [ident(f"/o/{n}.ts", last=200 + n) for n in range(50)]
    ranked = rank_identifiers(others + users, cap=64)
    assert len(ranked) == 100
    assert all(i.from_user for i in ranked)
    small = rank_identifiers([*users[:2], *others], cap=5)
    assert [i.from_user for i in small] == [True, True, False, False, False]
    assert [i.text for i in small[2:]] == ["/o/49.ts", "/o/48.ts", "/o/47.ts"]


def test_ranking_is_deterministic() -> None:
    ids = [ident(f"/t/{n}.ts", last=3) for n in range(10)]
    assert rank_identifiers(ids) == rank_identifiers(list(reversed(ids)))
    assert [i.text for i in rank_identifiers(ids, cap=3)] == ["/t/0.ts", "/t/1.ts", "/t/2.ts"]


# --- checking and repair ------------------------------------------------------------------------------------
def summary(*, ids_body: str = "None.") -> str:
    return (
        "## Decisions\n- kept main.py\n## Open TODOs\n- None.\n## Constraints/Rules\n- None.\n"
        f"## Pending user asks\n- None.\n## Exact identifiers\n{ids_body}\n"
    )


def test_hex_matches_case_insensitively_paths_exactly() -> None:
    ranked = [
        ident("9f86d08188", "hash"),
        ident("/srv/App.py"),
        ident("123e4567-e89b-12d3-a456-426614174000", "uuid"),
    ]
    text = "commit 9F86D08188 in /srv/app.py, id 123E4567-E89B-12D3-A456-426614174000"
    assert missing_identifiers(text, ranked) == [ranked[1]]


def test_repair_appends_exactly_the_missing_in_rank_order() -> None:
    ranked = [ident("/a/one.py"), ident("main.py"), ident("/a/two.py"), ident("deadbee1", "hash")]
    text = summary(ids_body="- `DEADBEE1`")
    repaired, report = ensure_identifiers(text, ranked)
    assert repaired == summary(ids_body="- `DEADBEE1`\n- `/a/one.py`\n- `/a/two.py`")
    assert (report.total, report.kept_by_model, report.in_summary) == (4, 2, 4)
    assert report.missing_before == [ranked[0], ranked[2]]
    assert report.retention_before == 0.5
    assert report.retention_after == 1.0


def test_repair_replaces_a_placeholder_and_is_idempotent() -> None:
    ranked = [ident("/a/one.py"), ident("/b/two.py")]
    repaired, _ = ensure_identifiers(summary(), ranked)
    assert repaired == summary(ids_body="- `/a/one.py`\n- `/b/two.py`")
    again, report = ensure_identifiers(repaired, ranked)
    assert again == repaired
    assert (report.kept_by_model, report.in_summary, report.missing_before) == (2, 2, [])


def test_repair_creates_the_heading_when_absent() -> None:
    repaired, report = ensure_identifiers("The model rambled about /x.\n", [ident("/srv/x.py")])
    assert repaired == f"The model rambled about /x.\n\n{EXACT_IDENTIFIERS}\n- `/srv/x.py`\n"
    assert report.in_summary == 1
    assert ensure_identifiers("", [ident("/srv/x.py")])[0] == f"{EXACT_IDENTIFIERS}\n- `/srv/x.py`\n"


def test_repair_inserts_before_the_next_section() -> None:
    text = f"{EXACT_IDENTIFIERS}\n- `a.py`\n\n## Tool failures\n- bash (exit 1)\n"
    repaired, _ = ensure_identifiers(text, [ident("a.py"), ident("/b/c.py")])
    assert repaired == f"{EXACT_IDENTIFIERS}\n- `a.py`\n- `/b/c.py`\n\n## Tool failures\n- bash (exit 1)\n"


def test_nothing_missing_returns_the_summary_unchanged() -> None:
    text = "no headings at all, but /srv/x.py is here"
    repaired, report = ensure_identifiers(text, [ident("/srv/x.py")])
    assert repaired == text
    assert (report.total, report.kept_by_model, report.in_summary) == (1, 1, 1)
    assert ensure_identifiers(text, [])[0] == text


def test_identifier_line_survives_backticks() -> None:
    line = identifier_line("echo `date` done")
    assert "echo `date` done" in line
    assert line.startswith("- ``")


identifier_texts = st.one_of(
    st.from_regex(r"/[a-z]{1,8}(/[a-zA-Z0-9_.-]{1,10}){1,3}\.[a-z]{1,3}", fullmatch=True),
    st.from_regex(r"[0-9a-f]{3}[0-9][a-f][0-9a-f]{3,20}", fullmatch=True),
    st.from_regex(r"[a-z]{2,6} [a-z0-9 ./`-]{1,30}", fullmatch=True),
)


@settings(max_examples=150, deadline=None)
@given(
    body=st.text(max_size=200),
    texts=st.lists(identifier_texts, max_size=12, unique_by=str.lower),
    heading=st.booleans(),
)
def test_repair_property(body: str, texts: list[str], heading: bool) -> None:
    """Whatever the model wrote, after the repair nothing is missing, and a second repair changes nothing."""
    kinds = ["hash" if t.isalnum() and not t.isalpha() else "path" for t in texts]
    ranked = [ident(t, k) for t, k in zip(texts, kinds, strict=True)]
    text = body + (f"\n{EXACT_IDENTIFIERS}\n" if heading else "")
    repaired, report = ensure_identifiers(text, ranked)
    assert missing_identifiers(repaired, ranked) == []
    assert report.in_summary == report.total == len(ranked)
    assert ensure_identifiers(repaired, ranked)[0] == repaired
    if heading or report.missing_before:
        assert any(line.strip() == EXACT_IDENTIFIERS for line in repaired.splitlines())


# --- the real sessions --------------------------------------------------------------------------------------
def _real_dir() -> Path:
    configured = os.environ.get("COMPACTD_FIXTURES")
    base = Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "fixtures"
    return base / "real" if (base / "real").is_dir() else base


REAL = ["pi-before-compaction.v3.jsonl", "pi-large-session.v3.jsonl"]


@pytest.mark.parametrize("name", REAL)
def test_real_session_ranking_and_full_repair(name: str) -> None:
    path = _real_dir() / name
    if not path.is_file():
        pytest.skip(f"{path} not present")
    from daemon.transcript.context import build_context
    from daemon.transcript.reader import read_transcript

    messages = build_context(read_transcript(path)).messages
    ids = extract_identifiers(messages)
    ranked = rank_identifiers(ids)
    user_ids = [i for i in ids if i.from_user]
    assert {i.text for i in user_ids} <= {i.text for i in ranked}
    assert len(ranked) == max(64, len(user_ids))
    poor = "\n".join(REQUIRED_HEADINGS) + "\nThe session was about some files.\n"
    repaired, report = ensure_identifiers(poor, ranked)
    assert report.in_summary == report.total == len(ranked)
    assert missing_identifiers(repaired, ranked) == []
    assert ensure_identifiers(repaired, ranked)[0] == repaired
