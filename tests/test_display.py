"""Names from outside are shown on one line with nothing hidden: a session file whose name holds a newline, an
ESC sequence or a bidi override forges no line of ``status``, ``once``, ``doctor``, ``inspect``, ``validate``,
a log or the metrics file (real files, the real command)."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import sys
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from compactd.display import FORMAT_CHARS, display_name
from compactd.logs import configure_logging

from tests.support.cli import compactd

REPO = Path(__file__).resolve().parents[1]
SHORT = REPO / "examples" / "sessions" / "2026-09-22T10-30-00-000Z_0196a3b2-0000-7000-8000-00000000b002.jsonl"
FORGED = 'compactd_compactions_total{route="x"} 999'
# A pi session file's name, as any process that may write the sessions directory can choose it.
HOSTILE = f"evil\n{FORGED}\n\x1b[31mred\u202eatad\u200b\r.jsonl"


def unsafe(text: str) -> list[str]:
    """The characters of ``text`` a terminal or a line reader acts on: controls but newline, format chars."""
    return sorted(
        {
            c
            for c in text
            if c != "\n" and (unicodedata.category(c) in ("Cc", "Cf", "Cs") or c in "\u2028\u2029")
        }
    )


def test_format_chars_are_unicodes_category_cf() -> None:
    import re

    every = "".join(map(chr, range(sys.maxunicode + 1)))
    matched = re.findall("[" + FORMAT_CHARS + "]", every)
    assert matched == [c for c in every if unicodedata.category(c) == "Cf"]


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("plain name é 中.jsonl", "plain name é 中.jsonl"),
        ("a\nb\r\tc", "a\\nb\\r\\tc"),
        ("x\x1b[31my\x7f\x9b", "x\\u001b[31my\\u007f\\u009b"),
        ("rtl\u202eoverride\u2066\u200b\ufeff", "rtl\\u202eoverride\\u2066\\u200b\\ufeff"),
        ("line\u2028sep", "line\\u2028sep"),
        ("half \udc80 surrogate", "half \\udc80 surrogate"),
        ("tag \U000e0041", "tag \\udb40\\udc41"),
    ],
)
def test_display_name_is_one_visible_line(name: str, shown: str) -> None:
    assert display_name(name) == shown
    assert display_name(shown) == shown


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_a_log_line_naming_a_hostile_file_is_one_visible_line() -> None:
    out = io.StringIO()
    configure_logging("info", env={}, stream=out)
    logging.getLogger("compactd.t").warning("cannot read %s", HOSTILE)
    text = out.getvalue()
    assert text.count("\n") == 1 and not unsafe(text)
    assert display_name(HOSTILE) in text


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    """A sessions directory holding one real transcript under :data:`HOSTILE`, idle for an hour; the
    environment and config the commands run with."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    path = sessions / HOSTILE
    shutil.copyfile(SHORT, path)
    old = time.time() - 3600
    os.utime(path, (old, old))
    state = tmp_path / "state"
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({"state_dir": str(state), "sessions": {"roots": [str(sessions)]}}), "utf-8"
    )
    return path, {"XDG_CONFIG_HOME": str(tmp_path / "no-config")}, config


def forged(text: str) -> list[str]:
    """What in a command's output is not one visible line per line: hidden characters, a forged line."""
    hidden = [f"raw {c!r}" for c in unsafe(text)]
    return hidden + [line for line in text.splitlines() if line.lstrip().startswith(FORGED)]


@pytest.mark.slow  # ten compactd processes
def test_no_command_prints_a_hostile_name_raw(hostile: tuple[Path, dict[str, str], Path]) -> None:
    path, env, config = hostile
    shown = display_name(HOSTILE)
    once = compactd("once", "--config", str(config), env=env)
    assert once.returncode == 0, once.stderr
    runs = {
        "once": once,
        "once --json --dry-run": compactd("once", "--config", str(config), "--json", "--dry-run", env=env),
        "status": compactd("status", "--config", str(config), env=env),
        "status --json": compactd("status", "--config", str(config), "--json", env=env),
        "doctor": compactd("doctor", "--config", str(config), env=env),
        "inspect": compactd("inspect", str(path), "--config", str(config), env=env),
        "inspect --json": compactd("inspect", str(path), "--config", str(config), "--json", env=env),
        "validate": compactd("validate", str(path), env=env),
        "validate --json": compactd("validate", str(path), "--json", env=env),
    }
    # status exits 3 when no daemon runs (after a once, none does); every other command 0 or 1.
    expected = {c: (3 if c.startswith("status") else 0) for c in runs}
    assert {c: d.returncode for c, d in runs.items() if d.returncode not in (expected[c], 1)} == {}
    assert {c: forged(d.stdout + d.stderr) for c, d in runs.items() if forged(d.stdout + d.stderr)} == {}
    for command in ("once", "status", "inspect", "validate", "doctor"):
        assert shown[-24:] in runs[command].stdout, command  # the session is named, escaped
    # JSON output is still JSON and means the same name.
    assert json.loads(runs["status --json"].stdout)["sessions"][0]["file"] == HOSTILE
    assert json.loads(runs["inspect --json"].stdout)["path"] == str(path)
    assert json.loads(runs["validate --json"].stdout)["path"] == str(path)


@pytest.mark.slow  # a compactd process
def test_the_metrics_file_holds_one_sample_a_line(hostile: tuple[Path, dict[str, str], Path]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    _, env, config = hostile
    done = compactd("once", "--config", str(config), env=env)
    assert done.returncode == 0, done.stderr
    text = (Path(yaml.safe_load(config.read_text())["state_dir"]) / "metrics.prom").read_text("utf-8")
    assert not unsafe(text)
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert len(samples) == len(lines)
    assert not any(line.startswith(FORGED) for line in lines)
    files = {s.labels["file"] for s in samples if "file" in s.labels}
    # The newline as the text format escapes it (the name exact), every other character visible.
    assert files == {"\n".join(map(display_name, HOSTILE.split("\n")))}
