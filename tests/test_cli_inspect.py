"""``compactd inspect`` / ``compactd validate`` / ``compactd --version``: the keys, the figures, the exit codes.

Figures are recomputed here from the library (reader, context, token estimate, budget) and must match what the
command prints; the console script itself is run as a subprocess where its process-level behaviour matters
(exit status, stderr without a traceback).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from compactd import __version__
from compactd.commands import cli
from compactd.commands.cli import main, run_as_process
from compactd.config import load_config
from compactd.core.context import build_context
from compactd.core.decision import decide
from compactd.core.messages import RUNTIME_CONTEXT_TYPE, llm_visible
from compactd.core.planning import figures_of
from compactd.core.tokens import estimate_context_tokens, estimate_tokens
from compactd.reading import read_transcript

Json = dict[str, Any]
COMPACTD = Path(sys.executable).parent / "compactd"
REAL_CLEAN = Path(__file__).resolve().parents[2] / "shared/fixtures/real" / "pi-large-session.v3.jsonl"

REQUIRED_KEYS = {
    "path",
    "session_id",
    "version",
    "entries",
    "leaf_id",
    "context_messages",
    "context_tokens",
    "tokens_source",
    "usage_tokens",
    "trailing_tokens",
    "by_role",
    "tool_result_chars",
    "problems",
}
BUDGET_KEYS = {
    "context_window",
    "window_source",
    "prompt_budget",
    "flush_threshold",
    "compact_threshold",
    "estimated_with_margin",
    "route",
    "reducible_chars",
    "guard",
}


def line(value: Json) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def msg(entry_id: str, parent: str | None, message: Json) -> Json:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2025-06-01T10:00:01.000Z",
        "message": message,
    }


def session(total: int = 40_000, provider: str = "ollama", model: str = "qwen2.5:7b") -> bytes:
    """A session on a named model with a usage anchor, tool results worth pruning and a runtime-context note."""
    big = "line of build output\n" * 2_000  # 42,000 characters
    assistant = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "running"},
            {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "make"}},
        ],
        "provider": provider,
        "model": model,
        "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": total},
        "stopReason": "toolUse",
        "timestamp": 1_750_000_002_000,
    }
    values: list[Json] = [
        {
            "type": "session",
            "version": 3,
            "id": "sess-cli",
            "timestamp": "2025-06-01T10:00:00.000Z",
            "cwd": "/w",
        },
        {
            "type": "model_change",
            "id": "m0",
            "parentId": None,
            "timestamp": "2025-06-01T10:00:00.000Z",
            "provider": provider,
            "modelId": model,
        },
        msg("u1", "m0", {"role": "user", "content": "build it 😀", "timestamp": 1_750_000_001_000}),
        msg("a1", "u1", assistant),
        msg(
            "r1",
            "a1",
            {
                "role": "toolResult",
                "toolCallId": "c1",
                "toolName": "bash",
                "content": [{"type": "text", "text": big}],
                "details": {"raw": "x" * 9_000},
                "isError": False,
                "timestamp": 1_750_000_003_000,
            },
        ),
        {
            "type": "custom_message",
            "id": "x1",
            "parentId": "r1",
            "timestamp": "2025-06-01T10:00:04.000Z",
            "customType": RUNTIME_CONTEXT_TYPE,
            "content": "R" * 800,
            "display": False,
        },
        msg("u2", "x1", {"role": "user", "content": "and now?", "timestamp": 1_750_000_005_000}),
    ]
    return b"".join(line(v) for v in values)


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def inspect_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Json:
    code, out = run_main(capsys, "inspect", "--json", *argv)
    assert code == 0
    report: Json = json.loads(out)
    return report


# ------------------------------------------------------------------------------------------------------------
# inspect


def test_inspect_json_has_every_key_with_the_values_computed_directly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(session())
    report = inspect_json(capsys, str(path))
    assert set(report) >= REQUIRED_KEYS | BUDGET_KEYS

    transcript = read_transcript(path)
    visible = list(llm_visible(build_context(transcript).messages))
    estimate = estimate_context_tokens(visible)
    by_role: dict[str, int] = {}
    for message in visible:
        by_role[message["role"]] = by_role.get(message["role"], 0) + estimate_tokens(message)
    budget = decide(load_config(None), figures_of(load_config(None), transcript), now=0.0)

    assert report["path"] == str(path)
    assert report["session_id"] == "sess-cli"
    assert report["version"] == 3
    assert report["entries"] == 6
    assert report["leaf_id"] == "u2"
    assert report["context_messages"] == len(visible) == 4  # the runtime-context note is not counted
    assert report["context_tokens"] == estimate.tokens == 40_000 + 10_500 + 2
    assert report["tokens_source"] == "usage"
    assert report["usage_tokens"] == estimate.usage_tokens == 40_000
    assert report["trailing_tokens"] == estimate.trailing_tokens
    assert report["by_role"] == by_role
    assert report["tool_result_chars"] == 42_000  # text only, never details
    assert report["problems"] == []
    assert {k: report[k] for k in BUDGET_KEYS} == budget.as_json()
    assert report["context_window"] == 200_000
    assert report["window_source"] == "default"
    assert report["estimated_with_margin"] == -(-report["context_tokens"] * 12 // 10)
    assert report["guard"] == "ok"
    assert report["route"] == "fits"


def test_inspect_reports_version_before_migration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "v1.jsonl"
    path.write_bytes(
        line({"type": "session", "id": "old", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/"})
        + line(
            {
                "type": "message",
                "timestamp": "2025-01-01T00:00:01.000Z",
                "message": {"role": "user", "content": "abcd", "timestamp": 1},
            }
        )
    )
    before = path.read_bytes()
    report = inspect_json(capsys, str(path))
    assert report["version"] == 1
    assert report["context_tokens"] == 1
    assert report["leaf_id"] == read_transcript(path).leaf_id
    assert path.read_bytes() == before


def test_inspect_config_per_model_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(session())
    config = tmp_path / "compactd.yaml"
    config.write_text(
        'models:\n  providers:\n    ollama:\n      models:\n        "qwen2.5:7b": {context_tokens: 65536}\n'
    )
    default = inspect_json(capsys, str(path))
    report = inspect_json(capsys, str(path), "--config", str(config))
    assert (default["context_window"], default["window_source"]) == (200_000, "default")
    assert (report["context_window"], report["window_source"]) == (65_536, "models_config")
    cfg = load_config(config)
    assert {k: report[k] for k in BUDGET_KEYS} == decide(
        cfg, figures_of(cfg, read_transcript(path)), now=0.0
    ).as_json()
    assert report["route"] != "fits"  # 42,502 × 1.2 overflows a 45,536-token prompt budget
    # the figures that do not depend on the config are unchanged
    assert {k: report[k] for k in REQUIRED_KEYS} == {k: default[k] for k in REQUIRED_KEYS}


def test_inspect_config_agent_cap_lowers_the_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(session(total=1_000))
    config = tmp_path / "compactd.yaml"
    config.write_text("agents:\n  defaults:\n    context_tokens: 24000\n")
    report = inspect_json(capsys, str(path), "--config", str(config))
    assert (report["context_window"], report["window_source"], report["guard"]) == (
        24_000,
        "agent_cap",
        "warn",
    )


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("compaction:\n  reserve_tokenz: 5\n", "compaction.reserve_tokenz"),
        ("compaction:\n  tool_result_share: 1.5\n", "compaction.tool_result_share"),
        (
            "models:\n  providers:\n    ollama:\n      models:\n        m: {context_tokens: big}\n",
            "models.providers.ollama.models.m.context_tokens",
        ),
    ],
    ids=["unknown-key", "ratio-out-of-range", "nested-wrong-type"],
)
def test_inspect_bad_config_exits_2_naming_file_and_key(tmp_path: Path, yaml_text: str, key: str) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(session())
    config = tmp_path / "bad.yaml"
    config.write_text(yaml_text)
    done = subprocess.run(
        [str(COMPACTD), "inspect", str(path), "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert str(config) in done.stderr
    assert key in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_inspect_bad_config_is_reported_even_for_an_unusable_transcript(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_bytes(b'{"type":"message"}\n')
    config = tmp_path / "bad.yaml"
    config.write_text("compaction:\n  reserve_tokenz: 5\n")
    assert main(["inspect", str(path), "--json", "--config", str(config)]) == 2


def test_inspect_unusable_file_lists_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_bytes(b'{"type":"message","id":"a"}\n')
    report = inspect_json(capsys, str(path))
    assert set(report) >= REQUIRED_KEYS
    assert [(p["kind"], p["line"]) for p in report["problems"]] == [("no_header", 1)]
    assert all(set(p) == {"kind", "line", "message"} for p in report["problems"])
    assert report["entries"] == 0 and report["context_tokens"] == 0


def test_inspect_table_without_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(session() + b'{"torn')
    code, out = run_main(capsys, "inspect", str(path))
    assert code == 0
    rows = dict(row.split(None, 1) for row in out.splitlines() if row and not row.startswith("problem:"))
    assert rows["session_id"] == "sess-cli"
    assert rows["context_tokens"] == str(40_000 + 10_500 + 2)
    assert rows["route"] == "fits"
    assert "problem: torn_last_line (line 8)" in out


def test_inspect_survives_lone_surrogates(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"type":"session","version":3,"id":"\\ud800x","timestamp":"t","cwd":"/"}\n')
    for extra in (["--json"], []):
        done = subprocess.run([str(COMPACTD), "inspect", str(path), *extra], capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_inspect_through_the_console_script(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(session())
    done = subprocess.run([str(COMPACTD), "inspect", "--json", str(path)], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report) >= REQUIRED_KEYS | BUDGET_KEYS
    assert report["context_tokens"] == 40_000 + 10_500 + 2


class _Exited(Exception):
    pass


def _alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's process as the console script runs it: its only thread (a test process may hold others,
    left by earlier tests' servers and watchers; a real one is tested below)."""
    monkeypatch.setattr(cli.threading, "active_count", lambda: 1)


