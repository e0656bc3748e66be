"""Summary augmentation: suffix order, caps, the budget that keeps the suffix, recent turns, failures."""

from __future__ import annotations

from typing import Any

import pytest
from compactd.defaults import SUMMARY_MAX_CHARS
from compactd.summarize.augment import (
    FILE_LIST_MAX_CHARS,
    FILE_SECTION_MAX_CHARS,
    RECENT_TURN_MAX_CHARS,
    RECENT_TURNS_HEADING,
    SPLIT_TURN_LABEL,
    TOOL_FAILURE_MAX_CHARS,
    TOOL_FAILURE_MAX_ITEMS,
    TOOL_FAILURES_HEADING,
    TRUNCATION_MARKER,
    build_suffix,
    cap_summary,
    collect_tool_failures,
    exit_code_of,
    redacted_failures,
    render_file_lists,
    render_tool_failures,
    render_turn,
    select_recent_turns,
)
from compactd.summarize.redact import redact_value
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import messages as msgs

Msg = dict[str, Any]


def user(text: str) -> Msg:
    return msgs.user(text, ts=1, bare=True)


def assistant(text: str = "", calls: list[tuple[str, str]] = ()) -> Msg:  # type: ignore[assignment]
    blocks = [msgs.call(cid, name) for cid, name in calls]
    return msgs.assistant(*([text] if text else []), *blocks, stop="toolUse" if calls else "stop")


def result(
    cid: str, text: str, *, name: str = "bash", error: bool = False, details: Msg | None = None
) -> Msg:
    msg: Msg = {
        "role": "toolResult",
        "toolCallId": cid,
        "toolName": name,
        "content": [{"type": "text", "text": text}],
        "isError": error,
    }
    if details is not None:
        msg["details"] = details
    return msg


def augment(summary: str = "BODY", **kw: Any) -> str:
    args: dict[str, Any] = {
        "recent_turns": [],
        "tool_failures": [],
        "read_files": [],
        "modified_files": [],
    }
    args.update(kw)
    max_chars = args.pop("max_chars", SUMMARY_MAX_CHARS)
    suffix, body = build_suffix(**args), summary.rstrip()  # how the engine assembles the committed summary
    return cap_summary(body, suffix if body else suffix.lstrip("\n"), max_chars)


# --- order and empty inputs ---------------------------------------------------------------------------------
def test_empty_inputs_leave_the_summary_alone() -> None:
    assert augment("## Decisions\nNone.") == "## Decisions\nNone."
    assert augment("") == ""
    assert (
        build_suffix(
            recent_turns=[], tool_failures=[], read_files=[], modified_files=[], split_turn_summary=" "
        )
        == ""
    )


def test_suffix_order() -> None:
    out = augment(
        "BODY",
        split_turn_summary="- the user asked for 17 migrations",
        recent_turns=[user("hello there"), assistant("hi")],
        tool_failures=[result("c1", "boom", error=True)],
        read_files=["/r.txt"],
        modified_files=["/m.txt"],
    )
    markers = [
        "BODY",
        SPLIT_TURN_LABEL,
        RECENT_TURNS_HEADING,
        TOOL_FAILURES_HEADING,
        "<read-files>",
        "<modified-files>",
    ]
    positions = [out.index(m) for m in markers]
    assert positions == sorted(positions)
    assert out.startswith("BODY\n\n---\n\n" + SPLIT_TURN_LABEL + "\n\n- the user asked for 17 migrations")
    assert out.endswith("<modified-files>\n/m.txt\n</modified-files>")
    # AGENTS.md's rules are written once, in the post-compaction message, never into the summary (issue 10).
    assert "<workspace-critical-rules>" not in out
    assert "- User: hello there\n- Assistant: hi" in out
    assert "<read-files>\n/r.txt\n</read-files>\n\n<modified-files>\n/m.txt\n</modified-files>" in out


def test_empty_body_has_no_leading_blank_lines() -> None:
    out = augment("", read_files=["/rule"])
    assert out == "<read-files>\n/rule\n</read-files>"


