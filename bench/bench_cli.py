"""The command line, whole process: ``compactd once --dry-run`` over a corpus and ``compactd inspect`` of one big
transcript, each against a bare ``orjson.loads`` loop over the same bytes, in the same run.

Every side is a fresh ``python`` process (interpreter start, imports, reading the files, the work, exit), timed
by its CPU seconds (user + system, ``getrusage(RUSAGE_CHILDREN)``), so time the scheduler gave to other
processes does not count. The variants run in a shuffled order in every round; the ratio is
``bare CPU ÷ ours`` (1.0: as fast as parsing the lines and nothing else). Target: ≥ 0.5 for both.

    python -m bench.bench_cli [--corpus DIR] [--big FILE] [--runs K] [--code DIR] [--baseline DIR] [--parts] [--json]
                              [--smoke]

``--code DIR`` runs the ``compactd`` package found in ``DIR`` (e.g. an old version exported with
``git archive <rev> daemon | tar -x -C /tmp/old``, then ``--code /tmp/old/daemon``): the "before" figures.
``--baseline DIR`` runs that package as a third side in the same shuffled rounds: ours ÷ baseline, same run.
``--parts`` splits the dry run, in the same rounds: the interpreter's start with every module the dry run loads
imported and nothing else done, and the exact reading it starts from (``parse_transcript`` of every file, every
check made, its problems read, with the reader's imports alone; a dry run has the costlier checks made for its due
sessions only). ``bare ÷ the reading`` bounds what a dry run that reads every session as compactd must can reach,
before it imports or decides anything else.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench.corpus import generate_corpus

TARGET_RATIO = 0.5
DEFAULT_FILES = 200
DEFAULT_MB = 100.0
DEFAULT_BIG_MB = 200.0
DEFAULT_RUNS = 3

# The floor: the same files read and every line parsed, nothing kept (the interpreter's start included, as ours).
BARE_LOOP = """
import sys, orjson
loads = orjson.loads
for name in sys.argv[1:]:
    with open(name, "rb") as f:
        data = f.read()
    for line in data.split(b"\\n"):
        if line.strip():
            loads(line)
"""

# The dry run's exact reading alone: every file read and parsed as a dry run reads it, with every check the reader
# makes (its problems read: a dry run has the nesting checked for its due sessions only, so this bounds its reading).
READING_ONLY = """
import sys, os
from compactd.core.reader import parse_transcript
for name in sys.argv[1:]:
    with open(name, "rb") as f:
        data = f.read()
    parse_transcript(data, lean=True).problems
os._exit(0)  # as the dry run ends: without the interpreter's teardown
"""

# The modules a run of ``argv`` loaded (printed at its end), for the imports-only side.
MODULES_OF = """
import runpy, sys, os
def dump():
    sys.stderr.write("\\nMODULES " + " ".join(sorted(sys.modules)) + "\\n")
real_exit = os._exit
def at_exit(code):
    dump()
    real_exit(code)
os._exit = at_exit
sys.argv = ["compactd", *sys.argv[1:]]
try:
    runpy.run_module("compactd", run_name="__main__")
except SystemExit:
    dump()
    raise
"""

IMPORTS_ONLY = """
import sys, importlib
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:  # a module only its package's code can load by name (none among compactd's)
        pass
"""


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_process(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds of one child process run to its end; a failure is an error, not a figure."""
    start = _child_cpu()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = _child_cpu() - start
    if done.returncode not in (0, 1):  # once exits 1 when a session failed: still a full pass
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def write_config(directory: Path, roots: list[Path]) -> Path:
    config = directory / "config.yaml"
    (directory / "state").mkdir(exist_ok=True)
    roots_yaml = ", ".join(orjson.dumps(str(r)).decode() for r in roots)
    config.write_text(f"sessions:\n  roots: [{roots_yaml}]\nstate_dir: {directory / 'state'}\n")
    return config


