"""Roots lead nowhere outside the roots (issue 9 item 2): symlinks at or below a root pattern, system roots,
and the state directory. The service-level cases run the real ``compactd`` command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from compactd.config import ConfigError, load_config
from compactd.reading import read_transcript
from compactd.sources.watch import discover_roots, expand_roots, scan_root

from tests.support.cli import compactd

if TYPE_CHECKING:
    from tests.support.llm_server import StubLLMServer
    from tests.support.pi import Pi

REPO = Path(__file__).resolve().parents[1]
LONG = REPO / "examples" / "sessions" / "2026-09-21T09-00-00-000Z_0196a3b2-0000-7000-8000-00000000a001.jsonl"
NOBODY = 65534


def idle_copy(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    old = time.time() - 3600
    os.utime(target, (old, old))
    return target


def write_config(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def has_compaction(path: Path) -> bool:
    return any(e.get("type") == "compaction" for e in read_transcript(path).entries)


# --- discovery ------------------------------------------------------------------------------------------------


def test_a_symlinked_directory_at_the_glob_level_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "sessions"
    (base / "own").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (base / "evil").symlink_to(outside)
    (base / "alias").symlink_to(base / "own")  # stays inside: the same root, found once
    roots, refused = discover_roots([f"{base}/*"])
    assert roots == [str(base / "own")]
    assert [(r.path, r.reason) for r in refused] == [
        (str(base / "evil"), f"it resolves to {outside}, outside {base}")
    ]


def test_a_symlinked_directory_below_the_glob_level_is_refused(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    (agents / "main" / "sessions").mkdir(parents=True)
    (agents / "rogue").mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (agents / "rogue" / "sessions").symlink_to(outside)
    (agents / "sneaky").symlink_to(tmp_path)  # sneaky/sessions would be tmp_path/sessions
    (tmp_path / "sessions").mkdir()
    roots, refused = discover_roots([f"{agents}/*/sessions"])
    assert roots == [str(agents / "main" / "sessions")]
    assert sorted(r.path for r in refused) == [
        str(agents / "rogue" / "sessions"),
        str(agents / "sneaky" / "sessions"),
    ]


def test_a_glob_escaping_through_dot_dot_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "sessions"
    (base / "own").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").mkdir()
    (base / "jump").symlink_to(outside / "x")
    roots, refused = discover_roots([f"{base}/*/.."])
    assert roots == [str(base)]
    assert [r.path for r in refused] == [f"{base}/jump/.."]


def test_a_symlink_in_the_fixed_part_made_by_another_user_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sessions" / "a").mkdir(parents=True)
    mine = tmp_path / "mine"
    mine.symlink_to(real)
    theirs = tmp_path / "theirs"
    theirs.symlink_to(real)
    os.lchown(theirs, NOBODY, NOBODY)  # a symlink's owner is whoever made it
    assert expand_roots([f"{mine}/sessions/*"]) == [str(real / "sessions" / "a")]
    roots, refused = discover_roots([f"{theirs}/sessions/*"])
    assert roots == []
    assert refused and f"a symlink made by uid {NOBODY}" in refused[0].reason


def test_a_root_holding_the_state_directory_is_refused_at_run_time(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "journal.jsonl").write_text("")
    roots, refused = discover_roots([f"{tmp_path}/*"], state_dir=tmp_path / "state")
    assert roots == [str(tmp_path / "a")]
    assert [r.reason for r in refused] == [f"it holds the state directory {tmp_path / 'state'}"]


def test_a_root_swapped_for_a_symlink_after_discovery_is_not_scanned(tmp_path: Path) -> None:
    root = tmp_path / "sessions" / "proj"
    idle_copy(LONG, root / LONG.name)
    (found,) = expand_roots([f"{tmp_path}/sessions/*"])
    assert scan_root(found) == [str(root / LONG.name)]
    outside = tmp_path / "outside"
    root.rename(outside)
    root.symlink_to(outside)
    assert scan_root(found) == []


# --- configuration --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("root", ["/", "/*", "/proc", "/proc/*/cwd", "/sys/fs/cgroup", "/dev/shm", "/dev/*"])
def test_system_roots_are_configuration_errors(tmp_path: Path, root: str) -> None:
    path = write_config(
        tmp_path, {"state_dir": str(tmp_path / "state"), "sessions": {"roots": ["~/ok", root]}}
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    (problem,) = caught.value.problems
    assert problem.key == "sessions.roots[1]" and problem.line is not None
    assert str(path) in str(caught.value) and "must not be /" in problem.message


def test_a_root_that_resolves_into_proc_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/proc")
    path = write_config(
        tmp_path, {"state_dir": str(tmp_path / "state"), "sessions": {"roots": [f"{tmp_path}/link/*"]}}
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.key == "sessions.roots[0]" and "/proc" in str(caught.value)


def test_a_state_dir_inside_a_sessions_root_is_a_configuration_error(tmp_path: Path) -> None:
    for state in (tmp_path / "sessions", tmp_path / "sessions" / "proj" / ".state"):
        path = write_config(
            tmp_path,
            {
                "sessions": {"roots": [f"{tmp_path}/sessions/*", str(tmp_path / "sessions")]},
                "state_dir": str(state),
            },
        )
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        (problem,) = caught.value.problems
        assert (
            problem.key == "state_dir" and problem.line == 5 and "inside the sessions root" in problem.message
        )


def test_a_root_above_the_default_state_dir_is_a_configuration_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"sessions": {"roots": ["~/agents/*", "~/.local/*"]}})
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={"HOME": str(tmp_path)})
    (problem,) = caught.value.problems
    assert problem.key == "sessions.roots[1]" and "holds the state directory" in problem.message
    # A wildcard does not match a leading dot, as in glob: ~/* is not a parent of ~/.local/state.
    load_config(write_config(tmp_path, {"sessions": {"roots": ["~/*"]}}), env={"HOME": str(tmp_path)})


def test_the_journal_is_never_taken_for_a_session(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "journal.jsonl").write_text("")
    config = write_config(tmp_path, {"sessions": {"roots": [str(state)]}, "state_dir": str(state)})
    result = compactd("once", "--config", str(config), "--json")
    assert result.returncode == 2, result.stdout
    assert f"{config}:" in result.stderr and "state_dir" in result.stderr
    assert "journal.jsonl" not in result.stdout


# --- the service ----------------------------------------------------------------------------------------------


@pytest.mark.slow  # processes, pi or many examples: left to the full run
def test_once_never_rotates_a_file_behind_a_symlinked_directory(tmp_path: Path) -> None:
    base = tmp_path / "sessions"
    own = idle_copy(LONG, base / "own" / LONG.name)
    outside = tmp_path / "outside"
    foreign = idle_copy(LONG, outside / LONG.name)
    before = foreign.read_bytes()
    (base / "evil").symlink_to(outside)
    config = write_config(
        tmp_path, {"sessions": {"roots": [f"{base}/*"]}, "state_dir": str(tmp_path / "state")}
    )
    result = compactd("once", "--config", str(config), "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["path"] for r in rows] == [str(own)] and rows[0]["committed"] is True
    assert foreign.read_bytes() == before and sorted(p.name for p in outside.iterdir()) == [LONG.name]
    assert "action=refused" in result.stderr and str(base / "evil") in result.stderr
    doctor = compactd("doctor", "--config", str(config))
    assert f"{base / 'evil'} (from {base}/*) is not used as a sessions root" in doctor.stdout


@pytest.mark.slow  # processes, pi or many examples: left to the full run
def test_a_directory_swapped_for_a_symlink_during_the_model_call_is_not_committed(
    tmp_path: Path, llm_server: StubLLMServer
) -> None:
    from tests.support.llm_server import Reply

    base = tmp_path / "sessions"
    proj = base / "proj"
    idle_copy(LONG, proj / LONG.name)
    config = write_config(
        tmp_path,
        {
            "sessions": {"roots": [f"{base}/*"]},
            "state_dir": str(tmp_path / "state"),
            "memory_flush": {"enabled": False},
            "summarizer": {"base_url": llm_server.base_url, "model": "stub-model", "timeout_seconds": 60},
        },
    )
    llm_server.script(Reply.hung())
    base_env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "STATE_DIRECTORY")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "compactd", "once", "--config", str(config), "--json"],
        cwd=REPO,
        env=base_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        llm_server.wait_for_requests(1, timeout=60)
        # While compactd waits for the model, the directory is swapped for a symlink to a look-alike.
        victim = tmp_path / "victim"
        shutil.copytree(proj, victim)  # copy2 keeps the mtime: idle, and byte for byte what was planned
        before = {p.name: p.read_bytes() for p in victim.iterdir()}
        proj.rename(tmp_path / "moved")
        proj.symlink_to(victim)
        llm_server.release()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rows = json.loads(out)
    assert len(rows) == 1 and rows[0]["committed"] is False, err
    assert "symlink" in rows[0]["reason"]
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == before
    assert not has_compaction(tmp_path / "moved" / LONG.name)


@pytest.mark.slow  # processes, pi or many examples: left to the full run
def test_a_file_swapped_for_a_symlink_after_discovery_is_never_read(
    tmp_path: Path, pi: Pi, llm_server: StubLLMServer
) -> None:
    from tests.test_service_e2e import Daemon, responder, turn_ops, wait_for

    llm_server.responder = responder
    d = Daemon(
        tmp_path,
        llm_server,
        sessions={"idle_seconds": 3.0},
        service={"rescan_seconds": 600.0, "status_refresh_seconds": 0.2},
    )
    try:
        d.root.mkdir(parents=True)
        path = Path(pi.write(d.root, turn_ops(12, 3_000), cwd=str(d.workspace))["path"])
        outside = tmp_path / "outside"
        outside.mkdir()
        marker = "OUTSIDE-THE-ROOT-7d1e"
        ops = turn_ops(12, 3_000)
        ops[2]["message"]["content"][0]["text"] += marker
        foreign = Path(pi.write(outside, ops, cwd=str(d.workspace))["path"])
        foreign_before = foreign.read_bytes()
        d.start()
        d.wait_notice("READY=1")
        wait_for(lambda: f"session={path} action=due" in d.log(), 30, "the session to be due", d.proc)
        link = d.root / ".swap"
        link.symlink_to(foreign)
        link.rename(path)
        # A second session, due after the swapped one would have been acted on, marks the moment to look.
        clock = Path(pi.write(d.root, turn_ops(12, 3_000), cwd=str(d.workspace))["path"])
        wait_for(lambda: has_compaction(clock), 60, "the later session's compaction", d.proc)
        assert "action=refused" in d.log()
        assert not any(marker in r.raw.decode(errors="replace") for r in llm_server.completions)
        assert foreign.read_bytes() == foreign_before and path.is_symlink()
        assert d.stop() == 0
    finally:
        d.kill()


def _root_and_elsewhere(tmp_path: Path) -> tuple[Path, Path]:
    """A watched root and another directory, each with a session file of the same name."""
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    for d in (root, elsewhere):
        d.mkdir()
        (d / "a.jsonl").write_text("{}\n")
    return root, elsewhere


def test_a_directory_swapped_for_a_symlink_after_its_check_is_refused(tmp_path: Path) -> None:
    """realpath is paid once per directory (IntactDirs), yet a root replaced by a symlink leading elsewhere
    is caught at the next file: its path now leads to another directory."""
    from compactd.roots import IntactDirs

    dirs, root, elsewhere = IntactDirs(), *_root_and_elsewhere(tmp_path)
    path = str(root / "a.jsonl")
    assert dirs.is_session_path(path, os.lstat(path))
    root.rename(tmp_path / "moved")
    root.symlink_to(elsewhere)
    assert not dirs.is_session_path(path, os.lstat(path))
    assert not dirs.is_session_path(str(root), os.lstat(root))  # the symlink itself


def test_intact_dirs_pass_remembers_until_it_ends(tmp_path: Path) -> None:
    """Within one pass (a start-up's read of every file) a directory found intact is not checked again; once
    the pass ends, a directory swapped for a symlink leading elsewhere is caught at the next file."""
    from compactd.roots import IntactDirs

    dirs, root, elsewhere = IntactDirs(), *_root_and_elsewhere(tmp_path)
    path = str(root / "a.jsonl")
    dirs.begin_pass()
    assert dirs.is_session_path(path, os.lstat(path))
    root.rename(tmp_path / "moved")
    root.symlink_to(elsewhere)
    assert dirs.is_session_path(path, os.lstat(path))  # remembered for this pass
    dirs.end_pass()
    assert not dirs.is_session_path(path, os.lstat(path))


def test_intact_dirs_pass_does_not_remember_a_broken_directory(tmp_path: Path) -> None:
    from compactd.roots import IntactDirs

    real = tmp_path / "real"
    real.mkdir()
    (real / "a.jsonl").write_text("{}\n")
    (tmp_path / "link").symlink_to(real)
    dirs, path = IntactDirs(), str(tmp_path / "link" / "a.jsonl")
    dirs.begin_pass()
    assert not dirs.is_session_path(path, os.lstat(path))
    assert not dirs.is_session_path(path, os.lstat(path))
    dirs.end_pass()
