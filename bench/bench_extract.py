"""A compaction's identifier work alone (issue 22): the span's redaction and its identifier extraction, as the
engine runs them, in our tree and in a baseline tree, on the same session in the same run; and after them the
sections computed from the same texts: the model-free digest, the ``## Current state`` section and the tool
failures.

Each side is a fresh child process (``--pythonpath`` for the baseline, as ``bench_compact``) that reads the
session, redacts every message (``redact_value``), builds the job's ``SpanText`` and extracts the identifiers.
It reports the thread CPU of the redaction and of the extraction, and a digest of the records (every field of
every ``Identifier``): the two trees must give the same digest, which is the equality evidence on the bench
corpus; so must the sections (``summary_digest``: the digest's text, the state's and the failures', hashed), each
timed apart (``digest_s``, ``state_s``, ``failures_s``). The sides alternate for ``--rounds`` rounds; the best of each is compared, with a bare ``orjson.loads``
loop over the same lines (in each child) as the floor.

    python -m bench.bench_extract --baseline DIR [--mb 50] [--rounds 3] [--file F] [--smoke] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.corpus import session_bytes

REPO = Path(__file__).resolve().parents[1]


def child(path: str) -> dict[str, Any]:
    """In the child: the floor, the redaction and the extraction of ``path``'s messages, timed apart."""
    from compactd.core.messages import llm_visible
    from compactd.summarize.augment import collect_tool_failures
    from compactd.summarize.digest import build_digest
    from compactd.summarize.facts import working_state
    from compactd.summarize.identifiers import extract_identifiers, rank_identifiers
    from compactd.summarize.redact import SpanText, redact_value

    data = Path(path).read_bytes()
    start = time.thread_time()
    entries = [orjson.loads(line) for line in data.split(b"\n") if line]
    floor = time.thread_time() - start
    read = list(llm_visible(e["message"] for e in entries if e.get("type") == "message"))
    start = time.thread_time()
    handed_on = [redact_value(m) for m in read]
    redaction = time.thread_time() - start
    start = time.thread_time()
    texts = SpanText.of(read, handed_on)
    found = extract_identifiers(handed_on, texts)
    extraction = time.thread_time() - start
    ranked = rank_identifiers(found)
    # As the engine calls them: the digest without the sections the augmentation appends, the state of the span
    # read through the job's texts, the failures from the messages with their details.
    start = time.thread_time()
    body = build_digest(
        handed_on, identifiers=ranked, include_failures=False, include_files=False, texts=texts
    )
    digest_s = time.thread_time() - start
    start = time.thread_time()
    state = working_state(handed_on, None, texts).render()
    state_s = time.thread_time() - start
    start = time.thread_time()
    failures = collect_tool_failures(read)
    failures_s = time.thread_time() - start
    sections = orjson.dumps([body, state, failures])
    return {
        "floor_s": floor,
        "redact_s": redaction,
        "extract_s": extraction,
        "digest_s": digest_s,
        "state_s": state_s,
        "failures_s": failures_s,
        "identifiers": len(found),
        "digest": hashlib.sha256(orjson.dumps(found)).hexdigest(),
        "summary_digest": hashlib.sha256(sections).hexdigest(),
    }


def run_child(path: Path, pythonpath: str | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_extract", "--child", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        check=True,
    ).stdout
    result: dict[str, Any] = orjson.loads(out)
    return result


_SECTIONS = ("digest_s", "state_s", "failures_s")


def compare(path: Path, baseline: str, rounds: int) -> dict[str, Any]:
    best: dict[str, dict[str, Any]] = {}
    digests: dict[str, set[str]] = {"ours": set(), "baseline": set()}
    summaries: dict[str, set[str]] = {"ours": set(), "baseline": set()}
    sections: dict[str, dict[str, float]] = {"ours": {}, "baseline": {}}  # best of each stage apart
    for _ in range(rounds):
        for side, tree in (("ours", None), ("baseline", baseline)):
            got = run_child(path, tree)
            digests[side].add(got["digest"])
            summaries[side].add(got["summary_digest"])
            for key in _SECTIONS:
                sections[side][key] = min(sections[side].get(key, got[key]), got[key])
            total = got["redact_s"] + got["extract_s"]
            if side not in best or total < best[side]["redact_s"] + best[side]["extract_s"]:
                best[side] = got
    for side in best:
        best[side].update(sections[side])
    us, them = best["ours"], best["baseline"]
    return {
        "bytes": path.stat().st_size,
        "ours": us,
        "baseline": them,
        "extract_ratio": round(us["extract_s"] / them["extract_s"], 3),
        "redact_ratio": round(us["redact_s"] / them["redact_s"], 3),
        "total_ratio": round((us["extract_s"] + us["redact_s"]) / (them["extract_s"] + them["redact_s"]), 3),
        "records_equal": len(digests["ours"] | digests["baseline"]) == 1,
        **{
            key.replace("_s", "_ratio"): round(us[key] / them[key], 3) if them[key] > 0 else None
            for key in _SECTIONS
        },
        "sections_equal": len(summaries["ours"] | summaries["baseline"]) == 1,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def report(r: dict[str, Any]) -> str:
    us, them = r["ours"], r["baseline"]

    def side(s: dict[str, Any]) -> str:
        return (
            f"{s['redact_s']:.2f} | {s['extract_s']:.2f} | "
            f"{(s['redact_s'] + s['extract_s']) / s['floor_s']:.1f} × | {s['identifiers']}"
        )

    return "\n".join(
        [
            f"session {r['bytes'] / 1e6:.1f} MB; load average {' '.join(map(str, r['load_average']))}",
            "| tree | redaction s | extraction s | both ÷ bare read | identifiers |",
            "| --- | --- | --- | --- | --- |",
            f"| ours | {side(us)} |",
            f"| baseline | {side(them)} |",
            f"ours ÷ baseline: extraction {r['extract_ratio']}, redaction {r['redact_ratio']}, "
            f"both {r['total_ratio']}; records equal: {r['records_equal']}",
            "| tree | digest s | current state s | tool failures s |",
            "| --- | --- | --- | --- |",
            *(
                f"| {name} | {s['digest_s']:.3f} | {s['state_s']:.3f} | {s['failures_s']:.3f} |"
                for name, s in (("ours", us), ("baseline", them))
            ),
            f"ours ÷ baseline: digest {r['digest_ratio']}, state {r['state_ratio']}, "
            f"failures {r['failures_ratio']}; sections equal: {r['sections_equal']}",
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_extract", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", help="another tree's package (its daemon/ directory)")
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--file", help="a session file to use instead of a generated one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to prove the bench works")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.child:
        result = child(args.child)
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return result
    baseline = args.baseline or str(REPO / "daemon")  # without one: our tree against itself
    with tempfile.TemporaryDirectory(prefix="bench-extract-") as tmp:
        path = Path(args.file) if args.file else Path(tmp) / "session.jsonl"
        if not args.file:
            mb = 0.3 if args.smoke else args.mb
            path.write_bytes(session_bytes(int(mb * 1_000_000), args.seed)[0])
        result = compare(path, baseline, 1 if args.smoke else max(1, args.rounds))
    sys.stdout.write((orjson.dumps(result).decode() if args.json else report(result)) + "\n")
    return result


if __name__ == "__main__":
    main()