def measure(
    commands: dict[str, dict[str, list[str]]], envs: dict[str, dict[str, str]], runs: int, seed: int = 0
) -> dict[str, dict[str, Any]]:
    """For each measure, every side (``ours``, ``bare``, and ``base`` with a baseline): CPU seconds per run, the
    order of all processes shuffled per round. ``envs``: each side's environment."""
    rng = random.Random(seed)
    times: dict[tuple[str, str], list[float]] = {}
    jobs = [(name, side) for name in commands for side in commands[name]]
    for name, side in jobs:  # warm-up: bytecode compiled and cached, files in the page cache
        timed_process(commands[name][side], envs[side])
    for _ in range(runs):
        rng.shuffle(jobs)
        for name, side in jobs:
            times.setdefault((name, side), []).append(timed_process(commands[name][side], envs[side]))
    result: dict[str, dict[str, Any]] = {}
    for name in commands:
        ours_t, bare_t = times[(name, "ours")], times[(name, "bare")]
        parts = {
            side: round(min(t), 3) for (n, side), t in times.items() if n == name and side.startswith("part:")
        }
        result[name] = {
            "ours_cpu_s": round(min(ours_t), 3),
            "bare_cpu_s": round(min(bare_t), 3),
            "ratio": round(min(bare_t) / min(ours_t), 3),
            "ratio_median": round(statistics.median(b / o for b, o in zip(bare_t, ours_t, strict=True)), 3),
            "command": " ".join(commands[name]["ours"][1:]),
        }
        result[name]["meets_target"] = result[name]["ratio"] >= TARGET_RATIO
        if parts:
            result[name]["parts_cpu_s"] = {side.removeprefix("part:"): t for side, t in parts.items()}
            result[name]["bare_over_parts"] = {
                side.removeprefix("part:"): round(min(bare_t) / t, 3) for side, t in parts.items()
            }
        if "base" in commands[name]:
            base_t = times[(name, "base")]
            result[name].update(
                {
                    "base_cpu_s": round(min(base_t), 3),
                    "base_ratio": round(min(bare_t) / min(base_t), 3),  # the baseline's own ratio, same run
                    "ours_vs_base": round(min(ours_t) / min(base_t), 3),
                    "ours_vs_base_median": round(
                        statistics.median(o / b for o, b in zip(ours_t, base_t, strict=True)), 3
                    ),
                }
            )
    return result


def _modules_loaded(argv: list[str], env: dict[str, str]) -> list[str]:
    """Every module a run of ``argv`` had loaded at its end (the standard library's it loaded inside a function
    too): importing them all again in a fresh process is the dry run's start and imports alone."""
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    lines = [
        line for line in done.stderr.decode(errors="replace").splitlines() if line.startswith("MODULES ")
    ]
    if done.returncode not in (0, 1) or not lines:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}")
    return [n for n in lines[-1].split()[1:] if n != "__main__"]


