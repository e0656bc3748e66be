"""A deterministic corpus of pi v3 session transcripts for the benchmarks.

The mix follows design.md §7.7 (measured on real usage): mostly small user/assistant lines, tool results of
1–50 KB (log-uniform) carrying about three quarters of the bytes, CJK and emoji in a share of the lines, nested
tool-call arguments, usage on most assistant lines, and file sizes spread log-normally. Output depends only on
the seed and the sizes, so two runs of a benchmark read identical bytes.

    python -m bench.corpus DIR --files N --mb M [--seed S]
"""

from __future__ import annotations

import argparse
import bisect
import functools
import math
import os
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

# --- shape of the corpus (design.md §7.7) ----------------------------------------------------------------
TOOL_RESULT_MIN_BYTES = 1_000
TOOL_RESULT_MAX_BYTES = 50_000
MIN_FILE_BYTES = 5_000
# Log-normal file sizes: with sigma 1.6 the p50/p90/max spread is close to the baseline corpus
# (235 KB / 1.16 MB / 26 MB at 1,000 files, 511 MB).
FILE_SIZE_SIGMA = 1.6
USAGE_SHARE = 0.7  # assistant lines carrying a usage block
# Unicode shares sit between design.md §7.7 (50 % of lines non-ASCII) and the real pi sessions in the
# fixtures (13–27 % of other lines' bytes, 26–32 % of tool-result bytes non-ASCII). Non-ASCII strings are what
# make both orjson and the UTF-16 length slow, so this share moves every rate.
CJK_SHARE = 0.15  # prose texts with some CJK
EMOJI_SHARE = 0.2  # prose texts with an emoji or symbol
TOOL_RESULT_UNICODE_SHARE = 0.3  # tool results with a few CJK/emoji lines
THINKING_SHARE = 0.6  # assistant steps with a thinking block
NESTED_ARGS_SHARE = 0.15  # tool calls whose arguments nest 3–4 levels
DETAILS_SHARE = 0.1  # tool results with a `details` object (stripped before counting)
ABORTED_SHARE = 0.01  # aborted assistant turns (persisted by pi, never a usage anchor)
# The shared text pool that tool results are cut from (file contents, logs, listings).
POOL_CHARS = 3_000_000
POOL_SEED = 20261130
EPOCH_MS = 1_764_547_200_000  # 2025-12-01T00:00:00Z

_WORD_TEXT = """
the a to of and in is it that for on with as this be are not we can should file function return
value error test session line read write parse token ledger cursor offset append branch leaf entry
header compaction summary model context window budget thresholds user assistant result call bash
edit grep import class def async await config path json orjson bytes inode stat watch event batch
debounce refactor plan next step check works fails because after before then still also only fix bug
issue let me look at run tests again now here there which where what why how done ok good
"""
WORDS = tuple(_WORD_TEXT.split())
CJK = (
    "你好世界",
    "这个函数需要重构",
    "测试失败了",
    "请检查配置文件",
    "日本語のテキスト",
    "ファイルを読み込む",
    "한국어 문장",
    "上下文窗口",
    "会话记录",
    "令牌估算",
)
EMOJI = ("✅", "❌", "🚀", "🔥", "⚠️", "👍", "📁", "→", "•", "🧪", "💡", "…", "€", "≥")
# Tool output (trees, test runners, logs) uses BMP symbols; astral emoji are rare there. This matters: in the
# real sessions 33–40 % of text characters are non-ASCII but under 0.3 % sit in strings with an astral
# character, the costly case for a UTF-16 length.
TOOL_SYMBOLS = ("✓", "✗", "→", "•", "─", "│", "├──", "└──", "⚠", "…", "€", "≥", "λ", "°")
ASTRAL_IN_TOOL_RESULT_SHARE = 0.02
TOOLS = ("bash", "read", "edit", "write", "grep", "find", "ls")
MODELS = (
    ("anthropic", "claude-sonnet-4-5", "anthropic-messages"),
    ("openai", "gpt-5.1-codex", "openai-responses"),
    ("google", "gemini-2.5-pro", "google-generative-ai"),
)
CODE_TEMPLATES = (
    "def {w}_{v}(self, {x}: int) -> str:",
    "    return self.{w}[{x}] if {v} else None",
    "import {{ {W} }} from './{w}/{v}.js';",
    "export function {w}{W}({x}: string): number {{",
    "  const {x} = await {w}.{v}({x}, {{ timeout: 5000 }});",
    "{n:>6}\t{w}_{v} = {n}",
    "2025-12-01T10:{m:02d}:{s:02d}.123Z INFO {w}: {v} {x} ok in {n} ms",
    "2025-12-01T10:{m:02d}:{s:02d}.456Z WARN {w}.{v}: retrying ({n}/3)",
    "-rw-r--r--  1 user user {n:>8} Dec  1 10:{m:02d} {w}_{v}.py",
    "src/{w}/{v}.ts:{n}:{m}: error TS2345: Argument of type '{W}' is not assignable",
    "    # {w} {v} {x}: keep the {w} for the next {v}",
    "}}",
    "",
)


