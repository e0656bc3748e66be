"""The one decision (issue 11): ``decide()`` is pure, its route is monotone in the tokens, a ledger's decision
agrees with a full read's but on which compaction route, and every entry point (``run``'s status, ``once``,
``compact``, ``inspect``) shows the same route for the same session. ``once`` shares ``run``'s instance lock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from compactd.config import Config
from compactd.core.decision import ROUTES, Figures, Recorded, decide, route_needed
from compactd.core.ledger import SessionLedger
from compactd.core.planning import figures_of, route_cap, tool_result_cap
from compactd.core.turns import Turn
from compactd.reading import read_transcript
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.cli import compactd
from tests.test_budget import SESSIONS, write_session
from tests.test_coordination import REPO, Setup, gated_responder, is_flush
from tests.test_service_e2e import Daemon, wait_for

if TYPE_CHECKING:
    from tests.support.llm_server import StubLLMServer
    from tests.support.pi import Pi

ENV = {"HOME": "/home/tester"}
# The same ordering as OpenClaw's precheck: the more tokens, the more it takes to fit again.
SEVERITY = {"fits": 0, "truncate_tool_results_only": 1, "compact_then_truncate": 2, "compact_only": 2}
NOW = 1_800_000_000.0


@cache
def cfg(window: int = 32_000, reserve: int | None = None, *, flush: bool = True) -> Config:
    data: dict[str, Any] = {
        "models": {"providers": {"ollama": {"models": {"tiny": {"context_tokens": window}}}}},
        "memory_flush": {"enabled": flush},
    }
    if reserve is not None:
        data["compaction"] = {"reserve_tokens": reserve}
    return Config.from_mapping(data, env=ENV)


def figures(tokens: int, reducible: int | None = 0, **kw: Any) -> Figures:
    return Figures("ollama", "tiny", tokens, reducible_chars=reducible, **kw)


@pytest.mark.slow  # hypothesis-heavy
@settings(max_examples=200, deadline=None)
@given(
    window=st.integers(1_000, 400_000),
    reserve=st.integers(0, 100_000),
    reducible=st.integers(0, 2_000_000),
    tokens=st.lists(st.integers(0, 1_000_000), min_size=2, max_size=8),
    flushed=st.booleans(),
)
def test_the_route_and_what_is_due_are_monotone_in_tokens(
    window: int, reserve: int, reducible: int, tokens: list[int], flushed: bool
) -> None:
    config = cfg(window, reserve)
    decisions = [
        decide(config, figures(t, reducible), Recorded(flushed_this_cycle=flushed), now=NOW)
        for t in sorted(tokens)
    ]
    for before, after in pairwise(decisions):
        assert SEVERITY[before.route] <= SEVERITY[after.route], (before, after)
        assert before.due <= after.due and before.flush <= after.flush
        assert before.compact <= after.compact
        assert before.skip == after.skip  # the window decides a skip, never the size
    for d in decisions:
        assert d.route in ROUTES
        assert d.compact == (d.skip is None and d.budget.estimated_with_margin > d.budget.compact_threshold)
        assert d.action in (*ROUTES, "flush", "skipped")
        if d.route != "fits":
            assert (d.route == "compact_only") == (reducible == 0)


@settings(max_examples=200, deadline=None)
@given(
    window=st.integers(1_000, 400_000),
    reserve=st.none() | st.integers(0, 100_000),
    tokens=st.integers(0, 600_000),
    stale=st.none() | st.integers(0, 600_000),
    known=st.booleans(),
)
def test_route_needed_is_a_ledger_decisions_provisional_route(
    window: int, reserve: int | None, tokens: int, stale: int | None, known: bool
) -> None:
    """``route_needed`` (what the tracker asks before counting a ledger's tool results) is ``decide``'s
    ``not exact`` on the ledger's figures, skipped windows and unknown models included."""
    config = cfg(window, reserve)
    ledger = SessionLedger(
        provider="ollama" if known else None,
        model="tiny" if known else None,
        trailing_tokens=tokens,
        stale_total=stale,
    )
    decision = decide(config, Figures.of_ledger(ledger, size=0, mtime=0.0), now=NOW)
    assert route_needed(config, ledger) is not decision.exact


@settings(max_examples=200, deadline=None)
@given(
    window=st.integers(1_000, 400_000),
    tokens=st.integers(0, 600_000),
    reducible=st.integers(0, 2_000_000),
    size=st.integers(0, 10**9),
    flushed=st.booleans(),
)
def test_a_ledger_decision_is_the_exact_one_but_for_which_compaction_route(
    window: int, tokens: int, reducible: int, size: int, flushed: bool
) -> None:
    """The ledger does not count the reducible characters: everything else it decides exactly as a full
    read does, and it says when its route is provisional."""
    config = cfg(window)
    recorded = Recorded(flushed_this_cycle=flushed)
    ledger = decide(config, figures(tokens, None, size=size), recorded, now=NOW)
    exact = decide(config, figures(tokens, reducible, size=size), recorded, now=NOW)
    assert exact.exact
    same = ("due", "compact", "flush", "skip", "ready", "wait", "wait_seconds")
    assert {k: getattr(ledger, k) for k in same} == {k: getattr(exact, k) for k in same}
    assert ledger.budget.compact_threshold == exact.budget.compact_threshold
    assert ledger.budget.flush_threshold == exact.budget.flush_threshold
    if ledger.skip is not None:  # left alone whatever its route: nothing to do, nothing provisional
        assert ledger.exact and ledger.action == exact.action == "skipped" and ledger.next_action is None
    elif ledger.route == "fits":
        assert ledger.route == exact.route and ledger.exact and ledger.next_action == exact.next_action
    else:
        assert not ledger.exact and ledger.route == "compact_only"
    # Pure: the same inputs give the same (frozen) decision.
    assert decide(config, figures(tokens, reducible, size=size), recorded, now=NOW) == exact
    with pytest.raises(AttributeError):
        exact.route = "fits"  # type: ignore[misc]


@settings(max_examples=200, deadline=None)
@given(
    quiet=st.integers(0, 5_000),  # whole seconds: the property is about the rule, not float rounding
    idle=st.integers(0, 100),
    abandoned=st.integers(0, 2_000),
    mid_turn=st.booleans(),
    backoff=st.one_of(st.none(), st.integers(-1_000, 1_000)),
    force=st.booleans(),
)
def test_ready_means_idle_not_mid_turn_and_not_backing_off(
    quiet: int, idle: int, abandoned: int, mid_turn: bool, backoff: int | None, force: bool
) -> None:
    base = cfg()
    config = replace(
        base, sessions=replace(base.sessions, idle_seconds=idle, abandoned_turn_seconds=abandoned)
    )
    turn = Turn(NOW - 10_000) if mid_turn else None
    recorded = Recorded(backoff_until=None if backoff is None else NOW + backoff)
    d = decide(config, figures(40_000, 0, mtime=NOW - quiet, turn=turn), recorded, now=NOW, force=force)
    backing_off = backoff is not None and backoff > 0
    idle_enough = force or (quiet >= idle and not (mid_turn and quiet < abandoned))
    assert d.due and d.ready == (idle_enough and not backing_off)
    assert d.turn_in_flight == (not force and mid_turn and quiet < abandoned)
    if d.turn_in_flight:
        assert d.next_action is not None and d.next_action.startswith("busy: turn in flight")
    else:
        assert d.next_action == d.route == "compact_only"
    if not d.ready:
        assert d.wait is not None
        # Asked the same way once the wait is over (a forced look waits out only the back-off), it is ready.
        later = decide(
            config,
            figures(40_000, 0, mtime=NOW - quiet, turn=turn),
            recorded,
            now=NOW + d.wait_seconds,
            force=force,
        )
        assert later.ready


@pytest.mark.parametrize("name", ["pi-large-session.v3.jsonl", "pi-before-compaction.v3.jsonl"])
@pytest.mark.parametrize("window", [None, 128_000, 16_384])
def test_real_sessions_ledger_and_full_read_decide_alike(name: str, window: int | None) -> None:
    real = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real" / name
    if not real.exists():
        pytest.skip("real pi sessions not present")
    providers = {"anthropic": {"models": {"claude-sonnet-4-5": {"context_tokens": window}}}} if window else {}
    config = Config.from_mapping({"models": {"providers": providers}}, env=ENV)
    transcript = read_transcript(real)
    ledger = SessionLedger.from_bytes(real.read_bytes())
    from_ledger = decide(config, Figures.of_ledger(ledger, size=transcript.size, mtime=0.0), now=NOW)
    exact = decide(config, figures_of(config, transcript), now=NOW)
    assert from_ledger.budget.estimated_with_margin == exact.budget.estimated_with_margin
    assert (from_ledger.due, from_ledger.compact, from_ledger.flush) == (
        exact.due,
        exact.compact,
        exact.flush,
    )
    assert from_ledger.route == exact.route or not from_ledger.exact


@pytest.mark.parametrize(("name", "turns", "route"), SESSIONS, ids=[n for n, _, _ in SESSIONS])
def test_a_due_sessions_ledger_decides_its_route_exactly(
    tmp_path: Path, name: str, turns: Any, route: str
) -> None:
    """The ledger counts the reducible characters at the session's cap (``planning.route_cap``): a due
    session's route is then decided from it alone, as the full read decides it."""
    config = cfg()
    path = tmp_path / f"{name}.jsonl"
    write_session(path, turns)
    transcript = read_transcript(path)
    ledger = SessionLedger.from_bytes(path.read_bytes(), cap_for=route_cap(config))
    exact = decide(config, figures_of(config, transcript), now=NOW)
    assert exact.route == route
    if route == "fits":
        assert ledger.reducible is None  # nothing to route: not counted
        return
    assert ledger.reducible is not None
    cap, reducible = ledger.reducible
    assert cap == tool_result_cap(config, ledger.provider, ledger.model)
    figures = Figures.of_ledger(ledger, size=transcript.size, mtime=0.0, reducible=reducible)
    assert decide(config, figures, now=NOW) == exact


# --- every entry point, one session directory --------------------------------------------------------------


def _write_sessions(root: Path) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    routes = {}
    for name, turns, route in SESSIONS:
        write_session(root / f"{name}.jsonl", turns)
        routes[f"{name}.jsonl"] = route
    return routes


def _daemon(tmp_path: Path) -> Daemon:
    return Daemon(
        tmp_path,
        None,
        sessions={"idle_seconds": 3_600},  # just written: run waits, and shows what it will do
        models={"providers": {"ollama": {"models": {"tiny": {"context_tokens": 32_000}}}}},
    )


def _status_rows(d: Daemon, count: int) -> dict[str, dict[str, Any]] | None:
    try:
        status = json.loads((d.state / "status.json").read_text())
    except (OSError, ValueError):
        return None
    rows = {r["file"]: r for r in status.get("sessions", [])}
    return rows if len(rows) == count else None


@pytest.mark.slow  # ten subprocesses and a daemon
def test_run_once_compact_and_inspect_show_the_same_route(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    expected = _write_sessions(d.root)
    config = str(d.config_path)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "none")}
    inspected = {}
    compacted = {}
    for name in expected:
        shown = compactd("inspect", str(d.root / name), "--json", "--config", config, env=env)
        assert shown.returncode == 0, shown.stderr
        inspected[name] = json.loads(shown.stdout)["route"]
        dry = compactd("compact", str(d.root / name), "--dry-run", "--json", "--config", config, env=env)
        assert dry.returncode == 0, dry.stderr
        compacted[name] = json.loads(dry.stdout)
    once = compactd("once", "--dry-run", "--json", "--config", config, env=env)
    assert once.returncode == 0, once.stderr
    once_rows = {Path(r["path"]).name: r for r in json.loads(once.stdout)}
    d.start()
    try:
        # status shows the route the job will end with, once worked out in the background.
        def predicted() -> dict[str, dict[str, Any]] | None:
            rows = _status_rows(d, len(expected))
            if rows is None:
                return None
            due = [n for n, route in expected.items() if route != "fits"]
            return rows if all(rows[n]["next_action"] == inspected[n] for n in due) else None

        rows = wait_for(predicted, 60, "status.json with every session's predicted route", d.proc)
    finally:
        d.stop()
    for name, route in expected.items():
        # inspect predicts the route the job ends with: the decided one, or compact_only where the summary
        # alone leaves room to work.
        assert inspected[name] == route or (route, inspected[name]) == (
            "compact_then_truncate",
            "compact_only",
        )
        assert once_rows[name]["action"] == inspected[name], once_rows[name]
        status_next = rows[name]["next_action"]
        if route == "fits":
            assert status_next is None
            assert compacted[name]["route"] == "compact_only"  # asked for by name: compacted anyway
            continue
        assert once_rows[name]["route"] == inspected[name]
        assert status_next == inspected[name], rows[name]
        assert compacted[name]["route"] == inspected[name], compacted[name]  # the prediction is the run
    assert set(inspected.values()) != set(expected.values())  # a prediction differed from the decision here


