"""Quiet is not idle: the ledger's mid-turn state, folded per appended entry, and the readiness rule built on it.

pi's agent loop is the reference: after a user message the model is called; an assistant message with tool
calls has its tools run and the model called again; the turn ends at an assistant message without tool calls,
or with stopReason error/aborted. Every case is checked three ways: appended one line at a time (the tracker's
incremental fold), the cold read of the bytes, and the full parse.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from compactd.config import Config
from compactd.core.decision import readiness
from compactd.core.ledger import SessionLedger
from compactd.core.reader import parse_transcript
from compactd.core.turns import Turn
from compactd.sources.files.tracker import SessionTracker
from hypothesis import given, settings
from hypothesis import strategies as st

Json = dict[str, Any]
T0 = 1_790_000_000_000  # ms


class Log:
    """A transcript built entry by entry, each a child of the previous one unless ``parent`` says otherwise."""

    def __init__(self) -> None:
        self.lines: list[Json] = [
            {"type": "session", "version": 3, "id": "sess-turns", "timestamp": "2026-09-21T00:00:00.000Z"}
        ]
        self.leaf: str | None = None
        self.n = 0
        self.ts: dict[str, float] = {}  # entry id -> its message's time in seconds

    def add(self, kind: str, parent: str | None = "leaf", **fields: Any) -> str:
        self.n += 1
        entry_id = f"e{self.n:03d}"
        entry = {
            "type": kind,
            "id": entry_id,
            "parentId": self.leaf if parent == "leaf" else parent,
            "timestamp": "2026-09-21T00:00:00.000Z",
            **fields,
        }
        self.lines.append(entry)
        self.leaf = entry_id
        return entry_id

    def message(self, message: Json, parent: str | None = "leaf") -> str:
        ms = T0 + (self.n + 1) * 1000
        entry_id = self.add("message", parent, message={**message, "timestamp": ms})
        self.ts[entry_id] = ms / 1000
        return entry_id

    def user(self, text: str = "do it", parent: str | None = "leaf") -> str:
        return self.message({"role": "user", "content": [{"type": "text", "text": text}]}, parent)

    def assistant(self, calls: int = 0, stop: str | None = None, text: str = "ok") -> str:
        blocks: list[Json] = [{"type": "text", "text": text}]
        blocks += [
            {"type": "toolCall", "id": f"call{self.n}_{i}", "name": "read", "arguments": {"path": f"/f{i}"}}
            for i in range(calls)
        ]
        return self.message(
            {
                "role": "assistant",
                "content": blocks,
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15},
                "stopReason": stop or ("toolUse" if calls else "stop"),
            }
        )

    def result(self, call_id: str = "call", text: str = "contents") -> str:
        return self.message(
            {
                "role": "toolResult",
                "toolCallId": call_id,
                "toolName": "read",
                "content": [{"type": "text", "text": text}],
                "isError": False,
            }
        )

    def bytes(self) -> bytes:
        return b"".join(json.dumps(line).encode() + b"\n" for line in self.lines)


def three_ways(tmp_path: Path, log: Log) -> list[Turn | None]:
    """The turn as the tracker folds it line by line, as the cold read and as the full parse see it."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"")
    tracker = SessionTracker(str(path))
    with open(path, "ab") as handle:
        for line in log.lines:
            handle.write(json.dumps(line).encode() + b"\n")
            handle.flush()
            tracker.refresh()
    assert tracker.ledger is not None
    data = log.bytes()
    return [
        tracker.ledger.turn,
        SessionLedger.from_bytes(data).turn,
        SessionLedger.from_transcript(parse_transcript(data)).turn,
    ]


def closed_start() -> Log:
    log = Log()
    log.add("model_change", provider="anthropic", modelId="claude-sonnet-4-5")
    log.user("hello")
    log.assistant(text="hi")
    return log


def case_user_only(log: Log) -> tuple[str | None, int]:
    return log.user(), 0


def case_tool_calls_without_results(log: Log) -> tuple[str | None, int]:
    opened = log.user()
    log.assistant(calls=2)
    return opened, 2


def case_tool_results_partial(log: Log) -> tuple[str | None, int]:
    opened = log.user()
    log.assistant(calls=2)
    log.result()
    return opened, 1


