"""Committing to a session pi 1.6.0 wrote, judged by pi 1.6.0's own loader (design.md §6.14).

- A compaction carries the system checkpoint: pi's context after it opens with one system message equal to the
  prompt and tools it had, then the summary, then the kept turns verbatim; the tool loadout pi restores from the
  branch is unchanged; pi's own figure (``estimateProjectedContextTokens``) is the one compactd reports.
- A pruning is appended ``context_edit`` entries: every byte before them is the file as it was, no archive, and
  pi shows the shortened results.
- A pi 0.73 session keeps today's shape (no checkpoint, no edit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import compactd
from tests.support.messages import assistant, call, tool_result, usage, user
from tests.support.pi import pi_load, pi_write

PI_1 = "1.6.0"
TOOLS = [
    {"name": "read", "description": "Read a file", "parameters": {"type": "object", "properties": {}}},
    {"name": "bash", "description": "Run a command", "parameters": {"type": "object", "properties": {}}},
]
RESULT_CHARS = 15_000
TURNS = 10


def _ops(*, system_messages: bool, image: bool = False) -> list[dict[str, Any]]:
    """A coding session as pi 1.x records it: the system prompt and tools as a system message, turns that read
    large files, usage on every reply, a usage record, an edit of an early result."""
    ts = 1_790_000_000_000
    ops: list[dict[str, Any]] = [{"op": "appendMessage", "message": user("start: audit the ledger", ts=ts)}]
    if system_messages:
        prompt = {"role": "system", "content": "You are pi, a coding agent.", "sections": {"rules": "Be exact."},
                  "toolsAdded": TOOLS, "timestamp": ts + 1}  # fmt: skip
        ops.append({"op": "appendMessage", "message": prompt})
    for i in range(TURNS):
        base = ts + 10 * (i + 1)
        if i:
            content: Any = f"turn {i}: read ledger_{i:02d}.txt"
            if image and i == 1:
                content = [
                    {"type": "text", "text": content},
                    {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                ]
            ops.append({"op": "appendMessage", "message": user(content, ts=base)})
        ops.append(
            {
                "op": "appendMessage",
                "message": assistant(call(f"c{i}", "read", {"path": f"ledger_{i:02d}.txt"}), stop="toolUse",
                                     usage=usage(2_000 + 4_000 * i), ts=base + 1, provider="stub", model="stub-model"),
            }
        )  # fmt: skip
        text = f"ledger_{i:02d} line: balance {i * 17} checksum {i * 7919 % 65521}\n" * (RESULT_CHARS // 50)
        ops.append(
            {
                "op": "appendMessage",
                "message": tool_result(f"c{i}", text[:RESULT_CHARS], name="read", ts=base + 2),
            }
        )
        ops.append(
            {
                "op": "appendMessage",
                "message": assistant(f"ledger_{i:02d}.txt read: balance {i * 17}", usage=usage(4_000 + 4_000 * i),
                                     ts=base + 3, provider="stub", model="stub-model"),
            }
        )  # fmt: skip
        if system_messages and i == 2:
            ops.append({"op": "appendUsage", "kind": "summary", "provider": "stub", "model": "stub-model",
                        "usage": usage(10)})  # fmt: skip
        if system_messages and i == 4:
            ops.append(
                {"op": "appendContextEdit", "target": 3, "replacement": {"content": "[ledger_00 elided]"}}
            )
    return ops


def _session(
    tmp_path: Path, *, system_messages: bool = True, image: bool = False, version: str = PI_1
) -> Path:
    written = pi_write(
        tmp_path / "sessions", _ops(system_messages=system_messages, image=image), version=version
    )
    assert written["exists"]
    return Path(written["path"])


def _config(tmp_path: Path, window: int) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "sessions": {"roots": [str(tmp_path / "sessions")], "idle_seconds": 0},
                "agents": {"defaults": {"context_tokens": window}},
                "state_dir": str(tmp_path / "state"),
                "pi": {"use_settings": False},
            }
        ),
        "utf-8",
    )
    return path


def _compact(config: Path, path: Path, *args: str) -> dict[str, Any]:
    done = compactd("compact", str(path), "--force", "--json", "--config", str(config), *args)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["committed"], result
    return result


def _figure(config: Path, path: Path) -> int:
    done = compactd("inspect", str(path), "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["context_tokens"])


def _sans_timestamp(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k != "timestamp"}


@pytest.mark.parametrize("mode", ["rotate", "append"])
def test_a_compaction_keeps_pi_1s_prompt_tools_and_figure(tmp_path: Path, mode: str) -> None:
    path = _session(tmp_path)
    config = _config(tmp_path, 200_000)
    before = pi_load(path, version=PI_1)
    assert before["messages"][0]["role"] == "user" and before["tools"] == ["read", "bash"]
    result = _compact(config, path, "--mode", mode)
    assert result["route"] == "compact_only"
    after = pi_load(path, version=PI_1)
    roles = [m["role"] for m in after["messages"]]
    assert roles[:2] == ["system", "compactionSummary"], roles
    assert roles.count("system") == 1  # one prompt, not a re-declared one
    # The same prompt and tools; the checkpoint's timestamp is the compaction's, as pi stamps its own.
    assert _sans_timestamp(after["system_prompt"]) == _sans_timestamp(before["system_prompt"])
    assert after["tools"] == before["tools"]
    # The kept turns, verbatim, as pi showed them before.
    kept = [m for m in after["messages"][2:] if m["role"] != "custom"]
    assert kept == before["messages"][-len(kept) :]
    # pi's own figure after the commit is the one compactd reports, and it is the compaction's "after".
    assert after["projected_estimate"]["tokens"] == _figure(config, path)
    assert after["projected_estimate"]["tokens"] == result["fill"]["after_tokens"]
    assert after["projected_estimate"]["tokens"] < before["projected_estimate"]["tokens"]


def test_a_pruning_appends_context_edits_and_rewrites_nothing(tmp_path: Path) -> None:
    path = _session(tmp_path)
    original = path.read_bytes()
    config = _config(tmp_path, 60_000)
    assert json.loads(compactd("inspect", str(path), "--json", "--config", str(config)).stdout)["route"] == (
        "truncate_tool_results_only"
    )
    result = _compact(config, path)
    assert result["route"] == "truncate_tool_results_only" and result["pruned_results"] > 0
    data = path.read_bytes()
    assert data.startswith(original)  # not one byte of the history rewritten
    added = [json.loads(line) for line in data[len(original) :].splitlines()]
    assert {e["type"] for e in added} == {"context_edit"} and len(added) == result["pruned_results"]
    assert not list(path.parent.glob("*.bak.*")) and result["archive"] is None
    after = pi_load(path, version=PI_1)
    cut = [
        m
        for m in after["messages"]
        if m["role"] == "toolResult" and "more characters truncated" in json.dumps(m)
    ]
    assert len(cut) == result["pruned_results"]
    assert after["projected_estimate"]["tokens"] == _figure(config, path)
    assert after["projected_estimate"]["tokens"] == result["fill"]["after_tokens"]


def test_compactds_figure_is_pi_1s_with_images_edits_and_usage_records(tmp_path: Path) -> None:
    path = _session(tmp_path, image=True)
    loaded = pi_load(path, version=PI_1)
    assert _figure(_config(tmp_path, 200_000), path) == loaded["projected_estimate"]["tokens"]


def test_a_pi_0_73_session_keeps_its_shape(tmp_path: Path) -> None:
    path = _session(tmp_path, system_messages=False, version="0.73.1")
    config = _config(tmp_path, 200_000)
    _compact(config, path)
    lines = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    assert not any(e.get("type") == "context_edit" or "systemMessage" in e for e in lines)
    assert lines[1]["type"] == "compaction" and lines[1]["parentId"] is None
    assert pi_load(path)["messages"][0]["role"] == "compactionSummary"