@dataclass
class Stats:
    """What was written, by line kind, so the benchmark reports can show the corpus shape."""

    files: int = 0
    bytes: int = 0
    lines: int = 0
    lines_by_kind: Counter[str] = field(default_factory=Counter)
    bytes_by_kind: Counter[str] = field(default_factory=Counter)
    lines_with_cjk: int = 0
    lines_non_ascii: int = 0
    file_sizes: list[int] = field(default_factory=list)

    def add(self, other: Stats) -> None:
        self.files += other.files
        self.bytes += other.bytes
        self.lines += other.lines
        self.lines_by_kind.update(other.lines_by_kind)
        self.bytes_by_kind.update(other.bytes_by_kind)
        self.lines_with_cjk += other.lines_with_cjk
        self.lines_non_ascii += other.lines_non_ascii
        self.file_sizes.extend(other.file_sizes)

    def as_dict(self) -> dict[str, Any]:
        sizes = sorted(self.file_sizes)

        def pct(q: float) -> int:
            return sizes[min(len(sizes) - 1, int(q * len(sizes)))] if sizes else 0

        total = max(1, self.bytes)
        lines = max(1, self.lines)
        return {
            "files": self.files,
            "bytes": self.bytes,
            "lines": self.lines,
            "tool_result_byte_share": round(self.bytes_by_kind["toolResult"] / total, 3),
            "tool_result_line_share": round(self.lines_by_kind["toolResult"] / lines, 3),
            "cjk_line_share": round(self.lines_with_cjk / lines, 3),
            "non_ascii_line_share": round(self.lines_non_ascii / lines, 3),
            "lines_by_kind": dict(sorted(self.lines_by_kind.items())),
            "file_size_min": pct(0.0),
            "file_size_p50": pct(0.5),
            "file_size_p90": pct(0.9),
            "file_size_max": sizes[-1] if sizes else 0,
        }


def code_line(rng: random.Random) -> str:
    """One line of code, log or listing from the templates (the pool's and other generators' text)."""
    w, v, x = rng.choice(WORDS), rng.choice(WORDS), rng.choice(WORDS)
    return rng.choice(CODE_TEMPLATES).format(
        w=w,
        v=v,
        x=x,
        W=w.capitalize(),
        n=rng.randrange(100_000),
        m=rng.randrange(60),
        s=rng.randrange(60),
    )


@functools.cache
def _pool() -> tuple[str, list[int]]:
    """ASCII tool-result text (code, logs, listings) and each line's start offset."""
    rng = random.Random(POOL_SEED)
    parts: list[str] = []
    starts: list[int] = []
    size = 0
    while size < POOL_CHARS:
        line = code_line(rng)
        starts.append(size)
        parts.append(line)
        size += len(line) + 1
    return "\n".join(parts) + "\n", starts


