"""The pi harness itself: writing and loading through pi's SessionManager, live sessions, the appender."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support import messages as msgs

# Pi's SessionManager in node, live sessions: the full run's, not the inner loop's.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from tests.support.pi import Pi

pytest_plugins = ["tests.support.pi"]

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "fixtures" / "real"


def user(text: str, ts: int) -> dict[str, Any]:
    return msgs.user(text, ts=ts)


def assistant(
    text: str, ts: int, total: int = 500, blocks: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return msgs.assistant(
        *(blocks if blocks is not None else [text]),
        api="anthropic-messages",
        provider="anthropic",
        model="claude-sonnet-4-5",
        usage=msgs.usage(total, input=total - 10, output=10),
        ts=ts,
    )


def file_entries(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text("utf-8").splitlines()]


def test_write_then_load_round_trips_messages_and_ids(pi: Pi, tmp_path: Path) -> None:
    call = {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "/etc/hosts"}}
    result = {
        "role": "toolResult",
        "toolCallId": "call_1",
        "toolName": "read",
        "content": [{"type": "text", "text": "127.0.0.1 localhost"}],
        "isError": False,
        "timestamp": 3,
    }
    ops: list[dict[str, Any]] = [
        {"op": "appendMessage", "message": user("read hosts", 1)},
        {"op": "appendMessage", "message": assistant("", 2, blocks=[call])},
        {"op": "appendMessage", "message": result},
        {"op": "appendMessage", "message": assistant("done", 4, total=900)},
        {"op": "appendLabelChange", "target": 0, "label": "start"},
        {"op": "branch", "target": 0},
        {"op": "appendMessage", "message": assistant("other branch", 5, total=700)},
    ]
    written = pi.write(tmp_path, ops)
    assert written["exists"]
    ids = written["ids"]
    assert ids[5] is None and all(isinstance(i, str) and len(i) == 8 for i in ids[:5] + ids[6:])
    assert written["leaf_id"] == ids[6]

    lines = file_entries(written["path"])
    assert lines[0]["type"] == "session" and lines[0]["id"] == written["session_id"]
    assert [e["id"] for e in lines[1:]] == [i for i in ids if i is not None]
    assert lines[-1]["parentId"] == ids[0]  # the branch op moved pi's leaf back to the first entry

    loaded = pi.load(written["path"])
    assert loaded["session_id"] == written["session_id"]
    assert loaded["leaf_id"] == ids[6]
    assert loaded["branch_ids"] == [ids[0], ids[6]]
    assert loaded["entry_count"] == 6
    assert loaded["messages"] == [ops[0]["message"], ops[6]["message"]]
    assert loaded["model"] == {"provider": "anthropic", "modelId": "claude-sonnet-4-5"}
    assert loaded["thinking_level"] == "off"
    # the estimate anchors on the last assistant's usage, with nothing after it
    assert loaded["estimate"] == {"tokens": 700, "usageTokens": 700, "trailingTokens": 0, "lastUsageIndex": 1}
    assert loaded["message_tokens"] == [3, 3]  # ceil(len("read hosts") / 4), ceil(len("other branch") / 4)
    assert not loaded["rewritten"] and not loaded["wiped"] and loaded["resumable"]


def test_write_without_assistant_writes_nothing(pi_session_factory: Callable[..., dict[str, Any]]) -> None:
    written = pi_session_factory([{"op": "appendMessage", "message": user("hello", 1)}])
    assert not written["exists"] and not Path(written["path"]).exists()
    again = pi_session_factory([{"op": "appendMessage", "message": assistant("hi", 1)}], cwd="/elsewhere")
    assert again["exists"] and Path(again["path"]).parent != Path(written["path"]).parent
    assert json.loads(Path(again["path"]).read_text().splitlines()[0])["cwd"] == "/elsewhere"


def test_write_reports_pi_errors(pi: Pi, tmp_path: Path) -> None:
    with pytest.raises(pi.Error, match="not found"):
        pi.write(tmp_path, [{"op": "branch", "target": "deadbeef"}])
    with pytest.raises(pi.Error, match="unknown operation"):
        pi.write(tmp_path, [{"op": "rewriteHistory"}])


def test_load_works_on_a_copy(pi: Pi, tmp_path: Path) -> None:
    """pi rewrites a v1 file and wipes a headerless one on open; neither may touch the file we hand in."""
    v1 = tmp_path / "v1.jsonl"
    v1.write_text(
        json.dumps(
            {"type": "session", "id": "v1-session", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/"}
        )
        + "\n"
        + json.dumps({"type": "message", "timestamp": "2025-01-01T00:00:01.000Z", "message": user("hi", 1)})
        + "\n"
    )
    headerless = tmp_path / "headerless.jsonl"
    headerless.write_text(
        json.dumps({"type": "message", "id": "a", "parentId": None, "message": user("x", 1)}) + "\n"
    )
    before = {p: p.read_bytes() for p in (v1, headerless)}

    loaded_v1, loaded_headerless = pi.load_many([v1, headerless])

    assert {p: p.read_bytes() for p in (v1, headerless)} == before
    assert loaded_v1["source"] == str(v1)
    assert loaded_v1["rewritten"] and not loaded_v1["wiped"]
    assert loaded_v1["messages"] == [user("hi", 1)]
    assert loaded_v1["header"]["version"] == 3
    assert loaded_headerless["wiped"] and loaded_headerless["messages"] == []
    assert loaded_headerless["entry_count"] == 0


def test_load_reports_a_pi_crash(pi: Pi, tmp_path: Path) -> None:
    path = tmp_path / "null-line.jsonl"
    path.write_text(json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/"}) + "\nnull\n")
    with pytest.raises(pi.Error, match="TypeError: Cannot read properties of null"):
        pi.load(path)


def test_append_exchange_extends_the_branch(pi: Pi, tmp_path: Path) -> None:
    written = pi.write(
        tmp_path,
        [
            {"op": "appendMessage", "message": user("q", 1)},
            {"op": "appendMessage", "message": assistant("a", 2)},
        ],
    )
    ids = pi.append_exchange(written["path"], "next question", "next answer", usage={"totalTokens": 4321})
    lines = file_entries(written["path"])
    assert [e["id"] for e in lines[-2:]] == [ids["user_id"], ids["assistant_id"]]
    assert lines[-2]["parentId"] == written["ids"][1]
    assert lines[-1]["parentId"] == ids["user_id"]
    assert lines[-1]["message"]["usage"]["totalTokens"] == 4321

    loaded = pi.load(written["path"])
    assert [m["content"][0]["text"] for m in loaded["messages"]] == ["q", "a", "next question", "next answer"]
    assert loaded["estimate"]["usageTokens"] == 4321


def test_live_session_appends_from_its_in_memory_leaf(pi: Pi, tmp_path: Path) -> None:
    written = pi.write(
        tmp_path,
        [
            {"op": "appendMessage", "message": user("q", 1)},
            {"op": "appendMessage", "message": assistant("a", 2)},
        ],
    )
    path = Path(written["path"])
    with pi.LiveSession(path) as live:
        assert live.session_id == written["session_id"]
        assert live.leaf_id_at_open == written["ids"][1]
        # Someone else appends after pi loaded the file; the running pi does not see it.
        foreign = {
            "type": "message",
            "id": "f0f0f0f0",
            "parentId": written["ids"][1],
            "timestamp": "2025-01-01T00:00:00.000Z",
            "message": user("foreign", 3),
        }
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(foreign) + "\n")
        ids = live.append_exchange("live question", "live answer")
        assert live.context()["leaf_id"] == ids["assistant_id"]
    lines = file_entries(path)
    assert [e["id"] for e in lines[-3:]] == ["f0f0f0f0", ids["user_id"], ids["assistant_id"]]
    assert lines[-2]["parentId"] == written["ids"][1]  # a sibling of the foreign entry, not its child

    loaded = pi.load(path)
    assert loaded["branch_ids"] == [*written["ids"], ids["user_id"], ids["assistant_id"]]
    assert "f0f0f0f0" not in loaded["branch_ids"]


def test_appender_writes_exactly_n_numbered_lines(pi: Pi, tmp_path: Path) -> None:
    written = pi.write(
        tmp_path,
        [
            {"op": "appendMessage", "message": user("q", 1)},
            {"op": "appendMessage", "message": assistant("a", 2)},
        ],
    )
    path = Path(written["path"])
    size_before = path.stat().st_size
    count = 301
    appender = pi.Appender(path, count, start_seq=1000, pause_every=50, pause_ms=0.5)
    appender.start()
    assert appender.leaf_id_at_start == written["ids"][1]
    done = appender.wait()

    assert done.seqs == list(range(1000, 1000 + count))
    assert len(set(done.ids)) == count
    assert all(len(i) == 8 and int(i, 16) >= 0 for i in done.ids)
    with open(path, "rb") as handle:
        handle.seek(size_before)
        new_lines = handle.read().split(b"\n")
    assert new_lines[-1] == b""
    entries = [json.loads(line) for line in new_lines[:-1]]
    assert len(entries) == count
    parents = [written["ids"][1], *done.ids[:-1]]
    for index, (entry, (seq, entry_id), parent) in enumerate(
        zip(entries, done.written, parents, strict=True)
    ):
        assert entry["type"] == "message" and entry["id"] == entry_id and entry["parentId"] == parent
        assert entry["message"]["role"] == ("user" if index % 2 == 0 else "assistant")
        assert entry["message"]["content"] == [{"type": "text", "text": f"seq {seq}"}]

    loaded = pi.load(path)
    assert loaded["branch_ids"][-count:] == done.ids
    assert [m["content"][0]["text"] for m in loaded["messages"][-count:]] == [f"seq {s}" for s in done.seqs]


def test_missing_npm_fails_instead_of_skipping(tmp_path: Path) -> None:
    """With no install and no npm, the harness fails loudly (CI must never skip the differential test)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    node = subprocess.run(["which", "node"], capture_output=True, text=True, check=True).stdout.strip()
    (bin_dir / "node").symlink_to(node)
    env = {**os.environ, "PATH": str(bin_dir), "COMPACTD_PI_DIR": str(tmp_path / "pi"), "HOME": str(tmp_path)}
    code = "import tests.support.pi as p; p.pi_package_dir()"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert "npm is not on PATH" in done.stderr
    assert not (tmp_path / "pi" / "node_modules").exists()


