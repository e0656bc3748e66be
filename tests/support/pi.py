"""pi's real session loader and writer as a test oracle: npm ``@mariozechner/pi-coding-agent@0.73.1`` (the
default) and ``@earendil-works/pi-coding-agent@1.6.0`` (``version="1.6.0"``, on Node 24).

Many tests use pi itself as the judge of whether a transcript loads and what an agent would see after
loading it. The node scripts live in ``tests/pi/``; this module installs the package when it is missing, runs
the scripts and parses their JSON with the standard ``json`` module (pi's output may hold lone surrogates,
which orjson rejects). Loads, writes and one-shot exchanges go to one long-lived ``server.mjs`` per pytest
process (node's start-up and pi's imports cost about 0.8 s of CPU, the judgement itself milliseconds); it
runs the very functions of ``load.mjs`` and ``write.mjs`` and is restarted when it dies, times out, or the
environment it was started with changes.

List this module in ``pytest_plugins`` to get the fixtures ``pi`` (a :class:`Pi`) and ``pi_session_factory``.

- :func:`pi_package_dir` – the installed package directory (installs it once, under a file lock).
- :func:`pi_load` / :func:`pi_load_many` – what ``SessionManager.open`` makes of files (on temp copies).
- :func:`pi_write` / :func:`pi_write_many` – sessions written by pi's own ``SessionManager`` from op lists.
- :func:`pi_append_exchange` – open a file with pi and append a user message and an assistant reply.
- :class:`PiLiveSession` – a ``SessionManager`` kept open, appending from its in-memory leaf on request.
- :class:`NodeAppender` – a node process appending numbered entries by path exactly as pi does.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from tests.support.cache import cache_dir, install_once, installed_version, npm_install_pinned
from tests.support.node24 import node24_bin

PI_VERSION = "0.73.1"  # the default judge
PI_1_VERSION = "1.6.0"
# Each pinned pi: its npm package (renamed at 1.0) and whether it needs Node >= 22 (tests.support.node24).
PI_PACKAGES = {PI_VERSION: "@mariozechner/pi-coding-agent", PI_1_VERSION: "@earendil-works/pi-coding-agent"}
PI_VERSIONS = tuple(PI_PACKAGES)
SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "pi"
# Loading the real fixtures (10 MB) takes about a second; a parentId cycle makes pi loop forever.
NODE_TIMEOUT_SECONDS = 120.0

JsonDict = dict[str, Any]
# Mirrors CLIP_DEPTH in tests/pi/load.mjs.
CLIP_DEPTH = 64


class PiError(RuntimeError):
    """pi (or one of our node scripts around it) failed; the message carries node's error output."""


# ------------------------------------------------------------------------------------------------------------
# Installation


def _install_root(version: str) -> Path:
    return cache_dir(f"pi-{version}", "COMPACTD_PI_DIR" if version == PI_VERSION else "COMPACTD_PI1_DIR")


def _package_path(root: Path, version: str) -> Path:
    return root / "node_modules" / PI_PACKAGES[version]


def _installed_version(package: Path) -> str | None:
    return installed_version(package, "dist/core/compaction/compaction.js")


def _needs_node24(version: str) -> bool:
    return int(version.split(".")[0]) >= 1


def _node(version: str = PI_VERSION) -> str:
    if _needs_node24(version):
        return str(node24_bin() / "node")
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "node is not on PATH: the pi differential tests need node >= 20 (and npm) to run pi's loader"
        )
    return node


_package_dirs: dict[str, Path] = {}


def pi_package_dir(version: str = PI_VERSION) -> Path:
    """The directory of the pinned pi ``version``, installed with npm on first use.

    Safe across pytest processes (``cache.install_once``). Fails in CI (never skips) when it cannot be
    installed.
    """
    if version in _package_dirs:
        return _package_dirs[version]
    if version not in PI_PACKAGES:
        raise ValueError(f"no pinned pi {version!r}; pinned: {', '.join(PI_VERSIONS)}")
    node = _node(version)
    root = _install_root(version)
    package = _package_path(root, version)
    path = f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    install_once(
        root,
        lambda: _installed_version(package) == version,
        lambda: npm_install_pinned(root, "compactd-pi-harness", PI_PACKAGES[version], version, path),
    )
    installed = _installed_version(package)
    if installed != version:
        pytest.fail(
            f"{package} holds {PI_PACKAGES[version]} version {installed!r} after npm install, not {version}"
        )
    _package_dirs[version] = package
    return package


