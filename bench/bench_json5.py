"""OpenClaw's ``openclaw.json`` read: compactd's parse of a big config as a multiple of ``orjson.loads``.

The config is OpenClaw-shaped (a gateway, one provider with many models, agent defaults), ``--kb`` KiB as JSON5
(comments, unquoted keys, single quotes, trailing commas, hex and signed numbers). Each variant runs in this
process, interleaved, best of K, timed by the thread's CPU time; the floor is ``orjson.loads`` of the same value
as plain JSON. Ratios (lower is better):

- ``json``: :func:`parse_config` of the plain-JSON bytes (orjson, then the depth check) ÷ orjson on them;
- ``json5_same_bytes``: compactd's JSON5 parser on those same JSON bytes ÷ orjson on them;
- ``json5``: :func:`parse_config` of the JSON5 rendering ÷ orjson on the JSON rendering of the same value;
- ``cached``: :func:`read_openclaw_config` of the unchanged JSON5 file (open, fstat, the cache) ÷ the same floor.

``--json5-package-kb N`` also times the ``json5`` package (the parser used before) on an N KiB config, once: it
takes about a minute a MiB.

    python -m bench.bench_json5 [--kb 1024] [--runs 7] [--json5-package-kb 64]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from compactd.sources.openclaw._discovery import parse_config, read_openclaw_config
from compactd.sources.openclaw._json5 import loads

from bench.bench_read import _timed, interleaved

DEFAULT_KB = 1024
DEFAULT_RUNS = 7
_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


def _model(i: int) -> dict[str, Any]:
    return {
        "id": f"model-{i}",
        "name": f"Model {i} \u2014 \u00e9t\u00e9 'quoted' \"double\"",
        "reasoning": i % 2 == 0,
        "input": ["text", "image"] if i % 3 else ["text"],
        "cost": {"input": 0.5 + i / 1000, "output": 1.25, "cacheRead": 0, "cacheWrite": 0},
        "contextWindow": 32000 + i,
        "maxTokens": 8192,
        "headers": {"x-trace": f"{i:08x}"},
    }


def big_config(size: int) -> dict[str, Any]:
    """An OpenClaw-shaped config whose JSON5 rendering (style 1) is at least ``size`` bytes."""
    one = len(render(_model(0), style=1))
    count = max(1, math.ceil(size / one) + 1)
    while True:
        value = {
            "gateway": {"port": 18789, "auth": {"mode": "token", "token": "gw-secret-token-0123456789"}},
            "models": {
                "mode": "replace",
                "providers": {"fake": {"api": "openai", "models": [_model(i) for i in range(count)]}},
            },
            "agents": {"defaults": {"model": {"primary": "fake/model-0"}, "contextTokens": 20000}},
        }
        if len(render(value, style=1)) >= size:
            return value
        count += max(1, count // 20)


def _string(text: str, quote: str, style: int) -> str:
    out = [quote]
    for char in text:
        if char == "\\" or char == quote:
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif ord(char) < 0x20 or char in "\u2028\u2029\x7f":
            # JSON5 \x takes two hex digits: U+2028 and U+2029 need \u
            short = style == 2 and ord(char) <= 0xFF
            out.append(f"\\x{ord(char):02x}" if short else f"\\u{ord(char):04x}")
        elif style == 2 and char == "\u00e9":
            out.append("\\u00e9")
        else:
            out.append(char)
    out.append(quote)
    return "".join(out)


def _number(value: int | float, style: int) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "-Infinity" if value < 0 else "+Infinity" if style == 1 else "Infinity"
        text = repr(value)
        if style == 1 and text.startswith("0.") and len(text) > 2:
            return "+" + text[1:]  # +.5
        return text
    if style == 1 and value >= 0 and value % 7 == 3:
        return hex(value)
    if style == 2 and value < 0 and value % 5 == 1:
        return "-" + hex(-value)
    return str(value)


def render(value: Any, *, style: int) -> str:
    """``value`` as JSON5 text: style 0 is plain JSON; 1 comments, unquoted keys, single quotes, trailing commas,
    hex and signed numbers; 2 escapes (``\\x``, ``\\u``, a line continuation) and block comments; 3 JSON5's
    other whitespace and single-quoted keys."""
    if style == 0:
        return json.dumps(value, ensure_ascii=False)  # (Infinity where a float is infinite, as JSON5 has it)
    parts: list[str] = []
    gap = {1: "\n  ", 2: " ", 3: "\u00a0\v"}[style]
    comment = {1: "// note\n", 2: "/* note */", 3: "\u2028"}[style]
    quote = "'" if style in (1, 3) else '"'

    def emit(item: Any) -> None:
        if item is None or isinstance(item, bool):
            parts.append({None: "null", True: "true", False: "false"}[item])
        elif isinstance(item, int | float):
            parts.append(_number(item, style))
        elif isinstance(item, str):
            text = _string(item, quote, style)
            if style == 2 and len(item) > 4:  # a line continuation in the middle
                text = text[:3] + "\\\n" + text[3:] if text[1:3].count("\\") == 0 else text
            parts.append(text)
        elif isinstance(item, list):
            parts.append("[")
            for child in item:
                parts.append(gap)
                emit(child)
                parts.append("," + {1: "/* item */", 2: comment, 3: gap}[style])
            parts.append("]")
        else:
            parts.append("{")
            for key, child in item.items():
                parts.append(gap)
                if style == 1 and _IDENTIFIER.fullmatch(key):
                    parts.append(key)
                else:
                    parts.append(_string(key, "'" if style == 3 else quote, style))
                parts.append(":" + gap)
                emit(child)
                parts.append("," + comment)
            parts.append("}")

    if style == 2:
        parts.append("/* openclaw.json */\n")
    emit(value)
    return "".join(parts)


def run(*, kb: float, runs: int, seed: int, package_kb: float) -> dict[str, Any]:
    value = big_config(int(kb * 1024))
    as_json = orjson.dumps(value)
    as_json5 = render(value, style=1).encode()
    assert parse_config(as_json) == value and parse_config(as_json5) == value
    with tempfile.TemporaryDirectory(prefix="bench-json5-") as tmp:
        path = Path(tmp) / "openclaw.json"
        path.write_bytes(as_json5)
        read_openclaw_config(str(path))  # the first read parses; every later one finds it unchanged
        variants: dict[str, Callable[[], object]] = {
            "orjson": lambda: orjson.loads(as_json),
            "json": lambda: parse_config(as_json),
            "json5_same_bytes": lambda: loads(as_json.decode()),
            "json5": lambda: parse_config(as_json5),
            "cached": lambda: read_openclaw_config(str(path)),
        }
        times = interleaved(variants, runs, seed)
    best = {name: min(values) for name, values in times.items()}
    floor = best["orjson"]
    result: dict[str, Any] = {
        "json_bytes": len(as_json),
        "json5_bytes": len(as_json5),
        "seconds": best,
        "ratios": {name: best[name] / floor for name in best if name != "orjson"},
    }
    if package_kb:
        import json5

        small = render(big_config(int(package_kb * 1024)), style=1)
        seconds = _timed(lambda: json5.loads(small))
        ours = _timed(lambda: loads(small))
        result["json5_package"] = {"bytes": len(small), "seconds": seconds, "ours_seconds": ours}
    return result


def report(result: dict[str, Any]) -> str:
    lines = [
        f"config: {result['json_bytes']:,} bytes as JSON, {result['json5_bytes']:,} as JSON5",
        f"orjson.loads (the floor): {result['seconds']['orjson'] * 1000:.2f} ms",
    ]
    for name, ratio in result["ratios"].items():
        lines.append(f"{name:>18}: {result['seconds'][name] * 1000:9.2f} ms = {ratio:8.2f} x orjson")
    package = result.get("json5_package")
    if package:
        lines.append(
            f"json5 package on {package['bytes']:,} bytes: {package['seconds']:.2f} s "
            f"(compactd's parser: {package['ours_seconds'] * 1000:.1f} ms, "
            f"{package['seconds'] / package['ours_seconds']:.0f} x faster)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_json5", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", type=float, default=DEFAULT_KB)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--json5-package-kb", type=float, default=0.0)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to prove the bench works")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.kb, args.runs, args.json5_package_kb = 16, 2, 2
    result = run(kb=args.kb, runs=args.runs, seed=args.seed, package_kb=args.json5_package_kb)
    sys.stdout.write((orjson.dumps(result).decode() if args.json else report(result)) + "\n")
    return result


if __name__ == "__main__":
    main()