def case_tool_results_all_in_awaiting_the_model(log: Log) -> tuple[str | None, int]:
    opened = log.user()
    log.assistant(calls=2)
    log.result()
    log.result()
    return opened, 0  # pi always calls the model again after tool results


def case_complete(log: Log) -> tuple[str | None, int]:
    log.user()
    log.assistant(calls=1)
    log.result()
    log.assistant(text="done")
    return None, 0


def case_error_stop_reason(log: Log) -> tuple[str | None, int]:
    log.user()
    log.assistant(stop="error", text="")
    return None, 0


def case_aborted_even_with_tool_calls(log: Log) -> tuple[str | None, int]:
    log.user()
    log.assistant(calls=1, stop="aborted")  # pi's loop returns before running tools
    return None, 0


def case_tool_use_stop_reason_without_tool_calls(log: Log) -> tuple[str | None, int]:
    log.user()
    log.assistant(stop="toolUse")  # no toolCall block: pi's loop has nothing to run and stops
    return None, 0


def case_length_stop_reason_with_tool_calls(log: Log) -> tuple[str | None, int]:
    opened = log.user()
    log.assistant(calls=1, stop="length")  # the tool still runs
    return opened, 1


def case_steering_message_keeps_the_turn_start(log: Log) -> tuple[str | None, int]:
    opened = log.user()
    log.assistant(calls=1)
    log.result()
    log.user("also check the tests")  # a steering message, injected before the next model call
    return opened, 0


def case_other_entries_do_not_change_an_open_turn(log: Log) -> tuple[str | None, int]:
    opened = log.user()
    log.add("custom_message", customType="ext", content="note", display=True)
    log.message({"role": "bashExecution", "command": "ls", "output": "a", "exitCode": 0})
    log.add("model_change", provider="anthropic", modelId="claude-opus-4")
    log.add("compaction", summary="s", firstKeptEntryId=opened, tokensBefore=10)
    return opened, 0


def case_other_entries_do_not_open_a_turn(log: Log) -> tuple[str | None, int]:
    log.add("custom_message", customType="ext", content="note", display=True)
    log.message({"role": "bashExecution", "command": "ls", "output": "a", "exitCode": 0})
    log.add("label", targetId="e002", label="x")
    return None, 0


def case_branch_switch_to_a_closed_point(log: Log) -> tuple[str | None, int]:
    closed = log.leaf
    log.user()
    log.assistant(calls=1)
    log.add("custom", parent=closed, customType="state", data={})  # /tree back to the closed reply
    return None, 0


def case_branch_switch_to_an_open_point(log: Log) -> tuple[str | None, int]:
    opened = log.user()
    call = log.assistant(calls=1)
    log.result()
    log.assistant(text="done")
    log.add("custom", parent=call, customType="state", data={})  # back to where the tool call was pending
    return opened, 1


CASES = [
    case_user_only,
    case_tool_calls_without_results,
    case_tool_results_partial,
    case_tool_results_all_in_awaiting_the_model,
    case_complete,
    case_error_stop_reason,
    case_aborted_even_with_tool_calls,
    case_tool_use_stop_reason_without_tool_calls,
    case_length_stop_reason_with_tool_calls,
    case_steering_message_keeps_the_turn_start,
    case_other_entries_do_not_change_an_open_turn,
    case_other_entries_do_not_open_a_turn,
    case_branch_switch_to_a_closed_point,
    case_branch_switch_to_an_open_point,
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__.removeprefix("case_"))
def test_mid_turn_state_of_the_ledger(tmp_path: Path, case: Any) -> None:
    log = closed_start()
    opened, pending = case(log)
    expected = None if opened is None else Turn(log.ts[opened], pending)
    assert three_ways(tmp_path, log) == [expected] * 3


def test_a_turn_is_described_with_its_start_and_what_it_waits_for() -> None:
    assert Turn(1_790_000_001.0).describe() == (
        "turn in flight since 2026-09-21T14:13:21Z (waiting for the model's reply)"
    )
    assert Turn(None, 2).describe() == "turn in flight (waiting for 2 tool results)"
    # JavaScript dates reach year 275760; a transcript may say so, and the reason must still be given.
    assert Turn(8.64e12, 1).describe() == (
        "turn in flight since 8640000000000 s after the epoch (waiting for 1 tool result)"
    )