# ------------------------------------------------------------------------------------------------------------
# Running the node scripts


def _node_command(version: str, script: str, *args: str) -> list[str]:
    return [_node(version), str(SCRIPTS_DIR / script), *args]


def _node_env(version: str) -> dict[str, str]:
    return {**os.environ, "PI_PACKAGE_DIR": str(pi_package_dir(version))}


def _run_node(
    script: str, request: JsonDict, timeout: float = NODE_TIMEOUT_SECONDS, version: str = PI_VERSION
) -> Any:
    """Have the pi ``version`` server run ``request`` (``cmd`` names what ``script`` does); its result."""
    with _server_lock:
        try:
            return _server(version).request(script, request, timeout)
        except _NotSent:  # it had died before this request: nothing ran, so a fresh one may run it
            return _server(version).request(script, request, timeout)


def pi_load_many(
    paths: Sequence[str | os.PathLike[str]],
    *,
    timeout: float = NODE_TIMEOUT_SECONDS,
    version: str = PI_VERSION,
) -> list[JsonDict]:
    """What pi ``version``'s ``SessionManager.open`` makes of each file, in one node process.

    Each file is copied first, alone in a temp directory (pi rewrites v1/v2 files in place and wipes
    headerless ones). Each result has: ``source`` (the path given), ``session_id``, ``header``, ``leaf_id``,
    ``entry_count``, ``messages`` (``buildSessionContext().messages``), ``thinking_level``, ``model``,
    ``estimate`` (``estimateContextTokens(messages)``: ``tokens``, ``usageTokens``, ``trailingTokens``,
    ``lastUsageIndex``), ``message_tokens`` (``estimateTokens`` of each message), ``branch_ids``
    (``getBranch()``), ``rewritten`` (pi changed the copy's bytes), ``wiped`` (pi replaced it with a fresh
    header) and ``resumable`` (``pi -c`` would pick it). When pi throws, the result is
    ``{"source", "error"}``; ``estimate`` is None (with ``estimate_error``) when only the estimate throws.
    A message (or header) nested deeper than ``CLIP_DEPTH`` has each part at that depth replaced by
    ``{"$deep": its JSON.stringify text}`` (see :func:`clip_deep`), since neither side's JSON stops there.

    pi 1.x adds: ``messages`` is ``buildSessionProjection().messages`` (what it sends; the same as its
    ``buildSessionContext``), ``projected_estimate`` (``estimateProjectedContextTokens``, the figure its
    auto-compaction compares with its threshold), ``tools`` (the names of the loadout it restores from the
    branch's system messages) and ``system_prompt`` (``getCurrentSystemMessage`` of the context, or None).
    """
    if not paths:
        return []
    with tempfile.TemporaryDirectory(prefix="compactd-pi-load-") as tmp:
        copies = []
        for index, path in enumerate(paths):
            folder = Path(tmp) / str(index)
            folder.mkdir()
            copy = folder / "session.jsonl"
            shutil.copyfile(path, copy)
            copies.append(str(copy))
        results: list[JsonDict] = _run_node(
            "load.mjs", {"cmd": "load", "payload": {"paths": copies}}, timeout, version
        )
    for result, path in zip(results, paths, strict=True):
        result.pop("path", None)
        result["source"] = os.fspath(path)
    return results


def clip_deep(value: Any, stringify: Callable[[Any], str], nesting: Callable[[Any], int]) -> Any:
    """Our side of load.mjs's clipping: in a value nested deeper than ``CLIP_DEPTH``, each part at that depth
    becomes ``{"$deep": stringify(part)}`` (``stringify`` must be ``JSON.stringify``, key order included)."""
    if nesting(value) <= CLIP_DEPTH:
        return value

    def clip(item: Any, depth: int) -> Any:
        if not isinstance(item, dict | list):
            return item
        if depth >= CLIP_DEPTH:
            return {"$deep": stringify(item)}
        if isinstance(item, list):
            return [clip(v, depth + 1) for v in item]
        return {k: clip(v, depth + 1) for k, v in item.items()}

    return clip(value, 0)


