"""Cold read: parse + ledger of a whole corpus, against a bare ``orjson.loads`` loop over the same lines.

Both run in this process, interleaved in a random order, best of K (design.md §7.7's method). The corpus
bytes are in memory for both, so disk and page cache are out of the comparison; the bare loop gets its lines
pre-split (the parse ceiling, about 950 MB/s on the project machine), our side gets whole files, as a reload
does. The target is a ratio, ``ledger MB/s ÷ orjson MB/s ≥ 0.6``, because absolute rates move with the machine.

    python -m bench.bench_read [--corpus DIR | --files N --mb M --seed S] [--runs K] [--breakdown]

``--breakdown`` also times each stage of our pipeline alone (as a multiple of the orjson loop's time) to show
where the time goes; stages overlap, so they do not add up exactly.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from compactd.core.context import build_context
from compactd.core.ledger import SessionLedger
from compactd.core.messages import is_runtime_context, strip_for_llm
from compactd.core.prune import tool_result_text_chars
from compactd.core.reader import parse_transcript, validate
from compactd.core.tokens import estimate_tokens, js_json_len, js_len, usage_tokens

from bench.corpus import generate_corpus

TARGET_RATIO = 0.6
DEFAULT_FILES = 200
DEFAULT_MB = 100.0
DEFAULT_RUNS = 5


def load_corpus(directory: Path) -> list[bytes]:
    return [path.read_bytes() for path in sorted(directory.glob("*.jsonl"))]


def split_lines(datas: list[bytes]) -> list[bytes]:
    """The same lines our reader parses: bytes split on ``\\n``, blank ones dropped."""
    return [line for data in datas for line in data.split(b"\n") if line.strip()]


def orjson_loop(lines: list[bytes]) -> None:
    loads = orjson.loads
    for line in lines:
        loads(line)


def ledger_loop(datas: list[bytes]) -> None:
    for data in datas:
        SessionLedger.from_bytes(data)


def _timed(fn: Callable[[], object]) -> float:
    """CPU seconds of this thread: on a shared machine, wall time also counts the time other processes ran."""
    gc.collect()
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def interleaved(
    variants: dict[str, Callable[[], object]], runs: int, seed: int = 0
) -> dict[str, list[float]]:
    """Seconds per run for each variant, the order shuffled in every round so drift hits all alike."""
    rng = random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for _ in range(runs):
        rng.shuffle(names)
        for name in names:
            times[name].append(_timed(variants[name]))
    return times


def breakdown(datas: list[bytes], lines: list[bytes], runs: int) -> dict[str, float]:
    """Each stage of parse + ledger timed alone, as a multiple of the bare orjson loop's best time."""
    transcripts = [parse_transcript(data) for data in datas]
    messages = [
        strip_for_llm(m) for t in transcripts for m in build_context(t).messages if not is_runtime_context(m)
    ]
    texts: list[str] = []
    arguments: list[Any] = []
    for message in messages:
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            for key in ("text", "thinking"):
                if isinstance(block.get(key), str):
                    texts.append(block[key])
            if block.get("type") == "toolCall":
                arguments.append(block.get("arguments"))

    def fresh() -> None:
        for transcript in transcripts:
            # The indexes and the branch are cached on first use; each stage pays for them as a reload does.
            transcript._by_id = transcript._links = transcript._branch = None

    def each(fn: Callable[[Any], object], items: list[Any]) -> Callable[[], None]:
        def run() -> None:
            for item in items:
                fn(item)

        return run

    def after_fresh(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            fresh()
            fn()

        return run

    def loads_kept_per_file() -> None:
        loads = orjson.loads
        for data in datas:
            kept = [loads(line) for line in data.split(b"\n") if line.strip()]
            del kept

    def walk_lines() -> None:
        """The reader's line walk alone (``Scan.entries``'s: a find per newline, a memoryview slice per line)."""
        for data in datas:
            view, find, size, pos = memoryview(data), data.find, len(data), 0
            while pos < size:
                nl = find(b"\n", pos)
                end = size if nl < 0 else nl
                view[pos:end]
                pos = end + 1

    stages: dict[str, Callable[[], object]] = {
        "orjson.loads (pre-split lines)": lambda: orjson_loop(lines),
        "ref: orjson.loads, file's values kept": loads_kept_per_file,
        "reader: line walk only": walk_lines,
        "reader: parse_transcript": each(parse_transcript, datas),
        "reader: validate()": after_fresh(each(validate, transcripts)),
        "context: build_context()": after_fresh(each(build_context, transcripts)),
        "ledger: from_transcript (parsed)": after_fresh(each(SessionLedger.from_transcript, transcripts)),
        "tokens: estimate_tokens (all msgs)": each(estimate_tokens, messages),
        "prune: tool_result_text_chars": each(tool_result_text_chars, messages),
        "tokens: usage_tokens": each(usage_tokens, messages),
        "tokens: js_len (all text blocks)": each(js_len, texts),
        "tokens: js_json_len (tool args)": each(js_json_len, arguments),
        "ref: len(orjson.dumps(args))": each(lambda a: len(orjson.dumps(a)), arguments),
        "total: parse + ledger": lambda: ledger_loop(datas),
    }
    times = interleaved(stages, runs, seed=1)
    base = min(times["orjson.loads (pre-split lines)"])
    return {name: round(min(t) / base, 3) for name, t in times.items()}


def run(
    corpus: Path | None = None,
    *,
    files: int = DEFAULT_FILES,
    mb: float = DEFAULT_MB,
    seed: int = 1,
    runs: int = DEFAULT_RUNS,
    with_breakdown: bool = False,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="compactd-bench-") as tmp:
        shape: dict[str, Any] | None = None
        if corpus is None:
            corpus = Path(tmp) / "corpus"
            shape = generate_corpus(corpus, files, int(mb * 1_000_000), seed).as_dict()
        datas = load_corpus(corpus)
    lines = split_lines(datas)
    total = sum(len(d) for d in datas)
    times = interleaved({"orjson": lambda: orjson_loop(lines), "ledger": lambda: ledger_loop(datas)}, runs)
    best_orjson, best_ledger = min(times["orjson"]), min(times["ledger"])
    result: dict[str, Any] = {
        "files": len(datas),
        "bytes": total,
        "lines": len(lines),
        "runs": runs,
        "orjson_mb_s": round(total / best_orjson / 1e6, 1),
        "ledger_mb_s": round(total / best_ledger / 1e6, 1),
        "orjson_mb_s_median": round(total / statistics.median(times["orjson"]) / 1e6, 1),
        "ledger_mb_s_median": round(total / statistics.median(times["ledger"]) / 1e6, 1),
        "ratio": round(best_orjson / best_ledger, 3),
        "ratio_median": round(
            statistics.median(o / t for o, t in zip(times["orjson"], times["ledger"], strict=True)), 3
        ),
        "target_ratio": TARGET_RATIO,
    }
    result["meets_target"] = result["ratio"] >= TARGET_RATIO
    if shape is not None:
        result["corpus"] = shape
    if with_breakdown:
        result["breakdown"] = breakdown(datas, lines, runs)
    return result


def report(result: dict[str, Any]) -> str:
    out = [
        f"corpus: {result['files']} files, {result['bytes'] / 1e6:.1f} MB, {result['lines']} lines; best of {result['runs']}",
        f"orjson.loads loop      {result['orjson_mb_s']:8.1f} MB/s  (median {result['orjson_mb_s_median']:.1f})",
        f"parse + ledger         {result['ledger_mb_s']:8.1f} MB/s  (median {result['ledger_mb_s_median']:.1f})",
        f"ratio (best / best)    {result['ratio']:8.3f}  (median of pairs {result['ratio_median']:.3f}; "
        f"target >= {result['target_ratio']}: {'met' if result['meets_target'] else 'NOT met'})",
    ]
    for name, factor in result.get("breakdown", {}).items():
        out.append(f"  {name:<38} {factor:6.3f} x orjson time")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_read", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, help="an existing corpus directory (else one is generated)")
    parser.add_argument("--files", type=int, default=DEFAULT_FILES)
    parser.add_argument("--mb", type=float, default=DEFAULT_MB)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--breakdown", action="store_true", help="time each stage alone")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to prove the bench works")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.smoke:
        args.files, args.mb, args.runs = 3, 0.3, 2
    result = run(
        args.corpus,
        files=args.files,
        mb=args.mb,
        seed=args.seed,
        runs=args.runs,
        with_breakdown=args.breakdown,
    )
    sys.stdout.write((orjson.dumps(result).decode() if args.json else report(result)) + "\n")
    return result


if __name__ == "__main__":
    main()
