"""A list or an object where a transcript should hold a string (an entry's type, a message's role, a block's
type or id, a call id) is JSON that pi's loader reads as any other line: compactd must read, inspect, plan and
compact such a session, and prepare its messages, without raising. Membership tests against sets raised ``TypeError: unhashable type``
(found by issue 22's inspect work: an assistant block whose ``type`` was a list stopped ``inspect`` and
``compact`` with a critical error)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from compactd.core.context import build_context
from compactd.core.reader import parse_transcript
from compactd.sources.files.preparer import _shown
from compactd.summarize.prepared import prepare

from bench.corpus import generate_session
from tests.support.cli import in_process, isolated
from tests.test_differential import REAL_DIR

KEYS = ("type", "role", "id", "toolCallId", "parentId", "name", "stopReason", "customType")
VALUES: list[Any] = [["toolCall"], {"a": 1}]
_FIXTURE = "pi-before-compaction.v1.jsonl"
# A generated session (CI has no real fixtures) and, where they are, a real one.
BASES = ["generated", _FIXTURE]


def _set_everywhere(value: Any, key: str, new: Any) -> None:
    """``key`` set to ``new`` in every object of ``value`` that has it."""
    if isinstance(value, dict):
        if key in value:
            value[key] = new
        for child in value.values():
            _set_everywhere(child, key, new)
    elif isinstance(value, list):
        for child in value:
            _set_everywhere(child, key, new)


def _mutant(tmp_path: Path, base: str, key: str, new: Any) -> Path:
    """The session with ``key`` made ``new`` in the first line of each role and of each other entry type (but
    the header and the branch's first entries, so that most of it stays a session)."""
    if base == "generated":
        generate_session(tmp_path / "base.jsonl", 200_000, seed=5)
        lines = (tmp_path / "base.jsonl").read_bytes().splitlines()
    elif (REAL_DIR / base).is_file():
        lines = (REAL_DIR / base).read_bytes().splitlines()
    else:
        pytest.skip(f"{REAL_DIR / base} is not here")
    entries = [orjson.loads(line) for line in lines if line.strip()]
    seen: set[str] = set()
    for entry in entries[3:]:
        message = entry.get("message")
        kind = message.get("role") if isinstance(message, dict) else entry.get("type")
        if isinstance(kind, str) and kind not in seen:
            seen.add(kind)
            _set_everywhere(entry, key, new)
    path = tmp_path / f"{key}.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in entries) + b"\n")
    return path


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolated(tmp_path, monkeypatch)


@pytest.mark.parametrize("new", VALUES, ids=["list", "object"])
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("base", BASES)
def test_a_list_or_object_for_a_string_is_read_inspected_and_compacted_without_raising(
    base: str, key: str, new: Any, tmp_path: Path, cli_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    path = _mutant(tmp_path, base, key, new)
    data = path.read_bytes()
    for lean in (False, True):
        transcript = parse_transcript(data, lean=lean)
        if transcript.usable:
            build_context(transcript)
    memo: dict[str, Any] = {}
    for line in data.splitlines()[1:]:  # what the daemon's preparer makes of each appended message
        shown = _shown(orjson.loads(line))
        if shown is not None:
            prepare(shown, memo)
    caplog.set_level(logging.CRITICAL)
    code, text = in_process("validate", str(path))
    assert code in (0, 1, 2) and text
    code, text = in_process("inspect", str(path), "--json")
    assert code == 0, text
    json.loads(text)
    code, text = in_process("compact", str(path), "--dry-run", "--json")
    assert code in (0, 1) and json.loads(text)
    code, text = in_process(
        "compact", str(path), "--force", "--json"
    )  # the model-free digest, committed or refused
    assert code in (0, 1) and json.loads(text)
    assert not [r for r in caplog.records if r.levelno >= logging.CRITICAL], [
        r.getMessage() for r in caplog.records
    ]