def pi_load(path: str | os.PathLike[str], *, check: bool = True, version: str = PI_VERSION) -> JsonDict:
    """:func:`pi_load_many` for one file; raises :class:`PiError` when pi throws (unless ``check`` is off)."""
    result = pi_load_many([path], version=version)[0]
    if check and "error" in result:
        raise PiError(f"pi failed to load {path}:\n{result['error']}")
    return result


def pi_write_many(specs: Sequence[Mapping[str, Any]], *, version: str = PI_VERSION) -> list[JsonDict]:
    """Write several sessions with pi's ``SessionManager`` in one node process (see :func:`pi_write`).

    Each spec: ``dir`` (session directory), ``ops``, optional ``cwd`` (header cwd, default ``dir``) and
    optional ``open`` (an existing file to ``SessionManager.open`` instead of creating a new session).
    """
    payload = [{**spec, "dir": os.fspath(spec["dir"])} for spec in specs]
    for spec in payload:
        if spec.get("open") is not None:
            spec["open"] = os.fspath(spec["open"])
    results: list[JsonDict] = _run_node(
        "write.mjs", {"cmd": "write", "payload": {"specs": payload}}, version=version
    )
    for index, result in enumerate(results):
        if "error" in result:
            raise PiError(f"pi_write spec {index} failed:\n{result['error']}")
    return results


def pi_write(
    path_dir: str | os.PathLike[str],
    ops: Sequence[Mapping[str, Any]],
    *,
    cwd: str | None = None,
    open_path: str | os.PathLike[str] | None = None,
    version: str = PI_VERSION,
) -> JsonDict:
    """Write a session in ``path_dir`` with pi ``version``'s own ``SessionManager`` from a list of operations.

    Each op is ``{"op": NAME, ...}`` with NAME one of appendMessage, appendModelChange,
    appendThinkingLevelChange, appendCompaction, appendCustomEntry, appendCustomMessageEntry,
    appendLabelChange, appendSessionInfo, branch, resetLeaf, branchWithSummary; arguments are named as in pi
    (pi 1.x adds appendContextEdit and appendUsage; see ``tests/pi/write.mjs``). ``target`` and ``firstKeptEntryId`` given as an int refer to the entry that
    earlier op produced. Returns ``path``, ``session_id``, ``ids`` (the entry id of each op, None for
    branch/resetLeaf), ``leaf_id`` and ``exists``: pi writes nothing until the session holds an assistant
    message (pi 1.x: a user message).
    """
    spec: dict[str, Any] = {"dir": path_dir, "ops": list(ops)}
    if cwd is not None:
        spec["cwd"] = cwd
    if open_path is not None:
        spec["open"] = open_path
    return pi_write_many([spec], version=version)[0]


# ------------------------------------------------------------------------------------------------------------
# Long-running node processes


class _NoAnswer(PiError):
    """The process gave no answer in time (it may still be running)."""


class _NotSent(PiError):
    """The pi server could not take the request (it had already exited)."""


class _LineReader:
    """Reads a process's stdout lines on a thread so that waiting for one can time out."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self._thread.start()

    def _run(self, stream: IO[bytes]) -> None:
        for line in iter(stream.readline, b""):
            self._lines.put(line)
        self._lines.put(b"")

    def next(self, timeout: float, describe: Callable[[], str]) -> JsonDict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise _NoAnswer(f"no answer within {timeout} s; {describe()}") from None
        if not line:
            self._lines.put(b"")  # keep reporting end of stream
            raise PiError(f"node exited; {describe()}")
        value: JsonDict = json.loads(line.decode("utf-8"))
        return value

    def join(self) -> None:
        self._thread.join()


class _NodeProcess:
    def __init__(
        self, script: str, *args: str, env: Mapping[str, str] | None = None, version: str = PI_VERSION
    ) -> None:
        # A file, not a pipe: nobody drains stderr while the process runs.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in _finish
        self._proc = subprocess.Popen(
            _node_command(version, script, *args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=dict(env) if env is not None else _node_env(version),
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin = self._proc.stdin
        self._reader = _LineReader(self._proc.stdout)
        self._closed = False

    def _describe(self) -> str:
        self._stderr.seek(0)
        err = self._stderr.read().decode("utf-8", "replace")
        return f"exit code {self._proc.poll()}, stderr:\n{err[-4000:]}"

    def _send(self, value: Any) -> None:
        self._stdin.write(json.dumps(value).encode() + b"\n")
        self._stdin.flush()

    def _read(self, timeout: float) -> JsonDict:
        return self._reader.next(timeout, self._describe)

    def _finish(self, timeout: float) -> None:
        """Reap the process (killing it after ``timeout``) and close every pipe; idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join()
        assert self._proc.stdout is not None
        self._proc.stdout.close()
        self._stderr.close()


