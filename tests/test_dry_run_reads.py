"""``once --dry-run`` reads each transcript once (issue 22, item 4): the discovery's reading of a due session is
the one its action plans on, and what the dry run reports is what it reported when it read the file again."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from compactd.config import load_config
from compactd.core import planning, reader
from compactd.core.reader import MAX_DEPTH
from compactd.service import run_once
from compactd.sources.files import _source
from compactd.sources.files._source import FileSource

from bench.corpus import generate_session
from tests.support.scans import OpeningScans


def _sessions(tmp_path: Path) -> Path:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    generate_session(sessions / "due.jsonl", 900_000, seed=3)  # about 225,000 tokens: over the threshold
    generate_session(sessions / "fits.jsonl", 40_000, seed=4)
    with (sessions / "torn.jsonl").open("wb") as handle:  # due, with a torn line after the bytes it read
        handle.write((sessions / "due.jsonl").read_bytes() + b'{"type":"mess')
    config = tmp_path / "config.yaml"
    config.write_text(f"sessions:\n  roots: [{sessions}]\nstate_dir: {tmp_path / 'state'}\n")
    return config


def _dry_run(
    config: Path, monkeypatch: pytest.MonkeyPatch, *, keep: bool, budget: int | None = None
) -> tuple[str, list[str], int]:
    """The dry run's output, the files its actions read again and how many times the decisions counted the
    reducible characters again; ``keep=False``: as before, every due session read a second time by its action."""
    discovering_of = FileSource._discovering
    reads: list[str] = []
    counts: list[int] = []
    read_transcript = _source.read_transcript
    reducible_chars = planning.reducible_chars

    def discovering(self: FileSource, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        self.keep_readings = keep
        return discovering_of(self, **kwargs)

    def reading(path: str, **kwargs: Any) -> Any:
        reads.append(Path(path).name)
        return read_transcript(path, **kwargs)

    def counting(*args: Any) -> int:
        counts.append(1)
        return reducible_chars(*args)

    monkeypatch.setattr(FileSource, "_discovering", discovering)
    if budget is not None:
        monkeypatch.setattr(_source, "DRY_RUN_KEPT_BYTES", budget)
    monkeypatch.setattr(planning, "reducible_chars", counting)
    monkeypatch.setattr(_source, "read_transcript", reading)
    out = io.StringIO()
    code = run_once(load_config(config), dry_run=True, out=out, err=io.StringIO())
    monkeypatch.undo()
    return f"{code}\n{out.getvalue()}", sorted(reads), len(counts)


def test_a_dry_run_acts_on_the_reading_it_decided_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _sessions(tmp_path)
    again, read_again, counted_again = _dry_run(config, monkeypatch, keep=False)
    once, read_once, counted_once = _dry_run(config, monkeypatch, keep=True)

    assert once == again
    assert "due.jsonl" in once and "route=" in once  # due: its action planned a route
    assert read_again == ["due.jsonl", "torn.jsonl"]
    # The torn line is not in the bytes the discovery parsed: that file alone is read again, whole.
    assert read_once == ["torn.jsonl"]
    # The kept reading's ledger counted its reducible characters: its decision takes that count.
    assert (counted_again, counted_once) == (2, 1)


def test_the_readings_kept_stay_within_their_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _sessions(tmp_path)
    size = (tmp_path / "sessions" / "due.jsonl").stat().st_size
    everything, _, _ = _dry_run(config, monkeypatch, keep=True)
    # No room for a due reading: each due session is read again when acted on, as before, to the same end.
    none, reads, _ = _dry_run(config, monkeypatch, keep=True, budget=size - 1)
    assert none == everything
    assert reads == ["due.jsonl", "torn.jsonl"]


def test_a_dry_run_holds_one_reading_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each due session is acted on right after the discovery read it, so no other due reading is held
    meanwhile (they once all were, until the pass ended: the corpus's size in memory), and the output is the
    same as when every due session was read again after the pass."""
    config = _sessions(tmp_path)
    sessions = tmp_path / "sessions"
    (sessions / "due2.jsonl").write_bytes((sessions / "due.jsonl").read_bytes())
    again, _, _ = _dry_run(config, monkeypatch, keep=False)
    held: list[list[str]] = []
    act_claimed = FileSource.act_claimed

    async def acting(self: FileSource, session: Any, *args: Any, **kwargs: Any) -> Any:
        others = [p for p, s in self.sessions.items() if s.tracker.reading is not None and p != session.path]
        held.append(sorted(Path(p).name for p in others))
        return await act_claimed(self, session, *args, **kwargs)

    monkeypatch.setattr(FileSource, "act_claimed", acting)
    out = io.StringIO()
    code = run_once(load_config(config), dry_run=True, out=out, err=io.StringIO())

    assert f"{code}\n{out.getvalue()}" == again
    assert held == [[], [], []]  # due, due2, torn: each acted on with no other reading held