def test_the_process_entry_point_ends_inspect_at_once_after_flushing_the_same_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_as_process`` ends an ``inspect`` by ``os._exit`` (its reading left to the process's end) with
    ``main``'s code and output, flushed first; ``main`` called in a process that goes on holds nothing back."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(session())
    expected = run_main(capsys, "inspect", "--json", str(path))
    assert cli._left_to_exit is None
    exits: list[tuple[int, bool]] = []

    def exit_now(code: int) -> None:
        exits.append((code, bool(cli._left_to_exit)))
        raise _Exited

    flushed: list[str] = []
    monkeypatch.setattr(os, "_exit", exit_now)
    monkeypatch.setattr(cli, "_left_to_exit", None)
    _alone(monkeypatch)
    monkeypatch.setattr(sys, "argv", ["compactd", "inspect", "--json", str(path)])
    monkeypatch.setattr(sys.stdout, "flush", lambda: flushed.append("stdout"))
    with pytest.raises(_Exited):
        run_as_process()
    assert exits == [(0, True)] and "stdout" in flushed
    assert (0, capsys.readouterr().out) == expected


def _dry_run_argv(tmp_path: Path) -> list[str]:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "s.jsonl").write_bytes(session(total=400_000))
    os.utime(sessions / "s.jsonl", (1, 1))  # idle for long: due
    config = tmp_path / "config.yaml"
    config.write_text(f"sessions:\n  roots: [{str(sessions)!r}]\nstate_dir: {str(tmp_path / 'state')!r}\n")
    return ["once", "--dry-run", "--json", "--config", str(config)]