class _PiServer(_NodeProcess):
    """``tests/pi/server.mjs``: one node process answering load, write and exchange requests in turn.

    It belongs to the process that started it with the environment it was started with (``key``); a request
    that times out kills it (pi loops forever on a parentId cycle) and one that finds it dead or sees it die
    discards it, so the next request starts a fresh one.
    """

    def __init__(self, key: tuple[int, tuple[tuple[str, str], ...]], version: str) -> None:
        super().__init__("server.mjs", env=dict(key[1]), version=version)
        self.key = key
        try:
            self._read(NODE_TIMEOUT_SECONDS)
        except BaseException:
            self.kill()
            raise

    @property
    def alive(self) -> bool:
        return not self._closed and self._proc.poll() is None

    def request(self, script: str, request: JsonDict, timeout: float) -> Any:
        # ensure_ascii: lone surrogates travel as \udxxx escapes, and no raw line break splits the request
        stderr_at = self._stderr.seek(0, os.SEEK_END)
        try:
            self._send({**request, "cwd": os.getcwd()})
        except OSError as exc:
            self.kill()
            raise _NotSent(f"the pi server had exited with {self._proc.returncode}") from exc
        try:
            answer = self._read(timeout)
        except _NoAnswer as exc:
            self.kill()
            raise PiError(
                f"{script} did not finish within {timeout} s (a parentId cycle makes pi loop forever)"
            ) from exc
        except PiError as exc:
            self._stderr.seek(stderr_at)
            err = self._stderr.read().decode("utf-8", "replace")
            self.kill()
            raise PiError(f"{script} exited with {self._proc.returncode}:\n{err}") from exc
        if not answer.get("ok"):
            raise PiError(f"{script} failed:\n{answer.get('error')}")
        return answer["result"]

    def kill(self) -> None:
        if not self._closed:
            self._proc.kill()
            self._finish(NODE_TIMEOUT_SECONDS)

    def close(self) -> None:
        """Let it end on end of input (killing it if it does not within a few seconds)."""
        self._finish(5.0)


_server_lock = threading.Lock()
# Set by pytest for each test phase; pi never reads it, and keying on it would restart the server every test.
_VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST"})
_servers: dict[str, _PiServer] = {}  # the current server of each pi version


def _server(version: str) -> _PiServer:
    """The running pi ``version`` server for this process and environment, started (or restarted) when
    needed."""
    env = {k: v for k, v in _node_env(version).items() if k not in _VOLATILE_ENV}
    key = (os.getpid(), tuple(sorted(env.items())))
    current = _servers.pop(version, None)
    if current is not None:
        if current.key == key and current.alive:
            _servers[version] = current
            return current
        if current.key[0] == key[0]:  # a forked child leaves its parent's server alone
            current.kill()
    server = _PiServer(key, version)
    _servers[version] = server
    return server


@atexit.register
def _close_server() -> None:
    for version, server in list(_servers.items()):
        if server.key[0] == os.getpid():
            _servers.pop(version).close()


