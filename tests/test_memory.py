"""The memory flush: hooks as real subprocesses, the append-only memory file on a real filesystem, and the
built-in flush through the real openai client against the loopback stub server."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from compactd.config import HookConfig, load_config
from compactd.memory import (
    FLUSH_MAX_OUTPUT_TOKENS,
    HOOK_EVENT,
    FlushResult,
    MemoryWriteRefused,
    append_memory,
    before_compaction_event,
    encode_event,
    flush_memories,
    flush_prompts,
    local_date,
    memory_file_for,
    run_hooks,
)
from compactd.summarize.llm import RetryPolicy, SummarizerClient
from compactd.summarize.prompts import NO_REPLY

from tests.support.llm_server import Reply, StubLLMServer

NOW = datetime(2024, 3, 5, 12, 30, tzinfo=UTC)
KEY = "sk-test-Zq8vN3xK7wPq"


# --- fixtures and helpers ----------------------------------------------------------------------------------


@pytest.fixture
def set_tz() -> Iterator[Any]:
    """Switch the process's local time zone (POSIX TZ strings need no tzdata); restored afterwards."""
    saved = os.environ.get("TZ")

    def apply(tz: str) -> None:
        os.environ["TZ"] = tz
        time.tzset()

    yield apply
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


@pytest.fixture
def llm_server() -> Iterator[StubLLMServer]:
    """The stub server of ``tests.support.llm_server`` (same as its plugin fixture, which needs a conftest to
    register it: a module-level ``pytest_plugins`` here would import it too late for assertion rewriting)."""
    server = StubLLMServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "AGENTS.md").write_text("# Agents\n## Red Lines\nnever rm -rf /\n")
    return ws


def event(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    base = before_compaction_event(
        session_id="sess-1",
        session_file=tmp_path / "s.jsonl",
        tokens=150_000,
        context_window=200_000,
        flush_threshold=144_000,
        compact_threshold=148_000,
        memory_dir=tmp_path / "ws" / "memory",
        now=NOW,
    )
    base.update(overrides)
    return base


def py_hook(code: str, *args: str, timeout: float = 30.0) -> HookConfig:
    return HookConfig(command=(sys.executable, "-c", code, *args), timeout_seconds=timeout)


def sh_hook(script: str, timeout: float = 30.0) -> HookConfig:
    return HookConfig(command=("/bin/sh", "-c", script), timeout_seconds=timeout)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def wait_for_file(path: Path) -> str:
    """The hook wrote its pid before its deadline; once run_hooks returned, reading it needs no waiting."""
    return path.read_text().strip()


def make_client(server: StubLLMServer, **kwargs: Any) -> SummarizerClient:
    kwargs.setdefault("timeout_seconds", 30.0)
    kwargs.setdefault("retry", RetryPolicy(attempts=1))
    return SummarizerClient(base_url=server.base_url, model="stub-model", api_key=KEY, **kwargs)


def span() -> list[dict[str, Any]]:
    """A span with everything the flush must and must not send."""
    return [
        {"role": "user", "content": "USER_MARKER: deploy with key sk-proj-AAAAbbbbCCCCddddEEEEffff1234"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading the config."},
                {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "/etc/app.yaml"}},
            ],
            "stopReason": "toolUse",
        },
        {
            "role": "toolResult",
            "toolCallId": "call_1",
            "toolName": "read",
            "content": [{"type": "text", "text": "TOOL_TEXT_MARKER port: 8443"}],
            "details": {"raw": "DETAILS_MARKER should never leave the process"},
            "isError": False,
        },
        {
            "role": "custom",
            "customType": "openclaw.runtime-context",
            "content": "RUNTIME_CONTEXT_MARKER cwd=/home/alice",
            "display": False,
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Decided to use port 8443."}]},
    ]


def memory_files(ws: Path) -> list[Path]:
    memory = ws / "memory"
    return sorted(memory.iterdir()) if memory.exists() else []


