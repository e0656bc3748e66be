"""The event loop while a big session is compacted: systemd's watchdog, the other sessions, thread vs process.

(a) **watchdog** and (b) **append latency**: ``compactd run`` as a child process under systemd's notify
    protocol (a real ``NOTIFY_SOCKET`` whose datagrams the kernel stamps on arrival; ``WATCHDOG_USEC`` 2 s, so
    compactd pings every 1 s), one ``--mb`` MB bench-corpus session compacted with the model-free digest, and a
    small second session. (a) is the largest gap between two ``WATCHDOG=1`` during the compaction, as a
    multiple of the ping interval (1.0: never late; systemd kills at 2.0). (b) appends one line at a time to
    the small session and times it until status.json shows it (its tokens grow; status is refreshed every
    50 ms): the median with no job running (a daemon with the small session alone) and during the compaction,
    and their ratio. ``--code DIR`` runs another checkout's package in the child (the "before").
(c) **thread vs process**, in this process, for the job's computation on the same transcript
    (``compact_file(dry_run=True)``: figures, engine, pruning plan): in compactd's worker thread
    (``compactd.offload``), the largest lateness of a 10 ms ticker on the loop meanwhile; for a process, what
    it would add before any work is done: pickling the transcript there and back, as a share of the job's
    CPU time, and the pickle's size as a multiple of the file.

    python -m bench.bench_loop [--mb 50] [--appends 20] [--code DIR] [--parts daemon,offload] [--smoke] [--json]

Loopback only; every file in a temp dir; every part stops by itself.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import yaml

from bench.corpus import generate_session

REPO = Path(__file__).resolve().parents[1]
WATCHDOG_USEC = 2_000_000
PING_SECONDS = WATCHDOG_USEC / 2 / 1e6
SO_TIMESTAMPNS = 35  # Linux: a datagram's arrival time as a control message (not named by the socket module)
TIMEOUT = 600.0


class Child:
    """``compactd run`` over ``root`` with a notify socket of its own."""

    def __init__(self, tmp: Path, code: str | None) -> None:
        self.state = tmp / "state"
        self.root = tmp / "agents" / "main" / "sessions"
        self.root.mkdir(parents=True)
        config = {
            "sessions": {"roots": [str(tmp / "agents" / "*" / "sessions")], "idle_seconds": 0.5},
            "service": {"status_refresh_seconds": 0.05, "rescan_seconds": 60.0},
            "state_dir": str(self.state),
        }
        (tmp / "config.yaml").write_text(yaml.safe_dump(config))
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(tmp / "notify.sock"))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.settimeout(0.01)
        self.notices: list[tuple[float, str]] = []
        env = {k: v for k, v in os.environ.items() if k not in ("JOURNAL_STREAM", "STATE_DIRECTORY")}
        env |= {"NOTIFY_SOCKET": str(tmp / "notify.sock"), "WATCHDOG_USEC": str(WATCHDOG_USEC)}
        if code:
            env["PYTHONPATH"] = str(Path(code) / "daemon")
        self.log = open(tmp / "compactd.log", "wb")  # noqa: SIM115 - closed in stop()
        self.tmp = tmp
        self.env = env

    def start(self) -> None:
        command = [sys.executable, "-m", "compactd", "run", "--config", str(self.tmp / "config.yaml")]
        self.proc = subprocess.Popen(command, cwd=self.tmp, env=self.env, stdout=self.log, stderr=self.log)
        self.until(lambda: any("READY=1" in n for _, n in self.notices), "READY=1")

    def drain(self) -> None:
        while True:
            try:
                data, ancillary, _flags, _addr = self.sock.recvmsg(65536, socket.CMSG_SPACE(16))
            except (TimeoutError, BlockingIOError):
                return
            stamp = time.time()
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                    seconds, nanoseconds = struct.unpack("qq", value[:16])
                    stamp = seconds + nanoseconds / 1e9
            self.notices.append((stamp, data.decode()))

    def until(self, condition: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            self.drain()  # as systemd does: the socket's queue never fills
            value = condition()
            if value:
                return value
            if self.proc.poll() is not None:
                raise RuntimeError(f"compactd exited ({self.proc.returncode}) waiting for {what}")
        raise RuntimeError(f"timed out waiting for {what}")

    def status(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.state / "status.json").read_bytes()))
        except (OSError, ValueError):
            return {}

    def tokens(self, path: Path) -> int | None:
        rows = self.status().get("sessions", ())
        return next((r.get("tokens") for r in rows if r.get("path") == str(path)), None)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.sock.close()
        self.log.close()


def append_line(path: Path, index: int) -> None:
    """A user message on the small session's branch (its tokens grow by about 500)."""
    last = orjson.loads(path.read_bytes().splitlines()[-1])
    entry = {
        "type": "message",
        "id": f"be{index:06x}",
        "parentId": last["id"],
        "timestamp": "2026-12-01T00:00:00.000Z",
        "message": {"role": "user", "content": [{"type": "text", "text": "check the retry " * 125}]},
    }
    with open(path, "ab") as handle:
        handle.write(orjson.dumps(entry) + b"\n")