# --- against an independent statement of the rule ------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.just(("user",)),
        st.tuples(
            st.just("assistant"),
            st.integers(0, 3),
            st.sampled_from(["stop", "toolUse", "length", "error", "aborted"]),
        ),
        st.just(("result",)),
        st.just(("bash",)),
    ),
    max_size=30,
)


def reference(messages: list[tuple[Any, ...]], times: list[float]) -> Turn | None:
    """Open iff the last user-or-assistant message is a user message, or an assistant message with tool calls
    that neither errored nor was aborted; it started at the first user message after the last assistant
    message that closed a turn (or at that tool-calling message when no user message opened it)."""
    said = [i for i, m in enumerate(messages) if m[0] in ("user", "assistant")]
    if not said:
        return None

    def closes(m: tuple[Any, ...]) -> bool:
        return m[0] == "assistant" and (m[2] in ("error", "aborted") or m[1] == 0)

    last = messages[said[-1]]
    if closes(last):
        return None
    closing = [i for i in said if closes(messages[i])]
    start = next(i for i in said if not closing or i > closing[-1])
    calls = [i for i in said if messages[i][0] == "assistant"]
    pending = 0
    if calls and calls[-1] > (closing[-1] if closing else -1):
        results = sum(1 for m in messages[calls[-1] + 1 :] if m[0] == "result")
        pending = max(0, messages[calls[-1]][1] - results)
    return Turn(times[start], pending)


@pytest.mark.slow  # hypothesis-heavy
@settings(max_examples=150, deadline=None)
@given(OPS)
def test_the_fold_equals_the_rule_stated_over_the_whole_branch(ops: list[tuple[Any, ...]]) -> None:
    log = Log()
    times: list[float] = []
    for op in ops:
        if op[0] == "user":
            entry = log.user()
        elif op[0] == "assistant":
            entry = log.assistant(calls=op[1], stop=op[2])
        elif op[0] == "result":
            entry = log.result()
        else:
            entry = log.message({"role": "bashExecution", "command": "ls", "output": "", "exitCode": 0})
        times.append(log.ts[entry])
    expected = reference(list(ops), times)
    data = log.bytes()
    assert SessionLedger.from_bytes(data).turn == expected
    assert SessionLedger.from_transcript(parse_transcript(data)).turn == expected
    incremental = SessionLedger.from_bytes(b"".join(data.splitlines(keepends=True)[:1]))
    assert incremental.apply(parse_transcript(data).entries)
    assert incremental.turn == expected


# --- the readiness rule -------------------------------------------------------------------------------------


def config(idle: float = 2.0, abandoned: float = 900.0) -> Config:
    base = Config.defaults({})
    return replace(base, sessions=replace(base.sessions, idle_seconds=idle, abandoned_turn_seconds=abandoned))


OPEN = Turn(1_790_000_000.0)


@pytest.mark.parametrize(
    ("turn", "quiet", "cfg", "force", "ready", "reason"),
    [
        (None, 1.0, config(), False, False, "not idle yet"),
        (None, 2.0, config(), False, True, None),
        (OPEN, 3.0, config(), False, False, OPEN.describe()),  # quiet longer than idle, still mid-turn
        (OPEN, 899.0, config(), False, False, OPEN.describe()),
        (OPEN, 900.0, config(), False, True, None),  # abandoned: nothing written for 15 minutes
        (OPEN, 5.0, config(idle=10.0, abandoned=3.0), False, False, "not idle yet"),
        (OPEN, 0.5, config(abandoned=0.0), False, False, "not idle yet"),  # 0: turns not waited for
        (OPEN, 0.0, config(), True, True, None),  # --force
    ],
)
def test_readiness(
    turn: Turn | None, quiet: float, cfg: Config, force: bool, ready: bool, reason: str | None
) -> None:
    verdict = readiness(cfg, turn=turn, quiet_seconds=quiet, force=force)
    assert (verdict.ready, verdict.reason) == (ready, reason)
    assert verdict.turn_in_flight == (reason is not None and reason.startswith("turn in flight"))
    if not ready:
        # Time alone makes it ready after wait_seconds (a turn may also end sooner).
        later = readiness(cfg, turn=turn, quiet_seconds=quiet + verdict.wait_seconds, force=force)
        assert later.ready
