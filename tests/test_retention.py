"""Archive retention keeps every line an agent wrote (issue 9, item 6): by age, a count cap only when asked for,
disk use shown by ``status`` and checked by ``doctor``."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from compactd.commit import Journal, commit
from compactd.commit.retention import expired
from compactd.config import Config

from tests.support.cli import compactd as run_compactd
from tests.support.crash import archives_of, file_lines, make_entries, seq_of, session_ops
from tests.support.pi import NodeAppender

if TYPE_CHECKING:
    from tests.support.pi import Pi

pytest_plugins = ["tests.support.pi"]

REPO = Path(__file__).resolve().parents[1]
DAY = 86_400.0


def compactd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_compactd(*args, env=env, timeout=120)


@pytest.mark.slow  # processes, pi or many examples: left to the full run
def test_thirty_compactions_under_a_live_appender_keep_every_line_with_the_default_retention(
    pi: Pi, tmp_path: Path
) -> None:
    """A busy session compacted 30 times in a few seconds: with the default retention every entry the agent
    appended is still a line in the live file or in an archive (a count cap of 5 deleted most of them)."""
    archives = Config.defaults().compaction.archives
    path = Path(pi.write(tmp_path / "s", session_ops(6, side_branch=False))["path"])
    state = tmp_path / "state"
    appender = NodeAppender(path, 4_000, pause_every=10, pause_ms=8).start()
    committed = 0
    try:
        for _ in range(30):
            result = commit(
                path,
                make_entries(path, keep_turns=2),
                mode="rotate",
                state_dir=state,
                idle_seconds=0,
                force=True,
                grace_seconds=0.05,
                archive_keep_count=archives.keep_count,
                archive_keep_days=archives.keep_days,
            )
            committed += result.committed
    finally:
        appended = appender.wait()
    assert committed >= 25, committed  # a plan made just before a burst may go stale; most commit
    lines = {e.get("id") for e in file_lines(path)}
    for archive in archives_of(path):
        lines |= {e.get("id") for e in file_lines(archive)}
    missing = [i for i in appended.ids if i not in lines]
    assert missing == [], f"{len(missing)} of {len(appended.ids)} appended entries exist nowhere"
    assert len(archives_of(path)) == committed
    # The appender was writing all along: each archive holds lines the one before it did not.
    newest = [max((seq_of(e) or -1) for e in file_lines(a)) for a in archives_of(path)]
    assert sum(b > a for a, b in itertools.pairwise(newest)) >= 20, newest


def test_retention_is_by_age_and_a_count_cap_is_opt_in() -> None:
    now = 1_800_000_000.0
    names = [f"/s/x.jsonl.bak.{_stamp(now - days * DAY)}" for days in (40, 31, 29, 1, 0)]
    defaults = Config.defaults().compaction.archives
    assert (
        expired(names, keep_count=defaults.keep_count, keep_days=defaults.keep_days, now=now)
        == names[:2][::-1]
    )
    assert expired(names, keep_count=0, keep_days=0, now=now) == []  # 0 and 0: keep everything
    assert expired(names, keep_count=2, keep_days=0, now=now) == [names[2], names[1], names[0]]
    assert sorted(expired(names, keep_count=4, keep_days=30, now=now)) == sorted(names[:2])


def _stamp(epoch: float) -> str:
    from compactd.commit.atomic import utc_stamp

    return utc_stamp(epoch)


@pytest.mark.slow  # a daemon start-up
def test_archives_of_sessions_never_compacted_again_age_out_at_start(pi: Pi, tmp_path: Path) -> None:
    """Retention runs over every session when ``once`` (or ``run``) starts, not only after a rotation of the
    same session: one compacted 45 days ago and never since loses that archive, a recent one keeps its own."""
    root = tmp_path / "sessions"
    stale = Path(pi.write(root, session_ops(6, side_branch=False))["path"])
    fresh = Path(pi.write(root, session_ops(5, side_branch=False))["path"])
    state = tmp_path / "state"
    old = commit(stale, make_entries(stale), mode="rotate", state_dir=state, idle_seconds=0, force=True,
                 now=time.time() - 45 * DAY)  # fmt: skip
    recent = commit(fresh, make_entries(fresh), mode="rotate", state_dir=state, idle_seconds=0, force=True)
    assert old.committed and recent.committed and old.archive and recent.archive
    env = {"STATE_DIRECTORY": str(state), "XDG_CONFIG_HOME": str(tmp_path / "none")}
    result = compactd("once", "--sessions", str(root), "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert not Path(old.archive).exists() and Path(recent.archive).exists()
    assert Journal(state).all_archives() == {str(fresh): [recent.archive]}


@pytest.mark.slow  # processes, pi or many examples: left to the full run
def test_status_shows_and_doctor_checks_the_archives_disk_use(pi: Pi, tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    path = Path(pi.write(root, session_ops(6, side_branch=False))["path"])
    state = tmp_path / "state"
    made = []
    for _ in range(3):
        result = commit(path, make_entries(path), mode="rotate", state_dir=state, idle_seconds=0, force=True)
        assert result.committed and result.archive
        made.append(result.archive)
    used = sum(os.lstat(a).st_blocks * 512 for a in made)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"sessions": {"roots": [str(root)]}, "state_dir": str(state)}))
    assert compactd("once", "--config", str(config)).returncode == 0  # writes status.json
    status = json.loads(compactd("status", "--json", "--config", str(config)).stdout)
    assert status["archives"]["count"] == 3 and status["archives"]["sessions"] == 1
    assert status["archives"]["disk_bytes"] == used
    table = compactd("status", "--config", str(config)).stdout
    assert "archives 3 of 1 session(s)" in table and "on disk" in table
    ok = compactd("doctor", "--config", str(config))
    assert "ok    archives: 3 of 1 session(s)" in ok.stdout and "kept 30 days" in ok.stdout, ok.stdout
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(root)]},
                "state_dir": str(state),
                "compaction": {"archives": {"warn_bytes": max(1, used - 1)}},
            }
        )
    )
    warned = compactd("doctor", "--config", str(config))
    assert warned.returncode == 1
    assert "WARN  archives: 3 of 1 session(s)" in warned.stdout and "keep_days" in warned.stdout, (
        warned.stdout
    )


def test_claims_of_sessions_gone_or_untouched_are_pruned_by_the_retention_sweep(tmp_path: Path) -> None:
    """``claims/`` kept a file per session ever acted on (150 deleted sessions: 150 claims). The retention
    sweep removes the claims of deleted sessions and of sessions untouched past ``keep_days``; a live
    session's claim stays, and a held claim is never removed, even of a deleted session."""
    from compactd.commit.claim import SessionClaim
    from compactd.commit.retention import sweep_archives

    state = tmp_path / "state"
    sessions = tmp_path / "sessions"
    sessions.mkdir()

    def acted_on(name: str) -> tuple[Path, SessionClaim]:
        path = sessions / name
        path.write_bytes(b'{"type":"session","version":3,"id":"x"}\n')
        claim = SessionClaim(state, path)
        with claim:
            claim.mark_flushed("")
        return path, claim

    deleted = [acted_on(f"gone-{i}.jsonl") for i in range(150)]
    for path, _ in deleted:
        path.unlink()
    live_path, live = acted_on("live.jsonl")
    old_path, old = acted_on("old.jsonl")
    long_ago = time.time() - 45 * DAY
    os.utime(old_path, (long_ago, long_ago))
    os.utime(old.path, (long_ago, long_ago))
    _, quiet = acted_on("quiet.jsonl")  # a claim written long ago, but its session is written to
    os.utime(quiet.path, (long_ago, long_ago))
    held_path, held = acted_on("held.jsonl")
    held.acquire()
    held_path.unlink()
    claims = state / "claims"
    assert len(list(claims.iterdir())) == 154

    try:
        assert sweep_archives(state, keep_count=0, keep_days=30, now=time.time()) == []
        assert sorted(p.name for p in claims.iterdir()) == sorted(c.path.name for c in (live, quiet, held))
        assert held.held  # still ours, still on disk
    finally:
        held.release()
    # Taken again, a pruned session's claim is created afresh; the kept ones still hold their record.
    with SessionClaim(state, old_path) as again:
        assert again.path.exists() and again.flushed_in("") is None
    with SessionClaim(state, live_path) as kept:
        assert kept.flushed_in("") is True
    # keep_days 0: no age limit, only gone sessions go (the held one, now released and deleted).
    sweep_archives(state, keep_count=0, keep_days=0, now=time.time() + 90 * DAY)
    assert not held.path.exists() and live.path.exists() and quiet.path.exists()
