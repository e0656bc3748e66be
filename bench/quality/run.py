"""Compact generated sessions with compactd and score what survives (issue 18, item 1).

    python -m bench.quality [--sessions 3] [--tokens 35000] [--seed 1] [--real-model-url URL] [--json]

Each session is written as a pi v3 JSONL file and compacted by ``compactd compact FILE --force --json`` (a
subprocess, the real commit path), then read back with compactd's own loader (``build_context``). Summarizers:
``digest`` (model-free), ``drop_ids`` (a stub OpenAI-compatible model that keeps the five headings and drops
every identifier, ``tests/support/llm_server.py``) and, given ``--real-model-url``, a real model. Each runs
once on the whole session (``one``) and as a chain of three compactions of a session growing in thirds
(``chain3``, twice the size, so every step has a summary's worth to compact). The window is set so the
session is well past the threshold (a summary, not only truncated tool results).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from compactd.core.context import build_context
from compactd.reading import read_transcript

from bench.quality.score import Score, score
from bench.quality.sessions import CATEGORIES, PHASES, Answer, Session, append_bytes, generate, session_bytes

REPO = Path(__file__).resolve().parents[2]
# 36,000-token window less the 20,000 reserve: a 16,000-token threshold, well under a 35k-token session.
CONTEXT_TOKENS = 36_000
MODES = ("digest", "drop_ids", "real_model")
REAL_MODEL_CONTEXT_TOKENS = 8_192  # tests/support/real_model.py's n_ctx
REAL_MODEL_TIMEOUT_SECONDS = 120
DROP_IDS_SUMMARY = (
    "## Decisions\n- The team agreed on the fixes and the rollout.\n## Open TODOs\n- Finish the open tasks.\n"
    "## Constraints/Rules\n- None.\n## Pending user asks\n- Carry on with the work.\n"
    "## Exact identifiers\n- None.\n"
)


@dataclass
class Tally:
    """Answers found per category over several sessions, and each session's fill."""

    found: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    phases: dict[str, list[int]] = field(default_factory=lambda: {p: [0, 0] for p in PHASES})
    fills: list[float] = field(default_factory=list)
    over_budget: int = 0
    routes: list[str] = field(default_factory=list)

    def add(self, result: Score, route: str, answers: Sequence[Answer]) -> None:
        for phase, (found, total) in result.by_phase(answers).items():
            self.phases[phase][0] += found
            self.phases[phase][1] += total
        for category in CATEGORIES:
            self.total[category] += result.total[category]
            if not result.over_budget:
                self.found[category] += result.found[category]
        self.fills.append(result.fill)
        self.over_budget += result.over_budget
        self.routes.append(route)

    def as_dict(self) -> dict[str, Any]:
        percent = {
            c: round(100.0 * self.found[c] / self.total[c], 1) if self.total[c] else None for c in CATEGORIES
        }
        return {
            "percent": percent,
            "found": dict(self.found),
            "total": dict(self.total),
            "by_phase": {p: {"found": f, "total": t} for p, (f, t) in self.phases.items()},
            "fill_mean": round(sum(self.fills) / len(self.fills), 3) if self.fills else None,
            "fill_max": round(max(self.fills), 3) if self.fills else None,
            "over_budget": self.over_budget,
            "routes": sorted(set(self.routes)),
        }


def write_config(directory: Path, summarizer: dict[str, Any] | None) -> Path:
    config: dict[str, Any] = {
        "agents": {"defaults": {"context_tokens": CONTEXT_TOKENS}},
        "compaction": {"keep_recent_turns": 3, "keep_recent_tokens": 6_000, "rotate_grace_seconds": 0.25},
    }
    if summarizer:
        config["summarizer"] = summarizer
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def compact(path: Path, config: Path, state: Path) -> dict[str, Any]:
    """``compactd compact --force --json`` as a child process; its JSON report."""
    env = {
        **os.environ,
        "STATE_DIRECTORY": str(state),
        "XDG_CONFIG_HOME": str(state / "no-config"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "daemon"), os.environ.get("PYTHONPATH")])),
    }
    command = [
        sys.executable,
        "-m",
        "compactd",
        "compact",
        str(path),
        "--force",
        "--json",
        "--config",
        str(config),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"compactd compact failed ({done.returncode}): {done.stderr[-2000:]}")
    data: dict[str, Any] = json.loads(done.stdout)
    if not data.get("committed"):
        raise RuntimeError(f"compactd compact committed nothing: {data}")
    return data


def view(path: Path) -> list[dict[str, Any]]:
    """pi's context of the session as compactd builds it."""
    return build_context(read_transcript(path)).messages


def run_once(session: Session, directory: Path, config: Path) -> tuple[Score, str]:
    """The whole session, one compaction."""
    path = directory / "sessions" / f"{session.session_id}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(session_bytes(session))
    data = compact(path, config, directory / "state")
    return score(view(path), session.answers, int(data["fill"]["threshold"])), str(data["route"])


