"""The running service: append→ledger latency under load, idle CPU, and resident memory per watched session.

(a) **latency**: ``n`` small sessions in a temp root; an in-process ``Service`` runs ``serve()`` with its real
    watchers; a separate writer process appends ~1 KB lines by path (open/O_APPEND/write/close, as the agents do)
    at ``rate`` lines a second, each to a random session, on a drift-free schedule. Latency runs from just before
    the writer's ``open`` to the moment ``FileSource.refresh`` has folded the line into that session's ledger (the
    ledger's entry count reaches the value the write implies). Both sides stamp ``time.monotonic_ns`` (one
    system-wide clock on Linux). Targets: median ≤ 50 ms, p99 ≤ 150 ms.
(b) **idle CPU**: the same service with nothing written for ``idle_seconds``: process CPU time (all threads,
    ``getrusage``) over wall time, as a percentage of one core; plus the cost of one full rescan, amortized over
    the rescan interval. Target < 1 %.
(c) **memory**: VmRSS of a fresh process serving ``n_memory`` sessions, minus that of the same process serving
    none (both after ``gc.collect()``, all sessions loaded); per-session bytes. Target ≤ 60 MB in total.

    python -m bench.bench_service [--sessions 1000] [--rate 100] [--seconds 10] [--idle-seconds 10]
                                  [--memory-sessions 10000] [--dirs 1] [--parts latency,idle,memory]

Loopback only (no network at all); every file in a temp dir; every part stops by itself.
"""

from __future__ import annotations

import gc
import os
import random
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
from compactd.config import Config
from compactd.service import Service
from compactd.sources import Host
from compactd.sources.files import FileSource

DEFAULT_SESSIONS = 1000
DEFAULT_RATE = 100.0
DEFAULT_SECONDS = 10.0
DEFAULT_IDLE_SECONDS = 10.0
DEFAULT_MEMORY_SESSIONS = 10_000
SESSION_BYTES = 2_000  # small sessions: header, model/thinking changes and one short turn
LINE_BYTES = 1024
READY_TIMEOUT = 120.0  # loading 10,000 sessions on a busy machine
PROBE_TIMEOUT = 5.0
DRAIN_SECONDS = 3.0  # after the writer stops, how long stragglers may take before counting as missed
REPO = Path(__file__).resolve().parents[1]


class BenchFiles(FileSource):
    """The file source with one hook: after each ``refresh``, note when a session's entry count grew."""

    def __init__(self, host: Host, *, record: bool = True) -> None:
        super().__init__(host)
        self.seen: dict[str, list[tuple[int, int]]] = {}
        self.refreshes = 0
        self.record = record  # off for the memory part: the marks would count as per-session state

    def refresh(self, path: str, *, seeded: bool = False) -> None:
        super().refresh(path, seeded=seeded)
        now = time.monotonic_ns()
        self.refreshes += 1
        if not self.record:
            return
        session = self.sessions.get(path)
        ledger = session.tracker.ledger if session is not None else None
        if ledger is None:
            return
        marks = self.seen.setdefault(path, [])
        if not marks or marks[-1][0] != ledger.entries:
            marks.append((ledger.entries, now))


class BenchService(Service):
    """``Service`` serving the file source alone, through :class:`BenchFiles`."""

    def __init__(self, config: Config, *, env: dict[str, str] | None = None, record: bool = True) -> None:
        super().__init__(config, env=env, files_only=True)
        self.files = BenchFiles(self.host, record=record)
        self.sources = [self.files]
        self.sessions = self.files.sessions
        self.seen = self.files.seen

    @property
    def refreshes(self) -> int:
        return self.files.refreshes

    def rescan(self) -> None:
        self.files.rescan()

    @property
    def roots(self) -> dict[str, Any]:
        return self.files.watchers


# --- sessions on disk --------------------------------------------------------------------------------------


