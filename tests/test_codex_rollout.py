"""Codex rollouts without Codex: the figures, the history Codex rebuilds, the pi view the engine reads, the
``compacted`` line, reading (appended bytes, ``.zst``), the writer lock and the hook's refusals (design.md §6.16).
The lines are shaped as Codex 0.169.0 writes them (``tests/test_codex_agent.py`` runs the real one)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
from pathlib import Path
from typing import Any

import pytest
import zstandard
from compactd.config import Config
from compactd.sources.codex._bridge import SUMMARY_LEAD, compacted_line, kept_items, to_transcript_bytes
from compactd.sources.codex._compact import append_compacted, plan_compaction, read_rollout
from compactd.sources.codex._files import Cursor, ThreadBusy, find_rollouts, read_new, thread_lock
from compactd.sources.codex._hook import COMPACT_PROMPT, HookRefused, precompact
from compactd.sources.codex._rollout import RolloutFigures, history_of, is_context_message, parse_rollout_line
from compactd.summarize.engine import CompactionEngine
from compactd.summarize.headings import REQUIRED_HEADINGS
from compactd.summarize.settings import engine_settings

THREAD = "01a23792-d749-73d1-a265-25def324896c"
Json = dict[str, Any]


def line(kind: str, payload: Json, ordinal: int) -> Json:
    return {"timestamp": "2026-12-02T16:25:00.000Z", "ordinal": ordinal, "type": kind, "payload": payload}


def message(role: str, text: str) -> Json:
    block = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": block, "text": text}]}


def token_count(total: int, window: int = 17_100) -> Json:
    usage = {"input_tokens": total - 6, "cached_input_tokens": 0, "output_tokens": 6, "total_tokens": total}
    info = {"total_token_usage": usage, "last_token_usage": usage, "model_context_window": window}
    return {"type": "token_count", "info": info}


def turn(turn_id: str, ask: str, answer: str, total: int) -> list[tuple[str, Json]]:
    return [
        ("event_msg", {"type": "task_started", "turn_id": turn_id}),
        ("turn_context", {"turn_id": turn_id, "model": "stub-model", "cwd": "/work"}),
        (
            "response_item",
            message("user", "<environment_context>\n  <cwd>/work</cwd>\n</environment_context>"),
        ),
        ("response_item", message("user", ask)),
        (
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "arguments": '{"command":["ls"]}',
                "call_id": f"c{turn_id}",
            },
        ),
        ("response_item", {"type": "function_call_output", "call_id": f"c{turn_id}", "output": "notes.txt"}),
        ("response_item", message("assistant", answer)),
        ("event_msg", token_count(total)),
        ("event_msg", {"type": "task_complete", "turn_id": turn_id}),
    ]


def rollout_lines(turns: int = 3) -> list[Json]:
    pairs: list[tuple[str, Json]] = [
        ("session_meta", {"id": THREAD, "cwd": "/work", "cli_version": "0.169.0", "model_provider": "stub"}),
        ("response_item", message("developer", "You are a coding agent.")),
    ]
    for n in range(1, turns + 1):
        pairs += turn(
            f"t{n}", f"Turn {n}: reconcile shard {n} under TICKET-{4700 + n}.", f"Shard {n} done.", 1000 * n
        )
    return [line(kind, payload, i) for i, (kind, payload) in enumerate(pairs)]


def write_rollout(home: Path, lines: list[Json]) -> Path:
    folder = home / "sessions" / "2026" / "12" / "02"
    folder.mkdir(parents=True, exist_ok=True)
    (home / "thread-writer-locks").mkdir(exist_ok=True)
    path = folder / f"rollout-2026-12-02T16-24-59-{THREAD}.jsonl"
    path.write_bytes(b"".join(json.dumps(x).encode() + b"\n" for x in lines))
    return path


def figures_of(lines: list[Json]) -> RolloutFigures:
    figures = RolloutFigures()
    for x in lines:
        figures.apply(x)
    return figures


def test_the_figure_is_codex_own_last_total_and_its_window() -> None:
    figures = figures_of(rollout_lines())
    assert (figures.session_id, figures.tokens, figures.window, figures.figure) == (
        THREAD,
        3000,
        17_100,
        3000,
    )
    assert figures.turn_open is None and figures.next_ordinal == len(rollout_lines())


def test_a_turn_started_and_not_ended_is_open() -> None:
    lines = rollout_lines()[:-1]  # no task_complete for the last turn
    assert figures_of(lines).turn_open == "t3"


def test_after_a_compaction_the_figure_is_estimated_until_codex_counts_again() -> None:
    lines = rollout_lines()
    history_tokens = -(
        -sum(
            len(json.dumps(x["payload"], separators=(",", ":")))
            for x in lines
            if x["type"] == "response_item"
        )
        // 4
    )
    overhead = 3000 - history_tokens  # what Codex's figure held beyond the history: instructions, tools
    kept = [message("user", "summary"), message("user", "Turn 3")]
    lines.append(line("compacted", {"message": "", "replacement_history": kept}, len(lines)))
    figures = figures_of(lines)
    kept_tokens = -(-sum(len(json.dumps(k, separators=(",", ":"))) for k in kept) // 4)
    assert figures.tokens is None and figures.figure == overhead + kept_tokens
    lines.append(line("event_msg", token_count(1234), len(lines)))
    assert figures_of(lines).figure == 1234


def test_history_is_the_newest_replacement_then_later_items() -> None:
    lines = rollout_lines()
    replacement = [message("user", "summary of 1-3")]
    lines.append(line("compacted", {"message": "x", "replacement_history": replacement}, len(lines)))
    lines.append(line("response_item", message("user", "after"), len(lines)))
    history, refusal = history_of(lines)
    assert refusal is None and history == [*replacement, message("user", "after")]


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("event_msg", {"type": "thread_rolled_back", "num_turns": 1}),
        ("compacted", {"message": "legacy summary"}),
    ],
)
def test_what_compactd_would_have_to_replay_is_refused(kind: str, payload: Json) -> None:
    lines = rollout_lines()
    lines.append(line(kind, payload, len(lines)))
    assert history_of(lines)[1] is not None


def test_torn_and_foreign_lines_are_not_lines() -> None:
    assert parse_rollout_line(b'{"type":"response_item","payload":{"ty') is None
    assert parse_rollout_line(b"[1,2]") is None
    assert parse_rollout_line(b'{"type":"x","payload":[]}') is None


def test_the_engine_sees_the_conversation_and_not_codex_context() -> None:
    history, _ = history_of(rollout_lines())
    bridged = to_transcript_bytes(
        history, session_id=THREAD, cwd="/work", model="m", started="2026-12-02T16:25:00.000Z"
    )
    text = bridged.data.decode()
    assert "Turn 1: reconcile" in text and '"toolResult"' in text and '"toolCall"' in text
    assert "environment_context" not in text and "You are a coding agent" not in text
    assert all(not is_context_message(history[i]) for i in bridged.index_of.values())


def test_kept_items_leave_out_the_context_codex_reinjects() -> None:
    history, _ = history_of(rollout_lines())
    kept = kept_items(history, 0)
    assert kept and not any(is_context_message(item) for item in kept)


def test_the_compacted_line_continues_the_ordinals_and_leads_with_the_summary() -> None:
    raw = compacted_line("## Decisions\n- x", [message("user", "Turn 3")], ordinal=29)
    value = json.loads(raw)
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    assert value["ordinal"] == 29 and value["type"] == "compacted"
    head, kept = value["payload"]["replacement_history"]
    assert head["role"] == "user" and head["content"][0]["text"] == SUMMARY_LEAD + "## Decisions\n- x"
    assert kept == message("user", "Turn 3")


def test_a_compaction_appends_one_line_and_keeps_every_byte(tmp_path: Path) -> None:
    path = write_rollout(tmp_path, rollout_lines())
    before = path.read_bytes()
    reading = read_rollout(str(path))
    settings = engine_settings(Config.defaults())
    settings.keep_recent_turns, settings.keep_budget_tokens = 1, 1  # whole turns, as the source sizes them
    planned = asyncio.run(plan_compaction(reading, CompactionEngine(settings), workspace=None))
    assert planned is not None
    append_compacted(str(tmp_path), reading, planned.line)
    after = path.read_bytes()
    assert after == before + planned.line
    history, refusal = history_of([json.loads(x) for x in after.splitlines()])
    assert refusal is None
    texts = [
        b["text"] for item in history for b in item.get("content", []) if isinstance(b, dict) and "text" in b
    ]
    assert "TICKET-4701" in texts[0] and all(h in texts[0] for h in REQUIRED_HEADINGS)
    assert "Turn 3: reconcile shard 3 under TICKET-4703." in texts
    assert not any(t.startswith("Turn 1:") for t in texts)


def test_a_rollout_changed_since_it_was_read_is_not_written(tmp_path: Path) -> None:
    path = write_rollout(tmp_path, rollout_lines())
    reading = read_rollout(str(path))
    with open(path, "ab") as handle:
        handle.write(
            json.dumps(line("event_msg", {"type": "task_started", "turn_id": "t9"}, 99)).encode() + b"\n"
        )
    before = path.read_bytes()
    with pytest.raises(ThreadBusy, match="changed"):
        append_compacted(str(tmp_path), reading, compacted_line("s", [], ordinal=100))
    assert path.read_bytes() == before


def test_codex_holding_its_writer_lock_keeps_compactd_out(tmp_path: Path) -> None:
    write_rollout(tmp_path, rollout_lines())
    lock = tmp_path / "thread-writer-locks" / f"{THREAD}.lock"
    with open(lock, "a+b") as held:  # another open file description, as Codex's process holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ThreadBusy, match="holds"), thread_lock(str(tmp_path), THREAD):
            pass
    with thread_lock(str(tmp_path), THREAD):
        pass


def test_without_codex_lock_directory_compactd_cannot_tell_and_does_not_write(tmp_path: Path) -> None:
    path = write_rollout(tmp_path, rollout_lines())
    (tmp_path / "thread-writer-locks").rmdir()
    reading = read_rollout(str(path))
    with pytest.raises(ThreadBusy, match="cannot tell"):
        append_compacted(str(tmp_path), reading, compacted_line("s", [], ordinal=1))


def test_appended_bytes_are_read_once_and_a_torn_line_waits(tmp_path: Path) -> None:
    path = write_rollout(tmp_path, rollout_lines(1))
    cursor = Cursor()
    first, fresh = read_new(str(path), cursor)
    assert fresh and len(first) == len(rollout_lines(1))
    extra = json.dumps(line("event_msg", token_count(77), 50)).encode()
    with open(path, "ab") as handle:
        handle.write(extra[:10])
    assert read_new(str(path), cursor) == ([], False)
    with open(path, "ab") as handle:
        handle.write(extra[10:] + b"\n")
    assert read_new(str(path), cursor) == ([extra], False)


def test_a_compressed_rollout_is_read_and_never_written(tmp_path: Path) -> None:
    plain = write_rollout(tmp_path, rollout_lines())
    packed = Path(str(plain) + ".zst")
    packed.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    plain.unlink()
    assert find_rollouts(str(tmp_path)) == [str(packed)]
    reading = read_rollout(str(packed))
    assert reading.figures.figure == 3000
    before = packed.read_bytes()
    with pytest.raises(ThreadBusy, match="compressed"):
        append_compacted(str(tmp_path), reading, compacted_line("s", [], ordinal=1))
    assert packed.read_bytes() == before


def test_a_symlinked_rollout_is_not_discovered(tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("{}\n")
    folder = tmp_path / "sessions" / "2026"
    folder.mkdir(parents=True)
    os.symlink(outside, folder / f"rollout-2026-12-02T16-24-59-{THREAD}.jsonl")
    assert find_rollouts(str(tmp_path)) == []


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b'{"hook_event_name": "PreCompact"}',
        b'{"hook_event_name": "PreCompact", "transcript_path": "/etc/passwd"}',
        b'{"hook_event_name": "PreToolUse", "transcript_path": "/x"}',
    ],
)
def test_the_hook_refuses_what_names_no_rollout_of_codex_home(tmp_path: Path, payload: bytes) -> None:
    with pytest.raises(HookRefused):
        asyncio.run(precompact(Config.defaults(), {"CODEX_HOME": str(tmp_path)}, payload))


def test_the_hook_refuses_a_symlink_into_codex_home(tmp_path: Path) -> None:
    path = write_rollout(tmp_path / "home", rollout_lines())
    link = tmp_path / "home" / "sessions" / f"rollout-2026-12-02T16-24-59-{THREAD}.jsonl"
    os.symlink(path, link)
    payload = json.dumps(
        {"hook_event_name": "PreCompact", "session_id": THREAD, "transcript_path": str(link)}
    )
    with pytest.raises(HookRefused, match="symlinks"):
        asyncio.run(precompact(Config.defaults(), {"CODEX_HOME": str(tmp_path / "home")}, payload.encode()))


def test_the_compact_prompt_asks_for_compactd_headings() -> None:
    assert all(heading in COMPACT_PROMPT for heading in REQUIRED_HEADINGS)


def test_only_the_newest_rollout_of_a_thread_may_be_compacted(tmp_path: Path) -> None:
    from compactd.sources.codex import CodexSource

    first = write_rollout(tmp_path, rollout_lines())
    later = first.with_name(first.name.replace(".jsonl", "_1.jsonl"))
    later.write_bytes(first.read_bytes())
    source = CodexSource(Config.defaults(), {"CODEX_HOME": str(tmp_path)})
    source.refresh_all()
    assert set(source.sessions) == {str(first), str(later)}
    assert source.superseded == {str(first)}
    assert source.sessions[str(first)].state.tokens == 3000  # still followed for status


def test_the_fill_recorded_is_the_figure_decided_on_when_a_watcher_reads_the_append_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watcher's refresh may read compactd's own appended line before the job records its outcome (the CI
    run that found this saw the figure after the compaction as "before"); the row keeps the figure decided on."""
    from compactd.sources.codex import CodexSource, _compact

    lines = rollout_lines()
    for x in lines:  # turns of about 4,000 tokens each, so whole turns lie before the cut
        if x["payload"].get("role") == "user" and x["payload"]["content"][0]["text"].startswith("Turn"):
            x["payload"]["content"][0]["text"] += " The reconciliation log repeats." * 500
    lines[-2]["payload"] = token_count(14_000)  # over 17,100 − 4,275 = 12,825
    path = str(write_rollout(tmp_path, lines))
    source = CodexSource(Config.defaults(), {"CODEX_HOME": str(tmp_path)})
    source.refresh_all()
    session = source.sessions[path]
    assert session.due and session.state.planning_tokens == 14_000
    real_append = _compact.append_compacted

    def append_then_watcher_refresh(*args: Any) -> int:
        size = real_append(*args)
        source.refresh(path)  # the watcher's thread, winning the race to the new line
        return size

    monkeypatch.setattr(_compact, "append_compacted", append_then_watcher_refresh)
    outcome = asyncio.run(source.act(session))
    assert outcome.committed, outcome
    assert session.state.planning_tokens < 14_000  # the estimate after the compaction
    fill = session.state.last_fill()
    assert fill is not None and fill["before"] == 14_000 and fill["after"] == session.state.planning_tokens
