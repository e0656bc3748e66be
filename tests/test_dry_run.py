"""The dry run is the run (issue 20, item 4): over a varied corpus (bench.corpus: sizes spread log-normally,
tool results carrying most bytes; half the sessions in a trusted workspace), what ``once --dry-run`` and
``inspect`` predict for each session (its route and whether the memory flush does anything) is what ``once``
then does."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from bench.corpus import generate_corpus
from tests.support.cli import compactd

pytestmark = pytest.mark.slow


def corpus(root: Path, window: int, seed: int) -> tuple[Path, Path]:
    sessions, workspace = root / "sessions", root / "workspace"
    generate_corpus(sessions, 14, 3_500_000, seed=seed)
    workspace.mkdir(mode=0o700)
    old = time.time() - 3600  # idle for an hour
    for index, path in enumerate(sorted(sessions.iterdir())):
        if index % 2 == 0:  # a session of a trusted workspace: its flush writes memory/
            lines = path.read_bytes().split(b"\n")
            header = json.loads(lines[0])
            header["cwd"] = str(workspace)
            lines[0] = json.dumps(header).encode()
            path.write_bytes(b"\n".join(lines))
        os.utime(path, (old, old))
    config = root / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "agents": {"defaults": {"context_tokens": window}},
                "sessions": {"roots": [str(sessions)]},
                "state_dir": str(root / "state"),
            }
        )
    )
    return sessions, config


def once(config: Path, *args: str) -> dict[str, dict[str, object]]:
    done = compactd("once", "--json", "--config", str(config), *args)
    assert done.returncode == 0, done.stderr
    return {Path(str(row["path"])).name: row for row in json.loads(done.stdout)}


@pytest.mark.parametrize(("window", "seed"), [(30_000, 7), (60_000, 11)])
def test_once_dry_run_and_inspect_predict_the_route_and_the_flush_once_takes(
    tmp_path: Path, window: int, seed: int
) -> None:
    sessions, config = corpus(tmp_path, window, seed)
    predicted = once(config, "--dry-run")
    inspected = {}
    for path in sorted(sessions.iterdir()):
        shown = compactd("inspect", str(path), "--json", "--config", str(config))
        inspected[path.name] = json.loads(shown.stdout)
    done = once(config)
    assert set(done) == set(predicted) == set(inspected)
    routes, flushes = set(), set()
    for name, real in done.items():
        dry = predicted[name]
        assert (dry["action"], dry.get("flush")) == (real["action"], real.get("flush")), (name, dry, real)
        if real["action"] not in ("fits", "flush", "skipped"):
            assert inspected[name]["route"] == real["action"], (name, inspected[name]["route"], real)
            assert inspected[name]["flush"] == real["flush"], name
        routes.add(str(real["action"]))
        flushes.add(real.get("flush"))
    # The corpus is varied enough for the comparison to mean something.
    assert {"compact_only", "compact_then_truncate"} <= routes, routes
    assert {True, False} <= flushes, flushes
