"""The real pi agent (``pi -p``, then ``pi -c -p``) against a scripted model, with ``compactd run`` watching it.

What issue 10 tried by hand, kept in the suite: pi 0.73.1's own CLI in print mode talks to an
OpenAI-compatible stub on 127.0.0.1 that makes it read large files with its ``read`` tool; its session grows past
a small window; ``compactd run`` (a subprocess watching pi's sessions directory) compacts it; pi continues with
``-c`` and its next request to the model is what the agent really works with after a compaction.

pi runs offline in a throwaway agent directory (``PI_CODING_AGENT_DIR``: ``models.json`` names the stub,
``settings.json`` turns off pi's own compaction and retries) with ``--no-context-files``, so the AGENTS.md red
line can only reach the model through compactd. compactd's summarizer is a second stub, so its requests never
mix with the agent's. Every wait polls an observable condition with a deadline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from compactd.reading import read_transcript

from tests.support.llm_server import RecordedRequest, Reply, StubLLMServer
from tests.support.node24 import node24_bin
from tests.support.pi import PI_1_VERSION, PI_VERSION, pi_package_dir
from tests.test_service_e2e import wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PROVIDER = "stub"
MODEL = "stub-model"
FILE_CHARS = 12_000  # each file the agent reads: one tool result of about 3,000 tokens
PI_TIMEOUT_SECONDS = 90.0
RED_LINE = "Never delete a notes file without asking the user first."
AGENTS_MD = f"# Notes agent\n\n## Session Startup\nRead the newest notes first.\n\n## Red Lines\n{RED_LINE}\n"
SUMMARY_MARKER = "SUMMARY-MARKER-5c1e"
NOTE_FILE = re.compile(r"notes_\d+\.txt")


def note_text(n: int) -> str:
    """A file of exactly FILE_CHARS characters whose every line says which file and line it is."""
    lines = []
    size = 0
    i = 0
    while size < FILE_CHARS:
        line = f"notes_{n:02d} line {i:03d}: ledger shard {n}-{i} balanced, checksum {(n * 7919 + i) % 65521:05d}\n"
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines)[:FILE_CHARS]


# --- the scripted model ---------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


class ScriptedAgentModel:
    """The model behind pi: it reads, one call per round, every ``notes_NN.txt`` the latest user prompt names,
    then answers in text. Usage is reported as a server would (the prompt's bytes / 4), so pi's own token
    estimate, and compactd's, grow with the session. A gate in ``holds`` holds the next answer until the test
    opens it: a slow model, one gate per request."""

    def __init__(self, server: StubLLMServer) -> None:
        self.holds: list[threading.Event] = []
        server.responder = self.respond

    def respond(self, request: RecordedRequest) -> Reply:
        messages = request.messages
        last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        wanted = NOTE_FILE.findall(_text(messages[last_user].get("content")))
        read = [
            json.loads(call["function"]["arguments"])["path"]
            for m in messages[last_user:]
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
        ]
        reply: dict[str, Any] = {"prompt_tokens": len(request.raw) // 4, "completion_tokens": 24}
        if self.holds:
            reply["hold"] = self.holds.pop(0)
        pending = [name for name in wanted if name not in read]
        if pending:
            name = pending[0]
            call = {
                "index": 0,
                "id": f"call_{len(request.raw)}_{name}",
                "type": "function",
                "function": {"name": "read", "arguments": json.dumps({"path": name})},
            }
            return Reply.completion(
                None, finish_reason="tool_calls", extra_message={"tool_calls": [call]}, **reply
            )
        answer = f"Read {', '.join(read)}: every shard is balanced." if read else "Noted."
        return Reply.completion(answer, **reply)


def summarizer_responder(request: RecordedRequest) -> Reply:
    return Reply.completion(
        "\n".join(
            [
                "## Decisions",
                f"- {SUMMARY_MARKER}: the ledger shards in notes_01..03 are balanced.",
                "## Open TODOs",
                "- Keep reading the newer notes files.",
                "## Constraints/Rules",
                "- Report every unbalanced shard.",
                "## Pending user asks",
                "- none",
                "## Exact identifiers",
                "- notes_01.txt, notes_02.txt, notes_03.txt",
            ]
        )
    )


# --- pi and compactd as subprocesses ------------------------------------------------------------------------


class PiAgent:
    """pi's CLI in a throwaway agent directory, working in ``workspace`` (AGENTS.md and the notes files)."""

    def __init__(self, tmp: Path, model: StubLLMServer, window: int, version: str = PI_VERSION) -> None:
        self.version = version
        self.agent_dir = tmp / "pi-agent"
        self.workspace = tmp / "workspace"
        self.home = tmp / "home"
        for folder in (self.agent_dir, self.workspace, self.home):
            folder.mkdir(parents=True)
        self.sessions_root = self.agent_dir / "sessions"
        (self.workspace / "AGENTS.md").write_text(AGENTS_MD)
        provider = {
            "baseUrl": model.base_url,
            "api": "openai-completions",
            "apiKey": "stub-key",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": MODEL, "contextWindow": window, "maxTokens": 1024}],
        }
        (self.agent_dir / "models.json").write_text(json.dumps({"providers": {PROVIDER: provider}}))
        settings = {
            "compaction": {"enabled": False},  # compactd is the one compacting here
            "retry": {"enabled": False},
            "quietStartup": True,
            "enableInstallTelemetry": False,
        }
        (self.agent_dir / "settings.json").write_text(json.dumps(settings))
        package = pi_package_dir(version)  # installs the pinned package when missing: never skips
        self.cli = package / json.loads((package / "package.json").read_text())["bin"]["pi"]
        self.node = str(node24_bin() / "node") if version != PI_VERSION else shutil.which("node") or "node"
        self.prompts: list[str] = []

    def write_notes(self, count: int) -> dict[str, str]:
        texts = {f"notes_{n:02d}.txt": note_text(n) for n in range(1, count + 1)}
        for name, text in texts.items():
            (self.workspace / name).write_text(text)
        return texts

    def start(self, prompt: str, *, resume: bool = True) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "HOME": str(self.home),
            "PI_CODING_AGENT_DIR": str(self.agent_dir),
            "PI_OFFLINE": "1",
            "PI_SKIP_VERSION_CHECK": "1",
            "PI_TELEMETRY": "0",
        }
        command = [self.node, str(self.cli), "--provider", PROVIDER, "--model", MODEL, "--tools", "read"]
        command += ["--no-context-files", "--no-extensions", "--no-skills", "--no-prompt-templates"]
        command += ["--no-themes", *(["--no-mcp"] if self.version != PI_VERSION else [])]
        command += [*(["-c"] if resume else []), "-p", prompt]
        self.prompts.append(prompt)
        return subprocess.Popen(
            command,
            cwd=self.workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, prompt: str, *, resume: bool = True) -> str:
        proc = self.start(prompt, resume=resume)
        return self.finish(proc)

    def finish(self, proc: subprocess.Popen[str]) -> str:
        try:
            out, err = proc.communicate(timeout=PI_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"pi did not finish within {PI_TIMEOUT_SECONDS}s:\n{out[-2000:]}\n{err[-2000:]}")
        assert proc.returncode == 0, f"pi exited with {proc.returncode}:\n{out[-2000:]}\n{err[-2000:]}"
        return out

    def session_files(self) -> list[Path]:
        return sorted(self.sessions_root.glob("*/*.jsonl"))

    def session(self) -> Path:
        files = self.session_files()
        assert len(files) == 1, f"pi wrote {len(files)} sessions: {files}"
        return files[0]