def make_sessions(root: Path, count: int, *, dirs: int = 1, seed: int = 7) -> dict[str, str]:
    """``count`` small sessions spread over ``dirs`` directories under ``root``; path → leaf id."""
    from bench.corpus import session_bytes  # not at module level: the memory child must not pay for it

    leaves: dict[str, str] = {}
    folders = [root / f"project-{d:03d}" for d in range(dirs)] if dirs > 1 else [root]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        data, _ = session_bytes(SESSION_BYTES, seed * 1_000_003 + index)
        path = folders[index % len(folders)] / f"2026-01-01T00-00-00-000Z_{index:05d}.jsonl"
        path.write_bytes(data)
        last = orjson.loads(data[data.rfind(b"\n", 0, len(data) - 1) + 1 :])
        leaves[os.path.realpath(path)] = last["id"]
    return leaves


def service_config(
    root: Path, state: Path, *, dirs: int, debounce_ms: int | None, step_ms: int | None
) -> Config:
    service: dict[str, Any] = {}
    if debounce_ms is not None:
        service["debounce_ms"] = debounce_ms
    if step_ms is not None:
        service["step_ms"] = step_ms
    roots = [str(root / "*")] if dirs > 1 else [str(root)]
    return Config.from_mapping(
        {"sessions": {"roots": roots}, "state_dir": str(state), "service": service}, env={}
    )


@asynccontextmanager
async def running(config: Config, expected: int, *, record: bool = True) -> AsyncIterator[BenchService]:
    """A serving ``BenchService`` whose start-up scan has loaded ``expected`` sessions; stopped on exit."""
    service = BenchService(config, env={}, record=record)
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: service.serve(shutdown_trigger=stop.wait))
        with anyio.fail_after(READY_TIMEOUT):
            while len(service.sessions) < expected:
                await anyio.sleep(0.01)
        try:
            yield service
        finally:
            stop.set()


