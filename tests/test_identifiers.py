"""Identifiers: extracted from the whole span, ranked, checked and repaired into a summary, no model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from compactd.summarize.headings import EXACT_IDENTIFIERS, REQUIRED_HEADINGS
from compactd.summarize.identifiers import (
    COMMAND_MAX_CHARS,
    WRITTEN_MAX,
    Identifier,
    carried_identifiers,
    ensure_identifiers,
    extract_identifiers,
    identifier_line,
    identifier_score,
    missing_identifiers,
    rank_identifiers,
    scan_text,
    with_carried,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support import messages as msgs

Msg = dict[str, Any]


def user(text: str) -> Msg:
    return msgs.user(text, ts=1)


def assistant(text: str = "", *calls: Msg) -> Msg:
    return msgs.assistant(*([text] if text else []), *calls, ts=2)


def call(name: str, call_id: str = "c1", **arguments: Any) -> Msg:
    return msgs.call(call_id, name, arguments)


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
        ("the 4-part 1.2.3.4 reads as an IP", "1.2.3.4", "ip"),  # "version 1.2.3.4" is a version
    ],
)
def test_each_kind_is_extracted(text: str, expected: str, kind: str) -> None:
    assert (expected, kind) in found(text)


@pytest.mark.parametrize(
    "text",
    [
        "hello world, this is ordinary prose with no identifiers at all",
        "and/or input/output offset/limit title/heading text/plain",
        "1/2 of 3/4",  # fractions (12/08/2024 is a date: see test_new_kinds_are_extracted)
        "e.g. i.e. etc.",
        "deadbeef facade accede",  # hex letters only: words
        "release 1.2.3 and build 4.5.6",  # bare three-part numbers are not versions (v1.2.3 and 1.2.3-rc.1 are)
        "ratios 16:9 and 3:1, scores 10:1",  # not times (12:34:56 is: see test_new_kinds_are_extracted)
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


# --- extraction: the kinds the seeds name besides paths and hashes -----------------------------------------
@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        # ticket keys
        ("see OPS-27203 now", "OPS-27203", "ticket"),
        ("SEC-1393, JIRA-88.", "SEC-1393", "ticket"),
        ("(JIRA-88)", "JIRA-88", "ticket"),
        ("工单OPS-27203已关闭", "OPS-27203", "ticket"),
        ("branch feature/K8S-12-login", "K8S-12", "ticket"),
        ("patched CVE-2024-12345 today", "CVE-2024-12345", "ticket"),
        # issue and pull-request references
        ("fixes #1234", "#1234", "issue"),
        ("修复了#1234。", "#1234", "issue"),
        ("merged PR 567 today", "PR 567", "issue"),
        ("merged PR #567 today", "PR #567", "issue"),
        ("see PR#5", "PR#5", "issue"),
        ("GitLab !89 is open", "!89", "issue"),
        ("GitLab MR !9", "MR !9", "issue"),
        ("tracked as GH-12", "GH-12", "issue"),
        ("see owner/repo#12 too", "owner/repo#12", "issue"),
        ("closes issue #7", "issue #7", "issue"),
        ("the pull request 42 landed", "pull request 42", "issue"),
        # prefixed ids
        ("request req_8f3a9c2d71 failed", "req_8f3a9c2d71", "prefixed_id"),
        ("customer cus_NffrFeUfNV2Hib", "cus_NffrFeUfNV2Hib", "prefixed_id"),
        ("msg msg_01XFDUDYJgAACzvnptvVoYEL ok", "msg_01XFDUDYJgAACzvnptvVoYEL", "prefixed_id"),
        ("order ord_12345678", "ord_12345678", "prefixed_id"),
        ("instance i-0abcd1234ef567890 stopped", "i-0abcd1234ef567890", "prefixed_id"),
        ("group sg-0a1b2c3d", "sg-0a1b2c3d", "prefixed_id"),
        # hostnames without a scheme or port
        ("connect to db-3.internal now", "db-3.internal", "hostname"),
        ("call api.example.com.", "api.example.com", "hostname"),
        ("网关api.example.com。", "api.example.com", "hostname"),
        ("the cache-2.prod.example.net box", "cache-2.prod.example.net", "hostname"),
        ("deploy to api.myapp.dev", "api.myapp.dev", "hostname"),
        ("printer db-1.local", "db-1.local", "hostname"),
        # ports
        ("Postgres listens on port 5432", "port 5432", "port"),
        ("set PORT=8080", "port 8080", "port"),
        ("DB_PORT: 6543", "port 6543", "port"),
        ("数据库端口 5432。", "port 5432", "port"),
        ("数据库端口5432", "port 5432", "port"),
        ("admin on :9443)", "port 9443", "port"),
        ("listening on :8443.", "port 8443", "port"),
        # file names
        ("see 季度报告 report-2026.xlsx", "report-2026.xlsx", "path"),
        ("the model.safetensors and notes.docx", "notes.docx", "path"),
        # dates and times
        ("due 2026-11-30 at noon", "2026-11-30", "date"),
        ("at 2026-11-30T14:05:00Z", "2026-11-30T14:05:00Z", "date"),
        ("at 2025-12-08T23:22:54.411Z", "2025-12-08T23:22:54.411Z", "date"),
        ("at 2026-11-30T14:05+01:00", "2026-11-30T14:05+01:00", "date"),
        ("on 30 Nov 2026.", "30 Nov 2026", "date"),
        ("on Nov 30, 2026", "Nov 30, 2026", "date"),
        ("on November 30th 2026", "November 30th 2026", "date"),
        ("截止2026年11月30日之前", "2026年11月30日", "date"),
        ("截止11月30日", "11月30日", "date"),
        ("on 2026/11/30", "2026/11/30", "date"),
        ("on 12/08/2024", "12/08/2024", "date"),
        ("am 30.11.2026", "30.11.2026", "date"),
        ("meet at 14:05.", "14:05", "time"),
        ("at 12:34:56 sharp", "12:34:56", "time"),
        ("at 2:05pm", "2:05pm", "time"),
        ("下午14:05开会", "14:05", "time"),
        # versions written as versions
        ("upgrade to v2.4.1.", "v2.4.1", "version"),
        ("v1.2 is out", "v1.2", "version"),
        ("tag v3.0.0-beta.2", "v3.0.0-beta.2", "version"),
        ("npm i pkg@1.2.3", "pkg@1.2.3", "version"),
        ("npm i @scope/lib@4.5.6", "@scope/lib@4.5.6", "version"),
        ("pin react@18", "react@18", "version"),
        ("pip install requests==2.31.0", "requests==2.31.0", "version"),
        ("needs numpy>=1.26.4", "numpy>=1.26.4", "version"),
        ("pin it ==1.2.3", "==1.2.3", "version"),
        ('"react": "^18.2.0"', "^18.2.0", "version"),
        ("ship 1.2.3-rc.1 first", "1.2.3-rc.1", "version"),
        ("build 1.0.0+build.5", "1.0.0+build.5", "version"),
        ("Python version 3.12.1", "3.12.1", "version"),
        ("版本 1.4.2 已发布", "1.4.2", "version"),
        ("version 1.2.3.4", "1.2.3.4", "version"),
    ],
)
def test_new_kinds_are_extracted(text: str, expected: str, kind: str) -> None:
    assert (expected, kind) in found(text)


@pytest.mark.parametrize(
    ("text", "twin"),
    [
        # not tickets: standards, encodings, models, one-letter keys, lower case
        ("UTF-8 and SHA-256 and ISO-8601 and GPT-4 and COVID-19 and AES-256 and ISO-8859-1", "OPS-27203"),
        ("a B-52 and Q1-2026, lower-case ops-123", "JIRA-88"),
        # not issue references: a rank, colours, shell and code, "issue 3"
        ("the #1 priority, #2 next", "#12"),
        ("colours #808080 and #34354180", "#1234"),
        ("if (!x) return; a != 10; wow!!11", "!89"),
        ("issue 3 of the magazine, bug 2", "issue #3"),
        # not prefixed ids: snake-case names and short tails
        ("load_config2 test_function12345 my_var_name123 user_settings base64_encode", "req_8f3a9c2d71"),
        ("req_8f3a is short", "cus_NffrFeUfNV2Hib"),
        # not hostnames: code, file names, weak TLDs with two plain labels
        ("self.app logger.info os.path np.array console.log node.js main.rs deploy.sh", "api.example.com"),
        ("myservice.local foo.test e.g. i.e. U.S.", "db-3.internal"),
        # not ports
        ("import 1234 and report 2024 and support 100 and passport 12", "port 5432"),
        ("x[:10] and x[1:10] and {'a':1234}", ":9443"),
        # not dates or times
        ("2026-13-45 and 2026-02-32 and 99/99/2026 and 31.31.2026", "2026-11-30"),
        ("25:00 and 14:75 and 00:1A:2B:3C:4D:5E", "14:05"),
        ("in May we met 5 people; March 2026 and 2026", "30 Nov 2026"),
        # not versions
        ("v2 of the plan, v10 and V3", "v2.4.1"),
        ("the 1.2.3 release and 2.0", "1.2.3-rc.1"),
        ("a == 1, x >= 10", "requests==2.31.0"),
    ],
)
def test_new_kinds_have_no_false_positives(text: str, twin: str) -> None:
    """Nothing of the new kinds in ``text``, while its near twin, in the same text, is found."""
    new_kinds = {"ticket", "issue", "prefixed_id", "hostname", "port", "date", "time", "version"}
    assert {(t, k) for t, k in found(text) if k in new_kinds} == set()
    assert {k for _, k in found(f"{text} and {twin}")} & new_kinds


def test_new_kinds_keep_their_neighbours_whole() -> None:
    """A versioned package, a URL, a file with a date and a path with a ticket are each one identifier."""
    assert found("@scope/pkg@1.2.3") == {("@scope/pkg@1.2.3", "version")}
    assert found("https://example.com/OPS-27203/v2.4.1?at=2026-11-30") == {
        ("https://example.com/OPS-27203/v2.4.1?at=2026-11-30", "url")
    }
    assert found("backup-2026-11-30.tar.gz") == {("backup-2026-11-30.tar.gz", "path")}
    assert found("docs/OPS-27203.md") == {("docs/OPS-27203.md", "path")}
    assert found("db.internal:5432") == {("db.internal:5432", "host_port")}
    assert found("src/main.ts:14:05") == {("src/main.ts", "path")}
    assert found("ops@example.com") == {("ops@example.com", "email")}


def test_a_url_ends_at_cjk_punctuation() -> None:
    assert ("https://wiki.example.com/runbook", "url") in found("手册https://wiki.example.com/runbook。会话")


def test_secrets_are_never_extracted_as_prefixed_ids() -> None:
    """redact.py replaces the known key formats first; the prefixes of keys and tokens are refused on top, so a
    key redact.py does not know is still never guaranteed into a summary."""
    keys = [
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",  # redact.py: stripe_key
        "sk_" + "4eC39HqLyjWDarjtT1zd",  # no live/test: redact.py lets it through
        "rk_" + "9Xk2mQ7pL4vN8sT1",
        "pk_" + "test4eC39HqLyjWDarjtT1zd",
        "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "ghp_" + "a1B2c3D4e5F6g7H8i9J0",  # shorter than redact.py's rule
        "npm_" + "a1B2c3D4e5F6g7H8i9J0",
        "api_" + "a1B2c3D4e5F6g7H8",
        "mytoken_" + "a1B2c3D4e5F6g7H8",
        "sess_" + "a1B2c3D4e5F6g7H8",
    ]
    ids = extract_identifiers([user("keys: " + " ".join(keys) + " req_8f3a9c2d71"), result("\n".join(keys))])
    assert [(i.text, i.kind) for i in ids] == [("req_8f3a9c2d71", "prefixed_id")]  # the id, not the keys
    texts = " ".join(i.text for i in ids)
    for key in keys:
        assert key.split("_", 1)[1][:8] not in texts, key
    assert all("REDACTED" not in i.text for i in ids)


def test_port_is_kept_when_its_number_is_there() -> None:
    port = ident("port 5432", "port")
    assert missing_identifiers("Postgres on 5432.", [port]) == []
    assert missing_identifiers("PORT=5432", [port]) == []
    assert missing_identifiers("on 15432 and 54321", [port]) == [port]
    repaired, _ = ensure_identifiers(summary(), [port])
    assert "- `port 5432`" in repaired


def test_hostnames_match_whatever_their_case() -> None:
    host = ident("API.example.com", "hostname")
    assert missing_identifiers("calls api.example.com", [host]) == []


def test_assistant_text_is_written_tool_calls_are_used() -> None:
    messages = [
        assistant("Tracking OPS-27203", call("read", path="/srv/a.py")),
        result("see TOOL-999"),
    ]
    by_text = {i.text: i for i in extract_identifiers(messages)}
    assert by_text["OPS-27203"].written and by_text["OPS-27203"].agent_wrote
    assert by_text["/srv/a.py"].from_agent and not by_text["/srv/a.py"].written
    assert not by_text["TOOL-999"].from_agent and not by_text["TOOL-999"].written


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


def test_cap_never_drops_a_written_identifier() -> None:
    """Everything the user or the agent wrote is kept; the cap is cut from the rest, tool output first."""
    users = [ident(f"/u/{n}.ts", user=True, last=n) for n in range(100)]
    said = [
        Identifier(f"/a/{n}.ts", "path", False, 1, n, from_agent=True, agent_wrote=True) for n in range(40)
    ]
    used = [Identifier(f"/c/{n}.ts", "path", False, 1, n, from_agent=True) for n in range(3)]
    tool = [ident(f"/o/{n}.ts", last=200 + n) for n in range(50)]
    ranked = rank_identifiers([*tool, *used, *said, *users], cap=64)
    assert len(ranked) == 140 and all(i.written for i in ranked)
    small = rank_identifiers([*tool, *used, *said[:2]], cap=7)
    assert [i.text for i in small] == [
        "/a/1.ts",
        "/a/0.ts",
        "/c/2.ts",
        "/c/1.ts",
        "/c/0.ts",
        "/o/49.ts",
        "/o/48.ts",
    ]
    assert rank_identifiers(tool, cap=0) == []
    # The bound far above real use: the best-scoring written ones are kept.
    many = [ident(f"/u/{n}.ts", user=True, last=n) for n in range(WRITTEN_MAX + 10)]
    capped = rank_identifiers(many, cap=64)
    assert len(capped) == WRITTEN_MAX and capped[0].text == f"/u/{WRITTEN_MAX + 9}.ts"


def test_tool_output_does_not_crowd_out_what_the_agent_said() -> None:
    """The issue's case: a git log of 80 hashes in the newest tool result, the agent's words from earlier."""
    hashes = "\n".join(f"{n:03d}a{n:04x}bc1f chore {n}" for n in range(80))
    messages = [
        user("fix the deploy"),
        assistant("I will check /srv/deploy.sh, OPS-27203 and db-3.internal:5432"),
        *[m for n in range(6) for m in (user(f"step {n}"), assistant(f"done {n}"))],
        assistant("", call("bash", command="git log --oneline -80")),
        result(hashes),
    ]
    ranked = rank_identifiers(extract_identifiers(messages), cap=64)
    texts = [i.text for i in ranked]
    assert set(texts[:3]) == {"/srv/deploy.sh", "OPS-27203", "db-3.internal:5432"}
    assert texts[3] == "git log --oneline -80"  # the agent's own command, before tool output
    assert len(ranked) == 64


def test_ranking_is_deterministic() -> None:
    ids = [ident(f"/t/{n}.ts", last=3) for n in range(10)]
    assert rank_identifiers(ids) == rank_identifiers(list(reversed(ids)))
    assert [i.text for i in rank_identifiers(ids, cap=3)] == ["/t/0.ts", "/t/1.ts", "/t/2.ts"]


def test_a_previous_summarys_identifiers_are_carried_and_ranked_last_among_the_written() -> None:
    previous = (
        "## Decisions\n- used `/not/carried.ts` here\n"
        "## Exact identifiers\n- `OPS-27203`\n- `git log -1`\n- `port 5432`\n- `None`\n"
        "- the model wrote `the main file` here\n- `sk_live_4eC39HqLyjWDarjtT1zdp7dc`\n- `DEADBEE1`\n"
        "## Open TODOs\n- `/also/not.ts`\n"
    )
    carried = carried_identifiers(previous)
    assert [(i.text, i.kind) for i in carried] == [
        ("OPS-27203", "ticket"),
        ("git log -1", "command"),
        ("port 5432", "port"),
        ("DEADBEE1", "hash"),
    ]
    assert all(i.written and i.last_index == -1 for i in carried)
    span = extract_identifiers([user("still on deadbee1 and /srv/new.ts")])
    merged = with_carried(span, previous)
    assert [i.text for i in merged] == ["/srv/new.ts", "deadbee1", "OPS-27203", "git log -1", "port 5432"]
    ranked = rank_identifiers(merged)
    assert {i.text for i in ranked[:2]} == {"/srv/new.ts", "deadbee1"}  # the span's own come first
    assert carried_identifiers(None) == [] and carried_identifiers("no sections") == []


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


@pytest.mark.slow  # hypothesis-heavy or runs pi: left to the full run
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
    from compactd.core.context import build_context
    from compactd.reading import read_transcript

    messages = build_context(read_transcript(path)).messages
    ids = extract_identifiers(messages)
    ranked = rank_identifiers(ids)
    written = [i for i in ids if i.written]
    assert {i.text for i in written} <= {i.text for i in ranked}
    assert len(ranked) == max(64, len(written))
    poor = "\n".join(REQUIRED_HEADINGS) + "\nThe session was about some files.\n"
    repaired, report = ensure_identifiers(poor, ranked)
    assert report.in_summary == report.total == len(ranked)
    assert missing_identifiers(repaired, ranked) == []
    assert ensure_identifiers(repaired, ranked)[0] == repaired


# Fragments of every kind's shape, and the characters that sit next to them, so random joins form real
# identifiers, near misses and neighbours that a lookaround must see.
_SHAPES = [
    "https://api.example.com/v1?x=1",
    "a@b.io",
    "0196a3b2-0000-7000-8000-0000000000aa",
    "C:\\Users\\me\\a.txt",
    "db-3.internal:5432",
    "10.0.0.1",
    "::1",
    "fe80::1",
    "pkg@1.2.3",
    "requests==2.31.0",
    "v2.4.1",
    "^18.2.0",
    "owner/repo#12",
    "/etc/hosts",
    "src/core/",
    "main.ts:42",
    "api.example.com",
    "package.json",
    ".env",
    "2026-11-30T14:05:00Z",
    "1.2.3-rc.1",
    "14:05",
    "x[1:10]",
    "#1234",
    "!89",
    "PR#5",
    "OPS-27203",
    "CVE-2024-12345",
    "req_8f3a9c2d",
    "i-0abc1234",
    ":9443",
    "deadbeef12",
    "1234567",
    "PR 567",
    "port 5432",
    "30 Nov 2026",
    "Nov 3, 2026",
    "Sept",
    "2026",
    "'/tmp/a b/c.png'",
    "[",
    "]",
    "(",
    ")",
    "-",
    ".",
    "/",
    ":",
    "@",
    "_",
    "=",
    "#",
    "`",
    '"',
    "'",
    "word",
    "日本",
]
# Phrases and their near misses (a keyword inside a word, no digit, a digit too far), around the phrase gates.
_PHRASE_SHAPES = [
    "report 12",
    "import 5",
    "Ports 80",
    "PORT=8080",
    "DB_PORT: 5432",
    "端口 5432",
    "PRs 12",
    "MR !89",
    "pull request 12",
    "merge request !8",
    "issue #7",
    "bug\t#12",
    "Ticket #3",
    "debug #4",
    "Version: 2.0",
    "version 3.12.1",
    "version3.1",
    "版本号 1.4.2",
    "Nov 30th 2026",
    "1 December 2026",
    "May 2026",
    "Sept 3, 1999",
    "Mar. 4 2026",
    "\t2026",
    " 1999",
    "Dec",
    "30",
]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(_SHAPES + _PHRASE_SHAPES), st.sampled_from(["", "", " ", "\n", "\t", "  "])
        ),
        max_size=40,
    )
)
@settings(max_examples=300, deadline=None)
def test_word_by_word_scan_finds_what_one_pass_per_stage_finds(parts: list[tuple[str, str]]) -> None:
    """``scan_text`` runs the stages word by word with a memo; that must equal one pass of each stage over the
    candidate text (what it did before), findings and order alike, with a fresh memo or a shared one."""
    from compactd.summarize import identifiers as ids

    text = "".join(shape + gap for shape, gap in parts)
    expected = _reference_scan(text)
    memo: ids.WordMemo = {}
    assert list(scan_text(text)) == expected
    assert list(scan_text(text, memo)) == expected
    assert list(scan_text(text, memo)) == expected  # every word from the memo now


# --- the fast paths find exactly what the reference finds -----------------------------------------------------
def _reference_scan(text: str) -> list[tuple[str, str]]:
    """What ``scan_text`` found before its word-by-word fast path: quoted paths and phrases, then one pass of
    every stage (each gated by its needle) over the candidate text."""
    from compactd.summarize import identifiers as ids

    rest = text
    expected: list[tuple[str, str]] = []
    if " /" in rest or "'/" in rest or '"/' in rest or ":\\" in rest:
        quoted, rest = ids._quoted_paths(rest)
        expected += [(p, ids.PATH) for p in quoted]
    spans: list[tuple[int, int]] = []
    for pattern, needles, accept in ids._PHRASES:  # each phrase pattern gated by its needles alone
        if any(n in rest for n in needles):
            for m in pattern.finditer(rest):
                got = accept(m)
                if got is not None:
                    expected.append(got)
                    spans.append(m.span())
    if spans:
        rest = ids._masked(rest, _merged(spans))
    expected += [(ident, kind) for _, ident, kind in ids._scan_stages(ids.candidate_text(rest))]
    return expected


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


@given(st.lists(st.sampled_from(_SHAPES), min_size=1, max_size=6))
@settings(max_examples=400, deadline=None)
def test_a_words_stage_plan_finds_what_every_needle_gated_stage_finds(parts: list[str]) -> None:
    """``_scan_word`` runs only the stages a word's characters allow; the reference tests each stage's needle."""
    from compactd.summarize import identifiers as ids

    word = "".join(parts).replace(" ", "").replace("\n", "").replace("\t", "")
    assert ids._scan_word(word) == tuple(ids._scan_stages(word))


@given(st.lists(st.lists(st.sampled_from(_SHAPES), min_size=1, max_size=5).map("".join), max_size=30))
@settings(max_examples=300, deadline=None)
def test_words_scanned_together_find_what_each_finds_alone(words: list[str]) -> None:
    """``_scan_words`` runs each stage once over the new words joined by spaces; a word's findings must be
    those of the needle-gated stages over that word alone (``_scan_stages``), in the same order."""
    from compactd.summarize import identifiers as ids

    alone = [w.replace(" ", "").replace("\n", "").replace("\t", "") for w in words]
    alone = [w for w in alone if w]
    assert ids._scan_words(alone) == [tuple(ids._scan_stages(w)) for w in alone]


@given(
    st.lists(
        st.tuples(
            st.sampled_from([*_SHAPES, "é", "日本", "a1", "\u3000", "\x0b"]),
            st.sampled_from(["", " ", "\n", "\t", "  ", "\r\n", "\u3000"]),
        ),
        max_size=20,
    )
)
@settings(max_examples=300, deadline=None)
def test_candidate_words_found_after_whitespace_are_the_lookbehind_patterns(
    parts: list[tuple[str, str]],
) -> None:
    """``_candidates`` starts its pattern at a whitespace character (and at the text's start), not at every
    position behind a lookbehind: the words are the same, from any slice start just after a whitespace."""
    from compactd.summarize import identifiers as ids

    text = "".join(shape + gap for shape, gap in parts)
    assert ids._candidates(text, 0, len(text)) == ids._CANDIDATE_WORD.findall(text)
    for start in (i + 1 for i, c in enumerate(text) if c.isspace()):
        assert ids._candidates(text, start, len(text)) == ids._CANDIDATE_WORD.findall(text, start)


def test_a_text_longer_than_a_slice_is_scanned_as_one() -> None:
    """Texts past ``_SPLIT_SLICE_CHARS`` are cut into slices at whitespace; nothing is lost or split there."""
    from compactd.summarize import identifiers as ids

    pieces = [shape + gap for shape in _SHAPES for gap in (" ", "\n", "\t")]
    text = "".join(pieces * (ids._SPLIT_SLICE_CHARS // len("".join(pieces)) * 2 + 2))
    assert len(text) > 2 * ids._SPLIT_SLICE_CHARS
    assert list(scan_text(text)) == _reference_scan(text)


_SECRET_PARTS = [
    "api_key=",
    "sk-",
    "abcdef1234567890ABCDEF12",
    "password: ",
    "hunter2hunter2",
    "token=x",
    "\n",
    " ",
]


@given(
    st.lists(
        st.lists(st.sampled_from(_SHAPES + _SECRET_PARTS), max_size=6).map("".join), min_size=0, max_size=3
    ),
    st.sampled_from(["user", "assistant", "toolResult", "custom", "compactionSummary", "bashExecution"]),
)
@example(["the api_key=", "abcdef1234567890ABCDEF12 and more"], "user")  # a secret only once joined
@settings(max_examples=300, deadline=None)
def test_span_text_reuses_a_redacted_string_only_where_it_is_the_whole_text(
    blocks: list[str], role: str
) -> None:
    """``SpanText`` takes a one-block message's redacted block as its text; a join (whose blocks may form a
    secret only together) is redacted again. Either way the text is the source's joined text, redacted."""
    from compactd.core.messages import text_of
    from compactd.summarize.redact import SpanText, redact_secrets, redact_value

    message: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": b} for b in blocks]}
    if role == "compactionSummary":
        message = {"role": role, "summary": "\n".join(blocks)}
    elif role == "bashExecution":
        message = {"role": role, "command": blocks[0] if blocks else "", "output": "\n".join(blocks[1:])}
    redacted = redact_value(message)
    texts = SpanText.of([message], [redacted])
    assert texts(redacted) == redact_secrets(text_of(message))