class Compactd:
    def __init__(
        self, tmp: Path, root: Path, summarizer: StubLLMServer, window: int, **overrides: Any
    ) -> None:
        self.state = tmp / "state"
        self.config_path = tmp / "compactd.yaml"
        self.log_path = tmp / "compactd.log"
        config: dict[str, Any] = {
            "sessions": {"roots": [str(root / "*")], "idle_seconds": 1.0},
            "models": {"providers": {PROVIDER: {"models": {MODEL: {"context_tokens": window}}}}},
            "compaction": {"keep_recent_turns": 2},
            "memory_flush": {"enabled": False},
            "summarizer": {
                "base_url": summarizer.base_url,
                "model": "summarizer-model",
                "context_tokens": 32_768,
                "timeout_seconds": 30,
            },
            "service": {"status_refresh_seconds": 0.2, "rescan_seconds": 1.0},
            "state_dir": str(self.state),
        }
        for key, value in overrides.items():
            config.setdefault(key, {}).update(value)
        self.config_path.write_text(yaml.safe_dump(config))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("JOURNAL_STREAM", "STATE_DIRECTORY", "NOTIFY_SOCKET")
        }
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "compactd",
                    "run",
                    "--config",
                    str(self.config_path),
                    "--log-level",
                    "debug",
                ],
                cwd=REPO,
                env={**env, "PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=log,
            )
        wait_for(lambda: self.alive() and "action=ready" in self.log(), 30, "compactd to be ready")

    def alive(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail(f"compactd exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def journal(self) -> list[dict[str, Any]]:
        path = self.state / "journal.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def commits(self, path: Path) -> list[dict[str, Any]]:
        """The commits compactd finished on ``path``: each intent with its ``done`` record."""
        records = self.journal()
        done = {r["tx"]: r for r in records if r.get("rec") == "done" and r.get("status") == "committed"}
        return [
            {**r, "done": done[r["tx"]]}
            for r in records
            if r.get("rec") == "intent" and r.get("path") == str(path) and r["tx"] in done
        ]

    def intents(self, path: Path) -> list[dict[str, Any]]:
        return [r for r in self.journal() if r.get("rec") == "intent" and r.get("path") == str(path)]

    def inspect(self, path: Path) -> dict[str, Any]:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "compactd",
                "inspect",
                str(path),
                "--json",
                "--config",
                str(self.config_path),
            ],
            cwd=REPO,
            capture_output=True,
            timeout=60,
            check=True,
        )
        value: dict[str, Any] = json.loads(done.stdout)
        return value

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def summarizer() -> Iterator[StubLLMServer]:
    server = StubLLMServer().start()
    server.responder = summarizer_responder
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def daemons() -> Iterator[list[Compactd]]:
    made: list[Compactd] = []
    yield made
    for daemon in made:
        daemon.stop()