@pytest.mark.slow  # a daemon and a once; test_locks keeps the lock in the inner loop
def test_once_while_run_holds_the_state_directory_exits_3_and_changes_nothing(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    _write_sessions(d.root)
    before = {p.name: p.read_bytes() for p in d.root.iterdir()}
    d.start()
    try:
        d.wait_notice("READY=1")
        claims = (
            sorted(p.name for p in (d.state / "claims").glob("*")) if (d.state / "claims").exists() else []
        )
        # --force: a once that ran would compact every due session at once (they are only not idle).
        done = compactd("once", "--force", "--json", "--config", str(d.config_path))
        assert done.returncode == 3, (done.stdout, done.stderr)
        assert "already running" in done.stderr and f"pid {d.proc.pid}" in done.stderr, done.stderr  # type: ignore[union-attr]
        assert "once changed nothing" in done.stderr and done.stdout == ""
        assert {p.name: p.read_bytes() for p in d.root.iterdir()} == before
        now_claims = (
            sorted(p.name for p in (d.state / "claims").glob("*")) if (d.state / "claims").exists() else []
        )
        assert now_claims == claims
        assert d.proc is not None and d.proc.poll() is None  # the daemon goes on
    finally:
        assert d.stop() == 0
    # With the daemon gone, the same once runs (the lock is the only thing that stopped it).
    done = compactd("once", "--json", "--config", str(d.config_path))
    assert done.returncode == 0, done.stderr
    rows = {Path(r["path"]).name: r for r in json.loads(done.stdout)}
    assert rows["zero-tool-results.jsonl"]["action"] == "wait"  # written just now, idle_seconds 3,600


@pytest.mark.slow  # a once held in its flush, and a daemon
def test_run_started_while_a_once_works_waits_for_it_then_serves(
    tmp_path: Path, llm_server: StubLLMServer, pi: Pi
) -> None:
    """``once`` holds the instance lock shared: a ``run`` started meanwhile neither fails (systemd would
    restart it in a loop) nor works beside it; it waits, and serves once the ``once`` is done."""
    gate = threading.Event()
    llm_server.responder = gated_responder(gate)
    s = Setup(tmp_path, llm_server, pi)
    first = s.start("once", "--json")
    log_path = tmp_path / "run.log"
    try:
        wait_for(lambda: any(is_flush(r) for r in llm_server.completions), 60, "the once's flush call")
        with open(log_path, "wb") as log:
            runner = subprocess.Popen(
                [sys.executable, "-m", "compactd", "run", "--config", str(s.config), "--log-level", "info"],
                cwd=REPO,
                env={k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "STATE_DIRECTORY")},
                stdout=log,
                stderr=log,
            )
        try:
            wait_for(lambda: "action=waiting" in log_path.read_text(), 30, "run to wait for the once", runner)
            assert not (s.state / "status.json").exists() or first.poll() is not None
            gate.set()
            out, err = first.communicate(timeout=120)
            assert json.loads(out)[0]["committed"] is True, err
            wait_for(lambda: "action=ready" in log_path.read_text(), 30, "run to start serving", runner)
        finally:
            runner.send_signal(signal.SIGTERM)
            assert runner.wait(timeout=20) == 0, log_path.read_text()
    finally:
        gate.set()
        first.kill()