def _reference_scan_into(out: list[Any], text: str, flags: int, memo: Any) -> None:
    """``_scan_into`` as it was: one finding per occurrence, from the reference scan."""
    from compactd.summarize import identifiers as ids

    for found_text, kind in _reference_scan(text):
        if found_text and len(found_text) <= ids.IDENTIFIER_MAX_CHARS:
            out += (found_text, ids._KIND_CODE[kind] | flags, 1)


def _reference_extract(
    messages: list[Msg], read: list[Msg], monkeypatch: pytest.MonkeyPatch
) -> list[Identifier]:
    """Today's extractor before issue 22's fast paths: every text redacted again from the message as read
    (``read[i]`` is ``messages[i]`` before ``redact_value``), the reference scan, one add per occurrence."""
    from compactd.core.messages import text_of
    from compactd.summarize import identifiers as ids
    from compactd.summarize.redact import SpanText, redact_secrets

    source = {id(h): r for r, h in zip(read, messages, strict=True)}

    class Reference(SpanText):
        def __call__(self, message: Any) -> str:
            return redact_secrets(text_of(source[id(message)]))

    with monkeypatch.context() as patch:
        patch.setattr(ids, "_scan_into", _reference_scan_into)
        return extract_identifiers(messages, Reference())


def messages_of(specs: list[tuple[str, str, str]]) -> list[Msg]:
    """A message of each role from two generated texts (a tool call's command and path, two text blocks)."""
    read: list[Msg] = []
    for role, first, second in specs:
        if role == "bashExecution":
            read.append({"role": role, "command": first, "output": second})
        elif role == "assistant":
            read.append(assistant(first, call("bash", command=second, path=first.strip())))
        elif role == "user":
            read.append(user(first + second))
        elif role == "toolResult":
            read.append(result(first + "\n" + second))
        else:
            read.append(
                {"role": role, "content": [{"type": "text", "text": first}, {"type": "text", "text": second}]}
            )
    return read