# --- hooks ------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_hook_receives_the_exact_event_json_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "stdin.bin"
    hook = py_hook("import sys; open(sys.argv[1], 'wb').write(sys.stdin.buffer.read())", str(out))
    ev = event(tmp_path)
    [result] = await run_hooks([hook], ev)
    assert result.ok and result.returncode == 0
    raw = out.read_bytes()
    assert raw == encode_event(ev) and raw.endswith(b"\n") and raw.count(b"\n") == 1
    received = json.loads(raw)
    assert received == ev
    assert set(received) == {
        "event",
        "session_id",
        "session_file",
        "tokens",
        "context_window",
        "flush_threshold",
        "compact_threshold",
        "memory_dir",
        "timestamp",
    }
    assert received["event"] == HOOK_EVENT == "before_compaction"
    assert received["timestamp"] == "2024-03-05T12:30:00.000+00:00"


@pytest.mark.anyio
async def test_a_string_command_from_the_config_runs_through_the_shell(tmp_path: Path) -> None:
    config_file = tmp_path / "compactd.yaml"
    config_file.write_text(
        "memory_flush:\n"
        "  hooks:\n"
        '    - command: "cat > got.json && pwd > where.txt"\n'
        "      timeout_seconds: 10\n"
    )
    config = load_config(config_file, env={"HOME": str(tmp_path)})
    [hook] = config.memory_flush.hooks
    assert hook.command[:2] == ("/bin/sh", "-c")
    ev = event(tmp_path)
    [result] = await run_hooks(config.memory_flush.hooks, ev, cwd=tmp_path)
    assert result.ok
    assert json.loads((tmp_path / "got.json").read_bytes()) == ev
    assert (tmp_path / "where.txt").read_text().strip() == str(tmp_path)


@pytest.mark.anyio
async def test_a_failing_hook_is_a_warning_not_an_exception(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="compactd.memory")
    [result] = await run_hooks([sh_hook("cat >/dev/null; echo boom-on-stderr >&2; exit 3")], event(tmp_path))
    assert result.status == "failed" and not result.ok
    assert result.returncode == 3
    assert "boom-on-stderr" in result.stderr
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "failed" in message and "sess-1" in message and "boom-on-stderr" in message


@pytest.mark.anyio
async def test_a_hook_past_its_timeout_is_killed_with_its_children(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="compactd.memory")
    main_pid, child_pid = tmp_path / "main.pid", tmp_path / "child.pid"
    # The shell backgrounds one sleep (its child) and becomes another (exec): both must be gone afterwards.
    script = f"sleep 30 & echo $! > {child_pid}; echo $$ > {main_pid}; exec sleep 30"
    [result] = await run_hooks([sh_hook(script, timeout=0.5)], event(tmp_path))
    assert result.status == "timeout"
    assert result.returncode is not None and result.returncode < 0  # ended by a signal, not by itself
    assert "timed out" in (result.error or "")
    assert not alive(int(wait_for_file(main_pid)))
    assert not alive(int(wait_for_file(child_pid)))
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "timeout" in warning.getMessage()


@pytest.mark.anyio
async def test_cancelling_run_hooks_kills_the_running_hooks(tmp_path: Path) -> None:
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    script = f"echo $$ > {fifo}; exec sleep 30"

    def read_pid() -> int:
        with open(fifo) as f:  # blocks until the hook has started and written its pid
            return int(f.read().strip())

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_hooks, [sh_hook(script, timeout=60)], event(tmp_path))
            pid = await anyio.to_thread.run_sync(read_pid)
            assert alive(pid)
            scope.cancel()
    assert not alive(pid)


@pytest.mark.anyio
async def test_a_hook_that_cannot_start_is_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="compactd.memory")
    missing = HookConfig(command=(str(tmp_path / "no-such-hook"),), timeout_seconds=5)
    [result] = await run_hooks([missing], event(tmp_path))
    assert result.status == "error" and result.returncode is None
    assert "cannot start" in (result.error or "")
    assert len(caplog.records) == 1


