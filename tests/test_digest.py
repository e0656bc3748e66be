"""The model-free digest (and the file lists it shares with pi): five headings, the last ask, capped."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from compactd.commit.commit import CommitMode, CompactionEntries, commit
from compactd.core.messages import text_of
from compactd.core.reader import Transcript
from compactd.defaults import KEEP_RECENT_TOKENS, KEEP_RECENT_TURNS
from compactd.reading import read_transcript
from compactd.sources.files.job import snapshot_size
from compactd.summarize.augment import RECENT_TURNS_HEADING
from compactd.summarize.digest import (
    DIGEST_MAX_CHARS,
    FAILURES_HEADING,
    FILES_HEADING,
    LAST_ASK_MAX_CHARS,
    MAX_FAILURES,
    build_digest,
    tool_failures,
)
from compactd.summarize.engine import CompactionEngine, EngineResult, EngineSettings
from compactd.summarize.fileops import FileOps, file_operations
from compactd.summarize.headings import (
    CONSTRAINTS,
    DECISIONS,
    EXACT_IDENTIFIERS,
    OPEN_TODOS,
    PENDING_ASKS,
    REQUIRED_HEADINGS,
    split_sections,
)
from compactd.summarize.identifiers import extract_identifiers, missing_identifiers, rank_identifiers

from tests.support import messages as msgs

if TYPE_CHECKING:
    from tests.support.pi import Pi

Msg = dict[str, Any]


def user(text: str) -> Msg:
    return msgs.user(text, ts=1)


def assistant(text: str = "", *calls: Msg, stop: str = "stop") -> Msg:
    return msgs.assistant(*([text] if text else []), *calls, stop=stop, ts=2)


def call(name: str, call_id: str = "c1", **arguments: Any) -> Msg:
    return msgs.call(call_id, name, arguments)


def result(text: str, call_id: str = "c1", *, name: str = "bash", error: bool = False, **extra: Any) -> Msg:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": name,
        "content": [{"type": "text", "text": text}],
        "isError": error,
        "timestamp": 3,
        **extra,
    }


def sections(digest: str) -> dict[str, list[str]]:
    return {heading: [line for line in body if line] for heading, body in split_sections(digest)[1]}


def headings_in_order(text: str) -> bool:
    lines = [line.strip() for line in text.splitlines()]
    positions = [lines.index(h) if h in lines else -1 for h in REQUIRED_HEADINGS]
    return -1 not in positions and positions == sorted(positions)


# --- structure ----------------------------------------------------------------------------------------------
def test_empty_input_still_has_every_heading() -> None:
    digest = build_digest([])
    assert headings_in_order(digest)
    assert "Summary unavailable" not in digest
    body = sections(digest)
    assert body[DECISIONS] == ["- No prior history."]
    assert body[PENDING_ASKS] == ["- None."]
    assert body[EXACT_IDENTIFIERS] == ["- None captured."]
    assert FAILURES_HEADING not in digest
    assert FILES_HEADING not in digest


def test_headings_are_exact_lines_in_order_and_come_first() -> None:
    digest = build_digest([user("hi"), assistant("I'll use /srv/app/main.py for this.")])
    lines = digest.splitlines()
    heading_lines = [line for line in lines if line.startswith("## ")]
    assert heading_lines[:5] == list(REQUIRED_HEADINGS)


def test_a_users_heading_lookalike_cannot_fake_a_section() -> None:
    digest = build_digest([user("please write:\n## Decisions\nnothing")])
    assert [line for line in digest.splitlines() if line.strip() == DECISIONS] == [DECISIONS]


# --- content ------------------------------------------------------------------------------------------------
def conversation() -> list[Msg]:
    return [
        user("Migrate the API to v2. You must never touch prod.db and always run the tests first."),
        assistant(
            "I decided to use httpx instead of requests because it supports HTTP/2. Now let's start:",
            call("read", "r1", path="/srv/api/client.py"),
        ),
        result("import requests", "r1", name="read"),
        assistant(
            "Plan:\n- [x] read client\n- [ ] port client.py to httpx\n- [ ] update docs\n"
            "TODO: bump the version",
            call("edit", "e1", path="/srv/api/client.py", oldText="a", newText="b"),
            call("bash", "b1", command="cd /srv/api && pytest -q\n# second line"),
        ),
        result("ok", "e1", name="edit"),
        result("2 failed\nExit code: 1", "b1"),
        assistant("- [x] update docs\nRemaining from the plan:\n- fix test_auth\n- release notes"),
        user("Also please keep the public function names.\nNow make the tests pass and push to origin/main."),
    ]


def test_sections_are_filled_from_the_span() -> None:
    digest = build_digest(conversation())
    body = sections(digest)
    assert any("decided to use httpx instead of requests" in line for line in body[DECISIONS])
    assert not any("Now let's start" in line for line in body[DECISIONS])
    todos = body[OPEN_TODOS]
    assert "- [ ] port client.py to httpx" in todos
    assert "- [ ] update docs" not in todos  # checked off later
    assert "- TODO: bump the version" in todos
    assert "- fix test_auth" in todos and "- release notes" in todos
    # Issue 10: the latest ask is said once, under the pending asks with its state, not again as a TODO.
    assert not any("Also please keep" in line for line in todos)
    # Issue 10: rule clauses only; "please keep ..." is an ask (quoted verbatim below), not a rule.
    assert body[CONSTRAINTS] == ["- You must never touch prod.db and always run the tests first."]
    # Issue 10: the first ask was answered (its turn ended in a final reply), so it is not pending.
    assert body[PENDING_ASKS] == [
        "- Latest ask (verbatim; no reply):",
        "  > Also please keep the public function names.",
        "  > Now make the tests pass and push to origin/main.",
    ]
    assert "- `/srv/api/client.py`" in body[EXACT_IDENTIFIERS]
    assert "- `cd /srv/api && pytest -q`" in body[EXACT_IDENTIFIERS]
    failures = body[FAILURES_HEADING]
    assert failures == ["- bash `cd /srv/api && pytest -q` (exit 1): 2 failed Exit code: 1"]
    assert body[FILES_HEADING] == ["- Modified (1): `/srv/api/client.py`"]


def test_digest_keeps_the_last_user_ask_verbatim() -> None:
    ask = (
        "Rename `getUser` to `fetchUser` in src/api.ts,\n\nthen run `npm test`. 中文也要保留：不要删除注释。"
    )
    digest = build_digest(
        [user("first"), assistant("done"), user(ask), assistant("", call("bash", command="ls"))]
    )
    quoted = [line[4:] if line.startswith("  > ") else "" for line in sections(digest)[PENDING_ASKS]]
    assert "\n".join(quoted).strip() == ask
    # Issue 10: "first" was answered ("done"), so it is not pending; the latest ask's turn has no final reply.
    assert "- first" not in sections(digest)[PENDING_ASKS]
    assert "- Latest ask (verbatim; no final reply):" in sections(digest)[PENDING_ASKS]


def test_very_long_last_ask_is_capped_with_a_note() -> None:
    ask = "word " * 1000
    digest = build_digest([user(ask)])
    assert f"[{len(ask.strip()) - LAST_ASK_MAX_CHARS} more characters]" in digest
    assert len(digest) <= DIGEST_MAX_CHARS


def test_answered_question_back_to_the_user_is_an_open_todo() -> None:
    digest = build_digest(
        [user("deploy it"), assistant("Built the image. Should I push it to the registry?")]
    )
    assert (
        "- Waiting for the user's answer to: Should I push it to the registry?"
        in sections(digest)[OPEN_TODOS]
    )


def test_chinese_rules_and_decisions() -> None:
    digest = build_digest(
        [user("必须保留所有文件路径。请不要修改 AGENTS.md。"), assistant("我决定改用 httpx 库。")]
    )
    body = sections(digest)
    assert "- 必须保留所有文件路径。" in body[CONSTRAINTS]
    assert "- 请不要修改 AGENTS.md。" in body[CONSTRAINTS]
    assert any("改用 httpx" in line for line in body[DECISIONS])


def test_secrets_do_not_reach_the_digest() -> None:
    key = "sk-" + "proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv"
    digest = build_digest([user(f"use {key} and never log it"), assistant(f"I'll store {key} in the vault.")])
    assert key not in digest
    assert "[REDACTED:openai_key]" in digest


# --- failures -----------------------------------------------------------------------------------------------
def test_tool_failures_with_exit_codes() -> None:
    messages = [
        assistant("", call("bash", "a", command="make"), call("edit", "b", path="x.py")),
        result("error: missing\nCommand exited with code 2", "a"),
        result("Could not find the exact text", "b", name="edit", error=True),
        result("still fine, exit code 0", "a"),  # duplicate id and a zero code: ignored
        {"role": "bashExecution", "command": "npm test", "output": "1 failing", "exitCode": 1},
        {"role": "bashExecution", "command": "true", "output": "", "exitCode": 0},
    ]
    assert [(f.tool, f.exit_code, f.command) for f in tool_failures(messages)] == [
        ("bash", 2, "make"),
        ("edit", None, None),
        ("user bash", 1, "npm test"),
    ]
    lines = sections(build_digest(messages))[FAILURES_HEADING]
    assert lines[1] == "- edit (error): Could not find the exact text"


def test_at_most_eight_failures_newest_kept() -> None:
    messages: list[Msg] = []
    for n in range(12):
        messages += [
            assistant("", call("bash", f"c{n}", command=f"step{n}")),
            result(f"exit code {n + 1}", f"c{n}"),
        ]
    lines = sections(build_digest(messages))[FAILURES_HEADING]
    assert lines[0] == f"- ...and {12 - MAX_FAILURES} earlier failures"
    assert lines[-1].startswith("- bash `step11` (exit 12)")
    assert len(lines) == MAX_FAILURES + 1


def test_extra_sections_can_be_left_to_the_augmentation() -> None:
    digest = build_digest(conversation(), include_failures=False, include_files=False)
    assert FAILURES_HEADING not in digest
    assert FILES_HEADING not in digest


# --- previous summary ---------------------------------------------------------------------------------------
PREVIOUS = """## Decisions
- Use PostgreSQL 16
## Open TODOs
- [ ] write the migration
## Constraints/Rules
- Never force-push
## Pending user asks
- None.
## Exact identifiers
- `db.internal:5432`

