"""The state directory on a real filesystem: sessions and back-offs across restarts, atomic status and
metrics files, the Prometheus text format, and the ``compactd status`` table."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from compactd.defaults import BACKOFF_BASE_SECONDS, BACKOFF_MAX_SECONDS, BUSY_RETRY_SECONDS
from compactd.state import (
    METRICS_FILE,
    SESSIONS_FILE,
    STATUS_FILE,
    STATUS_STALE_SECONDS,
    Backoff,
    Metrics,
    SessionState,
    StateStore,
    build_status,
    daemon_running,
    read_status,
    render_status_table,
    write_atomic,
    write_metrics,
    write_status,
)

NOW = 1_700_000_000.0


def full_state(path: str = "/home/a/.pi/agent/sessions/x/2024_abc.jsonl") -> SessionState:
    return SessionState(
        path=path,
        session_id="abc-123",
        tokens=150_000,
        planning_tokens=180_000,
        window=200_000,
        compact_threshold=180_000,
        flush_threshold=176_000,
        last_action="compact",
        last_action_at=NOW - 120,
        next_action="compact",
        failures=2,
        failures_total=5,
        backoff_until=NOW + 600,
        last_error="summarizer timeout",
        flushed_cycle=3,
        compactions=3,
        last_level="llm",
        last_route="compact_only",
        identifiers_total=40,
        identifiers_kept_by_model=31,
        identifiers_in_summary=40,
    )


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def temp_files(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".tmp"))


# --- sessions.json ----------------------------------------------------------------------------------------


def test_sessions_round_trip_through_a_new_store(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    store = StateStore(state_dir)
    store.ensure()
    sessions = {s.path: s for s in (full_state(), SessionState(path="/tmp/other.jsonl"))}
    assert store.save_sessions(sessions) is True
    loaded = StateStore(state_dir).load_sessions()
    assert loaded == sessions
    assert temp_files(state_dir) == []
    assert (state_dir / SESSIONS_FILE).stat().st_mode & 0o777 == 0o600


def test_sessions_json_leaves_out_what_is_none_by_default_and_reads_both_forms(tmp_path: Path) -> None:
    """A field that is None by default and still None is not written (most of them, for most sessions);
    a record written with every field (before) reads the same."""
    full, fresh = full_state(), SessionState(path="/tmp/other.jsonl", tokens=5)
    record = fresh.to_json()
    assert record["tokens"] == 5 and "last_error" not in record and "backoff_until" not in record
    assert record["failures"] == 0  # not None by default: always written
    assert SessionState.from_json(fresh.path, record) == fresh
    assert SessionState.from_json(full.path, full.to_json()) == full
    every_field = {
        f.name: getattr(fresh, f.name) for f in dataclasses.fields(SessionState) if f.name != "path"
    }
    assert SessionState.from_json(fresh.path, every_field) == fresh


def test_ensure_creates_an_owner_only_directory(tmp_path: Path) -> None:
    state_dir = tmp_path / "a" / "b" / "compactd"
    StateStore(state_dir).ensure()
    assert state_dir.is_dir() and state_dir.stat().st_mode & 0o777 == 0o700


def test_a_first_start_has_no_sessions(tmp_path: Path) -> None:
    assert StateStore(tmp_path).load_sessions() == {}


def test_an_unchanged_save_does_not_rewrite(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    sessions = {"/s.jsonl": SessionState(path="/s.jsonl", tokens=10)}
    assert store.save_sessions(sessions)
    inode = (tmp_path / SESSIONS_FILE).stat().st_ino
    assert store.save_sessions(sessions) is False
    assert (tmp_path / SESSIONS_FILE).stat().st_ino == inode
    sessions["/s.jsonl"].tokens = 11
    assert store.save_sessions(sessions) is True
    assert (tmp_path / SESSIONS_FILE).stat().st_ino != inode


def test_a_garbled_sessions_file_is_set_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="compactd.state")
    (tmp_path / SESSIONS_FILE).write_text('{"format": 1, "sessions": {"/a": {"tok')
    assert StateStore(tmp_path).load_sessions() == {}
    assert (tmp_path / f"{SESSIONS_FILE}.corrupt").read_text().startswith('{"format": 1')
    assert not (tmp_path / SESSIONS_FILE).exists()
    assert any("unreadable" in r.getMessage() for r in caplog.records)


def test_odd_fields_fall_back_to_defaults_without_losing_the_backoff(tmp_path: Path) -> None:
    doc = {
        "format": 1,
        "sessions": {
            "/a.jsonl": {
                "tokens": "many",
                "failures": 3,
                "backoff_until": NOW + 100,
                "window": -5,
                "compactions": True,
                "from_the_future": {"x": 1},
                "last_action_at": 1700000000,
            }
        },
    }
    (tmp_path / SESSIONS_FILE).write_text(json.dumps(doc))
    state = StateStore(tmp_path).load_sessions()["/a.jsonl"]
    assert (state.tokens, state.window, state.compactions) == (0, None, 0)
    assert state.failures == 3 and state.backoff_until == NOW + 100
    assert isinstance(state.last_action_at, float)


def test_the_flush_runs_once_per_compaction_cycle() -> None:
    state = SessionState(path="/s")
    assert not state.flushed_this_cycle
    state.mark_flushed(NOW)
    assert state.flushed_this_cycle and state.last_action == "flush"
    state.mark_compacted(
        NOW + 1,
        level="digest",
        route="compact_only",
        identifiers_total=10,
        identifiers_kept_by_model=0,
        identifiers_in_summary=10,
    )
    assert not state.flushed_this_cycle and state.compactions == 1
    assert state.identifier_retention == 1.0 and state.last_level == "digest"


# --- back-off ---------------------------------------------------------------------------------------------


def test_backoff_doubles_from_the_base_and_is_capped() -> None:
    delays = [Backoff.next_delay(n, 10.0, 100.0) for n in range(0, 7)]
    assert delays == [0.0, 10.0, 20.0, 40.0, 80.0, 100.0, 100.0]
    assert Backoff.next_delay(1) == BACKOFF_BASE_SECONDS
    assert Backoff.next_delay(2) == 2 * BACKOFF_BASE_SECONDS
    assert Backoff.next_delay(10_000) == BACKOFF_MAX_SECONDS  # no float overflow after a long outage


def test_failures_back_off_and_a_success_resets() -> None:
    state = SessionState(path="/s")
    assert Backoff.record_failure(state, NOW, 10.0, 100.0, error="boom") == 10.0
    assert state.backoff_until == NOW + 10 and state.in_backoff(NOW + 9.9) and not state.in_backoff(NOW + 10)
    assert Backoff.record_failure(state, NOW + 10, 10.0, 100.0) == 20.0
    assert state.failures == 2 and state.failures_total == 2
    Backoff.record_success(state)
    assert state.failures == 0 and state.backoff_until is None and state.last_error is None
    assert state.failures_total == 2
    assert Backoff.record_failure(state, NOW, 10.0, 100.0) == 10.0  # starts over


def test_a_session_waiting_out_a_back_off_says_so_until_the_wait_is_over() -> None:
    state = SessionState(path="/s")
    state.show_next("compact_only", NOW)
    assert state.next_action == "compact_only"
    state.retry_later(NOW, 0, "the session has an active run")
    assert state.backoff_until == NOW + BUSY_RETRY_SECONDS and state.failures == 0
    state.show_next("compact_only", NOW + 5)  # decided again while it waits: still waiting
    assert state.next_action == "retry: the session has an active run"
    state.show_next("busy: run r1 in progress", NOW + 6)  # what holds it now is shown
    assert state.next_action == "busy: run r1 in progress"
    state.next_action = "retry in 10s"
    state.show_next(None, NOW + 7)  # no longer due: nothing next
    assert state.next_action is None
    state.next_action = "retry in 10s"
    state.show_next("compact_then_truncate", NOW + BUSY_RETRY_SECONDS)  # the wait is over
    assert state.next_action == "compact_then_truncate"


def test_backoff_survives_a_restart(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    state = SessionState(path="/s.jsonl")
    for i in range(3):
        Backoff.record_failure(state, NOW + i, 60.0, 3600.0)
    store.save_sessions({state.path: state})
    restored = StateStore(tmp_path).load_sessions()["/s.jsonl"]
    assert restored.failures == 3 and restored.backoff_until == NOW + 2 + 240
    assert restored.in_backoff(NOW + 100)
    assert Backoff.record_failure(restored, NOW + 300, 60.0, 3600.0) == 480.0  # keeps doubling


# --- atomic writes ----------------------------------------------------------------------------------------


def test_write_atomic_replaces_the_file_as_a_whole(tmp_path: Path) -> None:
    target = tmp_path / STATUS_FILE
    target.write_bytes(b"old content\n")
    with open(target, "rb") as reader:  # a reader that opened the old file keeps reading all of it
        write_atomic(target, b"new content\n")
        assert reader.read() == b"old content\n"
    assert target.read_bytes() == b"new content\n"
    assert temp_files(tmp_path) == []


def test_a_failed_atomic_write_leaves_no_temp_and_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    target.mkdir()  # os.replace onto a directory fails
    with pytest.raises(OSError):
        write_atomic(target, b"x")
    assert temp_files(tmp_path) == [] and target.is_dir()


def test_stale_temps_of_dead_writers_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f".{STATUS_FILE}.{dead_pid()}.0abc.tmp"
    live = tmp_path / f".{METRICS_FILE}.{os.getpid()}.0abc.tmp"
    foreign = tmp_path / f".notes.txt.{dead_pid()}.0abc.tmp"
    for path in (dead, live, foreign):
        path.write_text("partial")
    StateStore(tmp_path).ensure()
    assert not dead.exists() and live.exists() and foreign.exists()


# --- status.json ------------------------------------------------------------------------------------------


def status_for(
    sessions: list[SessionState], *, pid: int | None = None, now: float = NOW
) -> dict[str, object]:
    return build_status(
        sessions,
        now=now,
        started_at=now - 3700,
        version="0.1.0",
        config_path="/etc/compactd.yaml",
        state_dir="/var/lib/compactd",
        pid=pid,
    )


def test_status_is_written_atomically_and_reads_back(tmp_path: Path) -> None:
    status = status_for([full_state(), SessionState(path="/tmp/quiet.jsonl", tokens=5)])
    write_status(tmp_path, status)
    write_status(tmp_path, status)
    assert temp_files(tmp_path) == []
    assert read_status(tmp_path) == json.loads(json.dumps(status))
    assert (tmp_path / STATUS_FILE).stat().st_mode & 0o777 == 0o600


def test_status_document_fields() -> None:
    busy = full_state()
    quiet = SessionState(path="/tmp/quiet.jsonl", tokens=5, planning_tokens=6, compact_threshold=100)
    status = status_for([quiet, busy], pid=os.getpid())
    assert status["pid"] == os.getpid() and isinstance(status["pid_starttime"], int)
    assert status["started_at"] == "2023-11-14T21:11:40+00:00"
    assert status["updated_at"] == "2023-11-14T22:13:20+00:00"
    assert (status["sessions_watched"], status["near_threshold"], status["backing_off"]) == (2, 1, 1)
    assert (status["compactions"], status["failures"]) == (3, 5)
    rows = status["sessions"]
    assert isinstance(rows, list)
    assert [r["file"] for r in rows] == ["2024_abc.jsonl", "quiet.jsonl"]  # fullest first
    assert rows[0]["percent_of_budget"] == 100.0 and rows[0]["identifier_retention"] == 1.0
    assert rows[0]["backoff_until"] == "2023-11-14T22:23:20+00:00"


def test_status_lists_at_most_the_fullest_sessions() -> None:
    states = [SessionState(path=f"/s{i}.jsonl", planning_tokens=i, compact_threshold=100) for i in range(10)]
    status = build_status(states, now=NOW, started_at=NOW, version="v", config_path=None, max_sessions=3)
    assert status["sessions_watched"] == 10 and status["sessions_listed"] == 3
    assert [r["path"] for r in status["sessions"]] == ["/s9.jsonl", "/s8.jsonl", "/s7.jsonl"]
    assert "7 more sessions" in render_status_table(status, now=NOW)


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "no status file"), (b"{not json", "not valid JSON"), (b"[1, 2]", "does not hold")],
)
def test_a_missing_or_garbled_status_is_none_with_a_message(
    tmp_path: Path, content: bytes | None, reason: str
) -> None:
    if content is not None:
        (tmp_path / STATUS_FILE).write_bytes(content)
    problems: list[str] = []
    assert read_status(tmp_path, on_problem=problems.append) is None
    [problem] = problems
    assert reason in problem and str(tmp_path) in problem and "Traceback" not in problem


def test_read_status_logs_by_default(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="compactd.state")
    assert read_status(tmp_path) is None
    [record] = caplog.records
    assert "no status file" in record.getMessage() and record.exc_info is None


def test_daemon_running_checks_the_pid_and_its_start_time() -> None:
    me = status_for([], pid=os.getpid())
    assert daemon_running(me)
    assert not daemon_running(status_for([], pid=dead_pid()))
    assert not daemon_running({**me, "pid_starttime": int(str(me["pid_starttime"])) + 1})  # a reused pid
    assert not daemon_running({"pid": "12"}) and not daemon_running({})


def test_status_table_of_a_running_daemon() -> None:
    status = status_for([full_state(), SessionState(path="/tmp/quiet.jsonl", tokens=1234)], pid=os.getpid())
    table = render_status_table(status, now=NOW + 4)
    lines = table.splitlines()
    assert lines[0].startswith(f"compactd: running (pid {os.getpid()}, up 1h01m)")
    assert "status refreshed 4s ago" in lines[0] and "STALE" not in lines[0]
    assert "config /etc/compactd.yaml" in table
    assert "sessions watched 2, near threshold 1, backing off 1, compactions 3, failures 5" in table
    header = next(line for line in lines if line.startswith("SESSION"))
    assert re.split(r"\s{2,}", header) == ["SESSION", "TOKENS", "WINDOW", "BUDGET", "LAST ACTION", "NEXT"]
    busy = next(line for line in lines if line.startswith("2024_abc.jsonl"))
    assert "150,000" in busy and "200,000" in busy and "100%" in busy
    assert "compact (llm) 2m04s ago" in busy and "back-off 9m56s, 2 failures" in busy
    quiet = next(line for line in lines if line.startswith("quiet.jsonl"))
    assert "1,234" in quiet and re.search(r"\s-\s+-\s+-$", quiet)


def test_status_table_of_a_stopped_or_stale_daemon() -> None:
    stopped = render_status_table(status_for([], pid=dead_pid()), now=NOW + 7200)
    assert stopped.startswith("compactd: not running") and "last refreshed 2h00m ago" in stopped
    assert "no sessions" in stopped
    stale = render_status_table(status_for([], pid=os.getpid()), now=NOW + STATUS_STALE_SECONDS + 60)
    assert stale.startswith("compactd: running") and "STALE" in stale


def test_back_off_shown_from_the_time_of_reading_not_of_writing() -> None:
    status = status_for([full_state()], pid=os.getpid())
    later = render_status_table(
        status, now=NOW + 601
    )  # the back-off has expired since status.json was written
    busy = next(line for line in later.splitlines() if line.startswith("2024_abc.jsonl"))
    assert "back-off" not in busy and busy.rstrip().endswith("compact")


# --- metrics.prom -----------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_prom(text: str) -> tuple[dict[str, str], dict[str, str], list[tuple[str, dict[str, str], float]]]:
    """A strict little parser of the text format: (help, type, samples); asserts on any bad line."""
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    samples: list[tuple[str, dict[str, str], float]] = []
    assert text.endswith("\n")
    for line in text.splitlines():
        assert line, "no blank lines"
        if line.startswith("# HELP "):
            name, _, doc = line[len("# HELP ") :].partition(" ")
            assert name not in helps and doc
            helps[name] = doc
            continue
        if line.startswith("# TYPE "):
            name, _, kind = line[len("# TYPE ") :].partition(" ")
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped") and name not in types
            assert name in helps, f"TYPE before HELP for {name}"
            types[name] = kind
            continue
        assert not line.startswith("#"), line
        match = _SAMPLE.fullmatch(line)
        assert match, f"not `name{{labels}} value`: {line!r}"
        labels: dict[str, str] = {}
        raw = match["labels"] or ""
        position = 0
        while position < len(raw):
            label = _LABEL.match(raw, position)
            assert label, f"bad labels in {line!r}"
            labels[label[1]] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m[0]], label[2])
            position = label.end()
        samples.append((match["name"], labels, float(match["value"])))
    return helps, types, samples


def family_of(name: str, types: dict[str, str]) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and types.get(base) in ("histogram", "summary"):
            return base
    return name


def recorded_metrics() -> Metrics:
    metrics = Metrics(started_at=NOW - 60)
    metrics.set_sessions(3, near_threshold=1)
    metrics.set_session("/a/x.jsonl", session_id="id-1", tokens=1200, window=200_000)
    metrics.set_session('/b/we"ird\\name\n.jsonl', session_id='q"uo\\te', tokens=7)
    metrics.set_session("/c/x.jsonl", session_id="id-1", tokens=99)  # same labels as /a/x.jsonl
    metrics.record_compaction("compact_only", "llm")
    metrics.record_compaction("compact_only", "llm")
    metrics.record_compaction("compact_then_truncate", "digest")
    metrics.record_failure("compact")
    metrics.record_flush("written")
    metrics.record_hook("timeout")
    for seconds in (0.2, 3.0, 3.0, 400.0):
        metrics.observe_summarizer_latency(seconds)
    metrics.observe_summarizer_latency(1.0, purpose="flush")
    metrics.record_retention("/a/x.jsonl", session_id="id-1", total=40, kept_by_model=30, in_summary=40)
    return metrics


def test_metrics_text_parses_and_every_metric_has_help_and_type() -> None:
    helps, types, samples = parse_prom(recorded_metrics().render(now=NOW))
    assert samples
    for name, _labels, _value in samples:
        family = family_of(name, types)
        assert family.startswith("compactd_")
        assert family in helps and family in types, f"{name} lacks HELP/TYPE"
    for family, kind in types.items():
        if kind == "counter":
            assert family.endswith("_total")
    keys = [(n, tuple(sorted(labels.items()))) for n, labels, _ in samples]
    assert len(keys) == len(set(keys)), "duplicate series"


def test_metrics_values() -> None:
    _helps, types, samples = parse_prom(recorded_metrics().render(now=NOW))

    def value(name: str, **labels: str) -> float:
        [found] = [v for n, lab, v in samples if n == name and lab == labels]
        return found

    assert value("compactd_sessions_watched") == 3 and value("compactd_sessions_near_threshold") == 1
    assert value("compactd_session_tokens", session_id="id-1", file="x.jsonl") == 1200
    assert value("compactd_session_tokens", session_id='q"uo\\te', file='we"ird\\name\n.jsonl') == 7
    assert value("compactd_session_context_window", session_id="id-1", file="x.jsonl") == 200_000
    assert value("compactd_compactions_total", route="compact_only", level="llm") == 2
    assert value("compactd_compactions_total", route="compact_then_truncate", level="digest") == 1
    assert value("compactd_failures_total", action="compact") == 1
    assert value("compactd_memory_flushes_total", status="written") == 1
    assert value("compactd_memory_flushes_total", status="failed") == 0  # known outcomes start at zero
    assert value("compactd_hooks_total", status="timeout") == 1
    assert (
        value("compactd_identifier_retention_ratio", session_id="id-1", file="x.jsonl", stage="model") == 0.75
    )
    assert (
        value("compactd_identifier_retention_ratio", session_id="id-1", file="x.jsonl", stage="final") == 1.0
    )
    assert value("compactd_identifiers_total") == 40 and value("compactd_identifiers_kept_total") == 40
    assert value("compactd_identifiers_kept_by_model_total") == 30
    assert value("compactd_last_update_timestamp_seconds") == NOW
    assert value("compactd_start_time_seconds") == NOW - 60
    assert types["compactd_summarizer_latency_seconds"] == "histogram"
    buckets = [
        (float(lab["le"]), v)
        for n, lab, v in samples
        if n == "compactd_summarizer_latency_seconds_bucket" and lab["purpose"] == "compaction"
    ]
    assert buckets == sorted(buckets) and buckets[-1][0] == math.inf
    counts = [v for _, v in buckets]
    assert counts == sorted(counts) and counts[-1] == 4  # cumulative; +Inf holds every observation
    assert dict(buckets)[0.5] == 1 and dict(buckets)[5.0] == 3 and dict(buckets)[300.0] == 3
    assert value("compactd_summarizer_latency_seconds_count", purpose="compaction") == 4
    assert value("compactd_summarizer_latency_seconds_sum", purpose="compaction") == pytest.approx(406.2)
    assert value("compactd_summarizer_latency_seconds_count", purpose="flush") == 1


def test_an_empty_metrics_registry_is_still_valid() -> None:
    helps, types, samples = parse_prom(Metrics(started_at=NOW).render(now=NOW))
    assert set(helps) == set(types) and "compactd_summarizer_latency_seconds" in types
    assert ("compactd_sessions_watched", {}, 0.0) in samples


def test_a_forgotten_session_loses_its_series() -> None:
    metrics = Metrics(started_at=NOW)
    metrics.set_session("/a.jsonl", session_id="a", tokens=1)
    metrics.forget_session("/a.jsonl")
    _h, _t, samples = parse_prom(metrics.render(now=NOW))
    assert not [s for s in samples if s[0] == "compactd_session_tokens"]


def test_metrics_file_is_written_atomically_and_readable(tmp_path: Path) -> None:
    metrics = recorded_metrics()
    path = write_metrics(tmp_path, metrics, now=NOW)
    assert path == tmp_path / METRICS_FILE
    old = open(path, "rb")  # noqa: SIM115 - held open across the rewrite on purpose
    try:
        metrics.record_failure("flush")
        StateStore(tmp_path).write_metrics(metrics, now=NOW + 5)
        assert b'compactd_failures_total{action="flush"} 1' not in old.read()
    finally:
        old.close()
    text = path.read_text()
    assert 'compactd_failures_total{action="flush"} 1' in text
    parse_prom(text)
    assert temp_files(tmp_path) == [] and not [n for n in os.listdir(tmp_path) if n.startswith(".")]
    assert path.stat().st_mode & 0o777 == 0o644  # node_exporter runs as another user


# --- failing and skipped sessions (issue 9, items 1 and 7) --------------------------------------------------


def test_a_failing_and_a_skipped_session_say_why_in_status_and_its_table() -> None:
    failing = SessionState(path="/s/locked.jsonl", tokens=10)
    Backoff.record_failure(failing, NOW, 60, 3600, error="EACCES: Permission denied", stage="read")
    skipped = SessionState(
        path="/s/tiny.jsonl", tokens=90_000, planning_tokens=90_000, compact_threshold=4_000
    )
    skipped.skipped = "context window 8,000 tokens is below the hard minimum of 16,000"
    status = status_for([failing, skipped, SessionState(path="/s/fine.jsonl")], pid=os.getpid())
    assert status["failing"] == 1 and status["skipped"] == 1 and status["backing_off"] == 1
    assert status["near_threshold"] == 0  # a skipped session is never about to be compacted
    rows = {r["file"]: r for r in status["sessions"]}  # type: ignore[attr-defined]
    assert rows["locked.jsonl"]["error_stage"] == "read" and rows["locked.jsonl"]["failures"] == 1
    assert rows["tiny.jsonl"]["skipped"] == skipped.skipped and rows["fine.jsonl"]["skipped"] is None
    table = render_status_table(status, now=NOW + 10)
    assert "failing now 1, skipped 1" in table
    tiny = next(line for line in table.splitlines() if line.startswith("tiny.jsonl"))
    assert tiny.endswith(f"skipped: {skipped.skipped}")
    assert "  locked.jsonl: read failed: EACCES: Permission denied (back-off 50s, 1 failure)" in table
    Backoff.record_success(failing)
    assert failing.last_error is None and failing.error_stage is None


def test_names_and_ids_that_are_not_utf8_do_not_stop_the_state_files(tmp_path: Path) -> None:
    # A file name with an undecodable byte (surrogateescape) and a session id holding a lone surrogate.
    odd = SessionState(path="/s/bad-\udcff.jsonl", session_id="half \ud83d", tokens=5, compactions=1)
    store = StateStore(tmp_path)
    assert store.save_sessions({odd.path: odd})
    assert StateStore(tmp_path).load_sessions() == {odd.path: odd}
    write_status(tmp_path, status_for([odd]))
    status = read_status(tmp_path)
    assert status is not None and status["sessions"][0]["path"] == odd.path
    metrics = Metrics(started_at=NOW)
    metrics.set_session(odd.path, session_id=odd.session_id, tokens=5)
    text = write_metrics(tmp_path, metrics, now=NOW).read_text(encoding="utf-8")
    assert 'file="bad-\\\\udcff.jsonl"' in text
    parse_prom(text)