@pytest.mark.anyio
async def test_hooks_run_concurrently_and_each_gets_its_own_result(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    # The first hook waits for a file only the second creates: run one after the other, it would time out.
    waiter = sh_hook(f"cat >/dev/null; while [ ! -e {flag} ]; do sleep 0.01; done", timeout=20)
    maker = sh_hook(f"cat >/dev/null; touch {flag}")
    failing = sh_hook("exit 1")
    results = await run_hooks([waiter, maker, failing], event(tmp_path))
    assert [r.status for r in results] == ["ok", "ok", "failed"]
    assert [r.command for r in results] == [waiter.command, maker.command, failing.command]


@pytest.mark.anyio
async def test_a_hook_that_ignores_stdin_does_not_break_the_run(tmp_path: Path) -> None:
    big = event(tmp_path, session_file="x" * 200_000)  # larger than a pipe buffer; never read
    [result] = await run_hooks([sh_hook("exit 0")], big)
    assert result.ok


@pytest.mark.anyio
async def test_no_hooks_is_no_work(tmp_path: Path) -> None:
    assert await run_hooks([], event(tmp_path)) == []


# --- the memory file --------------------------------------------------------------------------------------


def test_memory_file_uses_the_local_date(set_tz: Any, tmp_path: Path) -> None:
    moment = datetime(2024, 1, 1, 6, 0, tzinfo=UTC)
    set_tz("XYZ-14")  # UTC+14
    assert memory_file_for(tmp_path, moment) == tmp_path / "memory" / "2024-01-01.md"
    late = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
    assert local_date(late) == "2024-01-02"
    set_tz("XYZ+12")  # UTC-12
    assert memory_file_for(tmp_path, moment) == tmp_path / "memory" / "2023-12-31.md"
    # An aware time in another zone is converted to the machine's local date, not taken at face value.
    tokyo = datetime(2024, 1, 1, 9, 0, tzinfo=timezone(timedelta(hours=9)))
    assert local_date(tokyo) == "2023-12-31"


def test_append_writes_to_the_local_date_file(set_tz: Any, workspace: Path) -> None:
    set_tz("XYZ-14")
    path = append_memory(workspace, "- fact", now=datetime(2024, 1, 1, 12, 0, tzinfo=UTC))
    assert path == workspace.resolve() / "memory" / "2024-01-02.md"
    assert memory_files(workspace) == [path]


def test_append_creates_memory_dir_and_writes_one_block(workspace: Path) -> None:
    workspace.chmod(0o750)
    path = append_memory(
        workspace, "\n\n- decided: use port 8443\n- TODO: rotate keys  \n\n", now=NOW, session_id="s1"
    )
    assert path == workspace / "memory" / f"{local_date(NOW)}.md"
    assert (workspace / "memory").stat().st_mode & 0o777 == 0o750 & ~current_umask()
    text = path.read_text()
    header = text.split("\n")[0]
    assert header.startswith("<!-- compactd memory flush ") and header.endswith(" session s1 -->")
    assert text == f"{header}\n- decided: use port 8443\n- TODO: rotate keys\n"
    assert (workspace / "AGENTS.md").read_text() == "# Agents\n## Red Lines\nnever rm -rf /\n"


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize(
    ("existing", "separator"),
    [(b"old notes\nno newline at the end", b"\n\n"), (b"old notes\n", b"\n"), (b"old\n\n", b""), (b"", b"")],
)
def test_append_preserves_existing_content_byte_for_byte(
    workspace: Path, existing: bytes, separator: bytes
) -> None:
    target = memory_file_for(workspace, NOW)
    target.parent.mkdir()
    target.write_bytes(existing)
    before = os.stat(target).st_ino
    append_memory(workspace, "- new fact", now=NOW)
    data = target.read_bytes()
    assert data.startswith(existing + separator + b"<!-- compactd memory flush ")
    assert data.endswith(b" -->\n- new fact\n")
    assert os.stat(target).st_ino == before  # appended in place, never replaced


def test_two_appends_are_two_blocks(workspace: Path) -> None:
    first = append_memory(workspace, "- one", now=NOW, session_id="a")
    assert first is not None
    after_first = first.read_bytes()
    second = append_memory(workspace, "- two", now=NOW + timedelta(minutes=1), session_id="b")
    assert second == first
    data = first.read_bytes()
    assert data.startswith(after_first + b"\n<!-- compactd memory flush ")
    assert data.count(b"<!-- compactd memory flush") == 2
    assert data.index(b"- one") < data.index(b"- two")


def test_blank_text_writes_nothing(workspace: Path) -> None:
    assert append_memory(workspace, " \n\n ", now=NOW) is None
    assert not (workspace / "memory").exists()


def test_header_cannot_be_broken_by_a_session_id(workspace: Path) -> None:
    path = append_memory(workspace, "- x", now=NOW, session_id="a-->b <script>\n--c")
    assert path is not None
    header = path.read_text().split("\n")[0]
    assert header.count("-->") == 1 and header.endswith("-->") and "<script>" not in header


def test_refuses_a_symlinked_memory_dir(workspace: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workspace / "memory").symlink_to(elsewhere)
    with pytest.raises(MemoryWriteRefused, match="symlink"):
        append_memory(workspace, "- x", now=NOW)
    assert list(elsewhere.iterdir()) == []


def test_refuses_a_symlinked_target(workspace: Path) -> None:
    target = memory_file_for(workspace, NOW)
    target.parent.mkdir()
    target.symlink_to(workspace / "AGENTS.md")
    agents = (workspace / "AGENTS.md").read_bytes()
    with pytest.raises(MemoryWriteRefused, match="symlink"):
        append_memory(workspace, "- x", now=NOW)
    assert (workspace / "AGENTS.md").read_bytes() == agents


def test_refuses_a_dangling_symlinked_target(workspace: Path, tmp_path: Path) -> None:
    target = memory_file_for(workspace, NOW)
    target.parent.mkdir()
    target.symlink_to(tmp_path / "would-be-created")
    with pytest.raises(MemoryWriteRefused, match="symlink"):
        append_memory(workspace, "- x", now=NOW)
    assert not (tmp_path / "would-be-created").exists()


def test_refuses_a_hard_link(workspace: Path) -> None:
    target = memory_file_for(workspace, NOW)
    target.parent.mkdir()
    os.link(workspace / "AGENTS.md", target)
    agents = (workspace / "AGENTS.md").read_bytes()
    with pytest.raises(MemoryWriteRefused, match="hard link"):
        append_memory(workspace, "- x", now=NOW)
    assert (workspace / "AGENTS.md").read_bytes() == agents


def test_refuses_memory_that_is_a_file(workspace: Path) -> None:
    (workspace / "memory").write_text("not a dir")
    with pytest.raises(MemoryWriteRefused, match="not a directory"):
        append_memory(workspace, "- x", now=NOW)
    assert (workspace / "memory").read_text() == "not a dir"


@pytest.mark.parametrize(
    "relative",
    [
        "memory/MEMORY.md",
        "memory/agents.md",
        "memory/Soul.MD",
        "memory/TOOLS.md",
        "AGENTS.md",
        "memory/../AGENTS.md",
        "SOUL.md",
        "memory/sub/2024-03-05.md",
        "notes/2024-03-05.md",
        "memory/notes.txt",
        "memory/.hidden.md",
        "../outside/memory/2024-03-05.md",
    ],
)
def test_refuses_targets_other_than_a_memory_file(workspace: Path, relative: str) -> None:
    before = {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()}
    with pytest.raises(MemoryWriteRefused):
        append_memory(workspace, "- x", now=NOW, target=workspace / relative)
    after = {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()}
    assert after == before
    assert not (workspace.parent / "outside").exists()


def test_a_bootstrap_file_is_refused_by_name(workspace: Path) -> None:
    with pytest.raises(MemoryWriteRefused, match="bootstrap files are never touched"):
        append_memory(workspace, "- x", now=NOW, target=workspace / "AGENTS.md")


def test_an_explicit_target_inside_memory_is_accepted(workspace: Path) -> None:
    path = append_memory(workspace, "- x", now=NOW, target=Path("memory/2024-03-05.md"))
    assert path == workspace / "memory" / "2024-03-05.md"


def test_a_symlinked_workspace_is_followed_once_and_confined(workspace: Path, tmp_path: Path) -> None:
    link = tmp_path / "ws-link"
    link.symlink_to(workspace)
    path = append_memory(link, "- via link", now=NOW)
    assert path == workspace.resolve() / "memory" / f"{local_date(NOW)}.md"
    assert "- via link" in path.read_text()


def test_a_missing_workspace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MemoryWriteRefused, match="does not exist"):
        append_memory(tmp_path / "nope", "- x", now=NOW)
    assert not (tmp_path / "nope").exists()


