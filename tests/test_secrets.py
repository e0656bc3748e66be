"""Secrets never leave: not in a request to the summarizer, not in a committed summary, not on any later
compaction, and not in any command's output or log. Real files, ``compactd`` as a subprocess, the real openai
client against the loopback stub server, pi's own loader reading what was committed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest
import yaml
from compactd.reading import read_transcript
from compactd.state import SessionState, build_status, write_status
from compactd.summarize.headings import REQUIRED_HEADINGS

from tests.support.cli import compactd
from tests.support.llm_server import Reply

# Every command as a process, over two compactions: the full run's, not the inner loop's.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.llm_server import RecordedRequest, StubLLMServer
    from tests.support.pi import Pi

REPO = Path(__file__).resolve().parents[1]
LONG_EXAMPLE = "2026-09-21T09-00-00-000Z_0196a3b2-0000-7000-8000-00000000a001.jsonl"

# Assembled at run time so no scanner mistakes this file for a leak.
AWS_KEY_ID = "AKIA" + "Q3ZK2M4N7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYzq81EXAMPLE"
OPENAI = "sk-" + "proj-" + "Q7vLm2Xc9RbT4nWk8PzY3sJd"
PASSWORD = "Tr0ub4dor-" + "horse-77"
BEARER = "ya29" + ".a0AfH6SMBx7Kq2LmNpQrStUv"
URL_PASSWORD = "S3cret" + "Pw-4471x"
URL_KEY = "Zq81xYt3" + "Kp0Lm5Nw"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SECRETS = (AWS_KEY_ID, AWS_SECRET, OPENAI, PASSWORD, BEARER, URL_PASSWORD, URL_KEY, GITHUB)
# What must never reach a model whatever it holds.
DETAILS_MARKER = "DETAILS-ONLY-7f3a"
RUNTIME_MARKER = "RUNTIME-CONTEXT-ONLY-9c2e"


def leaks(text: str) -> list[str]:
    """Each secret found whole or as a fragment (its head or its tail, as a cap would leave it)."""
    return [s for s in SECRETS if s in text or s[:10] in text or s[-10:] in text]


# --- a session full of secrets -----------------------------------------------------------------------------
def _turn(n: int) -> list[dict[str, Any]]:
    """One turn that carries a secret in every place a transcript can: the ask, the reply, the thinking, a
    tool call's arguments, a failed tool's output (the "Tool Failures" section) and a user ``!`` command."""
    url = f"https://deploy:{URL_PASSWORD}@git.internal.example/repo.git"
    api = f"https://api.internal.example/v2/jobs?api-key={URL_KEY}&page={n}"
    # The key sits right where the 600-character cap of a verbatim turn cuts it.
    straddle = "x" * 580 + f" using {OPENAI} now"
    stamp = 1_790_000_000_000 + n * 10
    usage = {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2}
    return [
        {"role": "user", "content": [{"type": "text", "text": f"Turn {n}: deploy with password: {PASSWORD} "
         f"from {url}, and never print AWS_SECRET_ACCESS_KEY={AWS_SECRET}"}], "timestamp": stamp},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": f"use Authorization: Bearer {BEARER}"},
            {"type": "text", "text": f"I'll call {api} with token {GITHUB}."},
            {"type": "toolCall", "id": f"call{n}", "name": "bash",
             "arguments": {"command": f'curl -H "Authorization: Bearer {BEARER}" {api}'}},
        ], "provider": "p", "model": "m", "stopReason": "toolUse", "usage": usage, "timestamp": stamp + 1},
        {"role": "toolResult", "toolCallId": f"call{n}", "toolName": "bash", "content": [{"type": "text",
         "text": f"aws_access_key_id = {AWS_KEY_ID}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\nexit code 1"}],
         "isError": True, "details": {"exitCode": 1, "status": DETAILS_MARKER, "env": DETAILS_MARKER},
         "timestamp": stamp + 2},
        {"role": "custom", "customType": "openclaw.runtime-context", "content": RUNTIME_MARKER,
         "display": False, "timestamp": stamp + 3},
        {"role": "bashExecution", "command": f"psql postgres://admin:{URL_PASSWORD}@db:5432/app", "output":
         f"FATAL: password: {PASSWORD} rejected", "exitCode": 2, "cancelled": False, "truncated": False,
         "timestamp": stamp + 4},
        {"role": "assistant", "content": [{"type": "text", "text": straddle}], "provider": "p", "model": "m",
         "stopReason": "stop", "usage": usage, "timestamp": stamp + 5},
    ]  # fmt: skip


def append_turns(path: Path, turns: range) -> None:
    """Entries appended after the current leaf, as an agent would write them."""
    leaf = read_transcript(str(path)).leaf_id if path.exists() else None
    lines: list[dict[str, Any]] = []
    if leaf is None:
        lines.append({"type": "session", "version": 3, "id": "5ec4e75-0000-4000-8000-000000000001",
                      "timestamp": "2026-11-30T00:00:00.000Z", "cwd": str(path.parent)})  # fmt: skip
    for n in turns:
        for message in _turn(n):
            entry_id = os.urandom(4).hex()
            kind = "custom_message" if message["role"] == "custom" else "message"
            entry: dict[str, Any] = {"type": kind, "id": entry_id, "parentId": leaf,
                                     "timestamp": "2026-11-30T00:00:00.000Z"}  # fmt: skip
            if kind == "custom_message":
                entry.update({k: message[k] for k in ("customType", "content", "display")})
            else:
                entry["message"] = message
            lines.append(entry)
            leaf = entry_id
    with path.open("ab") as f:
        f.write(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def echoing_model(request: RecordedRequest) -> str:
    """A summarizer that repeats what it was given (so anything a prompt carried would reach the summary)
    and adds a secret of its own (a model's text is not trusted either)."""
    user = request.content("user")
    body = "\n".join(f"- {line}" for line in user.splitlines()[-40:] if line.strip())
    head, *rest = REQUIRED_HEADINGS
    return "\n".join([head, body, f"- the deploy token is {GITHUB}", *(f"{h}\n- None." for h in rest)])


def config_for(tmp_path: Path, base_url: str | None) -> Path:
    compaction = {"keep_recent_turns": 2, "keep_recent_tokens": 0}
    doc: dict[str, Any] = {"compaction": compaction}
    if base_url:
        doc["summarizer"] = {"base_url": base_url, "model": "stub-model", "retry": {"attempts": 1}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def committed_summary(pi: Pi, path: Path) -> str:
    messages = pi.load(path)["messages"]
    assert messages[0]["role"] == "compactionSummary"
    return str(messages[0]["summary"])


def compact_twice(tmp_path: Path, pi: Pi, base_url: str | None) -> tuple[list[str], str]:
    """Compact, append more secret-laden turns, compact again; (both committed summaries, stderr)."""
    path = tmp_path / "sessions" / "s.jsonl"
    path.parent.mkdir()
    config = config_for(tmp_path, base_url)
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "none")}
    summaries, stderr = [], ""
    for turns in (range(0, 5), range(5, 10)):
        append_turns(path, turns)
        done = compactd("compact", str(path), "--force", "--json", "--config", str(config), env=env)
        assert done.returncode == 0 and orjson.loads(done.stdout)["committed"] is True, done.stderr
        summaries.append(committed_summary(pi, path))
        stderr += done.stderr
        assert not leaks(done.stdout), leaks(done.stdout)
    return summaries, stderr


