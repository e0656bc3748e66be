"""A session's ``cwd`` is a claim, not a permission (issue 9 item 3): the trust rule, and compactd acting in a
workspace as its owner. The end-to-end cases run the real ``compactd once`` as root against the stub server,
with session files owned by ``nobody``."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from compactd.memory import MemoryWriteRefused, append_memory_as_owner
from compactd.reading import read_transcript
from compactd.workspace import Identity, Workspace, claimed_workspace, read_agents_md

from tests.support.cli import compactd
from tests.test_service_e2e import MODEL, responder, turn_ops

if TYPE_CHECKING:
    from tests.support.llm_server import StubLLMServer
    from tests.support.pi import Pi

NOBODY = 65534
AS_NOBODY = Identity(NOBODY, NOBODY, (NOBODY,))
NOW = datetime(2026, 3, 5, 12, 0, tzinfo=UTC)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")


def agents_md(marker: str) -> str:
    return f"# Agent\n\n## Session Startup\nRead memory/YYYY-MM-DD.md first.\n\n## Red Lines\n{marker}\n"


@pytest.fixture
def tree() -> Iterator[Path]:
    """A world-traversable directory outside pytest's private tmp dir, so ``nobody`` can reach into it."""
    root = Path(tempfile.mkdtemp(prefix="compactd-ws-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root)


def make_dir(path: Path, *, owner: int = 0, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, owner, owner)
    path.chmod(mode)
    return path


def write_file(path: Path, text: str, *, owner: int = 0, mode: int = 0o644) -> Path:
    path.write_text(text)
    os.chown(path, owner, owner)
    path.chmod(mode)
    return path


def session(pi: Pi, folder: Path, cwd: str, *, owner: int) -> Path:
    """A pi-written session over its threshold, idle for an hour, owned by ``owner``."""
    make_dir(folder)
    path = Path(pi.write(folder, turn_ops(12, 3_000), cwd=cwd)["path"])
    os.chown(path, owner, owner)
    old = time.time() - 3600
    os.utime(path, (old, old))
    return path


def config(tree: Path, llm: StubLLMServer, **extra: Any) -> Path:
    data: dict[str, Any] = {
        "sessions": {"roots": [str(tree / "sessions"), str(tree / "agents" / "*" / "sessions")]},
        "models": {"providers": {"anthropic": {"models": {MODEL: {"context_tokens": 20_000}}}}},
        "compaction": {"keep_recent_turns": 1, "keep_recent_tokens": 2_000},
        "summarizer": {"base_url": llm.base_url, "model": "stub-model", "timeout_seconds": 30},
        "state_dir": str(tree / "state"),
        **extra,
    }
    path = tree / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def once(cfg: Path) -> tuple[dict[str, dict[str, Any]], str]:
    result = compactd("once", "--config", str(cfg), "--json")
    assert result.returncode == 0, result.stderr
    return {row["path"]: row for row in json.loads(result.stdout)}, result.stderr


def compaction_texts(path: Path) -> str:
    """The committed summary and post-compaction message of a session."""
    entries = read_transcript(path).entries
    summaries = [e["summary"] for e in entries if e.get("type") == "compaction"]
    posts = [str(e.get("content")) for e in entries if e.get("type") == "custom_message"]
    assert summaries, "not compacted"
    return "\n".join(summaries + posts)


def bodies(llm: StubLLMServer) -> list[str]:
    return [r.raw.decode(errors="replace") for r in llm.completions]


# --- end to end, as root --------------------------------------------------------------------------------------


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@needs_root
def test_a_cwd_naming_another_users_private_directory_is_not_a_workspace(
    tree: Path, pi: Pi, llm_server: StubLLMServer
) -> None:
    llm_server.responder = responder
    private = make_dir(tree / "private", mode=0o700)
    write_file(private / "AGENTS.md", agents_md("RED-LINE-PRIVATE-5c2a never share root's keys"), mode=0o600)
    configured = make_dir(tree / "configured", mode=0o700)
    write_file(configured / "AGENTS.md", agents_md("RED-LINE-CONFIGURED-0b7e"), mode=0o600)
    claimed = session(pi, tree / "sessions", str(private), owner=NOBODY)
    vouched = session(pi, tree / "agents" / "main" / "sessions", str(private), owner=NOBODY)
    cfg = config(tree, llm_server, agents={"workspaces": {"main": str(configured)}})

    rows, log = once(cfg)
    assert rows[str(claimed)]["committed"] and rows[str(vouched)]["committed"]
    # The claimed cwd is refused: its rules reach neither the summary, the post-compaction message nor a model.
    assert "RED-LINE-PRIVATE" not in compaction_texts(claimed)
    assert not any("RED-LINE-PRIVATE" in b for b in bodies(llm_server))
    assert not (private / "memory").exists() and sorted(os.listdir(private)) == ["AGENTS.md"]
    assert (
        f"session={claimed} action=no_workspace" in log
        and f"not by the session file's owner uid {NOBODY}" in log
    )
    assert os.stat(claimed).st_uid == NOBODY  # the rotated file is still the agent's: no trust gained
    # A configured workspace stays trusted as configured.
    assert "RED-LINE-CONFIGURED-0b7e" in compaction_texts(vouched)
    doctor = compactd("doctor", "--config", str(cfg))
    assert f"note  {claimed}: cwd '{private}' is not used as its workspace" in doctor.stdout
    assert str(vouched) not in doctor.stdout


@pytest.mark.slow  # processes, pi or many examples: left to the full run
def test_cwd_slash_or_etc_creates_nothing(tree: Path, pi: Pi, llm_server: StubLLMServer) -> None:
    llm_server.responder = responder
    made = [Path("/memory"), Path("/etc/memory")]
    if any(p.exists() for p in made):
        pytest.fail(f"left over from an earlier run, remove first: {[str(p) for p in made if p.exists()]}")
    owner = os.geteuid()
    paths = [session(pi, tree / "sessions", cwd, owner=owner) for cwd in ("/", "/etc")]
    rows, log = once(config(tree, llm_server))
    try:
        assert all(rows[str(p)]["committed"] for p in paths)
        assert not any(p.exists() for p in made)
        assert not any("durable memories" in b for b in bodies(llm_server))  # no workspace: no flush
        assert "/ is a shared system directory" in log and "/etc is a system directory" in log
    finally:
        for p in made:  # on a regression, do not leave files in / behind
            if p.exists():
                shutil.rmtree(p)


@pytest.mark.slow  # processes, pi or many examples: left to the full run
@needs_root
def test_the_session_owners_workspace_is_used_with_their_identity(
    tree: Path, pi: Pi, llm_server: StubLLMServer
) -> None:
    llm_server.responder = responder
    home = make_dir(tree / "home", owner=NOBODY)
    write_file(home / "AGENTS.md", agents_md("RED-LINE-NOBODY-41aa"), owner=NOBODY)
    # nobody's own file that nobody cannot read (mode 000): root could, compactd acting as nobody cannot.
    closed = make_dir(tree / "closed", owner=NOBODY)
    write_file(closed / "AGENTS.md", agents_md("RED-LINE-UNREADABLE-93fd"), owner=NOBODY, mode=0o000)
    own = session(pi, tree / "sessions", str(home), owner=NOBODY)
    other = session(pi, tree / "agents" / "b" / "sessions", str(closed), owner=NOBODY)

    rows, _ = once(config(tree, llm_server))
    assert rows[str(own)]["committed"] and rows[str(other)]["committed"]
    assert "RED-LINE-NOBODY-41aa" in compaction_texts(own)
    (memory_file,) = (home / "memory").iterdir()
    assert "compactd memory flush" in memory_file.read_text()
    assert os.stat(home / "memory").st_uid == NOBODY and os.stat(memory_file).st_uid == NOBODY
    assert "RED-LINE-UNREADABLE" not in compaction_texts(other)
    assert not any("RED-LINE-UNREADABLE" in b for b in bodies(llm_server))


# --- the trust rule ---------------------------------------------------------------------------------------------


@needs_root
@pytest.mark.parametrize(
    ("cwd", "reason"),
    [
        ("relative/dir", "not an absolute path"),
        ("/", "/ is a shared system directory"),
        ("/etc", "/etc is a system directory"),
        ("/usr/local/share", "/usr/local/share is a system directory"),
        ("/proc/self/cwd", "is a system directory"),
        ("/var", "/var is a shared system directory"),
        ("/home", "/home is a shared system directory"),
        ("/tmp", "/tmp is a shared system directory"),
    ],
)
def test_system_and_relative_cwds_are_refused(tree: Path, cwd: str, reason: str) -> None:
    path = write_file(tree / "s.jsonl", "", owner=0)
    choice = claimed_workspace(cwd, path)
    assert choice.workspace is None and choice.reason is not None and reason in choice.reason


@needs_root
def test_the_trust_rule(tree: Path) -> None:
    mine = make_dir(tree / "mine", owner=NOBODY)
    theirs = make_dir(tree / "theirs", owner=0)
    shared = make_dir(tree / "shared", owner=NOBODY, mode=0o777)
    link = tree / "link"
    link.symlink_to(theirs)
    os.lchown(link, NOBODY, NOBODY)
    file = write_file(tree / "file", "", owner=NOBODY)
    path = write_file(tree / "s.jsonl", "", owner=NOBODY)

    ok = claimed_workspace(str(mine), path).workspace
    assert ok is not None and ok.path == mine and ok.owner == NOBODY and ok.identity is not None
    assert ok.identity.uid == NOBODY
    for cwd, reason in [
        (theirs, "owned by uid 0, not by the session file's owner uid 65534"),
        (link, "owned by uid 0"),  # a symlink the user made leads to the real owner's directory
        (shared, "writable by everyone"),
        (file, "is not a directory"),
        (tree / "missing", "cannot stat"),
    ]:
        choice = claimed_workspace(str(cwd), path)
        assert choice.workspace is None and choice.reason is not None and reason in choice.reason, cwd
    assert claimed_workspace(None, path).reason is None  # no claim, nothing to refuse


@needs_root
def test_files_in_a_trusted_workspace_must_be_the_owners(tree: Path) -> None:
    ws = make_dir(tree / "ws", owner=NOBODY)
    write_file(ws / "AGENTS.md", agents_md("planted by root"), owner=0)
    workspace = Workspace(ws, "cwd", owner=NOBODY, identity=AS_NOBODY)
    assert read_agents_md(workspace) is None
    make_dir(ws / "memory", owner=0)  # root's directory inside the user's workspace: never written into
    with pytest.raises(MemoryWriteRefused, match="owned by uid 0"):
        append_memory_as_owner(workspace, "- fact", now=NOW)
    assert os.listdir(ws / "memory") == []


@needs_root
def test_writing_as_the_owner_creates_their_files_and_obeys_their_permissions(tree: Path) -> None:
    ws = make_dir(tree / "ws", owner=NOBODY)
    workspace = Workspace(ws, "cwd", owner=NOBODY, identity=AS_NOBODY)
    path = append_memory_as_owner(workspace, "- fact", now=NOW, session_id="s1")
    assert path is not None and path.parent == ws / "memory"
    assert (os.stat(path).st_uid, os.stat(path.parent).st_uid) == (NOBODY, NOBODY)
    ws.chmod(0o555)  # root could still create memory/ here; the owner cannot
    (ws / "memory" / path.name).unlink()
    (ws / "memory").rmdir()
    with pytest.raises(PermissionError):
        append_memory_as_owner(workspace, "- fact", now=NOW)
    assert not (ws / "memory").exists()


@needs_root
def test_the_child_failing_is_an_error_not_a_hang() -> None:
    from compactd.workspace import WorkspaceChildError, run_as

    me = Identity(os.geteuid(), os.getegid(), tuple(os.getgroups()))

    def boom() -> None:
        raise ValueError("broken")

    with pytest.raises(WorkspaceChildError, match="ValueError: broken"):
        run_as(me, boom)

    def slow() -> None:
        time.sleep(5)  # the child overruns its deadline: this is the scenario, not a synchronisation

    started = time.monotonic()
    with pytest.raises(WorkspaceChildError, match="timed out"):
        run_as(me, slow, timeout=0.2)
    assert time.monotonic() - started < 3