<read-files>
/old/read.py
</read-files>
"""


def test_previous_summary_sections_are_carried_and_deduplicated() -> None:
    digest = build_digest(
        [user("Never force-push. Now add an index."), assistant("Added.")], previous_summary=PREVIOUS
    )
    body = sections(digest)
    assert body[DECISIONS][0] == "- Use PostgreSQL 16"
    assert body[OPEN_TODOS][0] == "- [ ] write the migration"
    assert [line for line in body[CONSTRAINTS] if "force-push" in line.lower()] == ["- Never force-push"]
    assert "- `db.internal:5432`" in body[EXACT_IDENTIFIERS]
    assert "/old/read.py" not in digest  # file lists come from details, not from old text


def test_pi_style_previous_summary_is_mapped_onto_our_headings() -> None:
    pi_summary = (
        "## Goal\nShip v2\n## Constraints & Preferences\n- Tabs, not spaces\n## Progress\n### Done\n"
        "- [x] parser\n### In Progress\n- [ ] lexer\n## Key Decisions\n- **Rust**: speed\n"
        "## Next Steps\n1. benchmarks\n"
        "## Critical Context\n- CI is flaky\n"
    )
    body = sections(build_digest([], previous_summary=pi_summary))
    assert body[PENDING_ASKS] == ["- Ship v2"]
    assert body[CONSTRAINTS] == ["- Tabs, not spaces"]
    assert "- [ ] lexer" in body[DECISIONS]  # under "## Progress": kept, as history
    assert "- **Rust**: speed" in body[DECISIONS]
    assert "- CI is flaky" in body[DECISIONS]
    assert body[OPEN_TODOS] == ["- benchmarks"]


def test_redigesting_a_digest_keeps_its_content() -> None:
    first = build_digest(conversation())
    second = build_digest([], previous_summary=first)
    assert headings_in_order(second)
    first_body, second_body = sections(first), sections(second)
    for heading in (DECISIONS, CONSTRAINTS, EXACT_IDENTIFIERS):
        assert set(first_body[heading]) <= set(second_body[heading]), heading
    assert "Mechanical digest" not in "\n".join(second_body[DECISIONS])


# --- limits and determinism ---------------------------------------------------------------------------------
def test_huge_span_stays_under_the_cap() -> None:
    messages: list[Msg] = []
    for n in range(400):
        messages += [
            user(f"Please always check /data/run{n}/input{n}.csv and never skip step {n}. " * 5),
            assistant(
                f"I'll use worker-{n} instead of the pool. TODO: verify /tmp/w{n}.log",
                call("read", f"r{n}", path=f"/srv/f{n}.py"),
            ),
            result(f"boom {n}\nexit code 3", f"r{n}", error=True),
        ]
    digest = build_digest(messages)
    assert len(digest) <= DIGEST_MAX_CHARS
    assert headings_in_order(digest)
    assert "  > Please always check /data/run399/input399.csv" in digest


def test_deterministic() -> None:
    assert build_digest(conversation()) == build_digest(conversation())
    assert build_digest(conversation(), previous_summary=PREVIOUS) == build_digest(
        conversation(), previous_summary=PREVIOUS
    )


def test_given_identifiers_are_used_in_rank_order() -> None:
    ranked = rank_identifiers(extract_identifiers(conversation()), cap=2)
    body = sections(build_digest(conversation(), identifiers=ranked))
    assert body[EXACT_IDENTIFIERS] == [f"- `{i.text}`" for i in ranked]


# --- file operations ----------------------------------------------------------------------------------------
def test_file_operations_like_pi() -> None:
    messages = [
        assistant(
            "",
            call("read", "1", path="/b.py"),
            call("read", "2", path="/a.py"),
            call("edit", "3", path="/a.py"),
            call("write", "4", file_path="/c.py"),
            call("bash", "5", command="cat /d.py"),
        ),
        user("read /e.py"),
    ]
    assert file_operations(messages) == FileOps(read=["/b.py"], modified=["/a.py", "/c.py"])


def test_file_operations_cumulative_unless_from_a_hook() -> None:
    messages = [assistant("", call("edit", "1", path="/old-read.py"), call("read", "2", path="/new.py"))]
    details = {"readFiles": ["/old-read.py", "/z.py"], "modifiedFiles": ["/m.py"]}
    entry = {"type": "compaction", "details": details, "fromHook": False}
    expected = FileOps(read=["/new.py", "/z.py"], modified=["/m.py", "/old-read.py"])
    assert file_operations(messages, details) == expected
    assert file_operations(messages, entry) == expected
    assert file_operations(messages, {**entry, "fromHook": True}) == FileOps(
        read=["/new.py"], modified=["/old-read.py"]
    )
    assert file_operations(messages, {"readFiles": "junk", "modifiedFiles": [1, None]}) == FileOps(
        read=["/new.py"], modified=["/old-read.py"]
    )
    assert expected.details() == {
        "readFiles": ["/new.py", "/z.py"],
        "modifiedFiles": ["/m.py", "/old-read.py"],
    }


def test_file_order_is_javascripts() -> None:
    """pi sorts in JavaScript's default order (UTF-16 code units): an astral character sorts before U+FFFD."""
    messages = [
        assistant("", call("read", "1", path="/\ufffd.txt"), call("read", "2", path="/\U0001f600.txt"))
    ]
    assert file_operations(messages).read == ["/\U0001f600.txt", "/\ufffd.txt"]