def _server_pid() -> int:
    """The pid of the pi server this process talks to now (starting one if none runs)."""
    from tests.support import pi as harness

    return harness._server(harness.PI_VERSION)._proc.pid


def _server_alive() -> bool:
    from tests.support import pi as harness

    server = harness._servers.get(harness.PI_VERSION)
    return server is not None and server.alive


def _wait_until(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_the_pi_server_is_reused_and_restarted_when_it_dies(pi: Pi, tmp_path: Path) -> None:
    """One node process answers call after call; killed, it is replaced on the next call, which still works."""
    written = pi.write(tmp_path / "a", [{"op": "appendMessage", "message": user("hi", 1)}])
    first = _server_pid()
    pi.write(tmp_path / "b", [{"op": "appendMessage", "message": assistant("yo", 2)}])
    assert _server_pid() == first
    os.kill(first, 9)
    _wait_until(lambda: not _server_alive(), 30)
    loaded = pi.load(
        pi.write(tmp_path / "c", [{"op": "appendMessage", "message": assistant("yo", 2)}])["path"]
    )
    assert loaded["messages"] == [assistant("yo", 2)]
    assert _server_pid() != first
    assert not written["exists"]


def test_a_load_that_never_ends_times_out_and_the_next_call_works(pi: Pi, tmp_path: Path) -> None:
    """pi loops forever on a parentId cycle: the call fails after its timeout and the server is replaced."""
    cycle = tmp_path / "cycle.jsonl"
    header = {"type": "session", "version": 3, "id": "s", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/"}
    lines = [header]
    for entry_id, parent in (("a", "b"), ("b", "a")):
        lines.append(
            {"type": "message", "id": entry_id, "parentId": parent, "timestamp": header["timestamp"]}
            | {"message": user(entry_id, 1)}
        )
    cycle.write_text("".join(json.dumps(line) + "\n" for line in lines))
    stuck = _server_pid()
    with pytest.raises(pi.Error, match="did not finish within 3"):
        pi.load_many([cycle], timeout=3)
    written = pi.write(tmp_path / "w", [{"op": "appendMessage", "message": assistant("ok", 2)}])
    assert pi.load(written["path"])["messages"] == [assistant("ok", 2)]
    assert _server_pid() != stuck


@pytest.mark.skipif(not REAL.is_dir(), reason="the real pi fixtures are not on this machine")
def test_the_server_answers_what_load_mjs_run_alone_prints(pi: Pi, tmp_path: Path) -> None:
    """Same judge: the server's load of the real v3 fixtures equals load.mjs started on its own, field by field."""
    sources = sorted(REAL.glob("*.v3.jsonl"))  # v1 migration draws fresh random ids
    served = pi.load_many(sources)
    copies = []
    for index, source in enumerate(sources):
        (tmp_path / str(index)).mkdir()
        copies.append(tmp_path / str(index) / "session.jsonl")
        copies[-1].write_bytes(source.read_bytes())
    env = {**os.environ, "PI_PACKAGE_DIR": str(pi.package_dir())}
    done = subprocess.run(
        ["node", str(REPO / "tests" / "pi" / "load.mjs")],
        input=json.dumps({"paths": [str(c) for c in copies]}).encode(),
        capture_output=True,
        env=env,
        check=True,
    )
    alone = json.loads(done.stdout.decode("utf-8"))
    assert len(alone) == len(served) == len(sources) >= 2
    for mine, theirs in zip(served, alone, strict=True):
        theirs.pop("path")
        mine = {k: v for k, v in mine.items() if k != "source"}
        assert mine == theirs
