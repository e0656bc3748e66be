"""Regenerate the bundled example sessions (deterministic): ``python examples/make_sessions.py``.

One long session over its compaction threshold on the built-in defaults (200k window), one that fits.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent / "sessions"
FILES = ["src/server/routes.py", "src/server/auth.py", "tests/test_routes.py", "docs/deploy.md", "Makefile"]


def _id(rng: random.Random, taken: set[str]) -> str:
    while True:
        value = f"{rng.getrandbits(32):08x}"
        if value not in taken:
            taken.add(value)
            return value


def session(name: str, session_id: str, turns: int, seed: int) -> None:
    rng = random.Random(seed)
    taken: set[str] = set()
    t = 1_790_000_000_000
    lines = [
        {
            "type": "session",
            "version": 3,
            "id": session_id,
            "timestamp": "2026-09-21T09:00:00.000Z",
            "cwd": "/srv/demo-project",
        }
    ]
    parent = None

    def add(entry: dict) -> None:
        nonlocal parent
        entry_id = _id(rng, taken)
        entry = {
            "type": entry.pop("type"),
            "id": entry_id,
            "parentId": parent,
            "timestamp": "2026-09-21T09:00:00.000Z",
            **entry,
        }
        lines.append(entry)
        parent = entry_id

    add({"type": "model_change", "provider": "anthropic", "modelId": "claude-sonnet-4-5"})
    add({"type": "thinking_level_change", "thinkingLevel": "low"})
    context = 3_000
    for turn in range(turns):
        t += 60_000
        path = FILES[turn % len(FILES)]
        ask = (
            f"Turn {turn}: please fix the failing check in {path} and never touch the production database "
            f"at db.internal:5432; run `make test` afterwards (ticket OPS-{4100 + turn})."
        )
        add(
            {
                "type": "message",
                "message": {"role": "user", "content": [{"type": "text", "text": ask}], "timestamp": t},
            }
        )
        call_id = f"toolu_{turn:04d}{rng.getrandbits(40):010x}"
        add(
            {
                "type": "message",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"I'll read {path} first."},
                        {"type": "toolCall", "id": call_id, "name": "read", "arguments": {"path": path}},
                    ],
                    "api": "anthropic-messages",
                    "provider": "anthropic",
                    "model": "claude-sonnet-4-5",
                    "usage": {
                        "input": 10,
                        "output": 40,
                        "cacheRead": context,
                        "cacheWrite": 0,
                        "totalTokens": context + 50,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
                    },
                    "stopReason": "toolUse",
                    "timestamp": t + 1,
                },
            }
        )
        body = "\n".join(
            f"{i:4d}  def handler_{turn}_{i}(request):  # commit {rng.getrandbits(28):07x}" for i in range(20)
        )
        failed = turn % 7 == 3
        text = body + (
            "\nTraceback (most recent call last):\nAssertionError: expected 200\nexit code 1"
            if failed
            else ""
        )
        add(
            {
                "type": "message",
                "message": {
                    "role": "toolResult",
                    "toolCallId": call_id,
                    "toolName": "read",
                    "content": [{"type": "text", "text": text}],
                    "isError": failed,
                    "timestamp": t + 2,
                },
            }
        )
        context += len(text) // 4 + len(ask) // 4 + 60 + 110 * 55 // 4
        add(
            {
                "type": "message",
                "message": {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "text",
                            "text": f"Decided to keep the retry logic in {path}; the fix is in place.\n\n"
                            + "\n".join(
                                f"    retry_{turn}_{i} = backoff(attempt={i}, cap=5.0)  # keep"
                                for i in range(110)
                            ),
                        }
                    ],
                    "api": "anthropic-messages",
                    "provider": "anthropic",
                    "model": "claude-sonnet-4-5",
                    "usage": {
                        "input": 10,
                        "output": 30,
                        "cacheRead": context,
                        "cacheWrite": 0,
                        "totalTokens": context + 40,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
                    },
                    "stopReason": "stop",
                    "timestamp": t + 3,
                },
            }
        )
    (HERE / name).write_text(
        "".join(json.dumps(e, separators=(",", ":"), ensure_ascii=False) + "\n" for e in lines)
    )


if __name__ == "__main__":
    HERE.mkdir(parents=True, exist_ok=True)
    session(
        "2026-09-21T09-00-00-000Z_0196a3b2-0000-7000-8000-00000000a001.jsonl",
        "0196a3b2-0000-7000-8000-00000000a001",
        95,
        1,
    )
    session(
        "2026-09-22T10-30-00-000Z_0196a3b2-0000-7000-8000-00000000b002.jsonl",
        "0196a3b2-0000-7000-8000-00000000b002",
        6,
        2,
    )