# --- the real sessions --------------------------------------------------------------------------------------
def _real_dir() -> Path:
    configured = os.environ.get("COMPACTD_FIXTURES")
    base = Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "fixtures"
    return base / "real" if (base / "real").is_dir() else base


@pytest.mark.parametrize(
    "name",
    [pytest.param("pi-before-compaction.v3.jsonl", marks=pytest.mark.slow), "pi-large-session.v3.jsonl"],
)
def test_real_sessions(name: str) -> None:
    path = _real_dir() / name
    if not path.is_file():
        pytest.skip(f"{path} not present")
    from compactd.core.context import build_context

    messages = build_context(read_transcript(path)).messages
    digest = build_digest(messages)
    assert headings_in_order(digest)
    assert len(digest) <= DIGEST_MAX_CHARS
    last_ask = next(m for m in reversed(messages) if m["role"] == "user")
    ask_text = "".join(b["text"] for b in last_ask["content"] if b["type"] == "text").strip()
    assert f"  > {ask_text.splitlines()[0]}" in digest
    # The digest alone keeps every ranked identifier on these sessions (the figure reported to the lead).
    ranked = rank_identifiers(extract_identifiers(messages))
    assert missing_identifiers(digest, ranked) == []
    assert build_digest(messages) == digest
    # As the engine calls it after an earlier compaction: the old summary given separately, which competes
    # with the identifiers for room (the identifiers are budgeted first).
    if messages[0]["role"] == "compactionSummary":
        span = messages[1:]
        ranked = rank_identifiers(extract_identifiers(span))
        again = build_digest(span, previous_summary=messages[0]["summary"], identifiers=ranked)
        assert headings_in_order(again)
        assert len(again) <= DIGEST_MAX_CHARS
        assert missing_identifiers(again, ranked) == []
        assert "Refactor `coding-agent`" in again  # carried from the earlier summary


