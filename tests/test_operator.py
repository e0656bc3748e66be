"""What an operator runs beside compactd (issue 23): the HTTP endpoint, the alert rules and dashboard against the
metrics compactd really writes, logs as events, ``status --watch``.

The daemon runs as a subprocess with a real watcher and a real OpenAI-compatible server; its endpoint is asked by a
real HTTP client (urllib); promtool judges the rules. Every wait polls an observable condition with a deadline.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from compactd.config import Config
from compactd.logs import configure_logging, event_fields
from compactd.reading import read_transcript

from tests.support import messages as msgs
from tests.support.cli import compactd
from tests.support.llm_server import Reply, StubLLMServer

pytest_plugins = ["tests.support.llm_server"]

REPO = Path(__file__).resolve().parents[1]
PROMETHEUS = REPO / "integrations" / "prometheus"
GRAFANA = REPO / "integrations" / "grafana"
# The one list of integration files whose compactd_* names must exist in the metrics compactd writes.
INTEGRATION_FILES = (PROMETHEUS / "compactd-rules.yml", GRAFANA / "compactd-dashboard.json")
SECRET = "s3cretPASSWORD42"
SUMMARY = "\n".join(
    [
        "## Decisions",
        "- Keep the ledger in PostgreSQL 16.",
        "## Open TODOs",
        "- None.",
        "## Constraints/Rules",
        "- None.",
        "## Pending user asks",
        "- None.",
        "## Exact identifiers",
        "- none",
    ]
)


# A compaction recorded: the counter's series start at zero, so one of them must have counted it.
COMPACTED = re.compile(r"^compactd_compactions_total\{[^}]*\} [1-9]", re.MULTILINE)


def wait_for(condition: Callable[[], Any], timeout: float, what: str, proc: subprocess.Popen[bytes]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"compactd exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.05)  # polling an observable condition, bounded by the deadline
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def write_session(path: Path, turns: int, chars: int) -> Path:
    """A pi v3 session whose assistant names a model the config gives a small window."""
    lines = [
        {"type": "session", "version": 3, "id": "op-1", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"}
    ]
    parent = None
    for n in range(turns):
        for i, message in enumerate(
            (
                msgs.user(f"question {n} " + "q" * chars, ts=n),
                msgs.assistant(f"answer {n} " + "a" * chars, ts=n, provider="ollama", model="tiny"),
            )
        ):
            entry_id = f"m{n:03d}{i}"
            stamp = f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}.00{i}Z"
            lines.append(
                {
                    "type": "message",
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": stamp,
                    "message": message,
                }
            )
            parent = entry_id
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def append_entry(path: Path, entry_id: str) -> None:
    """An extension's custom entry under the leaf, as an agent appends it (it changes no figure)."""
    leaf = read_transcript(path).leaf_id
    with open(path, "a") as handle:
        handle.write(
            json.dumps({"type": "custom", "id": entry_id, "parentId": leaf, "customType": "t", "data": {}})
        )
        handle.write("\n")


