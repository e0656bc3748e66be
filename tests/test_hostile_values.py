"""Every field compactd reads, given each wrong-typed value pi's loader accepts (it keeps any line that is a JSON
object): reading, the context, the ledger's cold read and appends, the preparer, ``inspect``, ``validate`` and
``compact`` (dry run, and the model-free digest committed in both modes) must refuse or go on, never raise.

A generated session (CI has no real fixtures) with every entry type pi 0.73 and pi 1.x write is mutated one
entry and one key at a time (in-process checks), or one key in every entry at once (the CLI, slower per run).
Found this way: a label whose ``targetId`` is a list or an object stopped a rotation (``successor``), and a
system message's tool whose ``name`` is one stopped pi 1.x's estimate (``current_system_message``); in a Codex
rollout, a message whose ``content`` is a number or true, and a payload nested past orjson's writing limit.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from compactd.core.context import build_context, context_estimate
from compactd.core.ledger import SessionLedger, _cold_read
from compactd.core.messages import current_system_message
from compactd.core.reader import parse_transcript
from compactd.sources.files.preparer import _shown
from compactd.summarize.prepared import prepare

from bench.corpus import session_bytes
from tests.support.cli import in_process, isolated

Json = dict[str, Any]


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


VALUES: dict[str, Any] = {
    "list": ["toolCall"],
    "object": {"a": 1},
    "number": 7,
    "huge_float": 1e308,
    "minus_zero": -0.0,
    "huge_int": 10**30,
    "true": True,
    "null": None,
    "string": "x",  # where an object or a list belongs
    "long_string": "y" * 100_000,
    "deep": _nested(300),  # orjson reads 1,024 levels of nesting but writes only 254
}
# The fields compactd reads from entries, messages and blocks: the base session must hold each of them.
# fmt: off
FIELDS = [
    # entries
    "type", "id", "parentId", "timestamp", "summary", "firstKeptEntryId", "fromId", "targetId", "replacement",
    "customType", "content", "display", "details", "data", "provider", "modelId", "thinkingLevel", "label",
    "systemMessage", "tokensBefore", "fromHook", "message",
    # messages
    "role", "api", "model", "usage", "input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost",
    "stopReason", "errorMessage", "toolCallId", "toolName", "isError", "status", "exitCode", "command",
    "excludeFromContext", "sections", "toolsAdded", "toolsRemoved",
    # blocks
    "text", "thinking", "name", "arguments", "mimeType",
]
# fmt: on


def _session(pi1: bool) -> list[Json]:
    """A small generated session, then one entry of each kind pi writes (pi 1.x's too when ``pi1``)."""
    data, _ = session_bytes(20_000, 5)
    entries: list[Json] = [json.loads(line) for line in data.splitlines() if line.strip()]
    first, middle = entries[3]["id"], entries[len(entries) // 2]["id"]

    def add(entry: Json) -> str:
        n = len(entries)
        entry_id = f"x{n:04d}"
        entries.append(
            {"type": entry.pop("type"), "id": entry_id, "parentId": entries[-1]["id"],
             "timestamp": f"2026-11-01T00:{n % 60:02d}:00.000Z", **entry}
        )  # fmt: skip
        return entry_id

    def message(body: Json) -> str:
        return add({"type": "message", "message": body})

    usage = {"input": 3, "output": 41, "cacheRead": 10, "cacheWrite": 5, "totalTokens": 59,
             "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0, "cacheWrite": 0, "total": 0.3}}  # fmt: skip
    if pi1:
        message({"role": "system", "content": "You are pi.", "sections": {"a": "A"},
                 "toolsAdded": [{"name": "bash"}, {"name": "read"}], "timestamp": 5})  # fmt: skip
    checkpoint = (
        {
            "systemMessage": {
                "role": "system",
                "content": "cp",
                "toolsAdded": [{"name": "bash"}],
                "timestamp": 6,
            }
        }
        if pi1
        else {}
    )
    add({"type": "compaction", "summary": "## Goal\nstuff", "firstKeptEntryId": middle, "tokensBefore": 1000,
         "details": {"readFiles": ["a"], "modifiedFiles": ["b"]}, "fromHook": False, **checkpoint})  # fmt: skip
    add({"type": "branch_summary", "fromId": middle, "summary": "Tried A", "details": {"readFiles": []},
         "fromHook": False})  # fmt: skip
    add({"type": "custom", "customType": "openclaw.cache-ttl", "data": {"provider": "p", "modelId": "m"}})
    add({"type": "custom_message", "customType": "ext", "content": "Reminder", "display": False,
         "details": {"src": "x"}})  # fmt: skip
    add({"type": "custom_message", "customType": "ext", "display": True,
         "content": [{"type": "text", "text": "hi"}, {"type": "image", "data": "QUJD", "mimeType": "image/png"}]})  # fmt: skip
    add({"type": "label", "targetId": first, "label": "cp-1"})
    add({"type": "session_info", "name": "named"})
    add({"type": "model_change", "provider": "anthropic", "modelId": "claude"})
    add({"type": "thinking_level_change", "thinkingLevel": "high"})
    asked = message({"role": "user", "timestamp": 1772356510001, "content": [
        {"type": "text", "text": "look"}, {"type": "image", "data": "QUJD", "mimeType": "image/png"}]})  # fmt: skip
    message({"role": "assistant", "api": "anthropic-messages", "provider": "anthropic", "model": "claude",
             "usage": usage, "stopReason": "toolUse", "timestamp": 1772356512044, "content": [
                 {"type": "thinking", "thinking": "hmm", "thinkingSignature": "s"}, {"type": "text", "text": "ok"},
                 {"type": "toolCall", "id": "c9", "name": "bash", "arguments": {"command": "ls"}}]})  # fmt: skip
    result = message({"role": "toolResult", "toolCallId": "c9", "toolName": "bash", "isError": True,
                      "content": [{"type": "text", "text": "out\n" * 50}],
                      "details": {"status": "done", "exitCode": 1}, "timestamp": 1772356512310})  # fmt: skip
    message({"role": "bashExecution", "command": "ls", "output": "a\nb", "exitCode": 0, "cancelled": False,
             "truncated": False, "excludeFromContext": False, "timestamp": 1772356512400})  # fmt: skip
    note = message({"role": "custom", "customType": "ext", "content": "note", "display": True,
                    "details": {"k": 1}, "timestamp": 1772356512500})  # fmt: skip
    message({"role": "assistant", "content": [], "provider": "anthropic", "model": "claude", "usage": usage,
             "stopReason": "error", "errorMessage": "overloaded", "timestamp": 1772356512600})  # fmt: skip
    if pi1:
        add({"type": "context_edit", "targetId": result, "replacement": {"content": [{"type": "text", "text": "[cut]"}]}})  # fmt: skip
        add({"type": "context_edit", "targetId": asked, "replacement": None})
        message({"role": "system", "content": "", "sections": {"a": None}, "toolsRemoved": [{"name": "bash"}],
                 "timestamp": 7})  # fmt: skip
    message({"role": "user", "content": "go on", "timestamp": 1772356513000})
    message({"role": "assistant", "content": [{"type": "text", "text": "done"}], "provider": "anthropic",
             "model": "claude", "usage": {"input": 100, "output": 10, "totalTokens": 110}, "stopReason": "stop",
             "timestamp": 1772356514000})  # fmt: skip
    if pi1:  # an edit after the last usage: the estimate replays the system messages (current_system_message)
        add({"type": "context_edit", "targetId": note, "replacement": {"content": "edited"}})
    return entries


def _keys(value: Any, out: set[str]) -> set[str]:
    if isinstance(value, dict):
        out.update(value)
        for child in value.values():
            _keys(child, out)
    elif isinstance(value, list):
        for child in value:
            _keys(child, out)
    return out


def _set_everywhere(value: Any, key: str, new: Any) -> None:
    if isinstance(value, dict):
        if key in value:
            value[key] = new
        for child in value.values():
            if child is not new:  # not into the value set (an object whose key is ``key``)
                _set_everywhere(child, key, new)
    elif isinstance(value, list):
        for child in value:
            _set_everywhere(child, key, new)


def _dump(entries: list[Json]) -> bytes:
    return b"".join(
        json.dumps(e).encode() + b"\n" for e in entries
    )  # json: 10**30 and 1e308 as pi reads them


def _check_in_process(data: bytes, appended_from: int) -> None:
    """What the daemon makes of the file: readings, context and estimate, the ledger (its cold read with no
    fallback, and the lines from ``appended_from`` on applied to the ledger of those before), the preparer's
    share of the line at ``appended_from``."""
    for lean in (False, True):
        transcript = parse_transcript(data, lean=lean)
        if transcript.usable:
            context = build_context(transcript)
            context_estimate(context)
            SessionLedger.from_transcript(transcript, context=context).figures()
    _cold_read(data, None).figures()
    lines = data.splitlines(keepends=True)
    ledger = SessionLedger.from_bytes(b"".join(lines[:appended_from]))
    ledger.apply(json.loads(line) for line in lines[appended_from:])
    ledger.figures()
    shown = _shown(json.loads(lines[appended_from]))  # the only line that differs from the base session's
    if shown is not None:
        prepare(shown, {})


@pytest.mark.parametrize("pi1", [False, True], ids=["pi0.73", "pi1"])
def test_the_session_holds_every_field_compactd_reads(pi1: bool) -> None:
    """Else the fuzz below would not try a field compactd reads."""
    keys = _keys(_session(pi1), set())
    missing = {"replacement", "systemMessage", "sections", "toolsAdded", "toolsRemoved"} if not pi1 else set()
    assert set(FIELDS) - missing <= keys, set(FIELDS) - missing - keys
    data = _dump(_session(pi1))
    for at in range(1, len(data.splitlines())):
        _check_in_process(data, at)


@pytest.mark.parametrize("value", list(VALUES), ids=list(VALUES))
@pytest.mark.parametrize("pi1", [False, True], ids=["pi0.73", "pi1"])
def test_each_field_of_each_entry_with_a_wrong_type_is_read_without_raising(pi1: bool, value: str) -> None:
    base = _session(pi1)
    for at in range(1, len(base)):
        for key in sorted(_keys(base[at], set())):
            entries = copy.deepcopy(base)
            _set_everywhere(entries[at], key, VALUES[value])
            try:
                _check_in_process(_dump(entries), at)
            except Exception as exc:  # name the case: the parametrization alone does not
                raise AssertionError(f"entry {at} ({base[at].get('type')}) {key}={value!s}: {exc!r}") from exc


def test_a_tool_named_by_a_list_or_an_object_is_keyed_by_identity_as_a_javascript_map_does() -> None:
    added = [{"name": ["x"]}, {"name": {"a": 1}}, {"name": "bash"}]
    removed = [{"name": ["x"]}, {"name": "bash"}]  # an equal list is another object: it removes nothing
    merged = current_system_message(
        [
            {"role": "system", "content": "p", "toolsAdded": added, "timestamp": 1},
            {"role": "system", "content": "", "toolsRemoved": removed, "timestamp": 2},
        ]
    )
    assert merged is not None and merged["toolsAdded"] == added[:2]


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state directory of its own, no user config, and one that keeps a single turn: the digest is built."""
    isolated(tmp_path, monkeypatch)
    config = tmp_path / "config.yaml"
    config.write_text("compaction:\n  keep_recent_turns: 1\n  keep_recent_tokens: 200\n")
    return config


# The keys a rotation's successor re-links by: worth its grace period (the other keys commit by append).
_LINKS = ("id", "parentId", "targetId", "firstKeptEntryId", "fromId")
CLI_FIELDS = sorted(set(FIELDS) | {"type"})


@pytest.mark.parametrize("value", ["list", "object", "string"])
@pytest.mark.parametrize("pi1", [False, True], ids=["pi0.73", "pi1"])
def test_the_cli_inspects_validates_and_compacts_each_wrong_typed_field(
    pi1: bool, value: str, tmp_path: Path, cli_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    base = _session(pi1)
    config = str(cli_env)
    path = tmp_path / "s.jsonl"
    for key in CLI_FIELDS:
        entries = copy.deepcopy(base)
        for entry in entries[3:]:  # the header and the branch's first entries stay a session
            _set_everywhere(entry, key, VALUES[value])
        data = _dump(entries)
        modes = ["append", "rotate"] if key in _LINKS and value in ("list", "object") else ["append"]
        runs = [("validate",), ("inspect", "--json", "--config", config)]
        runs += [("compact", "--dry-run", "--json", "--config", config)]
        runs += [("compact", "--force", "--json", "--mode", mode, "--config", config) for mode in modes]
        for args in runs:
            path.write_bytes(data)
            code, text = in_process(args[0], str(path), *args[1:])
            case = f"{key}={value} {' '.join(args[:3])}: {code} {text[:300]}"
            if args[0] == "validate":
                assert code in (0, 1, 2) and text, case
            elif args[0] == "inspect":
                assert code == 0 and json.loads(text), case
            else:  # committed, refused, or nothing to do
                assert code in (0, 1, 4) and json.loads(text), case
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR], (
                case,
                [r.getMessage()[:500] for r in caplog.records],
            )


CODEX_VALUES = {**VALUES, "deep_object": {"a": _nested(300)}}  # tool-call arguments are an object


@pytest.mark.parametrize("value", list(CODEX_VALUES), ids=list(CODEX_VALUES))
def test_each_field_of_a_codex_rollout_line_with_a_wrong_type_is_read_without_raising(
    value: str, tmp_path: Path
) -> None:
    """The figures the follower keeps, the history Codex rebuilds, its bridge to a transcript and the compacted
    line written back. Found: a message whose ``content`` was a number or true (``_bridge._text``), and an item
    nested past orjson's writing limit (``RolloutFigures.apply`` measures each payload's JSON; the bridge and
    the compacted line write them: such a rollout is now refused)."""
    from compactd.sources.codex._bridge import compacted_line, kept_items
    from compactd.sources.codex._compact import read_rollout
    from compactd.sources.codex._rollout import is_context_message

    from tests.test_codex_rollout import line, rollout_lines, write_rollout

    base = rollout_lines(2)
    replacement = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}]
    base.append(line("compacted", {"message": "m", "replacement_history": replacement}, len(base)))
    base.append(line("response_item", {"type": "message", "role": "user", "content": "# AGENTS.md x"}, 99))
    for at in range(len(base)):
        for key in sorted(_keys(base[at], set())):
            lines = copy.deepcopy(base)
            _set_everywhere(lines[at], key, CODEX_VALUES[value])
            try:
                reading = read_rollout(str(write_rollout(tmp_path, lines)))
                assert reading.figures.figure is None or reading.figures.figure >= 0
                for item in reading.history:
                    is_context_message(item)
                build_context(reading.transcript)
                if reading.refusal is None:
                    compacted_line("s", kept_items(reading.history, 0), ordinal=1)
            except Exception as exc:
                raise AssertionError(f"line {at} {key}={value}: {exc!r}") from exc
