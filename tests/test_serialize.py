"""Serialization for the summarizer: labelled, only what the model saw, tool results capped, no secrets."""

from __future__ import annotations

from typing import Any

import pytest
from compactd.summarize.serialize import format_tool_call, serialize_transcript, truncate_for_summary

from tests.support import messages as msgs

Msg = dict[str, Any]
SECRET = "sk-" + "proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv"


def user(text: str | list[Any]) -> Msg:
    return msgs.user(text, ts=1, bare=True)


def assistant(*blocks: Msg, stop: str = "stop", error: str | None = None) -> Msg:
    return msgs.assistant(*blocks, stop=stop, ts=2, **({"errorMessage": error} if error else {}))


text = msgs.text


def call(name: str, call_id: str = "c1", **arguments: Any) -> Msg:
    return msgs.call(call_id, name, arguments)


def result(t: str, *, name: str = "bash", call_id: str = "c1", error: bool = False, **extra: Any) -> Msg:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": name,
        "content": [text(t)],
        "isError": error,
        "timestamp": 3,
        **extra,
    }


def test_labels_for_every_role() -> None:
    messages = [
        user("fix the build"),
        assistant(
            {"type": "thinking", "thinking": "look at the log"},
            text("Running it."),
            call("bash", command="make"),
        ),
        result("ok"),
        {"role": "bashExecution", "command": "git status", "output": "clean", "exitCode": 0, "timestamp": 4},
        {"role": "custom", "customType": "note", "content": "remember X", "display": True, "timestamp": 5},
        {
            "role": "compactionSummary",
            "summary": "## Decisions\n- earlier",
            "tokensBefore": 9,
            "timestamp": 6,
        },
        {"role": "branchSummary", "summary": "other branch", "fromId": "x", "timestamp": 7},
    ]
    out = serialize_transcript(messages)
    assert out.split("\n\n[") == [
        "[User]: fix the build",
        "Assistant thinking]: look at the log",
        "Assistant]: Running it.",
        'Assistant tool calls]: bash(command="make")',
        "Tool result]: (bash) ok",
        "Bash]: $ git status (exit code 0)\nclean",
        "Custom note]: remember X",
        "Previous summary]: ## Decisions\n- earlier",
        "Previous summary]: other branch",
    ]


def test_thinking_can_be_left_out() -> None:
    msg = assistant({"type": "thinking", "thinking": "secret plan"}, text("Done."))
    assert serialize_transcript([msg], include_thinking=False) == "[Assistant]: Done."


def test_tool_calls_as_name_and_json_arguments() -> None:
    block = call("edit", path="/a b/ü.ts", oldText='say "hi"', n=3, flags=["x"], opt=None, nested={"k": True})
    assert format_tool_call(block) == (
        'edit(path="/a b/ü.ts", oldText="say \\"hi\\"", n=3, flags=["x"], opt=null, nested={"k":true})'
    )
    msg = assistant(call("read", "a", path="x.py"), call("read", "b", path="y.py"))
    assert serialize_transcript([msg]) == '[Assistant tool calls]: read(path="x.py"); read(path="y.py")'


def test_details_never_serialized() -> None:
    res = result("visible text", details={"diff": "HIDDEN-DIFF", "fullOutputPath": "/tmp/HIDDEN"})
    out = serialize_transcript([res])
    assert "visible text" in out
    assert "HIDDEN" not in out


def test_runtime_context_dropped() -> None:
    runtime = {
        "role": "custom",
        "customType": "openclaw.runtime-context",
        "content": "RUNTIME-ONLY",
        "timestamp": 1,
    }
    out = serialize_transcript([user("hi"), runtime, user("bye")])
    assert "RUNTIME-ONLY" not in out
    assert out == "[User]: hi\n\n[User]: bye"


def test_tool_result_truncated_with_note() -> None:
    out = serialize_transcript([result("x" * 2500)])
    assert out == "[Tool result]: (bash) " + "x" * 2000 + "\n\n[... 500 more characters truncated]"
    assert serialize_transcript([result("y" * 50)], tool_result_max_chars=10).endswith(
        "y" * 10 + "\n\n[... 40 more characters truncated]"
    )
    assert serialize_transcript([result("short")], tool_result_max_chars=10) == "[Tool result]: (bash) short"


def test_truncate_for_summary_boundaries() -> None:
    assert truncate_for_summary("abc", 3) == "abc"
    assert truncate_for_summary("abcd", 3) == "abc\n\n[... 1 more characters truncated]"


def test_error_flag_and_empty_result() -> None:
    out = serialize_transcript([result("boom", name="edit", error=True), result("", call_id="c2")])
    assert out == "[Tool result]: (edit; error) boom\n\n[Tool result]: (bash) (no output)"


def test_images_are_placeholders() -> None:
    img = {"type": "image", "data": "iVBORw0KGgo" * 100, "mimeType": "image/png"}
    out = serialize_transcript([user([text("what is this?"), img]), result("see", details=None)])
    assert out.startswith("[User]: what is this?\n[image]")
    assert "iVBOR" not in out
    res = {"role": "toolResult", "toolCallId": "c", "toolName": "read", "content": [img], "isError": False}
    assert serialize_transcript([res]) == "[Tool result]: (read) [image]"


def test_bash_execution_variants() -> None:
    hidden = {"role": "bashExecution", "command": "cat .env", "output": "X", "excludeFromContext": True}
    failed = {
        "role": "bashExecution",
        "command": "make",
        "output": "E" * 30,
        "exitCode": 2,
        "truncated": True,
    }
    cancelled = {"role": "bashExecution", "command": "sleep 9", "output": "", "cancelled": True}
    out = serialize_transcript([hidden, failed, cancelled], tool_result_max_chars=10)
    assert "cat .env" not in out
    assert out == (
        "[Bash]: $ make (exit code 2, output truncated)\n"
        + "E" * 10
        + "\n\n[... 20 more characters truncated]"
        "\n\n[Bash]: $ sleep 9 (cancelled)"
    )


def test_aborted_and_error_turns_are_marked() -> None:
    out = serialize_transcript(
        [assistant(stop="aborted", error="Request was aborted."), assistant(text("partial"), stop="error")]
    )
    assert (
        out
        == "[Assistant turn aborted]: Request was aborted.\n\n[Assistant]: partial\n\n[Assistant turn error]"
    )


def test_empty_messages_produce_nothing() -> None:
    assert serialize_transcript([]) == ""
    assert serialize_transcript([user("   "), assistant(), {"role": "weird"}]) == ""


@pytest.mark.parametrize("redact", [True, False])
def test_redaction_switch(redact: bool) -> None:
    messages = [
        user(f"use {SECRET}"),
        assistant(call("bash", command=f"curl -H 'Authorization: Bearer {SECRET}' x", password="hunter22")),
        result(f"OPENAI_API_KEY={SECRET}"),
    ]
    out = serialize_transcript(messages, redact=redact)
    assert (SECRET in out) is (not redact)
    assert ("hunter22" in out) is (not redact)
    if redact:
        assert "[REDACTED:openai_key]" in out
        assert 'password="[REDACTED:password]"' in out


def test_redaction_runs_before_truncation() -> None:
    """A key straddling the cap must not leave a recognisable-but-unredacted half behind."""
    pad = "a" * 1990
    out = serialize_transcript([result(pad + " " + SECRET)])
    assert SECRET[:9] not in out
    assert "[REDACTED:openai_key]"[:9] in out


def test_input_is_not_mutated() -> None:
    res = result("text", details={"k": "v"})
    before = repr(res)
    serialize_transcript([res])
    assert repr(res) == before
