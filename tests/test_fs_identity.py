"""A thread of a root process opens files as a user, and only that thread, and only inside the block."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from compactd.fs_identity import files_as
from compactd.workspace import identity_of

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to take another user's identity")

NOBODY = 65534


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A directory every user can traverse (pytest's own is root's alone), with a world-writable ``shared/``."""
    path = Path(tempfile.mkdtemp(prefix="compactd-fsid-"))
    path.chmod(0o755)
    (path / "shared").mkdir()
    (path / "shared").chmod(0o777)
    yield path
    shutil.rmtree(path)


def test_files_as_a_user_holds_for_this_thread_alone_and_is_given_back(reachable: Path) -> None:
    private = reachable / "root-only"
    private.write_text("root's")
    private.chmod(0o600)
    inside, held, release = [], threading.Event(), threading.Event()

    def as_nobody() -> None:
        with files_as(identity_of(NOBODY, NOBODY)):
            try:
                private.read_text()
            except PermissionError:
                inside.append("refused")
            (reachable / "shared" / "made").write_text("")  # created as the user
            held.set()
            release.wait(10)
        inside.append(private.read_text())  # given back

    worker = threading.Thread(target=as_nobody)
    worker.start()
    assert held.wait(10)
    try:
        assert private.read_text() == "root's"  # the main thread is still root meanwhile
    finally:
        release.set()
        worker.join(10)
    assert inside == ["refused", "root's"]
    assert (reachable / "shared" / "made").stat().st_uid == NOBODY
