"""Issue 22 item 1: the non-model work of compacting a session the daemon followed, against a cold one.

One bench-corpus session of ``--mb`` MB. Its messages go through a real :class:`Preparer` in batches of a turn's
entries, as the tailer hands them over while an agent writes (the thread's CPU per MB is reported: the
per-append cost, linear in the appended bytes). Then, in fresh child processes with the engine's modules
imported first and its event loop's backend started (a running daemon has them; its package compiled to
bytecode, as installed), the job (``compact_file``: read, plan, engine with the digest,
commit) on a copy of the file with that store ("followed") and on one without ("cold"), alternately, best of
``--rounds``: process CPU (every thread) as a multiple of a bare ``orjson.loads`` loop over the same lines (in
this process, best of three: memory already touched; and in a fresh process timed as the job is, whose memory
is touched for the first time as the job's is), seconds per 50 MB, and peak RSS as a multiple of the file.
Both must write the same summary.

    python -m bench.bench_followed [--mb 50] [--rounds 2] [--smoke] [--json]
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench._children import compile_package, installed_env
from bench.bench_compact import bare_read
from bench.corpus import session_bytes

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS_PER_50MB = 1.5
TARGET_OVER_BARE = 10.0

# The child: everything a daemon has imported already, then the job timed alone (all threads' CPU).
_CHILD = """
import hashlib, sys, time
import anyio
from compactd.config import load_config
from compactd.sources.files.job import compact_file
import compactd.summarize.augment, compactd.summarize.digest, compactd.summarize.facts
import compactd.summarize.identifiers, compactd.summarize.prepared, compactd.summarize.quality
import compactd.summarize.redact, compactd.summarize.sanitize, compactd.summarize.stages
import compactd.sources.files.preparer, compactd.commit.commit
from compactd.heap import fix_mmap_threshold
fix_mmap_threshold()  # as the service does at its start
anyio.run(anyio.sleep, 0)  # the event loop's backend, which a running daemon has imported
config = load_config(sys.argv[2])
start = time.process_time()
result = anyio.run(lambda: compact_file(sys.argv[1], config))
cpu = time.process_time() - start
e = result.engine
summary = hashlib.sha256(e.summary.encode()).hexdigest() if e is not None else None
prepared = (e.prepared, e.span_messages) if e is not None else None
# VmHWM, the peak of this process's own memory (ru_maxrss would report the bench's, a larger parent's)
rss = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
sys.stdout.write(repr((cpu, rss, result.committed, summary, prepared)))
"""


def prepare_store(path: Path, state: Path) -> dict[str, Any]:
    """The session's messages through a real Preparer, a turn's entries at a time; the thread's CPU."""
    from compactd.sources.files.preparer import Preparer, store_path

    lines = path.read_bytes().split(b"\n")
    batches: list[list[dict[str, Any]]] = [[]]
    for line in lines[1:]:
        if not line:
            continue
        entry = orjson.loads(line)
        role = (entry.get("message") or {}).get("role")
        if role == "user" and batches[-1]:
            batches.append([])
        batches[-1].append(entry)
    preparer = Preparer(state)
    preparer.start()
    preparer.join()  # past the start's sweep
    before = preparer.cpu_seconds
    for batch in batches:
        preparer.appended(str(path), batch, sum(len(orjson.dumps(e)) + 1 for e in batch))
    preparer.join()
    preparer.stop()
    cpu = preparer.cpu_seconds - before
    size = path.stat().st_size
    return {
        "messages": preparer.prepared,
        "dropped": preparer.dropped,
        "batches": len(batches),
        "prepare_cpu_s": round(cpu, 3),
        "prepare_cpu_s_per_mb": round(cpu * 1e6 / size, 4),
        "store_over_size": round(store_path(state, str(path)).stat().st_size / size, 3),
    }


def run_job(path: Path, config: Path) -> dict[str, Any]:
    env = installed_env(drop=("STATE_DIRECTORY", "COMPACTD_CONFIG"))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        check=True,
    )
    cpu, rss, committed, summary, prepared = ast.literal_eval(done.stdout.decode())
    return {"cpu_s": cpu, "rss_bytes": rss, "committed": committed, "summary": summary, "prepared": prepared}


# The same bare loop in a fresh process, timed like the job (after the interpreter's start and the import): its
# buffer's and its objects' memory is touched for the first time, as the job's is; ``bare_read`` (best of three
# in this process) runs on memory already touched.
_BARE_CHILD = """
import sys, time, orjson
start = time.process_time()
data = open(sys.argv[1], "rb").read()
for line in data.split(b"\\n"):
    if line:
        orjson.loads(line)
sys.stdout.write(repr(time.process_time() - start))
"""