def _pool_text(rng: random.Random, chars: int) -> str:
    pool, starts = _pool()
    chars = min(chars, len(pool) // 2)
    begin = starts[bisect.bisect_left(starts, rng.randrange(len(pool) - chars))]
    return pool[begin : begin + chars]


def _tool_text(rng: random.Random, chars: int) -> str:
    """A slice of the pool; some results get a few CJK/emoji lines, as a file or log with unicode would."""
    text = _pool_text(rng, chars)
    if rng.random() >= TOOL_RESULT_UNICODE_SHARE:
        return text
    lines = text.split("\n")
    for _ in range(rng.randrange(1, 6)):
        lines.insert(
            rng.randrange(len(lines)), f"# {rng.choice(CJK)} {rng.choice(WORDS)} {rng.choice(TOOL_SYMBOLS)}"
        )
    if rng.random() < ASTRAL_IN_TOOL_RESULT_SHARE:
        lines.insert(rng.randrange(len(lines)), f"- {rng.choice(WORDS)} 🚀")
    return "\n".join(lines)


def _prose(rng: random.Random, words: int) -> str:
    out = rng.choices(WORDS, k=words)
    if rng.random() < CJK_SHARE:
        for _ in range(1 + words // 60):
            out[rng.randrange(len(out))] = rng.choice(CJK)
    if rng.random() < EMOJI_SHARE:
        out[rng.randrange(len(out))] = rng.choice(EMOJI)
    if words > 40:
        for _ in range(words // 40):
            out.insert(rng.randrange(len(out)), "\n\n")
    return " ".join(out)


def _nested_value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth <= 0 or roll < 0.3:
        return rng.choice(
            (
                rng.randrange(-1000, 100_000),
                round(rng.uniform(-10, 10), rng.randrange(1, 6)),
                rng.random() < 0.5,
                None,
                rng.choice(WORDS),
                rng.choice(CJK),
                f"{rng.choice(EMOJI)} {rng.choice(WORDS)}",
            )
        )
    if roll < 0.6:
        return [_nested_value(rng, depth - 1) for _ in range(rng.randrange(1, 4))]
    return {rng.choice(WORDS) + str(i): _nested_value(rng, depth - 1) for i in range(rng.randrange(1, 4))}


def _arguments(rng: random.Random, tool: str) -> dict[str, Any]:
    path = f"/home/user/src/{rng.choice(WORDS)}/{rng.choice(WORDS)}_{rng.choice(WORDS)}.py"
    args: dict[str, Any]
    if tool == "bash":
        args = {
            "command": f"cd /home/user/src && {rng.choice(WORDS)} --{rng.choice(WORDS)} {path}",
            "timeout": 120,
        }
    elif tool == "read":
        args = {"path": path, "offset": rng.randrange(1, 400), "limit": rng.choice((100, 200, 2000))}
    elif tool in ("edit", "write"):
        args = {
            "path": path,
            "edits": [
                {
                    "oldText": _pool_text(rng, rng.randrange(40, 400)),
                    "newText": _pool_text(rng, rng.randrange(40, 400)),
                }
                for _ in range(rng.randrange(1, 3))
            ],
        }
    else:
        args = {
            "pattern": rng.choice(WORDS),
            "path": os.path.dirname(path),
            "glob": "*.py",
            "ignoreCase": True,
        }
    if rng.random() < NESTED_ARGS_SHARE:
        args["options"] = {
            "env": {"LANG": "zh_CN.UTF-8", "NOTE": rng.choice(CJK), "RATIO": rng.random()},
            "flags": [rng.choice(WORDS) for _ in range(rng.randrange(1, 5))],
            "meta": {"tags": [rng.choice(EMOJI), rng.choice(CJK)], "nested": _nested_value(rng, 3)},
        }
    return args


def _usage(rng: random.Random, context: int) -> dict[str, Any]:
    output = rng.randrange(20, 2000)
    cache_read = max(0, context - rng.randrange(0, 4000))
    inp = rng.randrange(1, 500)
    cache_write = rng.randrange(0, 3000)
    cost = {
        "input": inp * 3e-6,
        "output": output * 1.5e-5,
        "cacheRead": cache_read * 3e-7,
        "cacheWrite": cache_write * 3.75e-6,
    }
    cost["total"] = sum(cost.values())
    return {
        "input": inp,
        "output": output,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "totalTokens": inp + output + cache_read + cache_write,
        "cost": cost,
    }


class _Writer:
    """Builds one session's lines, chaining ids and timestamps, and counts what it wrote."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[bytes] = []
        self.size = 0
        self.ids: set[str] = set()
        self.leaf: str | None = None
        self.clock = EPOCH_MS + rng.randrange(0, 86_400_000 * 30)
        self.context = rng.randrange(3_000, 20_000)
        self.call = 0
        self.stats = Stats(files=1)
        self.provider, self.model, self.api = rng.choice(MODELS)

    def _new_id(self) -> str:
        while True:
            value = f"{self.rng.getrandbits(32):08x}"
            if value not in self.ids:
                self.ids.add(value)
                return value

    def _iso(self) -> str:
        return datetime.fromtimestamp(self.clock / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"

    def emit(self, kind: str, obj: dict[str, Any]) -> None:
        line = orjson.dumps(obj) + b"\n"
        self.lines.append(line)
        self.size += len(line)
        self.stats.lines += 1
        self.stats.lines_by_kind[kind] += 1
        self.stats.bytes_by_kind[kind] += len(line)
        if not line.isascii():
            self.stats.lines_non_ascii += 1
            if any(0x3000 <= ord(c) <= 0xD7AF for c in line.decode()):
                self.stats.lines_with_cjk += 1

    def entry(self, kind: str, fields: dict[str, Any], label: str | None = None) -> str:
        self.clock += self.rng.randrange(200, 20_000)
        entry_id = self._new_id()
        obj = {"type": kind, "id": entry_id, "parentId": self.leaf, "timestamp": self._iso(), **fields}
        self.leaf = entry_id
        self.emit(label or kind, obj)
        return entry_id

    def message(self, message: dict[str, Any]) -> None:
        message["timestamp"] = self.clock + self.rng.randrange(0, 200)
        self.context += sum(len(str(v)) for v in message.get("content", ())) // 4
        self.entry("message", {"message": message}, label=message["role"])

    def header(self, session_id: str) -> None:
        self.emit(
            "session",
            {
                "type": "session",
                "version": 3,
                "id": session_id,
                "timestamp": self._iso(),
                "cwd": f"/home/user/src/{self.rng.choice(WORDS)}-{self.rng.choice(WORDS)}",
            },
        )
        self.entry("model_change", {"provider": self.provider, "modelId": self.model})
        self.entry(
            "thinking_level_change", {"thinkingLevel": self.rng.choice(("off", "low", "medium", "high"))}
        )

    def assistant(self, blocks: list[dict[str, Any]], stop: str) -> None:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": blocks,
            "api": self.api,
            "provider": self.provider,
            "model": self.model,
        }
        # Only a final answer is aborted here: an aborted tool-use turn would leave its results orphaned.
        aborted = stop == "stop" and self.rng.random() < ABORTED_SHARE
        if self.rng.random() < USAGE_SHARE and not aborted:
            message["usage"] = _usage(self.rng, self.context)
        else:
            message["usage"] = {
                k: 0 for k in ("input", "output", "cacheRead", "cacheWrite", "totalTokens")
            } | {"cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}
        message["stopReason"] = "aborted" if aborted else stop
        if aborted:
            message["errorMessage"] = "Request was aborted."
        self.message(message)

    def turn(self, budget: int) -> None:
        """One user prompt and the agent's steps until its final answer; tool results fit ``budget`` bytes."""
        rng = self.rng
        self.message(
            {"role": "user", "content": [{"type": "text", "text": _prose(rng, rng.randrange(8, 150))}]}
        )
        for _ in range(rng.choice((0, 0, 1, 1, 1, 2))):
            blocks: list[dict[str, Any]] = []
            if rng.random() < THINKING_SHARE:
                blocks.append({"type": "thinking", "thinking": _prose(rng, rng.randrange(20, 500))})
            if rng.random() < 0.6:
                blocks.append({"type": "text", "text": _prose(rng, rng.randrange(5, 120))})
            calls = []
            for _ in range(rng.choice((1, 1, 1, 2))):
                self.call += 1
                tool = rng.choice(TOOLS)
                call_id = f"toolu_{self.call:04d}{rng.getrandbits(48):012x}"
                calls.append((call_id, tool))
                blocks.append(
                    {"type": "toolCall", "id": call_id, "name": tool, "arguments": _arguments(rng, tool)}
                )
            self.assistant(blocks, "toolUse")
            for call_id, tool in calls:
                size = math.exp(rng.uniform(math.log(TOOL_RESULT_MIN_BYTES), math.log(TOOL_RESULT_MAX_BYTES)))
                size = max(TOOL_RESULT_MIN_BYTES // 2, min(size, budget - self.size))
                result: dict[str, Any] = {
                    "role": "toolResult",
                    "toolCallId": call_id,
                    "toolName": tool,
                    "content": [{"type": "text", "text": _tool_text(rng, int(size))}],
                    "isError": rng.random() < 0.05,
                }
                if rng.random() < DETAILS_SHARE:
                    result["details"] = {
                        "truncation": {"truncated": False, "totalLines": rng.randrange(1, 5000)}
                    }
                self.message(result)
        final: list[dict[str, Any]] = []
        if rng.random() < THINKING_SHARE:
            final.append({"type": "thinking", "thinking": _prose(rng, rng.randrange(20, 400))})
        final.append({"type": "text", "text": _prose(rng, rng.randrange(10, 400))})
        self.assistant(final, "stop")


def _session_id(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def session_bytes(target_bytes: int, seed: int) -> tuple[bytes, Stats]:
    """A whole session of about ``target_bytes`` (it stops after the first turn that reaches it)."""
    rng = random.Random(seed)
    writer = _Writer(rng)
    writer.header(_session_id(rng))
    while writer.size < target_bytes:
        writer.turn(target_bytes)
    data = b"".join(writer.lines)
    writer.stats.bytes = len(data)
    writer.stats.file_sizes.append(len(data))
    return data, writer.stats


def generate_session(path: str | os.PathLike[str], target_bytes: int, seed: int) -> Stats:
    """Write one session of about ``target_bytes`` to ``path`` (overwritten)."""
    data, stats = session_bytes(target_bytes, seed)
    Path(path).write_bytes(data)
    return stats


def file_sizes(n_files: int, total_bytes: int, seed: int) -> list[int]:
    """Log-normal sizes that add up to about ``total_bytes``, none below ``MIN_FILE_BYTES``."""
    rng = random.Random(seed)
    weights = [rng.lognormvariate(0.0, FILE_SIZE_SIGMA) for _ in range(n_files)]
    scale = total_bytes / sum(weights)
    return [max(MIN_FILE_BYTES, int(w * scale)) for w in weights]


def generate_corpus(directory: str | os.PathLike[str], n_files: int, total_bytes: int, seed: int) -> Stats:
    """``n_files`` sessions totalling about ``total_bytes`` in ``directory`` (created), named by index."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    stats = Stats()
    for index, size in enumerate(file_sizes(n_files, total_bytes, seed)):
        stats.add(generate_session(root / f"session-{index:05d}.jsonl", size, seed * 1_000_003 + index))
    return stats


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--mb", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    stats = generate_corpus(args.dir, args.files, int(args.mb * 1_000_000), args.seed).as_dict()
    sys.stdout.write(orjson.dumps(stats, option=orjson.OPT_INDENT_2).decode() + "\n")
    return stats


if __name__ == "__main__":
    main()