def test_the_process_entry_point_ends_a_dry_run_at_once_after_flushing_the_same_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``once --dry-run`` writes nothing and starts no thread: its process ends as ``inspect``'s does."""
    argv = _dry_run_argv(tmp_path)
    expected = run_main(capsys, *argv)
    assert json.loads(expected[1])[0]["action"] != "fits"
    exits: list[tuple[int, bool]] = []

    def exit_now(code: int) -> None:
        exits.append((code, bool(cli._left_to_exit)))
        raise _Exited

    monkeypatch.setattr(os, "_exit", exit_now)
    monkeypatch.setattr(cli, "_left_to_exit", None)
    _alone(monkeypatch)
    monkeypatch.setattr(sys, "argv", ["compactd", *argv])
    with pytest.raises(_Exited):
        run_as_process()
    assert exits == [(expected[0], True)]
    assert (expected[0], capsys.readouterr().out) == expected


def test_the_process_entry_point_exits_as_before_while_another_thread_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread still running (a source's, a library's) is never cut short: the interpreter's exit joins it."""
    import threading

    argv = _dry_run_argv(tmp_path)
    expected = run_main(capsys, *argv)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    monkeypatch.setattr(os, "_exit", lambda code: pytest.fail(f"os._exit({code})"))
    monkeypatch.setattr(cli, "_left_to_exit", None)
    monkeypatch.setattr(sys, "argv", ["compactd", *argv])
    try:
        with pytest.raises(SystemExit) as exited:
            run_as_process()
    finally:
        release.set()
        other.join()
    assert (exited.value.code, capsys.readouterr().out) == expected


def test_the_process_entry_point_exits_as_before_when_nothing_was_left_to_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(session())
    monkeypatch.setattr(os, "_exit", lambda code: pytest.fail(f"os._exit({code})"))
    monkeypatch.setattr(cli, "_left_to_exit", None)
    monkeypatch.setattr(sys, "argv", ["compactd", "validate", str(path)])
    with pytest.raises(SystemExit) as exited:
        run_as_process()
    assert exited.value.code == main(["validate", str(path)])


def test_inspect_as_a_process_prints_what_main_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(session())
    for extra in (["--json"], []):
        code, out = run_main(capsys, "inspect", *extra, str(path))
        done = subprocess.run(
            [sys.executable, "-m", "compactd", "inspect", *extra, str(path)], capture_output=True, timeout=120
        )
        assert (done.returncode, done.stdout.decode()) == (code, out), done.stderr


