"""``compactd compact`` on one large session, model-free (the digest), against a bare read of the same file.

Two cases: one bench-corpus session of ``--mb`` MB, and ``--orphans`` entries whose ``parentId`` chain does not
reach the leaf (each points nowhere) around a short real branch. Each runs as a child process (imports, the
read, the engine, the commit; ``rotate_grace_seconds`` at its least, 0.25 s, and CPU time is what is measured, not the wait;
each tree's package compiled to bytecode first, as installed): its CPU time (user + system, from
``wait4``) as a multiple of a bare ``orjson.loads`` loop over the same file's lines in this process, and its
peak RSS (``ru_maxrss``) as a multiple of the file size.

``--baseline PYTHONPATH`` runs another tree's package on the same files in the same run (each case once per
tree per round, alternately, ``--rounds`` rounds, best of each) and prints ours ÷ theirs: a before/after figure
that the machine's load moves far less than either side's seconds.

    python -m bench.bench_compact [--mb 50] [--orphans 100000] [--baseline DIR] [--rounds 2] [--smoke] [--json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench._children import compile_package, installed_env
from bench.corpus import EPOCH_MS, session_bytes

REPO = Path(__file__).resolve().parents[1]
# The targets (issue 11): CPU per 50 MB and RSS as a multiple of the file.
TARGET_SECONDS_PER_50MB = 1.5
TARGET_ORPHAN_SECONDS = 2.0
TARGET_RSS_MULTIPLE = 4.0
TARGET_ORPHAN_RSS_MB = 200.0


def _message(entry_id: str, parent: str | None, role: str, text: str, ms: int) -> dict[str, Any]:
    content = [{"type": "text", "text": text}]
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2025-12-01T00:00:01.000Z",
        "message": {"role": role, "content": content, "timestamp": ms},
    }


def _orphan(index: int) -> dict[str, Any]:
    return _message(f"o{index:07x}", f"gone{index:07x}", "user", "orphaned " * 4, EPOCH_MS)


def orphan_session(orphans: int, turns: int = 60) -> bytes:
    """A header, a real branch of ``turns`` turns, and ``orphans`` message entries under missing parents."""
    header = {
        "type": "session",
        "version": 3,
        "id": "0196a3b2-0000-7000-8000-0000000000aa",
        "timestamp": "2025-12-01T00:00:00.000Z",
        "cwd": "/nonexistent/orphans",
    }
    lines: list[dict[str, Any]] = [header]
    parent: str | None = None
    step = max(1, orphans // max(1, turns * 2))
    orphan = 0
    for turn in range(turns):
        for role, text in (("user", f"question {turn} " * 20), ("assistant", f"answer {turn} " * 40)):
            for _ in range(min(step, orphans - orphan)):
                lines.append(_orphan(orphan))
                orphan += 1
            entry_id = f"b{len(lines):07x}"
            lines.append(_message(entry_id, parent, role, text, EPOCH_MS + len(lines)))
            parent = entry_id
    last = lines.pop()  # the rest go before the last real entry, so the leaf stays on the branch
    lines.extend(_orphan(i) for i in range(orphan, orphans))
    lines.append(last)
    return b"".join(orjson.dumps(x) + b"\n" for x in lines)


def bare_read(path: Path) -> float:
    """CPU seconds of reading the file and ``orjson.loads`` on every line (the floor), best of three."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        data = path.read_bytes()
        for line in data.split(b"\n"):
            if line:
                orjson.loads(line)
        best = min(best, time.process_time() - start)
    return best