# --- the summary and the requests --------------------------------------------------------------------------
def test_no_secret_in_any_request_or_committed_summary_over_two_compactions(
    tmp_path: Path, llm_server: StubLLMServer, pi: Pi
) -> None:
    llm_server.responder = echoing_model
    summaries, _ = compact_twice(tmp_path, pi, llm_server.base_url)
    requests = llm_server.completions
    assert requests, "the summarizer was never called"
    # The second compaction re-distilled the first summary: it was carried in, and what it carried was clean.
    assert any("<previous-summary>" in r.content("user") for r in requests)
    for request in requests:
        body = request.raw.decode()
        text = request.content("system") + request.content("user")
        assert not leaks(body) and not leaks(text), leaks(text)
        assert DETAILS_MARKER not in body and RUNTIME_MARKER not in body
    # The verbatim turns and the tool failures made it in (so the check above is not vacuous) ...
    for summary in summaries:
        assert "## Last summarized turns (clipped)" in summary and "## Tool Failures" in summary
        assert "[REDACTED:" in summary and "git.internal.example/repo.git" in summary
        # ... without a secret, a fragment of one, or anything from details.
        assert not leaks(summary), leaks(summary)
        assert DETAILS_MARKER not in summary and RUNTIME_MARKER not in summary


def test_no_secret_in_a_digest_summary_over_two_compactions(tmp_path: Path, pi: Pi) -> None:
    summaries, _ = compact_twice(tmp_path, pi, None)
    for summary in summaries:
        assert summary.startswith("_Mechanical digest of ")
        assert "## Last summarized turns (clipped)" in summary and "## Tool Failures" in summary
        assert not leaks(summary), leaks(summary)
        assert DETAILS_MARKER not in summary and RUNTIME_MARKER not in summary


def test_a_previous_summary_holding_secrets_is_redacted_before_it_is_sent(
    tmp_path: Path, llm_server: StubLLMServer, pi: Pi
) -> None:
    """A summary committed before redaction covered every section (or by another tool) still holds them."""
    path = tmp_path / "sessions" / "s.jsonl"
    path.parent.mkdir()
    append_turns(path, range(0, 1))
    leaf = read_transcript(str(path)).leaf_id
    recent = [
        f"- User: password: {PASSWORD}",
        f"- Assistant: export OPENAI_API_KEY={OPENAI}",
        f"- Tool result (bash): AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
    ]
    old = "\n".join([*REQUIRED_HEADINGS, "## Recent turns preserved verbatim", *recent])
    with path.open("ab") as f:
        compaction = {"type": "compaction", "id": os.urandom(4).hex(), "parentId": leaf, "timestamp":
                      "2026-11-30T00:00:01.000Z", "summary": old, "firstKeptEntryId": leaf,
                      "tokensBefore": 1000}  # fmt: skip
        f.write(orjson.dumps(compaction) + b"\n")
    append_turns(path, range(1, 4))
    assert PASSWORD in committed_summary(pi, path)  # the agent does see it, as compactd found it
    llm_server.responder = echoing_model
    config = config_for(tmp_path, llm_server.base_url)
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "none")}
    done = compactd("compact", str(path), "--force", "--json", "--config", str(config), env=env)
    assert done.returncode == 0, done.stderr
    carried = [r for r in llm_server.completions if "<previous-summary>" in r.content("user")]
    assert carried, "the previous summary was not carried into a prompt"
    for request in llm_server.completions:
        assert not leaks(request.raw.decode()), leaks(request.raw.decode())
    assert not leaks(committed_summary(pi, path))