# --- helpers over what pi wrote -----------------------------------------------------------------------------


def texts_in(path: Path) -> set[str]:
    """Every user prompt and tool-result text in a transcript (any branch, any entry)."""
    found: set[str] = set()
    for entry in read_transcript(path).entries:
        message = entry.get("message")
        if isinstance(message, dict) and message.get("role") in ("user", "toolResult"):
            found.add(_text(message.get("content")))
    return found


def tool_messages(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.messages if m.get("role") == "tool"]


def iso(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# --- the tests ----------------------------------------------------------------------------------------------

# A 37,200-token window: compactd's prompt budget is 17,200 (window - 20,000 reserve). The first turn reads three
# files (about 11.7k tokens with the 1.2 margin), the second a fourth (15.4k), the third a fifth (19.6k): over.
# Pruning is not this test's subject (tests/test_prune_after_summary.py): the per-result and aggregate caps are
# above the 60,000 characters of results, so the summary alone must bring the session back (route compact_only).
WINDOW = 37_200
NO_PRUNING = {"tool_result_share": 0.5, "tool_result_max_chars": 64_000}


def fill_line(log: str) -> str:
    """The commit's ``fill: before -> after`` report from compactd's log."""
    return next((line.split(" fill: ", 1)[1] for line in log.splitlines() if " fill: " in line), "?")


def system_messages_after(path: Path, entry_type: str) -> list[dict[str, Any]]:
    """The system-message entries pi appended after the last ``entry_type`` entry of the file."""
    entries = read_transcript(path).entries
    last = max(i for i, e in enumerate(entries) if e.get("type") == entry_type)
    return [
        e
        for e in entries[last + 1 :]
        if isinstance(e.get("message"), dict) and e["message"].get("role") == "system"
    ]


@pytest.mark.parametrize(
    ("version", "mode"),
    [(PI_VERSION, "rotate"), (PI_VERSION, "append"), (PI_1_VERSION, "rotate"), (PI_1_VERSION, "append")],
)
def test_pi_continues_on_the_compacted_session_with_summary_red_line_and_kept_turns(
    tmp_path: Path,
    llm_server: StubLLMServer,
    summarizer: StubLLMServer,
    daemons: list[Compactd],
    version: str,
    mode: str,
) -> None:
    """In append mode too: the README's caveat (a live agent's next line bypasses an appended compaction) does
    not apply to ``pi -c``, which loads the file again and so starts from the compaction. With pi 1.x the
    compaction carries pi's system checkpoint: the next request has the same prompt and tools, once, and pi
    re-declares nothing."""
    started = time.monotonic()
    ScriptedAgentModel(llm_server)
    pi = PiAgent(tmp_path, llm_server, WINDOW, version)
    notes = pi.write_notes(5)
    compactd = Compactd(
        tmp_path, pi.sessions_root, summarizer, WINDOW, compaction={"commit": mode, **NO_PRUNING}
    )
    daemons.append(compactd)
    compactd.start()

    pi.run("Read notes_01.txt, notes_02.txt and notes_03.txt and check the shards.", resume=False)
    path = pi.session()
    pi.run("Now read notes_04.txt and check it too.")
    assert compactd.inspect(path)["route"] == "fits"
    pi.run("And notes_05.txt, please.")
    before = llm_server.completions[-1]  # the turn's last request: the whole session
    grown = time.monotonic()

    commits = wait_for(lambda: compactd.commits(path), 60, "compactd to commit the compaction")
    assert [c["op"] for c in commits] == [mode]
    compacted = time.monotonic()
    sent = len(llm_server.completions)
    pi.run("Which notes files have you read so far?")
    after = llm_server.completions[sent]  # the first request pi made from the compacted session
    finished = time.monotonic()
    sizes = f"request before compaction {len(before.raw):,} bytes, after {len(after.raw):,} bytes"

    messages = after.messages
    assert (
        messages[0]["role"] == "system" and RED_LINE not in messages[0]["content"]
    )  # -nc: pi skipped AGENTS.md
    # One system prompt, the one the model had before (a provider's prompt cache still holds it), and the same
    # tools: pi 1.x restores them from the checkpoint and re-declares nothing into the file.
    assert [m for m in messages if m["role"] == "system"] == [before.messages[0]]
    assert after.json.get("tools") == before.json.get("tools")
    if version == PI_1_VERSION:
        assert system_messages_after(path, "compaction") == []
        assert compactd.inspect(path)["rules"].startswith("pi 1.x")
    # The summary comes first, as pi renders a compaction for the model ...
    assert messages[1]["role"] == "user" and SUMMARY_MARKER in _text(messages[1]["content"]), messages[1]
    # ... the red line comes from compactd's post-compaction message, not from the summary ...
    assert RED_LINE not in _text(messages[1]["content"])
    refresh = [m for m in messages[2:] if RED_LINE in _text(m.get("content"))]
    assert len(refresh) == 1 and refresh[0]["role"] == "user", "the AGENTS.md red line is missing"
    # ... the two kept turns are what the model saw before, message for message (their prompts, tool calls, the
    # reads' full text), followed only by the turn's last answer ...
    start = next(i for i, m in enumerate(before.messages) if _text(m.get("content")) == pi.prompts[1])
    kept = before.messages[start:]
    at = messages.index(kept[0])
    assert messages[at : at + len(kept)] == kept
    assert tool_messages(after) == [notes["notes_04.txt"], notes["notes_05.txt"]]
    assert _text(messages[-1]["content"]) == pi.prompts[-1]
    # ... and what was summarized is gone from the request, which is far smaller.
    users = [_text(m["content"]) for m in messages if m.get("role") == "user"]
    assert pi.prompts[0] not in users
    assert not any(notes[f"notes_0{n}.txt"] in after.raw.decode() for n in (1, 2, 3))
    assert len(after.raw) < 0.6 * len(before.raw), sizes

    # Every prompt and every tool result is in the live file or an archive.
    archives = sorted(path.parent.glob(path.name + ".bak.*"))
    assert len(archives) == (1 if mode == "rotate" else 0)
    found: set[str] = set().union(*(texts_in(f) for f in [path, *archives]))
    for text in [*pi.prompts, *notes.values()]:
        assert text in found, f"lost: {text[:80]!r}"

    print(
        f"\n[pi {version}, {mode}] {sizes}; fill {fill_line(compactd.log())}; pi grew the session in {grown - started:.1f}s, "
        f"compactd committed {compacted - grown:.1f}s after the turn, pi -c took {finished - compacted:.1f}s"
    )


MODEL_SECONDS = 3.0  # the slow model's answer time, longer than idle_seconds (1 s)
PASTED_LOG = "".join(
    f"2026-12-01T09:{i // 60:02d}:{i % 60:02d}Z ledger audit entry {i:04d} ok\n" for i in range(560)
)


def test_a_slow_model_turn_in_flight_is_not_committed_mid_turn(
    tmp_path: Path, llm_server: StubLLMServer, summarizer: StubLLMServer, daemons: list[Compactd]
) -> None:
    """The user pastes a long log: the session is over its threshold from the user's message on, while the
    model takes 3 s for each answer (idle_seconds is 1 s). compactd must wait for the turn to end: no commit
    while either request is held; one commit after the turn's last answer."""
    started = time.monotonic()
    model = ScriptedAgentModel(llm_server)
    pi = PiAgent(tmp_path, llm_server, WINDOW)
    notes = pi.write_notes(4)
    compactd = Compactd(
        tmp_path, pi.sessions_root, summarizer, WINDOW, compaction={"keep_recent_turns": 1, **NO_PRUNING}
    )
    daemons.append(compactd)
    compactd.start()
    pi.run("Read notes_01.txt, notes_02.txt and notes_03.txt and check the shards.", resume=False)
    path = pi.session()
    assert compactd.inspect(path)["route"] == "fits"

    gates = [llm_server.gate(), llm_server.gate()]  # the tool call, then the answer after the read
    model.holds.extend(gates)
    sent = len(llm_server.completions)
    proc = pi.start(f"Here is today's audit log:\n{PASTED_LOG}\nCheck it against notes_04.txt.")
    held: list[str] = []

    def not_committed_mid_turn(number: int, figures: dict[str, Any]) -> None:
        mid_turn = compactd.intents(path)
        assert mid_turn == [], (
            f"compactd committed while request {number} of the turn was held by the model (the session read "
            f"{figures['estimated_with_margin']:,} of {figures['compact_threshold']:,} tokens then): "
            f"{[(r['op'], r['ts']) for r in mid_turn]}\n"
            + "\n".join(line for line in compactd.log().splitlines() if "committed" in line)
        )

    for number, gate in enumerate(gates, 1):
        llm_server.wait_for_requests(sent + number, timeout=PI_TIMEOUT_SECONDS)
        # pi wrote the turn so far before asking the model: the session is over its threshold, mid-turn.
        expect = pi.prompts[-1] if number == 1 else notes["notes_04.txt"]
        wait_for(
            lambda expect=expect: expect in texts_in(path),
            30,
            f"pi to write the turn before request {number}",
        )
        figures = compactd.inspect(path)
        # First: after a commit the figures would be those of the compacted file.
        not_committed_mid_turn(number, figures)
        assert figures["route"] != "fits", figures
        held.append(f"{figures['estimated_with_margin']:,} of {figures['compact_threshold']:,}")
        # The model is slow: the file stays quiet for MODEL_SECONDS, longer than idle_seconds.
        wait_for(
            lambda: compactd.intents(path) or time.time() - path.stat().st_mtime >= MODEL_SECONDS,
            MODEL_SECONDS + 30,
            "the slow model's answer time",
        )
        not_committed_mid_turn(number, figures)
        gate.set()
    turn_ended = time.time()
    pi.finish(proc)

    commits = wait_for(lambda: compactd.commits(path), 60, "the compaction once the turn has ended")
    assert len(commits) == 1 and iso(commits[0]["ts"]) >= turn_ended - 0.001, (commits, turn_ended)
    archives = sorted(path.parent.glob(path.name + ".bak.*"))
    found: set[str] = set().union(*(texts_in(f) for f in [path, *archives]))
    for text in [*pi.prompts, *notes.values()]:
        assert text in found, f"lost: {text[:80]!r}"
    print(
        f"\nheld at {held[0]} and {held[1]} tokens with the margin, {MODEL_SECONDS:.0f}s each; committed "
        f"{iso(commits[0]['ts']) - turn_ended:.1f}s after the turn ended; fill {fill_line(compactd.log())}; "
        f"{time.monotonic() - started:.1f}s in all"
    )


def test_pi_1_shows_a_pruning_compactd_appended_as_context_edits(
    tmp_path: Path, llm_server: StubLLMServer, summarizer: StubLLMServer, daemons: list[Compactd]
) -> None:
    """pi 1.x prunes with ``context_edit`` entries, and so does compactd: the reads that overflow the window are
    cut (their head kept, and the entry holding the whole named) by edits appended to the file, not one byte before them rewritten, no archive;
    ``pi -c`` sends the shortened results and everything else as it was, with the same prompt."""
    ScriptedAgentModel(llm_server)
    pi = PiAgent(tmp_path, llm_server, WINDOW, PI_1_VERSION)
    notes = pi.write_notes(5)
    compactd = Compactd(
        tmp_path, pi.sessions_root, summarizer, WINDOW, compaction={"tool_result_max_chars": 4_000}
    )
    daemons.append(compactd)
    compactd.start()
    pi.run("Read notes_01.txt, notes_02.txt and notes_03.txt and check the shards.", resume=False)
    path = pi.session()
    pi.run("Now read notes_04.txt and check it too.")
    pi.run("And notes_05.txt, please.")
    before = llm_server.completions[-1]
    grown = path.read_bytes()

    commits = wait_for(lambda: compactd.commits(path), 60, "compactd to commit the pruning")
    assert [c["op"] for c in commits] == ["append"], commits
    data = path.read_bytes()
    assert data.startswith(grown)  # not one byte of what pi wrote is rewritten
    added = [json.loads(line) for line in data[len(grown) :].splitlines()]
    assert added and {e["type"] for e in added} == {"context_edit"}
    assert not list(path.parent.glob(path.name + ".bak.*"))
    assert compactd.inspect(path)["route"] == "fits"

    sent = len(llm_server.completions)
    pi.run("Which notes files have you read so far?")
    after = llm_server.completions[sent]
    results = tool_messages(after)
    assert len(results) == len(tool_messages(before)) == 5
    cut = [r for r in results if "more characters truncated" in r]
    assert len(cut) == len(added)
    ids = {e.get("id") for e in read_transcript(path).entries}
    for text in cut:  # the head of the read is kept (the tail too when it matters), and where the rest is
        kept, note = text.split("[... ", 1)
        assert any(body.startswith(kept.rstrip("\n")) for body in notes.values()), kept[:200]
        assert re.search(r"full text in entry (\w+)\]$", note) and note.rsplit(" ", 1)[1][:-1] in ids
    assert [m for m in after.messages if m["role"] == "system"] == [before.messages[0]]
    assert system_messages_after(path, "context_edit") == []
    user_prompts = [_text(m["content"]) for m in after.messages if m["role"] == "user"]
    assert user_prompts == pi.prompts
    print(
        f"\n[pi {PI_1_VERSION}, pruning] request before {len(before.raw):,} bytes, after {len(after.raw):,} "
        f"bytes; {len(added)} context edits appended ({len(data) - len(grown):,} bytes), 0 bytes rewritten; "
        f"fill {fill_line(compactd.log())}"
    )


# Issue 18 item 3: a 17,200-token window and a 5,200 reserve make a 12,000 threshold; the caps are above the
# reads, so the route is a compaction (as in the case tried by hand), and the commit appends, as it did there.
SMALL_WINDOW = 17_200
ROOM = {"reserve_tokens": 5_200, "keep_recent_turns": 3, "commit": "append"}
NO_CAPS = {"tool_result_share": 1.0, "tool_result_max_chars": 64_000}
TURNS_AFTER = 5


def status_row(compactd: Compactd, path: Path) -> dict[str, Any] | None:
    """The session's row in the daemon's ``status.json`` (None until it is written)."""
    try:
        doc = json.loads((compactd.state / "status.json").read_text())
    except (OSError, ValueError):
        return None
    return next((row for row in doc.get("sessions", []) if row.get("path") == str(path)), None)


def settle(compactd: Compactd, path: Path, commits: int) -> int:
    """Wait until compactd has dealt with the session as pi left it: a new commit, or a decision on the file
    as it is now (the figure ``inspect`` reads) that nothing is due. The number of commits then."""
    figure = compactd.inspect(path)["estimated_with_margin"]

    def settled() -> bool:
        if len(compactd.commits(path)) > commits:
            return True
        row = status_row(compactd, path)
        return row is not None and row["planning_tokens"] == figure and row["next_action"] is None

    wait_for(lambda: compactd.alive() and settled(), 60, "compactd to decide on the turn")
    return len(compactd.commits(path))


def commit_fills(log: str) -> list[str]:
    return [line.split(" fill: ", 1)[1] for line in log.splitlines() if " fill: " in line]


def test_a_compaction_leaves_room_for_the_next_turns(
    tmp_path: Path, llm_server: StubLLMServer, summarizer: StubLLMServer, daemons: list[Compactd]
) -> None:
    """Three 12 KB reads in the last three turns, then five more turns that read one each: compactd used to
    leave the session just under its threshold and compact again after every turn; now the fill after a
    compaction is at most 60 % of the threshold and the five turns see at most one more compaction."""
    ScriptedAgentModel(llm_server)
    pi = PiAgent(tmp_path, llm_server, SMALL_WINDOW)
    pi.write_notes(3 + TURNS_AFTER)
    compactd = Compactd(tmp_path, pi.sessions_root, summarizer, SMALL_WINDOW, compaction={**ROOM, **NO_CAPS})
    daemons.append(compactd)
    compactd.start()

    pi.run("Hello: I will send you notes files to check, one at a time.", resume=False)
    path = pi.session()
    for n in (1, 2, 3):
        pi.run(f"Read notes_{n:02d}.txt and check its shards.")
    before = llm_server.completions[-1]
    first = wait_for(lambda: compactd.commits(path), 60, "the first compaction")
    assert len(first) == 1, first
    sent = len(llm_server.completions)
    count = len(first)
    per_turn = []
    for n in range(4, 4 + TURNS_AFTER):
        pi.run(f"Now read notes_{n:02d}.txt and check it too.")
        now = settle(compactd, path, count)
        per_turn.append(now - count)
        count = now
    after = llm_server.completions[sent]  # the first request pi made from the compacted session
    threshold = compactd.inspect(path)["compact_threshold"]
    lines = commit_fills(compactd.log())
    after_figures = [int(line.split(" -> ", 1)[1].split(" of ", 1)[0].replace(",", "")) for line in lines]
    summary = (
        f"compactions in the {TURNS_AFTER} turns after the first: {sum(per_turn)} {per_turn}; fills after each "
        f"compaction: {[f'{a:,} ({100 * a / threshold:.0f}%)' for a in after_figures]} of {threshold:,}; "
        f"request before the first compaction {len(before.raw):,} bytes, after {len(after.raw):,} bytes"
    )
    print(f"\n[room to work] {summary}")
    assert threshold == 12_000
    assert sum(per_turn) <= 1, summary
    assert after_figures and all(a <= 0.6 * threshold for a in after_figures), summary
