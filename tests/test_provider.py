"""``compactd summarize --json``, the command OpenClaw's compaction-provider plugin runs (no gateway here).

The real command as a subprocess, its summarizer the stub server on 127.0.0.1: OpenClaw's request in
({messages, previousSummary, customInstructions}, pi message objects), ``{"summary"}`` out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import INHERITED_NOT, REPO
from tests.support.llm_server import RecordedRequest, Reply, StubLLMServer
from tests.support.openclaw import SUMMARY_HEADINGS, plain_summary

IDENTIFIERS = ("ZX-4411", "/srv/app/billing/ledger.py", "https://wiki.example.com/runbook/zx-4411")
SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"


def write_config(tmp_path: Path, llm: StubLLMServer | None, **summarizer: Any) -> Path:
    config: dict[str, Any] = {"state_dir": str(tmp_path / "state")}
    if llm is not None:
        config["summarizer"] = {"base_url": llm.base_url, "model": "stub-model", "retry": {"attempts": 1}}
        config["summarizer"].update(summarizer)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), "utf-8")
    return path


def conversation() -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": f"Ticket {IDENTIFIERS[0]}: fix {IDENTIFIERS[1]} (runbook {IDENTIFIERS[2]}). Key {SECRET}.",
            "timestamp": 1,
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading the ledger."},
                {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": IDENTIFIERS[1]}},
            ],
            "stopReason": "toolUse",
            "timestamp": 2,
        },
        {
            "role": "toolResult",
            "toolCallId": "call_1",
            "toolName": "read",
            "content": [{"type": "text", "text": "def post(entry): ..."}],
            "details": {"raw": "DETAILS-ONLY-7Q"},
            "isError": False,
            "timestamp": 3,
        },
        {
            "role": "custom",
            "customType": "openclaw.runtime-context",
            "content": "RUNTIME-CONTEXT-9W",
            "display": False,
            "timestamp": 4,
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Fixed the rounding."}], "timestamp": 5},
    ]


def summarize(payload: Any, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``compactd summarize --json`` with ``payload`` (JSON-encoded unless a str) on stdin."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    env = {k: v for k, v in os.environ.items() if k not in INHERITED_NOT}
    return subprocess.run(
        [sys.executable, "-m", "compactd", "summarize", "--json", "--config", str(config), *args],
        cwd=REPO,
        input=data,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.slow  # a provider process; repair is unit-tested in test_identifiers
def test_summary_repairs_the_identifiers_the_model_dropped(tmp_path: Path, llm_server: StubLLMServer) -> None:
    llm_server.responder = lambda request: plain_summary()
    config = write_config(tmp_path, llm_server)

    done = summarize({"messages": conversation(), "previousSummary": None}, config)

    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["level"] == "llm" and llm_server.completions
    for heading in SUMMARY_HEADINGS:
        assert heading in answer["summary"]
    for identifier in IDENTIFIERS:
        assert identifier in answer["summary"]


def test_secrets_details_and_runtime_context_never_reach_the_model(
    tmp_path: Path, llm_server: StubLLMServer
) -> None:
    llm_server.responder = lambda request: plain_summary()
    config = write_config(tmp_path, llm_server)

    done = summarize({"messages": conversation()}, config)

    assert done.returncode == 0, done.stderr
    sent = b"\n".join(r.raw for r in llm_server.completions).decode()
    assert "Fixed the rounding" in sent  # the span did reach the model
    for hidden in (SECRET, "DETAILS-ONLY-7Q", "RUNTIME-CONTEXT-9W"):
        assert hidden not in sent
        assert hidden not in done.stdout


@pytest.mark.slow  # a provider process; the engine's fallback tests stay in the inner loop
def test_a_failing_model_gives_the_digest(tmp_path: Path, llm_server: StubLLMServer) -> None:
    llm_server.responder = lambda request: Reply.error(500, "model down")
    config = write_config(tmp_path, llm_server)

    done = summarize(
        {"messages": conversation(), "previousSummary": "## Decisions\n- Use port 8443."}, config
    )

    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["level"] == "digest"
    assert "8443" in answer["summary"]  # the previous summary is carried
    for identifier in IDENTIFIERS:
        assert identifier in answer["summary"]


@pytest.mark.slow  # provider processes; secrets and the digest fallback stay in the inner loop
def test_chunks_are_sized_to_the_summarizers_window(tmp_path: Path, llm_server: StubLLMServer) -> None:
    llm_server.responder = lambda request: plain_summary()
    config = write_config(tmp_path, llm_server, context_tokens=4096, max_output_tokens=512)
    words = "lorem ipsum dolor sit amet consectetur adipiscing elit " * 60
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"part {i}: {words}", "timestamp": i}
        for i in range(40)
    ]

    done = summarize({"messages": messages}, config)

    assert done.returncode == 0, done.stderr
    assert len(llm_server.completions) > 2  # chunks plus a merge
    for request in llm_server.completions:
        assert len(request.raw) < 4096 * 4  # each prompt fits the 4096-token window


@pytest.mark.slow  # a provider process
def test_the_workspace_rules_are_in_the_summary(tmp_path: Path, llm_server: StubLLMServer) -> None:
    llm_server.responder = lambda request: plain_summary()
    config = write_config(tmp_path, llm_server)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "AGENTS.md").write_text("# Rules\n\n## Red Lines\n\n- Never force-push to main.\n", "utf-8")

    done = summarize({"messages": conversation()}, config, "--workspace", str(workspace))

    assert done.returncode == 0, done.stderr
    assert "Never force-push to main." in json.loads(done.stdout)["summary"]


@pytest.mark.slow  # a provider process
def test_custom_instructions_reach_the_prompt(tmp_path: Path, llm_server: StubLLMServer) -> None:
    seen: list[RecordedRequest] = []

    def respond(request: RecordedRequest) -> str:
        seen.append(request)
        return plain_summary()

    llm_server.responder = respond
    config = write_config(tmp_path, llm_server)

    done = summarize({"messages": conversation(), "customInstructions": "Focus on FOCUS-MARK-3."}, config)

    assert done.returncode == 0, done.stderr
    assert any("FOCUS-MARK-3" in r.raw.decode() for r in seen)


@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        # one process each: one case is the inner loop's, the rest the full run's
        *(
            pytest.param(payload, marks=pytest.mark.slow)
            for payload in (
                "",
                "[1, 2]",
                '{"messages": []}',
                '{"messages": "hello"}',
                '{"messages": [1]}',
                '{"messages": [{"content": "no role"}]}',
                '{"messages": [{"role": "user", "content": "x"}], "previousSummary": 5}',
            )
        ),
    ],
)
def test_bad_input_is_a_clear_error_with_nothing_on_stdout(tmp_path: Path, payload: str) -> None:
    config = write_config(tmp_path, None)

    done = summarize(payload, config)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("compactd summarize: ")


def test_no_summarizer_configured_gives_the_digest(tmp_path: Path) -> None:
    done = summarize({"messages": conversation()}, write_config(tmp_path, None))

    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["level"] == "digest" and IDENTIFIERS[0] in answer["summary"]


@pytest.mark.slow  # 256 MiB through a pipe
def test_oversize_input_is_refused_having_read_at_most_the_limit(tmp_path: Path) -> None:
    """A request that never ends: the command stops reading one byte past the limit and says so, without
    waiting for the end. The bytes it consumed are those written less those still in the pipe (this process
    keeps the pipe's read end open to count them)."""
    import fcntl
    import select
    import struct
    import termios
    import time

    from compactd.commands.provider import INPUT_MAX_BYTES

    config = write_config(tmp_path, None)
    env = {k: v for k, v in os.environ.items() if k not in INHERITED_NOT}
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1024 * 1024)  # fewer round trips for 256 MiB
    child = subprocess.Popen(
        [sys.executable, "-m", "compactd", "summarize", "--json", "--config", str(config)],
        cwd=REPO,
        stdin=read_end,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    total = INPUT_MAX_BYTES + 64 * 1024 * 1024
    chunk = b'{"messages": [' + b" " * (1024 * 1024)
    written = 0
    os.set_blocking(write_end, False)
    deadline = time.monotonic() + 120
    try:
        while written < total and child.poll() is None and time.monotonic() < deadline:
            select.select([], [write_end], [], 0.1)
            try:
                written += os.write(write_end, chunk[: total - written])
            except BlockingIOError:
                continue
            chunk = chunk.replace(b'{"messages": [', b"              ")
    finally:
        os.close(write_end)
    _, err = child.communicate(timeout=120)
    unread = struct.unpack("i", fcntl.ioctl(read_end, termios.FIONREAD, b"\0\0\0\0"))[0]
    os.close(read_end)

    assert child.returncode == 2
    assert written - unread <= INPUT_MAX_BYTES + 1
    assert written < total  # refused while the writer still had more to send
    assert err.decode() == f"compactd summarize: input is larger than {INPUT_MAX_BYTES} bytes\n"


@pytest.mark.parametrize(
    "payload",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"messages": [{"role": "user", "content": ' + "[" * 900 + "]" * 900 + "}]}",
    ],
    ids=["100000-deep", "900-deep-in-content"],
)
def test_deep_nesting_is_a_one_line_error(tmp_path: Path, payload: str) -> None:
    done = summarize(payload, write_config(tmp_path, None))

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("compactd summarize: input nests ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
