"""Restart in O(changed bytes): how soon a restarted ``compactd run`` serves N unchanged sessions.

N sessions of about ``kb`` KB each are written to a temp root (copies of a few ``bench.corpus`` sessions: what
is measured is reading, so distinct bytes per file add nothing but generation time). ``compactd run`` (the
real command, a subprocess) is started once to build its snapshots and stopped; then it is started again,
alternately with its snapshots (**warm**) and with the snapshot directory removed (**cold**: every transcript
read in full, as before snapshots existed), ``runs`` times each.

"Serving" is measured as: ``status.json`` names the new process (its pid) and counts every session as
watched. That file is written after the start-up read of every root, right before READY=1; the clock runs
from just before the process is spawned, so interpreter start-up and imports count (bytecode cached, as an
installed package has it: the first start writes it). The child's CPU time to
that moment is reported too: on a shared machine wall time includes other processes' turns. Bytes read are the
child's ``rchar`` (``/proc/<pid>/io``) at that moment: all ``read``/``pread`` calls, imports included.

    python -m bench.bench_restart [--sessions 10000] [--kb 500] [--runs 3] [--templates 8] [--dir DIR] [--baseline DIR]

``--baseline DIR`` (another tree's package, e.g. ``/tmp/before/daemon``) adds its warm starts, with its own state
directory, to every round: ours ÷ baseline from the same run.

Every file lives in a temp dir (or ``--dir``); nothing uses the network; the daemon never compacts (windows
far above the sessions' size, no memory flush).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import yaml

from bench.corpus import MODELS, session_bytes

DEFAULT_SESSIONS = 10_000
DEFAULT_KB = 500.0
DEFAULT_RUNS = 3
DEFAULT_TEMPLATES = 8
SERVE_TIMEOUT = 600.0
REPO = Path(__file__).resolve().parents[1]


def make_sessions(root: Path, count: int, kb: float, templates: int) -> int:
    """``count`` sessions of about ``kb`` KB in ``root``; the total bytes written."""
    root.mkdir(parents=True, exist_ok=True)
    blobs = [session_bytes(int(kb * 1000), seed=101 + i)[0] for i in range(min(templates, count))]
    total = 0
    for index in range(count):
        data = blobs[index % len(blobs)]
        (root / f"2026-01-01T00-00-00-000Z_{index:05d}.jsonl").write_bytes(data)
        total += len(data)
    return total


def write_config(path: Path, root: Path, state: Path) -> None:
    windows = {p: {"models": {m: {"context_tokens": 1_000_000_000}}} for p, m, _ in MODELS}
    config = {
        "sessions": {"roots": [str(root)]},
        "state_dir": str(state),
        "models": {"providers": windows},
        "memory_flush": {"enabled": False},
        "service": {"status_refresh_seconds": 0.5},
    }
    path.write_text(yaml.safe_dump(config))


def _rchar(pid: int) -> int | None:
    try:
        for row in Path(f"/proc/{pid}/io").read_text().splitlines():
            if row.startswith("rchar:"):
                return int(row.split()[1])
    except OSError:
        pass
    return None


def _cpu_seconds(pid: int) -> float | None:
    """user + system CPU time of ``pid`` so far (``/proc/<pid>/stat``; this machine is shared, wall time is not
    only ours)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serving(status_path: Path, pid: int, count: int) -> bool:
    try:
        status = orjson.loads(status_path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    return bool(status.get("pid") == pid and status.get("sessions_watched") == count)


def start_once(
    config: Path,
    state: Path,
    count: int,
    log: Path,
    pycache: Path | None = None,
    pythonpath: Path | None = None,
) -> dict[str, Any]:
    """Spawn ``compactd run``, time it to serving, stop it (SIGTERM) and return the figures.

    ``pycache``: where the child may cache bytecode, as an installed package has it (an environment with
    ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module of compactd at every start);
    ``pythonpath``: another tree's package (the baseline)."""
    status_path = state / "status.json"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NOTIFY_SOCKET", "STATE_DIRECTORY", "COMPACTD_CONFIG", "PYTHONDONTWRITEBYTECODE")
    }
    if pycache is not None:
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with open(log, "ab") as out:
        began = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "compactd", "run", "--config", str(config), "--log-level", "info"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = began + SERVE_TIMEOUT
        while not _serving(status_path, proc.pid, count):
            if proc.poll() is not None:
                raise RuntimeError(f"compactd exited ({proc.returncode}); see {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"not serving after {SERVE_TIMEOUT} s; see {log}")
            time.sleep(0.002)  # polling an observable condition, bounded by the deadline
        seconds = time.monotonic() - began
        rchar, cpu = _rchar(proc.pid), _cpu_seconds(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=SERVE_TIMEOUT)
    if code != 0:
        raise RuntimeError(f"compactd exited {code} on SIGTERM; see {log}")
    return {"seconds": seconds, "rchar": rchar, "cpu": cpu}


def run(
    *,
    sessions: int,
    kb: float,
    runs: int,
    templates: int,
    directory: Path | None = None,
    baseline: Path | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-restart-", dir=directory) as tmp:
        base = Path(tmp)
        need = int(sessions * kb * 1000 * 1.1) + (64 << 20)
        free = shutil.disk_usage(base).free
        if free < need:
            raise SystemExit(f"{base}: {free / 1e9:.1f} GB free, {need / 1e9:.1f} GB needed")
        root, state, config, log = (
            base / "sessions",
            base / "state",
            base / "config.yaml",
            base / "compactd.log",
        )
        made = time.monotonic()
        total = make_sessions(root, sessions, kb, templates)
        generated = time.monotonic() - made
        write_config(config, root, state)
        pycache = base / "pycache"
        first = start_once(config, state, sessions, log, pycache)  # cold; writes the snapshots and bytecode
        base_state, base_config = base / "state-baseline", base / "config-baseline.yaml"
        if baseline is not None:  # its own state directory: its snapshots, as it writes them
            write_config(base_config, root, base_state)
            start_once(base_config, base_state, sessions, log, pycache, baseline)
        warm: list[dict[str, Any]] = []
        cold: list[dict[str, Any]] = []
        base_warm: list[dict[str, Any]] = []
        for _ in range(runs):
            if baseline is not None:
                base_warm.append(start_once(base_config, base_state, sessions, log, pycache, baseline))
            warm.append(start_once(config, state, sessions, log, pycache))
            shutil.rmtree(state / "resume", ignore_errors=True)
            cold.append(
                start_once(config, state, sessions, log, pycache)
            )  # rebuilds the snapshots as it stops
        warm_s = [r["seconds"] for r in warm]
        cold_s = [r["seconds"] for r in cold]
        compared: dict[str, Any] = {}
        if baseline is not None:
            base_s = [r["seconds"] for r in base_warm]
            compared = {
                "baseline": str(baseline),
                "baseline_warm_seconds": [round(s, 3) for s in base_s],
                "baseline_warm_cpu": [r["cpu"] for r in base_warm],
                "warm_over_baseline": round(min(warm_s) / min(base_s), 3),  # best ÷ best, same run
                "warm_over_baseline_median": round(
                    statistics.median(w / b for w, b in zip(warm_s, base_s, strict=True)), 3
                ),
            }
        return compared | {
            "sessions": sessions,
            "bytes": total,
            "generate_seconds": round(generated, 1),
            "first_start_seconds": round(first["seconds"], 3),
            "warm_seconds": [round(s, 3) for s in warm_s],
            "cold_seconds": [round(s, 3) for s in cold_s],
            "warm_best": round(min(warm_s), 3),
            "warm_median": round(statistics.median(warm_s), 3),
            "cold_best": round(min(cold_s), 3),
            "cold_median": round(statistics.median(cold_s), 3),
            "cold_over_warm": round(statistics.median(cold_s) / statistics.median(warm_s), 1),
            "warm_cpu": [r["cpu"] for r in warm],
            "cold_cpu": [r["cpu"] for r in cold],
            "warm_rchar": warm[-1]["rchar"],
            "cold_rchar": cold[-1]["rchar"],
            "snapshot_bytes": sum(p.stat().st_size for p in (state / "resume").glob("*.json")),
        }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_restart", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS)
    parser.add_argument("--kb", type=float, default=DEFAULT_KB, help="size of each session")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="warm and cold starts, each")
    parser.add_argument("--templates", type=int, default=DEFAULT_TEMPLATES, help="distinct sessions copied")
    parser.add_argument("--dir", type=Path, default=None, help="where the temp dir goes (default: $TMPDIR)")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another tree's package (e.g. /tmp/before/daemon): its warm starts, same run",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sessions, args.kb, args.runs, args.templates = 20, 5.0, 1, 2
    result = run(
        sessions=args.sessions,
        kb=args.kb,
        runs=args.runs,
        templates=args.templates,
        directory=args.dir,
        baseline=args.baseline,
    )
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        mb = result["bytes"] / 1e6
        print(f"{result['sessions']:,} sessions, {mb:,.0f} MB (generated in {result['generate_seconds']} s)")
        print(f"first start (cold, builds snapshots): {result['first_start_seconds']:.3f} s")
        print(
            f"warm start to serving: best {result['warm_best']:.3f} s, median {result['warm_median']:.3f} s"
        )
        print(
            f"cold start to serving: best {result['cold_best']:.3f} s, median {result['cold_median']:.3f} s"
        )
        print(f"cold / warm (medians): {result['cold_over_warm']} x")
        print(f"CPU seconds of the process to serving: warm {result['warm_cpu']}, cold {result['cold_cpu']}")
        print(
            f"bytes read by the process to serving: warm {result['warm_rchar']:,}, cold {result['cold_rchar']:,}"
        )
        print(f"snapshots on disk: {result['snapshot_bytes']:,} bytes")
        if "baseline" in result:
            print(
                f"baseline {result['baseline']}, warm starts in the same rounds: {result['baseline_warm_seconds']} s "
                f"(CPU {result['baseline_warm_cpu']}); ours ÷ baseline: best {result['warm_over_baseline']}, "
                f"median of pairs {result['warm_over_baseline_median']}"
            )
        print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return result


if __name__ == "__main__":
    main()