def bare_read_fresh(path: Path) -> float:
    """CPU seconds of the bare loop in a fresh child process, best of three."""
    runs = []
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", _BARE_CHILD, str(path)],
            capture_output=True,
            check=True,
            env=installed_env(),
        )
        runs.append(float(done.stdout))
    return min(runs)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_followed", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    mb = 0.3 if args.smoke else args.mb
    rounds = 1 if args.smoke else max(1, args.rounds)
    data = session_bytes(int(mb * 1_000_000), args.seed)[0]
    compile_package()
    with tempfile.TemporaryDirectory(prefix="bench-followed-") as tmp:
        work = Path(tmp)
        source = work / "source" / "session.jsonl"
        source.parent.mkdir()
        source.write_bytes(data)
        state = work / "followed-state"
        prep = prepare_store(source, state)
        floor = bare_read(source)
        fresh_floor = bare_read_fresh(source)
        best: dict[str, dict[str, Any]] = {}
        for round_ in range(rounds):
            for side in ("followed", "cold"):
                directory = work / f"{side}-{round_}"
                directory.mkdir()
                path = directory / "session.jsonl"
                shutil.copyfile(source, path)
                old = time.time() - 3600
                os.utime(path, (old, old))
                side_state = work / f"{side}-{round_}-state"
                if side == "followed":  # the store as the daemon kept it, under this copy's path
                    from compactd.sources.files.preparer import _header, store_path

                    stored = store_path(state, str(source)).read_bytes().partition(b"\n")[2]
                    target = store_path(side_state, str(path))
                    target.parent.mkdir(parents=True)
                    target.write_bytes(_header(str(path)) + stored)
                config = work / f"{side}-{round_}.yaml"
                config.write_text(
                    orjson.dumps(
                        {
                            "state_dir": str(side_state),
                            "compaction": {"rotate_grace_seconds": 0.25},
                            "memory_flush": {"enabled": False},
                        }
                    ).decode()
                )
                got = run_job(path, config)
                if side not in best or got["cpu_s"] < best[side]["cpu_s"]:
                    best[side] = got
    size = len(data)
    followed, cold = best["followed"], best["cold"]
    row = {
        "bytes": size,
        "bare_read_s": round(floor, 3),
        "bare_read_fresh_s": round(fresh_floor, 3),
        **prep,
        "followed": followed,
        "cold": cold,
        "followed_over_bare": round(followed["cpu_s"] / floor, 1) if floor else None,
        "followed_over_fresh_bare": round(followed["cpu_s"] / fresh_floor, 1) if fresh_floor else None,
        "followed_s_per_50mb": round(followed["cpu_s"] * 50e6 / size, 2),
        "cold_s_per_50mb": round(cold["cpu_s"] * 50e6 / size, 2),
        "followed_over_cold": round(followed["cpu_s"] / cold["cpu_s"], 3) if cold["cpu_s"] else None,
        "followed_rss_over_size": round(followed["rss_bytes"] / size, 2),
        "same_summary": followed["summary"] == cold["summary"],
        "load": [round(x, 2) for x in os.getloadavg()],
    }
    if args.json:
        sys.stdout.write(orjson.dumps(row, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(report(row) + "\n")
    return row


def report(r: dict[str, Any]) -> str:
    f, c = r["followed"], r["cold"]
    return "\n".join(
        [
            f"session {r['bytes'] / 1e6:.1f} MB; bare read {r['bare_read_s']:.3f} s (in a fresh process, as the "
            f"job runs: {r['bare_read_fresh_s']:.3f} s; the followed job is {r['followed_over_fresh_bare']} × that)",
            f"prepared as appended: {r['messages']:,} messages in {r['batches']:,} batches ({r['dropped']} dropped), "
            f"{r['prepare_cpu_s']:.2f} s CPU ({r['prepare_cpu_s_per_mb']:.3f} s per MB); store {r['store_over_size']:.2f} × the file",
            "| job | CPU s | ÷ bare read | s per 50 MB | peak RSS MB | RSS ÷ size | prepared |",
            "| --- | --- | --- | --- | --- | --- | --- |",
            f"| followed | {f['cpu_s']:.2f} | {r['followed_over_bare']} | {r['followed_s_per_50mb']:.2f} | "
            f"{f['rss_bytes'] / 1e6:.0f} | {r['followed_rss_over_size']:.2f} | {f['prepared']} |",
            f"| cold | {c['cpu_s']:.2f} | {round(c['cpu_s'] / r['bare_read_s'], 1) if r['bare_read_s'] else '-'} | "
            f"{r['cold_s_per_50mb']:.2f} | {c['rss_bytes'] / 1e6:.0f} | {c['rss_bytes'] / r['bytes']:.2f} | {c['prepared']} |",
            f"followed ÷ cold {r['followed_over_cold']}; same summary: {r['same_summary']}; "
            f"targets: ≤ {TARGET_SECONDS_PER_50MB} s per 50 MB or ≤ {TARGET_OVER_BARE:g} × bare read; "
            f"load average {' '.join(map(str, r['load']))}",
        ]
    )


if __name__ == "__main__":
    main()