def append_latencies(child: Child, small: Path, count: int, keep_going: Callable[[], bool]) -> list[float]:
    """Seconds from each append to status.json showing it, one at a time, while ``keep_going()``."""
    out: list[float] = []
    for index in range(count):
        if not keep_going():
            break
        before = child.until(lambda: child.tokens(small), "the small session in status.json")
        started = time.monotonic()
        append_line(small, index)
        child.until(lambda b=before: (child.tokens(small) or 0) > b, "the append in status.json")
        out.append(time.monotonic() - started)  # one made during the job counts, even if seen after it
    return out


def job_at_its_engine(child: Child) -> bool:
    claims = child.state / "claims"
    return claims.is_dir() and any(b"flushed_at" in p.read_bytes() for p in claims.glob("*.lock"))


def measure_daemon(mb: float, appends: int, code: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp:
        idle = Child(Path(tmp, "idle"), code)
        small = idle.root / "small.jsonl"
        generate_session(small, 4_000, seed=4)
        idle.start()
        idle_latencies = append_latencies(idle, small, appends, lambda: True)
        idle.stop()

        busy = Child(Path(tmp, "busy"), code)
        big, small = busy.root / "big.jsonl", busy.root / "small.jsonl"
        generate_session(big, int(mb * 1e6), seed=3)
        generate_session(small, 4_000, seed=4)
        busy.start()
        started = time.monotonic()
        busy.until(lambda: job_at_its_engine(busy), "the job at its engine")
        compacted = busy.status
        busy_latencies = append_latencies(busy, small, appends, lambda: compacted().get("compactions") == 0)
        busy.until(lambda: compacted().get("compactions") == 1, "the compaction")
        job_seconds = time.monotonic() - started
        seen = len(busy.notices)
        busy.until(lambda: any("WATCHDOG=1" in n for _, n in busy.notices[seen:]), "one more WATCHDOG=1")
        busy.stop()
    pings = [at for at, notice in busy.notices if "WATCHDOG=1" in notice]
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    idle_median = statistics.median(idle_latencies)
    busy_median = statistics.median(busy_latencies) if busy_latencies else float("nan")
    return {
        "mb": mb,
        "code": code or str(REPO),
        "job_seconds": round(job_seconds, 2),
        "ping_seconds": PING_SECONDS,
        "max_gap_seconds": round(max(gaps), 3),
        "max_gap_ratio": round(max(gaps) / PING_SECONDS, 2),
        "append_idle_median_ms": round(idle_median * 1000, 1),
        "append_busy_median_ms": round(busy_median * 1000, 1),
        "append_busy_max_ms": round(max(busy_latencies) * 1000, 1) if busy_latencies else None,
        "appends_during_job": len(busy_latencies),
        "append_ratio": round(busy_median / idle_median, 2),
    }


async def _ticking(work: Callable[[], Any]) -> tuple[float, float]:
    """(the largest lateness of a 10 ms ticker while ``await work()`` ran, the work's wall seconds)."""
    done = anyio.Event()
    worst = 0.0

    async def ticker() -> None:
        nonlocal worst
        while not done.is_set():
            before = time.monotonic()
            await anyio.sleep(0.01)
            worst = max(worst, time.monotonic() - before - 0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        started = time.monotonic()
        await work()
        took = time.monotonic() - started
        done.set()
    return worst, took


def measure_offload(mb: float) -> dict[str, Any]:
    from compactd.config import load_config
    from compactd.reading import read_transcript
    from compactd.sources.files.job import compact_file

    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp:
        path = Path(tmp, "big.jsonl")
        generate_session(path, int(mb * 1e6), seed=3)
        config_path = Path(tmp, "config.yaml")
        config_path.write_text(yaml.safe_dump({"state_dir": str(Path(tmp, "state"))}))
        config = load_config(str(config_path))
        transcript = read_transcript(path)
        cpu = time.process_time()
        late, job_seconds = anyio.run(
            _ticking, lambda: compact_file(str(path), config, dry_run=True, transcript=transcript)
        )
        job_cpu = time.process_time() - cpu
        started = time.process_time()
        data = pickle.dumps(transcript, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)
        pickle_cpu = time.process_time() - started
        size = path.stat().st_size
    return {
        "mb": mb,
        "thread_job_seconds": round(job_seconds, 2),
        "thread_loop_max_late_ms": round(late * 1000, 1),
        "process_pickle_seconds": round(pickle_cpu, 2),
        "process_pickle_share_of_job": round(pickle_cpu / job_cpu, 2),
        "process_pickle_size_ratio": round(len(data) / size, 2),
    }


def report(rows: dict[str, Any]) -> str:
    lines = []
    d = rows.get("daemon")
    if d:
        lines += [
            f"compactd run, {d['mb']:g} MB session (digest), code {d['code']}: job {d['job_seconds']} s",
            f"  (a) largest gap between WATCHDOG=1: {d['max_gap_seconds']} s = {d['max_gap_ratio']}x the "
            f"{d['ping_seconds']:g} s ping interval",
            f"  (b) append -> status.json, median: idle {d['append_idle_median_ms']} ms, during the job "
            f"{d['append_busy_median_ms']} ms (max {d['append_busy_max_ms']} ms, {d['appends_during_job']} "
            f"appends) = {d['append_ratio']}x idle",
        ]
    o = rows.get("offload")
    if o:
        lines += [
            f"(c) the job's computation on {o['mb']:g} MB: in a thread {o['thread_job_seconds']} s, the loop at "
            f"most {o['thread_loop_max_late_ms']} ms late; a process would first pickle the transcript there "
            f"and back: {o['process_pickle_seconds']} s = {o['process_pickle_share_of_job']}x the job's CPU, "
            f"{o['process_pickle_size_ratio']}x the file's size",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_loop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--appends", type=int, default=20)
    parser.add_argument("--code", help="run another checkout's package in the daemon (a 'before' figure)")
    parser.add_argument("--parts", default="daemon,offload")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to prove the bench works")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    mb, appends = (1.5, 2) if args.smoke else (args.mb, args.appends)
    parts = set(args.parts.split(","))
    rows: dict[str, Any] = {}
    if "daemon" in parts:
        rows["daemon"] = measure_daemon(mb, appends, args.code)
    if "offload" in parts:
        rows["offload"] = measure_offload(mb)
    sys.stdout.write((json.dumps(rows, indent=2) if args.json else report(rows)) + "\n")
    return rows


if __name__ == "__main__":
    main()
