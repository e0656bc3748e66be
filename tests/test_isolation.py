"""One session never stops the service, and every session compactd leaves alone says why (issue 9, items 1
and 7).

The poisoned sessions fail at the session boundary whatever the reader accepts: a transcript compactd may not
read (mode 000, with compactd running as root without CAP_DAC_OVERRIDE, so the mode bits apply as they do to
an unprivileged user), a commit that runs out of space (a small tmpfs, as in test_commit_failures), a file name
that is not UTF-8, and a FIFO and a directory named like transcripts. The healthy sessions beside them are
compacted; the failures are shown with their stage, reason and back-off.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from compactd.reading import read_transcript

from tests.support.cli import compactd as run_compactd
from tests.support.crash import temp_files
from tests.test_cli_commands import EXAMPLES, LONG, SHORT
from tests.test_commit_failures import tmpfs
from tests.test_service_e2e import MODEL, Daemon, has_compaction, turn_ops, wait_for

# The daemon or the commit path as real processes (end to end, kills, pi itself): `pytest -m "not slow"`
# leaves them to the full run and CI.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.pi import Pi

REPO = Path(__file__).resolve().parents[1]
# prctl(2) and capability(7) numbers; loaded before any fork, so the child only calls into libc.
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2
_LIBC = ctypes.CDLL(None, use_errno=True)
BAD_NAME = b"bad-\xff.jsonl"  # not UTF-8: Python sees a lone surrogate, which orjson refuses to write
HEALTHY = ("healthy.jsonl", "bad-\\xff.jsonl", "late.jsonl")


def without_dac_override() -> None:
    """``preexec_fn``: root keeps its uid but loses the capabilities that read any file regardless of mode."""
    if os.geteuid() != 0:
        return  # an unprivileged user is already bound by the mode bits
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if _LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def compactd(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return run_compactd(*args, env=env, timeout=timeout, preexec_fn=without_dac_override)


def fill(mnt: Path) -> None:
    """Leave two pages free: enough for the lock file, not for the rewritten transcript."""
    stats = os.statvfs(mnt)
    free = stats.f_bavail * stats.f_frsize
    (mnt / "filler").write_bytes(b"\0" * (free - 2 * stats.f_frsize))


def age(*paths: Path) -> None:
    old = time.time() - 3600  # idle for an hour
    for path in paths:
        os.utime(path, (old, old))


@contextmanager
def full_disk(where: Path, transcript: Path, size: str) -> Iterator[Path]:
    """A tmpfs holding ``transcript`` as ``full.jsonl`` and nothing left to write a compaction with."""
    with tmpfs(where, size) as mnt:
        shutil.copyfile(transcript, mnt / "full.jsonl")
        fill(mnt)
        yield mnt / "full.jsonl"


def rows_by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {os.fsencode(os.path.basename(r["path"])).decode("utf-8", "backslashreplace"): r for r in rows}


# --- the service -------------------------------------------------------------------------------------------


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(**overrides: Any) -> Daemon:
        d = Daemon(tmp_path, None, **overrides)
        made.append(d)
        return d

    yield make
    for d in made:
        d.kill()


def status_json(d: Daemon) -> dict[str, Any]:
    done = compactd("status", "--json", "--config", str(d.config_path))
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def test_poisoned_sessions_back_off_in_status_while_the_service_compacts_the_others(
    pi: Pi, daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    d = daemon(memory_flush={"enabled": False})
    d.root.mkdir(parents=True)
    (tmp_path / "agents" / "full").mkdir()
    written = Path(pi.write(d.root, turn_ops(12, 3_000), cwd=str(d.workspace))["path"])
    healthy = d.root / "healthy.jsonl"
    os.rename(written, healthy)
    original = healthy.read_bytes()
    # In a root of its own: watchfiles cannot decode its name, so that root's watcher stops on each of its
    # events (and is restarted); the FIFO's event in the main root must not be lost with it.
    odd_root = tmp_path / "agents" / "odd" / "sessions"
    odd_root.mkdir(parents=True)
    bad = Path(os.fsdecode(os.path.join(os.fsencode(odd_root), BAD_NAME)))
    locked = d.root / "locked.jsonl"
    for path in (bad, locked):
        path.write_bytes(original)
    locked.chmod(0o000)
    with full_disk(tmp_path / "agents" / "full" / "sessions", healthy, "1m") as full:
        age(healthy, bad, locked, full)
        d.start(preexec_fn=without_dac_override)
        d.wait_notice("READY=1")
        wait_for(lambda: has_compaction(healthy) and has_compaction(bad), 30, "the healthy sessions", d.proc)

        # Not transcripts: never opened (a FIFO would block the service), never listed, logged once.
        os.mkfifo(d.root / "pipe.jsonl")
        (d.root / "dir.jsonl").mkdir()
        late = d.root / "late.jsonl"
        late.write_bytes(original)
        wait_for(lambda: has_compaction(late), 30, "a session written after the FIFO", d.proc)

        def settled() -> dict[str, dict[str, Any]] | None:
            rows = rows_by_name(status_json(d)["sessions"])
            failed = all(rows.get(n, {}).get("last_error") for n in ("locked.jsonl", "full.jsonl"))
            done = all(rows.get(n, {}).get("compactions") for n in HEALTHY)
            return rows if failed and done else None

        rows = wait_for(settled, 30, "the poisoned and the compacted sessions in status --json", d.proc)
        assert rows["locked.jsonl"]["error_stage"] == "read"
        assert rows["locked.jsonl"]["last_error"] == "EACCES: Permission denied"
        assert rows["full.jsonl"]["error_stage"] == "commit"
        assert rows["full.jsonl"]["last_error"].startswith(("ENOSPC", "short write"))
        for name in ("locked.jsonl", "full.jsonl"):
            assert rows[name]["backoff_until"] is not None and rows[name]["failures"] == 1, rows[name]
            assert rows[name]["next_action"].startswith("retry in")
        for name in HEALTHY:
            assert rows[name]["last_error"] is None and rows[name]["compactions"] == 1, rows[name]
        assert "pipe.jsonl" not in rows and "dir.jsonl" not in rows
        doc = status_json(d)
        assert doc["failing"] == 2 and doc["backing_off"] == 2
        table = compactd("status", "--config", str(d.config_path)).stdout
        assert "locked.jsonl: read failed: EACCES: Permission denied (back-off" in table

        assert full.read_bytes() == original and temp_files(full.parent) == []
        assert d.proc is not None and d.proc.poll() is None

        # Made readable, the session is read again at once (no waiting out the back-off) and compacted.
        locked.chmod(0o644)
        wait_for(lambda: has_compaction(locked), 30, "the formerly unreadable session", d.proc)
        assert d.stop() == 0
    # Each failure was logged once with its path and reason, over all the rescans (one a second) since.
    lines = d.log().splitlines()
    assert sum("locked.jsonl action=failed stage=read reason=EACCES" in x for x in lines) == 1
    assert sum("full.jsonl action=failed stage=commit reason=" in x for x in lines) == 1
    assert sum("pipe.jsonl action=ignored reason=not a transcript: a FIFO" in x for x in lines) == 1
    assert sum("dir.jsonl action=ignored reason=not a transcript: a directory" in x for x in lines) == 1
    for path in (healthy, late, locked):
        loaded = pi.load(path)
        assert loaded["messages"][0]["role"] == "compactionSummary"
    assert read_transcript(bad).usable


# --- once ---------------------------------------------------------------------------------------------------


def test_once_lists_each_failed_session_exits_1_and_still_compacts_the_others(tmp_path: Path, pi: Pi) -> None:
    sessions = tmp_path / "sessions"
    written = Path(pi.write(sessions, turn_ops(12, 3_000), cwd=str(tmp_path))["path"])
    healthy = sessions / "healthy.jsonl"
    os.rename(written, healthy)
    original = healthy.read_bytes()
    small = sessions / "small.jsonl"
    small.write_bytes(original[: original.index(b"\n", 2_000) + 1])  # the header and the first turns: fits
    zero = sessions / "zero.jsonl"
    bad = Path(os.fsdecode(os.path.join(os.fsencode(sessions), BAD_NAME)))
    for path in (zero, bad):
        path.write_bytes(original)
    zero.chmod(0o000)
    with full_disk(tmp_path / "mnt", healthy, "1m") as full:
        age(*sessions.iterdir(), full)
        config = tmp_path / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "sessions": {"roots": [str(sessions), str(full.parent)]},
                    "models": {"providers": {"anthropic": {"models": {MODEL: {"context_tokens": 20_000}}}}},
                    "compaction": {"keep_recent_turns": 1, "keep_recent_tokens": 2_000},
                    "state_dir": str(tmp_path / "state"),
                }
            )
        )
        first = compactd("once", "--json", "--config", str(config))
        assert first.returncode == 1, first.stderr
        rows = rows_by_name(json.loads(first.stdout))
        assert rows["healthy.jsonl"]["committed"] is True and rows["bad-\\xff.jsonl"]["committed"] is True
        assert rows["small.jsonl"]["action"] == "fits"
        assert rows["zero.jsonl"]["action"] == "failed" and rows["zero.jsonl"]["stage"] == "read"
        assert rows["zero.jsonl"]["reason"] == "EACCES: Permission denied"
        assert rows["full.jsonl"]["action"] == "failed" and rows["full.jsonl"]["stage"] == "commit"
        assert rows["full.jsonl"]["reason"].startswith(("ENOSPC", "short write"))
        assert rows["full.jsonl"]["committed"] is False and rows["full.jsonl"]["retry_in"] > 0
        assert "2 of 5 session(s) failed" in first.stderr and "Traceback" not in first.stderr
        # The next pass says so again: the unreadable file is retried, the full disk is backing off.
        again = compactd("once", "--config", str(config))
        assert again.returncode == 1
        lines = {os.path.basename(line.split()[1]): line for line in again.stdout.splitlines()}
        assert lines["zero.jsonl"].startswith("failed ") and "stage=read reason=EACCES" in lines["zero.jsonl"]
        assert lines["full.jsonl"].startswith("backoff ") and "reason=ENOSPC" in lines["full.jsonl"]
        doctor = compactd("doctor", "--config", str(config))
        assert doctor.returncode == 1 and "all good" not in doctor.stdout
        assert f"{zero}: cannot read it: EACCES" in doctor.stdout
        assert f"{full}: commit failed: ENOSPC" in doctor.stdout
        assert full.read_bytes() == original and temp_files(full.parent) == []
    assert zero.stat().st_mode & 0o777 == 0 and not list(sessions.glob("zero.jsonl.bak.*"))
    assert pi.load(healthy)["messages"][0]["role"] == "compactionSummary"


# --- skipped sessions (item 7) ------------------------------------------------------------------------------


def test_a_window_under_the_hard_minimum_is_skipped_with_its_reason_in_once_status_and_doctor(
    tmp_path: Path,
) -> None:
    sessions = tmp_path / "sessions"
    shutil.copytree(EXAMPLES, sessions)
    age(*sessions.iterdir())
    before = {p.name: p.read_bytes() for p in sessions.iterdir()}
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(sessions)]},
                "agents": {"defaults": {"context_tokens": 8_000}},
                "state_dir": str(tmp_path / "state"),
            }
        )
    )
    reason = "context window 8,000 tokens is below the hard minimum of 16,000 (set by agents.defaults.context_tokens)"
    once = compactd("once", "--json", "--config", str(config))
    assert once.returncode == 0, once.stderr
    rows = rows_by_name(json.loads(once.stdout))
    assert {n: (r["action"], r["reason"]) for n, r in rows.items()} == {
        LONG: ("skipped", reason),
        SHORT: ("skipped", reason),
    }
    assert {p.name: p.read_bytes() for p in sessions.iterdir()} == before
    status = json.loads(compactd("status", "--json", "--config", str(config)).stdout)
    assert status["skipped"] == 2 and status["near_threshold"] == 0
    assert {r["skipped"] for r in status["sessions"]} == {reason}
    assert f"skipped: {reason}" in compactd("status", "--config", str(config)).stdout
    doctor = compactd("doctor", "--config", str(config))
    assert doctor.returncode == 1 and "all good" not in doctor.stdout
    assert f"{sessions / LONG}: skipped: {reason}" in doctor.stdout
    assert "2 thing(s) to fix" in doctor.stdout