# --- issue 10: the digest says what it knows, once ----------------------------------------------------------
def test_unanswered_asks_are_pending_with_how_their_turn_ended() -> None:
    errored = {**assistant("", stop="error"), "errorMessage": "529 overloaded_error"}
    digest = build_digest(
        [
            user("answered one"),
            assistant("", call("read", "r1", path="/a.py")),
            result("text", "r1", name="read"),
            assistant("Here it is."),
            user("tool ran, no answer"),
            assistant("", call("bash", "b1", command="make")),
            result("ok", "b1"),
            user("aborted one"),
            assistant("Start", stop="aborted"),
            user("cut off one"),
            assistant("Half an answ", stop="length"),
            user("the latest, errored"),
            errored,
        ]
    )
    assert sections(digest)[PENDING_ASKS] == [
        "- tool ran, no answer (no final reply)",
        "- aborted one (aborted)",
        "- cut off one (the reply was cut off at its length limit)",
        "- Latest ask (verbatim; the turn ended in an error: 529 overloaded_error):",
        "  > the latest, errored",
    ]


def test_a_carried_digest_keeps_its_unanswered_asks_and_drops_its_answered_latest_one() -> None:
    first = build_digest(
        [user("never answered"), assistant("", stop="error"), user("answered latest"), assistant("Done.")]
    )
    second = build_digest([user("new ask"), assistant("Sure.")], previous_summary=first)
    assert sections(second)[PENDING_ASKS] == [
        "- never answered (the turn ended in an error)",
        "- Latest ask (verbatim; answered):",
        "  > new ask",
    ]
    third = build_digest([user("newer ask")], previous_summary=first)
    assert "- never answered (the turn ended in an error)" in sections(third)[PENDING_ASKS]
    assert not any("answered latest" in line for line in sections(third)[PENDING_ASKS])