def append_line(path: str, line: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


async def probe(service: BenchService, path: str, leaves: dict[str, str]) -> float:
    """Append one line from here and wait for the ledger: proves the watchers are live before measuring."""
    from bench.bench_tail import make_line

    session = service.sessions[path]
    assert session.tracker.ledger is not None
    target = session.tracker.ledger.entries + 1
    entry_id = f"{random.Random(path).getrandbits(32) | 0x80000000:08x}"
    start = time.monotonic_ns()
    append_line(path, make_line(leaves[path], entry_id, LINE_BYTES, 0, random.Random(0)))
    leaves[path] = entry_id
    with anyio.fail_after(PROBE_TIMEOUT):
        while (ledger := service.sessions[path].tracker.ledger) is None or ledger.entries < target:
            await anyio.sleep(0.001)
    return (time.monotonic_ns() - start) / 1e6


# --- the writer process ------------------------------------------------------------------------------------


def writer_main(plan_file: str, log_file: str) -> None:
    """Append lines on a drift-free schedule; log (session index, appends so far to it, monotonic ns)."""
    from bench.bench_tail import make_line

    plan = orjson.loads(Path(plan_file).read_bytes())
    paths: list[str] = plan["paths"]
    leaves: list[str] = plan["leaves"]
    rng = random.Random(plan["seed"])
    count = int(plan["rate"] * plan["seconds"])
    lines: list[tuple[int, bytes]] = []
    per_path = [0] * len(paths)
    for index in range(count):
        target = rng.randrange(len(paths))
        entry_id = f"{0x10000000 + index:08x}"
        lines.append((target, make_line(leaves[target], entry_id, plan["line_bytes"], index, rng)))
        leaves[target] = entry_id
    log: list[tuple[int, int, int]] = []
    period_ns = int(1e9 / plan["rate"])
    begin = time.monotonic_ns() + 50_000_000
    for index, (target, line) in enumerate(lines):
        due = begin + index * period_ns
        delay = due - time.monotonic_ns()
        if delay > 0:
            time.sleep(delay / 1e9)
        stamp = time.monotonic_ns()
        append_line(paths[target], line)
        per_path[target] += 1
        log.append((target, per_path[target], stamp))
    Path(log_file).write_bytes(orjson.dumps({"log": log, "leaves": leaves}))


# --- (a) latency -------------------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    """The q-quantile by rank (0.5: the upper median), without importing statistics (and decimal) here."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def measure_latency(
    tmp: Path,
    *,
    sessions: int,
    rate: float,
    seconds: float,
    dirs: int,
    debounce_ms: int | None,
    step_ms: int | None,
    seed: int,
) -> dict[str, Any]:
    root, state = tmp / "latency", tmp / "latency-state"
    leaves = make_sessions(root, sessions, dirs=dirs, seed=seed)
    config = service_config(root, state, dirs=dirs, debounce_ms=debounce_ms, step_ms=step_ms)
    paths = sorted(leaves)
    async with running(config, sessions) as service:
        probe_ms = await probe(service, paths[0], leaves)
        base = {p: service.sessions[p].tracker.ledger.entries for p in paths}  # type: ignore[union-attr]
        read_before = sum(service.sessions[p].tracker.cursor.bytes_read for p in paths)
        reloads_before = sum(service.sessions[p].tracker.reloads for p in paths)
        plan, log_file = tmp / "plan.json", tmp / "writer-log.json"
        plan.write_bytes(
            orjson.dumps(
                {
                    "paths": paths,
                    "leaves": [leaves[p] for p in paths],
                    "rate": rate,
                    "seconds": seconds,
                    "seed": seed,
                    "line_bytes": LINE_BYTES,
                }
            )
        )
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "daemon"), os.environ.get("PYTHONPATH")])),
        }
        cpu_before = _cpu_seconds()
        wall_before = time.monotonic()
        with anyio.fail_after(seconds + 60):
            await anyio.run_process(
                [sys.executable, "-m", "bench.bench_service", "--writer", str(plan), str(log_file)],
                cwd=REPO,
                env=env,
                check=True,
                stdout=None,
                stderr=None,
            )
        writes = orjson.loads(log_file.read_bytes())["log"]
        expected = {paths[target]: base[paths[target]] + k for target, k, _ in writes}

        def all_seen() -> bool:
            return all(
                (ledger := service.sessions[p].tracker.ledger) is not None and ledger.entries >= n
                for p, n in expected.items()
            )

        with anyio.move_on_after(DRAIN_SECONDS):
            while not all_seen():
                await anyio.sleep(0.005)
        cpu_load = (_cpu_seconds() - cpu_before) / (time.monotonic() - wall_before)
        read_bytes = sum(service.sessions[p].tracker.cursor.bytes_read for p in paths) - read_before
        reloads = sum(service.sessions[p].tracker.reloads for p in paths) - reloads_before
        seen = {p: list(marks) for p, marks in service.seen.items()}
        refreshes = service.refreshes

    latencies: list[float] = []
    missed = 0
    for target, k, stamp in writes:
        path = paths[target]
        want = base[path] + k
        hit = next((t for n, t in seen.get(path, ()) if n >= want and t >= stamp), None)
        if hit is None:
            missed += 1
        else:
            latencies.append((hit - stamp) / 1e6)
    span = (writes[-1][2] - writes[0][2]) / 1e9 if len(writes) > 1 else 0.0
    return {
        "sessions": sessions,
        "dirs": dirs,
        "debounce_ms": config.service.debounce_ms,
        "step_ms": config.service.step_ms,
        "writes": len(writes),
        "rate_achieved": round((len(writes) - 1) / span, 1) if span else None,
        "missed": missed,
        "median_ms": round(_pct(latencies, 0.5), 2) if latencies else None,
        "p90_ms": round(_pct(latencies, 0.9), 2),
        "p99_ms": round(_pct(latencies, 0.99), 2),
        "max_ms": round(max(latencies), 2) if latencies else None,
        "probe_ms": round(probe_ms, 2),
        "bytes_read": read_bytes,
        "bytes_appended": len(writes) * LINE_BYTES,
        "reloads": reloads,
        "refresh_calls": refreshes,
        "cpu_percent_under_load": round(cpu_load * 100, 2),
    }