def run(
    corpus: Path | None = None,
    big: Path | None = None,
    *,
    files: int = DEFAULT_FILES,
    mb: float = DEFAULT_MB,
    big_mb: float = DEFAULT_BIG_MB,
    seed: int = 1,
    runs: int = DEFAULT_RUNS,
    code: Path | None = None,
    only: list[str] | None = None,
    baseline: Path | None = None,
    parts: bool = False,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="compactd-bench-cli-") as tmp_name:
        tmp = Path(tmp_name)
        if corpus is None:
            corpus = tmp / "corpus"
            generate_corpus(corpus, files, int(mb * 1_000_000), seed)
        if big is None:
            generate_corpus(tmp / "big", 1, int(big_mb * 1_000_000), seed)
            big = next((tmp / "big").glob("*.jsonl"))
        config = write_config(tmp, [corpus])
        corpus_files = [str(p) for p in sorted(corpus.glob("*.jsonl"))]
        env = dict(os.environ)
        # Bytecode as an installed package has it: compiled once (the warm-up below), then read from a cache.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        base_env = dict(env)
        if code is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        if baseline is not None:
            base_env["PYTHONPATH"] = os.pathsep.join([str(baseline), base_env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            )
        py = sys.executable
        ours = {
            "once --dry-run": [py, "-m", "compactd", "once", "--dry-run", "--config", str(config)],
            "inspect": [py, "-m", "compactd", "inspect", str(big), "--config", str(config)],
        }
        bare = {
            "once --dry-run": [py, "-c", BARE_LOOP, *corpus_files],
            "inspect": [py, "-c", BARE_LOOP, str(big)],
        }
        commands: dict[str, dict[str, list[str]]] = {
            name: {"ours": ours[name], "bare": bare[name]}
            | ({"base": ours[name]} if baseline is not None else {})
            for name in (only or list(ours))
        }
        if parts and "once --dry-run" in commands:
            loaded = _modules_loaded([py, "-c", MODULES_OF, *ours["once --dry-run"][3:]], env)
            commands["once --dry-run"]["part:start + imports"] = [py, "-c", IMPORTS_ONLY, *loaded]
            commands["once --dry-run"]["part:reading"] = [py, "-c", READING_ONLY, *corpus_files]
        envs = {"ours": env, "bare": env, "base": base_env, "part:start + imports": env, "part:reading": env}
        measures = measure(commands, envs, runs)
        return {
            "corpus_files": len(corpus_files),
            "corpus_bytes": sum(os.path.getsize(p) for p in corpus_files),
            "big_bytes": big.stat().st_size,
            "runs": runs,
            "code": str(code) if code is not None else None,
            "baseline": str(baseline) if baseline is not None else None,
            "target_ratio": TARGET_RATIO,
            "measures": measures,
        }


def report(result: dict[str, Any]) -> str:
    out = [
        f"corpus: {result['corpus_files']} files, {result['corpus_bytes'] / 1e6:.1f} MB; "
        f"inspect: one {result['big_bytes'] / 1e6:.1f} MB file; best of {result['runs']}, CPU seconds"
        + (f"; code from {result['code']}" if result["code"] else ""),
        f"{'command':<16} {'compactd':>9} {'bare loop':>10} {'ratio':>7} {'median':>7}  target >= {result['target_ratio']}",
    ]
    for name, m in result["measures"].items():
        out.append(
            f"{name:<16} {m['ours_cpu_s']:9.3f} {m['bare_cpu_s']:10.3f} {m['ratio']:7.3f} "
            f"{m['ratio_median']:7.3f}  {'met' if m['meets_target'] else 'NOT met'}"
        )
    for name, m in result["measures"].items():
        if "parts_cpu_s" in m:
            shown = ", ".join(
                f"{side} {t:.3f} (bare ÷ it {m['bare_over_parts'][side]:.3f})"
                for side, t in m["parts_cpu_s"].items()
            )
            out.append(f"{name} in parts: {shown}")
    if result.get("baseline"):
        out.append(
            f"baseline {result['baseline']}, same run: {'command':<16} {'baseline':>9} {'its ratio':>9} ours/base"
        )
        for name, m in result["measures"].items():
            out.append(
                f"{'':<35}{name:<16} {m['base_cpu_s']:9.3f} {m['base_ratio']:9.3f} {m['ours_vs_base']:.3f} "
                f"(median {m['ours_vs_base_median']:.3f})"
            )
    try:
        load = os.getloadavg()
        out.append(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    except OSError:
        pass
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_cli", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, help="an existing corpus directory (else one is generated)")
    parser.add_argument("--big", type=Path, help="an existing transcript for inspect (else one is generated)")
    parser.add_argument("--files", type=int, default=DEFAULT_FILES)
    parser.add_argument("--mb", type=float, default=DEFAULT_MB)
    parser.add_argument("--big-mb", type=float, default=DEFAULT_BIG_MB)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--code", type=Path, help="run the compactd package in this directory (before/after)")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another tree's package (e.g. /tmp/before/daemon), run alongside in the same run",
    )
    parser.add_argument(
        "--only", action="append", choices=("once --dry-run", "inspect"), help="measure only this command"
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="also the dry run's start and imports alone, and its reading alone",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to prove the bench works")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.smoke:
        args.files, args.mb, args.big_mb, args.runs = 3, 0.3, 0.3, 1
    result = run(
        args.corpus,
        args.big,
        files=args.files,
        mb=args.mb,
        big_mb=args.big_mb,
        seed=args.seed,
        runs=args.runs,
        code=args.code,
        only=args.only,
        baseline=args.baseline,
        parts=args.parts,
    )
    sys.stdout.write((orjson.dumps(result).decode() if args.json else report(result)) + "\n")
    return result


if __name__ == "__main__":
    main()
