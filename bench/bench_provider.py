"""``compactd summarize --json`` (OpenClaw's compaction provider, model-free: the digest) on large requests.

Four requests of about ``--mb`` MB: a bench-corpus conversation (its messages as OpenClaw sends them), one
message holding all the text, many small messages, and a short message after a one-line previous summary.
Each runs as a child process with the request on its stdin. Measured from ``wait4``: CPU seconds (user +
system) and peak RSS (``ru_maxrss``). RSS is reported as a multiple of the request's size after subtracting
the same command's peak on a ~100 KB request of the same shape (the interpreter and the imports), so the
figure is what the input itself costs.

    python -m bench.bench_provider [--mb 19] [--pythonpath OTHER/daemon] [--smoke] [--json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.corpus import session_bytes

REPO = Path(__file__).resolve().parents[1]
# The target (issue 17): memory a small multiple of the input.
TARGET_RSS_MULTIPLE = 6.0
SMALL_BYTES = 100_000
PROSE = (
    "fix the rounding error in /srv/app/billing/ledger.py for ticket ZX-4411 see https://wiki.example.com/zx "
    "then rerun pytest -k ledger and deploy v2.3.1 on port 8443"
)


def conversation(size: int, seed: int = 7) -> bytes:
    """The messages of a bench-corpus session of about ``size`` bytes, as a request."""
    data, _ = session_bytes(size, seed)
    messages = [e["message"] for e in map(orjson.loads, data.splitlines()) if e.get("type") == "message"]
    return orjson.dumps({"messages": messages, "previousSummary": None})


def one_message(size: int) -> bytes:
    """One user message holding ``size`` bytes of prose and identifiers."""
    text = " ".join([PROSE] * (size // (len(PROSE) + 1) + 1))[:size]
    return orjson.dumps({"messages": [{"role": "user", "content": text, "timestamp": 1}]})


def many_messages(size: int) -> bytes:
    """Short user and assistant messages, about 60 bytes each."""
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i} done", "timestamp": i}
        for i in range(max(2, size // 60))
    ]
    return orjson.dumps({"messages": messages})


def previous_summary(size: int) -> bytes:
    """A short message after a previous summary of ``size`` bytes, one bullet line long."""
    text = "## Decisions\n- " + " ".join([PROSE] * (size // (len(PROSE) + 1) + 1))[:size]
    return orjson.dumps(
        {"messages": [{"role": "user", "content": "go on", "timestamp": 1}], "previousSummary": text}
    )


SHAPES: dict[str, Callable[[int], bytes]] = {
    "conversation": conversation,
    "one message": one_message,
    "many messages": many_messages,
    "previous summary": previous_summary,
}


# Runs the command and prints its rusage: a child's peak RSS counts its parent's pages from before exec, and
# this process holds the requests, so the command is started from a small process of its own.
_WRAPPER = """
import os, subprocess, sys
with open(sys.argv[1], "rb") as stdin:
    child = subprocess.Popen(sys.argv[2:], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
sys.stdout.write(repr((usage.ru_utime + usage.ru_stime, usage.ru_maxrss, os.waitstatus_to_exitcode(status), out)))
"""


def run(request: bytes, workdir: Path, config: Path, pythonpath: str | None) -> dict[str, Any]:
    """``compactd summarize --json`` as a child with ``request`` on stdin (a file: no writer to wait on)."""
    import ast

    env = {k: v for k, v in os.environ.items() if k not in ("STATE_DIRECTORY", "COMPACTD_CONFIG")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    path = workdir / "request.json"
    path.write_bytes(request)
    cmd = [sys.executable, "-m", "compactd", "summarize", "--json", "--config", str(config)]
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(path), *cmd], cwd=REPO, env=env, capture_output=True, check=True
    )
    cpu, rss_kb, code, out = ast.literal_eval(done.stdout.decode())
    answer = orjson.loads(out) if out.strip() else {}
    return {
        "cpu_s": cpu,
        "wall_s": time.monotonic() - start,
        "rss_bytes": rss_kb * 1024,
        "exit": code,
        "level": answer.get("level"),
    }


def measure(shape: str, size: int, workdir: Path, pythonpath: str | None) -> dict[str, Any]:
    make = SHAPES[shape]
    config = workdir / "config.yaml"
    request, small = make(size), make(SMALL_BYTES)
    base, big = run(small, workdir, config, pythonpath), run(request, workdir, config, pythonpath)
    return {
        "case": shape,
        "bytes": len(request),
        "small_rss_bytes": base["rss_bytes"],
        **{k: (round(v, 3) if isinstance(v, float) else v) for k, v in big.items()},
        "cpu_per_mb_s": round(big["cpu_s"] * 1_000_000 / len(request), 3),
        "rss_over_size": round((big["rss_bytes"] - base["rss_bytes"]) / len(request), 2),
    }


def report(rows: list[dict[str, Any]]) -> str:
    head = "| request | MB | exit | level | CPU s | CPU s per MB | peak RSS MB | small RSS MB | (RSS − small) ÷ size |"
    out = [head, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(
            f"| {r['case']} | {r['bytes'] / 1e6:.1f} | {r['exit']} | {r['level']} | {r['cpu_s']:.2f} | "
            f"{r['cpu_per_mb_s']:.3f} | {r['rss_bytes'] / 1e6:.0f} | {r['small_rss_bytes'] / 1e6:.0f} | "
            f"{r['rss_over_size']:.2f} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_provider", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--mb", type=float, default=19.0)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--pythonpath", help="run another tree's package in the child (a 'before' figure)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to prove the bench works")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    size = 300_000 if args.smoke else int(args.mb * 1_000_000)
    with tempfile.TemporaryDirectory(prefix="bench-provider-") as tmp:
        config = Path(tmp) / "config.yaml"
        config.write_text(orjson.dumps({"state_dir": str(Path(tmp) / "state")}).decode())
        rows = [measure(shape, size, Path(tmp), args.pythonpath) for shape in args.shapes.split(",")]
    sys.stdout.write(
        (orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() if args.json else report(rows)) + "\n"
    )
    return rows


if __name__ == "__main__":
    main()