def test_many_unanswered_asks_are_counted_when_they_do_not_fit() -> None:
    messages: list[Msg] = []
    for n in range(40):
        messages += [user(f"ask number {n} " + "x" * 150), assistant("", stop="error")]
    messages += [user("the last one"), assistant("Done.")]
    pending = sections(build_digest(messages))[PENDING_ASKS]
    assert pending[0].startswith("- ...and ") and pending[0].endswith(" earlier unanswered asks")
    dropped = int(pending[0].split()[2])
    assert dropped + sum(1 for line in pending if line.startswith("- ask number")) == 40
    assert any(line.startswith("- ask number 39 ") for line in pending)  # the newest are kept


def test_rules_are_rule_clauses_deduplicated() -> None:
    body = sections(
        build_digest(
            [
                user("Fix the login bug and never touch prod.db. Please write a test for it."),
                user("Rotate the keys; do NOT restart the gateway. Only the staging ones, please."),
                user("When deploying, always use blue-green, and don't drop tables, views or indexes."),
                user("Also,  NEVER   touch PROD.DB; run make test afterwards."),
                user("i don't think that works, and I never said so."),
                user("部署时必须先备份，然后修复问题。请更新文档并且不要删除注释。"),
            ]
        )
    )
    assert body[CONSTRAINTS] == [
        "- never touch prod.db.",
        "- do NOT restart the gateway.",
        "- When deploying, always use blue-green, and don't drop tables, views or indexes.",
        "- 部署时必须先备份，然后修复问题。",
        "- 不要删除注释。",
    ]


def test_decisions_are_decision_sentences_not_plans() -> None:
    body = sections(
        build_digest(
            [
                user("go"),
                assistant("I'll read src/app.py first.", call("read", "r1", path="src/app.py")),
                result("code", "r1", name="read"),
                assistant(
                    "We'll go with httpx for the client. I will run the tests next. Let's use tabs here. "
                    "The root cause is a race. 我决定改用 httpx 库。我会先读一下配置文件。"
                ),
            ]
        )
    )
    assert body[DECISIONS] == [
        "- We'll go with httpx for the client.",
        "- Let's use tabs here.",
        "- 我决定改用 httpx 库。",
    ]


# Sessions written by pi's own SessionManager: one turn of each ending, a rule restated, plans and decisions.
ASKS_BASE_MS = 1_790_000_000_000


def _pi_user(text: str, ts: int) -> Msg:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