# --- (b) idle CPU ------------------------------------------------------------------------------------------


def _thread_cpu() -> dict[int, float]:
    """CPU seconds per thread of this process (``/proc/self/task/*/stat``: utime + stime, in clock ticks)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure_idle(
    tmp: Path,
    *,
    sessions: int,
    seconds: float,
    dirs: int,
    debounce_ms: int | None,
    step_ms: int | None,
    seed: int,
) -> dict[str, Any]:
    root, state = tmp / "idle", tmp / "idle-state"
    leaves = make_sessions(root, sessions, dirs=dirs, seed=seed)
    config = service_config(root, state, dirs=dirs, debounce_ms=debounce_ms, step_ms=step_ms)
    async with running(config, sessions) as service:
        await probe(service, sorted(leaves)[0], leaves)
        await anyio.sleep(min(1.0, seconds))  # let the start-up batch and the first status write settle
        refreshes = service.refreshes
        threads_before = _thread_cpu()
        cpu_before, wall_before = _cpu_seconds(), time.monotonic()
        await anyio.sleep(seconds)
        cpu, wall = _cpu_seconds() - cpu_before, time.monotonic() - wall_before
        threads_after = _thread_cpu()
        idle_refreshes = service.refreshes - refreshes
        main_tid = threading.get_native_id()
        per_thread = {t: c - threads_before.get(t, 0.0) for t, c in threads_after.items()}
        main_cpu = per_thread.pop(main_tid, 0.0)
        start = time.process_time()
        service.rescan()
        rescan_s = time.process_time() - start
        start = time.process_time()
        service.write_state()
        state_s = time.process_time() - start
        rescan_every = config.service.rescan_seconds
        state_every = config.service.status_refresh_seconds
        watchers = len(service.roots)
    return {
        "sessions": sessions,
        "dirs": dirs,
        "watchers": watchers,
        "seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 4),
        "cpu_percent": round(100 * cpu / wall, 3),
        "refresh_calls_while_idle": idle_refreshes,
        "cpu_percent_event_loop_thread": round(100 * main_cpu / wall, 3),
        "cpu_percent_other_threads": round(100 * sum(per_thread.values()) / wall, 3),
        "cpu_percent_each_other_thread": sorted(
            (round(100 * c / wall, 3) for c in per_thread.values()), reverse=True
        ),
        "threads": len(threads_after),
        "write_state_ms": round(state_s * 1000, 2),
        "write_state_every_s": state_every,
        "write_state_percent_amortized": round(100 * state_s / state_every, 3),
        "rescan_ms": round(rescan_s * 1000, 2),
        "rescan_every_s": rescan_every,
        "rescan_percent_amortized": round(100 * rescan_s / rescan_every, 3),
        "step_ms": config.service.step_ms,
    }


# --- (c) memory --------------------------------------------------------------------------------------------


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def memory_child(root: str, state: str, sessions: int, dirs: int, trace: bool = False) -> dict[str, Any]:
    """In a fresh process: RSS once every session is loaded and watched (after gc), and the peak.

    With ``trace``, tracemalloc attributes the retained Python allocations to source lines instead (its own
    bookkeeping inflates RSS, so the RSS figures of a traced run are not the result)."""
    config = service_config(Path(root), Path(state), dirs=dirs, debounce_ms=None, step_ms=None)
    result: dict[str, Any] = {}

    async def go() -> None:
        gc.collect()
        if trace:
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
        result["rss_before"] = _rss_bytes()
        async with running(config, sessions, record=False) as service:
            await anyio.sleep(0.5)
            gc.collect()
            result["rss_serving"] = _rss_bytes()
            result["sessions_loaded"] = len(service.sessions)
            if trace:
                diff = tracemalloc.take_snapshot().compare_to(before, "lineno")
                n = max(1, sessions)
                result["traced_bytes_per_session"] = round(sum(d.size_diff for d in diff) / n)
                result["top_sites_bytes_per_session"] = [
                    [
                        f"{d.traceback[0].filename.removeprefix(str(REPO) + '/')}:{d.traceback[0].lineno}",
                        round(d.size_diff / n),
                    ]
                    for d in diff[:12]
                ]

    anyio.run(go)
    result["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return result


def _child(args: list[str], timeout: float) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "daemon"), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_service", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        check=True,
        timeout=timeout,
    )
    parsed: dict[str, Any] = orjson.loads(done.stdout.splitlines()[-1])
    return parsed


def measure_memory(tmp: Path, *, sessions: int, dirs: int, seed: int, trace: bool = False) -> dict[str, Any]:
    root, empty = tmp / "memory", tmp / "memory-empty"
    make_sessions(root, sessions, dirs=dirs, seed=seed)
    (empty / "project-000" if dirs > 1 else empty).mkdir(parents=True)
    timeout = READY_TIMEOUT + 60
    none = _child(["--memory-child", str(empty), str(tmp / "mstate0"), "0", str(dirs)], timeout)
    full = _child(["--memory-child", str(root), str(tmp / "mstate1"), str(sessions), str(dirs)], timeout)
    per_session = (full["rss_serving"] - none["rss_serving"]) / max(1, sessions)
    traced: dict[str, Any] = {}
    if trace:
        traced = _child(
            ["--memory-child", str(root), str(tmp / "mstate2"), str(sessions), str(dirs), "trace"], timeout
        )
    return {
        "sessions": sessions,
        "sessions_loaded": full["sessions_loaded"],
        "rss_mb": round(full["rss_serving"] / 2**20, 1),
        "rss_empty_service_mb": round(none["rss_serving"] / 2**20, 1),
        "rss_after_imports_mb": round(full["rss_before"] / 2**20, 1),
        "peak_rss_mb": round(full["peak_rss"] / 2**20, 1),
        "per_session_bytes": round(per_session),
        **{k: traced[k] for k in ("traced_bytes_per_session", "top_sites_bytes_per_session") if k in traced},
    }


# --- driver ------------------------------------------------------------------------------------------------

PARTS = ("latency", "idle", "memory")


def run(
    *,
    sessions: int = DEFAULT_SESSIONS,
    rate: float = DEFAULT_RATE,
    seconds: float = DEFAULT_SECONDS,
    idle_seconds: float = DEFAULT_IDLE_SECONDS,
    memory_sessions: int = DEFAULT_MEMORY_SESSIONS,
    dirs: int = 1,
    debounce_ms: int | None = None,
    step_ms: int | None = None,
    parts: tuple[str, ...] = PARTS,
    seed: int = 7,
    memory_trace: bool = False,
) -> dict[str, Any]:
    import tempfile

    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="compactd-bench-service-") as name:
        tmp = Path(name)
        jobs: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
            "latency": lambda: measure_latency(
                tmp,
                sessions=sessions,
                rate=rate,
                seconds=seconds,
                dirs=dirs,
                debounce_ms=debounce_ms,
                step_ms=step_ms,
                seed=seed,
            ),
            "idle": lambda: measure_idle(
                tmp,
                sessions=sessions,
                seconds=idle_seconds,
                dirs=dirs,
                debounce_ms=debounce_ms,
                step_ms=step_ms,
                seed=seed,
            ),
        }
        for part in parts:
            if part in jobs:
                result[part] = anyio.run(jobs[part])
        if "memory" in parts:
            result["memory"] = measure_memory(
                tmp, sessions=memory_sessions, dirs=dirs, seed=seed, trace=memory_trace
            )
    return result


def report(r: dict[str, Any]) -> str:
    out: list[str] = []
    if "latency" in r:
        a = r["latency"]
        out += [
            f"(a) append → ledger, {a['writes']} writes at {a['rate_achieved']}/s over {a['sessions']} sessions "
            f"in {a['dirs']} dir(s), debounce {a['debounce_ms']} / step {a['step_ms']} ms",
            f"    median {a['median_ms']} ms, p90 {a['p90_ms']}, p99 {a['p99_ms']}, max {a['max_ms']}; missed {a['missed']} "
            f"(targets: median <= 50, p99 <= 150)",
            f"    bytes read {a['bytes_read']} for {a['bytes_appended']} appended; reloads {a['reloads']}; "
            f"refresh calls {a['refresh_calls']}; CPU under load {a['cpu_percent_under_load']} % of a core",
        ]
    if "idle" in r:
        b = r["idle"]
        out += [
            f"(b) idle CPU over {b['sessions']} sessions ({b['watchers']} watcher(s)), {b['seconds']} s: "
            f"{b['cpu_percent']} % of a core (target < 1); refreshes while idle {b['refresh_calls_while_idle']}",
            f"    event-loop thread {b['cpu_percent_event_loop_thread']} %, other threads ({b['threads'] - 1}: watchers, "
            f"workers) {b['cpu_percent_other_threads']} % = {b['cpu_percent_each_other_thread']}",
            f"    one status/state write {b['write_state_ms']} ms every {b['write_state_every_s']} s = "
            f"{b['write_state_percent_amortized']} % (already inside the measured figure)",
            f"    one full rescan {b['rescan_ms']} ms every {b['rescan_every_s']} s = {b['rescan_percent_amortized']} % "
            "amortized (on top, when the window holds no rescan)",
        ]
    if "memory" in r:
        c = r["memory"]
        out += [
            f"(c) RSS serving {c['sessions_loaded']} sessions: {c['rss_mb']} MB (target <= 60); empty service "
            f"{c['rss_empty_service_mb']} MB; after imports {c['rss_after_imports_mb']} MB; peak {c['peak_rss_mb']} MB",
            f"    per session {c['per_session_bytes']} B (goal about 1 KB)",
        ]
        if "traced_bytes_per_session" in c:
            out.append(
                f"    traced Python allocations per session: {c['traced_bytes_per_session']} B; top sites:"
            )
            out += [f"      {size:>6} B  {site}" for site, size in c["top_sites_bytes_per_session"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--writer"]:
        writer_main(argv[1], argv[2])
        return {}
    if argv[:1] == ["--memory-child"]:
        child = memory_child(argv[1], argv[2], int(argv[3]), int(argv[4]), trace=argv[5:6] == ["trace"])
        sys.stdout.write(orjson.dumps(child).decode() + "\n")
        return child
    import argparse  # here, not at the top: the memory child's baseline RSS should hold the daemon only

    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_service", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS)
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, help="appends per second")
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS, help="how long the writer writes")
    parser.add_argument("--idle-seconds", type=float, default=DEFAULT_IDLE_SECONDS)
    parser.add_argument("--memory-sessions", type=int, default=DEFAULT_MEMORY_SESSIONS)
    parser.add_argument("--dirs", type=int, default=1, help="spread sessions over this many directories")
    parser.add_argument(
        "--debounce-ms", type=int, help="override service.debounce_ms (default: the config's)"
    )
    parser.add_argument("--step-ms", type=int, help="override service.step_ms")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--memory-trace", action="store_true", help="also attribute memory to source lines")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to prove the bench works")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sessions, args.rate, args.seconds, args.idle_seconds, args.memory_sessions = (
            20,
            50.0,
            1.0,
            0.5,
            50,
        )
    parts = tuple(p for p in args.parts.split(",") if p)
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    result = run(
        sessions=args.sessions,
        rate=args.rate,
        seconds=args.seconds,
        idle_seconds=args.idle_seconds,
        memory_sessions=args.memory_sessions,
        dirs=args.dirs,
        debounce_ms=args.debounce_ms,
        step_ms=args.step_ms,
        parts=parts,
        seed=args.seed,
        memory_trace=args.memory_trace,
    )
    sys.stdout.write((orjson.dumps(result).decode() if args.json else report(result)) + "\n")
    return result


if __name__ == "__main__":
    main()