# --- recent turns -------------------------------------------------------------------------------------------
def test_recent_turn_lines_and_600_cap() -> None:
    long_text = "word " * 400
    image_user = {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "data": "x"},
            {"type": "image", "data": "y"},
        ],
    }
    lines = [
        render_turn(user("multi\n\nline   text")),
        render_turn(assistant(long_text)),
        render_turn(result("c1", "file contents", name="read")),
        render_turn(image_user),
        render_turn(assistant("", [("c2", "bash"), ("c3", "read")])),
        render_turn({"role": "toolResult", "toolCallId": "c4", "content": [{"type": "image", "data": "z"}]}),
    ]
    assert lines[0] == "- User: multi line text"
    assert lines[1] is not None and lines[1].startswith("- Assistant: word word")
    assert len(lines[1]) == len("- Assistant: ") + RECENT_TURN_MAX_CHARS
    assert lines[1].endswith("…")
    assert lines[2] == "- Tool result (read): file contents"
    assert lines[3] == "- User: look [non-text content: image x2]"
    assert lines[4] == "- Assistant: [tool calls: bash, read]"
    assert lines[5] == "- Tool result (tool): [non-text content: image x1]"
    assert render_turn({"role": "custom", "content": "x"}) is None
    assert render_turn(assistant("")) is None


def test_thinking_is_not_preserved() -> None:
    msg = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "secret plan"}, {"type": "text", "text": "ok"}],
    }
    assert render_turn(msg) == "- Assistant: ok"


def _conversation() -> list[Msg]:
    return [
        user("u1"),
        assistant("a1"),
        user("u2"),
        assistant("", [("c1", "bash")]),
        result("c1", "r1"),
        assistant("a2"),
        {"role": "custom", "customType": "x", "content": "c"},
        user("u3"),
        assistant("", [("c2", "read"), ("c3", "read")]),
        result("c2", "r2", name="read"),
        result("c3", "r3", name="read"),
        assistant("a3"),
        user("u4"),
        assistant("a4"),
    ]


def _texts(msgs: list[Msg]) -> list[str]:
    out = []
    for m in msgs:
        if m["role"] == "toolResult":
            out.append(m["content"][0]["text"])
        elif isinstance(m["content"], str):
            out.append(m["content"])
        else:
            texts = [b.get("text") or b.get("id") for b in m["content"]]
            out.append("+".join(str(t) for t in texts))
    return out


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        (0, []),
        (1, ["u4", "a4"]),
        (2, ["u3", "c2+c3", "r2", "r3", "a3", "u4", "a4"]),
        (3, ["u2", "c1", "r1", "a2", "u3", "c2+c3", "r2", "r3", "a3", "u4", "a4"]),
        # Fewer user messages than turns: all users plus the newest 2N user/assistant messages.
        (6, ["u1", "a1", "u2", "c1", "r1", "a2", "u3", "c2+c3", "r2", "r3", "a3", "u4", "a4"]),
    ],
)
def test_select_recent_turns(turns: int, expected: list[str]) -> None:
    assert _texts(select_recent_turns(_conversation(), turns)) == expected


def test_select_recent_turns_with_few_users_keeps_all_users_and_the_newest_messages() -> None:
    msgs = [user("only ask"), *[assistant(f"a{i}") for i in range(10)]]
    assert _texts(select_recent_turns(msgs, 3)) == ["only ask", "a4", "a5", "a6", "a7", "a8", "a9"]


def test_select_recent_turns_drops_results_of_calls_not_kept() -> None:
    msgs = [user("u1"), assistant("", [("old", "bash")]), result("old", "r-old"), user("u2"), assistant("a2")]
    assert _texts(select_recent_turns(msgs, 1)) == ["u2", "a2"]


# --- tool failures ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("msg", "code"),
    [
        (result("c", "Command exited with code 1", error=True), 1),
        (result("c", "out\nexit code: 127", error=True), 127),
        (result("c", "Exit status 2\n...\nProcess exited with code 3", error=True), 3),
        (result("c", "exitCode=-9", error=True), -9),
        (result("c", "text says exit code 1", error=True, details={"exitCode": 4}), 4),
        (result("c", "no code here", error=True), None),
        ({"role": "bashExecution", "command": "make", "output": "", "exitCode": 2}, 2),
    ],
)
def test_exit_code_from_details_or_text(msg: Msg, code: int | None) -> None:
    assert exit_code_of(msg) == code


def test_collect_tool_failures() -> None:
    msgs = [
        result("c1", "ok"),
        result("c2", "first", error=True),
        result("c2", "duplicate", error=True),
        result("c3", "details say failed", details={"status": "failed"}),
        result("c4", "non-zero", details={"exitCode": 1}),
        result("c5", "zero", details={"exitCode": 0, "status": "completed"}),
        user("not a tool"),
    ]
    assert _texts(collect_tool_failures(msgs)) == ["first", "details say failed", "non-zero"]