_TEXTS = st.lists(
    st.tuples(
        st.sampled_from(_SHAPES + _PHRASE_SHAPES + _SECRET_PARTS),
        st.sampled_from(["", " ", "\n", "\t", "  "]),
    ),
    max_size=12,
).map(lambda parts: "".join(a + b for a, b in parts))


# Messages of every role, each from two generated texts (see ``messages_of``).
MESSAGE_SPECS = st.lists(
    st.tuples(
        st.sampled_from(["user", "assistant", "toolResult", "custom", "bashExecution"]), _TEXTS, _TEXTS
    ),
    min_size=1,
    max_size=8,
)


@given(MESSAGE_SPECS)
@settings(max_examples=200, deadline=None)
def test_records_equal_the_reference_extractor_on_generated_messages(
    specs: list[tuple[str, str, str]],
) -> None:
    """Every field of every record (text, kind, count, first and last index, flags) is what the reference
    extractor gives, on messages of every role whose texts repeat shapes across and within messages."""
    from compactd.summarize.redact import SpanText, redact_value

    read = messages_of(specs)
    handed_on = [redact_value(m) for m in read]
    fast = extract_identifiers(handed_on, SpanText.of(read, handed_on))
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert fast == _reference_extract(handed_on, read, monkeypatch)


def _all_real() -> list[str]:
    return sorted(p.name for p in _real_dir().glob("*.jsonl")) if _real_dir().is_dir() else []


@pytest.mark.parametrize("name", _all_real() or ["(no real fixtures)"])
def test_real_sessions_records_equal_the_reference_extractor(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the real sessions the fast extraction gives the reference's records, field for field: the stage plans,
    the candidate-word scan and ``SpanText``'s reuse of redacted strings change the time, never a record."""
    path = _real_dir() / name
    if not path.is_file():
        pytest.skip(f"{path} not present")
    from compactd.core.context import build_context
    from compactd.core.messages import llm_visible
    from compactd.reading import read_transcript
    from compactd.summarize.redact import SpanText, redact_value

    read = list(llm_visible(build_context(read_transcript(path)).messages))
    handed_on = [redact_value(m) for m in read]
    fast = extract_identifiers(handed_on, SpanText.of(read, handed_on))
    assert fast  # the real sessions are full of identifiers
    assert _reference_extract(handed_on, read, monkeypatch) == fast
