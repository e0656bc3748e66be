"""An OpenClaw agent's database is a claim: it is read only when it is the agent owner's own, as that owner.

Two users are needed, so these tests run as root (skipped otherwise): the other user is ``nobody`` (65534), whose
private database (a 0700 directory) holds a secret that must never reach the first user's agent.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from compactd.config import Config
from compactd.sources.openclaw import OpenClawSource, check_openclaw, discover
from compactd.sources.openclaw._store import Store, StoreError

from tests.support.openclaw_db import AgentDb, GatewayProcess

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own files as another user")

OTHER = 65534  # nobody
SESSION = "0196a3b2-0000-7000-8000-0000000000d1"
KEY = "agent:main:work"
SECRET = "my bank PIN is 4417"
DB = "agents/main/agent/openclaw-agent.sqlite"


def chown_tree(root: Path, uid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, uid)


def agent_db(path: Path, text: str) -> None:
    """A stopped agent database holding one session whose only message says ``text``."""
    db = AgentDb(path)
    db.set_node(KEY, SESSION, {"compactionCount": 0})
    header = {
        "type": "session",
        "version": 4,
        "id": SESSION,
        "timestamp": "2026-09-01T00:00:00.000Z",
        "cwd": "/",
    }
    message = {
        "type": "message",
        "id": "m1",
        "parentId": None,
        "timestamp": "2026-09-01T00:00:01.000Z",
        "message": {"role": "user", "content": text, "timestamp": 1},
    }
    db.append(SESSION, [orjson.dumps(header), orjson.dumps(message)])
    db.close()


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another user's private agent database, holding a secret."""
    private = tmp_path / "victim"
    agent_db(private / ".openclaw" / DB, SECRET)
    chown_tree(private, OTHER)
    private.chmod(0o700)
    return private / ".openclaw" / DB


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A directory every user can traverse (pytest's own is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="compactd-claims-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def install(reachable: Path) -> Path:
    """The first user's (here: root's) install, with its own agent database."""
    state = reachable / "mine" / ".openclaw"
    agent_db(state / DB, "hello")
    return state


def source_for(state: Path) -> OpenClawSource:
    return OpenClawSource(Config.defaults(), {"OPENCLAW_STATE_DIR": str(state), "HOME": str(state.parent)})


def doctor(state: Path) -> tuple[int, list[str]]:
    said: list[str] = []
    problems = check_openclaw(
        Config.defaults(),
        {"OPENCLAW_STATE_DIR": str(state), "HOME": str(state.parent)},
        said.append,
        lambda text, fix: said.append(f"BAD {text} / {fix}"),
        lambda text, fix: said.append(f"WARN {text} / {fix}"),
    )
    return problems, said


def read_all(store: Store) -> str:
    with store.connect() as conn:
        return " ".join(e.data.decode() for e in store.events(conn, SESSION))


def test_a_database_symlinked_to_another_users_is_refused_logged_once_and_shown_by_doctor(
    install: Path, victim: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = install / DB
    database.unlink()
    database.symlink_to(victim)  # owned (lstat) by the agent's owner, leading to nobody's private file
    caplog.set_level(logging.WARNING)
    source = source_for(install)
    for _ in range(2):  # two rescans
        source.discover()
        source.refresh_all()
    assert source.agents() == () and source.sessions == {}
    assert SECRET not in caplog.text
    refusals = [r.getMessage() for r in caplog.records if "action=refused" in r.getMessage()]
    assert len(refusals) == 1 and f"{database} is a symlink" in refusals[0]
    problems, said = doctor(install)
    assert problems == 1
    assert any(
        line.startswith("BAD openclaw agent main: not followed") and "is a symlink" in line for line in said
    )


@pytest.mark.parametrize(
    "case",
    [
        "database owned by another user",
        "-wal owned by another user",
        "agent/ directory a symlink",
        "agent directory a symlink",
        "openclaw.json owned by another user",
    ],
)
def test_an_agent_whose_files_are_not_its_owners_own_is_not_followed(install: Path, case: str) -> None:
    database = install / DB
    if case == "database owned by another user":
        os.chown(database, OTHER, OTHER)
    elif case == "-wal owned by another user":
        gateway = GatewayProcess(database)  # a crash leaves a -wal behind
        try:
            gateway.append(
                SESSION, [b'{"type":"message","id":"m2","parentId":"m1","message":{"role":"user"}}']
            )
            gateway.crash()
        finally:
            gateway.kill()
        os.chown(str(database) + "-wal", OTHER, OTHER)
    elif case == "agent/ directory a symlink":
        elsewhere = install / "elsewhere"
        shutil.move(database.parent, elsewhere)
        database.parent.symlink_to(elsewhere)
    elif case == "agent directory a symlink":
        elsewhere = install / "elsewhere"
        shutil.move(database.parent.parent, elsewhere)
        database.parent.parent.symlink_to(elsewhere)
    else:
        (install / "openclaw.json").write_text("{agents: {defaults: {workspace: '/srv/theirs'}}}")
        os.chown(install / "openclaw.json", OTHER, OTHER)
    found = discover({"OPENCLAW_STATE_DIR": str(install)})
    assert found.agents == ()
    ((agent_dir, reason),) = found.refused
    assert agent_dir == str(install / "agents" / "main")
    expected = (
        "is a symlink" if "symlink" in case else f"owned by uid {OTHER}, not by the agent's owner uid 0"
    )
    assert expected in reason


def test_an_openclaw_json_that_is_a_symlink_is_not_read(install: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "theirs.json"
    theirs.write_text("{gateway: {auth: {token: 'their-token-77aa'}, port: 19999}}")
    (install / "openclaw.json").symlink_to(theirs)
    found = discover({"OPENCLAW_STATE_DIR": str(install)})
    assert found.config_error is not None and "is a symlink" in found.config_error
    assert found.token is None and found.port != 19999


def test_a_database_swapped_for_a_symlink_after_discovery_is_not_read(install: Path, victim: Path) -> None:
    (agent,) = discover({"OPENCLAW_STATE_DIR": str(install)}).agents
    store = Store(agent.database, agent.owner, agent.identity)
    assert "hello" in read_all(store)
    os.unlink(agent.database)
    os.symlink(victim, agent.database)
    with pytest.raises(StoreError, match="is a symlink"):
        read_all(store)


def test_as_root_the_database_is_read_as_its_owner(reachable: Path) -> None:
    state = reachable / ".openclaw"
    agent_db(state / DB, "hello")
    chown_tree(state, OTHER)
    database = state / DB
    database.chmod(0o200)  # its owner cannot read it (root could)
    (agent,) = discover({"OPENCLAW_STATE_DIR": str(state)}).agents
    assert agent.owner == OTHER
    store = Store(agent.database, agent.owner, agent.identity)
    with pytest.raises(StoreError, match=r"unable to open|Permission denied"):
        read_all(store)
    database.chmod(0o600)
    assert "hello" in read_all(store)
    # With a live WAL and no -shm the database is read from a private copy, made as the owner as well.
    gateway = GatewayProcess(database)
    try:
        gateway.append(SESSION, [b'{"type":"message","id":"m2","parentId":"m1","message":{"role":"user"}}'])
        gateway.crash()
    finally:
        gateway.kill()
    Path(str(database) + "-shm").unlink()
    chown_tree(state, OTHER)
    assert '"id":"m2"' in read_all(store) and store.copies == 1
    store.drop_copy()
    assert {p.stat().st_uid for p in state.rglob("*")} == {OTHER}  # nothing of root's left in their tree