def test_tool_failure_lines_caps_and_dedup() -> None:
    failures = [result(f"c{i}", f"error number {i}\n  at line {i}", error=True) for i in range(11)]
    failures.insert(1, result("c0", "duplicate of c0", error=True))
    failures[2]["details"] = {"status": "error", "exitCode": 2}
    failures.append(result("long", "x" * 1000, name="edit", error=True))
    failures.append(result("empty", "", name="write", error=True))
    text = render_tool_failures(failures)
    lines = text.splitlines()
    assert lines[0] == TOOL_FAILURES_HEADING
    assert len(lines) == 1 + TOOL_FAILURE_MAX_ITEMS + 1
    assert lines[1] == "- bash: error number 0 at line 0"
    assert lines[2] == "- bash (status=error exitCode=2): error number 1 at line 1"
    assert "duplicate of c0" not in text
    assert lines[-1] == f"- ...and {13 - TOOL_FAILURE_MAX_ITEMS} more"
    long_line = render_tool_failures([failures[-2]]).splitlines()[1]
    assert long_line == "- edit: " + "x" * (TOOL_FAILURE_MAX_CHARS - 1) + "…"
    assert render_tool_failures([failures[-1]]).splitlines()[1] == "- write: failed (no output)"
    assert render_tool_failures([]) == ""


SECRET = "sk-" + "ant-api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["c1", "c2", "c3", "c4", None, SECRET]),  # ids repeat, go missing, hold a secret
            st.sampled_from(["bash", "edit", SECRET]),
            st.sampled_from(["failed", f"token {SECRET} rejected", "exit code 3"]),
            st.sampled_from([None, {"status": "error"}, {"exitCode": 2, "log": SECRET}, {"status": SECRET}]),
        ),
        max_size=2 * TOOL_FAILURE_MAX_ITEMS + 3,
    )
)
def test_redacting_only_the_failures_shown_renders_what_redacting_all_renders(
    specs: list[tuple[str | None, str, str, Msg | None]],
) -> None:
    """The engine redacts the failures the augmentation lists, and keeps of the rest only what it counts."""
    messages = []
    for cid, name, text, details in specs:
        message = result(cid or "", text, name=name, error=True, details=details)
        if cid is None:
            del message["toolCallId"]
        messages.append(message)
    failures = collect_tool_failures(messages)
    kept = redacted_failures(failures, redact_value)
    assert render_tool_failures(kept) == render_tool_failures([redact_value(m) for m in failures])
    assert all(
        SECRET not in repr({k: v for k, v in m.items() if k != "toolCallId"}) for m in kept
    )  # call ids are link keys: never rewritten


def test_only_a_failure_status_word_comes_from_details() -> None:
    """``details`` never reach a model, and the summary reaches the next one: a tool's own status text stays out."""
    failures = [
        result("c1", "boom", error=True, details={"status": "Failed", "exitCode": 2}),
        result("c2", "bang", error=True, details={"status": "see DETAILS-ONLY-7f3a", "exitCode": 3}),
        result("c3", "pow", error=True, details={"status": "DETAILS-ONLY-7f3a"}),
    ]
    lines = render_tool_failures(failures).splitlines()
    assert lines[1:] == [
        "- bash (status=failed exitCode=2): boom",
        "- bash (exitCode=3): bang",
        "- bash: pow",
    ]


def test_tool_failure_with_exit_code_in_text() -> None:
    line = render_tool_failures([result("c", "Command exited with code 1", error=True)]).splitlines()[1]
    assert line == "- bash (exitCode=1): Command exited with code 1"


# --- file lists ---------------------------------------------------------------------------------------------
def test_file_lists_sorted_unique_and_read_excludes_modified() -> None:
    text = render_file_lists(["/b", "/a", "/a", "/m"], ["/m", "/z", ""])
    assert text == "<read-files>\n/a\n/b\n</read-files>\n\n<modified-files>\n/m\n/z\n</modified-files>"
    assert render_file_lists([], []) == ""
    assert render_file_lists(["/only"], []) == "<read-files>\n/only\n</read-files>"


def _block(text: str, tag: str) -> str:
    return text.split(f"<{tag}>\n", 1)[1].split(f"\n</{tag}>", 1)[0]


