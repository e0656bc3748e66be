"""Issue 22: the digest's sections, the current-state section and the exit code are the same, byte for byte, as
before their gates and fast paths. ``tests/support/reference/`` holds the modules as they were (i19 at
dc1aeeb); each function here is compared with its copy there on generated transcripts (hypothesis: every
pattern's keywords in every case, with the letters re's IGNORECASE takes for ASCII ones, near misses,
fences, checkboxes, bullets, sentence marks, tokens, statuses, corrections, exit codes), on the real
fixtures, and on the quality bench's generated sessions."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from compactd.core.messages import strip_for_llm, text_of
from compactd.summarize import augment, digest, facts
from compactd.summarize.derived import DerivedOf
from compactd.summarize.gates import folded
from compactd.summarize.prepared import decode, encode, prepare
from compactd.summarize.redact import SpanText, redact_value
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.reference import augment as ref_augment
from tests.support.reference import digest as ref_digest
from tests.support.reference import facts as ref_facts

Msg = dict[str, Any]
_DETAILS: list[Msg] = [
    {},
    {"status": "failed"},
    {"status": "completed"},
    {"status": " "},
    {"exitCode": 0},
    {"exitCode": 2},
    {"exitCode": True},
    {"cwd": "/srv"},
]

# Every keyword of every gated pattern, a near miss of some, and what joins them into lines and sentences.
_WORDS = [
    *("decided", "decide to", "decision", "chose", "chosen", "choose to", "opted", "settled on"),
    *("agreed on", "agreed to", "going with", "go with", "sticking with", "stick with", "switched to"),
    *("switching to", "let's use", "let’s keep", "let us adopt", "we'll switch to", "we’ll stay with"),
    *("we will stick with", "we're going to go with", "we’re going to use", "we are going to keep"),
    *(
        "决定",
        "采用",
        "改用",
        "选用",
        "选择了",
        "确定用",
        "确定使用",
        "就用",
        "decid",
        "go  with",
        "letʼs use",
    ),
    *("TODO", "FIXME", "TODO:", "todo:", "FIXME：", "待办：", "待完成:", "next step", "Next, I'll"),
    *("next I will", "next i need", "NEXT STEP", "still need", "remaining", "not yet", "left to do"),
    *("follow-up", "follow up", "下一步", "还需要", "尚未", "Remaining from the plan:", "Next steps:"),
    *("must", "mustn't", "never", "always", "don't", "don’t", "do not", "dont", "shouldn't", "should not"),
    *("avoid", "make sure", "ensure", "under no circumstances", "not allowed", "forbidden", "prohibited"),
    *("I never", "必须", "不要", "禁止", "确保", "只能", "and never", "but always", "; ", "：", "并且"),
    *("Also, ", "please ", "exit code 2", "Exit code: 1", "exited with code 127", "EXIT STATUS 3"),
    *("exıt code 4", "EXİT code 5", "xit", "queued", "in progress", "blocked", "done", "fixed", "not"),
    *("actually", "instead", "correction", "was", "port 8080", "pool_size", "billing-api", "@okafor"),
    *("pending", "not started", "in-progress", "underway", "under way", "on hold", "waiting", "verifying"),
    *("in review", "under review", "testing", "finished", "completed", "merged", "shipped", "deployed"),
    *("resolved", "cancelled", "canceled", "abandoned", "dropped", "todo", "to do", "queued", "started"),
    *(
        "TASK-12 is queued for the next sprint.",
        "TASK-12 is in progress with the parser.",
        "TASK-12 done now.",
    ),
    *("The billing-api port is 8080 here.", "Correction: the billing-api port is 9090, not 8080."),
    *("Set pool_size to 12 in the config.", "Set pool_size to 16 in the config."),
    *("TASK-12", "v1.2.3", "src/app.py", "camelCase", "~/x/y", "#42", "3", "12", "Blocked on SEC-2."),
    *("Next action: run.sh.", "let me", "I'll read", "Reading", "truncated", "omitted"),
    *("[... 120 more characters truncated]", "⚠️ [... middle content omitted]", "cat", "the", "value"),
]
# re.IGNORECASE takes these for i, s and k; a combining dot after an i; fullwidth and other look-alikes.
_ODD = [
    "ı",
    "İ",
    "ſ",
    "K",
    "\u0307",
    "Ｉ",
    "é",
    "ß",
    "ﬁ",
    "\u00a0",
    "\u2003",
    "\x0b",
    "…",
    "。",
    "！",
    "？",
    "；",
]
_JOIN = [" ", "  ", "\n", "\n\n", ". ", "! ", "? ", ": ", ", ", "\t", "。", "？", "!", ".", ""]
_LINE_START = [
    "",
    "- ",
    "* ",
    "1. ",
    "2) ",
    "- [ ] ",
    "- [x] ",
    "* [X] ",
    "## ",
    "> ",
    "| ",
    "```\n",
    "~~~\n",
]


def _mangle(word: str, draw: Any) -> str:
    """The word, perhaps in another case or with one letter swapped for one IGNORECASE takes for it."""
    how = draw(st.sampled_from(["as is", "upper", "title", "odd"]))
    if how == "upper":
        return word.upper()
    if how == "title":
        return word.title()
    if how == "odd":
        for plain, odd in (("i", draw(st.sampled_from(["ı", "İ", "i\u0307"]))), ("s", "ſ"), ("k", "K")):
            if plain in word:
                return word.replace(plain, odd, 1)
    return word


@st.composite
def _text(draw: Any) -> str:
    parts: list[str] = []
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["word", "word", "word", "odd", "start", "filler"]))
        if kind == "word":
            parts.append(_mangle(draw(st.sampled_from(_WORDS)), draw))
        elif kind == "odd":
            parts.append(draw(st.sampled_from(_ODD)))
        elif kind == "start":
            parts.append("\n" + draw(st.sampled_from(_LINE_START)))
        else:
            parts.append(draw(st.text(alphabet="abcxyz XIT.?:-_/0123", max_size=30)))
        parts.append(draw(st.sampled_from(_JOIN)))
    return "".join(parts)


_SUBJECTS = ["TASK-12", "TASK-7", "billing-api", "@okafor", "src/app.py", "Ｉnfra-2", "the api"]
_STATES = [
    "queued",
    "in progress",
    "blocked",
    "verifying",
    "done",
    "fixed",
    "cancelled",
    "pending",
    "on hold",
]
_NAMES = ["pool_size", "max_retries", "the timeout", "ſtaging_port", "billing-api port"]


@st.composite
def _statement_text(draw: Any) -> str:
    """Whole statements about a few subjects and values, so that later ones restate, correct and update
    earlier ones (the fold's every rule) — what random words seldom do."""
    sentences: list[str] = []
    for _ in range(draw(st.integers(1, 6))):
        subject, name = draw(st.sampled_from(_SUBJECTS)), draw(st.sampled_from(_NAMES))
        value, other = draw(st.integers(1, 3)) * 4000, draw(st.sampled_from([8, 12, 16, 200]))
        sentences.append(
            draw(
                st.sampled_from(
                    [
                        f"{subject} is {_mangle(draw(st.sampled_from(_STATES)), draw)} now.",
                        f"{subject} is {draw(st.sampled_from(_STATES))}. Next action: run {subject}.sh.",
                        f"Set {name} to {other} in the config.",
                        f"The {name} is {value} for staging.",
                        f"Correction: the {name} is {value + 1}, not {value}.",
                        f"Actually {subject} uses {name} {other} instead.",
                        f"- [ ] ship {subject} with {name} {other}",
                        f"Sorry, {name} was wrong: it is {other}.",
                    ]
                )
            )
        )
    return draw(st.sampled_from([" ", "\n", "\n- "])).join(sentences)


@st.composite
def _transcript(draw: Any) -> list[Msg]:
    messages: list[Msg] = []
    said: list[str] = []
    for n in range(draw(st.integers(1, 10))):
        role = draw(st.sampled_from(["user", "assistant", "assistant", "toolResult", "bashExecution"]))
        text = draw(st.one_of(_text(), _statement_text()))
        if said and draw(st.booleans()):  # an earlier text again: restated, corrected or updated
            earlier = draw(st.sampled_from(said))
            text = draw(
                st.sampled_from(
                    [
                        earlier,
                        re.sub(r"\d+", lambda m: str(int(m.group()) + 7), earlier),  # other values
                        earlier.replace("queued", "done").replace("pending", "blocked"),  # a task moves on
                        "Correction: " + re.sub(r"\d+", lambda m: str(int(m.group()) + 1), earlier),
                    ]
                )
            )
        said.append(text)
        if role == "user":
            messages.append({"role": "user", "content": [{"type": "text", "text": text}], "timestamp": n})
        elif role == "assistant":
            content: list[Msg] = [{"type": "text", "text": text}]
            if draw(st.booleans()):
                command = draw(st.sampled_from(["cat a.txt", "pytest -q", "ls src", "make `x`"]))
                content.append(
                    {"type": "toolCall", "id": f"c{n}", "name": "bash", "arguments": {"command": command}}
                )
            messages.append(
                {
                    "role": "assistant",
                    "content": content,
                    "stopReason": draw(st.sampled_from(["stop", "toolUse", "error", "aborted", "length"])),
                    "timestamp": n,
                }
            )
        elif role == "toolResult":
            call = f"c{draw(st.integers(0, n))}"
            tool_result: Msg = {
                "role": "toolResult",
                "toolCallId": call,
                "toolName": "bash",
                "content": [{"type": "text", "text": text}],
                "isError": draw(st.booleans()),
                "timestamp": n,
            }
            details = draw(st.sampled_from([None, *_DETAILS]))
            if details is not None:  # what decides a failure there, and what does not
                tool_result["details"] = details
            messages.append(tool_result)
        else:
            messages.append(
                {
                    "role": "bashExecution",
                    "command": "make test",
                    "output": text,
                    "exitCode": draw(st.sampled_from([0, 1, 2])),
                    "timestamp": n,
                }
            )
    return messages


def _statement_fields(items: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [
        (s.text, s.tokens, s.subject, s.status, s.names, s.cue, s.skeleton, s.words, s.earlier, s.replaced)
        for s in items
    ]


def _assert_same(read: list[Msg], previous: str | None = None) -> None:
    """Every gated function gives what its reference gives, alone and inside the digest and the state, with
    the engine's ``SpanText`` and with the plain redacted reader."""
    handed_on = [redact_value(m) for m in read]
    texts = SpanText.of(read, handed_on)
    for message in [*read, *handed_on]:
        assert augment.exit_code_of(message) == ref_augment.exit_code_of(message)
        assert augment.is_tool_failure(message) == ref_augment.is_tool_failure(message)
    for reader in (texts, digest._text):
        assert digest._decisions(handed_on, reader) == ref_digest._decisions(handed_on, reader)
        assert digest._todos(handed_on, reader) == ref_digest._todos(handed_on, reader)
        assert digest._rules(handed_on, reader) == ref_digest._rules(handed_on, reader)
        assert digest.tool_failures(handed_on, reader) == [
            digest.Failure(f.tool, f.exit_code, f.text, f.command)
            for f in ref_digest.tool_failures(handed_on, reader)
        ]
    for reader in (texts, text_of):
        assert _statement_fields(facts.statements(handed_on, reader)) == _statement_fields(
            ref_facts.statements(handed_on, reader)
        )
        new_state = facts.working_state(handed_on, previous, reader)
        old_state = ref_facts.working_state(handed_on, previous, reader)
        assert _statement_fields(new_state.tasks) == _statement_fields(old_state.tasks)
        assert _statement_fields(new_state.facts) == _statement_fields(old_state.facts)
        assert new_state.results == old_state.results
        assert new_state.render() == old_state.render()
        assert new_state.render(900) == old_state.render(900)
    for failures, files in ((True, True), (False, False)):
        new = digest.build_digest(
            handed_on, previous_summary=previous, include_failures=failures, include_files=files, texts=texts
        )
        old = ref_digest.build_digest(
            handed_on, previous_summary=previous, include_failures=failures, include_files=files, texts=texts
        )
        assert new == old
    assert augment.collect_tool_failures(read) == ref_augment.collect_tool_failures(read)
    _assert_same_from_prepared(read, handed_on, texts, previous)


def _assert_same_from_prepared(
    read: list[Msg], handed_on: list[Msg], texts: SpanText, previous: str | None
) -> None:
    """The sections a followed session's compaction builds from each message's stored derived share (made
    when the message was prepared, written to a store line and read back) are the reference's too."""
    memo: dict[str, Any] = {}
    # Prepared as ``handed_on`` holds them (details and all, as the reference reads them here), so each share is
    # that of the message the sections read; the failure flag below from the details-stripped copy the
    # preparer reads.
    shares = [decode(encode("key", prepare(m, memo))) for m in read]
    derived = DerivedOf(handed_on, [got[1].derived if got is not None else None for got in shares])
    assert len(derived) == len(read)
    # The failures the augmentation lists, from the messages with their details, as a followed session's
    # compaction finds them: a prepared message (details stripped, as the preparer reads it) says whether it
    # failed as read, and the details are read only when they hold a status or an exit code.
    as_read = {
        id(m): got[1].derived for m in read if (got := decode(encode("key", prepare(strip_for_llm(m), memo))))
    }
    assert augment.collect_tool_failures(
        read, lambda m: d.failed if (d := as_read.get(id(m))) is not None else None
    ) == ref_augment.collect_tool_failures(read)
    assert digest._decisions(handed_on, texts, derived) == ref_digest._decisions(handed_on, texts)
    assert digest._todos(handed_on, texts, derived) == ref_digest._todos(handed_on, texts)
    assert digest._rules(handed_on, texts, derived) == ref_digest._rules(handed_on, texts)
    assert _statement_fields(facts.statements(handed_on, texts, derived)) == _statement_fields(
        ref_facts.statements(handed_on, texts)
    )
    new_state = facts.working_state(handed_on, previous, texts, derived)
    old_state = ref_facts.working_state(handed_on, previous, texts)
    assert _statement_fields(new_state.tasks) == _statement_fields(old_state.tasks)
    assert _statement_fields(new_state.facts) == _statement_fields(old_state.facts)
    assert new_state.results == old_state.results
    assert new_state.render() == old_state.render()
    for failures, files in ((True, True), (False, False)):
        new = digest.build_digest(
            handed_on,
            previous_summary=previous,
            include_failures=failures,
            include_files=files,
            texts=texts,
            derived=derived,
        )
        old = ref_digest.build_digest(
            handed_on, previous_summary=previous, include_failures=failures, include_files=files, texts=texts
        )
        assert new == old


@given(_transcript(), st.booleans())
@settings(max_examples=400, deadline=None)
def test_the_gated_sections_equal_the_reference_on_generated_transcripts(
    read: list[Msg], carried: bool
) -> None:
    """On generated transcripts, each with a previous summary or none, every output is the reference's."""
    previous = None
    if carried:  # a previous compaction's digest and state, as the next one finds them
        handed_on = [redact_value(m) for m in read]
        state = ref_facts.working_state(handed_on).render()
        previous = facts.merge_state(ref_digest.build_digest(handed_on), state)
    _assert_same(read, previous)


@given(_text())
@settings(max_examples=400, deadline=None)
def test_the_gates_let_through_every_text_their_patterns_match(text: str) -> None:
    """No text on which a gated pattern matches is turned away by its gate (the gates' one promise)."""
    low = folded(text)
    if digest._DECISION.search(text):
        assert any(n in low for n in digest._DECISION_NEEDLES)
    if digest._NEXT_STEP.search(text):
        assert any(n in low for n in digest._NEXT_STEP_NEEDLES)
    if digest._RULE.search(text):
        assert any(n in low for n in digest._RULE_NEEDLES)
    if digest._TODO_LINE.search(text):
        assert any(n in text for n in digest._TODO_NEEDLES)
    if facts._STATUS.search(text):
        assert any(n in low for n in facts._STATUS_NEEDLES)
    if augment._EXIT_CODE.search(text):
        assert augment._EXIT_NEEDLE in low
    assert facts._has_specific(text) == (facts._SPECIFIC.search(text) is not None)
    for cap in (1, 5, 40, 300):
        assert facts.collapse(text * 50, cap) == ref_facts._collapse(text * 50, cap)


def _real_dir() -> Path:
    configured = os.environ.get("COMPACTD_FIXTURES")
    base = Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "fixtures"
    return base / "real" if (base / "real").is_dir() else base


def _all_real() -> list[str]:
    return sorted(p.name for p in _real_dir().glob("*.jsonl")) if _real_dir().is_dir() else []


@pytest.mark.parametrize("name", _all_real() or ["(no real fixtures)"])
def test_the_gated_sections_equal_the_reference_on_real_sessions(name: str) -> None:
    """On the real sessions (read where they are, never copied here), the digest, the state and the tool
    failures are the reference's, byte for byte."""
    path = _real_dir() / name
    if not path.is_file():
        pytest.skip(f"{path} not present")
    from compactd.core.context import build_context
    from compactd.core.messages import llm_visible
    from compactd.reading import read_transcript

    read = list(llm_visible(build_context(read_transcript(path)).messages))
    assert read
    _assert_same(read)
    half = len(read) // 2  # and the second half carrying the first half's summary
    handed_on = [redact_value(m) for m in read[:half]]
    previous = facts.merge_state(
        ref_digest.build_digest(handed_on), ref_facts.working_state(handed_on).render()
    )
    _assert_same(read[half:], previous)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_gated_sections_equal_the_reference_on_quality_sessions(seed: int) -> None:
    """On the quality bench's sessions (corrections, tasks whose state changes, exit codes), whole and in a
    chain of three compactions."""
    from bench.quality.sessions import generate

    session = generate(seed)
    _assert_same(session.messages())
    previous: str | None = None
    start = 0
    for stop in session.split_points(3):
        span = session.messages(start, stop)
        _assert_same(span, previous)
        handed_on = [redact_value(m) for m in span]
        previous = facts.merge_state(
            ref_digest.build_digest(handed_on, previous_summary=previous),
            ref_facts.working_state(handed_on, previous).render(),
        )
        start = stop


@given(st.text(alphabet=st.sampled_from([*"aZq -._/@#:09\t\n!,", "é", "٣", "ſ"]), max_size=40))
@settings(max_examples=2000, deadline=None)
def test_the_specific_token_test_is_the_pattern_s(text: str) -> None:
    """``_has_specific`` (character classes and substring searches for an ASCII text) is exactly a search of
    ``_SPECIFIC``: digits of any script, joins, camel case and the path and handle characters."""
    assert facts._has_specific(text) == (facts._SPECIFIC.search(text) is not None)