def _pi_assistant(text: str, ts: int, *calls: Msg, stop: str | None = None, **extra: Any) -> Msg:
    return {
        **assistant(text, *calls, stop=stop or ("toolUse" if calls else "stop")),
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": {
            "input": 900,
            "output": 50,
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": 950,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
        },
        "timestamp": ts,
        **extra,
    }


def asks_session_ops() -> list[Msg]:
    t = ASKS_BASE_MS
    messages = [
        _pi_user("Fix the login bug in src/auth.py and never touch prod.db.", t),
        _pi_assistant("I'll read src/auth.py first.", t + 1, call("read", "r1", path="src/auth.py")),
        {**result("def login(): ...", "r1", name="read"), "timestamp": t + 2},
        _pi_assistant("Decided to use bcrypt for the hashes; the fix is in place.", t + 3),
        _pi_user("Rotate the staging keys in vault.internal; do NOT restart the gateway.", t + 10),
        _pi_assistant("", t + 11, stop="error", errorMessage="529 overloaded_error"),
        _pi_user("Update CHANGELOG.md for v2.4.1", t + 20),
        _pi_assistant("Starting on the changelog", t + 21, stop="aborted"),
        _pi_user("Benchmark the parser with make bench", t + 30),
        _pi_assistant("", t + 31, call("bash", "b1", command="make bench")),
        {**result("parser: 41 ms", "b1"), "timestamp": t + 32},
        _pi_user("Also,  NEVER   touch PROD.DB; always run make test.", t + 40),
        _pi_assistant("I'll read the logs first. We'll go with the argon2 defaults instead.", t + 41),
        _pi_user("Write the release notes.", t + 50),
        _pi_assistant("Release notes written.", t + 51),
        _pi_user("What is left?", t + 60),  # the kept turn
        _pi_assistant("Nothing is left.", t + 61),
    ]
    return [{"op": "appendMessage", "message": m} for m in messages]


def _engine_result(transcript: Transcript, **kw: Any) -> EngineResult:

    engine = CompactionEngine(EngineSettings(keep_recent_turns=1, keep_recent_tokens=20))
    result = anyio.run(lambda: engine.compact(transcript, **kw))
    assert result is not None
    return result


def _commit_and_load(pi: Pi, path: Path, result: EngineResult, tmp_path: Path, mode: CommitMode) -> list[Msg]:
    """Commit the engine's result to ``path`` and return pi's view of the committed session."""
    transcript = read_transcript(path)
    entries = CompactionEntries(
        compaction=result.compaction,
        post_message=result.post_message,
        snapshot_size=snapshot_size(transcript),
        snapshot_leaf_id=transcript.leaf_id or "",
    )
    done = commit(path, entries, mode=mode, state_dir=tmp_path / f"state-{mode}", idle_seconds=0)
    assert done.committed, done.reason
    messages: list[Msg] = pi.load(path)["messages"]
    return messages


@pytest.mark.slow  # hypothesis-heavy or runs pi: left to the full run
def test_a_pi_session_digest_says_what_it_knows_once(pi: Pi, tmp_path: Path) -> None:
    path = Path(pi.write(tmp_path / "s", asks_session_ops())["path"])
    result = _engine_result(read_transcript(path))
    view = _commit_and_load(pi, path, result, tmp_path, "rotate")
    assert view[0]["role"] == "compactionSummary" and view[0]["summary"] == result.summary
    body = sections(view[0]["summary"])
    assert body[PENDING_ASKS] == [
        "- Rotate the staging keys in vault.internal; do NOT restart the gateway. "
        "(the turn ended in an error: 529 overloaded_error)",
        "- Update CHANGELOG.md for v2.4.1 (aborted)",
        "- Benchmark the parser with make bench (no final reply)",
        "- Latest ask (verbatim; answered):",
        "  > Write the release notes.",
    ]
    assert body[CONSTRAINTS] == [
        "- never touch prod.db.",
        "- do NOT restart the gateway.",
        "- always run make test.",
    ]
    assert body[DECISIONS] == [
        "- Decided to use bcrypt for the hashes; the fix is in place.",
        "- We'll go with the argon2 defaults instead.",
    ]
    assert not any("Release notes written" in line for line in body[DECISIONS])  # no "latest note" copy
    # The clipped turns are named for what they are: the last summarized ones, not the kept one.
    assert RECENT_TURNS_HEADING == "## Last summarized turns (clipped)" and RECENT_TURNS_HEADING in body
    assert "## Recent turns preserved verbatim" not in view[0]["summary"]
    clipped = [line for line in body[RECENT_TURNS_HEADING] if line.startswith("- ")]
    assert clipped[-2:] == ["- User: Write the release notes.", "- Assistant: Release notes written."]
    assert not any("What is left?" in line for line in clipped)
    assert view[-2]["content"][0]["text"] == "What is left?"  # the kept turn, whole, in the context


