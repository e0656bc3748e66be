"""The real Codex CLI (``@openai/codex@0.169.0``) served by compactd: its rollout grown by ``codex exec`` against
the scripted model, compacted by ``compactd run`` with an appended ``compacted`` item, then continued by
``codex exec resume``, whose next request must start from compactd's summary; and Codex's own compaction
running compactd's memory flush from its ``PreCompact`` hook (design.md §6.16)."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.codex import CodexHome
from tests.support.llm_server import RecordedRequest, Reply, StubLLMServer
from tests.test_service_e2e import wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
MARKER = "COMPACTD-SUMMARY-7c1f"
# Identifiers the first turns carry and the summary must keep (the engine extracts and repairs them).
TICKET, DB_PATH, PORT = "TICKET-4711", "/srv/ledger/shard_07.db", "port 6543"
FILLER = "The ledger reconciliation log line repeats here for bulk. "  # ~60 bytes, never an identifier


def summarizer_responder(request: RecordedRequest) -> Reply:
    return Reply.completion(
        "\n".join(
            [
                "## Decisions",
                f"- {MARKER}: shards 1-6 reconciled; shard 7 next.",
                "## Open TODOs",
                "- Reconcile shard 7.",
                "## Constraints/Rules",
                "- Never drop a ledger row.",
                "## Pending user asks",
                "- Finish the reconciliation.",
                "## Exact identifiers",
                f"- {TICKET}",
            ]
        )
    )


@pytest.fixture
def model() -> Iterator[StubLLMServer]:
    server = StubLLMServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def summarizer() -> Iterator[StubLLMServer]:
    server = StubLLMServer().start()
    server.responder = summarizer_responder
    try:
        yield server
    finally:
        server.stop()


def compactd_config(tmp: Path, home: Path, summarizer: StubLLMServer, **overrides: Any) -> Path:
    (tmp / "no-pi-sessions").mkdir(exist_ok=True)
    config: dict[str, Any] = {
        "sessions": {"roots": [str(tmp / "no-pi-sessions")], "idle_seconds": 1.0},
        "compaction": {"keep_recent_turns": 1},
        "memory_flush": {"enabled": False},
        "summarizer": {
            "base_url": summarizer.base_url,
            "model": "summarizer-model",
            "context_tokens": 32_768,
            "timeout_seconds": 30,
        },
        "service": {"status_refresh_seconds": 0.2, "rescan_seconds": 0.5},
        "openclaw": {"enabled": False},
        "codex": {"home": str(home)},
        "state_dir": str(tmp / "state"),
    }
    for key, value in overrides.items():
        config.setdefault(key, {}).update(value)
    path = tmp / "compactd.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def compactd_env() -> dict[str, str]:
    drop = ("JOURNAL_STREAM", "STATE_DIRECTORY", "NOTIFY_SOCKET", "CODEX_HOME")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PYTHONUNBUFFERED": "1"}


def rollout_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def ask(turn: int) -> str:
    """A user turn of about 6 KB; the first names the identifiers the summary must keep."""
    head = f"Turn {turn}: reconcile ledger shard {turn}."
    if turn == 1:
        head += f" Track it under {TICKET}; the database is {DB_PATH} on {PORT}."
    return head + " " + FILLER * 150


def compacted_estimate(log_text: str) -> int:
    found = re.search(r"action=compacted via=append .* estimate_after=(\d+)", log_text)
    assert found is not None, log_text[-2000:]
    return int(found.group(1))


def texts(items: list[dict[str, Any]]) -> list[str]:
    out = []
    for item in items:
        for block in item.get("content") or []:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                out.append(block["text"])
    return out


def test_compactd_compacts_an_idle_codex_session_and_codex_resumes_from_its_summary(
    tmp_path: Path, model: StubLLMServer, summarizer: StubLLMServer
) -> None:
    codex = CodexHome(tmp_path / "codex-home", tmp_path / "work", model.base_url, context_window=18_000)
    codex.write()
    session = codex.exec(ask(1))
    for turn in (2, 3):
        codex.exec(ask(turn), resume=session)
    (rollout,) = codex.rollouts()

    # compactd follows the session from under its threshold; the fourth turn takes it over.
    config = compactd_config(tmp_path, codex.home, summarizer)
    status_path = tmp_path / "state" / "status.json"
    log_path = tmp_path / "compactd.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "compactd", "run", "--config", str(config), "--log-level", "debug"],
            cwd=REPO,
            env=compactd_env(),
            stdout=log,
            stderr=log,
        )
    try:
        wait_for(
            lambda: (
                status_path.exists()
                and any(
                    r.get("source") == "codex" and r["tokens"] > 0
                    for r in json.loads(status_path.read_text())["sessions"]
                )
            ),
            30,
            "compactd to follow the Codex session",
            proc,
        )
        codex.exec(ask(4), resume=session)
        snapshot = rollout.read_bytes()  # compactd may already have appended (the file is quiet from here)
        request_before = model.responses[-1]

        def compacted_row() -> dict[str, Any] | None:
            rows = json.loads(status_path.read_text())["sessions"]
            return next((r for r in rows if r["path"] == str(rollout) and r["compactions"] >= 1), None)

        row = wait_for(compacted_row, 60, "compactd to compact the Codex session", proc)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    log_text = log_path.read_text(errors="replace")
    codex_part = b"".join(
        itertools.takewhile(lambda raw: b'"type":"compacted"' not in raw, snapshot.splitlines(keepends=True))
    )
    after = rollout.read_bytes()
    assert after.startswith(codex_part), "compactd changed a byte Codex wrote"
    appended = after[len(codex_part) :].decode().splitlines()
    assert len(appended) == 1
    compacted = json.loads(appended[0])
    lines = rollout_lines(rollout)
    assert compacted["type"] == "compacted"
    assert compacted["ordinal"] == max(line.get("ordinal", -1) for line in lines[:-1]) + 1
    assert lines[-2]["payload"].get("type") == "task_complete", "compacted before the turn ended"
    counts = [
        line["payload"]["info"]
        for line in lines
        if line["type"] == "event_msg"
        and line["payload"].get("type") == "token_count"
        and line["payload"].get("info")
    ]
    codex_figure, codex_window = (
        counts[-1]["last_token_usage"]["total_tokens"],
        counts[-1]["model_context_window"],
    )

    assert row["source"] == "codex" and row["codex_window"] == codex_window
    assert row["last_fill"]["before"] == codex_figure, "compactd decided on a figure other than Codex's"
    assert "action=compacted via=append" in log_text, log_text[-3000:]
    metrics = (tmp_path / "state" / "metrics.prom").read_text()
    assert (
        f'compactd_session_context_window{{file="{rollout.name}",session_id="{session}"}} {codex_window}.0'
        in metrics
    )
    print(
        f"\ncodex figure {codex_figure} of window {codex_window}; compactd decided on {row['last_fill']['before']}"
    )

    # Codex continues from the appended item: its next request starts from compactd's summary.
    served = len(model.responses)
    codex.exec("Now reconcile shard 7 and report.", resume=session)
    request_after = model.responses[served]
    items = request_after.json["input"]
    user_texts = texts([i for i in items if i.get("role") == "user"])
    first_user = user_texts[0]
    assert MARKER in first_user and TICKET in first_user and DB_PATH in first_user
    assert user_texts[-1] == "Now reconcile shard 7 and report."
    assert any(t.startswith("Turn 4:") for t in user_texts), "the newest turn is kept verbatim"
    assert not any(t.startswith("Turn 1:") for t in user_texts), "the oldest turn is summarized, not kept"
    print(
        f"request before: {len(request_before.raw)} bytes, {len(request_before.json['input'])} items; "
        f"after compactd: {len(request_after.raw)} bytes, {len(items)} items"
    )
    assert len(request_after.raw) < len(request_before.raw)
    resumed = [
        line["payload"]["info"]["last_token_usage"]["total_tokens"]
        for line in rollout_lines(rollout)[len(lines) :]
        if line["type"] == "event_msg"
        and line["payload"].get("type") == "token_count"
        and line["payload"].get("info")
    ]
    print(
        f"codex figure after resume {resumed[-1]} (compactd's estimate before it: {compacted_estimate(log_text)})"
    )
    assert resumed[-1] < codex_figure


def test_a_session_codex_holds_open_is_never_touched(
    tmp_path: Path, model: StubLLMServer, summarizer: StubLLMServer
) -> None:
    """While Codex has the thread open (here: its fifth turn waits on the model) it holds its writer lock;
    ``compactd once --force`` (which skips the idle and mid-turn rules, never a lock) leaves the rollout alone,
    and compacts it once Codex has exited."""
    codex = CodexHome(tmp_path / "codex-home", tmp_path / "work", model.base_url, context_window=18_000)
    codex.write()
    session = codex.exec(ask(1))
    for turn in (2, 3, 4):
        codex.exec(ask(turn), resume=session)
    (rollout,) = codex.rollouts()
    gate = threading.Event()
    answer = model.responses_responder

    def held(request: RecordedRequest) -> str:
        if len(model.responses) == 5:  # the fifth turn's request: Codex waits with the thread open
            gate.wait(60)
        return answer(request)

    model.responses_responder = held
    config = compactd_config(tmp_path, codex.home, summarizer)
    once = [sys.executable, "-m", "compactd", "once", "--force", "--json", "--config", str(config)]
    running = codex.spawn("Turn 5: keep going.", resume=session)
    try:
        wait_for(lambda: len(model.responses) == 5, 60, "Codex's fifth request")
        before = rollout.read_bytes()
        done = subprocess.run(
            once, cwd=REPO, env=compactd_env(), capture_output=True, text=True, timeout=120, check=False
        )
        row = next(r for r in json.loads(done.stdout) if r["path"] == str(rollout))
        assert row["action"] == "busy" and "holds" in row["reason"], row
        assert rollout.read_bytes() == before
    finally:
        gate.set()
        codex.finish(running)
    before = rollout.read_bytes()
    done = subprocess.run(
        once, cwd=REPO, env=compactd_env(), capture_output=True, text=True, timeout=120, check=False
    )
    row = next(r for r in json.loads(done.stdout) if r["path"] == str(rollout))
    assert row["action"] == "compact_only" and row["committed"], row
    assert rollout.read_bytes().startswith(before)


def test_codex_precompact_hook_flushes_memories_and_codex_compacts_with_compactds_prompt(
    tmp_path: Path, model: StubLLMServer, summarizer: StubLLMServer
) -> None:
    """Codex's own compaction (its auto-compact limit lowered) runs ``compactd hook codex-precompact`` first: the
    flush writes the workspace's memory file from the rollout the hook names; and the prompt ``compactd hook
    codex-prompt`` installed is the one Codex compacts with."""
    home = tmp_path / "codex-home"
    home.mkdir()
    config = compactd_config(tmp_path, home, summarizer, memory_flush={"enabled": True})
    installed = subprocess.run(
        [sys.executable, "-m", "compactd", "hook", "codex-prompt", "--config", str(config)],
        cwd=REPO,
        env=compactd_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert installed == str(home / "compactd-compact-prompt.md")
    hook = " ".join(
        [
            shlex.quote(sys.executable),
            "-m",
            "compactd",
            "hook",
            "codex-precompact",
            "--config",
            shlex.quote(str(config)),
        ]
    )
    codex = CodexHome(
        home,
        tmp_path / "work",
        model.base_url,
        context_window=200_000,
        auto_compact_limit=5_000,
        hooks={"PreCompact": f"cd {shlex.quote(str(REPO))} && {hook}"},
        extra_config=f"experimental_compact_prompt_file = {json.dumps(installed)}\n",
    )
    codex.write()

    def answer(request: RecordedRequest) -> Reply:
        if "memor" in request.content("system").lower():
            return Reply.completion(f"- {TICKET} tracks the ledger reconciliation of {DB_PATH}.")
        return summarizer_responder(request)

    summarizer.responder = answer
    session = codex.exec(ask(1))
    codex.exec(ask(2), resume=session)
    (rollout,) = codex.rollouts()
    assert any(line["type"] == "compacted" for line in rollout_lines(rollout)), "Codex did not compact"
    memory = list((codex.workdir / "memory").glob("*.md"))
    assert len(memory) == 1, f"no memory file: {sorted(codex.workdir.rglob('*'))}"
    assert TICKET in memory[0].read_text()
    compact_requests = [r for r in model.responses if "## Exact identifiers" in r.raw.decode()]
    assert compact_requests, "Codex did not compact with compactd's prompt"