# The child is started from this small process, not from the bench: a child forked from a large parent reports
# the parent's resident size as its own ``ru_maxrss`` when that was larger (the bench holds every case's bytes).
_WRAPPER = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
out = child.stdout.read()
_, status, usage = os.wait4(child.pid, 0)
sys.stdout.write(repr((usage.ru_utime + usage.ru_stime, usage.ru_maxrss, os.waitstatus_to_exitcode(status), out)))
"""


def run_compact(path: Path, config: Path, pythonpath: str | None) -> dict[str, Any]:
    """``compactd compact`` as a child of a small wrapper; its CPU seconds and peak RSS (bytes), from ``wait4``."""
    import ast

    env = installed_env(pythonpath=pythonpath, drop=("STATE_DIRECTORY", "COMPACTD_CONFIG"))
    cmd = [sys.executable, "-m", "compactd", "compact", str(path), "--json", "--config", str(config)]
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *cmd], cwd=REPO, env=env, capture_output=True, check=True
    )
    cpu, rss_kb, code, out = ast.literal_eval(done.stdout.decode())
    result = orjson.loads(out) if out.strip() else {}
    return {
        "cpu_s": cpu,
        "wall_s": time.monotonic() - start,
        "rss_bytes": rss_kb * 1024,
        "exit": code,
        "committed": result.get("committed"),
        "reason": result.get("reason"),
    }


def measure(name: str, data: bytes, workdir: Path, pythonpath: str | None) -> dict[str, Any]:
    sessions = workdir / name
    sessions.mkdir(parents=True)
    path = sessions / "session.jsonl"
    path.write_bytes(data)
    old = time.time() - 3600
    os.utime(path, (old, old))
    config = workdir / f"{name}.yaml"
    config.write_text(
        orjson.dumps(
            {
                "state_dir": str(workdir / f"{name}-state"),
                "compaction": {"rotate_grace_seconds": 0.25},
                "memory_flush": {"enabled": False},
            }
        ).decode()
    )
    floor = bare_read(path)
    run = run_compact(path, config, pythonpath)
    size = len(data)
    return {
        "case": name,
        "bytes": size,
        "bare_read_s": round(floor, 3),
        **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in run.items()},
        "cpu_per_50mb_s": round(run["cpu_s"] * 50_000_000 / size, 2),
        "cpu_over_bare": round(run["cpu_s"] / floor, 1) if floor > 0 else None,
        "rss_over_size": round(run["rss_bytes"] / size, 2),
    }


def report(rows: list[dict[str, Any]]) -> str:
    head = "| case | MB | committed | bare read s | compact CPU s | ÷ bare | CPU s per 50 MB | peak RSS MB | RSS ÷ size |"
    out = [head, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(
            f"| {r['case']} | {r['bytes'] / 1e6:.1f} | {r['committed']} | {r['bare_read_s']:.3f} | {r['cpu_s']:.2f} | "
            f"{r['cpu_over_bare']} | {r['cpu_per_50mb_s']:.2f} | {r['rss_bytes'] / 1e6:.0f} | "
            f"{r['rss_over_size']:.2f} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_compact", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--orphans", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pythonpath", help="run another tree's package in the child (a 'before' figure)")
    parser.add_argument("--baseline", help="another tree's package, run on the same files in the same run")
    parser.add_argument("--rounds", type=int, default=2, help="with --baseline: alternating rounds, best of")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to prove the bench works")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    mb, orphans = (0.3, 2_000) if args.smoke else (args.mb, args.orphans)
    cases = [
        ("session", session_bytes(int(mb * 1_000_000), args.seed)[0]),
        ("orphans", orphan_session(orphans)),
    ]
    for tree in {args.pythonpath, args.baseline}:
        compile_package(tree)
    with tempfile.TemporaryDirectory(prefix="bench-compact-") as tmp:
        work = Path(tmp)
        if args.baseline is None:
            rows = [measure(name, data, work, args.pythonpath) for name, data in cases]
        else:
            rows = compare(cases, work, args.pythonpath, args.baseline, max(1, args.rounds))
    if args.json:
        out = orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode()
    else:
        out = report(rows) if args.baseline is None else report_compared(rows)
    sys.stdout.write(out + "\n" + f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    return rows


def compare(
    cases: list[tuple[str, bytes]], work: Path, ours: str | None, baseline: str, rounds: int
) -> list[dict[str, Any]]:
    """Each case with our tree and the baseline alternately, ``rounds`` times; best CPU and least RSS of each
    (a fresh copy of the file every run: a compaction rewrites it)."""
    rows: list[dict[str, Any]] = []
    for name, data in cases:
        best: dict[str, dict[str, Any]] = {}
        for round_ in range(rounds):
            for side, tree in (("ours", ours), ("baseline", baseline)):
                got = measure(f"{name}-{side}-{round_}", data, work, tree)
                if side not in best or got["cpu_s"] < best[side]["cpu_s"]:
                    best[side] = got
        us, them = best["ours"], best["baseline"]
        rows.append(
            {
                "case": name,
                "bytes": len(data),
                "ours": us,
                "baseline": them,
                "cpu_ratio": round(us["cpu_s"] / them["cpu_s"], 3) if them["cpu_s"] else None,
                "rss_ratio": round(us["rss_bytes"] / them["rss_bytes"], 3) if them["rss_bytes"] else None,
            }
        )
    return rows


def report_compared(rows: list[dict[str, Any]]) -> str:
    head = (
        "| case | MB | ours CPU s (÷ bare) | baseline CPU s (÷ bare) | CPU ours ÷ baseline | ours RSS ÷ size "
        "| baseline RSS ÷ size | RSS ours ÷ baseline |"
    )
    out = [head, "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        us, them = r["ours"], r["baseline"]
        out.append(
            f"| {r['case']} | {r['bytes'] / 1e6:.1f} | {us['cpu_s']:.2f} ({us['cpu_over_bare']}) | "
            f"{them['cpu_s']:.2f} ({them['cpu_over_bare']}) | {r['cpu_ratio']} | {us['rss_over_size']:.2f} | "
            f"{them['rss_over_size']:.2f} | {r['rss_ratio']} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    main()
