"""pi 1.x's rules, pure (design.md §6.14): which branches follow them, the projection (system messages, context
edits, checkpoints, retain-none), the figure (``estimateProjectedContextTokens``), and the ledger's incremental
fold equal to a cold read. pi 1.6.0 itself judges the same on files it wrote in ``test_pi1_differential.py``.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from compactd.config import Config
from compactd.core.context import build_context, context_estimate, rules_of, rules_reason
from compactd.core.ledger import SessionLedger
from compactd.core.messages import PI_0_73, PI_1, current_system_message
from compactd.core.planning import figures_of
from compactd.core.reader import parse_transcript
from compactd.core.tokens import IMAGE_CHARS, estimate_tokens

from tests.support.messages import assistant, call, tool_result, usage, user

Json = dict[str, Any]
TOOLS = [
    {"name": "read", "description": "Read a file", "parameters": {"type": "object"}},
    {"name": "bash", "description": "Run a command", "parameters": {"type": "object"}},
]


def system(content: str = "", *, sections: Json | None = None, added: list[Json] | None = None,
           removed: list[str] | None = None, ts: int = 1) -> Json:  # fmt: skip
    message: Json = {"role": "system", "content": content}
    if sections is not None:
        message["sections"] = sections
    if added is not None:
        message["toolsAdded"] = added
    if removed is not None:
        message["toolsRemoved"] = [{"name": n} for n in removed]
    message["timestamp"] = ts
    return message


class Session:
    """Entries chained as pi's SessionManager chains them (ids e1, e2, …; each the child of the last)."""

    def __init__(self) -> None:
        self.lines: list[Json] = [
            {
                "type": "session",
                "version": 3,
                "id": "s1",
                "timestamp": "2026-11-01T00:00:00.000Z",
                "cwd": "/w",
            }
        ]
        self.leaf: str | None = None

    def add(self, entry: Json) -> str:
        entry_id = f"e{len(self.lines)}"
        self.lines.append({"type": entry.pop("type"), "id": entry_id, "parentId": self.leaf,
                           "timestamp": f"2026-11-01T00:{len(self.lines):02d}:00.000Z", **entry})  # fmt: skip
        self.leaf = entry_id
        return entry_id

    def message(self, message: Json) -> str:
        return self.add({"type": "message", "message": message})

    def edit(self, target: str, replacement: Json | None) -> str:
        return self.add({"type": "context_edit", "targetId": target, "replacement": replacement})

    def data(self) -> bytes:
        return b"".join(orjson.dumps(line) + b"\n" for line in self.lines)

    def transcript(self) -> Any:
        return parse_transcript(self.data())


def reply(text: str, total: int | None, *, ts: int) -> Json:
    return assistant(text, usage=usage(total), ts=ts, provider="p", model="m")


def test_a_branch_with_a_system_message_follows_pi_1_and_one_without_pi_0_73() -> None:
    old = Session()
    old.message(user("hi", ts=1))
    old.message(reply("hello", 50, ts=2))
    assert rules_of(old.transcript().branch()) == PI_0_73
    new = Session()
    new.message(user("hi", ts=1))
    new.message(system("You are pi.", added=TOOLS))
    rules, why = rules_reason(new.transcript().branch())
    assert rules == PI_1 and "1 system messages" in why


def test_the_system_messages_replay_into_one_prompt_with_the_current_tools() -> None:
    messages = [
        system("Base prompt.", sections={"a": "A1", "b": "B1"}, added=TOOLS, ts=5),
        user("hi"),
        system("", sections={"a": "A2", "b": None}, removed=["read"], ts=9),
        system("More.", added=[{"name": "grep"}, {"name": "bash", "description": "new"}], ts=11),
    ]
    merged = current_system_message(messages)
    assert merged == {
        "role": "system",
        "content": "Base prompt.\n\nMore.",
        "sections": {"a": "A2"},
        # bash keeps its first place (a Map's set on an existing key), read is gone, grep is new
        "toolsAdded": [{"name": "bash", "description": "new"}, {"name": "grep"}],
        "timestamp": 5,
    }
    assert current_system_message([user("hi")]) is None