class PiLiveSession(_NodeProcess):
    """A pi ``SessionManager`` that opened ``path`` when this object was created and stays open.

    Like a running pi it never re-reads the file: it appends from its in-memory leaf whatever happened to the
    file meanwhile, which models "a SessionManager that opened the file before a rotation appends after it".
    The constructor returns once pi has loaded the file. Use it as a context manager (or call :meth:`close`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = NODE_TIMEOUT_SECONDS,
        version: str = PI_VERSION,
    ) -> None:
        super().__init__("live.mjs", os.fspath(path), version=version)
        self.path = Path(path)
        self.timeout = timeout
        try:
            hello = self._read(timeout)
            if not hello.get("ok"):
                raise PiError(f"pi could not open {path}:\n{hello.get('error')}")
        except BaseException:
            self._finish(timeout)
            raise
        self.session_id: str = hello["session_id"]
        self.leaf_id_at_open: str | None = hello["leaf_id"]
        self.entry_count_at_open: int = hello["entry_count"]

    def _request(self, request: JsonDict) -> JsonDict:
        if self._closed:
            raise PiError("the live pi session is closed")
        self._send(request)
        answer = self._read(self.timeout)
        if not answer.get("ok"):
            raise PiError(f"pi failed on {request.get('cmd')}:\n{answer.get('error')}")
        return answer

    def append_exchange(self, user: str, assistant: str, usage: Mapping[str, Any] | None = None) -> JsonDict:
        """Append a user message and an assistant reply (with ``usage`` over the defaults) from pi's leaf.

        Returns ``{"user_id", "assistant_id"}``.
        """
        request: JsonDict = {"cmd": "append_exchange", "user": user, "assistant": assistant}
        if usage is not None:
            request["usage"] = dict(usage)
        answer = self._request(request)
        return {"user_id": answer["user_id"], "assistant_id": answer["assistant_id"]}

    def append_message(self, message: Mapping[str, Any]) -> str:
        """Append one message (user, assistant, toolResult, ...) from pi's leaf, as pi's agent loop persists
        each message when it ends; a message without ``timestamp`` gets now. Returns the entry id."""
        answer = self._request({"cmd": "append_message", "message": dict(message)})
        return str(answer["id"])

    def context(self) -> JsonDict:
        """pi's in-memory view: ``{"leaf_id", "messages"}`` (what this agent would send to its model now)."""
        answer = self._request({"cmd": "context"})
        return {"leaf_id": answer["leaf_id"], "messages": answer["messages"]}

    def close(self) -> None:
        if not self._closed and self._proc.poll() is None:
            with contextlib.suppress(PiError, OSError):
                self._send({"cmd": "close"})
                self._read(self.timeout)
        self._finish(self.timeout)

    def __enter__(self) -> PiLiveSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pi_append_exchange(
    path: str | os.PathLike[str],
    user_text: str,
    assistant_text: str,
    usage: Mapping[str, Any] | None = None,
    *,
    version: str = PI_VERSION,
) -> JsonDict:
    """``SessionManager.open(path)``, append a user message and an assistant reply; returns their ids.

    Returns ``{"user_id", "assistant_id"}``. Note that pi rewrites a v1/v2 file in place on open, and wipes a
    file without a valid header. What :class:`PiLiveSession` does for one exchange, in the pi server.
    """
    request: JsonDict = {"cmd": "exchange", "path": os.fspath(path), "user": user_text}
    request["assistant"] = assistant_text
    if usage is not None:
        request["usage"] = dict(usage)
    answer: JsonDict = _run_node("pi_append_exchange", request, version=version)
    return {"user_id": answer["user_id"], "assistant_id": answer["assistant_id"]}


@dataclass(frozen=True)
class Appended:
    """What a :class:`NodeAppender` wrote: ``(seq, id)`` pairs in order, and the leaf it chained from."""

    written: list[tuple[int, str]]
    leaf_id_at_start: str | None

    @property
    def seqs(self) -> list[int]:
        return [seq for seq, _ in self.written]

    @property
    def ids(self) -> list[str]:
        return [entry_id for _, entry_id in self.written]


