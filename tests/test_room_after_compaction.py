"""Issue 18 item 3: a compaction leaves the agent room to work, and compactd waits for it to use that room.

Tried with the real pi CLI (threshold 12,000, three 12 KB reads in the last three turns), compaction left the
session at 9,970 tokens and the agent's next turn set off a second one. Now the kept tail is whole turns sized
to ``compaction.target_fill`` of the threshold (the newest turn always whole), older kept results give what the
summary adds, and a session just compacted is not compacted again before the agent has appended the room left.
The cut sizing is pure; the job runs on real files; the decision is pure.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import anyio
from compactd.config import Config
from compactd.core.context import build_context
from compactd.core.decision import Figures, Recorded, decide
from compactd.core.tokens import estimate_tokens
from compactd.reading import read_transcript
from compactd.sources.files.job import compact_file
from compactd.state import SessionState
from compactd.summarize.cutpoint import plan_cut

from tests.test_budget import write_session

ENV = {"HOME": "/home/tester"}
WINDOW = 32_000  # reserve 20,000: threshold 12,000 with the margin (10,000 raw); 60 %: 7,200 (6,000 raw)
THRESHOLD = 12_000
NOW = 1_800_000_000.0
# Caps above the reads: truncation alone frees nothing, the route is a compaction (as with the real pi case).
COMPACT = {"tool_result_share": 0.5, "tool_result_max_chars": 64_000}


def config(tmp_path: Path, **compaction: Any) -> Config:
    return Config.from_mapping(
        {
            "models": {"providers": {"ollama": {"models": {"tiny": {"context_tokens": WINDOW}}}}},
            "memory_flush": {"enabled": False},
            "sessions": {"idle_seconds": 0},
            "compaction": compaction,
            "state_dir": str(tmp_path / "state"),
        },
        env=ENV,
    )


def read(n: int, chars: int) -> str:
    """A tool output of exactly ``chars`` characters that says which read it is on every line."""
    line = f"read {n:02d}: shard balanced, checksum {n * 7919 % 65521:05d}\n"
    return (line * (chars // len(line) + 1))[:chars]


def session(tmp_path: Path, reads: list[int]) -> Path:
    """A pi transcript: one turn per entry of ``reads``, each a prompt, a tool call, its output of that many
    characters (0: a plain answer) and an answer."""
    turns = [
        (f"step {n}: check the shards", read(n, chars) if chars else "") for n, chars in enumerate(reads)
    ]
    return write_session(tmp_path / "s.jsonl", turns)


def turn_tokens(path: list[dict[str, Any]], start: int, end: int) -> int:
    return sum(estimate_tokens(e["message"]) for e in path[start:end] if e.get("type") == "message")


def user_starts(path: list[dict[str, Any]]) -> list[int]:
    return [i for i, e in enumerate(path) if e.get("type") == "message" and e["message"]["role"] == "user"]


# --- the cut sizing (pure) ----------------------------------------------------------------------------------


def test_the_kept_tail_is_the_newest_whole_turns_that_fit_the_budget(tmp_path: Path) -> None:
    path = read_transcript(session(tmp_path, [12_000] * 6)).branch()
    users = user_starts(path)
    newest = turn_tokens(path, users[-1], len(path))
    budget = 2 * newest + newest // 2  # two turns fit, three do not
    plan = plan_cut(path, keep_recent_turns=3, keep_recent_tokens=20_000, keep_budget_tokens=budget)
    assert plan is not None
    assert plan.first_kept_index == users[-2] and not plan.is_split_turn  # whole turns
    assert plan.newest_turn_index == users[-1]
    kept = turn_tokens(path, plan.first_kept_index, len(path))
    assert kept <= budget < kept + turn_tokens(path, users[-3], users[-2])
    # keep_recent_turns and keep_recent_tokens still bound it.
    fewer = plan_cut(path, keep_recent_turns=1, keep_recent_tokens=20_000, keep_budget_tokens=budget)
    assert fewer is not None and fewer.first_kept_index == users[-1]
    capped = plan_cut(path, keep_recent_turns=3, keep_recent_tokens=newest, keep_budget_tokens=budget)
    assert capped is not None and capped.first_kept_index == users[-1]


def test_the_newest_turn_is_kept_whole_even_alone_over_the_budget(tmp_path: Path) -> None:
    path = read_transcript(session(tmp_path, [12_000] * 4)).branch()
    users = user_starts(path)
    plan = plan_cut(path, keep_recent_turns=3, keep_recent_tokens=20_000, keep_budget_tokens=500)
    assert plan is not None
    assert plan.first_kept_index == users[-1] and not plan.is_split_turn and not plan.turn_prefix
    assert sum(estimate_tokens(m) for m in plan.kept) == turn_tokens(path, users[-1], len(path)) > 500


# --- the job: the fill it leaves (real files, the digest as summary) ----------------------------------------


def compact(path: Path, cfg: Config) -> Any:
    result = anyio.run(lambda: compact_file(str(path), cfg, force=True, mode="rotate"))
    assert result.committed, result.reason
    return result


def results_after_compaction(path: Path) -> dict[str, str]:
    """toolCallId → text of the tool results the compacted session shows the model (pi's context)."""
    messages = build_context(read_transcript(path)).messages
    assert messages[0]["role"] == "compactionSummary"
    return {m["toolCallId"]: m["content"][0]["text"] for m in messages if m["role"] == "toolResult"}


def test_three_12kb_reads_in_the_last_turns_leave_the_session_at_most_60_percent(tmp_path: Path) -> None:
    """The observed session: compaction used to keep all three reads (about 95 % of the threshold)."""
    cfg = config(tmp_path, **COMPACT)
    path = session(tmp_path, [12_000, 0, 12_000, 12_000, 12_000])
    result = compact(path, cfg)
    fill = result.fill
    assert fill.threshold == THRESHOLD and fill.before > THRESHOLD
    assert fill.after <= 0.6 * THRESHOLD, fill.describe()
    assert results_after_compaction(path) == {"call4": read(4, 12_000)}  # the newest turn, whole


def test_the_summary_comes_out_of_the_older_kept_results_never_the_newest_turns(tmp_path: Path) -> None:
    """Two kept turns that fill the target by themselves: the summary pushes the session over it, so the older
    kept read is cut (head and tail, its full text in the archive) and the newest stays whole."""
    cfg = config(tmp_path, **COMPACT)
    path = session(tmp_path, [12_000, 12_000, 14_800, 8_600])
    result = compact(path, cfg)
    fill = result.fill
    assert fill.after <= 0.6 * THRESHOLD, fill.describe()
    assert result.route == "compact_then_truncate" and fill.pruned_results == 1
    kept = results_after_compaction(path)
    assert kept["call3"] == read(3, 8_600)
    assert len(kept["call2"]) < 14_800 and kept["call2"].startswith(read(2, 14_800)[:1_000])
    assert "more characters truncated" in kept["call2"]


def test_target_fill_one_keeps_what_the_threshold_allows(tmp_path: Path) -> None:
    """``target_fill: 1`` is the former behaviour: the kept turns fill the threshold."""
    path = session(tmp_path, [12_000, 0, 12_000, 12_000, 12_000])
    result = compact(path, config(tmp_path, target_fill=1.0, **COMPACT))
    assert result.fill.after > 0.6 * THRESHOLD
    assert sorted(results_after_compaction(path)) == ["call2", "call3", "call4"]


def test_truncation_alone_also_leaves_room_and_the_newest_read_whole(tmp_path: Path) -> None:
    """The per-result caps let truncation free the overflow: it used to stop 512 tokens under the threshold
    (96 %); now the older reads give down to the target and the newest stays whole."""
    path = session(tmp_path, [12_000, 0, 12_000, 12_000, 12_000])
    result = compact(path, config(tmp_path))
    assert result.route == "truncate_tool_results_only" and result.engine is None
    assert result.fill.after <= 0.6 * THRESHOLD, result.fill.describe()
    messages = build_context(read_transcript(path)).messages
    reads = {m["toolCallId"]: m["content"][0]["text"] for m in messages if m["role"] == "toolResult"}
    assert reads["call4"] == read(4, 12_000)
    assert all(len(reads[c]) < 12_000 for c in ("call0", "call2"))
    # One turn, nothing before it to summarize: truncation still brings it under its threshold.
    alone = write_session(tmp_path / "alone.jsonl", [("check the whole log", read(0, 60_000))])
    result = compact(alone, config(tmp_path))
    assert result.route == "truncate_tool_results_only"
    assert 0.6 * THRESHOLD < result.fill.after <= THRESHOLD, result.fill.describe()


# --- the decision (pure): room to work before the next compaction --------------------------------------------


def test_a_session_just_compacted_waits_until_it_has_grown_by_the_room_left(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    state = SessionState(path="s.jsonl")
    fill = {"threshold": THRESHOLD, "before": 14_000, "after": 7_000}
    state.mark_compacted(NOW, level="llm", route="compact_only", fill=fill, size=40_000)
    recorded = Recorded.of_state(SessionState.from_json("s.jsonl", state.to_json()))  # as restored
    assert recorded.compacted_size == 40_000 and recorded.room_tokens == 5_000
    over = math.ceil(THRESHOLD / 1.2) + 100  # over the threshold with the margin, under the window

    def decision(size: int, tokens: int = over) -> Any:
        return decide(cfg, Figures("ollama", "tiny", tokens, size=size, mtime=NOW - 60), recorded, now=NOW)

    held = decision(40_000 + 4 * 5_000 - 4)  # 4,999 tokens' worth appended
    assert held.route != "fits" and not held.compact and not held.due and held.held
    assert "5,000 tokens of room" in held.reason
    assert decision(40_000 + 4 * 5_000).compact  # the room used up
    assert decision(40_000, tokens=math.ceil(WINDOW / 1.2)).compact  # the hard limit: the window itself
    assert decision(10_000).compact  # a smaller file is another file
    assert decide(cfg, Figures("ollama", "tiny", over, size=40_000, mtime=NOW - 60), now=NOW).compact
    assert not decision(40_000, tokens=1_000).due  # fits: nothing held, nothing due