AGENTS_RULES = "## Red Lines\nNever run migrations against prod-db-01 without a ticket."


@pytest.mark.slow  # hypothesis-heavy or runs pi: left to the full run
@pytest.mark.parametrize("mode", ["rotate", "append"])
def test_agents_md_rules_are_written_once_in_pis_view(pi: Pi, tmp_path: Path, mode: CommitMode) -> None:
    path = Path(pi.write(tmp_path / "s", asks_session_ops())["path"])
    agents = "# Workspace\n\n## Session Startup\nRead TODO.md first.\n\n" + AGENTS_RULES + "\n"
    result = _engine_result(read_transcript(path), agents_md=agents)
    view = _commit_and_load(pi, path, result, tmp_path, mode)
    rule = "Never run migrations against prod-db-01 without a ticket."
    texts = [text_of(m) for m in view]
    assert sum(text.count(rule) for text in texts) == 1
    assert sum(text.count("Read TODO.md first.") for text in texts) == 1
    refresh = [m for m in view if m["role"] == "custom"]
    assert len(refresh) == 1 and rule in refresh[0]["content"]  # the refresh is the copy that stays
    assert "<workspace-critical-rules>" not in view[0]["summary"]


def _bundled_example() -> Path:
    return (
        Path(__file__).resolve().parents[1]
        / "examples"
        / "sessions"
        / "2026-09-21T09-00-00-000Z_0196a3b2-0000-7000-8000-00000000a001.jsonl"
    )


@pytest.mark.slow  # hypothesis-heavy or runs pi: left to the full run
def test_the_bundled_example_digest() -> None:
    """The session the README runs: every ask was answered ("the fix is in place"), every ask restates one
    rule, and every turn opens with a plan ("I'll read X first")."""
    engine = CompactionEngine(
        EngineSettings(keep_recent_turns=KEEP_RECENT_TURNS, keep_recent_tokens=KEEP_RECENT_TOKENS)
    )
    result = anyio.run(lambda: engine.compact(read_transcript(_bundled_example())))
    assert result is not None and result.level == "digest"
    body = sections(result.summary)
    last_ask = text_of([m for m in result.plan.to_summarize if m.get("role") == "user"][-1])
    assert body[PENDING_ASKS] == ["- Latest ask (verbatim; answered):", f"  > {last_ask}"]
    assert body[CONSTRAINTS] == ["- never touch the production database at db.internal:5432"]
    assert body[DECISIONS] and all(
        line.startswith("- Decided to keep the retry logic in ") for line in body[DECISIONS]
    )
    assert len(body[DECISIONS]) == len(set(body[DECISIONS])) == 5  # one per file, said once
    assert RECENT_TURNS_HEADING in body and "## Recent turns preserved verbatim" not in result.summary


def test_the_digest_and_the_augmentation_agree_on_what_failed() -> None:
    """One test of failure for both: a failing ``details`` status, a text exit code, ``isError``; one heading."""
    from compactd.summarize.augment import TOOL_FAILURES_HEADING, collect_tool_failures

    messages = [
        assistant(
            "", call("exec", "a", command="deploy"), call("bash", "b", command="make"), call("edit", "c")
        ),
        result("deploy aborted", "a", name="exec", details={"status": "failed"}),
        result("error: missing\nCommand exited with code 2", "b"),
        result("Could not find the exact text", "c", name="edit", error=True),
        result("all good, exit code 0", "d"),
    ]
    digest_ids = [(f.tool, f.exit_code) for f in tool_failures(messages)]
    assert digest_ids == [("exec", None), ("bash", 2), ("edit", None)]
    augment_tools = [m["toolName"] for m in collect_tool_failures(messages)]
    assert augment_tools == ["exec", "bash", "edit"]
    assert FAILURES_HEADING == TOOL_FAILURES_HEADING == "## Tool Failures"
    assert sections(build_digest(messages))[FAILURES_HEADING][0] == "- exec `deploy` (error): deploy aborted"