# ------------------------------------------------------------------------------------------------------------
# validate


@pytest.mark.skipif(not REAL_CLEAN.is_file(), reason="shared/fixtures/real is not on this machine")
def test_validate_clean_pi_file_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_main(capsys, "validate", str(REAL_CLEAN))
    assert code == 0
    assert "ok" in out
    code, out = run_main(capsys, "validate", "--json", str(REAL_CLEAN))
    assert code == 0
    report = json.loads(out)
    assert (report["ok"], report["exit_code"], report["problems"]) == (True, 0, [])


def test_validate_torn_line_exits_1_and_lists_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(session() + b'{"type":"message","id":"u3"')
    code, out = run_main(capsys, "validate", str(path))
    assert code == 1
    assert "torn_last_line (line 8)" in out
    code, out = run_main(capsys, "validate", "--json", str(path))
    assert code == 1
    report = json.loads(out)
    assert report["path"] == str(path)
    assert (report["ok"], report["exit_code"]) == (False, 1)
    assert [(p["kind"], p["line"]) for p in report["problems"]] == [("torn_last_line", 8)]
    assert isinstance(report["problems"][0]["message"], str) and report["problems"][0]["message"]


def test_validate_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.jsonl"
    data = session().split(b"\n")
    data.insert(3, b"{garbage")
    path.write_bytes(
        b"\n".join(data) + line(msg("z1", "nowhere", {"role": "user", "content": "x", "timestamp": 1}))
    )
    code, out = run_main(capsys, "validate", "--json", str(path))
    assert code == 1
    kinds = [(p["kind"], p["line"]) for p in json.loads(out)["problems"]]
    assert kinds == [("malformed_line", 4), ("dangling_parent", 9)]


@pytest.mark.parametrize(
    "content",
    [b'{"type":"message","id":"a","parentId":null}\n', b"", b"garbage\n\xff\n", b"\n\n"],
    ids=["entry-first", "empty", "garbage", "blank"],
)
def test_validate_without_header_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(content)
    code, out = run_main(capsys, "validate", "--json", str(path))
    assert code == 2
    report = json.loads(out)
    assert "no_header" in [p["kind"] for p in report["problems"]]
    assert report["ok"] is False


@pytest.mark.parametrize("target", ["missing.jsonl", "."], ids=["missing", "directory"])
def test_validate_unreadable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str) -> None:
    path = tmp_path / target
    code, out = run_main(capsys, "validate", "--json", str(path))
    assert code == 2
    assert [p["kind"] for p in json.loads(out)["problems"]] == ["unreadable"]


@pytest.mark.slow  # processes, pi or many examples: left to the full run
def test_validate_exit_codes_through_the_console_script(tmp_path: Path) -> None:
    good, torn, bad = tmp_path / "good.jsonl", tmp_path / "torn.jsonl", tmp_path / "bad.jsonl"
    good.write_bytes(session())
    torn.write_bytes(session()[:-1])
    bad.write_bytes(b"nothing\n")
    codes = [
        subprocess.run([str(COMPACTD), "validate", str(p)], capture_output=True, timeout=120).returncode
        for p in (good, torn, bad, tmp_path / "absent.jsonl")
    ]
    assert codes == [0, 1, 2, 2]


# ------------------------------------------------------------------------------------------------------------


def test_version() -> None:
    done = subprocess.run([str(COMPACTD), "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert done.stdout.strip() == f"compactd {__version__}"
    assert __version__


@pytest.mark.parametrize(
    "content",
    [
        "plain \U0001f600 string",
        [
            {"type": "text", "text": "a\U0001f600b"},
            {"type": "image", "data": "x"},
            {"type": "text", "text": "cd"},
        ],
        [{"type": "text", "text": 5}, "not a block", {"type": "image"}, {"type": "other", "text": "zz"}],
        [],
        None,
        {"type": "text", "text": "a dict, not a list"},
    ],
)
def test_inspect_measures_a_tool_result_once_as_estimate_and_prune_measure_it(content: Any) -> None:
    """``inspect`` takes a tool result's estimate and text characters from one pass (``tool_result_chars``):
    the same figures as pi's estimate (``estimate_tokens``, images and astral characters included) and as
    pruning's ``tool_result_text_chars``, for every shape of content."""
    from compactd.core.ledger import tool_result_chars
    from compactd.core.prune import tool_result_text_chars

    message: Json = {"role": "toolResult", "toolCallId": "c", "content": content, "details": {"x": "y" * 99}}
    chars, text = tool_result_chars(message.get("content"))
    for pi1 in (False, True):
        assert -(-chars // 4) == estimate_tokens(message, pi1=pi1)
    assert text == tool_result_text_chars(message)
