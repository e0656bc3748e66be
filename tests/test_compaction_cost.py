"""What one compaction costs (issue 11, "One read per action"): how often the transcript is read and parsed,
what the finished job's repr costs, Ctrl-C during the model call, and the commit's test seam.

Reads are counted by the kernel (``rchar`` in ``/proc/self/io``: bytes this process read, whatever the call),
parses by counting the reader's one scan of a file's lines (:class:`compactd.core.reader.Scan`, which
``parse_transcript`` and the ledger's cold read both go through).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest
import yaml
from compactd.config import load_config
from compactd.core import reader
from compactd.core.ledger import SessionLedger
from compactd.service import Service
from compactd.sources.files.job import compact_file

from bench.corpus import session_bytes
from tests.support.cli import REPO, compactd
from tests.support.scans import OpeningScans

if TYPE_CHECKING:
    from tests.support.llm_server import StubLLMServer

pytest_plugins = ["tests.support.llm_server"]

SESSION_BYTES = 3_000_000


def rchar() -> int:
    with open("/proc/self/io", "rb") as handle:
        for line in handle:
            if line.startswith(b"rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


class Parses:
    """Counts scans of whole files by the reader (every parse of a transcript goes through ``Scan``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        original = reader.Scan.__init__

        def counting(scan: reader.Scan, data: bytes) -> None:
            self.sizes.append(len(data))
            original(scan, data)

        monkeypatch.setattr(reader.Scan, "__init__", counting)


def big_session(directory: Path, name: str = "s.jsonl") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(session_bytes(SESSION_BYTES, seed=3)[0])
    old = time.time() - 3600
    os.utime(path, (old, old))
    return path


def config_file(tmp_path: Path, sessions: Path, mode: str, **extra: Any) -> Path:
    path = tmp_path / "config.yaml"
    doc = {
        "state_dir": str(tmp_path / "state"),
        "sessions": {"roots": [str(sessions)]},
        "compaction": {"commit": mode},
        "memory_flush": {"enabled": False},
        **extra,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("mode", [pytest.param("rotate", marks=pytest.mark.slow), "append"])
def test_a_compaction_reads_the_transcript_twice_and_the_next_refresh_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The service decides on one reading, the job summarizes it and the commit revalidates against it (one
    read more, no parse more); the tracker then takes the successor the commit's check parsed."""
    sessions = tmp_path / "sessions"
    path = big_session(sessions)
    size = path.stat().st_size
    config = load_config(config_file(tmp_path, sessions, mode))
    files = Service(config).source("jsonl")
    files.refresh(str(path))  # the watcher's reading, before the action
    session = files.sessions[str(path)]
    assert session.due
    parses = Parses(monkeypatch)
    before_bytes = session.tracker.cursor.bytes_read
    before = rchar()
    outcome = anyio.run(lambda: files.act(session))
    read = rchar() - before
    assert outcome.committed, outcome
    assert read < 2.5 * size, f"{read / size:.2f} reads of the transcript"
    assert len(parses.sizes) <= 2, parses.sizes  # the decision's, and the commit's check of its result
    assert session.tracker.cursor.bytes_read == before_bytes  # seeded, not read again
    assert session.tracker.ledger == SessionLedger.from_bytes(path.read_bytes())
    files.refresh(str(path))  # a later event: nothing new to read, same figures
    assert session.tracker.cursor.bytes_read == before_bytes
    assert session.tracker.ledger == SessionLedger.from_bytes(path.read_bytes())


class Decisions:
    """Counts :func:`compactd.core.decision.decide` wherever a module imported it by name."""

    MODULES = ("compactd.sources.files._source", "compactd.sources.files.job", "compactd.core.planning")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import importlib

        from compactd.core import decision

        self.calls = 0
        original = decision.decide

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(decision, "decide", counting)
        for name in self.MODULES:
            module = importlib.import_module(name)
            if hasattr(module, "decide"):
                monkeypatch.setattr(module, "decide", counting)


def test_a_compaction_decides_its_route_on_the_ledger_and_once_on_its_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watcher's refresh decides on the ledger (exact: it counted the tool results); the worker asks only the time;
    the action decides once on the reading it acts on and hands that plan to the job, which decides nothing."""
    sessions = tmp_path / "sessions"
    path = big_session(sessions)
    config = load_config(config_file(tmp_path, sessions, "append"))
    files = Service(config).source("jsonl")
    decisions = Decisions(monkeypatch)
    files.refresh(str(path))
    session = files.sessions[str(path)]
    assert session.due and session.decision is not None and session.decision.exact
    # The refresh's decision, exact from the ledger's count: no read of the file. (The tracker's "does its route
    # need the tool results counted?", ``planning.route_cap``, works out the budget alone: no decision.)
    assert decisions.calls == 1
    decisions.calls = 0
    assert files.ready(time.time()) == [session]
    files.next_wake(time.time())  # the worker's other question: how long to sleep
    assert decisions.calls == 0  # readiness is the recorded decision's and the clock's
    outcome = anyio.run(lambda: files.act(session, force=True))
    assert outcome.committed, outcome
    # One on the act's reading (handed to the job as its plan), one on the committed file (the next cycle's).
    assert decisions.calls == 2


def test_a_compactions_reading_is_checked_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lean reading makes its nesting check (a scan of every byte) when first asked whether it may be
    compacted: the job asks in the thread that read it, never on the event loop (here the main thread)."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    path = sessions / "s.jsonl"
    path.write_bytes(session_bytes(300_000, seed=3)[0])
    old = time.time() - 3600
    os.utime(path, (old, old))
    config = load_config(config_file(tmp_path, sessions, "append"))
    threads = OpeningScans(monkeypatch).threads
    result = anyio.run(lambda: compact_file(str(path), config, dry_run=True))
    assert result.engine is not None
    assert threads, "the reading's nesting was never checked"
    assert threading.main_thread().ident not in threads


@pytest.mark.slow  # a big session compacted; the read-count test keeps the path fast
def test_a_finished_jobs_repr_does_not_grow_with_the_transcript(tmp_path: Path) -> None:
    """asyncio formats the main task, its result included, when the runner looks its SIGINT handler up:
    the result's repr must be a line, not every entry of the session."""
    sessions = tmp_path / "sessions"
    path = big_session(sessions)
    config = load_config(config_file(tmp_path, sessions, "rotate"))
    result = anyio.run(lambda: compact_file(str(path), config, dry_run=True))
    assert result.engine is not None
    assert len(repr(result)) < 1_000, len(repr(result))


@pytest.mark.slow  # a compactd process, a 50 MB-class session, SIGINT
def test_ctrl_c_during_the_model_call_exits_cleanly_and_changes_nothing(
    tmp_path: Path, llm_server: StubLLMServer
) -> None:
    from tests.support.llm_server import Reply

    sessions = tmp_path / "sessions"
    path = big_session(sessions)
    before = path.read_bytes()
    config = config_file(
        tmp_path, sessions, "rotate", summarizer={"base_url": llm_server.base_url, "model": "stub-model"}
    )
    llm_server.script(Reply.hung())
    env = {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "COMPACTD_CONFIG")}
    job = subprocess.Popen(
        [sys.executable, "-m", "compactd", "compact", str(path), "--json", "--config", str(config)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        llm_server.wait_for_requests(1, timeout=120)
        job.send_signal(signal.SIGINT)
        _out, err = job.communicate(timeout=60)
    finally:
        llm_server.release()
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 130, (job.returncode, err)
    assert "Traceback" not in err, err
    assert path.read_bytes() == before
    assert not list(sessions.glob("*.bak.*")) and not list(sessions.glob(".*.tmp"))


@pytest.mark.slow  # a compactd process over a big session
def test_the_crash_points_are_not_reachable_from_a_production_process(tmp_path: Path) -> None:
    """The commit path's crash points are a seam only tests/support/crash.py replaces: the variable the kill
    tests once used does nothing to a real ``compactd compact``."""
    sessions = tmp_path / "sessions"
    path = big_session(sessions)
    config = config_file(tmp_path, sessions, "rotate")
    result = compactd(
        "compact",
        str(path),
        "--json",
        "--config",
        str(config),
        env={"COMPACTD_CRASH_AT": "commit_after_lock"},
    )
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert json.loads(result.stdout)["committed"] is True