# --- what commands print and log ---------------------------------------------------------------------------
@pytest.fixture
def keyed(tmp_path: Path, llm_server: StubLLMServer) -> tuple[Path, dict[str, str]]:
    """A config whose base_url carries the key in its query string and whose memory hook echoes the API key,
    over an idle session that needs compacting. The endpoint answers every call with an error naming the
    URL: the line that must be masked."""
    llm_server.responder = lambda _request: Reply.error(500, "stub outage")
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    shutil.copyfile(REPO / "examples" / "sessions" / LONG_EXAMPLE, sessions / "s.jsonl")
    old = time.time() - 3600  # idle for an hour
    os.utime(sessions / "s.jsonl", (old, old))
    hook = tmp_path / "hook.sh"
    hook.write_text('#!/bin/sh\necho "calling with $SUMMARIZER_KEY" >&2\nexit 3\n')
    hook.chmod(0o755)
    config = tmp_path / "config.yaml"
    doc = {
        "sessions": {"roots": [str(sessions)]},
        "summarizer": {"base_url": f"{llm_server.base_url}?api-key={URL_KEY}", "model": "stub-model",
                       "api_key_env": "SUMMARIZER_KEY", "retry": {"attempts": 1}},
        "memory_flush": {"hooks": [{"command": [str(hook)]}]},
    }  # fmt: skip
    config.write_text(yaml.safe_dump(doc))
    env = {
        "STATE_DIRECTORY": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "none"),
        "COMPACTD_CONFIG": str(config),
        "SUMMARIZER_KEY": "local-" + "Kq7Wm3Zx9Pt2Ld",
    }
    return sessions, env


def _assert_clean(done: subprocess.CompletedProcess[str], key: str) -> None:
    both = done.stdout + done.stderr
    assert URL_KEY not in both and key not in both, both[-3000:]
    assert "api-key=***" in both or "api-key=[REDACTED" in both, both[
        -3000:
    ]  # the line that named it is there


def test_once_masks_the_url_key_and_a_hook_echoing_the_api_key(keyed: tuple[Path, dict[str, str]]) -> None:
    _, env = keyed
    done = compactd("once", "--force", env=env)
    _assert_clean(done, env["SUMMARIZER_KEY"])
    assert "hook failed" in done.stderr and "calling with ***" in done.stderr


def test_compact_masks_the_url_key(keyed: tuple[Path, dict[str, str]]) -> None:
    sessions, env = keyed
    done = compactd("compact", str(sessions / "s.jsonl"), "--force", "--dry-run", env=env)
    _assert_clean(done, env["SUMMARIZER_KEY"])


def test_doctor_masks_the_url_key(keyed: tuple[Path, dict[str, str]]) -> None:
    _, env = keyed
    done = compactd("doctor", "--config", env["COMPACTD_CONFIG"], env=env)
    _assert_clean(done, env["SUMMARIZER_KEY"])


def test_status_masks_the_url_key_in_a_recorded_error(
    keyed: tuple[Path, dict[str, str]], llm_server: StubLLMServer
) -> None:
    sessions, env = keyed
    state = SessionState(str(sessions / "s.jsonl"))
    state.last_error = f"summarizer fatal: HTTP 404 from {llm_server.base_url}?api-key={URL_KEY} model 'm'"
    now = time.time()
    status = build_status([state], now=now, started_at=now, version="t", config_path=None)
    Path(env["STATE_DIRECTORY"]).mkdir()
    write_status(Path(env["STATE_DIRECTORY"]), status)
    _assert_clean(compactd("status", "--json", env=env), env["SUMMARIZER_KEY"])  # the table shows no errors


def test_run_masks_the_url_key_and_a_hook_echoing_the_api_key(
    keyed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    _, env = keyed
    log = tmp_path / "run.log"
    base = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "STATE_DIRECTORY")}
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "compactd", "run", "--log-level", "info"],
            cwd=REPO,
            stdout=err,
            stderr=subprocess.STDOUT,
            text=True,
            env={**base, **env},
        )
        try:
            deadline = time.monotonic() + 120
            while "full summary failed" not in log.read_text() or "hook failed" not in log.read_text():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, log.read_text(), "")
    _assert_clean(done, env["SUMMARIZER_KEY"])
    assert "calling with ***" in done.stdout