def test_a_system_message_counts_its_content_sections_and_tools_json_under_pi_1_only() -> None:
    message = system("abcd", sections={"x": "12345678", "gone": None}, added=[{"name": "read"}])
    expected_chars = 4 + 8 + len('[{"name":"read"}]')
    assert estimate_tokens(message, pi1=True) == -(-expected_chars // 4)
    assert estimate_tokens(message) == 0


def test_a_user_image_counts_4800_characters_under_pi_1_only() -> None:
    message = user(
        [{"type": "text", "text": "look"}, {"type": "image", "data": "x", "mimeType": "image/png"}]
    )
    assert estimate_tokens(message, pi1=True) == -(-(4 + IMAGE_CHARS) // 4)
    assert estimate_tokens(message) == 1


def test_context_edits_omit_and_replace_what_the_model_sees() -> None:
    s = Session()
    s.message(system("prompt", added=TOOLS))
    asked = s.message(user("read it", ts=1))
    called = s.message(assistant(call("c1", "read"), stop="toolUse", usage=usage(100), ts=2))
    result = s.message(tool_result("c1", "x" * 4000, ts=3))
    s.message(reply("done", 200, ts=4))
    s.edit(result, {"content": [{"type": "text", "text": "[cut]"}]})
    s.edit(asked, None)
    s.edit(called, {"content": "said instead"})  # a string becomes one text block for an assistant
    context = build_context(s.transcript())
    roles = [m["role"] for m in context.messages]
    assert roles == ["system", "assistant", "toolResult", "assistant"]
    assert context.messages[1]["content"] == [{"type": "text", "text": "said instead"}]
    assert context.messages[2]["content"] == [{"type": "text", "text": "[cut]"}]
    # The usage (200) predates the edits: pi no longer trusts it and estimates the whole projection.
    estimate = context_estimate(context)
    assert estimate.last_usage_index is None
    assert estimate.tokens == sum(estimate_tokens(m, pi1=True) for m in context.messages)


def test_usage_after_the_newest_edit_is_the_anchor_again() -> None:
    s = Session()
    s.message(system("prompt", added=TOOLS))
    first = s.message(user("one", ts=1))
    s.message(reply("a", 100, ts=2))
    s.edit(first, {"content": "one, edited"})
    s.message(user("two", ts=3))
    s.message(reply("b", 900, ts=4))
    s.message(user("three " * 10, ts=5))
    estimate = context_estimate(build_context(s.transcript()))
    assert estimate.usage_tokens == 900
    assert estimate.tokens == 900 + estimate_tokens(user("three " * 10), pi1=True)


def test_a_compaction_puts_its_checkpoint_before_the_summary_and_drops_older_system_messages() -> None:
    s = Session()
    s.message(system("prompt", added=TOOLS, ts=1))
    s.message(user("old", ts=2))
    s.message(reply("old reply", 5000, ts=3))
    kept = s.message(user("kept", ts=4))
    s.message(system("", sections={"extra": "late section"}, ts=5))  # in the kept range: left out
    s.message(reply("kept reply", 6000, ts=6))
    checkpoint = current_system_message(
        [system("prompt", added=TOOLS, ts=1), system("", sections={"extra": "late section"})]
    )
    assert checkpoint is not None
    s.add({"type": "compaction", "summary": "SUMMARY", "firstKeptEntryId": kept, "tokensBefore": 6000,
           "systemMessage": checkpoint})  # fmt: skip
    context = build_context(s.transcript())
    assert [m["role"] for m in context.messages] == ["system", "compactionSummary", "user", "assistant"]
    assert context.messages[0] == checkpoint
    estimate = context_estimate(context)  # the kept reply's usage predates the compaction
    assert estimate.last_usage_index is None
    assert estimate.tokens == sum(estimate_tokens(m, pi1=True) for m in context.messages)


def test_a_retain_none_compaction_keeps_nothing_before_it() -> None:
    s = Session()
    s.message(system("prompt", added=TOOLS))
    s.message(user("old", ts=2))
    s.message(reply("old reply", 5000, ts=3))
    entry_id = f"e{len(s.lines)}"
    s.add({"type": "compaction", "summary": "S", "firstKeptEntryId": entry_id, "tokensBefore": 1})
    s.message(user("new", ts=4))
    context = build_context(s.transcript())
    assert [m["role"] for m in context.messages] == ["compactionSummary", "user"]


def test_an_older_compaction_inside_the_kept_range_shows_nothing() -> None:
    s = Session()
    s.message(system("prompt"))
    kept = s.message(user("a", ts=1))
    s.add({"type": "compaction", "summary": "FIRST", "firstKeptEntryId": kept, "tokensBefore": 1})
    s.message(user("b", ts=2))
    s.add({"type": "compaction", "summary": "SECOND", "firstKeptEntryId": kept, "tokensBefore": 1})
    context = build_context(s.transcript())
    summaries = [m.get("summary") for m in context.messages if m["role"] == "compactionSummary"]
    assert summaries == ["SECOND"]


def _grow(s: Session) -> list[Json]:
    """Appends a pi 1.x agent makes after a first reply: returns the lines added."""
    start = len(s.lines)
    s.message(user("next", ts=20))
    s.message(system("", sections={"t": "tool note"}, ts=21))
    s.message(reply("ok", 700, ts=22))
    s.add({"type": "usage", "kind": "summary", "provider": "p", "model": "m", "usage": usage(5)})
    s.message(
        user(
            [{"type": "text", "text": "img"}, {"type": "image", "data": "x", "mimeType": "image/png"}], ts=23
        )
    )
    return s.lines[start:]


@pytest.mark.parametrize("with_edit", [False, True])
def test_the_ledger_folds_pi_1_appends_to_a_cold_reads_figures(with_edit: bool) -> None:
    s = Session()
    s.message(system("prompt", added=TOOLS, ts=1))
    first = s.message(user("hello", ts=2))
    s.message(reply("hi", 300, ts=3))
    ledger = SessionLedger.from_bytes(s.data())
    assert ledger.rules == PI_1
    added = _grow(s)
    if with_edit:
        s.edit(first, None)
        added.append(s.lines[-1])
    folded = ledger.apply(added)
    cold = SessionLedger.from_bytes(s.data())
    exact = SessionLedger.from_transcript(s.transcript())
    assert cold.figures() == exact.figures()
    assert cold.tokens == context_estimate(build_context(s.transcript())).tokens
    if with_edit:
        assert not folded  # an edit changes what earlier entries show: the caller reloads
    else:
        assert folded and ledger.figures() == cold.figures()


def test_a_pi_0_73_ledger_reloads_when_pi_1_starts_writing_the_session() -> None:
    s = Session()
    s.message(user("hello", ts=2))
    s.message(reply("hi", 300, ts=3))
    ledger = SessionLedger.from_bytes(s.data())
    assert ledger.rules == PI_0_73
    s.message(system("prompt", added=TOOLS, ts=4))
    assert not ledger.apply([s.lines[-1]])
    assert SessionLedger.from_bytes(s.data()).rules == PI_1


def test_the_ledger_snapshot_keeps_the_rules() -> None:
    s = Session()
    s.message(system("prompt", added=TOOLS, ts=1))
    s.message(user("hello", ts=2))
    ledger = SessionLedger.from_bytes(s.data())
    again = SessionLedger.from_snapshot(orjson.loads(orjson.dumps(ledger.to_snapshot())))
    assert again == ledger and again.rules == PI_1


def test_a_pruning_is_measured_against_the_figure_pi_has_once_an_edit_is_appended() -> None:
    """The usage anchor (small) is what pi shows now; a context edit makes pi estimate everything, so the
    route must not promise that truncation alone brings that figure under the threshold."""
    s = Session()
    s.message(system("prompt", added=TOOLS, ts=1))
    for i in range(6):
        s.message(user(f"read {i}", ts=10 * i + 2))
        s.message(assistant(call(f"c{i}", "read"), stop="toolUse", usage=usage(100), ts=10 * i + 3))
        s.message(tool_result(f"c{i}", "y" * 20_000, ts=10 * i + 4))
        s.message(reply("read", 1000 + i, ts=10 * i + 5))
    config = Config.from_mapping({"agents": {"defaults": {"context_tokens": 24_000}}})
    figures = figures_of(config, s.transcript())
    assert figures.tokens == 1005 and figures.edited_tokens is not None
    assert figures.edited_tokens > 6 * 5000


def test_validate_reports_context_edits_pi_cannot_apply_and_ones_that_change_nothing() -> None:
    s = Session()
    s.message(system("prompt", added=TOOLS))
    target = s.message(user("hi", ts=1))
    s.edit(target, {"content": "fine"})
    s.edit("nowhere", None)
    clean = s.transcript()
    assert [p.kind for p in clean.problems] == ["context_edit_target_missing"] and clean.committable
    s.edit(target, {"text": "no content key"})
    broken = s.transcript()
    assert "context_edit_invalid" in [p.kind for p in broken.problems] and not broken.committable


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "message", "message": {"role": "system", "content": "x"}},
        {"type": "message", "message": {"role": "user", "content": "x"}},
        {"type": "message", "message": "system"},
        {"type": "message"},
        {"type": "context_edit", "targetId": "a"},
        {"type": "usage"},
        {"type": "compaction", "summary": "s", "systemMessage": None},
        {"type": "compaction", "summary": "s"},
        {"type": "custom_message", "message": {"role": "system"}},
        {"type": ["usage"]},
        {"message": {"role": "system"}},
    ],
)
def test_rules_of_is_any_pi1_marker(entry: dict[str, Any]) -> None:
    """``rules_of`` walks the branch with ``is_pi1_marker`` inlined: the same answer for every kind of entry,
    alone and after ordinary ones."""
    from compactd.core.context import is_pi1_marker

    expected = PI_1 if is_pi1_marker(entry) else PI_0_73
    plain = {"type": "message", "message": {"role": "user", "content": "hi"}}
    assert rules_of([entry]) == rules_of([plain, plain, entry]) == expected
    assert rules_of([plain]) == PI_0_73


def test_context_entries_start_at_the_last_compaction_as_settings_find_it() -> None:
    """``context_entries`` finds the branch's last compaction from the end: the one ``_settings`` finds
    walking from the start (a compaction near the root, two of them, none)."""
    from compactd.core.context import _settings, context_entries

    def entry(i: int, kind: str, **extra: Any) -> Json:
        return {"type": kind, "id": f"e{i}", "parentId": f"e{i - 1}" if i else None, **extra}

    plain = [entry(i, "message", message=user(f"m{i}")) for i in range(6)]
    first = entry(6, "compaction", summary="one", firstKeptEntryId="e4", tokensBefore=1)
    second = entry(9, "compaction", summary="two", firstKeptEntryId="e7", tokensBefore=1)
    later = [entry(i, "message", message=user(f"m{i}")) for i in (7, 8)]
    for path in (
        [*plain],
        [first, *plain],
        [*plain, first, *later],
        [*plain, first, *later, second, plain[0]],
    ):
        compaction = _settings(path)[2]
        entries = context_entries(path, PI_0_73)
        assert entries[0] is compaction if compaction is not None else entries == path
        assert (compaction is second) == (second in path)