def test_file_list_caps_900_and_section_2000() -> None:
    read = [f"/repo/src/module_{i:04d}/implementation_file.py" for i in range(200)]
    modified = [f"/repo/tests/test_module_{i:04d}_with_a_long_name.py" for i in range(200)]
    text = render_file_lists(read, modified)
    assert len(text) <= FILE_SECTION_MAX_CHARS
    for tag, paths in (("read-files", read), ("modified-files", modified)):
        block = _block(text, tag)
        assert len(block) <= FILE_LIST_MAX_CHARS
        lines = block.splitlines()
        kept = lines[:-1]
        assert kept == sorted(paths)[: len(kept)]
        assert lines[-1] == f"...and {len(paths) - len(kept)} more"
        # As many paths as fit: one more would exceed the cap.
        assert len("\n".join([*sorted(paths)[: len(kept) + 1], lines[-1]])) > FILE_LIST_MAX_CHARS


def test_file_list_of_one_huge_path() -> None:
    text = render_file_lists(["/" + "p" * 2000], [])
    assert text == "<read-files>\n...and 1 more\n</read-files>"


# --- size cap -----------------------------------------------------------------------------------------------
def test_cap_within_budget_is_untouched() -> None:
    body = "b" * 1000
    out = augment(body, read_files=["/rule"], max_chars=16_000)
    assert out == body + "\n\n<read-files>\n/rule\n</read-files>"


def test_cap_cuts_the_body_and_keeps_the_suffix() -> None:
    body = "b" * 20_000
    out = augment(body, recent_turns=[user("keep me")], read_files=["/rule"])
    assert len(out) == 16_000
    suffix = "\n\n" + RECENT_TURNS_HEADING + "\n- User: keep me\n\n<read-files>\n/rule\n</read-files>"
    assert out.endswith(TRUNCATION_MARKER + suffix)
    assert out.startswith("b" * 100)


def test_cap_with_suffix_as_large_as_the_budget_keeps_its_tail() -> None:
    path = "/" + "r" * 400
    out = augment("BODY", read_files=[path], max_chars=300)
    assert len(out) == 300
    assert out.endswith("r" * 100 + "\n</read-files>")
    assert "BODY" not in out and TRUNCATION_MARKER not in out


def test_cap_when_suffix_and_marker_just_exceed_the_budget() -> None:
    out = augment("BODY" * 10, read_files=["/" + "r" * 65], max_chars=100)
    assert len(out) <= 100
    assert out.endswith("r" * 65 + "\n</read-files>")


def test_cap_default_is_16000() -> None:
    failures = [result(f"c{i}", "e" * 500, error=True) for i in range(20)]
    out = augment("x" * 30_000, tool_failures=failures, recent_turns=[user("u" * 5000)])
    assert len(out) == 16_000
    assert out.count("\n- bash: ") == TOOL_FAILURE_MAX_ITEMS


_NOISE = st.sampled_from(["", " ", "\n", "x", "it", "text", "ſ", "K", "exit", "code 2"])
_EXIT_PHRASE = st.tuples(
    st.sampled_from(["exit", "EXIT", "Exit", "exıt", "EXİT", "Exited", "exıted", "xit", "exít"]),
    st.sampled_from(["", " with", " WITH"]),
    st.sampled_from(["", " ", "_", "-", "\t"]),
    st.sampled_from(["code", "status", "CODE"]),
    st.sampled_from(["", " ", ": ", "=", " = "]),
    st.sampled_from(["0", "2", "-1", "127", "x"]),
).map("".join)


@given(st.lists(st.one_of(_NOISE, _EXIT_PHRASE), max_size=6))
@settings(max_examples=300, deadline=None)
def test_the_exit_code_prefilter_never_hides_an_exit_code(parts: list[str]) -> None:
    """``exit_code_of`` skips the case-insensitive pattern when no "xit" occurs in any case (dotless and dotted
    i included); the code it reads is the one the pattern alone finds."""
    from compactd.summarize.augment import _EXIT_CODE, _EXIT_HINT, _EXIT_NEEDLE, exit_code_of
    from compactd.summarize.gates import folded

    text = "".join(parts)
    matches = _EXIT_CODE.findall(text)
    assert not matches or _EXIT_HINT.search(text) is not None
    assert not matches or _EXIT_NEEDLE in folded(text)
    expected = int(matches[-1]) if matches else None
    message = {"role": "toolResult", "toolCallId": "c1", "content": [{"type": "text", "text": text}]}
    assert exit_code_of(message) == expected