class NodeAppender(_NodeProcess):
    """A node process appending ``count`` numbered ``message`` entries to ``path`` exactly as pi does.

    One ``appendFileSync(path, JSON.stringify(entry) + "\\n")`` per entry (open by path, write, close; no
    lock); entry i has text ``"seq <start_seq + i>"`` (user for even i, assistant for odd i), a unique 8-hex
    id and ``parentId`` chained from the previous one, starting at the file's leaf as pi loads it when the
    process starts. With ``pause_every`` > 0 it sleeps ``pause_ms`` after every that many lines, to spread
    its writes. :meth:`start` returns once the leaf is read; :meth:`wait` returns what was written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        count: int,
        *,
        start_seq: int = 0,
        pause_every: int = 0,
        pause_ms: float = 1.0,
    ) -> None:
        self.path = Path(path)
        self.count = count
        self.start_seq = start_seq
        self.pause_every = pause_every
        self.pause_ms = pause_ms
        self.leaf_id_at_start: str | None = None
        self._started = False
        self._closed = True  # until start() spawns the process

    def start(self, timeout: float = NODE_TIMEOUT_SECONDS) -> NodeAppender:
        if self._started:
            raise PiError("NodeAppender.start() called twice")
        self._started = True
        super().__init__("appender.mjs")
        payload = {
            "path": os.fspath(self.path),
            "count": self.count,
            "start_seq": self.start_seq,
            "pause_every": self.pause_every,
            "pause_ms": self.pause_ms,
        }
        try:
            self._send(payload)
            self._stdin.close()
            hello = self._read(timeout)
        except BaseException:
            self._finish(0)
            raise
        self.leaf_id_at_start = hello.get("leaf_id")
        return self

    def wait(self, timeout: float = 240.0) -> Appended:
        """Wait for the last append; raises :class:`PiError` (after reaping the process) when node failed."""
        if not self._started:
            raise PiError("NodeAppender.wait() before start()")
        try:
            done = self._read(timeout)
        finally:
            self._finish(timeout)
        if not done.get("done"):
            raise PiError(
                f"the appender failed after {len(done.get('written', []))} lines:\n{done.get('error')}"
            )
        return Appended([(int(seq), str(i)) for seq, i in done["written"]], self.leaf_id_at_start)

    def kill(self) -> None:
        """Stop the appender now (if it is still running) and reap it."""
        if self._started and not self._closed:
            self._proc.kill()
            self._finish(NODE_TIMEOUT_SECONDS)

    def __enter__(self) -> NodeAppender:
        return self.start() if not self._started else self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def rotate_and_load(path: Path, result: Any, transcript: Any, state_dir: Path) -> JsonDict:
    """Commit an engine result by rotation and load the file with pi: pi's context opens with exactly the
    committed summary."""
    from compactd.commit.commit import CompactionEntries, commit
    from compactd.sources.files.job import snapshot_size

    entries = CompactionEntries(
        result.compaction, result.post_message, snapshot_size(transcript), transcript.leaf_id or ""
    )
    committed = commit(path, entries, mode="rotate", state_dir=state_dir, idle_seconds=0, force=True)
    assert committed.committed, committed.reason
    loaded = pi_load(path)
    assert loaded["messages"][0]["role"] == "compactionSummary"
    assert loaded["messages"][0]["summary"] == result.summary
    return loaded


# ------------------------------------------------------------------------------------------------------------
# Fixtures


class Pi:
    """The harness as one object (the ``pi`` fixture); each attribute is a module-level function or class."""

    package_dir = staticmethod(pi_package_dir)
    load = staticmethod(pi_load)
    load_many = staticmethod(pi_load_many)
    write = staticmethod(pi_write)
    write_many = staticmethod(pi_write_many)
    append_exchange = staticmethod(pi_append_exchange)
    LiveSession = PiLiveSession
    Appender = NodeAppender
    Error = PiError


@pytest.fixture(scope="session")
def pi() -> Pi:
    """pi's real loader and writer (0.73.1 unless a call names ``version``), installed on first use."""
    pi_package_dir()
    return Pi()


@pytest.fixture
def pi_session_factory(pi: Pi, tmp_path: Path) -> Callable[..., JsonDict]:
    """``make(ops, cwd=None) -> pi_write result``: each call writes a new session in its own folder."""
    counter = iter(range(1_000_000))

    def make(ops: Sequence[Mapping[str, Any]], cwd: str | None = None) -> JsonDict:
        folder = tmp_path / f"pi-session-{next(counter)}"
        return pi.write(folder, ops, cwd=cwd)

    return make