class Daemon:
    def __init__(self, tmp: Path, llm: StubLLMServer) -> None:
        self.root = tmp / "sessions"
        self.root.mkdir()
        self.state = tmp / "state"
        self.config_path = tmp / "config.yaml"
        self.log_path = tmp / "compactd.log"
        self.config: dict[str, Any] = {
            "sessions": {"roots": [str(self.root)], "idle_seconds": 0.3},
            "models": {"providers": {"ollama": {"models": {"tiny": {"context_tokens": 16_000}}}}},
            "summarizer": {
                "base_url": llm.base_url,
                "api_key_env": "OPERATOR_TEST_KEY",
                "model": "stub",
                "context_tokens": 32_768,
                "timeout_seconds": 30,
            },
            "service": {"status_refresh_seconds": 0.2, "rescan_seconds": 1.0, "http_listen": "127.0.0.1:0"},
            "state_dir": str(self.state),
            "log_level": "INFO",
        }
        self.write_config()
        self.proc: subprocess.Popen[bytes] | None = None

    def write_config(self) -> None:
        self.config_path.write_text(yaml.safe_dump(self.config))

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("JOURNAL_STREAM", "STATE_DIRECTORY", "NOTIFY_SOCKET")
        }
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "compactd", "run", "--config", str(self.config_path), *args],
                cwd=REPO,
                env={**env, "PYTHONUNBUFFERED": "1", "OPERATOR_TEST_KEY": SECRET},
                stdout=log,
                stderr=log,
            )
        return self.proc

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log().splitlines() if line.strip()]

    def url(self) -> str:
        assert self.proc is not None

        def found() -> str | None:
            for event in self.events():
                if event.get("action") == "http_listening":
                    return str(event["url"])
            return None

        return str(wait_for(found, 60, "the HTTP endpoint", self.proc))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def daemon(tmp_path: Path, llm_server: StubLLMServer) -> Iterator[Daemon]:
    llm_server.responder = lambda request: Reply.completion(SUMMARY)
    d = Daemon(tmp_path, llm_server)
    yield d
    d.stop()


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def exported_names(exposition: str) -> set[str]:
    """Every series name the exposition can carry: families from ``# TYPE`` (with a histogram's and a counter's
    suffixes) and the samples' own names."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "histogram":
                names.update(f"{name}{s}" for s in ("_bucket", "_sum", "_count"))
            if kind == "counter" and not name.endswith("_total"):
                names.add(f"{name}_total")
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def names_used(path: Path) -> set[str]:
    return set(re.findall(r"\bcompactd_[a-z0-9_]+\b", path.read_text()))


@pytest.mark.slow  # the daemon as a process
def test_the_daemon_serves_metrics_and_health_over_http_and_logs_events(daemon: Daemon) -> None:
    session = write_session(daemon.root / "s.jsonl", 14, 2_400)
    proc = daemon.start("--log-format", "json")
    url = daemon.url()
    assert url.startswith("http://127.0.0.1:")  # loopback, as configured

    # The session is over its threshold: compacted by the model, the metrics say so on both channels.
    wait_for(
        lambda: any(e.get("type") == "compaction" for e in read_transcript(session).entries),
        90,
        "a compaction",
        proc,
    )

    def compacted() -> str | None:
        code, _, body = get(f"{url}/metrics")
        text = body.decode()
        return text if code == 200 and COMPACTED.search(text) else None

    metrics = wait_for(compacted, 30, "the compaction in /metrics", proc)
    code, headers, _ = get(f"{url}/metrics")
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    textfile = wait_for(
        lambda: (
            (daemon.state / "metrics.prom").exists()
            and COMPACTED.search(t := (daemon.state / "metrics.prom").read_text())
            and t
        ),
        30,
        "metrics.prom",
        proc,
    )
    assert exported_names(metrics) == exported_names(textfile)  # one registry behind both
    code, headers, body = get(f"{url}/healthz")
    health = json.loads(body)
    assert code == 200 and health["status"] == "ok" and health["roots_watched"] == 1, health
    assert get(f"{url}/nope")[0] == 404

    # Appends do not make library chatter at INFO; every line is one JSON event without None fields.
    append_entry(session, "x1")
    wait_for(lambda: get(f"{url}/healthz")[0] == 200, 10, "health", proc)
    events = daemon.events()
    assert not [e for e in events if e["logger"].startswith("watchfiles")]
    assert not [e for e in events if None in e.values() or "None" in e.values()]
    start = next(e for e in events if e.get("action") == "starting")
    assert start["version"] and start["roots"] == str(daemon.root) and "jsonl" in start["sources"]
    assert start["context_tokens"] == 32_768 and start["model"] == "stub"
    assert "127.0.0.1" in start["summarizer"] and SECRET not in daemon.log()

    # log_level on reload: DEBUG from the config takes effect without a restart.
    daemon.config["log_level"] = "DEBUG"
    daemon.write_config()
    proc.send_signal(signal.SIGHUP)
    wait_for(
        lambda: any(e.get("action") == "log_level" for e in daemon.events()), 30, "the new log level", proc
    )
    append_entry(session, "x2")
    wait_for(lambda: any(e["level"] == "debug" for e in daemon.events()), 30, "a debug event", proc)

    # status --watch, as a pipe sees it: plain lines, a bar per session against its threshold.
    watched = compactd(
        "status", "--watch", "--count", "2", "--interval", "0.2", "--config", str(daemon.config_path)
    )
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.splitlines()
    assert lines[0].startswith("--- ") and "compactd: running" in lines[1]
    row = next(line for line in lines if line.startswith("s.jsonl"))
    assert re.search(r"\[[#!\-|]{30}\]", row) and re.search(r"last \w+ \d+%->\d+%", row), row
    print("\n".join(lines))


@pytest.mark.slow  # the daemon as a process
def test_every_metric_the_rules_and_dashboard_use_is_in_the_metrics_compactd_writes(daemon: Daemon) -> None:
    """Against a real metrics.prom: a metric renamed or dropped in compactd fails here, not on an operator's
    dashboard."""
    write_session(daemon.root / "s.jsonl", 2, 100)
    proc = daemon.start()
    path = daemon.state / "metrics.prom"
    text = wait_for(lambda: path.exists() and path.read_text(), 60, "metrics.prom", proc)
    exported = exported_names(text)
    for source in INTEGRATION_FILES:
        used = names_used(source)
        assert used, source
        assert used <= exported, (
            f"{source.name} uses metrics compactd does not export: {sorted(used - exported)}"
        )


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI (.ci/run installs Debian's prometheus package)")
        pytest.skip(
            "promtool not installed (Debian/Ubuntu: apt-get install --no-install-recommends prometheus)"
        )
    return found


def test_promtool_checks_and_unit_tests_the_alert_rules() -> None:
    promtool = _promtool()
    checked = subprocess.run(
        [promtool, "check", "rules", "compactd-rules.yml"], cwd=PROMETHEUS, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 6 rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", "compactd-rules.test.yml"], cwd=PROMETHEUS, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {
        r["alert"]
        for g in yaml.safe_load((PROMETHEUS / "compactd-rules.yml").read_text())["groups"]
        for r in g["rules"]
    }
    tests = yaml.safe_load((PROMETHEUS / "compactd-rules.test.yml").read_text())["tests"]
    covered = {a["alertname"] for t in tests for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert covered == alerts  # every alert is shown firing on synthetic series


def test_the_dashboard_is_grafana_json_with_a_query_per_panel() -> None:
    dashboard = json.loads((GRAFANA / "compactd-dashboard.json").read_text())
    assert dashboard["uid"] == "compactd" and dashboard["panels"]
    for panel in dashboard["panels"]:
        assert panel["targets"] and all("compactd_" in t["expr"] for t in panel["targets"]), panel["title"]


def test_the_start_up_line_masks_the_endpoint_credentials(tmp_path: Path) -> None:
    from compactd.service import Service

    url = f"https://llm.example/v1?sig={SECRET}"
    config = Config.from_mapping(
        {"summarizer": {"base_url": url, "model": "m"}, "state_dir": str(tmp_path / "state")}
    )
    buffer = io.StringIO()
    configure_logging("info", stream=buffer, style="json", env={})
    try:
        Service(config).log_start()
    finally:
        configure_logging("warning")
    event = json.loads(buffer.getvalue())
    assert event["action"] == "starting" and event["summarizer"].startswith("https://llm.example/v1?sig=")
    assert SECRET not in buffer.getvalue()


def test_health_follows_the_loop_and_the_watchers(tmp_path: Path) -> None:
    from compactd.service import LOOP_STALE_SECONDS, WATCH_STALE_SECONDS, Service

    service = Service(Config.from_mapping({"state_dir": str(tmp_path / "state")}))
    files = service.source("jsonl")
    now = time.monotonic()
    service.loop_tick = files.heartbeat = now
    assert service.health()[0]
    service.loop_tick = now - LOOP_STALE_SECONDS - 1  # something holds the loop
    assert not service.health()[0]
    service.loop_tick = now
    files.heartbeat = now - WATCH_STALE_SECONDS - 1
    assert service.health()[0]  # no root watched: no watcher to be stale
    files.watchers["/r"] = anyio.Event()
    healthy, detail = service.health()
    assert not healthy and detail["roots_watched"] == 1
    files.heartbeat = now
    assert service.health()[0]
    service.stopping = True
    assert not service.health()[0]


def test_the_model_calls_limiter_is_made_once_at_the_concurrency_the_service_started_with(
    tmp_path: Path,
) -> None:
    """Made with the first client (a dry run makes none), shared by every later one, at the start's concurrency
    even when a reload has changed it since (as when it was made at the start)."""
    from compactd.service import Service

    config = Config.from_mapping({"state_dir": str(tmp_path / "state"), "summarizer": {"max_concurrency": 3}})
    service = Service(config)
    service.config = Config.from_mapping(
        {"state_dir": str(tmp_path / "state"), "summarizer": {"max_concurrency": 5}}
    )
    limiter = service.limiter
    assert limiter.total_tokens == 3
    assert service.limiter is limiter


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("9464", "127.0.0.1:9464"),
        (9464, "127.0.0.1:9464"),
        ("0.0.0.0:80", "0.0.0.0:80"),
        ("[::1]:9464", "[::1]:9464"),
    ],
)
def test_http_listen_is_loopback_unless_an_address_is_named(
    tmp_path: Path, listen: object, expected: str
) -> None:
    config = Config.from_mapping({"service": {"http_listen": listen}, "state_dir": str(tmp_path)})
    assert config.service.http_listen == expected
    assert Config.from_mapping({"state_dir": str(tmp_path)}).service.http_listen is None


@pytest.mark.parametrize("listen", ["localhost:", "127.0.0.1:99999", "a b:1", True, "http://x:1"])
def test_a_bad_http_listen_is_refused(tmp_path: Path, listen: object) -> None:
    from compactd.config import ConfigError

    with pytest.raises(ConfigError, match="http_listen"):
        Config.from_mapping({"service": {"http_listen": listen}, "state_dir": str(tmp_path)})


def _emit(style: str) -> list[str]:
    buffer = io.StringIO()
    configure_logging("info", stream=buffer, style=style, env={})
    try:
        log = logging.getLogger("compactd.test")
        log.info("not committed path=%s mode=%s reason=%s", "/s p/a.jsonl", "rotate", None)
        log.warning("root=%s action=watcher_stopped error=%s (restarted at the next rescan)", "/r", 'bad "x"')
        logging.getLogger("watchfiles.main").info("1 change detected")
        log.info("recovery: rolled back %d, finished %d", 1, 2)
    finally:
        configure_logging("warning")
    return buffer.getvalue().splitlines()


def test_log_formats_carry_the_same_event_without_none_fields() -> None:
    text = _emit("text")
    assert len(text) == 3  # watchfiles' per-batch line is not an event worth INFO
    assert text[0].endswith("INFO compactd.test: not committed path=/s p/a.jsonl mode=rotate")
    assert text[2].endswith("recovery: rolled back 1, finished 2")
    events = [json.loads(line) for line in _emit("json")]
    assert events[0] == {
        **events[0],
        "level": "info",
        "msg": "not committed",
        "path": "/s p/a.jsonl",
        "mode": "rotate",
    }
    assert "reason" not in events[0]
    assert events[1]["action"] == "watcher_stopped" and events[1]["error"] == 'bad "x"'
    assert events[1]["msg"] == "(restarted at the next rescan)"
    logfmt = _emit("logfmt")
    assert 'msg="not committed" path="/s p/a.jsonl" mode=rotate' in logfmt[0]
    assert 'error="bad \\"x\\""' in logfmt[1]


def test_event_fields_refuses_a_format_it_cannot_split() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "a=%s b=%s", ("1",), None)
    assert event_fields(record) is None
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "took %.1f s path=%s", (1.25, "/p"), None)
    assert event_fields(record) == ("took 1.2 s", {"path": "/p"})


def test_journald_keeps_priorities_in_every_format() -> None:
    buffer = io.StringIO()
    configure_logging("info", stream=buffer, style="json", env={"JOURNAL_STREAM": "1:1"})
    try:
        logging.getLogger("compactd.test").error("failed path=%s", "/p")
    finally:
        configure_logging("warning")
    line = buffer.getvalue().strip()
    assert line.startswith("<3>{") and "time" not in json.loads(line[3:])


def test_status_watch_redraws_in_place_on_a_terminal(tmp_path: Path) -> None:
    """On a TTY each refresh homes the cursor and clears the screen (written raw: the rest of the output
    still has its control characters escaped); a pipe gets plain lines (the daemon test above)."""
    import pty

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state")}))
    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("COMPACTD_CONFIG", "STATE_DIRECTORY")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "compactd",
            "status",
            "--watch",
            "--count",
            "3",
            "--interval",
            "0.05",
            "--config",
            str(config),
        ],
        cwd=REPO,
        env=env,
        stdout=secondary,
        stderr=secondary,
    )
    os.close(secondary)
    out = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(primary)
    assert proc.wait(timeout=30) == 0, out
    assert out.count(b"\x1b[H\x1b[2J") == 3
    assert out.count(b"no status in") == 3


@pytest.mark.slow  # the daemon as a process
def test_status_shows_the_model_call_an_action_is_waiting_on(
    tmp_path: Path, llm_server: StubLLMServer
) -> None:
    gate = llm_server.gate()  # the model answers only when the test has seen the call in status
    llm_server.responder = lambda request: Reply.completion(SUMMARY, hold=gate)
    daemon = Daemon(tmp_path, llm_server)
    try:
        session = write_session(daemon.root / "s.jsonl", 14, 2_400)
        proc = daemon.start()
        status = daemon.state / "status.json"

        def calling() -> dict[str, Any] | None:
            try:
                doc = json.loads(status.read_text())
            except (OSError, ValueError):
                return None
            for row in doc.get("sessions", []):
                doing = row.get("in_progress") or {}
                if str(doing.get("progress", "")).startswith("call 1 of ~"):
                    return dict(doing)
            return None

        doing = wait_for(calling, 90, "the model call in status.json", proc)
        assert doing["stage"] == "compact", doing
        watched = compactd("status", "--watch", "--count", "1", "--config", str(daemon.config_path))
        row = next(line for line in watched.stdout.splitlines() if line.startswith("s.jsonl"))
        assert "NOW compact" in row and "(call 1 of ~" in row, row
        gate.set()
        wait_for(
            lambda: any(e.get("type") == "compaction" for e in read_transcript(session).entries),
            90,
            "the compaction",
            proc,
        )
        wait_for(lambda: calling() is None and "in_progress" not in status.read_text(), 30, "the end", proc)
        print(row)
    finally:
        gate.set()
        daemon.stop()