# --- the built-in flush -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_no_reply_writes_nothing(llm_server: StubLLMServer, workspace: Path) -> None:
    llm_server.script(NO_REPLY)
    async with make_client(llm_server) as client:
        result = await flush_memories(client, span(), workspace=workspace, session_id="s1", now=NOW)
    assert result == FlushResult("no_reply", latency_s=result.latency_s)
    assert len(llm_server.completions) == 1
    assert not (workspace / "memory").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("answer", ["`NO_REPLY`", "**NO_REPLY**", '"NO_REPLY."', "  NO_REPLY\n"])
async def test_a_quoted_no_reply_writes_nothing(
    llm_server: StubLLMServer, workspace: Path, answer: str
) -> None:
    llm_server.script(answer)
    async with make_client(llm_server) as client:
        result = await flush_memories(client, span(), workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "no_reply" and memory_files(workspace) == []


@pytest.mark.anyio
async def test_an_answer_is_appended_exactly_once(llm_server: StubLLMServer, workspace: Path) -> None:
    answer = "- Decided: the app listens on port 8443.\n- TODO: rotate the deploy key."
    llm_server.script(answer)
    async with make_client(llm_server) as client:
        result = await flush_memories(client, span(), workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "written" and result.error is None
    assert result.path == workspace / "memory" / f"{local_date(NOW)}.md"
    assert result.chars == len(answer)
    text = result.path.read_text()
    assert text.count(answer) == 1 and text.count("<!-- compactd memory flush") == 1
    assert memory_files(workspace) == [result.path]
    assert len(llm_server.completions) == 1


@pytest.mark.anyio
async def test_the_request_never_carries_details_runtime_context_or_secrets(
    llm_server: StubLLMServer, workspace: Path
) -> None:
    llm_server.script(NO_REPLY)
    async with make_client(llm_server) as client:
        await flush_memories(client, span(), workspace=workspace, session_id="s1", now=NOW)
    [request] = llm_server.completions
    body = request.raw.decode()
    # What must be there (so this test can fail) ...
    assert "USER_MARKER" in body and "TOOL_TEXT_MARKER" in body and "Decided to use port 8443" in body
    assert local_date(NOW) in request.content("user")
    assert request.json["max_tokens"] <= FLUSH_MAX_OUTPUT_TOKENS
    # ... and what must not.
    assert "DETAILS_MARKER" not in body
    assert "RUNTIME_CONTEXT_MARKER" not in body
    assert "sk-proj-AAAAbbbbCCCCddddEEEEffff1234" not in body


@pytest.mark.anyio
async def test_a_secret_in_the_answer_never_reaches_the_memory_file(
    llm_server: StubLLMServer, workspace: Path
) -> None:
    """The model's text is not trusted: whatever it writes, the memory file holds no secret (with redaction on,
    the default), and with redaction off it is stored as written."""
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    answer = f"- Deploy with password: Tr0ub4dor-horse-77\n- The CI token is {token}."
    llm_server.script(answer, answer)
    async with make_client(llm_server) as client:
        result = await flush_memories(client, span(), workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "written" and result.path is not None
    text = result.path.read_text()
    assert "Tr0ub4dor-horse-77" not in text and token not in text
    assert "- Deploy with password: [REDACTED:password]" in text and "[REDACTED:github_token]" in text
    async with make_client(llm_server) as client:
        await flush_memories(
            client, span(), workspace=workspace, session_id="s2", now=NOW + timedelta(days=1), redact=False
        )
    assert answer in memory_files(workspace)[-1].read_text()


@pytest.mark.anyio
async def test_a_server_error_fails_without_raising(
    llm_server: StubLLMServer, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="compactd.memory")
    llm_server.script(Reply.error(500, "upstream exploded"))
    async with make_client(llm_server) as client:
        result = await flush_memories(client, span(), workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "failed" and result.path is None
    assert result.error is not None and result.error.startswith("transient")
    assert not (workspace / "memory").exists()
    assert any("memory flush failed" in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_a_timeout_fails_without_raising(llm_server: StubLLMServer, workspace: Path) -> None:
    llm_server.script(Reply.hung())
    async with make_client(llm_server, timeout_seconds=0.5) as client:
        result = await flush_memories(client, span(), workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "failed" and result.error is not None and result.error.startswith("timeout")
    assert not (workspace / "memory").exists()


@pytest.mark.anyio
async def test_an_unreachable_endpoint_fails_without_raising(workspace: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = SummarizerClient(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key=KEY, retry=RetryPolicy(attempts=1)
    )
    async with client:
        result = await flush_memories(client, span(), workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "failed"


@pytest.mark.anyio
async def test_a_refused_write_is_a_failure_not_an_exception(
    llm_server: StubLLMServer, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "memory").symlink_to(tmp_path)
    llm_server.script("- something durable")
    async with make_client(llm_server) as client:
        result = await flush_memories(client, span(), workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "failed" and "symlink" in (result.error or "")


@pytest.mark.anyio
async def test_without_a_client_the_flush_is_skipped(workspace: Path) -> None:
    result = await flush_memories(None, span(), workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "skipped" and not (workspace / "memory").exists()


@pytest.mark.anyio
async def test_an_empty_span_is_skipped_without_a_call(llm_server: StubLLMServer, workspace: Path) -> None:
    async with make_client(llm_server) as client:
        result = await flush_memories(client, [], workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "skipped" and llm_server.completions == []


@pytest.mark.anyio
async def test_a_cut_answer_loses_its_unfinished_last_line(
    llm_server: StubLLMServer, workspace: Path
) -> None:
    llm_server.script(Reply.completion("- complete bullet\n- half a bul", finish_reason="length"))
    async with make_client(llm_server) as client:
        result = await flush_memories(client, span(), workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "written" and result.path is not None
    text = result.path.read_text()
    assert "- complete bullet\n" in text and "half a bul" not in text


@pytest.mark.anyio
async def test_a_long_span_sends_its_newest_messages_to_a_small_summarizer(
    llm_server: StubLLMServer, workspace: Path
) -> None:
    messages = [{"role": "user", "content": f"MSG{i:03d} " + "word " * 200} for i in range(60)]
    llm_server.script(NO_REPLY)
    async with make_client(llm_server, context_tokens=4_000) as client:
        result = await flush_memories(client, messages, workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "no_reply"
    [request] = llm_server.completions
    user = request.content("user")
    assert "MSG059" in user and "MSG000" not in user
    assert "earlier messages left out of this memory flush" in user


@pytest.mark.anyio
async def test_a_server_side_overflow_retries_with_the_newer_half(
    llm_server: StubLLMServer, workspace: Path
) -> None:
    messages = [{"role": "user", "content": f"MSG{i:03d} note"} for i in range(8)]
    llm_server.script(Reply.overflow("openai"), "- kept")
    async with make_client(llm_server) as client:
        result = await flush_memories(client, messages, workspace=workspace, session_id="s1", now=NOW)
    assert result.status == "written"
    first, second = llm_server.completions
    assert "MSG000" in first.content("user") and "MSG000" not in second.content("user")
    assert "MSG007" in second.content("user")


def test_custom_prompts_keep_the_fence_and_the_no_reply_rule() -> None:
    system, user = flush_prompts(
        "[User]: hi", "2024-03-05", prompt="Save facts to memory/YYYY-MM-DD.md", system_prompt="Be terse."
    )
    assert system == "Be terse."
    assert "memory/2024-03-05.md" in user and NO_REPLY in user
    assert "<conversation>\n[User]: hi\n</conversation>" in user
    default_system, default_user = flush_prompts("[User]: hi", "2024-03-05")
    assert NO_REPLY in default_system and "memory/2024-03-05.md" in default_user