@pytest.mark.parametrize(("name", "turns", "route"), SESSIONS, ids=[n for n, _, _ in SESSIONS])
@pytest.mark.parametrize("summary_max_chars", [1, 2_000, 16_000, 400_000])
@pytest.mark.parametrize("target_fill", [0.3, 0.6, 1.0])
def test_a_dry_runs_route_is_the_one_the_written_digest_leads_to(
    tmp_path: Path, name: str, turns: Any, route: str, summary_max_chars: int, target_fill: float
) -> None:
    """``predict_route`` writes no digest when every summary length the engine can write leads to one route
    (a tiny ``summary_max_chars``: always), and writes it when they disagree (a huge one: always); either way
    its route is the one the job takes with the digest written (``compact --dry-run``)."""
    import anyio
    from compactd.sources.files.job import Plan, compact_file, predict_route

    config = Config.from_mapping(
        {
            "models": {"providers": {"ollama": {"models": {"tiny": {"context_tokens": 32_000}}}}},
            "compaction": {"summary_max_chars": summary_max_chars, "target_fill": target_fill},
        },
        env=ENV,
    )
    path = tmp_path / f"{name}.jsonl"
    write_session(path, turns)
    transcript = read_transcript(path)
    figures = figures_of(config, transcript)
    decision = decide(config, figures, now=NOW, force=True)
    predicted = anyio.run(lambda: predict_route(str(path), config, transcript, decision.job_route))
    given = anyio.run(
        lambda: predict_route(str(path), config, transcript, decision.job_route, plan=Plan(figures, decision))
    )
    written = anyio.run(
        lambda: compact_file(str(path), config, dry_run=True, force=True, plan=Plan(figures, decision))
    )
    assert predicted == given == written.route