@pytest.mark.parametrize("force", [False, True])
def test_a_dry_run_decides_each_reading_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, force: bool
) -> None:
    """The refresh's decision on a session's reading is passed on to its action (issue 22): not made again to
    find it ready (``force`` skips the time rule: only a back-off holds it), nor for the unchanged ledger's
    exact figures, nor for the full read's when they are those; a session that fits is not decided again to
    be reported. The output is the one of deciding each time."""
    config = _sessions(tmp_path)
    expected, _, _ = _dry_run(config, monkeypatch, keep=True)
    made: list[bool] = []
    decide = _source.decide

    def deciding(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs.get("force", False))
        return decide(*args, **kwargs)

    monkeypatch.setattr(_source, "decide", deciding)
    out = io.StringIO()
    code = run_once(load_config(config), dry_run=True, force=force, out=out, err=io.StringIO())

    if not force:
        assert f"{code}\n{out.getvalue()}" == expected
    # due: the refresh's (forced, the full read's too: the refresh's was under the time rule); fits: the
    # refresh's; torn (a line after the bytes its ledger read): the refresh's and the full read's.
    assert made == [False, *([True] if force else []), False, False, force]


def _with_deep_value(source: Path, target: Path, at: int) -> None:
    """``source`` with a value nested deeper than ``MAX_DEPTH`` added to its line ``at`` (0: the header)."""
    lines = source.read_bytes().split(b"\n")
    deep: Any = "x"
    for _ in range(MAX_DEPTH + 3):
        deep = [deep]
    lines[at] = orjson.dumps({**orjson.loads(lines[at]), "deep": deep})
    target.write_bytes(b"\n".join(lines))


def test_a_dry_run_reports_a_deep_line_yet_scans_no_session_that_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A due session nested too deep (a line anywhere, or its header) is blocked as when its action read it
    again; the nesting check's scan of every byte (``opening_bytes``) is made only for the due sessions'
    readings, whose problems are read: never for one that fits, deep line or not, whose problems nobody reads."""
    config = _sessions(tmp_path)
    sessions = tmp_path / "sessions"
    middle = (sessions / "due.jsonl").read_bytes().count(b"\n") // 2
    _with_deep_value(sessions / "due.jsonl", sessions / "deep.jsonl", middle)
    _with_deep_value(sessions / "due.jsonl", sessions / "deep_header.jsonl", 0)
    _with_deep_value(sessions / "fits.jsonl", sessions / "deep_fits.jsonl", 3)
    again, _, _ = _dry_run(config, monkeypatch, keep=False)
    with pytest.MonkeyPatch.context() as patched:
        scanned = OpeningScans(patched).sizes
        once, _, _ = _dry_run(config, monkeypatch, keep=True)

    assert once == again
    deep, deep_header = sessions / "deep.jsonl", sessions / "deep_header.jsonl"
    assert f"{deep} " in once and f"too_deep at line {middle + 1}" in once
    assert f"{deep_header} " in once and "too_deep at line 1" in once
    size = {p.name: p.stat().st_size for p in sessions.iterdir()}
    # The discovery's readings (torn: the bytes before its torn line; then its action's full read).
    assert sorted(scanned) == sorted(
        [
            size["due.jsonl"],
            size["deep.jsonl"],
            size["deep_header.jsonl"],
            size["due.jsonl"],
            size["torn.jsonl"],
        ]
    )
    assert size["fits.jsonl"] not in scanned and size["deep_fits.jsonl"] not in scanned


def test_a_dry_run_never_walks_a_branch_for_its_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The branch's problems (tool calls' pairing, usage figures, compactions, context edits: a walk of every
    entry of the branch, ``_branch_problems``) are worked out when a reading's ``problems`` are read: a dry run
    reads none of them, due sessions' included; an invalid context edit on a due session's branch still blocks
    it, found without that walk."""
    config = _sessions(tmp_path)
    sessions = tmp_path / "sessions"
    due = (sessions / "due.jsonl").read_bytes()
    last = orjson.loads(due.rstrip(b"\n").rsplit(b"\n", 1)[-1])["id"]
    edit = {"type": "context_edit", "id": "edit", "parentId": last, "targetId": last, "replacement": "bad"}
    (sessions / "edit.jsonl").write_bytes(due + orjson.dumps(edit) + b"\n")
    walks: list[int] = []
    branch_problems = reader._branch_problems

    def counting(branch: list[Any], lines: Any) -> Any:
        walks.append(len(branch))
        return branch_problems(branch, lines)

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(reader, "_branch_problems", counting)
        output, _, _ = _dry_run(config, monkeypatch, keep=True)

    assert walks == []
    line = due.count(b"\n") + 1
    assert f"{sessions / 'edit.jsonl'} reason=context_edit_invalid at line {line}:" in output
    assert "due.jsonl" in output and "route=" in output  # due, decided on: its reading was not blocked
