"""An operator's first day (issue 20): exit codes that say what happened, nothing spent on the model before a
check that would refuse the commit, progress on stderr, the fallback policy, the small things. Real files, a
real OpenAI-compatible server, ``compactd`` as a process."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from compactd import progress
from compactd.commands.cli import build_parser
from compactd.commit.locks import lock_path_for, process_starttime
from compactd.core.timestamps import js_iso

from tests.support.cli import compactd
from tests.test_cli_commands import LONG, REPO, SHORT, demo

if TYPE_CHECKING:
    from tests.support.llm_server import StubLLMServer


def model_config(tmp_path: Path, base_url: str, **summarizer: object) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "summarizer": {
                    "base_url": base_url,
                    "model": "stub-model",
                    "timeout_seconds": 30,
                    **summarizer,
                },
                "state_dir": str(tmp_path / "state"),
            }
        )
    )
    return config


@pytest.mark.slow
def test_compact_decides_before_spending_and_its_exit_codes_say_what_happened(
    tmp_path: Path, llm_server: StubLLMServer
) -> None:
    sessions, env = demo(tmp_path)
    config = model_config(tmp_path, llm_server.base_url)
    path = sessions / LONG
    before = path.read_bytes()

    # Written moments ago: busy (3), and not one model call made.
    os.utime(path)
    fresh = compactd("compact", str(path), "--json", "--config", str(config), env=env)
    result = json.loads(fresh.stdout)
    assert fresh.returncode == 3 and result["outcome"] == "busy", fresh.stderr
    assert result["reason"].startswith("not idle") and not llm_server.completions
    assert path.read_bytes() == before

    # A live agent's lock: busy even with --force (the lock is never skipped), still no model call.
    old = time.time() - 3600
    os.utime(path, (old, old))
    lock = lock_path_for(path)
    body = {"pid": os.getpid(), "createdAt": js_iso(time.time()), "starttime": process_starttime(os.getpid())}
    lock.write_text(json.dumps(body))
    locked = compactd("compact", str(path), "--json", "--force", "--config", str(config), env=env)
    assert locked.returncode == 3 and json.loads(locked.stdout)["reason"].startswith("locked")
    assert not llm_server.completions and path.read_bytes() == before
    lock.unlink()

    # Committed (0), with the progress of every model call on stderr (not a terminal: plain lines).
    done = compactd("compact", str(path), "--json", "--config", str(config), env=env)
    result = json.loads(done.stdout)
    assert done.returncode == 0 and result["outcome"] == "committed", done.stderr
    calls = len(llm_server.completions)
    assert calls == result["summarizer_calls"] >= 1
    lines = done.stderr.splitlines()
    started = [line for line in lines if line.startswith("model call ") and " prompt tokens" in line]
    finished = [line for line in lines if line.startswith("model call ") and " done in " in line]
    assert len(started) == len(finished) == calls, done.stderr
    assert started[0].startswith("model call 1 of ~") and "elapsed" in started[0]
    assert "summarizing" in done.stderr and "committing" in done.stderr and "\r" not in done.stderr

    # Nothing left to do on the short session (4).
    old_short = sessions / SHORT
    os.utime(old_short, (old, old))
    nothing = compactd("compact", str(old_short), "--json", "--config", str(config), env=env)
    if json.loads(nothing.stdout)["outcome"] == "nothing_to_do":
        assert nothing.returncode == 4
    # A missing file: failed (1), said plainly.
    missing = compactd("compact", str(sessions / "nope.jsonl"), "--json", "--config", str(config), env=env)
    assert missing.returncode == 1 and json.loads(missing.stdout)["reason"] == "no such file"
    assert "Traceback" not in missing.stderr


@pytest.mark.slow
def test_quiet_silences_the_progress(tmp_path: Path, llm_server: StubLLMServer) -> None:
    sessions, env = demo(tmp_path)
    config = model_config(tmp_path, llm_server.base_url)
    done = compactd("compact", str(sessions / LONG), "--dry-run", "-q", "--config", str(config), env=env)
    assert done.returncode == 0 and llm_server.completions
    assert "model call" not in done.stderr and "summarizing" not in done.stderr  # warnings would still show
    loud = compactd(
        "compact", str(sessions / LONG), "--dry-run", "--log-level", "info", "--config", str(config), env=env
    )
    assert "model call 1 of" in loud.stderr and "INFO" in loud.stderr  # the ordinary log lines too


@pytest.mark.slow
@pytest.mark.parametrize("fallback", ["digest", "none"])
def test_fallback_policy_when_the_model_is_unreachable(tmp_path: Path, fallback: str) -> None:
    sessions, env = demo(tmp_path)
    config = model_config(
        tmp_path, "http://127.0.0.1:9/v1", fallback=fallback, retry={"attempts": 1, "base_seconds": 0.1}
    )
    path = sessions / LONG
    before = path.read_bytes()
    done = compactd("compact", str(path), "--json", "--config", str(config), env=env)
    result = json.loads(done.stdout)
    assert result["model_error"], result
    if fallback == "digest":
        assert done.returncode == 0 and result["committed"] and result["summary_level"] == "digest"
        assert "WARNING" in done.stderr and "committing the digest instead" in done.stderr
    else:
        assert done.returncode == 1 and result["outcome"] == "failed" and not result["committed"]
        assert result["reason"].startswith("model failed, not committed")
        assert path.read_bytes() == before and not list(sessions.glob("*.bak.*"))


@pytest.mark.slow
def test_status_and_metrics_mark_a_digest_that_replaced_a_failed_model(tmp_path: Path) -> None:
    sessions, env = demo(tmp_path)
    config = model_config(tmp_path, "http://127.0.0.1:9/v1", retry={"attempts": 1, "base_seconds": 0.1})
    done = compactd("once", "--sessions", str(sessions), "--json", "--config", str(config), env=env)
    assert done.returncode == 0, done.stderr
    status = compactd("status", "--json", "--config", str(config), env=env)
    [row] = [r for r in json.loads(status.stdout)["sessions"] if r["path"].endswith(LONG)]
    assert row["fallback_error"] and row["last_level"] == "digest"
    table = compactd("status", "--config", str(config), env=env)
    assert "MODEL FAILED" in table.stdout
    prom = (tmp_path / "state" / "metrics.prom").read_text()
    assert "compactd_digest_fallbacks_total 1.0" in prom
    # The session gauge follows the commit: the compacted context's estimate, as status shows it.
    [gauge] = [
        line for line in prom.splitlines() if line.startswith("compactd_session_tokens{") and LONG in line
    ]
    assert float(gauge.rsplit(" ", 1)[1]) == row["tokens"] < row["compact_threshold"]


@pytest.mark.slow
def test_the_small_things(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    inspect = compactd("inspect", str(missing))
    assert inspect.returncode == 2 and "no such file" in inspect.stderr and inspect.stdout == ""
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "none")}
    status = compactd("status", env=env)
    assert status.returncode == 1 and "has not run" in status.stdout
    doctor = compactd("doctor", "--json", env=env)
    report = json.loads(doctor.stdout)
    assert doctor.returncode == report["exit_code"] and report["findings"]
    assert {f["level"] for f in report["findings"]} <= {"ok", "note", "fix", "warn"}
    assert all(f["fix"] for f in report["findings"] if f["level"] == "fix")


def test_every_option_has_help_text() -> None:
    parser = build_parser()
    lacking = []
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for name, sub in action.choices.items():
            for option in sub._actions:
                if option.help is None:
                    lacking.append(f"{name} {'/'.join(option.option_strings) or option.dest}")
    assert not lacking, lacking
    compact = parser.parse_args(["compact", "f", "-q", "--log-level", "debug"])
    assert compact.quiet and compact.log_level == "debug"
    for command in ("once", "summarize"):
        assert parser.parse_args([command, "-q"]).quiet


def _events() -> list[tuple[str, dict[str, object]]]:
    tally = progress.Tally(expected=3)
    progress.stage("summarizing", "route compact_only")
    progress.call_started(tally, what="chunk 1 of ~2", prompt_tokens=9_000, max_tokens=600, planned=12.0)
    progress.call_finished(tally, seconds=2.0, output_tokens=500)
    progress.call_started(tally, what="chunk 2 of ~2", prompt_tokens=9_000, max_tokens=600, planned=12.0)
    progress.call_finished(tally, seconds=4.0, output_tokens=None, error="timeout")
    return []


@pytest.mark.parametrize("live", [False, True])
def test_progress_lines_and_the_live_line(live: bool) -> None:
    stream = io.StringIO()
    handler = progress.ProgressHandler(stream, live=live)
    reporter = logging.getLogger("compactd.progress")
    reporter.addHandler(handler)
    reporter.setLevel(logging.INFO)
    reporter.propagate = False
    try:
        _events()
    finally:
        reporter.removeHandler(handler)
        handler.close()
        reporter.setLevel(logging.NOTSET)
        reporter.propagate = True
    text = stream.getvalue()
    assert "model call 1 of ~3 (chunk 1 of ~2): 9,000 prompt tokens, up to 600 out" in text
    assert "~12s" in text  # before any call finished: the endpoint's remembered speed
    assert "model call 1 of ~3 done in 2.0s, 500 tokens out (250.0 tok/s)" in text
    # the second call's estimate is the measured one (2 s a call), not the remembered 12 s
    assert "model call 2 of ~3 (chunk 2 of ~2)" in text and "this call ~2.0s, ~4.0s to finish" in text
    assert "model call 2 of ~3 failed (timeout) in 4.0s" in text
    if live:
        assert "\r\x1b[K" in text and text.count("\n") == 2  # the stage line, then the last live line ended
    else:
        assert "\r" not in text and text.count("\n") == 5


@pytest.mark.slow
def test_the_readme_demo_leaves_the_real_state_directory_alone(tmp_path: Path) -> None:
    """ "Try it", past its install step, in a fresh HOME: the demo's state goes to its own directory."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Try it", 1)[1].split("```sh\n", 1)[1].split("\n```", 1)[0]
    steps = [s.strip() for s in block.split("&&")]
    demo_steps = steps[steps.index(next(s for s in steps if s.startswith("rm -rf "))) :]
    home = tmp_path / "home"
    home.mkdir()
    command = " && ".join(demo_steps).replace("/tmp/compactd-demo", str(tmp_path / "demo"))
    command = command.replace(".venv/bin/compactd", f"{sys.executable} -m compactd")
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=REPO,
        env={"HOME": str(home), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "compact_only" in done.stdout or "compact_then_truncate" in done.stdout
    assert not (home / ".local" / "state").exists()
    assert (tmp_path / "demo-state" / "compactd" / "status.json").is_file()
    assert "action=no_workspace cwd='/srv/demo-project'" in done.stderr  # the warning the README explains
    assert "action=no_workspace cwd='/srv/demo-project'" in readme


def test_run_logs_each_model_calls_start_and_end_with_its_session() -> None:
    """``run`` has no progress handler: the records reach its ordinary log handler, named by session."""
    from compactd.logs import configure_logging

    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    configure_logging("info", env={}, stream=stream)
    try:
        tally = progress.Tally(label="/s/a.jsonl")
        progress.call_started(tally, what="chunk 1 of ~1", prompt_tokens=100, max_tokens=50, planned=None)
        progress.call_finished(tally, seconds=1.5, output_tokens=40)
    finally:
        for handler in list(root.handlers):
            if handler not in saved[1]:
                root.removeHandler(handler)
        for handler in saved[1]:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(saved[0])
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "INFO compactd.progress: session=/s/a.jsonl model call 1 of ~1 (chunk 1 of ~1)" in lines[0]
    assert "session=/s/a.jsonl model call 1 of ~1 done in 1.5s, 40 tokens out" in lines[1]


@pytest.mark.slow
def test_run_warns_when_no_root_matches(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(tmp_path / "nowhere-*")]},
                "state_dir": str(tmp_path / "state"),
                "openclaw": {"enabled": False},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "STATE_DIRECTORY")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "compactd", "run", "--config", str(config)],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # the daemon's own lines, up to the one that says it serves
            lines.append(line)
            if "action=ready" in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()
    warning = [line for line in lines if "WARNING" in line and "no sessions directory matches" in line]
    assert warning and str(tmp_path / "nowhere-*") in warning[0], lines