def run_chain(session: Session, directory: Path, config: Path, steps: int = 3) -> tuple[Score, str]:
    """The session grown in ``steps`` pieces, compacted after each: the answers scored after the last."""
    path = directory / "sessions" / f"{session.session_id}.jsonl"
    path.parent.mkdir(parents=True)
    cuts = session.split_points(steps)
    path.write_bytes(session_bytes(session, cuts[0]))
    routes: list[str] = []
    data = compact(path, config, directory / "state")
    routes.append(str(data["route"]))
    for step, (start, stop) in enumerate(itertools.pairwise(cuts), start=1):
        leaf = read_transcript(path).leaf_id
        assert leaf is not None
        with path.open("ab") as out:
            out.write(append_bytes(session, start, stop, leaf, f"c{step}"))
        data = compact(path, config, directory / "state")
        routes.append(str(data["route"]))
    return score(view(path), session.answers, int(data["fill"]["threshold"])), "+".join(routes)


@contextmanager
def summarizer_for(
    mode: str, real_model_url: str | None, real_model_name: str
) -> Iterator[dict[str, Any] | None]:
    """The ``summarizer`` config of a mode (None: the digest), with its stub server running meanwhile."""
    if mode == "digest":
        yield None
    elif mode == "drop_ids":
        from tests.support.llm_server import StubLLMServer

        server = StubLLMServer().start()
        server.responder = lambda request: DROP_IDS_SUMMARY
        try:
            yield {"base_url": server.base_url, "model": "stub-model"}
        finally:
            server.stop()
    else:
        # As tests/test_real_model.py configures SmolLM2 under llama-cpp: its real window, a CPU's timeout.
        yield {
            "base_url": real_model_url,
            "model": real_model_name,
            "context_tokens": REAL_MODEL_CONTEXT_TOKENS,
            "timeout_seconds": REAL_MODEL_TIMEOUT_SECONDS,
        }


def run(
    sessions: int,
    tokens: int,
    seed: int,
    modes: Sequence[str] = ("digest", "drop_ids"),
    *,
    chain: bool = True,
    real_model_url: str | None = None,
    real_model_name: str = "smollm2-135m",
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Every mode × (one, chain3) over ``sessions`` sessions: per-category percentages and the fill."""
    results: dict[str, Any] = {"sessions": sessions, "tokens": tokens, "seed": seed, "modes": {}}
    with tempfile.TemporaryDirectory(prefix="quality-", dir=workdir) as tmp:
        root = Path(tmp)
        for mode in modes:
            if mode == "real_model" and not real_model_url:
                results["modes"][mode] = {"skipped": "no --real-model-url given"}
                continue
            with summarizer_for(mode, real_model_url, real_model_name) as summarizer:
                (root / mode).mkdir(parents=True)
                config = write_config(root / mode, summarizer)
                tallies = {"one": Tally(), "chain3": Tally()} if chain else {"one": Tally()}
                for n in range(sessions):
                    session = generate(seed + n, tokens)
                    tallies["one"].add(*run_once(session, root / mode / f"one-{n}", config), session.answers)
                    if chain:
                        grown = generate(seed + n, tokens * 2, session.body_turns * 2)
                        tallies["chain3"].add(
                            *run_chain(grown, root / mode / f"chain-{n}", config), grown.answers
                        )
                results["modes"][mode] = {name: tally.as_dict() for name, tally in tallies.items()}
    return results


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:5.1f}"


def table(results: dict[str, Any]) -> str:
    header = f"{'summarizer':<11} {'run':<7}" + "".join(f"{c:>12}" for c in CATEGORIES) + "   fill (mean/max)"
    lines = [header]
    for mode, runs in results["modes"].items():
        if "skipped" in runs:
            lines.append(f"{mode:<11} skipped: {runs['skipped']}")
            continue
        for name, figures in runs.items():
            cells = "".join(f"{_cell(figures['percent'][c]) + ' %':>12}" for c in CATEGORIES)
            fill = f"   {figures['fill_mean']:.2f}/{figures['fill_max']:.2f}"
            over = f" ({figures['over_budget']} over budget)" if figures["over_budget"] else ""
            lines.append(f"{mode:<11} {name:<7}{cells}{fill}{over}  [{', '.join(figures['routes'])}]")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=35_000, help="size of a session (chain: twice this)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default="digest,drop_ids,real_model")
    parser.add_argument("--no-chain", action="store_true", help="only one compaction per session")
    parser.add_argument("--real-model-url", default=os.environ.get("COMPACTD_REAL_MODEL_URL"))
    parser.add_argument("--real-model-name", default="smollm2-135m")
    parser.add_argument("--smoke", action="store_true", help="one small session")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sessions, args.tokens = 1, 12_000
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown modes: {', '.join(unknown)}")
    results = run(
        args.sessions,
        args.tokens,
        args.seed,
        modes,
        chain=not args.no_chain,
        real_model_url=args.real_model_url,
        real_model_name=args.real_model_name,
    )
    print(json.dumps(results, indent=2) if args.json else table(results))
    return 0
