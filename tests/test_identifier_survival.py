"""Every identifier the user or the agent wrote survives a compaction, in pi's own view of the session.

Sessions are written by pi's ``SessionManager``; ``compactd compact`` runs as a subprocess; pi's loader says
what the agent sees afterwards (the summary and the kept messages). The identifiers sit in turns that are
summarized, never in the kept ones, so only the summary can carry them — once with a summarizer that keeps the
five headings and drops every identifier, once with the model-free digest. A ``git log`` of 80 commit hashes in
a tool result must not crowd them out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests.support.cli import compactd
from tests.support.crash import BASE_MS, assistant, tool_result, user

# The daemon or the commit path as real processes (end to end, kills, pi itself): `pytest -m "not slow"`
# leaves them to the full run and CI.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.llm_server import RecordedRequest, StubLLMServer
    from tests.support.pi import Pi

REPO = Path(__file__).resolve().parents[1]

# (kind, as written, what must appear in pi's view). The user writes Chinese around them, as the seeds do.
USER_WRITTEN: list[tuple[str, str, str]] = [
    ("ticket", "OPS-27203", "OPS-27203"),
    ("ticket", "SEC-1393", "SEC-1393"),
    ("ticket", "JIRA-88", "JIRA-88"),
    ("issue", "#1234", "#1234"),
    ("issue", "PR 567", "PR 567"),
    ("issue", "!89", "!89"),
    ("prefixed_id", "cus_NffrFeUfNV2Hib", "cus_NffrFeUfNV2Hib"),
    ("prefixed_id", "req_8f3a9c2d71", "req_8f3a9c2d71"),
    ("hostname", "db-3.internal", "db-3.internal"),
    ("hostname", "api.example.com", "api.example.com"),
    ("port", "端口 5432", "5432"),
    ("date", "2026-11-30", "2026-11-30"),
    ("time", "14:05", "14:05"),
    ("version", "v2.4.1", "v2.4.1"),
    ("version", "pkg@1.2.3", "pkg@1.2.3"),
    ("version", "requests==2.31.0", "requests==2.31.0"),
    ("file", "report.pdf", "report.pdf"),
    ("file", "main.rs", "main.rs"),
    ("path", "/srv/app/config.yaml", "/srv/app/config.yaml"),
    ("url", "https://wiki.example.com/runbook/outage", "https://wiki.example.com/runbook/outage"),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-426614174000"),
    ("hash", "9f86d081884c", "9f86d081884c"),
    ("ip", "10.20.30.40", "10.20.30.40"),
    ("host_port", "10.0.0.5:8443", "10.0.0.5:8443"),
    ("email", "ops@example.com", "ops@example.com"),
    ("number", "7654321", "7654321"),
]
AGENT_WRITTEN: list[tuple[str, str, str]] = [
    ("ticket", "INC-4521", "INC-4521"),
    ("issue", "GH-12", "GH-12"),
    ("issue", "owner/repo#77", "owner/repo#77"),
    ("issue", "PR #568", "PR #568"),
    ("issue", "!90", "!90"),
    ("prefixed_id", "pi_3MtwBwLkdIwHu7ix28a3tqPa", "pi_3MtwBwLkdIwHu7ix28a3tqPa"),
    ("prefixed_id", "toolu_01A09q90qw90lq917835lq9", "toolu_01A09q90qw90lq917835lq9"),
    ("hostname", "edge-1.internal", "edge-1.internal"),
    ("hostname", "cache-2.prod.example.net", "cache-2.prod.example.net"),
    ("port", "port 6380", "6380"),
    ("port", ":9443", "9443"),
    ("datetime", "2026-12-01T08:00:00Z", "2026-12-01T08:00:00Z"),
    ("date", "30 Nov 2026", "30 Nov 2026"),
    ("date", "Dec 1, 2026", "Dec 1, 2026"),
    ("time", "09:30", "09:30"),
    ("version", "1.2.3-rc.1", "1.2.3-rc.1"),
    ("version", "v3.0.0-beta.2", "v3.0.0-beta.2"),
    ("version", "@scope/lib@4.5.6", "@scope/lib@4.5.6"),
    ("version", "numpy>=1.26.4", "numpy>=1.26.4"),
    ("file", "CHANGELOG.md", "CHANGELOG.md"),
    ("file", "deploy.sh", "deploy.sh"),
    ("path", "src/billing/invoice.ts", "src/billing/invoice.ts"),
    ("url", "https://github.com/owner/repo/pull/568", "https://github.com/owner/repo/pull/568"),
    ("hash", "4b825dc642cb", "4b825dc642cb"),
    ("ip", "192.168.7.21", "192.168.7.21"),
]
WRITTEN = USER_WRITTEN + AGENT_WRITTEN
# Seen only in tool output: ranked after the written ones, and capped first.
TOOL_ONLY = ["TOOL-999", "tool-only.example.org", "v9.9.9"]
GIT_LOG_HASHES = [hashlib.sha1(f"commit {n}".encode()).hexdigest()[:12] for n in range(80)]

USER_TEXT = (
    "请处理工单 OPS-27203 和 SEC-1393（关联 JIRA-88），相关的是 #1234、PR 567 和 !89。"
    "客户 cus_NffrFeUfNV2Hib 的请求 req_8f3a9c2d71 失败了，数据库 db-3.internal 端口 5432，网关 api.example.com。"
    "截止 2026-11-30 14:05 之前把 v2.4.1 升级到 pkg@1.2.3，并固定 requests==2.31.0。"
    "报告在 report.pdf，入口 main.rs，配置 /srv/app/config.yaml，手册 https://wiki.example.com/runbook/outage。"
    "会话 123e4567-e89b-12d3-a456-426614174000，提交 9f86d081884c，旧机器 10.20.30.40，服务 10.0.0.5:8443，"
    "联系 ops@example.com，订单 7654321。"
)
AGENT_TEXT = (
    "Noted. I will also track INC-4521, GH-12, owner/repo#77, PR #568 and !90; the payment "
    "pi_3MtwBwLkdIwHu7ix28a3tqPa came in through toolu_01A09q90qw90lq917835lq9. The deploy goes to "
    "edge-1.internal and cache-2.prod.example.net (port 6380, admin on :9443) at 2026-12-01T08:00:00Z, "
    "the freeze is 30 Nov 2026 from 09:30 to Dec 1, 2026. Ship 1.2.3-rc.1, then v3.0.0-beta.2, with "
    "@scope/lib@4.5.6 and numpy>=1.26.4; note it in CHANGELOG.md and deploy.sh, fix src/billing/invoice.ts, "
    "see https://github.com/owner/repo/pull/568, base 4b825dc642cb, host 192.168.7.21."
)
TOOL_TEXT = "TOOL-999 resolved by tool-only.example.org running v9.9.9"


def _call(call_id: str, command: str) -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": "bash", "arguments": {"command": command}}


def session_ops() -> list[dict[str, Any]]:
    ts = BASE_MS

    def plain_turn(word: str) -> list[dict[str, Any]]:
        nonlocal ts
        ts += 10
        return [user(f"carry on with the {word} step", ts), assistant(f"the {word} step is done", ts + 1)]

    messages: list[dict[str, Any]] = [
        user(USER_TEXT, ts),
        assistant(AGENT_TEXT, ts + 1, [_call("c1", "cat status.txt")]),
        tool_result("c1", TOOL_TEXT, ts + 2),
        assistant("Both are recorded.", ts + 3),
    ]
    for word in ("first", "second", "third", "fourth"):
        messages += plain_turn(word)
    # The newest summarized turn: a git log of 80 hashes, more recent than anything the user or agent wrote.
    ts += 10
    log_text = "\n".join(f"{h} chore: routine change {n}" for n, h in enumerate(GIT_LOG_HASHES))
    messages += [
        user("check the history", ts),
        assistant("", ts + 1, [_call("c2", "git log --oneline -80")]),
        tool_result("c2", log_text, ts + 2),
        assistant("the history is clean", ts + 3),
    ]
    # The three kept turns hold no identifier: only the summary can carry the planted ones.
    for word in ("fifth", "sixth", "seventh"):
        messages += plain_turn(word)
    return [
        {"op": "appendModelChange", "provider": "anthropic", "modelId": "claude-sonnet-4-5"},
        *({"op": "appendMessage", "message": m} for m in messages),
    ]


POOR_SUMMARY = (
    "## Decisions\n- The team agreed on the fix and the upgrade.\n## Open TODOs\n- Finish the upgrade.\n"
    "## Constraints/Rules\n- None.\n## Pending user asks\n- Carry on with the steps.\n"
    "## Exact identifiers\n- None.\n"
)


def poor_summarizer(request: RecordedRequest) -> str:
    """Keeps the five headings, drops every identifier (the poor summary the issue describes)."""
    return POOR_SUMMARY


def _view_text(messages: list[dict[str, Any]]) -> str:
    """Everything of pi's context a model would read: texts and tool-call arguments."""
    parts: list[str] = []
    for message in messages:
        if message.get("role") == "compactionSummary":
            parts.append(message["summary"])
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
            continue
        for block in content or []:
            if block.get("type") == "text":
                parts.append(block["text"])
            elif block.get("type") == "toolCall":
                parts.append(json.dumps(block.get("arguments"), ensure_ascii=False))
    return "\n".join(parts)