@pytest.mark.parametrize(("name", "turns", "route"), SESSIONS, ids=[n for n, _, _ in SESSIONS])
@pytest.mark.parametrize("trusted", [False, True])
def test_a_dry_run_chooses_the_workspace_once_for_the_flush_and_the_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, turns: Any, route: str, trusted: bool
) -> None:
    """``job.workspace_of``, shared by ``flush_runs`` and ``predict_route`` (a dry run asks both): the choice
    is made once, and both answer as each does choosing it itself."""
    import anyio
    from compactd.sources.files import job
    from compactd.workspace import Workspace

    chosen: list[str] = []

    def choose(config: Config, path: str, header: Any) -> Workspace | None:
        chosen.append(path)
        return Workspace(tmp_path, "cwd") if trusted else None

    monkeypatch.setattr(job, "trusted_workspace", choose)
    config = Config.from_mapping(
        {"models": {"providers": {"ollama": {"models": {"tiny": {"context_tokens": 32_000}}}}}}, env=ENV
    )
    path = tmp_path / f"{name}.jsonl"
    write_session(path, turns)
    transcript = read_transcript(path)
    decision = decide(config, figures_of(config, transcript), now=NOW, force=True)

    def both(workspace: Any) -> tuple[bool, str]:
        flush = job.flush_runs(config, str(path), transcript, workspace=workspace)
        routed = anyio.run(
            lambda: job.predict_route(str(path), config, transcript, decision.job_route, workspace=workspace)
        )
        return flush, routed

    alone = both(None)
    asked = len(chosen)
    chosen.clear()
    assert both(job.workspace_of(config, str(path), transcript)) == alone
    assert len(chosen) == min(asked, 1)