def _shows(needle: str, view: str) -> bool:
    """``needle`` occurs in ``view`` as a whole token (``5432`` inside a hash does not count)."""
    return re.search(r"(?<![0-9A-Za-z])" + re.escape(needle) + r"(?![0-9A-Za-z])", view) is not None


def kept_by_kind(view: str, planted: list[tuple[str, str, str]]) -> dict[str, tuple[int, int]]:
    kept: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for kind, _, needle in planted:
        total[kind] += 1
        kept[kind] += _shows(needle, view)
    return {kind: (kept[kind], total[kind]) for kind in total}


def _table(figures: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"{kind} {k}/{n}" for kind, (k, n) in figures.items())


def compact_and_view(
    tmp_path: Path, pi: Pi, config: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    path = Path(pi.write(tmp_path / "sessions", session_ops())["path"])
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "no-config")}
    done = compactd("compact", str(path), "--force", "--json", "--config", str(config_file), env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["committed"] is True, data
    messages = pi.load(path)["messages"]
    assert messages[0]["role"] == "compactionSummary"
    kept = _view_text(messages[1:])
    # The identifiers were all summarized: only the summary can carry them into the agent's view.
    assert [n for _, _, n in WRITTEN if _shows(n, kept)] == []
    return data, messages


@pytest.mark.parametrize("summarizer", ["poor_model", "digest"])
def test_every_written_identifier_survives_in_pis_view(
    summarizer: str, tmp_path: Path, pi: Pi, llm_server: StubLLMServer
) -> None:
    config: dict[str, Any] = {}
    if summarizer == "poor_model":
        llm_server.responder = poor_summarizer
        config = {"summarizer": {"base_url": llm_server.base_url, "model": "stub-model"}}
    data, messages = compact_and_view(tmp_path, pi, config)
    assert data["summary_level"] == ("llm" if summarizer == "poor_model" else "digest")
    if summarizer == "poor_model":
        assert llm_server.completions, "the summarizer was never called"
    view = _view_text(messages)
    figures = kept_by_kind(view, WRITTEN)
    missing = [written for _, written, needle in WRITTEN if not _shows(needle, view)]
    summary = messages[0]["summary"]
    hashes = sum(h in summary for h in GIT_LOG_HASHES)
    tool_only = sum(_shows(t, summary) for t in TOOL_ONLY)
    print(
        f"{summarizer}: kept by kind {_table(figures)}; git-log hashes {hashes}/80; tool-only {tool_only}/3"
    )
    assert missing == [], f"kept by kind: {_table(figures)}; missing: {missing}"
    # The 80 hashes of the git log are tool output only: they are capped, the written ones are not.
    assert hashes < len(GIT_LOG_HASHES)


def test_a_second_compaction_keeps_what_the_first_guaranteed(
    tmp_path: Path, pi: Pi, llm_server: StubLLMServer
) -> None:
    """The poor model drops the previous summary's identifiers too; they are guaranteed again."""
    llm_server.responder = poor_summarizer
    config = {"summarizer": {"base_url": llm_server.base_url, "model": "stub-model"}}
    _, first = compact_and_view(tmp_path, pi, config)
    path = next((tmp_path / "sessions").glob("*.jsonl"))
    ts = BASE_MS + 1_000
    more = [
        m
        for n, word in enumerate(("ninth", "tenth", "eleventh", "twelfth"))
        for m in (
            user(f"carry on with the {word} step", ts + 10 * n),
            assistant(f"the {word} step is done", ts + 10 * n + 1),
        )
    ]
    pi.write(path.parent, [{"op": "appendMessage", "message": m} for m in more], open_path=path)
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "no-config")}
    done = compactd(
        "compact", str(path), "--force", "--json", "--config", str(tmp_path / "config.yaml"), env=env
    )
    assert done.returncode == 0 and json.loads(done.stdout)["committed"] is True, done.stderr
    messages = pi.load(path)["messages"]
    assert messages[0]["role"] == "compactionSummary" and messages[0]["summary"] != first[0]["summary"]
    view = _view_text(messages)
    missing = [written for _, written, needle in WRITTEN if not _shows(needle, view)]
    assert missing == [], f"kept by kind: {_table(kept_by_kind(view, WRITTEN))}; missing: {missing}"
